"""What counts as a failure: reward < threshold (default 1.0, the binary τ² reward's success).

agentuq's default threshold 0.0 labels nothing a failure; here failure is the positive class of
every failure-prediction metric, and the SAUP-HMM weights are failure rates.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import BeforeValidator

from agentuq_nb.records.keys import task_labels

DEFAULT_FAILURE_THRESHOLD = 1.0


def failure_labels(reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> np.ndarray:
    """Boolean array: ``reward < failure_threshold`` (NaN rewards are not failures); a threshold that
    is not a finite number is refused (NaN would label nothing a failure, silently)."""
    check_failure_threshold(failure_threshold)
    return np.asarray(reward, dtype=float) < float(failure_threshold)


@dataclass(frozen=True)
class Outcomes:
    """Rewards with their failure labels, made once (:meth:`of`: ``reward < threshold``) and handed down: the metrics,
    their bootstrap and their messages read ``failed`` (and ``threshold``, to say what a failure is) from it instead
    of labelling the rewards again from a threshold in each consumer."""

    reward: np.ndarray
    failed: np.ndarray
    threshold: float
    #: the trajectory keys of the rows, where they are a run's trajectories (``RunDir.outcomes``), else None
    keys: pd.DataFrame | None = None
    #: the task of each row (:func:`~agentuq_nb.records.keys.task_labels` of the keys: one integer per ``(domain,
    #: task_id)``, in their sorted order), made with the labels where the keys name the tasks, else None: what
    #: cross-fitting holds out and the task-clustered bootstrap resamples
    tasks: np.ndarray | None = None

    @classmethod
    def of(cls, reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, keys: pd.DataFrame | None = None
           ) -> Outcomes:
        """The outcomes of ``reward`` (an array of floats; NaN is no failure) at ``failure_threshold`` (``keys``:
        the trajectory keys of its rows, in order; their tasks are numbered once here)."""
        reward = np.asarray(reward, dtype=float)
        keys = None if keys is None else keys.reset_index(drop=True)
        tasks = task_labels(keys) if keys is not None and "task_id" in keys.columns else None
        return cls(reward, failure_labels(reward, failure_threshold), float(failure_threshold), keys, tasks)

    @property
    def tasks_repeat(self) -> bool:
        """Whether some task has several trajectories among these outcomes (several trials: the multi-trial readout
        applies, intervals resample tasks); False where the tasks are not known."""
        return self.tasks is not None and np.unique(self.tasks).size < self.tasks.size

    def labelled(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows with a finite reward, their failure labels)``: what a model is fitted and scored on."""
        rows = np.flatnonzero(np.isfinite(self.reward))
        return rows, self.failed[rows]

    def take(self, rows) -> Outcomes:
        """The outcomes of ``rows`` (an index array or a mask), labels carried, not made again."""
        keys = None if self.keys is None else self.keys.iloc[rows].reset_index(drop=True)
        return Outcomes(self.reward[rows], self.failed[rows], self.threshold, keys,
                        None if self.tasks is None else self.tasks[rows])

    def frame(self) -> pd.DataFrame:
        """One row per trajectory: the keys, ``reward`` and ``failed`` (to merge with a table by its keys)."""
        if self.keys is None:
            raise ValueError("these outcomes have no trajectory keys (made from rewards alone)")
        return self.keys.assign(reward=self.reward, failed=self.failed)

    def __len__(self) -> int:
        return len(self.reward)


def row_failures(rows: pd.DataFrame, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> np.ndarray:
    """The failure labels of a table's rows: the ``failed`` column that rows made from a run's :class:`Outcomes`
    carry (:meth:`Outcomes.frame`, merged with a table: the labels made once, handed down with the rows; a row that
    found no outcome is no failure), else ``reward < failure_threshold`` (rows made without them, e.g. by hand)."""
    if "failed" in rows.columns:
        return rows["failed"].eq(True).fillna(False).to_numpy(dtype=bool)  # NaN or NA: no outcome, no failure
    return failure_labels(rows["reward"], failure_threshold)


def finite_failure_threshold(value: object) -> float:
    """``value`` as a failure threshold (a config field's validator): refused with :func:`check_failure_threshold`'s
    words unless it is a finite number."""
    check_failure_threshold(value)
    return float(value)


#: the type of a config's failure-threshold field: a finite number, else refused saying what a threshold is
FailureThreshold = Annotated[float, BeforeValidator(finite_failure_threshold)]


def check_failure_threshold(failure_threshold: float) -> None:
    """A failure is ``reward < failure_threshold``: only a finite number makes that a split."""
    try:
        finite = math.isfinite(float(failure_threshold))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        raise ValueError(f"failure threshold {failure_threshold!r} is not a finite number: failure is "
                         "reward < threshold, e.g. failure_threshold 1.0 (a reward below 1 is a failure)")
