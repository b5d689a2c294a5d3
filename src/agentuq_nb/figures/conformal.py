"""Figures of distribution-free evaluation (notebook 08): coverage vs nominal, interval widths,
leaderboard with FDR marks, success-rate intervals, risk-coverage with the chosen threshold,
and the adaptive conformal stream."""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, SERIES, legend_below, use_style

#: markers and line styles of the series of one figure, so that lines that coincide stay told apart
MARKERS = ("o", "s", "^", "D", "v", "P")
LINESTYLES = ("-", "--", "-.", ":")


def _series_label(row) -> str:
    group = row.get("group")
    return row["method"] if group in (None, "all") or pd.isna(group) else f"{row['method']}: {group}"


def _label_column(table: pd.DataFrame) -> pd.Series:
    return table.apply(_series_label, axis=1)


def coverage_nominal_figure(table: pd.DataFrame, title: str = "Coverage vs nominal"):
    """Realized coverage (with its CI) against nominal 1 - alpha, one line per method/group.

    ``table``: columns method, [group], nominal, coverage, coverage_lo, coverage_hi.
    """
    use_style()
    fig, ax = plt.subplots(figsize=(4.4, 4.6), layout="constrained")
    labels = _label_column(table)
    unique = list(pd.unique(labels))
    step = 0.004  # series side by side at each level, so that equal points stay visible
    for i, label in enumerate(unique):
        t = table[labels == label].sort_values("nominal")
        err = np.vstack([t["coverage"] - t["coverage_lo"], t["coverage_hi"] - t["coverage"]])
        ax.errorbar(t["nominal"] + (i - (len(unique) - 1) / 2) * step, t["coverage"], yerr=np.clip(err, 0, None),
                    marker=MARKERS[i % len(MARKERS)], ms=4, lw=1.5, capsize=2, color=SERIES[i % len(SERIES)],
                    label=label)
    lim = (min(table["nominal"].min(), table["coverage_lo"].min()) - 0.03, 1.01)
    ax.plot(lim, lim, ls="--", color=PALETTE["neutral"], lw=1, label="coverage = nominal")
    ax.set(xlabel="nominal coverage 1 − α", ylabel="realized coverage", xlim=lim, ylim=lim)
    ax.set_title(title + _n_line(table), fontsize=9)
    legend_below(fig, ax=ax, ncol=2)
    return fig


def _n_line(table: pd.DataFrame) -> str:
    """``"\nn = 400 test points per level"`` from a coverage table's ``n`` column (empty without one)."""
    if "n" not in table or not len(table):
        return ""
    n = sorted({int(v) for v in table["n"]})
    return f"\nn = {n[0]:,} test points per level" if len(n) == 1 else f"\nn = {n[0]:,}–{n[-1]:,} test points"


