"""The protocols that judge a learned failure detector on labelled runs, and its two baselines (pure statistics).

A detector trained and evaluated on the same runs can look good for reasons that do not carry to a new run: it may
learn *which tasks are hard* when other agents' trajectories of the same task are in its training set, or what one
domain's failures look like. Each protocol (:data:`PROTOCOLS`) splits the labelled trajectories into folds; a fold's
model is fitted on its ``train`` rows and scores its ``test`` rows, and every row is scored by exactly one fold:

* ``within_run`` - within each run, folds by task (``StratifiedGroupKFold``, :func:`~.calibration.group_folds`);
  trained on the same run's other tasks only (what a detector fitted on one run can do);
* ``leave_one_run_out`` - each run is scored by a model of all the other runs, which may hold the same tasks
  (other agents on them): *run*-disjoint, not task-disjoint - the task-leakage trap;
* ``leave_run_and_task_out`` - each run's tasks split into folds; a fold of run r is scored by a model of the other
  runs' trajectories of *other* tasks: run- and task-disjoint, the same domain still in training;
* ``leave_one_domain_out`` - each domain's runs are scored by a model of the other domains: domain shift.

:func:`protocol_folds` makes the folds and checks each (:func:`check_fold`): a fold whose training rows hold one of
its test trajectories - or, for the task-disjoint protocols (:data:`TASK_DISJOINT`), one of its test tasks, or for
the run- and domain-disjoint ones a row of the test run or domain - raises :class:`LeakageError`.

**Baselines**, beside every protocol: the best length baseline (of ``num_messages``, ``num_tool_calls``,
``agent_chars``, chosen on these data, which favours length), and the **task-difficulty prior**
(:func:`task_prior`): the failure rate of the same task in the *other* runs, where benchmark tasks recur (NaN for a
task no other run holds; such rows drop out of that comparison only). "The same task" is its domain and its identity
within it as the caller gives it - the steps give the hash of its instructions
(:mod:`agentuq_nb.records.task_identity`), since benchmarks reuse ids for different tasks.

**One scale per run** (:func:`one_scale_per_run`): where several fold models score one run (within-run and
run-and-task-out: one per task fold), pairs of that run scored by *different* models also count in the pooled
within-run AUROC, and their scores differ by the models' scales too (one fold's model may be length alone, the next
the full model: their log-odds spread differently) - on the shared runs the run- and task-disjoint protocol fell from
0.684 on pairs of one model to 0.651 on all pairs. So the protocol ranks by each fold model's scores of a run
standardized by the mean and deviation of its own scores over every row of that run - the run's unlabelled
features, which ``predict`` has too (a transductive use of the run, never of a label; nor of another fold's model,
which may have been fitted on this fold's rows). A monotone map per fold model: the pairs of one model keep their
order; a fold model that is a function of length alone ranks the run exactly as length does. The log-odds themselves
(what the probabilities are calibrated from) are left as the models gave them.

**The comparison** (:func:`protocol_comparison`) is :mod:`.pooled_auroc`'s: AUROC pooled over runs with pairs within a
run only, tasks resampled within runs for the intervals, and the *paired* bootstrap of the difference between the
detector and a baseline on the trajectories both score. A detector **beats** a baseline only when that difference's
95% interval lies above 0 (below 0: it is worse; otherwise: not distinguishable).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.calibration import calibration_report, group_folds, reliability_table
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT, DETECTOR_PROTOCOLS
from agentuq_nb.evaluation.length_control import DEFAULT_STRATA, length_strata
from agentuq_nb.evaluation.pooled_auroc import POOLED, pooled_leaderboard

PROTOCOLS = DETECTOR_PROTOCOLS
#: protocols whose training rows never hold a task of the rows they score
TASK_DISJOINT = frozenset({"within_run", "leave_run_and_task_out", "leave_one_domain_out"})
#: protocols whose training rows never hold a row of the run (or domain) they score
RUN_DISJOINT = frozenset({"leave_one_run_out", "leave_run_and_task_out", "leave_one_domain_out"})
LENGTH_BASELINES = ("num_messages", "num_tool_calls", "agent_chars")
PRIOR = "task_prior"
VERDICTS = {1: "beats", -1: "below", 0: "not distinguishable from"}


class LeakageError(ValueError):
    """A fold's training rows hold what it must not see (an evaluated trajectory, its task, its run or domain)."""


@dataclass(frozen=True)
class Fold:
    """One model of a protocol: trained on rows ``train``, scoring rows ``test`` (positions); ``held_out`` names what
    it holds out."""

    protocol: str
    held_out: str
    train: np.ndarray
    test: np.ndarray


