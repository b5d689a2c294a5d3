"""The judges study's figure: each monitor's AUROC - the published judge prompts, the detector trained on other runs,
the embedded model's judging (a path demonstration) - against length and the task prior, with its cost."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from agentuq_nb.figures.style import PALETTE, legend_below, use_style

#: the colour of each kind of monitor (:data:`agentuq_nb.pipeline.judges.PUBLISHED`, ``DETECTOR``, ``EMBEDDED``)
KIND_COLORS = {"published judge": PALETTE["success"], "detector": PALETTE["accent"],
               "embedded judge (path demonstration)": PALETTE["neutral"]}
#: the order rows are drawn in, bottom to top: the embedded judge, the detector, the published prompts by AUROC
KIND_ORDER = {"embedded judge (path demonstration)": 0, "detector": 1, "published judge": 2}


def _cost_text(row) -> str:
    cost, seconds = row.get("cost_per_trajectory_usd"), row.get("seconds_per_trajectory")
    if row.get("kind") != "published judge":
        return "no API cost" + (f", {seconds:.1f} s/traj. (CPU)" if seconds is not None and np.isfinite(seconds)
                                else "")
    return f"${cost:.3f}/traj." if cost is not None and np.isfinite(cost) else ""


def judge_auroc_figure(table: pd.DataFrame, title: str = "LLM-judge verdicts against length, the task prior and a "
                                                          "detector"):
    """One panel per judged run: each monitor's AUROC with its 95% interval (filled: its paired interval against the
    best length baseline lies above 0), the best length baseline's AUROC (dotted) and the task prior's (dashed, on the
    trajectories it covers), and the cost per trajectory at the right. A monitor scored on fewer trajectories than
    the run (the embedded judge's first few) says its n. ``table``: the rows of
    :func:`agentuq_nb.pipeline.judges.judge_rows`."""
    use_style()
    table = table.assign(kind=table["kind"].fillna("published judge") if "kind" in table else "published judge")
    runs = list(dict.fromkeys(table["run"]))
    lows = table["auroc_lo"].to_numpy(dtype=float) if "auroc_lo" in table else np.array([])
    left = min(0.3, np.floor(np.nanmin(lows) * 10) / 10) if np.isfinite(lows).any() else 0.3
    heights = [max(1, (table["run"] == r).sum()) for r in runs]
    fig, axes = plt.subplots(len(runs), 1, figsize=(7.0, 1.1 + 0.42 * sum(heights) + 0.55 * len(runs)),
                             gridspec_kw={"height_ratios": heights}, layout="constrained", squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        rows = table[table["run"] == run]
        rows = rows.assign(order=rows["kind"].map(KIND_ORDER).fillna(2)).sort_values(["order", "auroc"])
        rows = rows.reset_index(drop=True)
        full_n = int(rows["n"].max())
        y = np.arange(len(rows))
        for yi, (_, r) in zip(y, rows.iterrows()):
            color = KIND_COLORS.get(r["kind"], PALETTE["success"])
            if not np.isfinite(r.get("auroc", np.nan)):
                ax.annotate("AUROC undefined", (left + 0.02, yi), va="center", fontsize=7, color=color)
                continue
            if np.isfinite(r.get("auroc_lo", np.nan)):
                ax.plot([r["auroc_lo"], r["auroc_hi"]], [yi, yi], color=color, linewidth=1.4)
            filled = r.get("vs_length") == "beats"
            ax.scatter([r["auroc"]], [yi], s=30, zorder=3, color=color if filled else "white", edgecolor=color,
                       marker="D" if r["kind"] != "published judge" else "o")
        first = rows[rows["kind"] == "published judge"].iloc[0] if (rows["kind"] == "published judge").any() \
            else rows.iloc[-1]
        ax.axvline(first["length_auroc"], color=PALETTE["neutral"], linestyle=":", linewidth=1.4)
        if np.isfinite(first.get("prior_auroc", np.nan)):
            ax.axvline(first["prior_auroc"], color=PALETTE["failure"], linestyle="--", linewidth=1.2)
        ax.axvline(0.5, color="#bbbbbb", linewidth=0.8)
        labels = [r["prompt"] if int(r["n"]) == full_n else f"{r['prompt']}, n = {int(r['n'])}"
                  for _, r in rows.iterrows()]
        ax.set_yticks(y, labels, fontsize=7.5)
        for tick, (_, r) in zip(ax.get_yticklabels(), rows.iterrows()):
            tick.set_color(KIND_COLORS.get(r["kind"], PALETTE["success"]))
        ax.set_xlim(left, 1.0)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        for yi, (_, r) in zip(y, rows.iterrows()):
            ax.annotate(_cost_text(r), (1.0, yi), xycoords=("axes fraction", "data"), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7, color=PALETTE["neutral"])
        prior = f"; prior on {int(first['prior_n'])}" if pd.notna(first.get("prior_n")) and first["prior_n"] else ""
        ax.set_title(f"{run}: n = {full_n} ({int(first['n_failures'])} failures){prior}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("AUROC (failure = reward < 1), 95% task-resampled CI")
    handles = [Line2D([], [], marker="o", linestyle="-", markerfacecolor="white", color=PALETTE["success"]),
               Line2D([], [], marker="D", linestyle="-", markerfacecolor="white", color=PALETTE["accent"]),
               Line2D([], [], marker="D", linestyle="-", markerfacecolor="white", color=PALETTE["neutral"]),
               Line2D([], [], marker="o", linestyle="none", color=PALETTE["success"]),
               Line2D([], [], color=PALETTE["neutral"], linestyle=":"),
               Line2D([], [], color=PALETTE["failure"], linestyle="--")]
    labels = ["published judge prompt (GPT-4o)", "detector trained on the other runs",
              "embedded 135M judge: path demonstration", "filled: beats length (paired 95% CI > 0)",
              "best length baseline (whole run)", "task prior (other runs of the task; its trajectories)"]
    legend_below(fig, handles, labels, ncol=2)
    fig.suptitle(title, fontsize=10)
    return fig
