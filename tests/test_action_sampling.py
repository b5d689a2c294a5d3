"""`sample-actions`: decision points, the agent's rebuilt context, rows per sample, resuming, refusals.

Real components: the embedded model samples (batched), real τ²-bench files from ../shared, the real
simulator for a small run of our own.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from agentuq_nb.records import Simulation
from agentuq_nb.records.action_samples import ACTION_SAMPLE_COLUMNS
from agentuq_nb.records.config import EMBEDDED_MODEL, ActionSamplingConfig
from agentuq_nb.uq.action_sampling import calls_json, decision_points, infer_tools, recorded_tools

SIM_PARAMS = dict(task_ids=["2", "1"], max_steps=6, max_errors=3, agent_max_tokens=32, user_max_tokens=16,
                  progress=False)


def tau2_simulations(path: Path) -> list[Simulation]:
    return [Simulation.model_validate(s) for s in json.loads(path.read_text())["simulations"]]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """Two bookshop simulations of our own, extracted (so that the run has rewards): the first sampled, the second
    added by a resumed run (three simulations before: a third of the fixture's time for the same checks)."""
    from agentuq_nb.sim import run_simulations
    from agentuq_nb.steps.extract import extract

    out = tmp_path_factory.mktemp("sim")
    run_simulations("bookshop", out, **SIM_PARAMS)
    extract(out / "results.json", out)
    return out


# --------------------------------------------------------------------------- decision points and tools

def test_decision_points_are_the_generated_agent_messages(tau2_files):
    sims = tau2_simulations(tau2_files[0])
    for sim in sims[:5]:
        agent = [i for i, m in enumerate(sim.messages) if m.role == "assistant"]
        every = decision_points(sim, ActionSamplingConfig(k=2))
        assert [d.message_idx for d in every] == [i for i in agent if i > 0]  # message 0 is the scripted greeting
        assert [d.decision_idx for d in every] == list(range(len(every)))
        tool = decision_points(sim, ActionSamplingConfig(k=2, turns="tool"))
        assert [d.message_idx for d in tool] == [i for i in agent if i > 0 and sim.messages[i].tool_calls]
        assert all(json.loads(d.taken_tool_calls) for d in tool)
        first = decision_points(sim, ActionSamplingConfig(k=2, turns="first:2"))
        assert first == every[:2]


def test_the_tiny_scaffold_forces_a_call_at_the_first_decision_only(tau2_files):
    sim = tau2_simulations(tau2_files[0])[0]
    points = decision_points(sim, ActionSamplingConfig(k=2), tiny_scaffold=True)
    assert [d.tool_choice for d in points] == ["required"] + [None] * (len(points) - 1)


def test_tools_are_inferred_from_the_recorded_calls_when_the_file_has_none(tau2_files):
    sims = tau2_simulations(tau2_files[0])
    assert recorded_tools(json.loads(tau2_files[0].read_text())["info"]) is None  # τ²-bench wrote tool_defs: null
    tools = {t["function"]["name"]: t["function"] for t in infer_tools(sims)}
    calls = [c for s in sims for m in s.messages for c in (m.tool_calls or [])]
    assert set(tools) == {c.name for c in calls}
    for name, fn in tools.items():
        mine = [c.arguments for c in calls if c.name == name]
        keys = set().union(*mine)
        assert set(fn["parameters"]["properties"]) == keys
        assert set(fn["parameters"]["required"]) == {k for k in keys if all(k in a for a in mine)}


def test_calls_are_stored_as_name_and_arguments():
    text = calls_json([{"id": "c1", "name": "get_order", "arguments": {"order_id": "#W1"}, "requestor": "assistant"}])
    assert json.loads(text) == [{"name": "get_order", "arguments": {"order_id": "#W1"}}]
    assert calls_json(None) == "[]"


def test_bad_settings_are_refused_with_the_option_named(tmp_path):
    from agentuq_nb.steps.sample_actions import sample_actions

    with pytest.raises(ValueError, match="K must be at least 2"):
        sample_actions(tmp_path, k=1)
    with pytest.raises(ValueError, match="turns must be"):
        sample_actions(tmp_path, k=2, turns="last:3")
    with pytest.raises(ValueError, match="temperature"):
        sample_actions(tmp_path, k=2, temperature=0)


def test_the_agents_own_model_must_be_runnable_or_an_observer_named(tmp_path, tau2_files, monkeypatch):
    from agentuq_nb.steps.sample_actions import sample_actions

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ValueError, match="gpt-4.1.*cannot be run here.*; model=local/smollm2"):
        sample_actions(tmp_path / "run", results=tau2_files[0], k=2)
    # the command line says it in its flags
    from agentuq_nb.cli import in_flags

    assert in_flags("cannot be run here (missing OPENAI_API_KEY); model=local/smollm2-135m-instruct samples",
                    {"model": "--model"}) == \
        "cannot be run here (missing OPENAI_API_KEY); --model=local/smollm2-135m-instruct samples"


