"""The original τ-bench's results (sierra-research/tau-bench) as τ²-bench simulations.

τ-bench's ``run.py`` writes one JSON **list** per run: an entry per task and trial,
``{task_id, reward, info, traj, trial}`` (its ``EnvRunResult``). :mod:`agentuq_nb.io.ingest.results` streams
the list; this module checks each entry's shape and turns it into a :class:`~agentuq_nb.records.Simulation`,
so that everything downstream reads one kind of trajectory. What an entry becomes:

* ``id`` = ``f"{task_id}-{trial}"``, ``task_id`` as a string (τ-bench's are task numbers), ``trial`` as
  written (0 when absent), ``seed`` null: τ-bench records no per-trajectory seed (its run's ``--seed``
  only shuffles the task order and is not written), and (task_id, trial) already tells its
  trajectories apart.
* ``reward_info.reward`` = the entry's ``reward`` (what τ-bench's own pass^k counts); the environment's
  ``info.reward_info`` is kept beside it: its ``r_actions`` / ``r_outputs`` as ``reward_breakdown``,
  ``reward_basis`` ``["DB"]`` (the database-hash check) or ``["COMMUNICATE"]`` (the required outputs),
  and its ``info`` and expected ``actions`` as they are. The rest of ``info`` (the task: user id,
  instruction, expected actions and outputs; ``source``; an ``error`` and its ``traceback``) stays on the
  simulation as ``info``, ``user_cost`` becomes the simulation's.
* ``termination_reason``, from what τ-bench's environment records (it writes none): ``user_stop`` when the
  episode ended on the user's stop (``info.source == "user"``), ``agent_stop`` when it ended on a terminating
  tool (``transfer_to_human_agents``), ``max_steps`` when the agent ran out of steps (no ``reward_info``:
  τ-bench never scored the episode and wrote reward 0), ``error`` when the run raised (``info.error``;
  τ-bench writes reward 0 and an empty ``traj``; counted as an input warning); null when ``info.reward_info``
  is there but not an object (a string …: how the episode ended is unknown; counted, never taken for
  ``max_steps``).
* ``traj`` (OpenAI chat messages) → ``messages``, nothing dropped:

  - the **leading system message** (the agent's system prompt: the domain's policy, for the ReAct and
    Act agents followed by the tools and the instruction) is where τ²-bench keeps it, outside the
    messages: the file's header (:func:`results_header`) carries it as ``info.agent_info.system_prompt``
    (what the agent saw, so replay scoring under the agent's LLM uses it) and its policy part as
    ``info.environment_info.policy``, and each simulation keeps its own as ``system_prompt``. Kept as a
    message it would be rendered a second time after the scorer's system prompt, and counted as a
    message by the length baselines, where τ²-bench's trajectories have none. A trajectory whose prompt
    differs from the file's first is counted as an input warning; a system message later in a
    trajectory stays a message;
  - assistant ``tool_calls`` ``[{id, type, function: {name, arguments: JSON text}}]`` become τ²'s
    ``ToolCall{id, name, arguments: dict, requestor: assistant}``; arguments that are not a JSON object are
    kept as written under :data:`~agentuq_nb.records.actions.MALFORMED` and counted; ``content`` may be null;
  - tool messages ``{role: tool, tool_call_id, name, content}`` become τ²'s tool message (``id`` = the
    call's id, ``requestor`` assistant, ``name`` kept); ``error`` is set where τ-bench's environment marks a
    failed call: a result that starts with ``Error:`` (the tool raised, or returned its own error) or
    ``Unknown action`` (no such tool);
  - the ReAct and Act agents call no tools through the API: their actions are in the assistant's text
    (``Action: {"name": ..., "arguments": ...}``) and the results come back as **user** messages starting
    ``API output: ``. They are kept as written (a chat API needs a tool result to answer a tool call, and
    these answer none); ``error`` marks the failed ones (``API output: Error: …``) as above. So these
    runs have no tool calls or tool messages downstream, and observation scoring counts their tool results
    among the user's messages;
  - ``turn_idx`` = the message's position among the messages (0 = the first after the system prompt).

The domain (τ-bench's files do not name it; :func:`infer_domain`): the system prompt's first heading when it
is ``# <Domain> agent policy`` (τ-bench's wikis: ``# Airline Agent Policy``, ``# Retail agent policy``), else
``airline`` or ``retail`` when the file's name holds exactly one of them as a word (``gpt-4o-airline.json``),
else ``tau_bench``. The header records which rule gave it (``info.domain_inferred_from``).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentuq_nb.common.naming import slug
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.records import Simulation
from agentuq_nb.records.actions import MALFORMED

LAYOUT = "tau_bench"
RESULTS_FORMAT = "the original τ-bench's results: a list of {task_id, reward, info, traj, trial}"
EXPECTED = f"expected {RESULTS_FORMAT}"
ENTRY_KEYS = ("task_id", "reward", "traj")  # what makes a list item a τ-bench entry
DEFAULT_DOMAIN = "tau_bench"
FILE_NAME_DOMAINS = ("airline", "retail")  # τ-bench's environments
POLICY_HEADING = re.compile(r"#+\s*(?P<domain>.+?)\s+agent\s+policy\s*", re.IGNORECASE)
FILE_NAME_DOMAIN = re.compile(rf"(?<![a-z])({'|'.join(FILE_NAME_DOMAINS)})(?![a-z])")
REACT_TOOLS = "\n#Available tools\n"  # the ReAct/Act prompt: policy + this + the tools' JSON + the instruction
REACT_RESULT = "API output: "  # how the ReAct/Act agents receive a tool's result (as a user message)
TOOL_ERROR_PREFIXES = ("Error:", "Unknown action")  # τ-bench's environment: a tool that raised; no such tool
HEADER_SCAN_ITEMS = 32  # entries read for the header's system prompt (a run that raised has none) before giving up


def json_kind(value: Any) -> str:
    """``value``'s JSON type, with its article: "an object", "a number", "null"…"""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def check_entry(entry: Any, path: Path, index: int) -> dict:
    """``entry`` when it is a τ-bench entry (an object with ``task_id``, ``reward`` and a ``traj`` list), else
    the one-line InputError that says what the list holds instead."""
    if not isinstance(entry, dict):
        raise InputError(path, f"a JSON list, but item {index} is {json_kind(entry)} ({EXPECTED})")
    missing = [key for key in ENTRY_KEYS if key not in entry]
    if missing:
        names = " or ".join(f"'{key}'" for key in missing)
        raise InputError(path, f"a JSON list, but item {index} has no {names} ({EXPECTED})")
    if not isinstance(entry["traj"], list):
        raise InputError(path, f"a JSON list, but item {index}'s 'traj' is {json_kind(entry['traj'])}, not a list "
                               f"of messages ({EXPECTED})")
    return entry


