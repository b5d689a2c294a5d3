"""Length control: stratified and residual AUROC against independent computations; the estimator table's
new columns, rows and order; the forest plot's marks."""
from __future__ import annotations

import itertools

import matplotlib
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from sklearn.metrics import roc_auc_score

from agentuq_nb.evaluation.length_control import (
    beats_length_baseline,
    length_strata,
    residual_auroc,
    stratified_auroc,
)
from agentuq_nb.steps.compare_estimators import compare_estimators

from conftest import make_aggregated_run

matplotlib.use("Agg")


def _confounded(n=400, seed=0, signal=0.0):
    """Failure driven by length; the score = length + noise (+ ``signal`` x a length-free failure cue)."""
    rng = np.random.default_rng(seed)
    length = rng.integers(6, 60, n).astype(float)
    failure = rng.random(n) < 1 / (1 + np.exp(-(np.log(length) - np.log(20)) * 3))
    score = length + rng.normal(scale=3, size=n) + signal * 10 * failure
    return score, failure, length


def test_stratified_auroc_matches_a_loop_over_strata_and_the_within_stratum_pairs():
    score, failure, length = _confounded(seed=1, signal=0.5)
    strata = length_strata(length, 4)
    assert set(np.unique(strata)) == {0, 1, 2, 3}
    assert np.bincount(strata).min() > 0.2 * len(strata)  # quantile strata: about equal mass
    total = pairs = 0
    for k in np.unique(strata):  # the weighted average of sklearn's within-stratum AUROCs
        m = strata == k
        w = failure[m].sum() * (~failure[m]).sum()
        if w:
            total += roc_auc_score(failure[m], score[m]) * w
            pairs += w
    got = stratified_auroc(score, failure, strata)
    assert got["auroc"] == pytest.approx(total / pairs, abs=1e-12)
    assert got["n_pairs"] == pairs
    # ... equal to the share of concordant (failure, success) pairs taken within a stratum only
    win = []
    for k in np.unique(strata):
        m = strata == k
        for f, s in itertools.product(score[m & failure], score[m & ~failure]):
            win.append(1.0 if f > s else 0.5 if f == s else 0.0)
    assert got["auroc"] == pytest.approx(np.mean(win), abs=1e-12)


def test_strata_with_one_class_drop_out_and_none_usable_is_nan():
    score = np.array([1.0, 2, 3, 4, 5, 6])
    failure = np.array([True, True, False, False, True, False])
    strata = np.array([0, 0, 1, 1, 2, 2])
    got = stratified_auroc(score, failure, strata)
    assert got["n_strata_used"] == 1 and got["auroc"] == pytest.approx(roc_auc_score([1, 0], [5, 6]))
    assert np.isnan(stratified_auroc(score[:4], failure[:4], np.array([0, 0, 1, 1]))["auroc"])
    assert (length_strata([5, 5, 5, np.nan]) == [0, 0, 0, -1]).all()


def test_residual_auroc_matches_statsmodels_ols():
    score, failure, length = _confounded(seed=2, signal=0.5)
    resid = sm.OLS(score, sm.add_constant(np.log(length))).fit().resid
    assert residual_auroc(score, failure, length) == pytest.approx(roc_auc_score(failure, resid), abs=1e-12)


def test_length_in_disguise_is_caught_and_a_real_signal_survives():
    score, failure, length = _confounded(n=2000, seed=3)
    raw = roc_auc_score(failure, score)
    best_length = roc_auc_score(failure, length)
    controlled = stratified_auroc(score, failure, length_strata(length))["auroc"]
    assert raw > 0.7 and controlled < raw - 0.05  # most of the raw AUROC was length
    assert raw <= best_length + 0.01  # the score is length plus noise: no better than length itself
    assert abs(residual_auroc(score, failure, length) - 0.5) < 0.06
    signal, failure, length = _confounded(n=2000, seed=3, signal=1.0)
    assert stratified_auroc(signal, failure, length_strata(length))["auroc"] > 0.8
    assert residual_auroc(signal, failure, length) > 0.7  # linear in length, regressed on log length: some length stays


