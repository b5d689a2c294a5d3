"""Calibration: ECE and the Brier decomposition against independent computations, cross-fitting by task,
transfer between runs, the combined predictor, the ``calibrate`` command on real τ²-bench runs."""
from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score
from tests.test_cli import run as run_cli

from agentuq_nb.evaluation.calibration import (
    brier_decomposition,
    calibration_report,
    calibration_table,
    cross_fitted_probabilities,
    expected_calibration_error,
    fit_calibrator,
    group_folds,
    reliability_table,
)
from agentuq_nb.evaluation.combined_predictor import combination_model, cross_fitted_combination
from agentuq_nb.io.store.rundir import RunDir

from conftest import require_tau2

matplotlib.use("Agg")


def _calibrated(n, seed):
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    return p, rng.random(n) < p


# --------------------------------------------------------------------------- ECE, Brier, reliability
@pytest.mark.parametrize("strategy", ["quantile", "uniform"])
def test_ece_and_reliability_table_match_sklearn_calibration_curve(strategy):
    rng = np.random.default_rng(1)
    p = rng.beta(2, 5, 700)
    y = rng.random(700) < np.clip(p + 0.08, 0, 1)  # held-out labels, miscalibrated on purpose
    prob_true, prob_pred = calibration_curve(y, p, n_bins=8, strategy=strategy)
    edges = (np.percentile(p, np.linspace(0, 100, 9)) if strategy == "quantile" else np.linspace(0, 1, 9))
    counts = np.bincount(np.digitize(p, edges[1:-1], right=True), minlength=8)
    counts = counts[counts > 0]
    table = reliability_table(p, y, 8, strategy)
    np.testing.assert_allclose(table["failure_rate"], prob_true, atol=1e-12)
    np.testing.assert_allclose(table["mean_prob"], prob_pred, atol=1e-12)
    np.testing.assert_array_equal(table["count"], counts)
    expected = np.sum(counts / counts.sum() * np.abs(prob_true - prob_pred))
    assert expected_calibration_error(p, y, 8, strategy)["ece"] == pytest.approx(expected, abs=1e-12)
    if strategy == "quantile":  # equal mass: every bin within one row of n / bins
        assert counts.max() - counts.min() <= 1


def test_perfectly_calibrated_probabilities_have_ece_near_zero():
    p, y = _calibrated(5000, 2)
    ece = expected_calibration_error(p, y, 10)
    assert ece["ece"] < 0.03
    assert ece["ece_debiased"] < ece["ece_l2"]


def test_debiased_ece_is_closer_to_the_true_calibration_error():
    """Predictions 0.1 above the true failure probability: the true (binned) L2 calibration error is 0.1."""
    plain, debiased = [], []
    for seed in range(40):
        rng = np.random.default_rng(seed)
        q = rng.uniform(0.2, 0.8, 200)
        e = expected_calibration_error(q + 0.1, rng.random(200) < q, 10)
        plain.append(e["ece_l2"])
        debiased.append(e["ece_debiased"])
    assert abs(np.mean(debiased) - 0.1) < 0.01
    assert abs(np.mean(debiased) - 0.1) < abs(np.mean(plain) - 0.1) / 3


