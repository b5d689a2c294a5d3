"""One simulation: agent ↔ user simulator ↔ toolkit, with τ²-bench's half-duplex semantics.

* Message 0 is the agent's greeting ``"Hi! How can I help you today?"`` (unless the
  task's ``initial_state.message_history`` gives the opening messages).
* Then the message goes from role to role: user → agent; agent text → user; agent
  tool calls → environment → agent. Each hop is one *step*.
* The simulation ends with ``user_stop`` (the user wrote a stop token), ``agent_stop``
  (the agent wrote ``###STOP###``), ``max_steps`` or ``too_many_errors`` (checked
  only while no tool call is waiting for the environment, as in τ²-bench).
* A tool error (unknown tool, bad arguments, a refused action) is returned to the agent
  as a tool message with ``error: true``. A malformed tool call — text that starts a
  ``<tool_call>`` the model did not finish — is kept as the agent's message and
  answered by an error tool message; the run goes on.
* Every generated message carries its token rows: ``raw_data`` is the LLM's choice
  (without log-probs) plus ``uq_logprobs = {enabled, format, path, num_tokens,
  schema_version}``; the rows carry the trajectory keys, ``role``, ``turn_idx`` =
  ``message_idx`` = the message's index and ``message_timestamp``.

Everything but wall-clock fields (timestamps, duration) is a function of the inputs
and the seed: the simulation id is a UUID5 of domain/task/trial/seed.

Each LLM call gets its own seed, :func:`message_seed` of (trial seed, task id, message index),
not the trial seed itself: a seeded sampler (the embedded model's Gumbel-max draws) given one seed
for every call would draw the same noise at every turn of every task of a trial, so that at a
temperature above 0 the tasks of a trial move together (measured on the bookshop quickstart at
temperature 1: in one trial every user ended the chat in its first message, in two others no user
ever stopped). Greedy decoding (temperature 0) ignores the seed, so its runs are unchanged.
"""
from __future__ import annotations

import copy
import json
import threading
import time
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

import numpy as np

from agentuq_nb.distributed.executor import Interrupted
from agentuq_nb.records.summary import uq_summary
from agentuq_nb.records.tokens import SCHEMA_VERSION
from agentuq_nb.sim.agent import LLMAgent
from agentuq_nb.sim.decisions import (
    TRANSFER_MESSAGE,
    DecisionPoint,
    DecisionPolicy,
    Verdict,
    confirmation_request,
    describe_message,
    intervention_block,
)
from agentuq_nb.sim.domain import Domain, ToolError, to_tool_content
from agentuq_nb.sim.evaluator import evaluate_simulation
from agentuq_nb.sim.user_simulator import UserSimulator, is_stop

GREETING = "Hi! How can I help you today?"
TOOL_CALL_MARKER = "<tool_call>"


class TerminationReason:
    USER_STOP = "user_stop"
    AGENT_STOP = "agent_stop"
    MAX_STEPS = "max_steps"
    TOO_MANY_ERRORS = "too_many_errors"
    AGENT_ERROR = "agent_error"
    USER_ERROR = "user_error"


class SimulationInterrupted(Interrupted):
    """Raised inside a simulation when the runner asks it to stop (Ctrl-C); nothing is saved."""


def now() -> str:
    return datetime.now().isoformat()


def message_seed(seed: int, task_id: str, message_idx: int) -> int:
    """The sampling seed of the LLM call that writes message ``message_idx`` of task ``task_id`` in the
    trial with ``seed``: numpy's ``SeedSequence`` over the three (the task id by its CRC-32), 31 bits."""
    entropy = [int(seed) & 0xFFFFFFFFFFFFFFFF, zlib.crc32(str(task_id).encode()), int(message_idx)]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] & 0x7FFFFFFF)


def simulation_id(domain: str, task_id: str, trial: int, seed: int) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"agentuq_nb/sim/{domain}/{task_id}/trial{trial}/seed{seed}"))


@dataclass
class SimulationResult:
    simulation: dict[str, Any]
    token_rows: list[dict[str, Any]]


