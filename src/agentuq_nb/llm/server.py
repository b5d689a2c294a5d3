"""An OpenAI-compatible HTTP server for the embedded model (the command line's ``serve-local``).

It lets tools that only speak the OpenAI API — τ²-bench, the AgentUQ fork, any
``openai`` client — run offline against SmolLM2 with exact log-probs:

* ``POST /v1/chat/completions``: messages, tools/tool_choice, temperature, seed, n
  (choices decoded together; choice ``i`` uses seed ``seed + i``),
  max_tokens, logprobs/top_logprobs, and ``fit_context`` (not OpenAI's: the
  context-overflow policy of ``context_fit``). Served through ``litellm.completion``
  with the local provider, i.e. exactly what ``agentuq_nb.llm.generate`` gets; each
  logprob entry carries an extra ``full_entropy`` field that standard clients ignore.
* ``POST /v1/completions``: prompt (text, special tokens parsed, or token ids),
  max_tokens (0 allowed), echo, logprobs, temperature, seed. With ``echo`` and
  ``logprobs`` it returns prompt log-probs in vLLM's layout (``tokens``,
  ``token_logprobs`` with ``null`` first, ``top_logprobs``, ``text_offset``), which is
  what remote teacher-forced scoring consumes.
* ``GET /v1/models``.

Every request gets an answer: a request that breaks the rules (a field of the wrong
type or out of range, ``messages`` not a list, an unknown role, a token id outside
the vocabulary, a prompt over the context window) gets a 400 with OpenAI's error
body ``{"error": {"message", "type", "code"}}`` naming the field; anything unexpected
gets a 500 with the same body (and a traceback on the server's stderr).

Limits: ``max_tokens`` above ``max_tokens_cap`` (``DEFAULT_MAX_TOKENS_CAP`` = 1024,
``serve-local --max-tokens-cap``) is lowered to it (``finish_reason="length"`` then
says so); a body over ``MAX_REQUEST_BYTES`` (16 MiB) is a 413 before it is read, one
nested deeper than ``MAX_REQUEST_DEPTH`` (64) a 400, and tool schemas are checked
(``tool_format.check_tool_schemas``: counts, size, depth) before the request waits for
the model; one request holds the model at most ``max_request_seconds``
(``serve-local --max-request-seconds``, default 300: then a 504 and decoding stops);
the model decodes one request at a time and the others wait their turn, their bodies together at most
``MAX_HELD_REQUEST_BYTES`` (64 MiB: past it a 503);
when a client disconnects, its request stops decoding at the next token (or before
it starts); ``fit_context`` defaults to the server's ``--fit-context`` and every
response that used it says what was dropped (``usage.context_dropped_messages``,
``usage.context_dropped_tokens`` and the ``X-AgentUQ-Context-Dropped-Messages``
header). Only 127.0.0.1 is the default: there is no authentication.

Why Starlette on uvicorn rather than ``http.server``: uvicorn (already installed,
with Starlette, as dependencies of litellm's ``mcp`` extra) has a listen backlog of
2,048 and an event loop that holds any number of waiting clients (``http.server``
kept a backlog of 5 and reset the 6th concurrent client), tells a handler when
its client disconnects (``http.disconnect``), which is what stops abandoned
decodes, and shuts down gracefully on SIGINT. llama-cpp-python's own server was
not an option: it serves ``llama_cpp.Llama``, not this package's exact-logprob
model and tool-call grammar; FastAPI would only add request parsing that the
pydantic models below already do.
"""
from __future__ import annotations

import json
import re
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Literal

import anyio
import litellm
import uvicorn
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentuq_nb.common.limits import (
    DEFAULT_MAX_REQUEST_SECONDS,
    MAX_HELD_REQUEST_BYTES,
    MAX_REQUEST_BYTES,
    MAX_REQUEST_DEPTH,
)
from agentuq_nb.llm.local_model import get_local_model
from agentuq_nb.llm.local_provider import (
    LOCAL_MODEL,
    MODEL_NAME,
    LocalCompletion,
    cancellable,
    text_completion,
)
from agentuq_nb.llm.tool_format import check_tool_schemas