def test_brier_decomposition_against_a_direct_computation():
    rng = np.random.default_rng(3)
    # forecasts on a grid, one value per bin: Murphy's identity holds exactly
    levels = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    p = rng.choice(levels, 1000)
    y = rng.random(1000) < p ** 1.3
    d = brier_decomposition(p, y, n_bins=5, strategy="uniform")
    assert d["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    frame = pd.DataFrame({"p": p, "y": y.astype(float)})
    by = frame.groupby("p")["y"].agg(["mean", "size"])
    w, base = by["size"] / len(p), y.mean()
    assert d["reliability"] == pytest.approx(float((w * (by.index - by["mean"]) ** 2).sum()), abs=1e-12)
    assert d["resolution"] == pytest.approx(float((w * (by["mean"] - base) ** 2).sum()), abs=1e-12)
    assert d["uncertainty"] == pytest.approx(base * (1 - base), abs=1e-12)
    assert d["remainder"] == pytest.approx(0.0, abs=1e-12)
    # continuous forecasts: the remainder is the within-bin term, reported
    p = rng.random(1000)
    y = rng.random(1000) < p
    d = brier_decomposition(p, y, n_bins=10)
    assert d["brier"] == pytest.approx(brier_score_loss(y, p), abs=1e-12)
    assert d["reliability"] - d["resolution"] + d["uncertainty"] + d["remainder"] == pytest.approx(d["brier"])
    assert d["remainder"] == pytest.approx(d["within_bin_variance"] - 2 * d["within_bin_covariance"], abs=1e-12)
    assert abs(d["remainder"]) > 1e-6


def test_calibration_report_log_loss_and_bad_input():
    p, y = _calibrated(300, 4)
    rep = calibration_report(p, y)
    assert rep["log_loss"] == pytest.approx(log_loss(y, p))
    assert rep["n"] == 300 and rep["n_failures"] == int(y.sum())
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibration_report(p * 2, y)
    with pytest.raises(ValueError, match="strategy"):
        expected_calibration_error(p, y, strategy="kmeans")


# --------------------------------------------------------------------------- cross-fitting by task
def _tasks(n_tasks=30, per_task=4, seed=5):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_tasks), per_task)
    difficulty = rng.normal(size=n_tasks)[groups]
    score = difficulty + rng.normal(scale=0.7, size=len(groups))
    failure = rng.random(len(groups)) < 1 / (1 + np.exp(-2 * difficulty))
    return score, failure, groups


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_cross_fitting_never_scores_a_task_with_a_model_fitted_on_it(method):
    score, failure, groups = _tasks()
    cf = cross_fitted_probabilities(score, failure, groups, method, n_splits=5, seed=0)
    assert set(np.unique(cf.fold)) == set(range(5))
    assert (pd.Series(cf.fold).groupby(groups).nunique() == 1).all()  # a task lies in one fold only
    for k in range(5):
        test = cf.fold == k
        # the map of fold k is the one fitted on the other folds' rows only: fold k's tasks never reach it
        refit = fit_calibrator(score[~test], failure[~test], method).predict(score[test])
        np.testing.assert_allclose(cf.prob[test], refit, atol=1e-12)
    # folds are stratified by outcome (pooled out-of-fold scores are biased when fold failure rates differ)
    rates = pd.Series(failure).groupby(cf.fold).mean()
    assert rates.max() - rates.min() < 0.2
    assert 0 <= np.nanmin(cf.prob) and np.nanmax(cf.prob) <= 1
    assert roc_auc_score(failure, cf.prob) > 0.7


def test_cross_fitting_leaves_missing_scores_out_and_orients_confidences():
    score, failure, groups = _tasks()
    score = score.copy()
    score[:3] = np.nan
    cf = cross_fitted_probabilities(score, failure, groups, "platt")
    assert np.isnan(cf.prob[:3]).all() and (cf.fold[:3] == -1).all() and np.isfinite(cf.prob[3:]).all()
    inv = cross_fitted_probabilities(-score, failure, groups, "platt", invert=True)
    np.testing.assert_allclose(inv.prob, cf.prob, atol=1e-9, equal_nan=True)
    with pytest.raises(ValueError, match="2 tasks"):
        cross_fitted_probabilities(score, failure, np.zeros(len(score)), "platt")


def test_combined_predictor_is_cross_fitted_by_task_and_uses_its_inputs():
    score, failure, groups = _tasks(n_tasks=40)
    rng = np.random.default_rng(6)
    features = pd.DataFrame({"a": score, "noise": rng.normal(size=len(score)), "b": score + rng.normal(size=len(score))})
    features.loc[::7, "b"] = np.nan  # imputed by the training fold's median
    cf = cross_fitted_combination(features, failure, groups, n_splits=5, seed=0)
    assert np.isfinite(cf.prob).all()
    assert (pd.Series(cf.fold).groupby(groups).nunique() == 1).all()
    assert roc_auc_score(failure, cf.prob) > 0.7
    for k in range(5):  # fold k is scored by the pipeline fitted on the other folds only
        test = cf.fold == k
        model = combination_model(features.to_numpy()[~test], failure[~test], groups[~test], seed=0)
        refit = model.fit(features.to_numpy()[~test], failure[~test]).predict_proba(features.to_numpy()[test])[:, 1]
        np.testing.assert_allclose(cf.prob[test], refit, atol=1e-12)


