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

**Task-clustered bootstrap.**  With ``groups`` (one label per row, e.g. the task of each
trajectory) that repeat, the trajectories of one task are not independent draws: a resample then
draws the G groups (clusters) with replacement and takes *all* rows of each drawn group, so its
size varies (the cluster bootstrap, Davison & Hinkley §3.8).  Drawn groups become a row-count
matrix (b, n) by one ``bincount``; resamples of equal size are expanded together into sorted
index matrices, so the metrics kernel stays one vectorized pass.  When every group is unique (or
``groups`` is None) the resamples are the trajectory bootstrap's, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.metrics import (
    MAX_KENDALL_MATRIX_N,
    MAX_LEVELS,
    METRICS,
    canonical_order,
    kendall_weighted,
    metrics_batch,
    point_metrics,
)
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, Outcomes

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


def cluster_codes(groups, n: int, keep: np.ndarray | None = None, name: str = "groups") -> np.ndarray | None:
    """Integer cluster codes (0..G-1) of ``groups``, one label per row (a label may be a tuple such as
    (domain, task_id)), of the rows ``keep`` selects; None when ``groups`` is None or every kept label
    is unique (then the trajectory bootstrap applies).  Refuses a length other than ``n`` and missing
    labels.  Codes follow the sorted labels, not the rows' order, so that the same rows in another
    order draw the same clusters from the same seed (``evaluate`` and ``compare-estimators`` read
    one estimator's rows in different orders and give it the same interval)."""
    if groups is None:
        return None
    if isinstance(groups, np.ndarray) and groups.ndim != 1:
        raise ValueError(f"{name} must be one label per row (1-D), got shape {groups.shape}")
    labels = pd.Index(groups)
    if len(labels) != n:
        raise ValueError(f"{name} has {len(labels)} labels but there are {n} rows")
    codes = pd.factorize(labels, sort=True)[0]
    if (codes < 0).any():
        raise ValueError(f"{name} has {int((codes < 0).sum())} missing label(s); every row needs its task")
    if keep is not None:
        codes = pd.factorize(codes[np.asarray(keep, dtype=bool)], sort=True)[0]
    return None if codes.size == 0 or codes.max() + 1 == codes.size else codes.astype(np.intp)


#: row-count matrices of the cluster bootstrap are drawn this many elements at a time, so that
#: resamples of equal size (expanded together) come in batches large enough to vectorize
COUNT_CHUNK_ELEMENTS = 1_000_000


