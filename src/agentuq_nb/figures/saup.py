"""SAUP's turn-by-turn view of one trajectory: what each step contributes to the propagated uncertainty."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from agentuq_nb.figures.style import PALETTE, use_style

ACTOR_COLORS = {"assistant": PALETTE["success"], "user": PALETTE["secondary"]}
ACTOR_LABELS = {"assistant": "agent", "user": "user"}
WEIGHTINGS = {"uniform": "-", "position": "--", "distance": ":"}


def _legend_right(ax, **kwargs) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, **kwargs)


def saup_turn_figure(table: pd.DataFrame, title: str = "SAUP, step by step"):
    """Four stacked panels over the steps of one trajectory (``uq.saup.turn_table`` output):
    step uncertainty U_i by actor; distances D_a (inquiry drift) and D_o (inference gap); the weight
    W_i of each variant; the running SAUP of each actor after each step, per variant. Legends sit right of the
    panels; the title says how many steps each actor has."""
    use_style()
    t = table.reset_index(drop=True)
    x = np.arange(len(t))
    fig, axes = plt.subplots(4, 1, figsize=(max(5.6, 0.3 * len(t) + 3.6), 8.4), sharex=True, layout="constrained")
    ax_u, ax_d, ax_w, ax_s = axes
    colors = [ACTOR_COLORS.get(a, PALETTE["neutral"]) for a in t["actor"]]
    ax_u.bar(x, t["u"], color=colors)
    counts = t["actor"].value_counts()
    steps = ", ".join(f"{int(counts.get(a, 0))} {ACTOR_LABELS[a]}" for a in ACTOR_COLORS)
    ax_u.set(ylabel="U_i (mean token NLL)")
    ax_u.set_title(f"{title}\n{len(t)} steps: {steps}", fontsize=9)
    _legend_right(ax_u, handles=[Patch(color=c, label=ACTOR_LABELS[a]) for a, c in ACTOR_COLORS.items()])

    ax_d.plot(x, t["d_a"], marker="o", ms=3, color=PALETTE["accent"], label="D_a inquiry drift")
    ax_d.plot(x, t["d_o"], marker="s", ms=3, color=PALETTE["highlight"], label="D_o inference gap")
    ax_d.set(ylabel="cosine distance")
    _legend_right(ax_d)

    for w, style in WEIGHTINGS.items():
        ax_w.plot(x, t[f"w_{w}"], ls=style, marker="o", ms=3, color=PALETTE["neutral"], label=w)
    ax_w.set(ylabel="weight W_i")
    _legend_right(ax_w)

    for actor, color in ACTOR_COLORS.items():
        mine = (t["actor"] == actor).to_numpy()
        for w, style in WEIGHTINGS.items():
            ax_s.plot(x[mine], t.loc[mine, f"running_saup_{w}"], ls=style, marker="o", ms=3, color=color,
                      label=f"{ACTOR_LABELS[actor]}, {w}")
    ax_s.set(ylabel="SAUP so far", xlabel="step (turn index · a = agent, u = user)")
    _legend_right(ax_s)
    ax_s.set_xticks(x, [f"{ti}·{ACTOR_LABELS.get(a, a)[0]}" for ti, a in zip(t["turn_idx"], t["actor"])],
                    rotation=90, fontsize=7)
    return fig
