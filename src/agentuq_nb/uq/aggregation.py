"""Token rows → turn summaries and trajectory summaries.

Turn summary: one row per (domain, task_id, trial, seed, scorer, role, turn_idx).
Trajectory summary: one row per (domain, task_id, trial, seed, scorer, role), plus a
``combined`` role over a scorer's generated roles (agentuq's ``combined``) and an
``observation_combined`` role over its observation roles.

Aggregation is done from *mergeable partials* (sums, counts, minima, maxima) computed per
batch of the token table, then merged per turn and rolled up per trajectory. So the whole
token table is never in memory at once: memory is bounded by one batch plus one row per turn.
Means skip tokens whose log-prob was invalid (null), so one bad token does not poison a
trajectory; with clean input every mean is exactly agentuq's (sum / number of tokens).

With ``scheduler`` the per-turn partials are computed by ``dask.dataframe`` on the cluster,
one partition per (domain, task) of the partitioned token dataset
(:func:`agentuq_nb.io.token_table.read_token_dataset`); a turn never spans two tasks, so each
partial sums the same rows in the same order as the pandas path and the summaries are equal.
``filters`` (DNF tuples on any token column, e.g. ``[("task_id", "in", ["1", "2"])]``) reads
only the matching rows; on the dataset, filters on domain/task_id skip whole folders.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.io.token_table import read_token_dataset, token_table_files
from agentuq_nb.records.tokens import TOKEN_SCHEMA, TRAJECTORY_KEYS
from agentuq_nb.uq.extract import TRAJECTORIES_FILE
from agentuq_nb.uq.turn_partials import (
    MEANS as _MEANS,
    ROLE_KEYS,
    TOKEN_COLUMNS_READ,
    TURN_GROUP as _TURN_GROUP,
    TURN_KEYS,
    merge_partials as _merge_partials,
    read_stored_partials,
    token_partials as _token_partials,
)

TRAJECTORY_META = ["simulation_id", "reward", "termination_reason", "num_messages", "num_tool_calls", "agent_chars"]

TURN_SUMMARY_FILE = "turn_summary"
TRAJECTORY_SUMMARY_FILE = "trajectory_summary"


def _finalize(merged: pd.DataFrame, nll_name: str) -> pd.DataFrame:
    out = merged.copy()
    for col, mean_name in _MEANS.items():
        with np.errstate(invalid="ignore", divide="ignore"):
            out[mean_name] = out[f"sum_{col}"] / out[f"n_{col}"].where(out[f"n_{col}"] > 0)
    out[nll_name] = out["sum_nll"].where(out["n_nll"] > 0)
    out = out.drop(columns=[c for c in out.columns if c.startswith(("sum_", "n_"))])
    return key_dtypes(out)


def key_dtypes(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with the trajectory keys typed alike everywhere, so tables join on them.

    Keys compare as written: task ids are strings ("10" ≠ 10), trial/seed nullable ints.
    """
    df = df.copy()
    df["task_id"] = df["task_id"].astype("string")
    for col in ("trial", "seed"):
        df[col] = df[col].astype("Int64")
    return df


def _merged(parts) -> pd.DataFrame:
    """Partials (per batch, per file…) merged per turn."""
    parts = [p for p in parts if len(p)]
    if not parts:
        raise ValueError("the token table is empty (no message carried log-probs); nothing to aggregate")
    return _merge_partials(pd.concat(parts, ignore_index=True), _TURN_GROUP)


def _turn_partials(batches) -> pd.DataFrame:
    return _merged(_token_partials(b) for b in batches if len(b))


def _run_partials(run_dir: Path, batch_rows: int, filters=None) -> pd.DataFrame:
    """The merged partials of a run's token tables: stored ones where ``extract`` left them for an
    unchanged table (and no filter applies), else computed from the table's rows."""
    parts = []
    for path in token_table_files(run_dir):
        stored = read_stored_partials(path) if filters is None else None
        parts.extend([stored] if stored is not None else
                     (_token_partials(b) for b in _token_batches([path], batch_rows, filters) if len(b)))
    return _merged(parts)


