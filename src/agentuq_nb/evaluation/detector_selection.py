"""The detector's model chosen inside its training rows, by the kind of split its protocol judges it by.

A model that can use length should never do worse than length, yet a full model's many extra columns are fitted
without regard to the protocol that judges it: on new tasks they can fit noise. So a detector is chosen, on its
training rows only, among :data:`CANDIDATES`:

* ``length`` - :class:`LengthModel`: logistic regression on the length baseline (of ``num_messages``,
  ``num_tool_calls``, ``agent_chars``, as ``log(1 + n)``, read from the trajectory index, whatever groups were
  extracted), its slope fitted within runs: ``num_messages`` unless another column ranks the training rows better
  within runs by :data:`LENGTH_SWITCH` (the three are nearly collinear; fold models that switched column on a
  difference within noise spoke different scales within one run, and the run-and-task-disjoint protocol's length
  candidate fell from 0.692 to 0.614 on the shared runs);
* ``task_prior`` - :class:`TaskPrior`: the task's failure rate in the training rows (a task the training rows never
  hold gets the base rate), kept within [:data:`PRIOR_CLIP`, 1 - :data:`PRIOR_CLIP`] - the protocols' own task-prior
  baseline, rank for rank (shrinking it towards the base rate broke its ties by how often a task was seen and cost
  it 0.008 of pooled AUROC on the shared runs; its probabilities are recalibrated anyway). Only
  where tasks can recur between training and scored rows (:func:`prior_applies`: not for the task-disjoint kinds);
* ``baselines`` - the task prior (where it applies), its ties broken by the length model (:func:`fit_tie_break`:
  ``task_prior + ε·length``, ``ε`` a quarter of the smallest gap between two prior values over the length log-odds'
  spread): the task's history first, length among trajectories whose tasks' histories are alike (on the shared runs
  a task's history is 0 to 5 trials, and "0 failures of 3" ties many), and length alone on a task never seen (the
  prior's base rate: one value). Nothing in it is fitted on labels but its two components (a few parameters, so it
  counts among the simple candidates, :data:`SIMPLE`). It was a logistic stack of the two, whose weights were learned
  on the inner folds: there the prior is built from one run fewer than the prior the fold model applies outside
  (leave-one-run-out on the shared runs: 0.728 on average inside, 0.648-0.789 by fold, against 0.746 outside), so
  the stack weighed it 0.2-0.4 against length's 0.7-0.9, won 4 of 10 folds by more than a standard error and fell
  below the prior on the held-out runs (0.718 against 0.746 on its rows). A length slope fitted with the prior as an
  offset fared no better: fitted on two thirds of the runs it turned negative on runs where length ranks the other
  way and lost to the prior inside. Kept at full weight with its ties broken, the prior loses nothing it had;
* ``full`` - the full model of the chosen feature groups (:func:`~.detector_model.fit_detector`), fitted *within
  runs* (an intercept per training run): pooled over runs of different agents it learned which run is long or
  fails often - on the shared runs, "long = success" across runs against "long = failure" within them;
* ``stacked`` - logistic regression (within runs too) on the out-of-fold log-odds of the full model, the length
  model and (where it applies) the task prior.

**Inner folds of the protocol's own kind** (:func:`selection_folds`, over the training rows only):
``within_run`` - folds by task; ``leave_one_run_out`` - folds of whole runs; ``leave_run_and_task_out`` - runs and
tasks each split into k groups, and each of the k² cells (run-group a, task-group b) scored by a model of the rows
of the other run-groups' other task-groups (run- and task-disjoint, as the protocol; every training row scored); ``leave_one_domain_out`` -
one fold per training domain (with one domain left in training: the run-and-task kind). The task prior is scored
leave-one-run-out inside the training rows (:func:`prior_by_run`, free: nothing is refitted) and *as it is used*:
rows of a task the other runs never held by its fallback (below), each part through its own Platt map - scored
without its fallback it tied every such row at the base rate and lost to the stacked model on rows it never scores.
Each candidate is scored by the **pooled within-run AUROC** (:func:`within_run_auroc`) of its out-of-fold log-odds,
the protocol's own metric; the stacked candidate's out-of-fold log-odds come from a stacker fitted on the *other*
inner folds' out-of-fold log-odds of its components. Where the task prior applies the ``baselines`` are the
reference: they are the protocol's two baselines at once (the task's history where the training runs hold the task,
length where not and among its ties), and every other candidate - the prior alone (with its fallback) and length alone
too - must beat them (with ``baselines`` left out of ``candidates``, the task prior is the reference); elsewhere the
best baseline (length) is, and only a model of many features (full, stacked) challenges it. A challenger is chosen only
when it beats the reference by one standard error of the paired difference (:func:`paired_difference`, DeLong within
runs; the one-standard-error rule, favouring the simpler) and at least :data:`COMPLEX_MARGIN` (:func:`choose`): the
detector is judged against its baselines and must not fall below them by noise. Every candidate speaks log-odds of failure already; the winner is
not recalibrated on the inner folds (:func:`recalibration`: the identity - noisy maps there scrambled the pairs that
fold models of one run make), the detector's probabilities are calibrated afterwards on runs it never saw. To keep it cheap, the full model's inner fits reuse the regularization (or the GBM's
depth and learning rate) its fit on all the training rows chose by its own task folds; the logistic full model's
``C`` is chosen among :data:`FULL_C_GRID` on the same inner folds (its inner score is the best C's: slightly in its
favour, which the margin below outweighs).

The winner is refitted on all the training rows (the stacker on all the inner out-of-fold rows) and is a
:class:`SelectedDetector`: its log-odds, additive contributions (:meth:`SelectedDetector.block_contributions`:
``intercept + sum = log-odds`` for every candidate but the GBM), the mean contributions over its training rows
(:attr:`SelectedDetector.reference`, what the explanations measure a trajectory against) and its arrays (never
pickle).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, Optional

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from agentuq_nb.evaluation.detector_model import (
    MAX_PARAMETER,
    Description,
    DetectorSettings,
    FiniteParameter,
    FittedDetector,
    StateError,
    fit_detector,
    fit_logistic_path,
    fold_run_intercepts,
    logistic_path,
    run_indicators,
    state_array,
    with_runs,
)
from agentuq_nb.evaluation.detector_protocols import TASK_DISJOINT, task_keys
from agentuq_nb.records.task_identity import TASK_KEY
from agentuq_nb.uq.detector_features import LENGTH_COLUMNS, TrajectoryFeatures

CANDIDATES = ("length", "task_prior", "baselines", "full", "stacked")
#: the candidates that are a stack over component log-odds (``baselines``: the task prior, its ties broken by length)
STACKERS = ("baselines", "stacked")
#: the candidates of a few parameters (the baselines and their stack), which a model of many features must beat
SIMPLE = ("length", "task_prior", "baselines")
#: the components each stacker reads
STACK_COMPONENTS = {"baselines": ("length", "task_prior"), "stacked": ("full", "length", "task_prior")}
#: a task's failure rate is kept this far from 0 and 1 (its log-odds finite; the order of the rates kept)
PRIOR_CLIP = 0.02
PRIOR_BLOCK = "task_prior"
#: the candidates that fall back on another for a row whose task they never saw (:attr:`SelectedDetector.fallback`)
PRIOR_READERS = ("task_prior", "baselines")
#: the candidates a task-prior detector falls back on for a row whose task it never saw (:func:`select_detector`)
FALLBACK_CANDIDATES = ("length", "full")
#: the selection kind of the final model (the one predict applies to a new run): whole runs left out, as the
#: calibration's protocol - a new run's tasks may or may not be among the training runs'
FINAL_KIND = "leave_one_run_out"
#: why the reference candidate (:func:`reference_candidate`) stands unless beaten, as the card says it
REFERENCE_WHY = {
    "baselines": (": the baselines - the task prior, its ties broken by length - are the protocol's two baselines "
                  "at once (the task's history where the training runs hold the task, length where not and among "
                  "trajectories whose tasks' histories are alike), the prior kept at its full weight (the inner "
                  "folds' prior, from one run fewer than outside, undersells it); the prior alone or length alone "
                  "must beat them, and a model of many features the best of them,"),
    "task_prior": (": the task prior is the protocol's baselines at once (the task's history where the training runs "
                   "hold the task, length or better where not); length alone must beat it, and a model of many "
                   "features the best of them,"),
}
#: the share of the smallest gap between two task-prior values that length may move a trajectory within
#: (:func:`fit_tie_break`): ties broken, no two different histories reordered
TIE_SHARE = 0.25
#: inner folds of the selection
INNER_SPLITS = 3
#: how much higher a model of many features (full, stacked) must score on the inner folds than the best baseline
#: candidate (length, task prior) to be chosen over it (:func:`choose`)
COMPLEX_MARGIN = 0.02
#: how much better (pooled within-run AUROC - 1/2, on the training rows) another length column must rank than
#: ``num_messages`` for :class:`LengthModel` to read it instead
LENGTH_SWITCH = 0.02
#: the logistic full model's regularizations, chosen on the same inner folds (strong to moderate: thousands of
#: columns on a few hundred rows)
FULL_C_GRID = (0.01, 0.1, 1.0)


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def row_task_keys(features: TrajectoryFeatures) -> np.ndarray:
    """Each row's task key (:func:`~.detector_protocols.task_keys` of its domain and its ``task_key``: the hash of the
    task's instructions, :mod:`agentuq_nb.records.task_identity` - τ-bench and τ²-bench airline share ids, not
    tasks; ``id:<task id>`` only where the results hold no task content)."""
    index = features.index
    keys = index[TASK_KEY] if TASK_KEY in index else "id:" + index["task_id"].astype(str)
    return task_keys(index["domain"].to_numpy(dtype=object), np.asarray(keys, dtype=object))


def prior_applies(kind: str) -> bool:
    """Whether tasks can recur between a fold's training and scored rows (the task prior is a candidate)."""
    return kind not in TASK_DISJOINT


