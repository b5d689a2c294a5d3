"""Per-trajectory scores from elsewhere, read as untrusted input: a user's score file, or a τ²-bench judge summary's
verdicts.

* **A score file** (:func:`read_score_file`): CSV (a header row) or JSONL (one object per line), one row per
  trajectory, keyed by ``simulation_id``, or by ``task_id`` and ``trial`` (``domain`` too where the run spans several;
  ``task_id`` alone where the run has one trajectory per task);
  the score in a column (``score`` unless told); ``verdict``, ``justification`` and ``cost_usd`` kept where present.
  Refused with one line naming the file and the row: a file larger than
  :data:`~agentuq_nb.common.limits.MAX_SCORE_FILE_BYTES`, a line that is no JSON object, a missing key or score
  column, a score that is not a finite number (NaN, inf, text), a key given twice.
* **A judge summary** (:func:`read_judge_verdicts`; :mod:`agentuq_nb.io.ingest.judge_summary` says what it is): each
  entry's ``judge_verdict`` as a score, 1 for a verdict of failure and 0 for a pass (the words GPT-4o used in
  τ²-bench's published summaries, :data:`FAIL_VERDICTS` / :data:`PASS_VERDICTS`), 0.5 for one that is neither
  (``partially satisfied``, ``unknown``): higher = riskier; the justification and the judge's cost kept beside it.

Both give a frame of ``row`` (where in the file: a line number, an entry), the keys the file has, ``score`` and the
optional columns; matching it to a run's trajectories is :func:`agentuq_nb.records.monitor_scores.match_scores`.
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from agentuq_nb.common.limits import MAX_SCORE_FILE_BYTES
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import open_regular
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.json_stream import stream_items

#: verdicts that say the agent failed (score 1): τ²-bench's judge prompts ask for pass/fail; GPT-4o also answered so
FAIL_VERDICTS = frozenset({"fail", "failed", "failure", "unsatisfied", "unsatisfactory", "non_compliant",
                           "noncompliant", "not_compliant", "not_satisfied", "unresolved", "no"})
#: verdicts that say it succeeded (score 0)
PASS_VERDICTS = frozenset({"pass", "passed", "success", "succeeded", "satisfied", "satisfactory", "compliant",
                           "resolved", "yes"})
#: the score of a verdict that is neither (partially satisfied, unknown): between the two
OTHER_VERDICT_SCORE = 0.5
#: the columns a score file may key its rows by, in order of preference
KEY_SETS = (("simulation_id",), ("domain", "task_id", "trial"), ("task_id", "trial"), ("domain", "task_id"),
            ("task_id",))
OPTIONAL = ("verdict", "justification", "cost_usd")
#: characters of a justification kept (a judge's reasons: a paragraph)
MAX_JUSTIFICATION_CHARS = 4000


def verdict_score(verdict: Any) -> float:
    """A verdict's score: 1 failure, 0 pass, :data:`OTHER_VERDICT_SCORE` otherwise (see the module docstring)."""
    word = str(verdict or "").strip().lower().replace(" ", "_").replace("-", "_")
    if word in FAIL_VERDICTS:
        return 1.0
    if word in PASS_VERDICTS:
        return 0.0
    return OTHER_VERDICT_SCORE


def _check_size(path: Path) -> None:
    size = path.stat().st_size
    if size > MAX_SCORE_FILE_BYTES:
        raise InputError(path, f"score file is {size / 2**20:.0f} MiB, more than the {MAX_SCORE_FILE_BYTES >> 20} MiB "
                               "a per-trajectory score file may be")
    if size == 0:
        raise InputError(path, "score file is empty")


def _rows(path: Path) -> tuple[list[dict], str]:
    """The rows of a CSV or JSONL file (``row``: its line number) and which it was."""
    with open_regular(path, "score file") as fh:
        raw = fh.read(MAX_SCORE_FILE_BYTES + 1)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(path, f"score file is not UTF-8 text (byte {err.start})") from err
    first = text.lstrip()[:1]
    if first == "{":
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise InputError(path, f"line is not a JSON object: {str(err).splitlines()[0]}", f"line {number}") \
                    from err
            if not isinstance(row, dict):
                raise InputError(path, "line is not a JSON object", f"line {number}")
            rows.append({**row, "row": f"line {number}"})
        return rows, "jsonl"
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        rows = [{**row, "row": f"line {reader.line_num}"} for row in reader]
    except csv.Error as err:
        raise InputError(path, f"not a CSV file: {err}") from err
    if reader.fieldnames is None:
        raise InputError(path, "score file has no header row")
    if any(None in row for row in rows):
        bad = next(row for row in rows if None in row)
        raise InputError(path, "row has more fields than the header", bad["row"])
    return rows, "csv"


