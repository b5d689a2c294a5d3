"""Black-box families (issue 28): structure signals and TRACER against hand computations, the nested tuning's
folds, and the step on real runs without log-probs (``analyze`` exits 0 with them)."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agentuq_nb.evaluation.tracer_tuning import best_setting, nested_scores, optimistic_scores
from agentuq_nb.records import Simulation
from agentuq_nb.steps.blackbox import BlackBoxConfig, compute_signals, compute_tuning, ensure_blackbox
from agentuq_nb.uq.embeddings import COSINE_DECIMALS, HashEmbedder
from agentuq_nb.uq.structure_signals import (
    TRAJECTORY_SIGNALS,
    count_matches,
    is_write_tool,
    structure_messages,
    structure_trajectories,
)
from agentuq_nb.uq.tracer import (
    ALL_FILTERED_U,
    GRID,
    Grid,
    StepArrays,
    TracerParams,
    content_token_nll,
    grid_scores,
    tracer_components,
    tracer_scores,
)
from agentuq_nb.uq.transcript import transcript

from conftest import ROOT, call, require_tau2


def to_cosine_decimals(expected):
    """Equal to what the calculators give: cosines are kept to COSINE_DECIMALS decimals (uq.embeddings)."""
    return pytest.approx(expected, abs=10.0 ** -COSINE_DECIMALS)


REAL_RUNS = sorted((ROOT.parent / "shared" / "data" / "real_runs").glob("*.json"))


def sim(messages: list[dict], task_id="t1", trial=0, reward=1.0) -> Simulation:
    return Simulation.model_validate({"id": f"{task_id}-{trial}", "task_id": task_id, "trial": trial, "seed": 0,
                                      "messages": messages, "reward_info": {"reward": reward}})


# --------------------------------------------------------------------------- structure
STRUCTURE_MESSAGES = [
    {"role": "assistant", "content": "Hi! How can I help you today?"},
    {"role": "user", "content": "I want to change my flight. This is frustrating."},
    {"role": "assistant", "content": None, "tool_calls": [call("get_user_details", user_id="u1")]},
    {"role": "tool", "content": '{"name": "Ann"}'},
    {"role": "assistant", "content": None, "tool_calls": [call("get_user_details", user_id=" U1 ")]},
    {"role": "tool", "content": '{"name": "Ann"}'},
    {"role": "assistant", "content": None, "tool_calls": [call("get_user_details", user_id="u2")]},
    {"role": "tool", "content": "Error: user not found"},
    {"role": "assistant", "content": "I’m sorry, it seems I am unable to find it. Unfortunately I cannot help."},
    {"role": "user", "content": "I already told you my user id. I want to change my flight."},
    {"role": "assistant", "content": None, "tool_calls": [call("update_reservation_flights", reservation_id="R1")]},
    {"role": "tool", "content": '{"ok": true}'},
    {"role": "assistant", "content": None, "tool_calls": [call("transfer_to_human_agents", summary="s")]},
    {"role": "tool", "content": "Transfer successful"},
]


def test_structure_signals_count_what_they_say():
    t = transcript([sim(STRUCTURE_MESSAGES)], "airline")
    embedder = HashEmbedder()
    user_text = t.loc[t["role"] == "user", "text"].tolist()
    user_emb = embedder.embed(user_text)
    messages = structure_messages(t, user_emb)
    row = structure_trajectories(t, messages).iloc[0]
    assert list(structure_trajectories(t, messages).columns[4:]) == list(TRAJECTORY_SIGNALS)
    assert row["tool_errors"] == 1
    assert row["repeated_tool_calls"] == 1  # " U1 " is u1 in canonical form
    assert row["retried_tool_calls"] == 1  # get_user_details again with u2
    assert row["agent_hedging"] == 1  # "it seems"
    assert row["agent_apology"] == 2  # "sorry" (curly apostrophe in I’m), "unfortunately"
    assert row["agent_inability"] == 2  # "I am unable" (its "unable to" overlaps), "I cannot"
    assert row["transfer_to_human"] == 1
    assert row["user_frustration"] == 2  # "frustrat", "I already"
    assert row["distinct_tools"] == 3
    assert row["longest_tool_streak"] == 3
    assert row["turns_after_last_write"] == 3  # the write at message 10, the last message 13
    assert row["user_repetition"] == pytest.approx(float(user_emb[1] @ user_emb[0]))
    per_message = messages.set_index("message_idx")
    assert math.isnan(per_message.loc[1, "user_repetition"])  # the first user message has nothing to repeat
    assert per_message.loc[7, "tool_error"] == 1 and math.isnan(per_message.loc[7, "hedging"])
    assert per_message.loc[4, "repeated_call"] == 1 and per_message.loc[6, "retried_call"] == 1


def test_lexicons_match_words_not_parts_of_words():
    texts = pd.Series(["Maybe it might work", "mightily dismayed", "I can't do that, I can't", "", "SORRY!!"])
    assert count_matches(texts, ("might", "maybe")).tolist() == [2, 0, 0, 0, 0]
    assert count_matches(texts, ("i can't",)).tolist() == [0, 0, 2, 0, 0]
    assert count_matches(texts, ("sorry",)).tolist() == [0, 0, 0, 0, 1]


def tau2_tool_tags(root: Path) -> dict[str, str]:
    """Tool name -> ToolType of every ``@is_tool(ToolType.X)`` method in τ²-bench's domain sources."""
    tags = {}
    for path in sorted((root / "src" / "tau2" / "domains").glob("*/*tools.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for dec in node.decorator_list:
                    if isinstance(dec, ast.Call) and getattr(dec.func, "id", None) == "is_tool" and dec.args:
                        tags[node.name] = getattr(dec.args[0], "attr", "")
    return tags


@pytest.mark.parametrize("release", ["tau2-bench", "tau2-bench-1.0.1"])
def test_write_tools_are_tau2_benchs_own_write_tags(release):
    root = ROOT.parent / "shared" / release
    if not (root / "src").is_dir():
        pytest.skip(f"{root} not found (τ²-bench's source beside the repository)")
    tags = tau2_tool_tags(root)
    assert len(tags) > 60
    wrong = {name: tag for name, tag in tags.items() if is_write_tool(name) != (tag == "WRITE")}
    assert not wrong
    assert is_write_tool("get_order", {"get_order": "write"}) and not is_write_tool("book_x", {"book_x": "read"})


# --------------------------------------------------------------------------- TRACER
TOOL_TEXT = "Tool: get_reservation_details({'reservation_id': 'ABC123'})"
TRACER_MESSAGES = [
    {"role": "assistant", "content": "Let me check reservation ABC123 now."},
    {"role": "user", "content": "Please cancel reservation ABC123."},
    {"role": "assistant", "content": None, "tool_calls": [call("get_reservation_details", reservation_id="ABC123")]},
    {"role": "tool", "content": '{"status": "confirmed"}'},
    {"role": "assistant", "content": "Let me check reservation ABC123 again."},
    {"role": "user", "content": "Why?"},
    {"role": "assistant", "content": None, "tool_calls": [call("get_reservation_details", reservation_id="ABC123")]},
    {"role": "tool", "content": "Error: boom", "error": True},
]
ANGLES = {"Let me check reservation ABC123 now.": 0, "Please cancel reservation ABC123.": 50, TOOL_TEXT: 100,
          'Observation: {"status": "confirmed"}': 160, "Let me check reservation ABC123 again.": 20, "Why?": 95,
          "Observation: Error: boom": 200}


def embed_by_angle(texts):
    return np.array([[math.cos(math.radians(ANGLES[t])), math.sin(math.radians(ANGLES[t]))] for t in texts])


def one_minus_cos(a, b) -> float:
    return min(2.0, max(0.0, 1 - math.cos(math.radians(ANGLES[a] - ANGLES[b]))))


def test_tracer_components_and_score_against_a_hand_computation():
    t = transcript([sim(TRACER_MESSAGES)], "airline")
    c = tracer_components(t, embed_by_angle).set_index("message_idx")
    assert t.loc[2, "text"] == TOOL_TEXT
    # D_a: repetition. A4 repeats A0's text: clip(cos 20°) × Jaccard({let, me, check, reservation, abc123, now},
    # {…, again}) = cos 20° × 5/7; A6 repeats A2's call exactly (within the last 5 tool-calling messages)
    assert c.loc[0, "tracer_da"] == 0 and c.loc[2, "tracer_da"] == 0
    assert c.loc[4, "tracer_da"] == to_cosine_decimals(math.cos(math.radians(20)) * 5 / 7)
    assert c.loc[6, "tracer_da"] == 1.0
    # D_o,agent: a call against its observation
    assert c.loc[2, "tracer_do_agent"] == to_cosine_decimals(one_minus_cos(TOOL_TEXT, 'Observation: {"status": "confirmed"}'))
    assert c.loc[6, "tracer_do_agent"] == to_cosine_decimals(one_minus_cos(TOOL_TEXT, "Observation: Error: boom"))
    assert math.isnan(c.loc[0, "tracer_do_agent"]) and math.isnan(c.loc[4, "tracer_do_agent"])
    # D_o,user: the agent's last message against the user's reply
    du1 = one_minus_cos("Let me check reservation ABC123 now.", "Please cancel reservation ABC123.")
    du5 = one_minus_cos("Let me check reservation ABC123 again.", "Why?")
    assert c.loc[1, "tracer_do_user"] == to_cosine_decimals(du1) and c.loc[5, "tracer_do_user"] == to_cosine_decimals(du5)
    assert c["is_step"].sum() == 6 and not c.loc[[3, 7], "is_step"].any()
    # risk_i = max(U, a D_a, b D_o,agent, g D_o,user) over the 6 steps; top k% = floor(k N) riskiest
    params = TracerParams(alpha=2.0, beta=1.0, gamma=0.5, top_k=0.5, w=0.2)
    risks = sorted([0.0, 0.5 * du1, one_minus_cos(TOOL_TEXT, 'Observation: {"status": "confirmed"}'),
                    2.0 * math.cos(math.radians(20)) * 5 / 7, 0.5 * du5,
                    max(2.0, one_minus_cos(TOOL_TEXT, "Observation: Error: boom"))], reverse=True)
    expected = 0.8 * np.mean(risks[:3]) + 0.2 * risks[0]
    steps = StepArrays.of(c.reset_index(), t[["domain", "task_id", "trial", "seed"]].drop_duplicates())
    assert tracer_scores(steps, params)[0] == to_cosine_decimals(expected)
    # TRACER's default: a = b = g = 1 and the top 10 % of 6 steps is 1 step, so the score is the largest risk
    default_risks = [0.0, du1, one_minus_cos(TOOL_TEXT, 'Observation: {"status": "confirmed"}'),
                     math.cos(math.radians(20)) * 5 / 7, du5, max(1.0, one_minus_cos(TOOL_TEXT, "Observation: Error: boom"))]
    assert tracer_scores(steps)[0] == to_cosine_decimals(max(default_risks))


def test_content_token_nll_drops_near_certain_tokens_stop_words_and_numbers():
    keys = {"domain": "d", "task_id": "t", "trial": 0, "seed": 0}
    tokens = pd.DataFrame([
        {**keys, "message_idx": 1, "token": "Hello", "chosen_logprob": -0.01},  # near certain
        {**keys, "message_idx": 1, "token": " the", "chosen_logprob": -1.0},  # stop word
        {**keys, "message_idx": 1, "token": " 123", "chosen_logprob": -2.0},  # number
        {**keys, "message_idx": 1, "token": " cancel", "chosen_logprob": -0.5},
        {**keys, "message_idx": 1, "token": " flight.", "chosen_logprob": -1.5},
        {**keys, "message_idx": 2, "token": " the", "chosen_logprob": -3.0},  # every token dropped
    ])
    u = content_token_nll(tokens).set_index("message_idx")["tracer_u"]
    assert u[1] == pytest.approx(1.0) and u[2] == ALL_FILTERED_U


def test_the_grid_scores_every_setting_as_tracer_scores_does():
    rng = np.random.default_rng(0)
    steps = StepArrays(u=rng.random((7, 9)), da=rng.random((7, 9)), do_agent=rng.random((7, 9)),
                       do_user=rng.random((7, 9)), n_steps=np.array([9, 1, 4, 0, 6, 9, 2]))
    grid = Grid(alpha=(0.0, 2.0), beta=(1.0, 5.0), gamma=(0.5,), top_k=(0.05, 0.3, 1.0), w=(0.0, 0.3))
    scores = grid_scores(steps, grid, chunk=3)
    assert scores.shape == (2 * 2 * 3 * 2, 7)
    for row, setting in zip(scores, grid.settings()):
        np.testing.assert_allclose(row, tracer_scores(steps, Grid.params(setting)), equal_nan=True)
    assert np.isnan(scores[:, 3]).all()  # a trajectory without steps has no score


# --------------------------------------------------------------------------- tuning
def synthetic_grid(n_tasks=12, trials=3, seed=1):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_tasks), trials)
    failure = rng.random(len(groups)) < 0.4
    signal = failure + rng.normal(0, 1.2, len(groups))
    steps = StepArrays(u=np.zeros((len(groups), 5)), da=np.abs(rng.normal(size=(len(groups), 5))),
                       do_agent=np.abs(signal)[:, None] * rng.random((len(groups), 5)),
                       do_user=rng.random((len(groups), 5)), n_steps=np.full(len(groups), 5))
    grid = Grid(alpha=(0.0, 1.0, 4.0), beta=(0.0, 1.0, 4.0), gamma=(0.0, 1.0), top_k=(0.2, 0.6), w=(0.0, 0.3))
    return grid_scores(steps, grid), failure, groups, grid