DEFAULT_MAX_TOKENS_CAP = 1024  # at ~25 tokens/s on one core, about 40 s of one request holding the model
MAX_TOP_LOGPROBS = 20  # OpenAI's limit
MAX_CHOICES = 128  # OpenAI's limit on n
DROPPED_HEADER = "X-AgentUQ-Context-Dropped-Messages"
_SERVERS: set[uvicorn.Server] = set()
_SERVERS_LOCK = threading.Lock()
_MODEL_TURN = threading.Semaphore(1)  # requests wait here (not on threads of their own) for the model


class BodyBudget:
    """The bytes of request bodies the server holds at once - read, waiting their turn for the model or being
    answered - bounded: a body that would pass ``limit`` is refused (503) as it streams in, and a request gives its
    bytes back when it is answered. Without it, 60 clients each sending a 15.9 MB body that then waits for the model
    held 3.5 GB."""

    def __init__(self, limit: int):
        self.limit, self.held, self.lock = limit, 0, threading.Lock()

    def take(self, n: int) -> bool:
        with self.lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give_back(self, n: int) -> None:
        with self.lock:
            self.held -= n


class RequestError(Exception):
    def __init__(self, status: HTTPStatus, message: str, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


# ----------------------------------------------------------------------------- request models

class TextPart(BaseModel):
    """A part of a message's content: text only (the embedded model reads no images or audio)."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One message of a chat request: checked here so that a bad one is a 400 naming it."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class CompletionRequestBase(BaseModel):
    model_config = ConfigDict(extra="ignore")  # fields of other OpenAI options are accepted and ignored
    model: str
    temperature: float | None = Field(default=None, ge=0, le=2)
    seed: StrictInt | None = None
    n: Literal[1] | None = None
    stream: Literal[False] | None = None

    @field_validator("temperature", mode="before")
    @classmethod
    def number_not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool) or (value is not None and not isinstance(value, (int, float))):
            raise ValueError("must be a number between 0 and 2")
        return value


class ChatRequest(CompletionRequestBase):
    n: StrictInt | None = Field(default=None, ge=1, le=MAX_CHOICES)  # choices decoded together (local_sampling)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    max_tokens: StrictInt | None = Field(default=None, ge=1)
    max_completion_tokens: StrictInt | None = Field(default=None, ge=1)
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    fit_context: StrictBool | None = None

    @field_validator("tools")
    @classmethod
    def bounded_tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        return None if tools is None else check_tool_schemas(tools, "tools")

    @model_validator(mode="after")
    def tool_choice_needs_tools(self) -> "ChatRequest":
        if not self.tools and (self.tool_choice == "required" or isinstance(self.tool_choice, dict)):
            raise ValueError(f"tool_choice {self.tool_choice!r} needs tools, and the request gives none")
        return self


class TextCompletionRequest(CompletionRequestBase):
    prompt: str | list[StrictInt] | list[str]
    max_tokens: StrictInt | None = Field(default=16, ge=0)
    echo: StrictBool = False
    logprobs: StrictInt | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)


def parse_request(model: type[BaseModel], body: dict) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg'].removeprefix('Value error, ')}"
                             for err in exc.errors(include_url=False))
        raise RequestError(HTTPStatus.BAD_REQUEST, f"invalid request: {problems}") from None


# ----------------------------------------------------------------------------- the server

def serve_local(host: str = "127.0.0.1", port: int = 8000, model: str = LOCAL_MODEL,
                ready_event: threading.Event | None = None, max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP,
                fit_context: bool = False, max_request_seconds: float = DEFAULT_MAX_REQUEST_SECONDS) -> None:
    """Serve the embedded model until SIGINT (Ctrl-C) or ``shutdown()``; blocks."""
    if max_tokens_cap < 1:
        raise ValueError(f"max_tokens_cap must be at least 1, got {max_tokens_cap}")
    if not max_request_seconds > 0:
        raise ValueError(f"max_request_seconds must be more than 0, got {max_request_seconds}")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port {port} is not a TCP port: give 1-65535 (0: any free port)")
    app = make_app(model, max_tokens_cap=max_tokens_cap, fit_context=fit_context,
                   max_request_seconds=max_request_seconds)
    litellm.suppress_debug_info = True  # its "Give Feedback / Get Help" banner is noise in a server's log
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off",
                            timeout_graceful_shutdown=5)

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.should_exit:  # could not bind: uvicorn said why
                return
            bound = self.servers[0].sockets[0].getsockname()[1]
            print(f"agentuq-nb: serving {model} on http://{host}:{bound}/v1", file=sys.stderr)
            if ready_event is not None:
                ready_event.set()

    get_local_model()  # loaded before the first request: its turn's time limit counts decoding, not loading
    server = Server(config)
    with _SERVERS_LOCK:
        _SERVERS.add(server)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT it handled, after its graceful shutdown
        pass
    finally:
        app.state.stopping.set()  # requests still decoding stop at their next token
        with _SERVERS_LOCK:
            _SERVERS.discard(server)
        print("agentuq-nb: server stopped", file=sys.stderr)
    if not server.started:
        raise OSError(f"serve-local could not listen on {host}:{port} (see the message above)")


def shutdown() -> None:
    """Stop every server ``serve_local`` runs in this process (call from another thread)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS)
    for server in servers:
        server.should_exit = True