def test_beating_length_is_a_paired_interval_above_zero_and_never_in_sample():
    assert beats_length_baseline(0.02) is True and beats_length_baseline(-0.01) is False
    assert beats_length_baseline(0.0) is False  # an interval that touches 0 does not exclude it
    assert beats_length_baseline(0.3, in_sample=True) is False  # tuned on these labels: never a winner
    assert beats_length_baseline(float("nan")) is None and beats_length_baseline(None) is None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return make_aggregated_run(tmp_path_factory.mktemp("lc"), num_simulations=24, messages_per_simulation=10,
                               tokens_per_message=8, seed=3, signal=0.4)


def test_compare_estimators_gains_the_columns_rows_and_order(run_dir):
    table = compare_estimators(run_dir, n_boot=50)
    for col in ("ece", "ece_debiased", "brier", "auroc_stratified", "auroc_residual", "length_baseline",
                "length_baseline_auroc", "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi",
                "p_value_vs_length", "n_vs_length", "beats_length_baseline", "protocol", "in_sample"):
        assert col in table, col
    on_disk = pd.read_csv(run_dir / "estimator_table.csv")
    assert list(on_disk["estimator"]) == list(table["estimator"])
    # ordered by the length-controlled AUROC, undefined last
    s = table["auroc_stratified"].to_numpy(dtype=float)
    finite = np.isfinite(s)
    assert (np.diff(s[finite]) <= 1e-12).all() and not (finite[1:] & ~finite[:-1]).any()
    combined = table[table["family"] == "combined"].set_index("estimator")
    # the token estimators' combination, and the black-box families' (logistic regression, gradient boosting)
    assert set(combined.index) == {"combined_predictor", "combined_predictor+length", "blackbox_logistic",
                                   "blackbox_logistic+length", "blackbox_gbm", "blackbox_gbm+length"}
    assert combined["n"].eq(24).all() and combined["auroc"].between(0, 1).all()
    baselines = table[table["family"] == "baseline"]
    assert table["length_baseline_auroc"].eq(baselines["auroc"].max()).all()
    best = table["length_baseline"].iloc[0]
    assert table["length_baseline"].eq(best).all()
    assert baselines.set_index("estimator").at[best, "auroc"] == baselines["auroc"].max()  # the first of any tie
    assert baselines["beats_length_baseline"].isna().all() and baselines["diff_vs_length"].isna().all()
    others = table[table["family"] != "baseline"].set_index("estimator")
    # the paired difference: AUROC minus the best baseline's, on the trajectories both score (all of them here)
    np.testing.assert_allclose(others["diff_vs_length"], others["auroc"] - baselines["auroc"].max(), atol=1e-12)
    assert (others["diff_vs_length_lo"] <= others["diff_vs_length"]).all()
    assert (others["diff_vs_length"] <= others["diff_vs_length_hi"]).all()
    assert (others["beats_length_baseline"].astype(bool) == (others["diff_vs_length_lo"] > 0)).all()
    assert ((table["ece"] >= 0) & (table["ece_debiased"] >= 0) & table["brier"].between(0, 1)).all()
    assert set(table.loc[table["family"] == "combined", "protocol"]) == {"cross-fitted by task (out of fold)"}
    tuned = table.loc[table["in_sample"].astype(bool), "estimator"].tolist()
    assert tuned == ["tracer.optimistic"]  # tuned on the run's own labels: marked, never beats length
    assert table.set_index("estimator").at["tracer.optimistic", "protocol"] == "in-sample"
    assert table.set_index("estimator").at["tracer.optimistic", "beats_length_baseline"] in (False, None)
    assert table.set_index("estimator").at["tracer.nested", "protocol"] == "nested cross-fitting by task"
    # the synthetic run's trajectories all have the same length: controlling for it changes nothing ...
    np.testing.assert_allclose(others["auroc_stratified"], others["auroc"], atol=1e-12)
    # ... and the message count itself has no length-controlled AUROC: its strata hold it fixed
    lc = table.set_index("estimator").loc["num_messages"]
    assert np.isnan(lc["auroc_stratified"]) and np.isnan(lc["auroc_residual"]) and "own value" in lc["undefined"]


