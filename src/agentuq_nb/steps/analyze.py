"""``analyze``: results → a run folder in one process: extract, aggregate and evaluate where the run has token
log-probs; the black-box families and the estimator table of every family it holds (with or without log-probs);
its figures."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, FailureThreshold, check_failure_threshold
from agentuq_nb.steps.base import Reporter, Step, StepConfig
from agentuq_nb.steps.blackbox import BlackBoxConfig
from agentuq_nb.steps.evaluate import EvaluateConfig
from agentuq_nb.steps.extract import ExtractConfig, ExtractReport

STEP = Step("analyze", "agentuq-nb analyze RESULTS --out RUN_DIR", ("figures",))
EVALUATED = EvaluateConfig.model_fields


class AnalyzeConfig(StepConfig):
    """The results analyzed, the estimator evaluated, and what else is made."""

    results: Path = ExtractConfig.model_fields["results"]
    sidecar_dir: Optional[Path] = ExtractConfig.model_fields["sidecar_dir"]
    score: Optional[str] = ExtractConfig.model_fields["score"]
    uncertainty: str = EVALUATED["uncertainty"]
    role: str = EVALUATED["role"]
    scorer: Optional[str] = EVALUATED["scorer"]
    failure_threshold: FailureThreshold = Field(DEFAULT_FAILURE_THRESHOLD, description="failure = reward < threshold")
    n_boot: int = Field(DEFAULT_N_BOOT, ge=0, description="bootstrap resamples for the 95% CIs (0: none)")
    seed: int = Field(0, description="seed of the bootstrap and the folds")
    blackbox: bool = Field(True, description="also the black-box families (structure, TRACER: from the messages, no "
                           "log-probs needed) and the estimator table of every family the run holds; off: extract, "
                           "aggregate, evaluate only")
    embedder: Literal["minilm", "hash", "none"] = BlackBoxConfig.model_fields["embedder"]
    figures: bool = Field(True, description="draw the estimator forest (and, with log-probs, the ROC and "
                          "accuracy-rejection curves) into RUN_DIR/figures")


@dataclass
class AnalyzeReport:
    extracted: ExtractReport
    summary_counts: str | None = None
    evaluation: dict | None = None
    estimator_table: Any = None
    figures: list[Path] = field(default_factory=list)


def run(run_dir: str | os.PathLike | RunDir, config: AnalyzeConfig, reporter: Reporter = Reporter()) -> AnalyzeReport:
    """Extract, aggregate, evaluate, the estimator table, the figures (see the module docstring); ``reporter``
    shows each inner step's result as it is made."""
    from agentuq_nb.estimators.token import check_estimator_name
    from agentuq_nb.steps.aggregate import aggregate, summary_counts
    from agentuq_nb.steps.extract import run as extract

    c = config
    out = Path(RunDir.of(run_dir).path)
    with reporter.stage("check", out):  # names checked before any table is replaced
        check_estimator_name(c.uncertainty, c.role)
        check_failure_threshold(c.failure_threshold)
    with reporter.stage("extract", out):
        report = AnalyzeReport(extract(out, ExtractConfig(results=c.results, sidecar_dir=c.sidecar_dir, score=c.score,
                                                          progress=True)))
    if report.extracted.num_tokens > 0:
        with reporter.stage("aggregate", out):
            turns, trajs = aggregate(out)
            report.summary_counts = summary_counts(turns, trajs)
            del turns, trajs  # the summaries are on disk: not resident while evaluate runs
        # imported only now: scipy and sklearn (~80 MiB) are then not resident during extract's peak
        from agentuq_nb.steps.evaluate import run as evaluate

        with reporter.stage("evaluate", out):
            report.evaluation = evaluate(out, EvaluateConfig(role=c.role, uncertainty=c.uncertainty, scorer=c.scorer,
                                                             failure_threshold=c.failure_threshold, n_boot=c.n_boot,
                                                             seed=c.seed))
    reporter.show("evaluate", report)
    if c.blackbox or report.extracted.num_tokens == 0:
        from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig, estimator_table

        blackbox = BlackBoxConfig(embedder=c.embedder) if c.blackbox else False
        report.estimator_table = estimator_table(out, CompareEstimatorsConfig(
            failure_threshold=c.failure_threshold, n_boot=c.n_boot, seed=c.seed, blackbox=blackbox, progress=True),
            reporter)
        reporter.show("compare-estimators", report.estimator_table)
    if c.figures:
        with reporter.stage("figures", out):
            report.figures = analysis_figures(out)
    return report


def analysis_figures(run_dir: str | os.PathLike | RunDir) -> list[Path]:
    """Draw and save (PNG + PDF) the run's figures into ``RUN_DIR/figures``: the estimator forest of the run's table
    and, where the run has token log-probs and an evaluation, the ROC and accuracy-rejection curves of the evaluated
    estimator. Returns the PNG paths."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from agentuq_nb.figures.estimators import estimator_forest_figure
    from agentuq_nb.figures.failure_prediction import accuracy_rejection_figure, roc_figure
    from agentuq_nb.figures.style import save
    from agentuq_nb.steps.compare_estimators import read_estimator_table

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