def make_app(served_name: str = LOCAL_MODEL, max_tokens_cap: int = DEFAULT_MAX_TOKENS_CAP,
             fit_context: bool = False, max_request_seconds: float = DEFAULT_MAX_REQUEST_SECONDS) -> Starlette:
    """The ASGI application of ``serve_local`` (for uvicorn or any ASGI server)."""
    accepted = {served_name, LOCAL_MODEL, MODEL_NAME}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": served_name, "object": "model", "created": 0, "owned_by": "agentuq_nb"}]})

    async def chat(request: Request) -> Response:
        return await answer(request, ChatRequest, lambda parsed, cancelled: chat_response(
            parsed, served_name, max_tokens_cap, fit_context, cancelled))

    async def completions(request: Request) -> Response:
        return await answer(request, TextCompletionRequest, lambda parsed, cancelled: text_completion_response(
            parsed, served_name, max_tokens_cap, cancelled))

    async def answer(request: Request, kind: type[BaseModel],
                     respond: Callable[[Any, threading.Event], tuple[dict, dict]]) -> Response:
        held = [0]  # the bytes of this request's body counted in app.state.bodies, given back when it is answered
        try:
            body = await read_json(request, app.state.bodies, held)
            model = body.get("model")
            if model is None:
                raise RequestError(HTTPStatus.BAD_REQUEST, f"invalid request: model is required (use {served_name!r})")
            if not isinstance(model, str):
                raise RequestError(HTTPStatus.BAD_REQUEST, f"invalid request: model must be a string, not "
                                                           f"{type(model).__name__} (use {served_name!r})")
            if model not in accepted:
                raise RequestError(HTTPStatus.NOT_FOUND, f"model {model!r} is not served here; "
                                                         f"use {served_name!r}", "model_not_found")
            parsed = parse_request(kind, body)  # checked (tool schemas too) before it waits for the model
            payload, headers = await run_until_disconnect(request, lambda cancelled: respond(parsed, cancelled))
            return JSONResponse(payload, headers=headers)
        except ClientGone:
            return Response(status_code=499)  # nobody reads it: the client is gone (nginx's code)
        except RequestTimedOut:
            return error_response(HTTPStatus.GATEWAY_TIMEOUT, f"the request held the model for {max_request_seconds:g} "
                                  "s, this server's limit (max_request_seconds): ask for fewer "
                                  "max_tokens, or simpler tool schemas", "timeout")
        except RequestError as exc:
            return error_response(exc.status, str(exc), exc.code)
        except litellm.ContextWindowExceededError as exc:
            return error_response(HTTPStatus.BAD_REQUEST, client_message(exc.message), "context_length_exceeded")
        except (litellm.UnsupportedParamsError, litellm.BadRequestError) as exc:
            return error_response(HTTPStatus.BAD_REQUEST, client_message(exc.message))
        except ValueError as exc:  # the model's own checks (empty prompt, tool_choice naming no tool, ...)
            return error_response(HTTPStatus.BAD_REQUEST, client_message(str(exc)))
        except Exception as exc:  # a bug: the client still gets an answer, never the traceback (it is logged)
            return internal_error(request, exc)
        finally:
            app.state.bodies.give_back(held[0])

    async def run_until_disconnect(request: Request, work: Callable[[threading.Event], Any]) -> Any:
        """``work(cancelled)`` on a worker thread; ``cancelled`` is set when the client goes away."""
        cancelled = threading.Event()

        async def watch() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass
            cancelled.set()

        def in_turn() -> tuple[Any, BaseException | None]:  # (result, error): nothing escapes the task group
            with _MODEL_TURN:
                if cancelled.is_set() or app.state.stopping.is_set():
                    return None, ClientGone()
                expired = threading.Event()  # from the model's turn on: the time this request may hold it

                def expire() -> None:
                    expired.set()
                    cancelled.set()

                timer = threading.Timer(max_request_seconds, expire)
                timer.daemon = True
                timer.start()
                try:
                    return work(cancelled), None
                except Exception as exc:
                    if expired.is_set():
                        print(f"agentuq-nb: {request.url.path} stopped after {max_request_seconds:g} s "
                              f"(max_request_seconds)", file=sys.stderr)
                        return None, RequestTimedOut()
                    if cancelled.is_set() or app.state.stopping.is_set():
                        print(f"agentuq-nb: {request.url.path} abandoned by its client: decoding stopped "
                              f"({type(exc).__name__})", file=sys.stderr)
                        return None, ClientGone()
                    return None, exc
                finally:
                    timer.cancel()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            result, error = await anyio.to_thread.run_sync(in_turn, limiter=WORKERS)
            group.cancel_scope.cancel()
        if error is not None:
            raise error
        return result

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(HTTPStatus(exc.status_code), f"{exc.detail}: {request.method} {request.url.path}")

    async def server_error(request: Request, exc: Exception) -> Response:
        return internal_error(request, exc)

    routes = [Route(path, models, methods=["GET"]) for path in ("/v1/models", "/models")]
    routes += [Route(path, chat, methods=["POST"]) for path in ("/v1/chat/completions", "/chat/completions")]
    routes += [Route(path, completions, methods=["POST"]) for path in ("/v1/completions", "/completions")]
    app = Starlette(routes=routes, exception_handlers={
        HTTPException: http_error, Exception: server_error})
    app.router.redirect_slashes = True
    app.state.stopping = threading.Event()
    app.state.bodies = BodyBudget(MAX_HELD_REQUEST_BYTES)
    return app


