"""τ²-bench's LLM-judge summaries as labelled runs: the conversation each entry's judge saw, read back into a trajectory.

τ²-bench's ``run_custom_judge.py`` (sierra-research/tau2-bench, pull request #103) judges every simulation of a run
with one prompt and writes a ``.summary.json``: ``{total_judged, agree_count, disagree_count, total_cost_usd,
entries: [...]}``, an entry per simulation with ``simulation_id``, ``task_id``, ``tau2_reward``, the judge's
``judge_verdict`` and ``judge_justification`` and ``judge_prompt``, the judge's whole input. The results file of the
run is not published with it; the conversation inside ``judge_prompt`` is the trajectory. Recognised by that shape
(:func:`is_judge_summary`: a top-level object whose ``entries`` hold a ``judge_prompt``).

What an entry becomes (:func:`simulation`):

* ``id`` = ``simulation_id``, ``task_id`` as a string, ``trial`` 0 (a task met again in the file: 1, 2 … in file
  order), ``seed`` null (the summary records none); ``reward_info.reward`` = ``tau2_reward`` (null: unlabelled);
  ``termination_reason`` ``user_stop`` when the last message is the user's with one of τ²-bench's user stop tokens
  (``###STOP###``, ``###TRANSFER###``, ``###OUT-OF-SCOPE###``), else null (how it ended is not recorded). The judge's
  own fields (verdict, justification, cost) stay in the summary: its verdicts are a score file of their own
  (:mod:`agentuq_nb.io.ingest.score_files`), the `external` family's.
* the conversation: the lines between ``Conversation transcript:`` and ``Judging instructions:``, numbered from 1.
  A message starts at the line ``N. <role>…`` whose N is the next number; every other line (a numbered list inside a
  message, a blank line) continues the message before it. The roles:

  - ``N. Assistant: text`` and ``N. User: text`` - the agent's and the user's messages;
  - ``N. Assistant TOOL CALL -> name {arguments}`` - a tool call, its arguments as the judge script wrote them
    (Python's repr of the dict, read with :func:`ast.literal_eval`; JSON taken too; anything else kept under
    :data:`~agentuq_nb.records.actions.MALFORMED` and counted). Calls in a row are one assistant message (τ²-bench's
    parallel calls), and an ``Assistant:`` line right before them is that message's text (τ²-bench writes one
    message with text and calls; the script printed it as two lines);
  - ``N. Tool <call id>: result`` - a tool's result. It answers the oldest call of the assistant message before it
    still unanswered: the call takes the result's id, the result the call's name, requestor ``assistant``. A result
    with no such call answers a call the user made (τ²-bench's telecom user acts on their phone through tools, and the
    script printed the user's calls not at all): requestor ``user``, no name. ``error`` where the result starts
    ``Error`` (τ²-bench's tools report a failure so).

  ``turn_idx`` is the message's place in the conversation (0 first).

The header (:func:`results_header`): the domain from the prompt's ``Domain: <name>`` line (else the policy heading or
the file name, as :func:`~agentuq_nb.io.ingest.tau_bench.infer_domain` finds it), the policy the judge was shown as
``info.environment_info.policy``, and the judge (model, prompt name, totals) as ``info.judge_summary``. The agent's
model is not recorded in the file.

**One run, four files.** The script writes one summary per judge prompt, each with the same simulations and the same
transcripts: a run is one of them (any one; what differs is the verdicts, which ``import-scores`` takes from each file
onto that one run). Two summaries of one run given as two runs would be the same trajectories twice (a detector's
"other runs" holding the very trajectories it is tested on): ``compare-runs`` and ``train-detector`` refuse judge
summaries that share simulations (:func:`simulation_ids`, :func:`same_run_message`).

Every entry is untrusted: what does not read as the above is one :class:`~agentuq_nb.io.errors.InputError` naming
the file, the entry (its index and simulation id) and the line.
"""
from __future__ import annotations

import ast
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson
from pydantic import ValidationError

from agentuq_nb.io.errors import InputError, InputWarnings, validation_problem
from agentuq_nb.io.files import open_regular
from agentuq_nb.io.ingest import tau_bench
from agentuq_nb.io.ingest.json_stream import GuardedReader, LongToken, items_of, stream_items
from agentuq_nb.records import Simulation
from agentuq_nb.records.actions import MALFORMED

