"""The learned failure detector: features, model, protocols (no evaluated trajectory or task in training, checked at
the split and by refitting per fold), the detector folder (no pickle; tampered or foreign folders refused), predict on
every reader, the estimator family, early detection, the online signal. Real scikit-learn, real MiniLM on small
inputs; the shared real runs where they are present."""
from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentuq_nb.evaluation.detector_model import DetectorSettings, FittedDetector, fit_detector, platt_probability
from agentuq_nb.evaluation.detector_protocols import (
    TASK_DISJOINT,
    Fold,
    LeakageError,
    check_fold,
    protocol_folds,
    task_keys,
    task_prior,
)
from agentuq_nb.io.errors import InputError
from agentuq_nb.records import Simulation
from agentuq_nb.uq.detector_features import (
    BLACKBOX_COLUMNS,
    EMBEDDING_BLOCKS,
    extract_features,
    message_terms,
    prefix_of,
    words,
)

pytestmark = pytest.mark.filterwarnings("ignore::agentuq_nb.io.input_warnings.InputDataWarning")
POLICY = {"airline": "# Airline Agent Policy\n\nBe helpful.", "retail": "# Retail agent policy\n\nBe kind."}


def simulation(task: int, failed: bool, rng: np.random.Generator, trial: int = 0, seed: int = 7,
               agent: str = "a") -> dict:
    """A τ²-bench simulation whose words carry its outcome (a failure apologizes and hits a tool error more often)."""
    messages = [{"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0},
                {"role": "user", "content": f"I want to change reservation ABC{task}12 please.", "turn_idx": 1}]
    n_turns = int(rng.integers(1, 4)) + (2 if failed else 0)
    for i in range(n_turns):
        error = failed and rng.random() < 0.7
        messages += [
            {"role": "assistant", "content": None, "turn_idx": len(messages),
             "tool_calls": [{"id": f"c{i}", "name": "get_reservation_details",
                             "arguments": {"reservation_id": f"ABC{task}12"}, "requestor": "assistant"}]},
            {"role": "tool", "id": f"c{i}", "requestor": "assistant", "turn_idx": len(messages) + 1,
             "content": "Error: reservation not found" if error else json.dumps({"status": "confirmed", "n": i}),
             "error": error},
        ]
    closing = ("Unfortunately I cannot change it, sorry." if failed and rng.random() < 0.8
               else "Done: your reservation is updated.")
    messages += [{"role": "assistant", "content": closing + f" ({agent})", "turn_idx": len(messages)},
                 {"role": "user", "content": "Thanks. ###STOP###", "turn_idx": len(messages) + 1}]
    return {"id": f"{agent}-{task}-{trial}", "task_id": str(task), "trial": trial, "seed": seed, "messages": messages,
            "reward_info": {"reward": 0.0 if failed else 1.0}, "termination_reason": "user_stop"}


def write_run(path: Path, agent: str, domain: str = "airline", n_tasks: int = 12, seed: int = 0,
              difficulty: float = 0.5) -> Path:
    """A τ²-bench v0 results file: ``n_tasks`` tasks (shared by every run of the domain; task t fails more often the
    higher t), one trial each."""
    rng = np.random.default_rng(seed)
    sims = [simulation(t, bool(rng.random() < difficulty * (0.4 + t / n_tasks)), rng, agent=agent)
            for t in range(n_tasks)]
    results = {"timestamp": "2026-01-01T00:00:00",
               "info": {"environment_info": {"domain_name": domain, "policy": POLICY[domain]},
                        "agent_info": {"llm": agent}, "user_info": {"llm": "user-llm"}},
               "tasks": [{"id": str(t)} for t in range(n_tasks)], "simulations": sims}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[Path]:
    """Four airline runs over the same 12 tasks and two retail runs: enough for every protocol."""
    folder = tmp_path_factory.mktemp("detector_runs")
    out = [write_run(folder / f"agent{i}_airline.json", f"agent{i}", "airline", seed=i) for i in range(4)]
    out += [write_run(folder / f"agent{i}_retail.json", f"agent{i}", "retail", n_tasks=10, seed=10 + i)
            for i in range(2)]
    return out


@pytest.fixture(scope="module")
def trained(runs, tmp_path_factory):
    """A detector of the six runs (hash embeddings: fast) with every protocol recorded by the leakage hook (two folds
    by task and 20 bootstrap resamples: what the tests of it read holds for any number of either)."""
    from agentuq_nb.steps.train_detector import TrainDetectorConfig
    from agentuq_nb.steps.train_detector import run as train

    calls = []
    out = tmp_path_factory.mktemp("detector") / "det"
    result = train(TrainDetectorConfig(inputs=runs, out=out, embedder="hash", n_boot=20, n_splits=2,
                                       early_turns=[1, 2], early_fractions=[0.5]),
                   on_fit=lambda protocol, fold, rows: calls.append((protocol, fold, rows.copy())))
    return result, calls


# --------------------------------------------------------------------------- features
def test_role_tagged_terms_drop_ids_and_numbers_and_say_what_results_report():
    assert words("Reservation EHGLP3 for mia_li_3668: 2 bags, OK?") == ["reservation", "for", "bags", "ok"]
    agent = message_terms("assistant", "I cannot change it", [("update_reservation", {"id": 1, "cabin": "x"})], False)
    assert {"agent:cannot", "agent:cannot change", "call:update_reservation", "call:update_reservation.id",
            "call:update_reservation.cabin"} <= set(agent)
    assert message_terms("user", "still not fixed", [], False)[:3] == ["user:still", "user:not", "user:fixed"]
    assert message_terms("tool", "Error: user not found", [], True) == ["result:error", "result:error",
                                                                        "result:user", "result:not", "result:found"]
    assert message_terms("tool", '{"status": "cancelled", "id": "X1"}', [], False) == ["result:ok",
                                                                                      "result:status_cancelled"]
    assert message_terms("tool", "", [], False) == ["result:empty"]
    assert message_terms("system", "You are an agent", [], False) == []


def test_prefixes_cut_at_the_kth_agent_turn_or_a_fraction_of_the_messages():
    sim = Simulation.model_validate(simulation(3, True, np.random.default_rng(0)))
    agent = [i for i, m in enumerate(sim.messages) if m.role == "assistant"]
    assert len(prefix_of(sim, turns=1).messages) == agent[0] + 1
    assert len(prefix_of(sim, turns=2).messages) == agent[1] + 1
    assert len(prefix_of(sim, turns=99).messages) == len(sim.messages)
    assert len(prefix_of(sim, fraction=0.5).messages) == int(np.ceil(len(sim.messages) / 2))
    with pytest.raises(ValueError):
        prefix_of(sim, turns=0)
    with pytest.raises(ValueError):
        prefix_of(sim, turns=1, fraction=0.5)


def test_features_with_the_real_minilm_are_the_embedders_mean_vectors():
    from agentuq_nb.uq.detector_features import unit_embedder
    from agentuq_nb.uq.embeddings import embeddings_available
    from agentuq_nb.uq.transcript import transcript

    if not embeddings_available():
        pytest.skip("the [embeddings] extra is not installed")
    rng = np.random.default_rng(1)
    sims = [Simulation.model_validate(simulation(t, t % 2 == 1, rng)) for t in range(3)]
    embed = unit_embedder("minilm", 128)
    f = extract_features(sims, "airline", embed=embed)
    assert list(f.index["task_id"]) == ["0", "1", "2"] and f.counts.shape[0] == 3
    names = f.dense_names
    assert names[:len(BLACKBOX_COLUMNS)] == list(BLACKBOX_COLUMNS)
    assert np.isfinite(f.dense[:, names.index("tracer.default")]).all()  # TRACER, with embeddings
    t = transcript(sims[:1], "airline")
    agent = [x for x, r in zip(t["text"], t["role"]) if r == "assistant" and x]
    start = names.index(f"{EMBEDDING_BLOCKS[0]}:0")
    assert np.allclose(f.dense[0, start:start + 384], embed(agent).mean(axis=0), atol=1e-6)
    last = names.index(f"{EMBEDDING_BLOCKS[2]}:0")
    assert np.allclose(f.dense[0, last:last + 384], embed(agent[-1:])[0], atol=1e-6)
    assert f.dense[:, names.index("length.num_messages")] == pytest.approx(np.log1p(f.index["num_messages"]))


# --------------------------------------------------------------------------- the model
def corpus(runs, groups=("text", "blackbox", "length")):
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    return corpus_features(resolve_sources(runs), groups, "hash")


def test_a_term_of_one_task_is_left_out_of_the_vocabulary_however_often_it_occurs():
    """A term that only one task's trajectories hold (its user's name, across every run and trial) names the task: it is
    kept with min_tasks=1 and left out at the default; a term of three tasks is kept."""
    import scipy.sparse as sp

    from agentuq_nb.evaluation.detector_model import fit_text

    tasks = np.array(["airline|1"] * 6 + ["airline|2"] * 2 + ["airline|3"] * 2)
    counts = sp.csr_matrix(np.array([[3, 1]] * 6 + [[0, 1]] * 4))  # "user:aarav ahmed" in task 1 only; "agent:sorry" in all
    vocabulary = ["user:aarav ahmed", "agent:sorry"]
    assert fit_text(counts, vocabulary, DetectorSettings(), tasks)[0] == ["agent:sorry"]
    assert fit_text(counts, vocabulary, DetectorSettings(min_tasks=1), tasks)[0] == vocabulary
    assert fit_text(counts, vocabulary, DetectorSettings(min_tasks=4), tasks)[0] == []


def test_a_linear_detectors_contributions_add_up_to_its_log_odds_and_survive_the_arrays(runs):
    f = corpus(runs[:3])
    y = f.index["reward"].to_numpy() < 1
    tasks = task_keys(f.index["domain"], f.index["task_id"])
    model = fit_detector(f, y, tasks, DetectorSettings(groups=("text", "blackbox", "length")))
    names, values = model.block_contributions(f)
    assert np.allclose(model.intercept + values.sum(axis=1), model.log_odds(f))
    assert "text:agent:unfortunately" in names and "structure.tool_errors" in names
    meta, arrays = model.to_arrays()
    assert all(not a.dtype.hasobject for a in arrays.values())
    back = FittedDetector.from_arrays(json.loads(json.dumps(meta)), arrays)
    assert np.array_equal(back.log_odds(f), model.log_odds(f))
    top = model.contributions(f, top=3)
    assert (top.groupby("row")["rank"].max() <= 3).all()
    assert np.allclose(np.sort(np.abs(values), axis=1)[:, -1], top[top["rank"] == 1]["contribution"].abs())


def test_the_gbm_rebuilt_from_its_arrays_predicts_as_scikit_learn_does(runs):
    from sklearn.ensemble import HistGradientBoostingClassifier

    f = corpus(runs[:4], groups=("blackbox", "length"))
    y = f.index["reward"].to_numpy() < 1
    observed = np.isfinite(f.dense).any(axis=0)  # (no write call here: turns_after_last_write is never observed)
    f.dense, f.dense_names = f.dense[:, observed], [n for n, o in zip(f.dense_names, observed) if o]
    f.dense_groups = [g for g, o in zip(f.dense_groups, observed) if o]
    X = f.dense
    clf = HistGradientBoostingClassifier(max_iter=20, max_depth=2, random_state=0).fit(X, y)
    rebuilt = FittedDetector(DetectorSettings(groups=("blackbox", "length"), model="gbm"), dense_names=f.dense_names,
                             median=np.zeros(X.shape[1]), occlusion=np.zeros(X.shape[1]),
                             trees=[p for it in clf._predictors for p in it],
                             intercept=float(np.ravel(clf._baseline_prediction)[0]))
    assert np.allclose(rebuilt.log_odds(f), clf.decision_function(X))
    meta, arrays = rebuilt.to_arrays()
    assert np.allclose(FittedDetector.from_arrays(meta, arrays).log_odds(f), clf.decision_function(X))
    arrays["tree_nodes"]["left"][0] = 10_000  # a node that is not there: refused, not followed
    with pytest.raises(ValueError, match="refers to a node"):
        FittedDetector.from_arrays(meta, arrays)
    tasks = task_keys(f.index["domain"], f.index["task_id"])
    fitted = fit_detector(f, y, tasks, DetectorSettings(groups=("blackbox", "length"), model="gbm"))
    assert fitted.trees and fitted.gbm_params and len(fitted.contributions(f, 2))


def test_a_training_set_of_one_class_gives_its_rate():
    from agentuq_nb.uq.detector_features import TrajectoryFeatures

    f = TrajectoryFeatures(pd.DataFrame({"x": range(4)}), ("length",), dense=np.ones((4, 1)),
                           dense_names=["length.num_messages"], dense_groups=["length"])
    model = fit_detector(f, np.zeros(4, bool), np.arange(4), DetectorSettings(groups=("length",)))
    assert model.constant is not None and (model.log_odds(f) < -10).all() and model.contributions(f).empty
    assert platt_probability({"constant": 0.25}, [1.0, np.nan])[0] == 0.25


# --------------------------------------------------------------------------- protocols
def labelled_frame(n_runs=4, n_tasks=6, domains=("airline", "airline", "retail", "retail")):
    rows = [(f"r{r}", domains[r], str(t), (r + t) % 3 == 0) for r in range(n_runs) for t in range(n_tasks)]
    return pd.DataFrame(rows, columns=["run", "domain", "task_id", "failure"])


@pytest.mark.parametrize("protocol", ["within_run", "leave_one_run_out", "leave_run_and_task_out",
                                      "leave_one_domain_out"])
def test_every_protocol_scores_each_row_once_and_holds_out_what_it_says(protocol):
    f = labelled_frame()
    folds = protocol_folds(protocol, f["run"], f["domain"], f["task_id"], f["failure"], n_splits=3)
    tested = np.concatenate([fold.test for fold in folds])
    assert sorted(tested) == list(range(len(f)))  # every row once
    tasks = task_keys(f["domain"], f["task_id"])
    for fold in folds:
        train, test = f.iloc[fold.train], f.iloc[fold.test]
        assert not set(fold.train) & set(fold.test)
        if protocol in TASK_DISJOINT:
            assert not set(tasks[fold.train]) & set(tasks[fold.test])
        if protocol != "within_run":
            assert not set(train["run"]) & set(test["run"])
        else:
            assert set(train["run"]) == set(test["run"])
        if protocol == "leave_one_domain_out":
            assert not set(train["domain"]) & set(test["domain"])
        if protocol == "leave_run_and_task_out":  # the same domain's other tasks stay in training
            assert set(test["domain"]) <= set(train["domain"])


def test_a_leaky_fold_is_refused():
    f = labelled_frame()
    runs, domains, tasks = f["run"], f["domain"], task_keys(f["domain"], f["task_id"])
    rows = np.arange(len(f))
    with pytest.raises(LeakageError, match="evaluated trajectories are in training"):
        check_fold(Fold("leave_one_run_out", "r0", rows, rows[:6]), runs, domains, tasks)
    other_run_same_task = np.flatnonzero((f["run"] == "r1") & (f["task_id"] == "0"))
    with pytest.raises(LeakageError, match="evaluated tasks"):
        check_fold(Fold("leave_run_and_task_out", "r0", other_run_same_task, rows[:1]), runs, domains, tasks)
    with pytest.raises(LeakageError, match="another run"):
        check_fold(Fold("within_run", "r0", rows[7:8], rows[:1]), runs, domains, tasks)


def test_the_task_prior_is_the_tasks_failure_rate_in_the_other_runs():
    runs = ["a", "a", "b", "c", "c", "d"]
    domains = ["x"] * 5 + ["y"]
    tasks = ["1", "2", "1", "1", "1", "1"]
    failure = [1, 0, 0, 1, 1, 1]
    prior = task_prior(runs, domains, tasks, failure)
    assert prior[0] == pytest.approx(2 / 3)  # b: 0, c: 1, 1
    assert prior[2] == pytest.approx(3 / 3)  # a: 1, c: 1, 1
    assert prior[3] == pytest.approx(1 / 2)  # a: 1, b: 0
    assert np.isnan(prior[1]) and np.isnan(prior[5])  # no other run holds x/2, nor y/1


def test_no_protocol_fits_on_an_evaluated_trajectory_or_task_refitting_per_fold(trained):
    """The hook sees the rows each fold's model was actually fitted on: none is a row it scores; for the
    task-disjoint protocols none shares a task with them; for the run- and domain-disjoint ones none their run or
    domain."""
    result, calls = trained
    keys = ["run", "domain", "task_id", "trial", "seed"]
    index = result.oof.set_index(np.arange(len(result.oof)))
    seen = {p: 0 for p in result.runs}
    for protocol, fold, rows in calls:
        seen[protocol] += 1
        trained_on = set(map(tuple, rows[keys].astype(str).to_numpy()))
        tested = index.iloc[fold.test]
        assert not trained_on & set(map(tuple, tested[keys].astype(str).to_numpy())), (protocol, fold.held_out)
        trained_tasks = set(zip(rows["domain"].astype(str), rows["task_id"].astype(str)))
        tested_tasks = set(zip(tested["domain"].astype(str), tested["task_id"].astype(str)))
        if protocol in TASK_DISJOINT:
            assert not trained_tasks & tested_tasks, (protocol, fold.held_out)
        if protocol != "within_run":
            assert not set(rows["run"]) & set(tested["run"]), (protocol, fold.held_out)
        else:
            assert set(rows["run"]) == set(tested["run"])
        if protocol == "leave_one_domain_out":
            assert not set(rows["domain"]) & set(tested["domain"])
    assert all(seen[p] == len(r.folds) > 0 for p, r in result.runs.items())
    for protocol, r in result.runs.items():  # every labelled trajectory scored by exactly one fold
        assert np.isfinite(r.log_odds).all(), protocol
        assert np.bincount(np.concatenate([f.test for f in r.folds])).max() == 1


# --------------------------------------------------------------------------- training, the card, the folder
def test_the_card_reports_every_protocol_against_length_and_the_task_prior(trained, runs):
    result, _ = trained
    card = result.card
    assert card["n"] == 4 * 12 + 2 * 10 and card["n_runs"] == 6 and card["domains"] == ["airline", "retail"]
    assert [r["name"] for r in card["training_runs"]] == sorted(p.stem for p in runs)  # sorted, whatever the order
    assert all(len(r["sha256"]) == 64 for r in card["training_runs"])
    for name, row in card["protocols"].items():
        assert 0 <= row["auroc_lo"] <= row["auroc"] <= row["auroc_hi"] <= 1, name
        assert row["length_baseline"] in ("num_messages", "num_tool_calls", "agent_chars")
        assert row["vs_length"] in ("beats", "below", "not distinguishable from")
        assert row["prior_n"] > 0 and "vs_prior" in row
        assert 0 <= row["calibration_ece"] <= 1
    assert card["feature_version"] and card["library_versions"]["scikit-learn"]
    assert "leave-one-run-out" in card["calibration"]["probabilities"]
    early = result.early
    assert list(early["prefix"]) == ["turns", "turns", "fraction", "all"]
    assert early["mean_messages_seen"].is_monotonic_increasing or early.iloc[0]["mean_messages_seen"] < early.iloc[-1][
        "mean_messages_seen"]
    assert early["length_auroc"].notna().all() and early["auroc"].notna().all()


def test_the_detector_folder_is_refused_when_tampered_or_foreign(trained, tmp_path):
    import shutil

    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.io.store.detector_dir import canonical_hash

    result, _ = trained
    load_detector(result.path)

    def copy(name):
        target = tmp_path / name
        shutil.copytree(result.path, target)
        return target

    arrays = copy("arrays")
    data = bytearray((arrays / "arrays.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (arrays / "arrays.npz").write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"arrays.npz: does not match the hash its card.json records"):
        load_detector(arrays)

    edited = copy("card")
    card = json.loads((edited / "card.json").read_text())
    card["protocols"]["within_run"]["auroc"] = 0.99
    (edited / "card.json").write_text(json.dumps(card))
    with pytest.raises(InputError, match=r"card.json: does not match its own hash"):
        load_detector(edited)

    other = copy("version")
    card = json.loads((other / "card.json").read_text())
    card["feature_version"] = "0"
    card["card_sha256"] = canonical_hash(card)
    (other / "card.json").write_text(json.dumps(card))
    with pytest.raises(InputError, match=r"card.json: was made with feature extraction version '0'"):
        load_detector(other)

    pickled = copy("pickle")  # an object array, hashes made to match: never unpickled
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"os": "system"}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(pickled / "arrays.npz", "a") as archive:
        archive.writestr("final.evil.npy", buffer.getvalue())
    card = json.loads((pickled / "card.json").read_text())
    import hashlib

    card["files"]["arrays.npz"] = hashlib.sha256((pickled / "arrays.npz").read_bytes()).hexdigest()
    card["card_sha256"] = canonical_hash(card)
    (pickled / "card.json").write_text(json.dumps(card))
    with pytest.raises(InputError, match=r"arrays.npz: cannot be read as plain arrays \(no pickle is loaded\)"):
        load_detector(pickled)

    linked = copy("link")
    (linked / "model.json").rename(tmp_path / "model_elsewhere.json")
    os.symlink(tmp_path / "model_elsewhere.json", linked / "model.json")
    with pytest.raises(InputError, match=r"model.json: is a symlink"):
        load_detector(linked)
    with pytest.raises(InputError, match="give a detector folder"):
        load_detector(tmp_path / "nothing")


def test_an_out_folder_that_holds_something_else_is_refused_and_a_detector_is_replaced_whole(runs, tmp_path):
    from agentuq_nb.steps.train_detector import train_detector

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="holds other files and no detector card"):
        train_detector(runs[:2], busy, embedder="hash", groups=["text", "length"], n_boot=0)
    assert (busy / "notes.txt").read_text() == "mine"
    out = tmp_path / "det"
    one = dict(embedder="hash", n_boot=0, protocols=["leave_one_run_out"])  # the folder is the point, not the protocols
    first = train_detector(runs[:2], out, groups=["text", "length"], **one)
    second = train_detector(runs[:3], out, groups=["length"], **one)
    assert second.card["n_runs"] == 3 and first.card["card_sha256"] != second.card["card_sha256"]
    assert sorted(p.name for p in out.iterdir()) == sorted(["card.json", *second.card["files"]])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


# --------------------------------------------------------------------------- predict, on every reader
def test_predict_on_a_new_run_writes_calibrated_probabilities_contributions_and_the_estimator_row(trained, tmp_path):
    from agentuq_nb.estimators import available
    from agentuq_nb.io.store.artifacts import read_predictions
    from agentuq_nb.steps.compare_estimators import compare_estimators
    from agentuq_nb.steps.predict import predict

    result, _ = trained
    new = write_run(tmp_path / "agent9_airline.json", "agent9", seed=99)
    done = predict(result.path, new, tmp_path / "run", n_boot=50, top=3)
    p = read_predictions(tmp_path / "run")
    assert len(p) == 12 and p["failure_probability"].between(0, 1).all() and not p["in_training"].any()
    assert set(p["model"]) == {"final"} and {"feature_1", "points_3", "reason_1", "failed", "log_odds",
                                             "base_probability"} <= set(p.columns)
    assert p["feature_1"].notna().all() and p["reason_1"].notna().all()
    first = json.loads(p["explanation"].iloc[0])
    shown = [p[f"feature_{k}"].iloc[0] for k in range(1, 4) if isinstance(p[f"feature_{k}"].iloc[0], str)]
    assert set(shown) <= {c["feature"] for c in first}
    assert all(c["value"] is None or c["value"] >= 0 for c in first if not c["feature"].startswith("embedding."))
    assert p["base_probability"].iloc[0] + sum(c["points"] for c in first) / 100 == pytest.approx(
        p["failure_probability"].iloc[0], abs=1e-6)
    assert done.report["estimator_table_row"]["estimator"] == "detector"
    assert "calibration_on_this_run" in done.report and "leave-one-run-out" in done.report["calibrated_on"]
    assert "detector" in available(tmp_path / "run")
    from agentuq_nb.steps.blackbox import BlackBoxConfig

    # the detector's family in the table (the combined predictors' rows are compare-estimators' own tests')
    table = compare_estimators(tmp_path / "run", n_boot=20, blackbox=BlackBoxConfig(embedder="hash"), combine=False)
    assert table.set_index("estimator").loc["detector", "family"] == "detector"
    # the explorer of the run shows each trajectory's probability and contributions from predictions.csv
    from agentuq_nb.figures.explorer import DETECTOR, explorer_data

    page = explorer_data(tmp_path / "run")
    shown = {t["task_id"]: t for t in page["trajectories"]}
    assert len(shown) == 12 and next(e for e in page["estimators"] if e["name"] == DETECTOR)["auroc"][0] is not None
    for row in p.itertuples():
        panel = shown[str(row.task_id)]["detector"]
        assert panel["p_failure"] == pytest.approx(row.failure_probability, rel=1e-3, abs=1e-4)  # as shown
        assert shown[str(row.task_id)]["values"][DETECTOR] == pytest.approx(row.failure_probability, rel=1e-3, abs=1e-4)
        assert row.feature_1 in [c["feature"] for c in panel["contributions"]]
        assert panel["scale"] == "points" and panel["base"] == pytest.approx(row.base_probability, abs=1e-4)
    # a training run met again: each trajectory scored by the model that left its run out
    again = predict(result.path, result.card["training_runs"][0]["given"], tmp_path / "again", n_boot=0)
    assert again.predictions["in_training"].all()
    assert set(again.predictions["model"]) == {f"leave-one-run-out:{result.card['training_runs'][0]['name']}"}
    oof = result.oof[result.oof["run"] == result.card["training_runs"][0]["name"]]
    assert np.allclose(np.sort(again.predictions["log_odds"]), np.sort(oof["log_odds[leave_one_run_out]"]))


def test_predict_reads_every_layout_with_or_without_rewards(trained, tmp_path):
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.testing.synthetic import write_synthetic_results

    result, _ = trained
    raw = json.loads(write_run(tmp_path / "src" / "agent7_airline.json", "agent7", seed=7).read_text())
    layouts = {}
    v1 = tmp_path / "v1.json"
    v1.write_text(json.dumps({**raw, "simulation_index": None}))
    layouts["v1"] = v1
    directory = tmp_path / "dir_layout"
    (directory / "simulations").mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps({k: v for k, v in raw.items() if k != "simulations"}))
    for sim in raw["simulations"]:
        (directory / "simulations" / f"{sim['id']}.json").write_text(json.dumps(sim))
    layouts["dir"] = directory
    listed = tmp_path / "simulations.json"
    listed.write_text(json.dumps([{**s, "policy": POLICY["airline"]} for s in raw["simulations"]]))
    layouts["simulation_list"] = listed
    unlabelled = tmp_path / "unlabelled.json"
    unlabelled.write_text(json.dumps({**raw, "simulations": [{**s, "reward_info": None} for s in raw["simulations"]]}))
    layouts["unlabelled"] = unlabelled
    layouts["agentuq"] = write_synthetic_results(tmp_path / "agentuq", num_simulations=6, forms=("sidecar",))
    from test_tau_bench_results import REWARDS, tool_calling_entry

    tau = tmp_path / "tau-bench-airline.json"
    tau.write_text(json.dumps([tool_calling_entry(t, 0, float(REWARDS[t][0])) for t in range(3)]))
    layouts["tau_bench"] = tau
    for name, path in layouts.items():
        done = predict(result.path, path, tmp_path / f"run_{name}", n_boot=0)
        p = done.predictions
        assert len(p) and p["failure_probability"].between(0, 1).all(), name
        if name == "unlabelled":
            assert p["failed"].isna().all() and done.row is None and "estimator_table_row" not in done.report
        else:
            assert p["failed"].notna().all(), name


