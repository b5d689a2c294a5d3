"""Figures of how well uncertainty predicts failure: ROC, accuracy–rejection, distributions."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, counted, legend_below, use_style

#: below this many retained trajectories the accuracy-rejection curve is drawn dotted: one trajectory more or
#: less moves it by a tenth or more
MIN_RETAINED = 10


def _n_line(metrics: dict) -> str:
    n, failures = metrics.get("n"), metrics.get("n_failures")
    if n is None:
        return ""
    return f"n = {counted(int(n), 'trajectory', 'trajectories')}" + (
        f", {counted(int(failures), 'failure')}" if failures is not None else "")


def roc_figure(curves: pd.DataFrame, metrics: dict, label: str = "uncertainty"):
    """ROC curve (failure = positive) from ``failure_curves`` output, AUROC with CI in the legend (under the axes),
    n in the title."""
    use_style()
    fig, ax = plt.subplots(figsize=(3.6, 4.2), layout="constrained")
    roc = curves[curves["curve"] == "roc"]
    auroc, ci = metrics["metrics"].get("auroc"), metrics["ci"].get("auroc")
    text = "undefined" if auroc is None else f"AUROC {auroc:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
    ax.plot(roc["x"], roc["y"], color=PALETTE["failure"], lw=2, label=f"{label}: {text}")
    ax.plot([0, 1], [0, 1], ls="--", color=PALETTE["neutral"], lw=1, label="chance (AUROC 0.5)")
    ax.set(xlabel="false positive rate (successes flagged)", ylabel="true positive rate (failures caught)",
           xlim=(0, 1), ylim=(0, 1.01))
    ax.set_title(f"Failure prediction: ROC\n{_n_line(metrics)}", fontsize=10)
    legend_below(fig, ax=ax)
    return fig


def accuracy_rejection_figure(curves: pd.DataFrame, metrics: dict, label: str = "uncertainty",
                              min_retained: int = MIN_RETAINED):
    """Success rate of the retained trajectories as the most uncertain are rejected (AUARC in the legend). Where
    fewer than ``min_retained`` trajectories remain the curve is dotted (a single trajectory moves it by ≥ 1/10);
    the last point, nothing retained, is not drawn (AgentUQ's AUARC counts it as accuracy 1)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.2, 3.9), layout="constrained")
    arc = curves[curves["curve"] == "accuracy_rejection"].sort_values("x")
    n = len(arc) - 1  # x = k/n for k = 0..n
    auarc = metrics["metrics"].get("auarc")
    if n > 0:
        retained = np.rint(n * (1 - arc["x"].to_numpy())).astype(int)
        x, y = arc["x"].to_numpy(), arc["y"].to_numpy(dtype=float)
        solid = retained >= min(min_retained, n)
        drawn = retained > 0
        ax.plot(x[solid], y[solid], color=PALETTE["success"], lw=2,
                label=f"{label}: AUARC {auarc:.3f}" if auarc is not None else label)
        tail = drawn & ~solid
        if tail.any():  # join the tail to the last solid point
            start = np.flatnonzero(solid)[-1] if solid.any() else np.flatnonzero(tail)[0]
            ax.plot(x[start:][drawn[start:]], y[start:][drawn[start:]], color=PALETTE["success"], lw=1, ls=":",
                    label=f"fewer than {min_retained} retained (noisy)")
        base = y[0]
        ax.axhline(base, ls="--", color=PALETTE["neutral"], lw=1, label=f"no rejection: success rate {base:.2f}")
    ax.set(xlabel="rejection rate (most uncertain rejected first)", ylabel="success rate of the retained",
           xlim=(0, 1), ylim=(-0.02, 1.02))
    ax.set_title(f"Accuracy–rejection\n{_n_line(metrics)}", fontsize=10)
    legend_below(fig, ax=ax)
    return fig


def uncertainty_distribution_figure(values: pd.Series, failed: pd.Series, label: str = "uncertainty"):
    """Strip + box plot of a trajectory-level uncertainty for successes vs failures; n counts the trajectories
    that have a value (a trajectory without one, e.g. no agent turn, is not drawn and not counted)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.2, 3.4), layout="constrained")
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    failed = failed.reindex(values.index).astype(bool)
    ticks = []
    for pos, (name, vals) in enumerate((("success", values[~failed]), ("failure", values[failed]))):
        vals = vals.to_numpy(dtype=float)
        vals = vals[np.isfinite(vals)]
        if len(vals):
            ax.boxplot(vals, positions=[pos], widths=0.5, showfliers=False,
                       medianprops={"color": PALETTE[name]}, boxprops={"color": PALETTE["neutral"]})
            ax.scatter(pos + rng.uniform(-0.15, 0.15, len(vals)), vals, s=14, alpha=0.7, color=PALETTE[name], zorder=3)
        ticks.append(f"{name}\n(n = {len(vals)})")
    missing = int(values.isna().sum())
    ax.set_xticks([0, 1], ticks)
    ax.set_xlim(-0.6, 1.6)
    ax.set(ylabel=label)
    note = f"; {counted(missing, 'trajectory', 'trajectories')} without a value left out" if missing else ""
    ax.set_title(f"Uncertainty by outcome\none point per trajectory{note}", fontsize=10)
    return fig
