"""Mergeable per-turn partials of token rows: sums, counts, minima and maxima.

The summaries (``uq.aggregation``) are built from these, so they can be computed piecewise —
per batch of a token table, per task on a Dask cluster, or while ``extract`` writes the table
(heavy statistics computed once and shared) — and merged by key: the merge of partials equals
the partials of the whole. ``extract`` streams those of ``tokens.parquet`` batch by batch into
``turn_partials.parquet``, whose footer names the size and modification time of the table they
describe; ``aggregate`` merges them instead of reading the table, while the table is unchanged.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from agentuq_nb.records.tokens import TOKEN_SCHEMA, TRAJECTORY_KEYS

TURN_KEYS = TRAJECTORY_KEYS + ["scorer", "role", "turn_idx"]
ROLE_KEYS = TRAJECTORY_KEYS + ["scorer", "role"]
TURN_GROUP = TURN_KEYS + ["message_idx", "source"]
TOKEN_COLUMNS_READ = TURN_GROUP + ["chosen_logprob", "chosen_prob", "topk_entropy", "normalized_entropy", "full_entropy"]
# value column → name of its mean in the summaries
MEANS = {"nll": "avg_token_nll", "topk_entropy": "mean_topk_entropy",
         "normalized_entropy": "mean_normalized_entropy", "full_entropy": "mean_full_entropy"}
PARTIALS_FILE = "turn_partials.parquet"
_STAMP_KEY = "agentuq_nb.token_table"


def observation_role(role: pa.Array, scorer: pa.Array) -> pa.Array:
    """User/tool rows scored by another model than their author are observations (AgentUQ)."""
    role = role.cast(pa.string())
    is_obs = pc.and_(pc.not_equal(scorer, "self"), pc.is_in(role, pa.array(["user", "tool"])))
    return pc.if_else(pc.fill_null(is_obs, False), pc.binary_join_element_wise("observation_", role, ""), role)


def token_partials(tokens: pa.Table | pa.RecordBatch | pd.DataFrame) -> pd.DataFrame:
    """Sums, counts, min and max per turn for one batch of token rows (see :func:`token_partials_table`)."""
    return token_partials_table(tokens).to_pandas()


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
    values = {name: tokens.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
              for name in ("chosen_logprob", "chosen_prob", "topk_entropy", "normalized_entropy", "full_entropy")}
    nll = -values.pop("chosen_logprob")
    first_rows = pa.array(starts, pa.int64())
    columns = {key: decoded(tokens.column(key).take(first_rows)) for key in TURN_GROUP}
    columns["role"] = observation_role(columns["role"], columns["scorer"])
    columns["num_tokens"] = np.diff(np.append(starts, n))

    def per_run(ufunc: np.ufunc, x: np.ndarray) -> np.ndarray:
        return ufunc.reduceat(x, starts) if n else x[:0]

    with np.errstate(invalid="ignore"):
        columns["min_chosen_prob"] = per_run(np.fmin, values["chosen_prob"])  # fmin/fmax skip NaN (null)
        columns["max_token_nll"] = per_run(np.fmax, nll)
    for col, x in (("nll", nll), ("topk_entropy", values["topk_entropy"]),
                   ("normalized_entropy", values["normalized_entropy"]), ("full_entropy", values["full_entropy"])):
        present = ~np.isnan(x)
        columns[f"sum_{col}"] = per_run(np.add, np.where(present, x, 0.0))
        columns[f"n_{col}"] = per_run(np.add, present.astype(np.int64))
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


def merge_partials(partials: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    agg = {c: "sum" for c in partials.columns if c.startswith(("sum_", "n_")) or c == "num_tokens"}
    agg.update(min_chosen_prob="min", max_token_nll="max")
    if "num_turns" in partials:
        agg["num_turns"] = "sum"
    return partials.groupby(keys, sort=True, dropna=False, observed=True).agg(agg).reset_index()


PARTIALS_SCHEMA = token_partials_table(TOKEN_SCHEMA.empty_table()).schema


def table_stamp(table_path: str | os.PathLike) -> dict[str, str]:
    """Footer metadata saying which token table (name, size, modification time) partials describe."""
    stat = Path(table_path).stat()
    return {_STAMP_KEY: json.dumps({"name": Path(table_path).name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})}


def read_stored_partials(table_path: str | os.PathLike) -> pd.DataFrame | None:
    """The partials ``extract`` stored for the token table at ``table_path``, or None when there are
    none or the table changed since (then the summaries are computed from its rows)."""
    table_path = Path(table_path)
    stored = table_path.parent / PARTIALS_FILE
    if not stored.is_file():
        return None
    stamp = (pq.read_metadata(stored).metadata or {}).get(_STAMP_KEY.encode())
    if stamp is None or stamp.decode() != table_stamp(table_path)[_STAMP_KEY]:
        return None
    return pq.read_table(stored).to_pandas()
