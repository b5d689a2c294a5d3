"""The original τ-bench's results (a JSON list of {task_id, reward, info, traj, trial}): read as simulations,
through extract → trials → compare-estimators, into rescore's scorer, and refused clearly when misshapen.

The fixtures are written here in τ-bench's exact shape (``run.py`` dumps ``EnvRunResult.model_dump()``; the
tool-calling agent's ``traj`` is OpenAI chat messages, the ReAct agent's is text only)."""
from __future__ import annotations

import json
import tempfile
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from agentuq_nb.cli import app
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest.results import detect_layout, iter_simulations, load_results, read_header
from agentuq_nb.records.actions import MALFORMED, action_key, is_malformed

RETAIL_POLICY = ("# Retail agent policy\n\nAs a retail agent, you help users cancel pending orders.\n\n"
                 "- Authenticate the user by email before anything else.\n")
AIRLINE_POLICY = "# Airline Agent Policy\n\nThe current time is 2024-05-15 15:00:00 EST.\n\n- Book, change or cancel flights.\n"
REWARDS = {0: [1, 1, 1, 1], 1: [1, 0, 1, 0], 2: [0, 0, 0, 1]}  # task → reward of trials 0..3
BAD_ARGUMENTS = '{"order_id": "#W1"'  # a cut-off call, as a model writes one
EXPECTED = "expected the original τ-bench's results: a list of {task_id, reward, info, traj, trial}"


