"""Calibration: an uncertainty score turned into a failure probability, and how good that probability is.

Kernels on arrays (the run-folder report is :mod:`agentuq_nb.steps.calibrate`). Failure (``reward <
failure_threshold``) is the positive class; a score is oriented so that higher = more likely failure
(``invert=True`` negates a confidence first), as everywhere in :mod:`agentuq_nb.evaluation`.

* **Maps** (:func:`fit_calibrator`): Platt scaling - sklearn ``LogisticRegression`` on the standardized
  score with a weak L2 penalty (``C = PLATT_C``): Platt's sigmoid, kept finite when a small run's
  classes separate; isotonic regression - sklearn ``IsotonicRegression(out_of_bounds="clip")``,
  increasing, in [0, 1]. A fitted :class:`Calibrator` is applied to another run's scores (transfer).
* **Cross-fitting** (:func:`cross_fitted_probabilities`): ``StratifiedGroupKFold`` by task and failure label
  (``GroupKFold`` when a class is too rare to reach every fold), so a trajectory's probability always
  comes from a map fitted on other tasks only (``fold`` says which).
* **Scores of a probability**: :func:`expected_calibration_error` over equal-mass bins, with the
  debiased L2 estimator of Kumar, Liang & Ma (2019, "Verified uncertainty calibration"): the plug-in
  squared gap ``(p̄_b - ȳ_b)²`` of a bin overstates the true one by the sampling variance of the
  observed rate ``ȳ_b``; subtracting its unbiased estimate ``ȳ_b(1 - ȳ_b)/(n_b - 1)`` makes each bin's
  term unbiased, which matters at the tens-of-trajectories sizes of an agent study (chosen over
  a bias-corrected L1 ECE because the L1 correction has no closed form);
  :func:`brier_decomposition` (Murphy 1973); :func:`reliability_table`; log loss (sklearn).

netcal (1.4.0) is not used: it requires torch, pyro-ppl, gpytorch and tensorboard for what sklearn
and a few lines of numpy do here.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from agentuq_nb.evaluation.defaults import METHODS

#: inverse L2 strength of Platt scaling on the standardized score: near-unpenalized, finite on separable data
PLATT_C = 100.0
BIN_STRATEGIES = ("quantile", "uniform")


def one_thread():
    """Fits of a few hundred rows run on one BLAS and one OpenMP thread: threads only wait on each other there
    (the combined predictor of a 24-trajectory run took 8.8 s with two OpenBLAS threads on a loaded 2-core
    machine, 0.3 s with one; a 100-tree ``HistGradientBoostingClassifier`` on 40 rows 0.45 s with two OpenMP
    threads, 0.07 s with one). Reentrant: inside another ``one_thread`` of the same thread the limit already holds,
    and it is not set again - threadpoolctl finds the loaded libraries anew each time (their paths resolved one by
    one), which cost train-detector's model selections ~3 % of their time at a few dozen fits each (issue 48)."""
    if getattr(_ONE_THREAD, "held", False):
        return contextlib.nullcontext()
    return _held_one_thread()


#: per thread: whether a :func:`one_thread` limit is held (the nested ones then set nothing)
_ONE_THREAD = threading.local()


@contextlib.contextmanager
def _held_one_thread() -> Iterator[None]:
    # threadpoolctl limits the native pools loaded when the limit is set: scikit-learn's OpenMP runtime and SciPy's
    # BLAS load with sklearn, which this module imports where it fits (not at its own import), so it is loaded first
    import sklearn  # noqa: F401

    with threadpool_limits(limits=1):
        _ONE_THREAD.held = True
        try:
            yield
        finally:
            _ONE_THREAD.held = False


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")


def oriented(scores, invert: bool = False) -> np.ndarray:
    """The score as a float array with higher = more likely failure (a confidence negated)."""
    s = np.asarray(scores, dtype=float)
    return -s if invert else s


@dataclass
class Calibrator:
    """A fitted map from an (oriented) score to a failure probability; NaN scores map to NaN.

    ``constant`` is set instead of ``model`` when the training data held one class only (the map is
    then that class's rate, 0 or 1)."""

    method: str
    invert: bool
    model: object | None = None
    constant: float | None = None
    n_fitted: int = 0

    def predict(self, scores) -> np.ndarray:
        s = oriented(scores, self.invert)
        prob = np.full(s.shape, np.nan)
        ok = np.isfinite(s)
        if self.constant is not None:
            prob[ok] = self.constant
        elif ok.any():
            if self.method == "platt":
                prob[ok] = self.model.predict_proba(s[ok, None])[:, 1]
            else:
                prob[ok] = self.model.predict(s[ok])
        return prob


