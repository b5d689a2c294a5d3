"""The smoke study end to end: simulate (embedded model) → extract → aggregate → evaluate under papermill."""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from agentuq_nb.pipeline.reproduce import run_study

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_smoke_study_writes_figures_and_never_leaks_keys(tmp_path, monkeypatch):
    fake_key = "sk-test-FAKE-0123456789abcdefghij"
    monkeypatch.setenv("OPENAI_API_KEY", fake_key)
    run_dir = run_study(ROOT / "params" / "smoke.yaml", root=ROOT, output_root=tmp_path, log=lambda *_: None)
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
