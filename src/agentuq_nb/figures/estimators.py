"""Forest plot of the estimator table: AUROC with bootstrap CI per estimator, baselines marked."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, use_style

FAMILY_COLORS = {"token": PALETTE["success"], "saup": PALETTE["accent"], "early_warning": PALETTE["secondary"],
                 "verbalized": PALETTE["highlight"], "baseline": PALETTE["neutral"],
                 "action": PALETTE["failure"], "combined": "#000000"}


def estimator_forest_figure(table: pd.DataFrame, metric: str = "auroc", max_rows: int | None = None,
                            mark_length: bool = True):
    """One row per estimator (``evaluation.compare_estimators`` output), sorted by ``metric``.

    Baselines (message count, tool calls, agent characters) are grey squares; inverted estimators
    are marked with "(inv.)"; undefined metrics are left out. With ``mark_length`` and a table that has
    ``beats_length_baseline`` (see :mod:`agentuq_nb.evaluation.length_control`), an estimator that does not
    beat the best length baseline is drawn hollow with a grey interval and "(≤ length)" in its label.
    """
    use_style()
    t = table[np.isfinite(table[metric].to_numpy(dtype=float))].sort_values(metric, ascending=True)
    if max_rows is not None:
        t = t.tail(max_rows)
    fig, ax = plt.subplots(figsize=(5.6, 0.6 + 0.24 * max(len(t), 1)))
    marked = (t["beats_length_baseline"].astype(str).eq("False").to_numpy()
              if mark_length and "beats_length_baseline" in t else np.zeros(len(t), bool))
    for y, ((_, r), weak) in enumerate(zip(t.iterrows(), marked)):
        base = r["family"] == "baseline"
        color = FAMILY_COLORS.get(r["family"], PALETTE["neutral"])
        lo, hi = r.get(f"{metric}_lo"), r.get(f"{metric}_hi")
        if np.isfinite(lo) and np.isfinite(hi):
            ax.plot([lo, hi], [y, y], color=PALETTE["neutral"] if weak else color, lw=1.5, alpha=0.5 if weak else 1)
        ax.plot(r[metric], y, marker="s" if base else "o", ms=5, color=color, mfc="white" if weak else color)
    labels = [f"{e}{' (inv.)' if inv else ''}{' [baseline]' if fam == 'baseline' else ''}{' (≤ length)' if weak else ''}"
              for e, inv, fam, weak in zip(t["estimator"], t["invert"].astype(bool), t["family"], marked)]
    ax.set_yticks(range(len(t)), labels, fontsize=7)
    if metric == "auroc":
        ax.axvline(0.5, ls="--", color=PALETTE["neutral"], lw=1)
        ax.set_xlim(0, 1)
    base = t[t["family"] == "baseline"]
    if len(base):
        ax.axvline(base[metric].max(), ls=":", color=PALETTE["neutral"], lw=1, label="best baseline")
    if marked.any():
        ax.plot([], [], marker="o", ls="", color=PALETTE["neutral"], mfc="white",
                label="length-controlled AUROC ≤ best length baseline")
    if len(base) or marked.any():
        ax.legend(loc="best", fontsize=7)
    ax.set(xlabel=f"{metric.upper()} (95% bootstrap CI)", title="Estimators: failure prediction")
    ax.grid(axis="y", alpha=0)
    return fig
