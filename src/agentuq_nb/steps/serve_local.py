"""``serve-local``: the embedded model as an OpenAI-compatible API (:mod:`agentuq_nb.llm.server`)."""
from __future__ import annotations

from pydantic import Field

from agentuq_nb.common.limits import DEFAULT_MAX_REQUEST_SECONDS
from agentuq_nb.steps.base import Command, Reporter, Step, StepConfig

STEP = Step("serve-local", "agentuq-nb serve-local", run_folder=False)


class ServeConfig(StepConfig):
    """Where the server listens and what it accepts."""

    port: int = Field(8000, ge=0, le=65535, description="port on 127.0.0.1 (0: any free port)")
    host: str = Field("127.0.0.1", description="bind address (keep loopback unless you mean it)")
    max_tokens_cap: int = Field(1024, ge=1, description="a request's max_tokens above this is lowered to it")
    fit_context: bool = Field(False, description="drop the oldest middle turns of a chat that overflows the "
                              "8,192-token window (counted in usage.context_dropped_messages) instead of a 400; a "
                              "request's fit_context field overrides")
    max_request_seconds: float = Field(DEFAULT_MAX_REQUEST_SECONDS, ge=1, description="the longest one request may "
                                       "hold the model (then a 504)")


def run(config: ServeConfig) -> None:
    """Serve until interrupted (the model is loaded first)."""
    from agentuq_nb.llm.server import serve_local

    serve_local(**config.model_dump())


def before(run_dir: None, config: ServeConfig, say: Reporter) -> None:
    """What is served, said before the model loads."""
    policy = "oldest middle turns dropped on overflow" if config.fit_context else "exact context (overflow is a 400)"
    say.say(f"serving local/smollm2-135m-instruct on http://{config.host}:{config.port}/v1, max_tokens ≤ "
            f"{config.max_tokens_cap}, {policy}, at most {config.max_request_seconds:g} s per request (Ctrl-C to stop)")


COMMAND = Command(summary="Serve the embedded model as an OpenAI-compatible API (chat + completions with logprobs).",
                  arguments=(), options=("port", "host", "max_tokens_cap", "fit_context", "max_request_seconds"),
                  flags={"fit_context": "--fit-context/--exact-context"}, errors=("OSError",), before=before,
                  interrupted="stopped")