def fit_calibrator(scores, failure, method: str = "platt", invert: bool = False) -> Calibrator:
    """Fit Platt scaling or isotonic regression of ``failure`` (bool/0-1) on the oriented ``scores``
    (rows with a non-finite score are left out)."""
    _check_method(method)
    s = oriented(scores, invert)
    y = np.asarray(failure, dtype=bool)
    if s.shape != y.shape:
        raise ValueError(f"scores ({s.shape}) and failure ({y.shape}) must have the same length")
    ok = np.isfinite(s)
    s, y = s[ok], y[ok]
    if len(y) == 0:
        raise ValueError("no finite score to fit a calibrator on")
    if y.all() or not y.any():
        return Calibrator(method, invert, constant=float(y[0]), n_fitted=int(len(y)))
    # sklearn imported where it fits (about 1 s a process): a command that fits no map does not pay for it
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if method == "platt":
        model = make_pipeline(StandardScaler(), LogisticRegression(C=PLATT_C)).fit(s[:, None], y)
    else:
        model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(s, y)
    return Calibrator(method, invert, model=model, n_fitted=int(len(y)))


class CrossFit(NamedTuple):
    """Out-of-fold failure probabilities and the fold that scored each row (-1: not scored)."""

    prob: np.ndarray
    fold: np.ndarray


def group_folds(groups, n_splits: int = 5, seed=0, rows=None, labels=None) -> np.ndarray:
    """Fold of every row from ``StratifiedGroupKFold`` over ``groups`` and the failure ``labels`` (shuffled,
    seeded; ``GroupKFold`` without labels or when a class has fewer rows than folds); rows outside the mask
    ``rows`` get -1. Fewer groups than ``n_splits`` give one fold per group.

    Stratified because pooled out-of-fold predictions are biased against the labels when folds differ in
    failure rate: a map that leans on its training fold's base rate predicts low exactly where the held-out
    fold holds many failures (measured on the 4-trial quickstart: the combined predictor's pooled AUROC was
    0.25 with plain ``GroupKFold``, fold failure rates 0.63-0.96)."""
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    g = np.asarray(groups)
    rows = np.ones(len(g), bool) if rows is None else np.asarray(rows, bool)
    fold = np.full(len(g), -1)
    n_groups = len(np.unique(g[rows]))
    if n_groups < 2:
        raise ValueError(f"cross-fitting needs at least 2 tasks (groups); got {n_groups}")
    idx = np.flatnonzero(rows)
    k = min(n_splits, n_groups)
    counts = np.unique(np.asarray(labels)[idx], return_counts=True)[1] if labels is not None else np.array([])
    if counts.size == 2 and counts.min() >= k:
        splits = StratifiedGroupKFold(n_splits=k, shuffle=True, random_state=seed).split(
            idx, np.asarray(labels)[idx], groups=g[idx])
    else:  # no labels, one class, or a class too rare to reach every fold: plain GroupKFold
        splits = GroupKFold(n_splits=k, shuffle=True, random_state=seed).split(idx, groups=g[idx])
    for k, (_, test) in enumerate(splits):
        fold[idx[test]] = k
    return fold


def cross_fitted_probabilities(scores, failure, groups, method: str = "platt", n_splits: int = 5, seed=0,
                               invert: bool = False) -> CrossFit:
    """Failure probability of every row from a calibrator fitted on the other folds (:func:`group_folds`) by
    ``groups`` (the task): no row is scored by a map that saw its task. Rows with a non-finite score are
    neither fitted on nor scored (probability NaN, fold -1)."""
    _check_method(method)
    s = oriented(scores, invert)
    y = np.asarray(failure, dtype=bool)
    g = np.asarray(groups)
    if not (len(s) == len(y) == len(g)):
        raise ValueError(f"scores, failure and groups must have one length; got {len(s)}, {len(y)}, {len(g)}")
    fold = group_folds(g, n_splits, seed, rows=np.isfinite(s), labels=y)
    prob = np.full(len(s), np.nan)
    with one_thread():
        for k in range(fold.max() + 1):
            test, train = fold == k, (fold >= 0) & (fold != k)
            prob[test] = fit_calibrator(s[train], y[train], method).predict(s[test])
    return CrossFit(prob, fold)


