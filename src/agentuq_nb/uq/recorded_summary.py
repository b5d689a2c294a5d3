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

from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.results import iter_simulations, read_header
from agentuq_nb.io.rundir import RunDir
from agentuq_nb.records import Results
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.run_tables import TRAJECTORY_META, trajectory_record, trajectory_table
from agentuq_nb.records.summary import AGENTUQ_SUMMARY
from agentuq_nb.records.token_statistics import TRAJECTORY_COUNT
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.aggregation import TRAJECTORY_COLUMNS
from agentuq_nb.uq.base_tables import duplicate_key_error
from agentuq_nb.uq.extraction import models_by_role, results_input
from agentuq_nb.uq.turn_partials import ROLE_KEYS

STEP = "recorded_summary"
SELF = "self"
#: the uq_summary fields read, per role
RECORDED_FIELDS = (TRAJECTORY_COUNT, *AGENTUQ_SUMMARY)


def has_recorded_summary(results_path: str | Path, sample: int = 5) -> bool:
    """Whether the first ``sample`` simulations of a results file carry a ``uq_summary``."""
    seen = 0
    for sim in iter_simulations(results_path):
        if not sim.uq_summary:
            return False
        seen += 1
        if seen >= sample:
            break
    return seen > 0


def recorded_rows(sim, domain: str) -> list[dict]:
    """One trajectory-summary row per role of a simulation's ``uq_summary``."""
    keys = {"domain": domain, "task_id": sim.task_id, "trial": sim.trial, "seed": sim.seed}
    rows = []
    for role, stats in (sim.uq_summary or {}).items():
        if not isinstance(stats, dict):
            continue
        rows.append({**keys, "scorer": SELF, "role": str(role),
                     **{name: stats.get(name) for name in RECORDED_FIELDS}})
    return rows


def summarize_recorded(results_path: str | Path, run_dir: str | Path | RunDir) -> pd.DataFrame:
    """Publish ``trajectories`` and ``trajectory_summary`` of ``run_dir`` from the results' recorded
    ``uq_summary`` (see the module docstring); returns the summary.

    Refused when a simulation has no ``uq_summary``, when a (task_id, trial, seed) repeats, and when
    ``run_dir`` already holds token tables (they would not belong with the new trajectories).
    """
    results_path, run = Path(results_path), RunDir.of(run_dir)
    header = read_header(results_path)
    domain = Results.domain_of(header.get("info"))
    rows: list[dict] = []
    trajectories: list[dict] = []
    missing: list[str] = []
    first_of_key: dict[tuple, str] = {}
    for sim in iter_simulations(results_path):
        key = (str(sim.task_id), sim.trial, sim.seed)
        first = first_of_key.setdefault(key, str(sim.id))
        if first != str(sim.id):
            raise duplicate_key_error(str(results_path), key, first, str(sim.id))
        trajectories.append(trajectory_record(sim, domain))
        recorded = recorded_rows(sim, domain)
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
    summary[numeric] = summary[numeric].apply(pd.to_numeric, errors="coerce").astype(float)
    summary[TRAJECTORY_COUNT] = summary[TRAJECTORY_COUNT].round().astype("Int64")
    summary["num_turns"] = pd.array([pd.NA] * len(summary), dtype="Int64")
    table = trajectory_table(trajectories)
    meta = key_dtypes(table.to_pandas()[TRAJECTORY_KEYS + TRAJECTORY_META])
    summary = key_dtypes(summary).merge(meta, on=TRAJECTORY_KEYS, how="left")
    summary = summary.sort_values(ROLE_KEYS, kind="stable", ignore_index=True)
    if not np.isfinite(summary[list(AGENTUQ_SUMMARY)].to_numpy(dtype=float)).any():
        raise InputError(results_path, "the recorded uq_summary holds no statistic with a value")
    with run.lock(STEP):
        held = [p.name for p in run.token_tables(required=False)]
        if held:
            raise InputError(run.path, f"holds token tables ({', '.join(held)}) of an extracted run; write the "
                                       "recorded summary into a new run folder")
        based_on = results_input(run, results_path)
        with run.commit(STEP) as commit:
            commit.write_parquet("trajectories", table, based_on)
            made_from = {**based_on, run.relative("trajectories"): commit.id}
            commit.write_with("trajectory_summary_csv", lambda p: summary.to_csv(p, index=False), based_on=made_from)
            commit.write_parquet("trajectory_summary", summary, based_on=made_from)
            commit.update_manifest(step=STEP, results=str(results_path.resolve()), layout=None, sidecar_dir=None,
                                   domain=domain, models=models_by_role(header), num_simulations=len(trajectories),
                                   num_tokens=0, warnings={}, scoring=None, summary_source="uq_summary")
    return summary
