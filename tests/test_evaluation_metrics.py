"""Failure-prediction metrics against independent, loop-based computations."""
import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from agentuq_nb.evaluation import (
    METRICS,
    UndefinedMetricError,
    auarc,
    auarc_tie_mean,
    aurc,
    auroc,
    failure_curves,
    failure_metrics,
    prr,
)
from agentuq_nb.evaluation.metrics import (
    SortedBatch,
    kendall_batch,
    kendall_weighted,
    metrics_batch,
)

# --------------------------------------------------------------------------- references
# Plain-Python definitions, written from the definitions (not from the package's code).

def ref_auroc(u, f):
    pos = [a for a, y in zip(u, f) if y]
    neg = [a for a, y in zip(u, f) if not y]
    s = 0.0
    for a in pos:
        for b in neg:
            s += 1.0 if a > b else 0.5 if a == b else 0.0
    return s / (len(pos) * len(neg))


def ref_auarc(u, f):
    n = len(u)
    order = sorted(range(n), key=lambda i: -u[i])        # Python's sort is stable
    acc = []
    for k in range(n + 1):
        kept = order[k:]
        acc.append(sum(0 if f[i] else 1 for i in kept) / len(kept) if kept else 1.0)
    return sum((acc[k] + acc[k + 1]) / 2 * (1 / n) for k in range(n))


def ref_expected_risks(u, f):
    """E[failures among the k lowest] / k with ties entered in random order, by blocks."""
    n = len(u)
    values = sorted(set(u))
    risks = []
    for k in range(1, n + 1):
        taken, fails = 0, 0.0
        for v in values:
            block = [i for i in range(n) if u[i] == v]
            nf = sum(1 for i in block if f[i])
            if taken + len(block) <= k:
                taken += len(block)
                fails += nf
            else:
                fails += (k - taken) * nf / len(block)
                break
        risks.append(fails / k)
    return risks


def ref_aurc(u, f):
    r = ref_expected_risks(u, f)
    return sum(r) / len(r)


def lm_polygraph_pra(ue, quality):
    """LM-Polygraph's PredictionRejectionArea with max_rejection = 1 (ascending uncertainty)."""
    ue = np.asarray(ue, dtype=float)
    n = len(ue)
    sorted_q = np.asarray(quality, dtype=float)[np.argsort(ue, kind="stable")]
    cumsum = np.cumsum(sorted_q)
    scores = (cumsum / np.arange(1, n + 1))[::-1]
    return float(np.sum(scores) / n)


def ref_prr_no_ties(u, f):
    q = 1.0 - np.asarray(f, dtype=float)
    unc = lm_polygraph_pra(u, q)
    oracle = lm_polygraph_pra(-q, q)
    rnd = float(q.mean())
    return (unc - rnd) / (oracle - rnd)


def ref_avg_ranks(x):
    n = len(x)
    ranks = []
    for i in range(n):
        less = sum(1 for j in range(n) if x[j] < x[i])
        eq = sum(1 for j in range(n) if x[j] == x[i])
        ranks.append(less + (eq + 1) / 2)
    return ranks


def ref_pearson(x, y):
    n = len(x)
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    return sxy / math.sqrt(sxx * syy)


def ref_kendall_b(x, y):
    n = len(x)
    s = n1 = n2 = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = float(x[i] - x[j]), float(y[i] - y[j])
            s += ((dx > 0) - (dx < 0)) * ((dy > 0) - (dy < 0))
            n1 += dx == 0
            n2 += dy == 0
    n0 = n * (n - 1) / 2
    return s / math.sqrt((n0 - n1) * (n0 - n2))


def random_data(seed, n, n_levels=None, tie_decimals=1, partial_reward=False):
    rng = np.random.default_rng(seed)
    fail_p = rng.uniform(0.2, 0.8)
    if partial_reward:
        reward = np.round(rng.uniform(size=n), 1)
        reward[rng.uniform(size=n) < 0.4] = 1.0
    else:
        reward = (rng.uniform(size=n) > fail_p).astype(float)
    u = rng.normal(size=n) + 0.7 * (reward < 1)
    if tie_decimals is not None:
        u = np.round(u, tie_decimals)                       # plenty of ties
    return u, reward


