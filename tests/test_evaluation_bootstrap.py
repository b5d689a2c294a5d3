"""Paired bootstrap comparison of two estimators (the estimator table's p-value column)."""
import json

import numpy as np
import pytest

from agentuq_nb.evaluation import failure_metrics, paired_bootstrap_pvalue
from agentuq_nb.evaluation.bootstrap import percentile_ci


def signal_data(seed, n=200, strength_a=1.5, strength_b=1.5):
    rng = np.random.default_rng(seed)
    reward = (rng.uniform(size=n) < 0.55).astype(float)
    fail = reward < 1
    a = strength_a * fail + rng.normal(size=n)
    b = strength_b * fail + rng.normal(size=n)
    return a, b, reward


def test_identical_estimators_have_zero_difference_and_p_one():
    a, _, r = signal_data(0)
    out = paired_bootstrap_pvalue(a, a, r, metric="auroc", n_boot=200)
    assert out["diff"] == 0.0 and out["p_value"] == 1.0
    assert out["ci"] == [0.0, 0.0]
    json.dumps(out)


@pytest.mark.parametrize("metric", ["auroc", "auarc", "aurc", "prr", "spearman", "kendall"])
def test_better_estimator_is_detected(metric):
    a, b, r = signal_data(1, strength_a=2.0, strength_b=0.0)
    out = paired_bootstrap_pvalue(a, b, r, metric=metric, n_boot=400, seed=3)
    single_a = failure_metrics(a, r, n_boot=1)["metrics"][metric]
    single_b = failure_metrics(b, r, n_boot=1)["metrics"][metric]
    assert out["a"] == pytest.approx(single_a) and out["b"] == pytest.approx(single_b)
    assert out["diff"] == pytest.approx(single_a - single_b)
    assert out["p_value"] < 0.01
    lo, hi = out["ci"]
    assert (lo > 0) if metric != "aurc" else (hi < 0)       # AURC: lower is better


def test_symmetry_and_invert_flags():
    a, b, r = signal_data(2, strength_a=1.0, strength_b=0.6)
    ab = paired_bootstrap_pvalue(a, b, r, n_boot=300, seed=1)
    ba = paired_bootstrap_pvalue(b, a, r, n_boot=300, seed=1)
    assert ab["diff"] == pytest.approx(-ba["diff"])
    assert ab["p_value"] == pytest.approx(ba["p_value"])
    inv = paired_bootstrap_pvalue(-a, b, r, invert_a=True, n_boot=300, seed=1)
    assert inv["diff"] == pytest.approx(ab["diff"]) and inv["p_value"] == ab["p_value"]


def test_null_rejection_rate_is_near_nominal():
    """Two exchangeable estimators: p < 0.05 in about 5% of datasets (bootstrap is approximate)."""
    pvals = []
    for seed in range(150):
        a, b, r = signal_data(1000 + seed, n=120, strength_a=1.0, strength_b=1.0)
        pvals.append(paired_bootstrap_pvalue(a, b, r, n_boot=200, seed=seed)["p_value"])
    pvals = np.array(pvals)
    assert np.mean(pvals < 0.05) <= 0.10
    assert 0.3 < np.mean(pvals) < 0.7                      # roughly uniform, not stuck at 0 or 1


def test_undefined_and_dropped_rows():
    u = np.linspace(0, 1, 10)
    out = paired_bootstrap_pvalue(u, u[::-1], np.ones(10), n_boot=50)
    assert out["p_value"] is None and "one class" in out["undefined"]
    r = np.array([1, 0, 1, 0, 1, 0, 1, 0], dtype=float)
    a = np.array([0.1, 0.9, np.nan, 0.8, 0.2, 0.7, 0.3, 0.6])
    b = np.array([0.5, 0.4, 0.3, np.inf, 0.2, 0.1, 0.9, 0.8])
    out = paired_bootstrap_pvalue(a, b, r, n_boot=100)
    assert out["n"] == 6 and out["n_dropped"] == 2
    with pytest.raises(ValueError, match="unknown metric"):
        paired_bootstrap_pvalue(a, b, r, metric="brier")


def test_percentile_ci_needs_two_finite_samples():
    assert percentile_ci(np.array([np.nan, 1.0])) is None
    assert percentile_ci(np.array([0.0, 1.0, np.nan]), ci=0.5) == [0.25, 0.75]