def cluster_count_chunks(codes: np.ndarray, n_boot: int, seed=0, chunk_elements: int = CHUNK_ELEMENTS):
    """Yield (b, n) row-count matrices, n_boot rows in total (seeded), about ``chunk_elements`` per
    chunk: each resample draws the G clusters of ``codes`` (0..G-1, one per row) with replacement; a
    row counts as often as its cluster was drawn."""
    codes = np.asarray(codes, dtype=np.intp)
    n, n_clusters = codes.size, int(codes.max()) + 1 if codes.size else 0
    rng = np.random.default_rng(seed)
    rows = max(1, chunk_elements // max(n, 1))
    done = 0
    while done < n_boot:
        b = min(rows, n_boot - done)
        drawn = rng.integers(0, n_clusters, size=(b, n_clusters))
        offsets = np.arange(b)[:, None] * n_clusters
        per_cluster = np.bincount((drawn + offsets).ravel(), minlength=b * n_clusters).reshape(b, n_clusters)
        yield per_cluster[:, codes]
        done += b


def resample_batches(n: int, n_boot: int, seed=0, codes: np.ndarray | None = None):
    """Yield ``(positions, idx)``: ``idx`` (b, m) sorted row indices of the resamples numbered
    ``positions`` (in 0..n_boot-1).  ``codes`` None: the trajectory bootstrap
    (:func:`resample_chunks`, m = n); else the cluster bootstrap over ``codes``
    (:func:`cluster_count_chunks`), resamples of equal size m yielded together."""
    done = 0
    if codes is None:
        for idx in resample_chunks(n, n_boot, seed):
            yield np.arange(done, done + idx.shape[0]), idx
            done += idx.shape[0]
        return
    items = np.arange(n)
    for counts in cluster_count_chunks(codes, n_boot, seed, COUNT_CHUNK_ELEMENTS):
        sizes = counts.sum(axis=1)
        for m in np.unique(sizes):
            same = np.flatnonzero(sizes == m)
            step = max(1, CHUNK_ELEMENTS // int(m))
            for sel in (same[i:i + step] for i in range(0, same.size, step)):
                # row-major repeat of 0..n-1 by the counts: each resample's indices come out sorted
                idx = np.repeat(np.tile(items, sel.size), counts[sel].ravel()).reshape(sel.size, int(m))
                yield done + sel, idx
        done += counts.shape[0]


def bootstrap_samples(u: np.ndarray, outcomes: Outcomes, names=METRICS, n_boot: int = DEFAULT_N_BOOT, seed=0,
                      groups=None) -> dict[str, np.ndarray]:
    """Bootstrap distribution of each metric: ``{name: (n_boot,) array}``, NaN = undefined resample.

    ``u`` and ``outcomes`` (the rewards and their failure labels, made once by the caller) are cleaned (finite, ``u``
    already inverted if needed); higher ``u`` = more likely failure.  ``groups`` (one label per row, e.g. task ids): when labels repeat, resample
    the groups (clusters) with all their rows instead of single rows.
    """
    if len(u) == 0 or n_boot <= 0:
        return {name: np.full(max(n_boot, 0), np.nan) for name in names}
    codes = cluster_codes(groups, len(u))
    # Sort once into canonical order; sorted resample indices then give sorted rows.
    order = canonical_order(u)
    u, outcomes = np.asarray(u, dtype=float)[order], outcomes.take(order)
    r, f = outcomes.reward, outcomes.failed
    codes = None if codes is None else codes[order]
    values, levels = np.unique(-r, return_inverse=True)
    levels = levels.ravel()
    n = len(u)
    # Kendall on a many-valued reward: one matrix product per chunk instead of a scipy loop.
    kendall_by_counts = ("kendall" in names and values.size > MAX_LEVELS
                         and n <= MAX_KENDALL_MATRIX_N)
    batch_names = tuple(m for m in names if not (kendall_by_counts and m == "kendall"))
    out = {name: np.full(n_boot, np.nan) for name in names}
    counts = np.zeros((n_boot, n), dtype=np.int64) if kendall_by_counts else None
    for positions, idx in resample_batches(n, n_boot, seed, codes):
        vals = metrics_batch(u[idx], f[idx], r[idx], batch_names, levels=levels[idx],
                             n_levels=values.size, presorted=True)
        if kendall_by_counts:
            rows = np.arange(idx.shape[0])[:, None] * n
            counts[positions] = np.bincount((idx + rows).ravel(),
                                            minlength=idx.shape[0] * n).reshape(-1, n)
        for name in batch_names:
            out[name][positions] = vals[name]
    if kendall_by_counts:
        out["kendall"] = kendall_weighted(u, -r, counts)
    return out


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
    from scipy import stats

    res = stats.bootstrap((x,), np.mean, n_resamples=n_boot, confidence_level=ci, method="percentile", rng=rng)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_difference_ci(x: np.ndarray, y: np.ndarray, n_boot: int, ci: float, rng) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(x) - mean(y)`` for independent samples (scipy)."""
    from scipy import stats

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
                            failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, invert_a: bool = False,
                            invert_b: bool = False, n_boot: int = DEFAULT_N_BOOT, ci: float = 0.95,
                            seed=0, groups=None) -> dict:
    """Two-sided paired bootstrap test of ``metric(a) - metric(b)`` on the same trajectories.

    Both estimators follow the contract *higher uncertainty = more likely failure* (use
    ``invert_a`` / ``invert_b`` for confidence scores).  Rows where either score or the reward is
    not finite are dropped (counted in ``n_dropped``).  Each resample draws the same trajectory
    indices for a and b; resamples where either metric is undefined are skipped (``n_skipped``).
    ``groups`` (one label per row, e.g. task ids): when labels repeat, each resample draws whole
    groups (the task-clustered bootstrap, see the module docstring); ``n_clusters`` is then set.

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
    codes = cluster_codes(groups, keep.size, keep)
    if invert_a:
        a = -a
    if invert_b:
        b = -b
    outcomes = Outcomes.of(r, failure_threshold)  # labelled once: the point estimates and every resample read them
    pa, ua = point_metrics(a, outcomes, (metric,))
    pb, ub = point_metrics(b, outcomes, (metric,))
    out = {"metric": metric, "a": pa[metric], "b": pb[metric], "diff": None, "ci": None,
           "p_value": None, "n": int(len(r)), "n_dropped": int((~keep).sum()),
           "n_boot": int(n_boot), "n_skipped": 0, "undefined": None}
    if codes is not None:
        out["n_clusters"] = int(codes.max()) + 1
    if pa[metric] is None or pb[metric] is None:
        out["undefined"] = ua.get(metric) or ub.get(metric)
        return out
    d = pa[metric] - pb[metric]
    f = outcomes.failed
    diffs = np.full(max(n_boot, 0), np.nan)
    for positions, idx in resample_batches(len(r), n_boot, seed, codes):
        va = metrics_batch(a[idx], f[idx], r[idx], (metric,))[metric]
        vb = metrics_batch(b[idx], f[idx], r[idx], (metric,))[metric]
        diffs[positions] = va - vb
    valid = diffs[np.isfinite(diffs)]
    out["diff"] = float(d)
    out["n_skipped"] = int(diffs.size - valid.size)
    out["ci"] = percentile_ci(valid, ci)
    out["p_value"] = shifted_pvalue(valid, d)
    return out


def shifted_pvalue(resampled, observed: float) -> float | None:
    """Two-sided null-shifted bootstrap p-value of an ``observed`` difference from its resampled values
    (Efron & Tibshirani ch. 16): ``(1 + #{ |d*_b - d| >= |d| }) / (1 + B_valid)``; non-finite resamples
    (undefined on that resample) are left out. None when ``observed`` is not finite."""
    if not np.isfinite(observed):
        return None
    d = float(observed)
    valid = np.asarray(resampled, dtype=float)
    valid = valid[np.isfinite(valid)]
    # tolerance: resampled differences equal to |d| up to rounding count as "as extreme"
    extreme = np.abs(valid - d) >= abs(d) - 1e-12
    return float((1 + extreme.sum()) / (1 + valid.size))

