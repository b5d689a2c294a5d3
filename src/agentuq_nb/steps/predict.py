"""``agentuq-nb predict DETECTOR_DIR RUN_OR_RESULTS --out RUN_DIR``: a trained failure detector applied to a run,
labelled or not.

The input is a run folder (its results are read again; the predictions are committed into it) or results of any
layout the readers take (τ²-bench v0/v1/directory or a bare list of simulations, the original τ-bench, an Inspect AI
log, AgentUQ's results with their sidecars), extracted into ``--out`` first as ``analyze`` does. The detector
(:func:`agentuq_nb.evaluation.detector_apply.load_detector`: checked, never unpickled) scores every trajectory on the
features it was trained with, and one commit publishes:

* ``predictions.csv`` - one row per trajectory: the keys, ``simulation_id``, ``failure_probability`` (calibrated on runs
  other than this one, then moved by one log-odds shift so that their mean is this run's estimated failure rate:
  label-shift EM, or where EM did not estimate held-out runs' rates better the training runs' rate moved by what the
  training runs of the run's agent model failed, :mod:`agentuq_nb.evaluation.label_shift`,
  :mod:`agentuq_nb.evaluation.run_rate`), ``failure_probability_training_rate`` (before that move: the Platt map's
  output), ``base_probability``, ``log_odds``, ``source_rate`` (that training rate), ``model`` (``final``, or
  ``leave-one-run-out:<run>`` for a trajectory the detector was trained on), ``in_training``, ``task_key`` (the task's
  identity: ``content:<hash of its instructions>``, or ``id:<task id>`` where the results hold no task content),
  ``task_seen`` (its task was among the training tasks), ``task_prior`` (that task's failure rate in training), the
  ``reward`` and ``failed`` where the run is labelled, and the ``top`` reasons (``reason_k``: a sentence - an
  embedding block named by the message that moved it most; ``points_k``: percentage points of the probability
  written, the adapted one; ``feature_k``: the feature's name; and the JSON column ``explanation``;
  ``base_probability`` + all points / 100 = ``failure_probability``, ``detector.json``'s ``explanations`` says how);
* ``detector_scores.parquet`` - the probability as the ``detector`` estimator family reads it, so that
  ``compare-estimators`` and ``compare-runs`` rank it beside the other families;
* ``detector.json`` - which detector (its folder, card hash, training runs, protocols), how the probabilities were
  calibrated and the contributions made, ``failure_rate`` (the run's estimated rate with its interval: bootstrap, tasks
  resampled, or - where not estimated from the run's scores - the share of its trajectories that fail under a model
  of the training runs' rates by agent model; ``agent``, ``agent_training_runs``: its agent model and how many
  training runs of it moved the rate; on a labelled run its ``true_rate`` beside it), ``tasks_seen`` (the share of trajectories whose task was
  in training), and, on a labelled run, the detector's row of the estimator table, the calibration of its
  probabilities on this run (adapted and at the training rate, with the base rate's Brier ȳ(1 - ȳ)), and
  ``against_task_history``: the detector's AUROC beside length's and the task prior's, with the paired difference.

:func:`agentuq_nb.io.store.artifacts.read_predictions` reads ``predictions.csv`` back from a run folder.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
from pydantic import Field

from agentuq_nb.evaluation.detector_inputs import BATCH_SIZE, corpus_features, resolve_source, trajectory_signatures
from agentuq_nb.evaluation.label_shift import WIDENED
from agentuq_nb.io.atomic import json_ready
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import (
    RESULTS_HELP,
    SCHEDULER_HELP,
    Command,
    FailureThresholdField,
    FamilyHint,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
    interval_text,
    num_text,
)

STEP = Step("predict", "agentuq-nb predict DETECTOR_DIR RUN_DIR",
            ("detector_scores", "predictions", "detector_report"),
            adds=(FamilyHint("detector", "a detector trained on other labelled runs (agentuq-nb train-detector)",
                             "agentuq-nb predict DETECTOR_DIR RUN_DIR"),))
#: the estimator the ``detector`` family registers (its column of ``detector_scores.parquet``)
ESTIMATOR = "detector"


class PredictConfig(StepConfig):
    """The detector applied, and how many contributions each trajectory shows."""

    detector: Path = Field(description="a detector folder (made by agentuq-nb train-detector)")
    top: int = Field(5, ge=1, le=50, description="contributions shown per trajectory")
    failure_threshold: FailureThresholdField = Field(description="failure = reward < threshold "
                                                "(labelled runs: the estimator-table row)")
    n_boot: NBootField = Field(description="bootstrap resamples of the estimator-table row")
    seed: SeedField = Field(description="seed of the bootstrap")
    scheduler: Optional[str] = Field(None, description="feature extraction on Dask: a scheduler address or local:N")
    batch_size: int = Field(BATCH_SIZE, ge=1, le=100_000, description="simulations per feature-extraction job")
    progress: bool = Field(False, description="show progress bars")


@dataclass
class Predictions:
    """What ``predict`` published: the predictions, the report (``detector.json``), the estimator-table row."""

    run_dir: Path
    predictions: pd.DataFrame
    report: dict[str, Any]
    row: pd.DataFrame | None


def estimator_row(run: RunDir, failure_threshold: float, n_boot: int, seed: int) -> pd.DataFrame | None:
    """The detector's row of the estimator table (and the length baselines') on a labelled run; None without labels."""
    from agentuq_nb.estimators import BASELINES, get
    from agentuq_nb.estimators.scores import score_table, with_length_columns
    from agentuq_nb.evaluation.estimator_table import evaluate_estimators

    names = [ESTIMATOR, *(b for b in BASELINES if get(b).is_available(run))]
    table, estimators = score_table(run, names)
    reward = table["reward"].to_numpy(dtype=float)
    if not np.isfinite(reward).any():
        return None
    return evaluate_estimators(with_length_columns(run, table), estimators, failure_threshold, n_boot, seed,
                               combine=False)


def run(run_dir: str | os.PathLike | RunDir, config: PredictConfig) -> Predictions:
    """Score the run's trajectories with the detector and publish (see the module docstring)."""
    from agentuq_nb.evaluation.calibration import calibration_report
    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.evaluation.detector_explain import POINTS
    from agentuq_nb.evaluation.detector_model import CONTRIBUTIONS

    start = time.perf_counter()
    detector = load_detector(config.detector)  # a bad folder is refused before the run is touched
    folder = RunDir.of(run_dir)
    folder.require_folder(STEP.name)
    with folder.lock(STEP.name):
        if not folder.has("trajectories"):
            raise FileNotFoundError(f"{folder.path}: no trajectories.parquet; run 'agentuq-nb extract RESULTS --out "
                                    f"{folder.path}' first (or give predict the results)")
        from agentuq_nb.io.store.artifacts import run_results

        run_results(folder, None, "the run's results")  # changed since extracted: stale, refused by content
        source = resolve_source(folder.path, folder.path.name)
        features = corpus_features([source], detector.groups, detector.embedder, detector.embed_max_tokens,
                                   scheduler=config.scheduler, batch_size=config.batch_size, progress=config.progress)
        rewards = key_dtypes(folder.rewards())
        keys = key_dtypes(features.index[TRAJECTORY_KEYS])
        if len(keys.merge(rewards[TRAJECTORY_KEYS], on=TRAJECTORY_KEYS)) != len(rewards) or len(keys) != len(rewards):
            raise InputError(source.results, f"holds {len(keys)} trajectories where the run {folder.path} has "
                                              f"{len(rewards)}: the results changed since they were extracted; "
                                              "extract them again")
        index = features.index
        reward = index["reward"].to_numpy(dtype=float)
        seen = detector.tasks_seen(index["domain"], index["task_id"], index["task_key"])
        tasks = (index["domain"].astype(str) + "\x1f" + seen["task_key"].astype(str)).to_numpy(dtype=object)
        at_training_rate = detector.predict(features, explained=False)
        estimate, _ = detector.adapt_to_run(at_training_rate, tasks, config.n_boot, config.seed,
                                            agent=source.models.get("assistant"))
        # scored at the run's estimated rate, the reasons taken along that map: their points sum to the adapted
        # probability written (a folder without training rates, or not adapted: the calibrated one)
        scored = detector.predict(features, config.top, None if estimate is None else estimate.shift)
        calibrated = at_training_rate["failure_probability"].to_numpy(dtype=float)
        scored.insert(1, "failure_probability_training_rate", calibrated)
        at = scored.columns.get_loc("in_training") + 1
        for offset, name in enumerate(("task_key", "task_seen", "task_prior")):
            scored.insert(at + offset, name, seen[name].to_numpy())
        predictions = pd.concat([index[[*TRAJECTORY_KEYS, "simulation_id", "reward"]].reset_index(drop=True),
                                 scored], axis=1)
        signatures = trajectory_signatures([source], features)
        copies = detector.near_copies(signatures if signatures is not None else np.zeros((0, 0), np.uint32))
        if len(copies) == len(predictions):
            predictions = pd.concat([predictions, copies], axis=1)
        outcomes = Outcomes.of(reward, config.failure_threshold)  # labelled once: the column and the report
        labelled = np.isfinite(outcomes.reward)
        y = outcomes.failed[labelled]
        failed = pd.Series(pd.NA, index=predictions.index, dtype="boolean")
        failed[labelled] = y
        predictions.insert(predictions.columns.get_loc("reward") + 1, "failed", failed)
        scores = predictions[[*TRAJECTORY_KEYS, "failure_probability", "log_odds", "in_training"]].rename(
            columns={"failure_probability": ESTIMATOR})
        card = detector.card
        report: dict[str, Any] = {
            "detector": str(Path(config.detector).resolve()), "card_sha256": card.get("card_sha256"),
            "created_at": card.get("created_at"), "feature_version": card.get("feature_version"),
            "feature_groups": card.get("feature_groups"), "model": card.get("settings", {}).get("model"),
            "training_runs": [{k: r.get(k) for k in ("name", "domain", "n_labelled", "n_failures", "sha256")}
                              for r in card.get("training_runs", [])],
            "protocols": card.get("protocols"), "calibrated_on": card.get("calibration", {}).get("probabilities"),
            "contributions": CONTRIBUTIONS.get(card.get("settings", {}).get("model", ""), ""),
            "explanations": POINTS, "selected": card.get("final_model", {}).get("selected"),
            "fallback": fallback_report(detector, features, scored),
            "n": int(len(predictions)), "n_labelled": int(labelled.sum()),
            "n_in_training": int(predictions["in_training"].sum()),
            "tasks_seen": seen_summary(seen),
            "near_copies": near_copy_summary(predictions),
            "failure_rate": rate_report(estimate, scored, tasks, config.n_boot, config.seed,
                                        ((card.get("calibration") or {}).get("label_shift") or {}).get("summary")),
        }
        if labelled.any():
            report["failure_rate"]["true_rate"] = float(y.mean())
            report["calibration_on_this_run"] = calibration_report(
                predictions["failure_probability"].to_numpy(dtype=float)[labelled], y)
            report["calibration_on_this_run_training_rate"] = calibration_report(calibrated[labelled], y)
            report["brier_base_rate"] = float(y.mean() * (1 - y.mean()))
            report["against_task_history"] = task_history_comparison(
                predictions[labelled].reset_index(drop=True), index[labelled].reset_index(drop=True), y,
                config.n_boot, config.seed)
        based_on = folder.based_on("trajectories")
        with folder.commit(STEP.name) as commit:
            commit.write_parquet("detector_scores", scores, based_on)
            commit.write_with("predictions", lambda p: predictions.to_csv(p, index=False), based_on)
            commit.write_json("detector_report", json_ready({**report, "seconds": time.perf_counter() - start}),
                              based_on)
        row = estimator_row(folder, config.failure_threshold, config.n_boot, config.seed) if labelled.any() else None
    if row is not None:
        report["estimator_table_row"] = json_ready(row[row["estimator"] == ESTIMATOR].iloc[0].to_dict())
    report["seconds"] = time.perf_counter() - start
    return Predictions(folder.path, predictions, report, row)