# --------------------------------------------------------------------------- task-clustered bootstrap
def copies_fixture(n_tasks=40, copies=3, seed=0):
    """One trajectory per task (uncertainty ascending, distinct), and the same with each task's
    trajectory repeated ``copies`` times: identical trials."""
    rng = np.random.default_rng(seed)
    u1 = rng.normal(size=n_tasks)
    r1 = (rng.uniform(size=n_tasks) < 0.5).astype(float)
    u1 = u1 + 1.0 * (r1 < 1)
    order = np.argsort(u1)  # canonical order = input order: task g is drawn by the same integer in both schemes
    u1, r1 = u1[order], r1[order]
    tasks = np.repeat(np.arange(n_tasks), copies)
    return u1, r1, np.repeat(u1, copies), np.repeat(r1, copies), tasks


def test_cluster_bootstrap_of_identical_copies_is_the_bootstrap_of_one_copy_and_wider_than_naive():
    u1, r1, u3, r3, tasks = copies_fixture()
    one = failure_metrics(u1, r1, n_boot=400, seed=1)
    clustered = failure_metrics(u3, r3, n_boot=400, seed=1, groups=tasks)
    naive = failure_metrics(u3, r3, n_boot=400, seed=1)
    # metrics that do not change when every trajectory is repeated: the same resamples give the same CI
    for name in ("auroc", "pearson", "spearman"):
        np.testing.assert_allclose(clustered["ci"][name], one["ci"][name], rtol=1e-12, err_msg=name)
    width = {k: np.diff(v["ci"]["auroc"])[0] for k, v in (("clustered", clustered), ("naive", naive))}
    assert width["clustered"] > 1.4 * width["naive"]  # ~sqrt(3) wider: 3 copies carry one task's information
    assert clustered["bootstrap"]["method"] == "percentile, resampling tasks (clusters)"
    assert clustered["bootstrap"]["n_clusters"] == 40
    assert naive["bootstrap"]["method"] == "percentile" and "n_clusters" not in naive["bootstrap"]


def test_every_cluster_resample_holds_whole_tasks_and_its_size_varies():
    from agentuq_nb.evaluation.bootstrap import cluster_codes, resample_batches

    sizes = np.array([1, 2, 3, 5, 1, 4])
    tasks = np.repeat(np.array(["t0", "t1", "t2", "t3", "t4", "t5"]), sizes)
    rng = np.random.default_rng(0)
    tasks = tasks[rng.permutation(tasks.size)]  # a task's rows need not be adjacent
    codes = cluster_codes(tasks, tasks.size)
    seen, lengths = np.zeros(50, dtype=bool), set()
    for positions, idx in resample_batches(tasks.size, 50, seed=3, codes=codes):
        assert not seen[positions].any()
        seen[positions] = True
        for row in idx:
            lengths.add(row.size)
            assert np.all(np.diff(row) >= 0)  # sorted
            counts = np.bincount(row, minlength=tasks.size)
            for t in np.unique(tasks):
                assert np.unique(counts[tasks == t]).size == 1, "a task is taken partly"
            drawn = sum(counts[tasks == t][0] for t in np.unique(tasks))
            assert drawn == 6  # six tasks drawn per resample
    assert seen.all() and len(lengths) > 3


@pytest.mark.parametrize("reward_kind", ["binary", "continuous"])
def test_cluster_bootstrap_equals_an_explicit_index_reference(reward_kind):
    """Each resample equals point_metrics on the trajectories of the drawn tasks (drawn with
    replacement, all trials each), taken from the same seeded draws."""
    from agentuq_nb.evaluation.bootstrap import bootstrap_samples
    from agentuq_nb.evaluation.metrics import METRICS, point_metrics
    from agentuq_nb.records.outcomes import Outcomes

    rng = np.random.default_rng(7)
    tasks = rng.integers(0, 15, size=45).astype(str)
    u = np.round(rng.normal(size=45), 1)  # ties
    r = (rng.uniform(size=45) < 0.5).astype(float)
    if reward_kind == "continuous":
        r = np.where(r < 1, rng.uniform(size=45), 1.0)
    samples = bootstrap_samples(u, Outcomes.of(r, 1.0), METRICS, n_boot=25, seed=11, groups=tasks)
    labels = np.unique(tasks)  # cluster k = the k-th task label in sorted order
    drawn = np.random.default_rng(11).integers(0, labels.size, size=(25, labels.size))
    for b in range(25):
        rows = np.sort(np.concatenate([np.flatnonzero(tasks == labels[k]) for k in drawn[b]]))
        vals, _ = point_metrics(u[rows], Outcomes.of(r[rows], 1.0), METRICS)
        for name in METRICS:
            expected = np.nan if vals[name] is None else vals[name]
            np.testing.assert_allclose(samples[name][b], expected, atol=1e-9, err_msg=name)