def openai_call(call_id: str, name: str, arguments) -> dict:
    """A tool call as litellm's ``message.model_dump()`` writes it (arguments as JSON text)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    return {"function": {"arguments": text, "name": name}, "id": call_id, "type": "function"}


def tool_calling_entry(task: int, trial: int, reward: float) -> dict:
    """One τ-bench entry of the tool-calling agent. Special cases: task 0 trial 0 hits a tool error (and
    retries), task 0 trial 1 reuses one call id (real files do), task 1 trial 1 writes malformed arguments,
    task 2 trial 1 runs out of steps (no reward_info), task 2 trial 3 ends by transfer; failures chat longer."""
    ids = [f"call_{task}{trial}a", f"call_{task}{trial}a" if (task, trial) == (0, 1) else f"call_{task}{trial}b"]
    traj = [
        {"role": "system", "content": RETAIL_POLICY},
        {"role": "user", "content": f"Hi! I'd like to cancel order #W{task}."},
        {"content": "Sure. What is the email address on your account?", "role": "assistant", "tool_calls": None,
         "function_call": None},
        {"role": "user", "content": "It is mia@example.com"},
    ]
    if (task, trial) == (0, 0):
        traj += [{"content": None, "role": "assistant",
                  "tool_calls": [openai_call("call_00x", "find_user_id_by_email", {"email": "mia@exmaple.com"})]},
                 {"role": "tool", "tool_call_id": "call_00x", "name": "find_user_id_by_email",
                  "content": "Error: user not found"}]
    traj += [
        {"content": None, "role": "assistant",
         "tool_calls": [openai_call(ids[0], "find_user_id_by_email", {"email": "mia@example.com"})]},
        {"role": "tool", "tool_call_id": ids[0], "name": "find_user_id_by_email", "content": "mia_li_3668"},
        {"content": None, "role": "assistant",
         "tool_calls": [openai_call(ids[1], "get_order_details",
                                    BAD_ARGUMENTS if (task, trial) == (1, 1) else {"order_id": f"#W{task}"})]},
        {"role": "tool", "tool_call_id": ids[1], "name": "get_order_details",
         "content": json.dumps({"order_id": f"#W{task}", "status": "pending", "items": [{"price": 10.5}]})},
    ]
    if not reward:
        traj += [{"content": "Your order contains one item. Should I cancel it?", "role": "assistant"},
                 {"role": "user", "content": "Hmm, I am not sure. What would the refund be?"}]
    source = "user"
    if (task, trial) == (2, 3):
        source = "transfer_to_human_agents"
        traj += [{"content": None, "role": "assistant",
                  "tool_calls": [openai_call("call_23t", "transfer_to_human_agents", {"summary": "wants a refund"})]},
                 {"role": "tool", "tool_call_id": "call_23t", "name": "transfer_to_human_agents",
                  "content": "Transfer successful"}]
    elif (task, trial) != (2, 1):
        traj += [{"content": "Done: the order is cancelled.", "role": "assistant"},
                 {"role": "user", "content": "Thanks! ###STOP###"}]
    task_info = {"user_id": "mia_li_3668",
                 "actions": [{"name": "cancel_pending_order", "kwargs": {"order_id": f"#W{task}", "reason": "no longer needed"}}],
                 "instruction": f"You are mia_li_3668 and want to cancel order #W{task}.", "outputs": []}
    info = {"task": task_info, "source": source, "user_cost": 0.0015}
    if (task, trial) == (2, 1):  # out of steps: τ-bench never scored the episode
        info["source"] = "get_order_details"
        del info["user_cost"]
    else:
        info["reward_info"] = {"reward": reward, "info": {"r_actions": reward, "gt_data_hash": f"{task:064x}"},
                               "actions": task_info["actions"]}
    return {"task_id": task, "reward": reward, "info": info, "traj": traj, "trial": trial}


def react_entries() -> list[dict]:
    """τ-bench's ReAct agent: actions in the text, results as 'API output: …' user messages; first an
    entry whose run raised (τ-bench writes reward 0, the error and an empty traj)."""
    prompt = (AIRLINE_POLICY + "\n#Available tools\n"
              + json.dumps([{"type": "function", "function": {"name": "get_user_details", "parameters": {}}}])
              + "\n# Instruction\nAnswer with Thought: and Action: lines.\n")
    raised = {"task_id": 7, "reward": 0.0, "info": {"error": "RateLimitError: too many requests",
                                                    "traceback": "Traceback (most recent call last): ..."},
              "traj": [], "trial": 0}
    traj = [
        {"role": "system", "content": prompt, "tool_calls": None, "function_call": None},
        {"role": "user", "content": "I want to change my flight.", "tool_calls": None, "function_call": None},
        {"content": 'Thought:\nI need the user.\nAction:\n{"name": "get_user_details", "arguments": {"user_id": "x"}}',
         "role": "assistant", "tool_calls": None, "function_call": None},
        {"role": "user", "content": "API output: Error: user not found", "tool_calls": None, "function_call": None},
        {"content": 'Thought:\nAsk again.\nAction:\n{"name": "respond", "arguments": {"content": "Your user id?"}}',
         "role": "assistant", "tool_calls": None, "function_call": None},
        {"role": "user", "content": "mia_li_3668", "tool_calls": None, "function_call": None},
        {"content": 'Action:\n{"name": "get_user_details", "arguments": {"user_id": "mia_li_3668"}}',
         "role": "assistant", "tool_calls": None, "function_call": None},
        {"role": "user", "content": 'API output: {"name": "Mia Li"}', "tool_calls": None, "function_call": None},
    ]
    done = {"task_id": 3, "reward": 1.0, "trial": 0, "traj": traj,
            "info": {"task": {"user_id": "mia_li_3668", "actions": [], "instruction": "Change a flight.",
                              "outputs": ["Mia"]},
                     "source": "user", "user_cost": 0.002,
                     "reward_info": {"reward": 1.0, "info": {"r_outputs": 1.0, "outputs": {"Mia": True}}, "actions": []}}}
    return [raised, done]


def write_json(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))  # τ-bench writes indent=2
    return path


@pytest.fixture
def tool_calling_run(tmp_path) -> Path:
    """3 tasks × 4 trials, in τ-bench's order (all tasks of trial 0, then trial 1 …), its file name."""
    entries = [tool_calling_entry(task, trial, float(REWARDS[task][trial])) for trial in range(4) for task in range(3)]
    return write_json(tmp_path / "tool-calling-gpt-4o-0.0_range_0-3_user-gpt-4o-llm_0612073827.json", entries)


