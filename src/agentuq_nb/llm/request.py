"""What one LLM call asks for, made once and handed down: ``GenerationRequest`` (a chat completion's decoding
options) and ``ScoringRequest`` (how observed text is scored).

``generate``/``sample`` and ``score``/``score_trajectory`` take these options as keywords (their names are the
fields below) and split them once from what goes on to ``litellm.completion`` (``api_base``, ``api_key``, ...);
the embedded model's provider rebuilds the same ``GenerationRequest`` from litellm's ``optional_params``, and
``local_provider.chat_completion``/``chat_samples`` take it instead of a list of keywords.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

OPENAI_DEFAULT_TEMPERATURE = 1.0
DEFAULT_MAX_TOKENS = 256  # a chat request's max_tokens when it names none


def _split(cls: type, options: dict[str, Any], defaults: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    names = {f.name for f in fields(cls)}
    own = {k: v for k, v in options.items() if k in names}
    return cls(**{**defaults, **own}), {k: v for k, v in options.items() if k not in names}


@dataclass(frozen=True)
class GenerationRequest:
    """A chat completion's decoding options, by OpenAI's names (``fit_context``: the embedded model's
    context-overflow policy, see ``context_fit``; off, an overflow raises)."""

    tools: list[dict] | None = None
    tool_choice: Any = None
    temperature: float = OPENAI_DEFAULT_TEMPERATURE
    seed: int | None = None
    max_tokens: int | None = DEFAULT_MAX_TOKENS
    top_logprobs: int = 5
    fit_context: bool = False

    @classmethod
    def split(cls, options: dict[str, Any], **defaults: Any) -> tuple[GenerationRequest, dict[str, Any]]:
        """(the request ``options`` name, with ``defaults`` where they name nothing; the rest, for litellm)."""
        return _split(cls, options, defaults)

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> GenerationRequest:
        """The request litellm hands a custom provider as ``optional_params`` (log-probs only where asked)."""
        return cls(
            tools=params.get("tools"),
            tool_choice=params.get("tool_choice"),
            temperature=params.get("temperature", OPENAI_DEFAULT_TEMPERATURE),
            seed=params.get("seed"),
            max_tokens=params.get("max_completion_tokens", params.get("max_tokens", DEFAULT_MAX_TOKENS)),
            top_logprobs=int(params.get("top_logprobs") or 0) if params.get("logprobs") else 0,
            fit_context=bool(params.get("fit_context", False)),
        )

    def with_seed(self, seed: int | None) -> GenerationRequest:
        return replace(self, seed=seed)

    def completion_args(self, model: str, messages: list[dict], extra: dict[str, Any], n: int = 1) -> dict[str, Any]:
        """The keywords of ``litellm.completion`` for this request (log-probs always asked for)."""
        args: dict[str, Any] = dict(model=model, messages=messages, temperature=self.temperature,
                                    max_tokens=self.max_tokens, logprobs=True, top_logprobs=self.top_logprobs, **extra)
        if self.seed is not None:
            args["seed"] = self.seed
        if self.fit_context:
            args["fit_context"] = True
        if n > 1:
            args["n"] = n
        if self.tools:
            args["tools"] = [t if "function" in t else {"type": "function", "function": t} for t in self.tools]
            if self.tool_choice is not None:
                args["tool_choice"] = self.tool_choice
        return args


@dataclass(frozen=True)
class ScoringRequest:
    """How observed messages are scored: ``backend`` (``teacher_forced`` or ``chat_replay``), the ``system``
    prompt and ``tools`` the conversation was generated with, ``top_logprobs`` alternatives a token, the
    ``scorer`` name the rows carry (default: the model) and, for remote models, a Jinja ``chat_template``."""

    system: str | None = None
    backend: str = "teacher_forced"
    tools: list[dict] | None = None
    top_logprobs: int = 5
    scorer: str | None = None
    chat_template: Any = None  # str | remote.JinjaChat

    @classmethod
    def split(cls, options: dict[str, Any]) -> tuple[ScoringRequest, dict[str, Any]]:
        """(the scoring options ``options`` name; the rest, for litellm)."""
        return _split(cls, options, {})

    def row_keys(self, model: str) -> dict[str, str]:
        """The keys every scored token row carries."""
        return dict(model=model, scorer=self.scorer or model, source=self.backend)