def fallback_report(detector, features, scored: pd.DataFrame) -> dict[str, Any] | None:
    """Where the final model is the task prior: how many trajectories it scored by its fallback (their task unseen:
    the prior alone would give them all one probability) and which candidate that is; None otherwise."""
    from agentuq_nb.evaluation.detector_apply import FINAL

    fallback = detector.final.fallback
    if fallback is None:
        return None
    unseen = ~detector.final.seen(detector.with_training_task_keys(features))
    n = int((unseen & (scored["model"].to_numpy(dtype=object) == FINAL)).sum())
    return {"candidate": fallback.candidate, "n": n,
            "why": f"the final model ({detector.final.candidate}) reads the task prior, which knows only the training "
                   f"tasks: a trajectory of a task it never saw is scored by {fallback.candidate}, a candidate that "
                   "does not read the task's history"}


def near_copy_summary(predictions: pd.DataFrame) -> dict[str, Any] | None:
    """How many trajectories of the run are (near-)copies of training trajectories, and of which runs (None: the
    detector folder keeps no signatures)."""
    if "near_copy_of" not in predictions or predictions["training_similarity"].isna().all():
        return None
    of = predictions["near_copy_of"].dropna()
    return {"n": int(len(predictions)), "near_copies": int(len(of)), "exact": int(predictions["in_training"].sum()),
            "by_run": {str(k): int(v) for k, v in of.value_counts().items()},
            "rule": "estimated Jaccard of 5-word shingles (roles, contents, tool calls) >= 0.8 with a training "
                    "trajectory (MinHash, 64 values)"}