# --------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_sample_actions_on_our_run_writes_k_rows_per_decision_and_resumes(small_run):
    from agentuq_nb.steps.sample_actions import sample_actions

    report = sample_actions(small_run, k=3, turns="first:2", limit=1, max_tokens=12, progress=False)
    assert (report.sampler_model, report.sampler_kind, report.tools_source) == (EMBEDDED_MODEL, "self", "recorded")
    samples = pd.read_parquet(small_run / "action_samples.parquet")
    assert list(samples.columns) == ACTION_SAMPLE_COLUMNS
    assert samples.groupby(["task_id", "decision_idx"]).size().eq(3).all()
    assert list(samples["task_id"].unique()) == [SIM_PARAMS["task_ids"][0]] and samples["decision_idx"].max() <= 1
    assert report.samples == len(samples) and report.decisions == len(samples) // 3
    assert samples["has_logprobs"].all() and (samples["num_tokens"] == samples["token_logprobs"].map(len)).all()
    assert (samples["sampler_kind"] == "self").all()
    # the taken action is the recorded one
    results = json.loads((small_run / "results.json").read_text())
    by_task = {s["task_id"]: s for s in results["simulations"]}
    for row in samples.itertuples():
        taken = by_task[row.task_id]["messages"][row.message_idx]
        content = row.taken_content if isinstance(row.taken_content, str) else None  # pandas reads a null as NaN
        assert taken["role"] == "assistant" and content == taken["content"]
        assert json.loads(row.taken_tool_calls) == [{"name": c["name"], "arguments": c["arguments"]}
                                                    for c in taken["tool_calls"] or []]
    turns = pd.read_parquet(small_run / "action_turns.parquet")
    assert len(turns) == report.decisions

    # resumed with more trajectories: the finished ones are not sampled again
    done = sorted((small_run / "checkpoints" / "action_samples").glob("*.parquet"))
    stamps = {p: p.stat().st_mtime_ns for p in done}
    again = sample_actions(small_run, k=3, turns="first:2", limit=2, max_tokens=12, progress=False)
    assert (again.skipped, again.sampled) == (1, 1)
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    resumed = pd.read_parquet(small_run / "action_samples.parquet")
    pd.testing.assert_frame_equal(resumed[resumed["task_id"].isin(samples["task_id"].unique())]
                                  .reset_index(drop=True), samples.reset_index(drop=True))
    # other settings are refused, not mixed in
    with pytest.raises(ValueError, match="other settings"):
        sample_actions(small_run, k=4, turns="first:2", limit=2, max_tokens=12, progress=False)


@pytest.mark.slow
def test_samples_are_reproducible_per_decision_point(small_run, tmp_path):
    """The same settings in a fresh folder draw the same samples (seeds depend on the decision point only)."""
    import shutil

    from agentuq_nb.steps.sample_actions import sample_actions

    other = tmp_path / "copy"
    shutil.copytree(small_run, other, ignore=shutil.ignore_patterns("checkpoints", "action_*"))
    sample_actions(other, k=3, turns="first:2", limit=1, max_tokens=12, progress=False)
    first = pd.read_parquet(other / "action_samples.parquet")
    mine = pd.read_parquet(small_run / "action_samples.parquet")
    mine = mine[mine["task_id"] == first["task_id"].iloc[0]].reset_index(drop=True)
    pd.testing.assert_frame_equal(first, mine)


