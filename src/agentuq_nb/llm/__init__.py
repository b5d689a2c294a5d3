"""The LLM layer: every model call of the toolkit, with token log-probs.

* ``generate(messages, model=LOCAL_MODEL, tools=..., ...)`` — the next assistant
  message via ``litellm.completion``, with token rows (``source="generated"``).
* ``sample(messages, k, ...)`` — K alternative next messages (seed ``seed + i`` each; the
  embedded model decodes them together, see ``local_sampling``).
* ``score(context, target, ...)`` / ``score_trajectory(messages, ...)`` — log-probs of
  observed messages (``teacher_forced``, or ``chat_replay`` for APIs without prompt
  log-probs).
* ``context_window(model)`` / ``count_tokens(text, model)`` — what a prompt may hold and what a text takes.
* ``LOCAL_MODEL`` — the embedded SmolLM2-135M-Instruct, registered as a litellm
  provider when this package is imported; ``server.serve_local`` exposes it as an
  OpenAI-compatible server.

Module map: ``chat_format`` (rendering), ``tool_format`` (tool-call convention),
``local_model`` (llama.cpp + numpy), ``local_sampling`` (K samples in one batch), ``local_provider`` (litellm provider),
``local_scoring`` (teacher forcing, sliding window), ``remote`` (echo scoring, chat
replay), ``client`` (the public calls), ``server``; ``llama_build`` (llama-cpp-python compiled for this
CPU without AMX, its wheel kept per flag set) and ``model_check`` (the embedded model loaded and decoding
in a subprocess: the set-up's self-check and ``doctor``'s).
"""
from agentuq_nb.llm.client import (
    Generation,
    MissingLogprobsError,
    RetryPolicy,
    ScoredTokens,
    context_window,
    count_tokens,
    generate,
    sample,
    score,
    score_trajectory,
    supports_n,
)
from agentuq_nb.llm.local_model import ContextWindowError, get_local_model, require_local_model
from agentuq_nb.llm.local_provider import LOCAL_MODEL, register
from agentuq_nb.llm.remote import JinjaChat, PromptLogprobsUnavailable

register()


def check_model(model: str, llm_args: dict | None = None) -> None:
    """Raise now (not after the first retries) when ``model`` cannot run here: the embedded model not installed,
    or an API model whose key (or base URL) is neither in the environment nor in ``llm_args``."""
    if model == LOCAL_MODEL:
        require_local_model()
        return
    import litellm

    args = llm_args or {}
    try:
        missing = litellm.validate_environment(model=model).get("missing_keys") or []
    except Exception:  # noqa: BLE001 - a model litellm cannot tell about: its first call says what is wrong
        return
    missing = [k for k in missing if not (k.endswith("_API_BASE") and args.get("api_base"))
               and not (k.endswith("_KEY") and args.get("api_key"))]
    if missing:
        raise ValueError(f"model {model!r} cannot be called here: {', '.join(missing)} is not set (export it, or put "
                         "it in .env); nothing was run")


__all__ = [
    "LOCAL_MODEL", "Generation", "ScoredTokens", "RetryPolicy", "MissingLogprobsError",
    "PromptLogprobsUnavailable", "ContextWindowError", "JinjaChat",
    "generate", "sample", "supports_n", "context_window", "count_tokens", "score", "score_trajectory", "get_local_model", "require_local_model", "check_model",
]
