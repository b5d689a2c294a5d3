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
  keywords it does not support (``$ref`` to other documents …) fall back to "any JSON
  object" for that tool's arguments, and a string's ``pattern`` is not enforced (its
  repetitions would be spelled out in the grammar; the string stays bounded);
* tool schemas are checked once, before any prompt or grammar is built from them
  (:func:`check_tool_schemas`: counts, size, depth; serve-local, the local provider and
  ``sample-actions`` all call it): every repetition the grammar spells out is bounded, so
  building and applying it stays small;
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
from functools import lru_cache
from typing import Any

from agentuq_nb.common.jsonschema_import import import_jsonschema
from agentuq_nb.common.limits import (
    MAX_SCHEMA_CHARS,
    MAX_SCHEMA_ENUM,
    MAX_SCHEMA_ITEMS,
    MAX_TOOL_SCHEMA_DEPTH,
    MAX_TOOL_SCHEMAS_BYTES,
    MAX_TOOLS,
)
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


#: the schema keywords whose value the grammar spells out that many times, and their bound
COUNT_KEYWORDS = {"minItems": MAX_SCHEMA_ITEMS, "maxItems": MAX_SCHEMA_ITEMS, "minProperties": MAX_SCHEMA_ITEMS,
                  "maxProperties": MAX_SCHEMA_ITEMS, "minLength": MAX_SCHEMA_CHARS, "maxLength": MAX_SCHEMA_CHARS}
#: keywords whose value is a map of names to schemas (a name there is no keyword)
NAMED_SCHEMAS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")


class ToolSchemaError(ValueError):
    """Tool schemas that cannot be used: says which tool, where in its schema, and what is wrong."""


