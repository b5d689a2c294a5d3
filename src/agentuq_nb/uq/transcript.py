"""A run's conversation as one table: the text and tool calls of every message, for signals that need no
log-probs (:mod:`agentuq_nb.uq.structure_signals`, :mod:`agentuq_nb.uq.tracer`).

One row per message of each simulation: the trajectory keys, ``message_idx`` (position), ``turn_idx``,
``role`` (``assistant | user | tool``; a ``system`` message is kept as a row but carries no signal),
``content`` (``""`` when absent), ``calls`` (the message's tool calls as ``(name, arguments)`` pairs),
``call_keys`` (their canonical forms, :func:`agentuq_nb.records.actions.canonical_tool_call`: two calls
with the same key have the same effect), ``is_error`` (a tool result the harness flagged as an error,
or whose text starts with ``Error:``, as τ²-bench's and τ-bench's tools word their failures), and ``text``: the message
as TRACER formats it for its embeddings (its ``_format_message_for_history``): the content and one
``Tool: name(arguments)`` per call joined by ``" | "``, a tool result as ``Observation: …``.
"""
from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from agentuq_nb.records import Simulation
from agentuq_nb.records.actions import canonical_tool_call
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

COLUMNS = TRAJECTORY_KEYS + ["message_idx", "turn_idx", "role", "content", "calls", "call_keys", "is_error", "text"]


def message_text(role: str, content: str, calls: list[tuple[str, object]]) -> str:
    """TRACER's text of a message: content and ``Tool: name(arguments)`` per call joined by " | " (arguments
    printed as Python prints a dict, as TRACER's f-string does); a tool result as ``Observation: …``."""
    if role == "tool":
        return f"Observation: {content}" if content else "Observation: [empty]"
    parts = [content] if content else []
    parts += [f"Tool: {name}({arguments})" for name, arguments in calls]
    return " | ".join(parts)


def reports_error(flag, content: str) -> bool:
    """Whether a tool result reports an error: the harness's flag, or text that starts with "Error:"."""
    return bool(flag) or content.lstrip()[:6].lower() == "error:"


def transcript_rows(sim: Simulation, domain: str) -> list[dict]:
    rows = []
    for idx, m in enumerate(sim.messages):
        content = m.content if isinstance(m.content, str) else ("" if m.content is None else str(m.content))
        calls = [(str(c.name), c.arguments) for c in (m.tool_calls or [])]
        rows.append({
            "domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
            "message_idx": idx, "turn_idx": m.turn_idx if m.turn_idx is not None else idx, "role": str(m.role),
            "content": content, "calls": calls, "call_keys": [canonical_tool_call(n, a) for n, a in calls],
            "is_error": m.role == "tool" and reports_error(m.error, content),
            "text": message_text(str(m.role), content, calls),
        })
    return rows


def transcript(sims: Iterable[Simulation], domain: str) -> pd.DataFrame:
    """The table of the module docstring for ``sims`` (in their order, messages in order)."""
    rows = [row for sim in sims for row in transcript_rows(sim, domain)]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return key_dtypes(frame.astype({"message_idx": "int64", "turn_idx": "int64", "is_error": bool}), deep=False)
