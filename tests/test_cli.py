"""The agentuq-nb command line: its commands, messages and exit codes through the same app in this process
(``conftest.run_cli``), and run as a user runs it (a subprocess of the installed script) where the script itself is
the point: the extract → aggregate → evaluate contract, help at a terminal width, --version."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from conftest import run_cli

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]


def run(*args, check=True):
    """``agentuq-nb ARGS`` in this process; ``check``: a non-zero exit fails the test with what it said."""
    done = run_cli(*args)
    if check and done.returncode != 0:
        raise AssertionError(f"agentuq-nb {' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}")
    return done


def run_installed(*args, check=True):
    """``agentuq-nb ARGS`` as a user runs it: a subprocess of the installed script."""
    done = subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise AssertionError(f"agentuq-nb {' '.join(map(str, args))} failed:\n{done.stdout}\n{done.stderr}")
    return done


def test_extract_aggregate_evaluate_contract(tmp_path, synthetic_results):
    run_dir = tmp_path / "run"
    run_installed("extract", synthetic_results, "--out", run_dir)
    assert (run_dir / "tokens.parquet").exists()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["results"] == str(synthetic_results.resolve())
    run_installed("aggregate", run_dir)
    for name in ("turn_summary", "trajectory_summary"):
        assert (run_dir / f"{name}.csv").exists() and (run_dir / f"{name}.parquet").exists()
    columns = set(pd.read_csv(run_dir / "trajectory_summary.csv").columns)
    # a superset of agentuq's uq_trajectory_summary.csv
    assert {"domain", "task_id", "trial", "seed", "scorer", "role", "total_tokens", "trajectory_nll",
            "avg_token_nll", "mean_topk_entropy", "min_chosen_prob"} <= columns
    turn_columns = set(pd.read_csv(run_dir / "turn_summary.csv").columns)
    assert {"turn_idx", "num_tokens", "turn_nll", "avg_token_nll", "mean_topk_entropy", "min_chosen_prob"} <= turn_columns
    out = run_installed("evaluate", run_dir, "--role", "assistant", "--uncertainty", "avg_token_nll", "--failure-threshold", "1.0")
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert set(metrics["metrics"]) == {"auroc", "auarc", "auarc_tie_mean", "aurc", "prr", "pearson", "spearman", "kendall"}
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


def one_class_run(results: Path, run_dir: Path, reward: float) -> Path:
    """``results`` with every reward set to ``reward``, extracted and aggregated into ``run_dir``."""
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        sim["reward_info"]["reward"] = reward
    results.write_text(json.dumps(data))
    run("extract", results, "--out", run_dir)
    run("aggregate", run_dir)
    return run_dir


def test_one_class_rewards_give_null_metrics_with_reasons(tmp_path, synthetic_results):
    run_dir = one_class_run(synthetic_results, tmp_path / "run", reward=1.0)
    done = run("evaluate", run_dir)
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert metrics["metrics"]["auroc"] is None and "class" in metrics["undefined"]["auroc"]
    assert metrics["n_failures"] == 0
    # the terminal says why each null metric is null
    for metric, reason in metrics["undefined"].items():
        assert f"note: {metric} is null: {reason}" in done.stderr


def _no_traceback(done, *expected):
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: "), done.stderr
    for text in expected:
        assert text in done.stderr, (text, done.stderr)


def test_user_mistakes_get_messages_not_tracebacks(tmp_path, synthetic_results):
    a_file = synthetic_results
    _no_traceback(run("extract", synthetic_results, "--out", a_file, check=False), str(a_file), "is a file, not a run folder")
    _no_traceback(run("rescore", synthetic_results, "--out", a_file, check=False), "is a file, not a run folder")
    _no_traceback(run("aggregate", a_file, check=False), str(a_file), "is a file, not a run folder")
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)
    run("aggregate", run_dir)
    for threshold in ("nan", "inf", "-inf"):
        _no_traceback(run("evaluate", run_dir, "--failure-threshold", threshold, check=False),
                      f"failure threshold {float(threshold)} is not a finite number")


def test_aggregate_of_a_run_without_logprobs_points_to_rescore(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    for sim in data["simulations"]:
        for message in sim["messages"]:
            message["raw_data"], message["logprobs"] = None, None
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    done = run("extract", bare, "--out", tmp_path / "run")
    assert "rescore" in done.stderr
    _no_traceback(run("aggregate", tmp_path / "run", check=False), "no message carried log-probs",
                  f"agentuq-nb rescore {bare.resolve()} --out")


def test_input_warnings_are_said_once_per_kind_with_their_count(tmp_path):
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=6, messages_per_simulation=6,
                                      tokens_per_message=3, forms=("sidecar",))
    sidecars = sorted((results.parent / "sidecars").glob("*.jsonl"))
    for sidecar in sidecars[:4]:  # a blank line and a row without role in four files: parsed in one batch or more
        rows = [json.loads(line) for line in sidecar.read_text().splitlines()]
        rows[0].pop("role")
        sidecar.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n" + "\n".join(json.dumps(r) for r in rows[2:]) + "\n")
    done = run("extract", results, "--out", tmp_path / "run")
    said = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert len(said) == 2, said
    assert any(line.startswith("warning: 4 blank line(s)") and f"{sidecars[0]} line 3" in line for line in said), said
    assert any(line.startswith("warning: 4 sidecar row(s) have no role") and f"{sidecars[0]} line 1" in line
               for line in said), said


def test_rewards_that_are_not_finite_are_counted_at_extract_and_left_out_with_a_note(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    data["simulations"][0]["reward_info"]["reward"] = float("nan")
    data["simulations"][1]["reward_info"]["reward"] = float("inf")
    synthetic_results.write_text(json.dumps(data))  # Python's json writes NaN / Infinity, as τ²-bench's would
    run_dir = tmp_path / "run"
    extracted = run("extract", synthetic_results, "--out", run_dir)
    assert "warning: 2 simulation(s) have a reward that is not a finite number" in extracted.stderr
    run("aggregate", run_dir)
    done = run("evaluate", run_dir)
    assert json.loads(done.stdout)["n"] == len(data["simulations"]) - 2
    assert "note: 2 trajectories left out: their uncertainty or reward is not a finite number" in done.stderr


def test_more_mistakes_get_messages(tmp_path, synthetic_results):
    (tmp_path / "empty").mkdir()
    _no_traceback(run("estimators", tmp_path / "nowhere", check=False), "no such run folder")
    _no_traceback(run("estimators", synthetic_results, check=False), "is a file, not a run folder")
    _no_traceback(run("estimators", tmp_path / "empty", check=False), "holds no table an estimator reads")
    _no_traceback(run("extract", synthetic_results, "--out", synthetic_results / "sub", check=False),
                  f"{synthetic_results} is a file, not a folder")
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)
    run("aggregate", run_dir)
    bad = run("evaluate", run_dir, "--n-boot", "-5", check=False)
    assert bad.returncode == 2 and "greater than or equal to 0" in bad.stderr and "Traceback" not in bad.stderr
    one_class = one_class_run(synthetic_results, tmp_path / "one_class", reward=0.0)
    done = run("compare-estimators", one_class, "--n-boot", "20")
    said = "note: all 12 scored trajectories failed: AUROC and every other ranking or calibration metric is undefined"
    assert done.stderr.count(said) == 1 and "one outcome only" in done.stderr  # said once, not per estimator


def _normalized_manifest(run_dir: Path) -> dict:
    """The manifest with commit ids replaced by the step that made them (the results' content digest kept), times and
    sizes left out."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    step_of = {a["commit"]: a["step"] for a in manifest["artifacts"].values()}
    artifacts = {name: {"step": a["step"], "based_on": {k: step_of.get(v, v) for k, v in a["based_on"].items()}}
                 for name, a in manifest["artifacts"].items()}
    rest = {k: v for k, v in manifest.items() if k not in ("artifacts", "created_at")}
    return {**rest, "artifacts": artifacts}


def test_analyze_writes_the_folder_the_three_commands_write(tmp_path, synthetic_results):
    three, one = tmp_path / "three", tmp_path / "one"
    run("extract", synthetic_results, "--out", three)
    run("aggregate", three)
    run("evaluate", three, "--n-boot", "50")
    out = run("analyze", synthetic_results, "--out", one, "--n-boot", "50", "--no-blackbox", "--no-figures",
              "--no-report")
    assert json.loads(out.stdout[out.stdout.index("{"):])["metrics"] == \
        json.loads((one / "eval_metrics.json").read_text())["metrics"]
    files = sorted(p.name for p in three.iterdir() if not p.name.startswith("."))
    assert files == sorted(p.name for p in one.iterdir() if not p.name.startswith("."))
    assert {"tokens.parquet", "trajectory_summary.parquet", "eval_metrics.json", "eval_curves.csv"} <= set(files)
    for name in files:
        if name.endswith(".parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(three / name), pd.read_parquet(one / name))
        elif name.endswith(".csv"):
            assert (three / name).read_text() == (one / name).read_text(), name
    assert json.loads((three / "eval_metrics.json").read_text()) == json.loads((one / "eval_metrics.json").read_text())
    assert _normalized_manifest(three) == _normalized_manifest(one)


def test_analyze_goes_through_results_without_log_probs(tmp_path):
    """Most real runs carry no log-probs: analyze computes the black-box families and the length baselines, says
    once which families it left out and how to add each, and exits 0 (issue 28)."""
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=6, forms=("raw",))
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for msg in sim["messages"]:
            msg["raw_data"] = None
    results.write_text(json.dumps(data))
    done = run("analyze", results, "--out", tmp_path / "run", "--embedder", "hash", "--n-boot", "20")
    assert "no token log-probs" in done.stdout and "structure.tool_errors" in done.stdout
    assert done.stderr.count("families not computed for this run") == 1
    assert "agentuq-nb rescore" in done.stderr and "agentuq-nb score-observations" in done.stderr
    table = pd.read_csv(tmp_path / "run" / "estimator_table.csv")
    assert {"structure", "tracer", "baseline"} <= set(table["family"]) and "token" not in set(table["family"])
    assert not (tmp_path / "run" / "eval_metrics.json").exists()  # no token statistic to evaluate


def test_analyze_with_log_probs_adds_the_black_box_families_and_the_estimator_table(tmp_path, synthetic_results):
    done = run("analyze", synthetic_results, "--out", tmp_path / "run", "--embedder", "hash", "--n-boot", "20")
    table = pd.read_csv(tmp_path / "run" / "estimator_table.csv")
    assert {"token", "structure", "tracer", "baseline", "combined"} <= set(table["family"])
    assert (tmp_path / "run" / "eval_metrics.json").exists() and "black-box signals:" in done.stdout


def test_saup_and_early_warning_are_commands_and_their_families_reach_the_estimator_table(tmp_path, synthetic_results):
    """SAUP and early warning had only notebook 07; now each is a command whose scores compare-estimators reads."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    run_dir = tmp_path / "run"
    run("analyze", synthetic_results, "--out", run_dir, "--no-blackbox", "--no-figures", "--n-boot", "0")
    gaps = run("compare-estimators", run_dir, "--no-blackbox", "--n-boot", "0").stderr
    assert f"agentuq-nb saup {run_dir}" in gaps and f"agentuq-nb early-warning {run_dir}" in gaps
    done = run("saup", run_dir, "--embedder", "hash", "--no-hmm")
    assert "saup_scores.parquet" in done.stdout and "assistant" in done.stdout
    saup_scores = pd.read_parquet(run_dir / "saup_scores.parquet")
    assert len(saup_scores) == 12 and np.isfinite(saup_scores["saup_rms"]).sum() >= 10
    done = run("early-warning", run_dir, "--fraction", "0.5", "--fraction", "1", "--n-boot", "20")
    lines = [line.split() for line in done.stdout.splitlines()[1:3]]
    assert [float(line[0]) for line in lines] == [0.5, 1.0]
    # at fraction 1 the score is the mean agent turn NLL over the whole trajectory: sklearn on it is the reference
    turns = pd.read_parquet(run_dir / "turn_summary.parquet")
    agent = turns[(turns["role"] == "assistant") & (turns["scorer"] == "self")]
    mean_nll = agent.groupby("task_id")["avg_token_nll"].mean()
    reward = pd.read_parquet(run_dir / "trajectories.parquet").set_index("task_id")["reward"]
    assert abs(float(lines[1][1]) - roc_auc_score(reward.loc[mean_nll.index] < 1, mean_nll)) <= 5e-4
    run("compare-estimators", run_dir, "--no-blackbox", "--n-boot", "0")
    table = pd.read_csv(run_dir / "estimator_table.csv")
    assert {"saup", "early_warning"} <= set(table["family"])
    assert "early_warning_f0.5" in set(table["estimator"])


def test_simulate_with_a_policy_records_its_decisions_and_refuses_a_policy_without_a_trigger(tmp_path):
    out = tmp_path / "defer"
    done = run("simulate", "--domain", "bookshop", "--out", out, "--task-ids", "1", "--policy", "defer",
               "--policy-threshold", "0", "--escalation-cost", "2")
    assert '"trigger": "threshold"' in done.stdout  # the policy, as recorded, is said before the run
    results = json.loads((out / "results.json").read_text())
    assert results["info"]["intervention_policy"]["policy"] == "defer"
    sim = results["simulations"][0]
    block = sim["intervention"]
    if block["num_decisions"]:  # the agent spoke: its first turn had a mean NLL > 0 and was deferred
        assert block["escalated"] and block["escalation_cost"] == 2.0 and sim["reward_info"]["reward"] == 0.0
    _no_traceback(run("simulate", "--domain", "bookshop", "--out", tmp_path / "x", "--policy", "defer", check=False),
                  "needs exactly one trigger")
    _no_traceback(run("simulate", "--domain", "bookshop", "--out", tmp_path / "y", "--policy", "random", check=False),
                  "needs rate")
    _no_traceback(run("simulate", "--domain", "bookshop", "--out", tmp_path / "z", "--policy", "defer",
                      "--policy-signal", "nope", "--policy-threshold", "1", check=False), "unknown online signal 'nope'")
    # another policy in the same folder is refused, not mixed in
    _no_traceback(run("simulate", "--domain", "bookshop", "--out", out, "--task-ids", "1", "--policy", "defer",
                      "--policy-threshold", "5", check=False), "intervention_policy")


def test_help_renders_literally_and_wraps_at_80_columns():
    import os

    done = subprocess.run([*CLI, "analyze", "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0
    assert "(.eval; the [inspect] extra)" in " ".join(done.stdout.split())  # no markup swallowed
    assert "…" not in done.stdout and "--failure-threshold" in done.stdout  # wrapped, never cut
    assert max(len(line) for line in done.stdout.splitlines()) <= 80
    rescore = subprocess.run([*CLI, "rescore", "--help"], capture_output=True, text=True, timeout=120).stdout
    assert "--limit" in rescore


def test_version_says_the_installed_version():
    """issue 49: `agentuq-nb --version` prints the distribution's version (pyproject.toml's) and exits 0."""
    import importlib.metadata

    done = subprocess.run([*CLI, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == f"agentuq-nb {importlib.metadata.version('agentuq_nb')}\n"
    listed = subprocess.run([*CLI, "--help"], capture_output=True, text=True, timeout=120).stdout
    assert "--version" in listed and "analyze" in listed  # the commands are still there


def test_trials_takes_a_results_file_as_analyze_does_and_a_run_without_seeds(tmp_path):
    """No circle between trials and aggregate: a results file is read as it is (here the original τ-bench's, whose
    runs have no seed); its run folder gives the same numbers."""
    from test_tau_bench_results import REWARDS, tool_calling_entry, write_json

    entries = [tool_calling_entry(task, trial, float(REWARDS[task][trial])) for trial in range(4) for task in range(3)]
    results = write_json(tmp_path / "tau_bench.json", entries)
    from_file = run("trials", results, "--n-boot", "50")
    assert "12 trajectories, 3 tasks, trials per task 4–4" in from_file.stdout and "aggregate" not in from_file.stderr
    run("extract", results, "--out", tmp_path / "run")
    from_run = run("trials", tmp_path / "run", "--n-boot", "50")
    assert from_run.stdout == from_file.stdout
    _no_traceback(run("trials", tmp_path / "absent.json", check=False), "absent.json")