def test_nested_tuning_never_sees_the_labels_of_the_tasks_it_scores():
    scores, failure, groups, grid = synthetic_grid()
    nested = nested_scores(scores, failure, groups, n_splits=4, seed=0, grid=grid)
    assert (nested.fold >= 0).all() and np.isfinite(nested.scores).all()
    for k in range(nested.fold.max() + 1):
        held = nested.fold == k
        assert not set(groups[held]) & set(groups[~held])  # folds are tasks
        # refit per fold: the fold's setting is the best on the other folds alone
        assert nested.choices[k].index == best_setting(scores, failure, ~held, grid).index
        # with the same folds, flipping the held-out fold's labels leaves its scores as they were
        flipped = failure.copy()
        flipped[held] = ~flipped[held]
        again = nested_scores(scores, flipped, groups, grid=grid, fold=nested.fold)
        np.testing.assert_array_equal(again.scores[held], nested.scores[held])
        assert not np.array_equal(again.scores[~held], nested.scores[~held])  # the others did see them


def test_the_optimistic_readout_is_at_least_any_fixed_setting_in_sample():
    from sklearn.metrics import roc_auc_score

    scores, failure, groups, grid = synthetic_grid()
    optimistic, choice = optimistic_scores(scores, failure, grid)
    best_fixed = max(roc_auc_score(failure, row) for row in scores)
    assert choice.auroc == pytest.approx(best_fixed) == pytest.approx(roc_auc_score(failure, optimistic))


