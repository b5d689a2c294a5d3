"""Inspect AI evaluation logs (``.eval``, and the older ``.json``) as τ²-bench simulations.

The log is read through inspect-ai's own reader (``inspect_ai.log``, the optional extra ``[inspect]``), one
sample at a time. What a sample becomes (:func:`simulation`):

* a **sample is a trajectory** and its **epochs are trials**: ``task_id`` = the sample's id, ``trial`` =
  ``epoch - 1`` (τ²-bench counts trials from 0, Inspect epochs from 1), ``id`` = ``f"{task_id}-{trial}"``,
  ``seed`` null (Inspect records one seed for the whole eval, in the header); the sample's ``uuid`` and
  ``epoch`` are kept beside them;
* its **messages** are the messages: the leading system message is where τ²-bench keeps the agent's prompt,
  outside the messages (``system_prompt`` on the simulation, the first sample's in the header's
  ``info.agent_info.system_prompt``, so replay scoring renders it once); a later system message stays a
  message. Assistant ``tool_calls`` ``{id, function, arguments}`` become τ²'s ``{id, name, arguments,
  requestor: assistant}`` (a call Inspect could not parse keeps its ``parse_error`` and is counted); a tool
  message keeps the call's id as ``id``, its ``function`` as ``name``, and ``error`` says whether Inspect
  recorded a tool error (its message in ``tool_error``). The text of a message is Inspect's ``.text`` (its
  text parts joined); reasoning parts are kept as ``reasoning``. ``turn_idx`` = the position among the
  messages;
* **token log-probs** come from the model call that wrote each assistant message: Inspect logs every call as
  a ``ModelEvent`` whose output message has the id of the message in the conversation, and whose choice
  carries ``logprobs`` in OpenAI's shape (``{content: [{token, logprob, bytes, top_logprobs}]}``) when the
  model returned them (``--logprobs --top-logprobs K``). They go into the message's ``raw_data.logprobs``
  with the call's ``model`` and ``stop_reason`` (the form :mod:`~agentuq_nb.io.ingest.token_sources` reads as an
  OpenAI choice), the call's ``usage`` into ``usage``. Logs of older Inspect versions without message ids
  are matched by text and tool calls, in order;
* the **reward** is one of the sample's scores (:func:`reward_of`): the scorer named by ``score`` (``NAME``,
  or ``NAME:KEY`` for a scorer whose value is a dict of several), by default the first scorer of the eval
  (the one Inspect reports first). Its value is mapped by inspect-ai's own ``value_to_float``: ``C`` (correct)
  1, ``P`` (partial) 0.5, ``I`` (incorrect) and ``N`` (no answer) 0, ``yes``/``true`` 1, ``no``/``false`` 0,
  booleans and numbers (and numeric strings) as numbers. A value it cannot map (another string, a list) is no
  reward, counted, never silently 0. Every score stays in ``reward_info.scores`` (value, answer,
  explanation), the chosen one's name in ``reward_info.reward_basis``;
* ``termination_reason``: ``error`` when the sample raised (counted), ``<type>_limit`` when it hit a limit
  (``message_limit``, ``token_limit``, ``time_limit``…), else ``agent_stop``.

The header (:func:`results_header`) is τ²-shaped: the task's name as the domain, the model as the agent's
``llm``, and the eval's ids, status, generate config and scorers under ``info.inspect``.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ijson
from pydantic import ValidationError

from agentuq_nb.common.naming import slug
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.records import Simulation
from agentuq_nb.records.actions import MALFORMED

LAYOUT = "inspect"
EXTRA = "pip install 'agentuq_nb[inspect]'"
ZIP_MAGIC = b"PK\x03\x04"  # an .eval log is a zip archive (header.json, samples/*.json …)
JSON_LOG_KEY = "eval"  # the key of a .json log's eval spec (it opens with version, status, eval)
TAU2_KEYS = ("timestamp", "info", "tasks", "simulations")
KEY_SEPARATOR = ":"  # --score NAME:KEY picks one entry of a dict-valued score
#: the strings value_to_float maps: Inspect's grades (as written) and words for booleans (any case)
GRADES = ("C", "P", "I", "N")
BOOLEAN_WORDS = ("yes", "no", "true", "false")


class InspectExtraMissing(ModuleNotFoundError):
    """inspect-ai (the ``[inspect]`` extra) is not installed."""


def is_inspect_log(path: Path) -> bool:
    """Whether ``path`` is an Inspect AI log: a zip archive (``.eval``), or a JSON object whose top-level keys
    name an ``eval`` before any of τ²-bench's (``.json`` logs of Inspect before 0.3.46)."""
    if not path.is_file():
        return False
    with open(path, "rb") as fh:
        head = fh.read(4)
        if head == ZIP_MAGIC:
            return True
        if not head.lstrip().startswith(b"{") and head.strip():
            return False
        fh.seek(0)
        try:
            for prefix, event, value in ijson.parse(fh):
                if prefix == "" and event == "map_key":
                    if value == JSON_LOG_KEY:
                        return True
                    if value in TAU2_KEYS:
                        return False
                elif prefix == "" and event != "start_map":
                    return False  # the top level is not an object, or it ended
        except ijson.JSONError:
            return False  # the τ²-bench reader says what is wrong with it
    return False