def test_predict_refuses_a_bad_detector_before_extracting_and_a_run_folder_with_another_out(trained, tmp_path, runs):
    from agentuq_nb.steps.predict import predict

    result, _ = trained
    with pytest.raises(InputError, match="give a detector folder"):
        predict(tmp_path / "nothing", runs[0], tmp_path / "run")
    assert not (tmp_path / "run").exists()
    predict(result.path, runs[0], tmp_path / "run", n_boot=0)
    with pytest.raises(InputError, match="is a run folder already"):
        predict(result.path, tmp_path / "run", tmp_path / "elsewhere")
    again = predict(result.path, tmp_path / "run", n_boot=0)  # a run folder: predictions committed into it
    assert len(again.predictions) == 12


def test_the_commands_train_predict_and_say_one_line_on_a_tampered_folder(runs, tmp_path):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    cli = CliRunner()
    out = tmp_path / "det"
    trained = cli.invoke(app, ["train-detector", *map(str, runs[:3]), "--out", str(out), "--embedder", "hash",
                               "--group", "text", "--group", "length", "--n-boot", "20", "--n-splits", "2",
                               "--protocol", "within_run", "--protocol", "leave_run_and_task_out"])
    assert trained.exit_code == 0, trained.output
    assert "leave_run_and_task_out" in trained.output and "leave_one_domain_out" not in trained.output
    assert "leave_one_run_out" not in trained.output  # computed (it calibrates), not asked for: not reported
    assert "vs task prior" in trained.output
    done = cli.invoke(app, ["predict", str(out), str(runs[0]), "--out", str(tmp_path / "run"), "--n-boot", "20"])
    assert done.exit_code == 0, done.output
    assert "detector on this run: AUROC" in done.output and (tmp_path / "run" / "predictions.csv").exists()
    (out / "model.json").write_text("{}")
    bad = cli.invoke(app, ["predict", str(out), str(runs[1]), "--out", str(tmp_path / "run2")])
    assert bad.exit_code == 2
    assert bad.output.strip().splitlines()[-1].startswith(f"error: {out / 'model.json'}: does not match the hash")


