"""Scoring observed messages with models behind an API.

Two backends, never mixed silently (rows carry ``source``):

* ``teacher_forced`` — the log-probs of the *observed* tokens. Chat APIs cannot
  give these; a legacy completions endpoint with ``echo=True, logprobs=k`` can
  (vLLM, and the ``serve-local`` command: :mod:`agentuq_nb.llm.server`). The conversation is rendered to text
  client-side, sent once through ``litellm.text_completion``, and each returned
  prompt token is assigned to the message body its characters overlap
  (``text_offset``). Rendering is ChatML by default (exact for SmolLM2, Qwen-style
  models); pass the model's own Jinja ``chat_template`` for anything else. A
  server that returns no prompt log-probs raises ``PromptLogprobsUnavailable``,
  which names the backend to use instead.
* ``chat_replay`` — AgentUQ's fallback for APIs with no prompt log-probs: the
  scorer is asked, via ``generate``, to write the message in the observed one's
  place, and the log-probs of *its own continuation* are returned. For an
  assistant target the context is sent as is; for user and tool targets the
  scorer sees the conversation as a transcript and is asked for the next
  ``user``/``tool`` message. This measures the scorer's uncertainty at that
  point, not the likelihood of the observed text.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jinja2
import litellm

from agentuq_nb.llm.chat_format import PLAIN_CHATML, Segment, message_body, normalize_message
from agentuq_nb.llm.local_provider import TokenLogprob

SENTINEL = "\x00AGENTUQ_BODY\x00"


class PromptLogprobsUnavailable(RuntimeError):
    """The model's API returned no log-probs for prompt tokens."""


@dataclass(frozen=True)
class JinjaChat:
    """A Hugging Face chat template, rendered client-side; message bodies found by a sentinel.

    Works for templates where rendering a longer conversation extends the rendering of
    a shorter one (true of ordinary chat templates); others raise a ValueError.
    """

    template: str
    bos_token: str = ""
    eos_token: str = ""

    @cached_property
    def _compiled(self) -> jinja2.Template:
        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise_template_error
        env.filters["tojson"] = lambda obj, **kw: json.dumps(obj, ensure_ascii=False, **kw)
        return env.from_string(self.template)

    def _render(self, messages: list[dict], tools: list | None) -> str:
        return self._compiled.render(messages=messages, tools=tools, add_generation_prompt=False,
                                     bos_token=self.bos_token, eos_token=self.eos_token)

    def render(self, messages: list, system: str | None = None, tools: list | None = None) -> list[Segment]:
        msgs = [normalize_message(m) for m in messages]
        if system is not None:
            msgs = [{"role": "system", "content": system, "tool_calls": None, "tool_call_id": None}, *msgs]
            offset = 1
        else:
            offset = 0
        as_template = [_template_message(m) for m in msgs]
        full = self._render(as_template, tools)
        segments, cursor = [], 0
        for i, msg in enumerate(msgs):
            if msg["role"] == "system":
                continue
            probe = self._render(as_template[:i] + [_template_message({**msg, "content": SENTINEL, "tool_calls": None})],
                                 tools)
            start = probe.index(SENTINEL)
            suffix = probe[start + len(SENTINEL):]
            upto = self._render(as_template[: i + 1], tools)
            if not (full.startswith(upto) and upto.startswith(probe[:start]) and upto.endswith(suffix)):
                raise ValueError("the chat template does not render conversations prefix-consistently; "
                                 "message spans cannot be located")
            end = len(upto) - len(suffix)
            segments.append(Segment(full[cursor:start], special=True))
            segments.append(Segment(full[start:end], special=False, message_idx=i - offset))
            cursor = end
        segments.append(Segment(full[cursor:], special=True))
        return [s for s in segments if s.text]


def _template_message(msg: dict) -> dict:
    out = {"role": msg["role"], "content": msg["content"] or ""}
    if msg["tool_calls"]:
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in msg["tool_calls"]]
    if msg["role"] == "tool":
        out["tool_call_id"] = msg["tool_call_id"] or ""
    return out


def _raise_template_error(message: str) -> None:
    raise ValueError(f"chat template error: {message}")


