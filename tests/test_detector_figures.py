"""The detector's figures draw the task prior only where a model could read a task's history: on protocols whose
folds let tasks recur (leave one run out), beside the detector on the same trajectories - not on the task-disjoint
protocols, where the card's baseline check does not compare with it either."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from agentuq_nb.figures.detector import ablation_figure, protocols_figure


def protocol_row(protocol: str, auroc: float, on_prior: float) -> dict:
    return {"protocol": protocol, "n": 400, "n_failures": 127, "auroc": auroc, "auroc_lo": auroc - 0.05,
            "auroc_hi": auroc + 0.05, "length_auroc": 0.698, "length_auroc_lo": 0.637, "length_auroc_hi": 0.758,
            "vs_length": "not distinguishable from", "prior_n": 360, "prior_auroc": 0.746, "prior_auroc_lo": 0.69,
            "prior_auroc_hi": 0.80, "auroc_on_prior_rows": on_prior, "vs_prior": "not distinguishable from"}


def drawn(ax, label: str) -> list[float]:
    """The x of each point drawn under ``label`` (errorbar containers)."""
    return [float(c.lines[0].get_xdata()[0]) for c in ax.containers if c.get_label() == label]


def test_the_prior_is_drawn_only_where_tasks_recur_beside_the_detector_on_its_rows():
    table = pd.DataFrame([protocol_row("within_run", 0.723, 0.743), protocol_row("leave_one_run_out", 0.745, 0.763),
                          protocol_row("leave_run_and_task_out", 0.706, 0.721)])
    fig = protocols_figure(table)
    ax = fig.axes[0]
    assert drawn(ax, "task prior (the task's failures in the other runs)") == [0.746]
    assert drawn(ax, "the detector on the trajectories the task prior scores") == [0.763]
    assert drawn(ax, "the detector") == [0.723, 0.745, 0.706]
    notes = [t.get_text() for t in ax.texts]
    assert sum("prior: tasks held out" in t for t in notes) == 2 and sum("prior (n=360)" in t for t in notes) == 1
    plt.close(fig)


def test_the_ablation_draws_the_prior_line_only_on_protocols_where_tasks_recur():
    rows = [{**protocol_row(p, a, a), "feature_set": s} for p in ("within_run", "leave_one_run_out")
            for s, a in (("length", 0.70), ("all", 0.74))]
    fig = ablation_figure(pd.DataFrame(rows))
    dashed = [[line for line in ax.lines if line.get_linestyle() == "--"] for ax in fig.axes if ax.get_title()]
    assert [len(d) for d in dashed] == [0, 1] and float(dashed[1][0].get_xdata()[0]) == 0.746
    plt.close(fig)
