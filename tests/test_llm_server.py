"""serve-local answered by the plain openai client, and remote echo scoring against it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import openai
import pytest

from agentuq_nb import llm
from agentuq_nb.llm import server
from agentuq_nb.llm.remote import JinjaChat

SYSTEM = "You are a helpful assistant."
CONVERSATION = [
    {"role": "user", "content": "What colour is the sky?"},
    {"role": "assistant", "content": "The sky is blue on a clear day."},
    {"role": "user", "content": "And at night?"},
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def base_url():
    port = free_port()
    ready = threading.Event()
    thread = threading.Thread(target=server.serve_local, kwargs=dict(port=port, ready_event=ready), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield f"http://127.0.0.1:{port}/v1"
    server.shutdown()
    thread.join(10)
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
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)  # generous: interpreter exit is slow on a loaded 2-core machine
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "server stopped" in stderr
