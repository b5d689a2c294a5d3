"""Canonical actions (groundwork for issue 16): equal keys exactly when two actions would have the same effect."""
from __future__ import annotations

import json

import pytest

from agentuq_nb.records import ToolCall
from agentuq_nb.records.actions import TEXT_ACTION, action_key, canonical_tool_call, is_malformed


def call(name, arguments):
    return {"id": "call_x", "type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize("a, b", [
    (call("get_order", '{"order_id": "#W123", "verbose": true}'), call("get_order", {"verbose": True, "order_id": " #w123 "})),
    (call("refund", '{"amount": 10}'), call("refund", '{"amount": 10.0}')),
    (call("refund", '{"amount": 1e1}'), call("refund", {"amount": 10})),
    (call("update", {"address": {"zip": "10001", "city": "NYC"}}), call("update", {"address": {"city": "nyc ", "zip": "10001"}})),
    ({"name": "get_order", "arguments": {"order_id": "W1"}}, ToolCall(name="get_order", arguments={"order_id": "w1"})),
])
def test_calls_with_the_same_effect_are_equal(a, b):
    assert action_key([a]) == action_key([b])
    assert hash(action_key([a])) == hash(action_key([b]))


@pytest.mark.parametrize("a, b", [
    (call("get_order", {"order_id": "W1"}), call("get_user", {"order_id": "W1"})),        # another tool
    (call("refund", {"amount": "5"}), call("refund", {"amount": 5})),                      # a string is not a number
    (call("exchange", {"items": ["a", "b"]}), call("exchange", {"items": ["b", "a"]})),    # order of a list
    (call("refund", {"amount": 5}), call("refund", {"amount": 5, "note": None})),          # an extra argument
    (call("flag", {"on": True}), call("flag", {"on": 1})),                                 # a boolean is not a number
    (call("set", {"v": {"a": 1}}), call("set", {"v": [["a", 1]]})),                        # an object is not a list
])
def test_calls_with_other_effects_differ(a, b):
    assert action_key([a]) != action_key([b])


def test_no_call_is_a_text_action_and_several_calls_keep_their_order():
    assert action_key(None) == action_key([]) == TEXT_ACTION
    one, two = call("a", {}), call("b", {})
    assert action_key([one, two]) != action_key([two, one])


def test_malformed_arguments_are_kept_as_their_own_action():
    broken = call("get_order", '{"order_id": "W1"')
    other = call("get_order", '{"order_id": "W2"')
    assert is_malformed(action_key([broken])) and not is_malformed(action_key([call("get_order", {"order_id": "W1"})]))
    assert action_key([broken]) != action_key([other]) != action_key([call("get_order", {"order_id": "W1"})])
    assert canonical_tool_call("x", "[1, 2]")[1][0] == "__malformed_arguments__"  # arguments that are not an object
    assert canonical_tool_call("x", "") == canonical_tool_call("x", {}) == canonical_tool_call("x", None)
    assert json.loads(canonical_tool_call("x", '{"a": 1')[1][1] + "}") == {"a": 1}  # the raw text is kept
