"""Length control: does an estimator predict failure beyond how long the conversation was?

Sum-type statistics grow with the number of messages, and on agent runs failure and length are
correlated, so a raw AUROC can be length in disguise. Two length-controlled AUROCs per estimator, on the
oriented score (higher = more likely failure) and failure = positive class:

* :func:`stratified_auroc` - trajectories are split into up to ``n_strata`` quantile strata of the
  message count (:func:`length_strata`); the AUROC is computed over the (failure, success) pairs *within*
  a stratum only. That equals the average of the within-stratum AUROCs weighted by each stratum's number
  of failure-success pairs (a stratum with one class has no pair and drops out) - a length-matched
  comparison in the spirit of a stratified Mann-Whitney statistic;
* :func:`residual_auroc` - the AUROC of the residual of an OLS fit of the score on ``1 + log(num_messages)``
  (``numpy.linalg.lstsq``: one regressor, no need for statsmodels' model objects): what the score says
  after the part linear in log length is taken out.

:func:`beats_length_baseline` is the rule the estimator table and the forest plot use: an estimator beats
the length baselines when the paired 95% interval of its raw AUROC minus the best length baseline's
(``num_messages``, ``num_tool_calls``, ``agent_chars``; the one with the highest raw AUROC), computed on the
trajectories both score with the same task resamples for both, lies above 0 - and it was not tuned on the labels
it is evaluated on (an in-sample readout is optimistic by construction). The baselines themselves never "beat"
themselves.

The length-controlled AUROCs of ``num_messages`` itself are ≈ 0.5 by construction (its strata hold it fixed;
the residual regresses it out): the estimator table leaves them out rather than rank the baseline by them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.metrics import auroc

DEFAULT_STRATA = 4


def length_strata(num_messages, n_strata: int = DEFAULT_STRATA) -> np.ndarray:
    """Stratum (0..k-1) of every trajectory: quantile bins of ``num_messages`` (``pandas.qcut``, equal
    edges merged, so fewer strata when lengths repeat); -1 where the length is not finite."""
    m = np.asarray(num_messages, dtype=float)
    out = np.full(len(m), -1)
    ok = np.isfinite(m)
    if ok.sum() == 0:
        return out
    if len(np.unique(m[ok])) == 1:
        out[ok] = 0
        return out
    out[ok] = pd.qcut(m[ok], q=n_strata, labels=False, duplicates="drop")
    return out


def stratified_auroc(uncertainty, failure, strata) -> dict:
    """AUROC over within-stratum (failure, success) pairs; ``{"auroc", "n_pairs", "n_strata_used"}``
    (``auroc`` NaN when no stratum holds both classes). Rows with a non-finite score or stratum -1 are
    left out."""
    u = np.asarray(uncertainty, dtype=float)
    y = np.asarray(failure, dtype=bool)
    s = np.asarray(strata)
    ok = np.isfinite(u) & (s >= 0)
    total, pairs, used = 0.0, 0, 0
    for k in np.unique(s[ok]):  # at most a handful of strata
        rows = ok & (s == k)
        n_pos, n_neg = int(y[rows].sum()), int((~y[rows]).sum())
        if n_pos and n_neg:
            total += auroc(u[rows], y[rows]) * n_pos * n_neg
            pairs += n_pos * n_neg
            used += 1
    return {"auroc": total / pairs if pairs else float("nan"), "n_pairs": pairs, "n_strata_used": used}


def length_residual(uncertainty, num_messages) -> np.ndarray:
    """Residual of the OLS fit ``score ~ 1 + log(num_messages)`` (NaN where either is missing or the length
    is not positive)."""
    u = np.asarray(uncertainty, dtype=float)
    m = np.asarray(num_messages, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.log(m)
    ok = np.isfinite(u) & np.isfinite(x)
    out = np.full(len(u), np.nan)
    if ok.sum() < 2:
        return out
    design = np.column_stack([np.ones(ok.sum()), x[ok]])
    coef, *_ = np.linalg.lstsq(design, u[ok], rcond=None)
    out[ok] = u[ok] - design @ coef
    return out


def residual_auroc(uncertainty, failure, num_messages) -> float:
    """AUROC of :func:`length_residual` (NaN with one class or fewer than two rows)."""
    r = length_residual(uncertainty, num_messages)
    y = np.asarray(failure, dtype=bool)
    ok = np.isfinite(r)
    if ok.sum() < 2 or y[ok].all() or not y[ok].any():
        return float("nan")
    return auroc(r[ok], y[ok])


def length_controlled(uncertainty, failure, num_messages, n_strata: int = DEFAULT_STRATA) -> dict:
    """Both length-controlled AUROCs of one oriented score: ``auroc_stratified``, ``auroc_residual``,
    ``n_strata_used``."""
    strat = stratified_auroc(uncertainty, failure, length_strata(num_messages, n_strata))
    return {"auroc_stratified": strat["auroc"], "auroc_residual": residual_auroc(uncertainty, failure, num_messages),
            "n_strata_used": strat["n_strata_used"]}


def beats_length_baseline(diff_lo: float | None, in_sample: bool = False) -> bool | None:
    """The rule of the module docstring from the lower end of the paired 95% interval of AUROC(estimator) -
    AUROC(best length baseline): None when it is undefined, False for an estimator tuned in-sample, else
    ``diff_lo > 0``."""
    if diff_lo is None or not np.isfinite(diff_lo):
        return None
    return False if in_sample else bool(diff_lo > 0)
