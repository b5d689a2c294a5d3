"""The ``detector`` family: a learned failure detector's calibrated failure probability on a run.

The predict step (:mod:`agentuq_nb.steps.predict`) applies a detector trained on other labelled runs (the
train-detector step, :mod:`agentuq_nb.steps.train_detector`) and commits ``detector_scores.parquet``, read here, so that the estimator
table (``compare-estimators``) and the cross-run leaderboard (``compare-runs``) rank the detector beside the families
computed from the run itself, against the same length baselines. Its probability was fitted and calibrated on runs
other than this one (a trajectory the detector was trained on is scored by the model that left its run out), so it
is no tuned readout of this run's labels.

The store reads the per-trajectory predictions (probability, model, top reasons) back from a run folder
(:func:`agentuq_nb.io.store.artifacts.read_predictions`): what a view of the run (the explorer, a report) shows
beside each trajectory.
"""
from __future__ import annotations

from agentuq_nb.estimators.base import Family, declare_family, register
from agentuq_nb.estimators.blackbox import BlackBoxColumn

#: a learned failure detector's calibrated probability (trained on other labelled runs)
DETECTOR = declare_family(Family("detector", rank=75))


@register
class DetectorProbability(BlackBoxColumn):
    """A learned detector's failure probability (higher = more likely a failure)."""

    name = "detector"
    column = "detector"
    family = "detector"
    requires = ("detector_scores",)
    description = ("a learned failure detector's probability, trained and calibrated on other labelled runs "
                   "(applied by the predict step)")
    #: fitted to labels, never this run's: a trajectory it was trained on is scored by the model that left its run out
    protocol = "trained on other labelled runs"
