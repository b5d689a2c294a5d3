"""A monitor's per-trajectory scores: the table a family of monitors from outside the run keeps in the run folder.

A monitor is anything that looked at a trajectory and gave it a score: an LLM judge (family ``judge``), scores a user
imports (family ``external``: a vendor's trust score, published judge verdicts). Each family keeps one long table,
``<family>_scores.parquet``, one row per (monitor, trajectory):

* the trajectory keys (``domain, task_id, trial, seed``) and ``simulation_id``;
* ``monitor``: the monitor's name within its family (the estimator is ``<family>.<monitor>``);
* ``score``: the value as the monitor gave it; ``higher_is_uncertain``: its orientation as stated (True: higher =
  riskier; False: higher = safer, a trust score); ``risk``: the score oriented "higher = more likely a failure"
  (``score``, or ``-score`` for a higher-is-safer one) - what the estimator ranks by;
* ``verdict`` and ``justification`` (text, where the monitor gave them: a judge's label and its reasons), ``cost_usd``
  (what scoring this trajectory cost, where known) and ``source`` (where the scores came from: a file, a model and
  prompt).

:func:`monitor_table` checks and types such a table; :func:`replace_monitor` puts one monitor's rows into a family's
table (a monitor imported again replaces its earlier rows, the others are kept). Pure: what reads and commits the run
folder is the family's step.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: the columns every monitor table has, in order (others a family adds are kept after them)
MONITOR_COLUMNS = [*TRAJECTORY_KEYS, "simulation_id", "monitor", "score", "higher_is_uncertain", "risk", "verdict",
                   "justification", "cost_usd", "source"]
#: a monitor's name: what follows ``<family>.`` in its estimator's name
MONITOR_NAME = re.compile(r"[a-z0-9][a-z0-9_\-]{0,63}")
#: the artefact a family's monitor table is (a ``<family>_scores`` table of the run folder)
ARTIFACT_SUFFIX = "_scores"


def artifact_of(family: str) -> str:
    """The run-folder artefact that holds ``family``'s monitor table (``external`` → ``external_scores``)."""
    return f"{family}{ARTIFACT_SUFFIX}"


def check_monitor_name(name: str) -> str:
    """``name`` when it is a monitor's name (lower-case letters, digits, ``_`` and ``-``, at most 64), else a
    ValueError saying so."""
    if not isinstance(name, str) or not MONITOR_NAME.fullmatch(name):
        raise ValueError(f"monitor name {name!r}: use lower-case letters, digits, '_' or '-' (at most 64 characters, "
                         "starting with a letter or digit)")
    return name