def seen_summary(seen: pd.DataFrame) -> dict[str, Any]:
    """How many trajectories' tasks the detector was trained on, and how the run's tasks are identified."""
    known = seen["task_seen"].notna()
    by_content = seen["task_key"].astype(str).str.startswith("content:")
    return {"n": int(len(seen)), "n_known": int(known.sum()),
            "n_seen": int(seen["task_seen"].fillna(False).astype(bool).sum()),
            "share_seen": float(seen.loc[known, "task_seen"].astype(bool).mean()) if known.any() else None,
            "by_content": int(by_content.sum()), "by_id_only": int((~by_content).sum())}


def rate_report(estimate, scored: pd.DataFrame, tasks=None, n_boot: int = 0, seed: int = 0,
                held_out: dict | None = None) -> dict[str, Any]:
    """The run's estimated failure rate (label-shift EM) with its interval, beside the rates it started from: the
    training rate, and the mean of the probabilities written (the expected share of failures) with a bootstrap
    interval (tasks resampled where they repeat); ``held_out_rate_mae``: how far the detector's rate estimate was
    from the true rate of held-out training runs on average (the card's label-shift judgement)."""
    from agentuq_nb.evaluation.label_shift import resample_weights

    p = scored["failure_probability"].to_numpy(dtype=float)
    ok = np.isfinite(p)
    mean_lo = mean_hi = None
    if n_boot and ok.any():
        w, _ = resample_weights(int(ok.sum()), n_boot, seed, None if tasks is None else np.asarray(tasks)[ok])
        means = (w @ p[ok]) / np.maximum(w.sum(axis=1), 1)
        mean_lo, mean_hi = (float(q) for q in np.quantile(means, [0.025, 0.975]))
    base = {"training_rate": float(np.nanmean(scored["source_rate"])) if scored["source_rate"].notna().any() else None,
            "mean_probability_at_training_rate": float(np.nanmean(scored["failure_probability_training_rate"])),
            "mean_probability": float(p[ok].mean()) if ok.any() else None, "mean_probability_lo": mean_lo,
            "mean_probability_hi": mean_hi, "expected_failures": float(p[ok].sum()),
            "held_out_rate_mae": (held_out or {}).get("rate_mae")}
    if estimate is None:
        return {**base, "estimated": None, "note": "not adapted: the detector's maps carry no training rate, or its "
                                                   "probabilities are constant"}
    drawn = estimate.resampled.removesuffix(WIDENED)  # what the bootstrap drew, where the run's scores estimated it
    estimated_from_run = drawn in ("trajectories", "tasks")
    interval = {"trajectories": "bootstrap, trajectories resampled", "tasks": "bootstrap, tasks resampled",
                "runs": "the share of the run's trajectories that fail under a model of the training runs' rates "
                        "(agent model and run as random effects): the run's scores did not narrow it",
                "none": "none"}.get(drawn, drawn)
    if drawn != estimate.resampled:
        interval += ("; widened to the spread of the training runs' rates (MAP-EM leans on pseudo-trajectories at "
                     "the training rate, which the bootstrap takes as known)")
    return {**base, "estimated": estimate.rate, "lo": estimate.lo, "hi": estimate.hi,
            "method": f"label-shift {estimate.method} (Saerens et al. 2002)" if estimated_from_run
            else estimate.method, "interval": interval, "resampled": estimate.resampled,
            "converged": estimate.converged, "logit_shift": estimate.shift, "agent": estimate.agent,
            "agent_training_runs": estimate.agent_runs}