def test_a_tool_calling_run_reads_as_simulations(tool_calling_run):
    assert detect_layout(tool_calling_run) == "tau_bench"
    info = read_header(tool_calling_run)["info"]
    assert info["environment_info"] == {"domain_name": "retail", "policy": RETAIL_POLICY}
    assert info["agent_info"] == {"system_prompt": RETAIL_POLICY}
    assert info["domain_inferred_from"] == "system prompt heading"
    warnings = InputWarnings()
    sims = list(iter_simulations(tool_calling_run, warnings))
    raw = json.loads(tool_calling_run.read_text())
    assert [(s.id, s.task_id, s.trial, s.seed) for s in sims] == [
        (f"{e['task_id']}-{e['trial']}", str(e["task_id"]), e["trial"], None) for e in raw]
    assert [s.reward for s in sims] == [e["reward"] for e in raw]
    by_key = {(s.task_id, s.trial): s for s in sims}
    for sim, entry in zip(sims, raw):
        traj = entry["traj"]
        assert sim.system_prompt == RETAIL_POLICY  # kept on each simulation; not a message
        assert [m.role for m in sim.messages] == [m["role"] for m in traj[1:]]
        assert [m.content for m in sim.messages] == [m["content"] for m in traj[1:]]
        assert [m.turn_idx for m in sim.messages] == list(range(len(traj) - 1))
        assert sim.info["task"] == entry["info"]["task"]  # the task (instruction, expected actions) stays
        for m, t in zip(sim.messages, traj[1:]):
            if t.get("tool_calls"):
                (call,), (t_call,) = m.tool_calls, t["tool_calls"]
                assert (call.id, call.name, call.requestor) == (t_call["id"], t_call["function"]["name"], "assistant")
                if t_call["function"]["arguments"] != BAD_ARGUMENTS:
                    assert call.arguments == json.loads(t_call["function"]["arguments"])
            if m.role == "tool":
                assert (m.id, m.requestor, m.model_extra["name"]) == (t["tool_call_id"], "assistant", t["name"])
                assert m.error is t["content"].startswith("Error:")
            else:
                assert m.error is None
    # the tool error, where τ-bench's environment marks it
    errors = [(s.id, m.content) for s in sims for m in s.messages if m.error]
    assert errors == [("0-0", "Error: user not found")]
    # malformed arguments: kept as written, counted once, a malformed action to the action clustering
    (bad,) = [c for s in sims for m in s.messages for c in m.tool_calls or [] if MALFORMED in c.arguments]
    assert bad.arguments == {MALFORMED: BAD_ARGUMENTS} and bad.name == "get_order_details"
    assert is_malformed(action_key([bad]))
    assert warnings.as_dict() == {"tool_call_arguments_not_json": {
        "count": 1, "example": f"{tool_calling_run} item 4 traj[6] tool_calls[0] call get_order_details: "
                               f"{BAD_ARGUMENTS!r}"}}
    # rewards and the environment's reward details
    done = by_key[("1", 0)]
    assert done.reward_info.reward == 1.0 and done.reward_info.reward_basis == ["DB"]
    assert done.reward_info.reward_breakdown == {"r_actions": 1.0}
    assert done.reward_info.model_extra["info"]["gt_data_hash"] == f"{1:064x}"
    assert done.user_cost == 0.0015 and done.termination_reason == "user_stop"
    assert by_key[("2", 3)].termination_reason == "agent_stop"
    out_of_steps = by_key[("2", 1)]
    assert out_of_steps.termination_reason == "max_steps" and out_of_steps.reward == 0.0
    assert out_of_steps.reward_info.reward_basis is None and out_of_steps.user_cost is None
    # load_results holds the same, with the header's domain
    results = load_results(tool_calling_run)
    assert results.domain == "retail" and len(results.simulations) == 12


