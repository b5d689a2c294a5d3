"""Figures of the learned failure detector: each protocol against length and the task prior, the feature ablation, the
early-detection curve and what the detector leans on. Each says n and what it compares; the intervals resample tasks
within runs (pooled within-run AUROC, :mod:`agentuq_nb.evaluation.detector_protocols`)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from agentuq_nb.figures.style import PALETTE, legend_below, use_style

PROTOCOL_LABELS = {"within_run": "within run,\nby task", "leave_one_run_out": "leave one\nrun out",
                   "leave_run_and_task_out": "leave run and\nits tasks out", "leave_one_domain_out": "leave one\ndomain out"}
SERIES = (("detector", "auroc", "the detector", PALETTE["failure"], "o"),
          ("same model", "same_model_auroc", "the detector, pairs scored by one fold model", PALETTE["highlight"], "o"),
          ("length", "length_auroc", "best length baseline", PALETTE["neutral"], "s"),
          ("on prior rows", "auroc_on_prior_rows", "the detector on the trajectories the task prior scores",
           PALETTE["failure"], "D"),
          ("prior", "prior_auroc", "task prior (the task's failures in the other runs)", PALETTE["success"], "D"))
#: the series drawn hollow
HOLLOW = ("same_model_auroc", "auroc_on_prior_rows")
MARKS = {"beats": "▲", "below": "▼", "not distinguishable from": "≈"}


def _interval(row: pd.Series, key: str) -> tuple[float, float, float]:
    return (float(row.get(key, np.nan)), float(row.get(f"{key}_lo", np.nan)), float(row.get(f"{key}_hi", np.nan)))


def protocols_figure(protocols: pd.DataFrame, title: str = "The detector under each protocol"):
    """Per protocol (rows of ``protocols.csv``): the detector's pooled within-run AUROC with its 95% interval (and, where
    several fold models score a run, on the pairs one model scored) beside the best length baseline's and the task
    prior's (on the trajectories whose task recurs in another run); the marks say whether the paired interval of the
    detector's difference lies above (▲), below (▼) or across (≈) zero.

    The task prior is drawn only where tasks recur between a fold's training and scored rows (not the task-disjoint
    protocols, where no model can read a task's history), beside the detector on the same trajectories (those whose
    task another run holds): the comparison the card's baseline check makes."""
    from agentuq_nb.evaluation.detector_protocols import TASK_DISJOINT

    use_style()
    rows = protocols[protocols["auroc"].notna()].reset_index(drop=True) if "auroc" in protocols else protocols.iloc[:0]
    fig, ax = plt.subplots(figsize=(6.4, 1.0 + 0.85 * max(len(rows), 1)), layout="constrained")
    offsets = (-0.3, -0.15, 0.0, 0.15, 0.3)
    for i, row in rows.iterrows():
        prior_applies = row["protocol"] not in TASK_DISJOINT and np.isfinite(float(row.get("prior_auroc", np.nan)))
        for (_, key, label, color, marker), dy in zip(SERIES, offsets):
            value, lo, hi = _interval(row, key)
            if key in ("prior_auroc", "auroc_on_prior_rows") and not prior_applies:
                continue
            if np.isfinite(value):
                ax.errorbar(value, i + dy, xerr=[[value - lo], [hi - value]] if np.isfinite(lo) else None, fmt=marker,
                            color=color, ms=5, capsize=2, label=label, mfc="white" if key in HOLLOW else color)
        prior = (f"{MARKS.get(row.get('vs_prior'), '–')} prior (n={int(row['prior_n'])})" if prior_applies
                 else "prior: tasks held out")
        marks = [f"{MARKS.get(row.get('vs_length'), '?')} length", prior]
        ax.annotate(f"n={int(row['n'])}, {int(row['n_failures'])} failed\n" + ", ".join(marks), (1.0, i),
                    xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points", va="center",
                    fontsize=7)
    ax.axvline(0.5, color=PALETTE["neutral"], lw=0.8, ls=":")
    ax.set_yticks(range(len(rows)), [PROTOCOL_LABELS.get(p, p) for p in rows["protocol"]], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="pooled within-run AUROC (95% interval: tasks resampled within runs)", title=title)
    legend_below(fig, ax=ax, ncol=2)
    return fig


