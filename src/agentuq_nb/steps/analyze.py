"""``analyze``: results → a run folder in one process: extract, aggregate and evaluate where the run has token
log-probs; the black-box families and the estimator table of every family it holds (with or without log-probs; a
τ²-bench judge summary's own verdicts imported first, as ``import-scores`` does: ``external.<its prompt>``);
where tasks repeat, the multi-trial readout (what ``agentuq-nb trials`` prints); its figures; and one page that
holds it all, ``RUN_DIR/report.html`` (:mod:`agentuq_nb.figures.report`).

A run where every trajectory has one outcome (a production day where all succeeded) or none has a label goes
through as any other: the AUROC is undefined (said once), the forest and the reliability diagram are not drawn,
the page lists each trajectory's scores."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from agentuq_nb.io.errors import MixedRunError, StaleArtifactError
from agentuq_nb.io.outputs import check_run_destination
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.records.reward_checks import TASK_MISMATCH
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import (
    BlackBoxEmbedder,
    Command,
    FailureThresholdField,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
)
from agentuq_nb.steps.blackbox import BlackBoxConfig
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
    detector: Optional[Path] = Field(None, description="a detector folder (agentuq-nb train-detector): applied to the "
                                     "run (agentuq-nb predict) before the estimator table, so the table holds the "
                                     "detector family and report.html ranks the trajectories by it")
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
    predictions: Any = None  # the detector's predictions, when one was given
    imported: Any = None  # a τ²-bench judge summary's own verdicts (external.<its prompt>), when the results are one


def run(run_dir: str | os.PathLike | RunDir, config: AnalyzeConfig) -> AnalyzeReport:
    """Extract, aggregate, evaluate, the estimator table, the figures (see the module docstring); ``config.reporter``
    shows each inner step's result as it is made."""
    from agentuq_nb.estimators.token import check_estimator_name
    from agentuq_nb.steps.aggregate import run as aggregate
    from agentuq_nb.steps.extract import run as extract
    from agentuq_nb.uq.aggregation import summary_counts

    folder = RunDir.of(run_dir)  # opened once: every inner step and the figures and report take this one
    out = folder.path
    with config.reporter.stage("check", out):  # names checked before any table is replaced (the threshold: by config)
        check_estimator_name(config.uncertainty, config.role)
        # a folder holding a run of other results (by content) is refused: analyze would replace its tables and keep
        # what was made from them beside the new ones; the same results again are fine (every command that extracts)
        check_run_destination(out, config.results, command=STEP.name)
    with config.reporter.stage("extract", out):
        report = AnalyzeReport(extract(folder, ExtractConfig(results=config.results, sidecar_dir=config.sidecar_dir, score=config.score,
                                                          progress=True)))
    if report.extracted.num_tokens > 0:
        with config.reporter.stage("aggregate", out):
            turns, trajs = aggregate(folder)
            report.summary_counts = summary_counts(turns, trajs)
            del turns, trajs  # the summaries are on disk: not resident while evaluate runs
        # imported only now: scipy and sklearn (~80 MiB) are then not resident during extract's peak
        from agentuq_nb.steps.evaluate import run as evaluate
        from agentuq_nb.steps.evaluate import show as show_evaluation

        with config.reporter.stage("evaluate", out):
            report.evaluation = evaluate(folder, EvaluateConfig(role=config.role, uncertainty=config.uncertainty, scorer=config.scorer,
                                                             failure_threshold=config.failure_threshold, n_boot=config.n_boot,
                                                             seed=config.seed))
        # what was extracted and aggregated, then the evaluation as evaluate shows it
        config.reporter.say(f"{report.extracted.num_simulations} simulations, {report.extracted.num_tokens} token "
                            f"rows; {report.summary_counts} → {report.extracted.run_dir}")
        show_evaluation(report.evaluation, out, None, config.reporter)
    else:
        config.reporter.say(f"{report.extracted.num_simulations} simulations, no token log-probs → "
                            f"{report.extracted.run_dir}")
    from agentuq_nb.io.ingest import judge_summary

    if folder.manifest().layout == judge_summary.LAYOUT:  # the file's own verdicts beside every family
        from agentuq_nb.steps.import_scores import ImportScoresConfig
        from agentuq_nb.steps.import_scores import run as import_scores
        from agentuq_nb.steps.import_scores import show as show_imported

        with config.reporter.stage("import-scores", out):
            report.imported = import_scores(folder, ImportScoresConfig(file=config.results))
        show_imported(report.imported, out, None, config.reporter)
    if config.detector is not None:
        from agentuq_nb.steps.predict import PredictConfig
        from agentuq_nb.steps.predict import run as predict
        from agentuq_nb.steps.predict import show as show_predictions

        with config.reporter.stage("predict", out):
            report.predictions = predict(folder, PredictConfig(detector=config.detector, failure_threshold=config.
                                                            failure_threshold, n_boot=config.n_boot, seed=config.seed))
        show_predictions(report.predictions, out, None, config.reporter)
    if config.blackbox or report.extracted.num_tokens == 0:
        from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig
        from agentuq_nb.steps.compare_estimators import run as estimator_table
        from agentuq_nb.steps.compare_estimators import show as show_table

        blackbox = BlackBoxConfig(embedder=config.embedder) if config.blackbox else False
        report.estimator_table = estimator_table(folder, CompareEstimatorsConfig(
            failure_threshold=config.failure_threshold, n_boot=config.n_boot, seed=config.seed, blackbox=blackbox,
            progress=True, reporter=config.reporter))
        show_table(report.estimator_table, out, None, config.reporter)
    # the run's trajectories labelled once (and their tasks numbered), handed to the multi-trial readout, the figures
    # and the report
    outcomes = folder.outcomes(config.failure_threshold)
    if outcomes.tasks_repeat:
        from agentuq_nb.evaluation.multi_trial import multi_trial_readout  # scipy: not resident during extract's peak

        report.trials = multi_trial_readout(outcomes, n_boot=config.n_boot, seed=config.seed)[0]
        for line in trials_lines(report.trials, out):
            config.reporter.say(line)
    if config.figures:
        with config.reporter.stage("figures", out):
            report.figures = analysis_figures(folder, outcomes, config.seed)
    if config.report:
        with config.reporter.stage("report", out):
            gaps = report.estimator_table.gaps if report.estimator_table is not None else None
            settings = config.model_dump(mode="json", include={"n_boot", "seed", "embedder", "blackbox", "uncertainty", "role",
                                                  "scorer"})
            report.page = write_report(folder, outcomes, report.trials, report.figures, gaps, settings)
    return report


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
                           "blackbox", "embedder", "score", "figures", "report", "detector"),
                  help={"embedder": "sentence embeddings of the black-box signals",
                        "detector": "a detector folder (train-detector) applied to the run; the report ranks by it"},
                  show=show)


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


