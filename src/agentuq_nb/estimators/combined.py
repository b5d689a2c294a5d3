"""The combined predictors: what each combines, and their out-of-fold failure probabilities read back as estimators.

``compare-estimators`` (:mod:`agentuq_nb.evaluation.estimator_table`) fits each combination of :data:`COMBINED`
cross-fitted by task and writes the out-of-fold probabilities to ``combined_scores.parquet``; the estimators
registered here read them back, so that ``compare-runs`` ranks the combinations beside the signals they combine
and a notebook can draw their calibration. They saw the run's labels (through their folds): ``uses_labels``,
never an input of another combination, and never re-evaluated as ordinary rows of the table that made them.
"""
from __future__ import annotations

from dataclasses import dataclass

from agentuq_nb.estimators.base import Family, declare_family, register
from agentuq_nb.estimators.blackbox import BlackBoxColumn

#: the combined predictors' out-of-fold probabilities (fitted to the labels, cross-fitted by task)
COMBINED_FAMILY = declare_family(Family("combined", rank=80, label="combined (cross-fitted)", color="#000000",
                                        forest_order=7, combination=True))


@dataclass(frozen=True)
class Combination:
    """A combined predictor: its model, which estimators it combines, and whether length is an input."""

    model: str  # "logistic" | "gbm" (evaluation.combined_predictor.MODELS)
    inputs: str  # "chosen" (the table's chosen inputs, by default one token estimator per kind) | "blackbox"
    with_length: bool
    description: str


COMBINED = {
    "combined_predictor": Combination(
        "logistic", "chosen", False, "cross-fitted logistic regression over one estimator per kind of signal"),
    "combined_predictor+length": Combination(
        "logistic", "chosen", True, "the same with the length baselines among its inputs"),
    "blackbox_logistic": Combination(
        "logistic", "blackbox", False, "cross-fitted logistic regression over the structure and TRACER signals"),
    "blackbox_logistic+length": Combination(
        "logistic", "blackbox", True, "the same with the length baselines among its inputs"),
    "blackbox_gbm": Combination(
        "gbm", "blackbox", False, "cross-fitted gradient boosting over the structure and TRACER signals"),
    "blackbox_gbm+length": Combination(
        "gbm", "blackbox", True, "the same with the length baselines among its inputs"),
}

for _name, _spec in COMBINED.items():
    register(type(_name.replace("+", "_plus_"), (BlackBoxColumn,), {
        "name": _name, "column": _name, "family": COMBINED_FAMILY.name, "requires": ("combined_scores",), "uses_labels": True,
        "protocol": "cross-fitted by task (out of fold)",
        "description": f"{_spec.description} (out-of-fold failure probability)", "__module__": __name__}))
