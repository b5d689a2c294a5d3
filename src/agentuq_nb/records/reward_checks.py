"""Why a trajectory got its reward: the harness's checks one by one, the task it was given, and the tool calls the task
expected beside the calls the trajectory made (the explorer's failure forensics).

**τ²-bench** writes each simulation's ``reward_info`` as ``reward``, ``db_check {db_match, db_reward}``,
``env_assertions [{env_assertion, met, reward}]``, ``action_checks [{action, action_match, action_reward}]``,
``communicate_checks [{info, met, justification}]``, ``nl_assertions [{nl_assertion, met, justification}]``,
``reward_basis`` (the checks whose product is the reward: ``DB``, ``ENV_ASSERTION``, ``COMMUNICATE``,
``NL_ASSERTION``, ``ACTION``; the others ran for diagnosis only) and ``reward_breakdown`` (``{basis: value}``). Its
tasks (the results header's ``tasks``) hold ``description.purpose``, ``user_scenario.instructions`` (structured, or
one text) and ``evaluation_criteria`` (``actions``, ``env_assertions``, ``communicate_info``, ``nl_assertions``,
``reward_basis``).

**The original τ-bench**, as :mod:`agentuq_nb.io.ingest.tau_bench` keeps it: the task in the simulation's
``info.task`` (``instruction``, ``actions [{name, kwargs}]``, ``outputs``), the environment's check in
``reward_info.info``: ``r_actions`` (the database hash after the run equals the one after replaying the expected
actions) or, for a task with required outputs, ``r_outputs`` and ``outputs {output: said}`` (τ-bench then keeps only
that check, though the reward still includes the database's).

An expected action is matched to a call as τ²-bench's ``Action.compare_with_tool_call`` does: same name, equal
arguments on ``compare_args`` (all of the call's arguments when it names none). The verdict is the harness's where
the file has one (``action_checks``), else this comparison's, and says which.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

#: the kinds of check, as τ²-bench's ``RewardType`` names them, in the order shown
CHECK_KINDS = ("DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION")
#: τ-bench's pseudo-tool for a message to the user: an expected "action" that is not a tool call
RESPOND = "respond"


def _dict(value: Any) -> dict:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _flag(value: Any) -> bool | None:
    """A check's verdict: a boolean, or a number read as ``value ≥ 1`` (τ-bench's 0/1 floats); else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value) >= 1.0
    return None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)


def call_text(name: Any, arguments: Any) -> str:
    """``name(k=v, …)``: a call as one line (arguments as JSON values)."""
    args = _dict(arguments)
    return f"{name}(" + ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in args.items()) + ")"


def reward_checks(reward_info: Mapping | None, basis: Iterable[str] | None = None) -> list[dict]:
    """The checks behind a reward, one dict each: ``kind`` (:data:`CHECK_KINDS`), ``label`` (what was checked),
    ``passed`` (True / False / None when not recorded), ``counted`` (whether its kind is in the reward basis; None
    when the file names no basis) and ``detail`` (the judge's justification, the mismatch…). ``basis``: the task's
    reward basis, used where the simulation's ``reward_info`` names none."""
    info = _dict(reward_info)
    basis = info.get("reward_basis") or (list(basis) if basis else None)
    counted_kinds = {str(b) for b in basis} if basis else None

    def check(kind: str, label: str, passed: bool | None, detail: str | None = None) -> dict:
        return {"kind": kind, "label": label, "passed": passed,
                "counted": None if counted_kinds is None else kind in counted_kinds, "detail": detail}

    out = []
    db = _dict(info.get("db_check"))
    if db:
        out.append(check("DB", "the database at the end equals the one the expected actions produce",
                         _flag(db.get("db_match")), None))
    for item in _list(info.get("env_assertions")):
        item = _dict(item)
        assertion = _dict(item.get("env_assertion"))
        label = assertion.get("message") or call_text(assertion.get("func_name", "assert"), assertion.get("arguments"))
        out.append(check("ENV_ASSERTION", str(label), _flag(item.get("met")), None))
    for item in _list(info.get("action_checks")):
        item = _dict(item)
        action = _dict(item.get("action"))
        out.append(check("ACTION", call_text(action.get("name", "?"), action.get("arguments")),
                         _flag(item.get("action_match")), action.get("action_id")))
    for item in _list(info.get("communicate_checks")):
        item = _dict(item)
        out.append(check("COMMUNICATE", f"the agent says {_text(item.get('info'))!s}", _flag(item.get("met")),
                         item.get("justification")))
    for item in _list(info.get("nl_assertions")):
        item = _dict(item)
        out.append(check("NL_ASSERTION", _text(item.get("nl_assertion")), _flag(item.get("met")),
                         item.get("justification")))
    out += _tau_bench_checks(info, check)
    order = {k: i for i, k in enumerate(CHECK_KINDS)}
    return sorted(out, key=lambda c: order.get(c["kind"], len(order)))