def task_keys(domains, task_ids) -> np.ndarray:
    """A task's key across runs: its domain and its identity within the domain (``task_ids``: the content key of its
    instructions, or its id where there is none; tasks of different domains share ids)."""
    return (pd.Series(domains, dtype="string").fillna("") + "\x1f" + pd.Series(task_ids, dtype="string").fillna("")
            ).to_numpy(dtype=object)


def check_fold(fold: Fold, runs, domains, tasks) -> None:
    """Refuse a fold that lets into training what its protocol holds out (see the module docstring)."""
    runs, domains, tasks = (np.asarray(a, dtype=object) for a in (runs, domains, tasks))
    train, test = np.asarray(fold.train), np.asarray(fold.test)
    where = f"protocol {fold.protocol}, fold {fold.held_out}"
    if np.intersect1d(train, test).size:
        raise LeakageError(f"{where}: {np.intersect1d(train, test).size} evaluated trajectories are in training")
    if fold.protocol in TASK_DISJOINT and set(tasks[train]) & set(tasks[test]):
        raise LeakageError(f"{where}: training holds {len(set(tasks[train]) & set(tasks[test]))} evaluated tasks")
    if fold.protocol in RUN_DISJOINT and set(runs[train]) & set(runs[test]):
        raise LeakageError(f"{where}: training holds rows of the evaluated run(s)")
    if fold.protocol == "leave_one_domain_out" and set(domains[train]) & set(domains[test]):
        raise LeakageError(f"{where}: training holds rows of the evaluated domain")
    if fold.protocol == "within_run" and not set(runs[train]) <= set(runs[test]):
        raise LeakageError(f"{where}: within-run training holds rows of another run")


