"""The toolkit's LLM calls: ``generate``, ``sample``, ``score`` and ``score_trajectory``.

``generate`` always goes through ``litellm.completion`` — the embedded model is a
litellm provider — so a study switches between ``local/smollm2-135m-instruct``,
``openai/gpt-4.1`` and ``hosted_vllm/<model>`` by name alone. It asks for token
log-probs, retries rate limits, timeouts and transient server errors with
exponential backoff, and refuses a text answer that came back without log-probs
rather than recording a turn with no uncertainty. ``sample`` draws K alternative
next messages (one request with ``n`` where the provider takes it; the embedded model
decodes them together) and accepts answers without log-probs.

``score`` and ``score_trajectory`` measure observed text. ``teacher_forced`` rows
are the log-probs of the observed tokens: in-process for the local model, through
a completions endpoint with ``echo`` for remote ones (``remote``). ``chat_replay``
rows are the log-probs of the scorer's own continuation. Every row says which
(``source``), and the two are never mixed in one result.
"""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import litellm

from agentuq_nb.llm.chat_format import SMOLLM2_CHAT, normalize_message, normalize_tool_call, to_openai_message
from agentuq_nb.llm.local_model import PrefixReuse
from agentuq_nb.llm.local_provider import LOCAL_MODEL, PROVIDER, TokenLogprob
from agentuq_nb.llm.local_scoring import score_segments
from agentuq_nb.llm.remote import echo_score, render_for_remote, replay_messages
from agentuq_nb.llm.request import GenerationRequest, ScoringRequest
from agentuq_nb.records.tokens import make_token_row

BACKENDS = ("teacher_forced", "chat_replay")
RETRYABLE = (
    litellm.RateLimitError,
    litellm.Timeout,
    litellm.APIConnectionError,
    litellm.ServiceUnavailableError,
    litellm.InternalServerError,
)


class MissingLogprobsError(RuntimeError):
    """A model answered without the token log-probs the toolkit asked for."""


@dataclass
class Generation:
    """One generated message with its token rows (``source="generated"``)."""

    message: dict  # τ² style: role, content, tool_calls [{id, name, arguments, requestor}] | None
    tokens: list[dict]
    usage: dict
    cost: float | None
    raw: dict  # the OpenAI choice without logprobs (τ² raw_data)
    model: str
    finish_reason: str | None


class ScoredTokens(list):
    """Token rows of a scored conversation; ``truncations`` counts sliding-window cuts; ``reuse`` (the embedded
    model only, else None) the tokens it decoded and those it took from its cache (``local_model.PrefixReuse``)."""

    def __init__(self, rows: list[dict] = (), truncations: int = 0, reuse: PrefixReuse | None = None):
        super().__init__(rows)
        self.truncations = truncations
        self.reuse = reuse


@dataclass
class RetryPolicy:
    max_retries: int = 5
    initial_delay: float = 1.0
    max_delay: float = 60.0
    retry_on: tuple = field(default=RETRYABLE)

    def delay(self, attempt: int) -> float:
        return min(self.max_delay, self.initial_delay * 2 ** attempt)


# ----------------------------------------------------------------------------- generate