def system_prompt_of(entry: dict) -> str | None:
    """The content of the leading system message of an entry's ``traj`` (None without one)."""
    traj = entry.get("traj") or []
    first = traj[0] if traj else None
    if isinstance(first, dict) and first.get("role") == "system" and isinstance(first.get("content"), str):
        return first["content"]
    return None


def policy_of(system_prompt: str | None) -> str:
    """The policy part of an agent's system prompt: all of it for the tool-calling agents, the part
    before the tool list for the ReAct and Act agents."""
    return (system_prompt or "").split(REACT_TOOLS, 1)[0]


def infer_domain(system_prompt: str | None, path: str | Path) -> tuple[str, str]:
    """``(domain, the rule that gave it)`` of a τ-bench file (the rule: see the module docstring)."""
    if system_prompt:
        heading = next((line.strip() for line in system_prompt.splitlines() if line.lstrip().startswith("#")), "")
        match = POLICY_HEADING.fullmatch(heading)
        if match:
            return slug(match["domain"].strip().lower()), "system prompt heading"
    found = set(FILE_NAME_DOMAIN.findall(Path(path).name.lower()))
    if len(found) == 1:
        return found.pop(), "file name"
    return DEFAULT_DOMAIN, "default"


def results_header(system_prompt: str | None, path: str | Path) -> dict[str, Any]:
    """The τ²-shaped header of a τ-bench file: its domain and the agent's system prompt (the first
    trajectory's), where τ²-bench's results keep them (``info.environment_info``, ``info.agent_info``)."""
    domain, rule = infer_domain(system_prompt, path)
    info: dict[str, Any] = {"results_format": LAYOUT, "domain_inferred_from": rule,
                            "environment_info": {"domain_name": domain, "policy": policy_of(system_prompt)}}
    if system_prompt is not None:
        info["agent_info"] = {"system_prompt": system_prompt}
    return {"info": info}