# --------------------------------------------------------------------------- the step on real runs
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    from agentuq_nb.steps.extract import extract

    path = require_tau2()[-1]  # gpt-4.1 airline: 20 trajectories, 10 failures
    run = tmp_path_factory.mktemp("bb") / "run"
    extract(path, run)  # no log-probs at all: the normal case, no warning
    return run


def test_the_step_publishes_signals_and_tuned_readouts(real_run):
    from agentuq_nb.estimators import available, get
    from agentuq_nb.io.store.rundir import RunDir

    config = BlackBoxConfig(embedder="hash", seed=3)
    status = ensure_blackbox(real_run, config)
    assert status.computed == ["signals", "tuning"] and status.skipped is None
    assert status.report["trajectories"] == 20 and not status.report["log_probs"]
    names = available(real_run)
    for name in ("structure.tool_errors", "structure.agent_hedging", "tracer.default", "tracer.nested",
                 "tracer.optimistic", "tracer.action_gap"):
        assert name in names
    assert "tracer.content_nll" not in names  # no log-probs
    assert get("tracer.optimistic").uses_labels and not get("tracer.default").uses_labels
    run = RunDir(real_run)
    turns = run.read_frame("blackbox_turns")
    assert len(turns) == status.report["messages"] and set(turns["scorer"]) == {"blackbox"}
    tuning = json.loads(run.file("tracer_tuning").read_text())
    assert tuning["grid_settings"] == len(GRID.settings()) == 32_000 and tuning["seed"] == 3
    assert len(tuning["folds"]) == 5 and all(f["n_train"] < 20 for f in tuning["folds"])
    # up to date: nothing recomputed; another threshold re-tunes only
    assert ensure_blackbox(real_run, config).computed == []
    assert ensure_blackbox(real_run, config.model_copy(update={"failure_threshold": 0.5})).computed == ["tuning"]


