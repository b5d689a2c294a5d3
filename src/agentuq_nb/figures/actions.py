"""Figures of action resampling: one trajectory's decision points, and the action estimators by outcome."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, SERIES, use_style


def decision_points_figure(turns: pd.DataFrame, title: str = ""):
    """One row per decision point of a trajectory (rows of ``action_turns``, in order): the K samples'
    clusters as a stacked bar of shares, the cluster of the action the agent took outlined and labelled,
    and the agreement (share of samples in the taken action's cluster) on the right."""
    use_style()
    turns = turns.sort_values("decision_idx")
    n = len(turns)
    fig, ax = plt.subplots(figsize=(7.2, 0.55 * max(n, 1) + 1.0))
    for y, row in enumerate(turns.itertuples(index=False)):
        left = 0.0
        sizes, labels = list(row.cluster_sizes), list(row.cluster_labels)
        for c, (size, label) in enumerate(zip(sizes, labels)):
            share = size / row.k
            if share == 0:
                continue
            taken = c == row.taken_cluster
            ax.barh(y, share, left=left, height=0.7, color=SERIES[c % len(SERIES)], alpha=0.85 if taken else 0.45,
                    edgecolor="black" if taken else "white", linewidth=1.6 if taken else 0.6)
            if share >= 0.2:
                ax.text(left + share / 2, y, label[:28], ha="center", va="center", fontsize=6)
            left += share
        ax.text(1.02, y, f"{row.action_agreement:.2f}", va="center", fontsize=8,
                color=PALETTE["failure"] if row.action_agreement < 0.5 else PALETTE["success"])
    ax.set_yticks(range(n), [f"{int(d)}: {str(a)[:34]}" for d, a in zip(turns["decision_idx"], turns["taken_action"])],
                  fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.set(xlabel="share of the K samples per cluster (outlined: the action taken; right: agreement)",
           title=title or "Decision points: taken action vs the samples' clusters")
    ax.grid(axis="y", alpha=0)
    return fig


def estimators_by_outcome_figure(scores: pd.DataFrame, failed: pd.Series, ncols: int = 3):
    """Strip + box plots of each column of ``scores`` (one trajectory per row) for successes vs failures."""
    use_style()
    names = list(scores.columns)
    nrows = max(1, int(np.ceil(len(names) / ncols)))
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.0 * ncols, 2.5 * nrows), squeeze=False)
    rng = np.random.default_rng(0)  # jitter only; fixed for reproducible figures
    failed = failed.reindex(scores.index).astype(bool)
    for ax, name in zip(axes.flat, names):
        for pos, (outcome, mask) in enumerate((("success", ~failed), ("failure", failed))):
            vals = scores.loc[mask, name].dropna().to_numpy(dtype=float)
            if len(vals):
                ax.boxplot(vals, positions=[pos], widths=0.5, showfliers=False,
                           medianprops={"color": PALETTE[outcome]}, boxprops={"color": PALETTE["neutral"]})
                ax.scatter(pos + rng.uniform(-0.15, 0.15, len(vals)), vals, s=10, alpha=0.7, color=PALETTE[outcome],
                           zorder=3)
        ax.set_xticks([0, 1], [f"success\n(n={int((~failed).sum())})", f"failure\n(n={int(failed.sum())})"], fontsize=7)
        ax.set_title(name, fontsize=8)
    for ax in list(axes.flat)[len(names):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
