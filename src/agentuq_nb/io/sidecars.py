"""agentuq-compatible sidecar JSONL files: one token row per line, one file per trajectory.

Reading goes through DuckDB's JSON reader: one query parses many files on all cores and
keeps file and line order, which is what makes extraction of millions of token rows fast
(``benchmarks/bench_pipeline.py``). Only the columns of ``SIDECAR_SCHEMA`` are read; other
keys on a row (``recorded_at``, ``request_params``…) are skipped, missing keys are null, and
Python's ``NaN``/``Infinity`` literals are accepted (the validation in ``uq.token_metrics``
decides what to do with them).
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from agentuq_nb.common.naming import slug
from agentuq_nb.io.atomic import atomic_open
from agentuq_nb.io.errors import InputError
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


class SidecarReader:
    """Parses sidecar files with DuckDB, one query at a time (a lock guards the connection).

    ``threads`` defaults to every core: DuckDB splits the files between them.
    """

    def __init__(self, threads: int | None = None):
        import duckdb  # imported here: only extraction needs it

        self._con = duckdb.connect(config={"threads": threads or os.cpu_count() or 1,
                                           # offline: never fetch an extension at run time
                                           "autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False})
        self._lock = threading.Lock()
        self._error = duckdb.Error

    def read(self, paths: Sequence[Path]) -> list[pa.Table]:
        """One table per path (``SIDECAR_SCHEMA``, rows in file order), parsed in one query."""
        paths = [Path(p) for p in paths]
        if len(set(paths)) != len(paths):
            raise ValueError("SidecarReader.read: each path once")
        if not paths:
            return []
        query = "SELECT * FROM read_ndjson($files, columns=$columns, filename=true)"
        with self._lock, _glob_safe_names(paths) as names:  # a DuckDB connection runs one query at a time
            try:
                table = self._con.sql(query, params={"files": names, "columns": _SIDECAR_COLUMNS}).to_arrow_table()
            except self._error as err:
                raise _sidecar_error(paths, names, err) from err
        files = table.column("filename")
        table = table.drop_columns(["filename"]).cast(SIDECAR_SCHEMA)
        if len(paths) == 1:
            return [table]
        # rows come file by file in the order given: cut the table at the file boundaries (zero-copy slices)
        counts = pc.value_counts(files)
        per_file = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))
        out, start = [], 0
        for name in names:
            n = per_file.get(name, 0)
            out.append(table.slice(start, n))
            start += n
        return out

    def close(self) -> None:
        self._con.close()


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
    """DuckDB names the file and line of a parse error; say it as our errors do."""
    message = str(err)
    match = re.search(r'in file "([^"]+)"', message)
    by_name = dict(zip(names, paths))
    if match:
        path = by_name.get(match.group(1), Path(match.group(1)))
    else:
        path = paths[0] if len(paths) == 1 else Path(os.path.commonpath([str(p) for p in paths]))
    what = message.split("\n")[0].replace("Invalid Input Error: ", "")
    what = re.sub(r'\s*in file "[^"]+",?', "", what)
    return InputError(path, f"sidecar is not valid JSONL: {what}")


def sidecar_name(domain: str, task_id: str, trial: int | None, seed: int | None) -> str:
    """agentuq's file name: ``logprobs_{domain}_{task_id}_trial{t}_seed{s}.jsonl``."""
    trial_s = f"trial{trial}" if trial is not None else "trialNA"
    seed_s = f"seed{seed}" if seed is not None else "seedNA"
    return f"logprobs_{slug(domain)}_{slug(task_id)}_{trial_s}_{seed_s}.jsonl"


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