def render_for_remote(messages: list, system: str | None, tools: list | None,
                      chat_template: str | JinjaChat | None) -> list[Segment]:
    if chat_template is None:
        return PLAIN_CHATML.render(messages, system=system, tools=tools)
    template = chat_template if isinstance(chat_template, JinjaChat) else JinjaChat(chat_template)
    return template.render(messages, system=system, tools=tools)


def echo_score(segments: list[Segment], model: str, top_logprobs: int = 5,
               score_messages: set[int] | None = None, **request: Any) -> dict[int, list[TokenLogprob]]:
    """Prompt log-probs of each message body from one ``echo=True`` completions request.

    ``request`` goes to ``litellm.text_completion`` (``api_base``, ``api_key``, ...).
    """
    text = "".join(s.text for s in segments)
    spans, cursor = [], 0
    for seg in segments:
        if seg.message_idx is not None and (score_messages is None or seg.message_idx in score_messages):
            spans.append((cursor, cursor + len(seg.text), seg.message_idx))
        cursor += len(seg.text)
    response = litellm.text_completion(model=model, prompt=text, echo=True, logprobs=top_logprobs,
                                       max_tokens=1, temperature=0, **request)
    logprobs = response.choices[0].logprobs
    offsets = list(getattr(logprobs, "text_offset", None) or [])
    token_lps = list(getattr(logprobs, "token_logprobs", None) or [])
    if not offsets or len(token_lps) < 2 or all(lp is None for lp in token_lps[:-1]):
        raise PromptLogprobsUnavailable(
            f"{model} returned no prompt log-probs for echo=True, logprobs={top_logprobs}; its API cannot "
            "teacher-force. Use backend='chat_replay' (log-probs of the scorer's own continuation) instead.")
    tokens = list(logprobs.tokens)
    tops = list(logprobs.top_logprobs or [None] * len(tokens))
    offsets = token_offsets(text, tokens, offsets)
    ends = offsets[1:] + [len(text) + 1]
    out: dict[int, list[TokenLogprob]] = {idx: [] for _, _, idx in spans}
    for tok, lp, top, start, end in zip(tokens, token_lps, tops, offsets, ends):
        if lp is None or start >= len(text):
            continue
        owner = next((idx for lo, hi, idx in spans if start < hi and end > lo), None)
        if owner is not None:
            ranked = sorted((top or {}).items(), key=lambda kv: -kv[1])[:top_logprobs]
            out[owner].append(TokenLogprob(tok, list(tok.encode("utf-8")), float(lp),
                                           [(t, list(t.encode("utf-8")), float(v)) for t, v in ranked], None))
    return out


def token_offsets(text: str, tokens: list[str], offsets: list[int]) -> list[int]:
    """Where each echoed token starts in ``text``: the server's ``text_offset`` where every token's string is
    found there (vLLM's, serve-local's), else found by walking the token strings through the text.

    llama-cpp-python's server counts no characters for special tokens (``<|im_start|>`` …): it detokenizes
    them to empty strings, so its offsets fall behind by each special token's length and the tokens of one
    message would be assigned to the one before. Walking: a token's string is looked for from the end of the
    previous one; the text skipped is what the empty (special) tokens stand for; a token not found (the one
    generated after the prompt) starts past the end."""
    if len(offsets) == len(tokens) and all(text.startswith(tok, at) for tok, at in zip(tokens, offsets)
                                           if tok and at < len(text)):  # past the end: the generated token
        return offsets
    walked, cursor = [], 0
    for tok in tokens:
        at = text.find(tok, cursor) if tok else cursor
        if at < 0:
            at = cursor = len(text)
        else:
            cursor = at + len(tok)
        walked.append(at)
    return walked


def replay_messages(context: list, target_role: str, system: str | None) -> list[dict]:
    """What the scorer is sent so that its reply stands in for a ``target_role`` message."""
    msgs = [normalize_message(m) for m in context]
    head = [{"role": "system", "content": system}] if system is not None else []
    if target_role == "assistant":
        return head + msgs
    transcript = "\n\n".join(f"{m['role']}: {message_body(m)}" for m in msgs if m["role"] != "system")
    instruction = (f"Here is a conversation:\n\n{transcript}\n\n"
                   f"Write the next message, from the {target_role}. Reply with that message only.")
    return head + [{"role": "user", "content": instruction}]
