"""The bootstrap, in one place: resampled indices over trajectories, percentile CIs, paired p-values,
and the mean intervals of the dynamics curve and the agent leaderboard.

Resampling is written here rather than with ``scipy.stats.bootstrap`` because a resample on
which a metric is undefined (e.g. it drew one class only) must be *skipped and counted*, not
turn the whole interval into NaN, and because all metrics are computed from the same
resampled indices in one vectorized pass (see :func:`agentuq_nb.evaluation.metrics.metrics_batch`).

Each resample draws n trajectory indices with replacement.  The data are first put in the
metrics' canonical order (uncertainty ascending, ties by descending input position) and the
drawn indices sorted, so every resample is already sorted and keeps the input's relative order
within ties (AUARC's stable sort breaks ties by input order).
"""
from __future__ import annotations

import numpy as np
from scipy import stats

from agentuq_nb.evaluation.metrics import (
    MAX_KENDALL_MATRIX_N,
    MAX_LEVELS,
    METRICS,
    canonical_order,
    failure_labels,
    kendall_weighted,
    metrics_batch,
    point_metrics,
)

#: resampled matrices are processed in chunks of about this many elements; small chunks stay in
#: CPU cache (measured ~2x faster than 10^6-element chunks at n = 1000)
CHUNK_ELEMENTS = 50_000


