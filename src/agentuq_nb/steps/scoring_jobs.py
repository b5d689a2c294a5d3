"""The job machinery ``rescore`` and ``score-observations`` (and ``sample-actions``' checkpoints) share: one job per
trajectory (:func:`agentuq_nb.uq.observation.score_one`), run in this process or on a Dask cluster, each result
checkpointed atomically so a rerun skips it, and the checkpoints consolidated into one table.
"""
from __future__ import annotations

import os
import time
from itertools import islice
from pathlib import Path

import pyarrow.parquet as pq

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.distributed import JobRunner
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.ingest.results import ResultsFile, iter_simulations
from agentuq_nb.io.ingest.sidecars import trajectory_table_name
from agentuq_nb.io.store.token_table import TokenTableWriter
from agentuq_nb.records import Results
from agentuq_nb.records.config import ExecutionConfig, ScoringConfig
from agentuq_nb.uq.observation import (
    ScoredTrajectory,
    ScoringJob,
    ScoringReport,
    check_trajectory,
    score_on_worker,
    score_one,
    scorer_system_prompt,
)


def simulation_count(results_path: str | Path, limit: int | None = None) -> int:
    """How many simulations a results file holds (at most ``limit``): the total of a progress bar, so that it shows an
    ETA. One more streamed pass over the file, a small fraction of what scoring or sampling them costs."""
    n = 0
    for _ in islice(iter_simulations(results_path), limit):
        n += 1
    return n


def scoring_jobs(results_path: Path, checkpoint_dir: Path, config: ScoringConfig, roles: set[str],
                  report: ScoringReport):
    """``(checkpoint path, job)`` for every simulation not scored yet, in file order."""
    file = ResultsFile.open(results_path, tell_version=False)  # its header and its simulations: one sniff
    info = file.header.get("info") or {}
    domain = Results.domain_of(info)
    system = scorer_system_prompt(config.scorer_mode, info)
    for sim in islice(file.simulations(), config.limit):
        out = checkpoint_dir / trajectory_table_name(domain, sim.task_id, sim.trial, sim.seed)
        if out.exists():
            report.skipped += 1
            continue
        where = f"{results_path} simulation {sim.id}"
        check_trajectory(sim, where, report.warnings)
        yield out, ScoringJob(sim=sim, domain=domain, where=where, mode=config.scorer_mode, model=config.scorer_llm,
                              system=system, source=config.source, roles=frozenset(roles),
                              top_logprobs=config.top_logprobs)


def save_scored(out: Path, scored: ScoredTrajectory, report: ScoringReport) -> None:
    """Checkpoint one scored trajectory (the first written wins) and count it in ``report``."""
    if out.exists():  # dedupe by trajectory: the first result written wins
        return
    atomic_write_with(out, lambda p: pq.write_table(scored.table, p))
    report.warnings.merge(scored.warnings)
    if scored.truncations:
        report.truncations += scored.truncations
        report.truncated_trajectories += 1
    report.scored += 1
    report.num_tokens += scored.table.num_rows
    report.cost.add(scored)


def score_results(results_path: Path, checkpoint_dir: Path, config: ScoringConfig, roles: set[str],
                   report: ScoringReport, execution: ExecutionConfig) -> None:
    """Score every simulation into ``checkpoint_dir/<trajectory>.parquet``, skipping done ones."""
    from agentuq_nb import llm

    if execution.scheduler is None:  # on a cluster the workers' environment is what counts
        llm.check_model(config.scorer_llm)
    jobs = scoring_jobs(results_path, checkpoint_dir, config, roles, report)
    runner = JobRunner(label=f"score_{config.scorer_mode}", desc=f"score {config.scorer_mode}", unit="traj",
                       noun="trajectories", kept_as=f"checkpointed in {checkpoint_dir}", **execution.runner_options())
    began = time.perf_counter()
    try:
        runner.run(score_one, jobs, lambda out, scored: save_scored(out, scored, report),
                   total=simulation_count(results_path, config.limit), done=lambda: report.skipped,
                   worker_fn=score_on_worker)
    finally:
        report.cost.wall_seconds += time.perf_counter() - began


def consolidate(checkpoint_dir: Path, out_path: Path, metadata: dict) -> int:
    """The checkpointed tables of ``checkpoint_dir`` as one token table at ``out_path``; its row count."""
    with TokenTableWriter(out_path, metadata=metadata) as writer:
        for part in sorted(checkpoint_dir.glob("*.parquet")):
            writer.write(pq.read_table(part))
        return writer.num_rows


def check_checkpoint_settings(state_path: Path, state: dict) -> None:
    """Refuse to resume checkpointed work with other settings (another scorer or sampler, other results),
    which would mix two runs' rows; the first run records its settings in ``state_path``."""
    holds_work = any(state_path.parent.glob("*.parquet"))
    if os.path.lexists(state_path) and holds_work:
        old = read_limited_json(state_path, MAX_SMALL_JSON_BYTES, "checkpoint settings")
        old = old if isinstance(old, dict) else {}
        # a setting the earlier run did not record (checkpoints of an older version) cannot be compared
        changed = {k: (old[k], v) for k, v in state.items() if k in old and old[k] != v}
        if changed:
            raise InputError(state_path, f"these checkpoints were made with other settings {changed}; "
                             "use a new run directory or delete the checkpoints to start again")
    else:  # no checkpoint yet (a first run, or one that stopped before its first): nothing could be mixed
        atomic_write_json(state_path, state)


