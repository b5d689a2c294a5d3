"""Routing and termination of the orchestrator, driven by scripted participants.

The real model runs in test_sim_harness.py; here scripted agent/user objects produce exact
messages so that every branch (malformed tool call, tool errors, stops, limits) is exercised.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agentuq_nb.records import Results
from agentuq_nb.sim import load_domain
from agentuq_nb.sim.agent import AGENT_STOP
from agentuq_nb.sim.orchestrator import GREETING, Orchestrator, message_seed


@dataclass
class FakeGeneration:
    message: dict
    tokens: list = field(default_factory=list)
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 1, "completion_tokens": 1})
    cost: float | None = 0.0
    raw: dict = field(default_factory=lambda: {"finish_reason": "stop", "index": 0})


def gen(content=None, calls=None):
    text = content or ""
    tokens = [{"token": ch, "chosen_logprob": -0.5, "chosen_prob": 0.6, "topk_tokens": [ch],
               "topk_logprobs": [-0.5], "topk_entropy": 0.0, "token_idx": i, "role": "assistant"}
              for i, ch in enumerate(text or "x")]
    return FakeGeneration({"role": "assistant", "content": content, "tool_calls": calls}, tokens)


class Scripted:
    def __init__(self, llm, replies):
        self.llm, self.replies, self.calls, self.seeds = llm, list(replies), [], []

    def generate(self, trajectory, seed, retry=None, to_user=None, first_turn=False):
        self.calls.append(([dict(m) for m in trajectory], None if to_user is None else set(to_user)))
        self.seeds.append(seed)
        return self.replies.pop(0)

    @staticmethod
    def is_stop(message):
        return bool(message.get("content")) and AGENT_STOP in message["content"]


@pytest.fixture(scope="module")
def shop():
    return load_domain("bookshop")


def run(shop, task_id, agent_replies, user_replies, max_steps=20, max_errors=3):
    agent, user = Scripted("agent-llm", agent_replies), Scripted("user-llm", user_replies)
    orch = Orchestrator(shop, shop.get_task(task_id), agent, user, trial=0, seed=7, max_steps=max_steps,
                        max_errors=max_errors, sidecar_path="sidecars/x.jsonl")
    return orch.run(), agent, user


def test_tool_calls_errors_and_malformed_calls_are_answered_and_the_run_goes_on(shop):
    result, agent, user = run(shop, "1", agent_replies=[
        gen(calls=[{"id": "a", "name": "get_order", "arguments": {"order_id": "O9999"}}]),     # tool error
        gen('<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": "O10'),           # malformed
        gen(calls=[{"id": "b", "name": "cancel_order", "arguments": {"order_id": "O1007"}}]),  # a good write
        gen("Your order O1007 is cancelled."),
    ], user_replies=[gen("Cancel O1007 please."), gen("Thanks! ###STOP###")])
    sim = result.simulation
    roles = [m["role"] for m in sim["messages"]]
    assert roles == ["assistant", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool",
                     "assistant", "user"]
    msgs = sim["messages"]
    assert msgs[0]["content"] == GREETING and msgs[0]["raw_data"] is None
    assert msgs[3]["error"] is True and msgs[3]["content"] == "Error: Order O9999 not found" and msgs[3]["id"] == "a"
    assert msgs[5]["error"] is True and "malformed tool call" in msgs[5]["content"]
    assert msgs[7]["error"] is False and '"status": "cancelled"' in msgs[7]["content"]
    assert sim["termination_reason"] == "user_stop"
    assert sim["reward_info"]["reward"] == 1.0  # the DB ended as the gold actions leave it
    # the user saw neither tool traffic nor the malformed call
    trajectory, to_user = user.calls[-1]
    assert UserView(trajectory, to_user) == [GREETING, "Cancel O1007 please.", "Your order O1007 is cancelled."]
    # token rows: one block per generated message, keyed by its index
    idx = {r["message_idx"] for r in result.token_rows}
    assert idx == {i for i, m in enumerate(msgs) if m.get("raw_data")}
    assert all(r["model"] in ("agent-llm", "user-llm") for r in result.token_rows)
    assert {r["role"] for r in result.token_rows if r["message_idx"] == 1} == {"user"}
    Results.model_validate({"simulations": [sim]})


def UserView(trajectory, to_user):
    from agentuq_nb.sim.user_simulator import UserSimulator

    return [m["content"] for m in UserSimulator.flip_roles(trajectory, to_user=to_user)]


def test_agent_stop(shop):
    result, _, _ = run(shop, "2", [gen(f"Bye. {AGENT_STOP}")], [gen("Cancel O1003.")])
    assert result.simulation["termination_reason"] == "agent_stop"
    assert result.simulation["reward_info"]["reward"] == 1.0  # a refusal task: nothing written


def test_too_many_errors(shop):
    bad = [gen(calls=[{"id": str(i), "name": "get_order", "arguments": {"order_id": "nope"}}]) for i in range(3)]
    result, _, _ = run(shop, "2", bad, [gen("Hi.")], max_errors=3)
    sim = result.simulation
    assert sim["termination_reason"] == "too_many_errors"
    assert sim["reward_info"]["reward"] == 0.0 and sim["reward_info"]["reward_basis"] is None
    assert sum(1 for m in sim["messages"] if m["role"] == "tool" and m["error"]) == 3


def test_max_steps(shop):
    result, _, _ = run(shop, "2", [gen("Hello?") for _ in range(5)], [gen("Hm.") for _ in range(5)], max_steps=4)
    sim = result.simulation
    assert sim["termination_reason"] == "max_steps" and len(sim["messages"]) == 5
    assert sim["reward_info"]["info"]["note"].endswith("max_steps")


def test_initial_message_history_replaces_the_greeting(shop):
    task = dict(shop.get_task("2"))
    task["initial_state"] = {"message_history": [
        {"role": "assistant", "content": "Welcome back!"},
        {"role": "user", "content": "Cancel O1003 please."},
    ]}
    agent, user = Scripted("a", [gen("It has shipped, sorry."), gen("Bye ###STOP###")]), Scripted("u", [gen("ok")])
    orch = Orchestrator(shop, task, agent, user, trial=0, seed=1, max_steps=10, max_errors=3, sidecar_path=None)
    sim = orch.run().simulation
    assert [m["content"] for m in sim["messages"][:2]] == ["Welcome back!", "Cancel O1003 please."]
    assert sim["messages"][2]["content"] == "It has shipped, sorry."  # the agent spoke first
    assert sim["messages"][2]["raw_data"]["uq_logprobs"]["enabled"] is False


def test_a_failing_model_stops_the_run_with_a_clear_message(tmp_path):
    from agentuq_nb.sim import SimulationFailed, run_simulations

    with pytest.raises(SimulationFailed, match=r"(?s)task .2. trial 0 .*run the same command again"):
        run_simulations("bookshop", tmp_path, task_ids=["2"], user_llm="nosuchprovider/x", retries=0, progress=False)
    assert list((tmp_path / "checkpoints").iterdir()) == []
    assert not (tmp_path / "results.json").exists()


def test_every_llm_call_gets_its_own_seed_from_trial_seed_task_and_message(shop):
    # one seed for every call would give a seeded sampler the same draws at every turn of every task
    replies = dict(agent_replies=[gen("Which order?"), gen("Done.")],
                   user_replies=[gen("Cancel O1007."), gen("Yes."), gen("Thanks ###STOP###")])
    _, agent, user = run(shop, "1", **replies)
    seeds = user.seeds[:1] + agent.seeds[:1] + user.seeds[1:2] + agent.seeds[1:] + user.seeds[2:]
    assert seeds == [message_seed(7, "1", idx) for idx in range(1, 6)]  # message 0 is the greeting
    assert len(set(seeds)) == len(seeds)
    _, _, user_again = run(shop, "1", **{k: [gen(g.message["content"]) for g in v] for k, v in replies.items()})
    assert user_again.seeds == user.seeds  # deterministic
    _, _, other_task = run(shop, "2", **{k: [gen(g.message["content"]) for g in v] for k, v in replies.items()})
    assert not set(other_task.seeds) & set(user.seeds)
    assert message_seed(8, "1", 1) != message_seed(7, "1", 1)
    assert all(0 <= s < 2**31 for s in seeds)
