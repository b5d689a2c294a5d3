"""A third-party OpenAI-compatible server as the scorer: llama-cpp-python's own server on the same GGUF.

This is the path a user's vLLM server takes (``hosted_vllm/<model>``, prompt log-probs from ``/v1/completions``
with ``echo`` and ``logprobs``), checked against a server this project did not write. The server runs from this
environment where llama-cpp-python's ``[server]`` extra is installed (``[dev]`` brings it), else from a venv over
it with the extra's packages at requirements.lock's versions. Skipped without the embedded model (``[local]``).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.overlay_venv import ROOT, overlay_venv, read_pins

from conftest import free_port, run_cli, wait_until_serving

#: what llama-cpp-python's [server] extra adds (uvicorn and PyYAML this environment already has)
SERVER_EXTRA = ("fastapi", "sse-starlette", "starlette-context", "pydantic-settings")
SERVED_AS = "smollm2"
SYSTEM = "You are a helpful bookshop assistant. Use the tools to answer."
MESSAGES = [
    {"role": "assistant", "content": "Hi! How can I help you today?"},
    {"role": "user", "content": "Do you have 'The Hobbit' in stock? I would like two copies."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "name": "check_stock", "arguments": {"title": "The Hobbit"}, "requestor": "assistant"}]},
    {"role": "tool", "id": "call_1", "content": '{"title": "The Hobbit", "in_stock": 3, "price": 12.5}',
     "requestor": "assistant"},
    {"role": "assistant", "content": "Yes, we have 3 copies at $12.50 each. Shall I reserve two for you?"},
    {"role": "user", "content": "Yes please, thank you!"},
]


def gguf() -> Path:
    try:
        from agentuq_nb.llm.local_model import locate_model_file

        return locate_model_file()
    except (FileNotFoundError, ImportError) as err:
        pytest.skip(f"the embedded model is not installed ([local] extra): {err}")


def server_python() -> str:
    """This interpreter if it has llama-cpp-python's [server] extra, else a venv over this environment with it."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed ([local] extra)")
    if all(importlib.util.find_spec(name.replace("-", "_")) for name in SERVER_EXTRA):
        return sys.executable
    pins = [pin for pin in read_pins(ROOT / "requirements.lock")
            if pin.split("==")[0].lower().replace("_", "-") in SERVER_EXTRA]
    return str(overlay_venv("llama-server", pins) / "bin" / "python")


