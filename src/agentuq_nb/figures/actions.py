"""Figures of action resampling: one trajectory's decision points, and the action estimators by outcome."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, counted, use_style

#: characters of a cluster's label shown (the table ``turn_clusters`` has them whole)
LABEL_CHARS = 44


def _short(text: str, limit: int = LABEL_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decision_points_figure(turns: pd.DataFrame, title: str = ""):
    """One block per decision point of a trajectory (rows of ``action_turns``, in order): a bold header (decision,
    turn, agreement), then one row per cluster of the K samples, its bar the number of samples in it and its label
    the cluster's action; the cluster of the action the agent took is marked "taken" and drawn in full colour, also
    when no sample joined it (bar 0)."""
    use_style()
    turns = turns.sort_values("decision_idx")
    labels, bars, colors, headers = [], [], [], []
    k_values = sorted({int(k) for k in turns["k"]})
    for row in turns.itertuples(index=False):
        headers.append(len(labels))
        labels.append(f"decision {int(row.decision_idx)} (turn {int(row.turn_idx)}): "
                      f"agreement {row.action_agreement:.2f}, {int(row.action_clusters)} clusters")
        bars.append(np.nan)
        colors.append(None)
        sizes, names = list(row.cluster_sizes), list(row.cluster_labels)
        order = sorted(range(len(sizes)), key=lambda c: (c != row.taken_cluster, -sizes[c], c))
        for c in order:
            taken = c == row.taken_cluster
            if sizes[c] == 0 and not taken:
                continue
            labels.append(("taken ▸ " if taken else "") + _short(names[c]))
            bars.append(sizes[c])
            colors.append(PALETTE["highlight"] if taken else PALETTE["neutral"])
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(6.4, 0.24 * len(labels) + 1.3), layout="constrained")
    drawn = [i for i in range(len(bars)) if np.isfinite(bars[i])]
    ax.barh(y[drawn], [bars[i] for i in drawn], height=0.7, color=[colors[i] for i in drawn])
    ax.set_yticks(y, labels, fontsize=7)
    for i in headers:
        ax.get_yticklabels()[i].set_fontweight("bold")
    ax.invert_yaxis()
    k_max = max(k_values) if k_values else 1
    ax.set_xlim(0, k_max)
    ax.set_xticks(range(k_max + 1))
    ax.grid(axis="y", alpha=0)
    k_text = "K = " + "/".join(map(str, k_values))
    ax.set(xlabel=f"samples in the cluster (of {k_text})")
    ax.set_title((title or "Decision points: the action taken vs the resampled actions")
                 + f"\n{counted(len(turns), 'decision point')}, {k_text} samples each; orange: the agent's action",
                 fontsize=9)
    return fig


def estimators_by_outcome_figure(scores: pd.DataFrame, failed: pd.Series, ncols: int = 3):
    """Strip + box plots of each column of ``scores`` (one trajectory per row) for successes vs failures. Each
    panel's n counts the trajectories with a value of that estimator (those without one are not drawn)."""
    use_style()
    names = list(scores.columns)
    ncols = max(1, min(ncols, len(names)))
    nrows = max(1, int(np.ceil(len(names) / ncols)))
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.6 * ncols, 2.5 * nrows + 0.5), squeeze=False,
                             layout="constrained")
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    failed = failed.reindex(scores.index).astype(bool)
    for ax, name in zip(axes.flat, names):
        ticks = []
        for pos, (outcome, mask) in enumerate((("success", ~failed), ("failure", failed))):
            vals = scores.loc[mask, name].to_numpy(dtype=float)
            vals = vals[np.isfinite(vals)]
            if len(vals):
                ax.boxplot(vals, positions=[pos], widths=0.5, showfliers=False,
                           medianprops={"color": PALETTE[outcome]}, boxprops={"color": PALETTE["neutral"]})
                ax.scatter(pos + rng.uniform(-0.15, 0.15, len(vals)), vals, s=10, alpha=0.7, color=PALETTE[outcome],
                           zorder=3)
            ticks.append(f"{outcome}\nn = {len(vals)}")
        ax.set_xticks([0, 1], ticks, fontsize=7)
        ax.set_xlim(-0.6, 1.6)
        ax.tick_params(axis="y", labelsize=7)
        ax.set_title(name, fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.suptitle("Action estimators by outcome (one point per trajectory with a decision point)", fontsize=9)
    return fig
