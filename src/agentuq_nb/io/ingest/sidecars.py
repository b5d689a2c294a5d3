"""agentuq-compatible sidecar JSONL files: one token row per line, one file per trajectory.

Reading has two paths that give the same table. The compiled scanner (:mod:`agentuq_nb.io.ingest.sidecar_scan`,
C) reads the rows agentuq and this project write - standard JSON, each column's value of its own type -
at a fraction of any JSON reader's cost (``benchmarks/bench_pipeline.py``); whatever else a file holds
makes it stop, and the files are parsed by DuckDB's JSON reader, which accepts more (it casts values,
skips a byte-order mark, allows trailing commas) and names the file and line of what it refuses. Only
the columns of ``SIDECAR_SCHEMA`` are read; other keys on a row (``recorded_at``, ``request_params``…)
are skipped, missing keys are null, and Python's ``NaN``/``Infinity`` literals are accepted (the
validation in ``uq.token_metrics`` decides what to do with them).
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentuq_nb.common.limits import MAX_SIDECAR_LINE_BYTES
from agentuq_nb.common.naming import file_key
from agentuq_nb.io.atomic import atomic_open
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.records.tokens import TOKEN_SCHEMA

# Columns read from a sidecar (typed as in the token-row contract); anything else on a row is ignored.
SIDECAR_SCHEMA = pa.schema([TOKEN_SCHEMA.field(name) for name in (
    "message_timestamp", "model", "role", "turn_idx", "message_idx", "token_idx", "token", "chosen_logprob",
    "topk_tokens", "topk_logprobs", "full_entropy", "domain", "task_id", "trial", "seed", "scorer", "source",
)])
_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.int64(): "BIGINT", pa.float64(): "DOUBLE",
                 pa.list_(pa.string()): "VARCHAR[]", pa.list_(pa.float64()): "DOUBLE[]"}
_SIDECAR_COLUMNS = {f.name: _DUCKDB_TYPES[f.type] for f in SIDECAR_SCHEMA}
_GLOB = re.compile(r"[*?\[{]")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# the columns are given, so nothing is sampled to detect them: by default DuckDB opens 32 files for that when
# the query is bound (~10 ms a query, on the parse thread: 2 s at 10^7 rows)
ROWS_QUERY = "SELECT * FROM read_ndjson($files, columns=$columns, maximum_sample_files=1)"
JOINED_FILE_BYTES = 4 << 20  # sidecar bytes per temporary file DuckDB parses (it reads each file whole)
#: file names DuckDB reads as compressed (``compression='auto'`` goes by the name)
COMPRESSED_SUFFIXES = {".gz", ".zst", ".zstd"}
try:
    from agentuq_nb.io.ingest import sidecar_scan  # compiled by the install (setup.py)
except ImportError:  # only where its build is optional (Windows): DuckDB reads every sidecar
    if os.name != "nt":
        raise
    sidecar_scan = None
_SCANNER_TYPES = {"string": pa.string(), "int64": pa.int64(), "double": pa.float64(),
                  "list<string>": pa.list_(pa.string()), "list<double>": pa.list_(pa.float64())}
if sidecar_scan is not None and [(name, _SCANNER_TYPES[kind]) for name, kind in sidecar_scan.COLUMNS] != \
        list(zip(SIDECAR_SCHEMA.names, SIDECAR_SCHEMA.types)):
    raise ImportError("agentuq_nb.io.ingest.sidecar_scan reads other columns than SIDECAR_SCHEMA: "
                      "rebuild it (pip install -e .)")


def _validity(mask, n: int) -> tuple[pa.Buffer | None, int]:
    """A scanner's byte-per-row validity as an Arrow bitmap and its null count (None: no null)."""
    if mask is None:
        return None, 0
    valid = np.frombuffer(mask, np.uint8)
    return pa.py_buffer(np.packbits(valid, bitorder="little")), n - int(np.count_nonzero(valid))


def _scanned_array(kind: pa.DataType, n: int, buffers: tuple) -> pa.Array:
    """One column of the scanner's output as an Arrow array (no copy of its values)."""
    bitmap, nulls = _validity(buffers[0], n)
    if not pa.types.is_list(kind):
        return pa.Array.from_buffers(kind, n, [bitmap, *map(pa.py_buffer, buffers[1:])], null_count=nulls)
    offsets = pa.py_buffer(buffers[1])
    elements = int(np.frombuffer(offsets, np.int32)[-1])
    child = _scanned_array(kind.value_type, elements, buffers[2:])
    return pa.Array.from_buffers(kind, n, [bitmap, offsets], null_count=nulls, children=[child])


