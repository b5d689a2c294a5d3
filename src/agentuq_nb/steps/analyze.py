"""``analyze``: results → a run folder in one process: extract, aggregate and evaluate where the run has token
log-probs; the black-box families and the estimator table of every family it holds (with or without log-probs);
where tasks repeat, the multi-trial readout (what ``agentuq-nb trials`` prints); its figures; and one page that
holds it all, ``RUN_DIR/report.html`` (:mod:`agentuq_nb.figures.report`).

A run where every trajectory has one outcome (a production day where all succeeded) or none has a label goes
through as any other: the AUROC is undefined (said once), the forest and the reliability diagram are not drawn,
the page lists each trajectory's scores."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from agentuq_nb.io.outputs import check_run_destination
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, check_failure_threshold
from agentuq_nb.steps.base import Command, FailureThresholdField, NBootField, Reporter, SeedField, Step, StepConfig
from agentuq_nb.steps.blackbox import BlackBoxConfig, BlackBoxEmbedder
from agentuq_nb.steps.evaluate import EvaluateConfig
from agentuq_nb.steps.extract import ExtractConfig, ExtractReport

STEP = Step("analyze", "agentuq-nb analyze RESULTS --out RUN_DIR", ("figures", "report"))
EVALUATED = EvaluateConfig.model_fields


class AnalyzeConfig(StepConfig):
    """The results analyzed, the estimator evaluated, and what else is made."""

    results: Path = ExtractConfig.model_fields["results"]
    sidecar_dir: Optional[Path] = ExtractConfig.model_fields["sidecar_dir"]
    score: Optional[str] = ExtractConfig.model_fields["score"]
    uncertainty: str = EVALUATED["uncertainty"]
    role: str = EVALUATED["role"]
    scorer: Optional[str] = EVALUATED["scorer"]
    failure_threshold: FailureThresholdField
    n_boot: NBootField
    seed: SeedField = Field(description="seed of the bootstrap and the folds")
    blackbox: bool = Field(True, description="also the black-box families (structure, TRACER: from the messages, no "
                           "log-probs needed) and the estimator table of every family the run holds; off: extract, "
                           "aggregate, evaluate only")
    embedder: BlackBoxEmbedder = BlackBoxConfig.model_fields["embedder"]
    figures: bool = Field(True, description="draw the estimator forest, the reliability diagram (and, with "
                          "log-probs, the ROC and accuracy-rejection curves) into RUN_DIR/figures")
    report: bool = Field(True, description="write RUN_DIR/report.html: the outcome counts, the estimator table, the "
                         "figures and every trajectory's failure probability in one offline page")
    reporter: Reporter = Field(default_factory=Reporter, exclude=True, description="what the step says while it "
                               "runs and how each inner step is wrapped (nothing, in a library call)")


@dataclass
class AnalyzeReport:
    extracted: ExtractReport
    summary_counts: str | None = None
    evaluation: dict | None = None
    estimator_table: Any = None
    figures: list[Path] = field(default_factory=list)
    trials: dict | None = None  # the multi-trial readout, where tasks repeat
    page: Path | None = None  # report.html


def run(run_dir: str | os.PathLike | RunDir, config: AnalyzeConfig) -> AnalyzeReport:
    """Extract, aggregate, evaluate, the estimator table, the figures (see the module docstring); ``config.reporter``
    shows each inner step's result as it is made."""
    from agentuq_nb.estimators.token import check_estimator_name
    from agentuq_nb.steps.aggregate import aggregate, summary_counts
    from agentuq_nb.steps.extract import run as extract

    out = Path(RunDir.of(run_dir).path)
    with config.reporter.stage("check", out):  # names checked before any table is replaced
        check_estimator_name(config.uncertainty, config.role)
        check_failure_threshold(config.failure_threshold)
        check_not_another_run(RunDir.of(run_dir), Path(config.results))
    with config.reporter.stage("extract", out):
        report = AnalyzeReport(extract(out, ExtractConfig(results=config.results, sidecar_dir=config.sidecar_dir, score=config.score,
                                                          progress=True)))
    if report.extracted.num_tokens > 0:
        with config.reporter.stage("aggregate", out):
            turns, trajs = aggregate(out)
            report.summary_counts = summary_counts(turns, trajs)
            del turns, trajs  # the summaries are on disk: not resident while evaluate runs
        # imported only now: scipy and sklearn (~80 MiB) are then not resident during extract's peak
        from agentuq_nb.steps.evaluate import run as evaluate

        with config.reporter.stage("evaluate", out):
            report.evaluation = evaluate(out, EvaluateConfig(role=config.role, uncertainty=config.uncertainty, scorer=config.scorer,
                                                             failure_threshold=config.failure_threshold, n_boot=config.n_boot,
                                                             seed=config.seed))
    say_evaluation(report, config.reporter)
    if config.blackbox or report.extracted.num_tokens == 0:
        from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig
        from agentuq_nb.steps.compare_estimators import run as estimator_table
        from agentuq_nb.steps.compare_estimators import show as show_table

        blackbox = BlackBoxConfig(embedder=config.embedder) if config.blackbox else False
        report.estimator_table = estimator_table(out, CompareEstimatorsConfig(
            failure_threshold=config.failure_threshold, n_boot=config.n_boot, seed=config.seed, blackbox=blackbox,
            progress=True, reporter=config.reporter))
        show_table(report.estimator_table, out, None, config.reporter)
    from agentuq_nb.evaluation.multi_trial import tasks_repeat  # scipy: not resident during extract's peak

    rows = RunDir.of(out).rewards()
    if tasks_repeat(rows):
        from agentuq_nb.evaluation.multi_trial import multi_trial_report

        report.trials = multi_trial_report(rows, failure_threshold=config.failure_threshold, n_boot=config.n_boot,
                                           seed=config.seed)[0]
        for line in trials_lines(report.trials, out):
            config.reporter.say(line)
    if config.figures:
        with config.reporter.stage("figures", out):
            report.figures = analysis_figures(out, config.failure_threshold, config.seed)
    if config.report:
        with config.reporter.stage("report", out):
            report.page = write_report(out, config.failure_threshold, report.trials, report.figures)
    return report


