"""Validation by simulation (issue 7 point 3): the guarantees hold on synthetic data.

Every simulation is seeded; each has a contrast that must *fail* the same check (plain split
conformal on the noisy group, a static interval under drift, an uncorrected threshold), so the
checks are not vacuous.
"""
import numpy as np
import pytest
from scipy import stats

from agentuq_nb.evaluation import aci, bh, coverage_report, risk_control_threshold, split_interval

REPS = 500


def _window(alpha):
    return 1 - alpha - 0.02, 1 - alpha + 0.03


# --------------------------------------------------------------------------- split conformal
@pytest.mark.parametrize("alpha,n_cal", [(0.1, 150), (0.2, 40), (0.05, 400)])
def test_split_conformal_coverage_over_exchangeable_splits(alpha, n_cal):
    """A fixed pool, REPS random calibration/test splits: mean coverage in the window."""
    rng = np.random.default_rng(int(alpha * 1000) + n_cal)
    n_pool = 2 * n_cal
    x = rng.uniform(-3, 3, size=n_pool)
    pred = np.sin(x)                                       # a fixed, imperfect model
    y = np.sin(1.2 * x) + rng.standard_t(3, size=n_pool) * (0.3 + 0.2 * np.abs(x))
    cover = []
    for _ in range(REPS):
        perm = rng.permutation(n_pool)
        cal, test = perm[:n_cal], perm[n_cal:]
        lo, hi = split_interval(pred[cal], y[cal], pred[test], alpha)
        cover.append(np.mean((lo <= y[test]) & (y[test] <= hi)))
    lo_ok, hi_ok = _window(alpha)
    assert lo_ok <= np.mean(cover) <= hi_ok


def _grouped(rng, n):
    g = rng.integers(0, 3, size=n)
    sigma = np.array([0.3, 1.0, 3.0])[g]                   # heteroscedastic groups
    pred = rng.normal(size=n)
    return pred, pred + rng.normal(size=n) * sigma, g


def test_mondrian_covers_every_group_and_plain_split_does_not():
    alpha = 0.1
    rng = np.random.default_rng(7)
    mondrian = np.zeros((REPS, 3))
    plain = np.zeros((REPS, 3))
    for r in range(REPS):
        cp, ct, cg = _grouped(rng, 450)
        tp, tt, tg = _grouped(rng, 300)
        lo_m, hi_m = split_interval(cp, ct, tp, alpha, groups=cg, test_groups=tg)
        lo_p, hi_p = split_interval(cp, ct, tp, alpha)
        for k in range(3):
            m = tg == k
            mondrian[r, k] = np.mean((lo_m[m] <= tt[m]) & (tt[m] <= hi_m[m]))
            plain[r, k] = np.mean((lo_p[m] <= tt[m]) & (tt[m] <= hi_p[m]))
    lo_ok, hi_ok = _window(alpha)
    for k in range(3):
        assert lo_ok <= mondrian[:, k].mean() <= hi_ok, k
    # plain split conformal: right on average, wrong per group
    assert lo_ok <= plain.mean() <= hi_ok
    assert plain[:, 2].mean() < 1 - alpha - 0.1               # noisy group under-covered
    assert plain[:, 0].mean() > 1 - alpha + 0.05              # quiet group over-covered
    # coverage_report shows the same per group on one draw
    cp, ct, cg = _grouped(rng, 3000)
    tp, tt, tg = _grouped(rng, 3000)
    rep = coverage_report(*split_interval(cp, ct, tp, alpha), tt, alpha, groups=tg).set_index("group")
    assert rep.loc[2, "coverage_hi"] < 1 - alpha


