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
(:func:`agentuq_nb.io.store.token_table.read_token_dataset`); a turn never spans two tasks, so each
partial sums the same rows in the same order as the pandas path and the summaries are equal.
``filters`` (DNF tuples on any token column, e.g. ``[("task_id", "in", ["1", "2"])]``) reads
only the matching rows; on the dataset, filters on domain/task_id skip whole folders.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.run_tables import TRAJECTORY_META
from agentuq_nb.records.token_statistics import (
    SPAN_COLUMN,
    TRAJECTORY_COUNT,
    TURN_COUNT,
    span_counts,
    summary_statistics,
    toolcall_statistics,
)
from agentuq_nb.records.tokens import TOKEN_SCHEMA, TRAJECTORY_KEYS
from agentuq_nb.uq.turn_partials import (
    ROLE_KEYS,
    TOKEN_COLUMNS_READ,
    TURN_GROUP,
    TURN_KEYS,
    finalize_partials,
    merge_partials,
    token_partials,
)

#: the summaries' columns: keys, the token count, the statistics (sums, means, extremes), for
#: trajectories the number of turns, then the tool-call statistics and their token counts
#: (``toolcall_*``, NaN where there is no such token), and for trajectories the trajectory's own
#: columns (reward, length baselines)
TOOLCALL_COLUMNS = [s.name for s in toolcall_statistics()] + span_counts()
TURN_COLUMNS = (TURN_KEYS + ["message_idx", "source", TURN_COUNT] + [s.turn_column for s in summary_statistics()]
                + TOOLCALL_COLUMNS)
TRAJECTORY_COLUMNS = (ROLE_KEYS + [TRAJECTORY_COUNT] + [s.name for s in summary_statistics()] + ["num_turns"]
                      + TOOLCALL_COLUMNS)

class NoTokenRowsError(ValueError):
    """The run's token tables hold no row: its results carried no log-probs."""


NO_TOKENS = "the token table is empty (no message carried log-probs); nothing to aggregate"


def merged_partials(parts) -> pd.DataFrame:
    """Partials (per batch, per file…) merged per turn; NoTokenRowsError when there are none."""
    parts = [p for p in parts if len(p)]
    if not parts:
        raise NoTokenRowsError(NO_TOKENS)
    # one part (the partials extract stored): merged as it is, not first copied by concat
    partials = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    del parts
    return merge_partials(partials, TURN_GROUP)


def turn_partials_of(batches) -> pd.DataFrame:
    """Turn partials of token batches, merged per turn."""
    return merged_partials(token_partials(b) for b in batches if len(b))


def turn_summary_from(turn_partials: pd.DataFrame) -> pd.DataFrame:
    """The turn summary of merged turn partials."""
    # one row per turn: the intermediate frames share columns; the only copy is the sorted result
    out = key_dtypes(finalize_partials(turn_partials, "turn"), deep=False)
    return sorted_rows(out, TURN_KEYS, TURN_COLUMNS)


