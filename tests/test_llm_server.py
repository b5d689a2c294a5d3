"""serve-local answered by the plain openai client, and remote echo scoring against it."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentuq_nb import llm
from agentuq_nb.llm import server
from agentuq_nb.llm.remote import JinjaChat

from conftest import free_port, serving_in_thread, wait_until_serving

SYSTEM = "You are a helpful assistant."
CONVERSATION = [
    {"role": "user", "content": "What colour is the sky?"},
    {"role": "assistant", "content": "The sky is blue on a clear day."},
    {"role": "user", "content": "And at night?"},
]


@pytest.fixture(scope="module")
def base_url():
    with serving_in_thread() as (url, port, thread):
        yield url
    assert not thread.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


@pytest.fixture(scope="module")
def client(base_url):
    return openai.OpenAI(base_url=base_url, api_key="not-needed", max_retries=0)


def test_models_lists_the_local_model(client):
    assert [m.id for m in client.models.list()] == [llm.LOCAL_MODEL]


def test_chat_completion_with_logprobs(client):
    response = client.chat.completions.create(
        model=llm.LOCAL_MODEL, messages=CONVERSATION[:1], logprobs=True, top_logprobs=3, max_tokens=8, temperature=0)
    choice = response.choices[0]
    assert choice.message.content and len(choice.logprobs.content) == response.usage.completion_tokens
    assert all(len(e.top_logprobs) == 3 for e in choice.logprobs.content)
    direct = llm.generate(CONVERSATION[:1], max_tokens=8, top_logprobs=3)
    assert choice.message.content == direct.message["content"]


def test_chat_completion_with_tools(client):
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    response = client.chat.completions.create(
        model=llm.LOCAL_MODEL, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=tools,
        tool_choice="required", logprobs=True, top_logprobs=2, max_tokens=40, temperature=0)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls[0].function.name == "get_weather"
    assert choice.logprobs.content


def test_completions_echo_returns_prompt_logprobs(client):
    prompt = "<|im_start|>user\nHello there<|im_end|>\n"
    response = client.completions.create(model=llm.LOCAL_MODEL, prompt=prompt, echo=True, logprobs=2,
                                         max_tokens=0, temperature=0)
    lp = response.choices[0].logprobs
    assert response.choices[0].text == prompt
    assert "".join(lp.tokens) == prompt and lp.token_logprobs[0] is None
    assert all(v <= 0 for v in lp.token_logprobs[1:]) and all(len(t) == 2 for t in lp.top_logprobs[1:])
    assert lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(len(lp.tokens))]


def test_bad_requests_get_openai_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4.1", messages=CONVERSATION[:1])
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=llm.LOCAL_MODEL, prompt=[{"not": "a prompt"}])


def test_remote_teacher_forcing_through_echo_matches_local_scoring(base_url):
    remote_model = f"hosted_vllm/{llm.LOCAL_MODEL}"
    remote = llm.score_trajectory(CONVERSATION, model=remote_model, system=SYSTEM, api_base=base_url)
    local = llm.score_trajectory(CONVERSATION, system=SYSTEM)
    assert {r["source"] for r in remote} == {"teacher_forced"} and {r["model"] for r in remote} == {remote_model}
    assert [(r["message_idx"], r["token"]) for r in remote] == [(r["message_idx"], r["token"]) for r in local]
    diff = np.abs(np.array([r["chosen_logprob"] for r in remote]) - np.array([r["chosen_logprob"] for r in local]))
    assert diff.max() <= 1e-3
    # The model's own Jinja template locates the same message spans.
    template = JinjaChat(llm.get_local_model().llama.metadata["tokenizer.chat_template"])
    jinja = llm.score(CONVERSATION[:2], CONVERSATION[2], model=remote_model, system=SYSTEM,
                      chat_template=template, api_base=base_url)
    assert [r["chosen_logprob"] for r in jinja] == [r["chosen_logprob"] for r in remote if r["message_idx"] == 2]


def test_sigint_stops_the_server_cleanly():
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    # the server as started from a terminal: a test run in the background (``make test &``) inherits
    # SIGINT ignored, and Python then leaves it ignored in the child, so Ctrl-C's handler is set here
    code = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"from agentuq_nb.llm.server import serve_local; serve_local(port={port})")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(port, proc)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)  # generous: interpreter exit is slow on a loaded 2-core machine
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "server stopped" in stderr


# ----------------------------------------------------------------------------- every request answered

def post(base_url: str, path: str, body, timeout: float = 120) -> tuple[int, dict, Any]:
    """(status, JSON body, headers) of a raw POST; the body may be any JSON value or raw bytes."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
    request = urllib.request.Request(f"{base_url}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), err.headers


def chat_body(**fields):
    return {"model": llm.LOCAL_MODEL, "messages": CONVERSATION[:1], "max_tokens": 2, "temperature": 0, **fields}


BAD_CHAT_REQUESTS = {
    "temperature": [chat_body(temperature="hot"), chat_body(temperature=-1), chat_body(temperature=True)],
    "max_tokens": [chat_body(max_tokens="10"), chat_body(max_tokens=-5), chat_body(max_tokens=1.5)],
    "top_logprobs": [chat_body(logprobs=True, top_logprobs=99), chat_body(logprobs=True, top_logprobs="3")],
    "logprobs": [chat_body(logprobs="yes")],
    "messages": [chat_body(messages="hello"), chat_body(messages=[]), chat_body(messages=["hello"]),
                 chat_body(messages=[{"role": "wizard", "content": "hi"}]), chat_body(messages=[{"content": "hi"}])],
    "seed": [chat_body(seed="x")],
    "n": [chat_body(n=0), chat_body(n="2")],
    "stream": [chat_body(stream=True)],
    "tool": [chat_body(tools=[{"type": "function", "function": {"description": "no name"}}]),
             chat_body(tools=[{"type": "function", "function": {"name": "f"}}],
                       tool_choice={"type": "function", "function": {"name": "missing"}})],
    "fit_context": [chat_body(fit_context="yes")],
    # issue 30: a model that is no string, or none at all, and content parts that are not text were 500s
    "model": [chat_body(model=[llm.LOCAL_MODEL]), chat_body(model={"name": llm.LOCAL_MODEL}),
              {"messages": CONVERSATION[:1]}],
    "content": [chat_body(messages=[{"role": "user", "content": [{"foo": 1}]}]),
                chat_body(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])],
    # 'required' with no tools was a 500 carrying the server's traceback and file paths
    "tool_choice": [chat_body(tool_choice="required"), chat_body(tool_choice={"type": "function",
                                                                              "function": {"name": "f"}})],
}
BAD_COMPLETION_REQUESTS = {
    "token id": [{"prompt": [999_999]}, {"prompt": [-1]}],
    "max_tokens": [{"prompt": "hi", "max_tokens": -1}],
    "logprobs": [{"prompt": "hi", "logprobs": 50}],
    "echo": [{"prompt": "hi", "echo": "yes"}],
    "prompt": [{"prompt": {"not": "a prompt"}}, {"prompt": ""}],
}