def ablation_figure(ablation: pd.DataFrame, title: str = "Which features carry the signal"):
    """One panel per protocol: each feature set's pooled within-run AUROC with its interval (rows of the study's
    ablation table: ``feature_set``, ``protocol`` and a protocol row's columns), the best length baseline as a line
    with its interval shaded, the task prior dashed where tasks recur between training and scored rows (not on the
    task-disjoint protocols, where no model can read a task's history)."""
    from agentuq_nb.evaluation.detector_protocols import TASK_DISJOINT

    use_style()
    protocols = list(dict.fromkeys(ablation["protocol"]))
    sets = list(dict.fromkeys(ablation["feature_set"]))
    fig, axes = plt.subplots(1, len(protocols), figsize=(2.6 * len(protocols) + 1.6, 0.45 * len(sets) + 1.6),
                             sharey=True, squeeze=False, layout="constrained")
    for ax, protocol in zip(axes[0], protocols):
        part = ablation[ablation["protocol"] == protocol].set_index("feature_set")
        for i, name in enumerate(sets):
            if name not in part.index or not np.isfinite(part.loc[name].get("auroc", np.nan)):
                continue
            value, lo, hi = _interval(part.loc[name], "auroc")
            ax.errorbar(value, i, xerr=[[value - lo], [hi - value]], fmt="o", color=PALETTE["failure"], ms=4, capsize=2)
        first = part.iloc[0] if len(part) else None
        if first is not None and np.isfinite(first.get("length_auroc", np.nan)):
            value, lo, hi = _interval(first, "length_auroc")
            ax.axvline(value, color=PALETTE["neutral"], lw=1)
            if np.isfinite(lo):
                ax.axvspan(lo, hi, color=PALETTE["neutral"], alpha=0.12, lw=0)
        if first is not None and protocol not in TASK_DISJOINT and np.isfinite(first.get("prior_auroc", np.nan)):
            ax.axvline(first["prior_auroc"], color=PALETTE["success"], lw=1, ls="--")
        ax.axvline(0.5, color=PALETTE["neutral"], lw=0.6, ls=":")
        n = int(part["n"].max()) if len(part) and "n" in part else 0
        ax.set_title(f"{PROTOCOL_LABELS.get(protocol, protocol)} (n={n})", fontsize=8)
        ax.set_xlabel("pooled AUROC", fontsize=8)
    axes[0, 0].set_yticks(range(len(sets)), sets, fontsize=8)
    axes[0, 0].invert_yaxis()
    fig.suptitle(title, fontsize=10)
    handles = [Line2D([], [], marker="o", ls="", color=PALETTE["failure"], label="detector on the feature set (95% CI)"),
               Line2D([], [], color=PALETTE["neutral"], label="best length baseline (shaded: 95% CI)"),
               Line2D([], [], color=PALETTE["success"], ls="--", label="task prior (trajectories whose task another run holds)")]
    legend_below(fig, handles=handles, ncol=3)
    return fig


