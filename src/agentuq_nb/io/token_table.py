"""The Parquet token table: written in row groups as trajectories stream in, read by column."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from agentuq_nb.io.atomic import atomic_path
from agentuq_nb.records.tokens import TOKEN_SCHEMA

TOKENS_FILE = "tokens.parquet"


class TokenTableWriter:
    """Append token tables to one Parquet file, published atomically on ``close()``.

    Small per-trajectory tables are buffered into row groups of ~``row_group_rows`` rows, so
    memory stays bounded by one row group however many trajectories or sidecars there are.
    """

    def __init__(self, path: str | os.PathLike, row_group_rows: int = 262_144):
        self.path = Path(path)
        self.row_group_rows = row_group_rows
        self._ctx = atomic_path(self.path)
        self._tmp = self._ctx.__enter__()
        self._writer = pq.ParquetWriter(self._tmp, TOKEN_SCHEMA, compression="snappy")
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self.num_rows = 0

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._buffer.append(table)
        self._buffered += table.num_rows
        self.num_rows += table.num_rows
        if self._buffered >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(pa.concat_tables(self._buffer), row_group_size=self.row_group_rows)
            self._buffer, self._buffered = [], 0

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        self._writer.close()
        self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def __enter__(self) -> "TokenTableWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_token_table(path: str | os.PathLike, table: pa.Table) -> None:
    with TokenTableWriter(path) as writer:
        writer.write(table.cast(TOKEN_SCHEMA))


def token_table_files(path: str | os.PathLike) -> list[Path]:
    """A run's token tables: ``tokens.parquet`` (extracted or generated rows) and any
    ``tokens.<name>.parquet`` added later (e.g. observation scoring), in a stable order."""
    path = Path(path)
    if path.is_file():
        return [path]
    files = ([path / TOKENS_FILE] if (path / TOKENS_FILE).exists() else []) + sorted(path.glob("tokens.*.parquet"))
    if not files:
        raise FileNotFoundError(f"{path}: no token table (tokens.parquet); run 'agentuq-nb extract' first")
    return files


def read_token_table(path: str | os.PathLike, columns: list[str] | None = None, filters=None) -> pd.DataFrame:
    """Read (some columns of) a run's token tables as one pandas DataFrame."""
    dataset = ds.dataset([str(f) for f in token_table_files(path)], schema=TOKEN_SCHEMA, format="parquet")
    if isinstance(filters, list):  # DNF tuples as pandas/pyarrow.parquet take them
        filters = pq.filters_to_expression(filters)
    return dataset.to_table(columns=columns, filter=filters).to_pandas()