def within_run_auroc(score, failure, runs) -> float:
    """The pooled within-run AUROC: each run's AUROC (ties 1/2) weighed by its failure × success pairs - pairs of
    one run only, as the protocols compare. NaN when no run holds both classes."""
    from agentuq_nb.evaluation.metrics import auroc

    s, y, runs = np.asarray(score, dtype=float), np.asarray(failure, dtype=bool), np.asarray(runs, dtype=object)
    total = weight = 0.0
    for r in pd.unique(runs):
        rows = (runs == r) & np.isfinite(s)
        pairs = float(y[rows].sum()) * float((~y[rows]).sum())
        if pairs:
            total += auroc(s[rows], y[rows]) * pairs
            weight += pairs
    return total / weight if weight else float("nan")


# --------------------------------------------------------------------------- the two baselines as models
@dataclass
class LengthModel:
    """Logistic regression on one length baseline's ``log(1 + n)``: the one of :data:`LENGTH_COLUMNS` whose pooled
    within-run AUROC (either orientation) is the highest on the training rows, its slope fitted within runs (an
    intercept per run), its intercept the training base rate's log-odds at the mean length (module docstring)."""

    column: str
    coef: float
    intercept: float

    def values(self, features: TrajectoryFeatures) -> np.ndarray:
        return np.log1p(features.index[self.column].to_numpy(dtype=float))

    @classmethod
    def fit(cls, features: TrajectoryFeatures, failure: np.ndarray) -> "LengthModel":
        from sklearn.linear_model import LogisticRegression

        runs = features.index["run"].to_numpy(dtype=object)
        strength = {c: abs(within_run_auroc(np.log1p(features.index[c].to_numpy(dtype=float)), failure, runs) - 0.5)
                    for c in LENGTH_COLUMNS}
        strength = {c: np.nan_to_num(v, nan=-1.0) for c, v in strength.items()}
        # the first column (num_messages) unless another ranks clearly better: the three are nearly collinear, and
        # fold models switching column on a difference within noise speak different scales within one run (module
        # docstring)
        column = max(LENGTH_COLUMNS, key=lambda c: (strength[c] - (0 if c == LENGTH_COLUMNS[0] else LENGTH_SWITCH),
                                                    -LENGTH_COLUMNS.index(c)))
        x = np.log1p(features.index[column].to_numpy(dtype=float))
        mean, sd = float(x.mean()), float(x.std()) or 1.0
        codes, _ = pd.factorize(runs)
        # the slope within runs (an intercept per run): runs differ in length and in failure rate, and pooled rows
        # would learn which run is long, not which trajectory of a run is
        design = np.column_stack([(x - mean) / sd, np.eye(codes.max() + 1)[codes]])
        model = LogisticRegression(max_iter=1000, fit_intercept=False).fit(design, failure)
        slope = float(model.coef_[0, 0]) / sd
        rate = float(np.clip(np.mean(failure), 1e-6, 1 - 1e-6))
        return cls(column, slope, float(np.log(rate / (1 - rate))) - slope * mean)

    def block_values(self, features: TrajectoryFeatures) -> np.ndarray:
        return (self.coef * self.values(features))[:, None]

    @property
    def names(self) -> list[str]:
        return [f"length.{self.column}"]

    def log_odds(self, features: TrajectoryFeatures) -> np.ndarray:
        return self.intercept + self.coef * self.values(features)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"column": np.array([self.column], dtype=str), "coef": np.array([self.coef]),
                "intercept": np.array([self.intercept])}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "LengthModel":
        column, coef, intercept = (state_array(arrays, name, kind, 1, required=True)
                                   for name, kind in (("column", "U"), ("coef", "f"), ("intercept", "f")))
        for name, value in (("column", column), ("coef", coef), ("intercept", intercept)):
            if value.shape != (1,):
                raise StateError("arrays", name, f"has shape {value.shape}, expected (1,)")
        if str(column[0]) not in LENGTH_COLUMNS:
            raise StateError("arrays", "column", f"{str(column[0])!r} is not a length baseline "
                                                 f"({', '.join(LENGTH_COLUMNS)})")
        return cls(str(column[0]), float(coef[0]), float(intercept[0]))