def list_header(entries: Iterator[Any], path: Path) -> dict[str, Any]:
    """The header (:func:`results_header`) of a τ-bench list whose ``entries`` are streamed (each checked,
    :func:`check_entry`), from the first whose trajectory opens with the agent's system prompt (entries of runs that
    raised have none; at most :data:`HEADER_SCAN_ITEMS` read); an empty list is refused."""
    prompt, seen = None, 0
    for index, entry in enumerate(entries):
        check_entry(entry, path, index)
        seen += 1
        prompt = system_prompt_of(entry)
        if prompt is not None or seen >= HEADER_SCAN_ITEMS:
            break
    if not seen:
        raise InputError(path, f"an empty JSON list: no results to read ({EXPECTED}, or τ²-bench's results object)")
    return results_header(prompt, path)


# --------------------------------------------------------------------------- one entry → one simulation
def tool_arguments(raw: Any) -> tuple[dict, bool]:
    """``(arguments as a dict, whether they parsed)``: a JSON object as text (OpenAI's wire form) or already
    parsed; empty means none; anything else is kept as written under ``MALFORMED``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, True
    if isinstance(raw, dict):
        return raw, True
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {MALFORMED: raw}, False
        return (parsed, True) if isinstance(parsed, dict) else ({MALFORMED: raw}, False)
    return {MALFORMED: json.dumps(raw, default=str)}, False


def tool_call(raw: Any, path: Path, where: str, warnings: InputWarnings | None) -> dict:
    """An OpenAI tool call ``{id, type, function: {name, arguments}}`` as τ²'s ``{id, name, arguments,
    requestor}`` (other keys kept)."""
    if not isinstance(raw, dict):
        raise InputError(path, f"a tool call is {json_kind(raw)}, not an object", where)
    call = dict(raw)
    function = call.pop("function", None)
    if isinstance(function, dict):
        name, arguments = function.get("name"), function.get("arguments")
    else:  # already τ²-shaped
        name, arguments = call.pop("name", None), call.pop("arguments", None)
    if not isinstance(name, str) or not name:
        raise InputError(path, "a tool call has no function name", where)
    parsed, ok = tool_arguments(arguments)
    if not ok and warnings is not None:
        warnings.add("tool_call_arguments_not_json", f"{path} {where} call {name}: {str(arguments)[:80]!r}")
    return {**call, "id": str(call.get("id") or ""), "name": name, "arguments": parsed, "requestor": "assistant"}


def is_tool_error(content: Any) -> bool:
    return isinstance(content, str) and content.startswith(TOOL_ERROR_PREFIXES)


def message(raw: Any, turn_idx: int, path: Path, where: str, warnings: InputWarnings | None) -> dict:
    """A ``traj`` message as τ²'s message dict (see the module docstring)."""
    if not isinstance(raw, dict):
        raise InputError(path, f"a message is {json_kind(raw)}, not an object", where)
    msg = dict(raw)
    calls = msg.get("tool_calls")
    if calls:
        if not isinstance(calls, list):
            raise InputError(path, f"'tool_calls' is {json_kind(calls)}, not a list", where)
        msg["tool_calls"] = [tool_call(c, path, f"{where} tool_calls[{i}]", warnings) for i, c in enumerate(calls)]
    role, content = msg.get("role"), msg.get("content")
    if role == "tool":
        if "tool_call_id" in msg:
            msg["id"] = msg.pop("tool_call_id")
        msg.setdefault("requestor", "assistant")
        msg.setdefault("error", is_tool_error(content))
    elif role == "user" and isinstance(content, str) and content.startswith(REACT_RESULT):
        if is_tool_error(content[len(REACT_RESULT):]):
            msg.setdefault("error", True)
    msg.setdefault("turn_idx", turn_idx)
    return msg