class ClientGone(Exception):
    """The client disconnected (or the server is stopping) before its answer was ready."""


class RequestTimedOut(Exception):
    """The request held the model for the server's ``max_request_seconds`` and was stopped."""


#: threads that run requests: each waits for the model's turn on its thread, so allow many
WORKERS = anyio.CapacityLimiter(64)


async def read_json(request: Request, budget: BodyBudget | None = None, held: list[int] | None = None) -> dict:
    """The request's body as a JSON object, refused (413) past ``MAX_REQUEST_BYTES`` before it is read - by its
    Content-Length, or as it streams in - and (400) nested deeper than ``MAX_REQUEST_DEPTH``; with a ``budget``,
    refused (503) when the bodies the server holds would pass it (``held[0]``: what this body took of it)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_REQUEST_BYTES:
        raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body of {int(declared):,} bytes, more than "
                                                               f"the {MAX_REQUEST_BYTES:,} this server reads")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_REQUEST_BYTES:
            raise RequestError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body of more than {MAX_REQUEST_BYTES:,} "
                                                                   "bytes, the most this server reads")
        if budget is not None:
            if not budget.take(len(chunk)):
                raise RequestError(HTTPStatus.SERVICE_UNAVAILABLE, f"the server holds {budget.limit:,} bytes of "
                                   "requests waiting for the model, its limit: retry when they are answered",
                                   "server_busy")
            held[0] += len(chunk)
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {exc}") from exc
    except RecursionError:
        body = None
    if body is None or json_depth(body) > MAX_REQUEST_DEPTH:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"request body is nested more than {MAX_REQUEST_DEPTH} levels deep")
    if not isinstance(body, dict):
        raise RequestError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object")
    return body


def json_depth(value: Any) -> int:
    """Nesting of a parsed JSON value, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def client_message(message: str) -> str:
    """What a client is told of an error: its first line (litellm appends the provider's traceback to its
    messages: it names the server's files), without litellm's class prefix."""
    first = next((line.strip() for line in str(message).splitlines() if line.strip()), "bad request")
    return re.sub(r"^litellm\.\w+(?:Error|Exception): ", "", first)


