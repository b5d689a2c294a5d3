"""Inspect AI evaluation logs (``.eval``, and the older ``.json``) as τ²-bench simulations.

The log is read in one pass, one sample at a time: an ``.eval`` archive with Python's ``zipfile`` (its directory
read once; inspect-ai's own reader opens the archive again for every sample, which made 4,000 samples take
56-114 s), each member's inflated size checked before it is inflated, a ``.json`` log streamed by the bounded
scanner (:mod:`~agentuq_nb.io.ingest.json_stream`: its string limit holds); each sample is validated by
inspect-ai's own models (the optional extra ``[inspect]``) and its attachments resolved by inspect-ai, within a
bound counted first (:func:`iter_samples`). What a sample becomes (:func:`simulation`):

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

import json
import math
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ijson
from pydantic import ValidationError

from agentuq_nb.common.limits import MAX_ARCHIVE_MEMBER_BYTES, MAX_RESOLVED_ATTACHMENT_BYTES
from agentuq_nb.common.naming import slug
from agentuq_nb.io.errors import InputError, InputWarnings, validation_problem
from agentuq_nb.io.files import open_regular
from agentuq_nb.io.ingest.json_stream import JsonScanner, stream_items
from agentuq_nb.records import Simulation
from agentuq_nb.records.actions import MALFORMED
from agentuq_nb.records.tau2 import MAX_TRIAL

LAYOUT = "inspect"
EXTRA = "pip install 'agentuq_nb[inspect]'"
ZIP_MAGIC = b"PK\x03\x04"  # an .eval log is a zip archive (header.json, samples/*.json …)
JSON_LOG_KEY = "eval"  # the key of a .json log's eval spec (it opens with version, status, eval)
TAU2_KEYS = ("timestamp", "info", "tasks", "simulations")
KEY_SEPARATOR = ":"  # --score NAME:KEY picks one entry of a dict-valued score
HEADER_MEMBER = "header.json"  # an .eval archive's header; a log still being written has only its journal's start
START_MEMBER = "_journal/start.json"
SAMPLES_DIR = "samples"  # an .eval archive's samples: samples/<id>_epoch_<epoch>.json
JSON_SAMPLES_KEY = "samples"  # a .json log's samples
#: compressed bytes inflated at a time (zipfile's own minimum)
MEMBER_READ = 4096
#: how Inspect refers to an attachment (``tc://``: its older form)
ATTACHMENT_PREFIXES = ("attachment://", "tc://")
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
    with open_regular(path, "Inspect AI log") as fh:
        return "eval" if fh.read(4) == ZIP_MAGIC else "json"


def _unreadable(path: Path, err: Exception, where: str | None = None) -> InputError:
    first_line = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return InputError(path, f"not a readable Inspect AI log: {type(err).__name__}"
                            + (f": {first_line[:200]}" if first_line else ""), where)


def _not_inspects(path: Path, err: ValidationError, what: str, where: str | None = None) -> InputError:
    """A part of the log that Inspect's own model refuses, said with the field (and the sample) - not pydantic's
    "1 validation error for EvalSample"."""
    return InputError(path, f"{what} is not what Inspect writes: {validation_problem(err)}", where)


def _deserializing() -> dict[str, Any]:
    """The context Inspect validates what it reads with (its migrations of older logs look for it)."""
    try:
        from inspect_ai._util.constants import get_deserializing_context
    except ImportError:  # another inspect-ai: validate without it
        return {}
    return get_deserializing_context()


@contextmanager
def _archive(path: Path) -> Iterator[zipfile.ZipFile]:
    """The ``.eval`` archive, opened once: its central directory read, every member's inflated size checked
    against :data:`~agentuq_nb.common.limits.MAX_ARCHIVE_MEMBER_BYTES` before any is inflated (a 3 MB archive
    may hold a member that inflates to gigabytes)."""
    try:  # Inspect compresses members with zstd; before Python 3.14 zipfile reads it once this is imported
        import zipfile_zstd  # noqa: F401  (a dependency of inspect-ai)
    except ImportError:
        pass
    with open_regular(path, "Inspect AI log") as fh:
        try:
            archive = zipfile.ZipFile(fh)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as err:
            raise _unreadable(path, err) from None
        with archive:
            for info in archive.infolist():
                if info.file_size > MAX_ARCHIVE_MEMBER_BYTES:
                    raise InputError(path, f"member {info.filename!r} inflates to {info.file_size:,} bytes, more "
                                           f"than the {MAX_ARCHIVE_MEMBER_BYTES:,} one member of an Inspect log may "
                                           f"hold (a {info.compress_size:,}-byte member: a zip bomb, or not a log)")
            yield archive


def _member_json(archive: zipfile.ZipFile, name: str, path: Path) -> Any:
    """A member of the archive as JSON. Read in small pieces: Python's reader decompresses one piece of
    compressed bytes per read (a zstd piece may expand a thousandfold before it is cut), and stops at the size
    the directory declares (checked) and checks the CRC, so a member never inflates past it."""
    try:
        with archive.open(name) as member:
            data = b"".join(iter(lambda: member.read(MEMBER_READ), b""))
        return json.loads(data)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError) as err:
        raise InputError(path, f"member {name!r} is damaged: {type(err).__name__}: {err}") from None
    except (ValueError, RecursionError) as err:  # JSON (UnicodeDecodeError is one)
        raise InputError(path, f"member {name!r} is not JSON: {str(err)[:200]}") from None


def read_log_header(path: Path):
    """The log's ``EvalLog`` without its samples: ``header.json`` of an ``.eval`` archive (or, for a log still
    being written, its ``_journal/start.json``), or every top-level key of a ``.json`` log but its samples, read
    by the bounded scanner; validated by Inspect's model."""
    log = log_module(path)
    if _format(path) == "eval":
        with _archive(path) as archive:
            names = set(archive.namelist())
            if HEADER_MEMBER in names:
                data = _member_json(archive, HEADER_MEMBER, path)
            elif START_MEMBER in names:  # an unfinished log: Inspect's own reader builds the header so
                start = _member_json(archive, START_MEMBER, path)
                data = {k: start.get(k) for k in ("version", "eval", "plan")} if isinstance(start, dict) else start
            else:
                raise InputError(path, f"not a readable Inspect AI log: the archive has no {HEADER_MEMBER} (nor "
                                       f"{START_MEMBER})")
    else:
        data = _json_log_header(path)
    try:
        return log.EvalLog.model_validate(data, context=_deserializing())
    except ValidationError as err:
        raise _not_inspects(path, err, "the log's header") from None