def log_module(path: Path):
    """``inspect_ai.log``, or the one-line error that names the extra."""
    try:
        from inspect_ai import log
    except ModuleNotFoundError as err:
        raise InspectExtraMissing(f"{path} is an Inspect AI log; reading it needs inspect-ai, the [inspect] extra: "
                                  f"{EXTRA}", name="inspect_ai") from err
    return log


def _format(path: Path) -> str:
    with open(path, "rb") as fh:
        return "eval" if fh.read(4) == ZIP_MAGIC else "json"


def _unreadable(path: Path, err: Exception) -> InputError:
    first_line = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return InputError(path, f"not a readable Inspect AI log: {type(err).__name__}"
                            + (f": {first_line[:200]}" if first_line else ""))


def read_log_header(path: Path):
    """The log's ``EvalLog`` without its samples."""
    log = log_module(path)
    try:
        return log.read_eval_log(str(path), header_only=True, format=_format(path))
    except Exception as err:  # noqa: BLE001 - inspect-ai raises many kinds on a bad file: said in one line
        raise _unreadable(path, err) from err


def iter_samples(path: Path) -> Iterator[Any]:
    """The log's samples (``EvalSample``), one at a time, attachments resolved (Inspect stores long texts once,
    by reference)."""
    log = log_module(path)
    samples = log.read_eval_log_samples(str(path), all_samples_required=False, resolve_attachments=True,
                                        format=_format(path))
    while True:
        try:
            sample = next(samples)
        except StopIteration:
            return
        except Exception as err:  # noqa: BLE001 - as above
            raise _unreadable(path, err) from err
        yield sample


# --------------------------------------------------------------------------- the reward
def scorer_names(header: Any) -> list[str]:
    """The eval's scorers, in the order Inspect reports them (its first is the one it shows first)."""
    results = getattr(header, "results", None)
    return [s.name for s in (getattr(results, "scores", None) or [])]


def parse_score(score: str | None) -> tuple[str | None, str | None]:
    """``NAME`` or ``NAME:KEY`` → (name, key)."""
    if score is None:
        return None, None
    name, _, key = score.partition(KEY_SEPARATOR)
    return name or None, key or None


def chosen_scorer(score: str | None, header: Any, path: Path) -> tuple[str | None, str | None]:
    """(scorer, key) that gives the reward: the one ``score`` names (checked against the eval's scorers), else
    the eval's first; (None, None) for an eval that has not been scored."""
    name, key = parse_score(score)
    names = scorer_names(header)
    if name is not None and names and name not in names:
        raise InputError(path, f"--score '{name}': the log has no such scorer (its scorers: {', '.join(names)})")
    return (name if name is not None else (names[0] if names else None)), key


