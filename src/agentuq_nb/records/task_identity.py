"""A task's identity across runs: its domain and the content of what the user was asked to do, not its id alone.

Benchmarks reuse ids for different tasks (the original τ-bench's airline task "5" is not τ²-bench's airline task
"5"), and a run of another benchmark version may renumber them. Nor are instructions alone a task: τ²-bench's telecom
tasks share a user's instructions and differ in the starting state of the line and the device (its 40 tasks hold 13
distinct instructions). So a task is keyed by a hash of **what the user is asked, where the task starts and what it
expects done**:

* a τ²-bench task (the results header's ``tasks``): its ``user_scenario`` (persona and instructions), ``ticket``
  (the no-user mode's), ``initial_state`` and the expected actions of its ``evaluation_criteria`` (name and arguments
  only: v1.0.1 added a ``reward_basis`` to every task's criteria without changing the task);
* an original τ-bench task (each entry's ``info.task``): its ``user_id``, ``instruction`` and expected ``actions``.

:func:`content_key` gives ``content:<16 hex>`` (BLAKE2b of the canonical JSON of those fields); where a run holds no
task content (a bare list of simulations), :func:`id_key` gives ``id:<task id>``: the task is then known by its id
only, and every table that uses the key says so (its value starts with ``id:``) - unless
:func:`resolve_id_keys` finds the same (domain, id) with exactly one content among the other runs (or a detector's
training tasks), whose key it then takes. :func:`task_of` finds a simulation's task, :func:`header_task_contents` the content keys of a results header's tasks. The domain is not in the key: the caller pairs the two (a task of one domain never meets one of
another).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

#: the column of a trajectory's task identity in every split, task prior and "seen" test: ``content:<hash of its
#: instructions>``, or ``id:<task id>`` where the results hold no task content
TASK_KEY = "task_key"
CONTENT_PREFIX = "content:"
ID_PREFIX = "id:"


def expected_actions(actions: Any) -> list[tuple[Any, Any]]:
    """The (name, arguments) of each expected action (τ²-bench's ``arguments``, τ-bench's ``kwargs``), in order."""
    if not isinstance(actions, list):
        return []
    return [(a.get("name"), a.get("arguments", a.get("kwargs"))) for a in actions if isinstance(a, Mapping)]


def identity_of(task: Any) -> Any:
    """What identifies ``task`` (see the module docstring), or None when it holds no instructions."""
    if not isinstance(task, Mapping):
        return None
    scenario = task.get("user_scenario")
    if isinstance(scenario, Mapping) and (scenario.get("instructions") or scenario.get("persona")):
        criteria = task.get("evaluation_criteria")
        return {"persona": scenario.get("persona"), "instructions": scenario.get("instructions"),
                "ticket": task.get("ticket"), "initial_state": task.get("initial_state"),
                "actions": expected_actions(criteria.get("actions") if isinstance(criteria, Mapping) else None)}
    if task.get("instruction"):
        return {"user_id": task.get("user_id"), "instruction": task.get("instruction"),
                "actions": expected_actions(task.get("actions"))}
    return None


def content_key(task: Any) -> str | None:
    """``content:<hash>`` of the task's identity (:func:`identity_of`); None when it holds no instructions."""
    body = identity_of(task)
    if body is None:
        return None
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return CONTENT_PREFIX + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def header_task_contents(header: Mapping[str, Any]) -> dict[str, str]:
    """Task id → :func:`content_key` of each task of a results header (its ``tasks``) that holds its instructions."""
    out = {}
    for task in header.get("tasks") or []:
        key = content_key(task) if isinstance(task, dict) else None
        if key is not None and task.get("id") is not None:
            out[str(task["id"])] = key
    return out


def id_key(task_id: Any) -> str:
    """The key of a task known by its id only."""
    return f"{ID_PREFIX}{task_id}"


def task_of(task_id: Any, extra: Mapping[str, Any] | None, tasks: Mapping[str, Any]) -> Any:
    """A simulation's task: the results header's (``tasks``: id → task), else τ-bench's ``info.task`` (``extra``: the
    simulation's fields beyond the schema's)."""
    if str(task_id) in tasks:
        return tasks[str(task_id)]
    info = (extra or {}).get("info")
    task = info.get("task") if isinstance(info, Mapping) else None
    return task if isinstance(task, Mapping) else None


def is_content_key(key: Any) -> bool:
    return isinstance(key, str) and key.startswith(CONTENT_PREFIX)


def resolve_id_keys(domains, task_ids, keys, reference: Sequence[tuple[str, str, str]] = ()) -> list[str]:
    """``keys`` with each ``id:`` key replaced by the content key its (domain, task id) has among the rows (and the
    ``reference`` triples ``(domain, task id, key)``, e.g. a detector's training tasks) when they give that pair
    exactly one content key: a run that holds no task content is matched to the same benchmark's tasks by id,
    and stays ``id:`` where the id is ambiguous (two contents) or unknown."""
    known: dict[tuple[str, str], set[str]] = {}
    for d, t, k in [*zip(domains, task_ids, keys), *reference]:
        if is_content_key(k):
            known.setdefault((str(d), str(t)), set()).add(k)
    out = []
    for d, t, k in zip(domains, task_ids, keys):
        found = known.get((str(d), str(t)), set())
        out.append(next(iter(found)) if not is_content_key(k) and len(found) == 1 else k)
    return out