def test_the_detector_is_an_online_signal_equal_to_predict_on_the_prefix(trained, runs):
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.intervention.config import PolicyConfig
    from agentuq_nb.intervention.signals import DetectorSignal, online_signal
    from agentuq_nb.sim.decisions import DecisionPoint

    result, _ = trained
    signal = online_signal(f"detector:{result.path}", PolicyConfig(signal=f"detector:{result.path}"))
    assert isinstance(signal, DetectorSignal) and signal.describe()["kind"] == "detector"
    sim = json.loads(runs[0].read_text())["simulations"][5]
    agent_turns = [i for i, m in enumerate(sim["messages"]) if m["role"] == "assistant"]
    cut = agent_turns[2]
    point = DecisionPoint(domain="airline", task_id=sim["task_id"], trial=0, seed=7, message_idx=cut, decision_idx=2,
                          call_seed=1, messages=[], tools=[], tool_choice=None, agent_llm="m", agent_temperature=0.0,
                          agent_max_tokens=8, top_logprobs=0, agent_llm_args={}, trajectory=sim["messages"][:cut],
                          proposal=sim["messages"][cut], generation=None, proposal_rows=[], rows=[],
                          write_tools=frozenset(), confirmed_calls=frozenset())
    value = signal.value(point)
    prefix = corpus_features(resolve_sources([runs[0]]), signal.detector.groups, "hash", turns=3)
    expected = signal.detector.predict(prefix.take([5]))
    assert value.value == pytest.approx(float(expected["failure_probability"].iloc[0]))
    assert value.details["model"] == "final" and value.details["top_contributions"]  # a prefix is no training trajectory
    import pickle

    assert pickle.loads(pickle.dumps(signal)).value(point).value == value.value  # a Dask worker holds it
    with pytest.raises(InputError):
        online_signal("detector:/nonexistent", PolicyConfig())


