"""The unmodified τ²-bench v0.2.0 harness as a client of ``agentuq-nb serve-local``.

τ²-bench is installed into a virtualenv of its own (never this project's): the venv sees this
environment's packages through a ``.pth`` file and gets τ²-bench itself with ``--no-deps`` plus the
few small packages it imports that this project does not have (the README's recipe). The venv is
built once into the cache folder and reused. Skipped where ``../shared/tau2-bench`` (beside the
repository) is absent.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tests.overlay_venv import overlay_venv

from conftest import run_cli, serving_in_thread

ROOT = Path(__file__).resolve().parents[1]
TAU2_SOURCE = next((p for p in (ROOT.parent / "shared" / "tau2-bench",) if (p / "pyproject.toml").exists()), None)
#: imported by τ²-bench, not in our environment; pinned (the versions this test was written against)
TAU2_EXTRA_PACKAGES = ["loguru==0.7.3", "deepdiff==9.1.0", "addict==2.4.0", "docstring-parser==0.18.0", "toml==0.10.2"]
MODEL = "local/smollm2-135m-instruct"


def tau2_env(**extra: str) -> dict[str, str]:
    """The environment τ²-bench's processes run in: litellm's bundled model cost map, never a fetch (offline, litellm
    tries three times with pauses, 10-40 s of waiting a process, before it falls back to it)."""
    return {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **extra}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(TAU2_SOURCE is None, reason="τ²-bench v0.2.0 source not found at ../shared/tau2-bench "
                                                   "(beside the repository): the harness test needs it"),
]


# the venv's own packages at their versions and ours found through its .pth, without importing them (importing
# τ²-bench's command line, as `tau2 --help` does, took ~5.6 s of CPU; the tests run it right after anyway)
VENV_CHECK = """
import importlib.metadata, importlib.util, sys
for pin in sys.argv[1:]:  # name==version, or a name installed at any version
    name, _, version = pin.partition("==")
    assert importlib.metadata.version(name) == (version or importlib.metadata.version(name)), pin
for module in ("tau2.cli", "litellm", "pandas"):
    assert importlib.util.find_spec(module) is not None, module
"""


@functools.cache
def tau2_venv() -> Path:
    """A virtualenv with τ²-bench (``tests/overlay_venv.py``: built on first use, about a minute, and reused while our
    packages stay the same); checked (its packages installed, ours seen) once a test process, and built again if that
    fails."""
    for attempt in range(2):
        venv = overlay_venv("tau2-venv", ["--no-deps", str(TAU2_SOURCE)], then=[TAU2_EXTRA_PACKAGES])
        check = [str(venv / "bin" / "python"), "-c", VENV_CHECK, "tau2", *TAU2_EXTRA_PACKAGES]
        if subprocess.run(check, capture_output=True, env=tau2_env()).returncode == 0:
            return venv
        shutil.rmtree(venv, ignore_errors=True)
    raise RuntimeError(f"τ²-bench or the packages it imports are missing in {venv}")


@pytest.fixture(scope="module")
def served():
    """serve-local with ``--fit-context`` on a free port, in a thread of this process (the server the command runs,
    on the tests' own model: no second Python importing the package and loading the model): its base URL."""
    with serving_in_thread(fit_context=True) as (url, _, _):
        yield url


def test_tau2_bench_runs_against_serve_local_and_its_results_extract_aggregate_evaluate(served, tmp_path):
    venv = tau2_venv()
    data = tmp_path / "data"
    for part in ("tau2/domains/mock", "tau2/user_simulator"):  # shared/ is read-only: τ²-bench writes beside it
        shutil.copytree(TAU2_SOURCE / "data" / part, data / part)
    # max_tokens bound the embedded model's turns (32 agent, 24 user, as test_distributed's simulations): without it
    # every turn decoded up to serve-local's cap of 1,024 tokens, most of the file's time (a token is ~25 ms of CPU)
    llm_args = {"api_base": served, "api_key": "none", "logprobs": True, "top_logprobs": 5, "temperature": 0.0, "seed": 0}
    agent_args, user_args = json.dumps({**llm_args, "max_tokens": 32}), json.dumps({**llm_args, "max_tokens": 24})
    run = subprocess.run(
        [str(venv / "bin" / "tau2"), "run", "--domain", "mock", "--num-tasks", "1", "--max-steps", "6",
         "--agent-llm", f"openai/{MODEL}", "--agent-llm-args", agent_args,
         "--user-llm", f"openai/{MODEL}", "--user-llm-args", user_args, "--save-to", "harness", "--log-level", "ERROR"],
        env=tau2_env(TAU2_DATA_DIR=str(data)),
        capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = data / "simulations" / "harness.json"
    simulations = json.loads(results.read_text())["simulations"]
    assert len(simulations) == 1
    assert "context" not in str(simulations[0].get("termination_reason")).lower()
    generated = [m for m in simulations[0]["messages"] if m["role"] in ("assistant", "user") and m.get("raw_data")]
    assert generated and all(m["raw_data"]["logprobs"]["content"] for m in generated)

    out = tmp_path / "run"
    steps = [("extract", str(results), "--out", str(out)), ("aggregate", str(out)),
             ("evaluate", str(out), "--n-boot", "20")]
    for step in steps:
        done = run_cli(*step)  # our commands on τ²-bench's file, in this process
        assert done.returncode == 0, (step, done.stdout, done.stderr)
    assert (out / "tokens.parquet").exists() and (out / "trajectory_summary.csv").exists()
    assert (out / "eval_metrics.json").exists()


def test_tau2_bench_loads_an_intervention_run_with_its_own_models(tmp_path):
    """The intervention block, info's policy and an escalated run's reward are extra fields τ²-bench tolerates."""
    from tests.test_sim_decisions import ScriptedPolicy

    from agentuq_nb.sim import run_simulations
    from agentuq_nb.sim.decisions import Verdict

    policy = ScriptedPolicy(Verdict(signal=0.1), Verdict("defer", 2.0, True))
    # short turns: the verdicts, not what the model says, make the run escalated
    results = run_simulations("bookshop", tmp_path / "run", task_ids=["1"], agent_max_tokens=24, user_max_tokens=16,
                              progress=False, policy=policy)
    sim = json.loads(results.read_text())["simulations"][0]
    assert sim["intervention"]["escalated"] and sim["reward_info"]["reward"] == 0.0
    code = ("import sys; from tau2.data_model.simulation import Results; r = Results.load(sys.argv[1]); "
            "s = r.simulations[0]; print(s.termination_reason.value, s.reward_info.reward, len(s.messages))")
    done = subprocess.run([str(tau2_venv() / "bin" / "python"), "-c", code, str(results)], capture_output=True,
                          text=True, timeout=300, env=tau2_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["agent_stop", "0.0", str(len(sim["messages"]))]