@dataclass
class TaskPrior:
    """The failure rate of each training task, shrunk towards the base rate (module docstring)."""

    tasks: np.ndarray  # unicode, sorted
    failures: np.ndarray
    counts: np.ndarray
    rate: float

    @classmethod
    def fit(cls, keys: np.ndarray, failure: np.ndarray) -> "TaskPrior":
        frame = pd.DataFrame({"task": np.asarray(keys, dtype=str), "y": np.asarray(failure, dtype=float)})
        by = frame.groupby("task")["y"].agg(["sum", "count"]).sort_index()
        return cls(by.index.to_numpy(dtype=str), by["sum"].to_numpy(dtype=float), by["count"].to_numpy(dtype=float),
                   float(frame["y"].mean()))

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(failures, count)`` of each key's task in training (0, 0 for a task it never held)."""
        keys = np.asarray(keys, dtype=str)
        pos = np.searchsorted(self.tasks, keys)
        found = (pos < len(self.tasks)) & (self.tasks[np.minimum(pos, len(self.tasks) - 1)] == keys) \
            if len(self.tasks) else np.zeros(len(keys), bool)
        at = np.minimum(pos, max(len(self.tasks) - 1, 0))
        return np.where(found, self.failures[at] if len(self.tasks) else 0.0, 0.0), \
            np.where(found, self.counts[at] if len(self.tasks) else 0.0, 0.0)

    def levels(self) -> np.ndarray:
        """Every log-odds :meth:`log_odds` can give: each training task's and a task it never held (the base rate)."""
        rates = np.append(self.failures / np.where(self.counts > 0, self.counts, 1.0), self.rate)
        return np.unique(logit(np.clip(rates, PRIOR_CLIP, 1 - PRIOR_CLIP)))

    def log_odds(self, keys: np.ndarray) -> np.ndarray:
        failures, counts = self.lookup(keys)
        rate = np.where(counts > 0, failures / np.where(counts > 0, counts, 1.0), self.rate)
        return logit(np.clip(rate, PRIOR_CLIP, 1 - PRIOR_CLIP))

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"tasks": self.tasks.astype(str), "failures": self.failures, "counts": self.counts,
                "rate": np.array([self.rate])}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "TaskPrior":
        tasks = state_array(arrays, "tasks", "U", 1, required=True)
        failures, counts, rate = (state_array(arrays, k, "f", 1, required=True) for k in ("failures", "counts", "rate"))
        if not (len(tasks) == len(failures) == len(counts)) or (failures < 0).any() or (counts < 1).any() or \
                (failures > counts).any() or not np.all(tasks[:-1] < tasks[1:]):
            raise StateError("arrays", "tasks", "the task prior's tasks, failures and counts do not agree (lengths, "
                                                "counts below 1, failures outside [0, count], or not sorted and "
                                                "distinct)")
        if rate.shape != (1,) or not 0 <= rate[0] <= 1:
            raise StateError("arrays", "rate", "is not one failure rate in [0, 1]")
        return cls(tasks, failures, counts, float(rate[0]))


