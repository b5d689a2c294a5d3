"""A run's scores: one row per trajectory and one column per estimator, read through the estimators themselves.

What the estimator table, the calibration and the explorer share: :func:`score_table` (keys, ``reward``, one
column per estimator), :func:`with_length_columns` (every length baseline beside them) and
:func:`estimator_inputs` (the artefacts such a table was computed from: its ``based_on``); one estimator's scores
with the rewards: :func:`estimator_rows` (what ``evaluate`` scores).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from agentuq_nb.estimators.base import Estimator, get
from agentuq_nb.estimators.base import estimators as run_estimators
from agentuq_nb.estimators.baselines import BASELINES
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS


def score_table(run_dir: str | os.PathLike | RunDir, names: list[str] | None = None, outcomes: Outcomes | None = None
                ) -> tuple[pd.DataFrame, list[Estimator]]:
    """One row per trajectory (keys + ``reward``) and one column per estimator (all the run holds, or
    ``names``); and the estimators, in table order. ``outcomes``: the run's, labelled once by the caller
    (:meth:`RunDir.outcomes`): the rows are theirs and carry their ``failed`` labels beside ``reward``."""
    run = RunDir.of(run_dir)
    chosen = run_estimators(run) if names is None else [get(name) for name in names]
    table = (run.rewards() if outcomes is None else outcomes.frame()).reset_index(drop=True)
    for estimator in chosen:
        scores = estimator.scores(run).rename(estimator.name).reset_index()
        table = table.merge(scores.drop_duplicates(TRAJECTORY_KEYS), on=TRAJECTORY_KEYS, how="left")
    return table, chosen


def estimator_inputs(run: RunDir, estimators: list[Estimator]) -> list[str]:
    """The artefacts a table of ``estimators`` was computed from (what each one :meth:`~Estimator.reads`, plugins'
    too, and the trajectories the rewards come from), those the run holds: the ``based_on`` of a derived table."""
    names = dict.fromkeys(["trajectories"] + [r for e in estimators for r in e.reads(run)])
    return [name for name in names if run.has(name)]


def with_length_columns(run: RunDir, table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every length baseline the run holds as a column (for the length control), also when
    the chosen estimators leave them out."""
    for name in BASELINES:
        if name not in table.columns and get(name).is_available(run):
            scores = get(name).scores(run).rename(name).reset_index()
            table = table.merge(scores.drop_duplicates(TRAJECTORY_KEYS), on=TRAJECTORY_KEYS, how="left")
    return table


def estimator_rows(run_dir: str | os.PathLike | RunDir, estimator: Estimator | str,
                   summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """The trajectories ``estimator`` scores, in its order: keys, ``uncertainty`` (as the estimator
    gives it, not oriented) and ``reward``. ``summary``: trajectory-summary rows to read it from."""
    run = RunDir.of(run_dir)
    rewards = run.rewards()  # refuses repeated keys too
    chosen = get(estimator) if isinstance(estimator, str) else estimator
    return estimator_scores(run, chosen, summary).merge(rewards, on=TRAJECTORY_KEYS, how="inner")


def estimator_scores(run: RunDir, estimator: Estimator, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """The keys and ``uncertainty`` of the trajectories ``estimator`` (resolved once by the caller) scores, in its
    order (a key given two scores refused); :func:`estimator_rows` without the rewards, for a caller that holds them
    (labelled) already."""
    if summary is not None and hasattr(estimator, "scores_from_summary"):
        scores = estimator.scores_from_summary(summary)
    else:
        scores = estimator.scores(run)
    rows = scores.rename("uncertainty").reset_index()
    repeated = rows.duplicated(TRAJECTORY_KEYS, keep=False)
    if repeated.any():  # two scores for one trajectory: both would be counted
        key = tuple(v.item() if isinstance(v, np.generic) else v for v in rows.loc[repeated, TRAJECTORY_KEYS].iloc[0])
        raise ValueError(f"{run.path}: estimator '{estimator.name}' gives {int(repeated.sum())} scores to trajectories "
                         f"that repeat a (domain, task_id, trial, seed), e.g. {key}: its table holds a trajectory "
                         "twice; make it again from results without repeats")
    return rows
