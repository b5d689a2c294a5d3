"""What the agent and the user simulator are shown (no LLM calls)."""
from __future__ import annotations

import pytest

from agentuq_nb.sim import load_domain
from agentuq_nb.sim.agent import LLMAgent
from agentuq_nb.sim.orchestrator import GREETING
from agentuq_nb.sim.user_simulator import (
    DEMO,
    FIRST_TURN_TEMPLATE,
    TURN_TEMPLATE,
    UserSimulator,
    is_stop,
    render_instructions,
)

TRAJECTORY = [
    {"role": "assistant", "content": GREETING},
    {"role": "user", "content": "Hi, cancel O1007 please."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "name": "cancel_order", "arguments": {"order_id": "O1007"}, "requestor": "assistant"}]},
    {"id": "c1", "role": "tool", "content": "{\"status\": \"cancelled\"}", "requestor": "assistant", "error": False},
    {"role": "assistant", "content": "Done, it is cancelled."},
]


@pytest.fixture(scope="module")
def shop():
    return load_domain("bookshop")


def test_user_sees_a_role_flipped_history_without_tool_traffic(shop):
    user = UserSimulator(llm="x", scenario=shop.get_task("1")["user_scenario"], style="tau2")
    msgs = user.build_messages(TRAJECTORY)
    assert msgs[0]["role"] == "system"
    assert "<scenario>" in msgs[0]["content"] and "O1007" in msgs[0]["content"]
    assert "###STOP###" in msgs[0]["content"] and "###TRANSFER###" in msgs[0]["content"]
    assert msgs[1:] == [
        {"role": "user", "content": GREETING},
        {"role": "assistant", "content": "Hi, cancel O1007 please."},
        {"role": "user", "content": "Done, it is cancelled."},
    ]
    # an agent message that went to the environment (e.g. a malformed call) is not shown
    assert UserSimulator.flip_roles(TRAJECTORY, to_user={0}) == msgs[1:3]


def test_tiny_style_wraps_agent_turns_and_prepends_the_demo(shop):
    task = shop.get_task("1")
    user = UserSimulator(llm="x", scenario=task["user_scenario"], style="tiny")
    msgs = user.build_messages(TRAJECTORY)
    demo = user.demo_messages()
    assert msgs[1:1 + len(demo)] == demo
    assert sum(1 for d in DEMO if "agent" in d) + sum(1 for d in DEMO if "customer" in d) == len(demo)
    assert all(m["role"] == "assistant" for m in demo if not m["content"].startswith("Agent: "))
    rest = msgs[1 + len(demo):]
    goal = task["user_scenario"]["instructions"]["reason_for_call"]
    assert rest[0]["content"] == FIRST_TURN_TEMPLATE.format(content=GREETING, goal=goal)
    assert rest[1] == {"role": "assistant", "content": "Hi, cancel O1007 please."}
    assert rest[2]["content"] == TURN_TEMPLATE.format(content="Done, it is cancelled.")
    assert user.describe()["style"] == "tiny" and user.describe()["demo"] == list(DEMO)
    with pytest.raises(ValueError, match="style"):
        UserSimulator(llm="x", scenario=None, style="chatty")


def test_stop_tokens():
    for text in ("ok ###STOP###", "###TRANSFER###", "bye ###OUT-OF-SCOPE###", "###STOP### Thanks, bye!"):
        assert is_stop({"role": "user", "content": text})
    assert not is_stop({"role": "user", "content": "STOP"})
    assert not is_stop({"role": "user", "content": None})


def test_scenario_rendering(shop):
    text = render_instructions(shop.get_task("6")["user_scenario"])
    assert text.splitlines()[0] == "Your name is Emil Berg. Your customer id is C105."
    assert "Your goal: You moved and want order O1011 sent to 27 Lake Street, Bergen." in text
    assert render_instructions("free text") == "free text"


def test_agent_prompt_is_instructions_plus_policy_and_sees_tool_traffic(shop):
    agent = LLMAgent(llm="x", policy=shop.policy, tools=shop.tool_schemas())
    msgs = agent.build_messages(TRAJECTORY)
    assert msgs[0]["role"] == "system"
    assert msgs[0]["content"].startswith("<instructions>\nYou are a customer service agent")
    assert shop.policy in msgs[0]["content"]
    assert [m["role"] for m in msgs[1:]] == ["assistant", "user", "assistant", "tool", "assistant"]
    assert msgs[3]["tool_calls"][0]["name"] == "cancel_order" and msgs[4]["id"] == "c1"
    assert "timestamp" not in msgs[4] and "raw_data" not in msgs[2]
    assert agent.tool_choice(first_turn=True) is None  # tau2 style: the model decides
    tiny = LLMAgent(llm="x", policy=shop.policy, tools=shop.tool_schemas(), style="tiny")
    assert tiny.tool_choice(first_turn=True) == "required"
    assert tiny.tool_choice(first_turn=False) is None


def test_local_model_name_matches_the_llm_layer():
    from agentuq_nb import llm
    from agentuq_nb.sim import LOCAL_MODEL

    assert LOCAL_MODEL == llm.LOCAL_MODEL