def analysis_figures(run_dir: str | os.PathLike | RunDir, outcomes: Outcomes | None = None, seed: int = 0) -> list[Path]:
    """Draw and save (PNG + PDF) the run's figures into ``RUN_DIR/figures``: the estimator forest of the run's table,
    the reliability diagram of its best combination beside the best length baseline (:func:`reliability_bins`, on
    ``outcomes``: the run's trajectories labelled, ``RunDir.outcomes``; None: at the default failure threshold)
    and, where the run has token log-probs and an evaluation, the ROC and accuracy-rejection curves of the evaluated
    estimator. Figures that need an AUROC are left out of a run where it is undefined. Returns the PNG paths."""
    import matplotlib.pyplot as plt

    from agentuq_nb.figures.calibration import reliability_diagram
    from agentuq_nb.figures.estimators import estimator_forest_figure, has_forest
    from agentuq_nb.figures.failure_prediction import accuracy_rejection_figure, roc_figure
    from agentuq_nb.figures.style import save
    from agentuq_nb.io.store.artifacts import read_estimator_table

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
        bins = reliability_bins(run, table, run.outcomes() if outcomes is None else outcomes, seed)
        if bins:
            n = int(next(iter(bins.values()))["count"].sum())
            keep(reliability_diagram(bins, title=f"Out-of-fold failure probabilities, {title} (n = {n})"),
                 "reliability")
    evaluated = evaluation_curves(run)
    if evaluated is not None:
        metrics, curves = evaluated
        label = metrics.get("uncertainty") or metrics.get("estimator") or "uncertainty"
        if (curves["curve"] == "roc").any():
            keep(roc_figure(curves, metrics, str(label)), "roc")
        keep(accuracy_rejection_figure(curves, metrics, str(label)), "accuracy_rejection")
    return drawn


