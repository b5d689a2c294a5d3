"""Reliability diagram: predicted failure probability against the observed failure rate, bin by bin."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from agentuq_nb.figures.style import PALETTE, SERIES, use_style

BIN_COLUMNS = ("mean_prob", "failure_rate", "count")


def reliability_diagram(bins: pd.DataFrame | dict[str, pd.DataFrame], title: str = "Reliability diagram",
                        annotate_counts: bool = True):
    """One curve per reliability table (:func:`agentuq_nb.evaluation.calibration.reliability_table`, or the rows
    of ``calibration_bins.csv`` of one estimator and method): bins' mean predicted probability (x) against
    their observed failure rate (y), marker area and label giving each bin's count; the diagonal is perfect
    calibration. Below, the bins' counts by predicted probability. ``bins``: one table, or ``{label: table}``.
    """
    tables = {"": bins} if isinstance(bins, pd.DataFrame) else dict(bins)
    for label, t in tables.items():
        missing = [c for c in BIN_COLUMNS if c not in t.columns]
        if missing:
            raise ValueError(f"reliability table {label!r} lacks column(s) {', '.join(missing)}")
    use_style()
    fig, (ax, hist) = plt.subplots(2, 1, figsize=(4.6, 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    ax.plot([0, 1], [0, 1], ls="--", color=PALETTE["neutral"], lw=1, label="perfect calibration")
    biggest = max((t["count"].max() for t in tables.values() if len(t)), default=1)
    width = 0.9 / max(len(tables), 1) * 0.05
    for i, (label, t) in enumerate(tables.items()):
        color = SERIES[i % len(SERIES)]
        t = t.sort_values("mean_prob")
        ax.plot(t["mean_prob"], t["failure_rate"], color=color, lw=1.2, label=label or None)
        ax.scatter(t["mean_prob"], t["failure_rate"], s=15 + 120 * t["count"] / biggest, color=color, zorder=3)
        if annotate_counts:
            for x, y, n in zip(t["mean_prob"], t["failure_rate"], t["count"]):
                ax.annotate(str(int(n)), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6, color=color)
        hist.bar(t["mean_prob"] + (i - (len(tables) - 1) / 2) * width, t["count"], width=width, color=color)
    ax.set(xlim=(0, 1), ylim=(-0.02, 1.02), ylabel="observed failure rate", title=title)
    if len(tables) > 1 or next(iter(tables)):
        ax.legend(loc="upper left", fontsize=7)
    hist.set(xlabel="predicted failure probability (bin mean)", ylabel="trajectories")
    hist.yaxis.set_major_locator(MaxNLocator(nbins=3, integer=True))  # a short panel: a few ticks, not one per count
    return fig
