"""The built-in domain, its toolkit and τ²-bench's reward (no LLM)."""
from __future__ import annotations

import json

import pytest

from agentuq_nb.records import Results
from agentuq_nb.sim import UnknownDomainError, UnknownTaskError, list_domains, load_domain
from agentuq_nb.sim.domain import ToolError, db_hash, function_schema
from agentuq_nb.sim.evaluator import action_matches, evaluate_simulation
from agentuq_nb.sim.runner import safe_llm_args, trial_seeds


@pytest.fixture(scope="module")
def shop():
    return load_domain("bookshop")


def gold_messages(task, say: str | None = None) -> list[dict]:
    calls = [
        {"id": f"c{i}", "name": a["name"], "arguments": a["arguments"], "requestor": "assistant"}
        for i, a in enumerate(task["evaluation_criteria"]["actions"])
    ]
    msgs = [{"role": "assistant", "content": "Hi! How can I help you today?"}]
    if calls:
        msgs.append({"role": "assistant", "content": None, "tool_calls": calls})
    text = say if say is not None else " / ".join(task["evaluation_criteria"]["communicate_info"] or ["Done."])
    msgs.append({"role": "assistant", "content": text})
    return msgs


def test_domain_is_listed_and_loads(shop):
    assert "bookshop" in list_domains()
    assert len(shop.tasks) >= 20
    assert len(set(shop.task_ids)) == len(shop.task_ids)
    levels = {t["description"]["difficulty"] for t in shop.tasks}
    assert levels == {"lookup", "one_write", "multi_write", "refuse", "transfer"}
    # every task is in τ²'s task shape
    for t in shop.tasks:
        assert set(t) >= {"id", "description", "user_scenario", "evaluation_criteria"}
        assert set(t["evaluation_criteria"]["reward_basis"]) <= {"DB", "ACTION", "COMMUNICATE"}


def test_unknown_domain_and_task_list_valid_names(shop):
    with pytest.raises(UnknownDomainError, match="bookshop"):
        load_domain("airlines")
    with pytest.raises(UnknownTaskError, match="Valid task ids: 0, 1, 2"):
        shop.get_task("999")
    with pytest.raises(UnknownTaskError, match="'nope'"):
        shop.select_tasks(["0", "nope"])
    assert [t["id"] for t in shop.select_tasks(num_tasks=3)] == ["0", "1", "2"]
    assert [t["id"] for t in shop.select_tasks(["5", "1", "5"])] == ["5", "1"]


def test_tool_schemas_come_from_signatures_and_docstrings(shop):
    schemas = {s["function"]["name"]: s["function"] for s in shop.tool_schemas()}
    assert list(schemas) == ["get_customer", "get_order", "find_book", "cancel_order", "update_address",
                             "return_order", "transfer_to_human_agents"]
    upd = schemas["update_address"]
    assert upd["description"] == "Change the delivery address of a pending order."
    assert upd["parameters"]["required"] == ["order_id", "address"]
    assert upd["parameters"]["properties"]["address"] == {"type": "string", "description": "The new address."}
    assert shop.tool_types()["cancel_order"] == "write"
    assert shop.tool_types()["get_order"] == "read"

    def f(self, n: int, xs: list[str], flag: bool = False) -> None:
        """Do a thing.

        Args:
            n: how many
              (continued).
            xs: names
        """

    fn = function_schema(f)["function"]
    assert fn["parameters"]["properties"]["n"] == {"type": "integer", "description": "how many (continued)."}
    assert fn["parameters"]["properties"]["xs"]["type"] == "array"
    assert fn["parameters"]["required"] == ["n", "xs"]


def test_toolkit_reads_writes_and_errors(shop):
    kit = shop.make_toolkit()
    before = kit.db_hash()
    assert kit.call("get_order", {"order_id": "O1003"})["status"] == "shipped"
    assert kit.call("find_book", {"title": "salt"})[0]["price"] == 18
    assert kit.db_hash() == before  # reads change nothing
    with pytest.raises(ToolError, match="only pending orders can be cancelled"):
        kit.call("cancel_order", {"order_id": "O1003"})
    with pytest.raises(ToolError, match="not found"):
        kit.call("get_order", {"order_id": "O9999"})
    with pytest.raises(ToolError, match="Tool 'delete_everything' not found"):
        kit.call("delete_everything", {})
    with pytest.raises(ToolError, match="Bad arguments"):
        kit.call("get_order", {"id": "O1001"})
    with pytest.raises(ToolError, match="JSON object"):
        kit.call("get_order", "O1001")
    assert kit.db_hash() == before  # refused writes change nothing
    stock = kit.db["books"]["B09"]["stock"]
    kit.call("cancel_order", {"order_id": "O1007"})
    assert kit.db["orders"]["O1007"]["status"] == "cancelled"
    assert kit.db["books"]["B09"]["stock"] == stock + 1
    credit = kit.db["customers"]["C107"]["store_credit"]
    kit.call("return_order", {"order_id": "O1015"})
    assert kit.db["customers"]["C107"]["store_credit"] == credit + 19
    assert kit.db_hash() != before
    assert shop.make_toolkit().db_hash() == before  # a fresh toolkit gets a fresh DB
    assert db_hash({"a": 1, "b": [1, 2]}) == db_hash({"b": [1, 2], "a": 1})


def test_gold_actions_replayed_get_reward_1_on_every_task(shop):
    for task in shop.tasks:
        info = evaluate_simulation(shop, task, gold_messages(task), "user_stop")
        assert info["reward"] == 1.0, (task["id"], info)
        assert info["db_check"] == {"db_match": True, "db_reward": 1.0}
        assert info["reward_basis"] == task["evaluation_criteria"]["reward_basis"]
        assert set(info["reward_breakdown"]) == set(task["evaluation_criteria"]["reward_basis"])
        assert all(c["action_match"] for c in info["action_checks"])


