"""Figures of uncertainty dynamics: per-turn agent NLL over the normalized turn index, early warning."""
from __future__ import annotations

import numpy as np
import pandas as pd
import matplotlib.pyplot as plt

from agentuq_nb.figures.style import PALETTE, use_style


def dynamics_figure(curve: pd.DataFrame, ylabel: str = "agent turn NLL (mean token NLL)"):
    """Mean and band per bin for successes vs failures (output of ``uq.dynamics.dynamics_curve``)."""
    use_style()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for outcome in ("success", "failure"):
        c = curve[(curve["outcome"] == outcome) & np.isfinite(curve["mean"].to_numpy(dtype=float))]
        if c.empty:
            continue
        n = int(c["n_trajectories"].max())
        ax.plot(c["bin_center"], c["mean"], marker="o", ms=3, lw=2, color=PALETTE[outcome], label=f"{outcome} (n={n})")
        ax.fill_between(c["bin_center"], c["lo"], c["hi"], color=PALETTE[outcome], alpha=0.2, lw=0)
    ax.set(xlabel="normalized turn index", ylabel=ylabel, xlim=(0, 1), title="Uncertainty over the trajectory")
    ax.legend(loc="best", fontsize=8)
    return fig


def early_warning_figure(table: pd.DataFrame):
    """AUROC with CI of the uncertainty observed up to turn fraction f (``uq.dynamics.early_warning``)."""
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
