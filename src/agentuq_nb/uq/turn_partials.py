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

from agentuq_nb.io.rundir import RunDir, parquet_commit
from agentuq_nb.records.token_statistics import (
    TOKEN_STATISTICS,
    TOKEN_VALUES,
    TURN_COUNT,
    additive_values,
    extreme_statistics,
    token_values,
)
from agentuq_nb.records.tokens import TOKEN_SCHEMA, TRAJECTORY_KEYS

TURN_KEYS = TRAJECTORY_KEYS + ["scorer", "role", "turn_idx"]
ROLE_KEYS = TRAJECTORY_KEYS + ["scorer", "role"]
TURN_GROUP = TURN_KEYS + ["message_idx", "source"]
TOKEN_COLUMNS_READ = TURN_GROUP + list(dict.fromkeys(TOKEN_VALUES[v] for v in token_values()))


def observation_role(role: pa.Array, scorer: pa.Array) -> pa.Array:
    """User/tool rows scored by another model than their author are observations (AgentUQ)."""
    role = role.cast(pa.string())
    is_obs = pc.and_(pc.not_equal(scorer, "self"), pc.is_in(role, pa.array(["user", "tool"])))
    return pc.if_else(pc.fill_null(is_obs, False), pc.binary_join_element_wise("observation_", role, ""), role)


def token_partials(tokens: pa.Table | pa.RecordBatch | pd.DataFrame) -> pd.DataFrame:
    """Sums, counts, min and max per turn for one batch of token rows (see :func:`token_partials_table`)."""
    return token_partials_table(tokens).to_pandas()


def _token_value(tokens: pa.Table | pa.RecordBatch, value: str) -> np.ndarray:
    x = tokens.column(TOKEN_VALUES[value]).to_numpy(zero_copy_only=False).astype(np.float64)
    return -x if value == "nll" else x


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
    change = np.zeros(n, dtype=bool)
    change[:1] = True
    keys = {key: comparable_keys(tokens.column(key)) for key in TURN_GROUP}
    for column in keys.values() if n > 1 else ():
        # a run ends where any key differs from the row before (null = null)
        after, before = column.slice(1), column.slice(0, n - 1)
        differs = pc.fill_null(pc.not_equal(after, before), True).to_numpy(zero_copy_only=False)
        if column.null_count:
            differs &= ~pc.and_(pc.is_null(after), pc.is_null(before)).to_numpy(zero_copy_only=False)
        change[1:] |= differs
    starts = np.flatnonzero(change)
    values = {value: _token_value(tokens, value) for value in token_values()}
    first_rows = pa.array(starts, pa.int64())
    columns = {key: decoded(tokens.column(key).take(first_rows)) for key in TURN_GROUP}
    columns["role"] = observation_role(columns["role"], columns["scorer"])
    columns[TURN_COUNT] = np.diff(np.append(starts, n))

    def per_run(ufunc: np.ufunc, x: np.ndarray) -> np.ndarray:
        return ufunc.reduceat(x, starts) if n else x[:0]

    with np.errstate(invalid="ignore"):
        for stat in extreme_statistics():  # fmin/fmax skip NaN (null)
            columns[stat.name] = per_run(np.fmin if stat.reduce == "min" else np.fmax, values[stat.value])
    for value in additive_values():
        x = values[value]
        present = ~np.isnan(x)
        columns[f"sum_{value}"] = per_run(np.add, np.where(present, x, 0.0))
        columns[f"n_{value}"] = per_run(np.add, present.astype(np.int64))
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
    """Statistics from merged partials (``level``: ``turn`` or ``trajectory`` names the sums)."""
    out = merged.copy()
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
    return pd.read_parquet(stored)
