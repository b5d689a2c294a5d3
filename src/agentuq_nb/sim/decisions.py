"""Acting on uncertainty inside the loop: what the simulator asks a policy at each agent decision point.

At every agent turn the orchestrator has the agent *propose* its message (one LLM call, with its
token log-probs), then hands a :class:`DecisionPoint` to the run's :class:`DecisionPolicy` before the
message enters the trajectory. The policy measures an online signal (higher = more uncertain) and
answers with a :class:`Verdict`:

* ``proceed``: the proposal is taken as is;
* ``defer``: the task is handed to a human: the agent's message becomes :data:`TRANSFER_MESSAGE`, the
  episode ends (``agent_stop``, τ²-bench's reason for an agent that ends the chat) and counts as
  escalated: its reward is 0 over all tasks, the environment's own verdict is kept beside it;
* ``replace``: another generation is executed instead of the proposal (``resample_vote``: a sample of
  the majority canonical action among K resampled actions);
* ``confirm``: the proposal is a write tool call; the agent asks the user to confirm it instead
  (:func:`confirmation_request`), and the turn goes to the user. The same call proposed again after a
  confirmation proceeds (a call is confirmed at most once).

The policies and their signals live above the simulator (``agentuq_nb.intervention``: they use the
estimators, the action resampler and the calibration); the simulator only defines this contract, so
that it imports none of them. Every decision point's record (:meth:`Verdict.record`) goes into the
simulation's ``intervention`` block (see :func:`intervention_block`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

#: what the agent says when a policy hands the task to a human (the airline domain's transfer phrasing)
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."
#: the verdicts a policy can give
ACTIONS = ("proceed", "defer", "replace", "confirm")

VerdictAction = Literal["proceed", "defer", "replace", "confirm"]


@dataclass
class DecisionPoint:
    """The state of one simulation when the agent has proposed its next message.

    ``messages`` is the agent LLM's input for this turn (system prompt, then the visible history): a
    policy that resamples draws from ``llm.sample(messages, tools=tools, tool_choice=tool_choice, …)``.
    ``rows`` are the token rows of the trajectory so far, *including* the proposal's (``proposal_rows``),
    keyed like the sidecar rows (``role``, ``message_idx`` …), for estimators computed online.
    """

    domain: str
    task_id: str
    trial: int
    seed: int
    message_idx: int  # the index the proposed message takes in the trajectory
    decision_idx: int  # 0 for the agent's first generated turn of this simulation, then 1, 2 …
    call_seed: int  # the seed the proposal was generated with (orchestrator.message_seed)
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | None
    agent_llm: str
    agent_temperature: float
    agent_max_tokens: int
    top_logprobs: int
    agent_llm_args: dict[str, Any]
    trajectory: list[dict[str, Any]]  # before the proposal
    proposal: dict[str, Any]  # the proposed message, in the trajectory's shape
    generation: Any  # the proposal's ``llm.Generation``
    proposal_rows: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    write_tools: frozenset[str]  # names of the domain's tools of type "write"
    confirmed_calls: frozenset[str]  # canonical JSON of write calls the user was already asked to confirm

    @property
    def proposed_calls(self) -> list[dict[str, Any]]:
        return list(self.proposal.get("tool_calls") or [])

    @property
    def proposes_write(self) -> bool:
        return any(c.get("name") in self.write_tools for c in self.proposed_calls)

    def calls_key(self) -> str:
        """The proposal's tool calls as canonical JSON (names and arguments, sorted keys)."""
        return canonical_calls(self.proposed_calls)