# --------------------------------------------------------------------------- point metrics
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("partial", [False, True])
def test_every_metric_matches_independent_computation(seed, partial):
    u, r = random_data(seed, 60 + 17 * seed, partial_reward=partial)
    f = r < 1.0
    out = failure_metrics(u, r, n_boot=50, seed=seed)
    m = out["metrics"]
    assert m["auroc"] == pytest.approx(ref_auroc(u, f), abs=1e-9)
    assert m["auarc"] == pytest.approx(ref_auarc(list(u), list(f)), abs=1e-9)
    assert m["aurc"] == pytest.approx(ref_aurc(list(u), list(f)), abs=1e-9)
    # PRR from the same expected risks: (AURC_rnd - AURC) / (AURC_rnd - AURC_oracle)
    n, nf = len(u), int(f.sum())
    oracle = sum(max(k - (n - nf), 0) / k for k in range(1, n + 1)) / n
    expected_prr = (nf / n - ref_aurc(list(u), list(f))) / (nf / n - oracle)
    assert m["prr"] == pytest.approx(expected_prr, abs=1e-9)
    neg_r = list(-r)
    assert m["pearson"] == pytest.approx(ref_pearson(list(u), neg_r), abs=1e-9)
    assert m["spearman"] == pytest.approx(
        ref_pearson(ref_avg_ranks(list(u)), ref_avg_ranks(neg_r)), abs=1e-9)
    assert m["kendall"] == pytest.approx(ref_kendall_b(list(u), neg_r), abs=1e-9)
    assert out["n"] == n and out["n_failures"] == nf and out["undefined"] == {}


@pytest.mark.parametrize("seed", range(4))
def test_prr_equals_lm_polygraph_without_ties(seed):
    u, r = random_data(seed, 80, tie_decimals=None)
    f = r < 1
    assert prr(u, f) == pytest.approx(ref_prr_no_ties(u, f), abs=1e-9)
    # and PRA = 1 - AURC
    assert 1 - aurc(u, f) == pytest.approx(lm_polygraph_pra(u, 1.0 - f), abs=1e-9)


def test_tie_averaged_aurc_is_the_mean_over_all_tie_orders():
    """AURC with ties = average of the plain AURC over every order of the tied items."""
    u = [0.1, 0.3, 0.3, 0.3, 0.5, 0.5, 0.9]
    f = [0, 1, 0, 0, 1, 0, 1]
    n = len(u)

    def plain_aurc(order):
        fails, total = 0, 0.0
        for k, i in enumerate(order, start=1):
            fails += f[i]
            total += fails / k
        return total / n

    orders = [p for p in itertools.permutations(range(n))
              if all(u[p[i]] <= u[p[i + 1]] for i in range(n - 1))]
    assert len(orders) == 3 * 2 * 1 * 2                     # 3! x 2! tie orders
    expected = sum(plain_aurc(o) for o in orders) / len(orders)
    assert aurc(u, f) == pytest.approx(expected, abs=1e-12)
    ref_prr = np.mean([
        (sum(f) / n - plain_aurc(o)) for o in orders])      # numerator averaged the same way
    oracle = sum(max(k - (n - sum(f)), 0) / k for k in range(1, n + 1)) / n
    assert prr(u, f) == pytest.approx(ref_prr / (sum(f) / n - oracle), abs=1e-12)


def test_auarc_follows_agentuq_stable_order_on_ties():
    # all tied: AgentUQ rejects in input order; the result depends on where the failure sits
    assert auarc([1, 1, 1], [1, 0, 0]) == pytest.approx(ref_auarc([1, 1, 1], [1, 0, 0]))
    assert auarc([1, 1, 1], [1, 0, 0]) != pytest.approx(auarc([1, 1, 1], [0, 0, 1]))
    # by hand: successes [1, 0, 1] rejected in input order -> acc = [2/3, 1/2, 1, 1(k=n)]
    assert auarc([1, 1, 1], [0, 1, 0]) == pytest.approx(
        ((2 / 3 + 1 / 2) / 2 + (1 / 2 + 1) / 2 + (1 + 1) / 2) / 3)


def ref_auarc_tie_mean(u, f):
    """Mean of AgentUQ's AUARC over every reordering of the input (only tied rows change its value)."""
    perms = list(itertools.permutations(range(len(u))))
    return sum(ref_auarc([u[i] for i in p], [f[i] for i in p]) for p in perms) / len(perms)


