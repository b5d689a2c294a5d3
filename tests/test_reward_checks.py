"""Why a trajectory got its reward (agentuq_nb.records.reward_checks): τ²-bench's checks and τ-bench's, the task's
instructions, and the expected tool calls beside those made - on hand-made cases and on a real τ²-bench file, whose
harness verdicts the comparison must reproduce."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentuq_nb.records.reward_checks import (
    expected_actions,
    expected_beside_made,
    matches,
    reward_checks,
    reward_notes,
    task_brief,
    text_action,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2"
REAL = [SHARED / "gpt-4.1_airline_1trial.json", SHARED / "ft-gpt-4.1_airline_1trial.json"]


def test_tau2_checks_are_listed_with_their_verdict_and_whether_they_count():
    info = {
        "reward": 0.0, "db_check": {"db_match": False, "db_reward": 0.0},
        "env_assertions": [{"env_assertion": {"env_type": "user", "func_name": "assert_mobile_data_on",
                                              "arguments": {}, "message": "mobile data is on"}, "met": True, "reward": 1.0}],
        "action_checks": [{"action": {"action_id": "7_0", "name": "cancel", "arguments": {"id": "A"}},
                           "action_match": False, "action_reward": 0.0}],
        "communicate_checks": [{"info": "$50", "met": True, "justification": "said"}],
        "nl_assertions": [{"nl_assertion": "Agent apologises.", "met": False, "justification": "it did not"}],
        "reward_basis": ["DB", "COMMUNICATE"], "reward_breakdown": {"DB": 0.0, "COMMUNICATE": 1.0},
    }
    checks = reward_checks(info)
    assert [c["kind"] for c in checks] == ["DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION"]
    assert [c["passed"] for c in checks] == [False, True, False, True, False]
    assert [c["counted"] for c in checks] == [True, False, False, True, False]  # outside the basis: diagnostic
    assert checks[1]["label"] == "mobile data is on" and checks[2]["label"] == 'cancel(id="A")'
    assert checks[4]["detail"] == "it did not"
    # without a basis in the file, the task's is used; without either, whether a check counts is unknown
    assert reward_checks({"db_check": {"db_match": True}}, basis=["DB"])[0]["counted"] is True
    assert reward_checks({"db_check": {"db_match": True}})[0]["counted"] is None
    assert reward_checks(None) == [] and reward_checks({"reward": 1.0}) == []
    # what the harness noted instead of checking (a simulation cut short is not scored)
    assert reward_notes({"reward": 0.0, "info": {"note": "Simulation terminated prematurely. Termination reason: "
                                                         "max_steps"}}) == [
        "Simulation terminated prematurely. Termination reason: max_steps"]
    assert reward_notes({"info": {"env": None, "communicate": {"note": "No communicate_info to evaluate"}}}) == [
        "communicate: No communicate_info to evaluate"]


def test_tau_bench_checks_database_hash_and_outputs():
    db = reward_checks({"reward": 0.0, "info": {"r_actions": 0.0, "gt_data_hash": "ab"}, "reward_basis": ["DB"]})
    assert [(c["kind"], c["passed"], c["counted"]) for c in db] == [("DB", False, True)]
    outputs = reward_checks({"reward": 0.0, "info": {"r_outputs": 1.0, "outputs": {"Mia": True}},
                             "reward_basis": ["COMMUNICATE"]})
    # τ-bench keeps only the outputs' check; a reward below it means the database check failed
    assert [(c["kind"], c["passed"]) for c in outputs] == [("DB", False), ("COMMUNICATE", True)]
    assert "inferred" in outputs[0]["label"] and outputs[1]["label"] == "the agent says 'Mia'"


def test_task_brief_of_tau2_and_tau_bench_tasks():
    tau2 = {"id": "2", "description": {"purpose": "Check the claim."},
            "user_scenario": {"persona": None, "instructions": {"domain": "airline", "reason_for_call": "A delay.",
                                                                 "known_info": "You are Noah.", "unknown_info": None,
                                                                 "task_instructions": "Complain first."}},
            "evaluation_criteria": {"actions": [{"action_id": "2_0", "name": "send_certificate",
                                                 "arguments": {"amount": 50}, "compare_args": ["amount"]}],
                                    "nl_assertions": ["Agent offers $50."], "communicate_info": ["50"],
                                    "env_assertions": [{"env_type": "user", "func_name": "assert_data_on",
                                                        "arguments": {"on": True}, "message": None}],
                                    "reward_basis": ["DB", "COMMUNICATE"]}}
    brief = task_brief(tau2)
    assert brief["purpose"] == "Check the claim."
    assert brief["instructions"] == [("reason_for_call", "A delay."), ("known_info", "You are Noah."),
                                     ("task_instructions", "Complain first.")]
    assert brief["actions"] == [{"id": "2_0", "name": "send_certificate", "arguments": {"amount": 50},
                                 "requestor": "assistant", "compare_args": ["amount"]}]
    assert brief["nl_assertions"] == ["Agent offers $50."] and brief["reward_basis"] == ["DB", "COMMUNICATE"]
    assert brief["env_assertions"] == ["assert_data_on(on=true)"]
    tau = {"user_id": "mia_li_3668", "instruction": "Cancel #W1.", "outputs": ["10.5"],
           "actions": [{"name": "cancel_pending_order", "kwargs": {"order_id": "#W1"}},
                       {"name": "respond", "kwargs": {"content": "done"}}]}
    brief = task_brief(tau)
    assert brief["instructions"] == [("user_id", "mia_li_3668"), ("instructions", "Cancel #W1.")]
    assert [a["name"] for a in brief["actions"]] == ["cancel_pending_order"]  # 'respond' is a message, not a call
    assert brief["communicate_info"] == ["10.5"] and task_brief(None) is None


def test_expected_calls_beside_those_made():
    expected = expected_actions({"actions": [{"name": "cancel", "kwargs": {"id": "A", "reason": "x"}},
                                             {"name": "refund", "kwargs": {"id": "A"}}, {"name": "lookup", "kwargs": {}}]})
    made = [{"message_idx": 3, "name": "cancel", "arguments": {"id": "B", "reason": "x"}},
            {"message_idx": 5, "name": "cancel", "arguments": {"id": "A", "reason": "y"}},
            {"message_idx": 7, "name": "lookup", "arguments": {"q": 1}}]
    rows = expected_beside_made(expected, made)
    assert [r["matched"] for r in rows] == [False, False, False]
    assert all(r["verdict_by"] == "name and arguments" for r in rows)
    assert rows[0]["call"]["message_idx"] == 3 and rows[0]["differs"] == ["id"]  # the first of the closest
    assert rows[1]["call"] is None and rows[1]["differs"] == []
    assert rows[2]["differs"] == ["q"]  # τ²'s rule compares the call's own arguments when none are named
    # compare_args restricts the comparison; the harness's verdict, where recorded, is the one shown
    assert matches({"name": "cancel", "arguments": {"id": "A", "reason": "z"}, "compare_args": ["id"]}, made[1])
    checks = [{"action": {"action_id": "1", "name": "refund"}, "action_match": True}]
    rows = expected_beside_made(expected, made, checks)
    assert (rows[1]["matched"], rows[1]["verdict_by"]) == (True, "harness")
    assert (rows[0]["matched"], rows[0]["verdict_by"]) == (False, "name and arguments")


def test_a_react_agents_text_action_is_a_call():
    assert text_action('Thought:\nfind her\nAction:\n{"name": "get_user", "arguments": {"id": 1}}') == \
        {"name": "get_user", "arguments": {"id": 1}}
    assert text_action('Action: {"name": "respond", "arguments": {"content": "hi"}}') is None
    assert text_action("Action: not json") is None and text_action("no action") is None and text_action(None) is None


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_the_comparison_reproduces_the_harness_on_a_real_tau2_file(path):
    """On a real τ²-bench file, τ²'s rule applied here to the calls made gives the harness's own verdict for every
    expected action of every simulation, and the checks counted in the reward pass exactly when the reward is 1."""
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real runs sit beside the checkout)")
    results = json.loads(path.read_text())
    tasks = {t["id"]: t for t in results["tasks"]}
    compared = 0
    for sim in results["simulations"]:
        made = [{"message_idx": i, "name": c["name"], "arguments": c["arguments"]}
                for i, m in enumerate(sim["messages"]) for c in (m.get("tool_calls") or [])]
        expected = expected_actions(tasks[sim["task_id"]])
        harness = [c["action_match"] for c in sim["reward_info"]["action_checks"] or []]
        ours = [r["matched"] for r in expected_beside_made(expected, made)]
        assert ours == harness, sim["task_id"]
        compared += len(ours)
        checks = reward_checks(sim["reward_info"])
        counted = [c for c in checks if c["counted"]]
        assert all(c["passed"] for c in counted) == (sim["reward_info"]["reward"] == 1.0)
    assert compared > 20
