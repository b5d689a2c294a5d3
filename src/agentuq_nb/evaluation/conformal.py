"""AgentPulse's distribution-free toolkit: conformal intervals, ACI, BH, pipeline bounds, risk control.

Who does what:

* ``split_interval`` - split conformal / Mondrian split conformal.  Written here (it is one
  order statistic per group) because the libraries are awkward for this exact contract:
  crepes 0.9 ``ConformalRegressor.predict_int`` computes the rank as
  ``int((1 - confidence) * (n + 1))`` in floating point, which loses one order statistic
  whenever alpha(n+1) is an integer (``(1 - 0.9) * 100 == 9.999999999999998``), and gives test
  points of a Mondrian category absent from calibration a ``[0, 0]`` interval; MAPIE 1.x's
  ``SplitConformalRegressor`` needs an sklearn estimator and features (we only have
  predictions) and has no Mondrian regression.  ``tests/test_conformal.py`` checks that this
  function agrees with both crepes (standard and Mondrian) and MAPIE where their arithmetic
  is exact.
* ``aci`` - adaptive conformal inference (Gibbs & Candes 2021), by hand: MAPIE's
  ``TimeSeriesRegressor(method="aci")`` is tied to its bootstrap-ensemble (EnbPI) residuals and
  an sklearn estimator, not to a stream of given predictions.
* ``bh`` - ``statsmodels.stats.multitest.multipletests(method="fdr_bh")``.
* ``pipeline_bounds`` - two lines of numpy (sqrt of summed variances / sum of sigmas).
* ``risk_control_threshold`` - Learn-then-Test: binomial tail p-values from ``scipy.stats.binom``
  and fixed-sequence FWER control (a one-line cumulative product; MAPIE's ``control_fwer``
  gives the same decisions but is quadratic in the number of thresholds - see
  ``fixed_sequence_rejections``).
* ``coverage_report`` - pandas aggregation plus statsmodels ``proportion_confint``.

Contract for ``risk_control_threshold``: **higher uncertainty = more likely failure**; a
trajectory is *accepted* (handled automatically, not abstained on) when its
``uncertainty <= threshold``.
"""
from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd

# Relative slack for ceil((1-alpha)(n+1)): (1 - 0.1) * 10 must give 9, not 10 (float rounding).
_EPS = 1e-9


def conformal_rank(n: int, alpha: float) -> int:
    """``ceil((1 - alpha)(n + 1))``: the order statistic of the n calibration scores to use.

    A value larger than n means the interval is unbounded (too few calibration points).
    """
    return int(math.ceil((1.0 - alpha) * (n + 1) - _EPS))


def conformal_quantile(scores, alpha: float) -> float:
    """The ``ceil((1-alpha)(n+1))``-th smallest score (= the ceil((1-alpha)(n+1))/n empirical
    quantile, "higher" interpolation); ``inf`` when that rank exceeds n (including n = 0)."""
    s = np.sort(np.asarray(scores, dtype=float))
    k = conformal_rank(s.size, alpha)
    if k > s.size:
        return math.inf
    if k <= 0:
        return 0.0
    return float(s[k - 1])


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def split_interval(cal_pred, cal_true, test_pred, alpha: float, groups=None, test_groups=None):
    """Split conformal prediction intervals ``(lo, hi)`` for ``test_pred``.

    The half-width is the ``ceil((1-alpha)(n+1))``-th smallest absolute calibration residual
    ``|cal_true - cal_pred|`` (the ``ceil((1-alpha)(n+1))/n`` quantile), so that under
    exchangeability ``P(test_true in [lo, hi]) >= 1 - alpha``.

    Mondrian (group-conditional) calibration when ``groups`` (one label per calibration point)
    and ``test_groups`` (one per test point) are given: each group uses only its own residuals,
    giving ``>= 1 - alpha`` coverage *within* every group.  A group with too few calibration
    points (``ceil((1-alpha)(n_g+1)) > n_g``, e.g. n_g < 9 at alpha = 0.1) or absent from
    calibration gets the infinite interval ``(-inf, inf)``.
    """
    _check_alpha(alpha)
    cal_pred = np.asarray(cal_pred, dtype=float).ravel()
    cal_true = np.asarray(cal_true, dtype=float).ravel()
    test_pred = np.asarray(test_pred, dtype=float).ravel()
    if cal_pred.shape != cal_true.shape:
        raise ValueError(f"cal_pred has {cal_pred.size} values but cal_true has {cal_true.size}")
    scores = np.abs(cal_true - cal_pred)
    if not np.all(np.isfinite(scores)):
        raise ValueError("calibration predictions/targets contain NaN or infinite values")
    if (groups is None) != (test_groups is None):
        raise ValueError("give both groups and test_groups (Mondrian) or neither")
    if groups is None:
        q = np.full(test_pred.shape, conformal_quantile(scores, alpha))
    else:
        groups = np.asarray(groups).ravel()
        test_groups = np.asarray(test_groups).ravel()
        if groups.shape != scores.shape:
            raise ValueError(f"groups has {groups.size} labels for {scores.size} calibration points")
        if test_groups.shape != test_pred.shape:
            raise ValueError(f"test_groups has {test_groups.size} labels for {test_pred.size} test points")
        q = np.full(test_pred.shape, np.inf)
        for g in pd.unique(test_groups):
            q[test_groups == g] = conformal_quantile(scores[groups == g], alpha)
    return test_pred - q, test_pred + q


