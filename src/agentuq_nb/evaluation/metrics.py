"""Failure-prediction metrics: definitions, batched (bootstrap-ready) versions, and curves.

Contract everywhere in this module: **higher uncertainty = more likely failure**. A trajectory
fails when ``reward < failure_threshold`` (default 1.0, binary tau^2 rewards); failure is the
positive class. Scores that mean *confidence* (higher = better) must be negated first
(``invert=True`` in :func:`agentuq_nb.evaluation.failure_metrics`).

Definitions (n trajectories, ``u`` uncertainty, ``f`` failure indicator, ``s = 1 - f`` success):

* **AUROC** - ``sklearn.metrics.roc_auc_score(f, u)``: probability that a random failure has
  higher uncertainty than a random success, ties counted 1/2.  The batched version uses the
  equivalent Mann-Whitney form with average ranks, ``(sum of failure ranks - n1(n1+1)/2)/(n1 n0)``.
* **AUARC** (AgentUQ's accuracy-rejection curve): order trajectories by ``-u`` with a *stable*
  sort (most uncertain first, ties keep input order); for k = 0..n rejected, ``acc_k`` = success
  rate of the n-k retained, with ``acc_n = 1.0``; AUARC = trapezoid of ``acc_k`` over rejection
  rate ``k/n``.  Higher is better.  Its value depends on the input order among tied
  uncertainties (kept for compatibility with AgentUQ's numbers).
* **AUARC, tie mean** (``auarc_tie_mean``): the mean of AUARC over every order of the tied
  uncertainties, so independent of the input order; equal to AUARC without ties.  The curve is
  linear in the successes retained, so the mean is the curve of their expectation, interpolated
  inside each tie block as for AURC below.
* **AURC** (selective-classification risk-coverage curve, Geifman & El-Yaniv): retain the k
  *lowest*-uncertainty trajectories, ``risk_k`` = failure rate among them, coverage ``k/n``;
  ``AURC = (1/n) * sum_{k=1..n} risk_k`` (right Riemann sum over coverage).  Ties: tied
  trajectories enter in random order and ``risk_k`` is its *expectation* over that order (the
  cumulative failure count is linearly interpolated inside a tie block) - the same "ties count
  1/2" convention as AUROC, and order-independent.  Lower is better.
* **PRR** (prediction rejection ratio, LM-Polygraph's ``PredictionRejectionArea`` with
  quality = success and ``max_rejection = 1``): ``PRA = (1/n) sum_{k=1..n} (success rate of the
  k lowest-uncertainty trajectories) = 1 - AURC``; random PRA is its exact expectation under a
  random order, ``1 - n_f/n``; oracle PRA ranks all failures as most uncertain.
  ``PRR = (PRA_unc - PRA_rnd) / (PRA_oracle - PRA_rnd)`` = ``(AURC_rnd - AURC)/(AURC_rnd -
  AURC_oracle)``.  1 = oracle, 0 = random, negative = worse than random.  Undefined with one class.
* **pearson / spearman / kendall** - scipy's ``pearsonr``, ``spearmanr`` and ``kendalltau``
  (tau-b) of ``u`` against ``-reward`` (positive = uncertainty rises as reward falls).

AUARC, AURC and PRR have no implementation in sklearn/scipy/statsmodels, so they are written
here (vectorized over bootstrap resamples).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from agentuq_nb.records.outcomes import (
    DEFAULT_FAILURE_THRESHOLD,
    Outcomes,
    failure_labels,  # noqa: F401 (agentuq_nb.evaluation.failure_labels: the definition lives with the data contracts)
)

METRICS: tuple[str, ...] = ("auroc", "auarc", "auarc_tie_mean", "aurc", "prr", "pearson", "spearman", "kendall")
CORRELATIONS = ("pearson", "spearman", "kendall")
HIGHER_IS_BETTER = {"auroc": True, "auarc": True, "auarc_tie_mean": True, "aurc": False, "prr": True,
                    "pearson": True, "spearman": True, "kendall": True}


class UndefinedMetricError(ValueError):
    """A metric is undefined on this input (e.g. one class only); ``str(err)`` is the reason."""


# --------------------------------------------------------------------------- labels and input
def clean_inputs(uncertainty, reward, invert: bool = False):
    """Coerce to float arrays and drop rows whose uncertainty or reward is not finite.

    Returns ``(u, r, n_dropped)``; ``u`` is negated when ``invert`` (confidence scores).
    Raises ``ValueError`` if the two inputs have different lengths.
    """
    u = np.asarray(uncertainty, dtype=float).ravel()
    r = np.asarray(reward, dtype=float).ravel()
    if u.shape != r.shape:
        raise ValueError(f"uncertainty has {u.size} values but reward has {r.size}")
    keep = np.isfinite(u) & np.isfinite(r)
    u, r = u[keep], r[keep]
    if invert:
        u = -u
    return u, r, int((~keep).sum())


def clean_outcomes(uncertainty, reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, invert: bool = False
                   ) -> tuple[np.ndarray, Outcomes, int]:
    """:func:`clean_inputs` with the labels: ``(u, outcomes, n_dropped)``, the outcomes of the rows kept. ``reward``: the
    rewards (labelled here at ``failure_threshold``), or their :class:`Outcomes` (the labels made once by the caller,
    carried)."""
    given = reward if isinstance(reward, Outcomes) else Outcomes.of(np.asarray(reward, dtype=float).ravel(),
                                                                     failure_threshold)
    u = np.asarray(uncertainty, dtype=float).ravel()
    if u.shape != given.reward.shape:
        raise ValueError(f"uncertainty has {u.size} values but reward has {given.reward.size}")
    keep = np.isfinite(u) & np.isfinite(given.reward)
    return (-u[keep] if invert else u[keep]), given.take(keep), int((~keep).sum())


def undefined_reason(name: str, u: np.ndarray, outcomes: Outcomes) -> str | None:
    """Why metric ``name`` is undefined on this (cleaned) input, or ``None`` if it is defined."""
    n = len(u)
    if n < 2:
        return f"fewer than 2 trajectories with finite uncertainty and reward (n={n})"
    if name in ("auroc", "prr"):
        n_f = int(outcomes.failed.sum())
        if n_f == 0:
            return f"only one class: no failures (all {n} rewards >= {outcomes.threshold})"
        if n_f == n:
            return f"only one class: all {n} trajectories are failures (reward < {outcomes.threshold})"
    if name in CORRELATIONS:
        if np.ptp(u) == 0:
            return "uncertainty is constant, correlation undefined"
        if np.ptp(outcomes.reward) == 0:
            return "reward is constant, correlation undefined"
    return None


# --------------------------------------------------------------------------- batched kernels
# Kernels work on a (B, n) batch of rows (bootstrap resamples; B = 1 for a point estimate) and
# return (B,) values with NaN where the metric is undefined for that row.  Internally every row
# is put in *canonical order*: uncertainty ascending, ties by descending input position, so that
# the reversed row is exactly AUARC's ``argsort(-u, kind="stable")`` order.  Tie blocks of the
# sorted rows then give average ranks, AUROC and the tie-averaged risk curve without more sorts.

#: reward variables with at most this many distinct values use the counting kernels for
#: Spearman/Kendall; beyond it, scipy's rankdata / kendalltau (looped) are used.
MAX_LEVELS = 32


def canonical_order(u: np.ndarray) -> np.ndarray:
    """Indices putting ``u`` (1-D or rows of a 2-D array) in canonical order (see above)."""
    u = np.asarray(u, dtype=float)
    return np.argsort(-u, axis=-1, kind="stable")[..., ::-1]


def _tie_blocks(Us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For sorted rows: first and last position of each element's block of equal values."""
    B, n = Us.shape
    idx = np.broadcast_to(np.arange(n), (B, n))
    new_block = np.ones((B, n), dtype=bool)
    new_block[:, 1:] = Us[:, 1:] != Us[:, :-1]
    block_end = np.ones((B, n), dtype=bool)
    block_end[:, :-1] = new_block[:, 1:]
    start = np.maximum.accumulate(np.where(new_block, idx, 0), axis=1)
    end = np.minimum.accumulate(np.where(block_end, idx, n)[:, ::-1], axis=1)[:, ::-1]
    return start, end


