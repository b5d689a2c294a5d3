"""The unmodified τ²-bench v1.0.1 harness (the current release) as a client of ``agentuq-nb serve-local``.

τ²-bench v1.0.1 asks for Python ≥ 3.12 and litellm < 1.82.7 (this project pins litellm 1.106.2), so it gets a
virtualenv of its own, nothing shared with this environment: its dependencies at the versions in
``tests/requirements-tau2-1.0.1.lock`` (the recipe of its SHARED_README, resolved here on Python 3.11 and frozen),
then τ²-bench itself with ``--no-deps --ignore-requires-python``. Built once into the cache folder and reused.
v1.0.1 writes one results file (``results.json``, simulations inline); its own ``tau2 convert-results --to dir``
writes the directory layout (``results.json`` + ``simulations/``). Both go through extract → aggregate →
evaluate. Skipped where ``../shared/tau2-bench-1.0.1`` (beside the repository) is absent.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from tests.overlay_venv import ROOT, overlay_venv, read_pins

from conftest import run_cli, serving_in_thread

TAU2_V1_SOURCE = next((p for p in (ROOT.parent / "shared" / "tau2-bench-1.0.1",) if (p / "pyproject.toml").exists()),
                      None)
TAU2_V1_LOCK = ROOT / "tests" / "requirements-tau2-1.0.1.lock"
MODEL = "local/smollm2-135m-instruct"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TAU2_V1_SOURCE is None, reason="τ²-bench v1.0.1 source not found at ../shared/tau2-bench-1.0.1 "
                                                      "(beside the repository): the v1.0.1 harness test needs it"),
]


def tau2_v1_venv() -> Path:
    """A virtualenv of its own with τ²-bench v1.0.1 (about a minute to build; reused)."""
    return overlay_venv("tau2-v1.0.1", ["--ignore-requires-python", *read_pins(TAU2_V1_LOCK)], over=[],
                        then=[["--no-deps", "--ignore-requires-python", str(TAU2_V1_SOURCE)]])


@pytest.fixture(scope="module")
def served():
    """serve-local with ``--fit-context`` on a free port, in a thread of this process (the server the command runs,
    on the tests' own model: no second Python importing the package and loading the model): its base URL."""
    with serving_in_thread(fit_context=True) as (url, _, _):
        yield url


def tau2(venv: Path, *args: str, data: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TAU2_DATA_DIR=str(data), LITELLM_LOCAL_MODEL_COST_MAP="True")
    return subprocess.run([str(venv / "bin" / "tau2"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_tau2_v1_runs_against_serve_local_and_both_result_layouts_extract_aggregate_evaluate(served, tmp_path):
    venv = tau2_v1_venv()
    data = tmp_path / "data"
    for part in ("tau2/domains/mock", "tau2/user_simulator"):  # shared/ is read-only: τ²-bench writes beside it
        shutil.copytree(TAU2_V1_SOURCE / "data" / part, data / part)
    # turns bounded at 32 (agent) and 24 (user) tokens, as test_distributed's simulations (a token is ~25 ms of CPU)
    llm_args = {"api_base": served, "api_key": "none", "logprobs": True, "top_logprobs": 5, "temperature": 0.0, "seed": 0}
    agent_args, user_args = json.dumps({**llm_args, "max_tokens": 32}), json.dumps({**llm_args, "max_tokens": 24})
    run = tau2(venv, "run", "--domain", "mock", "--num-tasks", "1", "--max-steps", "6", "--max-concurrency", "1",
               "--agent-llm", f"openai/{MODEL}", "--agent-llm-args", agent_args,
               "--user-llm", f"openai/{MODEL}", "--user-llm-args", user_args,
               "--save-to", "harness", "--log-level", "ERROR", data=data)
    assert run.returncode == 0, run.stderr[-3000:]
    single = data / "simulations" / "harness" / "results.json"  # v1.0.1: a folder per run, simulations inline
    written = json.loads(single.read_text())
    assert "simulation_index" in written and len(written["simulations"]) == 1
    sim = written["simulations"][0]
    assert "context" not in str(sim.get("termination_reason")).lower()
    generated = [m for m in sim["messages"] if m["role"] in ("assistant", "user") and m.get("raw_data")]
    logprobs = [m["raw_data"]["choices"][0]["logprobs"]["content"] for m in generated]
    assert generated and all(logprobs)

    # the directory layout, as τ²-bench's own converter writes it
    directory = tmp_path / "as_dir"
    shutil.copytree(single.parent, directory)
    converted = tau2(venv, "convert-results", str(directory / "results.json"), "--to", "dir", "--no-backup",
                     data=data, timeout=300)
    assert converted.returncode == 0, converted.stderr[-3000:]
    assert len(list((directory / "simulations").glob("*.json"))) == 1
    assert "simulations" not in json.loads((directory / "results.json").read_text())

    tables = {}
    for layout, results in (("v1", single), ("dir", directory)):
        out = tmp_path / f"run_{layout}"
        for step in (("extract", str(results), "--out", str(out)), ("aggregate", str(out)),
                     ("evaluate", str(out), "--n-boot", "20")):
            done = run_cli(*step)  # our commands on τ²-bench's file, in this process
            assert done.returncode == 0, (step, done.stdout, done.stderr)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["layout"] == layout and manifest["domain"] == "mock"
        assert (out / "trajectory_summary.csv").exists() and (out / "eval_metrics.json").exists()
        tables[layout] = pd.read_parquet(out / "tokens.parquet")
    tokens = tables["v1"]
    assert len(tokens) == sum(map(len, logprobs))
    assert tokens["chosen_logprob"].tolist() == [t["logprob"] for content in logprobs for t in content]
    columns = ["task_id", "trial", "role", "message_idx", "token_idx", "token", "chosen_logprob"]
    pd.testing.assert_frame_equal(tables["dir"][columns], tokens[columns])