def protocol_folds(protocol: str, runs, domains, task_ids, failure, n_splits: int = 5, seed=0) -> list[Fold]:
    """The folds of ``protocol`` over the rows (one per labelled trajectory: its run, domain, task id and failure
    label), each checked with :func:`check_fold`. A protocol the rows cannot hold (one run, one domain) has no fold;
    a run with fewer than 2 tasks has no within-run fold."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; one of {', '.join(PROTOCOLS)}")
    runs = np.asarray(runs, dtype=object)
    domains = np.asarray(domains, dtype=object)
    tasks = task_keys(domains, task_ids)
    y = np.asarray(failure, dtype=bool)
    folds: list[Fold] = []
    names = list(dict.fromkeys(runs))
    if protocol in ("within_run", "leave_run_and_task_out"):
        for r in names:
            rows = np.flatnonzero(runs == r)
            if len(np.unique(tasks[rows])) < 2:
                continue
            fold = group_folds(tasks[rows], n_splits, seed, labels=y[rows])
            for k in range(fold.max() + 1):
                test = rows[fold == k]
                if protocol == "within_run":
                    train = rows[fold != k]
                else:
                    train = np.flatnonzero((runs != r) & ~np.isin(tasks, tasks[test]))
                folds.append(Fold(protocol, f"{r} fold {k}", train, test))
    elif protocol == "leave_one_run_out" and len(names) > 1:
        folds = [Fold(protocol, r, np.flatnonzero(runs != r), np.flatnonzero(runs == r)) for r in names]
    elif protocol == "leave_one_domain_out":
        domain_names = list(dict.fromkeys(domains))
        if len(domain_names) > 1:
            folds = [Fold(protocol, d, np.flatnonzero(domains != d), np.flatnonzero(domains == d))
                     for d in domain_names]
    # a fold with nothing to learn from (run-and-task-out on one run, or where the other runs hold only the held-out
    # fold's tasks) has no model: its rows stay unscored rather than failing the fit
    folds = [fold for fold in folds if len(fold.train)]
    for fold in folds:
        check_fold(fold, runs, domains, tasks)
    return folds


def cross_fit(folds: Sequence[Fold], n: int, fit: Callable[[Fold], Any],
              score: Callable[[Any, np.ndarray], np.ndarray]) -> tuple[np.ndarray, np.ndarray, list[Any]]:
    """``(scores, fold, models)``: each fold's model ``fit(fold)`` scores its test rows (``score(model, rows)``); a row
    no fold scores is NaN with fold -1. A row scored twice is a bug in the folds and raises."""
    out = np.full(n, np.nan)
    which = np.full(n, -1)
    models = []
    for k, fold in enumerate(folds):
        if (which[fold.test] >= 0).any():
            raise LeakageError(f"protocol {fold.protocol}: a row is scored by two folds")
        model = fit(fold)
        out[fold.test] = score(model, fold.test)
        which[fold.test] = k
        models.append(model)
    return out, which, models


def one_scale_per_run(folds: Sequence[Fold], models: Sequence[Any], score: Callable[[Any, np.ndarray], np.ndarray],
                      runs, raw: np.ndarray) -> np.ndarray:
    """The scores the protocol ranks by: ``raw`` out-of-fold log-odds (:func:`cross_fit`'s) where one model scores a
    run; where several fold models score a run, each model's scores of its held-out rows of that run standardized by
    the mean and standard deviation of *its own* scores over every row of the run (``score(model, rows)``: features
    only, no label; module docstring, *One scale per run*). A fold's scores read nothing but its own model and the
    run's features: no label of its held-out rows, nor of another fold's model."""
    runs = np.asarray(runs, dtype=object)
    out = np.array(raw, dtype=float, copy=True)
    scoring: dict[Any, list[tuple[int, np.ndarray]]] = {}
    for k, fold in enumerate(folds):
        for r in pd.unique(runs[fold.test]):
            scoring.setdefault(r, []).append((k, fold.test[runs[fold.test] == r]))
    for r, parts in scoring.items():
        if len(parts) < 2:
            continue
        whole = np.flatnonzero(runs == r)
        for k, test in parts:
            reference = np.asarray(score(models[k], whole), dtype=float)
            reference = reference[np.isfinite(reference)]
            mean = float(reference.mean()) if len(reference) else 0.0
            sd = float(reference.std()) if len(reference) > 1 else 0.0
            out[test] = (np.asarray(raw, dtype=float)[test] - mean) / (sd if sd > 1e-12 else 1.0)
    return out


def task_prior(runs, domains, task_ids, failure) -> np.ndarray:
    """The failure rate of each row's task (domain, task id) in the *other* runs; NaN where no other run holds it."""
    frame = pd.DataFrame({"run": np.asarray(runs, dtype=object), "task": task_keys(domains, task_ids),
                          "y": np.asarray(failure, dtype=float)})
    by_task = frame.groupby("task")["y"].agg(["sum", "count"])
    by_run_task = frame.groupby(["run", "task"])["y"].agg(["sum", "count"])
    total = by_task.loc[frame["task"]].to_numpy()
    own = by_run_task.loc[list(zip(frame["run"], frame["task"]))].to_numpy()
    others = total[:, 1] - own[:, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(others > 0, (total[:, 0] - own[:, 0]) / np.where(others > 0, others, 1), np.nan)


def evaluation_frame(runs, domains, task_ids, failure, lengths: pd.DataFrame) -> pd.DataFrame:
    """The frame :func:`protocol_comparison` reads: ``run``, ``task``, ``failure``, ``length_stratum`` (each run's
    message-count strata), the length baselines (``lengths``' columns) and the task prior."""
    frame = pd.DataFrame({"run": np.asarray(runs, dtype=object), "task": task_keys(domains, task_ids),
                          "failure": np.asarray(failure, dtype=bool)})
    for name in LENGTH_BASELINES:
        frame[name] = lengths[name].to_numpy(dtype=float)
    frame["length_stratum"] = -1
    for r in frame["run"].unique():
        rows = (frame["run"] == r).to_numpy()
        frame.loc[rows, "length_stratum"] = length_strata(frame.loc[rows, "num_messages"], DEFAULT_STRATA)
    frame[PRIOR] = task_prior(runs, domains, task_ids, failure)
    return frame


def _pooled(long: pd.DataFrame, name: str) -> pd.Series:
    return long[(long["estimator"] == name) & (long["run"] == POOLED)].iloc[0]


def verdict(lo: float, hi: float) -> str:
    """``beats`` when a difference's interval lies above 0, ``below`` under it, else ``not distinguishable from``."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "untested"
    return VERDICTS[1 if lo > 0 else -1 if hi < 0 else 0]


def protocol_comparison(frame: pd.DataFrame, score: str = "detector", n_boot: int = DEFAULT_N_BOOT,
                        seed=0) -> dict[str, Any]:
    """The detector's pooled AUROC with its interval against the best length baseline and the task prior (see the
    module docstring), from ``frame`` (:func:`evaluation_frame` with the oriented score column ``score``; rows without
    a score are left out). One row, JSON-ready."""
    scored = frame[np.isfinite(frame[score].to_numpy(dtype=float))].reset_index(drop=True)
    out: dict[str, Any] = {"n": int(len(scored)), "n_failures": int(scored["failure"].sum()),
                           "n_runs": int(scored["run"].nunique())}
    if scored.empty or not (0 < scored["failure"].sum() < len(scored)):
        return {**out, "note": "no scored trajectory, or one class only"}
    runs = list(dict.fromkeys(scored["run"]))
    length = pooled_leaderboard(scored, [score], list(LENGTH_BASELINES), n_boot=n_boot, seed=seed, runs=runs)
    det = _pooled(length.long, score)
    out.update(auroc=det["auroc"], auroc_lo=det["auroc_lo"], auroc_hi=det["auroc_hi"], auroc_lc=det["auroc_lc"],
               auroc_lc_lo=det["auroc_lc_lo"], auroc_lc_hi=det["auroc_lc_hi"], n_pairs=int(det["n_pairs"]))
    best = length.baselines["auroc"]
    comparison = length.comparison.set_index("estimator").loc[score]
    if best is not None:
        base = _pooled(length.long, best)
        out.update(length_baseline=best, length_auroc=base["auroc"], length_auroc_lo=base["auroc_lo"],
                   length_auroc_hi=base["auroc_hi"], diff_vs_length=comparison["diff_vs_length"],
                   diff_vs_length_lo=comparison["diff_vs_length_lo"], diff_vs_length_hi=comparison["diff_vs_length_hi"])
        out["vs_length"] = verdict(out["diff_vs_length_lo"], out["diff_vs_length_hi"])
    has_prior = np.isfinite(scored[PRIOR].to_numpy(dtype=float))
    out["prior_n"] = int(has_prior.sum())
    prior_rows = scored[has_prior].reset_index(drop=True)
    if len(prior_rows) and 0 < prior_rows["failure"].sum() < len(prior_rows):
        prior_runs = list(dict.fromkeys(prior_rows["run"]))
        prior = pooled_leaderboard(prior_rows, [score], [PRIOR], n_boot=n_boot, seed=seed, runs=prior_runs)
        p = _pooled(prior.long, PRIOR)
        d = _pooled(prior.long, score)
        c = prior.comparison.set_index("estimator").loc[score]
        out.update(prior_auroc=p["auroc"], prior_auroc_lo=p["auroc_lo"], prior_auroc_hi=p["auroc_hi"],
                   auroc_on_prior_rows=d["auroc"], diff_vs_prior=c["diff_vs_length"],
                   diff_vs_prior_lo=c["diff_vs_length_lo"], diff_vs_prior_hi=c["diff_vs_length_hi"])
        out["vs_prior"] = verdict(out["diff_vs_prior_lo"], out["diff_vs_prior_hi"])
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in out.items()}


def held_out_probabilities(log_odds, failure, runs) -> np.ndarray:
    """Failure probabilities of out-of-fold log-odds, each run's from a Platt map fitted on the *other* runs' rows
    (:func:`~.detector_model.platt_map`, its slope within runs where they are two or more): calibrated on runs other
    than the one it scores. NaN where a row has no score or no other run has one."""
    from agentuq_nb.evaluation.detector_model import platt_map, platt_probability

    s = np.asarray(log_odds, dtype=float)
    y = np.asarray(failure, dtype=bool)
    runs = np.asarray(runs, dtype=object)
    prob = np.full(len(s), np.nan)
    for r in dict.fromkeys(runs):
        rows = runs == r
        train = ~rows & np.isfinite(s)
        if train.sum() and np.isfinite(s[rows]).any():
            prob[rows] = platt_probability(platt_map(s[train], y[train], runs[train]), s[rows])
    return prob


def calibration_summary(prob, failure, n_bins: int = 10) -> tuple[dict[str, Any], pd.DataFrame]:
    """``(report, bins)`` of held-out probabilities: ECE, debiased ECE, Brier and its decomposition
    (:func:`~.calibration.calibration_report`), ``auroc_across_runs`` - the AUROC of the probabilities pooled over
    every run at once (pairs across runs too: what ranking a mixed batch of conversations by them gives) - and the
    reliability table (equal-mass bins)."""
    from agentuq_nb.evaluation.metrics import auroc

    p = np.asarray(prob, dtype=float)
    ok = np.isfinite(p)
    y = np.asarray(failure, dtype=bool)
    if not ok.any():  # no run had another to be calibrated on (one training run): nothing to report, said as None
        return {"n": 0, "ece": None, "ece_debiased": None, "brier": None, "log_loss": None,
                "auroc_across_runs": None}, pd.DataFrame()
    report = calibration_report(p[ok], y[ok], n_bins)
    report["auroc_across_runs"] = float(auroc(p[ok], y[ok])) if 0 < y[ok].sum() < ok.sum() else None
    return report, reliability_table(p[ok], y[ok], n_bins)