def _json_log_header(path: Path) -> dict[str, Any]:
    """Every top-level key of a ``.json`` log but ``samples`` (stepped over one at a time, never held)."""
    header: dict[str, Any] = {}
    with open_regular(path, "Inspect AI log") as fh:
        scanner = JsonScanner(fh, path)
        if scanner.peek() != "{":
            raise InputError(path, "not a readable Inspect AI log: the top level is not a JSON object")
        for key in scanner.object_keys():
            if key == JSON_SAMPLES_KEY:
                scanner.skip_value()
            else:
                header[key] = scanner.value()
    return header


def sample_member(sample_id: Any, epoch: int) -> str:
    """The archive member of a sample and epoch (as Inspect names it)."""
    return f"{SAMPLES_DIR}/{sample_id}_epoch_{epoch}.json"


def iter_samples(path: Path, warnings: InputWarnings | None = None, header: Any = None) -> Iterator[Any]:
    """The log's samples (``EvalSample``), one at a time, in one pass over the log: an ``.eval`` archive's members
    in the order of the header's sample ids and epochs (the order Inspect reads them in), a ``.json`` log's
    ``samples`` streamed. Each is validated by Inspect's model (a sample it refuses is an error naming the
    sample and the field) and its attachments resolved (Inspect stores a long text once, by reference) within
    :data:`~agentuq_nb.common.limits.MAX_RESOLVED_ATTACHMENT_BYTES`. A sample the header lists and the archive
    lacks (a log whose run stopped early, or a damaged one) is counted in ``warnings``."""
    log = log_module(path)
    if _format(path) == "json":
        for i, raw in enumerate(stream_items(path, f"{JSON_SAMPLES_KEY}.item")):
            yield _sample(log, raw, path, f"samples[{i}]")
        return
    header = header if header is not None else read_log_header(path)
    ids = header.eval.dataset.sample_ids
    epochs = (header.eval.config.epochs if header.eval.config else None) or 1
    with _archive(path) as archive:
        names = archive.namelist()
        present = set(names)
        if ids is None:  # an old log without the list: its sample members, in the archive's order
            members = list(dict.fromkeys(n for n in names if n.startswith(f"{SAMPLES_DIR}/") and n.endswith(".json")))
        else:
            members = [sample_member(i, e) for i in ids for e in range(1, epochs + 1)]
        missing = [m for m in members if m not in present]
        if missing and warnings is not None:
            warnings.add("inspect_samples_missing", f"{path} {missing[0]}, of {len(members)} listed; the log's "
                                                    f"status: {header.status}", len(missing))
        for name in members:
            if name in present:
                yield _sample(log, _member_json(archive, name, path), path, name)


