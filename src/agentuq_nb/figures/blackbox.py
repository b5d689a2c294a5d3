"""Figures of the black-box families: one trajectory's signals message by message, and TRACER's three readouts
(default, nested, in-sample) beside length on each run."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from agentuq_nb.estimators.base import reference_families
from agentuq_nb.figures.style import PALETTE, use_style

ROLE_COLORS = {"assistant": PALETTE["success"], "user": PALETTE["secondary"], "tool": PALETTE["neutral"]}
#: the per-message structure signals drawn as events (column, label, marker)
EVENTS = (("tool_error", "tool error", "X"), ("repeated_call", "repeated call", "s"),
          ("retried_call", "retried call", "D"), ("hedging", "hedge", "v"), ("apology", "apology", "^"),
          ("inability", "'cannot'", "P"), ("transfer", "transfer", "*"), ("user_frustration", "user frustration", "o"))
COMPONENTS = (("tracer_da", "D_a repetition", PALETTE["highlight"], "o"),
              ("tracer_do_agent", "D_o agent: call vs observation", PALETTE["accent"], "s"),
              ("tracer_do_user", "D_o user: agent vs reply", PALETTE["secondary"], "^"))


def trajectory_signals_figure(turns: pd.DataFrame, title: str = ""):
    """Two panels over the messages of one trajectory (its rows of ``blackbox_turns.parquet``): TRACER's step
    risk at its default parameters (bars, coloured by role; tool results are not steps) with its components;
    below, the structure signals that fired at each message, and the user's largest similarity to an earlier
    message of theirs."""
    use_style()
    t = turns.sort_values("message_idx").reset_index(drop=True)
    x = t["message_idx"].to_numpy()
    fig, (ax, ev) = plt.subplots(2, 1, figsize=(max(6.0, 0.16 * len(t) + 3.0), 5.6), sharex=True,
                                 gridspec_kw={"height_ratios": [3, 2]})
    risk = t["tracer_step_risk"].to_numpy(dtype=float)
    ax.bar(x, np.nan_to_num(risk), color=[ROLE_COLORS.get(r, PALETTE["neutral"]) for r in t["role"]], alpha=0.45,
           width=0.8)
    for column, label, color, marker in COMPONENTS:
        v = t[column].to_numpy(dtype=float)
        ok = np.isfinite(v)
        ax.plot(x[ok], v[ok], ls="", marker=marker, ms=4, color=color, label=label)
    ax.set(ylabel="TRACER step risk", title=title or "One trajectory, message by message")
    handles = [Patch(color=c, alpha=0.45, label=f"risk: {r if r != 'assistant' else 'agent'} step")
               for r, c in ROLE_COLORS.items() if r != "tool"]
    handles += [Line2D([], [], ls="", marker=m, color=c, label=lab) for _, lab, c, m in COMPONENTS]
    ax.legend(handles=handles, fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.02),
              bbox_transform=ax.transAxes)
    fig.subplots_adjust(hspace=0.55)
    rows = []
    for i, (column, label, marker) in enumerate(EVENTS):
        v = t[column].to_numpy(dtype=float)
        hit = np.isfinite(v) & (v > 0)
        ev.scatter(x[hit], np.full(hit.sum(), i), s=18 + 10 * np.minimum(v[hit], 4), marker=marker,
                   color=PALETTE["failure"] if column in ("tool_error", "repeated_call") else PALETTE["neutral"])
        rows.append(f"{label} ({int(np.nansum(v))})")
    tool = (t["role"] == "tool").to_numpy()
    ev.scatter(x[tool], np.full(tool.sum(), len(EVENTS)), marker="|", s=30, color=PALETTE["neutral"])
    rows.append(f"tool result, not a step ({int(tool.sum())})")
    rep = t["user_repetition"].to_numpy(dtype=float)
    ok = np.isfinite(rep)
    ev.scatter(x[ok], np.full(ok.sum(), len(EVENTS) + 1), c=rep[ok], cmap="Greys", vmin=0, vmax=1, s=30, marker="o",
               edgecolors=PALETTE["neutral"], linewidths=0.5)
    rows.append("user repetition (shade = similarity)")
    ev.set_yticks(range(len(rows)), rows, fontsize=7)
    ev.set_ylim(-0.7, len(rows) - 0.3)
    ev.invert_yaxis()
    ev.set(xlabel=f"message index (n = {len(t)} messages)")
    ev.grid(axis="y", alpha=0)
    return fig


READOUTS = (("tracer.default", "TRACER default", PALETTE["neutral"], "o"),
            ("tracer.nested", "TRACER tuned on other tasks (nested)", PALETTE["success"], "s"),
            ("tracer.optimistic", "TRACER tuned on the run itself (in-sample)", PALETTE["failure"], "D"))


def tracer_readouts_figure(long: pd.DataFrame, length: str | None = None):
    """AUROC (95 % CI, tasks resampled) of TRACER's three readouts on each run and pooled, beside the best length
    baseline: how much of a tuned number is in-sample tuning, and how much is length. ``long``: the long table of
    ``compare-runs`` (``run_leaderboard_long.csv``); ``length``: the length baseline drawn (default: the one with the
    highest pooled AUROC)."""
    use_style()
    names = [r for r in dict.fromkeys(long["run"]) if r != "pooled"] + ["pooled"]
    if length is None:
        base = long[long["family"].isin(reference_families()) & (long["run"] == "pooled")]
        length = base.sort_values("auroc", ascending=False)["estimator"].iloc[0] if len(base) else None
    series = list(READOUTS) + ([(length, f"length: {length}", PALETTE["highlight"], "v")] if length else [])
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(names) + 2.5), 4.2))
    width = 0.8 / len(series)
    for k, (estimator, label, color, marker) in enumerate(series):
        part = long[long["estimator"] == estimator].set_index("run").reindex(names)
        x = np.arange(len(names)) - 0.4 + width * (k + 0.5)
        y, lo, hi = (part[c].to_numpy(dtype=float) for c in ("auroc", "auroc_lo", "auroc_hi"))
        ax.errorbar(x, y, yerr=[y - lo, hi - y], ls="", marker=marker, ms=5, color=color, capsize=2, lw=1, label=label)
    ax.axhline(0.5, ls="--", color=PALETTE["neutral"], lw=1)
    ax.axvline(len(names) - 1.5, color=PALETTE["neutral"], lw=0.8)
    n = long[long["estimator"] == READOUTS[0][0]].set_index("run")
    ax.set_xticks(range(len(names)), [f"{_short(r)}\nn={int(n.loc[r, 'n'])}, {int(n.loc[r, 'n_failures'])} fail"
                                      for r in names], fontsize=7, rotation=30, ha="right")
    ax.set(ylabel="AUROC (failure = positive)", ylim=(0, 1), title="TRACER: default, honestly tuned, in-sample")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2)
    return fig


def _short(name: str, limit: int = 26) -> str:
    return name if len(name) <= limit else name[: limit - 9] + "…" + name[-8:]
