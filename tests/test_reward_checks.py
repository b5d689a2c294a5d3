"""Why a trajectory got its reward (agentuq_nb.records.reward_checks): τ²-bench's checks and τ-bench's, the task's
instructions, and the expected tool calls beside those made - on hand-made cases and on a real τ²-bench file, whose
harness verdicts the comparison must reproduce."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentuq_nb.records.reward_checks import (
    TaskIntegrity,
    expected_actions,
    expected_beside_made,
    first_divergence,
    harness_actions,
    matches,
    reward_checks,
    reward_notes,
    reward_verdict,
    task_brief,
    task_matches_checks,
    tasks_by_id,
    text_action,
    unrequested_writes,
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


# --------------------------------------------------------------------------- pointing at the cause
RETAIL = SHARED.parent / "real_runs" / "ft-gpt-4.1_retail_1trial.json"
RETAIL_WRITES = ("exchange", "return", "modify", "cancel")  # retail's write tools (τ²-bench's WRITE tags) by verb


def made_calls(sim: dict) -> list[dict]:
    """A τ²-bench simulation's calls as the explorer lists them, each with whether its result was an error."""
    errored = {m["id"]: bool(m.get("error")) for m in sim["messages"] if m["role"] == "tool"}
    return [{"message_idx": i, "name": c["name"], "arguments": c["arguments"], "errored": errored.get(c["id"])}
            for i, m in enumerate(sim["messages"]) for c in (m.get("tool_calls") or [])]


def test_the_counted_call_the_unrequested_write_and_the_divergence_of_real_retail_failures():
    """Three failed retail trajectories, checked by hand against their JSON (ft-gpt-4.1, reward 0, database 0):

    * task 27: the agent returned two items of #W7181492 (message 20: return_delivered_order_items, which no
      expected action asks for) and the expected exchange then errored ("Non-delivered order cannot be exchanged",
      message 22) - the harness still credits it (same name and arguments). The return is the unrequested write and
      the first divergence; the exchange's counted call is the errored one, said so.
    * task 64: the exchange (message 24) errored with new_item_ids 6117189161 instead of 6700049080; the agent then
      modified the pending order (message 28, succeeded) with the same wrong item: both expected writes pair with
      those calls, the diff names new_item_ids only; the divergence is message 24.
    * task 71: modify_pending_order_items on #W5782623 instead of #W5270061 (message 24: order_id differs), then an
      unrequested modify_pending_order_payment that errored (26); the expected address change was never made."""
    if not RETAIL.exists():
        pytest.skip(f"{RETAIL} is absent (the shared real runs sit beside the checkout)")
    sims = {s["task_id"]: s for s in json.loads(RETAIL.read_text())["simulations"]}
    is_write = lambda name: name.split("_")[0] in RETAIL_WRITES  # noqa: E731

    def forensics(task_id):
        sim = sims[task_id]
        made = made_calls(sim)
        rows = expected_beside_made(harness_actions(sim["reward_info"]), made, sim["reward_info"]["action_checks"])
        unrequested = unrequested_writes(rows, made, is_write)
        return sim, made, {r["name"]: r for r in rows}, unrequested, first_divergence(rows, made, unrequested,
                                                                                      len(sim["messages"]) - 1)

    sim, made, rows, unrequested, divergence = forensics("27")
    assert [(made[j]["message_idx"], made[j]["name"]) for j in unrequested] == [(20, "return_delivered_order_items")]
    exchange = rows["exchange_delivered_order_items"]
    assert exchange["matched"] is True and exchange["call"]["message_idx"] == 22 and exchange["call"]["errored"]
    assert divergence == {"message_idx": 20, "call_index": unrequested[0],
                          "what": "return_delivered_order_items: a write no expected action asked for"}
    assert reward_verdict(sim["reward_info"])["decided_by"] == ["DB"]

    sim, made, rows, unrequested, divergence = forensics("64")
    exchange, modify = rows["exchange_delivered_order_items"], rows["modify_pending_order_items"]
    assert (exchange["matched"], exchange["call"]["message_idx"], exchange["call"]["errored"]) == (False, 24, True)
    assert (modify["matched"], modify["call"]["message_idx"], modify["call"]["errored"]) == (False, 28, False)
    assert modify["diff"] == [["new_item_ids", '["6700049080"]', '["6117189161"]']] == exchange["diff"]
    assert unrequested == [] and divergence["message_idx"] == 24 and "new_item_ids" in divergence["what"]

    sim, made, rows, unrequested, divergence = forensics("71")
    assert rows["modify_pending_order_items"]["diff"] == [["order_id", '"#W5270061"', '"#W5782623"']]
    assert rows["modify_pending_order_address"]["call"] is None
    assert [(made[j]["message_idx"], made[j]["errored"]) for j in unrequested] == [(26, True)]
    assert divergence["message_idx"] == 24