def resample_chunks(n: int, n_boot: int, seed=0):
    """Yield (b, n) arrays of sorted bootstrap indices, n_boot rows in total (seeded)."""
    rng = np.random.default_rng(seed)
    rows = max(1, CHUNK_ELEMENTS // max(n, 1))
    done = 0
    while done < n_boot:
        b = min(rows, n_boot - done)
        yield np.sort(rng.integers(0, n, size=(b, n)), axis=1)
        done += b


def bootstrap_samples(u: np.ndarray, r: np.ndarray, failure_threshold: float = 1.0,
                      names=METRICS, n_boot: int = 1000, seed=0) -> dict[str, np.ndarray]:
    """Bootstrap distribution of each metric: ``{name: (n_boot,) array}``, NaN = undefined resample.

    ``u`` and ``r`` are cleaned arrays (finite, already inverted if needed); higher ``u`` = more
    likely failure.
    """
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    if len(u) == 0 or n_boot <= 0:
        return {name: np.full(max(n_boot, 0), np.nan) for name in names}
    # Sort once into canonical order; sorted resample indices then give sorted rows.
    order = canonical_order(u)
    u, r = np.asarray(u, dtype=float)[order], np.asarray(r, dtype=float)[order]
    f = failure_labels(r, failure_threshold)
    values, levels = np.unique(-r, return_inverse=True)
    levels = levels.ravel()
    n = len(u)
    # Kendall on a many-valued reward: one matrix product per chunk instead of a scipy loop.
    kendall_by_counts = ("kendall" in names and values.size > MAX_LEVELS
                         and n <= MAX_KENDALL_MATRIX_N)
    batch_names = tuple(m for m in names if not (kendall_by_counts and m == "kendall"))
    counts: list[np.ndarray] = []
    for idx in resample_chunks(n, n_boot, seed):
        vals = metrics_batch(u[idx], f[idx], r[idx], batch_names, levels=levels[idx],
                             n_levels=values.size, presorted=True)
        if kendall_by_counts:
            rows = np.arange(idx.shape[0])[:, None] * n
            counts.append(np.bincount((idx + rows).ravel(),
                                      minlength=idx.shape[0] * n).reshape(-1, n))
        for name in batch_names:
            parts[name].append(vals[name])
    if kendall_by_counts:
        parts["kendall"] = [kendall_weighted(u, -r, np.concatenate(counts))]
    return {name: np.concatenate(parts[name]) for name in names}


def mean_bootstrap(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` bootstrap means of ``values`` (resampled with replacement, drawn from ``rng``)."""
    values = np.asarray(values, dtype=float)
    return values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)


def mean_ci(x: np.ndarray, n_boot: int, ci: float, rng) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` (scipy's ``stats.bootstrap``); NaN for fewer
    than 2 values, the value itself when all are equal."""
    if x.size < 2:
        return np.nan, np.nan
    if np.ptp(x) == 0:
        return float(x[0]), float(x[0])
    res = stats.bootstrap((x,), np.mean, n_resamples=n_boot, confidence_level=ci, method="percentile", rng=rng)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_difference_ci(x: np.ndarray, y: np.ndarray, n_boot: int, ci: float, rng) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(x) - mean(y)`` for independent samples (scipy)."""
    res = stats.bootstrap((x, y), mean_difference, n_resamples=n_boot, confidence_level=ci, method="percentile",
                          rng=rng)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_difference(x, y, axis=-1):
    """``mean(x) - mean(y)`` along ``axis`` (vectorized: scipy's resampling calls it on stacks)."""
    return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def percentile_ci(samples: np.ndarray, ci: float = 0.95) -> list[float] | None:
    """Percentile interval of the finite samples, ``[lo, hi]``, or None if fewer than 2 are finite."""
    s = np.asarray(samples, dtype=float)
    s = s[np.isfinite(s)]
    if s.size < 2:
        return None
    lo, hi = np.quantile(s, [(1 - ci) / 2, (1 + ci) / 2])
    return [float(lo), float(hi)]


def paired_bootstrap_pvalue(unc_a, unc_b, reward, metric: str = "auroc",
                            failure_threshold: float = 1.0, invert_a: bool = False,
                            invert_b: bool = False, n_boot: int = 1000, ci: float = 0.95,
                            seed=0) -> dict:
    """Two-sided paired bootstrap test of ``metric(a) - metric(b)`` on the same trajectories.

    Both estimators follow the contract *higher uncertainty = more likely failure* (use
    ``invert_a`` / ``invert_b`` for confidence scores).  Rows where either score or the reward is
    not finite are dropped (counted in ``n_dropped``).  Each resample draws the same trajectory
    indices for a and b; resamples where either metric is undefined are skipped (``n_skipped``).

    p-value (null-shifted bootstrap, Efron & Tibshirani ch. 16):
    ``p = (1 + #{ |d*_b - d| >= |d| }) / (1 + B_valid)`` where d is the observed difference and
    d*_b the resampled ones.  Returns a JSON-serializable dict ``{metric, a, b, diff, ci,
    p_value, n, n_dropped, n_boot, n_skipped, undefined}``; values are None when the metric is
    undefined on the full data.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    a = np.asarray(unc_a, dtype=float).ravel()
    b = np.asarray(unc_b, dtype=float).ravel()
    r = np.asarray(reward, dtype=float).ravel()
    if not (a.shape == b.shape == r.shape):
        raise ValueError(f"lengths differ: unc_a {a.size}, unc_b {b.size}, reward {r.size}")
    keep = np.isfinite(a) & np.isfinite(b) & np.isfinite(r)
    a, b, r = a[keep], b[keep], r[keep]
    if invert_a:
        a = -a
    if invert_b:
        b = -b
    pa, ua = point_metrics(a, r, failure_threshold, (metric,))
    pb, ub = point_metrics(b, r, failure_threshold, (metric,))
    out = {"metric": metric, "a": pa[metric], "b": pb[metric], "diff": None, "ci": None,
           "p_value": None, "n": int(len(r)), "n_dropped": int((~keep).sum()),
           "n_boot": int(n_boot), "n_skipped": 0, "undefined": None}
    if pa[metric] is None or pb[metric] is None:
        out["undefined"] = ua.get(metric) or ub.get(metric)
        return out
    d = pa[metric] - pb[metric]
    f = failure_labels(r, failure_threshold)
    diffs = []
    for idx in resample_chunks(len(r), n_boot, seed):
        va = metrics_batch(a[idx], f[idx], r[idx], (metric,))[metric]
        vb = metrics_batch(b[idx], f[idx], r[idx], (metric,))[metric]
        diffs.append(va - vb)
    diffs = np.concatenate(diffs) if diffs else np.array([])
    valid = diffs[np.isfinite(diffs)]
    out["diff"] = float(d)
    out["n_skipped"] = int(diffs.size - valid.size)
    out["ci"] = percentile_ci(valid, ci)
    # tolerance: resampled differences equal to |d| up to rounding count as "as extreme"
    extreme = np.abs(valid - d) >= abs(d) - 1e-12
    out["p_value"] = float((1 + extreme.sum()) / (1 + valid.size))
    return out