def _turn_summary_from(turn_partials: pd.DataFrame) -> pd.DataFrame:
    out = _finalize(turn_partials, "turn_nll")
    front = TURN_KEYS + ["message_idx", "source", "num_tokens", "turn_nll", "avg_token_nll", "mean_topk_entropy",
                         "mean_normalized_entropy", "mean_full_entropy", "min_chosen_prob", "max_token_nll"]
    return out[front].sort_values(TURN_KEYS, kind="stable", ignore_index=True)


def _trajectory_summary_from(turn_partials: pd.DataFrame, trajectories: pd.DataFrame | None) -> pd.DataFrame:
    turns = turn_partials.assign(num_turns=1)
    parts = [_merge_partials(turns, ROLE_KEYS)]
    is_obs = turns["role"].str.startswith("observation_")
    for label, mask in (("combined", ~is_obs), ("observation_combined", is_obs)):
        sub = turns[mask]
        # a combined row only where the scorer has more than one role to combine, as agentuq does
        n_roles = sub.groupby(TRAJECTORY_KEYS + ["scorer"], dropna=False)["role"].transform("nunique")
        sub = sub[n_roles > 1]
        if len(sub):
            parts.append(_merge_partials(sub.assign(role=label), ROLE_KEYS))
    total = _total_turns(turns, is_obs)
    if len(total):
        parts.append(_merge_partials(total, ROLE_KEYS))
    out = _finalize(pd.concat(parts, ignore_index=True), "trajectory_nll").rename(columns={"num_tokens": "total_tokens"})
    front = ROLE_KEYS + ["total_tokens", "trajectory_nll", "avg_token_nll", "mean_topk_entropy", "mean_normalized_entropy",
                         "mean_full_entropy", "min_chosen_prob", "max_token_nll", "num_turns"]
    out = out[front]
    if trajectories is not None:
        meta = key_dtypes(trajectories[TRAJECTORY_KEYS + [c for c in TRAJECTORY_META if c in trajectories]].copy())
        out = out.merge(meta, on=TRAJECTORY_KEYS, how="left")
    return out.sort_values(ROLE_KEYS, kind="stable", ignore_index=True)


def _total_turns(turns: pd.DataFrame, is_obs: pd.Series) -> pd.DataFrame:
    """Turns of the ``total`` role: action + observation (the paper's chain-rule decomposition).

    −log p(trajectory) under the agent's model = NLL of its actions + NLL of the observations.
    For each observation scorer, actions are that scorer's own assistant rows where it scored
    them (``rescore``), else the agent's generation-time rows (scorer ``self``).
    """
    obs = turns[is_obs]
    if obs.empty:
        return obs
    assistant = turns[turns["role"] == "assistant"]
    parts = []
    for scorer, obs_s in obs.groupby("scorer", sort=True):
        observed = obs_s[TRAJECTORY_KEYS].drop_duplicates()
        in_observed = assistant.merge(observed, on=TRAJECTORY_KEYS, how="inner")
        own = in_observed[in_observed["scorer"] == scorer]
        have_own = own[TRAJECTORY_KEYS].drop_duplicates()
        self_rows = in_observed[in_observed["scorer"] == "self"].merge(have_own, on=TRAJECTORY_KEYS, how="left", indicator=True)
        self_rows = self_rows[self_rows["_merge"] == "left_only"].drop(columns="_merge")
        parts.append(pd.concat([obs_s, own, self_rows], ignore_index=True).assign(scorer=scorer, role="total"))
    return pd.concat(parts, ignore_index=True)