def reward_notes(reward_info: Mapping | None) -> list[str]:
    """What the harness noted beside its checks (τ²-bench's ``reward_info.info``: ``{"note": …}``, or per evaluator
    ``{"communicate": {"note": …}, …}``): why a simulation was not scored ("terminated prematurely …"), which checks
    had nothing to evaluate."""
    info = _dict(_dict(reward_info).get("info"))
    notes = [info["note"]] if isinstance(info.get("note"), str) else []
    notes += [f"{k}: {v['note']}" for k, v in info.items() if isinstance(v, Mapping) and isinstance(v.get("note"), str)]
    return notes


def _tau_bench_checks(info: dict, check) -> list[dict]:
    """The original τ-bench's environment check (``reward_info.info``; see the module docstring)."""
    env = _dict(info.get("info"))
    out = []
    if "r_actions" in env:
        out.append(check("DB", "the database at the end equals the one the expected actions produce (hash)",
                         _flag(env.get("r_actions")), None))
    if "r_outputs" in env:
        outputs = _dict(env.get("outputs"))
        for output, said in outputs.items():
            out.append(check("COMMUNICATE", f"the agent says {output!r}", _flag(said), None))
        if not outputs:
            out.append(check("COMMUNICATE", "the agent says every required output", _flag(env.get("r_outputs")), None))
        reward = info.get("reward")
        if isinstance(reward, (int, float)) and _flag(env.get("r_outputs")) and float(reward) < 1.0:
            out.append(check("DB", "the database at the end equals the one the expected actions produce (not "
                             "recorded: inferred from a reward below the outputs' check)", False, None))
    return out


def task_brief(task: Mapping | None) -> dict | None:
    """What the task asked, as shown beside a trajectory: ``purpose``, ``instructions`` (``[(field, text)]``),
    ``actions`` (:func:`expected_actions`), ``env_assertions``, ``nl_assertions``, ``communicate_info``,
    ``reward_basis``. ``task``: a
    τ²-bench task (the results header's) or τ-bench's ``info.task``; None without one."""
    task = _dict(task)
    if not task:
        return None
    description = _dict(task.get("description"))
    scenario = _dict(task.get("user_scenario"))
    criteria = _dict(task.get("evaluation_criteria"))
    instructions = scenario.get("instructions", task.get("instruction"))
    if isinstance(instructions, Mapping):
        fields = [(k, v) for k, v in instructions.items() if k != "domain" and isinstance(v, str) and v.strip()]
    elif isinstance(instructions, str) and instructions.strip():
        fields = [("instructions", instructions)]
    else:
        fields = []
    if isinstance(scenario.get("persona"), str) and scenario["persona"].strip():
        fields.insert(0, ("persona", scenario["persona"]))
    if task.get("user_id") is not None:
        fields.insert(0, ("user_id", str(task["user_id"])))
    outputs = [str(o) for o in _list(task.get("outputs"))]
    communicate = [_text(c) for c in _list(criteria.get("communicate_info"))] + outputs
    purpose = description.get("purpose") if isinstance(description.get("purpose"), str) else None
    assertions = [_dict(a) for a in _list(criteria.get("env_assertions"))]
    return {"purpose": purpose, "instructions": fields, "actions": expected_actions(task),
            "env_assertions": [str(a.get("message") or call_text(a.get("func_name", "assert"), a.get("arguments")))
                               for a in assertions],
            "nl_assertions": [_text(a) for a in _list(criteria.get("nl_assertions"))],
            "communicate_info": communicate,
            "reward_basis": [str(b) for b in _list(criteria.get("reward_basis"))] or None}