def scan_sidecars(paths: Sequence[Path]) -> tuple[pa.Table, np.ndarray, np.ndarray] | None:
    """The files' rows read by the compiled scanner, in file order (``SIDECAR_SCHEMA``), with each file's
    rows and lines; None when a file holds something beyond the scanner's scope (see the module's text), or
    where the scanner is not built."""
    if sidecar_scan is None:
        return None
    try:
        rows, lines, columns = sidecar_scan.scan([os.fsencode(p) for p in paths])
    except sidecar_scan.Unsupported:
        return None
    rows, lines = np.frombuffer(rows, np.int64), np.frombuffer(lines, np.int64)
    n = int(rows.sum())
    arrays = [_scanned_array(kind, n, buffers) for kind, buffers in zip(SIDECAR_SCHEMA.types, columns)]
    return pa.Table.from_arrays(arrays, schema=SIDECAR_SCHEMA), rows, lines


def release_scanner_memory() -> None:
    """Hand the memory of the scanner's freed blocks back to the system (glibc keeps freed heap memory
    otherwise): after ``extract``, the steps that follow in one process (``analyze``) start lower
    (10⁷ rows: peak 405 -> 347 MiB)."""
    if sidecar_scan is not None:
        sidecar_scan.trim()


class SidecarReader:
    """Parses sidecar files: with the compiled scanner where it can, else with DuckDB, one query at a
    time (a lock guards the connection, opened when first needed).

    ``scanner=False`` always takes DuckDB (tests compare the two); ``threads`` (DuckDB's) defaults to every
    core. For DuckDB the files of a query are first copied one after the other into a few temporary files
    (``JOINED_FILE_BYTES`` each), which DuckDB splits between its threads: DuckDB spends ~0.5 ms of CPU on
    each file it opens (at one sidecar per message, 10⁷ rows in 200k files, that was 5x the parse itself).
    Every line that is not blank is one row (DuckDB refuses a line holding an array or two objects), so
    the files' line counts cut the rows by file; a batch with a blank line, or one DuckDB refuses, is
    parsed again file by file, which places the rows by DuckDB's ``file_index`` and names the bad file.
    """

    def __init__(self, threads: int | None = None, scanner: bool = True):
        self.scanner = scanner
        self._threads = threads or os.cpu_count() or 1
        self._con = None
        self._lock = threading.Lock()

    @property
    def _duckdb(self):
        """The DuckDB connection (opened on first use; the caller holds the lock)."""
        if self._con is None:
            import duckdb  # imported here: only files beyond the scanner need it

            self._con = duckdb.connect(config={"threads": self._threads,
                                               # offline: never fetch an extension at run time
                                               "autoinstall_known_extensions": False,
                                               "autoload_known_extensions": False})
        return self._con

    def read(self, paths: Sequence[Path], warnings: InputWarnings | None = None) -> list[pa.Table]:
        """One table per path (``SIDECAR_SCHEMA``, rows in file order), parsed in one query.

        With ``warnings``, each file is also checked (:func:`check_sidecar`): empty files, blank lines,
        rows without role or token are counted there; a row with no token data at all is an error."""
        paths = [Path(p) for p in paths]
        if len(set(paths)) != len(paths):
            raise ValueError("SidecarReader.read: each path once")
        if not paths:
            return []
        scanned = scan_sidecars(paths) if self.scanner and not _compressed(paths) else None
        if scanned is not None:
            table, rows, lines = scanned
        else:
            with self._lock:  # a DuckDB connection runs one query at a time
                table, lines = self._read_concatenated(paths)
                if table is not None:
                    rows = lines
                else:  # the line counts, when the copy got them, still tell flagged_files which files have blank lines
                    table = self._read_by_file(paths)
                    rows = np.bincount(table.column("file_index").to_numpy().astype(np.int64), minlength=len(paths))
                    table = table.drop_columns(["file_index"])
            table = table.cast(SIDECAR_SCHEMA)
        # rows come file by file in the order given: cut the table at the file boundaries (zero-copy slices)
        starts = np.concatenate([[0], np.cumsum(rows)])
        out = [table.slice(int(starts[i]), int(rows[i])) for i in range(len(paths))]
        if warnings is not None:
            # the checks of check_sidecar, on the whole table at once; the files they flag are checked one by one
            for i in np.flatnonzero(flagged_files(paths, table, starts, lines)):
                check_sidecar(paths[i], out[i], warnings)
        return out

    def _read_concatenated(self, paths: Sequence[Path]) -> tuple[pa.Table | None, np.ndarray | None]:
        """The files' rows parsed from a few temporary files holding them one after the other, and each file's
        line count. The table is None when that cannot place the rows: a blank line (the counts are then
        still returned), a compressed file, or bytes DuckDB refuses (then said file by file)."""
        if _compressed(paths):  # DuckDB decompresses by file name
            return None, None
        lines = np.zeros(len(paths), dtype=np.int64)
        joined: list[str] = []
        out = None
        try:
            for i, path in enumerate(paths):
                # DuckDB holds each file it parses whole: a temporary file is closed at JOINED_FILE_BYTES, so
                # that a batch costs no more memory than when its files are parsed one by one
                if out is None or os.lseek(out, 0, os.SEEK_CUR) >= JOINED_FILE_BYTES:
                    if out is not None:
                        os.close(out)
                        out = None
                    out, name = tempfile.mkstemp(prefix="agentuq_sidecars_", suffix=".jsonl")
                    joined.append(name)
                lines[i] = _copy_counting_lines(path, out)
            os.close(out)
            out = None
            table = self._duckdb.sql(ROWS_QUERY, params={"files": joined, "columns": _SIDECAR_COLUMNS}).to_arrow_table()
        except (OSError, _duckdb_error()):
            return None, None
        finally:
            if out is not None:
                os.close(out)
            for name in joined:
                os.unlink(name)
        return (table, lines) if table.num_rows == lines.sum() else (None, lines)

    def _read_by_file(self, paths: Sequence[Path]) -> pa.Table:
        """The files' rows with DuckDB's ``file_index`` (the file's position in ``paths``)."""
        with _glob_safe_names(paths) as names:
            try:
                return self._duckdb.sql(ROWS_QUERY.replace("SELECT *", "SELECT *, file_index"),
                                        params={"files": names, "columns": _SIDECAR_COLUMNS}).to_arrow_table()
            except _duckdb_error() as err:
                raise _sidecar_error(paths, names, err) from err

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _compressed(paths: Sequence[Path]) -> bool:
    return any(p.suffix.lower() in COMPRESSED_SUFFIXES for p in paths)