LAYOUT = "judge_summary"
RESULTS_FORMAT = "a τ²-bench judge summary: {total_judged, entries: [{simulation_id, task_id, tau2_reward, judge_prompt, …}]}"
TRANSCRIPT_START = "Conversation transcript:"
TRANSCRIPT_END = "Judging instructions:"
POLICY_START = "Domain policy (for reference):"
DOMAIN_LINE = re.compile(r"\s*Domain:\s*(?P<domain>[A-Za-z0-9_\- ]+?)\s*$", re.MULTILINE)
#: the start of a message: ``N. Assistant TOOL CALL -> name args``, ``N. Assistant: text``, ``N. User: text``,
#: ``N. Tool <id>: result``
MESSAGE_LINE = re.compile(
    r"(?P<n>\d{1,6})\. (?:Assistant TOOL CALL -> (?P<call>[^\s{(]+) ?(?P<args>.*)"
    r"|(?P<role>Assistant|User):(?: (?P<text>.*))?"
    r"|Tool (?P<id>[^\s:]+):(?: (?P<result>.*))?)", re.DOTALL)
#: τ²-bench's user simulator ends the conversation with one of these (its orchestrator: ``user_stop``)
USER_STOP_TOKENS = ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
#: arguments text past which a call's arguments are not parsed (kept as written): literal_eval's cost is bounded
MAX_ARGUMENTS_CHARS = 1 << 20
#: top-level keys of τ²-bench's results: a file that has one is no judge summary (the sniff stops there)
RESULTS_KEYS = ("timestamp", "info", "tasks", "simulations")


def is_judge_summary(path: str | Path) -> bool:
    """Whether ``path`` is a judge summary (:func:`is_judge_summary_file`); False for what cannot be opened."""
    try:
        with open_regular(Path(path), "results") as fh:
            return is_judge_summary_file(fh)
    except (OSError, InputError):
        return False


def is_judge_summary_file(fh: BinaryIO) -> bool:
    """Whether the open file ``fh`` is a judge summary: a top-level object whose ``entries`` list's first item has a
    ``judge_prompt`` (read from its start as far as that item, or as far as a τ²-bench results key, no further)."""
    fh.seek(0)
    try:
        for prefix, event, value in ijson.parse(GuardedReader(fh), use_float=True):
            if prefix == "" and event == "map_key":
                if value in RESULTS_KEYS:
                    return False
            elif prefix == "entries.item" and event == "map_key" and value == "judge_prompt":
                return True
            elif prefix == "entries.item" and event == "end_map":
                return False  # the first entry has no judge_prompt
            elif prefix == "" and event in ("end_map", "start_array", "string", "number", "boolean", "null"):
                return False
    except (ijson.JSONError, LongToken, OSError, InputError, UnicodeDecodeError):
        return False
    return False


def _where(index: int, entry: dict | None = None) -> str:
    sim = entry.get("simulation_id") if isinstance(entry, dict) else None
    return f"entries[{index}]" + (f" (simulation {sim})" if isinstance(sim, str) and len(sim) <= 80 else "")


def _prompt_parts(prompt: str, path: Path, where: str) -> tuple[str, str]:
    """``(what precedes the transcript, the transcript)`` of a judge prompt."""
    if prompt.count(TRANSCRIPT_START) != 1:
        raise InputError(path, f"'judge_prompt' has {prompt.count(TRANSCRIPT_START)} '{TRANSCRIPT_START}' lines, "
                               "expected one before the conversation", where)
    before, after = prompt.split(TRANSCRIPT_START, 1)
    if TRANSCRIPT_END not in after:
        raise InputError(path, f"'judge_prompt' has no '{TRANSCRIPT_END}' after the conversation", where)
    return before, after.rsplit(TRANSCRIPT_END, 1)[0]


def tool_arguments(text: str, warnings: InputWarnings | None, path: Path, where: str) -> dict:
    """A call's arguments as the judge script printed them (the dict's repr; JSON taken too); a text that is no
    dict is kept as written under ``MALFORMED`` and counted."""
    text = text.strip()
    if not text:
        return {}
    parsed: Any = None
    if len(text) <= MAX_ARGUMENTS_CHARS:
        try:
            parsed = ast.literal_eval(text)  # literals only: no code runs
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                parsed = None
    if isinstance(parsed, dict) and all(isinstance(k, str) for k in parsed):
        return parsed
    if warnings is not None:
        warnings.add("judge_summary_arguments_not_a_dict", f"{path} {where}: {text[:80]!r}")
    return {MALFORMED: text}