def test_forest_plot_marks_estimators_that_do_not_beat_the_length_baseline(run_dir):
    from agentuq_nb.figures.estimators import estimator_forest_figure, forest_rows
    from agentuq_nb.io.store.artifacts import read_estimator_table

    compare_estimators(run_dir, n_boot=20)
    table = read_estimator_table(run_dir)
    table.loc[table["estimator"] == "assistant.avg_token_nll", ["in_sample", "beats_length_baseline"]] = [True, True]
    rows = forest_rows(table)
    baseline = rows["family"].eq("baseline").to_numpy()
    filled = baseline | (rows["beats_length_baseline"].astype(str).eq("True") & ~rows["in_sample"].astype(bool))
    assert (~filled).any()
    fig = estimator_forest_figure(table)
    points = [line for line in fig.axes[0].lines if len(line.get_xdata()) == 1]  # one marker per row
    assert len(points) == len(rows)
    assert [p.get_markerfacecolor() != "white" for p in points] == list(filled)  # filled = beats length
    # the dot, the line and the marker are one quantity: the raw AUROC (the dotted line the best baseline's)
    assert [p.get_xdata()[0] for p in points] == pytest.approx(rows["auroc"].tolist())
    tuned = [p for p, name in zip(points, rows["estimator"]) if name == "assistant.avg_token_nll"]
    assert tuned and tuned[0].get_marker() == "D" and tuned[0].get_markerfacecolor() == "white"  # never a winner
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.startswith("assistant.avg_token_nll") and "[in-sample]" in label for label in labels)
    old = estimator_forest_figure(table.drop(columns=["beats_length_baseline", "in_sample"]))  # an older table draws
    assert not any(line.get_markerfacecolor() == "white" for line in old.axes[0].lines if len(line.get_xdata()) == 1)


def test_a_forest_needs_an_auroc():
    from agentuq_nb.figures.estimators import estimator_forest_figure, has_forest

    table = pd.DataFrame({"estimator": ["a", "num_messages"], "family": ["token", "baseline"], "auroc": [np.nan] * 2,
                          "n": [20, 20], "n_failures": [0, 0]})
    assert not has_forest(table)
    with pytest.raises(ValueError, match="no estimator has a defined auroc"):
        estimator_forest_figure(table)


def test_combined_inputs_are_oriented_and_never_a_length_only_or_repeated_predictor(run_dir):
    from agentuq_nb.estimators.scores import score_table
    from agentuq_nb.evaluation.estimator_table import combined_inputs

    table, estimators = score_table(run_dir)
    plain = combined_inputs(table, estimators, with_length=False)
    with_length = combined_inputs(table, estimators, with_length=True)
    assert not set(plain.columns) & {"num_messages", "num_tool_calls", "agent_chars"}
    assert {"num_messages", "agent_chars"} <= set(with_length.columns)
    np.testing.assert_allclose(plain["assistant.min_chosen_prob"], -table["assistant.min_chosen_prob"])  # a confidence
    no_length = table.drop(columns=["num_messages", "num_tool_calls", "agent_chars"])
    kept = [e for e in estimators if e.family != "baseline"]
    assert combined_inputs(no_length, kept, with_length=True).shape[1] == 0
    baselines_only = [e for e in estimators if e.family == "baseline"]
    assert combined_inputs(table, baselines_only, with_length=True).shape[1] == 0


def test_combined_inputs_default_to_one_estimator_per_signal_and_can_be_chosen(run_dir):
    from agentuq_nb.estimators.scores import score_table
    from agentuq_nb.evaluation.estimator_table import DEFAULT_COMBINED_INPUTS, combined_inputs

    table, estimators = score_table(run_dir)
    held = {e.name for e in estimators}
    default = combined_inputs(table, estimators, with_length=False)
    assert list(default.columns) == [n for n in DEFAULT_COMBINED_INPUTS if n in held]
    assert len(default.columns) < len([e for e in estimators if e.family != "baseline"])
    chosen = combined_inputs(table, estimators, with_length=True, names=["user.avg_token_nll"])
    assert list(chosen.columns[:1]) == ["user.avg_token_nll"] and "num_messages" in chosen.columns
    with pytest.raises(ValueError, match="not among"):
        combined_inputs(table, estimators, with_length=False, names=["num_messages"])  # a baseline is not an input
    plugin_only = [e for e in estimators if e.name == "assistant.max_token_nll"]
    assert list(combined_inputs(table, plugin_only, with_length=False).columns) == ["assistant.max_token_nll"]