def _duckdb_error() -> type[Exception]:
    import duckdb

    return duckdb.Error


@contextmanager
def _glob_safe_names(paths: Sequence[Path]):
    """The names to give DuckDB: the paths themselves, except that a path with a glob character
    (DuckDB expands ``* ? [``, with no escape) is given as a plain-named link to it."""
    if not any(_GLOB.search(str(p)) for p in paths):
        yield [str(p) for p in paths]
        return
    with tempfile.TemporaryDirectory(prefix="agentuq_sidecars_") as tmp:
        names = []
        for i, p in enumerate(paths):
            if _GLOB.search(str(p)):
                link = Path(tmp) / f"{i}.jsonl"
                link.symlink_to(Path(p).resolve())
                names.append(str(link))
            else:
                names.append(str(p))
        yield names


def _sidecar_error(paths: Sequence[Path], names: Sequence[str], err: Exception) -> InputError:
    """Say a parse error as our errors do: the file, and the line found by reading it again.

    DuckDB names the file, but its line numbers skip blank lines and are off by one for syntax
    errors, so the line is located here (1-based, blank lines counted): the first line that is not
    JSON, not an object, or has a value of the wrong type for a sidecar column."""
    message = str(err)
    match = re.search(r'(?:in|while reading) file "([^"]+)"', message)  # DuckDB words it both ways
    by_name = dict(zip(names, paths))
    named = by_name.get(match.group(1), Path(match.group(1))) if match else None
    too_long = "maximum_object_size" in message  # DuckDB stops at a line past its object size: name that line
    for path in [named] if named is not None else paths:
        try:
            found = first_bad_line(path, long_lines_only=too_long)
        except OSError as cannot:
            return InputError(path, f"sidecar cannot be read: {cannot.strerror or cannot}")
        if found is not None:
            line, what = found
            return InputError(path, f"sidecar is not valid JSONL: {what}", f"line {line}")
    path = named if named is not None else (paths[0] if len(paths) == 1 else Path(os.path.commonpath([str(p) for p in paths])))
    what = message.split("\n")[0].replace("Invalid Input Error: ", "")
    what = re.sub(r'\s*(?:in|while reading) file "[^"]+",?', "", what)
    what = re.sub(r"\s*(at byte \d+ )?in line \d+", "", what)  # DuckDB's line count is not the file's
    return InputError(path, f"sidecar is not valid JSONL: {what}")


