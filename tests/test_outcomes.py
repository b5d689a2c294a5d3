"""Failure labels made once and handed down: ``Outcomes`` carries a run's rewards with their labels (and the
threshold that made them) to the metrics, their bootstrap and the analyze report, which read them instead of labelling
the rewards again; ``RunDir.outcomes`` labels a run's trajectories."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb.estimators.scores import score_table
from agentuq_nb.evaluation.bootstrap import bootstrap_samples
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.evaluation.metrics import failure_curves, point_metrics
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import Outcomes, failure_labels, row_failures
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
    assert folder.outcomes(0.5) is outcomes  # kept with the folder: the steps sharing it share one labelling
    folder.forget_cache()
    assert folder.outcomes(0.5) is not outcomes and folder.outcomes(0.5).failed.tolist() == outcomes.failed.tolist()
    with pytest.raises(ValueError, match="not a finite number"):
        folder.outcomes(float("nan"))
    table, _ = score_table(folder, [], folder.outcomes(0.5))  # the score table carries the labels made once
    assert table["failed"].tolist() == frame["failed"].tolist()
    assert "failed" not in score_table(folder, [])[0].columns


def test_rows_carry_their_labels_or_are_labelled_at_the_threshold():
    """``row_failures`` reads the labels rows carry (a row that found no outcome is no failure) and labels rows made
    without them; the metrics take a run's outcomes in place of its rewards and give what the rewards give."""
    carried = pd.DataFrame({"reward": [0.0, 1.0, 0.2], "failed": pd.array([True, None, False], dtype="boolean")})
    assert row_failures(carried, 0.5).tolist() == [True, False, False]  # the carried labels, not the threshold's
    assert row_failures(carried.drop(columns="failed"), 0.5).tolist() == [True, False, True]
    rng = np.random.default_rng(4)
    reward = np.r_[rng.uniform(size=40), np.nan]
    u = np.r_[rng.normal(size=40) - reward[:40], 0.3]
    given = failure_metrics(u, Outcomes.of(reward, 0.6), n_boot=30, seed=2)
    assert given == failure_metrics(u, reward, failure_threshold=0.6, n_boot=30, seed=2)
    assert given["n_dropped"] == 1 and given["failure_threshold"] == 0.6
    assert failure_curves(u, Outcomes.of(reward, 0.6)).equals(failure_curves(u, reward, 0.6))