def say_evaluation(report: AnalyzeReport, say: Reporter) -> None:
    """What analyze says after its evaluation: what was extracted and aggregated, the evaluation's metrics."""
    from agentuq_nb.steps.evaluate import show

    extracted = report.extracted
    if report.evaluation is not None:
        say.say(f"{extracted.num_simulations} simulations, {extracted.num_tokens} token rows; "
                f"{report.summary_counts} → {extracted.run_dir}")
        show(report.evaluation, say=say)
    else:
        say.say(f"{extracted.num_simulations} simulations, no token log-probs → {extracted.run_dir}")


def show(done: AnalyzeReport, run_dir: Path, config: AnalyzeConfig, say: Reporter) -> None:
    """What the command prints at the end: the figures, the report page, the explorer's command."""
    if done.figures:
        say.say(f"figures → {run_dir / 'figures'}: {', '.join(p.stem for p in done.figures)} (PNG and PDF)")
    if done.page is not None:
        say.say(f"report → {done.page} (one offline page: counts, table, figures, every trajectory)")
    if done.figures or done.page is not None:
        say.say(f"every trajectory, interactively: agentuq-nb explore {run_dir} (→ {run_dir / 'explorer.html'}, which "
                "report.html links)")


COMMAND = Command(summary="Results → RUN_DIR in one process: extract, aggregate and evaluate where the run has token "
                          "log-probs; the black-box families and the estimator table of every family it holds (with "
                          "or without log-probs); its figures.", arguments=("results",), out=True,
                  out_help="run directory to write the tables, summaries and metrics to",
                  options=("sidecar_dir", "uncertainty", "role", "scorer", "failure_threshold", "n_boot", "seed",
                           "blackbox", "embedder", "score", "figures", "report"),
                  help={"embedder": "sentence embeddings of the black-box signals"}, show=show)


def check_not_another_run(run: RunDir, results: Path) -> None:
    """Refuse a folder that holds a run made from other results (by content: :func:`~agentuq_nb.io.files.
    content_digest`): ``analyze`` would replace its tables and keep what it made from them (action samples, …)
    beside the new ones; analyzing the same results again is fine. The rule of every command that extracts:
    :func:`agentuq_nb.io.outputs.check_run_destination`."""
    check_run_destination(run.path, results, command=STEP.name)


def trials_lines(trials: dict, run_dir: str | os.PathLike) -> list[str]:
    """What ``analyze`` says of a run whose tasks repeat: trials per task, pass^k at 1 and at the most trials,
    how many tasks flip verdict, and the command that says more."""
    per = trials["trials_per_task"]
    ks = trials["pass_hat_k"]
    last = max(ks, key=int) if ks else None
    passes = ", ".join(f"pass^{k} {ks[k]['value']:.3f}" for k in dict.fromkeys(["1", last]) if k in ks)
    noise = trials["label_noise"]
    flips = (f"; {noise['n_flipping']} of {noise['n_tasks_with_repeats']} tasks with ≥ 2 trials flip verdict"
             if noise["n_tasks_with_repeats"] else "")
    spread = f"{per['min']}" if per["min"] == per["max"] else f"{per['min']}–{per['max']}"
    return [f"{spread} trials per task ({trials['n_trajectories']} trajectories, {trials['n_tasks']} tasks): "
            f"{passes}{flips}; intervals resample tasks", f"pass^k with CIs and label noise: agentuq-nb trials {run_dir}"]