def interval_width_figure(table: pd.DataFrame, title: str = "Interval widths"):
    """Mean interval width against nominal 1 - alpha, one line per method/group."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.4, 4.2), layout="constrained")
    labels = _label_column(table)
    for i, label in enumerate(pd.unique(labels)):
        t = table[labels == label].sort_values("nominal")
        # markers and dashes differ per series: a series equal to another (e.g. plain split's one width for
        # both groups) stays visible under it
        ax.plot(t["nominal"], t["mean_width"], marker=MARKERS[i % len(MARKERS)], ms=7 - i, lw=1.5,
                ls=LINESTYLES[i % len(LINESTYLES)], color=SERIES[i % len(SERIES)], label=label,
                mfc="none" if i % 2 else SERIES[i % len(SERIES)])
    ax.set(xlabel="nominal coverage 1 − α", ylabel="mean interval width")
    ax.set_title(title + _n_line(table), fontsize=9)
    legend_below(fig, ax=ax, ncol=2)
    return fig


def leaderboard_figure(board, q: float = 0.1, title: str = "Leaderboard"):
    """Left: mean reward per agent with bootstrap CI, rank order.  Right: pairwise differences
    with CIs; pairs significant after BH at ``q`` are filled, indistinguishable ones hollow and
    marked "≈".  ``board``: the ``Leaderboard`` returned by ``leaderboard``."""
    use_style()
    agents, pairs = board.agents, board.pairs
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, max(2.4, 0.55 * max(len(agents), len(pairs), 1) + 1.4)),
                                   gridspec_kw={"width_ratios": [1, 1.2]}, layout="constrained")
    y = np.arange(len(agents))[::-1]
    for yi, (_, r) in zip(y, agents.iterrows()):
        ax1.errorbar(r["mean_reward"], yi, xerr=None if pd.isna(r["ci_lo"]) else
                     [[r["mean_reward"] - r["ci_lo"]], [r["ci_hi"] - r["mean_reward"]]],
                     fmt="o", color=PALETTE["success"], capsize=3)
        ax1.annotate(f"#{r['rank']}  n={r['n_tasks']}", (r["mean_reward"], yi), xytext=(0, 7),
                     textcoords="offset points", ha="center", fontsize=7)
    ax1.set_yticks(y, [str(a) for a in agents["agent"]], fontsize=8)
    ax1.set(xlabel="mean reward over tasks (95% CI)", xlim=(-0.05, 1.05), title=title)
    ax1.set_ylim(-0.7, len(agents) - 0.3)
    if len(pairs):
        yp = np.arange(len(pairs))[::-1]
        for yi, (_, r) in zip(yp, pairs.iterrows()):
            sig = bool(r["significant"])
            color = PALETTE["failure"] if sig else PALETTE["neutral"]
            xerr = None if pd.isna(r["ci_lo"]) else [[r["diff"] - r["ci_lo"]], [r["ci_hi"] - r["diff"]]]
            ax2.errorbar(r["diff"], yi, xerr=xerr, fmt="o", color=color, capsize=3,
                         mfc=color if sig else "white")
            p = "n/a" if pd.isna(r["p_adjusted"]) else f"{r['p_adjusted']:.3g}"
            mark = "significant" if sig else "≈ indistinguishable"
            ax2.annotate(f"{mark}, BH p={p}{' (paired)' if r['paired'] else ''}", (r["diff"], yi),
                         xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7)
        ax2.set_yticks(yp, [f"{a} − {b}" for a, b in zip(pairs["agent_a"], pairs["agent_b"])], fontsize=7)
        ax2.set_ylim(-0.7, len(pairs) - 0.3)
        ax2.axvline(0, ls="--", color=PALETTE["neutral"], lw=1)
    else:
        ax2.text(0.5, 0.5, "one agent: no pairs to compare", ha="center", va="center",
                 transform=ax2.transAxes)
        ax2.set_yticks([])
    ax2.set(xlabel="difference in mean reward (95% CI)", title=f"Pairwise, BH-FDR q = {q:g}")
    return fig


def success_rate_figure(table: pd.DataFrame, title: str = "Success rate"):
    """Per-agent success rate with its binomial CI (``success_rate_intervals`` output), each point labelled with
    successes / runs."""
    use_style()
    fig, ax = plt.subplots(figsize=(5.2, max(2.2, 0.5 * len(table) + 1.2)), layout="constrained")
    y = np.arange(len(table))[::-1]
    ax.errorbar(table["success_rate"], y,
                xerr=[table["success_rate"] - table["ci_lo"], table["ci_hi"] - table["success_rate"]],
                fmt="o", color=PALETTE["success"], capsize=3)
    for yi, (_, r) in zip(y, table.iterrows()):
        ax.annotate(f"{r['n_success']}/{r['n_runs']}", (r["success_rate"], yi), xytext=(0, 7),
                    textcoords="offset points", ha="center", fontsize=7)
    method = table["method"].iloc[0] if len(table) else ""
    ax.set_yticks(y, [str(a) for a in table.iloc[:, 0]], fontsize=8)
    ax.set(xlabel=f"success rate (95% {method} CI)", xlim=(-0.02, 1.02), title=title)
    ax.set_ylim(-0.7, len(table) - 0.3)
    return fig


def risk_coverage_figure(report: dict, label: str = "uncertainty"):
    """Held-out risk-coverage curve, calibration candidates (certified ones filled), the target
    risk alpha, and the chosen threshold's held-out (coverage, failure rate).  When no
    threshold is certifiable the figure says so instead of drawing one."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.6, 5.0), layout="constrained")
    alpha = report["alpha"]
    curve = report.get("heldout_curves")
    if curve is not None and len(curve):
        ax.plot(curve["x"], curve["y"], color=PALETTE["neutral"], lw=1.8,
                label="held-out: failure rate of the most certain")
    cal = report.get("calibration") or {}
    cand = report.get("candidates")
    if cand is not None and len(cand) and cal.get("n"):
        cov = cand["n_accepted"] / cal["n"]
        rej = cand["rejected"].astype(bool)
        if rej.any():  # no legend entry for a set that is empty
            ax.scatter(cov[rej], cand["risk"][rej], s=18, color=PALETTE["success"], zorder=3,
                       label="calibration: certified thresholds")
        if (~rej).any():
            ax.scatter(cov[~rej], cand["risk"][~rej], s=18, facecolor="white", edgecolor=PALETTE["success"],
                       zorder=3, label="calibration: candidate thresholds, not certified")
    ax.axhline(alpha, ls="--", color=PALETTE["failure"], lw=1, label=f"target risk α = {alpha:g}")
    held = report.get("heldout") or {}
    if report["feasible"]:
        rate = held.get("realized_failure_rate")
        ax.axvline(held["coverage"], color=PALETTE["highlight"], lw=1.2,
                   label=f"threshold {report['threshold']:.3g}: keeps {held['coverage']:.0%} held-out")
        if rate is not None:
            ax.scatter([held["coverage"]], [rate], marker="*", s=120, color=PALETTE["highlight"], zorder=4,
                       label=f"held-out failure rate {rate:.2f}")
    note = ""
    if not report["feasible"]:
        note = "\n" + textwrap.fill(report.get("reason") or "no threshold certifiable: abstain on everything", 60)
    n_cal, n_held = cal.get("n"), held.get("n")
    n_text = (f"\nn = {n_cal} calibration, {n_held} held-out trajectories" if n_cal is not None and n_held is not None
              else "")
    ax.set(xlabel="coverage (fraction of trajectories kept)", ylabel="failure rate among kept",
           xlim=(0, 1.02), ylim=(-0.02, 1.02))
    ax.set_title(f"Risk-controlled abstention on {textwrap.shorten(label, 40)} (δ = {report['delta']:g}){n_text}"
                 f"{note}", fontsize=8)
    legend_below(fig, ax=ax, ncol=1)
    return fig