def test_feature_extraction_on_dask_equals_the_serial_one(runs):
    pytest.importorskip("distributed")
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    sources = resolve_sources(runs[:2])
    serial = corpus_features(sources, ("text", "blackbox", "length"), "hash", batch_size=5)
    on_dask = corpus_features(sources, ("text", "blackbox", "length"), "hash", batch_size=5, scheduler="local:1")
    assert serial.vocabulary == on_dask.vocabulary and (serial.counts != on_dask.counts).nnz == 0
    assert np.allclose(serial.dense, on_dask.dense, equal_nan=True)
    assert serial.index.equals(on_dask.index)


def test_the_shared_runs_train_a_detector_and_the_simulation_list_is_one_of_them(tmp_path):
    """Two shared τ²-bench runs and the bare simulation list: every protocol the runs hold, against length."""
    from agentuq_nb.steps.train_detector import train_detector

    from conftest import require_tau2

    files = require_tau2()
    listed = files[0].parents[1] / "real_runs" / "claude-opus-4-6_airline_simulation-list.json"
    if not listed.exists():
        pytest.skip(f"{listed} not found (the shared real runs live in ../shared/data/real_runs)")
    result = train_detector([*files, listed], tmp_path / "det", embedder="hash", n_boot=20, n_splits=2,
                            groups=["text", "blackbox", "length"])
    card = result.card
    assert card["n"] == 90 and card["n_runs"] == 3 and card["domains"] == ["airline"]
    assert {r["layout"] for r in card["training_runs"]} == {"v0", "simulation_list"}
    assert "leave_one_domain_out" in result.protocols["protocol"].tolist()
    # the task prior: the two gpt-4.1 runs hold 20 of the list's 50 tasks; the other 30 recur nowhere else
    assert result.protocols.set_index("protocol").loc["leave_one_run_out", "prior_n"] == 60