def analysis_figures(run_dir: str | os.PathLike | RunDir, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                     seed: int = 0) -> list[Path]:
    """Draw and save (PNG + PDF) the run's figures into ``RUN_DIR/figures``: the estimator forest of the run's table,
    the reliability diagram of its best combination beside the best length baseline (:func:`reliability_bins`)
    and, where the run has token log-probs and an evaluation, the ROC and accuracy-rejection curves of the evaluated
    estimator. Figures that need an AUROC are left out of a run where it is undefined. Returns the PNG paths."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from agentuq_nb.figures.calibration import reliability_diagram
    from agentuq_nb.figures.estimators import estimator_forest_figure, has_forest
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

    title = run.manifest().title() or run.path.name
    if run.has("estimator_table"):
        table = read_estimator_table(run)
        if has_forest(table):
            keep(estimator_forest_figure(table, title=f"Failure prediction, {title}"), "estimator_forest")
        bins = reliability_bins(run, table, failure_threshold, seed)
        if bins:
            n = int(next(iter(bins.values()))["count"].sum())
            keep(reliability_diagram(bins, title=f"Out-of-fold failure probabilities, {title} (n = {n})"),
                 "reliability")
    if run.has("eval_metrics") and run.file("eval_curves").exists():
        metrics = json.loads(run.file("eval_metrics").read_text())
        curves = pd.read_csv(run.file("eval_curves"))
        label = metrics.get("uncertainty") or metrics.get("estimator") or "uncertainty"
        if (curves["curve"] == "roc").any():
            keep(roc_figure(curves, metrics, str(label)), "roc")
        keep(accuracy_rejection_figure(curves, metrics, str(label)), "accuracy_rejection")
    return drawn


def reliability_bins(run: RunDir, table, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                     seed: int = 0) -> dict:
    """Reliability tables (equal-mass bins: 10 from 100 trajectories on, else 5) of the combination with the lowest
    Brier score (its out-of-fold probabilities, ``combined_scores.parquet``) and of the table's best length baseline
    as a Platt probability cross-fitted by task: what the run's best failure probability gives beside what length
    alone gives. Empty when the run has no combination (one outcome, or no labels)."""
    import numpy as np

    from agentuq_nb.evaluation.calibration import cross_fitted_probabilities, reliability_table
    from agentuq_nb.evaluation.multi_trial import task_labels
    from agentuq_nb.records.keys import key_dtypes
    from agentuq_nb.records.outcomes import failure_labels
    from agentuq_nb.records.tokens import TRAJECTORY_KEYS

    combined = table[(table["family"] == "combined") & table["brier"].notna()].sort_values("brier", kind="stable")
    if combined.empty or not run.has("combined_scores"):
        return {}
    best = str(combined["estimator"].iloc[0])
    scores = key_dtypes(run.read_frame("combined_scores"))
    rows = key_dtypes(run.rewards()).merge(scores, on=TRAJECTORY_KEYS, how="inner")
    rows = rows[np.isfinite(rows["reward"].to_numpy(dtype=float))].reset_index(drop=True)
    failed = failure_labels(rows["reward"].to_numpy(dtype=float), failure_threshold)
    n_bins = 10 if len(rows) >= 100 else 5
    out = {}
    prob = rows[best].to_numpy(dtype=float)
    ok = np.isfinite(prob)
    out[best] = reliability_table(prob[ok], failed[ok], n_bins)
    base = table["length_baseline"].dropna() if "length_baseline" in table else []
    if len(base):
        from agentuq_nb.estimators import get

        name = str(base.iloc[0])
        length = key_dtypes(get(name).scores(run).rename(name).reset_index())
        u = rows[TRAJECTORY_KEYS].merge(length, on=TRAJECTORY_KEYS, how="left")[name].to_numpy(dtype=float)
        platt = cross_fitted_probabilities(u, failed, task_labels(rows), "platt", seed=seed).prob
        ok = np.isfinite(platt)
        out[f"{name} (Platt, cross-fitted by task)"] = reliability_table(platt[ok], failed[ok], n_bins)
    return out


#: estimators whose values the report lists per trajectory after the failure probabilities, where the run has them
LISTED_SIGNALS = ("tracer.default", "structure.tool_errors", "num_messages")


def trajectory_rows(run: RunDir, table, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD):
    """One row per trajectory for the report: keys, ``outcome`` (failed, succeeded, no reward), ``reward``, the
    out-of-fold failure probabilities of the two combinations with the lowest Brier score (``P(failure) NAME``)
    and :data:`LISTED_SIGNALS`, sorted by the first probability (else the first signal), highest first; and a
    sentence saying what the columns are."""
    import numpy as np

    from agentuq_nb.estimators import get
    from agentuq_nb.estimators.scores import score_table
    from agentuq_nb.records.outcomes import failure_labels

    combined = table[(table["family"] == "combined") & table["brier"].notna()].sort_values("brier", kind="stable")
    best = [str(e) for e in combined["estimator"].head(2)]
    signals = [e for e in LISTED_SIGNALS if get(e).is_available(run)]
    frame, _ = score_table(run, [*best, *signals])
    reward = frame["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(reward)
    failed = failure_labels(np.where(labelled, reward, np.inf), failure_threshold)
    frame.insert(4, "outcome", np.where(~labelled, "no reward", np.where(failed, "failed", "succeeded")))
    frame = frame.rename(columns={b: f"P(failure) {b}" for b in best})
    order = f"P(failure) {best[0]}" if best else signals[0] if signals else "reward"
    frame = frame.sort_values(order, ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    columns = ["domain", "task_id", "trial", "seed", "outcome", "reward", *[c for c in frame.columns if c not in
                                                                            ("domain", "task_id", "trial", "seed",
                                                                             "outcome", "reward")]]
    if best:
        note = (f"P(failure): out-of-fold failure probabilities (cross-fitted by task: no trajectory scored by a fit "
                f"that saw its task) of the combinations with the lowest Brier score; sorted by {best[0]}'s, highest "
                f"first. Then {', '.join(signals)}, as they are.")
    else:
        note = (f"No combination could be fitted (it needs both outcomes): the trajectories are sorted by {order}, "
                "highest first" + (" - a signal fitted on no label." if order == "tracer.default" else "."))
    return frame[columns], note


def write_report(run_dir: str | os.PathLike | RunDir, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                 trials: dict | None = None, figures: list[Path] | None = None) -> Path:
    """``RUN_DIR/report.html`` (:func:`agentuq_nb.figures.report.run_report`) from the run's tables and figures (the
    PNGs given, else those ``analysis_figures`` left in ``RUN_DIR/figures``), published as one commit; returns its
    path."""
    import numpy as np

    from agentuq_nb.figures.report import run_report, undefined_reason
    from agentuq_nb.records.outcomes import failure_labels
    from agentuq_nb.steps.compare_estimators import read_estimator_table

    run = RunDir.of(run_dir)
    manifest = run.manifest()
    table = read_estimator_table(run) if run.has("estimator_table") else None
    rewards = run.rewards()["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(rewards)
    failed = int(failure_labels(rewards[labelled], failure_threshold).sum())
    counts = [("trajectories", len(rewards)), ("failed", failed), ("succeeded", int(labelled.sum()) - failed)]
    if (~labelled).any():
        counts.append(("without a reward", int((~labelled).sum())))
    warning = undefined_reason(table) if table is not None else "no estimator table: run agentuq-nb compare-estimators"
    notes = [f"failure = reward < {failure_threshold:g}; every interval is a 95% percentile bootstrap that resamples "
             "tasks (with all their trials)"]
    captions = {"estimator_forest": "The estimator forest", "reliability": "Calibration",
                "roc": "ROC of the evaluated estimator", "accuracy_rejection": "Accuracy-rejection curve"}
    if figures is None:
        figures = [run.file("figures") / f"{name}.png" for name in captions]
    shown = [(captions.get(Path(p).stem, Path(p).stem), p) for p in figures if Path(p).is_file()]
    rows, note = trajectory_rows(run, table if table is not None else _empty_table(), failure_threshold)
    models = ", ".join(f"{role}: {model}" for role, model in manifest.models.items())
    subtitle = " · ".join(x for x in [f"results: {manifest.results}" if manifest.results else None, models or None,
                                      f"run folder: {run.path}"] if x)
    page = run_report(manifest.title() or run.path.name, subtitle, counts, warning, notes,
                      table if table is not None else _empty_table(), shown, rows, note, run.file("explorer"),
                      run.file("predictions"), trials_lines(trials, run.path) if trials else ())
    based_on = run.based_on(*[name for name in ("estimator_table", "trajectories", "combined_scores") if run.has(name)])
    with run.commit(STEP.name) as commit:
        commit.write_with("report", lambda p: p.write_text(page, encoding="utf-8"), based_on)
    return run.file("report")


def _empty_table():
    import pandas as pd

    return pd.DataFrame(columns=["estimator", "family", "n", "n_failures", "auroc", "brier"])
