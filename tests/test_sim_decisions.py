"""The simulator's side of acting on uncertainty (sim.decisions): each verdict routes the conversation as
documented and is accounted for in the simulation, which τ²-bench's own reader still loads.

Scripted participants and scripted policies give exact messages; the real policies and signals are
tested in test_intervention_policies.py.
"""
from __future__ import annotations

import dataclasses

import pytest
from tests.test_sim_orchestrator import Scripted, gen

from agentuq_nb.records import Results
from agentuq_nb.sim import load_domain
from agentuq_nb.sim.agent import LLMAgent
from agentuq_nb.sim.decisions import TRANSFER_MESSAGE, DecisionPolicy, Verdict
from agentuq_nb.sim.orchestrator import Orchestrator

CANCEL = [{"id": "c", "name": "cancel_order", "arguments": {"order_id": "O1007"}}]
LOOKUP = [{"id": "l", "name": "get_order", "arguments": {"order_id": "O1007"}}]


@dataclasses.dataclass
class ScriptedAgent(LLMAgent):
    """An LLMAgent (prompts, tools) whose generations are scripted."""

    replies: list = dataclasses.field(default_factory=list)

    def generate(self, trajectory, seed, retry=None, first_turn=False):
        return self.replies.pop(0)


class ScriptedPolicy:
    """Gives the verdicts it is handed, one per decision point, and keeps the points it saw."""

    escalation_cost = 2.5

    def __init__(self, *verdicts):
        self.verdicts, self.points = list(verdicts), []

    def decide(self, point):
        self.points.append(point)
        return self.verdicts.pop(0) if self.verdicts else Verdict(signal=0.0)

    def describe(self):
        return {"policy": "scripted"}


@pytest.fixture(scope="module")
def shop():
    return load_domain("bookshop")


def run(shop, task_id, agent_replies, user_replies, policy):
    agent = ScriptedAgent(llm="agent-llm", policy=shop.policy, tools=shop.tool_schemas(), replies=list(agent_replies))
    user = Scripted("user-llm", user_replies)
    orch = Orchestrator(shop, shop.get_task(task_id), agent, user, trial=0, seed=7, max_steps=20, max_errors=3,
                        sidecar_path="sidecars/x.jsonl", policy=policy)
    return orch.run()


def test_a_scripted_policy_satisfies_the_protocol():
    assert isinstance(ScriptedPolicy(), DecisionPolicy)


def test_proceed_changes_nothing_but_adds_the_accounting(shop):
    script = lambda: ([gen(calls=CANCEL), gen("Cancelled.")], [gen("Cancel O1007."), gen("Thanks ###STOP###")])  # noqa: E731
    plain = Orchestrator(shop, shop.get_task("1"), ScriptedAgent(llm="agent-llm", policy=shop.policy,
                         tools=shop.tool_schemas(), replies=script()[0]), Scripted("user-llm", script()[1]),
                         trial=0, seed=7, max_steps=20, max_errors=3, sidecar_path="sidecars/x.jsonl").run()
    policy = ScriptedPolicy(Verdict(signal=0.3), Verdict(signal=float("nan")))
    acted = run(shop, "1", *script(), policy)
    strip = lambda sim: [{k: v for k, v in m.items() if k != "timestamp"} for m in sim["messages"]]  # noqa: E731
    assert strip(acted.simulation) == strip(plain.simulation)
    assert acted.simulation["reward_info"] == plain.simulation["reward_info"]
    block = acted.simulation["intervention"]
    assert [d["signal"] for d in block["decisions"]] == [0.3, None]  # NaN is recorded as undefined
    assert [d["message_idx"] for d in block["decisions"]] == [2, 4] and block["num_interventions"] == 0
    assert block["escalated"] is False and block["env_reward"] == 1.0
    assert block["agent_tokens"] == sum(len(r) for r in ("x",)) + len("Cancelled.")  # a tool call scripts one token
    # what the policy saw: the proposal, its rows among the trajectory's, the agent's LLM input, the write tools
    first = policy.points[0]
    assert first.proposal["tool_calls"][0]["name"] == "cancel_order" and first.proposes_write
    assert first.messages[0]["role"] == "system" and first.messages[-1]["content"] == "Cancel O1007."
    assert {r["message_idx"] for r in first.rows} == {1, 2} and first.proposal_rows == [
        r for r in first.rows if r["message_idx"] == 2]
    assert first.write_tools == {"cancel_order", "update_address", "return_order"}
    assert first.decision_idx == 0 and policy.points[1].decision_idx == 1


