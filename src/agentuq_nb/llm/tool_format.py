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
* the grammar is bounded so that a call always closes: a JSON string admits no raw
  control character (JSON forbids them; a newline must be written ``\\n``) and at most
  ``MAX_STRING_CHARS`` (128) characters unless its schema sets ``maxLength``; an array
  holds at most ``MAX_ARRAY_ITEMS`` (16) items unless its schema sets ``maxItems``; an
  object with declared ``properties`` gets no other keys, and a free-form object at
  most ``MAX_OBJECT_KEYS`` (16) keys (its nesting depth is not bounded: ``max_tokens``
  still is). Before, a string could run on over newlines and ``</tool_call>`` and
  never close (23 of 40 forced calls of the embedded model at temperature 1);
* the last ``CLOSING_RESERVE`` (16) tokens of the budget prefer closers (``"``, ``}``,
  ``]``) among the tokens the grammar allows, so a call that would run out of
  ``max_tokens`` inside a long string closes instead (its last string cut short: the
  quickstart's digit-by-digit order ids at ``agent_max_tokens=64`` did this in 2 of 19
  calls); only a budget too small for the schema's required keys still ends as plain
  text (``finish_reason="length"``) rather than as a half-made call.
"""
from __future__ import annotations

import json
from typing import Any

from agentuq_nb.records.toolcall_spans import TOOL_CALL_CLOSE, TOOL_CALL_OPEN  # one definition of the tags

MAX_STRING_CHARS = 128  # characters of a JSON string whose schema sets no maxLength
MAX_ARRAY_ITEMS = 16  # items of an array whose schema sets no maxItems
MAX_OBJECT_KEYS = 16  # keys of a free-form object (no declared properties)
#: json_schema_to_gbnf's unbounded primitives, redefined: strings without raw control characters
#: (U+0000-U+001F, U+007F) and every repetition bounded
BOUNDED_PRIMITIVES = {
    "char": r'[^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": rf'"\"" char{{0,{MAX_STRING_CHARS}}} "\"" space',
    "object": rf'"{{" space ( string ":" space value ("," space string ":" space value){{0,{MAX_OBJECT_KEYS - 1}}} )? "}}" space',
    "array": rf'"[" space ( value ("," space value){{0,{MAX_ARRAY_ITEMS - 1}}} )? "]" space',
}


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
        if not tools:
            raise ValueError("tool_choice 'required' needs at least one tool, and the request gives none")
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
        gbnf = json_schema_to_gbnf(json.dumps(bounded_schema({"oneOf": alternatives})), prop_order=["name", "arguments"])
    except Exception:  # an unsupported schema keyword: keep the names, relax the arguments
        for alt in alternatives:
            alt["properties"]["arguments"] = {"type": "object"}
        gbnf = json_schema_to_gbnf(json.dumps({"oneOf": alternatives}), prop_order=["name", "arguments"])
    return bounded_grammar(gbnf)


def bounded_schema(schema: Any) -> Any:
    """A copy of a JSON schema whose arrays have ``maxItems`` and whose declared objects are closed."""
    if isinstance(schema, list):
        return [bounded_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
            out[key] = {name: bounded_schema(sub) for name, sub in value.items()}  # names, not keywords
        elif key in ("const", "enum", "default", "examples", "required"):
            out[key] = value
        else:
            out[key] = bounded_schema(value)
    if (out.get("type") == "array" or "items" in out) and "maxItems" not in out:
        out["maxItems"] = max(MAX_ARRAY_ITEMS, int(out.get("minItems", 0)))
    if "properties" in out and out.get("additionalProperties") not in (None, False):
        out["additionalProperties"] = False
    return out


def bounded_grammar(gbnf: str) -> str:
    """``gbnf`` (json_schema_to_gbnf's ``name ::= rule`` lines) with ``BOUNDED_PRIMITIVES`` swapped in."""
    lines = []
    for line in gbnf.splitlines():
        name, sep, _ = line.partition(" ::= ")
        lines.append(f"{name} ::= {BOUNDED_PRIMITIVES[name]}" if sep and name in BOUNDED_PRIMITIVES else line)
    return "\n".join(lines)


def parse_tool_call_json(text: str) -> dict | None:
    """The call in a complete JSON object text, or None if it is not complete yet."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or "name" not in obj:
        return None
    return {"name": obj["name"], "arguments": obj.get("arguments") or {}}