@pytest.mark.slow
def test_simulate_observes_the_detectors_probability_at_every_decision_point(trained, tmp_path):
    """The embedded model on one bookshop task with the detector as the observe policy's signal: a probability at
    every agent decision point (the signal's equality with predict on a prefix: the online-signal test above)."""
    from agentuq_nb.intervention.config import PolicyConfig
    from agentuq_nb.intervention.policies import build_policy
    from agentuq_nb.records.config import ExecutionConfig, SimulationConfig
    from agentuq_nb.sim.runner import simulate

    result, _ = trained
    policy = build_policy(PolicyConfig(policy="observe", signal=f"detector:{result.path}"))
    # a short conversation (4 steps, short messages): every decision point of it is observed all the same
    simulate(SimulationConfig(domain="bookshop", task_ids=["1"], max_steps=4, agent_max_tokens=32, user_max_tokens=24),
             tmp_path / "sim", ExecutionConfig(progress=False), policy=policy)
    results = json.loads((tmp_path / "sim" / "results.json").read_text())
    assert results["info"]["intervention_policy"]["signal_details"]["kind"] == "detector"
    sim = results["simulations"][0]
    generated = [i for i, m in enumerate(sim["messages"]) if m["role"] == "assistant" and m["raw_data"]]
    decisions = sim["intervention"]["decisions"]
    assert generated and [d["message_idx"] for d in decisions] == generated
    assert all(0 < d["signal"] < 1 and d["action"] == "proceed" for d in decisions)


