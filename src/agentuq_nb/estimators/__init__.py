"""Trajectory-level uncertainty estimators behind one interface, found by name.

``Estimator`` (``name``, ``family``, ``higher_is_uncertain``, ``requires``, ``scores(run)``),
``register`` (a class decorator), ``Family`` (what a family declares of itself, once, on its module:
``declare_family``), ``get(name)``, ``available(run)`` and ``estimators(run)``. The
package's own: token statistics per role and scorer (:mod:`.token`), resampled
actions per decision point (:mod:`.actions`), SAUP and early warning
(:mod:`.propagation`), verbalized confidence (:mod:`.verbalized`), black-box signals that need no
log-probs (structure and TRACER, :mod:`.blackbox`), the combined predictors' out-of-fold probabilities
(:mod:`.combined`), length baselines (:mod:`.baselines`). Evaluation (``agentuq_nb.evaluation``) scores any of
them by name. A new module here is imported with the package (and so registers its estimators).
"""
import importlib as _importlib
import pkgutil as _pkgutil

# every module of this package is imported (in name order) and registers its estimators: a new family's module
# is found here, not listed
for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    _importlib.import_module(f"{__name__}.{_module}")

from agentuq_nb.estimators.actions import skipped_action_statistics
from agentuq_nb.estimators.base import (
    ENTRY_POINT_GROUP,
    Estimator,
    EstimatorFamily,
    Family,
    ScoreColumn,
    UnknownEstimatorError,
    available,
    by_trajectory,
    declare_family,
    estimators,
    get,
    load_plugin,
    load_plugins,
    register,
    unregister,
)
from agentuq_nb.estimators.baselines import BASELINES
from agentuq_nb.estimators.token import TokenEstimator, default_scorer, token_estimator_name

__all__ = ["Estimator", "EstimatorFamily", "Family", "declare_family", "UnknownEstimatorError", "ScoreColumn", "register", "unregister", "get", "available", "estimators", "by_trajectory",
           "load_plugin", "load_plugins", "ENTRY_POINT_GROUP", "BASELINES", "TokenEstimator", "default_scorer",
           "token_estimator_name", "skipped_action_statistics"]
