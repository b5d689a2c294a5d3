"""How a conversation becomes text: one rendering shared by generation and scoring.

Teacher-forced scores only reproduce generation-time log-probs if the model sees
exactly the same tokens in both cases, so every path (local generation, local
scoring, the OpenAI-compatible server, remote echo scoring) renders through this
module. The format is ChatML, which is SmolLM2's own chat template:

    <|im_start|>system\\n{system}<|im_end|>\\n
    <|im_start|>user\\n{body}<|im_end|>\\n
    <|im_start|>assistant\\n{body}<|im_end|>\\n

extended where SmolLM2's template has nothing to say:

* **system prompt**: the ``system`` argument, else the leading system message(s),
  else SmolLM2's default system line (its template inserts one too). Tools, when
  given, are described at the end of the system prompt (see ``tool_format``).
* **tool results** (role ``tool``) are shown to the model as a user turn wrapped
  in ``<tool_response>`` tags, the widely used Qwen/Hermes convention; a 135M
  model knows no ``tool`` role, but it does follow a user turn.
* **tool calls** (assistant or user messages with ``tool_calls``) are part of the
  message body: ``{content}\\n<tool_call>\\n{json}\\n</tool_call>`` — the exact text
  the local model produces when it calls a tool, so scoring a tool-call message
  scores what the model would have had to write.

A rendering is a list of ``Segment``s, tokenized one by one and concatenated, so
the tokens of a prefix of the conversation are a prefix of the tokens of the whole
(no BPE merge across a message boundary). Only message *bodies* carry a
``message_idx``; role headers and wrappers are scaffolding and are never scored.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from agentuq_nb.llm.tool_format import serialize_tool_calls, tools_system_prompt

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SMOLLM2_DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TOOL_RESPONSE_OPEN = "<tool_response>\n"
TOOL_RESPONSE_CLOSE = "\n</tool_response>"


@dataclass(frozen=True)
class Segment:
    """A piece of rendered text.

    ``message_idx`` is set on scored message bodies only; ``pinned`` marks the system
    prompt, which a sliding window never drops.
    """

    text: str
    special: bool
    message_idx: int | None = None
    pinned: bool = False


# ----------------------------------------------------------------------------- messages

def normalize_tool_call(call: Any) -> dict:
    """An OpenAI (``function.arguments`` JSON string) or τ² (``arguments`` dict) tool call,
    as τ²'s ``{"id", "name", "arguments", "requestor"}``.

    Arguments that are not valid JSON (a remote model's malformed call) are kept as the raw
    string, so the trajectory records what the model said; the simulator then answers the
    call with a tool error instead of the run crashing.
    """
    call = _as_dict(call)
    if "function" in call:
        function = _as_dict(call["function"])
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = call.get("name"), call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # kept verbatim (see above)
    if not name:
        raise ValueError(f"tool call without a function name: {call!r}")
    return {
        "id": call.get("id") or "",
        "name": name,
        "arguments": arguments if arguments not in (None, "") else {},
        "requestor": call.get("requestor") or "assistant",
    }


def arguments_json(arguments: Any) -> str:
    """A tool call's arguments as the JSON text an OpenAI message carries (raw text stays as it was)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)


def normalize_message(message: Any) -> dict:
    """A message dict (OpenAI or τ² shape, or a pydantic model) reduced to role/content/tool_calls."""
    message = _as_dict(message)
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"message role must be system, user, assistant or tool, got {role!r}")
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    calls = message.get("tool_calls") or None
    return {
        "role": role,
        "content": content,
        "tool_calls": [normalize_tool_call(c) for c in calls] if calls else None,
        "tool_call_id": message.get("tool_call_id") or (message.get("id") if role == "tool" else None),
    }


def to_openai_message(message: Any) -> dict:
    """A message in the shape every OpenAI-compatible API accepts (τ² keys dropped)."""
    msg = normalize_message(message)
    out: dict[str, Any] = {"role": msg["role"], "content": msg["content"]}
    if msg["tool_calls"]:
        out["tool_calls"] = [
            {
                "id": call["id"] or f"call_{i}",
                "type": "function",
                "function": {"name": call["name"], "arguments": arguments_json(call["arguments"])},
            }
            for i, call in enumerate(msg["tool_calls"])
        ]
    if msg["role"] == "tool":
        out["tool_call_id"] = msg["tool_call_id"] or ""
        out["content"] = msg["content"] or ""
    return out


def message_body(message: dict) -> str:
    """The text a normalized message contributes to the conversation (content + tool calls)."""
    content = message["content"] or ""
    if not message["tool_calls"]:
        return content
    calls = serialize_tool_calls(message["tool_calls"])
    return f"{content}\n{calls}" if content else calls


# ----------------------------------------------------------------------------- rendering

@dataclass(frozen=True)
class ChatML:
    """ChatML rendering; ``default_system`` is what an empty system prompt becomes."""

    default_system: str | None = SMOLLM2_DEFAULT_SYSTEM

    def system_prompt(self, messages: list[dict], system: str | None, tools: list | None) -> str | None:
        if system is None:
            leading = []
            for m in messages:
                if m["role"] != "system":
                    break
                leading.append(m["content"] or "")
            system = "\n\n".join(leading) if leading else self.default_system
        if tools:
            system = tools_system_prompt(system, tools)
        return system

    def system_segments(self, system: str | None) -> list[Segment]:
        if system is None:
            return []
        return [Segment(f"{IM_START}system\n{system}{IM_END}\n", special=True, pinned=True)]

    def header(self, role: str) -> str:
        if role == "tool":
            return f"{IM_START}user\n{TOOL_RESPONSE_OPEN}"
        return f"{IM_START}{role}\n"

    def footer(self, role: str) -> str:
        return f"{TOOL_RESPONSE_CLOSE}{IM_END}\n" if role == "tool" else f"{IM_END}\n"

    def message_segments(self, message: dict, message_idx: int) -> list[Segment]:
        role = message["role"]
        if role == "system":
            return [Segment(f"{IM_START}system\n{message['content'] or ''}{IM_END}\n", special=True)]
        return [
            Segment(self.header(role), special=True),
            Segment(message_body(message), special=False, message_idx=message_idx),
            Segment(self.footer(role), special=True),
        ]

    def render(
        self,
        messages: Iterable[Any],
        system: str | None = None,
        tools: list | None = None,
        next_role: str | None = None,
    ) -> list[Segment]:
        """Segments of the conversation; ``next_role`` appends that role's header (generation prompt).

        Leading system messages become the system prompt (not scored) unless ``system`` is
        given, in which case they are rendered as ordinary system turns after it.
        """
        msgs = [normalize_message(m) for m in messages]
        segments = self.system_segments(self.system_prompt(msgs, system, tools))
        n_leading = 0
        if system is None:
            while n_leading < len(msgs) and msgs[n_leading]["role"] == "system":
                n_leading += 1
        for idx, message in enumerate(msgs):
            if idx >= n_leading:
                segments.extend(self.message_segments(message, idx))
        if next_role is not None:
            segments.append(Segment(self.header(next_role), special=True))
        return segments


SMOLLM2_CHAT = ChatML()
# Remote ChatML models (Qwen, Hermes, ...) have no SmolLM default system line.
PLAIN_CHATML = ChatML(default_system=None)


def segments_text(segments: list[Segment]) -> str:
    return "".join(s.text for s in segments)


def _as_dict(obj: Any) -> dict:
    if isinstance(obj, dict):
        return obj
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if hasattr(obj, "__dict__"):
        return dict(vars(obj))
    raise TypeError(f"expected a message/tool-call dict, got {type(obj).__name__}")