def test_the_readme_detector_paragraph_states_only_numbers_the_study_wrote():
    """Every number of the README's detector paragraph is in the study's findings as notebook 14 wrote them
    (committed as docs/findings/detector.json with the runs they were measured on)."""
    from agentuq_nb.pipeline.detector_study import COMMITTED_FINDINGS, headline
    from test_docs import README, ROOT, numbers, readme_section

    record = json.loads((ROOT / COMMITTED_FINDINGS).read_text())
    section = readme_section("detector")
    held = set(numbers(json.dumps(record, ensure_ascii=False)))
    missing = [n for n in numbers(section) if n not in held and n != "14"]  # (notebook 14)
    assert not missing, f"README numbers not in {COMMITTED_FINDINGS}: {missing}"
    assert " ".join(headline(record).split()) in " ".join(section.split()), "the README's paragraph is the study's"
    assert f"({COMMITTED_FINDINGS})" in section and README.exists()


def test_a_detector_on_the_static_minilm_table_names_it_and_predicts_what_it_learned(runs, tmp_path):
    """The black-box signals' default embeddings serve the detector too: its card names the distilled table, and a
    prediction on a training run is the out-of-fold score the card's protocol made."""
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.steps.train_detector import train_detector
    from agentuq_nb.uq.embeddings import embeddings_available
    from agentuq_nb.uq.static_embedding import table_identity

    if not embeddings_available():
        pytest.skip("the [embeddings] extra is not installed")
    result = train_detector(runs[:4], tmp_path / "det", embedder="minilm-static", n_boot=0, n_splits=3,
                            groups=["blackbox", "embeddings", "length"], protocols=["leave_one_run_out"])
    assert result.card["embedder"]["name"] == "minilm-static"
    assert table_identity() in result.card["embedder"]["model"]
    again = predict(result.path, runs[0], tmp_path / "run", n_boot=0)
    oof = result.oof[result.oof["run"] == result.card["training_runs"][0]["name"]]
    assert np.allclose(np.sort(again.predictions["log_odds"]), np.sort(oof["log_odds[leave_one_run_out]"]))


