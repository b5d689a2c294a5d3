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