def _number(value: Any, path: Path, where: str, what: str) -> float:
    if isinstance(value, bool) or value is None or (isinstance(value, str) and not value.strip()):
        raise InputError(path, f"{what} is missing or not a number ({value!r})", where)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InputError(path, f"{what} {str(value)[:40]!r} is not a number", where) from None
    if not math.isfinite(number):
        raise InputError(path, f"{what} is {value!r}, not a finite number", where)
    return number


def read_score_file(path: str | Path, column: str = "score") -> pd.DataFrame:
    """A user's score file as a frame (see the module docstring): ``row``, the keys it has, ``score``,
    and the optional columns it has."""
    path = Path(path)
    _check_size(path)
    rows, kind = _rows(path)
    if not rows:
        raise InputError(path, "score file has no rows")
    columns = set().union(*(row.keys() for row in rows))
    keys = next((k for k in KEY_SETS if all(c in columns for c in k)), None)
    if keys is None:
        raise InputError(path, f"no key columns: a score file needs 'simulation_id', or 'task_id' (and 'trial') (it has "
                               f"{', '.join(sorted(c for c in columns if c != 'row'))[:200]})")
    if column not in columns:
        raise InputError(path, f"no score column '{column}' (it has {', '.join(sorted(columns - {'row'}))[:200]}); "
                               "column: name one of them")
    out = []
    for row in rows:
        where = row["row"]
        record: dict[str, Any] = {"row": where}
        for key in keys:
            value = row.get(key)
            if value is None or (isinstance(value, str) and not value.strip()) or isinstance(value, (dict, list)):
                raise InputError(path, f"'{key}' is missing or not a plain value", where)
            record[key] = str(value).strip()
        if "trial" in record:
            record["trial"] = int(_number(record["trial"], path, where, "'trial'"))
        record["score"] = _number(row.get(column), path, where, f"score '{column}'")
        if row.get("verdict") not in (None, ""):
            record["verdict"] = str(row["verdict"])[:200]
        if row.get("justification") not in (None, ""):
            record["justification"] = str(row["justification"])[:MAX_JUSTIFICATION_CHARS]
        if row.get("cost_usd") not in (None, ""):
            record["cost_usd"] = _number(row["cost_usd"], path, where, "'cost_usd'")
        out.append(record)
    frame = pd.DataFrame(out)
    repeated = frame.duplicated(list(keys), keep=False)
    if repeated.any():
        first = frame[repeated]
        same = first[(first[list(keys)] == first.iloc[0][list(keys)]).all(axis=1)]["row"].tolist()
        raise InputError(path, f"{' / '.join(f'{k} {first.iloc[0][k]}' for k in keys)} is scored more than once "
                               f"({', '.join(same[:3])}; {int(repeated.sum())} rows share a key in all)")
    frame.attrs["format"] = kind
    return frame


def read_judge_verdicts(path: str | Path) -> pd.DataFrame:
    """A judge summary's verdicts as a score frame (see the module docstring); ``attrs``: the judge model, the prompt
    name and the number of entries."""
    path = Path(path)
    _check_size(path)
    out, seen = [], set()
    model = prompt_name = None
    for index, entry in enumerate(stream_items(path, "entries.item")):
        where = f"entries[{index}]"
        if not isinstance(entry, dict):
            raise InputError(path, "an entry is not an object", where)
        sim = entry.get("simulation_id")
        if not isinstance(sim, str) or not sim.strip():
            raise InputError(path, "entry has no 'simulation_id'", where)
        if sim in seen:
            raise InputError(path, f"simulation {sim} is judged twice", where)
        seen.add(sim)
        verdict = entry.get("judge_verdict")
        if not isinstance(verdict, str):
            raise InputError(path, f"'judge_verdict' is {verdict!r}, expected the verdict's word", where)
        cost = entry.get("judge_cost_usd")
        cost = float(cost) if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) \
            else None
        justification = entry.get("judge_justification")
        out.append({"row": where, "simulation_id": sim, "score": verdict_score(verdict), "verdict": verdict[:200],
                    "justification": str(justification)[:MAX_JUSTIFICATION_CHARS] if justification else None,
                    "cost_usd": cost})
        model = model or entry.get("judge_model")
        prompt_name = prompt_name or entry.get("judge_prompt_name")
    if not out:
        raise InputError(path, "judge summary has no entries")
    frame = pd.DataFrame(out)
    frame.attrs.update(format=judge_summary.LAYOUT, judge_model=str(model) if model else None,
                       prompt_name=str(prompt_name) if prompt_name else None)
    return frame


def read_scores(path: str | Path, column: str = "score") -> pd.DataFrame:
    """A judge summary's verdicts (:func:`read_judge_verdicts`) or a score file's scores (:func:`read_score_file`),
    by the file's shape."""
    path = Path(path)
    if not path.is_file():
        raise InputError(path, "score file does not exist or is not a file")
    if judge_summary.is_judge_summary(path):
        return read_judge_verdicts(path)
    return read_score_file(path, column)