def _sample(log: Any, raw: Any, path: Path, where: str) -> Any:
    """One sample: its attachments checked, validated by Inspect's model, attachments resolved."""
    if not isinstance(raw, dict):
        raise InputError(path, f"an Inspect sample is {type(raw).__name__}, not an object", where)
    where = f"{where} (sample {str(raw.get('id'))[:80]} epoch {str(raw.get('epoch'))[:20]})"
    _check_attachments(raw, path, where)
    try:
        sample = log.EvalSample.model_validate(raw, context=_deserializing())
    except ValidationError as err:
        raise _not_inspects(path, err, "a sample", where) from None
    try:
        return log.resolve_sample_attachments(sample, True)
    except Exception as err:  # noqa: BLE001 - inspect-ai's own walk of a sample it validated: said in one line
        raise _unreadable(path, err, where) from None


def _check_attachments(raw: dict, path: Path, where: str) -> None:
    """Refuse a sample whose attachment references resolve to more than MAX_RESOLVED_ATTACHMENT_BYTES characters
    (one 5 MB attachment referenced by 2,000 messages is 10 GB once resolved), counted before resolving."""
    attachments = raw.get("attachments")
    if not isinstance(attachments, dict) or not attachments:
        return
    sizes = {key: len(value) for key, value in attachments.items() if isinstance(value, str)}
    total, refs = 0, 0
    stack: list[Any] = [v for k, v in raw.items() if k != "attachments"]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if node.startswith(ATTACHMENT_PREFIXES):
                key = node.split("://", 1)[1]
                total += sizes.get(key, 0)
                refs += 1
                if total > MAX_RESOLVED_ATTACHMENT_BYTES:
                    raise InputError(path, f"the sample's attachments resolve to more than "
                                           f"{MAX_RESOLVED_ATTACHMENT_BYTES:,} characters ({refs:,} references to "
                                           f"{len(sizes):,} attachments so far): refused before resolving them", where)
        elif isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


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
        raise InputError(path, f"score '{name}': the log has no such scorer (its scorers: {', '.join(names)})")
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
                                   f"choose one as score {name}{KEY_SEPARATOR}KEY", where)
        if key not in value:
            raise InputError(path, f"score '{name}' has no key '{key}' (its keys: {', '.join(map(str, value))})", where)
        value = value[key]
    elif key is not None:
        raise InputError(path, f"score {name}{KEY_SEPARATOR}{key}: score '{name}' is one value, not a dict", where)
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
    first = next(iter_samples(path, header=header), None)
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
    where = f"sample {task_id} epoch {sample.epoch}"
    if not 1 <= sample.epoch <= MAX_TRIAL + 1:
        raise InputError(path, f"epoch {sample.epoch} is not an epoch (Inspect counts them from 1)", where)
    trial = int(sample.epoch) - 1
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
        raise InputError(path, f"Inspect sample does not convert to a trajectory: {validation_problem(err)}",
                         where) from err
    if warnings is not None:
        if sample.error is not None:
            warnings.add("inspect_samples_raised", f"{path} {where}: {str(sample.error.message)[:80]}")
        if status == "not_a_number":
            warnings.add("inspect_scores_not_a_number", f"{path} {where}: score '{name}' = "
                                                        f"{scores[name].value!r}"[:160])
    return sim


def iter_simulations(path: Path, warnings: InputWarnings | None = None, score: str | None = None) -> Iterator[Simulation]:
    """The log's samples as simulations, in the log's order; the reward from ``score`` (:func:`chosen_scorer`)."""
    header = read_log_header(path)
    name, key = chosen_scorer(score, header, path)
    for sample in iter_samples(path, warnings, header):
        yield simulation(sample, path, name, key, warnings)
