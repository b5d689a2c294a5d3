"""An OpenAI-compatible HTTP server for the embedded model (``agentuq-nb serve-local``).

It lets tools that only speak the OpenAI API — τ²-bench, the AgentUQ fork, any
``openai`` client — run offline against SmolLM2 with exact log-probs:

* ``POST /v1/chat/completions``: messages, tools/tool_choice, temperature, seed,
  max_tokens, logprobs/top_logprobs. Served through ``litellm.completion`` with the
  local provider, i.e. exactly what ``agentuq_nb.llm.generate`` gets; each logprob
  entry carries an extra ``full_entropy`` field that standard clients ignore.
* ``POST /v1/completions``: prompt (text, special tokens parsed, or token ids),
  max_tokens (0 allowed), echo, logprobs, temperature, seed. With ``echo`` and
  ``logprobs`` it returns prompt log-probs in vLLM's layout (``tokens``,
  ``token_logprobs`` with ``null`` first, ``top_logprobs``, ``text_offset``), which is
  what remote teacher-forced scoring consumes.
* ``GET /v1/models``.

Requests are handled on threads; the model itself serves one request at a time.
Only 127.0.0.1 is the default: there is no authentication.
"""
from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import litellm

from agentuq_nb.llm.local_model import get_local_model
from agentuq_nb.llm.local_provider import LOCAL_MODEL, MODEL_NAME, LocalCompletion, text_completion

_SERVERS: set[ThreadingHTTPServer] = set()
_SERVERS_LOCK = threading.Lock()
CHAT_PARAMS = ("tools", "tool_choice", "temperature", "seed", "max_tokens", "max_completion_tokens",
               "logprobs", "top_logprobs", "n", "stream")


class RequestError(Exception):
    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


def serve_local(host: str = "127.0.0.1", port: int = 8000, model: str = LOCAL_MODEL,
                ready_event: threading.Event | None = None) -> None:
    """Serve the embedded model until SIGINT (Ctrl-C) or ``shutdown()``; blocks."""
    server = ThreadingHTTPServer((host, port), _make_handler(model))
    server.daemon_threads = True
    with _SERVERS_LOCK:
        _SERVERS.add(server)
    print(f"agentuq-nb: serving {model} on http://{host}:{server.server_address[1]}/v1", file=sys.stderr)
    if ready_event is not None:
        ready_event.set()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        with _SERVERS_LOCK:
            _SERVERS.discard(server)
        server.server_close()
        print("agentuq-nb: server stopped", file=sys.stderr)


def shutdown() -> None:
    """Stop every server ``serve_local`` runs in this process (call from another thread)."""
    with _SERVERS_LOCK:
        servers = list(_SERVERS)
    for server in servers:
        server.shutdown()


def _make_handler(served_name: str) -> type[BaseHTTPRequestHandler]:
    accepted = {served_name, LOCAL_MODEL, MODEL_NAME}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            if self.path.rstrip("/") in ("/v1/models", "/models"):
                self._send(HTTPStatus.OK, {"object": "list", "data": [
                    {"id": served_name, "object": "model", "created": 0, "owned_by": "agentuq_nb"}]})
            else:
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")

        def do_POST(self) -> None:
            routes = {"/v1/chat/completions": _chat, "/chat/completions": _chat,
                      "/v1/completions": _completions, "/completions": _completions}
            route = routes.get(self.path.rstrip("/"))
            if route is None:
                self._error(HTTPStatus.NOT_FOUND, f"no route {self.path}")
                return
            try:
                body = self._read_json()
                if body.get("model") not in accepted:
                    raise RequestError(HTTPStatus.NOT_FOUND, f"model {body.get('model')!r} is not served here; "
                                                             f"use {served_name!r}")
                self._send(HTTPStatus.OK, route(body, served_name))
            except RequestError as exc:
                self._error(exc.status, str(exc))
            except (litellm.UnsupportedParamsError, litellm.BadRequestError, ValueError, TypeError) as exc:
                self._error(HTTPStatus.BAD_REQUEST, str(exc))

        def _read_json(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError as exc:
                raise RequestError(HTTPStatus.BAD_REQUEST, f"request body is not JSON: {exc}") from exc
            if not isinstance(body, dict):
                raise RequestError(HTTPStatus.BAD_REQUEST, "request body must be a JSON object")
            return body

        def _send(self, status: HTTPStatus, payload: dict) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: HTTPStatus, message: str) -> None:
            kind = "invalid_request_error" if status < 500 else "server_error"
            self._send(status, {"error": {"message": message, "type": kind, "code": int(status)}})

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            pass

    return Handler


def _chat(body: dict, served_name: str) -> dict:
    if body.get("stream"):
        raise RequestError(HTTPStatus.BAD_REQUEST, "streaming is not supported")
    params = {k: body[k] for k in CHAT_PARAMS if body.get(k) is not None}
    response = litellm.completion(model=LOCAL_MODEL, messages=body.get("messages") or [], **params)
    payload = response.model_dump(exclude={"_hidden_params", "_response_ms"})
    payload["model"] = served_name
    return payload


def _completions(body: dict, served_name: str) -> dict:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt))):
        raise RequestError(HTTPStatus.BAD_REQUEST, "prompt must be one string or a list of token ids")
    max_tokens = body.get("max_tokens")
    result = text_completion(
        prompt,
        max_tokens=16 if max_tokens is None else int(max_tokens),
        echo=bool(body.get("echo")),
        logprobs=body.get("logprobs"),
        temperature=float(body.get("temperature", 1.0)),
        seed=body.get("seed"),
    )
    echoed = prompt if isinstance(prompt, str) else get_local_model().detokenize(prompt)
    text = (echoed if body.get("echo") else "") + (result.content or "")
    choice = {"index": 0, "text": text, "finish_reason": result.finish_reason,
              "logprobs": _legacy_logprobs(result) if body.get("logprobs") is not None else None}
    return {
        "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
        "model": served_name, "choices": [choice],
        "usage": {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
                  "total_tokens": result.prompt_tokens + result.completion_tokens},
    }


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
