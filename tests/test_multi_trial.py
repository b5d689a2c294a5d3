"""Multi-trial labels: τ²-bench's pass^k, soft-label AUROC/Brier, label noise, and the task-clustered run evaluation."""
from __future__ import annotations

import ast
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import brier_score_loss, roc_auc_score

from agentuq_nb.evaluation.multi_trial import (
    label_noise,
    multi_trial_report,
    pass_hat_k,
    soft_auroc,
    soft_brier,
    task_labels,
    task_outcomes,
)

TAU2_METRICS = Path(__file__).resolve().parents[2] / "shared" / "tau2-bench" / "src" / "tau2" / "metrics" / "agent_metrics.py"


def tau2_pass_hat_k():
    """τ²-bench's own ``pass_hat_k``: imported if τ²-bench is installed, else its source taken from
    the checkout beside this one (the module's other imports need τ²-bench's dependencies)."""
    try:
        from tau2.metrics.agent_metrics import pass_hat_k as theirs
        return theirs
    except ImportError:
        pass
    if not TAU2_METRICS.is_file():
        pytest.skip(f"τ²-bench's metrics not found at {TAU2_METRICS}")
    tree = ast.parse(TAU2_METRICS.read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pass_hat_k"]
    namespace = {"math": math}
    exec(compile(ast.Module([node], type_ignores=[]), str(TAU2_METRICS), "exec"), namespace)
    return namespace["pass_hat_k"]


def trial_rows(n_tasks=30, trials=4, seed=0, domains=("airline",)):
    rng = np.random.default_rng(seed)
    p_success = rng.uniform(size=n_tasks)
    task = np.repeat(np.arange(n_tasks), trials)
    reward = (rng.uniform(size=task.size) < p_success[task]).astype(float)
    return pd.DataFrame({"domain": np.array(domains)[task % len(domains)], "task_id": task.astype(str),
                         "trial": np.tile(np.arange(trials), n_tasks), "seed": np.arange(task.size),
                         "reward": reward})


# --------------------------------------------------------------------------- pass^k
def test_pass_hat_k_is_tau2_benchs():
    theirs = tau2_pass_hat_k()
    n = np.array([1, 2, 3, 4, 4, 5, 8, 8, 8, 16])
    c = np.array([0, 2, 1, 4, 3, 2, 8, 5, 0, 11])
    for k in (1, 2, 3):
        ok = n >= k
        expected = [theirs(int(a), int(b), k) for a, b in zip(n[ok], c[ok])]
        np.testing.assert_allclose(pass_hat_k(n[ok], c[ok], k), expected, rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="k=3 is more than the 1 trials"):
        pass_hat_k(n, c, 3)


def test_report_pass_hat_k_is_tau2_benchs_mean_over_tasks():
    """The per-task and mean pass^k follow τ²-bench's get_tasks_pass_hat_k / compute_metrics:
    success = reward within 1e-6 of 1, pass^k per task_id, mean over tasks, k up to the fewest trials."""
    theirs = tau2_pass_hat_k()
    rows = trial_rows(trials=4)
    rows = rows[~((rows["task_id"] == "3") & (rows["trial"] == 3))]  # one task with 3 trials: k capped at 3
    report, tasks = multi_trial_report(rows, n_boot=0)
    df = rows.assign(success=(rows["reward"] - 1).abs() <= 1e-6)
    for k in (1, 2, 3):
        per_task = df.groupby("task_id")["success"].apply(lambda s, k=k: theirs(len(s), int(s.sum()), k))
        mine = tasks.set_index("task_id")[f"pass^{k}"].loc[per_task.index]
        np.testing.assert_allclose(mine.to_numpy(), per_task.to_numpy(), rtol=1e-12)
        assert report["pass_hat_k"][str(k)]["value"] == pytest.approx(per_task.mean(), rel=1e-12)
    assert "4" not in report["pass_hat_k"] and "pass^4" not in tasks
    report, _ = multi_trial_report(rows, k_values=(1, 4), n_boot=0)
    assert list(report["pass_hat_k"]) == ["1"] and "k > 3 left out" in report["notes"][0]


# --------------------------------------------------------------------------- soft labels
def duplicated_rows(u, p, w=None):
    """Every row once as a failure (weight w p) and once as a success (weight w (1 - p))."""
    w = np.ones_like(u) if w is None else w
    y = np.r_[np.ones_like(u), np.zeros_like(u)]
    weight = np.r_[w * p, w * (1 - p)]
    keep = weight > 0
    return y[keep], np.r_[u, u][keep], weight[keep]


def test_soft_auroc_is_sklearn_on_duplicated_rows_with_sample_weights():
    rng = np.random.default_rng(2)
    u = np.round(rng.normal(size=60), 1)  # ties across and within tasks
    p = rng.choice([0.0, 1 / 3, 2 / 3, 1.0], size=60)
    y, s, w = duplicated_rows(u, p)
    assert soft_auroc(u, p) == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)
    # hard labels: the ordinary AUROC
    hard = (p > 0.5).astype(float)
    assert soft_auroc(u, hard) == pytest.approx(roc_auc_score(hard, u), abs=1e-12)
    # a matrix of row weights (bootstrap counts): one AUROC per row, each sklearn's with those weights
    W = rng.integers(0, 3, size=(5, 60))
    got = soft_auroc(u, p, W)
    for b in range(5):
        y, s, w = duplicated_rows(u, p, W[b].astype(float))
        assert got[b] == pytest.approx(roc_auc_score(y, s, sample_weight=w), abs=1e-12)
    assert np.isnan(soft_auroc(u, np.zeros(60)))  # no failure weight: undefined
    with pytest.raises(ValueError, match="failure_rate must lie in"):
        soft_auroc(u, p + 1)


