"""The readers of a run folder's artefacts, one home for each: what a step writes into a run folder (its file name in
:data:`~agentuq_nb.io.store.rundir.ARTIFACTS`, its schema in :mod:`agentuq_nb.records`) is read back here, checked
against the run's manifest (:meth:`~agentuq_nb.io.store.rundir.RunDir.verify`: a file of another run, or one
computed before its inputs were replaced, is refused), its keys typed alike. A missing artefact raises
:class:`~agentuq_nb.io.errors.MissingArtifactError` naming it (and the command that makes it). The token table's
readers are in :mod:`.token_table`; a run's rewards and labels are :meth:`RunDir.rewards` and :meth:`RunDir.outcomes`.

The results a run was made from are checked here too: :func:`run_results` (the results a step reads are the run's,
by content) and :func:`results_input` (what a table made from them is ``based_on``).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from agentuq_nb.io.errors import InputError, StaleArtifactError
from agentuq_nb.io.files import content_digest
from agentuq_nb.io.store.rundir import RESULTS_CONTENT, RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.monitor_scores import artifact_of, monitor_table
from agentuq_nb.records.tokens import TRAJECTORY_KEYS


def read_summary(run_dir: str | os.PathLike | RunDir, name: str) -> pd.DataFrame:
    """``turn_summary`` or ``trajectory_summary``, checked: refused when it is stale, i.e. computed
    before one of the run's token tables was (re)written or added."""
    run = RunDir.of(run_dir)
    frame = run.read_frame(name)
    record = run.manifest().artifacts.get(run.relative(name))
    if record is not None:
        missing = [p.name for p in run.token_tables(required=False)
                   if run.commit_of(p.name) and p.name not in record.based_on]
        if missing:
            raise StaleArtifactError(f"{run.file(name)} does not include {', '.join(missing)} (written after it); "
                                     f"{run.fix(name, 'again')}")
    return frame.copy()


def read_trajectory_summary(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``trajectory_summary.parquet`` (checked, :func:`read_summary`): one row per trajectory, scorer and role."""
    return read_summary(run_dir, "trajectory_summary")


def read_turn_summary(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``turn_summary.parquet`` (checked, :func:`read_summary`): one row per turn, scorer and role."""
    return read_summary(run_dir, "turn_summary")


def read_predictions(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``predictions.csv`` of a run folder (checked against its manifest): one row per trajectory with its keys,
    ``simulation_id``, ``failure_probability``, ``log_odds``, ``model``, ``in_training``, ``reward`` and ``failed``
    where labelled, ``base_probability``, ``reason_k`` / ``points_k`` / ``feature_k`` (k = 1 … the number ``predict``
    was asked for) and ``explanation``, the JSON text of ``[{feature, reason, value, points, log_odds}, …]``
    (:mod:`agentuq_nb.evaluation.detector_explain`). A FileNotFoundError names the
    command that makes it."""
    run = RunDir.of(run_dir)
    path = run.require("predictions")
    run.verify("predictions")
    frame = pd.read_csv(path, dtype={"task_id": "string", "simulation_id": "string"}, keep_default_na=True)
    return key_dtypes(frame, deep=False)


def read_monitor_rows(run_dir: str | os.PathLike | RunDir, family: str) -> pd.DataFrame:
    """A family's monitor table of a run folder, checked (:func:`~agentuq_nb.records.monitor_scores.monitor_table`);
    an empty table of its columns where the run has none."""
    run = RunDir.of(run_dir)
    artifact = artifact_of(family)
    if not run.has(artifact):
        return monitor_table(pd.DataFrame(columns=[*TRAJECTORY_KEYS, "monitor", "score", "higher_is_uncertain"]))
    return monitor_table(run.read_frame(artifact))


def read_action_turns(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``action_turns.parquet`` (checked): one row per decision point and sampler with its action statistics
    (:mod:`agentuq_nb.records.actions`)."""
    return RunDir.of(run_dir).read_frame("action_turns")


def read_estimator_table(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``estimator_table.csv`` (checked): one row per estimator with its metrics against failure
    (:mod:`agentuq_nb.evaluation.estimator_table`)."""
    run = RunDir.of(run_dir)
    path = run.require("estimator_table")
    run.verify("estimator_table")
    return pd.read_csv(Path(path))


def read_calibration_bins(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``RUN_DIR/calibration_bins.csv`` (checked against the manifest)."""
    run = RunDir.of(run_dir)
    path = run.require("calibration_bins")
    run.verify("calibration_bins")
    return pd.read_csv(path)


def read_blackbox_turns(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``blackbox_turns.parquet`` (checked), keys typed alike: one row per message with its black-box signals."""
    return key_dtypes(RunDir.of(run_dir).read_frame("blackbox_turns"))


def read_eval_curves(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``eval_curves.csv`` (checked): the evaluated estimator's curves in long format, ``curve, x, y``
    (:func:`~agentuq_nb.evaluation.metrics.failure_curves`); its metrics are the JSON record ``eval_metrics``
    (:func:`read_json_artifact`)."""
    run = RunDir.of(run_dir)
    path = run.require("eval_curves")
    run.verify("eval_curves")
    return pd.read_csv(path)


def read_json_artifact(run_dir: str | os.PathLike | RunDir, name: str) -> dict:
    """A step's JSON record ``name`` (``blackbox_report``, ``tracer_tuning``, ``calibration``, ``eval_metrics``,
    ``detector_report`` …), checked."""
    run = RunDir.of(run_dir)
    run.verify(name)
    return json.loads(run.file(name).read_text())


def read_verbalized_confidence(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """``verbalized_confidence.csv`` (checked): one row per trajectory with the agent's mean stated confidence and
    the counts of its answers."""
    run = RunDir.of(run_dir)
    run.verify("verbalized_confidence")
    return key_dtypes(pd.read_csv(run.file("verbalized_confidence"), dtype={"task_id": str}))


# --------------------------------------------------------------------------- the results the run was made from
def run_results(run: RunDir, results: str | os.PathLike | None, option: str = "results") -> tuple[Path, str]:
    """(the results a step reads - ``results``, else the run's own - and the SHA-256 of their content), refused
    when their content is not what the run was made from (the manifest's ``results_sha256``): a copy elsewhere is
    the same results, an edited or another file is not, and what a step made from it would be mixed with the
    run's tables."""
    path = Path(results) if results else run.results_path()
    digest = content_digest(path)
    manifest = run.manifest()
    if manifest.results_sha256 is not None and digest != manifest.results_sha256:
        raise InputError(path, f"{option}: not the results {run.path} was made from (their content differs: sha256 "
                               f"{digest[:12]}…, the run's {manifest.results_sha256[:12]}… from {manifest.results}); "
                               f"extract them into a run folder of their own")
    return path, digest


def results_input(run: RunDir, results_path: Path, digest: str | None = None) -> dict[str, str]:
    """``based_on`` of tables made from ``results_path``: the SHA-256 of its content (``digest`` when known), and
    its commit when it is the run's own results - so that they are stale once other results are extracted into
    the run, wherever those are read from."""
    own = run.based_on("results") if results_path.resolve() == run.results_json.resolve() else {}
    return {**own, RESULTS_CONTENT: digest or content_digest(results_path)}