def test_the_step_refuses_a_run_that_cannot_have_the_families_or_says_why_when_not_required(real_run, tmp_path):
    """One call for the command and for compare-estimators: the step's run raises where the run cannot have the
    families (no trajectories table); with ``required`` off it returns the status that says why, and brings an able
    run up to date as the command does."""
    import shutil

    from agentuq_nb.steps.blackbox import run as blackbox

    config = BlackBoxConfig(embedder="hash", seed=3)
    done = blackbox(real_run, config.model_copy(update={"required": False}))
    assert done.skipped is None and done.report["trajectories"] == 20 and done.tuning["seed"] == 3
    older = tmp_path / "older"
    shutil.copytree(real_run, older)
    (older / "trajectories.parquet").unlink()  # as an older version extracted it
    with pytest.raises(FileNotFoundError, match="no trajectories.parquet"):
        blackbox(older, config)
    status = blackbox(older, config.model_copy(update={"required": False}))
    assert "no trajectories.parquet" in status.skipped and status.computed == [] and status.report == {}


def test_the_streamed_grid_search_chooses_and_scores_as_the_whole_grid_does(real_run, monkeypatch):
    """tuning_tables searches the grid in bounded chunks (issue 51 point 6: the whole grid's scores took ~1.7 MB per
    trajectory); its readouts are those of optimistic_scores and nested_scores on the whole grid's scores."""
    from agentuq_nb.evaluation import tracer_tuning
    from agentuq_nb.evaluation.multi_trial import task_labels
    from agentuq_nb.io.store.artifacts import read_blackbox_turns
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.records.keys import key_dtypes
    from agentuq_nb.records.outcomes import failure_labels

    ensure_blackbox(real_run, BlackBoxConfig(embedder="hash", seed=3))
    turns, rewards = read_blackbox_turns(real_run), key_dtypes(RunDir(real_run).rewards())
    monkeypatch.setattr(tracer_tuning, "GRID_CHUNK_BYTES", 1)  # one weight triple per chunk: 1,000 chunks
    out, record = tracer_tuning.tuning_tables(turns, rewards, 1.0, seed=3)
    failure = failure_labels(rewards["reward"].to_numpy(dtype=float), 1.0)
    scores = grid_scores(StepArrays.of(turns, rewards))
    optimistic, choice = optimistic_scores(scores, failure)
    nested = nested_scores(scores, failure, task_labels(rewards), 5, 3)
    np.testing.assert_allclose(out["tracer_optimistic"], optimistic, equal_nan=True)
    np.testing.assert_allclose(out["tracer_nested"], nested.scores, equal_nan=True)
    np.testing.assert_array_equal(out["tracer_nested_fold"], nested.fold)
    assert record["optimistic"]["auroc"] == pytest.approx(choice.auroc)
    assert [f["train_auroc"] for f in record["folds"]] == pytest.approx([c.auroc for c in nested.choices])