def _prob_and_labels(prob, failure) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(prob, dtype=float)
    y = np.asarray(failure, dtype=float)
    if p.shape != y.shape:
        raise ValueError(f"prob ({p.shape}) and failure ({y.shape}) must have the same length")
    ok = np.isfinite(p) & np.isfinite(y)
    p, y = p[ok], y[ok]
    if len(p) and (p.min() < 0 or p.max() > 1):
        raise ValueError("prob must lie in [0, 1]")
    return p, y


def bin_ids(prob: np.ndarray, n_bins: int = 10, strategy: str = "quantile") -> tuple[np.ndarray, np.ndarray]:
    """Bin of every probability and the bin edges, as ``sklearn.calibration.calibration_curve`` bins them:
    ``quantile`` = equal-mass edges at the probabilities' quantiles (ties can make bins unequal or empty),
    ``uniform`` = equal width on [0, 1]."""
    if strategy not in BIN_STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(BIN_STRATEGIES)}, not {strategy!r}")
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, not {n_bins}")
    edges = (np.percentile(prob, np.linspace(0, 100, n_bins + 1)) if strategy == "quantile"
             else np.linspace(0.0, 1.0, n_bins + 1))
    return np.searchsorted(edges[1:-1], prob), edges


def reliability_table(prob, failure, n_bins: int = 10, strategy: str = "quantile") -> pd.DataFrame:
    """One row per non-empty bin: ``bin, lo, hi`` (edges), ``mean_prob``, ``failure_rate`` (observed), ``count`` -
    what a reliability diagram draws - and ``sq_error``, the bin's mean of (p - y)² (count-weighted over the bins:
    the Brier score, which a diagram's legend gives)."""
    p, y = _prob_and_labels(prob, failure)
    if len(p) == 0:
        return pd.DataFrame(columns=["bin", "lo", "hi", "mean_prob", "failure_rate", "count", "sq_error"])
    ids, edges = bin_ids(p, n_bins, strategy)
    t = (pd.DataFrame({"bin": ids, "p": p, "y": y, "se": (p - y) ** 2}).groupby("bin")
         .agg(mean_prob=("p", "mean"), failure_rate=("y", "mean"), count=("y", "size"), sq_error=("se", "mean"))
         .reset_index())
    t.insert(1, "lo", edges[t["bin"].to_numpy()])
    t.insert(2, "hi", edges[t["bin"].to_numpy() + 1])
    return t


def expected_calibration_error(prob, failure, n_bins: int = 10, strategy: str = "quantile") -> dict:
    """ECE over ``n_bins`` bins (equal-mass by default): ``ece`` = Σ_b w_b |p̄_b - ȳ_b| (L1, the usual
    one), ``ece_l2`` = sqrt(Σ_b w_b (p̄_b - ȳ_b)²), and ``ece_debiased`` = Kumar et al.'s debiased L2:
    sqrt(max(0, Σ_b w_b [(p̄_b - ȳ_b)² - ȳ_b(1 - ȳ_b)/(n_b - 1)])) (bins of one row add no correction).
    NaN when there is no row."""
    t = reliability_table(prob, failure, n_bins, strategy)
    if t.empty:
        return {"ece": float("nan"), "ece_l2": float("nan"), "ece_debiased": float("nan"), "n_bins_used": 0}
    w = t["count"].to_numpy() / t["count"].sum()
    gap = t["mean_prob"].to_numpy() - t["failure_rate"].to_numpy()
    rate, n_b = t["failure_rate"].to_numpy(), t["count"].to_numpy()
    correction = np.where(n_b > 1, rate * (1 - rate) / np.maximum(n_b - 1, 1), 0.0)
    return {"ece": float(w @ np.abs(gap)), "ece_l2": float(np.sqrt(w @ gap ** 2)),
            "ece_debiased": float(np.sqrt(max(0.0, w @ (gap ** 2 - correction)))), "n_bins_used": int(len(t))}