def aci(pred, true, alpha: float, gamma: float = 0.005, warmup: int = 50, window: int | None = None):
    """Adaptive conformal inference on a stream (Gibbs & Candes, 2021).

    At step t >= ``warmup`` the interval is ``pred_t +/- Q_t`` where ``Q_t`` is the
    ``ceil((1-alpha_t)(m+1))``-th smallest of the m past absolute residuals (all past points,
    or the last ``window``).  After observing ``true_t``, ``err_t = 1`` if it fell outside and
    ``alpha_{t+1} = alpha_t + gamma * (alpha - err_t)``.  ``alpha_t <= 0`` (or too few past
    points) gives the infinite interval; ``alpha_t >= 1`` the empty set, returned as
    ``lo = +inf, hi = -inf`` (never covers).  This guarantees
    ``|mean_t err_t - alpha| <= (max(alpha, 1-alpha) + gamma) / (gamma * T)`` over the T
    evaluated steps, whatever the drift.

    Returns ``(lo, hi, alpha_t)`` arrays of the stream's length; the first ``warmup`` steps only
    feed the calibration scores (``lo = hi = nan``, ``alpha_t = alpha``).
    """
    _check_alpha(alpha)
    pred = np.asarray(pred, dtype=float).ravel()
    true = np.asarray(true, dtype=float).ravel()
    if pred.shape != true.shape:
        raise ValueError(f"pred has {pred.size} values but true has {true.size}")
    if gamma <= 0:
        raise ValueError(f"gamma must be > 0, got {gamma}")
    n = pred.size
    scores = np.abs(true - pred)
    lo, hi = np.full(n, np.nan), np.full(n, np.nan)
    alpha_path = np.full(n, float(alpha))
    past: list[float] = []           # sorted scores of the calibration window
    a_t = float(alpha)
    for t in range(n):
        if t >= warmup:
            alpha_path[t] = a_t
            m = len(past)
            if a_t >= 1.0:
                lo[t], hi[t] = np.inf, -np.inf
            else:
                k = conformal_rank(m, a_t)
                q = np.inf if k > m else (0.0 if k <= 0 else past[k - 1])
                lo[t], hi[t] = pred[t] - q, pred[t] + q
            err = not (lo[t] <= true[t] <= hi[t])
            a_t = a_t + gamma * (alpha - float(err))
        if window is not None and len(past) >= window:
            past.pop(bisect.bisect_left(past, scores[t - window]))
        bisect.insort(past, float(scores[t]))
    return lo, hi, alpha_path


