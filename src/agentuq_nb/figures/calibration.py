"""Reliability diagram: predicted failure probability against the observed failure rate, bin by bin, each observed
rate with its Wilson 95% interval (statsmodels' ``proportion_confint``), each curve's n, ECE and Brier score in the
legend."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from agentuq_nb.figures.style import PALETTE, SERIES, legend_below, use_style

BIN_COLUMNS = ("mean_prob", "failure_rate", "count")
#: margin around the bins' range when the axes are fitted to it (probability units)
MARGIN = 0.06
#: room left beyond [0, 1] so that a marker or an interval's cap at 0 or 1 is drawn whole, not cut by the axes
EDGE = 0.03
#: bins whose counts differ by at most this ratio are said once in the legend ("10 bins of 39-40"), not point by point
EVEN_COUNTS = 1.5
MARKERS = ("o", "s", "D", "^", "v", "P")


def wilson_interval(table: pd.DataFrame, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """The Wilson score interval of each bin's observed failure rate (its count of failures out of ``count``)."""
    count = table["count"].to_numpy(dtype=float)
    failures = np.round(table["failure_rate"].to_numpy(dtype=float) * count)
    lo, hi = proportion_confint(failures, np.maximum(count, 1), alpha=alpha, method="wilson")
    return np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)


def rate_interval(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each bin's interval of its observed rate: the table's own bootstrap band where it has one
    (``failure_rate_lo`` / ``failure_rate_hi``), else Wilson's."""
    if {"failure_rate_lo", "failure_rate_hi"} <= set(table.columns):
        return table["failure_rate_lo"].to_numpy(dtype=float), table["failure_rate_hi"].to_numpy(dtype=float)
    return wilson_interval(table)


def binned_scores(table: pd.DataFrame) -> tuple[float, float]:
    """ECE (L1, count-weighted: the bins drawn) and the Brier score (from the bins' ``sq_error``, the mean squared
    error of their rows, which :func:`~agentuq_nb.evaluation.calibration.reliability_table` gives; NaN without it)."""
    w = table["count"].to_numpy(dtype=float)
    if not len(w) or w.sum() == 0:
        return float("nan"), float("nan")
    w = w / w.sum()
    ece = float(w @ np.abs(table["mean_prob"].to_numpy(dtype=float) - table["failure_rate"].to_numpy(dtype=float)))
    brier = float(w @ table["sq_error"].to_numpy(dtype=float)) if "sq_error" in table else float("nan")
    return ece, brier


def _fitted_range(values: np.ndarray) -> tuple[float, float]:
    """The part of [0, 1] the bins span (predicted, observed and their intervals), with a margin: predicted
    probabilities that sit near the base rate would otherwise leave most of a [0, 1] square empty."""
    values = values[np.isfinite(values)]
    lo, hi = (max(0.0, values.min() - MARGIN), min(1.0, values.max() + MARGIN)) if values.size else (0.0, 1.0)
    if hi - lo < 0.3:  # at least 0.3 wide, centred on the data
        mid = (lo + hi) / 2
        lo, hi = max(0.0, mid - 0.15), min(1.0, mid + 0.15)
    return lo, hi


def _counts_text(counts: np.ndarray) -> str:
    lo, hi = int(counts.min()), int(counts.max())
    return f"{len(counts)} bins of {lo}" + (f"-{hi}" if hi != lo else "")


def reliability_diagram(bins: pd.DataFrame | dict[str, pd.DataFrame], title: str = "Reliability diagram",
                        annotate_counts: bool | None = None, full_range: bool = False):
    """One series per reliability table (:func:`agentuq_nb.evaluation.calibration.reliability_table`, or the rows
    of ``calibration_bins.csv`` of one estimator and method): each bin's mean predicted probability (x) against its
    observed failure rate (y) with the Wilson 95% interval of that rate, small markers, not joined (a line between
    bins of a dozen trajectories draws noise); the diagonal is perfect calibration. The legend gives each series' n,
    its ECE and Brier score (ECE over the bins drawn; Brier where the table has ``sq_error``).

    Counts: bins of (nearly) equal counts - equal-mass bins - are said once in the legend ("10 bins of 39-40"); bins
    of uneven counts have each count written beside its point (``annotate_counts`` forces either). ``bins``: one
    table, or ``{label: table}``. The axes span the bins and their intervals (``full_range``: all of [0, 1]), with
    room for a marker at 0 or 1: nothing is clipped. A table with ``failure_rate_lo`` / ``failure_rate_hi``
    (:func:`agentuq_nb.evaluation.label_shift.reliability_bands`: bootstrap bands) is drawn with those intervals
    instead of Wilson's.
    """
    tables = {"": bins} if isinstance(bins, pd.DataFrame) else dict(bins)
    for label, t in tables.items():
        missing = [c for c in BIN_COLUMNS if c not in t.columns]
        if missing:
            raise ValueError(f"reliability table {label!r} lacks column(s) {', '.join(missing)}")
    use_style()
    fig, ax = plt.subplots(figsize=(4.6, 4.9), layout="constrained")
    tables = {label: t.sort_values("mean_prob").reset_index(drop=True) for label, t in tables.items()}
    intervals = {label: rate_interval(t) for label, t in tables.items()}
    spanned = np.concatenate([np.concatenate([t["mean_prob"].to_numpy(dtype=float), lo, hi])
                              for (t, (lo, hi)) in zip(tables.values(), intervals.values())] or [np.array([0.0, 1.0])])
    lo_axis, hi_axis = (0.0, 1.0) if full_range else _fitted_range(spanned)
    ax.plot([lo_axis, hi_axis], [lo_axis, hi_axis], ls="--", color=PALETTE["neutral"], lw=1, label="perfect calibration")
    for i, (label, t) in enumerate(tables.items()):
        color, marker = SERIES[i % len(SERIES)], MARKERS[i % len(MARKERS)]
        counts = t["count"].to_numpy(dtype=float)
        n = int(counts.sum())
        ece, brier = binned_scores(t)
        even = len(counts) and counts.max() <= EVEN_COUNTS * max(counts.min(), 1)
        annotate = (not even) if annotate_counts is None else annotate_counts
        scores = f"ECE {ece:.3f}" + (f", Brier {brier:.3f}" if np.isfinite(brier) else "")
        shown = f"n = {n}" + (f", {_counts_text(counts)}" if len(counts) and not annotate else "")
        lo, hi = intervals[label]
        x, y = t["mean_prob"].to_numpy(dtype=float), t["failure_rate"].to_numpy(dtype=float)
        ax.errorbar(x, y, yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)], fmt=marker, ms=3.5, color=color,
                    ecolor=color, elinewidth=0.9, capsize=2, alpha=0.9, zorder=3,
                    label=f"{label + ': ' if label else ''}{shown}; {scores}")
        if annotate:
            for xi, yi, c in zip(x, y, counts):
                ax.annotate(str(int(c)), (xi, yi), textcoords="offset points", xytext=(4, -3), fontsize=6,
                            color=color, ha="left", va="top")
    ax.set(xlim=(lo_axis - EDGE, hi_axis + EDGE), ylim=(lo_axis - EDGE, hi_axis + EDGE), aspect="equal",
           xlabel="predicted failure probability (bin mean)", ylabel="observed failure rate (95% interval: "
           + ("bootstrap" if any({"failure_rate_lo"} <= set(t.columns) for t in tables.values()) else "Wilson") + ")")
    ax.set_title(title, fontsize=9)
    legend_below(fig, ax=ax, ncol=1)
    return fig
