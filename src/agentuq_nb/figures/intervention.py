"""Figures of the intervention study (notebook 12): what acting on uncertainty buys, against the
intervention rate, beside random intervention at the same rates and the oracle."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, SERIES, use_style

#: the two panels: statistic of :func:`agentuq_nb.intervention.outcomes.policy_summary` and its axis label
CURVE_PANELS = (("success_all", "success over all tasks\n(escalated = not solved)"),
                ("success_non_escalated", "success over non-escalated tasks"))


def curve_label(policy, action) -> str:
    """A line's legend label: the policy, and what ``random`` does when its coin comes up."""
    if policy == "random" and isinstance(action, str):
        return f"random ({action}), equal rate"
    return str(policy)


def error_bars(t: pd.DataFrame, name: str) -> np.ndarray | None:
    """(2, n) distances from a statistic to its interval's ends (None without interval columns)."""
    if f"{name}_lo" not in t or f"{name}_hi" not in t:
        return None
    err = np.vstack([t[name] - t[f"{name}_lo"], t[f"{name}_hi"] - t[name]]).astype(float)
    return np.clip(np.nan_to_num(err, nan=0.0), 0, None)


def intervention_curve_figure(summary: pd.DataFrame, title: str = "Acting on uncertainty",
                              x: str = "intervention_rate"):
    """Success over all tasks (left) and over the non-escalated tasks (right) against the intervention
    rate: one line per policy over its thresholds (``random`` at the equal rates dashed, its own line per
    action), ``observe`` (no intervention) and ``oracle`` as single points, 95% intervals as error bars
    on both axes.

    ``summary``: rows of :func:`agentuq_nb.intervention.outcomes.policy_summary` (and of
    ``defer_curve_from_observe`` / ``oracle_defer_summary``): ``policy``, ``action``, ``x`` and the
    panels' statistics, each with ``_lo``/``_hi``. Rows are grouped into lines by ``(policy, action)``
    (``line`` when the frame has it, e.g. to tell a simulated curve from an exact one)."""
    missing = sorted({"policy", x, *(name for name, _ in CURVE_PANELS)} - set(summary.columns))
    if missing:
        raise ValueError(f"summary lacks the column(s) {', '.join(missing)}: pass policy_summary(...) rows")
    use_style()
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), sharex=True)
    action = summary["action"] if "action" in summary else pd.Series(None, index=summary.index)
    labels = (summary["line"].astype(str) if "line" in summary
              else pd.Series([curve_label(p, a) for p, a in zip(summary["policy"], action)], index=summary.index))
    colors = iter(SERIES)
    for label in pd.unique(labels):
        t = summary[labels == label].sort_values(x)
        policy = t["policy"].iloc[0]
        if policy == "oracle":
            style = {"fmt": "*", "ms": 11, "color": PALETTE["highlight"], "label": "oracle (defers exactly the failures)"}
        elif policy == "observe":
            style = {"fmt": "s", "ms": 6, "color": PALETTE["neutral"], "label": "observe (no intervention)"}
        else:
            dashed = policy == "random"
            style = {"fmt": "--o" if dashed else "-o", "ms": 4, "lw": 1.5, "color": next(colors), "label": label,
                     "alpha": 0.8 if dashed else 1.0}
        for ax, (name, _) in zip(axes, CURVE_PANELS):
            ax.errorbar(t[x], t[name], yerr=error_bars(t, name), xerr=error_bars(t, x), capsize=2, **style)
    for ax, (_, ylabel) in zip(axes, CURVE_PANELS):
        ax.set(xlabel=x.replace("_", " "), ylabel=ylabel, ylim=(-0.03, 1.03))
    axes[0].set_title(title)
    axes[1].legend(loc="best", fontsize=7)
    fig.tight_layout()
    return fig