def transcript_lines(transcript: str, path: Path, where: str) -> list[dict]:
    """The numbered messages of a transcript as ``{n, kind, head, more}`` (``kind``: assistant, user, call, tool;
    ``more``: the lines that continue it), by the rule of the module docstring."""
    items: list[dict] = []
    for number, line in enumerate(transcript.strip("\n").split("\n"), start=1):
        match = MESSAGE_LINE.fullmatch(line)
        expected = len(items) + 1
        if match and int(match["n"]) == expected:
            kind = "call" if match["call"] else "tool" if match["id"] else match["role"].lower()
            items.append({"n": expected, "kind": kind, "match": match, "more": []})
        elif match and int(match["n"]) > expected and not items:
            raise InputError(path, f"the conversation starts at message {match['n']}, expected 1", where)
        elif items:
            items[-1]["more"].append(line)
        elif line.strip():
            raise InputError(path, f"the conversation's first line is not '1. Assistant: …', '1. User: …', "
                                   f"'1. Assistant TOOL CALL -> …' or '1. Tool <id>: …': {line[:80]!r}",
                             f"{where}, transcript line {number}")
    if not items:
        raise InputError(path, "the conversation holds no messages", where)
    return items


def _text(head: str | None, more: list[str]) -> str:
    return "\n".join([head or "", *more]).rstrip("\n")


def messages(transcript: str, path: Path, where: str, warnings: InputWarnings | None = None) -> list[dict]:
    """τ²-bench message dicts of a transcript (see the module docstring)."""
    out: list[dict] = []
    unanswered: list[dict] = []  # the calls of the last assistant message that no result has answered yet
    open_assistant = False  # whether the last message is the agent's and may still take calls
    for item in transcript_lines(transcript, path, where):
        match, kind = item["match"], item["kind"]
        if kind == "call":
            call = {"id": "", "name": match["call"], "requestor": "assistant",
                    "arguments": tool_arguments(_text(match["args"], item["more"]), warnings, path,
                                                f"{where}, message {item['n']}")}
            if open_assistant:
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            unanswered.append(call)
            open_assistant = True
        elif kind == "tool":
            content = _text(match["result"], item["more"])
            message = {"role": "tool", "id": match["id"], "content": content,
                       "error": content.lstrip().startswith("Error")}
            if unanswered:
                call = unanswered.pop(0)
                call["id"] = match["id"]
                message.update(requestor="assistant", name=call["name"])
            else:
                message["requestor"] = "user"
            out.append(message)
            open_assistant = False
        else:
            unanswered = []
            out.append({"role": kind, "content": _text(match["text"], item["more"])})
            open_assistant = kind == "assistant"
    for turn_idx, message in enumerate(out):
        message["turn_idx"] = turn_idx
    return out


def termination_reason(msgs: list[dict]) -> str | None:
    """``user_stop`` when the last message is the user's with one of τ²-bench's stop tokens, else None."""
    last = msgs[-1] if msgs else None
    if last and last["role"] == "user" and any(t in (last.get("content") or "") for t in USER_STOP_TOKENS):
        return "user_stop"
    return None


def check_entry(entry: Any, path: Path, index: int) -> dict:
    """``entry`` when it is an object with a ``simulation_id``, a ``task_id``, a ``judge_prompt`` (text) and a
    ``tau2_reward`` that is a finite number or null; else the one-line InputError that says what is wrong."""
    where = _where(index, entry)
    if not isinstance(entry, dict):
        raise InputError(path, f"an entry is {tau_bench.json_kind(entry)}, expected an object ({RESULTS_FORMAT})",
                         where)
    sim_id = entry.get("simulation_id")
    if not isinstance(sim_id, str) or not sim_id.strip():
        raise InputError(path, f"'simulation_id' is {tau_bench.json_kind(sim_id)}, expected a non-empty string", where)
    task_id = entry.get("task_id")
    if not isinstance(task_id, (str, int)) or isinstance(task_id, bool) or str(task_id) == "":
        raise InputError(path, f"'task_id' is {tau_bench.json_kind(task_id)}, expected a task id", where)
    reward = entry.get("tau2_reward")
    if reward is not None and (not isinstance(reward, (int, float)) or isinstance(reward, bool)
                               or not math.isfinite(reward)):
        raise InputError(path, f"'tau2_reward' is {reward!r}, expected a finite number (or null: unlabelled)", where)
    if not isinstance(entry.get("judge_prompt"), str):
        raise InputError(path, f"'judge_prompt' is {tau_bench.json_kind(entry.get('judge_prompt'))}, expected the "
                               "judge's input as text", where)
    return entry