def early_detection_figure(early: pd.DataFrame, title: str = "How early is failure predictable?"):
    """The detector's pooled AUROC on the first k agent turns (left) and on the first fraction of the messages (right),
    with 95% intervals, beside the best length baseline measured on the same prefix (the length so far); the full
    trajectory's values as a dotted line."""
    use_style()
    kinds = [k for k in ("turns", "fraction") if (early["prefix"] == k).any()]
    full = early[early["prefix"] == "all"]
    fig, axes = plt.subplots(1, max(len(kinds), 1), figsize=(4.2 * max(len(kinds), 1), 3.4), squeeze=False,
                             sharey=True, layout="constrained")
    for ax, kind in zip(axes[0], kinds):
        part = early[early["prefix"] == kind].sort_values("value")
        x = part["value"].to_numpy(dtype=float)
        for key, label, color, marker, dx in (("auroc", "detector", PALETTE["failure"], "o", -1),
                                              ("length_auroc", "length so far (best baseline)", PALETTE["neutral"], "s",
                                               1)):
            y = part[key].to_numpy(dtype=float)
            lo, hi = part[f"{key}_lo"].to_numpy(dtype=float), part[f"{key}_hi"].to_numpy(dtype=float)
            shift = dx * 0.012 * (np.ptp(x) if len(x) > 1 and np.ptp(x) else (1.0 if kind == "turns" else 0.1))
            ax.errorbar(x + shift, y, yerr=[y - lo, hi - y], marker=marker, color=color, label=label, ms=4, capsize=2,
                        lw=1.2)
        if len(full):
            ax.axhline(float(full["auroc"].iloc[0]), color=PALETTE["failure"], ls=":", lw=1,
                       label="detector, whole trajectory")
        ax.axhline(0.5, color=PALETTE["neutral"], lw=0.6, ls=":")
        if kind == "turns":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("first k agent turns")
            for xi, running in zip(x, part["running"]):
                if pd.notna(running):
                    ax.annotate(f"{int(running)}", (xi, 0.0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                                textcoords="offset points", ha="center", fontsize=6, color=PALETTE["neutral"])
            ax.set_title("by agent turns (numbers: trajectories still running)", fontsize=8)
        else:
            ax.set_xlim(0, 1.02)
            ax.set_xlabel("first fraction of the messages")
            ax.set_title("by fraction of the trajectory", fontsize=8)
    axes[0, 0].set_ylabel("pooled within-run AUROC")
    n = int(full["n"].iloc[0]) if len(full) else 0
    protocol = str(full["protocol"].iloc[0]) if len(full) else ""
    fig.suptitle(f"{title} ({protocol.replace('_', ' ')}, n={n})", fontsize=10)
    legend_below(fig, ax=axes[0, 0], ncol=3)
    return fig


def top_features_figure(features: pd.DataFrame, k: int = 20, title: str = "What the detector leans on"):
    """The ``k`` features with the largest mean absolute contribution to the log-odds over the training trajectories
    (``top_features.csv``, grey bars) and, for the logistic model's single columns, the log-odds change per standard
    deviation of the feature (dots: right = towards failure; an embedding block has none); beside each, the share of
    trajectories it contributes to."""
    use_style()
    top = features.head(k).iloc[::-1]
    fig, ax = plt.subplots(figsize=(6.4, 0.26 * len(top) + 1.4), layout="constrained")
    y = np.arange(len(top))
    ax.barh(y, top["mean_abs_contribution"].to_numpy(dtype=float), color=PALETTE["neutral"], alpha=0.25,
            label="mean |contribution| to the log-odds")
    direction = top["per_sd"].to_numpy(dtype=float) if "per_sd" in top else np.full(len(top), np.nan)
    ok = np.isfinite(direction)
    ax.scatter(direction[ok], y[ok], c=[PALETTE["failure"] if v > 0 else PALETTE["success"] for v in direction[ok]],
               s=18, zorder=3)
    ax.scatter([], [], color=PALETTE["failure"], s=18, label="per SD: towards failure")
    ax.scatter([], [], color=PALETTE["success"], s=18, label="per SD: towards success")
    ax.set_yticks(y, [str(f).removeprefix("text:") for f in top["feature"]], fontsize=7)
    for i, share in enumerate(top["share_of_rows"]):
        ax.annotate(f"{share:.0%}", (1.0, i), xycoords=("axes fraction", "data"), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=6, color=PALETTE["neutral"])
    ax.axvline(0, color=PALETTE["neutral"], lw=0.8)
    ax.set(xlabel="log-odds of failure (right margin: share of trajectories it contributes to)", title=title)
    legend_below(fig, ax=ax, ncol=3)
    return fig