@pytest.mark.parametrize("u,f", [
    ([1, 1, 1], [1, 0, 0]),
    ([0.2, 0.5, 0.5, 0.5, 0.9, 0.9], [0, 1, 0, 0, 1, 0]),
    ([3, 1, 3, 2, 1, 3], [1, 0, 0, 1, 1, 0]),
])
def test_auarc_tie_mean_is_the_mean_over_all_orders_of_ties(u, f):
    expected = ref_auarc_tie_mean(u, f)
    assert auarc_tie_mean(u, f) == pytest.approx(expected, abs=1e-12)
    assert metrics_batch([u], [f], [[1.0 - x for x in f]], names=("auarc_tie_mean",))["auarc_tie_mean"][0] == \
        pytest.approx(expected, abs=1e-12)
    # the same on any input order, while AgentUQ's AUARC moves with it
    rng = np.random.default_rng(0)
    values = set()
    for _ in range(5):
        p = rng.permutation(len(u))
        assert auarc_tie_mean([u[i] for i in p], [f[i] for i in p]) == pytest.approx(expected, abs=1e-12)
        values.add(round(auarc([u[i] for i in p], [f[i] for i in p]), 12))
    assert len(values) > 1


def test_auarc_tie_mean_equals_agentuq_auarc_without_ties():
    rng = np.random.default_rng(3)
    u, f = rng.normal(size=40), rng.random(40) < 0.4
    assert auarc_tie_mean(u, f) == pytest.approx(ref_auarc(list(u), list(f)), abs=1e-12)


def test_point_functions_raise_with_reason_when_undefined():
    with pytest.raises(UndefinedMetricError, match="one class"):
        auroc([0.1, 0.2, 0.3], [0, 0, 0])
    with pytest.raises(UndefinedMetricError, match="one class"):
        prr([0.1, 0.2, 0.3], [1, 1, 1])
    with pytest.raises(UndefinedMetricError, match="fewer than 2"):
        aurc([0.1], [1])


def test_invert_negates_confidence_scores():
    u, r = random_data(3, 50)
    a = failure_metrics(u, r, n_boot=10)["metrics"]
    b = failure_metrics(-u, r, invert=True, n_boot=10)["metrics"]
    for name in ("auroc", "aurc", "prr", "pearson", "spearman", "kendall"):
        assert a[name] == pytest.approx(b[name], abs=1e-12)


# --------------------------------------------------------------------------- report shape
def test_report_shape_and_json():
    u, r = random_data(0, 40)
    out = failure_metrics(u, r, n_boot=100)
    assert set(out["metrics"]) == set(METRICS) == set(out["ci"])
    assert {"metrics", "ci", "n", "n_failures", "undefined"} <= set(out)
    json.dumps(out)                                           # serializable as is
    assert out["bootstrap"]["n_boot"] == 100


@pytest.mark.parametrize("reward", [[1.0] * 8, [0.0] * 8])
def test_one_class_rewards_give_none_with_reason(reward):
    u = np.linspace(0, 1, 8)
    out = failure_metrics(u, reward, n_boot=50)
    for name in ("auroc", "prr", "pearson", "spearman", "kendall"):
        assert out["metrics"][name] is None
        assert out["ci"][name] is None
        assert isinstance(out["undefined"][name], str) and out["undefined"][name]
    assert "one class" in out["undefined"]["auroc"]
    assert "constant" in out["undefined"]["kendall"]
    # AUARC/AURC are still well-defined areas (accuracy/risk do not depend on the ranking)
    expected_aurc = 1.0 if reward[0] == 0.0 else 0.0
    assert out["metrics"]["aurc"] == pytest.approx(expected_aurc)
    assert out["n_failures"] == (8 if reward[0] == 0.0 else 0)
    json.dumps(out)


def test_constant_uncertainty_and_tiny_and_nan_inputs():
    r = [1, 0, 1, 0, 1]
    out = failure_metrics([0.5] * 5, r, n_boot=20)
    assert out["metrics"]["auroc"] == pytest.approx(0.5)      # all ties count 1/2
    assert out["metrics"]["prr"] == pytest.approx(0.0)        # = random
    assert out["metrics"]["spearman"] is None
    assert "uncertainty is constant" in out["undefined"]["spearman"]

    one = failure_metrics([0.3], [0.0], n_boot=20)
    assert all(v is None for v in one["metrics"].values())
    assert all("fewer than 2" in one["undefined"][k] for k in METRICS)
    empty = failure_metrics([], [], n_boot=20)
    assert empty["n"] == 0 and all(v is None for v in empty["metrics"].values())

    nan = failure_metrics([0.1, np.nan, 0.3, np.inf, 0.9, 0.2], [1, 0, 0, 1, 0, 1], n_boot=20)
    assert nan["n"] == 4 and nan["n_dropped"] == 2
    assert nan["metrics"]["auroc"] == pytest.approx(ref_auroc([0.1, 0.3, 0.9, 0.2],
                                                              [False, True, True, False]))
    with pytest.raises(ValueError, match="reward has"):
        failure_metrics([0.1, 0.2], [1.0], n_boot=1)