def test_the_config_is_resolved_once_into_the_plain_settings_the_training_takes():
    """Issue 52 point 1: ``train-detector`` reads its config once (:meth:`TrainDetectorConfig.training`); the training
    below the steps takes these settings, never the config: the embedder is ``none`` where no group embeds, lists are
    tuples in order, the detector's own settings are made once."""
    import dataclasses

    from agentuq_nb.evaluation.detector_training import TrainingSettings
    from agentuq_nb.steps.train_detector import TrainDetectorConfig

    config = TrainDetectorConfig(inputs=[Path("a.json")], out=Path("d"), groups=["text", "length"], embedder="minilm",
                                 early_turns=[3, 1, 3], protocols=["within_run"], failure_threshold=0.5, seed=7)
    settings = config.training()
    assert isinstance(settings, TrainingSettings) and dataclasses.is_dataclass(settings)
    assert settings.embedder == "none" and settings.groups == ("text", "length") == settings.detector.groups
    assert settings.early_turns == (1, 3) and settings.protocols == ("within_run",)
    assert settings.failure_threshold == 0.5 and settings.seed == settings.detector.seed == 7
    assert settings.command == "train-detector"
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.seed = 8
    embedded = TrainDetectorConfig(inputs=[Path("a.json")], out=Path("d"), embedder="hash").training()
    assert embedded.embedder == "hash" and "embeddings" in embedded.groups


