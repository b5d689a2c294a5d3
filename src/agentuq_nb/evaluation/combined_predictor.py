"""The combined predictors: logistic regression or gradient boosting over several estimators, cross-fitted by task.

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

Gradient boosting (``model="gbm"``: sklearn's ``HistGradientBoostingClassifier``, which takes missing values
as they are, so no imputer) is tuned the same way: a small grid of tree depth and learning rate
(:data:`GBM_GRID`) searched by ``GridSearchCV`` over the inner ``GroupKFold`` by task of each outer training
fold (Brier score), the best refitted on that fold (``gbm_grid`` replaces some of the grid's lists: a smaller
search, e.g. for a smoke run). With tens of trajectories it can only find a few strong
splits; it is there to show whether interactions of the black-box signals add anything to a linear map.

Reading its AUROC: pooled out-of-fold predictions are pessimistically biased when the inputs carry little
signal (Airola et al. 2011, "An experimental comparison of cross-validation techniques for estimating the
area under the ROC curve"): a model shrunk towards its intercept predicts each fold's *training* failure
rate, which is low exactly when the held-out fold holds many failures, so the pooled AUROC falls below 0.5
(measured on the 1-trial quickstart, 27 trajectories: 0.14-0.18). An AUROC well under 0.5 here means "no
usable signal at this size", not an inverted one.
"""
from __future__ import annotations

import functools
import inspect
import math

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.calibration import CrossFit, group_folds, one_thread

#: the grid of inverse L2 strengths tried by the inner cross-validation
C_GRID = tuple(np.logspace(-3, 3, 7))
#: the models a combined predictor can be
MODELS = ("logistic", "gbm")
#: gradient boosting: the settings the inner cross-validation chooses among (the rest fixed: 100 shallow trees,
#: at least 5 trajectories a leaf, L2 1.0 - a small model for tens of trajectories)
GBM_GRID = {"max_depth": [2, 3], "learning_rate": [0.05, 0.2]}
GBM_FIXED = {"max_iter": 100, "min_samples_leaf": 5, "l2_regularization": 1.0, "early_stopping": False}


def gbm_search_grid(gbm_grid: dict[str, list] | None = None) -> dict[str, list]:
    """:data:`GBM_GRID` with the lists ``gbm_grid`` gives instead (None: the grid as it is); a setting the grid does
    not tune, an empty list, a depth that is not a whole number from 1 or a learning rate not above 0 is refused."""
    if gbm_grid is None:
        return GBM_GRID
    unknown = sorted(set(gbm_grid) - set(GBM_GRID))
    if unknown:
        raise ValueError(f"gbm_grid: {', '.join(unknown)} is not tuned by the grid; it tunes {', '.join(GBM_GRID)}")
    for name, values in gbm_grid.items():
        values = list(values)
        if not values:
            raise ValueError(f"gbm_grid: {name} needs at least one value")
        if name == "max_depth" and not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ValueError(f"gbm_grid: max_depth values are whole numbers from 1; got {values}")
        if name == "learning_rate" and not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf
                                               for v in values):
            raise ValueError(f"gbm_grid: learning_rate values are numbers above 0; got {values}")
    return {**GBM_GRID, **{name: list(values) for name, values in gbm_grid.items()}}


@functools.cache
def new_cv_args() -> dict:
    """What scikit-learn 1.8+ asks to be explicit for ``LogisticRegressionCV`` (plain L2, the new fitted
    attributes); older ones lack them. A function, not a constant: sklearn is imported when a model is fitted, not
    by every process that imports this module (about 1 s each)."""
    from sklearn.linear_model import LogisticRegressionCV

    return {k: v for k, v in (("l1_ratios", (0.0,)), ("use_legacy_attributes", False))
            if k in inspect.signature(LogisticRegressionCV).parameters}


def inner_splits_by_task(X: np.ndarray, y: np.ndarray, groups: np.ndarray, inner_splits: int = 3, seed=0):
    """The inner ``GroupKFold`` splits by task of a training fold, if every training part holds both classes."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        return None
    inner = GroupKFold(n_splits=min(inner_splits, n_groups), shuffle=True, random_state=seed)
    splits = list(inner.split(X, y, groups))
    return splits if all(0 < y[train].sum() < len(train) for train, _ in splits) else None


def combination_model(X: np.ndarray, y: np.ndarray, groups: np.ndarray, inner_splits: int = 3, seed=0,
                      model: str = "logistic", gbm_grid: dict[str, list] | None = None):
    """The pipeline for one training fold, tuned by an inner ``GroupKFold`` by task whose every training part
    holds both classes: logistic regression's C over :data:`C_GRID`, gradient boosting's :data:`GBM_GRID` (with
    ``gbm_grid``'s lists instead, :func:`gbm_search_grid`); the untuned model (C = 1, the grid's first setting) when
    no such split exists (too few tasks)."""
    if model not in MODELS:
        raise ValueError(f"unknown combined model {model!r}; one of {', '.join(MODELS)}")
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    grid = gbm_search_grid(gbm_grid)
    splits = inner_splits_by_task(X, y, groups, inner_splits, seed)
    if model == "gbm":
        gbm = HistGradientBoostingClassifier(random_state=seed, **GBM_FIXED)
        if splits is None:
            return gbm.set_params(**{k: v[0] for k, v in grid.items()})
        return GridSearchCV(gbm, grid, cv=splits, scoring="neg_brier_score")
    head = [SimpleImputer(strategy="median"), StandardScaler()]
    if splits is not None:
        return make_pipeline(*head, LogisticRegressionCV(Cs=list(C_GRID), cv=splits, scoring="neg_brier_score",
                                                         max_iter=1000, **new_cv_args()))
    return make_pipeline(*head, LogisticRegression(max_iter=1000))


def cross_fitted_combination(features: pd.DataFrame, failure, groups, n_splits: int = 5, inner_splits: int = 3,
                             seed=0, model: str = "logistic", gbm_grid: dict[str, list] | None = None) -> CrossFit:
    """Out-of-fold failure probabilities of the combined predictor over the (oriented) ``features`` columns
    (``gbm_grid``: gradient boosting's tuning grid, :func:`combination_model`).

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
    gbm_search_grid(gbm_grid)  # a bad grid refused before any fit
    fold = group_folds(g, n_splits, seed, labels=y)
    prob = np.full(len(y), np.nan)
    with one_thread():
        for k in range(fold.max() + 1):
            test, train = fold == k, fold != k
            if y[train].all() or not y[train].any():
                prob[test] = float(y[train][0])
                continue
            fitted = combination_model(X[train], y[train], g[train], inner_splits, seed, model, gbm_grid)
            prob[test] = fitted.fit(X[train], y[train]).predict_proba(X[test])[:, 1]
    return CrossFit(prob, fold)
