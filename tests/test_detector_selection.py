"""The detector chosen inside its training rows by its protocol's own kind of split, and its reasons in percentage
points of the printed probability: real shared τ²-bench runs (two airline runs and a retail run, 80 trajectories),
the static MiniLM table, one training per module."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentuq_nb.evaluation.detector_explain import OTHERS
from agentuq_nb.evaluation.detector_model import DetectorSettings, fit_detector, platt_probability
from agentuq_nb.evaluation.detector_protocols import task_keys
from agentuq_nb.evaluation.detector_selection import (
    CANDIDATES,
    row_task_keys,
    select_detector,
    selection_folds,
    within_run_auroc,
)

pytestmark = pytest.mark.filterwarnings("ignore::agentuq_nb.io.input_warnings.InputDataWarning")
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
RUNS = [SHARED / "tau2" / "gpt-4.1_airline_1trial.json", SHARED / "tau2" / "ft-gpt-4.1_airline_1trial.json",
        SHARED / "real_runs" / "ft-gpt-4.1_retail_1trial.json"]


@pytest.fixture(scope="module")
def features():
    """The three runs' features, every group, on the static table."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.uq.detector_features import GROUPS
    from agentuq_nb.uq.embeddings import embeddings_available

    if not all(p.exists() for p in RUNS):
        pytest.skip(f"the shared runs are not in {SHARED}")
    if not embeddings_available():
        pytest.skip("the [embeddings] extra is not installed")
    return corpus_features(resolve_sources(RUNS), GROUPS, "minilm-static")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A detector of the three runs as a user trains it (the default embedder), and its predictions on one of them
    and on a run it never saw (two folds by task and 20 resamples: what the tests read of it holds for any number of
    either)."""
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.steps.train_detector import train_detector
    from agentuq_nb.uq.embeddings import embeddings_available

    if not all(p.exists() for p in RUNS):
        pytest.skip(f"the shared runs are not in {SHARED}")
    if not embeddings_available():
        pytest.skip("the [embeddings] extra is not installed")
    folder = tmp_path_factory.mktemp("selection")
    result = train_detector(RUNS, folder / "det", n_boot=20, n_splits=2)
    unseen = predict(result.path, SHARED / "real_runs" / "claude-sonnet-4.5_airline_1trial.json", folder / "new",
                     n_boot=0, top=4)
    return result, unseen


def labels(features):
    return features.index["reward"].to_numpy(dtype=float) < 1


def test_inner_folds_hold_out_what_their_protocol_holds_out(features):
    index = features.index
    runs, domains = index["run"].to_numpy(dtype=object), index["domain"].to_numpy(dtype=object)
    tasks = task_keys(domains, index["task_id"].to_numpy(dtype=object))
    y = labels(features)
    for kind in ("within_run", "leave_one_run_out", "leave_run_and_task_out", "leave_one_domain_out"):
        folds = selection_folds(kind, y, runs, domains, tasks)
        assert len(folds) >= 2, kind
        for train, test in folds:
            assert not np.intersect1d(train, test).size
            assert not set(tasks[train]) & set(tasks[test]) or kind == "leave_one_run_out", kind
            if kind != "within_run":
                assert not set(runs[train]) & set(runs[test]), kind
            if kind == "leave_one_domain_out":
                assert not set(domains[train]) & set(domains[test])


def test_when_length_alone_is_best_on_the_inner_folds_the_selection_picks_it(features):
    """Labels that are length (each run's longer half fails): length alone ranks them perfectly on every inner
    fold; a text-only model cannot do better, so length is chosen, and its log-odds are the length model's."""
    index = features.index
    n = index["num_messages"].to_numpy(dtype=float)
    median = index.groupby("run")["num_messages"].transform("median").to_numpy(dtype=float)
    y = n > median
    chosen = select_detector(features, y, DetectorSettings(groups=("text",)), "leave_one_run_out")
    scores = chosen.selection["scores"]
    assert set(scores) == set(CANDIDATES)
    assert scores["length"] == pytest.approx(1.0) and scores["length"] >= max(scores.values())
    assert scores["full"] < scores["length"]
    # where tasks recur, the baselines (the task prior, its ties broken by length; length for the tasks it never
    # saw) are the reference: length replaces them only by one standard error and the margin
    from agentuq_nb.evaluation.detector_selection import COMPLEX_MARGIN

    assert chosen.candidate == ("length" if scores["length"] > scores["baselines"] + max(
        COMPLEX_MARGIN, chosen.selection["one_se"]["length vs baselines"]) else "baselines")
    chosen = select_detector(features, y, DetectorSettings(groups=("text",)), "leave_run_and_task_out")
    inner = {k: v for k, v in chosen.selection["scores"].items() if v is not None}
    assert inner["length"] > 0.99 and inner["length"] == max(inner.values())
    assert chosen.candidate == "length" and chosen.full is None
    a, b = chosen.recalibration["a"], chosen.recalibration["b"]  # the inner folds' Platt map: order kept
    assert a > 0 and np.allclose(chosen.log_odds(features), a * chosen.length.log_odds(features) + b)
    assert within_run_auroc(chosen.log_odds(features), y, index["run"]) == pytest.approx(1.0)


def test_the_winner_is_the_best_inner_score_and_survives_the_arrays(features):
    y = labels(features)
    chosen = select_detector(features, y, DetectorSettings(), "leave_run_and_task_out")
    from agentuq_nb.evaluation.detector_selection import choose

    scores = {k: v for k, v in chosen.selection["scores"].items() if v is not None}
    assert "task_prior" not in scores and "baselines" not in scores  # task-disjoint: the prior has nothing to say
    assert chosen.candidate == choose(scores, chosen.selection.get("one_se"))  # one standard error, simpler first
    assert chosen.candidate in ("length",) or scores[chosen.candidate] > scores["length"] + max(
        0.02, chosen.selection["one_se"][f"{chosen.candidate} vs length"])
    from agentuq_nb.evaluation.detector_selection import SelectedDetector

    meta, arrays = chosen.to_arrays()
    assert all(not a.dtype.hasobject for a in arrays.values())
    back = SelectedDetector.from_arrays(json.loads(json.dumps(meta)), arrays)
    assert np.allclose(back.log_odds(features), chosen.log_odds(features))
    names, values, intercept = back.block_contributions(features)
    if back.additive:
        assert np.allclose(intercept + values.sum(axis=1), back.log_odds(features))


def test_the_card_says_which_candidate_won_each_protocol_and_why(trained):
    result, _ = trained
    card = result.card
    assert card["embedder"]["name"] == "minilm-static"  # the default
    final = card["selection"]["final"]
    assert final["selected"] in CANDIDATES and final["kind"] == "leave_one_run_out" and "AUROC" in final["why"]
    from agentuq_nb.evaluation.detector_selection import choose

    scores = {k: v for k, v in final["scores"].items() if v is not None}
    assert final["selected"] == choose(scores, final.get("one_se"))
    for name, row in card["protocols"].items():
        assert row["selected"] in CANDIDATES, name
        inner = card["selection"]["protocols"][name]
        assert {"inner_length", "inner_full", "inner_stacked"} <= set(inner), name
        assert ("inner_task_prior" in inner) == (name == "leave_one_run_out"), name
        assert ("inner_baselines" in inner) == (name == "leave_one_run_out"), name


def test_the_points_sum_with_the_base_probability_to_the_printed_probability(trained):
    _, unseen = trained
    p = unseen.predictions
    assert len(p) == 50 and set(p["model"]) == {"final"}
    for row in p.itertuples():
        items = json.loads(row.explanation)
        total = row.base_probability + sum(item["points"] for item in items) / 100
        assert total == pytest.approx(row.failure_probability, abs=1e-6)
        listed = [i["feature"] for i in items if i["feature"] != OTHERS]  # the rest, summed, comes last
        interpretable = [f for f in listed if not f.startswith("embedding.")]
        assert listed[:len(interpretable)] == interpretable  # interpretable reasons first
    assert p["reason_1"].notna().all() and p["points_1"].notna().all()
    shown = [getattr(row, f"points_{k}") for row in p.itertuples() for k in range(1, 5)]
    assert np.nanmax(np.abs(shown)) < 100


def test_the_points_of_a_training_trajectory_sum_through_its_own_models_map(trained, tmp_path):
    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.evaluation.detector_explain import explain
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    result, _ = trained
    detector = load_detector(result.path)
    feats = corpus_features(resolve_sources(RUNS[:1]), detector.groups, detector.embedder)
    model, mapping = detector.loro[result.card["training_runs"][0]["name"]]
    out = explain(model, feats, lambda s: platt_probability(mapping, s), top=3)
    p = platt_probability(mapping, model.log_odds(feats))
    sums = out["base_probability"] + [sum(i["points"] for i in json.loads(e)) / 100 for e in out["explanation"]]
    assert np.allclose(sums, p, atol=1e-6)


def test_an_embedding_reason_names_a_real_message_of_its_trajectory(features):
    """A full model on the embeddings (and length): each embedding reason names a message of the trajectory - its
    position, its role and the first words of its text."""
    from agentuq_nb.evaluation.detector_explain import explain
    from agentuq_nb.records import Simulation
    from agentuq_nb.uq.transcript import message_text

    y = labels(features)
    chosen = select_detector(features, y, DetectorSettings(groups=("embeddings", "length")), "within_run",
                             candidates=("full",))
    assert chosen.candidate == "full"
    out = explain(chosen, features, lambda s: 1 / (1 + np.exp(-s)), top=5)
    sims = {}
    for path in RUNS:
        for sim in json.loads(path.read_text())["simulations"]:
            sims[str(sim["task_id"]), path.stem] = Simulation.model_validate(sim)
    named = 0
    for r, explanation in enumerate(out["explanation"]):
        sim = sims[str(features.index["task_id"].iloc[r]), features.index["run"].iloc[r]]
        for item in json.loads(explanation):
            for m in item.get("messages", []):
                message = sim.messages[m["message_idx"]]
                assert {"assistant": "agent"}.get(message.role, message.role) == m["role"]
                text = message_text(message.role, message.content or "",
                                    [(c.name, c.arguments) for c in message.tool_calls or []])
                assert " ".join(text.split()).startswith(m["words"].removesuffix(" …"))
                if item["feature"] == "embedding.agent_last":
                    assert m["message_idx"] == max(i for i, x in enumerate(sim.messages) if x.role == "assistant"
                                                   and (x.content or x.tool_calls))
                named += 1
        assert abs(out["base_probability"].iloc[r] + sum(i["points"] for i in json.loads(explanation)) / 100
                   - 1 / (1 + np.exp(-chosen.log_odds(features.take([r]))[0]))) < 1e-6
    assert named >= len(out)


def test_the_points_sum_to_the_probability_moved_to_the_runs_rate(trained):
    """With the predicted run's failure rate estimated (label shift), the probability written is the adapted one and
    the reasons are taken along the same map: base + points = the adapted probability, not the training-rate one."""
    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.evaluation.label_shift import shift_by

    result, _ = trained
    detector = load_detector(result.path)
    feats = corpus_features(resolve_sources([SHARED / "real_runs" / "claude-sonnet-4.5_airline_1trial.json"]),
                            detector.groups, detector.embedder)
    at_training = detector.predict(feats, explained=False)
    source = at_training["source_rate"].to_numpy(dtype=float)
    assert np.isfinite(source).all()
    shift = 1.5 if source.mean() < 0.5 else -1.5  # the run's rate far from the training rate
    adapted = detector.predict(feats, top=3, logit_shift=shift)
    p = adapted["failure_probability"].to_numpy(dtype=float)
    expected = shift_by(at_training["failure_probability"].to_numpy(dtype=float), shift)
    assert np.allclose(p, expected, atol=1e-9)
    assert np.abs(p - at_training["failure_probability"].to_numpy(dtype=float)).min() > 0.01  # it did move
    sums = adapted["base_probability"] + [sum(i["points"] for i in json.loads(e)) / 100
                                          for e in adapted["explanation"]]
    assert np.allclose(sums, p, atol=1e-6)


def test_predict_writes_points_that_sum_to_its_failure_probability(trained):
    """predict's file: base_probability + the explanation's points = failure_probability (the adapted column),
    whichever way the label shift fell."""
    _, unseen = trained
    p = unseen.predictions
    assert {"failure_probability_training_rate", "task_seen", "task_prior", "base_probability"} <= set(p.columns)
    sums = p["base_probability"] + [sum(i["points"] for i in json.loads(e)) / 100 for e in p["explanation"]]
    assert np.allclose(sums, p["failure_probability"], atol=1e-6)


def test_a_task_prior_falls_back_on_a_model_of_the_trajectory_for_tasks_it_never_saw(features, tmp_path):
    """The task prior alone gives every trajectory of an unseen task the base rate: a detector that chose it scores
    those rows by its fallback (the best candidate that does not read the task's history), which survives the arrays
    and keeps the points summing."""
    from agentuq_nb.evaluation.detector_explain import explain
    from agentuq_nb.evaluation.detector_selection import SelectedDetector

    y = labels(features)
    airline = (features.index["domain"] == "airline").to_numpy()
    train = features.take(airline)
    chosen = select_detector(train, y[airline], DetectorSettings(), "leave_one_run_out", candidates=("task_prior",))
    assert chosen.candidate == "task_prior" and chosen.fallback is not None
    assert chosen.selection["fallback"] == chosen.fallback.candidate and "never saw" in chosen.selection["why"]
    meta, arrays = chosen.to_arrays()
    back = SelectedDetector.from_arrays(json.loads(json.dumps(meta)), arrays)
    retail = features.take(~airline)  # every task new to it
    assert not back.seen(retail).any() and back.seen(train).all()
    s = back.log_odds(retail)
    assert np.allclose(s, chosen.log_odds(retail)) and np.ptp(s) > 0  # not one number for all of them
    prior = back.prior.log_odds(row_task_keys(train))
    assert np.allclose(back.log_odds(train), back.recalibration["a"] * prior + back.recalibration["b"])
    mixed = features.take(np.r_[np.flatnonzero(~airline)[:5], np.flatnonzero(airline)[:5]])
    out = explain(back, mixed, lambda v: 1 / (1 + np.exp(-v)), top=3)
    sums = out["base_probability"] + [sum(i["points"] for i in json.loads(e)) / 100 for e in out["explanation"]]
    assert np.allclose(sums, 1 / (1 + np.exp(-back.log_odds(mixed))), atol=1e-6)
    assert (out["feature_1"].iloc[5:] == "task_prior").all() and (out["feature_1"].iloc[:5] != "task_prior").all()


def test_a_detector_of_two_runs_tells_apart_the_trajectories_of_a_run_of_unseen_tasks(tmp_path):
    """Trained on the two shared airline runs, predicting the retail run (none of its tasks seen): the scores are not
    all equal, whichever candidate the final model chose; the probabilities spread only as far as the held-out runs
    support - the map's slope is fitted within runs on each run's scores from a model that never saw it, and where
    that slope is not positive the map is the training rate, said in model.json as a constant."""
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.steps.train_detector import train_detector
    from agentuq_nb.uq.embeddings import embeddings_available

    if not all(p.exists() for p in RUNS):
        pytest.skip(f"the shared runs are not in {SHARED}")
    if not embeddings_available():
        pytest.skip("the [embeddings] extra is not installed")
    result = train_detector(RUNS[:2], tmp_path / "det", n_boot=20, n_splits=3, protocols=["leave_one_run_out"])
    out = predict(result.path, RUNS[2], tmp_path / "retail", n_boot=0, top=2).predictions
    assert not out["task_seen"].fillna(False).astype(bool).any()
    assert out["log_odds"].nunique() > len(out) // 4  # (a length model ties trajectories of one length)
    mapping = json.loads((result.path / "model.json").read_text())["final_calibration"]
    loro = result.oof.dropna(subset=["log_odds[leave_one_run_out]"])
    held_out = within_run_auroc(loro["log_odds[leave_one_run_out]"], loro["failure"], loro["run"])
    if "constant" in mapping:  # the held-out runs did not support a spread: one probability, their rate
        assert out["failure_probability"].nunique() == 1 and held_out < 0.6
    else:
        assert mapping["a"] > 0 and out["failure_probability"].nunique() == out["log_odds"].nunique()


# --------------------------------------------------------------------------- the baselines as candidates
def test_the_length_candidate_reads_num_messages_unless_another_column_ranks_clearly_better(features):
    from agentuq_nb.evaluation.detector_selection import LengthModel

    index = features.index
    by_run = index.groupby("run")
    chars = index["agent_chars"].to_numpy(dtype=float)
    y_chars = chars > by_run["agent_chars"].transform("median").to_numpy(dtype=float)
    assert within_run_auroc(chars, y_chars, index["run"]) > within_run_auroc(
        index["num_messages"].to_numpy(dtype=float), y_chars, index["run"]) + 0.05
    assert LengthModel.fit(features, y_chars).column == "agent_chars"  # clearly better: read
    y = labels(features)
    strength = {c: abs(within_run_auroc(index[c].to_numpy(dtype=float), y, index["run"]) - 0.5)
                for c in ("num_messages", "num_tool_calls", "agent_chars")}
    fitted = LengthModel.fit(features, y)
    assert fitted.column == "num_messages" or strength[fitted.column] > strength["num_messages"] + 0.02
    assert fitted.coef != 0


def test_the_task_prior_candidate_ranks_as_the_protocols_baseline(features):
    """Scored leave-one-run-out inside the training rows, the task prior candidate is the protocols' task-prior
    baseline (the task's failure rate in the other runs) rank for rank, on the rows where that exists."""
    from agentuq_nb.evaluation.detector_protocols import task_prior
    from agentuq_nb.evaluation.detector_selection import prior_by_run

    index = features.index
    y = labels(features)
    runs = index["run"].to_numpy(dtype=object)
    baseline = task_prior(runs, index["domain"], index["task_key"], y)
    ours, seen = prior_by_run(row_task_keys(features), y, runs)
    assert (seen == np.isfinite(baseline)).all()
    has = np.isfinite(baseline)
    assert has.sum() > 20
    assert within_run_auroc(ours[has], y[has], runs[has]) == pytest.approx(
        within_run_auroc(baseline[has], y[has], runs[has]), abs=1e-12)
    from scipy.stats import spearmanr

    assert spearmanr(ours[has], baseline[has]).statistic == pytest.approx(1.0)


def test_the_paired_difference_is_the_difference_of_the_pooled_aurocs_with_a_delong_error():
    from agentuq_nb.evaluation.detector_selection import paired_difference

    rng = np.random.default_rng(3)
    runs = np.repeat(["a", "b", "c"], 60)
    y = rng.random(180) < np.repeat([0.2, 0.5, 0.7], 60)
    a = y + rng.normal(0, 1.0, 180)
    b = y + rng.normal(0, 2.0, 180)
    diff, se = paired_difference(a, b, y, runs)
    assert diff == pytest.approx(within_run_auroc(a, y, runs) - within_run_auroc(b, y, runs), abs=1e-12)
    assert paired_difference(a, a, y, runs) == (0.0, 0.0)
    # the bootstrap of the same difference (rows resampled within runs) agrees with DeLong's error to within 25 %
    draws = []
    for _ in range(400):
        rows = np.concatenate([rng.choice(np.flatnonzero(runs == r), 60) for r in "abc"])
        draws.append(within_run_auroc(a[rows], y[rows], runs[rows]) - within_run_auroc(b[rows], y[rows], runs[rows]))
    assert se == pytest.approx(np.std(draws), rel=0.25)


def test_a_complex_candidate_must_beat_the_best_baseline_by_one_standard_error():
    from agentuq_nb.evaluation.detector_selection import COMPLEX_MARGIN, choose

    scores = {"length": 0.70, "task_prior": 0.72, "full": 0.76, "stacked": 0.75}
    assert choose(scores) == "full"  # by more than the margin
    assert choose(scores, {"full": 0.05, "stacked": 0.01}) == "task_prior"  # within one standard error
    assert choose({"length": 0.70, "full": 0.70 + COMPLEX_MARGIN / 2}) == "length"
    assert choose({"length": 0.70, "task_prior": 0.71}) == "task_prior"
    # without the baselines among the candidates, the task prior (with its fallback) is the reference: length
    # alone must beat it as any other candidate must
    assert choose({"length": 0.73, "task_prior": 0.72}) == "task_prior"
    assert choose({"length": 0.75, "task_prior": 0.72}) == "length"
    # with them, the baselines (the prior, its ties broken by length) are the reference: the prior alone,
    # scored inside from one run fewer than it has outside, must beat them by the margin and one standard error
    assert choose({"length": 0.70, "task_prior": 0.74, "baselines": 0.73}) == "baselines"
    assert choose({"length": 0.70, "task_prior": 0.76, "baselines": 0.73}, {"task_prior vs baselines": 0.04}) == \
        "baselines"
    assert choose({"length": 0.70, "task_prior": 0.76, "baselines": 0.73}, {"task_prior vs baselines": 0.01}) == \
        "task_prior"
    # a model of many features must then beat the best of the simpler candidates, chosen or not
    tiers = {"task_prior": 0.70, "baselines": 0.73, "stacked": 0.76}
    assert choose(tiers, {"stacked vs baselines": 0.04}) == "baselines"
    assert choose(tiers, {"stacked vs baselines": 0.01}) == "stacked"
    unchosen = {"task_prior": 0.74, "baselines": 0.72, "stacked": 0.77}  # the prior is not chosen, yet the bar
    assert choose(unchosen, {"stacked vs task_prior": 0.04, "stacked vs baselines": 0.01}) == "baselines"
    assert choose(unchosen, {"stacked vs task_prior": 0.01, "stacked vs baselines": 0.01}) == "stacked"


def test_the_baselines_break_the_task_priors_ties_by_length_and_reorder_nothing_else():
    """The baselines' stack (:func:`fit_tie_break`): within each task-prior value the rows are ordered by the length
    log-odds, rows of different prior values keep the prior's order, and nothing is fitted on the labels."""
    from agentuq_nb.evaluation.detector_selection import fit_tie_break, logit, stacked_log_odds

    rng = np.random.default_rng(7)
    n = 400
    prior = logit(np.clip(rng.integers(0, 4, n) / rng.choice([3, 4, 5], n), 0.02, 0.98))
    length = rng.normal(0.0, 1.5, n)
    y = rng.random(n) < 0.3
    stack = fit_tie_break({"length": length, "task_prior": prior}, y)
    assert stack == fit_tie_break({"length": length, "task_prior": prior}, ~y)  # the labels are not read
    assert stack["task_prior"] == 1.0 and stack["length"] > 0
    score = stacked_log_odds(stack, {"length": length, "task_prior": prior})
    order = np.lexsort((length, prior))  # by the prior, then by length within its ties
    assert (np.diff(score[order]) > 0).all()
    assert np.abs(score - prior).max() < np.diff(np.unique(prior)).min() / 2  # within half the smallest gap
    # the protocol's ranking: the prior's own pairs kept, its tied pairs ranked as length ranks them
    runs = np.repeat(["a", "b"], n // 2)
    tied = within_run_auroc(prior, length > 0.5, runs)
    assert within_run_auroc(score, length > 0.5, runs) > tied


def test_where_tasks_recur_the_baselines_are_the_reference_and_the_prior_with_its_ties_broken(features):
    """Leave-one-run-out, the baselines candidate is the reference and reads the task prior with weight 1: its
    log-odds minus the prior's are a small multiple of the length model's log-odds, on every row."""
    y = labels(features)
    chosen = select_detector(features, y, DetectorSettings(groups=("blackbox", "length")), "leave_one_run_out",
                             candidates=("length", "task_prior", "baselines"))
    from agentuq_nb.evaluation.detector_selection import choose

    scores = {k: v for k, v in chosen.selection["scores"].items() if v is not None}
    assert set(scores) == {"length", "task_prior", "baselines"}
    assert chosen.candidate == choose(scores, chosen.selection.get("one_se"))
    assert chosen.candidate == "baselines" or scores[chosen.candidate] > scores["baselines"] + max(
        0.02, chosen.selection["one_se"][f"{chosen.candidate} vs baselines"])
    if chosen.candidate == "baselines":
        assert chosen.stack["task_prior"] == 1.0 and chosen.stack["length"] != 0
        parts = chosen.components(features)
        residual = chosen.log_odds(features) - parts["task_prior"]
        slope, intercept = np.polyfit(parts["length"], residual, 1)
        np.testing.assert_allclose(residual, intercept + slope * parts["length"], atol=1e-9)
        gap = np.diff(chosen.prior.levels()).min()  # no two different histories reordered
        assert np.abs(residual).max() <= gap / 4 + 1e-12 and "ties" in chosen.selection["why"]
    # a task the prior never saw: the length model itself scores it, on its own scale (and survives the arrays)
    from agentuq_nb.evaluation.detector_selection import SelectedDetector

    airline = (features.index["domain"] == "airline").to_numpy()
    chosen = select_detector(features.take(airline), y[airline], DetectorSettings(groups=("blackbox", "length")),
                             "leave_one_run_out", candidates=("length", "task_prior", "baselines"))
    assert chosen.candidate == "baselines", chosen.selection["why"]
    back = SelectedDetector.from_arrays(*chosen.to_arrays())
    new = features.take(~airline)
    assert not back.seen(new).any() and back.fallback.candidate == "length" and chosen.selection["fallback"] == "length"
    assert "never saw is scored by the length model" in chosen.selection["why"]  # the card says so
    np.testing.assert_allclose(back.log_odds(new), chosen.length.log_odds(new))
    assert np.ptp(back.log_odds(new)) > 10 * np.ptp(chosen.stack["length"] * chosen.length.log_odds(new))


def test_the_full_model_is_fitted_within_runs(features):
    """Runs whose long trajectories fail *less* often than short ones of other runs, while within every run the longer
    half fails: fitted within runs (an intercept per run), the length coefficient is positive and ranks each run's
    rows perfectly; pooled over runs, it learns which run is long."""
    from dataclasses import replace as replaced

    index = features.index
    runs = index["run"].to_numpy(dtype=object)
    rank = index.groupby("run")["num_messages"].rank(method="first").to_numpy(dtype=float)
    size = index.groupby("run")["num_messages"].transform("size").to_numpy(dtype=float)
    share = {r: q for r, q in zip(pd.unique(runs), (0.2, 0.5, 0.8))}
    y = rank > size * (1 - np.array([share[r] for r in runs]))  # each run's longest share fails
    offset = {r: o for r, o in zip(pd.unique(runs), (6.0, 3.0, 0.0))}  # the run failing least is the longest
    x = rank / size + np.array([offset[r] for r in runs])
    f = replaced(features, dense=x[:, None], dense_names=["length.num_messages"], dense_groups=["length"])
    tasks = row_task_keys(f)
    within = fit_detector(f, y, tasks, DetectorSettings(groups=("length",)), fixed={"C": 1.0})
    pooled = fit_detector(f, y, tasks, DetectorSettings(groups=("length",), within_runs=False), fixed={"C": 1.0})
    assert within.coef[0] > 0 > pooled.coef[0]
    assert within_run_auroc(within.log_odds(f), y, runs) == pytest.approx(1.0)
    assert within_run_auroc(pooled.log_odds(f), y, runs) == pytest.approx(0.0)


def test_a_platt_map_fitted_within_runs_keeps_the_slope_a_pooled_one_shrinks():
    """Scores that rank each run's trajectories well, but whose run levels go against the runs' failure rates: the
    pooled Platt map flattens them, the within-run map keeps the slope, and its mean probability is the rows' rate."""
    from agentuq_nb.evaluation.detector_model import platt_map, within_run_platt

    rng = np.random.default_rng(0)
    runs = np.repeat(["a", "b", "c", "d"], 80)
    rate = np.repeat([0.1, 0.3, 0.6, 0.9], 80)
    y = rng.random(320) < rate
    s = 1.5 * y + rng.normal(0, 1, 320) - 4 * rate  # the riskier run, the lower its scores
    pooled, within = platt_map(s, y), within_run_platt(s, y, runs)
    assert within["a"] > 0.8 and within["a"] > 3 * max(pooled["a"], 0.0)
    assert np.mean(platt_probability(within, s)) == pytest.approx(y.mean(), abs=1e-6)
    assert platt_map(s, y, runs) == within
    assert within_run_platt(s, np.zeros(320, bool), runs) == {"constant": 0.0, "n": 320}


def test_the_card_says_plainly_where_the_detector_is_below_its_best_baseline():
    """card.md's check: each protocol against the baseline it trails most - length, and the task prior (on the rows
    that have one) only where tasks recur between training and the scored run."""
    from agentuq_nb.figures.detector_card import baseline_checks, card_markdown

    card = {"protocols": {
        "leave_one_run_out": {"auroc": 0.699, "length_auroc": 0.698, "length_baseline": "num_messages",
                              "prior_auroc": 0.744, "auroc_on_prior_rows": 0.714},
        "leave_run_and_task_out": {"auroc": 0.690, "length_auroc": 0.698, "length_baseline": "num_messages",
                                   "prior_auroc": 0.744, "auroc_on_prior_rows": 0.60}}}
    checks = {c["protocol"]: c for c in baseline_checks(card)}
    assert checks["leave_one_run_out"]["baseline"] == "task prior" and not checks["leave_one_run_out"]["met"]
    assert checks["leave_one_run_out"]["gap"] == pytest.approx(0.714 - 0.744)
    # task-disjoint: the prior is not a baseline the detector could use; within 0.01 of length counts as met
    assert checks["leave_run_and_task_out"]["baseline"].startswith("length") and checks["leave_run_and_task_out"]["met"]
    text = card_markdown(card)
    assert "leave_one_run_out: detector 0.714 against the task prior 0.744 — **below its best baseline** by 0.030" in text
    assert "leave_run_and_task_out: detector 0.690 against the length baseline num_messages 0.698 — at least" in text


def test_the_regularization_path_starts_with_the_very_fit_of_its_first_c(features):
    """The model selection's inner fits of the full model (one design, warm-started from the weakest C up) begin with
    the fit :func:`fit_detector` makes at that C: the same vocabulary, standardization and coefficients, bitwise."""
    from agentuq_nb.evaluation.detector_model import fit_logistic_path

    y, tasks, settings = labels(features), row_task_keys(features), DetectorSettings()
    path = fit_logistic_path(features, y, tasks, settings, (1.0, 0.01, 0.1))
    alone = fit_detector(features, y, tasks, settings, fixed={"C": 0.01})
    assert [m.C for m in path] == [0.01, 0.1, 1.0]
    assert path[0].terms == alone.terms and path[0].dense_names == alone.dense_names
    for name in ("idf", "median", "mean", "scale", "coef"):
        assert np.array_equal(getattr(path[0], name), getattr(alone, name)), name
    assert path[0].intercept == alone.intercept
    assert np.array_equal(path[0].log_odds(features), alone.log_odds(features))
    assert all(np.array_equal(m.scale, alone.scale) for m in path)  # one standardization for the whole path
    assert not np.array_equal(path[1].coef, path[0].coef)


def test_the_detector_is_the_same_fitted_in_worker_processes_or_in_this_one(trained, tmp_path):
    """``threads`` (the model selections fitted at once, in worker processes) changes no number: the fixture's
    detector (two workers, the default) and one trained in this process alone write the same tables and arrays."""
    from agentuq_nb.steps.train_detector import train_detector

    result, _ = trained
    alone = train_detector(RUNS, tmp_path / "det", n_boot=20, n_splits=2, threads=1)  # the fixture's settings
    for name in ("protocols.csv", "oof_predictions.csv", "top_features.csv", "label_shift.csv"):
        assert (result.path / name).read_bytes() == (alone.path / name).read_bytes(), name
    with np.load(result.path / "arrays.npz") as a, np.load(alone.path / "arrays.npz") as b:
        assert sorted(a.files) == sorted(b.files)
        for key in a.files:
            assert np.array_equal(a[key], b[key]), key
    assert json.loads((result.path / "model.json").read_text()) == json.loads((alone.path / "model.json").read_text())

def test_fold_models_of_one_run_are_put_on_one_scale_from_its_unlabelled_rows():
    """Two fold models of one run that are length under different affine maps (another slope and intercept each):
    their raw log-odds mix the scales and rank the run worse than length; on one scale they rank it as length does.
    A run scored by one model keeps its log-odds."""
    from agentuq_nb.evaluation.detector_protocols import Fold, one_scale_per_run

    rng = np.random.default_rng(3)
    n = rng.uniform(4, 60, size=60)  # no ties: floating rounding would break them either way
    y = rng.random(60) < 1 / (1 + np.exp(-(np.log(n) - np.log(20))))
    runs = np.array(["a"] * 40 + ["b"] * 20, dtype=object)
    folds = [Fold("p", "a0", np.arange(40, 60), np.arange(0, 20)), Fold("p", "a1", np.arange(40, 60), np.arange(20, 40)),
             Fold("p", "b", np.arange(0, 40), np.arange(40, 60))]
    models = [(0.5, -3.0), (2.0, 1.0), (1.0, 0.0)]  # (slope, intercept) of log(n)

    def score(model, rows):
        return model[1] + model[0] * np.log(n[rows])

    raw = np.concatenate([score(models[k], f.test) for k, f in enumerate(folds)])
    aligned = one_scale_per_run(folds, models, score, runs, raw)
    assert within_run_auroc(aligned, y, runs) == pytest.approx(within_run_auroc(n, y, runs))
    assert within_run_auroc(raw, y, runs) < within_run_auroc(n, y, runs)
    assert np.array_equal(aligned[40:], raw[40:])
    for k, fold in enumerate(folds[:2]):  # each fold model's order within its own rows is kept
        assert (np.argsort(aligned[fold.test], kind="stable") == np.argsort(raw[fold.test], kind="stable")).all()


@pytest.mark.parametrize("protocol", ["within_run", "leave_one_run_out", "leave_run_and_task_out"])
def test_no_label_of_a_held_out_fold_reaches_its_ranked_scores(features, protocol):
    """The protocol's scores of a held-out fold (its model chosen and fitted inside its training rows, then put on
    the run's scale from the run's unlabelled rows) are the same whatever the labels of that fold's rows: flipping
    them changes the other folds' models (which train on them, or on the fold's run) but not this fold's scores."""
    from agentuq_nb.evaluation.detector_protocols import protocol_folds
    from agentuq_nb.evaluation.detector_training import evaluate_protocol

    index = features.index
    y = labels(features)
    settings = DetectorSettings(groups=("blackbox", "length"))
    folds = protocol_folds(protocol, index["run"], index["domain"], index["task_key"], y, 2, 0)
    held = folds[0].test
    flipped = y.copy()
    flipped[held] = ~flipped[held]
    before = evaluate_protocol(protocol, features, y, folds, settings, 20, 0)
    after = evaluate_protocol(protocol, features, flipped, folds, settings, 20, 0)  # the folds held fixed
    assert np.array_equal(before.score[held], after.score[held])
    assert np.array_equal(before.log_odds[held], after.log_odds[held])
    others = np.setdiff1d(np.arange(len(y)), held)
    assert not np.allclose(before.log_odds[others], after.log_odds[others])  # the flip did reach the other folds
    if protocol != "leave_one_run_out":  # one model per run there: nothing to put on one scale
        assert not np.array_equal(before.score, before.log_odds)  # the scores were put on one scale per run