# --------------------------------------------------------------------------- inner folds of the protocol's kind
def group_assignment(groups: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Each row's fold (0 … k-1) when whole ``groups`` are dealt into ``k`` folds (``GroupKFold``, shuffled, seeded)."""
    from sklearn.model_selection import GroupKFold

    out = np.zeros(len(groups), dtype=int)
    for f, (_, test) in enumerate(GroupKFold(n_splits=k, shuffle=True, random_state=seed).split(
            np.zeros(len(groups)), groups=groups)):
        out[test] = f
    return out


def selection_folds(kind: str, failure, runs, domains, tasks, n_splits: int = INNER_SPLITS, seed: int = 0
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """The inner folds ``(train, test)`` of training rows by the split ``kind`` (a protocol's name; module
    docstring), each keeping both classes in its training and scored rows; empty when the rows cannot hold two."""
    y = np.asarray(failure, dtype=bool)
    runs, domains, tasks = (np.asarray(a, dtype=object) for a in (runs, domains, tasks))
    n_runs, n_domains, n_tasks = (len(pd.unique(a)) for a in (runs, domains, tasks))
    if kind == "leave_one_domain_out" and n_domains < 2:
        kind = "leave_run_and_task_out"
    if kind in ("leave_one_run_out", "leave_run_and_task_out") and n_runs < 2:
        kind = "within_run"
    folds: list[tuple[np.ndarray, np.ndarray]] = []
    if kind == "leave_one_domain_out":
        folds = [(np.flatnonzero(domains != d), np.flatnonzero(domains == d)) for d in pd.unique(domains)]
    elif kind == "leave_one_run_out":
        fold = group_assignment(runs, min(n_splits, n_runs), seed)
        folds = [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(fold.max() + 1)]
    elif kind == "leave_run_and_task_out":
        k = min(n_splits, n_runs, n_tasks)
        if k >= 2:
            run_fold, task_fold = group_assignment(runs, k, seed), group_assignment(tasks, k, seed + 1)
            # every cell (run group a, task group b) scored by a model of the other run groups' other task groups:
            # every training row scored, as the protocol scores every row (the diagonal cells alone scored a ninth
            # each, a third of the rows, and chose a model of many features in 11 of 50 outer folds)
            folds = [(np.flatnonzero((run_fold != a) & (task_fold != b)),
                      np.flatnonzero((run_fold == a) & (task_fold == b))) for a in range(k) for b in range(k)]
    elif n_tasks >= 2:  # within_run, or any kind the rows cannot hold otherwise: folds by task
        fold = group_assignment(tasks, min(n_splits, n_tasks), seed)
        folds = [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(fold.max() + 1)]
    return [(train, test) for train, test in folds if 0 < y[train].sum() < len(train) and len(test)]


# --------------------------------------------------------------------------- the selected detector
@dataclass
class SelectedDetector:
    """The candidate chosen on inner folds and refitted on all training rows (module docstring)."""

    candidate: str
    full: FittedDetector | None = None
    length: LengthModel | None = None
    prior: TaskPrior | None = None
    stack: dict[str, float] = field(default_factory=dict)  # stacked: weight of each component's log-odds, intercept
    selection: dict[str, Any] = field(default_factory=dict)  # kind, folds, each candidate's inner score, why
    reference_names: list[str] = field(default_factory=list)
    reference: np.ndarray = field(default_factory=lambda: np.zeros(0))
    mean_log_odds: float = 0.0  # over the training rows
    recalibration: dict[str, float] = field(default_factory=lambda: {"a": 1.0, "b": 0.0})
    #: the task prior's detector for a row whose task it never saw (its log-odds would be the base rate, one number
    #: for every such row): the best candidate that does not read the task's history
    fallback: "SelectedDetector | None" = None

    @property
    def settings(self) -> DetectorSettings | None:
        return None if self.full is None else self.full.settings

    def components(self, features: TrajectoryFeatures) -> dict[str, np.ndarray]:
        """The log-odds of each component the candidate reads."""
        out = {}
        if self.full is not None:
            out["full"] = self.full.log_odds(features)
        if self.length is not None:
            out["length"] = self.length.log_odds(features)
        if self.prior is not None:
            out["task_prior"] = self.prior.log_odds(row_task_keys(features))
        return out

    def seen(self, features: TrajectoryFeatures) -> np.ndarray:
        """Per row: its task is among the task prior's training tasks (all False without a prior)."""
        if self.prior is None:
            return np.zeros(len(features), dtype=bool)
        return self.prior.lookup(row_task_keys(features))[1] > 0

    def parts(self, features: TrajectoryFeatures) -> list[tuple[np.ndarray, "SelectedDetector"]]:
        """``(rows, detector)`` pairs covering ``features``' rows, each detector additive over its own rows: a task
        prior with a :attr:`fallback` splits into the rows of seen tasks (the prior alone) and the others (the
        fallback); any other detector is one part."""
        if self.fallback is None:
            return [(np.arange(len(features)), self)]
        seen = self.seen(features)
        alone = replace(self, fallback=None)
        return [(rows, d) for rows, d in ((np.flatnonzero(seen), alone), (np.flatnonzero(~seen), self.fallback))
                if len(rows)]

    def log_odds(self, features: TrajectoryFeatures) -> np.ndarray:
        """The log-odds of failure (before the detector's calibration) of every row: the candidate's, mapped by its
        inner-fold recalibration ``a·s + b`` (a task prior's row of a task it never saw: its :attr:`fallback`'s)."""
        parts = self.components(features)
        if self.candidate in STACKERS:
            raw = self.stack["intercept"] + sum(self.stack[name] * v for name, v in parts.items())
        else:
            raw = parts[self.candidate]
        out = self.recalibration["a"] * raw + self.recalibration["b"]
        if self.fallback is not None:
            unseen = ~self.seen(features)
            if unseen.any():
                out[unseen] = self.fallback.log_odds(features.take(unseen))
        return out

    @property
    def additive(self) -> bool:
        """Whether the contributions add up to the log-odds (all but a GBM's occlusion effects)."""
        return self.full is None or self.full.settings.model == "logistic" or self.full.constant is not None

    def weights(self) -> dict[str, float]:
        """The weight of each component's log-odds in the candidate's log-odds."""
        if self.candidate in STACKERS:
            return {n: self.stack[n] for n in ("full", "length", "task_prior") if n in self.stack}
        return {self.candidate: 1.0}

    def component_intercept(self, name: str) -> float:
        if name == "full":
            return float(self.full.constant if self.full.constant is not None else self.full.intercept)
        if name == "length":
            return self.length.intercept
        return float(logit(self.prior.rate))

    def intercept(self) -> float:
        """The log-odds every contribution is added to (stacked: the stacker's intercept and its components'; then
        the recalibration)."""
        out = self.stack["intercept"] if self.candidate in STACKERS else 0.0
        raw = out + sum(k * self.component_intercept(n) for n, k in self.weights().items())
        return float(self.recalibration["a"] * raw + self.recalibration["b"])

    def block_contributions(self, features: TrajectoryFeatures) -> tuple[list[str], np.ndarray, float]:
        """``(names, values, intercept)``: each row's contribution of each reported feature to the log-odds (a term,
        a black-box or length column, an embedding block, ``task_prior``), the same-named contributions of the
        stacked components summed; ``intercept + values.sum(axis=1)`` is the log-odds when :attr:`additive`."""
        pieces: list[tuple[float, list[str], np.ndarray]] = []
        a = self.recalibration["a"]
        for name, k in self.weights().items():
            k = k * a
            if name == "full":
                pieces.append((k, *self.full.block_contributions(features)))
            elif name == "length":
                pieces.append((k, self.length.names, self.length.block_values(features)))
            else:
                contribution = self.prior.log_odds(row_task_keys(features)) - logit(self.prior.rate)
                pieces.append((k, [PRIOR_BLOCK], contribution[:, None]))
        order = list(dict.fromkeys(name for _, names, _ in pieces for name in names))
        at = {name: i for i, name in enumerate(order)}
        values = np.zeros((len(features), len(order)))
        for k, names, v in pieces:
            if names:
                values[:, [at[name] for name in names]] += k * v  # names are unique within a component
        return order, values, self.intercept()

    def embedding_weights(self, block: str) -> tuple[np.ndarray, float] | None:
        """``(w, offset)``: the embedding block's contribution to the log-odds is ``w · v - offset`` for the block's
        vector ``v`` (the logistic full model, before the ±MAX_Z clip; stacked: times its weight); None where the
        candidate does not read the block linearly."""
        full = self.full
        if full is None or full.settings.model != "logistic" or full.constant is not None or \
                self.candidate not in ("full", "stacked"):
            return None
        n_text = len(full.terms)
        cols = [i for i, name in enumerate(full.dense_names) if name.split(":", 1)[0] == block]
        if not cols:
            return None
        cols = np.asarray(cols)
        w = full.coef[n_text + cols] / full.scale[n_text + cols]
        offset = float(w @ full.mean[n_text + cols])
        k = (self.stack["full"] if self.candidate == "stacked" else 1.0) * self.recalibration["a"]
        return k * w, k * offset

    def set_reference(self, features: TrajectoryFeatures) -> None:
        """Record the mean contributions over ``features`` (its training rows): what a trajectory is explained
        against (:mod:`.detector_explain`)."""
        names, values, _ = self.block_contributions(features)
        self.reference_names = list(names)
        self.reference = values.mean(axis=0) if len(values) else np.zeros(len(names))
        self.mean_log_odds = float(np.mean(self.log_odds(features))) if len(features) else 0.0

    def reference_log_odds(self) -> float:
        """The log-odds of a trajectory whose every contribution is the training rows' mean (additive candidates)."""
        return self.intercept() + float(np.sum(self.reference))

    def feature_summary(self, features: TrajectoryFeatures) -> pd.DataFrame:
        """What the detector leans on over ``features``' rows: per reported feature the mean absolute contribution to
        the log-odds (the order), the mean contribution and the share of rows where it contributes."""
        names, values, _ = self.block_contributions(features)
        out = pd.DataFrame({"feature": names,
                            "mean_abs_contribution": np.abs(values).mean(axis=0) if len(values) else np.nan,
                            "mean_contribution": values.mean(axis=0) if len(values) else np.nan,
                            "share_of_rows": (values != 0).mean(axis=0) if len(values) else np.nan})
        return out.sort_values("mean_abs_contribution", ascending=False, kind="stable").reset_index(drop=True)

    # ------------------------------------------------------------------ arrays, never pickle
    def to_arrays(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        meta: dict[str, Any] = {"candidate": self.candidate, "stack": dict(self.stack), "selection": self.selection,
                                "reference_names": list(self.reference_names),
                                "mean_log_odds": float(self.mean_log_odds), "recalibration": dict(self.recalibration)}
        arrays: dict[str, np.ndarray] = {"reference": np.asarray(self.reference, dtype=np.float64)}
        if self.full is not None:
            meta["full"], full_arrays = self.full.to_arrays()
            arrays.update({f"full.{k}": v for k, v in full_arrays.items()})
        if self.length is not None:
            arrays.update({f"length.{k}": v for k, v in self.length.to_arrays().items()})
        if self.prior is not None:
            arrays.update({f"prior.{k}": v for k, v in self.prior.to_arrays().items()})
        if self.fallback is not None:
            meta["fallback"], fallback_arrays = self.fallback.to_arrays()
            arrays.update({f"fallback.{k}": v for k, v in fallback_arrays.items()})
        return meta, arrays

    @classmethod
    def from_arrays(cls, meta: Any, arrays: dict[str, np.ndarray]) -> "SelectedDetector":
        """The detector :meth:`to_arrays` described (a folder of a version before the selection: its full model),
        checked as the untrusted input it is - every field (:class:`SelectionDescription`), every array's dtype,
        shape and numbers, the components the candidate needs - before anything is computed: a failure is a
        :class:`~.detector_model.StateError` naming the field (``full.coef``, ``fallback.length.coef``, …)."""
        if isinstance(meta, dict) and "candidate" not in meta:  # written before the selection: the full model
            return cls("full", full=FittedDetector.from_arrays(meta, arrays))
        desc = SelectionDescription.check(meta)

        def part(prefix: str) -> dict[str, np.ndarray]:
            return {k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + ".")}

        reference = state_array(arrays, "reference", "f", 1, required=True)
        out = cls(desc.candidate, stack=dict(desc.stack), selection=dict(desc.selection),
                  reference_names=list(desc.reference_names), reference=reference,
                  mean_log_odds=desc.mean_log_odds, recalibration=desc.recalibration.model_dump())
        if len(out.reference) != len(out.reference_names):
            raise StateError("arrays", "reference", f"holds {len(out.reference)} values for "
                                                    f"{len(out.reference_names)} reference_names")
        if desc.full is not None:
            out.full = prefixed("full", lambda: FittedDetector.from_arrays(desc.full, part("full")))
        if any(k.startswith("length.") for k in arrays):
            out.length = prefixed("length", lambda: LengthModel.from_arrays(part("length")))
        if any(k.startswith("prior.") for k in arrays):
            out.prior = prefixed("prior", lambda: TaskPrior.from_arrays(part("prior")))
        if desc.fallback is not None:
            if desc.candidate not in PRIOR_READERS:
                raise StateError("description", "fallback", f"only a task prior falls back "
                                                            f"({', '.join(PRIOR_READERS)}), not {desc.candidate}")
            out.fallback = prefixed("fallback", lambda: SelectedDetector.from_arrays(desc.fallback,
                                                                                     part("fallback")))
            if out.fallback.candidate not in FALLBACK_CANDIDATES or out.fallback.fallback is not None:
                raise StateError("description", "fallback.candidate", f"is {out.fallback.candidate!r}, not one of "
                                                                      f"{', '.join(FALLBACK_CANDIDATES)}")
        components = ("full", "length", "task_prior")
        if desc.candidate in STACKERS and (set(out.stack) - {"intercept"} - set(components) or
                                            "intercept" not in out.stack):
            raise StateError("description", "stack", f"holds {sorted(out.stack)}: an intercept and weights of "
                                                     f"{', '.join(components)}")
        needs = {"full": ("full",), "length": ("length",), "task_prior": ("prior",),
                 **{c: tuple({"task_prior": "prior"}.get(n, n) for n in components if n in out.stack)
                    for c in STACKERS}}
        lacking = [n for n in needs[desc.candidate] if getattr(out, n) is None]
        if lacking:
            raise StateError("arrays" if lacking[0] != "full" else "description", lacking[0],
                             f"is missing: the {desc.candidate} detector reads it")
        return out


class Recalibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    a: Annotated[float, Field(allow_inf_nan=False, gt=0, le=MAX_PARAMETER)]
    b: FiniteParameter


class SelectionDescription(Description):
    """The description :meth:`SelectedDetector.to_arrays` writes, as read back (``selection`` is only shown)."""

    candidate: Literal[CANDIDATES]
    stack: dict[str, FiniteParameter] = Field(default_factory=dict)
    selection: dict[str, Any] = Field(default_factory=dict)
    reference_names: list[str] = Field(default_factory=list)
    mean_log_odds: FiniteParameter = 0.0
    recalibration: Recalibration = Field(default_factory=lambda: Recalibration(a=1.0, b=0.0))
    full: Optional[dict[str, Any]] = None
    fallback: Optional[dict[str, Any]] = None


def prefixed(prefix: str, build: Callable[[], Any]) -> Any:
    """``build()``, its :class:`~.detector_model.StateError` (or a component's ValueError) named under ``prefix``."""
    try:
        return build()
    except StateError as err:
        raise StateError(err.part, f"{prefix}.{err.field_name}", str(err).split(": ", 1)[-1]) from None
    except (KeyError, TypeError, ValueError, IndexError) as err:
        raise StateError("arrays", prefix, f"does not describe its component ({type(err).__name__}: {err})") from None


# --------------------------------------------------------------------------- selection
def fit_stacker(columns: dict[str, np.ndarray], failure: np.ndarray, runs=None) -> dict[str, float]:
    """Logistic regression (L2, C = 1) on the standardized component log-odds, within ``runs`` (an intercept per run,
    :func:`~.detector_model.run_indicators`, as the full model), folded back to a weight per raw component log-odds
    and an intercept (so the stacked log-odds stays additive over the components' features). Fitted by
    :func:`~.detector_model.logistic_path` (scikit-learn's ``LogisticRegression(max_iter=1000)``, the same floats)."""
    names = list(columns)
    X = np.column_stack([columns[n] for n in names])
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    Z = (X - mean) / scale
    indicators = None if runs is None else run_indicators(runs)
    coef_, intercept_ = next(logistic_path(with_runs(Z, indicators), failure, [1.0], max_iter=1000))  # C = 1
    coef, intercept = fold_run_intercepts(coef_, float(intercept_[0]), Z.shape[1], runs)
    w = coef / scale
    out = {n: float(v) for n, v in zip(names, w)}
    out["intercept"] = float(intercept - w @ mean)
    return out


def fit_tie_break(columns: dict[str, np.ndarray], failure=None, runs=None, levels=None) -> dict[str, float]:
    """The ``baselines`` candidate's stack: the task prior's log-odds (weight 1) with its ties broken by the length
    model's - ``task_prior + ε·(length - mean)``, ``ε`` a :data:`TIE_SHARE` of the smallest gap between two distinct
    prior values (``levels``: every value the prior applied can give, :meth:`TaskPrior.levels`; by default those of
    ``columns``) over the length log-odds' spread (``columns``' rows): length orders the trajectories whose tasks'
    histories are alike (0 failures of 3 is common) and never reorders two different histories (within the training
    rows' range of length: a quarter of the gap each way). Nothing is fitted
    on ``failure`` (the components were, out of fold): a weight learned for the prior on the inner folds undersold it -
    their prior is built from one run fewer than the prior the fold model applies (module docstring), and the learned
    stack weighed it 0.2-0.4 against length's 0.7-0.9, then fell below the prior on the held-out runs; a slope on
    length fitted with the prior as an offset turned negative on two of three inner folds (runs where length ranks
    the other way) and lost to the prior inside. In the stack's form (additive, ``task_prior`` 1)."""
    prior = np.asarray(columns["task_prior"], dtype=float)
    length = np.asarray(columns["length"], dtype=float)
    levels = prior if levels is None else np.asarray(levels, dtype=float)
    gaps = np.diff(np.unique(levels[np.isfinite(levels)]))
    gap = float(gaps.min()) if len(gaps) else 1.0
    spread = float(np.ptp(length)) if len(length) else 0.0
    eps = TIE_SHARE * gap / (spread if spread > 1e-12 else 1.0)
    return {"length": eps, "task_prior": 1.0, "intercept": -eps * float(np.mean(length)) if len(length) else 0.0}


#: how each stacker's weights are fitted on its components' out-of-fold log-odds
STACK_FITS = {"baselines": fit_tie_break, "stacked": fit_stacker}


def levels_of(stacker: str, oof: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The baselines' tie-break on the inner folds reads every value the inner prior gives (each scored row's is
    its own run's prior, :func:`prior_by_run`); a learned stack reads nothing more."""
    return {"levels": oof["task_prior"]} if stacker == "baselines" else {}


def stacked_log_odds(stack: dict[str, float], columns: dict[str, np.ndarray]) -> np.ndarray:
    return stack["intercept"] + sum(stack[n] * columns[n] for n in columns)


def fixed_hyperparameters(full: FittedDetector) -> dict[str, Any]:
    """What the full model's fit on all training rows chose (the inner fits reuse it; module docstring)."""
    return {"gbm": dict(full.gbm_params)} if full.settings.model == "gbm" else {"C": full.C}


def select_detector(features: TrajectoryFeatures, failure: np.ndarray, settings: DetectorSettings, kind: str,
                    candidates: tuple[str, ...] = CANDIDATES,
                    on_fit: Callable[[pd.DataFrame], None] | None = None) -> SelectedDetector:
    """Choose among ``candidates`` on inner folds of the split ``kind`` over ``features``' rows (all of them training
    rows) and refit the winner on all of them (module docstring). ``on_fit(index)`` is told the rows every fit
    inside reads (a test's hook: the inner fits read subsets of them)."""
    if on_fit is not None:
        on_fit(features.index)
    y = np.asarray(failure, dtype=bool)
    index = features.index
    runs, domains = index["run"].to_numpy(dtype=object), index["domain"].to_numpy(dtype=object)
    tasks = row_task_keys(features)
    use_prior = prior_applies(kind) and "task_prior" in candidates
    logistic = settings.model == "logistic"
    length = LengthModel.fit(features, y) if y.any() and not y.all() else None
    folds = selection_folds(kind, y, runs, domains, tasks, INNER_SPLITS, settings.seed) if length is not None else []
    wanted = [c for c in candidates if c not in ("task_prior", "baselines") or use_prior]
    selection: dict[str, Any] = {"kind": kind, "inner_folds": len(folds), "scores": {}, "n_scored": 0}
    if len(folds) < 2:
        selection["why"] = ("the training rows hold too few tasks, runs or failures for inner folds of this kind: "
                            "the full model, unchosen")
        return finish(SelectedDetector("full", full=fit_detector(features, y, tasks, settings),
                                       selection=selection), features)
    # the GBM's depth and learning rate: chosen by its own task folds on all the rows, reused by the inner fits
    full = None if logistic else fit_detector(features, y, tasks, settings)
    fixed = None if logistic else fixed_hyperparameters(full)
    oof = {name: np.full(len(y), np.nan) for name in ("length", "task_prior", "full") if name in wanted}
    by_c = {c: np.full(len(y), np.nan) for c in FULL_C_GRID} if logistic and "full" in oof else {}
    fold_of = np.full(len(y), -1)
    # the task prior scored leave-one-run-out inside (:func:`prior_by_run`) where the inner folds are of whole runs
    by_runs = kind == "leave_one_run_out" and len(pd.unique(runs)) >= 2
    for k, (train, test) in enumerate(folds):
        part, held = features.take(train), features.take(test)
        if by_c:
            path = fit_logistic_path(part, y[train], tasks[train], settings, FULL_C_GRID)
            Z = path[0].design(held) if path[0].constant is None else None
            for c, model in zip(sorted(FULL_C_GRID), path):
                by_c[c][test] = model.log_odds(held) if Z is None else model.raw_log_odds(Z)
        elif "full" in oof:
            oof["full"][test] = fit_detector(part, y[train], tasks[train], settings, fixed=fixed).log_odds(held)
        if "length" in oof:
            oof["length"][test] = LengthModel.fit(part, y[train]).log_odds(held)
        if "task_prior" in oof and not by_runs:
            oof["task_prior"][test] = TaskPrior.fit(tasks[train], y[train]).log_odds(tasks[test])
        fold_of[test] = k
    seen_inner = np.zeros(len(y), dtype=bool)
    if "task_prior" in oof and by_runs:
        oof["task_prior"], seen_inner = prior_by_run(tasks, y, runs)
    elif "task_prior" in oof:
        seen_inner = np.isfinite(oof["task_prior"])
    if by_c:
        done = fold_of >= 0
        c_scores = {c: within_run_auroc(v[done], y[done], runs[done]) for c, v in by_c.items()}
        best_c = max(sorted(c_scores), key=lambda c: np.nan_to_num(c_scores[c], nan=-1.0))
        selection["full_C"] = {"chosen": best_c, "scores": {str(c): v for c, v in c_scores.items()}}
        oof["full"] = by_c[best_c]
        fixed = {"C": best_c}

    def full_model() -> FittedDetector:  # fitted on all the rows only when the winner reads it
        return full if full is not None else fit_detector(features, y, tasks, settings, fixed=fixed)

    scored = fold_of >= 0
    for stacker in STACKERS:
        components = {n: oof[n] for n in STACK_COMPONENTS[stacker] if n in oof}
        if stacker not in wanted or len(components) < 2:
            continue
        stacked = np.full(len(y), np.nan)
        whole = np.all([np.isfinite(v) for v in components.values()], axis=0)
        for k in range(len(folds)):
            fit_rows, rows = scored & whole & (fold_of != k), whole & (fold_of == k)
            if 0 < y[fit_rows].sum() < fit_rows.sum():
                w = STACK_FITS[stacker]({n: v[fit_rows] for n, v in components.items()}, y[fit_rows],
                                        runs[fit_rows], **levels_of(stacker, oof))
                stacked[rows] = stacked_log_odds(w, {n: v[rows] for n, v in components.items()})
        oof[stacker] = stacked
    judged = dict(oof)  # what each candidate is judged by: the task prior as it is used, with its fallback
    second, prior_map = "length", {"a": 1.0, "b": 0.0}
    if "task_prior" in oof:
        kept = {k: within_run_auroc(oof[k][scored & ~seen_inner], y[scored & ~seen_inner], runs[scored & ~seen_inner])
                for k in FALLBACK_CANDIDATES if k in oof}  # the fallback scores the rows of new tasks: judged there
        kept = {k: v for k, v in kept.items() if np.isfinite(v)}
        second = choose(kept) if kept else "length"
        prior_map = recalibration(oof["task_prior"][scored & seen_inner], y[scored & seen_inner],
                                  runs[scored & seen_inner])
        fallback_map = recalibration(oof[second][scored], y[scored], runs[scored]) if second in oof else \
            {"a": 1.0, "b": 0.0}
        other = (fallback_map["a"] * oof[second] + fallback_map["b"]) if second in oof else np.full(len(y), np.nan)
        judged["task_prior"] = np.where(seen_inner, prior_map["a"] * oof["task_prior"] + prior_map["b"], other)
        selection["prior_seen_share"] = float(seen_inner[scored].mean()) if scored.any() else None
    # where the prior applies, pairs are those of one run *and* one side (tasks the other runs hold, or not): a
    # trajectory of a seen task and one of a new task are scored by different parts of a prior's detector, which
    # the calibration puts on one scale, and the protocol judges each side against its own baseline (the prior on
    # the seen rows, length on all); the inner folds mix the sides within a run far more than whole runs do
    strata = runs if "task_prior" not in oof else np.array([f"{r}\x1f{s}" for r, s in zip(runs, seen_inner)],
                                                          dtype=object)
    scores = {name: within_run_auroc(judged[name][scored], y[scored], strata[scored]) for name in wanted
              if name in judged}
    selection.update(n_scored=int(scored.sum()), scores={k: (None if not np.isfinite(v) else float(v))
                                                         for k, v in scores.items()})
    finite = {k: v for k, v in scores.items() if np.isfinite(v)}
    if not finite:
        selection["why"] = "no inner fold scored both classes of one run: the full model, unchosen"
        return finish(SelectedDetector("full", full=full_model(), selection=selection), features)
    simple = reference_candidate(finite)
    margins = {}
    if simple is not None:  # one standard error of each challenger's difference from what it may replace
        for tier, name in ((t, n) for t in challenger_tiers(simple) for n in t if n in finite):
            earlier = [simple] + [c for t in challenger_tiers(simple)[:challenger_tiers(simple).index(tier)]
                                  for c in t if c in finite]
            for against in earlier:
                margins[margin_key(name, against)] = paired_difference(
                    judged[name][scored], judged[against][scored], y[scored], strata[scored])[1]
        selection["one_se"] = {k: float(v) for k, v in margins.items() if np.isfinite(v)}
    margins = {k: v for k, v in margins.items() if np.isfinite(v)}
    winner = choose(finite, margins)
    best = finite[winner]
    others = {k: v for k, v in finite.items() if k != winner}
    runner_up = max(others, key=others.get) if others else None
    what = {"baselines": " (the task prior, its ties broken by length: the protocol's two baselines at once)"}
    selection["why"] = (f"{winner}{what.get(winner, '')} had the " + ("highest " if best == max(finite.values()) else "") +
                        f"pooled within-run AUROC {best:.3f} on {len(folds)} inner folds of the {kind} kind"
                        + (f" ({runner_up} {others[runner_up]:.3f})" if runner_up else "")
                        + ("" if best == max(finite.values()) else
                           (REFERENCE_WHY.get(simple, ": a model of many features must beat the best baseline")) +
                           f" by one standard error of the paired difference (at least {COMPLEX_MARGIN}) to be "
                           f"chosen"))
    out = SelectedDetector(winner, selection=selection)
    if winner == "task_prior":
        # the prior alone gives every trajectory of a task it never saw the base rate - one probability for all of
        # a run of new tasks: those rows are scored by the best candidate that does not read the task's history
        fallback = SelectedDetector(second, selection={"kind": kind, "role": "fallback for tasks the prior never saw"})
        if second == "full":
            fallback.full = full_model()
        else:
            fallback.length = length
        fallback.recalibration = recalibration(oof[second][scored], y[scored], runs[scored]) if second in oof else \
            {"a": 1.0, "b": 0.0}
        out.fallback = finish(fallback, features)
        selection["fallback"] = second
        selection["why"] += (f"; the prior applies only to a task it saw in training: a trajectory of a task it never "
                             f"saw is scored by {second} (the best candidate that does not read the task's history"
                             + (f", inner score {finite[second]:.3f}" if second in finite else "") + ")")
    if winner == "baselines" and "task_prior" in oof:
        # a task the prior never saw gets its base rate: the baselines rank such rows by length already (ε·length),
        # and the length model itself scores them, on its own scale of log-odds rather than ε of it - the
        # probabilities and the points of a trajectory of a new task are length's
        fallback = SelectedDetector("length", length=length,
                                    selection={"kind": kind, "role": "fallback for tasks the prior never saw"})
        out.fallback = finish(fallback, features)
        selection["fallback"] = "length"
        selection["why"] += ("; a trajectory of a task the prior never saw is scored by the length model (the prior "
                             "gives every such task its base rate)")
    if winner in ("full", "stacked"):
        out.full = full_model()
    if winner in ("length", *STACKERS):
        out.length = length
    if winner == "task_prior" or (winner in STACKERS and "task_prior" in oof):
        out.prior = TaskPrior.fit(tasks, y)
    if winner == "baselines":  # the ties of the prior it applies, over the spread of the length model it applies
        out.stack = fit_tie_break({"length": length.log_odds(features), "task_prior": out.prior.log_odds(tasks)},
                                  levels=out.prior.levels())
    elif winner in STACKERS:
        rows = scored & np.all([np.isfinite(oof[n]) for n in STACK_COMPONENTS[winner] if n in oof], axis=0)
        components = {n: oof[n][rows] for n in STACK_COMPONENTS[winner] if n in oof}
        out.stack = STACK_FITS[winner](components, y[rows], runs[rows])
    out.recalibration = prior_map if winner == "task_prior" else recalibration(oof[winner][scored], y[scored],
                                                                               runs[scored])
    selection["recalibration"] = out.recalibration
    return finish(out, features)


def prior_by_run(tasks: np.ndarray, failure: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(log-odds, seen)``: each row's task prior fitted on the *other* runs' rows (and whether they hold its task): the task prior's inner score in the leave-one-run-out
    kind, as the protocol's own baseline is (the failure rate of the task in the other runs). Free to compute (no
    model is refitted) and closer to the outer fold than k groups of runs would be: the prior gains the most from
    every run it sees, and an inner score from two thirds of the runs undersold it to the full model."""
    out, seen = np.full(len(failure), np.nan), np.zeros(len(failure), dtype=bool)
    for r in pd.unique(runs):
        mine = runs == r
        if (~mine).any():
            prior = TaskPrior.fit(tasks[~mine], failure[~mine])
            out[mine] = prior.log_odds(tasks[mine])
            seen[mine] = prior.lookup(tasks[mine])[1] > 0
    return out, seen


def paired_difference(a, b, failure, runs) -> tuple[float, float]:
    """``(difference, standard error)`` of the pooled within-run AUROC of scores ``a`` minus that of ``b`` on the rows
    both score: DeLong's placement values within each run (pairs of one run only), the runs' differences weighed by
    their failure × success pairs. Written out here (a few lines of numpy): scikit-learn and scipy have no paired
    AUROC variance. The placements are counted on sorted scores (:func:`sign_sums`), never as the failure × success
    matrix of pair signs, which held 3 × 8 bytes a pair: 34 GB for one run of 8·10⁴ trajectories (issue 51); every
    sum is of halves, exact in floats either way, so the result is the matrix's to the last bit."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    y, runs = np.asarray(failure, dtype=bool), np.asarray(runs, dtype=object)
    ok = np.isfinite(a) & np.isfinite(b)
    total = weight = var = 0.0
    for r in pd.unique(runs[ok]):
        rows = ok & (runs == r)
        pos, neg = rows & y, rows & ~y
        n1, n0 = int(pos.sum()), int(neg.sum())
        if not (n1 and n0):
            continue
        # d[i, j] = (sign(a_i - a_j) - sign(b_i - b_j)) / 2 over failures i and successes j, summed by row and column
        rows_a, cols_a = sign_sums(a[pos], a[neg])
        rows_b, cols_b = sign_sums(b[pos], b[neg])
        by_row, by_col = (rows_a - rows_b) / 2.0, (cols_a - cols_b) / 2.0
        w = float(n1 * n0)
        total += float(by_row.sum()) / (n1 * n0) * w
        weight += w
        v1 = (by_row / n0).var(ddof=1) / n1 if n1 > 1 else 0.0
        v0 = (by_col / n1).var(ddof=1) / n0 if n0 > 1 else 0.0
        var += w * w * (v1 + v0)
    if not weight:
        return float("nan"), float("nan")
    return total / weight, float(np.sqrt(var)) / weight


def reference_candidate(scores: dict[str, float]) -> str | None:
    """The candidate the others must beat (:func:`choose`): where tasks recur the baselines (the task prior, its ties
    broken by length, :func:`fit_tie_break`) - on rows of a task the training runs hold they rank as the protocol's
    prior baseline does, its ties broken, and on the others as length: the protocol's two baselines at once - or,
    without them among the candidates, the task prior (its fallback is length or beats it); else the best simple
    candidate (:data:`SIMPLE`)."""
    for name in ("baselines", "task_prior"):
        if name in scores:
            return name
    present = [c for c in CANDIDATES if c in SIMPLE and c in scores]
    return max(present, key=lambda c: (scores[c], -CANDIDATES.index(c))) if present else None


def challenger_tiers(reference: str | None) -> tuple[tuple[str, ...], ...]:
    """The candidates that challenge the reference, tier by tier (:func:`choose`): against the baselines (or the task
    prior) first the other simple candidates (the prior alone, length alone), then the models of many features;
    against length the models of many features."""
    complex_ = ("full", "stacked")
    if reference in ("baselines", "task_prior"):
        return tuple(c for c in SIMPLE if c != reference), complex_
    return (complex_,)


def margin_key(name: str, against: str) -> str:
    """The key of ``name``'s standard error against ``against`` in :func:`choose`'s margins (JSON-ready)."""
    return f"{name} vs {against}"

def sign_sums(pos: np.ndarray, neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ_j sign(pos_i - neg_j) for each i, Σ_i sign(pos_i - neg_j) for each j)`` as integers, from sorted scores:
    O((n1 + n0) log n) time and memory instead of the n1 × n0 matrix of signs."""
    sorted_neg, sorted_pos = np.sort(neg), np.sort(pos)
    by_pos = (np.searchsorted(sorted_neg, pos, "left")  # successes below each failure
              - (len(neg) - np.searchsorted(sorted_neg, pos, "right")))  # minus those above it
    by_neg = ((len(pos) - np.searchsorted(sorted_pos, neg, "right"))  # failures above each success
              - np.searchsorted(sorted_pos, neg, "left"))  # minus those below it
    return by_pos.astype(np.int64), by_neg.astype(np.int64)


def choose(scores: dict[str, float], margins: dict[str, float] | None = None) -> str:
    """The candidate chosen from the inner scores: the reference (:func:`reference_candidate`: the baselines where the
    prior applies, else the best simple candidate, :data:`SIMPLE`), challenged tier by tier (:func:`challenger_tiers`:
    against the baselines first the prior alone and length alone, then the models of many features, full and stacked):
    the best of a tier replaces the current choice only when it beats the best-scoring of the simpler candidates
    (chosen or not) by one standard error of their paired difference (``margins[margin_key(name, simpler)]``, or
    ``margins[name]``) and at least :data:`COMPLEX_MARGIN`. On
    a few dozen inner rows a model of thousands of columns wins by noise as often as by signal, and the baselines are
    what the detector must not fall below: on the shared runs a learned stack of length and the prior won the
    leave-one-run-out kind's inner folds by 0.01-0.05 in 8 of 10 folds and then fell 0.028 below the prior on the
    outer rows (the reason the ``baselines`` no longer learn the prior's weight, :func:`fit_tie_break`). Ties go to the
    earlier in :data:`CANDIDATES`."""
    margins = margins or {}

    def best(names):
        present = [c for c in CANDIDATES if c in names and c in scores]
        return max(present, key=lambda c: (scores[c], -CANDIDATES.index(c))) if present else None

    current = reference_candidate(scores)
    simpler = [current] if current is not None else []
    for tier in challenger_tiers(current):
        rival = best(tier)
        if rival is None:
            continue
        if current is None:
            current = rival
        else:  # it must beat the best-scoring of the simpler candidates, chosen or not
            against = best(simpler)
            margin = max(COMPLEX_MARGIN, margins.get(margin_key(rival, against), margins.get(rival, 0.0)))
            if scores[rival] > scores[against] + margin:
                current = rival
        simpler += list(tier)
    return current


def recalibration(log_odds: np.ndarray, failure: np.ndarray, runs=None) -> dict[str, float]:
    """``a, b`` the winner's log-odds are mapped by: the identity. Every candidate already speaks log-odds of failure
    (logistic models fitted on the training rows, the logit of a task's failure rate), and the probabilities are
    calibrated afterwards on runs the models never saw (the detector's Platt map, then the label shift). A Platt map
    fitted here on the inner out-of-fold rows - a third of the training rows in the run-and-task kind - had slopes
    from 0.05 to 2.4 across the fold models of one protocol, and since several fold models score one run, it
    scrambled the pairs across folds: the length candidate's pooled AUROC fell from 0.692 to 0.650 on the shared runs
    (run- and task-disjoint). Kept as a map (``{"a": 1, "b": 0}``) so that a detector folder reads as before."""
    return {"a": 1.0, "b": 0.0}


def finish(detector: SelectedDetector, features: TrajectoryFeatures) -> SelectedDetector:
    detector.set_reference(features)
    return detector