def evaluation_curves(run: RunDir):
    """``(eval_metrics, eval_curves)`` of the run's evaluation (the evaluate step's), or None where it has none or
    they are not the current run's (computed before its tables were replaced, or another run's files): no figure
    is drawn of them then."""
    if not (run.has("eval_metrics") and run.has("eval_curves")):
        return None
    from agentuq_nb.io.store.artifacts import read_eval_curves, read_json_artifact

    try:
        return read_json_artifact(run, "eval_metrics"), read_eval_curves(run)
    except (StaleArtifactError, MixedRunError):
        return None


def reliability_bins(run: RunDir, table, outcomes: Outcomes, seed: int = 0) -> dict:
    """Reliability tables (equal-mass bins: 10 from 100 trajectories on, else 5) of the combination with the lowest
    Brier score (its out-of-fold probabilities, ``combined_scores.parquet``) and of the table's best length baseline
    as a Platt probability cross-fitted by task: what the run's best failure probability gives beside what length
    alone gives, on the run's labelled trajectories (``outcomes``). Empty when the run has no combination (one
    outcome, or no labels)."""
    import numpy as np

    from agentuq_nb.estimators.base import combination_families
    from agentuq_nb.evaluation.calibration import cross_fitted_probabilities, reliability_table
    from agentuq_nb.records.keys import key_dtypes

    combined = table[table["family"].isin(combination_families()) & table["brier"].notna()].sort_values(
        "brier", kind="stable")
    if combined.empty or not run.has("combined_scores"):
        return {}
    best = str(combined["estimator"].iloc[0])
    scores = key_dtypes(run.read_frame("combined_scores"))
    # the run's trajectories with their labels and tasks as the outcomes carry them (made once, not again here)
    rows = outcomes.frame().assign(task=outcomes.tasks).merge(scores, on=TRAJECTORY_KEYS, how="inner")
    rows = rows[np.isfinite(rows["reward"].to_numpy(dtype=float))].reset_index(drop=True)
    failed = rows.pop("failed").to_numpy(dtype=bool)
    tasks = rows.pop("task").to_numpy()
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
        platt = cross_fitted_probabilities(u, failed, tasks, "platt", seed=seed).prob
        ok = np.isfinite(platt)
        out[f"{name} (Platt, cross-fitted by task)"] = reliability_table(platt[ok], failed[ok], n_bins)
    return out


#: estimators whose values the report lists per trajectory after the failure probabilities, where the run has them
LISTED_SIGNALS = ("tracer.default", "structure.tool_errors", "num_messages")


def ranking_estimator(table) -> tuple[str | None, bool]:
    """``(name, invert)`` of the estimator that ranks the report's trajectories when no detector was applied: the row
    of the estimator table with the highest AUROC among those not tuned on the labels they are scored on (its scores
    out of sample: a signal fitted on no label, a length baseline, or a combination cross-fitted by task); ``(None,
    False)`` when no row has an AUROC (no labels, one outcome)."""
    import numpy as np

    if table is None or not len(table) or "auroc" not in table:
        return None, False
    in_sample = table["in_sample"].fillna(False).astype(bool) if "in_sample" in table else False
    auroc = table["auroc"].astype(float)
    rows = table[~in_sample & np.isfinite(auroc)].sort_values("auroc", ascending=False, kind="stable")
    if rows.empty:
        return None, False
    best = rows.iloc[0]
    return str(best["estimator"]), bool(best.get("invert")) if "invert" in rows else False