# --------------------------------------------------------------------------- ACI
def _shifted_stream(rng, T=6000):
    y = rng.normal(size=T)
    y[T // 2:] = 4.0 + 2.0 * rng.normal(size=T - T // 2)     # level shift (and more noise)
    return y


def test_aci_long_run_miscoverage_under_level_shift():
    alpha, gamma, warmup = 0.1, 0.01, 100
    rng = np.random.default_rng(11)
    y = _shifted_stream(rng)
    pred = np.zeros_like(y)                                  # a predictor that never adapts
    lo, hi, a = aci(pred, y, alpha, gamma, warmup)
    miss = ~((lo <= y) & (y <= hi))[warmup:]
    assert abs(miss.mean() - alpha) <= 0.02
    # also after the shift alone
    assert abs(miss[len(y) // 2 - warmup:].mean() - alpha) <= 0.03
    # the level adapts: alpha_t drops after the shift to widen intervals
    assert a[len(y) // 2 + 200] < alpha
    # contrast: a static split-conformal interval calibrated on the warm-up breaks
    lo_s, hi_s = split_interval(pred[:warmup], y[:warmup], pred[warmup:], alpha)
    static_miss = ~((lo_s <= y[warmup:]) & (y[warmup:] <= hi_s))
    assert static_miss[len(y) // 2:].mean() > 0.5


@pytest.mark.parametrize("seed", range(5))
def test_aci_deterministic_bound_holds_for_any_stream(seed):
    """|mean err - alpha| <= (max(alpha, 1-alpha) + gamma) / (gamma T), whatever the data."""
    rng = np.random.default_rng(seed)
    T, alpha, gamma, warmup = 3000, 0.2, 0.02, 20
    kind = seed % 3
    if kind == 0:
        y = np.cumsum(rng.normal(size=T))                     # random walk
    elif kind == 1:
        y = rng.normal(size=T) * np.linspace(0.1, 10, T)      # exploding variance
    else:
        y = np.where(rng.uniform(size=T) < 0.5, 100.0, 0.0) * (np.arange(T) % 500 > 250)
    lo, hi, _ = aci(np.zeros(T), y, alpha, gamma, warmup)
    err = ~((lo <= y) & (y <= hi))[warmup:]
    bound = (max(alpha, 1 - alpha) + gamma) / (gamma * (T - warmup))
    assert abs(err.mean() - alpha) <= bound + 1e-12


# --------------------------------------------------------------------------- BH
@pytest.mark.parametrize("m,n_alt", [(100, 10), (200, 4), (50, 0)])
def test_bh_controls_fdr_on_null_heavy_simulations(m, n_alt):
    """Independent p-values: BH's FDR is exactly pi0 * q <= q (Benjamini & Hochberg 1995).

    Realized FDR over 2000 repetitions must be <= q up to Monte-Carlo error (2 s.e.) and match
    pi0 * q; with pi0 close to 1 that is close to q, hence the explicit tolerance.
    """
    q, reps = 0.1, 2000
    rng = np.random.default_rng(m + n_alt)
    z = rng.normal(size=(reps, m))
    z[:, :n_alt] += 3.0
    p = stats.norm.sf(z)                                      # one-sided p-values
    rej = np.stack([bh(row, q) for row in p])
    fdp = rej[:, n_alt:].sum(1) / np.maximum(rej.sum(1), 1)
    fdr, se = fdp.mean(), fdp.std() / np.sqrt(reps)
    assert fdr <= q + 2 * se
    assert abs(fdr - (m - n_alt) / m * q) <= 3 * se
    if n_alt:
        assert rej[:, :n_alt].mean() > 0.2                    # it does reject something
    # contrast: uncorrected testing at level q has far higher FDR when nulls dominate
    raw = p <= q
    raw_fdp = raw[:, n_alt:].sum(1) / np.maximum(raw.sum(1), 1)
    assert raw_fdp.mean() > 2 * q


# --------------------------------------------------------------------------- risk control
SCENARIOS = {
    # P(fail | u) and the population risk R(lam) = P(fail | u <= lam) for u ~ U(0, 1)
    "quadratic": (lambda u: 1.35 * u ** 2, lambda lam: 0.45 * lam ** 2),
    "linear": (lambda u: 0.05 + 0.3 * u, lambda lam: 0.05 + 0.15 * lam),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize("n", [300, 1000])
def test_risk_control_holds_with_probability_one_minus_delta(scenario, n):
    alpha, delta = 0.15, 0.1
    p_fail, risk = SCENARIOS[scenario]
    rng = np.random.default_rng(n + len(scenario))
    violated, naive_violated, coverage = [], [], []
    for _ in range(REPS):
        u = rng.uniform(size=n)
        fail = rng.uniform(size=n) < p_fail(u)
        res = risk_control_threshold(u, fail, alpha, delta)
        lam = res["threshold"]
        violated.append(lam is not None and risk(lam) > alpha)
        coverage.append(0.0 if lam is None else lam)          # = P(u <= lam)
        # contrast: largest threshold whose *empirical* risk is <= alpha
        order = np.argsort(u)
        emp = np.cumsum(fail[order]) / np.arange(1, n + 1)
        ok = np.flatnonzero(emp <= alpha)
        naive_violated.append(ok.size > 0 and risk(u[order][ok.max()]) > alpha)
    assert np.mean(violated) <= delta
    assert np.mean(naive_violated) > 2 * delta
    assert np.mean(coverage) > 0.1                            # not vacuous: it accepts runs