def test_soft_brier_is_squared_distance_to_the_task_rate():
    rng = np.random.default_rng(3)
    q = rng.uniform(size=40)
    p = rng.choice([0.0, 0.25, 0.5, 1.0], size=40)
    assert soft_brier(q, p) == pytest.approx(np.mean((q - p) ** 2), abs=1e-15)
    # sklearn's Brier on the duplicated rows is the expected Brier against a hard label drawn from
    # the task's rate: ours plus the label's own variance p(1 - p)
    y, s, w = duplicated_rows(q, p)
    expected = brier_score_loss(y, s, sample_weight=w) - np.mean(p * (1 - p))
    assert soft_brier(q, p) == pytest.approx(expected, abs=1e-12)
    W = rng.integers(0, 3, size=(4, 40))
    np.testing.assert_allclose(soft_brier(q, p, W), [np.average((q - p) ** 2, weights=w) for w in W], rtol=1e-12)


# --------------------------------------------------------------------------- label noise
def test_label_noise_on_a_hand_built_case():
    rows = pd.DataFrame({
        "domain": ["a"] * 9 + ["b"] * 2,
        "task_id": ["1", "1", "1", "2", "2", "2", "3", "3", "4", "1", "1"],
        "reward": [1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 1],
    }).astype({"reward": float})
    # tasks (a,1): 3/3 success; (a,2): 1/3 -> flips; (a,3): 0/2; (a,4): one trial, left out; (b,1): 1/2 -> flips
    tasks = task_outcomes(rows)
    assert tasks[["domain", "task_id", "n_trials", "n_failures"]].values.tolist() == [
        ["a", "1", 3, 0], ["a", "2", 3, 2], ["a", "3", 2, 2], ["a", "4", 1, 0], ["b", "1", 2, 1]]
    noise = label_noise(tasks)
    assert noise["n_tasks_with_repeats"] == 4 and noise["n_flipping"] == 2
    assert noise["share_flipping"] == pytest.approx(0.5)
    # sample variances of the failure indicator: 0, var([1,0,1]) = 1/3, 0, var([1,0]) = 1/2
    assert noise["mean_within_task_variance"] == pytest.approx((0 + 1 / 3 + 0 + 1 / 2) / 4)
    report, _ = multi_trial_report(rows, n_boot=0)
    assert report["label_noise"] == noise and report["trials_per_task"]["min"] == 1
    assert list(report["pass_hat_k"]) == ["1"]


def test_task_labels_tell_domains_apart():
    rows = pd.DataFrame({"domain": ["a", "b", "a"], "task_id": ["1", "1", "1"], "reward": [1.0, 0.0, 1.0]})
    labels = task_labels(rows)
    assert labels[0] == labels[2] != labels[1]
    with pytest.raises(ValueError, match="'task_id'"):
        task_labels(rows.drop(columns="task_id"))


def test_task_labels_follow_the_tasks_not_the_rows_order():
    rows = trial_rows(n_tasks=12, trials=3, seed=2, domains=("airline", "retail"))
    shuffled = np.random.default_rng(3).permutation(len(rows))
    np.testing.assert_array_equal(task_labels(rows.iloc[shuffled]), task_labels(rows)[shuffled])
    # label order is the sorted (domain, task_id): "10" before "2", as strings sort
    first = rows.sort_values(["domain", "task_id"]).iloc[0]
    assert task_labels(rows)[first.name] == 0