def test_defer_hands_the_task_over_and_counts_it_unsolved(shop):
    result = run(shop, "1", [gen(calls=CANCEL)], [gen("Cancel O1007.")], ScriptedPolicy(Verdict("defer", 2.0, True)))
    sim = result.simulation
    assert sim["messages"][-1]["content"] == TRANSFER_MESSAGE and sim["messages"][-1]["raw_data"] is None
    assert sim["termination_reason"] == "agent_stop"
    assert sim["reward_info"]["reward"] == 0.0 and "escalated" in sim["reward_info"]["info"]["note"]
    block = sim["intervention"]
    assert block["escalated"] and block["escalation_cost"] == 2.5 and block["flagged_turns"] == [2]
    assert block["env_reward"] == 0.0  # the order was never cancelled
    assert {r["message_idx"] for r in result.token_rows} == {1}  # the discarded proposal left no rows
    Results.model_validate({"simulations": [sim]})


def test_defer_keeps_the_environments_verdict_beside_the_zero(shop):
    # task 2 is a refusal (nothing to write): the environment would pass the hand-off; the accounting does not
    sim = run(shop, "2", [gen("Let me look.")], [gen("Cancel O1003.")],
              ScriptedPolicy(Verdict("defer", 1.0, True))).simulation
    assert sim["intervention"]["env_reward"] == 1.0 and sim["reward_info"]["reward"] == 0.0


def test_replace_executes_the_replacement_and_records_its_rows(shop):
    replacement = gen("Which order do you mean?")
    policy = ScriptedPolicy(Verdict("replace", 1.5, True, replacement=replacement, extra_tokens=40, extra_cost=0.01))
    result = run(shop, "1", [gen(calls=CANCEL), gen("ok ###STOP###")], [gen("Cancel O1007."), gen("O1007")], policy)
    msgs = result.simulation["messages"]
    assert msgs[2]["content"] == "Which order do you mean?" and msgs[2]["tool_calls"] is None
    assert "".join(r["token"] for r in result.token_rows if r["message_idx"] == 2) == "Which order do you mean?"
    block = result.simulation["intervention"]
    assert block["decisions"][0]["action"] == "replace" and block["extra_agent_tokens"] == 40
    assert block["decisions"][0]["executed"] == "Which order do you mean?"
    assert block["agent_tokens"] == 1 + len("ok ###STOP###") + 40


def test_confirm_asks_the_user_once_then_the_write_goes_ahead(shop):
    policy = ScriptedPolicy(Verdict("confirm", 3.0, True), Verdict(signal=3.0, flagged=True))
    result = run(shop, "1", [gen(calls=CANCEL), gen(calls=CANCEL), gen("Done.")],
                 [gen("Cancel O1007."), gen("yes"), gen("bye ###STOP###")], policy)
    sim = result.simulation
    roles = [m["role"] for m in sim["messages"]]
    assert roles == ["assistant", "user", "assistant", "user", "assistant", "tool", "assistant", "user"]
    assert sim["messages"][2]["content"].startswith("Before I do this, please confirm: cancel_order(")
    assert sim["reward_info"]["reward"] == 1.0  # the confirmed write was made
    assert policy.points[1].confirmed_calls == {policy.points[0].calls_key()}
    assert sim["intervention"]["intervened_turns"] == [2] and sim["intervention"]["flagged_turns"] == [2, 4]


def test_a_vote_that_keeps_the_proposal_counts_as_an_intervention(shop):
    policy = ScriptedPolicy(Verdict(signal=2.0, flagged=True, acted=True, extra_tokens=12), Verdict(signal=0.1))
    sim = run(shop, "1", [gen(calls=CANCEL), gen("Cancelled.")], [gen("Cancel O1007."), gen("ok ###STOP###")],
              policy).simulation
    block = sim["intervention"]
    assert [d["intervened"] for d in block["decisions"]] == [True, False]
    assert block["intervened_turns"] == [2] and block["num_interventions"] == 1
    assert sim["messages"][3]["role"] == "tool"  # the proposal itself went ahead


def test_a_confirm_verdict_on_a_read_call_is_a_policy_error(shop):
    with pytest.raises(ValueError, match="not a write call awaiting confirmation"):
        run(shop, "1", [gen(calls=LOOKUP)], [gen("Where is O1007?")], ScriptedPolicy(Verdict("confirm", 1.0, True)))


def test_a_policy_must_answer_with_a_verdict(shop):
    class Broken(ScriptedPolicy):
        def decide(self, point):
            return "defer"

    with pytest.raises(TypeError, match="not a Verdict"):
        run(shop, "1", [gen("Hi")], [gen("Cancel O1007.")], Broken())


def test_verdicts_check_their_own_shape():
    with pytest.raises(ValueError, match="one of proceed"):
        Verdict("escalate")
    with pytest.raises(ValueError, match="needs the generation"):
        Verdict("replace")
