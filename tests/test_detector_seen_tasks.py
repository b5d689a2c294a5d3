"""The detector on real shared runs (static MiniLM table): probabilities adapted to the predicted run's own failure
rate, seen tasks told by their content (not their id), card.md made from card.json's numbers, results independent
of the order the inputs are given in, and report.html ranking by the detector or the best out-of-sample estimator."""
from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest

from conftest import TAU2_DIR

pytestmark = pytest.mark.filterwarnings("ignore::agentuq_nb.io.input_warnings.InputDataWarning")
REAL = TAU2_DIR.parent / "real_runs"
TRAINING = [TAU2_DIR / "gpt-4.1_airline_1trial.json", TAU2_DIR / "ft-gpt-4.1_airline_1trial.json",
            REAL / "ft-gpt-4.1_retail_1trial.json"]
NEW_RUN = REAL / "claude-sonnet-4.5_airline_1trial.json"  # 50 airline tasks, 20 of them the training runs'


def require_shared() -> None:
    missing = [p for p in [*TRAINING, NEW_RUN] if not p.exists()]
    if missing:
        pytest.skip(f"{missing[0]} not found (the shared real runs live in ../shared/data)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A detector of two τ² airline runs and a retail run, on the static MiniLM table (two folds by task and 20
    resamples: what the tests read of it holds for any number of either)."""
    from agentuq_nb.steps.train_detector import train_detector

    require_shared()
    return train_detector(TRAINING, tmp_path_factory.mktemp("seen") / "det", embedder="minilm-static", n_boot=20,
                          n_splits=2)


@pytest.fixture(scope="module")
def predicted(trained, tmp_path_factory):
    """The detector applied to the claude-sonnet airline run (labelled), through the command line."""
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    out = tmp_path_factory.mktemp("predicted") / "run"
    done = CliRunner().invoke(app, ["predict", str(trained.path), str(NEW_RUN), "--out", str(out), "--n-boot", "50"])
    assert done.exit_code == 0, done.output
    return out, done.output


def test_predict_estimates_the_runs_failure_rate_and_shows_its_own_beside_it(predicted):
    from agentuq_nb.io.store.artifacts import read_predictions

    out, printed = predicted
    report = json.loads((out / "detector.json").read_text())
    rate = report["failure_rate"]
    truth = 14 / 50
    assert rate["true_rate"] == pytest.approx(truth)
    if rate["resampled"] in ("none", "runs"):  # the training runs chose not to adapt: the training rate, said so
        # (no training run is claude-sonnet's: nothing moves it)
        assert rate["agent"] == "claude-sonnet-4-5" and rate["agent_training_runs"] == 0
        assert rate["estimated"] == pytest.approx(rate["training_rate"])
        assert f"estimated failure rate of this run: {rate['estimated']:.3f}" in printed
        assert "the training runs' rate (no training run of its agent claude-sonnet-4-5)" in printed
        if rate["resampled"] == "runs":  # its interval: the share of its 50 trajectories failing, runs' spread
            assert 0 <= rate["lo"] < rate["estimated"] < rate["hi"] <= 1
            assert f"{rate['estimated']:.3f} [{rate['lo']:.3f}, {rate['hi']:.3f}] - the training runs' rate" in printed
    else:
        # estimated from the run's scores (MAP-EM): a bootstrap over its trajectories, widened to the training runs'
        # spread where the prior strength is finite (the pseudo-trajectories' rate is not known)
        assert 0 <= rate["lo"] <= rate["estimated"] <= rate["hi"] <= 1
        assert rate["resampled"] in ("trajectories", "trajectories and runs")
        assert rate["method"].startswith("label-shift em")
        assert (rate["resampled"] == "trajectories and runs") == ("widened" in rate["interval"])
        assert f"estimated failure rate of this run: {rate['estimated']:.3f}" in printed
        assert f"{rate['resampled']} resampled" in printed
    p = read_predictions(out)
    # the adapted probabilities are the calibrated ones moved by one log-odds shift, so that their mean is the
    # estimated rate (the run's expected failures: its rate times its size)
    logit = np.log(p["failure_probability"] / (1 - p["failure_probability"]))
    before = np.log(p["failure_probability_training_rate"] / (1 - p["failure_probability_training_rate"]))
    assert np.allclose(logit - before, rate["logit_shift"], atol=1e-6)
    assert p["failure_probability"].mean() == pytest.approx(rate["estimated"], abs=1e-9)
    assert f"its own (labelled) rate: {truth:.3f}" in printed
    # the expected share of failures: the mean of the probabilities written, with its interval, beside the held-out
    # error of the detector's rate estimate
    assert rate["mean_probability"] == pytest.approx(p["failure_probability"].mean())
    assert rate["mean_probability_lo"] <= rate["mean_probability"] <= rate["mean_probability_hi"]
    assert f"expected failures by its probabilities: {p['failure_probability'].sum():.1f} of 50" in printed
    assert rate["held_out_rate_mae"] is not None and "missed the true one by" in printed
    assert report["brier_base_rate"] == pytest.approx(truth * (1 - truth))


def test_a_run_of_an_agent_the_training_runs_had_gets_the_rate_they_tell(trained):
    """The fine-tuned gpt-4.1's telecom run (10 of 40 failed): two of the three training runs are that agent's (0.35
    and 0.15 failed), so where the training runs chose not to estimate a run's rate from its scores (κ = ∞; these
    three chose κ = 1000, so the map is set to ∞ here) its rate is the training rate moved by them - the model of
    evaluation/run_rate.py on the card's training runs' counts and agent models - and predict's line says so."""
    from agentuq_nb.evaluation.detector_apply import load_detector
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_source
    from agentuq_nb.evaluation.run_rate import agent_rate
    from agentuq_nb.steps.predict import rate_report, summary_lines

    run = REAL / "ft-gpt-4.1_telecom_1trial.json"
    if not run.exists():
        pytest.skip(f"{run} not found")
    detector = load_detector(trained.path)
    detector.final_map["prior_strength"] = None  # JSON's ∞
    source = resolve_source(run, "ft-telecom")
    features = corpus_features([source], detector.groups, detector.embedder, detector.embed_max_tokens)
    scored = detector.predict(features, explained=False)
    agent = source.models["assistant"]
    estimate, adapted = detector.adapt_to_run(scored, n_boot=50, seed=0, agent=agent)
    rows = trained.card["training_runs"]
    training_rate = float(scored["source_rate"].mean())
    expected = agent_rate([r["n_failures"] for r in rows], [r["n_labelled"] for r in rows],
                          [r["models"]["assistant"] for r in rows], agent, training_rate=training_rate, n_new=40,
                          seed=0)
    assert agent.startswith("ft:gpt-4.1") and estimate.agent_runs == 2 and estimate.resampled == "runs"
    assert estimate.rate == pytest.approx(expected.rate) and estimate.rate < training_rate
    assert (estimate.lo, estimate.hi) == pytest.approx((expected.lo, expected.hi))
    assert np.mean(adapted) == pytest.approx(estimate.rate, abs=1e-9)
    unknown, _ = detector.adapt_to_run(scored, n_boot=50, seed=0, agent=None)  # its results naming no agent
    assert unknown.agent_runs == 0 and unknown.rate == pytest.approx(training_rate)
    report = rate_report(estimate, scored.assign(failure_probability_training_rate=scored["failure_probability"],
                                                 failure_probability=adapted))
    line = summary_lines({"failure_rate": report, "n": 40})[0]
    assert line.startswith(f"estimated failure rate of this run: {estimate.rate:.3f} [{estimate.lo:.3f}, "
                           f"{estimate.hi:.3f}] - the training runs' rate ({training_rate:.3f}) moved by what the 2 "
                           f"training runs of its agent {agent} failed"), line