class SortedBatch:
    """A batch of rows in canonical order with its tie blocks (shared by all kernels)."""

    def __init__(self, U, F, R=None, levels=None, n_levels=None, presorted=False):
        U = np.atleast_2d(np.asarray(U, dtype=float))
        F = np.atleast_2d(np.asarray(F)).astype(bool)
        R = None if R is None else np.atleast_2d(np.asarray(R, dtype=float))
        if not presorted:
            order = canonical_order(U)
            U = np.take_along_axis(U, order, axis=1)
            F = np.take_along_axis(F, order, axis=1)
            if R is not None:
                R = np.take_along_axis(R, order, axis=1)
            if levels is not None:
                levels = np.take_along_axis(np.atleast_2d(levels), order, axis=1)
        if R is not None and levels is None:
            vals, inv = np.unique(-R, return_inverse=True)
            levels, n_levels = inv.reshape(R.shape), vals.size
        self.U, self.F, self.R = U, F, R
        self.levels = None if levels is None else np.atleast_2d(levels)
        self.n_levels = n_levels
        self.B, self.n = U.shape
        self.start, self.end = _tie_blocks(U)

    # ranks --------------------------------------------------------------------------------
    def u_ranks(self) -> np.ndarray:
        """Average (1-based) ranks of the uncertainty within each row."""
        return (self.start + self.end) / 2.0 + 1.0

    def y_ranks(self) -> np.ndarray:
        """Average ranks of -reward within each row."""
        if self.n_levels is not None and self.n_levels <= MAX_LEVELS:
            L = self.levels
            counts = np.stack([(L == lv).sum(axis=1) for lv in range(self.n_levels)], axis=1)
            below = np.cumsum(counts, axis=1) - counts
            return (np.take_along_axis(below, L, axis=1)
                    + (np.take_along_axis(counts, L, axis=1) + 1) / 2.0)
        from scipy import stats

        return stats.rankdata(-self.R, axis=1, method="average")

    # metrics ------------------------------------------------------------------------------
    def auroc(self) -> np.ndarray:
        n1 = self.F.sum(axis=1).astype(float)
        n0 = self.n - n1
        rank_sum = np.where(self.F, self.u_ranks(), 0.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (rank_sum - n1 * (n1 + 1) / 2.0) / (n1 * n0)
        out[(n1 == 0) | (n0 == 0)] = np.nan
        return out

    def accuracy_rejection(self) -> np.ndarray:
        """(B, n+1): success rate of the retained after rejecting the k most uncertain, k = 0..n."""
        succ = (~self.F[:, ::-1]).astype(float)             # most uncertain first (stable)
        suffix = np.cumsum(succ[:, ::-1], axis=1)[:, ::-1]   # successes at positions k..n-1
        acc = np.empty((self.B, self.n + 1))
        acc[:, :self.n] = suffix / (self.n - np.arange(self.n))
        acc[:, self.n] = 1.0
        return acc

    def auarc(self) -> np.ndarray:
        acc = self.accuracy_rejection()
        return (acc[:, :-1] + acc[:, 1:]).sum(axis=1) / (2.0 * self.n)

    def auarc_tie_mean(self) -> np.ndarray:
        """AUARC averaged over every order of the tied uncertainties (AgentUQ's depends on the input order).

        The curve is linear in the successes retained, so its mean over orders is the curve of the
        expected successes among the n - k most certain, ties in random order (closed form per tie block).
        """
        kept = self.expected_cumulative(~self.F)[:, ::-1]      # expected successes among the n-k most certain
        acc = np.empty((self.B, self.n + 1))
        acc[:, :self.n] = kept / (self.n - np.arange(self.n))
        acc[:, self.n] = 1.0
        return (acc[:, :-1] + acc[:, 1:]).sum(axis=1) / (2.0 * self.n)

    def expected_cumfail(self) -> np.ndarray:
        """(B, n): expected failures among the k most certain (k = 1..n), ties in random order."""
        return self.expected_cumulative(self.F)

    def expected_cumulative(self, X: np.ndarray) -> np.ndarray:
        """(B, n): expected sum of ``X`` over the k most certain (k = 1..n), ties in random order."""
        C = np.cumsum(X, axis=1, dtype=float)
        start, end = self.start, self.end
        c_before = np.where(start > 0, np.take_along_axis(C, np.maximum(start - 1, 0), axis=1), 0.0)
        c_end = np.take_along_axis(C, end, axis=1)
        pos = np.arange(self.n)
        return c_before + (pos - start + 1) * (c_end - c_before) / (end - start + 1)

    def risk_coverage(self) -> np.ndarray:
        return self.expected_cumfail() / np.arange(1, self.n + 1)

    def aurc(self) -> np.ndarray:
        return self.risk_coverage().mean(axis=1)

    def prr(self, aurc: np.ndarray | None = None) -> np.ndarray:
        aurc = self.aurc() if aurc is None else aurc
        n_f = self.F.sum(axis=1).astype(float)
        rnd = n_f / self.n
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (rnd - aurc) / (rnd - _oracle_aurc(n_f, self.n))
        out[(n_f == 0) | (n_f == self.n)] = np.nan
        return out

    def pearson(self) -> np.ndarray:
        return pearson_batch(self.U, -self.R)

    def spearman(self) -> np.ndarray:
        out = pearson_batch(self.u_ranks(), self.y_ranks())
        out[(np.ptp(self.U, axis=1) == 0) | (np.ptp(self.R, axis=1) == 0)] = np.nan
        return out

    def kendall(self) -> np.ndarray:
        """Kendall tau-b of u vs -reward: counting over reward levels, else scipy per row."""
        if self.n_levels is None or self.n_levels > MAX_LEVELS:
            return kendall_batch(self.U, -self.R)
        L, start, n = self.levels, self.start, self.n
        less = np.zeros((self.B, n))
        greater = np.zeros((self.B, n))
        level_counts = np.zeros((self.B, self.n_levels))
        for lv in range(self.n_levels):
            eq = L == lv
            level_counts[:, lv] = eq.sum(axis=1)
            before = np.cumsum(eq, axis=1) - eq               # positions < p with this level
            earlier = np.take_along_axis(before, start, axis=1)  # ... in strictly lower u
            less += np.where(lv < L, earlier, 0)
            greater += np.where(lv > L, earlier, 0)
        s = (less - greater).sum(axis=1)
        n0 = n * (n - 1) / 2.0
        n1 = (np.arange(n) - start).sum(axis=1)              # tied-in-u pairs
        n2 = (level_counts * (level_counts - 1) / 2.0).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.clip(s / np.sqrt((n0 - n1) * (n0 - n2)), -1.0, 1.0)
        out[(n1 == n0) | (n2 == n0)] = np.nan
        return out


def _oracle_aurc(n_f: np.ndarray, n: int) -> np.ndarray:
    """AURC when every failure is ranked more uncertain than every success (vectorized in n_f)."""
    k = np.arange(1, n + 1)
    n_s = (n - np.asarray(n_f, dtype=float))[..., None]
    return (np.maximum(k - n_s, 0.0) / k).mean(axis=-1)


def pearson_batch(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Row-wise Pearson correlation; NaN where a row of X or Y is constant."""
    Xc = X - X.mean(axis=1, keepdims=True)
    Yc = Y - Y.mean(axis=1, keepdims=True)
    num = (Xc * Yc).sum(axis=1)
    den = np.sqrt((Xc * Xc).sum(axis=1) * (Yc * Yc).sum(axis=1))
    const = (np.ptp(X, axis=1) == 0) | (np.ptp(Y, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.clip(num / den, -1.0, 1.0)
    out[const] = np.nan
    return out


def kendall_batch(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Row-wise Kendall tau-b via scipy.stats.kendalltau (O(n log n) per row, looped)."""
    from scipy import stats

    out = np.full(X.shape[0], np.nan)
    for b in range(X.shape[0]):
        x, y = X[b], Y[b]
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        out[b] = stats.kendalltau(x, y).statistic
    return out


#: the count-weighted Kendall kernel materializes an n x n sign matrix; above this n the
#: bootstrap falls back to scipy.stats.kendalltau per resample.
MAX_KENDALL_MATRIX_N = 2000


def _group_pair_counts(x: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Per row of counts W: number of tied pairs in x, sum over values of c(c-1)/2."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    c = np.add.reduceat(W[:, order], starts, axis=1).astype(float)
    return (c * (c - 1) / 2.0).sum(axis=1)


def kendall_weighted(x: np.ndarray, y: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Kendall tau-b of each resample given as counts ``W`` (B, n) over the n items (x, y).

    Concordance ``S = 1/2 w^T M w`` with the fixed sign matrix
    ``M_ij = sign(x_i - x_j) sign(y_i - y_j)``, so all B resamples cost one matrix product
    (exact: float32 products of integer counts below 2^24).  Equals scipy's tau-b on the
    expanded resample.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    W = np.asarray(W)
    n = x.size
    N = W.sum(axis=1).astype(float)
    WM = np.empty(W.shape, dtype=np.float64)
    Wf = W.astype(np.float32)
    step = max(1, 4_000_000 // max(n, 1))
    for j0 in range(0, n, step):
        j1 = min(n, j0 + step)
        M = (np.sign(x[:, None] - x[None, j0:j1]) * np.sign(y[:, None] - y[None, j0:j1])
             ).astype(np.float32)
        WM[:, j0:j1] = Wf @ M
    s = (WM * W).sum(axis=1) / 2.0
    n0 = N * (N - 1) / 2.0
    n1 = _group_pair_counts(x, W)
    n2 = _group_pair_counts(y, W)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.clip(s / np.sqrt((n0 - n1) * (n0 - n2)), -1.0, 1.0)
    out[(n1 == n0) | (n2 == n0)] = np.nan
    return out


# Convenience wrappers on unsorted rows.
def auroc_batch(U, F):
    """Row-wise AUROC (Mann-Whitney with average ranks); NaN for one-class rows."""
    return SortedBatch(U, F).auroc()


def auarc_batch(U, F):
    """Row-wise AgentUQ AUARC."""
    return SortedBatch(U, F).auarc()


def auarc_tie_mean_batch(U, F):
    """Row-wise tie-invariant AUARC (mean over the orders of tied uncertainties)."""
    return SortedBatch(U, F).auarc_tie_mean()


def aurc_batch(U, F):
    """Row-wise AURC (tie-averaged)."""
    return SortedBatch(U, F).aurc()


def prr_batch(U, F):
    """Row-wise PRR; NaN for one-class rows."""
    return SortedBatch(U, F).prr()


def accuracy_rejection_batch(U, F):
    """Row-wise AgentUQ accuracy-rejection curve, (B, n+1) for k = 0..n rejected."""
    return SortedBatch(U, F).accuracy_rejection()


def risk_coverage_batch(U, F):
    """Row-wise tie-averaged risk of the k most certain, (B, n) for k = 1..n."""
    return SortedBatch(U, F).risk_coverage()


def metrics_batch(U, F, R, names=METRICS, levels=None, n_levels=None,
                  presorted: bool = False) -> dict[str, np.ndarray]:
    """All requested metrics for each row of (U, F, R); NaN marks an undefined row.

    ``levels`` (integer codes of -reward, ascending) and ``presorted`` (rows already in
    canonical order) let the bootstrap skip per-resample sorting.
    """
    unknown = [m for m in names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; known: {', '.join(METRICS)}")
    sb = SortedBatch(U, F, R, levels, n_levels, presorted)
    out: dict[str, np.ndarray] = {}
    aurc = sb.aurc() if ("aurc" in names or "prr" in names) else None
    for name in names:
        if name == "aurc":
            out[name] = aurc
        elif name == "prr":
            out[name] = sb.prr(aurc)
        else:
            out[name] = getattr(sb, name)()
    return out


# --------------------------------------------------------------------------- point metrics
def _prepare(uncertainty, failure):
    u = np.asarray(uncertainty, dtype=float).ravel()
    f = np.asarray(failure).ravel().astype(bool)
    if u.shape != f.shape:
        raise ValueError(f"uncertainty has {u.size} values but failure has {f.size}")
    if not np.all(np.isfinite(u)):
        raise ValueError("uncertainty contains NaN or infinite values; drop them first")
    if u.size < 2:
        raise UndefinedMetricError(f"fewer than 2 trajectories (n={u.size})")
    return u, f


def _require_two_classes(f: np.ndarray) -> None:
    if f.all() or not f.any():
        kind = "failures" if f.all() else "successes"
        raise UndefinedMetricError(f"only one class: all {f.size} trajectories are {kind}")


def auroc(uncertainty, failure) -> float:
    """AUROC of uncertainty for detecting failures (sklearn ``roc_auc_score``; ties count 1/2).

    Higher uncertainty should mean failure; 0.5 = chance.  Raises :class:`UndefinedMetricError`
    with one class only.
    """
    u, f = _prepare(uncertainty, failure)
    _require_two_classes(f)
    return roc_area(u, f)


def roc_area(u: np.ndarray, f: np.ndarray) -> float:
    """The area under the ROC curve of finite scores ``u`` for the boolean labels ``f`` (both classes present) as
    ``sklearn.metrics.roc_auc_score(f, u)`` computes it - the same curve (one point per distinct score, collinear
    points dropped) and the same trapezoid, so the very same float - without its input validation, which costs
    ~20x the computation on a few hundred rows (the detector's model selection computes it thousands of times).
    tests/test_metrics.py checks it equals sklearn's exactly."""
    order = np.argsort(u, kind="stable")[::-1]
    scores, y = u[order], f[order].astype(np.float64)
    thresholds = np.append(np.flatnonzero(np.diff(scores)), len(scores) - 1)
    tps = np.cumsum(y)[thresholds]
    fps = 1 + thresholds.astype(np.float64) - tps
    if len(fps) > 2:
        keep = np.flatnonzero(np.concatenate([[True], np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), [True]]))
        fps, tps = fps[keep], tps[keep]
    fps, tps = np.concatenate([[0.0], fps]), np.concatenate([[0.0], tps])
    from scipy.integrate import trapezoid

    return float(trapezoid(tps / tps[-1], fps / fps[-1]))


def auarc(uncertainty, failure) -> float:
    """AgentUQ's area under the accuracy-rejection curve (see module docstring; higher = better).

    Rejects the most uncertain first (stable sort on ``-uncertainty``).
    """
    u, f = _prepare(uncertainty, failure)
    return float(auarc_batch(u[None], f[None])[0])


def auarc_tie_mean(uncertainty, failure) -> float:
    """AUARC averaged over every order of tied uncertainties: does not depend on the input order,
    equals :func:`auarc` when no two uncertainties are equal (higher = better)."""
    u, f = _prepare(uncertainty, failure)
    return float(auarc_tie_mean_batch(u[None], f[None])[0])


def aurc(uncertainty, failure) -> float:
    """Area under the risk-coverage curve, lowest uncertainty retained first (lower = better)."""
    u, f = _prepare(uncertainty, failure)
    return float(aurc_batch(u[None], f[None])[0])


def prr(uncertainty, failure) -> float:
    """Prediction rejection ratio (1 = oracle ordering, 0 = random); see module docstring."""
    u, f = _prepare(uncertainty, failure)
    _require_two_classes(f)
    return float(prr_batch(u[None], f[None])[0])


def correlation(uncertainty, reward, kind: str = "spearman") -> float:
    """scipy Pearson / Spearman / Kendall tau-b of uncertainty vs ``-reward``.

    Positive when higher uncertainty goes with lower reward.  Raises
    :class:`UndefinedMetricError` if either input is constant or n < 2.
    """
    u = np.asarray(uncertainty, dtype=float).ravel()
    r = np.asarray(reward, dtype=float).ravel()
    if u.size < 2:
        raise UndefinedMetricError(f"fewer than 2 trajectories (n={u.size})")
    if np.ptp(u) == 0:
        raise UndefinedMetricError("uncertainty is constant, correlation undefined")
    if np.ptp(r) == 0:
        raise UndefinedMetricError("reward is constant, correlation undefined")
    from scipy import stats

    fn = {"pearson": stats.pearsonr, "spearman": stats.spearmanr, "kendall": stats.kendalltau}[kind]
    return float(fn(u, -r).statistic)


def point_metrics(u: np.ndarray, outcomes: Outcomes, names=METRICS) -> tuple[dict[str, float | None], dict[str, str]]:
    """Point estimates on cleaned arrays (``outcomes``: their rewards and failure labels, made once by the caller):
    ``({name: value or None}, {name: reason})``."""
    f, r = outcomes.failed, outcomes.reward
    values: dict[str, float | None] = {}
    undefined: dict[str, str] = {}
    for name in names:
        reason = undefined_reason(name, u, outcomes)
        if reason is not None:
            values[name], undefined[name] = None, reason
            continue
        if name == "auroc":
            values[name] = auroc(u, f)
        elif name == "auarc":
            values[name] = auarc(u, f)
        elif name == "auarc_tie_mean":
            values[name] = auarc_tie_mean(u, f)
        elif name == "aurc":
            values[name] = aurc(u, f)
        elif name == "prr":
            values[name] = prr(u, f)
        elif name in CORRELATIONS:
            values[name] = correlation(u, r, name)
        else:
            raise ValueError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    return values, undefined


# --------------------------------------------------------------------------- curves
def failure_curves(uncertainty, reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                   invert: bool = False) -> pd.DataFrame:
    """Long-format curves for plots and ``eval_curves.csv``: columns ``curve, x, y``.

    Higher uncertainty = more likely failure (``invert=True`` negates a confidence score).
    Non-finite rows are dropped. ``reward``: the rewards, or their :class:`Outcomes` (labelled once by the caller;
    ``failure_threshold`` is then theirs).

    * ``roc``: x = false-positive rate, y = true-positive rate (sklearn ``roc_curve``, all
      thresholds kept); only when both classes are present.
    * ``accuracy_rejection``: x = rejection rate k/n (k = 0..n, most uncertain rejected first,
      stable), y = success rate of the retained, 1.0 at k = n (AgentUQ's AUARC curve).
    * ``risk_coverage``: x = coverage k/n (k = 1..n, least uncertain retained first), y = failure
      rate among the retained (tie-averaged, as in AURC).
    """
    u, outcomes, _ = clean_outcomes(uncertainty, reward, failure_threshold, invert)
    f = outcomes.failed
    n = len(u)
    frames = []
    if n and 0 < f.sum() < n:
        from sklearn.metrics import roc_curve

        fpr, tpr, _ = roc_curve(f, u, drop_intermediate=False)
        frames.append(pd.DataFrame({"curve": "roc", "x": fpr, "y": tpr}))
    if n:
        acc = accuracy_rejection_batch(u[None], f[None])[0]
        frames.append(pd.DataFrame({"curve": "accuracy_rejection",
                                    "x": np.arange(n + 1) / n, "y": acc}))
        risk = risk_coverage_batch(u[None], f[None])[0]
        frames.append(pd.DataFrame({"curve": "risk_coverage",
                                    "x": np.arange(1, n + 1) / n, "y": risk}))
    if not frames:
        return pd.DataFrame({"curve": pd.Series(dtype=str), "x": pd.Series(dtype=float),
                             "y": pd.Series(dtype=float)})
    return pd.concat(frames, ignore_index=True)
