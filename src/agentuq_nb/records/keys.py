"""Trajectory keys (``domain, task_id, trial, seed``) typed alike in every table, so tables join on them."""
from __future__ import annotations

import pandas as pd


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