def brier_decomposition(prob, failure, n_bins: int = 10, strategy: str = "quantile") -> dict:
    """Brier score and Murphy's (1973) decomposition over ``n_bins`` bins of the forecasts.

    ``reliability`` = Σ_b w_b (p̄_b - ȳ_b)², ``resolution`` = Σ_b w_b (ȳ_b - ȳ)², ``uncertainty`` =
    ȳ(1 - ȳ). ``brier = reliability - resolution + uncertainty`` holds exactly only for forecasts that
    are constant within a bin; for binned continuous forecasts the ``remainder`` ``brier - (rel - res +
    unc)`` equals ``within_bin_variance - 2 * within_bin_covariance`` (Stephenson et al. 2008), both given.
    """
    p, y = _prob_and_labels(prob, failure)
    if len(p) == 0:
        return dict.fromkeys(("brier", "reliability", "resolution", "uncertainty", "remainder",
                              "within_bin_variance", "within_bin_covariance"), float("nan"))
    ids, _ = bin_ids(p, n_bins, strategy)
    frame = pd.DataFrame({"b": ids, "p": p, "y": y})
    g = frame.groupby("b")
    p_bar, y_bar = g["p"].transform("mean").to_numpy(), g["y"].transform("mean").to_numpy()
    base = y.mean()
    brier = float(np.mean((p - y) ** 2))
    rel, res = float(np.mean((p_bar - y_bar) ** 2)), float(np.mean((y_bar - base) ** 2))
    unc = float(base * (1 - base))
    return {"brier": brier, "reliability": rel, "resolution": res, "uncertainty": unc,
            "remainder": brier - (rel - res + unc),
            "within_bin_variance": float(np.mean((p - p_bar) ** 2)),
            "within_bin_covariance": float(np.mean((p - p_bar) * (y - y_bar)))}


def calibration_report(prob, failure, n_bins: int = 10, strategy: str = "quantile") -> dict:
    """Everything about one vector of failure probabilities (JSON-ready): ``n``, ``n_failures``, the ECEs,
    the Brier decomposition, ``log_loss`` (sklearn's; None with one class), the ``bins`` strategy."""
    p, y = _prob_and_labels(prob, failure)
    out = {"n": int(len(p)), "n_failures": int(y.sum()), "n_bins": int(n_bins), "bins": strategy}
    out.update(expected_calibration_error(p, y, n_bins, strategy))
    out.update(brier_decomposition(p, y, n_bins, strategy))
    from sklearn.metrics import log_loss

    out["log_loss"] = float(log_loss(y, p, labels=[0, 1])) if len(np.unique(y)) == 2 else None
    return out


#: the columns of :func:`calibration_table` a method's report gives
CALIBRATION_TABLE_COLUMNS = ["n", "n_failures", "ece", "ece_debiased", "brier", "reliability", "resolution",
                             "uncertainty", "log_loss"]


def calibration_table(report: dict) -> pd.DataFrame:
    """The calibration report of a run (``calibration.json``: per estimator, each method's report) as one row per
    (setting, estimator, method): ``setting`` is ``cross_fitted`` (this run, by task) or ``transfer`` (fitted on
    this run, evaluated on the other); an estimator whose calibration is undefined keeps a row with the reason.
    Ordered by the Brier score within a setting (lowest first): ECE alone would put first a predictor that always
    says the base rate (ECE near 0, no resolution)."""
    sections = [("cross_fitted", report.get("estimators") or {})]
    if report.get("transfer"):
        sections.append(("transfer", report["transfer"]["estimators"]))
    rows = []
    for setting, estimators in sections:
        for name, entry in estimators.items():
            base = {"setting": setting, "estimator": name, "family": entry.get("family"),
                    "protocol": entry.get("protocol")}
            if not entry.get("methods"):
                rows.append({**base, "method": None, "undefined": entry.get("undefined")})
            for method, rep in entry.get("methods", {}).items():
                rows.append({**base, "method": method, **{c: rep.get(c) for c in CALIBRATION_TABLE_COLUMNS},
                             "undefined": None})
    columns = ["setting", "estimator", "family", "protocol", "method", *CALIBRATION_TABLE_COLUMNS, "undefined"]
    frame = pd.DataFrame(rows, columns=columns)
    frame[CALIBRATION_TABLE_COLUMNS] = frame[CALIBRATION_TABLE_COLUMNS].astype(float)
    return frame.sort_values(["setting", "brier"], na_position="last", kind="stable").reset_index(drop=True)
