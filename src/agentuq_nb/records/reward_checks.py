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
the file has one (``action_checks``), else this comparison's, and says which. Beside each expected action stands the
call that *counted* (a matching call that did not error; :func:`expected_beside_made`) or the closest one, with the
arguments that differ; the write calls no expected action asked for (:func:`unrequested_writes`) and the first place
the trajectory left the expected actions (:func:`first_divergence`) point at the cause of a failure, and
:func:`reward_verdict` says which check decided the reward (or that none was computed).

**Task integrity.** A results file's ``tasks`` list may not be the one simulated (a leaderboard submission that
ships another version's tasks: same ids, other customers). The harness's own checks name the expected actions it
checked, so a task is taken for the simulated one only when its expected actions are those
(:func:`task_matches_checks`); the expected actions shown are always the harness's where it recorded them
(:func:`harness_actions`), and a run's mismatches are counted once (:class:`TaskIntegrity`).
"""
from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
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


def argument_diff(expected: Mapping, call: Mapping) -> list[list]:
    """The arguments on which ``call`` differs from ``expected`` (:func:`differing_arguments`), each as
    ``[name, expected value, made value]``, the values as compact JSON text (None where the argument is absent)."""
    wanted, made = _dict(expected.get("arguments")), _dict(call.get("arguments"))

    def shown(args: dict, key: str) -> str | None:
        return json.dumps(args[key], default=str, ensure_ascii=False) if key in args else None
    return [[k, shown(wanted, k), shown(made, k)] for k in differing_arguments(expected, call)]


def expected_beside_made(expected: list[dict], made: list[dict], action_checks: list | None = None) -> list[dict]:
    """Each expected action beside the calls made: ``{**expected, matched, verdict_by, call, call_index,
    credited_elsewhere, differs, diff}``.

    ``matched`` is the harness's verdict (``action_checks``, by action id, else in order) or, without one, whether
    some call :func:`matches`; ``verdict_by`` says which (``"harness"`` / ``"name and arguments"``). ``call`` (its
    position in ``made``: ``call_index``) is the call that *counted*: of the calls that match, the first that did not
    error (the harness credits a match whatever its result, but an errored call changed nothing), else the first that
    errored; with no match, the closest call of the same tool: one that does what no other expected action asks,
    that did not error, with the fewest differing arguments, in that order (``credited_elsewhere`` says when the
    closest does what another expected action asks); else None. ``differs``: the arguments on which that call differs, ``diff``: them
    with both values (:func:`argument_diff`). ``made``: ``[{message_idx, name, arguments, requestor, errored}]``
    (``errored``: the call's result reported an error)."""
    verdicts: dict[str, bool | None] = {}
    ordered: list[bool | None] = []
    for item in _list(action_checks):
        item = _dict(item)
        verdict = _flag(item.get("action_match"))
        ordered.append(verdict)
        action_id = _dict(item.get("action")).get("action_id")
        if action_id is not None:
            verdicts[str(action_id)] = verdict
    found_by = [[j for j, c in enumerate(made) if matches(action, c)] for action in expected]
    counted: list[int | None] = []
    for found in found_by:
        succeeded = [j for j in found if not made[j].get("errored")]
        counted.append((succeeded or found or [None])[0])
    claimed = {j for found in found_by for j in found}  # calls that do what some expected action asks
    out = []
    for i, action in enumerate(expected):
        pick = counted[i]
        if pick is None:
            same_tool = [j for j, c in enumerate(made) if c.get("name") == action["name"]]
            pick = min(same_tool, default=None, key=lambda j: (j in claimed, bool(made[j].get("errored")),
                                                                len(differing_arguments(action, made[j])), j))
        if action["id"] in verdicts:
            matched, by = verdicts[action["id"]], "harness"
        elif not verdicts and i < len(ordered):
            matched, by = ordered[i], "harness"
        else:
            matched, by = bool(found_by[i]), "name and arguments"
        call = None if pick is None else made[pick]
        exact = pick is not None and pick in found_by[i]
        out.append({**action, "matched": matched, "verdict_by": by, "call": call, "call_index": pick,
                    "credited_elsewhere": bool(pick is not None and not exact and pick in claimed),
                    "differs": [] if call is None or exact else differing_arguments(action, call),
                    "diff": [] if call is None or exact else argument_diff(action, call)})
    return out


def unrequested_writes(rows: list[dict], made: list[dict], is_write: Callable[[str], bool]) -> list[int]:
    """The positions in ``made`` of the write calls no expected action asked for: a call of a state-changing tool
    (``is_write(name)``) that matches no expected action and is no expected action's closest call (``rows``:
    :func:`expected_beside_made`'s). An errored one is listed too (it changed nothing, but it is where the
    trajectory left the expected path)."""
    paired = {r["call_index"] for r in rows if r["call_index"] is not None}
    return [j for j, c in enumerate(made) if is_write(str(c.get("name"))) and j not in paired
            and not any(matches(r, c) for r in rows)]


def first_divergence(rows: list[dict], made: list[dict], unrequested: list[int], last_message: int | None) -> dict | None:
    """Where the trajectory first left the expected actions, as ``{message_idx, call_index, what}``; None when it
    made every expected call (the harness's verdict) and no unrequested write. The earliest of: an unrequested
    write (:func:`unrequested_writes`), the closest call of an expected action not made (when it does what no
    other expected action asks: a call with other arguments); else, an expected action with no call of its tool
    (or only calls that other expected actions claim), placed at the trajectory's last message (``last_message``).
    A write the harness's environment does not check (a telecom reboot the user was told to do) counts as a
    divergence too: the expected actions are the path, not the reward."""
    candidates = []
    for j in unrequested:
        c = made[j]
        what = (f"{c.get('name')}: a write no expected action asked for"
                + (" (it errored: it changed nothing)" if c.get("errored") else ""))
        candidates.append((c["message_idx"], j, what))
    missing = []
    for r in rows:
        if r["matched"] is not False:
            continue
        j = r["call_index"]
        if j is not None and not r["credited_elsewhere"]:
            c = made[j]
            candidates.append((c["message_idx"], j, f"{r['name']} made with other arguments than expected "
                               f"({', '.join(r['differs']) or 'none compared'})"
                               + (" and it errored" if c.get("errored") else "")))
        else:
            missing.append(r)
    if candidates:
        message_idx, j, what = min(candidates, key=lambda c: (c[0], c[1]))
        return {"message_idx": message_idx, "call_index": j, "what": what}
    if missing and last_message is not None:
        names = ", ".join(dict.fromkeys(r["name"] for r in missing))
        return {"message_idx": last_message, "call_index": None,
                "what": f"the trajectory ended without the expected {names}"}
    return None


#: the checks as said in a sentence (τ²-bench's ``RewardType`` and τ-bench's breakdown keys)
CHECK_WORDS = {"DB": "database", "ENV_ASSERTION": "environment assertions", "ACTION": "expected actions",
               "COMMUNICATE": "communicate", "NL_ASSERTION": "NL assertions", "r_actions": "database (hash)",
               "r_outputs": "outputs"}


def _number(value: Any) -> str:
    return f"{float(value):g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def reward_verdict(reward_info: Mapping | None, basis: Iterable[str] | None = None) -> dict:
    """Which check decided the reward, in one sentence: ``{decided_by: [kind…], computed: bool, text}``.

    ``computed`` is False when the harness computed no check (``reward_info`` null, or only a reward and a note: a
    simulation cut short); τ-bench's outputs check, which replaces its database verdict in what it records, is
    said to do so. ``basis``: the task's reward basis, where the simulation names none."""
    info = _dict(reward_info)
    if not info:
        return {"decided_by": [], "computed": False,
                "text": "the harness computed no check for this trajectory (reward_info is null): nothing in the "
                        "file explains its reward"}
    reward = info.get("reward")
    env = _dict(info.get("info"))
    if "r_outputs" in env:
        outputs = _flag(env.get("r_outputs"))
        if outputs and isinstance(reward, (int, float)) and float(reward) < 1.0:
            text = (f"τ-bench's outputs check replaced the database verdict in what it recorded: the outputs passed "
                    f"(r_outputs {_number(env.get('r_outputs'))}), yet the reward is {_number(reward)}, so the "
                    "database check (not recorded) decided it")
            return {"decided_by": ["DB"], "computed": True, "text": text}
        return {"decided_by": ["COMMUNICATE"], "computed": True,
                "text": f"τ-bench's outputs check replaced the database verdict in what it recorded: the outputs "
                        f"{'passed' if outputs else 'failed'} (r_outputs {_number(env.get('r_outputs'))}), reward "
                        f"{_number(reward)}"}
    if "r_actions" in env:
        passed = _flag(env.get("r_actions"))
        return {"decided_by": ["DB"], "computed": True,
                "text": f"decided by τ-bench's database check (the hash after the run {'equals' if passed else 'differs from'} "
                        f"the one the expected actions give; r_actions {_number(env.get('r_actions'))})"}
    breakdown = {str(k): v for k, v in _dict(info.get("reward_breakdown")).items()}
    named = info.get("reward_basis") or (list(basis) if basis else None)
    if not breakdown:  # the checks that count, as listed, where the harness wrote no breakdown
        for c in reward_checks(info, named):
            if c["counted"]:
                breakdown[c["kind"]] = min(breakdown.get(c["kind"], 1.0), 0.0 if c["passed"] is False else 1.0)
    if not breakdown:
        notes = reward_notes(info)
        why = f": {notes[0]}" if notes else ""
        return {"decided_by": [], "computed": False,
                "text": f"no check was computed (the file records the reward {_number(reward)} and no breakdown){why}"}
    failing = [k for k, v in breakdown.items() if isinstance(v, (int, float)) and float(v) < 1.0]
    passing = [k for k in breakdown if k not in failing]
    word = lambda kinds: ", ".join(CHECK_WORDS.get(k, k) for k in kinds)  # noqa: E731
    if failing:
        text = (f"decided by the {word(failing)} check{'s' if len(failing) > 1 else ''} (" +
                ", ".join(f"{CHECK_WORDS.get(k, k)} {_number(breakdown[k])}" for k in failing) + ")"
                + (f"; {word(passing)} passed" if passing else ""))
        return {"decided_by": failing, "computed": True, "text": text}
    return {"decided_by": [], "computed": True,
            "text": f"every check in the reward passed ({word(passing)}): reward {_number(reward)}"}


# --------------------------------------------------------------------------- the task against the harness's checks
def harness_actions(reward_info: Mapping | None) -> list[dict] | None:
    """The expected actions the harness checked, as :func:`expected_actions` gives a task's: τ²-bench's
    ``action_checks[].action``, τ-bench's ``reward_info.actions``; none (``[]``) where τ²-bench's action evaluator
    noted that the task has none (it then writes no ``action_checks``); None when the simulation records nothing to
    tell (no ``reward_info``, a simulation cut short)."""
    info = _dict(reward_info)
    if _dict(_dict(info.get("info")).get("action")).get("note") == NO_ACTIONS_NOTE:
        return []
    if isinstance(info.get("action_checks"), list):
        return expected_actions({"evaluation_criteria": {"actions": [_dict(c).get("action") for c in
                                                                     info["action_checks"]]}})
    if isinstance(info.get("actions"), list):
        return expected_actions({"actions": info["actions"]})
    return None


#: τ²-bench's action evaluator's note for a task without expected actions (``reward_info.info.action.note``)
NO_ACTIONS_NOTE = "No actions to evaluate"


def _signature(actions: list[dict]) -> list[tuple]:
    return [(a["name"], json.dumps(a["arguments"], sort_keys=True, default=str)) for a in actions]


def task_matches_checks(task: Mapping | None, reward_info: Mapping | None) -> bool | None:
    """Whether ``task`` is the one the harness checked: its expected actions (name and arguments, in order; with the
    arguments, the user they act for) are those of the harness's checks (:func:`harness_actions`). None when there
    is nothing to compare (no task, or no checks recorded)."""
    checked = harness_actions(reward_info)
    if task is None or not _dict(task) or checked is None:
        return None
    return _signature(expected_actions(task)) == _signature(checked)


def task_of(task_id: Any, extra: Mapping | None, tasks: Mapping[str, dict]) -> dict | None:
    """A simulation's task: the results header's of its ``task_id`` (τ²-bench; a results directory's
    ``results.json``), else τ-bench's ``info.task`` (``extra``: the simulation's unknown keys); None without one."""
    if str(task_id) in tasks:
        return tasks[str(task_id)]
    task = _dict(_dict(_dict(extra).get("info")).get("task"))
    return task or None


def tasks_by_id(header: Mapping | None) -> dict[str, dict]:
    """A results header's tasks by id."""
    return {str(t.get("id")): t for t in _list(_dict(header).get("tasks")) if isinstance(t, Mapping)}


#: what a run with mismatched tasks is told, after "N of M trajectories"
TASK_MISMATCH = ("the file's task does not match the harness's checks; expected actions taken from the harness's "
                 "checks")


class TaskIntegrity:
    """Counts, over a run's simulations, those whose task could be compared with the harness's checks (``checked``)
    and those whose task is not the one simulated (``mismatched``, the first named in ``example``):
    :func:`task_matches_checks`."""

    def __init__(self, tasks: Mapping[str, dict]):
        self.tasks, self.checked, self.mismatched, self.example = tasks, 0, 0, ""

    def add(self, sim_id: Any, task_id: Any, extra: Mapping | None, reward_info: Mapping | None) -> bool | None:
        """Count one simulation; returns :func:`task_matches_checks` of it."""
        agrees = task_matches_checks(task_of(task_id, extra, self.tasks), reward_info)
        if agrees is not None:
            self.checked += 1
            if not agrees:
                self.mismatched += 1
                self.example = self.example or f"simulation {sim_id}, task {task_id}"
        return agrees

    def message(self) -> str | None:
        """"N of M trajectories: …" (:data:`TASK_MISMATCH`), or None when every task compared agrees."""
        if not self.mismatched:
            return None
        return f"{self.mismatched} of {self.checked} trajectories: {TASK_MISMATCH}"
