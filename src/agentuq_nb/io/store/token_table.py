"""The Parquet token table: written in row groups as trajectories stream in, read by column;
and the same rows as a dataset partitioned by domain and task, for Dask and selective reads."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.common.naming import file_key
from agentuq_nb.io.atomic import atomic_path
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TOKEN_SCHEMA


class TokenTableWriter:
    """Append token tables (or any tables of ``schema``) to one Parquet file, published atomically on ``close()``.

    Small per-trajectory tables are buffered into row groups of ~``row_group_rows`` rows, so
    memory stays bounded by one row group however many trajectories or sidecars there are.
    With ``background=True`` row groups are encoded on a thread of their own (pyarrow releases
    the GIL) while the caller prepares the next; one row group is in flight at a time.
    """

    def __init__(self, path: str | os.PathLike, row_group_rows: int = 262_144, schema: pa.Schema = TOKEN_SCHEMA,
                 background: bool = False, metadata: dict | None = None):
        self.path = Path(path)
        self.row_group_rows = row_group_rows
        self._ctx = atomic_path(self.path)
        self._tmp = self._ctx.__enter__()
        # dictionary pages only for strings (token text, keys; log-probs are nearly all distinct) and
        # min/max statistics only for string and integer columns (what filters select on: task, role,
        # turn…): a third faster to write than pyarrow's defaults, for a file 8% larger
        strings = [f.name for f in schema if _is_string(f.type) or (pa.types.is_list(f.type) and _is_string(f.type.value_type))]
        keys = [f.name for f in schema if _is_string(f.type) or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type)]
        self._schema = schema
        if metadata:  # footer key-value metadata (a commit stamp)
            schema = schema.with_metadata({**(schema.metadata or {}), **metadata})
        self._writer = pq.ParquetWriter(self._tmp, schema, compression="snappy", use_dictionary=strings,
                                        write_statistics=keys)
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self.num_rows = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet") if background else None
        self._in_flight: Future | None = None
        self._closed = False

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        for f in self._schema:  # a table of an older version (a checkpoint resumed) lacks newer columns: null
            if f.name not in table.column_names and f.nullable:
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        self._buffer.append(table)
        self._buffered += table.num_rows
        self.num_rows += table.num_rows
        if self._buffered >= self.row_group_rows:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            table = pa.concat_tables(self._buffer)
            self._buffer, self._buffered = [], 0
            if self._executor is None:
                self._writer.write_table(table, row_group_size=self.row_group_rows)
            else:
                self._wait()
                self._in_flight = self._executor.submit(self._writer.write_table, table, row_group_size=self.row_group_rows)

    def _wait(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()  # a failed write raises here

    def close(self) -> None:
        """Write what is buffered and publish the file; a second call does nothing."""
        if self._closed:
            return
        try:
            self._flush()
            self._wait()
        except BaseException:
            self.abort()
            raise
        self._shutdown()
        self._writer.close()
        self._closed = True
        self._ctx.__exit__(None, None, None)

    def abort(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._shutdown()
        self._writer.close()
        self._ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def _shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def __enter__(self) -> "TokenTableWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def write_token_table(path: str | os.PathLike, table: pa.Table) -> None:
    with TokenTableWriter(path) as writer:
        writer.write(table.cast(TOKEN_SCHEMA))


def token_table_files(path: str | os.PathLike) -> list[Path]:
    """A token table file as given, or a run folder's token tables (:meth:`RunDir.token_tables`), checked."""
    path = Path(path)
    if path.is_file():
        return [path]
    run = RunDir(path)
    files = run.token_tables()
    run.verify(*files)
    return files


def read_token_table(path: str | os.PathLike, columns: list[str] | None = None, filters=None) -> pd.DataFrame:
    """Read (some columns of) a run's token tables as one pandas DataFrame."""
    dataset = ds.dataset([str(f) for f in token_table_files(path)], schema=TOKEN_SCHEMA, format="parquet")
    if isinstance(filters, list):  # DNF tuples as pandas/pyarrow.parquet take them
        filters = pq.filters_to_expression(filters)
    return dataset.to_table(columns=columns, filter=filters).to_pandas()


