"""Figures of uncertainty dynamics: per-turn agent NLL over the normalized turn index, early warning."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, use_style


def dynamics_figure(curve: pd.DataFrame, ylabel: str = "agent turn NLL (mean token NLL)"):
    """Mean and band per bin for successes vs failures (output of ``evaluation.dynamics_curve``)."""
    use_style()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    _draw_dynamics(ax, curve)
    ax.set(xlabel="normalized turn index", ylabel=ylabel, xlim=(0, 1), title="Uncertainty over the trajectory")
    return fig


def _draw_dynamics(ax, curve: pd.DataFrame) -> None:
    for outcome in ("success", "failure"):
        c = curve[(curve["outcome"] == outcome) & np.isfinite(curve["mean"].to_numpy(dtype=float))]
        if c.empty:
            continue
        n = int(c["n_trajectories"].max())
        ax.plot(c["bin_center"], c["mean"], marker="o", ms=3, lw=2, color=PALETTE[outcome], label=f"{outcome} (n={n})")
        ax.fill_between(c["bin_center"], c["lo"], c["hi"], color=PALETTE[outcome], alpha=0.2, lw=0)
    ax.legend(loc="best", fontsize=8)


def dynamics_grid_figure(curves: dict, ylabel: str = "agent turn NLL"):
    """The dynamics figure for several runs: rows = models, columns = domains.

    ``curves`` maps (model, domain) → a ``dynamics_curve``; a missing combination stays empty.
    """
    use_style()
    models = sorted({m for m, _ in curves}, key=str.lower)
    domains = sorted({d for _, d in curves})
    fig, axes = plt.subplots(len(models), len(domains), figsize=(4.0 * len(domains), 3.0 * len(models)),
                             squeeze=False, sharex=True)
    for i, model in enumerate(models):
        for j, domain in enumerate(domains):
            ax = axes[i][j]
            if (model, domain) in curves:
                _draw_dynamics(ax, curves[(model, domain)])
            else:
                ax.set_axis_off()
            ax.set(xlim=(0, 1), title=f"{model} · {domain}")
            if i == len(models) - 1:
                ax.set_xlabel("normalized turn index")
            if j == 0:
                ax.set_ylabel(ylabel)
    return fig


def early_warning_figure(table: pd.DataFrame):
    """AUROC with CI of the uncertainty observed up to turn fraction f (``evaluation.early_warning_table``)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.4, 3.4))
    t = table[np.isfinite(table["auroc"].to_numpy(dtype=float))]
    lo = (t["auroc"] - t["auroc_lo"]).clip(lower=0)
    hi = (t["auroc_hi"] - t["auroc"]).clip(lower=0)
    ax.errorbar(t["fraction"], t["auroc"], yerr=[lo, hi], marker="o", capsize=3, color=PALETTE["failure"], lw=2)
    ax.axhline(0.5, ls="--", color=PALETTE["neutral"], lw=1, label="chance")
    ax.set(xlabel="fraction of the trajectory observed", ylabel="AUROC (failure)", xlim=(0, 1.05), ylim=(0, 1.02),
           title="Early warning")
    ax.legend(loc="lower right", fontsize=8)
    return fig