def bh(pvalues, q: float = 0.1) -> np.ndarray:
    """Benjamini-Hochberg at FDR level ``q`` (statsmodels ``multipletests(method="fdr_bh")``).

    Returns a boolean ``reject`` array aligned with ``pvalues``; NaN p-values are never
    rejected and do not count as hypotheses.
    """
    p = np.asarray(pvalues, dtype=float).ravel()
    reject = np.zeros(p.shape, dtype=bool)
    ok = np.isfinite(p)
    if ok.any():
        from statsmodels.stats.multitest import multipletests

        reject[ok] = multipletests(p[ok], alpha=q, method="fdr_bh")[0]
    return reject


def bh_adjusted(pvalues) -> np.ndarray:
    """BH-adjusted p-values (statsmodels), NaN where the input is NaN."""
    p = np.asarray(pvalues, dtype=float).ravel()
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        from statsmodels.stats.multitest import multipletests

        out[ok] = multipletests(p[ok], method="fdr_bh")[1]
    return out


def pipeline_bounds(sigmas) -> tuple[float, float]:
    """Uncertainty of a composed pipeline from its stages' uncertainties (standard deviations).

    ``independent = sqrt(sum sigma_i^2)`` (errors independent) and ``worst_case = sum sigma_i``
    (errors perfectly correlated, the triangle-inequality bound).  ``independent <= worst_case``.
    """
    s = np.asarray(sigmas, dtype=float).ravel()
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("sigmas must be finite and non-negative")
    return float(np.sqrt(np.sum(s ** 2))), float(np.sum(s))


def _min_accepted_for_rejection(alpha: float, delta: float) -> int:
    """Smallest m for which zero failures among m gives a binomial p-value (1-alpha)^m <= delta."""
    return int(math.ceil(math.log(delta) / math.log1p(-alpha) - _EPS))


def fixed_sequence_rejections(pvalues, delta: float) -> np.ndarray:
    """Fixed-sequence FWER procedure: reject H_1, H_2, ... in order while ``p <= delta``.

    Same decisions as MAPIE's ``control_fwer(p, delta, fwer_method="fixed_sequence")`` (checked
    in the tests); written as one vectorized line because MAPIE's version rebuilds an
    n-length array at every step (quadratic; ~12 ms per call at n = 1000, which the
    risk-control simulations call thousands of times).
    """
    p = np.asarray(pvalues, dtype=float).ravel()
    return np.cumprod(p <= delta).astype(bool)


def risk_control_threshold(uncertainty, failure, alpha: float = 0.1, delta: float = 0.1,
                           min_coverage: float = 0.1) -> dict:
    """Largest uncertainty threshold whose accepted set has failure rate <= alpha w.p. >= 1-delta.

    Higher uncertainty = more likely failure; trajectories with ``uncertainty <= threshold`` are
    accepted, the rest abstained on (handed to a human).  Learn-then-Test (Angelopoulos et al.
    2021) on calibration data:

    1. candidates: the distinct calibration uncertainty values, ascending, whose accepted count
       is at least ``max(m_min, ceil(min_coverage * n))``; ``m_min`` is the smallest count at
       which zero failures could reject.  Starting the sequence at a minimum coverage fixed in
       advance keeps the test valid and avoids stopping on the first handful of points;
    2. for each candidate lambda, null ``H: P(fail | u <= lambda) > alpha`` with the exact
       binomial p-value ``P(Binom(n_acc, alpha) <= n_fail)``;
    3. fixed-sequence testing from low to high thresholds at level delta
       (:func:`fixed_sequence_rejections`, equivalent to MAPIE's ``control_fwer(...,
       "fixed_sequence")``): reject while p <= delta, stop at the first non-rejection.

    Returns a dict: ``threshold`` (largest certified candidate, or None when none is - then
    abstain on everything), ``feasible``, ``alpha``, ``delta``, ``n``, ``n_accepted``,
    ``coverage`` (fraction accepted on calibration), ``empirical_risk`` (calibration failure
    rate among accepted), ``p_value`` at the threshold, ``min_accepted`` and ``candidates``
    (a DataFrame: threshold, n_accepted, n_failures, risk, p_value, rejected).
    """
    _check_alpha(alpha)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    u = np.asarray(uncertainty, dtype=float).ravel()
    f = np.asarray(failure).ravel().astype(bool)
    if u.shape != f.shape:
        raise ValueError(f"uncertainty has {u.size} values but failure has {f.size}")
    keep = np.isfinite(u)
    u, f = u[keep], f[keep]
    n = u.size
    m_min = max(_min_accepted_for_rejection(alpha, delta), int(math.ceil(min_coverage * n - _EPS)), 1)
    out = {"threshold": None, "feasible": False, "alpha": float(alpha), "delta": float(delta),
           "n": int(n), "n_dropped": int((~keep).sum()), "n_accepted": 0, "coverage": 0.0,
           "empirical_risk": None, "p_value": None, "min_accepted": int(m_min)}
    order = np.argsort(u, kind="stable")
    us, fs = u[order], f[order]
    cum_fail = np.cumsum(fs)
    last = np.flatnonzero(np.r_[us[1:] != us[:-1], True]) if n else np.array([], dtype=int)
    n_acc = last + 1
    sel = n_acc >= m_min
    lam, n_acc, k = us[last][sel], n_acc[sel], cum_fail[last][sel]
    from scipy import stats

    pvals = stats.binom.cdf(k, n_acc, alpha)
    rejected = fixed_sequence_rejections(pvals, delta)
    out["candidates"] = pd.DataFrame({"threshold": lam, "n_accepted": n_acc, "n_failures": k,
                                      "risk": k / np.maximum(n_acc, 1), "p_value": pvals,
                                      "rejected": rejected})
    if rejected.any():
        j = int(np.flatnonzero(rejected).max())
        out.update(threshold=float(lam[j]), feasible=True, n_accepted=int(n_acc[j]),
                   coverage=float(n_acc[j] / n), empirical_risk=float(k[j] / n_acc[j]),
                   p_value=float(pvals[j]))
    return out