def _is_number(value: Any, integer: bool = False) -> bool:
    """A JSON number (or a string DuckDB casts to one), integral if ``integer``."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    return not integer or float(value).is_integer()


def _wrong_type(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be read into sidecar column ``key`` (None: it can)."""
    kind = SIDECAR_SCHEMA.field(key).type
    if value is None:
        return None
    if pa.types.is_list(kind):
        if not isinstance(value, list):
            return f"'{key}' is {type(value).__name__}, expected a list"
        if pa.types.is_floating(kind.value_type) and not all(v is None or _is_number(v) for v in value):
            return f"'{key}' holds a value that is not a number"
        return None
    if pa.types.is_integer(kind):
        if not _is_number(value, integer=True):
            return f"'{key}' is {value!r}, expected an integer"
        if not INT64_MIN <= (value if isinstance(value, int) else int(float(value))) <= INT64_MAX:
            return f"'{key}' is {value!r}, outside the range of a 64-bit integer"
    if pa.types.is_floating(kind) and not _is_number(value):
        return f"'{key}' is {value!r}, expected a number"
    if pa.types.is_string(kind) and isinstance(value, (list, dict)):
        return f"'{key}' is a {type(value).__name__}, expected a string"
    return None


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key '{key}'")
        seen[key] = value
    return seen


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(1-based line number, line) of every line of a file."""
    with open(path, "rb") as fh:
        yield from enumerate(fh, start=1)


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The non-blank lines (what DuckDB makes rows of), numbered as in the file."""
    return ((number, line) for number, line in _numbered_lines(path) if line.strip())


def first_bad_line(path: Path, long_lines_only: bool = False) -> tuple[int, str] | None:
    """The first line of a sidecar that cannot be a token row, and why (None when every line can);
    ``long_lines_only``: the first line longer than :data:`~agentuq_nb.common.limits.MAX_SIDECAR_LINE_BYTES`."""
    for number, line in _lines(path):
        if len(line) > MAX_SIDECAR_LINE_BYTES:
            return number, (f"the line is {len(line):,} bytes, more than the {MAX_SIDECAR_LINE_BYTES:,} a sidecar row "
                            "may have (one token row is a few hundred bytes)")
        if long_lines_only:
            continue
        try:
            row = json.loads(line, object_pairs_hook=_no_duplicate_keys)
        except UnicodeDecodeError as err:
            return number, f"not UTF-8 text ({err.reason})"
        except json.JSONDecodeError as err:
            return number, f"not valid JSON ({err.msg} at column {err.colno})"
        except ValueError as err:  # a duplicate key
            return number, f"not valid JSON ({err})"
        except RecursionError:
            return number, "a value is nested too deeply (arrays in arrays, objects in objects) to be a token row"
        if not isinstance(row, dict):
            return number, f"a JSON {type(row).__name__}, not an object"
        surrogate = _lone_surrogate(row)
        if surrogate is not None:
            return number, f"a string holds a lone surrogate ({surrogate}): not valid Unicode text"
        for key in SIDECAR_SCHEMA.names:
            problem = _wrong_type(key, row.get(key))
            if problem is not None:
                return number, problem
    return None