def test_the_protocols_alone_equal_a_whole_trainings_table(runs):
    """The study's ablation judges each feature set by the protocols alone (:func:`protocol_table`: no final model,
    label-shift judgement, early detection or card): its table equals the one a whole training writes. Three runs of
    one domain hold the three protocols (a whole training's label-shift judgement grows with the runs: 22 CPU-s on
    the six, 5 on three)."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.evaluation.detector_training import protocol_table, train_on_features
    from agentuq_nb.steps.train_detector import TrainDetectorConfig

    settings = TrainDetectorConfig(inputs=runs[:3], out=Path("unused"), embedder="hash", n_boot=20, n_splits=2,
                                   groups=["blackbox", "length"], early_turns=[1],
                                   protocols=["within_run", "leave_one_run_out", "leave_run_and_task_out"]).training()
    sources = resolve_sources(runs[:3])
    features = corpus_features(sources, settings.groups, "hash")
    whole = train_on_features(features, sources, settings)
    alone = protocol_table(features, sources, settings)
    assert list(alone["protocol"]) == list(settings.protocols)
    pd.testing.assert_frame_equal(alone, whole.protocols)


def test_one_runs_within_run_calibration_is_fitted_whether_or_not_its_protocol_is_reported(runs):
    """One training run: its within-run cross-fit calibrates the probabilities (fitted with the protocols, on their
    folds made once); asked for other protocols only, the calibration is the same and within-run is not reported."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.evaluation.detector_training import train_on_features
    from agentuq_nb.steps.train_detector import TrainDetectorConfig

    sources = resolve_sources(runs[:1])
    features = corpus_features(sources, ("blackbox", "length"), "hash")  # once: the training only reads them
    trained = {}
    for protocols in (["within_run", "leave_run_and_task_out"], ["leave_run_and_task_out"]):
        settings = TrainDetectorConfig(inputs=runs[:1], out=Path("unused"), embedder="hash", n_boot=0, n_splits=3,
                                       groups=["blackbox", "length"], protocols=protocols).training()
        trained[len(protocols)] = train_on_features(features, sources, settings)
    both, other = trained[2], trained[1]
    assert other.card["calibration"]["protocol"] == both.card["calibration"]["protocol"] == "within_run"
    assert other.card["calibration"]["probabilities"].startswith("within-run log-odds of the one training run")
    assert other.model["final_calibration"] == both.model["final_calibration"] is not None
    assert list(other.protocols["protocol"]) == ["leave_run_and_task_out"] and "within_run" not in other.card["protocols"]
    assert not any("within_run" in c for c in other.oof.columns) and "log_odds[within_run]" in both.oof.columns