def test_re_extracting_makes_the_signals_stale_and_they_are_recomputed(tmp_path):
    from agentuq_nb.steps.extract import extract

    path = require_tau2()[0]
    extract(path, tmp_path / "run")
    config = BlackBoxConfig(embedder="hash")
    compute_signals(tmp_path / "run", config)
    compute_tuning(tmp_path / "run", config)
    extract(path, tmp_path / "run")  # new trajectories table: the signals were computed from the old one
    assert ensure_blackbox(tmp_path / "run", config).computed == ["signals", "tuning"]


def test_per_message_signals_feed_the_dynamics_and_early_warning(real_run):
    from agentuq_nb.uq.dynamics import compute_early_warning, read_agent_turns

    ensure_blackbox(real_run, BlackBoxConfig(embedder="hash"))
    turns = read_agent_turns(real_run, scorer="blackbox", value="tracer_step_risk", table="blackbox_turns")
    assert len(turns) and turns["position"].between(0, 1).all() and turns["failed"].any()
    scores = compute_early_warning(real_run, scorer="blackbox", value="tracer_step_risk", table="blackbox_turns")
    assert np.isfinite(scores["early_warning_f1"]).all()


def test_combined_predictors_never_take_a_readout_tuned_on_the_labels(real_run):
    from agentuq_nb.estimators.scores import score_table, with_length_columns
    from agentuq_nb.evaluation.estimator_table import combined_inputs

    ensure_blackbox(real_run, BlackBoxConfig(embedder="hash"))
    table, estimators = score_table(real_run)
    table = with_length_columns(real_run, table)
    features = combined_inputs(table, estimators, with_length=True, inputs="blackbox")
    assert "tracer.default" in features and "structure.tool_errors" in features and "num_messages" in features
    assert "tracer.nested" not in features and "tracer.optimistic" not in features
    assert combined_inputs(table, estimators, with_length=False).shape[1] == 0  # no token estimator to combine