def test_a_react_run_keeps_its_text_actions_and_marks_failed_results(tmp_path):
    path = write_json(tmp_path / "react-gpt-4o-0.0_range_0-10_user-gpt-4o-llm_0101.json", react_entries())
    assert detect_layout(path) == "tau_bench"
    info = read_header(path)["info"]  # the first entry (a run that raised) has no prompt: the next one's is used
    prompt = react_entries()[1]["traj"][0]["content"]
    assert info["agent_info"]["system_prompt"] == prompt
    assert info["environment_info"] == {"domain_name": "airline", "policy": AIRLINE_POLICY}  # the tool list cut off
    warnings = InputWarnings()
    raised, done = iter_simulations(path, warnings)
    assert (raised.id, raised.messages, raised.reward, raised.termination_reason) == ("7-0", [], 0.0, "error")
    assert raised.info["error"].startswith("RateLimitError") and raised.reward_info.reward_basis is None
    assert warnings.counts == {"tau_bench_runs_raised": 1}
    assert [m.role for m in done.messages] == ["user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert all(m.tool_calls is None for m in done.messages)  # actions stay in the text
    assert done.messages[1].content.endswith('"arguments": {"user_id": "x"}}')
    assert [m.error for m in done.messages] == [None, None, True, None, None, None, None]
    assert done.reward_info.reward_basis == ["COMMUNICATE"] and done.reward_info.reward_breakdown == {"r_outputs": 1.0}
    assert done.messages[0].model_extra["function_call"] is None  # unknown keys are kept


@pytest.mark.parametrize("prompt, name, domain, rule", [
    (AIRLINE_POLICY, "results.json", "airline", "system prompt heading"),
    (RETAIL_POLICY, "gpt-4o-airline.json", "retail", "system prompt heading"),  # the prompt wins over the name
    ("## Telecom agent policy\n\nHelp with phone plans.", "run.json", "telecom", "system prompt heading"),
    ("You are a helpful agent.\n# Notes\n# Retail agent policy", "gpt-4o-airline.json", "airline", "file name"),
    ("You are a helpful agent.", "gpt-4o-retail_0101.json", "retail", "file name"),
    (None, "airline_vs_retail.json", "tau_bench", "default"),  # both names: not guessed
    (None, "airlines.json", "tau_bench", "default"),
])
def test_the_domain_rule(tmp_path, prompt, name, domain, rule):
    traj = ([{"role": "system", "content": prompt}] if prompt else []) + [{"role": "user", "content": "hi"}]
    path = write_json(tmp_path / name, [{"task_id": 0, "reward": 1.0, "info": {}, "traj": traj, "trial": 0}])
    info = read_header(path)["info"]
    assert (info["environment_info"]["domain_name"], info["domain_inferred_from"]) == (domain, rule)
    assert load_results(path).domain == domain


def test_a_trajectory_with_another_system_prompt_keeps_it_and_is_counted(tmp_path):
    entries = [tool_calling_entry(0, 0, 1.0), tool_calling_entry(1, 0, 1.0)]
    entries[1]["traj"][0]["content"] = RETAIL_POLICY + "\nToday is a holiday.\n"
    entries[1]["traj"].insert(3, {"role": "system", "content": "The user is a gold member."})  # a later one stays
    warnings = InputWarnings()
    first, second = iter_simulations(write_json(tmp_path / "r.json", entries), warnings)
    assert second.system_prompt.endswith("Today is a holiday.\n") and first.system_prompt == RETAIL_POLICY
    assert [m.role for m in second.messages][:3] == ["user", "assistant", "system"]
    assert warnings.counts == {"tau_bench_system_prompt_differs": 1}


def expected_pass_hat_k(k: int, n: int = 4) -> float:
    """τ-bench's own display_metrics: mean over tasks of C(c, k) / C(n, k)."""
    return float(np.mean([comb(sum(r), k) / comb(n, k) for r in REWARDS.values()]))


def test_extract_trials_and_compare_estimators_on_a_tau_bench_run(tool_calling_run, tmp_path):
    from agentuq_nb.estimators.scores import score_table, with_length_columns
    from agentuq_nb.evaluation.failure_report import failure_metrics
    from agentuq_nb.evaluation.multi_trial import multi_trial_report, task_labels, tasks_repeat
    from agentuq_nb.io.store.rundir import RunDir

    runner, run = CliRunner(), tmp_path / "run"
    out = runner.invoke(app, ["extract", str(tool_calling_run), "--out", str(run)])
    assert out.exit_code == 0, out.output
    assert "12 simulations, 0 token rows" in out.stdout
    assert "1 tool call(s) whose arguments are not a JSON object" in out.stderr
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["layout"], manifest["domain"], manifest["num_simulations"]) == ("tau_bench", "retail", 12)
    assert manifest["warnings"]["tool_call_arguments_not_json"]["count"] == 1
    trajectories = pd.read_parquet(run / "trajectories.parquet")
    assert set(trajectories["domain"]) == {"retail"} and trajectories["seed"].isna().all()
    raw = json.loads(tool_calling_run.read_text())
    assert trajectories["num_messages"].tolist() == [len(e["traj"]) - 1 for e in raw]  # the system prompt is no message
    messages = pd.read_parquet(run / "messages.parquet")
    assert messages["is_error"].sum() == 1 and set(messages["role"]) == {"user", "assistant", "tool"}

    # several trials per task: the tasks repeat, pass^k is τ-bench's (by hand: c = 4, 2, 1 successes of 4)
    rewards = RunDir.of(run).rewards()
    assert tasks_repeat(rewards) and len(np.unique(task_labels(rewards))) == 3
    report, tasks = multi_trial_report(run, n_boot=200)
    assert tasks["n_successes"].tolist() == [4, 2, 1]
    assert [report["pass_hat_k"][str(k)]["value"] for k in (1, 2, 3, 4)] == pytest.approx(
        [7 / 12, 7 / 18, 1 / 3, 1 / 3])
    assert [report["pass_hat_k"][str(k)]["value"] for k in (1, 2, 3, 4)] == pytest.approx(
        [expected_pass_hat_k(k) for k in (1, 2, 3, 4)])
    out = runner.invoke(app, ["trials", str(run), "--n-boot", "200"])
    assert out.exit_code == 0, out.output
    assert "12 trajectories, 3 tasks, trials per task 4–4; mean task success rate 0.583" in out.stdout
    assert "  2    0.389  [" in out.stdout and "2 of 3 tasks with ≥ 2 trials flip verdict" in out.stdout

    # the length baselines, with intervals that resample tasks (all trials of a task together)
    out = runner.invoke(app, ["compare-estimators", str(run), "--n-boot", "200"])
    assert out.exit_code == 0, out.output
    table = pd.read_csv(run / "estimator_table.csv").set_index("estimator")
    assert {"num_messages", "num_tool_calls", "agent_chars"} <= set(table.index)
    assert {"structure", "tracer"} <= set(table["family"])  # the black-box families read τ-bench's messages too
    assert table.loc["structure.tool_errors", "n"] == 12
    scores, _ = score_table(run)
    scores = with_length_columns(RunDir.of(run), scores)
    u, reward = scores["num_messages"].to_numpy(float), scores["reward"].to_numpy(float)
    clustered = failure_metrics(u, reward, n_boot=200, seed=0, groups=task_labels(scores))
    rowwise = failure_metrics(u, reward, n_boot=200, seed=0)
    row = table.loc["num_messages"]
    assert row["auroc"] == pytest.approx(clustered["metrics"]["auroc"])
    assert [row["auroc_lo"], row["auroc_hi"]] == pytest.approx(clustered["ci"]["auroc"])
    assert clustered["ci"]["auroc"] != pytest.approx(rowwise["ci"]["auroc"])  # it does see the repeated tasks