# ----------------------------------------------------------------------------- partitioned dataset
# The run's token tables again, as one Parquet dataset partitioned by domain and task (hive layout
# ``tokens_by_task/domain_key=<d>/task_key=<t>/<n>-<i>.parquet``), so that a reader that wants some tasks
# opens only their folders and a Dask job gets one partition per task. A folder is named by the
# :func:`~agentuq_nb.common.naming.file_key` of the value (a plain id is itself; any other - a NUL, a slash,
# 300 characters - a bounded name with a hash of the whole), and the files keep the ``domain`` and ``task_id``
# columns as they are: a value is never cut or changed by a file name. It is derived from the single files
# (which stay the run's primary tables) and rebuilt when they change; ``_sources.json`` records which files,
# sizes and mtimes it was built from, and the layout.

PARTITIONED_DIR = RunDir.relative("tokens_by_task")
PARTITION_KEYS = ["domain", "task_id"]
#: the folder levels: the file key of each of PARTITION_KEYS
FOLDER_KEYS = {"domain": "domain_key", "task_id": "task_key"}
HIVE_PARTITIONING = ds.partitioning(pa.schema([(FOLDER_KEYS[k], pa.string()) for k in PARTITION_KEYS]), flavor="hive")
_SOURCES_STAMP = "_sources.json"  # inside tokens_by_task/: which tables (sizes, mtimes) it was built from
LAYOUT = 2  # 1: folders named by the values themselves (cut at a NUL, too long for a file name)


def _sources_stamp(files: list[Path]) -> dict:
    return {"layout": LAYOUT,
            "sources": [{"name": f.name, "size": f.stat().st_size, "mtime_ns": f.stat().st_mtime_ns} for f in files]}


def _stored_stamp(root: Path) -> object:
    try:
        return read_limited_json(root / _SOURCES_STAMP, MAX_SMALL_JSON_BYTES, "partition stamp")
    except InputError:
        return None


def partition_token_tables(run_dir: str | os.PathLike) -> Path:
    """Write (or refresh) ``run_dir/tokens_by_task/`` from the run's token tables; return its path.

    Streams with pyarrow (bounded memory), keeps row order within a task (file ``<n>-<i>``:
    source table ``n`` in :func:`token_table_files` order, then write order ``i``), and
    publishes the folder atomically: a reader sees the old dataset or the complete new one.
    """
    run_dir = Path(run_dir)
    files = token_table_files(run_dir)
    root = RunDir(run_dir).folder("tokens_by_task")
    stamp = _sources_stamp(files)
    if os.path.isdir(root) and _stored_stamp(root) == stamp:
        return root
    with RunDir(run_dir).lock("partition token tables"):
        _write_partitions(run_dir, files, root, stamp)
    return root


def _keyed_batches(path: Path):
    """The record batches of a token table with the folder keys of each row (``file_key`` of its domain and task)."""
    for batch in ds.dataset(str(path), schema=TOKEN_SCHEMA, format="parquet").to_batches():
        for name in PARTITION_KEYS:
            values = batch.column(name)
            unique = pc.unique(values)
            keys = pa.array([None if v is None else file_key(v) for v in unique.to_pylist()], pa.string())
            batch = batch.append_column(FOLDER_KEYS[name], pc.take(keys, pc.index_in(values, unique)))
        yield batch