@pytest.mark.parametrize("path", REAL_RUNS[:1] or [None])
def test_analyze_a_run_without_log_probs_exits_0_with_the_black_box_families(path, tmp_path):
    from agentuq_nb.cli import app

    if path is None:
        pytest.skip("../shared/data/real_runs not found beside the repository")
    result = CliRunner().invoke(app, ["analyze", str(path), "--out", str(tmp_path / "run"), "--embedder", "hash",
                                      "--n-boot", "50"])
    assert result.exit_code == 0, result.output
    assert result.output.count("families not computed for this run") == 1
    assert "agentuq-nb rescore" in result.output and "agentuq-nb sample-actions" in result.output
    table = pd.read_csv(tmp_path / "run" / "estimator_table.csv")
    families = set(table["family"])
    assert {"structure", "tracer", "baseline", "combined"} <= families
    assert {"blackbox_logistic", "blackbox_gbm+length"} <= set(table["estimator"])
    combined = table[table["family"] == "combined"]
    assert combined["ece"].notna().all() and combined["brier"].between(0, 1).all()
    # the combinations' out-of-fold probabilities are read back as estimators (compare-runs ranks them), with the
    # table's AUROC, and are not rows of the table a second time
    from sklearn.metrics import roc_auc_score

    from agentuq_nb.estimators import available, get
    from agentuq_nb.io.store.rundir import RunDir

    assert {"blackbox_logistic", "blackbox_gbm+length"} <= set(available(tmp_path / "run"))
    assert table["estimator"].is_unique
    run = RunDir(tmp_path / "run")
    prob = get("blackbox_gbm").scores(run).rename("p").reset_index().merge(run.rewards(), on=list(run.rewards())[:4])
    expected = table.set_index("estimator").loc["blackbox_gbm", "auroc"]
    assert roc_auc_score(prob["reward"] < 1, prob["p"]) == pytest.approx(expected)


def test_the_one_off_distillation_is_said_on_its_own_line():
    """issue 49: "black-box signals … in 73.4 s (1.5 s embedding)" left 72 s unexplained: the static table's
    distillation (once per machine) is said apart, and the run's own time no longer holds it."""
    from agentuq_nb.steps.compare_estimators import blackbox_timing

    report = {"trajectories": 50, "messages": 1056, "seconds": 73.4, "embed_seconds": 1.5, "texts_embedded": 1021,
              "distill_seconds": 71.2}
    first, second = blackbox_timing(report).splitlines()
    assert first == "black-box signals: 50 trajectories, 1056 messages in 2.2 s (1.5 s embedding 1021 texts)"
    assert second.startswith("and 71.2 s before them distilling the static MiniLM table, once per machine")
    assert "\n" not in blackbox_timing({**report, "seconds": 2.2, "distill_seconds": 0.0})
    assert "\n" not in blackbox_timing({k: v for k, v in report.items() if k != "distill_seconds"} | {"seconds": 2.2})