def test_report_soft_labels_with_task_clustered_intervals():
    rows = trial_rows(n_tasks=40, trials=3, seed=4)
    rng = np.random.default_rng(4)
    fail_rate = 1 - rows.groupby("task_id")["reward"].transform("mean").to_numpy()
    rows["u"] = fail_rate + rng.normal(scale=0.3, size=len(rows))
    rows["q"] = np.clip(fail_rate + rng.normal(scale=0.1, size=len(rows)), 0, 1)
    report, _ = multi_trial_report(rows, uncertainty="u", probability="q", n_boot=300, seed=1)
    json.dumps(report)
    soft = report["soft_labels"]
    assert soft["auroc"]["value"] == pytest.approx(soft_auroc(rows["u"].to_numpy(), fail_rate))
    assert soft["auroc"]["ci"][0] < soft["auroc"]["value"] < soft["auroc"]["ci"][1]
    assert soft["brier"]["value"] == pytest.approx(np.mean((rows["q"] - fail_rate) ** 2))
    assert report["bootstrap"]["method"] == "percentile, resampling tasks (clusters)"
    assert report["bootstrap"]["n_clusters"] == 40
    inverted, _ = multi_trial_report(rows.assign(u=-rows["u"]), uncertainty="u", invert=True, n_boot=0)
    assert inverted["soft_labels"]["auroc"]["value"] == pytest.approx(soft["auroc"]["value"])
    assert report == multi_trial_report(rows, uncertainty="u", probability="q", n_boot=300, seed=1)[0]


def test_unscored_trajectories_count_in_the_task_rate_but_are_not_scored():
    rows = trial_rows(n_tasks=20, trials=3, seed=6)
    rows["u"] = np.random.default_rng(6).normal(size=len(rows))
    fail_rate = 1 - rows.groupby("task_id")["reward"].transform("mean").to_numpy()
    rows.loc[::4, "u"] = np.nan  # the estimator scores 3 in 4 trajectories
    report, tasks = multi_trial_report(rows, uncertainty="u", n_boot=0)
    scored = rows["u"].notna().to_numpy()
    assert report["n_trajectories"] == 60 and report["soft_labels"]["n"] == scored.sum()
    assert report["soft_labels"]["auroc"]["value"] == pytest.approx(
        soft_auroc(rows["u"].to_numpy()[scored], fail_rate[scored]), abs=1e-12)


def test_report_refuses_bad_input():
    with pytest.raises(ValueError, match=r"lack column\(s\) \['reward'\]"):
        multi_trial_report(pd.DataFrame({"task_id": ["1"]}))
    with pytest.raises(ValueError, match="no column 'u'"):
        multi_trial_report(trial_rows(), uncertainty="u")
    with pytest.raises(TypeError, match="run folder or a DataFrame"):
        multi_trial_report(42)