def task_history_comparison(predictions: pd.DataFrame, index: pd.DataFrame, failure: np.ndarray, n_boot: int,
                            seed: int) -> dict[str, Any]:
    """On a labelled run: the detector's AUROC against the best length baseline and against the task prior (the
    task's failure rate in the detector's training runs, on the trajectories whose task it saw), with the paired
    differences (:func:`~agentuq_nb.evaluation.detector_protocols.protocol_comparison`)."""
    from agentuq_nb.evaluation.detector_protocols import PRIOR, evaluation_frame, protocol_comparison

    runs = np.full(len(index), "run", dtype=object)
    frame = evaluation_frame(runs, index["domain"].to_numpy(dtype=object), predictions["task_key"].to_numpy(dtype=object),
                             failure, index)
    frame[PRIOR] = predictions["task_prior"].to_numpy(dtype=float)
    frame["detector"] = predictions["failure_probability"].to_numpy(dtype=float)
    return protocol_comparison(frame, "detector", n_boot, seed)


def prepare_run(detector: str | os.PathLike, run_or_results: str | os.PathLike,
                out: str | os.PathLike | None = None) -> Path:
    """The run folder ``detector`` is applied to: ``run_or_results`` itself, or ``out`` with the results extracted
    into it first (a bad detector folder refused before anything is extracted)."""
    from agentuq_nb.steps.extract import ExtractConfig
    from agentuq_nb.steps.extract import run as extract

    given = Path(run_or_results)
    if given.is_dir() and RunDir(given).has("manifest"):
        if out is not None and Path(out).resolve() != given.resolve():
            raise InputError(out, f"--out is where results are extracted to; {given} is a run folder already, whose "
                                  "predictions are committed into it (leave --out out)")
        return given
    if out is None:
        raise InputError(given, "is results, not a run folder: give --out RUN_DIR to extract them into")
    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.io.outputs import check_run_destination

    check_run_destination(out, given, command="predict", inputs=[detector])  # before the detector is even read
    load_detector(detector)
    extract(out, ExtractConfig(results=given))
    return Path(out)