def test_the_counted_call_is_one_that_did_not_error_and_a_credited_call_is_not_another_actions_closest():
    expected = [{"id": "0", "name": "cancel", "arguments": {"id": "A"}, "compare_args": None},
                {"id": "1", "name": "cancel", "arguments": {"id": "B"}, "compare_args": None}]
    made = [{"message_idx": 2, "name": "cancel", "arguments": {"id": "A"}, "errored": True},
            {"message_idx": 4, "name": "cancel", "arguments": {"id": "A"}, "errored": False},
            {"message_idx": 6, "name": "cancel", "arguments": {"id": "C"}, "errored": True}]
    rows = expected_beside_made(expected, made)
    assert rows[0]["call_index"] == 1 and rows[0]["diff"] == []  # the successful retry counted, not the attempt
    # B was never made: its closest call is the one no other expected action counted, errored or not
    assert rows[1]["call_index"] == 2 and not rows[1]["credited_elsewhere"]
    assert rows[1]["diff"] == [["id", '"B"', '"C"']]
    assert unrequested_writes(rows, made, lambda n: True) == []  # a repeat of a requested call: not unrequested
    assert first_divergence(rows, made, [], 6)["message_idx"] == 6


def test_which_check_decided_the_reward_or_that_none_was_computed():
    tau2 = {"reward": 0.0, "db_check": {"db_match": False}, "reward_basis": ["DB", "COMMUNICATE"],
            "reward_breakdown": {"DB": 0.0, "COMMUNICATE": 1.0}}
    assert reward_verdict(tau2) == {"decided_by": ["DB"], "computed": True,
                                    "text": "decided by the database check (database 0); communicate passed"}
    assert reward_verdict({**tau2, "reward": 1.0, "reward_breakdown": {"DB": 1.0, "COMMUNICATE": 1.0}})["text"] == (
        "every check in the reward passed (database, communicate): reward 1")
    none = reward_verdict(None)
    assert not none["computed"] and "reward_info is null" in none["text"]
    cut = reward_verdict({"reward": 0.0, "reward_basis": ["DB"], "reward_breakdown": None,
                          "info": {"note": "Simulation terminated prematurely. Termination reason: max_steps"}})
    assert not cut["computed"] and cut["text"].endswith("terminated prematurely. Termination reason: max_steps")
    # no breakdown written: the counted checks that failed decide it
    assert reward_verdict({"reward": 0.0, "db_check": {"db_match": False}, "nl_assertions": [
        {"nl_assertion": "x", "met": False}]}, basis=["DB"])["decided_by"] == ["DB"]
    # τ-bench: the outputs check replaces the database verdict in what it records
    outputs = reward_verdict({"reward": 0.0, "info": {"r_outputs": 1.0, "outputs": {"10": True}},
                              "reward_basis": ["COMMUNICATE"]})
    assert outputs["decided_by"] == ["DB"] and outputs["text"].startswith("τ-bench's outputs check replaced")
    assert reward_verdict({"reward": 0.0, "info": {"r_actions": 0.0}})["text"].startswith(
        "decided by τ-bench's database check")


# --------------------------------------------------------------------------- the task against the harness's checks
SHARED_RUNS = sorted(SHARED.glob("*.json")) + sorted((SHARED.parent / "real_runs").glob("*.json"))


@pytest.mark.parametrize("path", SHARED_RUNS, ids=lambda p: p.stem)
def test_every_shared_runs_tasks_are_the_ones_its_harness_checked(path):
    """The ten shared runs carry their own tasks: no mismatch; compared are the simulations whose harness recorded
    the actions it checked (action checks, or its note that the task has none; nothing for a simulation cut
    short)."""
    data = json.loads(path.read_text())
    sims = data if isinstance(data, list) else data["simulations"]
    integrity = TaskIntegrity(tasks_by_id(None if isinstance(data, list) else data))
    for sim in sims:
        integrity.add(sim["id"], sim["task_id"], sim, sim.get("reward_info"))
    recorded = sum(harness_actions(s.get("reward_info")) is not None for s in sims)
    assert integrity.mismatched == 0 and integrity.message() is None
    # a bare list of simulations has no tasks: nothing to compare, its expected actions are the harness's own
    assert integrity.checked == (0 if isinstance(data, list) else recorded) and recorded > 0


def test_a_tasks_list_of_other_customers_is_caught_with_its_count():
    """A real airline run (20 simulations) whose `tasks` list is rotated by one (each task id given the next task of
    the same domain: another customer's instructions and actions), as a leaderboard file's shipped list can be."""
    path = SHARED / "gpt-4.1_airline_1trial.json"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared real runs sit beside the checkout)")
    data = json.loads(path.read_text())
    ids = [t["id"] for t in data["tasks"]]
    rotated = [{**t, "id": ids[(i + 1) % len(ids)]} for i, t in enumerate(data["tasks"])]
    integrity = TaskIntegrity(tasks_by_id({"tasks": rotated}))
    for sim in data["simulations"]:
        agrees = integrity.add(sim["id"], sim["task_id"], sim, sim["reward_info"])
        checked = harness_actions(sim["reward_info"])
        assert checked is not None and agrees is False
        # the expected actions shown are those the harness checked (none, where it noted the task has none)
        assert [a["name"] for a in checked] == [c["action"]["name"] for c in sim["reward_info"]["action_checks"] or []]
    assert (integrity.mismatched, integrity.checked) == (20, 20)
    own = tasks_by_id(data)  # the file's own list agrees; nothing to compare without a task or checks
    assert all(task_matches_checks(own[s["task_id"]], s["reward_info"]) for s in data["simulations"])
    assert task_matches_checks(None, data["simulations"][0]["reward_info"]) is None
    assert task_matches_checks(own[data["simulations"][0]["task_id"]], None) is None
    assert integrity.message() == ("20 of 20 trajectories: the file's task does not match the harness's checks; "
                                   "expected actions taken from the harness's checks")