def simulation(entry: Any, path: Path, index: int, trial: int = 0,
               warnings: InputWarnings | None = None) -> Simulation:
    """The :class:`Simulation` of entry ``index`` (``trial``: how often its task came before it in the file)."""
    entry = check_entry(entry, path, index)
    where = _where(index, entry)
    _, transcript = _prompt_parts(entry["judge_prompt"], path, where)
    msgs = messages(transcript, path, where, warnings)
    reward = entry.get("tau2_reward")
    raw = {"id": entry["simulation_id"], "task_id": str(entry["task_id"]), "trial": trial, "seed": None,
           "messages": msgs, "reward_info": None if reward is None else {"reward": float(reward)},
           "termination_reason": termination_reason(msgs)}
    try:
        return Simulation.model_validate(raw)
    except ValidationError as err:
        raise InputError(path, f"entry does not convert to a trajectory: {validation_problem(err)}", where) from err


def results_header(path: str | Path, fh: BinaryIO | None = None) -> dict[str, Any]:
    """The τ²-shaped header of a judge summary (see the module docstring), from its top-level numbers and first
    entry; read through ``fh`` when the file is open (from its start), else opened here."""
    path = Path(path)
    if fh is None:
        with open_regular(path, "results") as opened:
            return results_header(path, opened)
    totals: dict[str, Any] = {}
    fh.seek(0)
    for prefix, event, value in ijson.parse(GuardedReader(fh), use_float=True):
        if prefix in ("total_judged", "agree_count", "disagree_count", "total_cost_usd") and event == "number":
            totals[prefix] = value
        if prefix == "entries" and event == "start_array":
            break
    first = next(iter(items_of(fh, path, "entries.item")), None)
    if first is None:
        raise InputError(path, f"a judge summary with no entries: no trajectories to read ({RESULTS_FORMAT})")
    check_entry(first, path, 0)
    before, _ = _prompt_parts(first["judge_prompt"], path, _where(0, first))
    policy = before.split(POLICY_START, 1)[1].strip() if POLICY_START in before else None
    named = DOMAIN_LINE.search(before.split(POLICY_START, 1)[0])
    if named:
        domain, rule = named["domain"].strip().lower().replace(" ", "_"), "judge prompt's Domain line"
    else:
        domain, rule = tau_bench.infer_domain(policy, path)
    judge = {key.removeprefix("judge_"): first.get(key) for key in ("judge_model", "judge_prompt_name",
                                                                   "judge_temperature", "judge_system_prompt")
             if isinstance(first.get(key), (str, int, float))}
    info: dict[str, Any] = {"results_format": LAYOUT, "domain_inferred_from": rule,
                            "environment_info": {"domain_name": domain, **({"policy": policy} if policy else {})},
                            "judge_summary": {**totals, **judge}}
    return {"info": info}


def simulation_ids(path: str | Path) -> frozenset[str]:
    """The simulation ids a judge summary judged: what tells two summaries of one run (one per prompt) apart from
    summaries of two runs."""
    return frozenset(str(e.get("simulation_id")) for e in stream_items(Path(path), "entries.item") if isinstance(e, dict))


def same_run_message(n_shared: int, other: str) -> str:
    """What a command says of a judge summary that shares ``n_shared`` simulations with input ``other``."""
    return (f"holds {n_shared} of the same simulations as {other}: the judge summaries of one run (one per judge "
            "prompt) hold the same trajectories; give the run once (import the other prompts' verdicts onto it)")


def iter_simulations(path: str | Path, warnings: InputWarnings | None = None) -> Iterator[Simulation]:
    """The simulations of a judge summary, streamed in file order."""
    path = Path(path)
    seen: Counter = Counter()
    ids: set[str] = set()
    for index, entry in enumerate(stream_items(path, "entries.item")):
        entry = check_entry(entry, path, index)
        if entry["simulation_id"] in ids:
            raise InputError(path, f"simulation {entry['simulation_id']} is judged twice in one summary",
                             _where(index, entry))
        ids.add(entry["simulation_id"])
        task = str(entry["task_id"])
        yield simulation(entry, path, index, seen[task], warnings)
        seen[task] += 1
