"""``agentuq-nb predict DETECTOR_DIR RUN_OR_RESULTS --out RUN_DIR``: a trained failure detector applied to a run,
labelled or not.

The input is a run folder (its results are read again; the predictions are committed into it) or results of any
layout the readers take (τ²-bench v0/v1/directory or a bare list of simulations, the original τ-bench, an Inspect AI
log, AgentUQ's results with their sidecars), extracted into ``--out`` first as ``analyze`` does. The detector
(:func:`agentuq_nb.evaluation.detector_apply.load_detector`: checked, never unpickled) scores every trajectory on the
features it was trained with, and one commit publishes:

* ``predictions.csv`` - one row per trajectory: the keys, ``simulation_id``, ``failure_probability`` (calibrated on runs
  other than this one), ``log_odds``, ``model`` (``final``, or ``leave-one-run-out:<run>`` for a trajectory the detector
  was trained on), ``in_training``, the ``reward`` and ``failed`` where the run is labelled, ``base_probability``
  and the ``top`` reasons (``reason_k``: a sentence - an embedding block named by the message that moved it most;
  ``points_k``: percentage points of the probability; ``feature_k``: the feature's name; and the JSON column
  ``explanation``; base + all points / 100 = the probability, ``detector.json``'s ``explanations`` says how);
* ``detector_scores.parquet`` - the probability as the ``detector`` estimator family reads it, so that
  ``compare-estimators`` and ``compare-runs`` rank it beside the other families;
* ``detector.json`` - which detector (its folder, card hash, training runs, protocols), how the probabilities were
  calibrated and the contributions made, and, on a labelled run, the detector's row of the estimator table and the
  calibration of its probabilities on this run.

:func:`agentuq_nb.estimators.detector.read_predictions` reads ``predictions.csv`` back from a run folder.
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

from agentuq_nb.io.atomic import json_ready
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import failure_labels
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
from agentuq_nb.steps.detector_inputs import BATCH_SIZE, corpus_features, resolve_source

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
        source = resolve_source(folder.path, folder.path.name)
        features = corpus_features([source], detector.groups, detector.embedder, detector.embed_max_tokens,
                                   scheduler=config.scheduler, batch_size=config.batch_size, progress=config.progress)
        rewards = key_dtypes(folder.rewards())
        keys = key_dtypes(features.index[TRAJECTORY_KEYS])
        if len(keys.merge(rewards[TRAJECTORY_KEYS], on=TRAJECTORY_KEYS)) != len(rewards) or len(keys) != len(rewards):
            raise InputError(source.results, f"holds {len(keys)} trajectories where the run {folder.path} has "
                                              f"{len(rewards)}: the results changed since they were extracted; "
                                              "extract them again")
        scored = detector.predict(features, config.top)
        reward = features.index["reward"].to_numpy(dtype=float)
        predictions = pd.concat([features.index[[*TRAJECTORY_KEYS, "simulation_id", "reward"]].reset_index(drop=True),
                                 scored], axis=1)
        labelled = np.isfinite(reward)
        failed = pd.Series(pd.NA, index=predictions.index, dtype="boolean")
        failed[labelled] = failure_labels(reward[labelled], config.failure_threshold)
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
            "n": int(len(predictions)), "n_labelled": int(labelled.sum()),
            "n_in_training": int(predictions["in_training"].sum()),
        }
        if labelled.any():
            y = failure_labels(reward[labelled], config.failure_threshold)
            report["calibration_on_this_run"] = calibration_report(
                predictions["failure_probability"].to_numpy(dtype=float)[labelled], y)
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


def prepare_run(detector: str | os.PathLike, run_or_results: str | os.PathLike,
                out: str | os.PathLike | None = None) -> Path:
    """The run folder ``detector`` is applied to: ``run_or_results`` itself, or ``out`` with the results extracted
    into it first (a bad detector folder refused before anything is extracted)."""
    from agentuq_nb.steps.extract import extract

    given = Path(run_or_results)
    if given.is_dir() and RunDir(given).has("manifest"):
        if out is not None and Path(out).resolve() != given.resolve():
            raise InputError(out, f"--out is where results are extracted to; {given} is a run folder already, whose "
                                  "predictions are committed into it (leave --out out)")
        return given
    if out is None:
        raise InputError(given, "is results, not a run folder: give --out RUN_DIR to extract them into")
    from agentuq_nb.evaluation.detector_apply import load_detector

    load_detector(detector)
    extract(given, out)
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
    row = report.get("estimator_table_row")
    if row and row.get("auroc") is None:
        say.say(f"detector on this run: AUROC undefined ({row.get('undefined') or 'one class only'}; n = {row['n']}, "
                f"{row['n_failures']} failures)")
    elif row:
        say.say(f"detector on this run: AUROC {num_text(row['auroc'])} {interval_text(row['auroc_lo'], row['auroc_hi'])}, "
                f"length-controlled {num_text(row['auroc_stratified'])}, best length baseline "
                f"{num_text(row['length_baseline_auroc'])} (n = {row['n']}, {row['n_failures']} failures); "
                f"'agentuq-nb compare-estimators {result.run_dir}' ranks it with every family")


COMMAND = Command(summary="A trained detector on a run, labelled or not → RUN_DIR/predictions.csv (calibrated failure "
                          "probability, top contributions), detector_scores.parquet (the detector estimator family), "
                          "detector.json.", arguments=("detector", "run_or_results"),
                  options=("out", "top", "failure_threshold", "n_boot", "scheduler"),
                  extras={"run_or_results": (Path, ..., "a run folder (predictions committed into it), or "
                                             + RESULTS_HELP),
                          "out": (Optional[Path], None, "run folder to extract results into first (not for a run "
                                  "folder)")},
                  help={"scheduler": SCHEDULER_HELP + "; feature extraction"}, build=command_run, show=show)