def probability_label(name: str, brier, base_rate_brier) -> str:
    """The column a failure probability is shown under: ``P(failure) NAME``, unless its Brier score on the run is
    worse than the base rate's ȳ(1 - ȳ) - then it is said not to be a probability."""
    import numpy as np

    if brier is not None and base_rate_brier is not None and np.isfinite(brier) and brier > base_rate_brier:
        return f"{name} (Brier {brier:.3f} > base rate's {base_rate_brier:.3f}: a score, not a probability)"
    return f"P(failure) {name}"


def trajectory_rows(run: RunDir, table, outcomes: Outcomes | None = None):
    """One row per trajectory for the report: keys, ``outcome`` (failed, succeeded, no reward), ``reward``, then the
    ranking column and the columns beside it, sorted by the ranking column, highest (most likely to fail) first; and
    a sentence saying what the columns are and which estimator ranks them.

    The ranking: the **detector** where one was applied to the run (``predictions.csv``, the predict step: its
    probability, moved to the run's estimated failure rate), else the **best out-of-sample estimator** of the run
    (:func:`ranking_estimator`), named. Beside it the combination with the lowest Brier score and
    :data:`LISTED_SIGNALS`. A probability column whose Brier score on the run is worse than the base rate's says so
    in its header (:func:`probability_label`). ``outcomes``: the run's trajectories labelled (``RunDir.outcomes``;
    None: at the default failure threshold)."""
    import numpy as np

    from agentuq_nb.estimators import get
    from agentuq_nb.estimators.base import combination_families
    from agentuq_nb.estimators.scores import score_table

    detector = detector_predictions(run)
    combined = table[table["family"].isin(combination_families()) & table["brier"].notna()].sort_values(
        "brier", kind="stable")
    best_combined = [str(e) for e in combined["estimator"].head(1)]
    ranking, invert = (None, False) if detector is not None else ranking_estimator(table)
    signals = [e for e in LISTED_SIGNALS if get(e).is_available(run)]
    names = list(dict.fromkeys([*([ranking] if ranking else []), *best_combined, *signals]))
    frame, _ = score_table(run, names)
    reward = frame["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(reward)
    labels = (run.outcomes() if outcomes is None else outcomes).frame()[[*TRAJECTORY_KEYS, "failed"]]
    failed = frame[TRAJECTORY_KEYS].merge(labels, on=TRAJECTORY_KEYS, how="left", validate="m:1")[
        "failed"].eq(True).to_numpy() & labelled
    base = float(failed[labelled].mean() * (1 - failed[labelled].mean())) if labelled.any() else None
    frame.insert(4, "outcome", np.where(~labelled, "no reward", np.where(failed, "failed", "succeeded")))
    brier = dict(zip(table["estimator"].astype(str), table["brier"])) if "brier" in table else {}
    family = dict(zip(table["estimator"].astype(str), table["family"])) if len(table) else {}
    renamed = {n: probability_label(n, brier.get(n), base) for n in names if family.get(n) in combination_families()}
    if detector is not None:
        from agentuq_nb.records.keys import key_dtypes

        merged = key_dtypes(frame).merge(detector[[*TRAJECTORY_KEYS, "failure_probability", *(
            ["task_seen"] if "task_seen" in detector else [])]].drop_duplicates(TRAJECTORY_KEYS),
            on=TRAJECTORY_KEYS, how="left")  # a left merge on unique keys: the rows stay in frame's order
        p = merged["failure_probability"].to_numpy(dtype=float)
        ok = labelled & np.isfinite(p)
        det_brier = float(np.mean((p[ok] - failed[ok]) ** 2)) if ok.any() else None
        label = probability_label("detector", det_brier, base)
        frame = merged.rename(columns={"failure_probability": label})
        order, ascending = label, False
        names_first = [label, *(["task_seen"] if "task_seen" in frame else [])]
    elif ranking is not None:
        order, ascending = renamed.get(ranking, ranking), invert
        names_first = [order]
    else:
        order = signals[0] if signals else "reward"
        ascending, names_first = False, []
    frame = frame.rename(columns=renamed)
    frame = frame.sort_values(order, ascending=ascending, na_position="last", kind="stable").reset_index(drop=True)
    keys = ("domain", "task_id", "trial", "seed", "outcome", "reward")
    rest = [c for c in frame.columns if c not in keys and c not in names_first]
    columns = [*keys, *names_first, *rest]
    if detector is not None:
        note = (f"Ranked by the detector applied to this run (predict: trained on other labelled runs; its probability "
                f"moved to this run's estimated failure rate{detector_rate_text(run)}), highest first. Then "
                f"{', '.join(c for c in rest) or 'nothing else'}.")
    elif ranking is not None:
        row = table.set_index("estimator").loc[ranking]
        what = ("its out-of-fold failure probability (cross-fitted by task)"
                if family.get(ranking) in combination_families()
                else "its value as computed (higher = more likely a failure)" if not invert
                else "its value as computed (lower = more likely a failure)")
        note = (f"Ranked by {ranking}, the estimator with the highest AUROC on this run ({float(row['auroc']):.3f}) "
                f"among those whose scores are out of sample (none tuned on these labels; the choice of the best is "
                f"made on them), by {what}, most likely failures first. Then {', '.join(rest) or 'nothing else'}, as "
                "they are; a column of probabilities whose Brier score is worse than the base rate's says so.")
    else:
        note = (f"No estimator has an AUROC on this run (it needs both outcomes): the trajectories are sorted by "
                f"{order}, highest first" + (" - a signal fitted on no label." if order == "tracer.default" else "."))
    return frame[columns], note


def detector_predictions(run: RunDir):
    """The run's ``predictions.csv`` (a detector applied by predict), or None when there is none, it is not the current
    run's (made from other trajectories, or replaced by hand) or it is not predict's (no keys and ``failure_probability``)."""
    if not run.has("predictions"):
        return None
    from agentuq_nb.io.store.artifacts import read_predictions

    try:
        frame = read_predictions(run)
    except (OSError, ValueError, KeyError, StaleArtifactError, MixedRunError):  # stale, replaced or unreadable: the
        return None  # report ranks without it
    return frame if {*TRAJECTORY_KEYS, "failure_probability"} <= set(frame.columns) else None


def detector_rate_text(run: RunDir) -> str:
    """`` X [lo, hi]`` of the run's estimated failure rate from ``detector.json``, where predict wrote one."""
    if not run.has("detector_report"):
        return ""
    from agentuq_nb.io.store.artifacts import read_json_artifact

    try:
        rate = read_json_artifact(run, "detector_report").get("failure_rate") or {}
    except (OSError, ValueError, StaleArtifactError, MixedRunError):  # unreadable or not the run's: no rate said
        return ""
    if rate.get("estimated") is None:
        return ""
    lo, hi = rate.get("lo"), rate.get("hi")
    own = f"; its own rate {rate['true_rate']:.3f}" if rate.get("true_rate") is not None else ""
    return (f", {rate['estimated']:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")
            + own)


