"""Conformal toolkit API: definitions, edge cases, and agreement with crepes / MAPIE / statsmodels."""
import math
import warnings

import numpy as np
import pytest

from agentuq_nb.evaluation import (
    aci,
    bh,
    bh_adjusted,
    conformal_quantile,
    coverage_report,
    pipeline_bounds,
    risk_control_threshold,
    split_interval,
)
from agentuq_nb.evaluation.conformal import fixed_sequence_rejections


def cal_test(seed, n_cal=200, n_test=50):
    rng = np.random.default_rng(seed)
    cal_pred = rng.normal(size=n_cal)
    cal_true = cal_pred + rng.standard_t(3, size=n_cal)
    return cal_pred, cal_true, rng.normal(size=n_test)


# --------------------------------------------------------------------------- split conformal
def test_split_interval_is_the_conformal_order_statistic():
    cp, ct, tp = cal_test(0, n_cal=19)
    scores = np.sort(np.abs(ct - cp))
    lo, hi = split_interval(cp, ct, tp, alpha=0.1)
    k = math.ceil(0.9 * 20)                               # = 18th smallest of 19
    np.testing.assert_allclose(hi - tp, scores[k - 1])
    np.testing.assert_allclose(tp - lo, scores[k - 1])
    # alpha(n+1) integer: 0.1 * 100 = 10 -> rank ceil(0.9 * 100) = 90, not 91
    cp, ct, tp = cal_test(1, n_cal=99)
    lo, hi = split_interval(cp, ct, tp, alpha=0.1)
    np.testing.assert_allclose(hi - tp, np.sort(np.abs(ct - cp))[89])
    # too few points for the level -> infinite
    lo, hi = split_interval(cp[:5], ct[:5], tp, alpha=0.1)
    assert np.all(np.isinf(lo)) and np.all(np.isinf(hi)) and np.all(lo < 0)
    assert conformal_quantile([], 0.1) == math.inf


def test_split_interval_agrees_with_crepes_standard_and_mondrian():
    crepes = pytest.importorskip("crepes")
    cp, ct, tp = cal_test(2, n_cal=300, n_test=80)
    lo, hi = split_interval(cp, ct, tp, alpha=0.1)          # 0.1 * 301 not an integer
    iv = crepes.ConformalRegressor().fit(ct - cp).predict_int(tp, confidence=0.9)
    np.testing.assert_allclose(np.c_[lo, hi], iv, atol=1e-12)

    rng = np.random.default_rng(3)
    g = rng.permutation(np.repeat([0, 1, 2], [97, 101, 102]))
    tg = rng.integers(0, 3, size=80)
    lo, hi = split_interval(cp, ct, tp, alpha=0.2, groups=g, test_groups=tg)
    iv = crepes.ConformalRegressor().fit(ct - cp, bins=g).predict_int(tp, bins=tg, confidence=0.8)
    counts = np.bincount(g)
    assert all((0.2 * (c + 1)) % 1 > 1e-6 for c in counts)   # avoid crepes' float-floor case
    np.testing.assert_allclose(np.c_[lo, hi], iv, atol=1e-12)


def test_crepes_differences_that_justify_the_hand_version():
    crepes = pytest.importorskip("crepes")
    cp, ct, tp = cal_test(4, n_cal=99, n_test=3)
    scores = np.sort(np.abs(ct - cp))
    iv = crepes.ConformalRegressor().fit(ct - cp).predict_int(tp, confidence=0.9)
    lo, hi = split_interval(cp, ct, tp, alpha=0.1)
    np.testing.assert_allclose(hi - tp, scores[89])           # ceil(0.9 * 100) = 90th
    np.testing.assert_allclose(iv[:, 1] - tp, scores[90])     # crepes: int(9.999...) -> 91st
    # an unseen Mondrian category: crepes returns [0, 0], we return (-inf, inf)
    g = np.zeros(99, dtype=int)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        iv = crepes.ConformalRegressor().fit(ct - cp, bins=g).predict_int(
            tp, bins=np.array([0, 1, 1]), confidence=0.8)
    lo, hi = split_interval(cp, ct, tp, 0.2, groups=g, test_groups=np.array([0, 1, 1]))
    assert np.all(iv[1:] == 0.0)
    assert np.all(np.isinf(lo[1:])) and np.all(np.isinf(hi[1:]))


