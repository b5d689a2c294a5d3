"""Figures of how well uncertainty predicts failure: ROC, accuracy–rejection, distributions."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, use_style


def roc_figure(curves: pd.DataFrame, metrics: dict, label: str = "uncertainty"):
    """ROC curve (failure = positive) from ``failure_curves`` output, AUROC with CI in the legend."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.2, 4.0))
    roc = curves[curves["curve"] == "roc"]
    auroc, ci = metrics["metrics"].get("auroc"), metrics["ci"].get("auroc")
    text = "undefined" if auroc is None else f"AUROC {auroc:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
    ax.plot(roc["x"], roc["y"], color=PALETTE["failure"], lw=2, label=f"{label}: {text}", drawstyle="default")
    ax.plot([0, 1], [0, 1], ls="--", color=PALETTE["neutral"], lw=1, label="chance")
    ax.set(xlabel="false positive rate (successes flagged)", ylabel="true positive rate (failures caught)",
           xlim=(0, 1), ylim=(0, 1.01), title="Failure prediction: ROC")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def accuracy_rejection_figure(curves: pd.DataFrame, metrics: dict, label: str = "uncertainty"):
    """Accuracy of retained trajectories as the most uncertain are rejected (AUARC in legend)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.6, 3.6))
    arc = curves[curves["curve"] == "accuracy_rejection"]
    auarc = metrics["metrics"].get("auarc")
    ax.plot(arc["x"], arc["y"], color=PALETTE["success"], lw=2,
            label=f"{label}: AUARC {auarc:.3f}" if auarc is not None else label)
    if len(arc):
        base = arc["y"].iloc[0]
        ax.axhline(base, ls="--", color=PALETTE["neutral"], lw=1, label=f"no rejection ({base:.2f})")
    ax.set(xlabel="rejection rate (most uncertain first)", ylabel="accuracy of retained", xlim=(0, 1),
           ylim=(0, 1.02), title="Accuracy–rejection")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def uncertainty_distribution_figure(values: pd.Series, failed: pd.Series, label: str = "uncertainty"):
    """Strip + box plot of a trajectory-level uncertainty for successes vs failures."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    groups = [("success", values[~failed]), ("failure", values[failed])]
    for pos, (name, vals) in enumerate(groups):
        vals = vals.dropna().to_numpy(dtype=float)
        if len(vals):
            ax.boxplot(vals, positions=[pos], widths=0.5, showfliers=False,
                       medianprops={"color": PALETTE[name]}, boxprops={"color": PALETTE["neutral"]})
            ax.scatter(pos + rng.uniform(-0.15, 0.15, len(vals)), vals, s=14, alpha=0.7, color=PALETTE[name], zorder=3)
    ax.set_xticks([0, 1], [f"success (n={int((~failed).sum())})", f"failure (n={int(failed.sum())})"])
    ax.set(ylabel=label, title="Uncertainty by outcome")
    return fig
