"""A run's trajectory summary from the ``uq_summary`` its results recorded, for when the token rows
are not at hand.

agentuq's harness (and this project's simulator) writes into every simulation a ``uq_summary``: per
role (``assistant``, ``user``, and ``combined`` when both are present) ``total_tokens`` and the
statistics of :data:`agentuq_nb.records.summary.AGENTUQ_SUMMARY` (``trajectory_nll``,
``avg_token_nll``, ``mean_topk_entropy``, ``min_chosen_prob``). Many users of a published release
download only its results JSONs, not the token sidecars; :func:`summarize_recorded` turns those
numbers into the run's ``trajectory_summary`` so that every trajectory-level token estimator (and
the length baselines) can be evaluated from the JSONs alone.

What it publishes, as one commit: ``trajectories.parquet`` and ``trajectory_summary`` (Parquet and
CSV), scorer ``self``, the roles and statistics as recorded (the other statistics and ``num_turns``
empty, so the registry lists only what is there); the manifest's ``step`` is ``recorded_summary`` and
``num_tokens`` 0. Turn-level work (turn summaries, observation scoring, dynamics, SAUP, token views)
needs the token rows: extract the run with its sidecars for those.

Definitions are agentuq's: a mean divides by every token of the role, a sum or extreme runs over the
tokens that have a value. On rows without missing values - what both harnesses write - they equal
what ``aggregate`` computes from the token rows (a test holds them equal on a simulated run).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import Field

from agentuq_nb.io.atomic import csv_writer
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.input_warnings import emit_input_warnings
from agentuq_nb.io.store.artifacts import results_input
from agentuq_nb.io.store.rundir import RESULTS_CONTENT, RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.run_tables import TRAJECTORY_META, trajectory_record, trajectory_table
from agentuq_nb.records.summary import AGENTUQ_SUMMARY
from agentuq_nb.records.token_statistics import TRAJECTORY_COUNT
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import Step, StepConfig
from agentuq_nb.uq.aggregation import TRAJECTORY_COLUMNS
from agentuq_nb.uq.base_tables import duplicate_key_error
from agentuq_nb.uq.turn_partials import ROLE_KEYS

#: a part of ``analyze`` (when the results carry no log-probs but a recorded ``uq_summary``), not a command
STEP = Step("recorded_summary", "agentuq-nb analyze RESULTS --out RUN_DIR", command_line=False)
SELF = "self"
#: the uq_summary fields read, per role
RECORDED_FIELDS = (TRAJECTORY_COUNT, *AGENTUQ_SUMMARY)
#: the roles agentuq's uq_summary has (``combined`` when both are present)
RECORDED_ROLES = ("assistant", "user", "combined")


class RecordedSummaryConfig(StepConfig):
    """The results whose recorded ``uq_summary`` is read."""

    results: Path = Field(description="a τ²-bench results file whose simulations carry a uq_summary")


def run(run_dir: str | Path | RunDir, config: RecordedSummaryConfig) -> pd.DataFrame:
    """:func:`summarize_recorded` of ``config.results`` into ``run_dir``."""
    return summarize_recorded(config.results, run_dir)


def _number(value: Any) -> tuple[float | None, str | None]:
    """A recorded value as a float, or None with the kind of problem (booleans are not numbers)."""
    if value is None:
        return None, "uq_summary_value_missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, "uq_summary_value_not_a_number"
    if not math.isfinite(value):
        return None, "uq_summary_value_missing"
    return float(value), None


def recorded_rows(sim, domain: str, where: str, warnings: InputWarnings) -> list[dict]:
    """One trajectory-summary row per role of a simulation's ``uq_summary``; what cannot be used is
    counted in ``warnings`` (kinds ``uq_summary_*``), never dropped without a word."""
    keys = {"domain": domain, "task_id": sim.task_id, "trial": sim.trial, "seed": sim.seed}
    place = f"{where} simulation {sim.id}"
    rows = []
    summary = sim.uq_summary or {}
    if summary and "assistant" not in summary:
        warnings.add("uq_summary_without_assistant", f"{place} (roles: {', '.join(map(str, summary))})")
    for role, stats in summary.items():
        if not isinstance(stats, dict):
            warnings.add("uq_summary_role_not_a_mapping", f"{place} role {role!r}")
            continue
        if role not in RECORDED_ROLES:
            warnings.add("uq_summary_unknown_role", f"{place} role {role!r}")
        row = {**keys, "scorer": SELF, "role": str(role)}
        for name in RECORDED_FIELDS:
            row[name], problem = _number(stats.get(name))
            if problem:
                warnings.add(problem, f"{place} {role}.{name} = {stats.get(name)!r}")
        rows.append(row)
    return rows


def summarize_recorded(results_path: str | Path, run_dir: str | Path | RunDir) -> pd.DataFrame:
    """Publish ``trajectories`` and ``trajectory_summary`` of ``run_dir`` from the results' recorded
    ``uq_summary`` (see the module docstring); returns the summary.

    Refused when a simulation has no ``uq_summary``, when a (task_id, trial, seed) repeats, and when
    ``run_dir`` already holds token tables (they would not belong with the new trajectories). Values
    that are not finite numbers, roles that are not mappings, roles agentuq does not write and
    summaries without the assistant are counted (an ``InputDataWarning`` per kind, and the manifest's
    ``warnings``).
    """
    results_path, run = Path(results_path), RunDir.of(run_dir)
    file = ResultsFile.open(results_path, tell_version=False)  # told once what the results are; their header read once
    domain = file.domain
    rows: list[dict] = []
    trajectories: list[dict] = []
    missing: list[str] = []
    warnings = InputWarnings()
    first_of_key: dict[tuple, str] = {}
    for sim in file.simulations():
        key = (str(sim.task_id), sim.trial, sim.seed)
        first = first_of_key.setdefault(key, str(sim.id))
        if first != str(sim.id):
            raise duplicate_key_error(str(results_path), key, first, str(sim.id))
        trajectories.append(trajectory_record(sim, domain))
        recorded = recorded_rows(sim, domain, str(results_path), warnings)
        if not recorded:
            missing.append(str(sim.id))
        rows += recorded
    if not trajectories:
        raise InputError(results_path, "results contain no simulations")
    if missing:
        raise InputError(results_path, f"{len(missing)} of {len(trajectories)} simulations have no uq_summary "
                                       f"(first: {missing[0]}); the trajectory summary needs their token sidecars")
    summary = pd.DataFrame(rows).reindex(columns=TRAJECTORY_COLUMNS)
    numeric = [c for c in TRAJECTORY_COLUMNS if c not in ROLE_KEYS]
    summary[numeric] = summary[numeric].astype(float)
    summary[TRAJECTORY_COUNT] = summary[TRAJECTORY_COUNT].round().astype("Int64")
    summary["num_turns"] = pd.array([pd.NA] * len(summary), dtype="Int64")
    table = trajectory_table(trajectories)
    meta = key_dtypes(table.to_pandas()[TRAJECTORY_KEYS + TRAJECTORY_META])
    summary = key_dtypes(summary).merge(meta, on=TRAJECTORY_KEYS, how="left")
    summary = summary.sort_values(ROLE_KEYS, kind="stable", ignore_index=True)
    if not np.isfinite(summary[list(AGENTUQ_SUMMARY)].to_numpy(dtype=float)).any():
        raise InputError(results_path, "the recorded uq_summary holds no statistic with a value")
    with run.lock(STEP.name):
        held = [p.name for p in run.token_tables(required=False)]
        if held:
            raise InputError(run.path, f"holds token tables ({', '.join(held)}) of an extracted run; write the "
                                       "recorded summary into a new run folder")
        based_on = results_input(run, results_path)
        with run.commit(STEP.name) as commit:
            commit.write_parquet("trajectories", table, based_on)
            made_from = {**based_on, run.relative("trajectories"): commit.id}
            commit.write_with("trajectory_summary_csv", csv_writer(summary), based_on=made_from)
            commit.write_parquet("trajectory_summary", summary, based_on=made_from)
            commit.update_manifest(step=STEP.name, results=str(results_path.resolve()),
                                   results_sha256=based_on[RESULTS_CONTENT], layout=None, sidecar_dir=None,
                                   domain=domain, models=file.models, num_simulations=len(trajectories),
                                   num_tokens=0, warnings=warnings.as_dict(), scoring=None,
                                   summary_source="uq_summary")
    emit_input_warnings(warnings)
    return summary
