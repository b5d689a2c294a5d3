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
