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
from agentuq_nb.records.outcomes import row_failures
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.tracer import GRID, Grid, StepArrays, TracerParams, grid_score_chunks, grid_scores

#: bytes of grid scores (and their sorted step risks) held at once while :func:`tuning_tables` searches the grid:
#: the search streams the grid's settings in chunks of this size, so its memory does not grow with settings ×
#: trajectories (32,000 settings × 8 bytes = 256 KB per trajectory held whole, several times over in the ranking)
GRID_CHUNK_BYTES = 64 << 20


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


def grid_aurocs(steps: StepArrays, failure: np.ndarray, row_sets: list[np.ndarray], grid: Grid = GRID
                ) -> np.ndarray:
    """The AUROC of every setting of ``grid`` on each of ``row_sets`` (boolean masks of trajectories): ``(len(row_sets),
    n_settings)``, NaN for a row set without both outcomes. The grid is streamed (:func:`grid_score_chunks`) in
    chunks of weight triples whose scores take about :data:`GRID_CHUNK_BYTES`: memory is bounded by a chunk, not by
    settings × trajectories."""
    n_kw = len(grid.top_k) * len(grid.w)
    n_settings = len(grid.alpha) * len(grid.beta) * len(grid.gamma) * n_kw
    width = len(steps.n_steps) * max(n_kw, steps.u.shape[1])
    chunk = max(1, GRID_CHUNK_BYTES // (8 * 4 * max(1, width)))  # scores, risks, their sort and ranks
    failure = np.asarray(failure, bool)
    out = np.full((len(row_sets), n_settings), np.nan)
    defined = [(i, rows) for i, rows in enumerate(row_sets) if 0 < failure[rows].sum() < rows.sum()]
    for start, scores in grid_score_chunks(steps, grid, chunk):
        for i, rows in defined:
            U = scores[:, rows]
            out[i, start:start + len(scores)] = auroc_batch(U, np.broadcast_to(failure[rows], U.shape))
    return out


def choice_of(aurocs: np.ndarray, n: int, grid: Grid = GRID) -> Choice:
    """The setting with the highest AUROC in ``aurocs`` (first in grid order among ties); TRACER's default where
    none is defined (one class)."""
    if not np.isfinite(aurocs).any():
        return Choice(max(default_index(grid), 0), float("nan"), n)
    best = int(np.nanargmax(aurocs))
    return Choice(best, float(aurocs[best]), n)


def setting_scores(steps: StepArrays, index: int, grid: Grid = GRID) -> np.ndarray:
    """The TRACER scores of the grid's setting ``index`` (one row of :func:`grid_scores`)."""
    a, b, g, k, w = grid.settings()[index]
    return grid_scores(steps, Grid(alpha=(a,), beta=(b,), gamma=(g,), top_k=(k,), w=(w,)))[0]


def tuning_tables(turns: pd.DataFrame, rewards: pd.DataFrame, failure_threshold: float, seed: int = 0,
                  n_splits: int = 5) -> tuple[pd.DataFrame, dict]:
    """(``tracer_tuned`` rows, ``tracer_tuning.json``) from the per-message table (``blackbox_turns``) and the
    rewards (keys and ``reward``, with the ``failed`` labels of a run's :meth:`~agentuq_nb.records.outcomes.Outcomes.frame`
    where they are carried, else labelled at ``failure_threshold``): the optimistic readout, and the nested one where two classes and two tasks are scored - the same
    choices as :func:`optimistic_scores` and :func:`nested_scores` on the whole grid's scores, with the grid searched
    in bounded chunks (:func:`grid_aurocs`) and only the chosen settings' scores computed whole."""
    from agentuq_nb.evaluation.multi_trial import task_labels

    rewards = key_dtypes(rewards)
    reward = rewards["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(reward)
    failure = row_failures(rewards, failure_threshold)  # the labels the rewards carry (a run's Outcomes.frame())
    steps = StepArrays.of(turns, rewards)
    scored = labelled & (steps.n_steps > 0)  # no outcome: neither tuned on nor scored; no step: no score
    out = rewards[TRAJECTORY_KEYS].copy()
    record: dict[str, Any] = {"failure_threshold": failure_threshold, "seed": seed,
                              "n_splits": n_splits, "grid_settings": int(len(GRID.settings())),
                              "grid": "TRACER's coarse grid (optimize_tracer_parameters.py, stage 1)"}
    groups = task_labels(rewards)
    two_classes = 0 < failure[scored].sum() < scored.sum()
    nested = two_classes and len(np.unique(groups[scored])) >= 2
    fold = group_folds(np.asarray(groups), n_splits, seed, rows=scored, labels=failure) if nested else None
    trains = [(fold >= 0) & (fold != k) for k in range(fold.max() + 1)] if nested else []
    aurocs = grid_aurocs(steps, failure, [scored, *trains])
    cache: dict[int, np.ndarray] = {}

    def row(index: int) -> np.ndarray:
        if index not in cache:
            cache[index] = np.where(labelled, setting_scores(steps, index), np.nan)
        return cache[index]

    choice = choice_of(aurocs[0], int(scored.sum()))
    out["tracer_optimistic"] = row(choice.index).copy()
    record["optimistic"] = {"setting": GRID.params(GRID.settings()[choice.index]).model_dump(),
                            "auroc": choice.auroc, "n": choice.n_train}
    if nested:
        scores = np.full(len(failure), np.nan)
        choices = []
        for k, train in enumerate(trains):
            c = choice_of(aurocs[1 + k], int(train.sum()))
            choices.append(c)
            test = fold == k
            scores[test] = on_training_scale(row(c.index)[test], row(c.index)[train])
        out["tracer_nested"], out["tracer_nested_fold"] = scores, fold
        settings = GRID.settings()
        record["folds"] = [{"fold": k, "setting": GRID.params(settings[c.index]).model_dump(),
                            "train_auroc": c.auroc, "n_train": c.n_train} for k, c in enumerate(choices)]
    else:
        out["tracer_nested"], out["tracer_nested_fold"] = np.nan, -1
        record["folds"] = []
        record["nested_undefined"] = "one class or fewer than 2 tasks among the scored trajectories"
    return out, record
