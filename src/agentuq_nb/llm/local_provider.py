"""The embedded model as a litellm provider (``local/smollm2-135m-instruct``).

Registering it with litellm (``register``, run on ``import agentuq_nb.llm``) means the
toolkit has one code path for every model: ``litellm.completion`` returns the same
OpenAI-shaped response, ``choices[0].logprobs.content[*].{token, logprob,
top_logprobs}``, for ``openai/gpt-4.1``, ``hosted_vllm/...`` and the local model. Each
local token entry also carries ``full_entropy`` (nats over the whole vocabulary),
which remote APIs cannot provide.

``chat_completion`` is the local model's answer to a chat request (text or one tool
call, see ``tool_format``); ``text_completion`` serves the legacy completions API
with ``echo`` (prompt log-probs), which is what remote teacher-forced scoring asks a
vLLM server for. Both are deterministic for ``temperature=0`` or a fixed ``seed``.

Rows of a tool-call message are the teacher-forced log-probs of its canonical text
(the same tokens ``score`` would use), because the grammar chooses structure the
model did not choose freely; rows of a text message are those of the tokens as
they were generated.

``n`` > 1 returns ``n`` choices decoded together (``chat_samples``): choice ``i`` is drawn
with seed ``seed + i``; ``usage`` counts the prompt once and every choice's completion.

Two request options beyond OpenAI's: ``fit_context`` (the context-overflow policy of
``context_fit``; off by default, so an overflow raises) and cancellation: inside
``cancellable(event)``, a completion stops decoding with ``GenerationCancelled`` once
``event`` is set (serve-local sets it when the client disconnects).
"""
from __future__ import annotations

import asyncio
import contextvars
import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import litellm
import numpy as np
from litellm import CustomLLM
from litellm.types.utils import (
    ChatCompletionTokenLogprob,
    ChoiceLogprobs,
    Choices,
    Message,
    ModelResponse,
    TopLogprob,
    Usage,
)

from agentuq_nb.llm.chat_format import SMOLLM2_CHAT, Segment, arguments_json, message_body, normalize_message
from agentuq_nb.llm.context_fit import drop_oldest_turns
from agentuq_nb.llm.local_model import (
    ContextWindowError,
    Grammar,
    LocalModel,
    PromptLookup,
    Session,
    TokenChooser,
    TokenStats,
    get_local_model,
    logit_stats,
)
from agentuq_nb.llm.local_sampling import (
    Feed,
    Score,
    decode_together,
    parallel_context,
    sequence_state,
)
from agentuq_nb.llm.request import DEFAULT_MAX_TOKENS, OPENAI_DEFAULT_TEMPERATURE, GenerationRequest
from agentuq_nb.llm.tool_format import (
    TOOL_CALL_OPEN,
    check_tool_schemas,
    parse_tool_call_json,
    select_tools,
    tool_call_grammar,
    tool_call_prefix,
)
from agentuq_nb.records.config import EMBEDDED_MODEL

LOCAL_MODEL = EMBEDDED_MODEL  # "local/smollm2-135m-instruct", named once in records.config
PROVIDER, MODEL_NAME = LOCAL_MODEL.split("/", 1)
CONTEXT_WINDOW = 8192
SUPPORTED_PARAMS = {"temperature", "seed", "max_tokens", "max_completion_tokens", "logprobs",
                    "top_logprobs", "tools", "tool_choice", "n", "stream", "user", "fit_context"}
_CANCELLED: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("local_cancelled", default=None)


@contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Local completions started inside stop with ``GenerationCancelled`` once ``event`` is set.

    A context variable, because the request passes through ``litellm.completion`` (which
    calls the provider in the caller's thread and context) on its way to the model.
    """
    token = _CANCELLED.set(event)
    try:
        yield
    finally:
        _CANCELLED.reset(token)


@dataclass
class TokenLogprob:
    """One generated or scored token with its top-k alternatives (OpenAI's fields + full entropy)."""

    token: str
    bytes: list[int]
    logprob: float | None  # None only for the first token of an echoed prompt (no context)
    top: list[tuple[str, list[int], float]]
    full_entropy: float | None


@dataclass
class LocalCompletion:
    content: str | None
    tool_calls: list[dict] | None  # τ² shape: id, name, arguments (dict), requestor
    finish_reason: str
    tokens: list[TokenLogprob]
    prompt_tokens: int
    completion_tokens: int
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)  # echo: one per prompt token
    dropped_messages: int = 0  # fit_context: oldest middle messages left out of the prompt
    dropped_tokens: int = 0  # ... and the prompt tokens they took


# ----------------------------------------------------------------------------- conversions

def segment_tokens(model: LocalModel, segments: list[Segment]) -> list[int]:
    return [t for seg in segments for t in model.tokenize(seg.text, special=seg.special)]


def stats_to_logprobs(model: LocalModel, ids: list[int], stats: TokenStats) -> list[TokenLogprob]:
    out = []
    for i, tok in enumerate(ids):
        top = [
            (model.token_text(int(t)), list(model.piece(int(t))), float(lp))
            for t, lp in zip(stats.topk_ids[i], stats.topk_logprobs[i])
        ]
        out.append(TokenLogprob(model.token_text(tok), list(model.piece(tok)),
                                float(stats.chosen_logprob[i]), top, float(stats.full_entropy[i])))
    return out


def _call_id(prompt: list[int], body: str) -> str:
    digest = hashlib.sha256(np.asarray(prompt, dtype=np.int32).tobytes() + body.encode("utf-8"))
    return "call_" + digest.hexdigest()[:24]


# ----------------------------------------------------------------------------- chat

def in_json_string(text: bytes) -> bool:
    """Whether a JSON prefix ends inside a string (an odd number of unescaped quotes)."""
    inside, escaped = False, False
    for byte in text:  # a call's JSON is a few hundred bytes: a plain scan (json has no prefix parser)
        if escaped:
            escaped = False
        elif byte == 0x5C:  # backslash
            escaped = inside
        elif byte == 0x22:  # quote
            inside = not inside
    return inside


#: the last tokens of a tool call's budget prefer closers (``"``, ``}``, ``]``) among those the grammar
#: allows, so a call that would run out of ``max_tokens`` inside a string still closes and parses
CLOSING_RESERVE = 16


class ChatDecoder:
    """One answer's decoding, step by step: free text (watching for ``<tool_call>``), then one
    grammar-constrained call whose rows are teacher-forced.

    The decoder never touches the model's cache: a driver feeds the prompt, passes the
    last logits to ``advance``, and serves each ``Feed``/``Score`` it returns until it
    returns None (then ``result()``). ``decode`` drives it on one ``Session``;
    ``local_sampling`` drives several together in one llama.cpp batch.
    """

    def __init__(self, model: LocalModel, prompt: list[int], tools: list[dict], forced: bool,
                 chooser: TokenChooser, budget: int, k: int, watch_tool_call: bool = True):
        self.model, self.prompt, self.tools, self.chooser, self.budget, self.k = model, prompt, tools, chooser, budget, k
        self.watch_tool_call = watch_tool_call and bool(tools)
        self.ids: list[int] = []
        self.parts: list[TokenStats] = []
        self.text = b""
        self.grammar: Grammar | None = None
        self.call_budget = self.call_step = 0
        self.json_bytes = b""
        self.content = ""
        self.finish: str | None = None
        self.message: dict | None = None
        self.body_ids: list[int] = []
        self.stats: TokenStats | None = None
        self.forced = forced

    def advance(self, logits: np.ndarray) -> Feed | Score | None:
        """The next request given the logits after the last fed token; None when the answer is complete."""
        if self.forced:
            self.forced = False
            return self._open_call("", self.budget)
        if self.grammar is not None:
            return self._call_step(logits)
        if len(self.ids) >= self.budget:
            return self._finish_text("length")
        token = self.chooser.choose(logits)
        if self.model.is_stop(token):
            return self._finish_text("stop")
        self.parts.append(logit_stats(logits[None, :], np.array([token]), self.k))
        self.ids.append(token)
        self.text += self.model.piece(token)
        opener = TOOL_CALL_OPEN.encode("utf-8")
        if self.watch_tool_call and opener in self.text:
            before = self.text[: self.text.index(opener)].decode("utf-8", "replace").strip()
            return self._open_call(before, self.budget - len(self.ids))
        if len(self.ids) == self.budget:
            return self._finish_text("length")
        return Feed([token])

    def scored(self, stats: TokenStats) -> None:
        """The answer to the ``Score`` request: the teacher-forced rows of the call's message."""
        self.stats = stats

    def result(self) -> LocalCompletion:
        model = self.model
        if self.message is None:  # a text answer
            return LocalCompletion(model.detokenize(self.ids), None, self.finish,
                                   stats_to_logprobs(model, self.ids, TokenStats.concat(self.parts, self.k)),
                                   len(self.prompt), len(self.ids))
        return LocalCompletion(self.message["content"], self.message["tool_calls"], self.finish,
                               stats_to_logprobs(model, self.body_ids, self.stats), len(self.prompt), len(self.body_ids))

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
            self.grammar = None

    def _finish_text(self, finish: str) -> None:  # noqa: D401 - returns the "no more requests" answer
        self.finish = finish
        return None

    def _open_call(self, content: str, budget: int) -> Feed | Score:
        self.content, self.call_budget = content, budget
        self.grammar = Grammar(self.model, tool_call_grammar(self.tools))
        if budget <= 0:
            return self._close_call(None)
        return Feed(self.model.tokenize(tool_call_prefix(content)), keep=len(self.prompt))

    def _call_step(self, logits: np.ndarray) -> Feed | Score:
        closing = self.call_budget - self.call_step <= CLOSING_RESERVE  # close what is open while tokens remain
        prefer = self.model.closing_tokens[in_json_string(self.json_bytes)] if closing else None
        token = self.grammar.choose(self.chooser, logits, prefer=prefer)
        if token is None:
            return self._close_call(None)
        self.grammar.accept(token)
        self.json_bytes += self.model.piece(token)
        call = parse_tool_call_json(self.json_bytes.decode("utf-8", "ignore"))
        self.call_step += 1
        if call is not None or self.call_step == self.call_budget:
            return self._close_call(call)
        return Feed([token])

    def _close_call(self, call: dict | None) -> Score:
        self.close()
        if call is None:
            text = tool_call_prefix(self.content) + self.json_bytes.decode("utf-8", "replace")
            self.message = {"role": "assistant", "content": text, "tool_calls": None}
            self.finish = "length"
        else:
            call.update(id="", requestor="assistant")
            self.message = {"role": "assistant", "content": self.content or None, "tool_calls": [call]}
            self.finish = "tool_calls"
        body = message_body(self.message)
        self.body_ids = self.model.tokenize(body)
        if call is not None:
            call["id"] = _call_id(self.prompt, body)
        return Score(self.body_ids, keep=len(self.prompt))


def decode(session: Session, decoder: ChatDecoder, logits: np.ndarray) -> LocalCompletion:
    """Run ``decoder`` on ``session`` (its prompt already fed; ``logits`` are the last prompt token's).

    Each single-token step also decodes a prompt-lookup draft (see ``local_model``); when the
    sampled token matches it, the following logits are already known.
    """
    lookup = PromptLookup(session.tokens)
    draft, draft_logits = None, None
    try:
        request = decoder.advance(logits)
        while request is not None:
            if request.keep is not None:
                draft = None
                session.truncate(request.keep)
                if isinstance(request, Score):
                    decoder.scored(session.score(request.tokens, np.arange(len(request.tokens)), decoder.k))
                    break
                logits = session.feed(request.tokens)
                lookup = PromptLookup(session.tokens)
            else:
                (token,) = request.tokens
                matched = token == draft
                if draft is not None and not matched:
                    session.truncate(len(session.tokens) - 1)  # the draft was wrong: drop it
                draft = None
                lookup.append(token)
                if matched:
                    logits = draft_logits
                else:
                    draft = lookup.guess()
                    if draft is None:
                        logits = session.feed([token])
                    else:
                        logits, draft_logits = session.feed_rows([token, draft], [0, 1])
            request = decoder.advance(logits)
    finally:
        decoder.close()
    return decoder.result()


def chat_completion(
    messages: list,
    request: GenerationRequest | None = None,
    model: LocalModel | None = None,
    cancelled: threading.Event | None = None,
) -> LocalCompletion:
    """The local model's next assistant message for an OpenAI-style chat request.

    ``request`` (default: ``GenerationRequest()``); its ``fit_context`` drops the oldest middle turns when the
    prompt and ``max_tokens`` do not fit the window (see ``context_fit``); off, an overflow raises
    ``ContextWindowError``. ``cancelled`` (default: the ``cancellable`` event, if any): stop with ``GenerationCancelled``.
    """
    request = request or GenerationRequest()
    model = model or get_local_model()
    cancelled = cancelled if cancelled is not None else _CANCELLED.get()
    prompt, dropped_messages, dropped_tokens, budget, usable, forced = _chat_setup(model, messages, request)
    decoder = ChatDecoder(model, prompt, usable, forced, TokenChooser(request.temperature, request.seed), budget,
                          request.top_logprobs)
    with model.session(cancelled) as session:
        result = decode(session, decoder, session.feed(prompt))
    result.dropped_messages, result.dropped_tokens = dropped_messages, dropped_tokens
    return result


def chat_samples(
    messages: list,
    n: int,
    request: GenerationRequest | None = None,
    model: LocalModel | None = None,
    cancelled: threading.Event | None = None,
) -> list[LocalCompletion]:
    """``n`` answers to one chat request, decoded together (``local_sampling``).

    Answer ``i`` is drawn with seed ``seed + i`` (unseeded if ``seed`` is None), so it equals
    ``chat_completion`` with ``request.with_seed(seed + i)`` token for token. The prompt is decoded once, in
    the main context's cache (its prefix reused as for ``chat_completion``); each answer's
    ``prompt_tokens`` is the full prompt.
    """
    if n < 1:
        raise ValueError(f"n (the number of samples) must be at least 1, got {n}")
    request = request or GenerationRequest()
    model = model or get_local_model()
    cancelled = cancelled if cancelled is not None else _CANCELLED.get()
    prompt, dropped_messages, dropped_tokens, budget, usable, forced = _chat_setup(model, messages, request)
    seed = request.seed
    results: list[LocalCompletion] = []
    with model.session(cancelled) as session:
        logits = session.feed(prompt)
        state = sequence_state(model, session.slot, len(prompt), model.n_seqs)
        parallel = parallel_context(model, n, len(prompt) + budget)
        for start in range(0, n, parallel.n_seqs):
            decoders = [ChatDecoder(model, prompt, usable, forced,
                                    TokenChooser(request.temperature, None if seed is None else seed + i), budget,
                                    request.top_logprobs)
                        for i in range(start, min(n, start + parallel.n_seqs))]
            decode_together(parallel, decoders, prompt, state, logits, cancelled)
            results += [d.result() for d in decoders]
    for result in results:
        result.dropped_messages, result.dropped_tokens = dropped_messages, dropped_tokens
    return results


def _chat_setup(model: LocalModel, messages: list, request: GenerationRequest):
    """(prompt, messages dropped, tokens dropped, token budget, usable tools, whether a call is forced)."""
    tools = check_tool_schemas(request.tools) if request.tools else request.tools  # bounded before the prompt/grammar
    prompt, dropped_messages, dropped_tokens = chat_prompt(model, messages, tools, request.max_tokens,
                                                           request.fit_context)
    budget = token_budget(request.max_tokens, len(prompt), model.n_ctx)
    usable, forced = select_tools(tools or [], request.tool_choice)
    return prompt, dropped_messages, dropped_tokens, budget, usable, forced


def chat_prompt(model: LocalModel, messages: list, tools: list[dict] | None, max_tokens: int | None,
                fit_context: bool) -> tuple[list[int], int, int]:
    """(prompt tokens, messages dropped, tokens dropped) under the context-overflow policy."""
    def render(msgs: list) -> list[int]:
        return segment_tokens(model, SMOLLM2_CHAT.render(msgs, tools=tools, next_role="assistant"))

    prompt = render(messages)
    room_needed = 1 + (DEFAULT_MAX_TOKENS if max_tokens is None else int(max_tokens))
    if not fit_context or len(prompt) + room_needed <= model.n_ctx:
        return prompt, 0, 0
    fitted = drop_oldest_turns([normalize_message(m) for m in messages],
                               lambda msgs: len(render(msgs)) + room_needed <= model.n_ctx)
    fitted_prompt = render(fitted.messages)
    return fitted_prompt, fitted.dropped_messages, len(prompt) - len(fitted_prompt)


def token_budget(max_tokens: int | None, n_prompt: int, n_ctx: int) -> int:
    """Tokens a completion may generate after ``n_prompt`` prompt tokens (``ContextWindowError`` if none)."""
    room = n_ctx - n_prompt - 1
    if room <= 0:
        raise ContextWindowError(n_prompt + 1, n_ctx)
    return room if max_tokens is None else min(int(max_tokens), room)


# ----------------------------------------------------------------------------- text completion

def text_completion(
    prompt: str | list[int],
    max_tokens: int = 16,
    echo: bool = False,
    logprobs: int | None = None,
    temperature: float = OPENAI_DEFAULT_TEMPERATURE,
    seed: int | None = None,
    model: LocalModel | None = None,
    cancelled: threading.Event | None = None,
) -> LocalCompletion:
    """Continue raw text (special tokens parsed); with ``echo``, prompt log-probs too.

    ``prompt_logprobs[0].logprob`` is None: the first token has no context. Token ids must
    be in ``[0, n_vocab)`` (``ValueError`` otherwise). ``cancelled``: as in ``chat_completion``.
    """
    model = model or get_local_model()
    ids = list(prompt) if isinstance(prompt, list) else model.tokenize(prompt, special=True)
    if not ids:
        raise ValueError("the prompt is empty")
    outside = [t for t in ids if not 0 <= t < model.n_vocab]
    if outside:
        raise ValueError(f"prompt token id {outside[0]} is outside the vocabulary [0, {model.n_vocab})")
    k = logprobs or 0
    budget = token_budget(max_tokens, len(ids), model.n_ctx)
    decoder = ChatDecoder(model, ids, [], False, TokenChooser(temperature, seed), budget, k, watch_tool_call=False)
    with model.session(cancelled if cancelled is not None else _CANCELLED.get()) as session:
        prompt_lps: list[TokenLogprob] = []
        if echo and logprobs is not None:
            stats = session.score(ids, np.arange(1, len(ids)), k)  # the first token has no context
            first = TokenLogprob(model.token_text(ids[0]), list(model.piece(ids[0])), None, [], None)
            prompt_lps = [first, *stats_to_logprobs(model, ids[1:], stats)]
            session.truncate(len(ids) - 1)
            logits = session.feed(ids[-1:])
        else:
            logits = session.feed(ids)
        if budget and max_tokens:
            result = decode(session, decoder, logits)
        else:
            result = LocalCompletion("", None, "length", [], len(ids), 0)
    result.prompt_logprobs = prompt_lps
    return result


# ----------------------------------------------------------------------------- litellm

def to_openai_logprobs(tokens: list[TokenLogprob]) -> ChoiceLogprobs:
    return ChoiceLogprobs(content=[
        ChatCompletionTokenLogprob(
            token=t.token, bytes=t.bytes, logprob=t.logprob,
            top_logprobs=[TopLogprob(token=s, bytes=b, logprob=lp) for s, b, lp in t.top],
            full_entropy=t.full_entropy,
        )
        for t in tokens
    ])


def to_openai_tool_calls(tool_calls: list[dict] | None) -> list[dict] | None:
    if not tool_calls:
        return None
    return [
        {"id": c["id"], "type": "function",
         "function": {"name": c["name"], "arguments": arguments_json(c["arguments"])}}
        for c in tool_calls
    ]


class LocalProvider(CustomLLM):
    """litellm handler: ``litellm.completion(model="local/smollm2-135m-instruct", ...)``."""

    def completion(self, model: str, messages: list, optional_params: dict, model_response: ModelResponse,
                   **_: Any) -> ModelResponse:
        params = dict(optional_params)
        unsupported = sorted(set(params) - SUPPORTED_PARAMS)
        if unsupported:
            raise litellm.UnsupportedParamsError(
                message=f"{LOCAL_MODEL} does not support {unsupported}", llm_provider=PROVIDER, model=model)
        if params.get("stream"):
            raise litellm.UnsupportedParamsError(
                message=f"{LOCAL_MODEL} does not stream", llm_provider=PROVIDER, model=model)
        n = params.get("n") or 1
        want_logprobs = bool(params.get("logprobs"))
        request = GenerationRequest.from_params(params)
        try:
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"n must be a positive integer, got {n!r}")
            results = [chat_completion(messages, request)] if n == 1 else chat_samples(messages, n, request)
        except ContextWindowError as exc:
            raise litellm.ContextWindowExceededError(message=str(exc), model=model, llm_provider=PROVIDER) from exc
        except (ValueError, TypeError) as exc:  # the request's fault (a bad message, tool or option): say so
            raise litellm.BadRequestError(message=f"{LOCAL_MODEL}: {exc}", model=model, llm_provider=PROVIDER) from exc
        model_response.choices = [
            Choices(index=i, finish_reason=r.finish_reason,
                    message=Message(content=r.content, role="assistant", tool_calls=to_openai_tool_calls(r.tool_calls)),
                    logprobs=to_openai_logprobs(r.tokens) if want_logprobs else None)
            for i, r in enumerate(results)]
        first = results[0]
        dropped = ({"context_dropped_messages": first.dropped_messages, "context_dropped_tokens": first.dropped_tokens}
                   if params.get("fit_context") else {})
        completion_tokens = sum(r.completion_tokens for r in results)  # the prompt is decoded once for all n
        model_response.usage = Usage(prompt_tokens=first.prompt_tokens, completion_tokens=completion_tokens,
                                     total_tokens=first.prompt_tokens + completion_tokens, **dropped)
        model_response.model = LOCAL_MODEL
        model_response.created = int(time.time())
        return model_response

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await asyncio.to_thread(self.completion, *args, **kwargs)


_PROVIDER = LocalProvider()


def register() -> None:
    """Make ``local/smollm2-135m-instruct`` a litellm model (idempotent); its cost is 0."""
    if not any(item.get("provider") == PROVIDER for item in litellm.custom_provider_map):
        litellm.custom_provider_map = [*litellm.custom_provider_map,
                                       {"provider": PROVIDER, "custom_handler": _PROVIDER}]
    litellm.register_model({LOCAL_MODEL: {
        "max_tokens": CONTEXT_WINDOW, "max_input_tokens": CONTEXT_WINDOW, "max_output_tokens": CONTEXT_WINDOW,
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0,
        "litellm_provider": PROVIDER, "mode": "chat", "supports_function_calling": True,
    }})