def aci_stream_figure(stream: pd.DataFrame, alpha: float, synthetic: bool = False, label: str = "value"):
    """Top: the stream's values with the ACI intervals (pred ± q_t).  Bottom: alpha_t over time
    and the running miscoverage, with the target alpha.  ``stream``: ``aci_stream`` output."""
    use_style()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.0, 5.6), sharex=True, layout="constrained",
                                   gridspec_kw={"height_ratios": [1.6, 1]})
    t = stream["t"].to_numpy()
    lo = stream["lo"].to_numpy(dtype=float)
    hi = stream["hi"].to_numpy(dtype=float)
    finite = np.isfinite(lo) & np.isfinite(hi)
    ax1.fill_between(t, np.where(finite, lo, np.nan), np.where(finite, hi, np.nan),
                     color=PALETTE["success"], alpha=0.25, lw=0, label=f"ACI interval (1 − α = {1 - alpha:g})")
    ax1.plot(t, stream["pred"], color=PALETTE["success"], lw=1, label="prediction (running mean)")
    covered = stream["covered"].to_numpy(dtype=float)
    miss = covered == 0
    ax1.scatter(t[~miss], stream["true"][~miss], s=6, color=PALETTE["neutral"], label="observed")
    ax1.scatter(t[miss], stream["true"][miss], s=10, color=PALETTE["failure"], label="outside interval")
    source = "SYNTHETIC drift stream (not this run's data)" if synthetic else "Trajectories of the run ordered by task"
    ax1.set(ylabel=label)
    ax1.set_title(f"{source}: adaptive conformal inference\nn = {len(stream)} points, "
                  f"{int(np.isfinite(covered).sum())} after the warm-up scored", fontsize=9)
    ax2.plot(t, stream["alpha_t"], color=PALETTE["secondary"], lw=1.5, label="α_t")
    ax2.plot(t, stream["cum_miscoverage"], color=PALETTE["highlight"], lw=1.5, label="running miscoverage")
    ax2.axhline(alpha, ls="--", color=PALETTE["neutral"], lw=1, label=f"target α = {alpha:g}")
    ax2.set(xlabel="t (position in the stream)", ylabel="level")
    legend_below(fig, ncol=3)
    return fig
