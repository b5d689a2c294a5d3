"""Mergeable per-turn partials of token rows: sums, counts, minima and maxima.

Which partials exist is read from the one table of token statistics
(:mod:`agentuq_nb.records.token_statistics`): ``sum_<value>``/``n_<value>`` for every token value a
mean or a sum reads, and one column per extreme statistic. The summaries (``uq.aggregation``) are
built from these, so they can be computed piecewise - per batch of a token table, per task on a
Dask cluster, or while ``extract`` writes the table - and merged by key: the merge of partials
equals the partials of the whole. ``extract`` streams those of ``tokens.parquet`` into
``turn_partials.parquet`` in the same commit as the table; ``aggregate`` merges them instead of
reading the table while both carry the same commit.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentuq_nb.io.store.rundir import RunDir, parquet_commit
from agentuq_nb.records.token_statistics import (
    NEGATED_VALUES,
    SPAN_COLUMN,
    SPAN_COUNTS,
    TOKEN_STATISTICS,
    TOKEN_VALUES,
    TURN_COUNT,
    VALUE_SPANS,
    additive_values,
    extreme_statistics,
    token_values,
)
from agentuq_nb.records.tokens import TOKEN_SCHEMA, TRAJECTORY_KEYS
from agentuq_nb.records.toolcall_spans import SPAN_LABELS

TURN_KEYS = TRAJECTORY_KEYS + ["scorer", "role", "turn_idx"]
ROLE_KEYS = TRAJECTORY_KEYS + ["scorer", "role"]
TURN_GROUP = TURN_KEYS + ["message_idx", "source"]
TOKEN_COLUMNS_READ = TURN_GROUP + list(dict.fromkeys(TOKEN_VALUES[v] for v in token_values())) + [SPAN_COLUMN]


def observation_role(role: pa.Array, scorer: pa.Array) -> pa.Array:
    """User/tool rows scored by another model than their author are observations (AgentUQ)."""
    role = role.cast(pa.string())
    is_obs = pc.and_(pc.not_equal(scorer, "self"), pc.is_in(role, pa.array(["user", "tool"])))
    return pc.if_else(pc.fill_null(is_obs, False), pc.binary_join_element_wise("observation_", role, ""), role)


def token_partials(tokens: pa.Table | pa.RecordBatch | pd.DataFrame) -> pd.DataFrame:
    """Sums, counts, min and max per turn for one batch of token rows (see :func:`token_partials_table`)."""
    return token_partials_table(tokens).to_pandas()


def span_codes(tokens: pa.Table | pa.RecordBatch) -> np.ndarray | None:
    """Each row's tool-call span as its code (``1 + SPAN_LABELS.index``, 0 for null); None when no row
    has one (a run without tool calls, or a table written before the column existed)."""
    if SPAN_COLUMN not in tokens.schema.names:
        return None
    column = tokens.column(SPAN_COLUMN)
    if column.null_count == len(column):
        return None
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    labels = pa.array(SPAN_LABELS, pa.string())
    if pa.types.is_dictionary(column.type):  # as aggregate reads it: look up the dictionary, then take
        lookup = pc.fill_null(pc.index_in(column.dictionary.cast(pa.string()), value_set=labels), -1)
        lookup = lookup.to_numpy(zero_copy_only=False).astype(np.int8) + 1
        indices = pc.fill_null(column.indices, 0).to_numpy(zero_copy_only=False)
        return np.where(column.is_valid().to_numpy(zero_copy_only=False), lookup[indices], 0).astype(np.int8)
    found = pc.fill_null(pc.index_in(column, value_set=labels), -1)
    return found.to_numpy(zero_copy_only=False).astype(np.int8) + 1


def token_value_arrays(tokens: pa.Table | pa.RecordBatch) -> dict[str, np.ndarray | None]:
    """Each token value of the statistics as one float per row (NaN: no value); None for a span value
    no row has (then its partials are known without a pass over the rows)."""
    columns: dict[str, np.ndarray] = {}
    codes = span_codes(tokens) if VALUE_SPANS else None
    out: dict[str, np.ndarray | None] = {}
    for value in token_values():
        name = TOKEN_VALUES[value]
        if name not in columns:
            columns[name] = tokens.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
        x = -columns[name] if value in NEGATED_VALUES else columns[name]
        span = VALUE_SPANS.get(value)
        if span is not None:
            in_span = None if codes is None else codes == SPAN_LABELS.index(span) + 1
            x = None if in_span is None or not in_span.any() else np.where(in_span, x, np.nan)
        out[value] = x
    return out


def key_runs(tokens: pa.Table | pa.RecordBatch, keys: list[str]) -> np.ndarray:
    """The first row of each run of rows with equal ``keys`` (null equals null)."""
    n = tokens.num_rows
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    for key in keys if n > 1 else ():
        column = comparable_keys(tokens.column(key))
        # a run ends where any key differs from the row before (null = null)
        after, before = column.slice(1), column.slice(0, n - 1)
        differs = pc.fill_null(pc.not_equal(after, before), True).to_numpy(zero_copy_only=False)
        if column.null_count:
            differs &= ~pc.and_(pc.is_null(after), pc.is_null(before)).to_numpy(zero_copy_only=False)
        change[1:] |= differs
    return np.flatnonzero(change)


def token_partials_table(tokens: pa.Table | pa.RecordBatch | pd.DataFrame) -> pa.Table:
    """Sums, counts, min and max per turn for one batch of token rows, as an Arrow table.

    Token rows of a turn lie next to each other (tables are written trajectory by trajectory,
    message by message), so the batch is cut into runs of equal keys and each value column
    is reduced per run with numpy; of the keys, only each run's first row is kept. A turn
    split over several runs (or batches) gets several partials, which ``merge_partials`` adds up.
    """
    if isinstance(tokens, pd.DataFrame):
        tokens = pa.Table.from_pandas(tokens, preserve_index=False)
    n = tokens.num_rows
    starts = key_runs(tokens, TURN_GROUP)
    values = token_value_arrays(tokens)
    first_rows = pa.array(starts, pa.int64())
    columns = {key: decoded(tokens.column(key).take(first_rows)) for key in TURN_GROUP}
    columns["role"] = observation_role(columns["role"], columns["scorer"])
    columns[TURN_COUNT] = np.diff(np.append(starts, n))

    def per_run(ufunc: np.ufunc, x: np.ndarray | None, empty: float) -> np.ndarray:
        if x is None:  # a value no row has: the reduction of nothing, per run
            return np.full(len(starts), empty, dtype=np.int64 if isinstance(empty, int) else np.float64)
        return ufunc.reduceat(x, starts) if n else x[:0]

    with np.errstate(invalid="ignore"):
        for stat in extreme_statistics():  # fmin/fmax skip NaN (null)
            columns[stat.name] = per_run(np.fmin if stat.reduce == "min" else np.fmax, values[stat.value], np.nan)
    for value in additive_values():
        x = values[value]
        present = None if x is None else ~np.isnan(x)
        columns[f"sum_{value}"] = per_run(np.add, None if x is None else np.where(present, x, 0.0), 0.0)
        columns[f"n_{value}"] = per_run(np.add, None if x is None else present.astype(np.int64), 0)
    return pa.table(columns)


def comparable_keys(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A key column as something ``not_equal`` compares: dictionary columns (as the token table is
    read) by their codes when the dictionary's values are distinct, else by value."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(column.type):
        if pc.count_distinct(column.dictionary).as_py() == len(column.dictionary):
            return column.indices
        return column.dictionary_decode()
    return column


def decoded(column: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


#: how each partial column merges
MERGE_RULES = {TURN_COUNT: "sum", "num_turns": "sum",
               **{f"{prefix}_{value}": "sum" for value in additive_values() for prefix in ("sum", "n")},
               **{stat.name: stat.reduce for stat in extreme_statistics()}}


def merge_partials(partials: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    agg = {column: rule for column, rule in MERGE_RULES.items() if column in partials}
    return partials.groupby(keys, sort=True, dropna=False, observed=True).agg(agg).reset_index()


def finalize_partials(merged: pd.DataFrame, level: str) -> pd.DataFrame:
    """Statistics from merged partials (``level``: ``turn`` or ``trajectory`` names the sums).

    ``merged`` is left as it was; the result shares its key columns (columns are only added or
    replaced here, never changed in place)."""
    out = merged.copy(deep=False)
    for value, count in SPAN_COUNTS.items():
        out[count] = out[f"n_{value}"]
    for stat in TOKEN_STATISTICS:
        if stat.reduce not in ("mean", "sum"):
            continue
        total, count = out[f"sum_{stat.value}"], out[f"n_{stat.value}"]
        name = stat.turn_column if level == "turn" else stat.name
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = total / count.where(count > 0) if stat.reduce == "mean" else total.where(count > 0)
    return out.drop(columns=[c for c in out.columns if c.startswith(("sum_", "n_"))])


PARTIALS_SCHEMA = token_partials_table(TOKEN_SCHEMA.empty_table()).schema


def stored_partials(run: RunDir, table_path) -> pd.DataFrame | None:
    """The partials ``extract`` stored with the token table at ``table_path``, or None when there are
    none or they are not of the same commit (then the summaries are computed from its rows)."""
    stored = run.file("turn_partials")
    if table_path != run.file("tokens") or not stored.is_file():
        return None
    commit = parquet_commit(stored)
    if commit is None or commit != parquet_commit(table_path):
        return None
    run.verify("turn_partials")
    if set(PARTIALS_SCHEMA.names) - set(pq.read_schema(stored).names):  # written before a statistic was added
        return None
    # each column freed once converted (self_destruct), and the decoded pages handed back: the read
    # then peaks near one copy of the table instead of three
    frame = pq.read_table(stored).to_pandas(self_destruct=True, split_blocks=True)
    pa.default_memory_pool().release_unused()
    return frame