def test_reward_info_has_tau2_field_names_and_loads(shop):
    task = shop.get_task("1")
    info = evaluate_simulation(shop, task, gold_messages(task), "user_stop")
    assert list(info) == ["reward", "db_check", "env_assertions", "action_checks", "nl_assertions",
                          "communicate_checks", "reward_basis", "reward_breakdown", "info"]
    assert set(info["info"]) == {"env", "nl", "communicate", "action"}
    check = info["action_checks"][-1]
    assert set(check) == {"action", "action_match", "action_reward", "tool_type"}
    Results.model_validate({"simulations": [{"id": "x", "task_id": "1", "reward_info": info}]})
    json.dumps(info, allow_nan=False)


def test_wrong_write_is_a_db_mismatch(shop):
    task = shop.get_task("1")  # cancel O1007
    assert task["evaluation_criteria"]["actions"][-1]["name"] == "cancel_order"
    wrong = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "name": "cancel_order", "arguments": {"order_id": "O1006"}, "requestor": "assistant"}]}]
    info = evaluate_simulation(shop, task, wrong, "user_stop")
    assert info["reward"] == 0.0
    assert info["db_check"] == {"db_match": False, "db_reward": 0.0}
    # no write at all is a mismatch too; a refused (erroring) write is no write
    assert evaluate_simulation(shop, task, [], "agent_stop")["db_check"]["db_match"] is False
    refuse = shop.get_task("2")  # must not cancel a shipped order
    tried = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "name": "cancel_order", "arguments": {"order_id": "O1003"}, "requestor": "assistant"}]}]
    assert evaluate_simulation(shop, refuse, tried, "user_stop")["reward"] == 1.0
    # an extra write on a refusal task fails it
    extra = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "name": "cancel_order", "arguments": {"order_id": "O1001"}, "requestor": "assistant"}]}]
    assert evaluate_simulation(shop, refuse, extra, "user_stop")["reward"] == 0.0


def test_communicate_check_is_a_case_insensitive_substring_without_commas(shop):
    task = shop.get_task("0")  # status of O1003 -> "shipped"
    assert task["evaluation_criteria"]["communicate_info"] == ["shipped"]
    ok = evaluate_simulation(shop, task, [{"role": "assistant", "content": "Your order has SHIPPED."}], "user_stop")
    assert ok["reward"] == 1.0 and ok["communicate_checks"][0]["met"] is True
    said_by_user = [{"role": "user", "content": "has it shipped?"}, {"role": "assistant", "content": "Let me see."}]
    bad = evaluate_simulation(shop, task, said_by_user, "user_stop")
    assert bad["reward"] == 0.0 and bad["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": 0.0}
    assert bad["communicate_checks"][0]["justification"] == "Information 'shipped' not communicated."
    address = shop.get_task("23")
    assert address["evaluation_criteria"]["communicate_info"] == ["4 Birch Road"]
    msg = [{"role": "assistant", "content": "It goes to 4 Birch Road, Bergen."}]
    assert evaluate_simulation(shop, address, msg, "user_stop")["reward"] == 1.0


def test_transfer_task_needs_the_transfer_action(shop):
    task = shop.get_task("3")
    assert task["evaluation_criteria"]["reward_basis"] == ["DB", "ACTION"]
    nothing = evaluate_simulation(shop, task, [{"role": "assistant", "content": "Sorry."}], "user_stop")
    assert nothing["reward"] == 0.0 and nothing["reward_breakdown"]["ACTION"] == 0.0
    call = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "name": "get_customer", "arguments": {"customer_id": "C104"}},
        {"id": "d", "name": "transfer_to_human_agents", "arguments": {"summary": "anything at all"}}]}]
    assert evaluate_simulation(shop, task, call, "user_stop")["reward"] == 1.0


def test_premature_termination_scores_zero_like_tau2(shop):
    task = shop.get_task("2")
    for reason in ("max_steps", "too_many_errors"):
        info = evaluate_simulation(shop, task, [], reason)
        assert info["reward"] == 0.0 and info["reward_basis"] is None
        assert info["info"] == {"note": f"Simulation terminated prematurely. Termination reason: {reason}"}


def test_action_matching_follows_compare_args():
    gold = {"name": "update_address", "arguments": {"order_id": "O1", "address": "A"}, "compare_args": None}
    assert action_matches(gold, {"name": "update_address", "arguments": {"order_id": "O1", "address": "A"}})
    assert not action_matches(gold, {"name": "update_address", "arguments": {"order_id": "O1", "address": "B"}})
    assert not action_matches(gold, {"name": "get_order", "arguments": {"order_id": "O1"}})
    only_id = dict(gold, compare_args=["order_id"])
    assert action_matches(only_id, {"name": "update_address", "arguments": {"order_id": "O1", "address": "B"}})
    name_only = dict(gold, compare_args=[])
    assert action_matches(name_only, {"name": "update_address", "arguments": "garbage"})


def test_trial_seeds_follow_tau2():
    # τ²-bench's published airline run: seed 300 -> trial 0 seed 626729
    assert trial_seeds(300, 3) == [626729, 373753, 361454]
    assert trial_seeds(300, 1) == [626729]


def test_secret_llm_args_are_never_recorded(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-123456")
    args = {"api_key": "x", "api_base": "https://user:pw@example.com/v1", "extra_headers": {"A": "b"},
            "timeout": 30, "foo": "sk-test-not-a-real-key-123456"}
    assert safe_llm_args(args) == {"api_base": "https://***@example.com/v1", "timeout": 30}