def reward_of(scores: dict, name: str | None, key: str | None, path: Path, where: str) -> tuple[float | None, str]:
    """(reward, what happened) of a sample's ``scores``: ``"ok"``, ``"unscored"`` (no such score: the sample
    raised or was not scored) or ``"not_a_number"`` (a value ``value_to_float`` cannot map)."""
    from inspect_ai.scorer import value_to_float

    if not scores:
        return None, "unscored"
    if name is None:
        name = next(iter(scores))
    if name not in scores:
        return None, "unscored"
    value = scores[name].value
    if isinstance(value, dict):
        if key is None:
            raise InputError(path, f"score '{name}' is a dict of {len(value)} values ({', '.join(map(str, value))}): "
                                   f"choose one with --score {name}{KEY_SEPARATOR}KEY", where)
        if key not in value:
            raise InputError(path, f"score '{name}' has no key '{key}' (its keys: {', '.join(map(str, value))})", where)
        value = value[key]
    elif key is not None:
        raise InputError(path, f"--score {name}{KEY_SEPARATOR}{key}: score '{name}' is one value, not a dict", where)
    if value is None or isinstance(value, (list, tuple, dict)):
        return None, "not_a_number"
    if isinstance(value, str) and value not in GRADES and value.lower() not in BOOLEAN_WORDS:
        try:
            float(value)
        except ValueError:
            return None, "not_a_number"
    reward = value_to_float()(value)
    return (reward, "ok") if math.isfinite(reward) else (None, "not_a_number")


# --------------------------------------------------------------------------- header
def results_header(path: Path, score: str | None = None) -> dict[str, Any]:
    """The τ²-shaped header of an Inspect log (its first sample gives the agent's system prompt)."""
    header = read_log_header(path)
    spec = header.eval
    name, key = chosen_scorer(score, header, path)
    first = next(iter_samples(path), None)
    prompt = None if first is None else split_system_prompt(first.messages)[0]
    config = spec.model_generate_config.model_dump(exclude_none=True) if spec.model_generate_config else {}
    info: dict[str, Any] = {
        "results_format": LAYOUT,
        "environment_info": {"domain_name": slug(spec.task)},
        "agent_info": {"llm": spec.model, **({"system_prompt": prompt} if prompt is not None else {})},
        "reward_from": {"scorer": name, "key": key, "mapping": "inspect_ai.scorer.value_to_float"},
        "inspect": {"task": spec.task, "task_id": spec.task_id, "run_id": spec.run_id, "eval_id": spec.eval_id,
                    "status": header.status, "model": spec.model, "generate_config": config,
                    "epochs": spec.config.epochs, "scorers": scorer_names(header), "log_version": header.version},
    }
    return {"timestamp": spec.created, "info": info, "tasks": []}


# --------------------------------------------------------------------------- one sample → one simulation
def split_system_prompt(messages: list) -> tuple[str | None, list]:
    """(the leading system message's text, the other messages)."""
    if messages and messages[0].role == "system":
        return messages[0].text, list(messages[1:])
    return None, list(messages)


def model_calls(sample: Any) -> list:
    """The sample's model calls (``ModelEvent``) with an output message, in order."""
    return [e for e in (sample.events or []) if getattr(e, "event", None) == "model"
            and getattr(e, "output", None) is not None and e.output.choices]


def _call_key(message: Any) -> tuple:
    return message.text, tuple(c.function for c in (getattr(message, "tool_calls", None) or []))


def calls_by_message(sample: Any) -> dict[int, Any]:
    """The model call that wrote each assistant message (by position in ``sample.messages``): the call whose
    output message has the message's id, else (logs without ids) the next unused call with its text and tool
    calls."""
    calls = model_calls(sample)
    by_id = {c.output.choices[0].message.id: c for c in calls if c.output.choices[0].message.id}
    used: set[int] = set()
    out = {}
    for i, message in enumerate(sample.messages):
        if message.role != "assistant":
            continue
        call = by_id.get(message.id) if message.id else None
        if call is None:
            key = _call_key(message)
            call = next((c for c in calls if id(c) not in used and _call_key(c.output.choices[0].message) == key), None)
        if call is not None:
            used.add(id(call))
            out[i] = call
    return out


def tool_call(call: Any, path: Path, where: str, warnings: InputWarnings | None) -> dict:
    arguments = call.arguments if isinstance(call.arguments, dict) else {MALFORMED: str(call.arguments)}
    out = {"id": str(call.id or ""), "name": call.function, "arguments": arguments, "requestor": "assistant"}
    if call.parse_error:
        out["parse_error"] = call.parse_error
        if MALFORMED not in arguments:
            out["arguments"] = {**arguments, MALFORMED: call.parse_error}
        if warnings is not None:
            warnings.add("tool_call_arguments_not_json", f"{path} {where} call {call.function}: {call.parse_error[:80]!r}")
    return out


def _reasoning(message: Any) -> str | None:
    content = message.content
    if isinstance(content, str):
        return None
    parts = [getattr(c, "reasoning", None) for c in content if getattr(c, "type", None) == "reasoning"]
    return "\n".join(p for p in parts if p) or None


