"""Forest plot of the estimator table: AUROC with bootstrap CI per estimator, baselines marked."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, use_style

FAMILY_COLORS = {"token": PALETTE["success"], "saup": PALETTE["accent"], "early_warning": PALETTE["secondary"],
                 "verbalized": PALETTE["highlight"], "baseline": PALETTE["neutral"],
                 "action": PALETTE["failure"]}


def estimator_forest_figure(table: pd.DataFrame, metric: str = "auroc", max_rows: int | None = None):
    """One row per estimator (``evaluation.compare_estimators`` output), sorted by ``metric``.

    Baselines (message count, tool calls, agent characters) are grey squares; inverted estimators
    are marked with "(inv.)"; undefined metrics are left out.
    """
    use_style()
    t = table[np.isfinite(table[metric].to_numpy(dtype=float))].sort_values(metric, ascending=True)
    if max_rows is not None:
        t = t.tail(max_rows)
    fig, ax = plt.subplots(figsize=(5.6, 0.6 + 0.24 * max(len(t), 1)))
    for y, (_, r) in enumerate(t.iterrows()):
        base = r["family"] == "baseline"
        color = FAMILY_COLORS.get(r["family"], PALETTE["neutral"])
        lo, hi = r.get(f"{metric}_lo"), r.get(f"{metric}_hi")
        if np.isfinite(lo) and np.isfinite(hi):
            ax.plot([lo, hi], [y, y], color=color, lw=1.5)
        ax.plot(r[metric], y, marker="s" if base else "o", ms=5, color=color)
    labels = [f"{e}{' (inv.)' if inv else ''}{' [baseline]' if fam == 'baseline' else ''}"
              for e, inv, fam in zip(t["estimator"], t["invert"].astype(bool), t["family"])]
    ax.set_yticks(range(len(t)), labels, fontsize=7)
    if metric == "auroc":
        ax.axvline(0.5, ls="--", color=PALETTE["neutral"], lw=1)
        ax.set_xlim(0, 1)
    base = t[t["family"] == "baseline"]
    if len(base):
        ax.axvline(base[metric].max(), ls=":", color=PALETTE["neutral"], lw=1, label="best baseline")
        ax.legend(loc="lower right", fontsize=7)
    ax.set(xlabel=f"{metric.upper()} (95% bootstrap CI)", title="Estimators: failure prediction")
    ax.grid(axis="y", alpha=0)
    return fig
