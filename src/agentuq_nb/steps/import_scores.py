"""``agentuq-nb import-scores RUN_DIR FILE --name NAME``: per-trajectory scores from elsewhere as an estimator of the
run (family ``external``).

FILE is a score file (CSV or JSONL, one row per trajectory keyed by ``simulation_id`` or by ``task_id`` and ``trial``;
a vendor's trust score, a monitor of one's own) or a τ²-bench judge summary as published (its verdicts: failure 1,
pass 0; :mod:`agentuq_nb.io.ingest.score_files`). The rows are matched to the run's trajectories; a file whose keys
match fewer than ``--min-match`` of them is refused with the counts (scores of another run, or keyed otherwise, would
rank nothing). What matched is committed to ``RUN_DIR/external_scores.parquet`` as monitor ``NAME``
(:mod:`agentuq_nb.records.monitor_scores`: the score as given, its orientation, its risk, verdict, justification,
cost), replacing an earlier import of that name and keeping the others; ``compare-estimators``, ``compare-runs``, the
report and the explorer then show ``external.NAME`` beside every family. A judge summary's monitor is named after its
prompt (``customer_outcome_v1``) unless ``--name`` says otherwise.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import pandas as pd
from pydantic import Field, field_validator

from agentuq_nb.io.errors import InputError, StaleArtifactError
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.score_files import read_scores
from agentuq_nb.io.store.rundir import RunDir, read_parquet_file
from agentuq_nb.records.monitor_scores import (
    DEFAULT_MIN_MATCH,
    ScoreMatchError,
    artifact_of,
    check_monitor_name,
    match_scores,
    replace_monitor,
)
from agentuq_nb.steps.base import Command, FamilyHint, Reporter, Step, StepConfig

FAMILY = "external"
ARTIFACT = artifact_of(FAMILY)
STEP = Step("import-scores", "agentuq-nb import-scores RUN_DIR FILE --name NAME", (ARTIFACT,),
            adds=(FamilyHint(FAMILY, "per-trajectory scores from elsewhere (a score file, or a τ²-bench judge "
                                     "summary's verdicts)", "agentuq-nb import-scores RUN_DIR FILE --name NAME"),))


class ImportScoresConfig(StepConfig):
    """The score file, the monitor's name and orientation, and how much of the run it must cover."""

    file: Path = Field(description="a score file (CSV or JSONL keyed by simulation_id, or by task_id and trial) or a "
                                   "τ²-bench judge summary (.summary.json)")
    name: Optional[str] = Field(None, description="the monitor's name: the estimator is external.NAME (a judge "
                                "summary: its prompt's name unless given)")
    orientation: Literal["risk", "safety"] = Field("risk", description="risk: higher = more likely a failure; "
                                                   "safety: higher = safer (a trust score; ranked negated)")
    column: str = Field("score", min_length=1, description="the score file's column that holds the score")
    min_match: float = Field(DEFAULT_MIN_MATCH, gt=0.0, le=1.0, description="the share of the run's trajectories "
                             "the file's keys must match, else it is refused")

    @field_validator("name")
    @classmethod
    def _monitor_name(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else check_monitor_name(value)


@dataclass
class ImportedScores:
    """What an import committed: the monitor's ``rows`` (matched trajectories), the ``counts`` of the match, its
    ``name`` and the run folder."""

    name: str
    rows: pd.DataFrame
    counts: dict
    run_dir: Path
    #: monitors imported onto the run's earlier trajectories (since extracted again), dropped: import them again
    dropped: list[str] = field(default_factory=list)


def monitor_name(config: ImportScoresConfig, scores: pd.DataFrame) -> str:
    """The monitor's name: ``--name``, else a judge summary's prompt name (a score file needs one)."""
    if config.name:
        return config.name
    prompt = scores.attrs.get("prompt_name")
    if prompt:
        return check_monitor_name(re.sub(r"[^a-z0-9_\-]+", "_", str(prompt).lower()).strip("_-")[:64] or "judge")
    raise InputError(config.file, "a score file's monitor needs a name: give --name NAME")


def run(run_dir: str | Path | RunDir, config: ImportScoresConfig) -> ImportedScores:
    """Import ``config.file``'s scores into ``run_dir`` (see the module docstring)."""
    folder = RunDir.of(run_dir)
    scores = read_scores(config.file, config.column)
    name = monitor_name(config, scores)
    summary = scores.attrs.get("format") == judge_summary.LAYOUT
    if summary and config.orientation != "risk":
        raise InputError(config.file, "a judge summary's verdicts are risk scores (failure 1, pass 0): drop "
                                      "--orientation safety")
    with folder.lock(STEP.name):
        trajectories = folder.read_frame("trajectories")
        try:
            matched, counts = match_scores(trajectories, scores, config.min_match)
        except ScoreMatchError as err:
            raise InputError(config.file, f"refused for {folder.path}: {err}") from err
        except ValueError as err:
            raise InputError(config.file, str(err)) from err
        source = config.file.name
        if summary:
            source = f"judge summary {scores.attrs.get('prompt_name')} by {scores.attrs.get('judge_model')} ({source})"
        rows = matched.assign(monitor=name, higher_is_uncertain=config.orientation == "risk", source=source)
        rows = rows.drop(columns=["row"], errors="ignore")
        existing, dropped = None, []
        if folder.has(ARTIFACT):
            try:
                existing = folder.read_frame(ARTIFACT)
            except StaleArtifactError:  # imported onto trajectories since replaced: they score another run
                dropped = sorted(set(read_parquet_file(folder.file(ARTIFACT), columns=["monitor"])["monitor"]))
        table = replace_monitor(existing, rows)
        with folder.commit(STEP.name) as commit:
            commit.write_parquet(ARTIFACT, table, based_on=folder.based_on("trajectories"))
    return ImportedScores(name, table[table["monitor"] == name].reset_index(drop=True), counts, folder.path,
                          [d for d in dropped if d != name])


def show(result: ImportedScores, run_dir: Path, config: ImportScoresConfig, say: Reporter) -> None:
    """What the command prints: how the file matched the run, the estimator's name, where."""
    c = result.counts
    say.say(f"external.{result.name}: {c['n_matched']} of the run's {c['n_run']} trajectories scored "
            f"(keyed by {c['keyed_by']}; {c['n_file']} rows in the file)")
    if c["n_unmatched_rows"]:
        say.say(f"{c['n_unmatched_rows']} of the file's rows name no trajectory of this run, e.g. "
                f"{c['unmatched_example']}", warn=True)
    if result.dropped:
        say.say(f"dropped the monitors imported onto the run's earlier trajectories (extracted again since): "
                f"{', '.join(result.dropped)}; import them again", warn=True)
    if c["n_matched"] < c["n_run"]:
        say.say(f"{c['n_run'] - c['n_matched']} trajectories have no score: the estimator table ranks "
                f"external.{result.name} on the {c['n_matched']} scored", warn=True)
    say.say(f"→ {RunDir(run_dir).file(ARTIFACT)}; 'agentuq-nb compare-estimators {run_dir}' ranks it beside the "
            "other families")


COMMAND = Command(summary="Per-trajectory scores from elsewhere (a CSV/JSONL score file, or a τ²-bench judge "
                          "summary's verdicts) as the estimator external.NAME → RUN_DIR/external_scores.parquet.",
                  arguments=("run_dir", "file"), options=("name", "orientation", "column", "min_match"),
                  show=show)


def import_scores(run_dir: str | Path | RunDir, file: str | Path, **options: Any) -> ImportedScores:
    """:func:`run` with the :class:`ImportScoresConfig` fields as keywords."""
    return run(run_dir, ImportScoresConfig(file=file, **options))