def predict(detector: str | os.PathLike, run_or_results: str | os.PathLike, out: str | os.PathLike | None = None,
            **options: Any) -> Predictions:
    """Apply ``detector`` to a run folder, or to results extracted into ``out`` first (see the module docstring)."""
    return run(prepare_run(detector, run_or_results, out), PredictConfig(detector=detector, **options))


def command_run(options: dict[str, Any], run_dir: None = None) -> tuple[Path, PredictConfig]:
    """The command's run folder and config (its positional RUN_OR_RESULTS and ``--out`` say the run folder)."""
    target = prepare_run(options["detector"], options.pop("run_or_results"), options.pop("out", None))
    return target, PredictConfig(**options, progress=True)


def show(result: Predictions, run_dir: Path, config: PredictConfig, say: Reporter) -> None:
    """What predict prints: the most likely failures, the count, the detector's row on a labelled run."""
    shown = result.predictions.sort_values("failure_probability", ascending=False).head(20)
    cols = [c for c in ("task_id", "trial", "failure_probability", "failed", "model", "points_1", "reason_1")
            if c in shown]
    say.say(shown[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    report = result.report
    say.say(f"{report['n']} trajectories ({report['n_in_training']} met in training: scored by the model that left "
            f"their run out) → {result.run_dir / 'predictions.csv'}")
    for line in summary_lines(report):
        say.say(line)
    row = report.get("estimator_table_row")
    if row and row.get("auroc") is None:
        say.say(f"detector on this run: AUROC undefined ({row.get('undefined') or 'one class only'}; n = {row['n']}, "
                f"{row['n_failures']} failures)")
    elif row:
        say.say(f"detector on this run: AUROC {num_text(row['auroc'])} {interval_text(row['auroc_lo'], row['auroc_hi'])}, "
                f"length-controlled {num_text(row['auroc_stratified'])}, best length baseline "
                f"{num_text(row['length_baseline_auroc'])} (n = {row['n']}, {row['n_failures']} failures); "
                f"'agentuq-nb compare-estimators {result.run_dir}' ranks it with every family")


def summary_lines(report: dict[str, Any]) -> list[str]:
    """The run's estimated failure rate (beside its own where labelled), the share of its tasks seen in training, and
    on a labelled run the detector against the task's history and length."""
    lines = []
    fallback = report.get("fallback")
    if fallback:
        lines.append(f"the final model reads the task prior: {fallback['n']} of {report['n']} trajectories, of tasks it "
                     f"never saw, were scored by {fallback['candidate']} instead (the prior alone would give them all "
                     "one probability)")
    copies = report.get("near_copies")
    if copies and copies["near_copies"]:
        runs = ", ".join(f"{run}: {k}" for run, k in copies["by_run"].items())
        lines.append(f"{copies['near_copies']} of {copies['n']} trajectories of this run are (near-)copies of training "
                     f"trajectories ({runs}; {copies['exact']} exact): the detector has seen them, its scores on them "
                     "are not those of an unseen run")
    rate = report.get("failure_rate") or {}
    own = (f"; its own (labelled) rate: {rate['true_rate']:.3f}" if rate.get("true_rate") is not None else "")
    if rate.get("estimated") is not None and str(rate.get("resampled")).removesuffix(WIDENED) in ("trajectories", "tasks"):
        lines.append(f"estimated failure rate of this run: {rate['estimated']:.3f} "
                     f"{interval_text(rate.get('lo'), rate.get('hi'))} ({rate.get('method')}, {rate.get('resampled')} "
                     f"resampled; the training runs': {num_text(rate.get('training_rate'))}){own}")
    elif rate.get("estimated") is not None:
        spread = (f" {interval_text(rate.get('lo'), rate.get('hi'))}" if rate.get("resampled") == "runs" else "")
        k = rate.get("agent_training_runs") or 0
        source = (f"the training runs' rate ({num_text(rate.get('training_rate'))}) moved by what the {k} training "
                  f"run{'s' if k > 1 else ''} of its agent {rate.get('agent')} failed, partially pooled with the "
                  "others" if k else "the training runs' rate" + (
                      f" (no training run of its agent {rate.get('agent')})" if rate.get("agent") else
                      " (its results name no agent model)"))
        lines.append(f"estimated failure rate of this run: {rate['estimated']:.3f}{spread} - {source}: on held-out "
                     f"training runs, a rate estimated from a run's scores did not beat it, so the probabilities are "
                     f"centred on it{own}")
    else:
        lines.append(f"failure rate of this run: not estimated ({rate.get('note', '')}){own}")
    if rate.get("mean_probability") is not None:
        miss = (f"; on held-out training runs the detector's rate missed the true one by {rate['held_out_rate_mae']:.3f} "
                "on average" if rate.get("held_out_rate_mae") is not None else "")
        if rate.get("estimated") is not None:  # centred: the probabilities' mean is the estimated rate
            n = report["n"]
            bounds = (f"; {rate['lo'] * n:.1f} to {rate['hi'] * n:.1f} by its interval"
                      if rate.get("lo") is not None and rate.get("hi") is not None else "")
            lines.append(f"expected failures by its probabilities: {rate['expected_failures']:.1f} of {n} (the "
                         f"estimated rate times {n}{bounds}){miss}{own}")
        else:
            lines.append(f"expected failures by its probabilities: {rate['expected_failures']:.1f} of {report['n']} "
                         f"(mean {rate['mean_probability']:.3f} "
                         f"{interval_text(rate.get('mean_probability_lo'), rate.get('mean_probability_hi'))}){miss}"
                         f"{own}")
    seen = report.get("tasks_seen") or {}
    if seen.get("share_seen") is not None:
        lines.append(f"tasks seen in training: {seen['n_seen']} of {seen['n']} trajectories ({seen['share_seen']:.0%}; "
                     f"a task is its domain + a hash of its instructions; {seen['by_id_only']} known by id only)")
    else:
        lines.append("tasks seen in training: unknown (the detector folder lists no training tasks: train it again)")
    row = report.get("against_task_history") or {}
    if "auroc" in row:
        text = (f"on this run: detector AUROC {num_text(row['auroc'])}, length ({row.get('length_baseline')}) "
                f"{num_text(row.get('length_auroc'))}")
        if "prior_auroc" in row:
            text += (f", task prior {num_text(row['prior_auroc'])} (on the {row['prior_n']} trajectories whose task "
                     f"it saw; detector there {num_text(row['auroc_on_prior_rows'])}): the detector adds "
                     f"{row['diff_vs_prior']:+.3f} {interval_text(row['diff_vs_prior_lo'], row['diff_vs_prior_hi'])} "
                     "over what the task's history alone gives")
        else:
            text += "; no task of this run was in training, so it has no task history to beat"
        lines.append(text)
    return lines


COMMAND = Command(summary="A trained detector on a run, labelled or not → RUN_DIR/predictions.csv (calibrated failure "
                          "probability, top contributions), detector_scores.parquet (the detector estimator family), "
                          "detector.json.", arguments=("detector", "run_or_results"),
                  options=("out", "top", "failure_threshold", "n_boot", "scheduler"),
                  extras={"run_or_results": (Path, ..., "a run folder (predictions committed into it), or "
                                             + RESULTS_HELP),
                          "out": (Optional[Path], None, "run folder to extract results into first (not for a run "
                                  "folder)")},
                  help={"scheduler": SCHEDULER_HELP + "; feature extraction"}, build=command_run, show=show)
