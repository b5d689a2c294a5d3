"""The smoke study end to end: simulate (embedded model) → extract → aggregate → evaluate under papermill."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest
import yaml

from agentuq_nb.pipeline.reproduce import run_study

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

#: what the test changes of params/smoke.yaml (its domain, tasks, seed and notebooks are kept, so the study it runs is
#: the smoke study's): fewer bootstrap resamples, and SAUP on the hashing embedder with 3 folds, which spares the
#: kernel importing torch and running MiniLM (07 with MiniLM runs under papermill in tests/test_dynamics.py; the
#: smoke study whole, figures byte for byte, in benchmarks/outputs_unchanged.py)
SMALLER = {"n_boot": 100}
NOTEBOOK_OVERRIDES = {"07_dynamics_saup": {"embedder": "hash", "k_folds": 3}}


def smoke_params(tmp_path: Path) -> Path:
    """params/smoke.yaml with SMALLER and NOTEBOOK_OVERRIDES, written beside the test's output."""
    spec = yaml.safe_load((ROOT / "params" / "smoke.yaml").read_text())
    spec["parameters"].update(SMALLER)
    assert set(NOTEBOOK_OVERRIDES) <= set(spec["notebooks"])  # plain names in the file: the overrides apply
    spec["notebooks"] = [{"name": nb, "parameters": NOTEBOOK_OVERRIDES[nb]} if nb in NOTEBOOK_OVERRIDES else nb
                         for nb in spec["notebooks"]]
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_smoke_study_writes_figures_and_never_leaks_keys(tmp_path, monkeypatch):
    fake_key = "sk-test-FAKE-0123456789abcdefghij"
    monkeypatch.setenv("OPENAI_API_KEY", fake_key)
    run_dir = run_study(smoke_params(tmp_path), root=ROOT, output_root=tmp_path, log=lambda *_: None)
    figures_dir = tmp_path / "figures" / "smoke"
    for name in ("simulation_outcomes", "token_nll_by_role", "agent_turn_nll", "roc", "accuracy_rejection",
                 "observation_user_nll_density", "observation_tool_surprise", "estimator_forest_evaluate",
                 "estimator_forest_saup", "dynamics_agent_nll", "saup_turn_view"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000, name
    results = json.loads((run_dir / "results.json").read_text())
    assert [s["task_id"] for s in results["simulations"]] == ["1", "2", "3"]
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    # every trajectory with an agent turn after the greeting is evaluated (which ones have one depends on the
    # CPU: llama.cpp's kernels differ between AVX2 and AVX-512 machines, and so do greedy conversations)
    with_agent_turn = [s for s in results["simulations"] if any(m["role"] == "assistant" for m in s["messages"][1:])]
    assert metrics["n"] == len(with_agent_turn) >= 2
    # the key never reaches anything the run wrote
    for path in run_dir.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".ipynb", ".csv", ".log", ".txt"):
            assert fake_key not in path.read_text(errors="replace"), path
    executed = nbformat.read(run_dir / "notebooks" / "01_simulate.ipynb", as_version=4)
    assert not any(c.get("outputs") and "Error" in str(c["outputs"]) for c in executed.cells)
