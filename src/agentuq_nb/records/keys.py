"""Trajectory keys (``domain, task_id, trial, seed``) typed alike in every table, so tables join on them."""
from __future__ import annotations

import numpy as np
import pandas as pd

#: what names a task: a trajectory's ``(domain, task_id)``
TASK_KEYS = ["domain", "task_id"]


def key_dtypes(df: pd.DataFrame, deep: bool = True) -> pd.DataFrame:
    """A copy with the trajectory keys typed alike everywhere.

    Keys compare as written: task ids are strings ("10" ≠ 10), trial/seed nullable ints.
    ``deep=False``: the other columns are shared with ``df`` (no copy of a big table; change
    neither in place afterwards).
    """
    df = df.copy(deep=deep)
    df["task_id"] = df["task_id"].astype("string")
    for col in ("trial", "seed"):
        df[col] = df[col].astype("Int64")
    return df


def task_labels(rows: pd.DataFrame) -> np.ndarray:
    """One integer label per row naming its task ``(domain, task_id)`` (``task_id`` alone when the
    frame has no ``domain``): the ``groups`` of the task-clustered bootstrap and of cross-fitting.
    Labels 0..G-1 follow the sorted tasks, not the rows' order, so that the same trajectories in
    another order get the same labels (hence the same folds and the same resampled tasks)."""
    keys = [k for k in TASK_KEYS if k in rows.columns]
    if "task_id" not in keys:
        raise ValueError(f"rows need a 'task_id' column to name their task; columns: {list(rows.columns)}")
    return rows.groupby(keys, sort=True, dropna=False).ngroup().to_numpy()


def tasks_repeat(rows: pd.DataFrame) -> bool:
    """True when some task has more than one trajectory among ``rows``."""
    labels = task_labels(rows)
    return bool(labels.size and np.unique(labels).size < labels.size)