def _write_partitions(run_dir: Path, files: list[Path], root: Path, stamp: dict) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{PARTITIONED_DIR}.", dir=run_dir))
    schema = TOKEN_SCHEMA
    for name in PARTITION_KEYS:
        schema = schema.append(pa.field(FOLDER_KEYS[name], pa.string()))
    try:
        for n, f in enumerate(files):
            ds.write_dataset(_keyed_batches(f), tmp, schema=schema, format="parquet",
                             partitioning=HIVE_PARTITIONING, basename_template=f"{n:04d}-{{i}}.parquet",
                             existing_data_behavior="overwrite_or_ignore", preserve_order=True)
        (tmp / _SOURCES_STAMP).write_text(json.dumps(stamp))
        old = None
        if root.exists():  # swap: rename the old folder away, the new one in, then delete the old
            old = Path(tempfile.mkdtemp(prefix=f".{PARTITIONED_DIR}.old.", dir=run_dir))
            os.replace(root, old / PARTITIONED_DIR)
        os.replace(tmp, root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _file_order(path: Path) -> tuple[int, int]:
    source, part = path.stem.split("-")
    return int(source), int(part)


def _folder_filter(filters) -> ds.Expression | None:
    """The part of DNF ``filters`` that picks folders: equality and membership on domain/task_id, said on
    their folder keys (other conditions are applied to the rows when they are read)."""
    if not isinstance(filters, list) or not filters:
        return None
    clauses = filters if isinstance(filters[0], list) else [filters]
    ors = []
    for clause in clauses:
        ands = []
        for column, op, value in clause:
            if column not in FOLDER_KEYS or op not in ("=", "==", "in"):
                continue
            keys = [file_key(v) for v in (value if op == "in" else [value])]
            ands.append(pc.field(FOLDER_KEYS[column]).isin(keys))
        if not ands:
            return None  # a clause that any folder may satisfy
        expression = ands[0]
        for more in ands[1:]:
            expression = expression & more
        ors.append(expression)
    out = ors[0]
    for more in ors[1:]:
        out = out | more
    return out


def token_partitions(run_dir: str | os.PathLike, filters=None) -> list[list[Path]]:
    """The partitioned dataset's files, one list per (domain, task) folder in row order,
    keeping only the folders ``filters`` (DNF tuples; equality or ``in`` on domain/task_id) can match."""
    root = partition_token_tables(run_dir)
    dataset = ds.dataset(str(root), format="parquet", partitioning=HIVE_PARTITIONING)
    folders: dict[Path, list[Path]] = {}
    for fragment in dataset.get_fragments(filter=_folder_filter(filters)):
        path = Path(fragment.path)
        folders.setdefault(path.parent, []).append(path)
    return [sorted(folders[k], key=_file_order) for k in sorted(folders)]


def read_trajectory_tokens(run_dir: str | os.PathLike | RunDir, keys: tuple, scorer: str | None = "self") -> pd.DataFrame:
    """The token rows of the one trajectory ``keys`` = ``(domain, task_id, trial, seed)`` (of ``scorer``; None: every
    scorer), in message and token order; a missing seed matches a missing seed."""
    domain, task_id, trial, seed = keys
    filters = [("task_id", "=", str(task_id))] + ([("scorer", "=", scorer)] if scorer is not None else [])
    tokens = key_dtypes(read_token_table(RunDir.of(run_dir).path, filters=filters))
    same_seed = tokens["seed"].isna() if pd.isna(seed) else tokens["seed"] == seed
    mine = tokens[(tokens["domain"] == domain) & (tokens["trial"] == trial) & same_seed]
    return mine.sort_values(["message_idx", "token_idx"], kind="stable").reset_index(drop=True)


def read_token_partition(files: list[Path], columns: list[str] | None = None, filters=None) -> pd.DataFrame:
    """One (domain, task) folder of the partitioned dataset, typed as :func:`read_token_table` reads it."""
    dataset = ds.dataset([str(f) for f in files], schema=TOKEN_SCHEMA, format="parquet")
    if isinstance(filters, list):
        filters = pq.filters_to_expression(filters)
    return dataset.to_table(columns=columns, filter=filters).to_pandas()


def read_token_dataset(run_dir: str | os.PathLike, columns: list[str] | None = None, filters=None):
    """A run's token rows as a ``dask.dataframe``, one partition per (domain, task) folder.

    Only the folders ``filters`` can match are read, and only ``columns``. Strings keep
    pandas' default dtype (dask would convert them to ``string[pyarrow]``), so that results
    computed from it equal those computed from :func:`read_token_table`; build further
    expressions on it under the same ``dask.config.set({"dataframe.convert-string": False})``.
    """
    import dask
    import dask.dataframe as dd

    parts = token_partitions(run_dir, filters)
    if not parts:
        raise ValueError(f"{Path(run_dir) / PARTITIONED_DIR}: no token rows" + (f" match {filters!r}" if filters else ""))
    meta = TOKEN_SCHEMA.empty_table().select(columns or TOKEN_SCHEMA.names).to_pandas()
    with dask.config.set({"dataframe.convert-string": False}):
        return dd.from_map(read_token_partition, parts, columns=columns, filters=filters, meta=meta,
                           label="read-tokens", enforce_metadata=False)