def test_predict_tells_the_tasks_it_saw_by_content_and_what_the_detector_adds_over_them(trained, predicted):
    from agentuq_nb.io.store.artifacts import read_predictions

    out, printed = predicted
    p = read_predictions(out)
    training_ids = {str(s["task_id"]) for s in json.loads(TRAINING[0].read_text())["simulations"]}
    assert p["task_seen"].astype(bool).tolist() == [t in training_ids for t in p["task_id"]]
    assert p["task_seen"].sum() == 20 and p["task_key"].str.startswith("content:").all()
    prior = p.loc[p["task_seen"].astype(bool), "task_prior"]
    assert prior.between(0, 1).all() and p.loc[~p["task_seen"].astype(bool), "task_prior"].isna().all()
    report = json.loads((out / "detector.json").read_text())
    assert report["tasks_seen"]["n_seen"] == 20 and report["tasks_seen"]["share_seen"] == pytest.approx(0.4)
    row = report["against_task_history"]
    assert row["prior_n"] == 20 and 0 <= row["prior_auroc"] <= 1 and 0 <= row["length_auroc"] <= 1
    assert "tasks seen in training: 20 of 50 trajectories (40%" in printed
    assert f"the detector adds {row['diff_vs_prior']:+.3f}" in printed and "over what the task's history alone gives" \
        in printed
    # the task prior is the task's failure rate in the training runs, task by task
    card_tasks = pd.DataFrame(json.loads((trained.path / "model.json").read_text())["tasks"])
    airline = card_tasks[card_tasks["domain"] == "airline"].set_index("task_id")
    for task_id, value in zip(p.loc[p["task_seen"].astype(bool), "task_id"], prior):
        assert value == pytest.approx(airline.loc[str(task_id), "failures"] / airline.loc[str(task_id), "n"])


