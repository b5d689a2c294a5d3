"""Tuning TRACER's five parameters, honestly and as TRACER does (pure statistics; the run step is
:mod:`agentuq_nb.steps.blackbox`).

TRACER's ``optimize_tracer_parameters.py`` searches a grid (:data:`agentuq_nb.uq.tracer.GRID`) for the
setting with the highest AUROC **on the file it then reports on**. Two readouts of that search:

* :func:`optimistic_scores` - TRACER's protocol: tuned on every trajectory of the run, scored on the same
  ones. In-sample: its AUROC is at least that of any fixed setting of the grid on that run, whatever the
  signals are worth.
* :func:`nested_scores` - tuned by cross-fitting by task: the trajectories are split into folds by task
  (:func:`~agentuq_nb.evaluation.calibration.group_folds`, the splitter the calibration uses, stratified
  by failure), and each fold is scored with the setting that won on the other folds only, so no
  trajectory's score depends on its own task's labels. Scores of different settings live on different
  scales (they grow with α, β, γ); each fold's scores are put on its training scores' scale (minus their
  median, over their interquartile range), which keeps the order within a fold and makes the pooled
  scores comparable across folds.

:func:`tuning_tables` makes both from a run's per-message black-box table and its rewards: the rows of
``tracer_tuned.parquet`` and the record of ``tracer_tuning.json``.

Ties: the first best setting in the grid's order wins (TRACER sorts its results by AUROC, stably).
A training set with one class has no AUROC to maximize: it keeps TRACER's default setting.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.calibration import group_folds
from agentuq_nb.evaluation.metrics import auroc_batch
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import failure_labels
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.tracer import GRID, Grid, StepArrays, TracerParams, grid_scores


class Choice(NamedTuple):
    """The setting a training set chose: its row in the grid, its training AUROC and training size."""

    index: int
    auroc: float
    n_train: int


class Nested(NamedTuple):
    scores: np.ndarray  # one per trajectory (NaN where it has no steps)
    fold: np.ndarray  # the fold that scored each trajectory (-1: not scored)
    choices: list[Choice]  # per fold


def default_index(grid: Grid = GRID) -> int:
    """The row of TRACER's default setting in ``grid`` (-1 if the grid lacks it)."""
    d = TracerParams()
    hit = np.flatnonzero((grid.settings() == [d.alpha, d.beta, d.gamma, d.top_k, d.w]).all(axis=1))
    return int(hit[0]) if len(hit) else -1


def best_setting(grid_scores: np.ndarray, failure: np.ndarray, rows: np.ndarray, grid: Grid = GRID) -> Choice:
    """The grid row with the highest AUROC on ``rows`` (first in grid order among ties)."""
    U = grid_scores[:, rows]
    F = np.broadcast_to(np.asarray(failure, bool)[rows], U.shape)
    n = int(rows.sum()) if rows.dtype == bool else len(rows)
    if F.size == 0 or F[0].all() or not F[0].any():
        return Choice(max(default_index(grid), 0), float("nan"), n)
    aurocs = auroc_batch(U, F)
    best = int(np.nanargmax(aurocs))
    return Choice(best, float(aurocs[best]), n)


def optimistic_scores(grid_scores: np.ndarray, failure, grid: Grid = GRID) -> tuple[np.ndarray, Choice]:
    """TRACER's protocol: the setting best on all scored trajectories, applied to them (in-sample)."""
    rows = np.isfinite(grid_scores[0])
    choice = best_setting(grid_scores, np.asarray(failure, bool), rows, grid)
    return grid_scores[choice.index].copy(), choice


def on_training_scale(test: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``test`` minus the training median, over the training interquartile range (else the standard
    deviation, else 1)."""
    q1, med, q3 = np.percentile(train, [25, 50, 75])
    spread = q3 - q1
    if not spread > 0:
        spread = float(np.std(train)) or 1.0
    return (test - med) / spread


def nested_scores(grid_scores: np.ndarray, failure, groups, n_splits: int = 5, seed=0,
                  grid: Grid = GRID, fold: np.ndarray | None = None) -> Nested:
    """Out-of-fold TRACER scores, each fold scored by the setting tuned on the other folds (module docstring).
    ``fold``: the fold of each trajectory (-1: left out), if not drawn here."""
    y = np.asarray(failure, bool)
    if fold is None:
        fold = group_folds(np.asarray(groups), n_splits, seed, rows=np.isfinite(grid_scores[0]), labels=y)
    out = np.full(len(y), np.nan)
    choices = []
    for k in range(fold.max() + 1):
        test, train = fold == k, (fold >= 0) & (fold != k)
        choice = best_setting(grid_scores, y, train, grid)
        choices.append(choice)
        row = grid_scores[choice.index]
        out[test] = on_training_scale(row[test], row[train])
    return Nested(out, fold, choices)


def tuning_tables(turns: pd.DataFrame, rewards: pd.DataFrame, failure_threshold: float, seed: int = 0,
                  n_splits: int = 5) -> tuple[pd.DataFrame, dict]:
    """(``tracer_tuned`` rows, ``tracer_tuning.json``) from the per-message table (``blackbox_turns``) and the
    rewards: the optimistic readout, and the nested one where two classes and two tasks are scored."""
    from agentuq_nb.evaluation.multi_trial import task_labels

    rewards = key_dtypes(rewards)
    reward = rewards["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(reward)
    failure = failure_labels(reward, failure_threshold)
    scores = grid_scores(StepArrays.of(turns, rewards), GRID)
    scores[:, ~labelled] = np.nan  # no outcome: neither tuned on nor scored
    out = rewards[TRAJECTORY_KEYS].copy()
    record: dict[str, Any] = {"failure_threshold": failure_threshold, "seed": seed,
                              "n_splits": n_splits, "grid_settings": int(len(scores)),
                              "grid": "TRACER's coarse grid (optimize_tracer_parameters.py, stage 1)"}
    optimistic, choice = optimistic_scores(scores, failure)
    out["tracer_optimistic"] = optimistic
    record["optimistic"] = {"setting": GRID.params(GRID.settings()[choice.index]).model_dump(),
                            "auroc": choice.auroc, "n": choice.n_train}
    groups = task_labels(rewards)
    usable = labelled & np.isfinite(scores[0])
    two_classes = 0 < failure[usable].sum() < usable.sum()
    if two_classes and len(np.unique(groups[usable])) >= 2:
        nested = nested_scores(scores, failure, groups, n_splits, seed)
        out["tracer_nested"], out["tracer_nested_fold"] = nested.scores, nested.fold
        settings = GRID.settings()
        record["folds"] = [{"fold": k, "setting": GRID.params(settings[c.index]).model_dump(),
                            "train_auroc": c.auroc, "n_train": c.n_train} for k, c in enumerate(nested.choices)]
    else:
        out["tracer_nested"], out["tracer_nested_fold"] = np.nan, -1
        record["folds"] = []
        record["nested_undefined"] = "one class or fewer than 2 tasks among the scored trajectories"
    return out, record