@pytest.fixture(scope="module")
def llama_server():
    """``python -m llama_cpp.server`` on the embedded GGUF (8,192-token window, logits of every position, which
    its completions endpoint needs for log-probs): its base URL."""
    model = gguf()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([server_python(), "-m", "llama_cpp.server", "--model", str(model), "--model_alias",
                             SERVED_AS, "--n_ctx", "8192", "--logits_all", "true", "--port", str(port),
                             "--verbose", "false"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    wait_until_serving(port, proc, timeout=120)
    yield f"http://127.0.0.1:{port}/v1"
    proc.terminate()
    proc.wait(60)


def results_file(path: Path, simulations: list[dict]) -> Path:
    path.write_text(json.dumps({
        "timestamp": "2026-11-26T00:00:00", "tasks": [],
        "info": {"environment_info": {"domain_name": "bookshop"},
                 "agent_info": {"llm": "local/smollm2-135m-instruct", "system_prompt": SYSTEM}},
        "simulations": simulations}))
    return path


def test_token_offsets_are_walked_where_a_server_counts_no_characters_for_special_tokens():
    from agentuq_nb.llm.remote import token_offsets

    text = "<|im_start|>user\nHi there<|im_end|>\n"
    tokens = ["", "user", "\n", "Hi", " there", "", "\n", "!"]  # llama-cpp-python: specials are "", then one generated
    theirs = [0, 0, 4, 5, 7, 13, 13, 14]  # its text_offset: each special token counted as 0 characters
    assert token_offsets(text, tokens, theirs) == [0, 12, 16, 17, 19, 25, 35, len(text)]
    right = [0, 12, 16, 17, 19, 25, 35, len(text)]  # vLLM's and serve-local's: kept as they are
    assert token_offsets(text, tokens, right) is right


@pytest.mark.slow
def test_rescore_through_llama_cpp_servers_completions_echo_matches_in_process_teacher_forcing(llama_server, tmp_path):
    results = results_file(tmp_path / "results.json", [{
        "id": "1-0", "task_id": "1", "trial": 0, "seed": 0, "reward_info": {"reward": 1.0},
        "messages": [{**m, "turn_idx": i} for i, m in enumerate(MESSAGES)]}])
    in_process = run_cli("rescore", str(results), "--out", str(tmp_path / "in_process"))  # in this process
    assert in_process.returncode == 0, in_process.stderr[-3000:]
    env = {"HOSTED_VLLM_API_BASE": llama_server}  # litellm's setting for hosted_vllm/ models
    remote = run_cli("rescore", str(results), "--out", str(tmp_path / "remote"), "--scorer-llm",
                     f"hosted_vllm/{SERVED_AS}", env=env)
    assert remote.returncode == 0, remote.stderr[-3000:]
    ours = pd.read_parquet(tmp_path / "in_process" / "tokens.parquet")
    theirs = pd.read_parquet(tmp_path / "remote" / "tokens.parquet")
    assert set(theirs["source"]) == {"teacher_forced"} and set(theirs["model"]) == {f"hosted_vllm/{SERVED_AS}"}
    keys = ["message_idx", "token_idx"]
    assert len(ours) == len(theirs) and sorted(set(ours["message_idx"])) == list(range(len(MESSAGES)))
    both = ours.merge(theirs, on=keys, suffixes=("_ours", "_theirs"), validate="one_to_one")
    assert len(both) == len(ours)
    assert (both["token_ours"] == both["token_theirs"]).all() and (both["role_ours"] == both["role_theirs"]).all()
    np.testing.assert_allclose(both["chosen_logprob_theirs"], both["chosen_logprob_ours"], atol=1e-3, rtol=0)
    best = both["topk_logprobs_theirs"].map(max), both["topk_logprobs_ours"].map(max)
    np.testing.assert_allclose(*best, atol=1e-3, rtol=0)


@pytest.mark.slow
def test_a_chat_generation_with_logprobs_through_llama_cpp_server_extracts_like_ours(llama_server, tmp_path):
    import litellm

    from agentuq_nb import llm

    messages = [{"role": "system", "content": SYSTEM}, MESSAGES[1]]
    response = litellm.completion(model=f"openai/{SERVED_AS}", api_base=llama_server, api_key="none",
                                  messages=messages, temperature=0, max_tokens=24, logprobs=True, top_logprobs=5,
                                  seed=0)
    choice = response.choices[0].model_dump()
    content = choice["message"]["content"]
    entries = choice["logprobs"]["content"]
    results = results_file(tmp_path / "results.json", [{  # as τ²-bench stores a response: the choice in raw_data
        "id": "1-0", "task_id": "1", "trial": 0, "seed": 0, "reward_info": {"reward": 1.0},
        "messages": [{**MESSAGES[1], "turn_idx": 0},
                     {"role": "assistant", "content": content, "turn_idx": 1, "raw_data": {"choices": [choice]}}]}])
    done = run_cli("extract", str(results), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(tmp_path / "run" / "tokens.parquet")
    assert len(rows) == len(entries) == 24 and set(rows["role"]) == {"assistant"}
    assert "".join(rows["token"]) == content
    assert rows["chosen_logprob"].tolist() == [e["logprob"] for e in entries]
    assert rows["topk_tokens"].map(len).eq(5).all() and rows["topk_entropy"].notna().all()

    # the embedded model's own generation of the same turn: one model, one prompt, so the first token (computed
    # from the prompt's multi-token batch on both sides) agrees; llama-cpp-python then decodes one token per batch,
    # a different llama.cpp kernel than our two-token steps (llm/local_model.py), so later values differ by up to
    # ~0.2 nats and greedy decoding may part ways
    own = llm.generate(messages, temperature=0, max_tokens=24, top_logprobs=5, seed=0).tokens
    assert own[0]["token"] == rows["token"][0]
    assert abs(own[0]["chosen_logprob"] - rows["chosen_logprob"][0]) < 1e-3
    same = next((i for i, (a, b) in enumerate(zip(own, rows["token"])) if a["token"] != b), len(own))
    assert same >= 4
    gaps = np.abs(np.array([r["chosen_logprob"] for r in own[:same]]) - rows["chosen_logprob"][:same].to_numpy())
    assert gaps.max() < 0.2