@pytest.mark.parametrize("field", sorted(BAD_CHAT_REQUESTS))
def test_an_invalid_chat_request_gets_a_400_naming_the_problem(base_url, field):
    for body in BAD_CHAT_REQUESTS[field]:
        status, payload, _ = post(base_url, "/chat/completions", body)
        assert status == 400, (body, payload)
        assert payload["error"]["type"] == "invalid_request_error" and payload["error"]["message"]
        assert field.split()[0] in payload["error"]["message"] or field == "tool", payload
        assert_no_server_details(payload["error"]["message"])


@pytest.mark.parametrize("field", sorted(BAD_COMPLETION_REQUESTS))
def test_an_invalid_completions_request_gets_a_400_naming_the_problem(base_url, field):
    for fields in BAD_COMPLETION_REQUESTS[field]:
        status, payload, _ = post(base_url, "/completions", {"model": llm.LOCAL_MODEL, "max_tokens": 1, **fields})
        assert status == 400, (fields, payload)
        assert field.split()[0] in payload["error"]["message"] or field == "prompt", payload


def test_a_body_that_is_not_a_json_object_and_unknown_routes_get_json_errors(base_url):
    assert post(base_url, "/chat/completions", b"{not json")[0] == 400
    assert post(base_url, "/chat/completions", [1, 2])[0] == 400
    status, payload, _ = post(base_url, "/nowhere", {})
    assert status == 404 and "nowhere" in payload["error"]["message"]


def assert_no_server_details(message: str) -> None:
    """What a client is told never carries a traceback, the server's file paths or more than one line."""
    assert "Traceback" not in message and ".py" not in message and "\n" not in message, message


