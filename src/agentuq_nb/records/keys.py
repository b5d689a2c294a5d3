"""Trajectory keys (``domain, task_id, trial, seed``) typed alike in every table, so tables join on them."""
from __future__ import annotations

import pandas as pd

from agentuq_nb.records.tokens import TRAJECTORY_KEYS


def key_dtypes(df: pd.DataFrame) -> pd.DataFrame:
    """A copy with the trajectory keys typed alike everywhere.

    Keys compare as written: task ids are strings ("10" ≠ 10), trial/seed nullable ints.
    """
    df = df.copy()
    df["task_id"] = df["task_id"].astype("string")
    for col in ("trial", "seed"):
        df[col] = df[col].astype("Int64")
    return df


def key_index(df: pd.DataFrame) -> pd.MultiIndex:
    """The trajectory keys of ``df`` as a MultiIndex (typed by :func:`key_dtypes`)."""
    return pd.MultiIndex.from_frame(key_dtypes(df[TRAJECTORY_KEYS]))
