"""The figures ``agentuq-nb analyze`` draws into ``RUN_DIR/figures``: the estimator forest of the run's table and,
where the run has token log-probs and an evaluation, the ROC and accuracy-rejection curves of the evaluated
estimator. Each is a function of :mod:`agentuq_nb.figures`; this module only reads the run's tables and saves."""
from __future__ import annotations

import json
import os
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from agentuq_nb.evaluation.estimator_table import read_estimator_table
from agentuq_nb.figures.estimators import estimator_forest_figure
from agentuq_nb.figures.failure_prediction import accuracy_rejection_figure, roc_figure
from agentuq_nb.figures.style import save
from agentuq_nb.io.store.rundir import RunDir


def analysis_figures(run_dir: str | os.PathLike | RunDir) -> list[Path]:
    """Draw and save (PNG + PDF) the run's figures into ``RUN_DIR/figures``; returns the PNG paths."""
    run = RunDir.of(run_dir)
    folder = run.file("figures")
    drawn: list[Path] = []

    def keep(fig, name: str) -> None:
        try:
            drawn.append(save(fig, name, folder)[0])
        finally:
            plt.close(fig)

    if run.has("estimator_table"):
        table = read_estimator_table(run)
        keep(estimator_forest_figure(table, title=f"Failure prediction on {run.path.name}"), "estimator_forest")
    if run.has("eval_metrics") and run.file("eval_curves").exists():
        metrics = json.loads(run.file("eval_metrics").read_text())
        curves = pd.read_csv(run.file("eval_curves"))
        label = metrics.get("uncertainty") or metrics.get("estimator") or "uncertainty"
        if (curves["curve"] == "roc").any():
            keep(roc_figure(curves, metrics, str(label)), "roc")
        keep(accuracy_rejection_figure(curves, metrics, str(label)), "accuracy_rejection")
    return drawn