def check_tool_schemas(tools: Any, where: str = "tools") -> list[dict]:
    """The tools as OpenAI tool specs (``{"type": "function", "function": {...}}``; a bare function is wrapped),
    checked once before any prompt or grammar is built from them: at most :data:`MAX_TOOLS`, their JSON at most
    :data:`MAX_TOOL_SCHEMAS_BYTES` and each tool's nested at most :data:`MAX_TOOL_SCHEMA_DEPTH` deep, a name,
    parameters that are an object schema and a valid JSON schema (Draft 2020-12), no empty ``enum`` (no call
    could be made), and every count the grammar spells out (``minItems``, ``maxLength`` …) a whole number within
    its bound (:data:`COUNT_KEYWORDS`), a minimum no larger than its maximum. Anything else is a
    :class:`ToolSchemaError` (a ValueError) naming the tool and the place; ``where`` says whose tools they are
    (``"tools"`` of a request, a file)."""
    if not isinstance(tools, list):
        raise ToolSchemaError(f"{where}: expected a list of tool schemas, got {type(tools).__name__}")
    if len(tools) > MAX_TOOLS:
        raise ToolSchemaError(f"{where}: {len(tools)} tools, more than the {MAX_TOOLS} a request may give")
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ToolSchemaError(f"{where}[{i}]: a tool schema is an object, not {type(tool).__name__}")
        depth = _depth(tool)
        if depth > MAX_TOOL_SCHEMA_DEPTH:
            raise ToolSchemaError(f"{where}[{i}]: the schema is nested {depth} levels deep, more than the "
                                  f"{MAX_TOOL_SCHEMA_DEPTH} a tool's schema may be")
        spec = tool if "function" in tool else {"type": "function", "function": tool}
        function = spec["function"]
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise ToolSchemaError(f"{where}[{i}]: a tool schema has no function name")
        label = f"{where}[{i}] ('{name[:64]}')"
        params = function.get("parameters", {"type": "object"})
        if not isinstance(params, dict):
            raise ToolSchemaError(f"{label}: parameters is a {type(params).__name__}, not a JSON schema object")
        _check_schema_nodes(params, label)
        out.append(spec)
    size = len(json.dumps(out, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass"))
    if size > MAX_TOOL_SCHEMAS_BYTES:
        raise ToolSchemaError(f"{where}: the tool schemas are {size:,} bytes of JSON, more than the "
                              f"{MAX_TOOL_SCHEMAS_BYTES:,} they may be together")
    for i, spec in enumerate(out):
        params = json.dumps(spec["function"].get("parameters", {"type": "object"}), sort_keys=True, default=str)
        problem = schema_problem(params)
        if problem is not None:
            raise ToolSchemaError(f"{where}[{i}] ('{spec['function']['name'][:64]}'): {problem}")
    return out


def _depth(value: Any) -> int:
    """Nesting of a JSON value (iteratively: the value may be nested past the recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node)
    return deepest


def _check_schema_nodes(params: dict, label: str) -> None:
    """The counts, enums and bounds of every (sub)schema of ``params`` (see :func:`check_tool_schemas`)."""
    stack: list[tuple[str, Any, bool]] = [("parameters", params, True)]
    while stack:
        place, node, is_schema = stack.pop()
        if isinstance(node, list):
            stack.extend((f"{place}[{j}]", v, is_schema) for j, v in enumerate(node))
            continue
        if not isinstance(node, dict):
            continue
        if is_schema:
            for keyword, bound in COUNT_KEYWORDS.items():
                value = node.get(keyword)
                if keyword in node and (isinstance(value, bool) or not isinstance(value, int) or not
                                        0 <= value <= bound):
                    raise ToolSchemaError(f"{label}: {place}.{keyword} is {value!r:.40}: give a whole number from 0 "
                                          f"to {bound:,} (the call's grammar spells out every item or character)")
            for low, high in (("minItems", "maxItems"), ("minLength", "maxLength"), ("minProperties", "maxProperties")):
                if low in node and high in node and node[low] > node[high]:
                    raise ToolSchemaError(f"{label}: {place}.{low} ({node[low]}) is larger than {high} ({node[high]}): "
                                          "no value fits")
            if "enum" in node:
                values = node["enum"]
                if not isinstance(values, list) or not values:
                    raise ToolSchemaError(f"{label}: {place}.enum is empty (or not a list): no value could be "
                                          "given there, so no call of the tool could be made")
                if len(values) > MAX_SCHEMA_ENUM:
                    raise ToolSchemaError(f"{label}: {place}.enum lists {len(values):,} values, more than the "
                                          f"{MAX_SCHEMA_ENUM:,} a tool schema may")
        for key, value in node.items():
            if is_schema and key in NAMED_SCHEMAS and isinstance(value, dict):
                stack.extend((f"{place}.{key}.{name}", sub, True) for name, sub in value.items())
            elif is_schema and key in ("const", "enum", "default", "examples", "required"):
                continue  # values, not schemas
            else:
                stack.append((f"{place}.{key}", value, is_schema))


@lru_cache(maxsize=512)
def schema_problem(params_json: str) -> str | None:
    """What makes a parameters schema (as canonical JSON) no valid JSON schema (Draft 2020-12), or None; cached:
    the same tools are checked at every turn of a run, and the check costs tens of milliseconds."""
    import_jsonschema()  # without the IRI grammar the meta-schema does not use (1.5 s of CPU a process)
    from jsonschema import Draft202012Validator, SchemaError

    try:
        Draft202012Validator.check_schema(json.loads(params_json))
    except SchemaError as err:
        at = "/".join(str(p) for p in err.absolute_path) or "(top)"
        return f"parameters is not a valid JSON schema: {err.message[:200]} at parameters/{at}"
    except RecursionError:  # not reached past the depth check; said, never a traceback
        return "parameters nest too deeply to be a schema"
    return None


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
    out.pop("pattern", None)  # a regular expression's repetitions would be spelled out too: strings stay bounded
    if (out.get("type") == "array" or "items" in out) and "maxItems" not in out:  # counts checked before
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