@pytest.mark.slow
def test_observer_on_a_real_tau2_file_counts_the_context_policy(tmp_path, tau2_files):
    """The real file with its domain policy cut to its first 1,500 characters (1,775 tokens to 362): the agent's
    system prompt holds it, and the sampler decodes it before the decision point's context."""
    from agentuq_nb.cli import app

    data = json.loads(tau2_files[0].read_text())
    data["info"]["environment_info"]["policy"] = data["info"]["environment_info"]["policy"][:1500]
    (tmp_path / "airline.json").write_text(json.dumps(data))
    run = tmp_path / "airline"
    result = CliRunner().invoke(app, ["sample-actions", str(run), "--results", str(tmp_path / "airline.json"), "--k", "2",
                                      "--model", EMBEDDED_MODEL, "--turns", "first:1", "--limit", "1",
                                      "--max-tokens", "8"])
    assert result.exit_code == 0, result.output
    report = json.loads((run / "action_sampling.json").read_text())
    assert report["sampler_kind"] == "observer" and report["tools_source"] == "inferred"
    assert "tools_inferred_from_calls" in report["warnings"]
    assert report["decisions"] + report["overflow_decisions"] == 1
    samples = pq.read_table(run / "action_samples.parquet").to_pandas()
    assert len(samples) == 2 * report["decisions"]
    assert (samples["sampler_kind"] == "observer").all()
    assert report["fitted_decisions"] == int((samples.groupby("decision_idx")["context_dropped_messages"].max() > 0).sum())


def test_the_turn_by_turn_view_takes_the_named_task_or_a_failure_with_most_points():
    from agentuq_nb.uq.action_uq import trajectory_decisions

    keys = {"domain": "d", "trial": 0, "seed": 1}
    turns = pd.DataFrame([{**keys, "task_id": t, "decision_idx": i} for t, n in (("a", 3), ("b", 2), ("c", 4))
                          for i in range(n)])
    rewards = pd.DataFrame([{**keys, "task_id": t, "reward": r} for t, r in (("a", 0.0), ("b", 0.0), ("c", 1.0))])
    failed = trajectory_decisions(turns, rewards)
    assert set(failed["task_id"]) == {"a"} and list(failed["decision_idx"]) == [0, 1, 2]
    assert set(trajectory_decisions(turns, rewards, "c")["reward"]) == {1.0}
    with pytest.raises(ValueError, match="task 'z'"):
        trajectory_decisions(turns, rewards, "z")


# --------------------------------------------------------------------------- issue 30: resumed runs stay one run

def _no_decision_results(path: Path, n: int = 3) -> Path:
    """Results whose simulations have no agent decision point (the greeting, then the user): nothing is sampled."""
    sims = [{"id": f"s{i}", "task_id": str(i), "trial": 0, "seed": 1, "termination_reason": "user_stop",
             "reward_info": {"reward": 1.0},
             "messages": [{"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0},
                          {"role": "user", "content": "Bye.", "turn_idx": 1}]} for i in range(n)]
    path.write_text(json.dumps({"timestamp": "t", "tasks": [], "simulations": sims,
                                "info": {"agent_info": {"llm": EMBEDDED_MODEL}, "environment_info": {}}}))
    return path


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"order": {"type": "string"}}}}}]


def test_a_resumed_run_keeps_the_count_of_trajectories_without_decision_points(tmp_path):
    from agentuq_nb.steps.sample_actions import sample_actions

    results = _no_decision_results(tmp_path / "results.json")
    for attempt in range(2):  # the second run resumes every trajectory from its checkpoint
        with pytest.raises(ValueError, match=r"no decision point was sampled \(3 trajectories without"):
            sample_actions(tmp_path / "run", results=results, k=2, progress=False)
    assert len(list((tmp_path / "run" / "checkpoints" / "action_samples").glob("*.parquet"))) == 3