def write_report(run_dir: str | os.PathLike | RunDir, outcomes: Outcomes | None = None, trials: dict | None = None, figures: list[Path] | None = None, gaps: list | None = None,
                 settings: dict | None = None) -> Path:
    """``RUN_DIR/report.html`` (:func:`agentuq_nb.figures.report.run_report`) from the run's tables and figures (the
    PNGs given, else those ``analysis_figures`` left in ``RUN_DIR/figures``), the families the run lacks (``gaps``,
    else :func:`~agentuq_nb.steps.family_gaps.missing_families`) and what made it (the version, ``settings`` and the
    failure threshold of ``outcomes`` - the run's trajectories labelled, ``RunDir.outcomes``; None: at the default
    threshold -, the results' and the tables' content hashes), published as one commit; returns its path."""
    import numpy as np

    from agentuq_nb.figures.report import run_report, undefined_reason
    from agentuq_nb.io.store.artifacts import read_estimator_table
    from agentuq_nb.steps.family_gaps import missing_families
    from agentuq_nb.steps.provenance import provenance

    run = RunDir.of(run_dir)
    manifest = run.manifest()
    table = read_estimator_table(run) if run.has("estimator_table") else None
    outcomes = run.outcomes() if outcomes is None else outcomes
    failure_threshold, rewards = outcomes.threshold, outcomes.reward
    labelled = np.isfinite(rewards)
    failed = int(outcomes.failed[labelled].sum())
    counts = [("trajectories", len(rewards)), ("failed", failed), ("succeeded", int(labelled.sum()) - failed)]
    if (~labelled).any():
        counts.append(("without a reward", int((~labelled).sum())))
    warning = undefined_reason(table) if table is not None else "no estimator table: run agentuq-nb compare-estimators"
    notes = [f"failure = reward < {failure_threshold:g}; every interval is a 95% percentile bootstrap that resamples "
             "tasks (with all their trials)"]
    mismatch = (manifest.warnings or {}).get("tasks_not_the_simulated")
    if mismatch:  # said where the run's tables are read, not only when extract ran
        notes.append(f"{mismatch['count']} of {mismatch.get('of', '?')} trajectories: {TASK_MISMATCH} (the "
                     "explorer shows those)")
    captions = {"estimator_forest": "The estimator forest", "reliability": "Calibration",
                "roc": "ROC of the evaluated estimator", "accuracy_rejection": "Accuracy-rejection curve"}
    if figures is None:
        figures = [run.file("figures") / f"{name}.png" for name in captions]
    shown = [(captions.get(Path(p).stem, Path(p).stem), p) for p in figures if Path(p).is_file()]
    rows, note = trajectory_rows(run, table if table is not None else _empty_table(), outcomes)
    models = ", ".join(f"{role}: {model}" for role, model in manifest.models.items())
    subtitle = " · ".join(x for x in [f"results: {manifest.results}" if manifest.results else None, models or None,
                                      f"run folder: {run.path}"] if x)
    detector_column = next((c for c in rows.columns if c.startswith("detector (Brier ")), None)
    based_on = run.based_on(*[name for name in ("estimator_table", "trajectories", "combined_scores") if run.has(name)])
    made = provenance(STEP.command.split(" RESULTS")[0], {"failure_threshold": failure_threshold, **(settings or {})},
                      {"results": manifest.results, "results_sha256": manifest.results_sha256,
                       "tables (commit ids)": based_on})
    page = run_report(manifest.title() or run.path.name, subtitle, counts, warning, notes,
                      table if table is not None else _empty_table(), shown, rows, note, run.file("explorer"),
                      run.file("predictions"), trials_lines(trials, run.path) if trials else (),
                      missing_families(run) if gaps is None else gaps, made,
                      f"On this run the detector's failure_probability scores worse than the base rate "
                      f"({detector_column.removeprefix('detector (').split(':')[0]}): read it as a score, not a "
                      "probability." if detector_column else None)
    with run.commit(STEP.name) as commit:
        commit.write_with("report", lambda p: p.write_text(page, encoding="utf-8"), based_on)
    return run.file("report")


def _empty_table():
    import pandas as pd

    return pd.DataFrame(columns=["estimator", "family", "n", "n_failures", "auroc", "brier"])