def coverage_report(lo, hi, true, alpha: float | None = None, groups=None,
                    ci_method: str = "wilson", ci_alpha: float = 0.05) -> pd.DataFrame:
    """Empirical coverage of intervals ``[lo, hi]``, overall and per group.

    One row per group (``"all"`` first): ``n, covered, coverage, coverage_lo, coverage_hi``
    (a ``proportion_confint`` interval, ``ci_method`` at ``1 - ci_alpha``), ``nominal``
    (``1 - alpha`` when given), ``miscoverage``, ``mean_width`` / ``median_width`` over finite
    intervals, and ``n_infinite``.  Rows whose ``lo``/``hi`` are NaN (e.g. ACI warm-up) are
    excluded.
    """
    lo = np.asarray(lo, dtype=float).ravel()
    hi = np.asarray(hi, dtype=float).ravel()
    true = np.asarray(true, dtype=float).ravel()
    if not (lo.shape == hi.shape == true.shape):
        raise ValueError(f"lengths differ: lo {lo.size}, hi {hi.size}, true {true.size}")
    valid = ~(np.isnan(lo) | np.isnan(hi) | np.isnan(true))
    g = np.full(lo.shape, "all", dtype=object) if groups is None else np.asarray(groups, dtype=object).ravel()
    covered = (lo <= true) & (true <= hi)
    width = hi - lo
    from statsmodels.stats.proportion import proportion_confint

    rows = []
    labels = ["all"] + ([] if groups is None else list(pd.unique(g[valid])))
    for label in labels:
        m = valid if label == "all" else valid & (g == label)
        n = int(m.sum())
        c = int(covered[m].sum())
        w = width[m]
        finite = np.isfinite(w)
        ci_lo, ci_hi = proportion_confint(c, n, alpha=ci_alpha, method=ci_method) if n else (np.nan, np.nan)
        rows.append({"group": label, "n": n, "covered": c,
                     "coverage": c / n if n else np.nan,
                     "coverage_lo": float(ci_lo), "coverage_hi": float(ci_hi),
                     "nominal": np.nan if alpha is None else 1.0 - alpha,
                     "miscoverage": 1.0 - c / n if n else np.nan,
                     "mean_width": float(w[finite].mean()) if finite.any() else np.inf,
                     "median_width": float(np.median(w[finite])) if finite.any() else np.inf,
                     "n_infinite": int((~finite).sum())})
    return pd.DataFrame(rows)
