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

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from agentuq_nb.distributed import with_worker_api_base
from agentuq_nb.io.errors import InputWarnings
from agentuq_nb.io.ingest.token_sources import RAW_COLUMNS, RAW_SCHEMA
from agentuq_nb.records import Simulation
from agentuq_nb.records.config import EMBEDDED_MODEL
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


def check_trajectory(sim: Simulation, where: str, warnings: InputWarnings) -> None:
    """Count (in ``warnings``) what of a trajectory cannot be scored as recorded."""
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
    reuse: Any = None  # llm.local_model.PrefixReuse of the trajectories scored by the embedded model (None: none was)

    def add(self, scored: "ScoredTrajectory") -> None:
        self.trajectories += 1
        self.scoring_seconds += scored.seconds
        if scored.reuse is not None:
            from agentuq_nb.llm.local_model import PrefixReuse  # the llm layer is loaded once a trajectory is scored

            self.reuse = self.reuse or PrefixReuse()
            self.reuse.add(scored.reuse)

    @property
    def tokens_evaluated(self) -> int:
        return self.reuse.evaluated if self.reuse is not None else 0

    @property
    def tokens_reused(self) -> int:
        return self.reuse.reused if self.reuse is not None else 0

    def line(self) -> str | None:
        """One line for the user: time per trajectory and prefix reuse (None when nothing was scored)."""
        n = self.trajectories
        if not n:
            return None
        text = (f"{n} trajectories in {self.wall_seconds:.0f} s: {self.wall_seconds / n:.1f} s per trajectory "
                f"({self.scoring_seconds / n:.1f} s of scoring each where it ran)")
        if self.tokens_evaluated:
            text += (f"; tokens decoded {self.tokens_evaluated:,}, taken from the cache instead {self.tokens_reused:,} "
                     f"({100 * self.reuse.share:.1f} %: the prompt prefix the trajectories share, decoded once "
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


def rows_table(rows: list[dict], sim: Simulation, domain: str, roles: set[str], mode: str) -> pa.Table:
    """The raw token table of one trajectory's scored rows of ``roles``, with its keys and scorer ``mode``."""
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
    reuse: Any = None  # llm.local_model.PrefixReuse: the embedded model's tokens decoded and taken from its cache


def score_one(job: ScoringJob) -> ScoredTrajectory:
    """Teacher-forced (or replayed) token rows of one trajectory, with token metrics."""
    from agentuq_nb import llm

    began = time.perf_counter()
    rows = llm.score_trajectory(conversation(job.sim), model=job.model, system=job.system, backend=job.source,
                                top_logprobs=job.top_logprobs, scorer=job.mode, **job.request)
    seconds = time.perf_counter() - began
    warnings = InputWarnings()
    table = with_token_metrics(rows_table(rows, job.sim, job.domain, set(job.roles), job.mode), job.where, warnings)
    return ScoredTrajectory(table, rows.truncations, warnings, seconds, rows.reuse)  # None for a remote scorer


def score_on_worker(job: ScoringJob) -> ScoredTrajectory:
    """:func:`score_one` on a Dask worker: a remote scorer uses the worker's ``api_base``, if it has one."""
    if job.model != EMBEDDED_MODEL:
        job = replace(job, request=with_worker_api_base(job.request))
    return score_one(job)
