"""The agentuq-nb command line, run as a user runs it (a subprocess of the installed script)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]


def run(*args, check=True):
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"agentuq-nb {' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}")
    return done


def test_extract_aggregate_evaluate_contract(tmp_path, synthetic_results):
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)
    assert (run_dir / "tokens.parquet").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["results"] == str(synthetic_results.resolve())
    run("aggregate", run_dir)
    for name in ("turn_summary", "trajectory_summary"):
        assert (run_dir / f"{name}.csv").exists() and (run_dir / f"{name}.parquet").exists()
    columns = set(pd.read_csv(run_dir / "trajectory_summary.csv").columns)
    # a superset of agentuq's uq_trajectory_summary.csv
    assert {"domain", "task_id", "trial", "seed", "scorer", "role", "total_tokens", "trajectory_nll",
            "avg_token_nll", "mean_topk_entropy", "min_chosen_prob"} <= columns
    turn_columns = set(pd.read_csv(run_dir / "turn_summary.csv").columns)
    assert {"turn_idx", "num_tokens", "turn_nll", "avg_token_nll", "mean_topk_entropy", "min_chosen_prob"} <= turn_columns
    out = run("evaluate", run_dir, "--role", "assistant", "--uncertainty", "avg_token_nll", "--failure-threshold", "1.0")
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert set(metrics["metrics"]) == {"auroc", "auarc", "aurc", "prr", "pearson", "spearman", "kendall"}
    assert set(metrics["ci"]) >= {"auroc", "auarc"} and metrics["n"] == 12
    assert json.loads(out.stdout)["metrics"]["auroc"] == metrics["metrics"]["auroc"]
    curves = pd.read_csv(run_dir / "eval_curves.csv")
    assert {"roc", "accuracy_rejection"} <= set(curves["curve"])


def test_sidecar_dir_option(tmp_path, synthetic_results):
    moved = tmp_path / "elsewhere"
    shutil.move(str(synthetic_results.parent / "sidecars"), moved)
    failed = run("extract", synthetic_results, "--out", tmp_path / "r1", check=False)
    assert failed.returncode == 2 and "does not exist" in failed.stderr and "--sidecar-dir" in failed.stderr
    run("extract", synthetic_results, "--out", tmp_path / "r2", "--sidecar-dir", moved)
    assert (tmp_path / "r2" / "tokens.parquet").exists()


def test_bad_input_exits_with_a_clear_message(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"timestamp": "x", "simulations": [')
    done = run("extract", bad, "--out", tmp_path / "run", check=False)
    assert done.returncode == 2
    assert str(bad) in done.stderr and "truncated" in done.stderr
    assert "Traceback" not in done.stderr
    done = run("evaluate", tmp_path / "nothing-here", check=False)
    assert done.returncode == 2 and "aggregate" in done.stderr


def test_one_class_rewards_give_null_metrics_with_reasons(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    for sim in data["simulations"]:
        sim["reward_info"]["reward"] = 1.0
    synthetic_results.write_text(json.dumps(data))
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)
    run("aggregate", run_dir)
    run("evaluate", run_dir)
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert metrics["metrics"]["auroc"] is None and "class" in metrics["undefined"]["auroc"]
    assert metrics["n_failures"] == 0
