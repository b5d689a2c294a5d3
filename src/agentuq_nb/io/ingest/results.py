"""Read τ²-bench results in every layout seen in the wild, and the original τ-bench's.

* ``v0`` – one JSON file ``{timestamp, info, tasks, simulations: [...]}`` (τ²-bench ≤ 0.2,
  agentuq, and this project's simulator).
* ``v1`` – one JSON file of the same shape that also names its format (``format_version``),
  written by newer τ²-bench releases.
* ``dir`` – a directory (τ²-bench ≥ 1.0.1) holding ``results.json`` (header: timestamp, info,
  tasks, optionally the simulations) and ``simulations/*.json`` (one simulation per file).
* ``tau_bench`` – the original τ-bench (sierra-research/tau-bench): one JSON *list* of
  ``{task_id, reward, info, traj, trial}``, recognised by that shape; each entry becomes a simulation
  and the file gets a τ²-shaped header (domain, the agent's system prompt) as
  :mod:`agentuq_nb.io.ingest.tau_bench` describes.
* ``simulation_list`` – a bare JSON *list* of τ²-bench simulations (leaderboard submissions), recognised by its
  first item's ``messages``; each item is the simulation it is, and the header (domain, models) is made from
  them as :mod:`agentuq_nb.io.ingest.simulation_list` describes.
* ``judge_summary`` – τ²-bench's LLM-judge summary (``{total_judged, entries: [{simulation_id, tau2_reward,
  judge_prompt, …}]}``), recognised by that shape: the conversation in each entry's ``judge_prompt`` becomes a
  simulation, its reward ``tau2_reward``, as :mod:`agentuq_nb.io.ingest.judge_summary` describes.
* ``inspect`` – an Inspect AI evaluation log (``.eval``, or the older ``.json``), read through inspect-ai's own
  reader (the ``[inspect]`` extra): each sample and epoch becomes a simulation as
  :mod:`agentuq_nb.io.ingest.inspect_logs` describes; ``score`` picks the score that is the reward.

A results input is opened once as a :class:`ResultsFile`: one sniff (a single file read through one handle) tells its
layout and reads its header; its simulations are then streamed by that layout, as often as asked, never sniffed
again (:meth:`ResultsFile.simulations`, as they are; :meth:`ResultsFile.checked_simulations` also counts what is kept
but not as it should be). :func:`iter_simulations` and :func:`read_header` are that reader for a caller that needs one
of the two.
Simulations are streamed with ijson so that a large results file is never held twice
(as raw JSON and as models) in memory. Unknown keys are kept on every model.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, BinaryIO

import ijson
from pydantic import ValidationError

from agentuq_nb.io.errors import InputError, InputWarnings, validation_problem
from agentuq_nb.io.files import content_digest, open_regular
from agentuq_nb.io.ingest import inspect_logs, judge_summary, simulation_list, tau_bench
from agentuq_nb.io.ingest.json_stream import (
    GuardedReader,
    JsonScanner,
    LongToken,
    items_of,
    read_json_document,
    stream_items,
)
from agentuq_nb.records import Results, Simulation
from agentuq_nb.records.reward_checks import TaskIntegrity, tasks_by_id

HEADER_KEYS = ("timestamp", "info", "tasks")
NOT_RESULTS = ("top level is neither a JSON object (τ²-bench results) nor a JSON list (the original τ-bench's "
               "results)")


#: the layout of a single results object whose version was not told (:meth:`ResultsFile.open`): v0 and v1 stream alike
V0_OR_V1 = "v0 or v1"


@dataclass(frozen=True)
class ResultsFile:
    """One results input (a file or a τ²-bench results directory, in any layout of the module docstring) opened
    once: :meth:`open` tells its ``layout`` by one sniff and reads its ``header`` (the τ²-shaped header a τ-bench
    list, a simulation list, a judge summary or an Inspect log is given); :meth:`simulations` streams its
    simulations by the layout it was told, never sniffing the file again. What reads a results file more than
    once (its header, then its simulations, twice) holds this object, not the path."""

    path: Path
    layout: str
    header: dict[str, Any]
    #: Inspect logs only: the scorer whose value is the reward (see :func:`iter_simulations`)
    score: str | None = None

    @classmethod
    def open(cls, path: str | Path, score: str | None = None, tell_version: bool = True) -> ResultsFile:
        """Tell what ``path`` is and read its header, in one pass; an InputError when it is no results (see
        :func:`detect_layout`). A single results object that does not say its version is ``v0`` or ``v1`` by its
        first simulation, which is parsed to tell (``tell_version``); a reader that only streams them (they are read
        alike) skips that parse and gets the layout :data:`V0_OR_V1`."""
        path = Path(path)
        layout, header = _top(path, score, tell_version=tell_version)
        return cls(path, layout or (V0_OR_V1 if not tell_version else "v0"), header, score)

    @property
    def domain(self) -> str:
        return Results.domain_of(self.header.get("info"))

    @property
    def models(self) -> dict[str, str]:
        """The generating model of each role (:func:`models_by_role`)."""
        return models_by_role(self.header)

    def content_sha256(self) -> str:
        """SHA-256 of what the results hold (their bytes, not their name: a copy or a symlink is the same run): a
        file's bytes, or a results directory's ``results.json`` and ``simulations/*.json`` (their names inside it and
        their bytes, in name order). Read through the project's safe reader
        (:func:`~agentuq_nb.io.files.content_digest`): a FIFO, a device or a symlink to one is refused, never read."""
        path = self.path
        if not path.is_dir():
            return content_digest(path)
        digest = hashlib.sha256()
        files = [p for p in [path / "results.json"] if p.exists() or p.is_symlink()] + sorted(
            (path / "simulations").glob("*.json"))
        for file in files:
            digest.update(f"{file.relative_to(path)}\0{content_digest(file)}\n".encode())
        return digest.hexdigest()

    def simulations(self) -> Iterator[Simulation]:
        """Stream the simulations in file order, as they are (nothing counted: :meth:`checked_simulations` counts)."""
        return self._stream(None)

    def checked_simulations(self, warnings: InputWarnings | None) -> Iterator[Simulation]:
        """:meth:`simulations`, counting in ``warnings`` the input kept but not as it should be (as for
        :func:`iter_simulations`: a τ-bench entry's malformed arguments, simulations whose task is not the one the
        harness checked)."""
        if warnings is None or self.layout == inspect_logs.LAYOUT:  # an Inspect log has no task list to check
            yield from self._stream(warnings)
            return
        integrity = TaskIntegrity(tasks_by_id(self.header))
        for sim in self._stream(warnings):
            integrity.add(sim.id, sim.task_id, sim.model_extra,
                          None if sim.reward_info is None else sim.reward_info.model_dump())
            yield sim
        warnings.add("tasks_not_the_simulated", f"{self.path} {integrity.example}", integrity.mismatched,
                     of=integrity.checked)

    def _stream(self, warnings: InputWarnings | None) -> Iterator[Simulation]:
        path, layout = self.path, self.layout
        if layout == inspect_logs.LAYOUT:
            yield from inspect_logs.iter_simulations(path, warnings, self.score)
        elif layout == tau_bench.LAYOUT:
            prompt = ((self.header.get("info") or {}).get("agent_info") or {}).get("system_prompt")
            for index, entry in enumerate(_list_items(path)):
                yield tau_bench.simulation(entry, path, index, warnings, prompt)
        elif layout == judge_summary.LAYOUT:
            yield from judge_summary.iter_simulations(path, warnings)
        elif layout == simulation_list.LAYOUT:
            for i, raw in enumerate(_list_items(path)):
                yield _validate_simulation(raw, path, f"item {i}")
        elif layout == "dir":
            yield from _iter_directory(path, self.header)
        else:  # v0, v1
            yield from _iter_file_simulations(path)


def detect_layout(path: str | Path) -> str:
    """Return ``"dir"``, ``"v1"``, ``"v0"``, ``"tau_bench"``, ``"simulation_list"``, ``"judge_summary"`` or
    ``"inspect"``; raise InputError if ``path`` is neither τ²-bench's results (a file, a directory or a bare list of
    simulations), nor its judge summary, nor the original τ-bench's, nor an Inspect AI log."""
    path = Path(path)
    if inspect_logs.is_inspect_log(path):  # told by its shape, without the [inspect] extra that reads it
        return inspect_logs.LAYOUT
    return ResultsFile.open(path).layout


def _top(path: Path, score: str | None, tell_version: bool = False) -> tuple[str | None, dict[str, Any]]:
    """``(layout, header)`` of results: what they are told once, by the one sniff of this module, and their header
    read in the same pass; a single file is opened once and every sniffer reads that handle. A single results
    object that does not say its version is ``v0`` or ``v1`` by its first simulation (:func:`simulation_layout`):
    told with ``tell_version``, else None."""
    if not os.path.lexists(path):
        raise InputError(path, "results path does not exist")
    if inspect_logs.is_inspect_log(path):
        return inspect_logs.LAYOUT, inspect_logs.results_header(path, score)
    _score_only_for_inspect(path, score)
    read = path  # the one file sniffed: a single file, or a results directory's results.json
    if path.is_dir():
        if not (path / "results.json").is_file() and not (path / "simulations").is_dir():
            raise InputError(path, "directory has neither results.json nor simulations/ (not a τ²-bench results directory)")
        read = path / "results.json"
        if not read.exists():
            return "dir", {}
    with open_regular(read, "results") as fh:
        if read != path:
            return "dir", _object_header(fh, read)
        if _first_byte(fh) == b"[":
            return _list_top(fh, path)
        if judge_summary.is_judge_summary_file(fh):
            return judge_summary.LAYOUT, judge_summary.results_header(path, fh)
        header = _object_header(fh, path)
        layout = "v1" if _says_v1(fh, header) else None
        if layout is None and tell_version:
            layout = simulation_layout(next(_file_simulations(fh, path), None))
        return layout, header


#: τ²-bench ≥ 1.0 adds a simulation_index (null in single-file results) and a per-simulation ``mode``; some writers
#: name the format
V1_KEYS = ("simulation_index", "format_version", "schema_version", "version")


def _says_v1(fh: BinaryIO, header: dict[str, Any]) -> bool:
    """A single results file (open as ``fh``) written by τ²-bench ≥ 1.0: by its header, else by the keys in its tail
    (the header read stops at the simulations; keys written after them sit there)."""
    if any(k in header for k in V1_KEYS):
        return True
    fh.seek(max(0, os.fstat(fh.fileno()).st_size - 65536))
    tail = fh.read()
    return any(f'"{k}"'.encode() in tail for k in V1_KEYS[:2])


def simulation_layout(first: Simulation | None) -> str:
    """``v1`` when a results file's first simulation has τ²-bench 1.0's ``mode``, else ``v0``."""
    return "v1" if first is not None and "mode" in (first.model_extra or {}) else "v0"


def _json_error(path: Path, err: Exception) -> InputError:
    if path.stat().st_size == 0:
        return InputError(path, "file is empty (expected τ²-bench results JSON)")
    first_line = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return InputError(path, f"not valid JSON or truncated: {first_line}")  # the parser's caret drawing left out


def _first_byte(fh: BinaryIO) -> bytes:
    """The first byte of an open file that is not white space (``b""`` for an empty or blank file): ``[`` opens a
    list (τ-bench), ``{`` an object (τ²-bench)."""
    fh.seek(0)
    while chunk := fh.read(65536):
        if stripped := chunk.lstrip():
            return stripped[:1]
    return b""


def _list_items(path: Path) -> Generator[Any, None, None]:
    """The items of a top-level JSON list (τ-bench's entries, or τ²-bench simulations), streamed
    (:func:`~agentuq_nb.io.ingest.json_stream.stream_items`)."""
    return stream_items(path, "item")


def _list_top(fh: BinaryIO, path: Path) -> tuple[str, dict[str, Any]]:
    """A top-level JSON list (open as ``fh``): ``simulation_list`` when its first item is a τ²-bench simulation, else
    ``tau_bench`` (its entries checked: a list of anything else is refused, saying what τ-bench expects); with its
    header, read from its first items."""
    first: list[Any] = []
    with closing(items_of(fh, path, "item")) as items:
        for index, item in enumerate(items):
            if index == 0 and not simulation_list.is_simulation(item):
                return tau_bench.LAYOUT, tau_bench.list_header(chain([item], items), path)
            if not isinstance(item, dict):
                raise InputError(path, f"a list of τ²-bench simulations, but item {index} is "
                                       f"{tau_bench.json_kind(item)}")
            first.append(item)
            if len(first) >= simulation_list.HEADER_SCAN_ITEMS:
                break
    if not first:
        return tau_bench.LAYOUT, tau_bench.list_header(iter(()), path)  # empty: τ-bench's message says what was expected
    return simulation_list.LAYOUT, simulation_list.results_header(first, path)


def read_header(path: str | Path, score: str | None = None) -> dict[str, Any]:
    """Top-level keys of a results file except ``simulations`` (streamed, cheap on big files); of a τ-bench
    file, the header :func:`tau_bench.results_header` makes for it; of an Inspect log, the one
    :func:`inspect_logs.results_header` makes (``score``: as for :func:`iter_simulations`)."""
    return _top(Path(path), score)[1]


def _object_header(fh: BinaryIO, path: Path) -> dict[str, Any]:
    """:func:`read_header` of a results JSON object (a single file, or a directory's ``results.json``; open as
    ``fh``)."""
    try:
        header, saw_simulations = _streamed_header(fh, path)
    except (ijson.JSONError, LongToken):  # NaN/Infinity, or a long string: the scanner reads it (linear, bounded)
        header, saw_simulations = _scanned_header(fh, path)
    if not saw_simulations and not any(k in header for k in HEADER_KEYS):
        raise InputError(path, "JSON has none of the τ²-bench keys timestamp/info/tasks/simulations")
    if path.name != "results.json" and not saw_simulations:
        raise InputError(path, "no 'simulations' list: not a τ²-bench results file")
    return header


def models_by_role(header: dict) -> dict[str, str]:
    """The generating model of each role, as the results' ``info`` records them."""
    info = header.get("info") or {}
    out = {}
    for role, key in (("assistant", "agent_info"), ("user", "user_info")):
        llm = (info.get(key) or {}).get("llm")
        if llm:
            out[role] = str(llm)
    return out


def _streamed_header(fh: BinaryIO, path: Path) -> tuple[dict[str, Any], bool]:
    """The header by ijson's events (the fast path); stops at the simulations once the header is complete."""
    header: dict[str, Any] = {}
    saw_simulations = False
    fh.seek(0)
    parser = ijson.parse(GuardedReader(fh), use_float=True)
    builder_key, builder = None, None
    for prefix, event, value in parser:
        if prefix == "" and event == "start_map":
            continue
        if prefix == "" and event == "map_key":
            builder_key, builder = value, None
            if value == "simulations":
                saw_simulations = True
                _, first_event, _ = next(parser, (None, None, None))
                if first_event != "start_array":
                    raise _not_a_list(path, _JSON_KINDS.get(first_event, first_event))
                if all(k in header for k in HEADER_KEYS):
                    break  # the header is complete: don't walk the simulations event by event
            continue
        if prefix == "" and event in ("end_map",):
            break
        if builder_key is None:
            raise InputError(path, NOT_RESULTS)
        if builder_key == "simulations":
            continue
        if builder is None:
            builder = ijson.ObjectBuilder()
        builder.event(event, value)
        if prefix == builder_key and event in ("end_map", "end_array", "string", "number", "boolean", "null"):
            header[builder_key] = builder.value
            builder = None
    return header, saw_simulations


def _scanned_header(fh: BinaryIO, path: Path) -> tuple[dict[str, Any], bool]:
    """The header read by the scanner (:class:`~agentuq_nb.io.ingest.json_stream.JsonScanner`): the simulations are
    stepped over one at a time, never held."""
    header: dict[str, Any] = {}
    saw_simulations = False
    fh.seek(0)
    scanner = JsonScanner(fh, path)
    first = scanner.peek()
    if first != "{":
        if not first:
            raise _json_error(path, ValueError("the file holds no JSON value"))
        raise InputError(path, NOT_RESULTS)
    for key in scanner.object_keys():
        if key != "simulations":
            header[key] = scanner.value()
            continue
        saw_simulations = True
        if scanner.peek() != "[":
            raise _not_a_list(path, _python_kind(scanner.value()))
        if all(k in header for k in HEADER_KEYS):
            break
        scanner.skip_value()
    return header, saw_simulations


_JSON_KINDS = {"start_map": "an object", "string": "a string", "number": "a number", "boolean": "a boolean",
               "null": "null"}


def _python_kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", str: "a string", bool: "a boolean"}.get(type(value), "a number")


def _not_a_list(path: Path, kind: str) -> InputError:
    return InputError(path, f"'simulations' has the wrong type: it is {kind}, expected a list of simulations")


def _validate_simulation(raw: Any, path: Path, where: str) -> Simulation:
    if not isinstance(raw, dict):
        raise InputError(path, f"simulation is a {type(raw).__name__}, not an object", where)
    try:
        return Simulation.model_validate(raw)
    except ValidationError as err:
        raise InputError(path, f"simulation does not match τ²-bench's shape: {validation_problem(err)}", where) from err


def _iter_file_simulations(path: Path) -> Iterator[Simulation]:
    with open_regular(path, "results") as fh:
        yield from _file_simulations(fh, path)


def _file_simulations(fh: BinaryIO, path: Path) -> Iterator[Simulation]:
    """The simulations of a results object open as ``fh``, streamed from its start."""
    for i, raw in enumerate(items_of(fh, path, "simulations.item")):
        yield _validate_simulation(raw, path, f"simulations[{i}]")


def _simulation_files(directory: Path, header: dict[str, Any]) -> list[Path]:
    """Simulation files in the order of results.json's ``simulation_index`` (its ``header``; else by name)."""
    sim_dir = directory / "simulations"
    files = sorted(sim_dir.glob("*.json")) if sim_dir.is_dir() else []
    index = header.get("simulation_index")
    if not index:
        return files
    by_stem = {f.stem: f for f in files}
    ids = [str(entry.get("id")) for entry in index if isinstance(entry, dict)]
    missing = [i for i in ids if i not in by_stem]
    if missing:
        raise InputError(directory / "results.json", f"simulation_index names {len(missing)} simulation(s) with no file in simulations/, e.g. {missing[0]}")
    extra = sorted(set(by_stem) - set(ids))
    return [by_stem[i] for i in ids] + [by_stem[e] for e in extra]


def _has_inline_simulations(results_json: Path) -> bool:
    if not results_json.is_file():
        return False
    try:
        return next(_iter_file_simulations(results_json), None) is not None
    except InputError:  # no (or an empty) 'simulations' list: the files are the simulations
        return False


def _iter_directory(path: Path, header: dict[str, Any]) -> Iterator[Simulation]:
    """The simulations of a τ²-bench ≥ 1.0.1 results directory (``header``: its ``results.json``'s)."""
    files = _simulation_files(path, header)
    if not files:  # a results.json that still carries its simulations inline
        yield from _iter_file_simulations(path / "results.json")
        return
    if _has_inline_simulations(path / "results.json"):  # two sources: reading one would lose the other
        raise InputError(path, f"holds simulations both inline in results.json and as {len(files)} file(s) in "
                               "simulations/; keep them in one place")
    for file in files:
        raw = read_json_document(file)
        if isinstance(raw, dict) and "simulation" in raw and "messages" not in raw:
            raw = raw["simulation"]
        yield _validate_simulation(raw, file, "simulation")


def _score_only_for_inspect(path: Path, score: str | None) -> None:
    if score is not None:
        raise InputError(path, f"score '{score}' chooses among the scores of an Inspect AI log; these results "
                               "carry one reward per simulation")


def iter_simulations(path: str | Path, warnings: InputWarnings | None = None,
                     score: str | None = None) -> Iterator[Simulation]:
    """Stream the simulations of a results file or directory, in file order (:meth:`ResultsFile.simulations` of
    the file opened here: a reader that also needs the header or the layout opens the :class:`ResultsFile` itself).

    ``warnings`` counts input kept but not as it should be (τ-bench files: malformed tool-call arguments,
    runs that raised; any file: simulations whose task - the header's ``tasks``, a results directory's
    ``results.json``, τ-bench's ``info.task`` - is not the one the harness checked,
    :class:`~agentuq_nb.records.reward_checks.TaskIntegrity`, counted once the last simulation is read); without
    it they are not counted (what they concern is still in the simulations). ``score`` (Inspect logs only): the
    scorer whose value is the reward, ``NAME`` or ``NAME:KEY`` (default: the eval's first scorer)."""
    path = Path(path)
    if inspect_logs.is_inspect_log(path):  # its samples need no header made (the archive's directory read once)
        yield from inspect_logs.iter_simulations(path, warnings, score)
        return
    yield from ResultsFile.open(path, score, tell_version=False).checked_simulations(warnings)


def has_recorded_summary(results_path: str | Path, sample: int = 5) -> bool:
    """Whether the first ``sample`` simulations of a results file carry a ``uq_summary``."""
    seen = 0
    for sim in iter_simulations(results_path):
        if not sim.uq_summary:
            return False
        seen += 1
        if seen >= sample:
            break
    return seen > 0


def load_results(path: str | Path) -> Results:
    """The whole results (header + simulations) as a ``Results`` model."""
    file = ResultsFile.open(path, tell_version=False)
    try:
        results = Results.model_validate({k: v for k, v in file.header.items() if k != "simulations"})
    except ValidationError as err:
        raise InputError(file.path, f"results header does not match τ²-bench's shape: {err.errors()[0]['msg']}") from err
    results.simulations = list(file.simulations())
    return results