def test_ci_contains_point_estimate_and_is_seeded():
    u, r = random_data(7, 300)
    out = failure_metrics(u, r, n_boot=400, seed=1)
    for name in METRICS:
        lo, hi = out["ci"][name]
        assert lo <= out["metrics"][name] <= hi, name
        assert lo < hi
    again = failure_metrics(u, r, n_boot=400, seed=1)
    assert again["ci"] == out["ci"]
    other = failure_metrics(u, r, n_boot=400, seed=2)
    assert other["ci"] != out["ci"]


def test_bootstrap_skips_and_counts_undefined_resamples():
    u = np.arange(12, dtype=float)
    r = np.ones(12)
    r[11] = 0.0                                             # one failure: often not resampled
    out = failure_metrics(u, r, n_boot=300, seed=0)
    skipped = out["bootstrap"]["n_skipped"]["auroc"]
    # P(the single failure is never drawn) = (11/12)^12 ~ 0.35
    assert 60 < skipped < 160
    assert out["bootstrap"]["n_skipped"]["auarc"] == 0
    assert out["ci"]["auroc"] is not None


@pytest.mark.parametrize("reward_kind", ["binary", "few_levels", "continuous", "continuous_loop"])
def test_bootstrap_ci_matches_a_plain_loop_bootstrap(reward_kind, monkeypatch):
    """The vectorized bootstrap equals a per-resample loop on the same indices, on every
    kernel path: level counting (few reward values), count-weighted Kendall matrix
    (many values) and the scipy fallback (many values, large n)."""
    import agentuq_nb.evaluation.bootstrap as bootstrap_module
    from agentuq_nb.evaluation.bootstrap import bootstrap_samples, resample_chunks
    from agentuq_nb.evaluation.metrics import canonical_order, point_metrics
    from agentuq_nb.records.outcomes import Outcomes

    u, r = random_data(11, 90, partial_reward=reward_kind != "binary")
    if reward_kind.startswith("continuous"):
        r = np.where(r < 1, np.random.default_rng(0).uniform(size=r.size), 1.0)
        assert np.unique(r).size > 32
    if reward_kind == "continuous_loop":
        monkeypatch.setattr(bootstrap_module, "MAX_KENDALL_MATRIX_N", 0)
    samples = bootstrap_samples(u, Outcomes.of(r, 1.0), METRICS, n_boot=30, seed=5)
    # the drawn positions refer to the canonical order; a resample is the multiset of the
    # corresponding trajectories, kept in input order (what AUARC's stable sort sees)
    order = canonical_order(u)
    idx = np.concatenate(list(resample_chunks(len(u), 30, 5)))
    for b in range(30):
        rows = np.sort(order[idx[b]])
        vals, _ = point_metrics(u[rows], Outcomes.of(r[rows], 1.0), METRICS)
        for name in METRICS:
            expected = np.nan if vals[name] is None else vals[name]
            np.testing.assert_allclose(samples[name][b], expected, atol=1e-9, err_msg=name)


# --------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("partial", [False, True])
def test_batched_kernels_equal_references_row_by_row(partial):
    rows = [random_data(100 + s, 30, partial_reward=partial) for s in range(8)]
    U = np.stack([u for u, _ in rows])
    R = np.stack([r for _, r in rows])
    F = R < 1
    got = metrics_batch(U, F, R)
    for b in range(len(rows)):
        u, f, r = list(U[b]), list(F[b]), list(R[b])
        assert got["auroc"][b] == pytest.approx(ref_auroc(u, f), abs=1e-9)
        assert got["auarc"][b] == pytest.approx(ref_auarc(u, f), abs=1e-9)
        assert got["aurc"][b] == pytest.approx(ref_aurc(u, f), abs=1e-9)
        assert got["kendall"][b] == pytest.approx(ref_kendall_b(u, [-x for x in r]), abs=1e-9)
        assert got["spearman"][b] == pytest.approx(
            stats.spearmanr(u, [-x for x in r]).statistic, abs=1e-9)