class Orchestrator:
    def __init__(
        self,
        domain: Domain,
        task: dict[str, Any],
        agent: LLMAgent,
        user: UserSimulator,
        trial: int,
        seed: int,
        max_steps: int,
        max_errors: int,
        sidecar_path: str | None,
        retry: Any = None,
        stop_event: threading.Event | None = None,
        on_message: Callable[[dict[str, Any]], None] | None = None,
        policy: DecisionPolicy | None = None,
    ):
        self.domain = domain
        self.task = task
        self.agent = agent
        self.user = user
        self.trial = trial
        self.seed = seed
        self.max_steps = max_steps
        self.max_errors = max_errors
        self.sidecar_path = sidecar_path
        self.retry = retry
        self.stop_event = stop_event
        self.on_message = on_message
        self.toolkit = domain.make_toolkit()
        self.write_tools = frozenset(name for name, kind in domain.tool_types().items() if kind == "write")
        self.trajectory: list[dict[str, Any]] = []
        self.rows: list[dict[str, Any]] = []
        self.to_user: set[int] = set()  # indices of agent messages that were sent to the user
        self.step_count = 0
        self.num_errors = 0
        self.done = False
        self.termination_reason: str | None = None
        self.to_role: str = "user"
        # acting on uncertainty (sim.decisions): the policy, its decision records and the outcome accounting
        self.policy = policy
        self.decisions: list[dict[str, Any]] = []
        self.confirmed_calls: set[str] = set()
        self.escalated = False
        self.agent_tokens = 0  # every agent token generated, proposals a policy replaced included

    # ----------------------------------------------------------------------------- helpers
    def _append(self, message: dict[str, Any]) -> int:
        message["turn_idx"] = len(self.trajectory)
        self.trajectory.append(message)
        if self.on_message is not None:
            self.on_message(message)
        return message["turn_idx"]

    def _generated_message(self, role: str, gen: Any, llm_name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The message ``gen`` makes at the next index, and its token rows (not yet kept: see :meth:`_keep`)."""
        idx = len(self.trajectory)
        ts = now()
        rows = []
        for i, row in enumerate(gen.tokens):
            row = dict(row)
            row.update(
                domain=self.domain.name, task_id=str(self.task["id"]), trial=self.trial, seed=self.seed,
                role=role, turn_idx=idx, message_idx=idx, message_timestamp=ts,
                model=row.get("model") or llm_name, scorer=row.get("scorer") or "self",
                source=row.get("source") or "generated",
            )
            if row.get("token_idx") is None:
                row["token_idx"] = i
            rows.append(row)
        raw = copy.deepcopy(gen.raw) if isinstance(gen.raw, dict) else {}
        raw["uq_logprobs"] = {
            "enabled": self.sidecar_path is not None,
            "format": "jsonl",
            "path": self.sidecar_path,
            "num_tokens": len(rows),
            "schema_version": SCHEMA_VERSION,
        }
        msg = gen.message
        tool_calls = None
        if msg.get("tool_calls"):
            tool_calls = [
                {"id": c.get("id") or f"call_{idx}_{k}", "name": c.get("name"), "arguments": c.get("arguments"),
                 "requestor": role}
                for k, c in enumerate(msg["tool_calls"])
            ]
        return {
            "role": role,
            "content": msg.get("content"),
            "tool_calls": tool_calls,
            "turn_idx": idx,
            "timestamp": ts,
            "cost": gen.cost,
            "usage": gen.usage or None,
            "raw_data": raw,
        }, rows

    def _keep(self, message: dict[str, Any], rows: list[dict[str, Any]]) -> int:
        self.rows.extend(rows)
        return self._append(message)

    def _spoken(self, content: str) -> dict[str, Any]:
        """An agent message a policy wrote (not generated: no token rows, ``raw_data`` None)."""
        return {"role": "assistant", "content": content, "tool_calls": None, "turn_idx": len(self.trajectory),
                "timestamp": now(), "cost": 0.0, "usage": None, "raw_data": None}

    def _decide(self, gen: Any, message: dict[str, Any], rows: list[dict[str, Any]], seed: int,
                first: bool) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Ask the policy about the agent's proposal; the message (and rows) to execute instead, if any."""
        point = DecisionPoint(
            domain=self.domain.name, task_id=str(self.task["id"]), trial=self.trial, seed=self.seed,
            message_idx=len(self.trajectory), decision_idx=len(self.decisions), call_seed=seed,
            messages=self.agent.build_messages(self.trajectory), tools=self.agent.tools,
            tool_choice=self.agent.tool_choice(first), agent_llm=self.agent.llm,
            agent_temperature=self.agent.temperature, agent_max_tokens=self.agent.max_tokens,
            top_logprobs=self.agent.top_logprobs, agent_llm_args=dict(self.agent.llm_args),
            trajectory=self.trajectory, proposal=message, generation=gen, proposal_rows=rows,
            rows=self.rows + rows, write_tools=self.write_tools, confirmed_calls=frozenset(self.confirmed_calls))
        verdict = self.policy.decide(point)
        if not isinstance(verdict, Verdict):
            raise TypeError(f"policy {type(self.policy).__name__}.decide returned {type(verdict).__name__}, "
                            f"not a Verdict")
        if verdict.action == "defer":
            self.escalated = True
            message, rows = self._spoken(TRANSFER_MESSAGE), []
        elif verdict.action == "replace":
            message, rows = self._generated_message("assistant", verdict.replacement, self.agent.llm)
        elif verdict.action == "confirm":
            key = point.calls_key()
            if not point.proposes_write or key in self.confirmed_calls:
                raise ValueError(f"policy {type(self.policy).__name__} asked to confirm message "
                                 f"{point.message_idx}, which is not a write call awaiting confirmation")
            self.confirmed_calls.add(key)
            message, rows = self._spoken(confirmation_request(point.proposed_calls)), []
        self.decisions.append(verdict.record(point, describe_message(message)))
        return message, rows

    def _call_seed(self) -> int:
        """The seed of the call that writes the next message (see :func:`message_seed`)."""
        return message_seed(self.seed, str(self.task["id"]), len(self.trajectory))

    def _check_interrupt(self) -> None:
        if self.stop_event is not None and self.stop_event.is_set():
            raise SimulationInterrupted()

    def _execute(self, call: dict[str, Any]) -> dict[str, Any]:
        error = False
        try:
            content = to_tool_content(self.toolkit.call(call["name"], call.get("arguments")))
        except ToolError as exc:
            content, error = f"Error: {exc}", True
        except Exception as exc:  # a bug-shaped failure in a tool still must not kill the run
            content, error = f"Error: {type(exc).__name__}: {exc}", True
        if error:
            self.num_errors += 1
        return {"id": call.get("id") or "", "role": "tool", "content": content,
                "requestor": call.get("requestor", "assistant"), "error": error,
                "turn_idx": None, "timestamp": now()}

    # ----------------------------------------------------------------------------- run
    def initialize(self) -> None:
        history = ((self.task.get("initial_state") or {}).get("message_history")) or []
        if not history:
            self._append({"role": "assistant", "content": GREETING, "tool_calls": None, "turn_idx": 0,
                          "timestamp": now(), "cost": 0.0, "usage": None, "raw_data": None})
            self.to_user.add(0)
            self.to_role = "user"
            return
        for raw in history:
            msg = copy.deepcopy(raw)
            msg.setdefault("tool_calls", None)
            msg["timestamp"] = now()
            idx = self._append(msg)
            if msg["role"] == "assistant" and not msg.get("tool_calls"):
                self.to_user.add(idx)
        for msg in history:  # tool calls in the history change the environment, as in τ²'s set_state
            for call in (msg.get("tool_calls") or []) if msg["role"] != "tool" else []:
                try:
                    self.toolkit.call(call["name"], call.get("arguments"))
                except Exception:
                    pass
        last = self.trajectory[-1]
        if last["role"] == "assistant":
            self.to_role = "env" if last.get("tool_calls") else "user"
        elif last["role"] == "user":
            self.to_role = "agent"
            if is_stop(last):
                self.done, self.termination_reason = True, TerminationReason.USER_STOP
        else:
            self.to_role = "agent"

    def step(self) -> None:
        self._check_interrupt()
        if self.to_role == "user":
            gen = self.user.generate(self.trajectory, seed=self._call_seed(), to_user=self.to_user, retry=self.retry)
            msg, rows = self._generated_message("user", gen, self.user.llm)
            msg["tool_calls"] = None  # the user simulator has no tools in the built-in domains
            self._keep(msg, rows)
            if is_stop(msg):
                self.done, self.termination_reason = True, TerminationReason.USER_STOP
            self.to_role = "agent"
        elif self.to_role == "agent":
            first = not any(m["role"] == "assistant" and m.get("raw_data") is not None for m in self.trajectory)
            seed = self._call_seed()
            gen = self.agent.generate(self.trajectory, seed=seed, retry=self.retry, first_turn=first)
            self.agent_tokens += len(gen.tokens)
            msg, rows = self._generated_message("assistant", gen, self.agent.llm)
            if self.policy is not None:
                msg, rows = self._decide(gen, msg, rows, seed, first)
            idx = self._keep(msg, rows)
            if self.agent.is_stop(msg) or self.escalated:
                self.done, self.termination_reason = True, TerminationReason.AGENT_STOP
            if msg["tool_calls"]:
                self.to_role = "env"
            elif msg.get("content") and TOOL_CALL_MARKER in msg["content"]:
                self.to_role = "malformed"
            else:
                self.to_user.add(idx)
                self.to_role = "user"
        elif self.to_role == "env":
            for call in self.trajectory[-1]["tool_calls"]:
                self._append(self._execute(call))
            self.to_role = "agent"
        elif self.to_role == "malformed":
            # the model began a tool call and did not finish it: the environment answers with an error
            self.num_errors += 1
            self._append({"id": "", "role": "tool",
                          "content": "Error: malformed tool call (not a complete JSON object with name and arguments)",
                          "requestor": "assistant", "error": True, "turn_idx": None, "timestamp": now()})
            self.to_role = "agent"
        self.step_count += 1

    def check_termination(self) -> None:
        if self.done or self.to_role in ("env", "malformed"):
            return
        if self.step_count >= self.max_steps:
            self.done, self.termination_reason = True, TerminationReason.MAX_STEPS
        if self.num_errors >= self.max_errors:
            self.done, self.termination_reason = True, TerminationReason.TOO_MANY_ERRORS

    def run(self) -> SimulationResult:
        start_time = now()
        t0 = time.perf_counter()
        self.initialize()
        while not self.done:
            self.step()
            self.check_termination()
        duration = time.perf_counter() - t0
        reward_info = evaluate_simulation(self.domain, self.task, self.trajectory, self.termination_reason)
        env_reward = reward_info.get("reward")
        if self.escalated:  # handed to a human: not solved by the agent, whatever the environment shows
            reward_info = {**reward_info, "reward": 0.0,
                           "info": {**(reward_info.get("info") or {}),
                                    "note": "escalated to a human by the intervention policy (reward counted 0; "
                                            "the environment's verdict is intervention.env_reward)"}}
        agent_costs = [m.get("cost") for m in self.trajectory if m["role"] == "assistant" and m.get("raw_data")]
        user_costs = [m.get("cost") for m in self.trajectory if m["role"] == "user" and m.get("raw_data")]
        end_time = now()
        task_id = str(self.task["id"])
        simulation = {
            "id": simulation_id(self.domain.name, task_id, self.trial, self.seed),
            "task_id": task_id,
            "timestamp": end_time,
            "start_time": start_time,
            "end_time": end_time,
            "duration": duration,
            "termination_reason": self.termination_reason,
            "agent_cost": _sum_costs(agent_costs),
            "user_cost": _sum_costs(user_costs),
            "reward_info": reward_info,
            "messages": self.trajectory,
            "trial": self.trial,
            "seed": self.seed,
            "uq_summary": uq_summary(self.rows),
        }
        if self.policy is not None:
            simulation["intervention"] = intervention_block(
                self.policy, self.decisions, self.escalated, env_reward, self.agent_tokens,
                float(self.policy.escalation_cost))
        json.dumps(simulation, allow_nan=False)  # fail here, not when the results are written
        return SimulationResult(simulation, self.rows)


def _sum_costs(costs: list[Any]) -> float | None:
    values = [float(c) for c in costs if c is not None]
    return sum(values) if values else None