def canonical_calls(calls: list[dict[str, Any]]) -> str:
    return json.dumps([{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls],
                      sort_keys=True, default=str)


@dataclass
class Verdict:
    """A policy's answer at one decision point (see the module docstring)."""

    action: VerdictAction = "proceed"
    signal: float | None = None  # the online signal (higher = more uncertain); None where undefined
    flagged: bool = False  # the trigger fired (for ``random``: the coin came up)
    replacement: Any = None  # the ``llm.Generation`` executed for ``replace``
    extra_tokens: int = 0  # agent tokens generated for this decision beyond the proposal (resamples)
    extra_cost: float = 0.0  # their LLM cost
    details: dict[str, Any] = field(default_factory=dict)  # JSON-able: vote shares, probabilities …
    # the policy intervened although the proposal proceeds: a vote that kept it (the K actions were drawn and
    # counted: an intervention with a cost, whatever it chose)
    acted: bool = False

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"a verdict's action must be one of {', '.join(ACTIONS)}, got {self.action!r}")
        if self.action == "replace" and self.replacement is None:
            raise ValueError("a 'replace' verdict needs the generation to execute (replacement)")

    @property
    def intervened(self) -> bool:
        """Whether this decision counts as an intervention: any action but proceed, or ``acted``."""
        return self.action != "proceed" or bool(self.acted)

    def record(self, point: DecisionPoint, executed: str) -> dict[str, Any]:
        """This decision as the results record it (JSON)."""
        signal = None if self.signal is None or self.signal != self.signal else float(self.signal)
        return {"message_idx": point.message_idx, "decision_idx": point.decision_idx, "signal": signal,
                "flagged": bool(self.flagged), "action": self.action, "intervened": self.intervened,
                "proposed": describe_message(point.proposal), "executed": executed,
                "extra_tokens": int(self.extra_tokens), "extra_cost": float(self.extra_cost),
                "details": self.details}


@runtime_checkable
class DecisionPolicy(Protocol):
    """What the simulator needs of a policy. It must be picklable (a Dask worker runs it) and
    deterministic given the point (seeds come from ``point.call_seed``), so that a resumed run
    draws the same decisions."""

    escalation_cost: float  # what one hand-off to a human costs, in the study's units (recorded per escalation)

    def decide(self, point: DecisionPoint) -> Verdict: ...

    def describe(self) -> dict[str, Any]:
        """The policy as recorded in the run's fingerprint and in each simulation (JSON, no secrets)."""
        ...

    # optional: ``check_runs(keys)`` - raise ValueError, before anything runs, when the policy could never act on
    # the run's ``(task_id, trial, seed)`` keys (an oracle run of other tasks); see :func:`check_policy_runs`


def check_policy_runs(policy: Any, keys: list[tuple[str, int, int]]) -> None:
    """Let ``policy`` refuse the run's keys before any simulation (policies without ``check_runs`` accept any)."""
    check = getattr(policy, "check_runs", None)
    if check is not None:
        check(keys)


def describe_message(message: dict[str, Any]) -> str:
    """A short label of an agent message: its tool calls as canonical JSON, else its text."""
    calls = message.get("tool_calls") or []
    if calls:
        return canonical_calls(calls)
    return str(message.get("content") or "")[:200]


def confirmation_request(calls: list[dict[str, Any]]) -> str:
    """What the agent asks the user instead of making a write call it is unsure of."""
    described = "; ".join(f"{c.get('name')}({json.dumps(c.get('arguments'), sort_keys=True, default=str)})"
                          for c in calls)
    return f"Before I do this, please confirm: {described}. Shall I go ahead (yes/no)?"


def intervention_block(policy: DecisionPolicy, decisions: list[dict[str, Any]], escalated: bool,
                       env_reward: float | None, agent_tokens: int, escalation_cost: float) -> dict[str, Any]:
    """The ``intervention`` field of a simulation: the policy, every decision point's record, and the
    outcome accounting (``escalated``, the environment's reward before escalation counted it 0, tokens)."""
    extra = sum(int(d["extra_tokens"]) for d in decisions)
    return {
        "policy": policy.describe(),
        "decisions": decisions,
        "flagged_turns": [d["message_idx"] for d in decisions if d["flagged"]],
        "intervened_turns": [d["message_idx"] for d in decisions if d["intervened"]],
        "num_decisions": len(decisions),
        "num_flagged": sum(bool(d["flagged"]) for d in decisions),
        "num_interventions": sum(bool(d["intervened"]) for d in decisions),
        "escalated": bool(escalated),
        "env_reward": env_reward,
        "agent_tokens": int(agent_tokens) + extra,
        "extra_agent_tokens": extra,
        "extra_agent_cost": float(sum(float(d["extra_cost"]) for d in decisions)),
        "escalation_cost": float(escalation_cost) if escalated else 0.0,
    }