def test_editing_the_tools_file_between_resumed_runs_is_refused(tmp_path):
    """The settings fingerprint the --tools content: the same path with other schemas would mix two tool sets."""
    from agentuq_nb.io.errors import InputError
    from agentuq_nb.steps.sample_actions import sample_actions

    results = _no_decision_results(tmp_path / "results.json")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    with pytest.raises(ValueError, match="no decision point was sampled"):
        sample_actions(tmp_path / "run", results=results, k=2, tools=str(tools), progress=False)
    moved = tmp_path / "elsewhere.json"
    moved.write_text(json.dumps(TOOLS))  # the same schemas from another path: the same run
    with pytest.raises(ValueError, match="no decision point was sampled"):
        sample_actions(tmp_path / "run", results=results, k=2, tools=str(moved), progress=False)
    edited = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "lookup_order"}}]
    tools.write_text(json.dumps(edited))
    with pytest.raises(InputError, match="other settings.*tools_sha256"):
        sample_actions(tmp_path / "run", results=results, k=2, tools=str(tools), progress=False)


@pytest.mark.parametrize("schema, problem", [
    ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, r"parameters\.properties\.a\.enum is empty"),
    ({"type": "object", "properties": {"a": {"type": 5}}}, "not a valid JSON schema"),
    ("not a schema", "not a JSON schema object"),
])
def test_tool_schemas_no_call_could_satisfy_are_refused_before_sampling(tmp_path, schema, problem):
    from agentuq_nb.io.errors import InputError
    from agentuq_nb.steps.sample_actions import sample_actions

    results = _no_decision_results(tmp_path / "results.json")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "f", "parameters": schema}}]))
    with pytest.raises(InputError, match=problem):
        sample_actions(tmp_path / "run", results=results, k=2, tools=str(tools), progress=False)
    assert not list((tmp_path / "run").glob("checkpoints/action_samples/*.parquet"))


def test_an_api_sampler_without_its_key_is_refused_at_once_and_leaves_no_settings(tmp_path, monkeypatch):
    from agentuq_nb.steps.sample_actions import sample_actions

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    results = _no_decision_results(tmp_path / "results.json")
    with pytest.raises(ValueError, match="openai/gpt-4.1.*OPENAI_API_KEY is not set"):
        sample_actions(tmp_path / "run", results=results, k=2, model="openai/gpt-4.1", progress=False)
    assert not (tmp_path / "run" / "checkpoints" / "action_samples" / "sampler.json").exists()
    with pytest.raises(ValueError, match="no decision point was sampled"):  # the next run in the folder is not refused
        sample_actions(tmp_path / "run", results=results, k=2, progress=False)


def test_the_turn_by_turn_view_passes_over_malformed_taken_actions_and_saturation_is_counted():
    from agentuq_nb.uq.action_uq import saturation, trajectory_decisions

    keys = {"domain": "d", "trial": 0, "seed": 1, "k": 4}
    rows = [{**keys, "task_id": "a", "decision_idx": i, "taken_kind": "malformed" if i == 0 else "tool_call",
             "action_agreement": 0.0, "action_clusters": 4} for i in range(3)]
    rows += [{**keys, "task_id": "b", "decision_idx": i, "taken_kind": "tool_call", "action_agreement": 0.25 * i,
              "action_clusters": 4 - i} for i in range(2)]
    turns = pd.DataFrame(rows)
    rewards = pd.DataFrame([{**keys, "task_id": t, "reward": 0.0} for t in ("a", "b")])
    assert set(trajectory_decisions(turns, rewards)["task_id"]) == {"b"}  # "a" has more points, but a malformed one
    sat = saturation(turns)
    assert (sat["points"], sat["all_distinct"], sat["no_agreement"], sat["taken_malformed"]) == (5, 4, 4, 1)
    assert sat["share_all_distinct"] == 0.8 and sat["median_clusters"] == 4.0