def test_split_interval_agrees_with_mapie():
    mapie_regression = pytest.importorskip("mapie.regression")
    from sklearn.base import BaseEstimator, RegressorMixin

    class Identity(RegressorMixin, BaseEstimator):
        """A 'model' whose prediction is its only feature, so MAPIE sees our predictions."""

        def fit(self, X, y=None):
            self.n_features_in_ = 1
            self.fitted_ = True
            return self

        def predict(self, X):
            return np.asarray(X, dtype=float)[:, 0]

    cp, ct, tp = cal_test(5, n_cal=250, n_test=40)
    for alpha in (0.05, 0.1, 0.3):
        reg = mapie_regression.SplitConformalRegressor(
            Identity().fit(cp[:, None]), confidence_level=1 - alpha, prefit=True)
        reg.conformalize(cp[:, None], ct)
        _, iv = reg.predict_interval(tp[:, None])
        lo, hi = split_interval(cp, ct, tp, alpha)
        np.testing.assert_allclose(lo, iv[:, 0, 0], atol=1e-12)
        np.testing.assert_allclose(hi, iv[:, 1, 0], atol=1e-12)


def test_split_interval_input_errors():
    with pytest.raises(ValueError, match="alpha"):
        split_interval([0, 1], [0, 1], [0], alpha=1.5)
    with pytest.raises(ValueError, match="both groups"):
        split_interval([0, 1], [0, 1], [0], alpha=0.1, groups=[0, 1])
    with pytest.raises(ValueError, match="NaN"):
        split_interval([0, np.nan], [0, 1], [0], alpha=0.1)


# --------------------------------------------------------------------------- ACI
def test_aci_update_rule_step_by_step():
    pred = np.zeros(8)
    true = np.array([1.0, 2.0, 3.0, 0.5, 10.0, 0.1, 0.2, 5.0])
    alpha, gamma, warmup = 0.2, 0.1, 3
    lo, hi, a = aci(pred, true, alpha, gamma, warmup)
    assert np.all(np.isnan(lo[:warmup])) and np.all(a[:warmup] == alpha)
    # replay by hand
    a_t, past = alpha, sorted(np.abs(true[:warmup]).tolist())
    for t in range(warmup, len(true)):
        assert a[t] == pytest.approx(a_t)
        m = len(past)
        k = math.ceil((1 - a_t) * (m + 1) - 1e-9)
        q = math.inf if k > m else past[k - 1]
        assert hi[t] == pytest.approx(q) and lo[t] == pytest.approx(-q)
        err = float(abs(true[t]) > q)
        a_t += gamma * (alpha - err)
        past = sorted(past + [abs(true[t])])


def test_aci_extreme_levels_and_window():
    true = np.arange(25.0) ** 2                # every new residual exceeds all past ones
    lo, hi, a = aci(np.zeros(25), true, alpha=0.1, gamma=0.5, warmup=5)
    # misses push alpha_t below 0 -> infinite intervals, which always cover
    assert np.any(a < 0) and np.all(np.isinf(hi[a < 0])) and np.all(np.isinf(lo[a < 0]))
    assert np.isinf(hi[5])                     # 5 past scores: ceil(0.9 * 6) = 6 > 5
    assert np.isfinite(hi[6]) and hi[6] == 25.0  # 6 past: 6th smallest = 5^2
    lo, hi, a = aci(np.zeros(30), np.zeros(30), alpha=0.5, gamma=0.4, warmup=2)
    # always covered -> alpha_t grows past 1 -> empty sets (lo > hi), which never cover
    assert np.any(a >= 1) and np.all(lo[a >= 1] > hi[a >= 1])
    y = np.r_[np.ones(50) * 10, np.ones(50) * 0.1]
    _, hi_all, _ = aci(np.zeros(100), y, 0.1, 0.001, 10)
    _, hi_win, _ = aci(np.zeros(100), y, 0.1, 0.001, 10, window=20)
    assert hi_win[-1] == pytest.approx(0.1) and hi_all[-1] == pytest.approx(10)


# --------------------------------------------------------------------------- BH, bounds
def test_bh_matches_hand_step_up_and_statsmodels():
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = np.r_[rng.uniform(size=30), rng.uniform(size=10) * 0.01]
        q = 0.1
        m = p.size
        ps = np.sort(p)
        below = np.flatnonzero(ps <= q * np.arange(1, m + 1) / m)
        cutoff = ps[below.max()] if below.size else -1
        np.testing.assert_array_equal(bh(p, q), p <= cutoff)
    adj = bh_adjusted([0.01, 0.04, 0.03, np.nan])
    assert np.isnan(adj[3]) and adj[0] == pytest.approx(0.03)
    assert list(bh([0.001, np.nan, 0.9], 0.05)) == [True, False, False]


