"""Reward as τ²-bench computes it, for the built-in domains.

* **DB check**: replay the gold actions on a fresh database and every tool call of
  the trajectory on another fresh database; ``db_match`` is the equality of the two
  hashes (SHA-256 of canonical JSON).
* **Action checks**: each gold action must match some tool call of the trajectory
  (same name; the arguments named in ``compare_args`` equal, all arguments when it
  is ``None``, only the name when it is ``[]``).
* **Communicate checks**: each ``communicate_info`` string must occur (case-insensitive,
  commas removed from the message) in some assistant message with text.
* The reward is the product of the components named in the task's ``reward_basis``
  (``DB``, ``ACTION``, ``COMMUNICATE``); the action component is 1 only when every
  gold action matched, so rewards are binary as in the published τ²-bench results.
* A simulation that did not end with ``user_stop`` or ``agent_stop`` gets reward 0
  with ``reward_basis: null`` and a note, like τ²-bench.

``reward_info`` uses τ²-bench's field names: ``reward, db_check{db_match, db_reward},
env_assertions, action_checks, nl_assertions, communicate_checks, reward_basis,
reward_breakdown, info``.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentuq_nb.sim.domain import Domain, load_domain

REWARD_TYPES = ("DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION")
COMPLETED_REASONS = ("agent_stop", "user_stop")


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _tool_calls(messages: Iterable[Any]) -> list[dict[str, Any]]:
    calls = []
    for msg in messages:
        if _get(msg, "role") not in ("assistant", "user"):
            continue
        for call in _get(msg, "tool_calls") or []:
            calls.append(
                {
                    "name": _get(call, "name"),
                    "arguments": _get(call, "arguments"),
                    "requestor": _get(call, "requestor", _get(msg, "role")),
                }
            )
    return calls


def action_matches(action: Mapping[str, Any], call: Mapping[str, Any]) -> bool:
    """τ²-bench's ``Action.compare_with_tool_call``."""
    if action["name"] != call.get("name"):
        return False
    call_args = call.get("arguments")
    if not isinstance(call_args, Mapping):
        call_args = {}
    compare = action.get("compare_args")
    keys = list(call_args.keys()) if compare is None else list(compare)
    if not keys:
        return True
    gold_args = action.get("arguments") or {}
    return {k: v for k, v in call_args.items() if k in keys} == {k: v for k, v in gold_args.items() if k in keys}


def replay_db(domain: Domain, calls: Iterable[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Hash of the DB after running ``calls`` on a fresh toolkit, and the calls that failed."""
    toolkit = domain.make_toolkit()
    failed = []
    for call in calls:
        try:
            toolkit.call(call["name"], call.get("arguments"))
        except Exception as exc:  # a failed call leaves the DB as it was (tools validate before writing)
            failed.append({"name": call.get("name"), "error": f"{type(exc).__name__}: {exc}",
                           "mutating": toolkit.is_mutating(str(call.get("name")))})
    return toolkit.db_hash(), failed


def check_db(domain: Domain, task: Mapping[str, Any], messages: Iterable[Any]) -> tuple[dict[str, Any], dict | None]:
    gold_actions = (task.get("evaluation_criteria") or {}).get("actions") or []
    gold_hash, gold_failed = replay_db(domain, gold_actions)
    predicted_hash, _ = replay_db(domain, _tool_calls(messages))
    match = gold_hash == predicted_hash
    info = None
    mutating_failed = [f for f in gold_failed if f["mutating"]]
    if mutating_failed:  # a broken task: say so instead of silently comparing against a wrong gold state
        info = {"gold_replay_incomplete": True, "failed_mutating_actions": mutating_failed}
    return {"db_match": match, "db_reward": 1.0 if match else 0.0}, info


def check_actions(domain: Domain, task: Mapping[str, Any], messages: Iterable[Any]) -> list[dict[str, Any]]:
    gold_actions = (task.get("evaluation_criteria") or {}).get("actions") or []
    calls = _tool_calls(messages)
    tool_types = domain.tool_types()
    checks = []
    for action in gold_actions:
        matched = any(action_matches(action, c) for c in calls)
        checks.append(
            {
                "action": dict(action),
                "action_match": matched,
                "action_reward": 1.0 if matched else 0.0,
                "tool_type": tool_types.get(action["name"]),
            }
        )
    return checks


def check_communicate(task: Mapping[str, Any], messages: Iterable[Any]) -> list[dict[str, Any]]:
    infos = (task.get("evaluation_criteria") or {}).get("communicate_info") or []
    texts = [
        str(_get(m, "content"))
        for m in messages
        if _get(m, "role") == "assistant" and _get(m, "content")
    ]
    checks = []
    for info in infos:
        hit = next((t for t in texts if str(info).lower() in t.lower().replace(",", "")), None)
        checks.append(
            {
                "info": info,
                "met": hit is not None,
                "justification": (
                    f"Information '{info}' communicated in the message:\n '{hit}'"
                    if hit is not None
                    else f"Information '{info}' not communicated."
                ),
            }
        )
    return checks


def evaluate_simulation(
    domain: Domain | str,
    task: Mapping[str, Any],
    messages: list[Any],
    termination_reason: str,
) -> dict[str, Any]:
    """``reward_info`` of one simulation (τ²-bench's ``evaluation_type=all``)."""
    domain = load_domain(domain) if isinstance(domain, str) else domain
    empty = {
        "db_check": None,
        "env_assertions": None,
        "action_checks": None,
        "nl_assertions": None,
        "communicate_checks": None,
        "reward_basis": None,
        "reward_breakdown": None,
    }
    if termination_reason not in COMPLETED_REASONS:
        return {
            "reward": 0.0,
            **empty,
            "info": {"note": f"Simulation terminated prematurely. Termination reason: {termination_reason}"},
        }
    criteria = task.get("evaluation_criteria")
    if criteria is None:
        return {"reward": 1.0, **empty, "info": {"note": "No evaluation criteria"}}
    basis = list(criteria.get("reward_basis") or ["DB", "COMMUNICATE"])
    unknown = [b for b in basis if b not in ("DB", "ACTION", "COMMUNICATE")]
    if unknown:
        raise ValueError(
            f"Task {task.get('id')!r}: reward_basis {unknown} is not computed by this evaluator "
            "(supported: DB, ACTION, COMMUNICATE)"
        )

    db_check, env_info = check_db(domain, task, messages)
    action_checks = check_actions(domain, task, messages)
    communicate_checks = check_communicate(task, messages)

    action_reward = 1.0 if all(c["action_match"] for c in action_checks) else 0.0
    communicate_reward = 1.0 if all(c["met"] for c in communicate_checks) else 0.0

    reward = 1.0
    breakdown: dict[str, float] = {}
    if "DB" in basis:
        breakdown["DB"] = db_check["db_reward"]
        reward *= db_check["db_reward"]
    if "ACTION" in basis:
        breakdown["ACTION"] = action_reward
        reward *= action_reward
    if "COMMUNICATE" in basis:
        breakdown["COMMUNICATE"] = communicate_reward
        reward *= communicate_reward

    return {
        "reward": reward,
        "db_check": db_check,
        "env_assertions": [],
        "action_checks": action_checks,
        "nl_assertions": None,
        "communicate_checks": communicate_checks,
        "reward_basis": basis,
        "reward_breakdown": breakdown,
        "info": {
            "env": env_info,
            "nl": None,
            "communicate": None if communicate_checks else {"note": "No communicate_info to evaluate"},
            "action": None if action_checks else {"note": "No actions to evaluate"},
        },
    }