def test_gradient_boosting_searches_its_grid_or_the_lists_given_instead():
    from sklearn.model_selection import GridSearchCV

    from agentuq_nb.evaluation.combined_predictor import GBM_GRID, gbm_search_grid
    from agentuq_nb.steps.calibrate import CalibrateConfig
    from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig

    score, failure, groups = _tasks(n_tasks=20)
    X = np.column_stack([score, np.random.default_rng(2).normal(size=len(score))])
    default = combination_model(X, failure, groups, seed=0, model="gbm")
    assert isinstance(default, GridSearchCV) and default.param_grid == GBM_GRID
    smaller = combination_model(X, failure, groups, seed=0, model="gbm", gbm_grid={"max_depth": [3]})
    assert smaller.param_grid == {"max_depth": [3], "learning_rate": GBM_GRID["learning_rate"]}
    assert smaller.fit(X, failure).best_params_["max_depth"] == 3
    assert gbm_search_grid(None) is GBM_GRID and gbm_search_grid(dict(GBM_GRID)) == GBM_GRID
    features = pd.DataFrame(X, columns=["a", "noise"])
    for bad, said in (({"max_iter": [10]}, "max_iter is not tuned"), ({"max_depth": []}, "at least one value"),
                      ({"max_depth": [0]}, "whole numbers from 1"), ({"learning_rate": [0.0]}, "above 0")):
        with pytest.raises(ValueError, match=said):
            cross_fitted_combination(features, failure, groups, model="gbm", gbm_grid=bad)
        for config in (CalibrateConfig, CompareEstimatorsConfig):  # refused where a step is configured
            with pytest.raises(ValueError, match=said):
                config(gbm_grid=bad)
    assert CompareEstimatorsConfig().gbm_grid is None and CalibrateConfig().gbm_grid is None


# --------------------------------------------------------------------------- runs: transfer and the command
@pytest.fixture(scope="module")
def tau2_runs(tmp_path_factory):
    """The two real τ²-bench result files, extracted (length baselines only: they carry no log-probs)."""
    from agentuq_nb.steps.extract import extract

    files = require_tau2()
    tmp = tmp_path_factory.mktemp("tau2")
    runs = []
    for i, path in enumerate(files[:2]):
        extract(path, tmp / f"run{i}")
        runs.append(tmp / f"run{i}")
    return runs


def test_calibrate_command_on_real_runs_with_transfer(tau2_runs, tmp_path):
    import shutil

    a, b = (shutil.copytree(r, tmp_path / r.name) for r in tau2_runs)
    done = run_cli("calibrate", a, "--estimator", "num_messages", "--estimator", "agent_chars",
                "--transfer-to", b, "--n-bins", 5)
    assert "evaluated on" in done.stdout and "num_messages" in done.stdout
    report = json.loads((a / "calibration.json").read_text())
    assert report["transfer"]["fitted_on"] == str(a) and report["transfer"]["evaluated_on"] == str(b)
    assert set(report["estimators"]) == {"num_messages", "agent_chars"}  # baselines only: no combined predictor
    listed = RunDir(a).manifest().artifacts
    assert {"calibration.json", "calibration_bins.csv"} <= set(listed)
    assert not (b / "calibration.json").exists()
    # the transfer numbers, recomputed: maps fitted on run a, scored on run b's labels
    ta = pd.read_parquet(a / "trajectories.parquet")
    tb = pd.read_parquet(b / "trajectories.parquet")
    ya, yb = ta["reward"].to_numpy() < 1, tb["reward"].to_numpy() < 1
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(ta["num_messages"], ya)
    rep = report["transfer"]["estimators"]["num_messages"]["methods"]
    assert rep["isotonic"]["n"] == len(tb) and rep["isotonic"]["n_failures"] == int(yb.sum())
    assert rep["isotonic"]["brier"] == pytest.approx(brier_score_loss(yb, iso.predict(tb["num_messages"])), abs=1e-12)
    platt = fit_calibrator(ta["num_messages"], ya, "platt").predict(tb["num_messages"])
    assert rep["platt"]["brier"] == pytest.approx(brier_score_loss(yb, platt), abs=1e-12)
    bins = pd.read_csv(a / "calibration_bins.csv")
    transfer = bins[(bins["setting"] == "transfer") & (bins["estimator"] == "num_messages")]
    assert transfer.groupby("method")["count"].sum().to_dict() == {"isotonic": len(tb), "platt": len(tb)}
    cross = bins[(bins["setting"] == "cross_fitted") & (bins["method"] == "platt")]
    assert cross.groupby("estimator")["count"].sum().eq(len(ta)).all()
    # the report as a table: one row per setting x estimator x method, the report's numbers
    table = calibration_table(report).set_index(["setting", "estimator", "method"])
    assert len(table) == 2 * 2 * 2
    assert table.loc[("transfer", "num_messages", "platt"), "brier"] == rep["platt"]["brier"]
    own = report["estimators"]["agent_chars"]["methods"]["isotonic"]
    assert table.loc[("cross_fitted", "agent_chars", "isotonic"), "ece_debiased"] == own["ece_debiased"]


