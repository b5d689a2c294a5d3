"""Reliability diagram: predicted failure probability against the observed failure rate, bin by bin."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from agentuq_nb.figures.style import PALETTE, SERIES, legend_below, use_style

BIN_COLUMNS = ("mean_prob", "failure_rate", "count")
#: margin around the bins' range when the axes are fitted to it (probability units)
MARGIN = 0.06


def _fitted_range(tables: dict[str, pd.DataFrame]) -> tuple[float, float]:
    """The part of [0, 1] the bins span (predicted and observed), with a margin: predicted probabilities that sit
    near the base rate would otherwise leave most of a [0, 1] square empty."""
    values = np.concatenate([t[c].to_numpy(dtype=float) for t in tables.values() for c in ("mean_prob", "failure_rate")
                             if len(t)] or [np.array([0.0, 1.0])])
    values = values[np.isfinite(values)]
    lo, hi = (max(0.0, values.min() - MARGIN), min(1.0, values.max() + MARGIN)) if values.size else (0.0, 1.0)
    if hi - lo < 0.3:  # at least 0.3 wide, centred on the data
        mid = (lo + hi) / 2
        lo, hi = max(0.0, mid - 0.15), min(1.0, mid + 0.15)
    return lo, hi


def reliability_diagram(bins: pd.DataFrame | dict[str, pd.DataFrame], title: str = "Reliability diagram",
                        annotate_counts: bool = False, full_range: bool = False):
    """One curve per reliability table (:func:`agentuq_nb.evaluation.calibration.reliability_table`, or the rows
    of ``calibration_bins.csv`` of one estimator and method): bins' mean predicted probability (x) against
    their observed failure rate (y), marker area giving each bin's count; the diagonal is perfect calibration.
    Below, the bins' counts by predicted probability. ``bins``: one table, or ``{label: table}``; each label gets
    its n. A table with ``failure_rate_lo`` / ``failure_rate_hi``
    (:func:`agentuq_nb.evaluation.label_shift.reliability_bands`) is drawn with that band. The axes span the bins' range (``full_range``: all of [0, 1]); ``annotate_counts`` also writes each
    bin's count beside its point (the panel below shows them without).
    """
    tables = {"": bins} if isinstance(bins, pd.DataFrame) else dict(bins)
    for label, t in tables.items():
        missing = [c for c in BIN_COLUMNS if c not in t.columns]
        if missing:
            raise ValueError(f"reliability table {label!r} lacks column(s) {', '.join(missing)}")
    use_style()
    fig, (ax, hist) = plt.subplots(2, 1, figsize=(4.4, 5.6), sharex=True, layout="constrained",
                                   gridspec_kw={"height_ratios": [3, 1]})
    lo, hi = (0.0, 1.0) if full_range else _fitted_range(tables)
    ax.plot([lo, hi], [lo, hi], ls="--", color=PALETTE["neutral"], lw=1, label="perfect calibration")
    biggest = max((t["count"].max() for t in tables.values() if len(t)), default=1)
    means = np.sort(np.concatenate([t["mean_prob"].to_numpy(dtype=float) for t in tables.values()] or [[]]))
    gaps = np.diff(means)
    gap = float(gaps[gaps > 0].min()) if (gaps > 0).any() else (hi - lo) / 10
    width = max(min(gap, (hi - lo) / 12) * 0.8, (hi - lo) / 60) / max(len(tables), 1)  # visible when bins crowd
    for i, (label, t) in enumerate(tables.items()):
        color = SERIES[i % len(SERIES)]
        t = t.sort_values("mean_prob")
        n = int(t["count"].sum())
        ax.plot(t["mean_prob"], t["failure_rate"], color=color, lw=1.2, marker="o", ms=0,
                label=f"{label} (n = {n})" if label else f"n = {n} trajectories")
        ax.scatter(t["mean_prob"], t["failure_rate"], s=15 + 120 * t["count"] / biggest, color=color, zorder=3)
        if {"failure_rate_lo", "failure_rate_hi"} <= set(t.columns):  # bootstrap bands of each bin's observed rate
            ax.fill_between(t["mean_prob"], t["failure_rate_lo"], t["failure_rate_hi"], color=color, alpha=0.15, lw=0)
        if annotate_counts:
            for x, y, c in zip(t["mean_prob"], t["failure_rate"], t["count"]):
                ax.annotate(str(int(c)), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6, color=color)
        hist.bar(t["mean_prob"] + (i - (len(tables) - 1) / 2) * width, t["count"], width=width, color=color)
    ax.set(xlim=(lo, hi), ylim=(lo, hi), ylabel="observed failure rate")
    ax.set_title(title, fontsize=9)
    hist.set(xlabel="predicted failure probability (bin mean)", ylabel="trajectories\nin bin")
    hist.yaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))  # a short panel: a few ticks, not one per count
    legend_below(fig, ax=ax, ncol=1)
    return fig
