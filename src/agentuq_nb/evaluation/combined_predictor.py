"""The combined predictor: logistic regression over several estimators, cross-fitted by task.

What the uncertainty estimators add to length is read off two fits of the same model: one over the
chosen (non-baseline) estimators, one over those plus the length baselines. Each is an sklearn pipeline
``SimpleImputer(median) -> StandardScaler -> LogisticRegressionCV``, fitted on the outer training fold, so
the imputation medians and the standardization come from it only; the inverse regularization ``C`` is
tuned by ``LogisticRegressionCV`` over an inner ``GroupKFold`` by task of that training fold (Brier
score; it walks the C path warm-started, ~10x faster than ``GridSearchCV`` over the pipeline, at the cost
of imputing and standardizing the inner folds with the whole training fold's medians and scales, which
never touches the outer test fold). Every trajectory's failure probability comes from the outer fold that
held its task out (nested cross-fitting).
Inputs are oriented first (a confidence is negated), so coefficients read as "higher = more likely failure".

Reading its AUROC: pooled out-of-fold predictions are pessimistically biased when the inputs carry little
signal (Airola et al. 2011, "An experimental comparison of cross-validation techniques for estimating the
area under the ROC curve"): a model shrunk towards its intercept predicts each fold's *training* failure
rate, which is low exactly when the held-out fold holds many failures, so the pooled AUROC falls below 0.5
(measured on the 1-trial quickstart, 27 trajectories: 0.14-0.18). An AUROC well under 0.5 here means "no
usable signal at this size", not an inverted one.
"""
from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.model_selection import GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from agentuq_nb.evaluation.calibration import CrossFit, group_folds, one_blas_thread

#: the grid of inverse L2 strengths tried by the inner cross-validation
C_GRID = tuple(np.logspace(-3, 3, 7))
# scikit-learn 1.8+ asks for these to be explicit (plain L2, the new fitted attributes); older ones lack them
_NEW_CV_ARGS = {k: v for k, v in (("l1_ratios", (0.0,)), ("use_legacy_attributes", False))
                if k in inspect.signature(LogisticRegressionCV).parameters}


def combination_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, inner_splits: int = 3, seed=0):
    """The pipeline for one training fold, C tuned over :data:`C_GRID` by an inner ``GroupKFold`` by task
    whose every training part holds both classes; plain ``C = 1`` when no such split exists (too few tasks)."""
    head = [SimpleImputer(strategy="median"), StandardScaler()]
    n_groups = len(np.unique(groups))
    if n_groups >= 2:
        inner = GroupKFold(n_splits=min(inner_splits, n_groups), shuffle=True, random_state=seed)
        splits = list(inner.split(X, y, groups))
        if all(0 < y[train].sum() < len(train) for train, _ in splits):
            return make_pipeline(*head, LogisticRegressionCV(Cs=list(C_GRID), cv=splits, scoring="neg_brier_score",
                                                             max_iter=1000, **_NEW_CV_ARGS))
    return make_pipeline(*head, LogisticRegression(max_iter=1000))


def cross_fitted_combination(features: pd.DataFrame, failure, groups, n_splits: int = 5, inner_splits: int = 3,
                             seed=0) -> CrossFit:
    """Out-of-fold failure probabilities of the combined predictor over the (oriented) ``features`` columns.

    Rows are all scored (missing inputs imputed by the training fold's medians); a column with no finite
    value in a training fold is dropped by the imputer for that fold. A training fold with one class scores
    its test fold with that class's rate."""
    X = features.to_numpy(dtype=float)
    y = np.asarray(failure, dtype=bool)
    g = np.asarray(groups)
    if X.shape[1] == 0:
        raise ValueError("the combined predictor needs at least one input estimator")
    if not (len(X) == len(y) == len(g)):
        raise ValueError(f"features, failure and groups must have one length; got {len(X)}, {len(y)}, {len(g)}")
    fold = group_folds(g, n_splits, seed, labels=y)
    prob = np.full(len(y), np.nan)
    with one_blas_thread():
        for k in range(fold.max() + 1):
            test, train = fold == k, fold != k
            if y[train].all() or not y[train].any():
                prob[test] = float(y[train][0])
                continue
            model = combination_model(X[train], y[train], g[train], inner_splits, seed)
            prob[test] = model.fit(X[train], y[train]).predict_proba(X[test])[:, 1]
    return CrossFit(prob, fold)
