"""Failure labels made once and handed down: ``Outcomes`` carries a run's rewards with their labels (and the
threshold that made them) to the metrics, their bootstrap and the analyze report, which read them instead of labelling
the rewards again; ``RunDir.outcomes`` labels a run's trajectories."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb.evaluation.bootstrap import bootstrap_samples
from agentuq_nb.evaluation.metrics import point_metrics
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import Outcomes, failure_labels
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results


def test_outcomes_label_once_and_carry_the_labels_to_a_resample():
    reward = np.array([1.0, 0.0, 0.5, np.nan, 1.0, 0.2])
    outcomes = Outcomes.of(reward, 0.6)
    assert outcomes.failed.tolist() == [False, True, True, False, False, True] and outcomes.threshold == 0.6
    taken = outcomes.take(np.array([5, 1, 1]))
    assert taken.failed.tolist() == [True, True, True] and taken.reward.tolist() == [0.2, 0.0, 0.0]
    with pytest.raises(ValueError, match="not a finite number"):
        Outcomes.of(reward, float("nan"))
    with pytest.raises(ValueError, match="no trajectory keys"):
        outcomes.frame()


def test_the_metrics_read_the_labels_they_are_given():
    """The kernels take the labels as handed to them: labels made at another threshold change the AUROC as sklearn
    computes it on those labels."""
    rng = np.random.default_rng(3)
    reward = rng.uniform(size=60)
    u = rng.normal(size=60) - reward
    for threshold in (0.3, 0.7):
        outcomes = Outcomes.of(reward, threshold)
        values, undefined = point_metrics(u, outcomes, ("auroc",))
        assert not undefined
        assert values["auroc"] == pytest.approx(roc_auc_score(failure_labels(reward, threshold), u))
    said = point_metrics(u, Outcomes.of(reward, 0.0), ("auroc",))[1]["auroc"]
    assert said == "only one class: no failures (all 60 rewards >= 0.0)"
    samples = bootstrap_samples(u, Outcomes.of(reward, 0.5), ("auroc",), n_boot=20, seed=1)
    assert np.isfinite(samples["auroc"]).all()


def test_a_run_folder_labels_its_trajectories(tmp_path):
    results = write_synthetic_results(tmp_path / "results", num_simulations=10, seed=5)
    run = tmp_path / "run"
    extract(results, run)
    folder = RunDir(run)
    outcomes = folder.outcomes(0.5)
    rewards = folder.rewards()
    assert len(outcomes) == len(rewards) == 10
    frame = outcomes.frame()
    assert list(frame.columns[:4]) == ["domain", "task_id", "trial", "seed"]
    assert frame["failed"].tolist() == (rewards["reward"] < 0.5).tolist()
    assert folder.outcomes().threshold == 1.0
