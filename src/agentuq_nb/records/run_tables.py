"""The run's small tables besides tokens, one row per message and one per trajectory, made from
τ²-bench simulations; ``extract`` and ``rescore`` write them with these schemas (one writer each,
``io.rundir``), so later estimators need not re-read the results."""
from __future__ import annotations

from collections.abc import Iterable

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


def message_columns(sims: Iterable[Simulation], domain: str) -> dict[str, list]:
    """One row per message of each simulation, as columns of :data:`MESSAGE_SCHEMA`."""
    cols: dict[str, list] = {name: [] for name in MESSAGE_SCHEMA.names}
    for sim in sims:
        n = len(sim.messages)
        cols["domain"] += [domain] * n
        cols["task_id"] += [str(sim.task_id)] * n
        cols["trial"] += [sim.trial] * n
        cols["seed"] += [sim.seed] * n
        cols["message_idx"] += range(n)
        for idx, m in enumerate(sim.messages):
            cols["turn_idx"].append(m.turn_idx if m.turn_idx is not None else idx)
            cols["role"].append(m.role)
            cols["content_chars"].append(len(m.content or ""))
            cols["num_tool_calls"].append(len(m.tool_calls or []))
            cols["is_error"].append(bool(m.error))
            cols["timestamp"].append(m.timestamp)
    return cols


def message_table(sims: Iterable[Simulation], domain: str) -> pa.Table:
    return pa.table(message_columns(sims, domain), schema=MESSAGE_SCHEMA)


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