def reward_info(reward: Any, env_reward_info: Any) -> dict | None:
    """τ²'s ``reward_info`` of an entry: the entry's reward, with the environment's ``reward_info`` beside it."""
    if reward is None:
        return None
    details = dict(env_reward_info) if isinstance(env_reward_info, dict) else {}
    recorded = details.pop("reward", reward)
    if recorded != reward:  # τ-bench writes the same number twice; keep a disagreement visible
        details["env_reward"] = recorded
    checks = details.get("info") if isinstance(details.get("info"), dict) else {}
    breakdown = {k: float(v) for k, v in checks.items()
                 if k in ("r_actions", "r_outputs") and isinstance(v, (int, float)) and not isinstance(v, str)}
    basis = ["DB"] if "r_actions" in checks else ["COMMUNICATE"] if "r_outputs" in checks else None
    return {**details, "reward": reward, "reward_basis": basis, "reward_breakdown": breakdown or None}


def termination_reason(info: dict, traj: list) -> str | None:
    if "error" in info:
        return "error"
    if isinstance(info.get("reward_info"), dict):
        return "user_stop" if info.get("source") == "user" else "agent_stop"
    if info.get("reward_info") is not None:  # scored, but in a shape τ-bench never writes: how it ended is unknown
        return None
    return "max_steps" if traj else None


def simulation(entry: dict, path: Path, index: int, warnings: InputWarnings | None = None,
               header_prompt: str | None = None) -> Simulation:
    """The :class:`Simulation` of τ-bench entry ``index`` (checked with :func:`check_entry` first).

    ``warnings`` counts what is kept but not as it should be (malformed tool-call arguments, a run that
    raised, a system prompt other than ``header_prompt``, the file's)."""
    entry = check_entry(entry, path, index)
    where = f"item {index}"
    task_id, reward, traj = entry["task_id"], entry["reward"], entry["traj"]
    if not isinstance(task_id, (str, int, float)) or isinstance(task_id, bool):
        raise InputError(path, f"'task_id' is {json_kind(task_id)}, expected a task number", where)
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)):
        raise InputError(path, f"'reward' is {json_kind(reward)}, expected a number", where)
    info = entry.get("info")
    if info is None:
        info = {}
    if not isinstance(info, dict):
        raise InputError(path, f"'info' is {json_kind(info)}, expected an object", where)
    trial = entry.get("trial")
    trial = 0 if trial is None else trial
    prompt = system_prompt_of(entry)
    rest = traj[1:] if prompt is not None else traj
    messages = [message(m, i, path, f"{where} traj[{i + (prompt is not None)}]", warnings) for i, m in enumerate(rest)]
    user_cost = info.get("user_cost")
    extra = {k: v for k, v in entry.items() if k not in ("task_id", "reward", "info", "traj", "trial")}
    raw = {
        **extra,
        "id": f"{task_id}-{trial}", "task_id": str(task_id), "trial": trial, "seed": None,
        "messages": messages,
        "reward_info": reward_info(reward, info.get("reward_info")),
        "termination_reason": termination_reason(info, traj),
        "user_cost": user_cost if isinstance(user_cost, (int, float)) and not isinstance(user_cost, bool) else None,
        "info": {k: v for k, v in info.items() if k != "reward_info"},
        "system_prompt": prompt,
    }
    try:
        sim = Simulation.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        loc = list(first["loc"])
        if len(loc) >= 2 and loc[0] == "messages" and isinstance(loc[1], int):  # name the place in the file
            loc = [f"traj[{loc[1] + (prompt is not None)}]", *loc[2:]]
        place = ".".join(str(p) for p in loc)
        shown = first.get("input")
        shown = f" (it is {shown!r})" if isinstance(shown, (int, float, str, bool)) and len(repr(shown)) <= 60 else ""
        raise InputError(path, f"τ-bench entry does not convert to a trajectory: "
                               f"{first['msg'].removeprefix('Value error, ')} at '{place}'{shown}", where) from err
    if warnings is not None:
        if "error" in info:
            warnings.add("tau_bench_runs_raised", f"{path} {where} (task {task_id}, trial {trial}): "
                         f"{str(info['error'])[:80]}")
        env_reward = info.get("reward_info")
        if env_reward is not None and not isinstance(env_reward, dict):
            warnings.add("tau_bench_reward_info_not_an_object", f"{path} {where} (task {task_id}, trial {trial}): "
                         f"'info.reward_info' is {json_kind(env_reward)}, not τ-bench's object; its reward is the "
                         "entry's, its breakdown and how the run ended are unknown")
        if prompt is not None and header_prompt is not None and prompt != header_prompt:
            warnings.add("tau_bench_system_prompt_differs", f"{path} {where} (task {task_id}, trial {trial})")
    return sim
