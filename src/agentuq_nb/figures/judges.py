"""The judges study's figure: each judge prompt's AUROC against length and the task prior, with its cost."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from agentuq_nb.figures.style import PALETTE, legend_below, use_style


def judge_auroc_figure(table: pd.DataFrame, title: str = "Published LLM-judge verdicts against length and the task "
                                                          "prior"):
    """One panel per judged run: each prompt's verdict AUROC with its 95% interval (filled: its paired interval
    against the best length baseline lies above 0), the best length baseline's AUROC (dotted) and the task prior's
    (dashed, on the trajectories it covers), and the judging cost per trajectory at the right. ``table``: the rows of
    :func:`agentuq_nb.pipeline.judges.judge_rows`."""
    use_style()
    runs = list(dict.fromkeys(table["run"]))
    heights = [max(1, (table["run"] == r).sum()) for r in runs]
    fig, axes = plt.subplots(len(runs), 1, figsize=(6.4, 0.9 + 0.45 * sum(heights) + 0.5 * len(runs)),
                             gridspec_kw={"height_ratios": heights}, layout="constrained", squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        rows = table[table["run"] == run].sort_values("auroc").reset_index(drop=True)
        y = np.arange(len(rows))
        lo = (rows["auroc"] - rows["auroc_lo"]).to_numpy(dtype=float)
        hi = (rows["auroc_hi"] - rows["auroc"]).to_numpy(dtype=float)
        ax.errorbar(rows["auroc"], y, xerr=[lo, hi], fmt="none", ecolor=PALETTE["success"], elinewidth=1.4)
        beats = (rows["vs_length"] == "beats").to_numpy()
        ax.scatter(rows["auroc"][beats], y[beats], color=PALETTE["success"], zorder=3, s=30)
        ax.scatter(rows["auroc"][~beats], y[~beats], facecolor="white", edgecolor=PALETTE["success"], zorder=3, s=30)
        first = rows.iloc[0]
        ax.axvline(first["length_auroc"], color=PALETTE["neutral"], linestyle=":", linewidth=1.4)
        if np.isfinite(first.get("prior_auroc", np.nan)):
            ax.axvline(first["prior_auroc"], color=PALETTE["failure"], linestyle="--", linewidth=1.2)
        ax.axvline(0.5, color="#bbbbbb", linewidth=0.8)
        ax.set_yticks(y, rows["prompt"], fontsize=8)
        ax.set_xlim(0.3, 1.0)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        cost = rows["cost_per_trajectory_usd"].to_numpy(dtype=float)
        for yi, c in zip(y, cost):
            if np.isfinite(c):
                ax.annotate(f"${c:.3f}/traj.", (1.0, yi), xycoords=("axes fraction", "data"), xytext=(4, 0),
                            textcoords="offset points", va="center", fontsize=7, color=PALETTE["neutral"])
        prior = f", prior on {int(first['prior_n'])}" if first.get("prior_n") else ""
        ax.set_title(f"{run}: n = {int(first['n'])} ({int(first['n_failures'])} failures){prior}", fontsize=9,
                     loc="left")
    axes[-1, 0].set_xlabel("AUROC (failure = reward < 1), 95% task-resampled CI")
    handles = [Line2D([], [], marker="o", linestyle="none", markerfacecolor="white", color=PALETTE["success"]),
               Line2D([], [], marker="o", linestyle="none", color=PALETTE["success"]),
               Line2D([], [], color=PALETTE["neutral"], linestyle=":"),
               Line2D([], [], color=PALETTE["failure"], linestyle="--")]
    labels = ["judge prompt (hollow: not shown to beat length)", "filled: beats length (paired 95% CI > 0)",
              "best length baseline's AUROC", "task prior's AUROC (other runs of the task)"]
    legend_below(fig, handles, labels, ncol=2)
    fig.suptitle(title, fontsize=10)
    return fig
