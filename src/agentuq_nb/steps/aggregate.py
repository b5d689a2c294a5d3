"""``aggregate``: a run's token rows → turn and trajectory summaries (:mod:`agentuq_nb.uq.aggregation`), published
as one commit (CSV + Parquet).

The token tables are streamed in batches (memory: one batch plus one row per turn); the partials ``extract``
stored with the table are merged as they are. With ``scheduler`` the per-task partials are computed by
``dask.dataframe`` on the cluster over the partitioned token dataset; the summaries are the same.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
from pydantic import Field

from agentuq_nb.io.atomic import csv_writer
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.io.store.token_table import read_token_dataset
from agentuq_nb.steps.base import Command, Reporter, Step, StepConfig
from agentuq_nb.uq.aggregation import (
    NO_TOKENS,
    NoTokenRowsError,
    merged_partials,
    summary_counts,
    token_batches,
    trajectory_summary_from,
    turn_summary_from,
)
from agentuq_nb.uq.turn_partials import TOKEN_COLUMNS_READ, TURN_GROUP, merge_partials, stored_partials, token_partials

STEP = Step("aggregate", "agentuq-nb aggregate RUN_DIR",
            ("turn_summary", "trajectory_summary", "turn_summary_csv", "trajectory_summary_csv", "tokens_by_task"))


class AggregateConfig(StepConfig):
    """How the token rows are read: batch size, a Dask scheduler, row filters."""

    batch_rows: int = Field(262_144, ge=1, description="token rows per streamed batch")
    scheduler: Any = Field(None, description="run on Dask: a scheduler address (tcp://host:8786), local:N for N local "
                           "worker processes or a distributed.Client; reads the token table partitioned by task")
    filters: Any = Field(None, description="only the matching token rows (DNF tuples on any token column, e.g. "
                         "[('task_id', 'in', ['1', '2'])])")


def run_partials(run: RunDir, batch_rows: int, filters=None) -> pd.DataFrame:
    """The merged partials of a run's token tables: stored ones where ``extract`` left them with the
    table (same commit, no filter), else computed from the table's rows."""
    parts = []
    for path in run.token_tables():
        run.verify(path)
        stored = stored_partials(run, path) if filters is None else None
        parts.extend([stored] if stored is not None else
                     (token_partials(b) for b in token_batches([path], batch_rows, filters) if len(b)))
    return merged_partials(parts)


def turn_partials_on_cluster(run: RunDir, scheduler: Any, filters=None) -> pd.DataFrame:
    """:func:`run_partials` with the per-task partials computed by dask.dataframe on the cluster."""
    import dask

    from agentuq_nb.distributed import connect

    run.verify(*run.token_tables())
    with connect(scheduler) as client, dask.config.set({"dataframe.convert-string": False}):
        tokens = read_token_dataset(run.path, columns=TOKEN_COLUMNS_READ, filters=filters)
        partials = tokens.map_partitions(token_partials, meta=token_partials(tokens._meta))
        parts = client.compute(partials).result()
    if parts.empty:
        raise NoTokenRowsError(NO_TOKENS)
    return merge_partials(parts, TURN_GROUP)


def run(run_dir: str | Path | RunDir, config: AggregateConfig = AggregateConfig()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stream a run's token tables; publish turn and trajectory summaries (CSV + Parquet) as one commit.

    ``scheduler`` (a Dask address, ``local:N`` or a ``distributed.Client``): compute on the
    cluster over the partitioned dataset; ``filters``: only the matching token rows."""
    folder = RunDir.of(run_dir)
    folder.require_folder(STEP.name)
    with folder.lock(STEP.name):
        try:
            if config.scheduler is None:
                partials = run_partials(folder, config.batch_rows, config.filters)
            else:
                partials = turn_partials_on_cluster(folder, config.scheduler, config.filters)
        except NoTokenRowsError as err:
            results = folder.manifest().results or "RESULTS"
            raise NoTokenRowsError(f"{folder.path}: {err}. Score the messages with a model instead - 'agentuq-nb "
                                   f"rescore {results} --out RUN_DIR' computes teacher-forced log-probs - then "
                                   "aggregate that run") from err
        except ValueError as err:
            raise ValueError(err if str(folder.path) in str(err) else f"{folder.path}: {err}") from err
        trajectories = folder.read_frame("trajectories") if folder.has("trajectories") else None
        if trajectories is not None:
            folder.rewards()  # refuses a table that holds two trajectories under one key (their tokens would merge)
        turns = turn_summary_from(partials)
        trajs = trajectory_summary_from(partials, trajectories)
        del partials  # (one row per turn) before the summaries are written
        inputs = folder.based_on(*folder.token_tables(), "trajectories")
        with folder.commit(STEP.name) as commit:
            for name, df in (("turn_summary", turns), ("trajectory_summary", trajs)):
                table = pa.Table.from_pandas(df, preserve_index=False)  # once, for the CSV and the Parquet file
                commit.write_with(f"{name}_csv", csv_writer(table), based_on=inputs)
                commit.write_parquet(name, table, based_on=inputs)
                del table
    # hand the freed Arrow buffers back to the system (mimalloc keeps them otherwise), so that the steps run
    # after aggregate in the same process (``agentuq-nb analyze``) start from a lower peak
    pa.default_memory_pool().release_unused()
    return turns, trajs


def show(result: tuple[pd.DataFrame, pd.DataFrame], run_dir: Path, config: AggregateConfig, say: Reporter) -> None:
    """What the command prints: the rows written and where."""
    say.say(f"{summary_counts(*result)} → {run_dir}")


COMMAND = Command(summary="Turn and trajectory summaries → RUN_DIR/{turn,trajectory}_summary.{csv,parquet}.",
                  options=("scheduler",), help={"run_dir": "run directory with tokens.parquet"}, show=show)


def aggregate(run_dir: str | Path | RunDir, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run` with the :class:`AggregateConfig` fields as keywords."""
    return run(run_dir, AggregateConfig(**options))