def test_rescore_renders_a_tau_bench_trajectory_with_the_agents_prompt_once(tool_calling_run):
    """What rescore hands its scorer: the conversation of a simulation under the agent's system prompt (the
    file's), rendered once, the tool calls from their parsed arguments; the observer gets the policy."""
    from agentuq_nb.llm.chat_format import SMOLLM2_CHAT, segments_text
    from agentuq_nb.uq.observation import conversation, scorer_system_prompt

    info = read_header(tool_calling_run)["info"]
    sim = next(iter_simulations(tool_calling_run))
    text = segments_text(SMOLLM2_CHAT.render(conversation(sim), system=scorer_system_prompt("agent_llm", info)))
    assert text.startswith(f"<|im_start|>system\n{RETAIL_POLICY}<|im_end|>\n<|im_start|>user\nHi! I'd like")
    assert text.count("# Retail agent policy") == 1
    assert '{"name": "get_order_details", "arguments": {"order_id": "#W0"}}' in text
    assert "<tool_response>\nError: user not found\n</tool_response>" in text
    assert RETAIL_POLICY in scorer_system_prompt("auxiliary_llm", info)


def test_rescore_cost_of_a_tau_bench_run_does_not_call_the_embedded_model_its_agent(tool_calling_run, tmp_path):
    """issue 49: τ-bench records no agent model; the embedded scorer (and sampler) is then a stand-in, not "the run's
    own agent"."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.rescore import rescore_cost
    from agentuq_nb.steps.sample_actions import sampling_cost

    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["extract", str(tool_calling_run), "--out", str(run)]).exit_code == 0
    assert RunDir.of(run).manifest().models.get("assistant") is None
    cost = rescore_cost(RunDir.of(run))
    assert "own agent" not in cost and "a stand-in: the results record no agent model" in cost
    sampling = sampling_cost(RunDir.of(run))  # the action family's cost line: an observer, not "the agent's own"
    assert "own model" not in sampling and "as an observer: the results record no agent model" in sampling


@pytest.mark.slow
def test_rescore_scores_a_tau_bench_trajectory_with_the_embedded_model(tool_calling_run, tmp_path):
    from agentuq_nb.steps.rescore import rescore

    report = rescore(tool_calling_run, tmp_path / "rescored", limit=1, progress=False)
    assert report.scored == 1 and report.num_tokens > 0
    tokens = pd.read_parquet(tmp_path / "rescored" / "tokens.parquet")
    assert set(tokens["role"]) == {"assistant", "user", "tool"} and set(tokens["task_id"]) == {"0"}
    assert tokens["seed"].isna().all() and set(tokens["domain"]) == {"retail"}
    # --limit again after a longer run: the tables hold the first trajectory only, not the checkpoints left over
    rescore(tool_calling_run, tmp_path / "rescored", limit=2, progress=False)
    assert set(pd.read_parquet(tmp_path / "rescored" / "tokens.parquet")["task_id"]) == {"0", "1"}
    rescore(tool_calling_run, tmp_path / "rescored", limit=1, progress=False)
    assert set(pd.read_parquet(tmp_path / "rescored" / "tokens.parquet")["task_id"]) == {"0"}
    assert len(pd.read_parquet(tmp_path / "rescored" / "trajectories.parquet")) == 1


@pytest.mark.parametrize("content, message", [
    ("[1, 2, 3]", f"a JSON list, but item 0 is a number ({EXPECTED})"),
    ('[{"task_id": 0, "reward": 1.0, "info": {}, "trial": 0}]', f"a JSON list, but item 0 has no 'traj' ({EXPECTED})"),
    ('[{"a": 1}]', "a JSON list, but item 0 has no 'task_id' or 'reward' or 'traj'"),
    ("[]", "an empty JSON list: no results to read"),
    ('[{"task_id": 0, "reward": 1.0, "traj": {"role": "user"}}]',
     f"a JSON list, but item 0's 'traj' is an object, not a list of messages ({EXPECTED})"),
    ('[{"task_id": 0, "reward": 1.0, "traj": [{"role": "robot", "content": "hi"}]}]',
     "τ-bench entry does not convert to a trajectory: Input should be 'system', 'assistant', 'user' or 'tool' at "
     "'traj[0].role' (it is 'robot') (at item 0)"),
    # issue 41: odd trials refused (a trial of -1 or true made the ids "0--1", "0-True")
    ('[{"task_id": 0, "reward": 1.0, "trial": -1, "traj": []}]',
     "τ-bench entry does not convert to a trajectory: Input should be greater than or equal to 0 at 'trial' (it is -1)"),
    ('[{"task_id": 0, "reward": 1.0, "trial": true, "traj": []}]',
     "must be a whole number, not a boolean at 'trial' (it is True) (at item 0)"),
    ('[{"task_id": 0, "reward": 1.0, "trial": 100000000000000000000000000000, "traj": []}]',
     "Input should be less than or equal to 2147483647 at 'trial'"),
    ('[{"task_id": 0, "reward": "one", "traj": []}]', "'reward' is a string, expected a number (at item 0)"),
    ('[{"task_id": 0, "reward": 1.0, "traj": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]}]',
     "a tool call has no function name (at item 0 traj[0] tool_calls[0])"),
    ('[{"task_id": 0, "reward": 1.0, "traj": [', "not valid JSON or truncated"),
    ('"a string"', "top level is neither a JSON object (τ²-bench results) nor a JSON list"),
])
def test_misshapen_lists_give_one_clear_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as err:
        load_results(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    out = CliRunner().invoke(app, ["extract", str(path), "--out", str(tmp_path / "run")])
    assert "\n" not in str(err.value)
    assert out.exit_code == 2 and [line for line in out.stderr.splitlines() if "error" in line] == [f"error: {err.value}"]


def test_a_bad_entry_late_in_the_file_names_its_item_and_extract_publishes_nothing(tool_calling_run, tmp_path):
    entries = json.loads(tool_calling_run.read_text())
    entries[9]["traj"] = "lost"
    path = write_json(tmp_path / "late.json", entries)
    assert detect_layout(path) == "tau_bench"  # the shape is judged on the first entry; the rest while streaming
    out = CliRunner().invoke(app, ["extract", str(path), "--out", str(tmp_path / "run")])
    assert out.exit_code == 2
    assert f"error: {path}: a JSON list, but item 9's 'traj' is a string, not a list of messages" in out.stderr
    assert not (tmp_path / "run" / "trajectories.parquet").exists()


def test_repeated_task_and_trial_are_refused_by_extract(tool_calling_run, tmp_path):
    entries = json.loads(tool_calling_run.read_text())
    path = write_json(tmp_path / "twice.json", entries + [entries[4]])  # the same file's entry twice
    out = CliRunner().invoke(app, ["extract", str(path), "--out", str(tmp_path / "run")])
    assert out.exit_code == 2 and "(task_id, trial, seed) = ('1', 1, None) repeats" in out.stderr


# --------------------------------------------------------------------------- property: random valid entries
TEXT = st.text(max_size=30)
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                           | TEXT, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
                           max_leaves=8)


@st.composite
def turns(draw):
    """A trajectory after the system prompt: text turns of user and assistant, and tool calls with results."""
    out = []
    for i in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "call"]))
        if kind == "call":
            arguments = draw(st.dictionaries(TEXT, JSON_VALUES, max_size=4))
            out.append({"content": draw(st.none() | TEXT), "role": "assistant",
                        "tool_calls": [openai_call(f"call_{i}", draw(st.from_regex(r"[a-z_]{1,12}", fullmatch=True)),
                                                   arguments)]})
            out.append({"role": "tool", "tool_call_id": f"call_{i}", "name": "t", "content": draw(TEXT)})
        else:
            out.append({"role": kind, "content": draw(TEXT)})
    return out


@settings(max_examples=40, deadline=None)
@given(entries=st.lists(st.tuples(turns(), st.sampled_from([0.0, 1.0]), st.booleans()), min_size=1, max_size=4),
       prompt=TEXT, trials=st.integers(1, 3))
def test_random_valid_entries_round_trip(entries, prompt, trials):
    data = [{"task_id": t, "reward": reward, "info": {"task": {"instruction": "x"}},
             "traj": ([{"role": "system", "content": prompt}] if with_prompt else []) + traj, "trial": k}
            for k in range(trials) for t, (traj, reward, with_prompt) in enumerate(entries)]
    with tempfile.TemporaryDirectory() as tmp:
        path = write_json(Path(tmp) / "run.json", data)
        warnings = InputWarnings()
        sims = list(iter_simulations(path, warnings))
    assert not warnings
    assert len(sims) == len(data)
    for sim, entry in zip(sims, data):
        traj = entry["traj"][1:] if entry["traj"] and entry["traj"][0]["role"] == "system" else entry["traj"]
        assert (sim.task_id, sim.trial, sim.reward) == (str(entry["task_id"]), entry["trial"], entry["reward"])
        assert [(m.role, m.content, m.turn_idx) for m in sim.messages] == [
            (m["role"], m["content"], i) for i, m in enumerate(traj)]
        for m, t in zip(sim.messages, traj):
            if t.get("tool_calls"):
                assert [c.arguments for c in m.tool_calls] == [
                    json.loads(c["function"]["arguments"]) for c in t["tool_calls"]]
            if m.role == "tool":
                assert m.id == t["tool_call_id"] and m.error is t["content"].startswith(("Error:", "Unknown action"))
