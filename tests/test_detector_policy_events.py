"""The detector's policy-grounded events (uq/policy_events.py): counted on a conversation written to hold each event a
known number of times, and extracted as the ``policy`` feature group beside the others."""
from __future__ import annotations

import numpy as np
import pytest

from agentuq_nb.records import Simulation
from agentuq_nb.uq.detector_features import extract_features
from agentuq_nb.uq.policy_events import POLICY_COLUMNS, policy_events
from agentuq_nb.uq.transcript import transcript

from conftest import call


def sim(messages: list[dict], task_id="t1") -> Simulation:
    return Simulation.model_validate({"id": f"{task_id}-0", "task_id": task_id, "trial": 0, "seed": 0,
                                      "messages": messages, "reward_info": {"reward": 0.0}})


CONVERSATION = [
    {"role": "assistant", "content": "Hi! How can I help you today?"},
    {"role": "user", "content": "I want to cancel my reservation ABC123 for the Boston flight."},
    {"role": "assistant", "content": None, "tool_calls": [call("get_reservation_details", reservation_id="ABC123")]},
    {"role": "tool", "content": '{"status": "confirmed"}'},
    # a write with no confirmation in the user message before it (the user only stated the goal)
    {"role": "assistant", "content": None, "tool_calls": [call("cancel_reservation", reservation_id="ABC123")]},
    {"role": "tool", "content": "Error: the reservation cannot be cancelled", "error": True},
    # the same failing call again, straight after the error: a failed call repeated, a write after an error, and
    # still unconfirmed
    {"role": "assistant", "content": None, "tool_calls": [call("cancel_reservation", reservation_id="ABC123")]},
    {"role": "tool", "content": "Error: the reservation cannot be cancelled", "error": True},
    {"role": "assistant", "content": "Shall I try once more?"},
    # the user restates the goal and confirms
    {"role": "user", "content": "Yes, go ahead: cancel my reservation ABC123 for the Boston flight."},
    {"role": "assistant", "content": None, "tool_calls": [call("cancel_reservation", reservation_id="ABC123 ")]},
    {"role": "tool", "content": '{"status": "cancelled"}'},
    # the same write tool with other arguments: a state change redone
    {"role": "assistant", "content": None, "tool_calls": [call("cancel_reservation", reservation_id="XYZ999")]},
    {"role": "tool", "content": '{"status": "cancelled"}'},
    {"role": "user", "content": "This is wrong. I want to speak to a human representative."},
    {"role": "assistant", "content": None, "tool_calls": [call("transfer_to_human_agents", summary="s")]},
    {"role": "tool", "content": "Transfer successful"},
]


def events(messages) -> dict[str, float]:
    t = transcript([sim(messages)], "airline")
    return dict(zip(POLICY_COLUMNS, policy_events(t, 1)[0]))


def test_each_event_is_counted_where_the_conversation_holds_it():
    e = events(CONVERSATION)
    assert e["policy.unconfirmed_writes"] == 2  # the two cancels before the user said yes
    assert e["policy.confirmed_writes"] == 2  # the two cancels after "Yes, go ahead" (its user turn precedes both)
    assert e["policy.same_tool_rewrites"] == 1  # the cancel of XYZ999 after those of ABC123
    assert e["policy.failed_call_repeats"] == 2  # the failed call's key, again twice (" ABC123 " is the same key)
    assert e["policy.writes_after_error"] == 1  # the retry before any user message
    assert e["policy.user_asks_human"] == 1
    assert e["policy.agent_transfers"] == 1
    assert e["policy.user_restates_goal"] == 1
    assert e["policy.no_write"] == 0


def test_a_read_only_conversation_has_no_write_event():
    e = events(CONVERSATION[:4])
    assert e["policy.no_write"] == 1
    assert all(e[c] == 0 for c in POLICY_COLUMNS if c != "policy.no_write")


def test_the_results_tool_types_decide_what_a_write_is():
    """A tool the results type as read is not a write, whatever its verb says."""
    t = transcript([sim(CONVERSATION)], "airline")
    as_read = dict(zip(POLICY_COLUMNS, policy_events(t, 1, {"cancel_reservation": "read"})[0]))
    assert as_read["policy.unconfirmed_writes"] == 0 and as_read["policy.no_write"] == 1


def test_the_policy_group_is_extracted_beside_the_others_in_trajectory_order():
    sims = [sim(CONVERSATION[:4], "a"), sim(CONVERSATION, "b")]
    f = extract_features(sims, "airline", ("policy", "length"))
    assert f.groups == ("length", "policy")
    names, values = f.dense_of(["policy"])
    assert names == list(POLICY_COLUMNS)
    assert values[0, POLICY_COLUMNS.index("policy.no_write")] == 1
    assert values[1, POLICY_COLUMNS.index("policy.unconfirmed_writes")] == 2
    with pytest.raises(ValueError, match="feature groups"):
        extract_features(sims, "airline", ("policies",))
    assert np.isfinite(f.dense).all()