def generate(
    messages: list,
    model: str = LOCAL_MODEL,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> Generation:
    """The model's next assistant message, with a token row per generated token.

    ``messages`` are OpenAI- or τ²-shaped dicts (system/user/assistant/tool). ``options`` named as the fields of
    ``GenerationRequest`` (``tools``, ``tool_choice``, ``top_logprobs``, ``temperature`` — here 0 unless given —,
    ``seed``, ``max_tokens``, ``fit_context``) make the request; the others go to ``litellm.completion``
    (``api_base``, ``api_key``, ...).
    """
    request, extra = GenerationRequest.split(options, temperature=0.0)
    top_logprobs = request.top_logprobs
    response = completion_with_retries(request.completion_args(model, _openai(messages), extra),
                                       retry or RetryPolicy())
    choice = response.choices[0]
    if choice.message.content and not _logprob_entries(choice):
        raise MissingLogprobsError(
            f"{model} returned no token log-probs although the request set logprobs=True, "
            f"top_logprobs={top_logprobs}. Use a model/server that serves logprobs (vLLM: a server whose "
            f"max-logprobs is at least {top_logprobs}; OpenAI: a non-reasoning model) or check that the provider "
            "does not drop the 'logprobs' parameter (litellm.drop_params).")
    usage = response.usage.model_dump() if getattr(response, "usage", None) else {}
    return _generation(choice, model, {k: v for k, v in usage.items() if v is not None}, _cost(response))


def sample(
    messages: list,
    k: int,
    model: str = LOCAL_MODEL,
    retry: RetryPolicy | None = None,
    **options: Any,
) -> list[Generation]:
    """``k`` alternative next assistant messages for the same context, one ``Generation`` each.

    Sample ``i`` is drawn with seed ``seed + i``: for the embedded model,
    ``sample(..., k=K, seed=s)[i]`` is ``generate(..., temperature=T, seed=s + i)`` token for
    token, and the K samples are decoded together over the once-decoded prompt
    (``local_sampling``). For a litellm model whose provider takes ``n``
    (``supports_n``) it is ONE request with ``n=k`` and ``seed`` (the provider decides
    how the choices differ, so the ``seed + i`` identity is not promised there); otherwise
    ``k`` concurrent requests (threads) with seeds ``seed + i``. Retries as ``generate``.

    Sampling is meant to work black-box: a text answer without log-probs (a model or
    provider that returns none) is not an error here, its token rows are just empty.

    Usage and cost: from k requests, each sample has its request's. From one request,
    each sample's ``usage`` has the request's ``prompt_tokens`` (the prompt was sent
    and decoded once for all), its own ``completion_tokens`` (its token rows; the
    request's total split evenly if there are none) and ``choices_in_request = k``;
    ``cost`` is the request's cost split evenly over the k samples.
    ``options``: as ``generate``'s (``temperature`` 1 and ``seed`` 0 unless given); ``fit_context``, the embedded
    model's context-overflow policy (``context_fit``): a context that does not fit raises ``ContextWindowError``'s
    litellm form as ``generate``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k (the number of samples) must be a positive integer, got {k!r}")
    retry = retry or RetryPolicy()
    request, extra = GenerationRequest.split(options, temperature=1.0, seed=0)
    seed, openai_messages = request.seed, _openai(messages)

    def request_for(n: int, sample_seed: int | None) -> dict:
        return request.with_seed(sample_seed).completion_args(model, openai_messages, extra, n=n)

    if k == 1 or not supports_n(model):
        def one(i: int) -> Generation:
            response = completion_with_retries(request_for(1, None if seed is None else seed + i), retry)
            usage = response.usage.model_dump() if getattr(response, "usage", None) else {}
            return _generation(response.choices[0], model, {a: b for a, b in usage.items() if b is not None},
                               _cost(response))

        if k == 1:
            return [one(0)]
        with ThreadPoolExecutor(max_workers=k) as pool:  # requests wait on the network, not on this process
            return list(pool.map(one, range(k)))
    response = completion_with_retries(request_for(k, seed), retry)
    choices = sorted(response.choices, key=lambda c: c.index or 0)
    if len(choices) != k:
        raise RuntimeError(f"{model} returned {len(choices)} choices for n={k}")
    usage = response.usage.model_dump() if getattr(response, "usage", None) else {}
    cost = _cost(response)
    total_completion = usage.get("completion_tokens")
    out = []
    for choice in choices:
        n_rows = len(_logprob_entries(choice))
        own = n_rows if n_rows else (None if total_completion is None else round(total_completion / k))
        prompt_tokens = usage.get("prompt_tokens")
        sample_usage = {"prompt_tokens": prompt_tokens, "completion_tokens": own,
                        "total_tokens": None if prompt_tokens is None or own is None else prompt_tokens + own,
                        "choices_in_request": k}
        for extra in ("context_dropped_messages", "context_dropped_tokens"):
            if usage.get(extra) is not None:
                sample_usage[extra] = usage[extra]
        out.append(_generation(choice, model, {a: b for a, b in sample_usage.items() if b is not None},
                               None if cost is None else cost / k))
    return out


def supports_n(model: str) -> bool:
    """Whether one request can ask ``model`` for several choices (``n``), per litellm's parameter tables."""
    if _is_local(model):
        return True
    try:
        name, provider, _, _ = litellm.get_llm_provider(model)
        params = litellm.get_supported_openai_params(model=name, custom_llm_provider=provider)
    except Exception:  # litellm does not know the provider: ask one choice per request
        return False
    return bool(params) and "n" in params


def _openai(messages: list) -> list[dict]:
    return [to_openai_message(m) for m in messages]


def _generation(choice: Any, model: str, usage: dict, cost: float | None) -> Generation:
    rows = [_row(e, i, role="assistant", model=model, scorer="self", source="generated")
            for i, e in enumerate(_logprob_entries(choice))]
    raw = choice.model_dump()
    raw.pop("logprobs", None)
    return Generation(_tau2_message(choice.message), rows, usage, cost, raw, model, choice.finish_reason)


def completion_with_retries(request: dict, retry: RetryPolicy):
    for attempt in range(retry.max_retries + 1):
        try:
            return litellm.completion(**request)
        except retry.retry_on:
            if attempt == retry.max_retries:
                raise
            time.sleep(retry.delay(attempt))
    raise AssertionError("unreachable")


def _tau2_message(message: Any) -> dict:
    calls = getattr(message, "tool_calls", None)
    return {
        "role": "assistant",
        "content": message.content,
        "tool_calls": [normalize_tool_call(c) for c in calls] if calls else None,
    }


def _logprob_entries(choice: Any) -> list[Any]:
    logprobs = getattr(choice, "logprobs", None)
    if logprobs is None:
        return []
    content = logprobs.get("content") if isinstance(logprobs, dict) else getattr(logprobs, "content", None)
    return list(content or [])


def _field(entry: Any, name: str, default: Any = None) -> Any:
    if isinstance(entry, dict):
        return entry.get(name, default)
    return getattr(entry, name, default)


def _row(entry: Any, token_idx: int, **keys: Any) -> dict:
    """A token row from an OpenAI logprob entry or a ``TokenLogprob``."""
    if isinstance(entry, TokenLogprob):
        tops = [(tok, lp) for tok, _, lp in entry.top]
        token, logprob, full_entropy = entry.token, entry.logprob, entry.full_entropy
    else:
        tops = [(_field(t, "token"), _field(t, "logprob")) for t in (_field(entry, "top_logprobs") or [])]
        token, logprob, full_entropy = _field(entry, "token"), _field(entry, "logprob"), _field(entry, "full_entropy")
    return make_token_row(token, logprob, [t for t, _ in tops], [lp for _, lp in tops],
                          full_entropy=full_entropy, token_idx=token_idx, **keys)


def _cost(response: Any) -> float | None:
    cost = (getattr(response, "_hidden_params", None) or {}).get("response_cost")
    if cost is not None:
        return float(cost)
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # litellm has no price for this model
        return None


# ----------------------------------------------------------------------------- score

def score(
    context_messages: list,
    target_message: Any,
    model: str = LOCAL_MODEL,
    **options: Any,
) -> list[dict]:
    """Token rows of ``target_message`` given the context (``message_idx = len(context)``).

    ``options`` named as the fields of ``ScoringRequest`` (``system``, ``backend``, ``tools``, ``top_logprobs``,
    ``scorer``, ``chat_template``) make the scoring request; the others go to litellm. ``tools`` must be the tools
    the conversation was generated with, or the prompt differs from generation time. ``chat_template`` (remote
    models only) is the model's Jinja template if it is not ChatML.
    """
    scoring, request = ScoringRequest.split(options)
    _check_backend(scoring.backend)
    context = list(context_messages)
    target = normalize_message(target_message)
    if target["role"] == "system":
        raise ValueError("system messages are not scored")
    idx = len(context)
    keys = scoring.row_keys(model)
    if scoring.backend == "chat_replay":
        return _chat_replay(context, target["role"], idx, scoring.system, scoring.top_logprobs, keys, request)
    scored, _, _ = _teacher_forced(context + [target], model, scoring, {idx}, request)
    return _rows(scored, [target], keys, offset=idx)


def score_trajectory(
    messages: list,
    model: str = LOCAL_MODEL,
    **options: Any,
) -> ScoredTokens:
    """Token rows of every non-system message, each conditioned on everything before it.

    Teacher-forced scoring is one left-to-right pass (one request for remote models);
    beyond the local context window a sliding window keeps the system prompt (see
    ``local_scoring``) and ``result.truncations`` counts the cuts. ``chat_replay`` has
    no one-pass form and replays each message separately. ``options``: as ``score``'s.
    """
    scoring, request = ScoringRequest.split(options)
    _check_backend(scoring.backend)
    msgs = [normalize_message(m) for m in messages]
    keys = scoring.row_keys(model)
    if scoring.backend == "chat_replay":
        rows: list[dict] = []
        for i, msg in enumerate(msgs):
            if msg["role"] != "system":
                rows.extend(_chat_replay(msgs[:i], msg["role"], i, scoring.system, scoring.top_logprobs, keys,
                                         request))
        return ScoredTokens(rows)
    scored, truncations, reuse = _teacher_forced(msgs, model, scoring, None, request)
    return ScoredTokens(_rows(scored, msgs, keys, offset=0), truncations, reuse)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


def _is_local(model: str) -> bool:
    return model.split("/", 1)[0] == PROVIDER


def _teacher_forced(msgs: list[dict], model: str, scoring: ScoringRequest, score_messages: set[int] | None,
                    request: dict):
    if _is_local(model):
        if scoring.chat_template is not None or request:
            raise ValueError(f"{model} is scored in-process; chat_template/request options do not apply")
        result = score_segments(SMOLLM2_CHAT.render(msgs, system=scoring.system, tools=scoring.tools),
                                scoring.top_logprobs, score_messages=score_messages)
        return result.tokens, result.truncations, result.reuse
    segments = render_for_remote(msgs, scoring.system, scoring.tools, scoring.chat_template)
    return echo_score(segments, model, scoring.top_logprobs, score_messages=score_messages, **request), 0, None


def _rows(scored: dict[int, list[TokenLogprob]], msgs: list[dict], keys: dict, offset: int) -> list[dict]:
    rows = []
    for j, msg in enumerate(msgs):
        idx = j + offset
        for t, entry in enumerate(scored.get(idx, [])):
            rows.append(_row(entry, t, role=msg["role"], message_idx=idx, **keys))
    return rows


def _chat_replay(context, role, idx, system, k, keys, request) -> list[dict]:
    gen = generate(replay_messages(context, role, system), model=keys["model"], top_logprobs=k, **request)
    for row in gen.tokens:
        row.update(keys, role=role, message_idx=idx)
    return gen.tokens


# ----------------------------------------------------------------------------- sizes

def context_window(model: str) -> int | None:
    """The tokens a prompt to ``model`` may hold, as litellm's model map says (the embedded model registers its
    own); None where litellm does not know the model."""
    try:
        info = litellm.get_model_info(model)
    except Exception:  # noqa: BLE001 - a model litellm has no entry for
        return None
    window = info.get("max_input_tokens") or info.get("max_tokens")
    return int(window) if window else None


def count_tokens(text: str, model: str) -> int:
    """The tokens ``text`` takes for ``model``: the embedded model's own tokenizer; for another model litellm's
    ``token_counter`` (the provider's tokenizer where litellm has it, else tiktoken's: an estimate)."""
    if _is_local(model):
        from agentuq_nb.llm.local_model import get_local_model

        return len(get_local_model().tokenize(text))
    return int(litellm.token_counter(model=model, text=text))