def test_unique_groups_are_the_trajectory_bootstrap_bit_for_bit_and_seeds_matter():
    a, b, r = signal_data(4, n=120)
    plain = failure_metrics(a, r, n_boot=200, seed=2)
    unique = failure_metrics(a, r, n_boot=200, seed=2, groups=np.arange(120).astype(str))
    assert unique["ci"] == plain["ci"] and unique["bootstrap"]["method"] == "percentile"
    assert unique["bootstrap"]["n_clusters"] == 120
    tasks = np.arange(120) // 3
    p_plain = paired_bootstrap_pvalue(a, b, r, n_boot=200, seed=2)
    p_unique = paired_bootstrap_pvalue(a, b, r, n_boot=200, seed=2, groups=np.arange(120))
    assert {k: v for k, v in p_unique.items() if k != "n_clusters"} == p_plain
    again = failure_metrics(a, r, n_boot=200, seed=2, groups=tasks)
    assert again == failure_metrics(a, r, n_boot=200, seed=2, groups=tasks)
    assert again["ci"] != failure_metrics(a, r, n_boot=200, seed=3, groups=tasks)["ci"]


def test_cluster_bootstrap_does_not_depend_on_the_rows_order():
    """The same trajectories in another order (``evaluate`` reads an estimator's rows merged with the
    rewards, ``compare-estimators`` in the score table's order) draw the same tasks from one seed: the
    same intervals, and the same paired p-value."""
    a, b, r = signal_data(8, n=90)
    tasks = np.array([f"task_{k}" for k in np.random.default_rng(8).integers(0, 30, size=90)])
    shuffled = np.random.default_rng(9).permutation(90)
    first = failure_metrics(a, r, n_boot=300, seed=4, groups=tasks)
    second = failure_metrics(a[shuffled], r[shuffled], n_boot=300, seed=4, groups=tasks[shuffled])
    for name in ("auroc", "auarc_tie_mean", "aurc", "prr", "pearson", "spearman", "kendall"):
        np.testing.assert_allclose(second["ci"][name], first["ci"][name], rtol=1e-12, err_msg=name)
    p_first = paired_bootstrap_pvalue(a, b, r, n_boot=300, seed=4, groups=tasks)
    p_second = paired_bootstrap_pvalue(a[shuffled], b[shuffled], r[shuffled], n_boot=300, seed=4,
                                       groups=tasks[shuffled])
    assert p_second["p_value"] == p_first["p_value"]
    np.testing.assert_allclose(p_second["ci"], p_first["ci"], rtol=1e-12)


def test_paired_cluster_bootstrap_widens_on_identical_copies():
    a1, b1, r1 = signal_data(5, n=40, strength_a=1.3, strength_b=0.8)
    a3, b3, r3 = (np.repeat(x, 3) for x in (a1, b1, r1))
    tasks = np.repeat(np.arange(40), 3)
    naive = paired_bootstrap_pvalue(a3, b3, r3, n_boot=400, seed=1)
    clustered = paired_bootstrap_pvalue(a3, b3, r3, n_boot=400, seed=1, groups=tasks)
    assert clustered["n_clusters"] == 40 and clustered["diff"] == pytest.approx(naive["diff"])
    assert np.diff(clustered["ci"])[0] > 1.4 * np.diff(naive["ci"])[0]
    assert clustered["p_value"] > 2 * naive["p_value"]
    # the paired test resamples input positions: task k is drawn by the same integer as row k of one copy
    one = paired_bootstrap_pvalue(a1, b1, r1, n_boot=400, seed=1)
    assert clustered["p_value"] == one["p_value"]
    np.testing.assert_allclose(clustered["ci"], one["ci"], rtol=1e-12)


def test_groups_are_checked_and_follow_dropped_rows():
    u = np.array([0.1, np.nan, 0.3, 0.4, 0.2, 0.9])
    r = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="groups has 5 labels but there are 6 rows"):
        failure_metrics(u, r, groups=["a"] * 5)
    with pytest.raises(ValueError, match="missing label"):
        failure_metrics(u, r, groups=["a", "b", None, "c", "c", "d"])
    # the dropped row (NaN uncertainty) was task "b"'s only one: 4 tasks remain among 5 rows
    out = failure_metrics(u, r, n_boot=50, groups=[("x", "a"), ("x", "b"), ("x", "c"), ("x", "c"), ("y", "c"), ("x", "d")])
    assert out["n"] == 5 and out["bootstrap"]["n_clusters"] == 4