def test_an_unexpected_error_is_a_500_with_a_json_body_and_no_traceback(base_url, monkeypatch, capfd):
    def broken(**_):
        raise RuntimeError(f"a bug in {__file__}")

    monkeypatch.setattr(server.litellm, "completion", broken)
    status, payload, _ = post(base_url, "/chat/completions", chat_body())
    assert status == 500 and payload["error"]["type"] == "server_error"
    message = payload["error"]["message"]
    assert "RuntimeError" in message and "a bug" not in message
    assert_no_server_details(message)
    incident = message.split()[2]  # "internal error <id> (...)": the log has the traceback under the same id
    log = capfd.readouterr().err
    assert f"internal error {incident}" in log and "a bug" in log


def test_an_empty_enum_in_a_tool_schema_is_a_400(base_url):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "enum": []}}}}}]
    status, payload, _ = post(base_url, "/chat/completions", chat_body(tools=tools, tool_choice="required"))
    assert status == 400, payload
    assert_no_server_details(payload["error"]["message"])


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                       max_size=3), max_leaves=8)
CHAT_FIELDS = ["model", "messages", "tools", "tool_choice", "temperature", "seed", "n", "max_tokens", "logprobs",
               "top_logprobs", "fit_context", "stream"]


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.dictionaries(st.sampled_from(CHAT_FIELDS), JSON_VALUES, max_size=3),
       dropped=st.lists(st.sampled_from(["model", "messages"]), max_size=2))
def test_any_chat_body_gets_an_answer_and_never_a_500(changes, dropped):
    """Hostile bodies (random JSON in the request's fields): 200, 400 or 404, never a 500 or a traceback."""
    from starlette.testclient import TestClient

    body = {k: v for k, v in {**chat_body(max_tokens=1), **changes}.items() if k not in dropped}
    with TestClient(server.make_app(max_tokens_cap=1)) as app:
        response = app.post("/v1/chat/completions", json=body)
    assert response.status_code in (200, 400, 404), (body, response.text)
    if response.status_code != 200:
        assert_no_server_details(response.json()["error"]["message"])


def test_forty_concurrent_clients_are_all_answered(base_url):
    n_clients = 40
    start = threading.Barrier(n_clients)
    outcomes: list = [None] * n_clients

    def one(i: int) -> None:
        start.wait()
        try:
            outcomes[i] = post(base_url, "/chat/completions", chat_body(max_tokens=1), timeout=300)[0]
        except OSError as err:  # a reset or refused connection
            outcomes[i] = repr(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes == [200] * n_clients


def test_max_tokens_is_capped_and_fit_context_reports_what_it_dropped(base_url):
    """A request's max_tokens above the cap decodes exactly the cap (an app capped at 12 tokens: the default 1,024
    decoded to its end cost 25 s of the suite, and a reply that stopped early passed the old check anyway)."""
    import inspect

    from starlette.testclient import TestClient

    for make in (server.serve_local, server.make_app):
        assert inspect.signature(make).parameters["max_tokens_cap"].default == server.DEFAULT_MAX_TOKENS_CAP
    with TestClient(server.make_app(max_tokens_cap=12)) as app:
        response = app.post("/v1/chat/completions",
                            json=chat_body(max_tokens=100_000, temperature=1.0, seed=3, fit_context=True,
                                           messages=[{"role": "user", "content": "Write a very long story about a dragon."}]))
    payload, headers = response.json(), response.headers
    assert response.status_code == 200 and payload["usage"]["completion_tokens"] == 12
    assert payload["choices"][0]["finish_reason"] == "length"
    assert payload["usage"]["context_dropped_messages"] == 0 and headers[server.DROPPED_HEADER] == "0"
    _, plain, plain_headers = post(base_url, "/chat/completions", chat_body())
    assert "context_dropped_messages" not in plain["usage"] and server.DROPPED_HEADER not in plain_headers


def test_a_disconnected_client_stops_the_decoding(base_url, capfd):
    host, port = base_url.split("//")[1].split("/")[0].split(":")
    body = json.dumps(chat_body(max_tokens=1000, temperature=1.0, seed=0,
                                messages=[{"role": "user", "content": "Write a very long story about a dragon."}]))
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        time.sleep(1.0)  # let it start decoding, then hang up
    deadline = time.monotonic() + 240
    while "abandoned by its client" not in capfd.readouterr().err:
        assert time.monotonic() < deadline, "the server went on decoding for its departed client"
        time.sleep(0.5)
    assert post(base_url, "/chat/completions", chat_body())[0] == 200  # and serves the next one
