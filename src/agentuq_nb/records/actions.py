"""Canonical actions: when two agent actions are the same action (groundwork for issue 16).

An agent's next action is either a tool call or a text reply. Resampling the action at a decision
point and counting how often the samples agree needs an equality that ignores what cannot change the
call's effect. :func:`canonical_tool_call` gives a call's canonical form:

* the tool **name** trimmed (names are identifiers: case is kept);
* the **arguments** parsed when they come as a JSON string (OpenAI's wire form), keys sorted at every
  depth, and each value normalized: strings trimmed and case-folded (``" W123 "`` = ``"w123"``);
  numbers as numbers (``1`` = ``1.0`` = ``1e0``; NaN = NaN, as JSON's ``NaN`` would have the same effect), but a string holding a number stays a string
  (``"5"`` ≠ ``5``: a tool may treat them differently); booleans and null as they are; lists keep
  their order (an order can matter: the items of an exchange);
* arguments that do not parse (a malformed sampled call) are kept as their raw text under
  :data:`MALFORMED`, so each distinct malformed call is its own cluster and is counted, never dropped;
  a recorded call whose reader kept it that way (``{MALFORMED: raw text}``, the original τ-bench's
  reader) is the same malformed call.

:func:`action_key` is the hashable key of an action (a call, several calls, or no call): equal keys,
same effect. A text reply's key is ``("text",)``: replies are told apart by meaning (embeddings),
not here.

What this approximates: "same effect" is judged from the call alone. Two calls that differ only in
a string's case are equal here even where a tool is case-sensitive (τ²-bench's ids are matched
exactly, but the case-folded forms of real ids do not collide); a call whose arguments differ in an
optional default (omitted vs the default value) counts as different.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

#: the key under which a call's unparseable arguments are kept (raw text)
MALFORMED = "__malformed_arguments__"
TEXT_ACTION = ("text",)


def normalize_value(value: Any) -> Any:
    """A JSON value in canonical form (see the module docstring); hashable. Booleans, objects and
    arrays are tagged, so that ``true`` ≠ ``1`` and ``{"a": 1}`` ≠ ``[["a", 1]]`` (Python equates the
    untagged forms)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        number = float(value)
        if not math.isfinite(number):  # NaN ≠ NaN in Python: a call with a NaN argument must equal itself
            return ("number", repr(number))
        return int(number) if number.is_integer() else number
    if isinstance(value, str):
        return value.strip().casefold()
    if isinstance(value, Mapping):
        return ("object", tuple(sorted(((str(k), normalize_value(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, Sequence):
        return ("array", tuple(normalize_value(v) for v in value))
    return repr(value)


def canonical_tool_call(name: str, arguments: Any) -> tuple:
    """``(name, arguments)`` in canonical form; ``arguments`` a mapping or its JSON text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return (str(name).strip(), (MALFORMED, arguments))
    if arguments is None:
        arguments = {}
    if isinstance(arguments, Mapping) and len(arguments) == 1 and isinstance(arguments.get(MALFORMED), str):
        return (str(name).strip(), (MALFORMED, arguments[MALFORMED]))  # a recorded call kept as its raw text
    if not isinstance(arguments, Mapping):
        return (str(name).strip(), (MALFORMED, json.dumps(arguments, sort_keys=True, default=str)))
    return (str(name).strip(), normalize_value(arguments))


def action_key(tool_calls: Sequence[Any] | None) -> tuple:
    """The hashable key of an agent action: its tool calls in canonical form (in order), or
    :data:`TEXT_ACTION` when it calls no tool. A call is a mapping (``name``/``arguments``, or OpenAI's
    ``function: {name, arguments}``) or an object with ``name`` and ``arguments`` attributes."""
    if not tool_calls:
        return TEXT_ACTION
    keys = []
    for call in tool_calls:
        if isinstance(call, Mapping):
            fn = call.get("function") if isinstance(call.get("function"), Mapping) else call
            keys.append(canonical_tool_call(fn.get("name", ""), fn.get("arguments")))
        else:
            keys.append(canonical_tool_call(getattr(call, "name", ""), getattr(call, "arguments", None)))
    return ("tool_calls", tuple(keys))


def is_malformed(key: tuple) -> bool:
    """Whether an :func:`action_key` holds a call whose arguments did not parse."""
    return key[0] == "tool_calls" and any(args[0] == MALFORMED for _, args in key[1])
