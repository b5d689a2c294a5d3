"""Observation uncertainty and replay scoring: teacher-forced log-probs of *observed* text.

* ``score_observations`` — how surprising each user message and tool result is under a scorer:
  ``agent_llm`` (the agent's model with the agent's own system prompt: instructions + policy) or
  ``auxiliary_llm`` (an impartial observer prompted to predict the next observation, with the
  policy as domain knowledge). Rows get role ``user``/``tool`` and ``scorer`` = the mode, and
  aggregate into AgentUQ's ``observation_user`` / ``observation_tool`` / ``observation_combined``.
* ``rescore`` — rows for *every* message (assistant actions, tool calls as their serialized
  JSON, observations) of any τ²-bench results file, with or without log-probs of its own, so
  that ``aggregate`` and ``evaluate`` work on any recorded run.

AgentUQ's code scores observations with ``chat_replay``: the log-probs of the scorer's own
continuation, not of the observed text. Here the default is teacher forcing (one left-to-right
pass per trajectory through ``llm.score_trajectory``); ``chat_replay`` remains available,
labelled as such in ``source`` and written to its own table so it is never mixed in silently.

Both are resumable: each scored trajectory is checkpointed atomically and skipped on a rerun.
With ``scheduler`` (a Dask address, ``local:N`` or a ``distributed.Client``) each trajectory is
one job on the cluster (:func:`score_one`); the client writes the checkpoints, so the tables are
the same as an in-process run's.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.distributed import JobRunner, with_worker_api_base
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.ingest.sidecars import trajectory_table_name
from agentuq_nb.io.ingest.token_sources import RAW_COLUMNS, RAW_SCHEMA
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.io.store.token_table import TokenTableWriter
from agentuq_nb.records import Results, Simulation
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig, ScoringConfig, configs_from_options
from agentuq_nb.uq.base_tables import BaseTables
from agentuq_nb.uq.extraction import results_input
from agentuq_nb.uq.token_metrics import with_token_metrics

SCORER_MODES = ("agent_llm", "auxiliary_llm")

# τ²-bench's agent system prompt (its LLMAgent), used when a results file does not record the
# prompt its agent actually saw.
TAU2_AGENT_INSTRUCTIONS = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
    "You cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)
OBSERVER_INSTRUCTIONS = (
    "You are an impartial observer of a customer-service conversation between an AI agent, a human "
    "user, and the tools the agent calls. You do not take part. At each point, predict the next "
    "observation exactly as it will appear: either the user's next message or the result the tool "
    "returns for the agent's last call. Use the domain knowledge below to judge what is plausible."
)


def agent_system_prompt(info: dict) -> str:
    """The agent's system prompt: as recorded by our simulator, else τ²-bench's with the policy."""
    agent = info.get("agent_info") or {}
    if agent.get("system_prompt"):
        return str(agent["system_prompt"])
    policy = (info.get("environment_info") or {}).get("policy") or ""
    return f"<instructions>\n{TAU2_AGENT_INSTRUCTIONS}\n</instructions>\n<policy>\n{policy}\n</policy>"


def observer_system_prompt(info: dict) -> str:
    policy = (info.get("environment_info") or {}).get("policy") or ""
    return f"{OBSERVER_INSTRUCTIONS}\n\n<domain_knowledge>\n{policy}\n</domain_knowledge>"


def scorer_system_prompt(mode: str, info: dict) -> str:
    if mode not in SCORER_MODES:
        raise ValueError(f"unknown scorer mode '{mode}'; use one of {SCORER_MODES}")
    return agent_system_prompt(info) if mode == "agent_llm" else observer_system_prompt(info)


def conversation(sim: Simulation) -> list[dict]:
    """The trajectory as τ²-style message dicts, as the LLM layer renders them."""
    out = []
    for m in sim.messages:
        msg = {"role": m.role, "content": m.content}
        if m.tool_calls:
            msg["tool_calls"] = [tc.model_dump(include={"id", "name", "arguments", "requestor"}) for tc in m.tool_calls]
        if m.role == "tool":
            msg["id"] = m.id
        out.append(msg)
    return out


def _check_trajectory(sim: Simulation, where: str, warnings: InputWarnings) -> None:
    answered = {m.id for m in sim.messages if m.role == "tool"}
    for m in sim.messages:
        if m.role != "tool" and not (m.content or "").strip() and not m.tool_calls:
            warnings.add("messages_without_content", f"{where} message {m.turn_idx}")
        for call in m.tool_calls or []:
            if call.id not in answered:
                warnings.add("tool_calls_without_results", f"{where} call {call.name} ({call.id})")


@dataclass
class ScoringCost:
    """What a scoring call cost: its wall time, each trajectory's scoring time where it ran, and the tokens the
    embedded model decoded and took from its cache instead (the prompt prefix the trajectories share: within one
    process a domain's system prompt is decoded once, see ``llm.local_model``; 0 for a remote scorer).

    Not part of :meth:`ScoringReport.as_dict`: it depends on the machine and on how the jobs were spread."""

    trajectories: int = 0
    wall_seconds: float = 0.0
    scoring_seconds: float = 0.0
    tokens_evaluated: int = 0
    tokens_reused: int = 0

    def add(self, scored: "ScoredTrajectory") -> None:
        self.trajectories += 1
        self.scoring_seconds += scored.seconds
        self.tokens_evaluated += scored.tokens_evaluated
        self.tokens_reused += scored.tokens_reused

    @property
    def reused_share(self) -> float:
        total = self.tokens_evaluated + self.tokens_reused
        return self.tokens_reused / total if total else 0.0

    def line(self) -> str | None:
        """One line for the user: time per trajectory and prefix reuse (None when nothing was scored)."""
        n = self.trajectories
        if not n:
            return None
        text = (f"{n} trajectories in {self.wall_seconds:.0f} s: {self.wall_seconds / n:.1f} s per trajectory "
                f"({self.scoring_seconds / n:.1f} s of scoring each where it ran)")
        if self.tokens_evaluated:
            text += (f"; tokens decoded {self.tokens_evaluated:,}, taken from the cache instead {self.tokens_reused:,} "
                     f"({100 * self.reused_share:.1f} %: the prompt prefix the trajectories share, decoded once "
                     "per process)")
        return text


@dataclass
class ScoringReport:
    run_dir: Path
    scored: int = 0
    skipped: int = 0
    num_tokens: int = 0
    truncations: int = 0
    truncated_trajectories: int = 0
    warnings: InputWarnings = field(default_factory=InputWarnings)
    cost: ScoringCost = field(default_factory=ScoringCost)

    def as_dict(self) -> dict:
        return {"scored": self.scored, "skipped_already_scored": self.skipped, "num_tokens": self.num_tokens,
                "sliding_window_truncations": self.truncations,
                "truncated_trajectories": self.truncated_trajectories, "warnings": self.warnings.as_dict()}

    def explain(self) -> list[str]:
        """One line per term of :meth:`as_dict` with a value worth explaining (what it counts, what follows)."""
        values = self.as_dict()
        return [f"{term}: {values[term]}: {text}" for term, text in REPORT_TERMS.items() if values.get(term)]


#: what the scoring report's terms count (said beside the report where it is printed)
REPORT_TERMS = {
    "scored": "trajectories scored by this call",
    "skipped_already_scored": "trajectories already scored by an earlier, interrupted call (their checkpoints are "
                              "kept and reused)",
    "num_tokens": "token rows in the published table",
    "sliding_window_truncations": "times a conversation longer than the scorer's context window had its oldest "
                                  "text dropped while it was scored: the tokens after each cut are conditioned on the "
                                  "system prompt and the most recent half window only, not on the whole history",
    "truncated_trajectories": "trajectories with at least one such cut (their later tokens' NLL is not a "
                              "full-history NLL)",
}


def simulation_count(results_path: str | Path, limit: int | None = None) -> int:
    """How many simulations a results file holds (at most ``limit``): the total of a progress bar, so that it shows an
    ETA. One more streamed pass over the file, a small fraction of what scoring or sampling them costs."""
    n = 0
    for _ in islice(iter_simulations(results_path), limit):
        n += 1
    return n


def _rows_table(rows: list[dict], sim: Simulation, domain: str, roles: set[str], mode: str) -> pa.Table:
    keys = {"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed}
    kept = [r for r in rows if r["role"] in roles]
    cols = {name: [] for name in RAW_COLUMNS}
    for r in kept:
        msg = sim.messages[r["message_idx"]]
        full = {**r, **keys, "scorer": mode, "message_timestamp": msg.timestamp,
                "turn_idx": msg.turn_idx if msg.turn_idx is not None else r["message_idx"]}
        for name in RAW_COLUMNS:
            cols[name].append(full.get(name))
    return pa.table(cols, schema=RAW_SCHEMA)


@dataclass(frozen=True)
class ScoringJob:
    """One trajectory to score, picklable so that a Dask worker can run it."""

    sim: Simulation
    domain: str
    where: str  # "<results file> simulation <id>", for warnings
    mode: str
    model: str
    system: str
    source: str
    roles: frozenset[str]
    top_logprobs: int
    request: dict[str, Any] = field(default_factory=dict)  # extra litellm arguments (api_base)


@dataclass
class ScoredTrajectory:
    table: pa.Table
    truncations: int
    warnings: InputWarnings
    seconds: float = 0.0  # scoring it took where it ran
    tokens_evaluated: int = 0  # the embedded model's tokens decoded ...
    tokens_reused: int = 0  # ... and taken from its cache instead


def score_one(job: ScoringJob) -> ScoredTrajectory:
    """Teacher-forced (or replayed) token rows of one trajectory, with token metrics."""
    from agentuq_nb import llm

    began = time.perf_counter()
    rows = llm.score_trajectory(conversation(job.sim), model=job.model, system=job.system, backend=job.source,
                                top_logprobs=job.top_logprobs, scorer=job.mode, **job.request)
    seconds = time.perf_counter() - began
    warnings = InputWarnings()
    table = with_token_metrics(_rows_table(rows, job.sim, job.domain, set(job.roles), job.mode), job.where, warnings)
    reuse = rows.reuse  # llm.ScoredTokens: None for a remote scorer
    return ScoredTrajectory(table, rows.truncations, warnings, seconds,
                            reuse.evaluated if reuse else 0, reuse.reused if reuse else 0)


def score_on_worker(job: ScoringJob) -> ScoredTrajectory:
    """:func:`score_one` on a Dask worker: a remote scorer uses the worker's ``api_base``, if it has one."""
    if job.model != EMBEDDED_MODEL:
        job = replace(job, request=with_worker_api_base(job.request))
    return score_one(job)


def _scoring_jobs(results_path: Path, checkpoint_dir: Path, config: ScoringConfig, roles: set[str],
                  report: ScoringReport):
    """``(checkpoint path, job)`` for every simulation not scored yet, in file order."""
    info = read_header(results_path).get("info") or {}
    domain = Results.domain_of(info)
    system = scorer_system_prompt(config.scorer_mode, info)
    for sim in islice(iter_simulations(results_path), config.limit):
        out = checkpoint_dir / trajectory_table_name(domain, sim.task_id, sim.trial, sim.seed)
        if out.exists():
            report.skipped += 1
            continue
        where = f"{results_path} simulation {sim.id}"
        _check_trajectory(sim, where, report.warnings)
        yield out, ScoringJob(sim=sim, domain=domain, where=where, mode=config.scorer_mode, model=config.scorer_llm,
                              system=system, source=config.source, roles=frozenset(roles),
                              top_logprobs=config.top_logprobs)


def _save_scored(out: Path, scored: ScoredTrajectory, report: ScoringReport) -> None:
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


def _score_results(results_path: Path, checkpoint_dir: Path, config: ScoringConfig, roles: set[str],
                   report: ScoringReport, execution: ExecutionConfig) -> None:
    """Score every simulation into ``checkpoint_dir/<trajectory>.parquet``, skipping done ones."""
    from agentuq_nb import llm

    if execution.scheduler is None:  # on a cluster the workers' environment is what counts
        llm.check_model(config.scorer_llm)
    jobs = _scoring_jobs(results_path, checkpoint_dir, config, roles, report)
    runner = JobRunner(label=f"score_{config.scorer_mode}", desc=f"score {config.scorer_mode}", unit="traj",
                       noun="trajectories", kept_as=f"checkpointed in {checkpoint_dir}", **execution.runner_options())
    began = time.perf_counter()
    try:
        runner.run(score_one, jobs, lambda out, scored: _save_scored(out, scored, report),
                   total=simulation_count(results_path, config.limit), done=lambda: report.skipped,
                   worker_fn=score_on_worker)
    finally:
        report.cost.wall_seconds += time.perf_counter() - began


def _consolidate(checkpoint_dir: Path, out_path: Path, metadata: dict) -> int:
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
        changed = {k: (old.get(k), v) for k, v in state.items() if old.get(k) != v}
        if changed:
            raise InputError(state_path, f"these checkpoints were made with other settings {changed}; "
                             "use a new run directory or delete the checkpoints to start again")
    else:  # no checkpoint yet (a first run, or one that stopped before its first): nothing could be mixed
        atomic_write_json(state_path, state)


def score_observations(run_dir: str | Path | RunDir, results: str | Path | None = None, **options: Any) -> ScoringReport:
    """Token rows of every user and tool message → ``RUN_DIR/tokens.observations_<mode>[_replay].parquet``.

    ``options``: fields of :class:`~agentuq_nb.records.config.ScoringConfig` (``scorer_mode``,
    ``scorer_llm``, ``backend``, ``user_messages``, ``tool_messages``, ``top_logprobs``, ``limit``) and
    of :class:`~agentuq_nb.records.config.ExecutionConfig` (``scheduler``: one job per trajectory on a
    Dask cluster, ``api_bases``: one scorer server per worker, ``progress`` …); the tables are the
    same however the jobs run. Resumable per trajectory; the run folder is locked meanwhile."""
    config, execution = configs_from_options(options, ScoringConfig, "scoring")
    roles = config.observation_roles()
    run = RunDir.of(run_dir)
    with run.lock("score-observations"):
        results_path = Path(results) if results else run.results_path()
        suffix = config.observation_table_suffix()
        checkpoint_dir = run.checkpoint_dir(f"observations_{suffix}")
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        check_checkpoint_settings(checkpoint_dir / "scorer.json", {"model": config.scorer_llm, "backend": config.source,
                                                             "roles": sorted(roles),
                                                             "results": str(results_path.resolve())})
        report = ScoringReport(run.path)
        _score_results(results_path, checkpoint_dir, config, roles, report, execution)
        with run.commit("score-observations") as commit:
            table = run.observation_tokens(suffix).name
            report.num_tokens = _consolidate(checkpoint_dir, commit.stage(table, run.based_on("tokens")),
                                             commit.metadata)
        atomic_write_json(checkpoint_dir / "report.json", report.as_dict())
    return report


def rescore(results: str | Path, out: str | Path | RunDir, **options: Any) -> ScoringReport:
    """Rows for every message of a results file → ``OUT``'s base tables (tokens, partials, messages,
    trajectories) and manifest, published as one commit, so that ``aggregate`` and ``evaluate`` work on
    any recorded run.

    ``options`` as in :func:`score_observations`; ``limit`` scores only the first N simulations (a quick
    look at a large file)."""
    config, execution = configs_from_options(options, ScoringConfig, "scoring")
    results_path, run = Path(results), RunDir.of(out)
    with run.lock("rescore"):
        checkpoint_dir = run.checkpoint_dir(f"rescore_{config.scorer_mode}")
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        check_checkpoint_settings(checkpoint_dir / "scorer.json", {"model": config.scorer_llm, "backend": config.source,
                                                             "results": str(results_path.resolve())})
        report = ScoringReport(run.path)
        _score_results(results_path, checkpoint_dir, config, {"assistant", "user", "tool"}, report, execution)
        domain = Results.domain_of(read_header(results_path).get("info"))
        with run.commit("rescore") as commit, BaseTables(commit, results_input(run, results_path)) as tables:
            for part in sorted(checkpoint_dir.glob("*.parquet")):
                tables.add_tokens(pq.read_table(part))
            tables.add_simulations(islice(iter_simulations(results_path, report.warnings), config.limit), domain,
                                   str(results_path), report.warnings)
            tables.close(str(results_path), report.warnings)
            report.num_tokens = tables.num_tokens
            commit.update_manifest(
                step="rescore", results=str(results_path.resolve()), layout=None, sidecar_dir=None, domain=domain,
                models={}, num_simulations=len(tables.trajectories), num_tokens=report.num_tokens,
                warnings=report.warnings.as_dict(),
                scoring={"scorer_llm": config.scorer_llm, "scorer_mode": config.scorer_mode, "backend": config.source,
                         **report.as_dict()})
    return report
