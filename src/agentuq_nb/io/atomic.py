"""Atomic writes: a file is either its old content or its complete new content.

Every writer in the toolkit goes through here so that a run killed at any
moment never leaves a half-written results file, sidecar or table behind.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# mkstemp creates files readable by their owner only; a published file gets the permissions
# open() would give it (read once at import: os.umask can only be read by setting it)
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def fsync_path(path: str | os.PathLike, directory: bool = False) -> None:
    """Flush ``path`` (a file, or with ``directory`` a folder: the renames made in it) to disk."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.fchmod(fd, 0o666 & ~_UMASK)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb") as fh:  # flush to disk before the rename makes it visible
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    if "b" in mode:
        encoding = None
    with atomic_path(path) as tmp, open(tmp, mode, encoding=encoding) as fh:
        yield fh


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as fh:
        fh.write(text)


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    with atomic_open(path, "w") as fh:
        json.dump(obj, fh, indent=indent, ensure_ascii=False, allow_nan=False)
        fh.write("\n")


def atomic_write_with(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Let ``write(tmp_path)`` produce the file (e.g. ``df.to_parquet``), then publish it."""
    with atomic_path(path) as tmp:
        write(tmp)


def json_ready(obj):
    """``obj`` with every non-finite float as None (the run's JSON files refuse NaN)."""
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    if isinstance(obj, (float, np.floating)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def csv_writer(df: pd.DataFrame | pa.Table):
    """``write(path)`` for a table as CSV (Arrow's writer): what a commit's ``write_with`` takes."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    # Arrow's CSV writer: the same text as pandas' to_csv for these columns, 6x faster
    table = df if isinstance(df, pa.Table) else pa.Table.from_pandas(df, preserve_index=False)
    return lambda path: pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="needed"))