def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """A 500 for a bug: the traceback goes to the server's log under an id, the client gets the id only."""
    incident = uuid.uuid4().hex[:12]
    print(f"agentuq-nb: internal error {incident} on {request.method} {request.url.path}:", file=sys.stderr)
    traceback.print_exception(exc)
    return error_response(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error {incident} ({type(exc).__name__}); the "
                                                            "server's log has the details")


def error_response(status: HTTPStatus, message: str, code: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code or int(status)}},
                        status_code=int(status))


# ----------------------------------------------------------------------------- routes

def chat_response(request: ChatRequest, served_name: str, max_tokens_cap: int, fit_context: bool,
                  cancelled: threading.Event) -> tuple[dict, dict]:
    params: dict[str, Any] = {k: v for k, v in request.model_dump(
        include={"tools", "tool_choice", "temperature", "seed", "logprobs", "top_logprobs", "n"}).items() if v is not None}
    requested = request.max_completion_tokens or request.max_tokens
    params["max_tokens"] = min(requested, max_tokens_cap) if requested else None
    if params["max_tokens"] is None:
        del params["max_tokens"]
    use_fit = fit_context if request.fit_context is None else request.fit_context
    if use_fit:
        params["fit_context"] = True
    messages = [m.model_dump(exclude_none=True) for m in request.messages]
    with cancellable(cancelled):
        response = litellm.completion(model=LOCAL_MODEL, messages=messages, **params)
    payload = response.model_dump(exclude={"_hidden_params", "_response_ms"})
    payload["model"] = served_name
    usage = payload.get("usage") or {}
    headers = {DROPPED_HEADER: str(usage["context_dropped_messages"])} if use_fit else {}
    return payload, headers


def text_completion_response(request: TextCompletionRequest, served_name: str, max_tokens_cap: int,
                             cancelled: threading.Event) -> tuple[dict, dict]:
    prompt = request.prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
        if len(prompt) != 1:
            raise RequestError(HTTPStatus.BAD_REQUEST, "prompt: one string or one list of token ids per request")
        prompt = prompt[0]
    result = text_completion(
        prompt,
        max_tokens=min(16 if request.max_tokens is None else request.max_tokens, max_tokens_cap),
        echo=request.echo,
        logprobs=request.logprobs,
        temperature=1.0 if request.temperature is None else request.temperature,
        seed=request.seed,
        cancelled=cancelled,
    )
    echoed = prompt if isinstance(prompt, str) else get_local_model().detokenize(prompt)
    text = (echoed if request.echo else "") + (result.content or "")
    choice = {"index": 0, "text": text, "finish_reason": result.finish_reason,
              "logprobs": _legacy_logprobs(result) if request.logprobs is not None else None}
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": served_name, "choices": [choice],
        "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                  "total_tokens": result.prompt_tokens + result.completion_tokens},
    }, {}


def _legacy_logprobs(result: LocalCompletion) -> dict:
    """The completions-API logprobs block; prompt tokens first when echoed."""
    tokens, token_lps, tops, offsets = [], [], [], []
    consumed = b""
    for entry in [*result.prompt_logprobs, *result.tokens]:
        offsets.append(len(consumed.decode("utf-8", "ignore")))
        consumed += bytes(entry.bytes)
        tokens.append(entry.token)
        token_lps.append(entry.logprob)
        tops.append(None if entry.logprob is None else {tok: val for tok, _, val in entry.top})
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}