def expected_actions(task: Mapping | None) -> list[dict]:
    """The tool calls a task expects, each ``{id, name, arguments, requestor, compare_args}``: τ²-bench's
    ``evaluation_criteria.actions``, or τ-bench's ``actions [{name, kwargs}]`` without its ``respond`` messages."""
    task = _dict(task)
    criteria = _dict(task.get("evaluation_criteria"))
    raw = criteria.get("actions") if criteria else task.get("actions")
    out = []
    for i, action in enumerate(_list(raw)):
        action = _dict(action)
        name = action.get("name")
        if not isinstance(name, str) or name == RESPOND:
            continue
        compare = action.get("compare_args")
        out.append({"id": str(action.get("action_id") or i), "name": name,
                    "arguments": _dict(action.get("arguments", action.get("kwargs"))),
                    "requestor": str(action.get("requestor") or "assistant"),
                    "compare_args": [str(c) for c in compare] if isinstance(compare, list) else None})
    return out


def text_action(content: Any) -> dict | None:
    """The action a τ-bench ReAct or Act agent wrote in its text (``Action: {"name": …, "arguments": …}``), as
    ``{name, arguments}``; None when the text holds none (or the JSON does not parse, as τ-bench then does nothing)."""
    if not isinstance(content, str) or "Action:" not in content:
        return None
    try:  # as τ-bench reads it: the JSON after the last "Action:"
        parsed = json.loads(content.rsplit("Action:", 1)[-1].strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str) or parsed["name"] == RESPOND:
        return None
    return {"name": parsed["name"], "arguments": _dict(parsed.get("arguments"))}


def matches(expected: Mapping, call: Mapping) -> bool:
    """Whether ``call`` (``{name, arguments}``) does what ``expected`` asks: τ²-bench's
    ``Action.compare_with_tool_call``."""
    if expected.get("name") != call.get("name"):
        return False
    made = _dict(call.get("arguments"))
    keys = expected.get("compare_args")
    keys = list(made) if keys is None else keys
    if not keys:
        return True
    wanted = _dict(expected.get("arguments"))
    return {k: v for k, v in made.items() if k in keys} == {k: v for k, v in wanted.items() if k in keys}


def differing_arguments(expected: Mapping, call: Mapping) -> list[str]:
    """The argument names on which ``call`` differs from ``expected`` (those compared; all of both when it names
    none)."""
    wanted, made = _dict(expected.get("arguments")), _dict(call.get("arguments"))
    keys = expected.get("compare_args")
    keys = sorted(set(wanted) | set(made)) if keys is None else list(keys)
    return [k for k in keys if wanted.get(k, _MISSING) != made.get(k, _MISSING)]


_MISSING = object()


def expected_beside_made(expected: list[dict], made: list[dict], action_checks: list | None = None) -> list[dict]:
    """Each expected action beside the calls made: ``{**expected, matched, verdict_by, call, differs}`` where
    ``matched`` is the harness's verdict (``action_checks``, by action id, else in order) or, without one, whether
    some call :func:`matches`; ``verdict_by`` says which (``"harness"`` / ``"name and arguments"``); ``call`` is the
    matching call, else the closest call of the same tool (fewest differing arguments), else None; ``differs``: the
    arguments on which that call differs. ``made``: ``[{message_idx, name, arguments, requestor}]``."""
    verdicts: dict[str, bool | None] = {}
    ordered: list[bool | None] = []
    for item in _list(action_checks):
        item = _dict(item)
        verdict = _flag(item.get("action_match"))
        ordered.append(verdict)
        action_id = _dict(item.get("action")).get("action_id")
        if action_id is not None:
            verdicts[str(action_id)] = verdict
    out = []
    for i, action in enumerate(expected):
        found = [c for c in made if matches(action, c)]
        same_tool = [c for c in made if c.get("name") == action["name"]]
        closest = found[0] if found else min(same_tool, key=lambda c: len(differing_arguments(action, c)),
                                             default=None)
        if action["id"] in verdicts:
            matched, by = verdicts[action["id"]], "harness"
        elif not verdicts and i < len(ordered):
            matched, by = ordered[i], "harness"
        else:
            matched, by = bool(found), "name and arguments"
        out.append({**action, "matched": matched, "verdict_by": by, "call": closest,
                    "differs": [] if closest is None or found else differing_arguments(action, closest)})
    return out