def test_calibrate_command_refuses_bad_arguments(tau2_runs, tmp_path):
    done = run_cli("calibrate", tau2_runs[0], "--method", "beta", check=False)
    assert done.returncode == 2 and "--method" in done.stderr
    done = run_cli("calibrate", tmp_path / "nowhere", check=False)
    assert done.returncode == 2 and "no such run folder" in done.stderr
    done = run_cli("calibrate", tau2_runs[0], "--transfer-to", tau2_runs[0], check=False)
    assert done.returncode == 2 and "another run" in done.stderr


def test_reliability_diagram_shows_bins_with_counts():
    """issue 49: Wilson intervals on each observed rate (statsmodels), counts said (once for equal-mass bins, beside
    each point otherwise), n, ECE and Brier in the legend, no flat count panel, nothing clipped at the axes."""
    import matplotlib.pyplot as plt
    from statsmodels.stats.proportion import proportion_confint

    from agentuq_nb.figures.calibration import reliability_diagram

    p, y = _calibrated(400, 7)
    table, skewed = reliability_table(p, y, 5, "uniform"), reliability_table(p ** 3, y, 5, "uniform")
    fig = reliability_diagram({"platt": table, "raw": skewed})
    assert len(fig.axes) == 1  # no "trajectories in bin" panel
    ax = fig.axes[0]
    # uneven bins (the skewed ones): each count beside its point; near-even ones: said once in the legend
    assert sorted(int(t.get_text()) for t in ax.texts) == sorted(skewed["count"].tolist())
    legend = [t.get_text() for t in fig.legends[0].get_texts()][1:]
    ece = float((table["count"] / 400 * (table["mean_prob"] - table["failure_rate"]).abs()).sum())
    brier = brier_score_loss(y, p)  # the bins' sq_error, count-weighted, is the Brier score of the rows
    counts = f"{table['count'].min()}-{table['count'].max()}"
    assert legend[0] == f"platt: n = 400, 5 bins of {counts}; ECE {ece:.3f}, Brier {brier:.3f}"
    assert legend[1].startswith("raw: n = 400; ECE ")
    every = reliability_diagram({"platt": table, "raw": skewed}, annotate_counts=True).axes[0]
    assert sorted(int(t.get_text()) for t in every.texts) == sorted([*table["count"], *skewed["count"]])
    # each bin's interval is the Wilson interval of its failures
    bars = [c for c in ax.collections if c.get_segments() and len(c.get_segments()) == len(table)][0]
    k = np.round(table["failure_rate"] * table["count"])
    lo, hi = proportion_confint(k, table["count"], method="wilson")
    segments = sorted(bars.get_segments(), key=lambda s: s[0][0])
    np.testing.assert_allclose([s[0][1] for s in segments], lo)
    np.testing.assert_allclose([s[1][1] for s in segments], hi)
    # nothing clipped: every interval end lies inside the axes
    y0, y1 = ax.get_ylim()
    assert y0 < float(np.min(lo)) and float(np.max(hi)) < y1
    # equal-mass bins: the counts said once in the legend, no number over the points
    even = reliability_diagram({"platt": reliability_table(p, y, 10)})
    assert not even.axes[0].texts
    assert "10 bins of 40" in [t.get_text() for t in even.legends[0].get_texts()][1]
    # the axes span the bins and their intervals (with a margin), not all of [0, 1], unless asked
    q = 0.7 + 0.2 * p
    narrow = reliability_table(q, np.random.default_rng(1).uniform(size=len(q)) < q, 5, "uniform")
    lo_x, hi_x = reliability_diagram(narrow).axes[0].get_xlim()
    assert lo_x >= 0.5 and hi_x <= 1.0 + 0.031
    assert reliability_diagram(narrow, full_range=True).axes[0].get_xlim() == pytest.approx((-0.03, 1.03))
    with pytest.raises(ValueError, match="count"):
        reliability_diagram(table.drop(columns="count"))
    plt.close("all")


def test_folds_fall_back_to_group_folds_when_a_class_is_too_rare_to_stratify():
    groups = np.arange(12)
    failure = np.zeros(12, bool)
    failure[0] = True  # one failure: it cannot reach 5 stratified folds
    fold = group_folds(groups, 5, seed=0, labels=failure)
    assert set(fold) == set(range(5)) and (pd.Series(fold).groupby(groups).nunique() == 1).all()
    cf = cross_fitted_probabilities(np.linspace(0, 1, 12), failure, groups, "platt")
    assert np.isfinite(cf.prob).all()
