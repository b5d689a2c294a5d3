"""Inspect AI logs in: a real Inspect agent eval against ``serve-local``, its ``.eval`` log through ``analyze``.

Inspect (inspect-ai, the ``[inspect]`` extra) cannot share this environment's pins (see pyproject.toml), so two
venvs are built over it (``tests/overlay_venv.py``): the *reader* gets requirements-inspect.lock and runs our
reader and ``analyze``; the *client* adds the openai 3 that Inspect's OpenAI-compatible provider needs (litellm
needs openai 2) and runs ``inspect eval``. Everything Inspect reports is read back with its own API and compared
with what ``extract`` made of it. The fast tests need neither venv.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from tests.conftest import free_port, wait_until_serving
from tests.overlay_venv import ROOT, overlay_venv, purelib, read_pins, with_src_path

INSPECT_LOCK = ROOT / "requirements-inspect.lock"
#: Inspect's OpenAI-compatible provider asks for openai >= 3.4 (the version this test was written against)
INSPECT_CLIENT_PACKAGES = ["openai==3.57.0"]
TASK = ROOT / "tests" / "inspect_tasks" / "arithmetic_agent.py"
MODEL = "local/smollm2-135m-instruct"
EPOCHS = 2


def agentuq(*args: str, python: str = sys.executable, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([python, "-c", "from agentuq_nb.cli import app; app()", *args], env=with_src_path(),
                          capture_output=True, text=True, **kwargs)


# ----------------------------------------------------------------------------- fast: no Inspect needed
def test_tiktoken_cache_points_at_litellms_bundled_encodings_unless_set(tmp_path):
    """Offline, tiktoken's o200k_base (what Inspect counts tokens with) loads from litellm's copy."""
    code = ("import os, agentuq_nb, tiktoken; print(os.environ['TIKTOKEN_CACHE_DIR']); "
            "print(len(tiktoken.get_encoding('o200k_base').encode('hello world')))")
    env = with_src_path({k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"})
    env.update(HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9")  # any download would fail
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    folder, n_tokens = done.stdout.split()
    assert Path(folder).parts[-3:] == ("litellm", "litellm_core_utils", "tokenizers") and n_tokens == "2"
    own = tmp_path / "mine"
    done = subprocess.run([sys.executable, "-c", "import os, agentuq_nb; print(os.environ['TIKTOKEN_CACHE_DIR'])"],
                          env={**env, "TIKTOKEN_CACHE_DIR": str(own)}, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == str(own)


def test_an_inspect_log_without_the_extra_is_one_line_naming_it(tmp_path):
    try:
        import inspect_ai  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        pytest.skip("inspect-ai is installed here: the missing-extra message cannot be seen")
    log = tmp_path / "run.eval"
    with zipfile.ZipFile(log, "w") as zf:  # the shape of an .eval log: a zip archive
        zf.writestr("header.json", "{}")
    for command in ("extract", "analyze"):
        done = agentuq(command, str(log), "--out", str(tmp_path / command), timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(log) in lines[0] and "[inspect]" in lines[0] and "Traceback" not in done.stderr


def test_inspect_logs_are_recognised_by_shape_and_tau2_results_are_not(tmp_path, synthetic_results):
    from agentuq_nb.io.ingest.inspect_logs import is_inspect_log
    from agentuq_nb.io.ingest.results import detect_layout

    json_log = tmp_path / "old-style.json"  # Inspect's .json logs open with version, status, eval
    json_log.write_text(json.dumps({"version": 2, "status": "success", "eval": {"task": "t"}, "samples": []}))
    zipped = tmp_path / "renamed.log"  # an .eval log is a zip archive, whatever its name
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("header.json", "{}")
    assert detect_layout(json_log) == detect_layout(zipped) == "inspect"
    assert not is_inspect_log(synthetic_results) and detect_layout(synthetic_results) in ("v0", "v1")
    truncated = tmp_path / "truncated.json"  # τ²-bench results cut short: its reader says what is wrong
    truncated.write_text('{"timestamp": "2026-11-26", "simula')
    assert not is_inspect_log(truncated)


def test_score_is_refused_for_results_with_one_reward(tmp_path):
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=2, messages_per_simulation=4)
    done = agentuq("extract", str(results), "--out", str(tmp_path / "run"), "--score", "includes", timeout=120)
    assert done.returncode == 2 and "--score 'includes'" in done.stderr and "Inspect AI log" in done.stderr


# ----------------------------------------------------------------------------- slow: the real client
def reader_venv() -> Path:
    return overlay_venv("inspect-reader", read_pins(INSPECT_LOCK))


def client_venv(reader: Path) -> Path:
    return overlay_venv("inspect-client", INSPECT_CLIENT_PACKAGES, over=[purelib(reader / "bin" / "python"), purelib()])


@pytest.fixture(scope="module")
def inspect_run(tmp_path_factory):
    """``inspect eval`` of the arithmetic agent (2 samples × 2 epochs) against serve-local with log-probs on:
    (the .eval log, the reader venv's python)."""
    work = tmp_path_factory.mktemp("inspect")
    reader = reader_venv()
    client = client_venv(reader)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", "from agentuq_nb.cli import app; app()", "serve-local",
                               "--port", str(port)], env=with_src_path(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_until_serving(port, server, timeout=120)
        shutil.copy(TASK, work / TASK.name)  # Inspect takes a task file by a relative path
        import agentuq_nb  # noqa: F401  -- TIKTOKEN_CACHE_DIR: Inspect counts tokens with o200k_base, offline
        env = {**os.environ, "AGENTUQ_BASE_URL": f"http://127.0.0.1:{port}/v1", "AGENTUQ_API_KEY": "none"}
        env.pop("PYTHONPATH", None)
        run = subprocess.run(
            [str(client / "bin" / "python"), "-m", "inspect_ai", "eval", TASK.name,
             "--model", f"openai-api/agentuq/{MODEL}", "--epochs", str(EPOCHS), "--logprobs", "--top-logprobs", "5",
             "--temperature", "0", "--seed", "0", "--max-tokens", "64", "--display", "none",
             "--log-dir", str(work / "logs")],
            cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, (run.stdout[-2000:], run.stderr[-3000:])
    finally:
        server.terminate()
        server.wait(60)
    logs = sorted((work / "logs").glob("*.eval"))
    assert len(logs) == 1
    return logs[0], str(reader / "bin" / "python")


READ_BACK = """
import json, sys
from inspect_ai.log import read_eval_log_samples
out = []
for s in read_eval_log_samples(sys.argv[1], resolve_attachments=True):
    calls = {e.output.choices[0].message.id: e.output.choices[0] for e in s.events if e.event == "model"}
    out.append({"id": str(s.id), "epoch": s.epoch, "scores": {k: v.value for k, v in s.scores.items()},
                "messages": [{"role": m.role, "text": m.text,
                              "calls": [[c.function, c.arguments] for c in (getattr(m, "tool_calls", None) or [])],
                              "logprobs": [t.logprob for t in calls[m.id].logprobs.content]
                              if m.role == "assistant" and calls[m.id].logprobs else None} for m in s.messages]})
print(json.dumps(out))
"""

READ_OURS = """
import json, sys
from agentuq_nb.io.ingest.results import iter_simulations, read_header
score = sys.argv[2] or None
print(json.dumps({"header": read_header(sys.argv[1], score),
                  "sims": [s.model_dump(mode="json") for s in iter_simulations(sys.argv[1], score=score)]}))
"""


def run_json(python: str, code: str, *args: str) -> dict | list:
    done = subprocess.run([python, "-c", code, *args], env=with_src_path(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_inspect_agent_log_maps_to_trajectories_with_its_messages_tool_calls_scores_and_logprobs(inspect_run):
    log, python = inspect_run
    truth = run_json(python, READ_BACK, str(log))
    ours = run_json(python, READ_OURS, str(log), "")
    header, sims = ours["header"], ours["sims"]
    assert len(sims) == len(truth) == 2 * EPOCHS
    info = header["info"]
    assert info["results_format"] == "inspect" and info["environment_info"]["domain_name"] == "arithmetic_agent"
    assert info["agent_info"]["llm"] == f"openai-api/agentuq/{MODEL}"
    assert info["reward_from"]["scorer"] == "includes" == info["inspect"]["scorers"][0]
    assert info["agent_info"]["system_prompt"] == truth[0]["messages"][0]["text"]
    grade = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0}
    for sim, sample in zip(sims, truth):
        assert (sim["task_id"], sim["trial"]) == (sample["id"], sample["epoch"] - 1)
        assert sim["reward_info"]["reward"] == grade[sample["scores"]["includes"]]
        assert sim["system_prompt"] == sample["messages"][0]["text"] and sample["messages"][0]["role"] == "system"
        rest = sample["messages"][1:]
        assert [m["role"] for m in sim["messages"]] == [m["role"] for m in rest]
        assert [m["content"] for m in sim["messages"]] == [m["text"] for m in rest]
        for ours_m, theirs in zip(sim["messages"], rest):
            assert [[c["name"], c["arguments"]] for c in ours_m.get("tool_calls") or []] == theirs["calls"]
            if theirs["logprobs"] is not None:
                assert [t["logprob"] for t in ours_m["raw_data"]["logprobs"]["content"]] == theirs["logprobs"]
        calls = {c["id"]: c["name"] for m in sim["messages"] for c in m.get("tool_calls") or []}
        for tool in (m for m in sim["messages"] if m["role"] == "tool"):
            assert calls[tool["id"]] == tool["name"] and tool["error"] is False
    # every sample's assistant turns carry log-probs (the server returned them to Inspect)
    assert all(m["logprobs"] for s in truth for m in s["messages"] if m["role"] == "assistant")

    numeric = run_json(python, READ_OURS, str(log), "tools_used")["sims"]
    assert [s["reward_info"]["reward"] for s in numeric] == [float(t["scores"]["tools_used"]) for t in truth]


@pytest.mark.slow
def test_analyze_reads_the_inspect_log_to_an_estimator_table(inspect_run, tmp_path):
    log, python = inspect_run
    truth = run_json(python, READ_BACK, str(log))
    out = tmp_path / "run"
    # the numeric scorer as the reward: the agent called the tool (0.5) or not (0); failure = reward < 0.5
    done = agentuq("analyze", str(log), "--out", str(out), "--score", "tools_used", "--failure-threshold", "0.5",
                   "--n-boot", "20", "--embedder", "hash", python=python, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "inspect" and manifest["reward_from"]["scorer"] == "tools_used"
    tokens = pd.read_parquet(out / "tokens.parquet")
    expected = sum(len(m["logprobs"]) for s in truth for m in s["messages"] if m["logprobs"])
    assert len(tokens) == expected and set(tokens["role"]) == {"assistant"}
    assert set(tokens["source"]) == {"generated"} and set(tokens["scorer"]) == {"self"}
    table = pd.read_csv(out / "estimator_table.csv")
    rewards = sorted(float(s["scores"]["tools_used"]) for s in truth)
    assert table["n"].max() == len(truth)
    nll = table.set_index("estimator").loc["assistant.avg_token_nll"]
    if rewards[0] < 0.5 <= rewards[-1]:  # both outcomes: the ranking metrics are defined
        assert 0.0 <= nll["auroc"] <= 1.0
    # the default reward (includes: C/I) also goes through, whatever the classes
    done = agentuq("analyze", str(log), "--out", str(tmp_path / "default"), "--n-boot", "0", "--no-blackbox",
                   python=python, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    trajectories = pd.read_parquet(tmp_path / "default" / "trajectories.parquet")
    assert sorted(trajectories["reward"]) == sorted({"C": 1.0, "I": 0.0}[s["scores"]["includes"]] for s in truth)
    # a scorer the log does not have: one line naming the ones it has
    done = agentuq("extract", str(log), "--out", str(tmp_path / "bad"), "--score", "nope", python=python, timeout=300)
    assert done.returncode == 2 and "includes, tools_used" in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_trained_detector_predicts_the_inspect_log(inspect_run, tmp_path):
    """``predict`` reads an Inspect log as it reads every other layout (a detector trained on τ²-bench-shaped runs)."""
    from tests.test_detector import write_run

    from agentuq_nb.steps.train_detector import train_detector

    log, python = inspect_run
    runs = [write_run(tmp_path / f"agent{i}_airline.json", f"agent{i}", seed=i) for i in range(3)]
    train_detector(runs, tmp_path / "detector", embedder="hash", groups=["text", "blackbox", "length"], n_boot=0)
    done = agentuq("predict", str(tmp_path / "detector"), str(log), "--out", str(tmp_path / "run"), "--n-boot", "0",
                   python=python, timeout=600)
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    predictions = pd.read_csv(tmp_path / "run" / "predictions.csv")
    truth = run_json(python, READ_BACK, str(log))
    assert len(predictions) == len(truth) and predictions["failure_probability"].between(0, 1).all()
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["layout"] == "inspect"