def turn_summary(tokens: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """Turn summary of an in-memory token table."""
    return _turn_summary_from(_turn_partials([tokens]))


def trajectory_summary(tokens: pd.DataFrame | pa.Table, trajectories: pd.DataFrame | None = None) -> pd.DataFrame:
    """Trajectory summary of an in-memory token table (``trajectories`` adds reward etc.)."""
    return _trajectory_summary_from(_turn_partials([tokens]), trajectories)


def _token_batches(files: list[Path], batch_rows: int, filters=None):
    # string keys are read as dictionaries: no string is materialized per row, runs compare codes
    strings = [k for k in _TURN_GROUP if pa.types.is_string(TOKEN_SCHEMA.field(k).type)]
    parquet = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=strings))
    dataset = ds.dataset([str(f) for f in files], schema=TOKEN_SCHEMA, format=parquet)
    if isinstance(filters, list):
        filters = pq.filters_to_expression(filters)
    # no pre-buffering, no read-ahead: otherwise the scanner buffers row groups far ahead of the
    # consumer and peak memory grows with the table (2.1 GB at 10^7 rows, against ~0.3 GB like this)
    for batch in dataset.to_batches(columns=TOKEN_COLUMNS_READ, filter=filters, batch_size=batch_rows,
                                    batch_readahead=1, fragment_readahead=1, use_threads=False,
                                    fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False)):
        yield batch


def _turn_partials_on_cluster(run_dir: Path, scheduler: Any, filters=None) -> pd.DataFrame:
    """:func:`_turn_partials` with the per-task partials computed by dask.dataframe on the cluster."""
    import dask

    from agentuq_nb.distributed import connect

    with connect(scheduler) as client, dask.config.set({"dataframe.convert-string": False}):
        tokens = read_token_dataset(run_dir, columns=TOKEN_COLUMNS_READ, filters=filters)
        partials = tokens.map_partitions(_token_partials, meta=_token_partials(tokens._meta))
        parts = client.compute(partials).result()
    if parts.empty:
        raise ValueError("the token table is empty (no message carried log-probs); nothing to aggregate")
    return _merge_partials(parts, _TURN_GROUP)


def _write_table(df: pd.DataFrame, run_dir: Path, stem: str) -> None:
    # Arrow's CSV writer: the same text as pandas' to_csv for these columns, 6x faster
    table = pa.Table.from_pandas(df, preserve_index=False)
    atomic_write_with(run_dir / f"{stem}.csv", lambda p: pacsv.write_csv(table, p, pacsv.WriteOptions(quoting_style="needed")))
    atomic_write_with(run_dir / f"{stem}.parquet", lambda p: df.to_parquet(p, index=False))


def aggregate(run_dir: str | Path, batch_rows: int = 262_144, scheduler: Any = None,
              filters=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stream a run's token tables; write turn and trajectory summaries (CSV + Parquet).

    ``scheduler`` (a Dask address, ``local:N`` or a ``distributed.Client``): compute on the
    cluster over the partitioned dataset; ``filters``: only the matching token rows."""
    run_dir = Path(run_dir)
    try:
        if scheduler is None:
            partials = _run_partials(run_dir, batch_rows, filters)
        else:
            partials = _turn_partials_on_cluster(run_dir, scheduler, filters)
    except ValueError as err:
        raise ValueError(err if str(run_dir) in str(err) else f"{run_dir}: {err}") from err
    trajectories_path = run_dir / TRAJECTORIES_FILE
    trajectories = pd.read_parquet(trajectories_path) if trajectories_path.exists() else None
    turns = _turn_summary_from(partials)
    trajs = _trajectory_summary_from(partials, trajectories)
    _write_table(turns, run_dir, TURN_SUMMARY_FILE)
    _write_table(trajs, run_dir, TRAJECTORY_SUMMARY_FILE)
    return turns, trajs


def _read_summary(run_dir: str | Path, stem: str) -> pd.DataFrame:
    path = Path(run_dir) / f"{stem}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {path.name}; run 'agentuq-nb aggregate {run_dir}' first")
    return pd.read_parquet(path)


def read_trajectory_summary(run_dir: str | Path) -> pd.DataFrame:
    return _read_summary(run_dir, TRAJECTORY_SUMMARY_FILE)


def read_turn_summary(run_dir: str | Path) -> pd.DataFrame:
    return _read_summary(run_dir, TURN_SUMMARY_FILE)