def test_kendall_kernels_agree_with_scipy():
    rng = np.random.default_rng(0)
    x = np.round(rng.normal(size=40), 1)
    y = np.round(rng.uniform(size=40), 2)                  # many distinct values
    idx = np.sort(rng.integers(0, 40, size=(25, 40)), axis=1)
    W = np.stack([np.bincount(i, minlength=40) for i in idx])
    expected = [stats.kendalltau(x[i], y[i]).statistic for i in idx]
    np.testing.assert_allclose(kendall_weighted(x, y, W), expected, atol=1e-12)
    np.testing.assert_allclose(kendall_batch(x[idx], y[idx]), expected, atol=1e-12)
    # level-counting kernel (few distinct rewards) on the same rows
    r = np.round(rng.uniform(size=40) * 3) / 3
    sb = SortedBatch(x[idx], r[idx] < 1, r[idx])
    exp2 = [stats.kendalltau(x[i], -r[i]).statistic for i in idx]
    np.testing.assert_allclose(sb.kendall(), exp2, atol=1e-12)


def test_curves_integrate_to_the_metrics():
    u, r = random_data(5, 70)
    f = r < 1
    curves = failure_curves(u, r)
    assert list(curves.columns) == ["curve", "x", "y"]
    assert set(curves["curve"]) == {"roc", "accuracy_rejection", "risk_coverage"}
    roc = curves[curves.curve == "roc"]
    assert np.trapezoid(roc.y, roc.x) == pytest.approx(auroc(u, f), abs=1e-12)
    ar = curves[curves.curve == "accuracy_rejection"]
    assert len(ar) == len(u) + 1 and ar.y.iloc[-1] == 1.0
    assert np.trapezoid(ar.y, ar.x) == pytest.approx(auarc(u, f), abs=1e-12)
    rc = curves[curves.curve == "risk_coverage"]
    assert rc.y.mean() == pytest.approx(aurc(u, f), abs=1e-12)
    one_class = failure_curves(u, np.ones_like(r))
    assert "roc" not in set(one_class["curve"])


# --------------------------------------------------------------------------- properties
small_inputs = st.integers(2, 25).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 6), min_size=n, max_size=n),
    st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(small_inputs)
def test_properties_on_arbitrary_small_inputs(data):
    u_int, r = data
    u = np.array(u_int, dtype=float) / 2
    r = np.array(r)
    f = r < 1
    out = failure_metrics(u, r, n_boot=20, seed=0)            # never raises
    m = out["metrics"]
    json.dumps(out)
    assert set(out["undefined"]) == {k for k, v in m.items() if v is None}
    assert 0 <= m["auarc"] <= 1 and 0 <= m["aurc"] <= 1
    assert m["auarc"] == pytest.approx(ref_auarc(list(u), list(f)), abs=1e-9)
    assert m["aurc"] == pytest.approx(ref_aurc(list(u), list(f)), abs=1e-9)
    if 0 < f.sum() < len(f):
        assert m["auroc"] == pytest.approx(ref_auroc(list(u), list(f)), abs=1e-9)
        # strictly increasing transforms do not change rank metrics; reversal mirrors AUROC
        t = failure_metrics(np.exp(3 * u), r, n_boot=5)["metrics"]
        for name in ("auroc", "aurc", "prr", "spearman", "kendall"):
            if m[name] is None:
                assert t[name] is None
            else:
                assert t[name] == pytest.approx(m[name], abs=1e-9)
        assert auroc(-u, f) == pytest.approx(1 - m["auroc"], abs=1e-12)
        assert m["prr"] <= 1 + 1e-12
        # oracle ordering (uncertainty = failure indicator) is perfect
        assert prr(f.astype(float), f) == pytest.approx(1.0)
        assert auroc(f.astype(float), f) == pytest.approx(1.0)
    else:
        assert m["auroc"] is None and m["prr"] is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([-1.5, 0.0, 0.1, 0.2, 0.3, 2.0, 7.25]) | st.floats(-1e6, 1e6),
                          st.booleans()), min_size=2, max_size=200))
def test_auroc_is_sklearns_float_exactly(pairs):
    """``auroc`` computes the ROC area itself (sklearn's validation costs ~20x the work on small inputs, thousands of
    times in the detector's model selection): the very same float as ``roc_auc_score``, ties and all."""
    from sklearn.metrics import roc_auc_score

    u = np.array([p[0] for p in pairs])
    f = np.array([p[1] for p in pairs])
    if f.all() or not f.any():
        with pytest.raises(UndefinedMetricError):
            auroc(u, f)
        return
    assert auroc(u, f) == roc_auc_score(f, u)
    assert auroc(u, f) == pytest.approx(ref_auroc(list(u), list(f)), abs=1e-12)
