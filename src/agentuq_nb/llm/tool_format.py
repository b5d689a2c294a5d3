"""The tool-call format of the embedded model, and the grammar that keeps it valid.

SmolLM2-135M has no native function calling, and at 135M parameters it cannot be
trusted to write valid JSON for a schema on its own. The format is therefore a
prompt convention plus constrained decoding:

* tools are listed in the system prompt, one JSON line each, with the calling
  convention spelled out;
* a tool call is the text ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``
  inside the message body (``json.dumps`` serialization, so it round-trips);
* once the model has written ``<tool_call>`` (``tool_choice="auto"``), or from the
  first token (``tool_choice="required"`` or a named function), the JSON object is
  decoded under a llama.cpp grammar built from the tools' JSON schemas, so the name
  is one of the tools and the arguments match its parameters.

Limits (stated, not hidden):

* one tool call per message; text before ``<tool_call>`` is kept as ``content``;
* with ``tool_choice="auto"`` the model decides whether to call a tool, and a 135M
  model rarely starts ``<tool_call>`` unprompted; use ``"required"`` (or a named
  function) when a turn must be a tool call;
* the grammar enforces the schema's structure and types (``json_schema_to_gbnf``);
  keywords it does not support (e.g. ``pattern`` subtleties, ``$ref`` to other
  documents) fall back to "any JSON object" for that tool's arguments;
* if ``max_tokens`` runs out inside the JSON, the message is returned as plain
  text (``finish_reason="length"``) rather than as a half-made call.
"""
from __future__ import annotations

import json
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"


def serialize_tool_calls(tool_calls: list[dict]) -> str:
    """The body text of τ²-shaped tool calls (name + arguments only; ids are not shown)."""
    return "\n".join(
        f"{TOOL_CALL_OPEN}\n"
        + json.dumps({"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False)
        + f"\n{TOOL_CALL_CLOSE}"
        for call in tool_calls
    )


def tool_function(tool: dict) -> dict:
    """The ``function`` part of an OpenAI tool spec (accepts the bare function too)."""
    function = tool.get("function", tool)
    if "name" not in function:
        raise ValueError(f"tool spec without a name: {tool!r}")
    return function


def tools_system_prompt(system: str | None, tools: list[dict]) -> str:
    """The system prompt with the tools and the calling convention appended."""
    lines = [
        json.dumps(
            {
                "name": f["name"],
                "description": f.get("description", ""),
                "parameters": f.get("parameters", {"type": "object", "properties": {}}),
            },
            ensure_ascii=False,
        )
        for f in map(tool_function, tools)
    ]
    block = (
        "You can call these functions:\n<tools>\n"
        + "\n".join(lines)
        + "\n</tools>\n"
        "To call a function, reply with:\n"
        f"{TOOL_CALL_OPEN}\n"
        '{"name": "<function name>", "arguments": {<arguments as JSON>}}\n'
        f"{TOOL_CALL_CLOSE}\n"
        "Otherwise, reply with plain text."
    )
    return f"{system}\n\n{block}" if system else block


def tool_call_prefix(content: str) -> str:
    """Body text up to where the JSON object of a call begins (same as ``serialize``)."""
    return f"{content}\n{TOOL_CALL_OPEN}\n" if content else f"{TOOL_CALL_OPEN}\n"


def select_tools(tools: list[dict], tool_choice: Any) -> tuple[list[dict], bool]:
    """(tools the call may use, whether a call is forced) for an OpenAI ``tool_choice``."""
    if tool_choice in (None, "auto"):
        return tools, False
    if tool_choice == "none":
        return [], False
    if tool_choice == "required":
        return tools, True
    if isinstance(tool_choice, dict):
        name = tool_function(tool_choice).get("name")
        chosen = [t for t in tools if tool_function(t)["name"] == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
        return chosen, True
    raise ValueError(f"unsupported tool_choice {tool_choice!r}")


def tool_call_grammar(tools: list[dict]) -> str:
    """GBNF for one ``{"name": ..., "arguments": {...}}`` object over ``tools``."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # the embedded model's grammar: the [local] extra

    alternatives = []
    for function in map(tool_function, tools):
        params = function.get("parameters") or {"type": "object"}
        alternatives.append(
            {
                "type": "object",
                "properties": {"name": {"const": function["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    try:
        return json_schema_to_gbnf(json.dumps({"oneOf": alternatives}), prop_order=["name", "arguments"])
    except Exception:  # an unsupported schema keyword: keep the names, relax the arguments
        for alt in alternatives:
            alt["properties"]["arguments"] = {"type": "object"}
        return json_schema_to_gbnf(json.dumps({"oneOf": alternatives}), prop_order=["name", "arguments"])


def parse_tool_call_json(text: str) -> dict | None:
    """The call in a complete JSON object text, or None if it is not complete yet."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or "name" not in obj:
        return None
    return {"name": obj["name"], "arguments": obj.get("arguments") or {}}