# --------------------------------------------------------------------------- end to end on a run folder
@pytest.fixture
def trials_run(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import make_aggregated_run

    return make_aggregated_run(tmp_path, num_simulations=24, messages_per_simulation=10, tokens_per_message=5,
                               trials=3, signal=1.0)


def test_evaluate_resamples_tasks_when_tasks_repeat(trials_run):
    from agentuq_nb.evaluation.estimator_table import estimator_metrics
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.evaluate import evaluate

    rewards = RunDir.of(trials_run).rewards()
    assert len(rewards) == 24 and rewards.groupby("task_id").size().eq(3).all()
    result = evaluate(trials_run, n_boot=200)
    assert result["bootstrap"]["method"] == "percentile, resampling tasks (clusters)"
    assert result["bootstrap"]["n_clusters"] == 8
    multi = result["multi_trial"]
    assert multi["n_tasks"] == 8 and set(multi["pass_hat_k"]) == {"1", "2", "3"}
    assert "auroc" in multi["soft_labels"]
    written = json.loads((Path(trials_run) / "eval_metrics.json").read_text())
    assert written["multi_trial"]["label_noise"] == multi["label_noise"]
    table = estimator_metrics(trials_run, {"nll": "assistant.avg_token_nll"}, n_boot=100)
    assert table["resampled"].tolist() == ["tasks"]


def test_cli_trials_and_evaluate_print_the_multi_trial_readout(trials_run):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app
    from agentuq_nb.io.store.rundir import RunDir

    runner = CliRunner()
    out = runner.invoke(app, ["trials", str(trials_run), "--n-boot", "100"])
    assert out.exit_code == 0, out.output
    report, _ = multi_trial_report(trials_run, n_boot=100)
    assert "24 trajectories, 8 tasks, trials per task 3–3" in out.stdout
    assert f"  3  {report['pass_hat_k']['3']['value']:7.3f}  [" in out.stdout
    assert f"{report['label_noise']['n_flipping']} of 8 tasks with ≥ 2 trials flip verdict" in out.stdout
    out = runner.invoke(app, ["trials", str(trials_run), "--k", "5"])
    assert out.exit_code == 0 and "k > 3 left out" in out.stderr
    out = runner.invoke(app, ["evaluate", str(trials_run), "--n-boot", "50"])
    assert out.exit_code == 0, out.output
    shown = json.loads(out.stdout)
    assert shown["multi_trial"]["bootstrap"] == "percentile, resampling tasks (clusters)"
    assert set(shown["multi_trial"]["pass_hat_k"]) == {"1", "2", "3"}
    assert RunDir.of(trials_run).has("eval_metrics")
    out = runner.invoke(app, ["trials", str(trials_run / "nowhere")])
    assert out.exit_code == 2 and "error:" in out.stderr


def test_evaluate_and_the_estimator_table_give_one_estimator_one_interval(tmp_path):
    """12 tasks × 3 trials: task ids "0".."11" sort as strings apart from their order of appearance, and
    evaluate reads the estimator's rows in another order than the estimator table; both resample the
    same tasks from one seed."""
    sys.path.insert(0, str(Path(__file__).parent))
    from agentuq_nb.steps.compare_estimators import compare_estimators
    from agentuq_nb.steps.evaluate import evaluate

    from conftest import make_aggregated_run

    run = make_aggregated_run(tmp_path, num_simulations=36, messages_per_simulation=8, tokens_per_message=5,
                              trials=3, signal=0.6, seed=5)
    table = compare_estimators(run, n_boot=300, seed=7, combine=False).set_index("estimator")
    for name in ("assistant.avg_token_nll", "user.mean_topk_entropy"):
        result = evaluate(run, estimator=name, n_boot=300, seed=7)
        assert result["bootstrap"]["n_clusters"] == 12
        row = table.loc[name]
        assert row["auroc"] == pytest.approx(result["metrics"]["auroc"], rel=1e-12)
        np.testing.assert_allclose([row["auroc_lo"], row["auroc_hi"]], result["ci"]["auroc"], rtol=1e-12)


def test_the_readout_of_a_runs_outcomes_reads_their_labels_and_equals_the_rows_report():
    """multi_trial_readout takes a run's Outcomes (labels made once, tasks numbered once): the same report as the rows'
    multi_trial_report, and the labels it reads are the outcomes' own, not the rewards labelled again."""
    from agentuq_nb.evaluation.multi_trial import multi_trial_readout
    from agentuq_nb.records.outcomes import Outcomes

    rows = trial_rows(n_tasks=12, trials=3, seed=4, domains=("airline", "retail"))
    rows.loc[5, "reward"] = np.nan  # a trajectory without a reward: dropped, counted
    u = np.random.default_rng(1).normal(size=len(rows))
    u[7] = np.nan  # one the estimator does not score: in its task's rate, not scored
    keys = rows[["domain", "task_id", "trial", "seed"]]
    outcomes = Outcomes.of(rows["reward"].to_numpy(), 1.0, keys)
    assert outcomes.tasks_repeat and outcomes.tasks.max() + 1 == 12
    np.testing.assert_array_equal(outcomes.tasks, task_labels(keys))
    report, tasks = multi_trial_readout(outcomes, uncertainty=u, n_boot=50, seed=3)
    expected, expected_tasks = multi_trial_report(rows.assign(u=u), uncertainty="u", n_boot=50, seed=3)
    assert json.dumps(report, sort_keys=True) == json.dumps(expected, sort_keys=True)
    pd.testing.assert_frame_equal(tasks, expected_tasks)
    assert report["n_dropped"] == 1 and report["soft_labels"]["n"] == len(rows) - 2

    flipped = Outcomes(outcomes.reward, ~outcomes.failed, outcomes.threshold, outcomes.keys, outcomes.tasks)
    flipped_report, _ = multi_trial_readout(flipped, n_boot=0)  # the labels carried are read as they are
    finite = np.isfinite(outcomes.reward)
    assert flipped_report["mean_task_success_rate"] == pytest.approx(
        pd.Series(outcomes.failed[finite]).groupby(outcomes.tasks[finite]).mean().mean(), rel=1e-12)


def test_outcomes_carry_their_tasks_to_a_resample():
    from agentuq_nb.records.outcomes import Outcomes

    rows = trial_rows(n_tasks=5, trials=2, seed=2)
    outcomes = Outcomes.of(rows["reward"].to_numpy(), 1.0, rows[["domain", "task_id", "trial", "seed"]])
    taken = outcomes.take(np.array([9, 0, 1]))
    np.testing.assert_array_equal(taken.tasks, outcomes.tasks[[9, 0, 1]])
    assert taken.tasks_repeat and not outcomes.take(np.array([0, 2, 4])).tasks_repeat
    assert Outcomes.of(rows["reward"].to_numpy(), 1.0).tasks is None  # no keys: no tasks, none repeat