def monitor_table(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` as a monitor table: the columns of :data:`MONITOR_COLUMNS` (the optional ones - verdict,
    justification, cost, source, simulation id - filled with nulls where missing), keys typed alike, ``risk`` made from
    ``score`` and the orientation. A ValueError names what is wrong: a missing key or score column, a bad monitor
    name, a non-finite score, a trajectory scored twice by one monitor."""
    missing = [c for c in [*TRAJECTORY_KEYS, "monitor", "score", "higher_is_uncertain"] if c not in frame.columns]
    if missing:
        raise ValueError(f"a monitor table needs the columns {', '.join(missing)}")
    table = key_dtypes(frame.reset_index(drop=True))
    for name in table["monitor"].drop_duplicates():
        check_monitor_name(name)
    table["score"] = pd.to_numeric(table["score"], errors="coerce").astype(float)
    bad = ~np.isfinite(table["score"].to_numpy())
    if bad.any():
        row = table[bad].iloc[0]
        raise ValueError(f"monitor {row['monitor']!r} has {int(bad.sum())} non-finite score(s), e.g. task "
                         f"{row['task_id']} trial {row['trial']}")
    table["higher_is_uncertain"] = table["higher_is_uncertain"].astype(bool)
    table["risk"] = np.where(table["higher_is_uncertain"], table["score"], -table["score"])
    repeated = table.duplicated(["monitor", *TRAJECTORY_KEYS], keep=False)
    if repeated.any():
        row = table[repeated].iloc[0]
        raise ValueError(f"monitor {row['monitor']!r} scores task {row['task_id']} trial {row['trial']} more than once")
    for column, dtype in (("simulation_id", "string"), ("verdict", "string"), ("justification", "string"),
                          ("cost_usd", float), ("source", "string")):
        table[column] = table[column].astype(dtype) if column in table.columns else pd.Series(
            [None] * len(table), index=table.index, dtype=dtype if dtype is not float else "float64")
    rest = [c for c in table.columns if c not in MONITOR_COLUMNS]
    return table[MONITOR_COLUMNS + rest]


def replace_monitor(existing: pd.DataFrame | None, rows: pd.DataFrame) -> pd.DataFrame:
    """A family's table with the monitors of ``rows`` replaced by ``rows`` (the other monitors' rows kept, in their
    order; ``existing`` None: a new table)."""
    rows = monitor_table(rows)
    if existing is None or existing.empty:
        return rows
    kept = monitor_table(existing)
    kept = kept[~kept["monitor"].isin(rows["monitor"].unique())]
    return monitor_table(pd.concat([kept, rows], ignore_index=True))


def monitors_of(table: pd.DataFrame) -> list[str]:
    """The monitors a table holds, in the order they were first added."""
    return list(dict.fromkeys(table["monitor"].astype(str)))


#: the share of a run's trajectories a score file must match unless told otherwise (import-scores' --min-match)
DEFAULT_MIN_MATCH = 0.5


class ScoreMatchError(ValueError):
    """A score file whose keys match too few of a run's trajectories: ``counts`` (:func:`match_scores`)."""

    def __init__(self, message: str, counts: dict):
        self.counts = counts
        super().__init__(message)


def match_scores(trajectories: pd.DataFrame, scores: pd.DataFrame,
                 min_match: float = DEFAULT_MIN_MATCH) -> tuple[pd.DataFrame, dict]:
    """The rows of ``scores`` (a score file's frame: ``simulation_id``, or ``task_id`` with ``trial`` and ``domain``
    where a run needs them, then ``score`` …) joined to the run's ``trajectories`` (keys + ``simulation_id``), and
    the counts: ``n_run`` (the run's trajectories), ``n_file`` (the file's rows), ``n_matched``, ``n_unmatched_rows``
    (rows naming no trajectory of the run), ``unmatched_example``, ``keyed_by``. A :class:`ScoreMatchError` with the
    counts where fewer than ``min_match`` of the run's trajectories are matched; a ValueError where the file's keys
    name several trajectories at once (task and trial of a run with several domains or seeds)."""
    runs = key_dtypes(trajectories[[*TRAJECTORY_KEYS, "simulation_id"]].reset_index(drop=True), deep=False)
    file = scores.copy()
    if "simulation_id" in file.columns:
        keyed_by = ["simulation_id"]
        runs["simulation_id"] = runs["simulation_id"].astype("string")
        file["simulation_id"] = file["simulation_id"].astype("string")
    else:
        keyed_by = [k for k in ("domain", "task_id", "trial") if k in file.columns]
        file["task_id"] = file["task_id"].astype("string")
        if "trial" in file.columns:
            file["trial"] = file["trial"].astype("Int64")
        if "domain" in file.columns:
            file["domain"] = file["domain"].astype(str)
    if runs.duplicated(keyed_by).any():
        shared = runs[runs.duplicated(keyed_by, keep=False)].iloc[0]
        raise ValueError(f"{' / '.join(f'{k} {shared[k]}' for k in keyed_by)} names more than one trajectory of the "
                         f"run (several domains, trials or seeds): key the scores by simulation_id"
                         f"{'' if 'trial' in keyed_by else ', or add a trial column'}"
                         f"{'' if 'domain' in keyed_by else ', or add a domain column'}")
    file_cols = [c for c in file.columns if c not in TRAJECTORY_KEYS and c != "simulation_id"] + keyed_by
    joined = runs.merge(file[file_cols], on=keyed_by, how="inner")
    unmatched = file.merge(runs[keyed_by], on=keyed_by, how="left", indicator=True)
    unmatched = unmatched[unmatched["_merge"] == "left_only"]
    counts = {"n_run": int(len(runs)), "n_file": int(len(file)), "n_matched": int(len(joined)),
              "n_unmatched_rows": int(len(unmatched)), "keyed_by": " + ".join(keyed_by),
              "unmatched_example": (" / ".join(str(unmatched.iloc[0][k]) for k in keyed_by)
                                    if len(unmatched) else None)}
    if counts["n_run"] == 0 or counts["n_matched"] < min_match * counts["n_run"]:
        share = counts["n_matched"] / counts["n_run"] if counts["n_run"] else 0.0
        example = f", e.g. {counts['unmatched_example']}" if counts["unmatched_example"] else ""
        raise ScoreMatchError(
            f"its keys ({counts['keyed_by']}) match {counts['n_matched']} of the run's {counts['n_run']} trajectories "
            f"({share:.0%}), fewer than the {min_match:.0%} required; {counts['n_unmatched_rows']} of its "
            f"{counts['n_file']} rows name no trajectory of the run{example}", counts)
    return joined, counts
