"""Figures of uncertainty dynamics: per-turn agent NLL over the normalized turn index, early warning."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, legend_below, use_style

#: a bin's mean is drawn only where at least this many trajectories have a turn in it
MIN_TRAJECTORIES = 3
OUTCOMES = ("success", "failure")


def _draw_dynamics(ax, counts_ax, curve: pd.DataFrame, min_trajectories: int, legend: bool = True) -> None:
    """Means (markers joined only between neighbouring drawn bins) with their band, per outcome; below, the
    trajectories per bin. A bin with fewer than ``min_trajectories`` trajectories is counted but not drawn."""
    width = float((curve["bin_hi"] - curve["bin_lo"]).iloc[0]) if len(curve) else 0.1
    for k, outcome in enumerate(OUTCOMES):
        c = curve[curve["outcome"] == outcome].sort_values("bin")
        if c.empty:
            continue
        ok = np.isfinite(c["mean"].to_numpy(dtype=float)) & (c["n_trajectories"].to_numpy() >= min_trajectories)
        mean = np.where(ok, c["mean"], np.nan)  # NaN breaks the line: no segment across an empty bin
        lo, hi = np.where(ok, c["lo"], np.nan), np.where(ok, c["hi"], np.nan)
        # the band as an interval per bin (a filled band would vanish at bins with no drawn neighbour)
        ax.errorbar(c["bin_center"] + (k - 0.5) * width * 0.12, mean, yerr=[mean - lo, hi - mean], marker="o", ms=4,
                    lw=2, capsize=3, elinewidth=1.2, color=PALETTE[outcome],
                    label=f"{outcome}: mean over the trajectories in a bin, with its band" if legend else None)
        offset = (k - 0.5) * width * 0.4
        counts_ax.bar(c["bin_center"] + offset, c["n_trajectories"], width=width * 0.4, color=PALETTE[outcome],
                      alpha=0.8)
    counts_ax.axhline(min_trajectories, ls=":", color=PALETTE["neutral"], lw=1)


def dynamics_figure(curve: pd.DataFrame, ylabel: str = "agent turn: mean token NLL",
                    min_trajectories: int = MIN_TRAJECTORIES, band: str | None = None,
                    n_trajectories: dict | None = None):
    """Mean per bin of the normalized turn index for successes vs failures (``evaluation.dynamics_curve``), with
    the band (``band`` names it; default: the curve's ``attrs["band"]``, which ``dynamics_curve`` sets); below, how
    many trajectories each bin holds. Bins with fewer than ``min_trajectories`` are not drawn, and the line is not
    drawn across them. ``n_trajectories``: {outcome: trajectories with an agent turn}, for the title (default: the
    curve's ``attrs["n_trajectories"]``, which ``dynamics_curve`` sets)."""
    use_style()
    fig, (ax, counts) = plt.subplots(2, 1, figsize=(4.6, 4.6), sharex=True, layout="constrained",
                                     gridspec_kw={"height_ratios": [3, 1.1]})
    _draw_dynamics(ax, counts, curve, min_trajectories)
    band = band or curve.attrs.get("band", "95% interval of the mean")
    ax.plot([], [], ls="", label=f"band: {band}")
    ax.set(ylabel=ylabel, xlim=(0, 1))
    n_text = ""
    n_trajectories = n_trajectories or curve.attrs.get("n_trajectories")
    if n_trajectories:
        n_text = "\n" + ", ".join(f"{o}: n = {n_trajectories[o]}" for o in OUTCOMES if o in n_trajectories) \
                 + " trajectories with an agent turn"
    ax.set_title(f"Uncertainty over the trajectory{n_text}", fontsize=9)
    counts.set(xlabel="normalized turn index (first agent turn 0, last 1)", ylabel="trajectories\nin bin")
    counts.yaxis.set_major_locator(plt.MaxNLocator(nbins=3, integer=True))
    counts.plot([], [], ls=":", color=PALETTE["neutral"], label=f"bins under {min_trajectories} trajectories: not drawn")
    legend_below(fig, ncol=1)
    return fig


def dynamics_grid_figure(curves: dict, ylabel: str = "agent turn NLL", min_trajectories: int = MIN_TRAJECTORIES,
                         band: str = "95% interval of the mean"):
    """The dynamics figure for several runs: rows = models, columns = domains, each panel with its counts strip.

    ``curves`` maps (model, domain) → a ``dynamics_curve``; a missing combination stays empty.
    """
    use_style()
    models = sorted({m for m, _ in curves}, key=str.lower)
    domains = sorted({d for _, d in curves})
    fig, axes = plt.subplots(2 * len(models), len(domains), figsize=(4.0 * len(domains), 3.6 * len(models) + 0.6),
                             squeeze=False, sharex=True, layout="constrained",
                             gridspec_kw={"height_ratios": [3, 1] * len(models)})
    for i, model in enumerate(models):
        for j, domain in enumerate(domains):
            ax, counts = axes[2 * i][j], axes[2 * i + 1][j]
            if (model, domain) in curves:
                _draw_dynamics(ax, counts, curves[(model, domain)], min_trajectories, legend=(i, j) == (0, 0))
            else:
                ax.set_axis_off()
                counts.set_axis_off()
            ax.set(xlim=(0, 1))
            ax.set_title(f"{model} · {domain}", fontsize=9)
            if i == len(models) - 1:
                counts.set_xlabel("normalized turn index")
            if j == 0:
                ax.set_ylabel(ylabel)
                counts.set_ylabel("trajectories")
            counts.yaxis.set_major_locator(plt.MaxNLocator(nbins=3, integer=True))
    axes[0][0].plot([], [], ls="", label=f"band: {band}")
    axes[1][0].plot([], [], ls=":", color=PALETTE["neutral"],
                    label=f"bins under {min_trajectories} trajectories: not drawn")
    legend_below(fig, ncol=2)
    return fig


def early_warning_figure(table: pd.DataFrame):
    """AUROC with CI of the uncertainty observed up to turn fraction f (``evaluation.early_warning_table``); each
    point labelled with its n (trajectories with an agent turn seen by then)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.2, 3.6), layout="constrained")
    t = table[np.isfinite(table["auroc"].to_numpy(dtype=float))]
    lo = (t["auroc"] - t["auroc_lo"]).clip(lower=0)
    hi = (t["auroc_hi"] - t["auroc"]).clip(lower=0)
    ax.errorbar(t["fraction"], t["auroc"], yerr=[lo, hi], marker="o", capsize=3, color=PALETTE["failure"], lw=2,
                label="AUROC with 95% bootstrap CI")
    ax.axhline(0.5, ls="--", color=PALETTE["neutral"], lw=1, label="chance")
    ax.set(xlabel="fraction of the trajectory observed", ylabel="AUROC (failure)", xlim=(0, 1.05), ylim=(0, 1.02))
    n = sorted({int(v) for v in t["n"]}) if "n" in t and len(t) else []
    n_text = f"\nn = {n[0]} trajectories" if len(n) == 1 else (f"\nn = {n[0]}–{n[-1]} trajectories" if n else "")
    ax.set_title(f"Early warning: the mean turn NLL seen so far{n_text}", fontsize=9)
    legend_below(fig, ax=ax, ncol=2)
    return fig
