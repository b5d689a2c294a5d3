"""The run's small tables besides tokens, one row per message and one per trajectory, made from
τ²-bench simulations; ``extract`` and ``rescore`` write them with these schemas (one writer each,
``io.store.rundir``), so later estimators need not re-read the results."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from agentuq_nb.records.tau2 import Simulation

KEY_FIELDS = [pa.field("domain", pa.string()), pa.field("task_id", pa.string()),
              pa.field("trial", pa.int64()), pa.field("seed", pa.int64())]
MESSAGE_SCHEMA = pa.schema(KEY_FIELDS + [
    ("message_idx", pa.int64()), ("turn_idx", pa.int64()), ("role", pa.string()), ("content_chars", pa.int64()),
    ("num_tool_calls", pa.int64()), ("is_error", pa.bool_()), ("timestamp", pa.string()),
])
TRAJECTORY_SCHEMA = pa.schema(KEY_FIELDS + [
    ("simulation_id", pa.string()), ("reward", pa.float64()), ("termination_reason", pa.string()),
    ("num_messages", pa.int64()), ("num_tool_calls", pa.int64()), ("agent_chars", pa.int64()),
])
#: per-trajectory columns that are not keys (the length baselines among them)
TRAJECTORY_META = [name for name in TRAJECTORY_SCHEMA.names if name not in ("domain", "task_id", "trial", "seed")]


@dataclass
class MessageColumns:
    """Per-message values of a batch of simulations, in batch order, gathered in one pass over the messages:
    the message table's columns, and what placing sidecar token rows reads of each message."""

    counts: list[int] = field(default_factory=list)  # messages per simulation
    roles: list[str] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)  # turn_idx, else the message's position
    stamps: list[str | None] = field(default_factory=list)
    content_chars: list[int] = field(default_factory=list)
    num_tool_calls: list[int] = field(default_factory=list)
    is_error: list[bool] = field(default_factory=list)

    @classmethod
    def of(cls, sims: Iterable[Simulation]) -> "MessageColumns":
        out = cls()
        roles, turns, stamps = out.roles.append, out.turns.append, out.stamps.append
        chars, calls, errors = out.content_chars.append, out.num_tool_calls.append, out.is_error.append
        for sim in sims:
            out.counts.append(len(sim.messages))
            for idx, m in enumerate(sim.messages):
                roles(str(m.role))
                turns(m.turn_idx if m.turn_idx is not None else idx)
                stamps(m.timestamp)
                chars(len(m.content or ""))
                calls(len(m.tool_calls or []))
                errors(bool(m.error))
        return out


def message_table(sims: Sequence[Simulation], domain: str, messages: MessageColumns | None = None) -> pa.Table:
    """One row per message of each simulation (:data:`MESSAGE_SCHEMA`); ``messages``: their values, if gathered."""
    messages = messages if messages is not None else MessageColumns.of(sims)
    counts = messages.counts
    keys = {"domain": [domain] * len(sims), "task_id": [str(s.task_id) for s in sims],
            "trial": [s.trial for s in sims], "seed": [s.seed for s in sims]}
    repeat = pa.array(np.repeat(np.arange(len(sims)), counts))
    first = np.cumsum(counts, dtype=np.int64) - counts  # each simulation's first message
    columns = {name: pa.array(values, MESSAGE_SCHEMA.field(name).type).take(repeat) for name, values in keys.items()}
    columns.update(message_idx=np.arange(len(messages.roles), dtype=np.int64) - np.repeat(first, counts),
                   turn_idx=messages.turns, role=messages.roles, content_chars=messages.content_chars,
                   num_tool_calls=messages.num_tool_calls, is_error=messages.is_error, timestamp=messages.stamps)
    return pa.table({name: columns[name] for name in MESSAGE_SCHEMA.names}, schema=MESSAGE_SCHEMA)


def trajectory_record(sim: Simulation, domain: str) -> dict:
    """One row of :data:`TRAJECTORY_SCHEMA`: keys, reward, termination and the length baselines."""
    msgs = sim.messages
    return {
        "domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
        "simulation_id": sim.id,
        "reward": sim.reward,
        "termination_reason": sim.termination_reason,
        "num_messages": len(msgs),
        "num_tool_calls": sum(len(m.tool_calls or []) for m in msgs if m.role == "assistant"),
        "agent_chars": sum(len(m.content or "") for m in msgs if m.role == "assistant"),
    }


def trajectory_table(records: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(records, schema=TRAJECTORY_SCHEMA)