def test_a_tau_bench_task_with_a_training_tasks_id_is_not_seen(trained, tmp_path):
    """τ-bench's retail tasks reuse τ²-bench's ids for other tasks: the same (domain, id), another content."""
    from agentuq_nb.steps.predict import predict
    from test_tau_bench_results import REWARDS, tool_calling_entry, write_json

    ids = {0: "5", 1: "9", 2: "12"}  # ids of the τ² retail training run's tasks
    entries = [{**tool_calling_entry(task, trial, float(REWARDS[task][trial])), "task_id": ids[task]}
               for trial in range(2) for task in range(3)]
    results = write_json(tmp_path / "tool-calling-gpt-4o-retail.json", entries)
    done = predict(trained.path, results, tmp_path / "run", n_boot=50)
    p = done.predictions
    assert set(p["domain"]) == {"retail"} and set(p["task_id"]) == {"5", "9", "12"}
    assert not p["task_seen"].any() and p["task_prior"].isna().all()
    assert p["task_key"].str.startswith("content:").all()
    assert done.report["tasks_seen"]["share_seen"] == 0


def test_card_md_states_card_json_numbers_and_three_trust_sentences(trained):
    card = json.loads((trained.path / "card.json").read_text())
    text = (trained.path / "card.md").read_text()
    assert "card.md" in card["files"]  # hashed with the folder's other files
    for name, row in card["protocols"].items():
        line = next(x for x in text.splitlines() if x.startswith(f"| {name} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[2].startswith(f"{row['auroc']:.3f} [{row['auroc_lo']:.3f}, {row['auroc_hi']:.3f}]")
        assert cells[3] == f"{row['length_auroc']:.3f} ({row['length_baseline']})"
        assert cells[4].startswith(f"{row['diff_vs_length']:+.3f}") and cells[4].endswith(row["vs_length"])
        if "prior_auroc" in row:
            assert cells[5] == f"{row['prior_auroc']:.3f} ({row['prior_n']})"
            assert cells[6].endswith(row["vs_prior"])
    trust = text.split("## What to trust")[1].split("##")[0]
    sentences = re.findall(r"^\d\. (.+)$", trust, flags=re.M)
    assert len(sentences) == 3
    loro = card["protocols"]["leave_one_run_out"]
    assert f"AUROC {loro['auroc']:.3f}" in sentences[0]
    if "diff_vs_prior" in loro:  # the difference it states is between the two numbers it puts side by side
        assert f"the {loro['prior_n']} trajectories whose task another run holds it reaches " \
               f"{loro['auroc_on_prior_rows']:.3f}" in sentences[0]
        assert loro["diff_vs_prior"] == pytest.approx(loro["auroc_on_prior_rows"] - loro["prior_auroc"])
    shift = card["calibration"]["label_shift"]
    assert f"on {shift['summary']['runs_brier_adapted_le_base_rate']} of 3 " in sentences[2]
    assert f"{shift['summary']['rate_mae']:.3f}" in sentences[2]
    for r in shift["runs"]:
        assert f"| {r['run']} | {r['n']} | {r['true_rate']:.3f} | {r['estimated_rate']:.3f}" in text
    assert f"{card['tasks']['n_tasks']} distinct tasks" in text


def test_the_label_shift_judgement_holds_each_training_runs_true_rate(trained):
    card = trained.card
    shift = card["calibration"]["label_shift"]
    runs = {r["name"]: r for r in card["training_runs"]}
    assert [r["run"] for r in shift["runs"]] == list(runs)
    for r in shift["runs"]:
        truth = runs[r["run"]]["n_failures"] / runs[r["run"]]["n_labelled"]
        assert r["true_rate"] == pytest.approx(truth) and r["brier_base_rate"] == pytest.approx(truth * (1 - truth))
        assert r["rate_error"] == pytest.approx(abs(r["estimated_rate"] - truth))
    bins = pd.DataFrame(shift["reliability"]["adapted"])
    assert bins["count"].sum() == card["n"] and (bins["failure_rate_lo"] <= bins["failure_rate_hi"]).all()
    table = pd.read_csv(trained.path / "label_shift.csv")
    assert len(table) == 3 and np.allclose(table["brier_adapted"], [r["brier_adapted"] for r in shift["runs"]])
    # each held-out run's probabilities are centred on its estimated rate, and scored against the constant training
    # rate's Brier beside the base rate's
    rows = pd.read_csv(trained.path / "label_shift_rows.csv")
    means = rows.groupby("run")["adapted"].mean()
    for r in shift["runs"]:
        assert means[r["run"]] == pytest.approx(r["estimated_rate"], abs=1e-9)
        y = rows.loc[rows["run"] == r["run"], "failure"].to_numpy(dtype=float)
        assert r["brier_training_rate"] == pytest.approx(np.mean((r["training_rate"] - y) ** 2))
        assert r["brier_true_rate_centred"] <= r["brier_base_rate"] + 0.05


def test_the_inputs_order_does_not_change_what_is_learned(tmp_path):
    from agentuq_nb.steps.train_detector import train_detector

    require_shared()
    options = dict(embedder="none", groups=["text", "length"], protocols=["leave_one_run_out"], n_boot=20)
    a = train_detector(TRAINING, tmp_path / "a", **options)
    b = train_detector([TRAINING[2], TRAINING[0], TRAINING[1]], tmp_path / "b", **options)
    assert [r["name"] for r in a.card["training_runs"]] == [r["name"] for r in b.card["training_runs"]]
    assert a.card["protocols"] == b.card["protocols"] and a.card["calibration"] == b.card["calibration"]
    for name in ("protocols.csv", "oof_predictions.csv", "label_shift.csv", "model.json", "card.md"):
        left, right = (tmp_path / "a" / name).read_text(), (tmp_path / "b" / name).read_text()
        if name == "card.md":  # its first line names the time it was made
            left, right = left.split("\n", 3)[3], right.split("\n", 3)[3]
        assert left == right, name


def test_the_report_ranks_by_the_detector_when_one_is_given(trained, tmp_path):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app
    from agentuq_nb.io.store.artifacts import read_estimator_table
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.analyze import trajectory_rows

    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["analyze", str(NEW_RUN), "--out", str(out), "--embedder", "hash", "--n-boot", "20",
                                    "--no-figures", "--detector", str(trained.path)])
    assert done.exit_code == 0, done.output
    table = read_estimator_table(RunDir(out))
    assert "detector" in set(table["estimator"])
    rows, note = trajectory_rows(RunDir(out), table)
    ranking = rows.columns[6]
    assert "detector" in ranking and note.startswith("Ranked by the detector")
    assert rows[ranking].is_monotonic_decreasing
    assert "Ranked by the detector" in (out / "report.html").read_text()


def test_without_a_detector_the_report_ranks_by_the_best_out_of_sample_estimator_and_marks_bad_probabilities(
        tmp_path):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app
    from agentuq_nb.io.store.artifacts import read_estimator_table
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.analyze import probability_label, ranking_estimator, trajectory_rows

    require_shared()
    out = tmp_path / "run"
    done = CliRunner().invoke(app, ["analyze", str(NEW_RUN), "--out", str(out), "--embedder", "hash", "--n-boot", "20",
                                    "--no-figures"])
    assert done.exit_code == 0, done.output
    table = read_estimator_table(RunDir(out))
    name, invert = ranking_estimator(table)
    eligible = table[~table["in_sample"].fillna(False).astype(bool)]
    assert name == eligible.sort_values("auroc", ascending=False).iloc[0]["estimator"]
    rows, note = trajectory_rows(RunDir(out), table)
    assert note.startswith(f"Ranked by {name}, the estimator with the highest AUROC on this run")
    y = (rows["outcome"] == "failed").to_numpy()
    base = y.mean() * (1 - y.mean())
    brier = dict(zip(table["estimator"], table["brier"]))
    probabilities = [c for c in rows.columns if c.startswith("P(failure) ") or " (Brier " in c]
    assert probabilities  # the combination with the lowest Brier score is shown
    for column in probabilities:
        if column.startswith("P(failure) "):
            assert brier[column.removeprefix("P(failure) ")] <= base, column
        else:
            assert brier[column.split(" (Brier ")[0]] > base and "not a probability" in column
    assert probability_label("x", 0.30, 0.25).startswith("x (Brier 0.300 > base rate's 0.250")
    assert probability_label("x", 0.20, 0.25) == "P(failure) x"