def test_pipeline_bounds():
    ind, worst = pipeline_bounds([3.0, 4.0])
    assert ind == pytest.approx(5.0) and worst == pytest.approx(7.0)
    rng = np.random.default_rng(1)
    s = rng.uniform(0, 2, size=6)
    ind, worst = pipeline_bounds(s)
    assert ind <= worst
    # independent stage errors: simulated std of the sum matches sqrt(sum sigma^2)
    sims = rng.normal(size=(200_000, 6)) * s
    assert sims.sum(axis=1).std() == pytest.approx(ind, rel=0.01)
    # perfectly correlated errors reach the worst case
    z = rng.normal(size=200_000)[:, None] * s
    assert z.sum(axis=1).std() == pytest.approx(worst, rel=0.01)
    with pytest.raises(ValueError):
        pipeline_bounds([1.0, -1.0])


# --------------------------------------------------------------------------- risk control
def test_fixed_sequence_matches_mapie_control_fwer():
    risk_control = pytest.importorskip("mapie.risk_control")
    rng = np.random.default_rng(2)
    for _ in range(100):
        p = np.sort(rng.uniform(size=20) ** 3)[rng.permutation(20)] * rng.uniform(0.1, 1)
        ours = np.flatnonzero(fixed_sequence_rejections(p, 0.1))
        theirs = risk_control.control_fwer(p, 0.1, fwer_method="fixed_sequence")
        np.testing.assert_array_equal(ours, theirs)


def test_risk_control_threshold_diagnostics():
    rng = np.random.default_rng(0)
    u = rng.uniform(size=600)
    fail = rng.uniform(size=600) < 1.35 * u ** 2
    res = risk_control_threshold(u, fail, alpha=0.15, delta=0.1)
    cand = res["candidates"]
    assert res["feasible"] and res["threshold"] in set(cand["threshold"])
    # p-values are binomial tails, rejections a prefix, threshold the last rejected candidate
    from scipy import stats
    np.testing.assert_allclose(
        cand["p_value"], stats.binom.cdf(cand["n_failures"], cand["n_accepted"], 0.15))
    rej = cand["rejected"].to_numpy()
    assert rej[: rej.sum()].all() and not rej[rej.sum():].any()
    assert cand.loc[rej, "p_value"].max() <= 0.1
    assert res["threshold"] == cand.loc[rej, "threshold"].max()
    accepted = u <= res["threshold"]
    assert res["n_accepted"] == accepted.sum()
    assert res["empirical_risk"] == pytest.approx(fail[accepted].mean())
    assert res["coverage"] == pytest.approx(accepted.mean())
    assert cand["n_accepted"].min() >= max(res["min_accepted"], 60)


def test_risk_control_infeasible_and_ties():
    u = np.linspace(0, 1, 100)
    res = risk_control_threshold(u, np.ones(100, dtype=bool), alpha=0.1, delta=0.1)
    assert res["threshold"] is None and not res["feasible"] and res["coverage"] == 0.0
    # ties: a threshold accepts the whole tie block
    u = np.repeat(np.arange(10.0), 30)
    res = risk_control_threshold(u, np.zeros(300, dtype=bool), alpha=0.1, delta=0.1)
    assert res["threshold"] == 9.0 and res["n_accepted"] == 300
    assert list(res["candidates"]["n_accepted"]) == list(range(30, 301, 30))


# --------------------------------------------------------------------------- coverage report
def test_coverage_report():
    lo = np.array([0, 0, 0, -np.inf, np.nan])
    hi = np.array([1, 1, 1, np.inf, np.nan])
    y = np.array([0.5, 2.0, 1.0, 7.0, 0.0])
    rep = coverage_report(lo, hi, y, alpha=0.1, groups=["a", "a", "b", "b", "b"])
    overall = rep.iloc[0]
    assert overall["group"] == "all" and overall["n"] == 4 and overall["covered"] == 3
    assert overall["coverage"] == 0.75 and overall["nominal"] == pytest.approx(0.9)
    assert overall["n_infinite"] == 1 and overall["mean_width"] == 1.0
    assert overall["coverage_lo"] < 0.75 < overall["coverage_hi"]
    by = rep.set_index("group")
    assert by.loc["a", "coverage"] == 0.5 and by.loc["b", "coverage"] == 1.0