def _lone_surrogate(row: dict) -> str | None:
    """The first lone UTF-16 surrogate (``\\ud800``…) in the strings of a parsed row, as an escape; None if none."""
    try:
        json.dumps(row, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as err:
        return f"\\u{ord(err.object[err.start]):04x}"
    except RecursionError:
        return None
    return None


def line_of_row(path: Path, row: int) -> int:
    """The 1-based line number of the ``row``-th (0-based) row of a sidecar, blank lines counted."""
    for i, (number, _) in enumerate(_lines(path)):
        if i == row:
            return number
    raise IndexError(f"{path} has no row {row}")


def line_count(path: Path) -> int:
    """Lines in a file (a last line without a newline counts); read in blocks, cheap next to parsing."""
    return _copy_counting_lines(path, None)


def _copy_counting_lines(path: Path, out: int | None) -> int:
    """The lines of ``path`` (a last line without a newline counts), its bytes written to the file descriptor
    ``out`` (if given) with a newline after a last line that lacks one. Plain ``os`` calls: at one sidecar per
    message this runs 200k times for 10⁷ rows, where a Python file object's extra system calls add up."""
    count, last = 0, b"\n"
    fd = os.open(path, os.O_RDONLY)
    try:
        while block := os.read(fd, 1 << 20):
            # bytes.count for a small block, numpy (several times faster, without the GIL) for a large one
            count += block.count(b"\n") if len(block) < 1 << 16 else int(np.count_nonzero(np.frombuffer(block, np.uint8) == 10))
            last = block[-1:]
            if out is not None:
                _write_all(out, block)
    finally:
        os.close(fd)
    if last != b"\n":
        count += 1
        if out is not None:
            _write_all(out, b"\n")
    return count


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def blank(strings: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """Null, empty or whitespace only, per value (a test, no trimmed copy of the strings)."""
    return pc.fill_null(pc.or_(pc.equal(pc.binary_length(strings), 0), pc.utf8_is_space(strings)), True)


def no_token_data(table: pa.Table) -> pa.ChunkedArray:
    """Rows with neither token, chosen_logprob nor topk_logprobs (a ``null`` or ``{}`` line)."""
    return pc.and_kleene(pc.and_kleene(table.column("token").is_null(), table.column("chosen_logprob").is_null()),
                         table.column("topk_logprobs").is_null())


def flagged_files(paths: Sequence[Path], table: pa.Table, starts: np.ndarray, lines: np.ndarray | None = None) -> np.ndarray:
    """Which of the files parsed into ``table`` (file ``i``'s rows at ``starts[i]:starts[i + 1]``; ``lines[i]``
    lines, counted here if not given) need :func:`check_sidecar` to say something: no rows, blank lines, or
    rows without token data, role or token."""
    rows = np.diff(starts)
    token_null = table.column("token").is_null()
    bad = pc.or_(pc.or_(no_token_data(table), blank(table.column("role"))), token_null).to_numpy(zero_copy_only=False)
    bad_so_far = np.concatenate([[0], np.cumsum(bad)])
    flagged = (rows == 0) | (bad_so_far[starts[1:]] > bad_so_far[starts[:-1]])
    if lines is not None:
        return flagged | (lines != rows)
    for i in np.flatnonzero(~flagged):
        flagged[i] = line_count(paths[i]) != rows[i]
    return flagged


def check_sidecar(path: Path, table: pa.Table, warnings: InputWarnings) -> None:
    """Count what a parsed sidecar (``table``, its rows in file order) lost or lacks, naming the first case.

    An empty file, blank lines (DuckDB skips them), rows without ``role`` (their message's role is
    used) or ``token`` are counted; a row with no token data at all (a ``null`` or ``{}`` line) cannot
    be placed or measured and is an error."""
    if table.num_rows == 0 and path.stat().st_size == 0:
        warnings.add("sidecar_files_empty", str(path))
        return
    blank_lines = line_count(path) - table.num_rows
    if blank_lines > 0:
        first = next((number for number, line in _numbered_lines(path) if not line.strip()), None)
        warnings.add("sidecar_blank_lines", f"{path} line {first}" if first else str(path), blank_lines)
    empty = no_token_data(table)
    if pc.any(empty).as_py():
        row = int(pc.index(empty, True).as_py())
        raise InputError(path, "sidecar row has no token data (no token, chosen_logprob or topk_logprobs): "
                         "a null or empty line cannot be placed", f"line {line_of_row(path, row)}")
    for kind, missing in (("sidecar_rows_without_role", blank(table.column("role"))),
                          ("sidecar_rows_without_token", table.column("token").is_null())):
        count = int(pc.sum(missing).as_py() or 0)
        if count:
            row = int(pc.index(missing, True).as_py())
            warnings.add(kind, f"{path} line {line_of_row(path, row)}", count)


def sidecar_name(domain: str, task_id: str, trial: int | None, seed: int | None) -> str:
    """agentuq's file name: ``logprobs_{domain}_{task_id}_trial{t}_seed{s}.jsonl``."""
    trial_s = f"trial{trial}" if trial is not None else "trialNA"
    seed_s = f"seed{seed}" if seed is not None else "seedNA"
    return f"logprobs_{file_key(domain)}_{file_key(task_id)}_{trial_s}_{seed_s}.jsonl"


def trajectory_table_name(domain: str, task_id: str, trial: int | None, seed: int | None) -> str:
    """A per-trajectory checkpoint table's file name (``….parquet``), keyed like the trajectory's sidecar."""
    return sidecar_name(domain, task_id, trial, seed).removesuffix(".jsonl") + ".parquet"


def _jsonable(value: Any) -> Any:
    # NaN/inf are not JSON; agentuq writes null for a missing value, so do we.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_sidecar(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write token rows to ``path`` atomically; returns the number of rows written."""
    n = 0
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False))
            fh.write("\n")
            n += 1
    return n