def sorted_rows(df: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    """``df[columns].sort_values(keys, kind="stable", ignore_index=True)`` with one copy of the table, not two."""
    order = df[keys].reset_index(drop=True).sort_values(keys, kind="stable").index.to_numpy()
    # pandas >= 3 copies on write: the column selection is a view, the take the one copy
    return df[columns].take(order).reset_index(drop=True)


def trajectory_summary_from(turn_partials: pd.DataFrame, trajectories: pd.DataFrame | None) -> pd.DataFrame:
    """The trajectory summary of merged turn partials (``trajectories`` adds reward etc.)."""
    turns = turn_partials.copy(deep=False)  # shares the partials' columns (one row per turn: no copy)
    turns["num_turns"] = 1
    parts = [merge_partials(turns, ROLE_KEYS)]
    is_obs = turns["role"].str.startswith("observation_")
    for label, mask in (("combined", ~is_obs), ("observation_combined", is_obs)):
        sub = turns[mask]
        # a combined row only where the scorer has more than one role to combine, as agentuq does
        n_roles = sub.groupby(TRAJECTORY_KEYS + ["scorer"], dropna=False)["role"].transform("nunique")
        sub = sub[n_roles > 1]
        if len(sub):
            parts.append(merge_partials(sub.assign(role=label), ROLE_KEYS))
    total = _total_turns(turns, is_obs)
    if len(total):
        parts.append(merge_partials(total, ROLE_KEYS))
    out = finalize_partials(pd.concat(parts, ignore_index=True), "trajectory").rename(columns={TURN_COUNT: TRAJECTORY_COUNT})
    out = key_dtypes(out)[TRAJECTORY_COLUMNS]
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
    return turn_summary_from(turn_partials_of([tokens]))


def trajectory_summary(tokens: pd.DataFrame | pa.Table, trajectories: pd.DataFrame | None = None) -> pd.DataFrame:
    """Trajectory summary of an in-memory token table (``trajectories`` adds reward etc.)."""
    return trajectory_summary_from(turn_partials_of([tokens]), trajectories)


def token_batches(files: list[Path], batch_rows: int, filters=None):
    """The token rows of ``files`` in Arrow batches of ``batch_rows`` (only the columns the partials read)."""
    # string keys are read as dictionaries: no string is materialized per row, runs compare codes
    strings = [k for k in TURN_GROUP + [SPAN_COLUMN] if pa.types.is_string(TOKEN_SCHEMA.field(k).type)]
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


def example_trajectory(turns: pd.DataFrame, rewards: pd.DataFrame, task_id: str | None = None,
                       failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> tuple:
    """The keys ``(domain, task_id, trial, seed)`` of one trajectory to show token by token: task ``task_id``'s
    first trial with an agent turn, else the first failed trajectory (in key order) with an agent turn, else the
    first with one. ``turns``: the turn summary; ``rewards``: keys + ``reward``."""
    agent = turns[(turns["role"] == "assistant") & (turns["scorer"] == "self")]
    candidates = key_dtypes(agent.drop_duplicates(TRAJECTORY_KEYS)[TRAJECTORY_KEYS]).merge(
        key_dtypes(rewards[[*TRAJECTORY_KEYS, "reward"]]), on=TRAJECTORY_KEYS, how="left")
    candidates = candidates.sort_values(TRAJECTORY_KEYS, kind="stable")
    if candidates.empty:
        raise ValueError("no trajectory has an agent turn to show")
    if task_id is not None:
        mine = candidates[candidates["task_id"] == str(task_id)]
        if mine.empty:
            raise ValueError(f"task {task_id!r} has no trajectory with an agent turn")
        return tuple(mine.iloc[0][TRAJECTORY_KEYS])
    failed = candidates[candidates["reward"].astype(float) < failure_threshold]
    return tuple((failed if len(failed) else candidates).iloc[0][TRAJECTORY_KEYS])


def summary_counts(turns: pd.DataFrame, trajs: pd.DataFrame) -> str:
    """What a run's summaries hold (what aggregating wrote), counted by what it counts: "20 trajectories: 510 turn rows (one per message, role and
    scorer), 100 trajectory rows (20 trajectories × 5 role rows: assistant, combined, …)"."""
    n = len(trajs.drop_duplicates(TRAJECTORY_KEYS)) if len(trajs) else 0
    roles = sorted(trajs["role"].dropna().unique()) if len(trajs) else []
    scorers = sorted(trajs["scorer"].dropna().unique()) if "scorer" in trajs and len(trajs) else []
    per = f"{len(roles)} role row{'s' if len(roles) != 1 else ''} ({', '.join(roles)})"
    if len(scorers) > 1:
        per += f" over {len(scorers)} scorers ({', '.join(scorers)})"
    return (f"{n} trajectories: {len(turns)} turn rows (one per scored message, role and scorer), {len(trajs)} "
            f"trajectory rows ({n} trajectories × {per}, where a trajectory has them)")