def message(msg: Any, turn_idx: int, call: Any, path: Path, where: str, warnings: InputWarnings | None) -> dict:
    """An Inspect chat message as τ²'s message dict (see the module docstring)."""
    out: dict[str, Any] = {"role": msg.role, "content": msg.text, "turn_idx": turn_idx, "inspect_id": msg.id}
    if msg.role == "assistant":
        if msg.tool_calls:
            out["tool_calls"] = [tool_call(c, path, f"{where} tool_calls[{j}]", warnings)
                                 for j, c in enumerate(msg.tool_calls)]
        if (reasoning := _reasoning(msg)) is not None:
            out["reasoning"] = reasoning
        if msg.model:
            out["model"] = msg.model
        if call is not None:
            choice = call.output.choices[0]
            raw: dict[str, Any] = {"model": call.output.model or call.model, "finish_reason": choice.stop_reason}
            if choice.logprobs is not None:
                raw["logprobs"] = choice.logprobs.model_dump(mode="json")
            out["raw_data"] = raw
            if call.output.usage is not None:
                out["usage"] = call.output.usage.model_dump(exclude_none=True)
            out["timestamp"] = _iso(call.timestamp)
    elif msg.role == "tool":
        out.update(id=msg.tool_call_id, name=msg.function, requestor="assistant", error=msg.error is not None)
        if msg.error is not None:
            out["tool_error"] = msg.error.message
    return out


def _iso(value: Any) -> str | None:
    """A time as ISO text (Inspect writes some as datetimes, some as text)."""
    if value is None:
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def termination_reason(sample: Any) -> str:
    if sample.error is not None:
        return "error"
    if sample.limit is not None:
        return f"{sample.limit.type}_limit"
    return "agent_stop"


def simulation(sample: Any, path: Path, name: str | None, key: str | None,
               warnings: InputWarnings | None = None) -> Simulation:
    """The :class:`Simulation` of one Inspect sample, its reward from score ``name`` (``key`` of a dict)."""
    task_id = str(sample.id)
    trial = int(sample.epoch) - 1
    where = f"sample {task_id} epoch {sample.epoch}"
    prompt, rest = split_system_prompt(sample.messages)
    offset = len(sample.messages) - len(rest)
    calls = calls_by_message(sample)
    messages = [message(m, i, calls.get(i + offset), path, f"{where} messages[{i + offset}]", warnings)
                for i, m in enumerate(rest)]
    scores = dict(sample.scores or {})
    reward, status = reward_of(scores, name, key, path, where)
    reward_info = None
    if reward is not None:
        reward_info = {"reward": reward, "reward_basis": [name or next(iter(scores))], "scores": {
            n: s.model_dump(mode="json", include={"value", "answer", "explanation"}) for n, s in scores.items()}}
    raw = {
        "id": f"{task_id}-{trial}", "task_id": task_id, "trial": trial, "seed": None, "epoch": sample.epoch,
        "uuid": sample.uuid, "messages": messages, "reward_info": reward_info,
        "termination_reason": termination_reason(sample), "system_prompt": prompt,
        "duration": sample.total_time, "target": sample.target,
        "start_time": _iso(getattr(sample, "started_at", None)), "end_time": _iso(getattr(sample, "completed_at", None)),
    }
    if sample.error is not None:
        raw["error"] = sample.error.message
    try:
        sim = Simulation.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        raise InputError(path, f"Inspect sample does not convert to a trajectory: {first['msg']} at "
                               f"'{'.'.join(str(p) for p in first['loc'])}'", where) from err
    if warnings is not None:
        if sample.error is not None:
            warnings.add("inspect_samples_raised", f"{path} {where}: {str(sample.error.message)[:80]}")
        if status == "not_a_number":
            warnings.add("inspect_scores_not_a_number", f"{path} {where}: score '{name}' = "
                                                        f"{scores[name].value!r}"[:160])
    return sim


def iter_simulations(path: Path, warnings: InputWarnings | None = None, score: str | None = None) -> Iterator[Simulation]:
    """The log's samples as simulations, in the log's order; the reward from ``score`` (:func:`chosen_scorer`)."""
    name, key = chosen_scorer(score, read_log_header(path), path)
    for sample in iter_samples(path):
        yield simulation(sample, path, name, key, warnings)
