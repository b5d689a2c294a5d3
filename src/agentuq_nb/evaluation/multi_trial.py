"""Multi-trial labels: per-task success rates, τ²-bench's pass^k, soft-label metrics and label noise.

With ``num_trials > 1`` a task is run several times and its trajectories' verdicts may differ; one
trial is then a noisy label.  Definitions (a *task* is a ``(domain, task_id)`` pair; a trajectory
fails when ``reward < failure_threshold``, success is the complement; with the default threshold
1.0 and τ²-bench's 0/1 rewards this is τ²-bench's ``is_successful``, ``|reward - 1| <= 1e-6``):

* **per-task success rate** ``s_t = c_t / n_t`` (c_t successes in n_t trials), failure rate
  ``p_t = 1 - s_t``;
* **pass^k** exactly as τ²-bench (``tau2.metrics.agent_metrics.pass_hat_k``, from Yao et al. 2024,
  arXiv:2406.12045): per task ``C(c_t, k) / C(n_t, k)``, the chance that k trials drawn without
  replacement all succeed, averaged over tasks with equal weight; like τ²-bench, k is capped at the
  fewest trials of any task (larger k are left out with a note);
* **soft-label AUROC** of an uncertainty ``u`` against the per-task failure rate: every trajectory i
  counts as a positive (failure) with weight ``p_t(i)`` and as a negative with weight
  ``1 - p_t(i)``; AUROC is the weighted probability that a positive has the higher uncertainty,
  ties 1/2.  This equals ``sklearn.metrics.roc_auc_score`` on the rows duplicated (label 1 weight
  p, label 0 weight 1 - p) with ``sample_weight``; with one trial per task it is the ordinary AUROC;
* **soft-label Brier score** of a predicted failure probability ``q``: ``mean_i (q_i - p_t(i))²``;
* **label noise**: among tasks with at least 2 trials, the share whose verdict flips (some trials
  succeed, some fail), and the mean within-task variance of the failure indicator (sample
  variance, ddof = 1, i.e. ``n_t/(n_t-1) p_t (1-p_t)``).

The per-task rate ``p_t`` includes the trajectory's own trial (it is the label of the task, not a
prediction).  Every interval is a percentile bootstrap that resamples tasks with all their trials
(:func:`agentuq_nb.evaluation.bootstrap.cluster_count_chunks`).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.bootstrap import cluster_count_chunks, mean_ci, percentile_ci
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import TASK_KEYS, task_labels, tasks_repeat  # noqa: F401 (tasks_repeat: named here too)
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, Outcomes, check_failure_threshold, row_failures

CLUSTER_METHOD = "percentile, resampling tasks (clusters)"


# --------------------------------------------------------------------------- tasks
def task_outcomes(rows: pd.DataFrame, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> pd.DataFrame:
    """Per task: ``n_trials``, ``n_successes``, ``n_failures``, ``success_rate``, ``failure_rate``
    (rows with a non-finite reward are left out; the ``failed`` labels the rows carry, else ``reward <
    failure_threshold``)."""
    check_failure_threshold(failure_threshold)
    rows = rows[np.isfinite(rows["reward"].to_numpy(dtype=float))]
    return task_counts(rows, row_failures(rows, failure_threshold))  # carried labels, where the rows have them


def task_counts(rows: pd.DataFrame, failed: np.ndarray) -> pd.DataFrame:
    """:func:`task_outcomes` of rows (their ``domain``, ``task_id``) whose failure labels ``failed`` are given (made
    once by the caller, e.g. a run's :class:`~agentuq_nb.records.outcomes.Outcomes`)."""
    keys = [k for k in TASK_KEYS if k in rows.columns]
    fail = pd.Series(failed, index=rows.index)
    g = fail.groupby([rows[k] for k in keys], sort=True)
    out = pd.DataFrame({"n_trials": g.size(), "n_failures": g.sum().astype(int)})
    out.insert(1, "n_successes", out["n_trials"] - out["n_failures"])
    out["success_rate"] = out["n_successes"] / out["n_trials"]
    out["failure_rate"] = out["n_failures"] / out["n_trials"]
    return out.reset_index()


def pass_hat_k(n_trials, n_successes, k: int) -> np.ndarray:
    """τ²-bench's pass^k per task, vectorized: ``C(n_successes, k) / C(n_trials, k)``; refuses k > n_trials
    as τ²-bench does."""
    n, c = np.asarray(n_trials), np.asarray(n_successes)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if np.any(n < k):
        raise ValueError(f"k={k} is more than the {int(np.min(n))} trials of a task")
    from scipy.special import comb

    return comb(c, k) / comb(n, k)


def label_noise(outcomes: pd.DataFrame) -> dict:
    """Label-noise readout from :func:`task_outcomes`: tasks with ≥ 2 trials, the share whose verdict
    flips across trials, the mean within-task (sample) variance of the failure indicator."""
    multi = outcomes[outcomes["n_trials"] >= 2]
    n, f = multi["n_trials"].to_numpy(float), multi["n_failures"].to_numpy(float)
    flips = (f > 0) & (f < n)
    variance = f * (n - f) / (n * (n - 1)) if n.size else np.array([])
    return {"n_tasks_with_repeats": int(n.size),
            "share_flipping": float(flips.mean()) if n.size else None,
            "n_flipping": int(flips.sum()),
            "mean_within_task_variance": float(variance.mean()) if n.size else None}


# --------------------------------------------------------------------------- soft-label metrics
def soft_label_inputs(name: str, values, failure_rate, weights=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``values`` and ``failure_rate`` as checked 1-D float arrays of one length, and the weights as a
    (B, n) matrix (one row of ones when None)."""
    x = np.asarray(values, dtype=float)
    p = np.asarray(failure_rate, dtype=float)
    if x.shape != p.shape or x.ndim != 1:
        raise ValueError(f"{name} {x.shape} and failure_rate {p.shape} must be 1-D of one length")
    if np.any((p < 0) | (p > 1)):
        raise ValueError("failure_rate must lie in [0, 1]")
    W = np.ones((1, x.size)) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    return x, p, W


def soft_auroc(uncertainty, failure_rate, weights=None) -> float | np.ndarray:
    """AUROC of ``uncertainty`` against soft labels ``failure_rate`` in [0, 1] (see the module
    docstring); ``weights`` (n,) or (B, n) row weights (bootstrap counts) give one AUROC per row of
    weights.  NaN when the positive or the negative weight is 0.

    Written by hand because sklearn scores one weighting per call; here the tie blocks of the
    sorted uncertainty are shared and all B weightings cost one cumulative sum.
    """
    u, p, W = soft_label_inputs("uncertainty", uncertainty, failure_rate, weights)
    order = np.argsort(u, kind="stable")
    us = u[order]
    starts = np.flatnonzero(np.r_[True, us[1:] != us[:-1]]) if us.size else np.array([], dtype=int)
    pos = W[:, order] * p[order]
    neg = W[:, order] * (1.0 - p[order])
    if us.size == 0:
        out = np.full(W.shape[0], np.nan)
    else:
        pos_b = np.add.reduceat(pos, starts, axis=1)
        neg_b = np.add.reduceat(neg, starts, axis=1)
        below = np.cumsum(neg_b, axis=1) - neg_b
        total_pos, total_neg = pos_b.sum(axis=1), neg_b.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (pos_b * (below + 0.5 * neg_b)).sum(axis=1) / (total_pos * total_neg)
        out[(total_pos <= 0) | (total_neg <= 0)] = np.nan
    return float(out[0]) if weights is None or np.ndim(weights) == 1 else out


def soft_brier(probability, failure_rate, weights=None) -> float | np.ndarray:
    """Brier score of a failure probability against soft labels: ``Σ w (q - p)² / Σ w``; ``weights``
    as in :func:`soft_auroc`."""
    q, p, W = soft_label_inputs("probability", probability, failure_rate, weights)
    if np.any((q < 0) | (q > 1)):
        raise ValueError("probability must lie in [0, 1] (a failure probability, e.g. from calibration)")
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (W * (q - p) ** 2).sum(axis=1) / W.sum(axis=1)
    return float(out[0]) if weights is None or np.ndim(weights) == 1 else out


# --------------------------------------------------------------------------- the report
def read_rows(source) -> pd.DataFrame:
    """The trajectory rows of a run folder (:meth:`RunDir.rewards`) or a frame with ``task_id`` and ``reward``."""
    if isinstance(source, pd.DataFrame):
        missing = [c for c in ("task_id", "reward") if c not in source.columns]
        if missing:
            raise ValueError(f"rows lack column(s) {missing}; columns: {list(source.columns)}")
        return source.reset_index(drop=True)
    if isinstance(source, (str, os.PathLike, RunDir)):
        return RunDir.of(source).rewards()
    raise TypeError(f"source must be a run folder or a DataFrame, got {type(source).__name__}")


def multi_trial_report(source, k_values=None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, uncertainty: str | None = None,
                       invert: bool = False, probability: str | None = None, n_boot: int = DEFAULT_N_BOOT, ci: float = 0.95,
                       seed=0) -> tuple[dict, pd.DataFrame]:
    """Multi-trial readout of a run folder, or of rows with ``task_id``, ``reward`` (and ``domain``; a ``failed``
    column, as rows made from a run's outcomes carry, is read as their labels):
    :func:`multi_trial_readout` of their outcomes.

    ``uncertainty`` / ``probability``: names of columns of the rows holding an uncertainty (``invert`` for a
    confidence) and a failure probability; they add the soft-label AUROC and Brier score.
    """
    check_failure_threshold(failure_threshold)
    rows = read_rows(source)
    for c in (uncertainty, probability):
        if c is not None and c not in rows.columns:
            raise ValueError(f"rows have no column '{c}'; columns: {list(rows.columns)}")
    outcomes = Outcomes(rows["reward"].to_numpy(dtype=float), row_failures(rows, failure_threshold),
                        float(failure_threshold), rows[[k for k in TASK_KEYS if k in rows.columns]])
    return multi_trial_readout(outcomes, k_values, None if uncertainty is None else rows[uncertainty].to_numpy(dtype=float),
                               invert, None if probability is None else rows[probability].to_numpy(dtype=float),
                               n_boot, ci, seed)


def multi_trial_readout(outcomes: Outcomes, k_values=None, uncertainty=None, invert: bool = False, probability=None,
                        n_boot: int = DEFAULT_N_BOOT, ci: float = 0.95, seed=0) -> tuple[dict, pd.DataFrame]:
    """Multi-trial readout of a run's trajectories labelled once (:class:`~agentuq_nb.records.outcomes.Outcomes` with
    their keys, ``RunDir.outcomes``: their labels are read, not made again; their threshold is the one reported).

    ``k_values``: the k of pass^k (default 1 .. fewest trials of a task).  ``uncertainty`` / ``probability``: one
    value per trajectory of ``outcomes`` (an uncertainty, ``invert`` for a confidence; a failure probability); they
    add the soft-label AUROC and Brier score.  Rows with a non-finite reward are left out (``n_dropped``); a row
    whose uncertainty or probability is not finite (e.g. a trajectory the estimator does not score) still counts in
    its task's rates but is not scored (``soft_labels.n``).

    Returns ``(report, tasks)``: a JSON-ready dict and the per-task table (:func:`task_outcomes`
    plus a ``pass^k`` column per k).
    """
    if outcomes.keys is None or "task_id" not in outcomes.keys.columns:
        raise ValueError("the multi-trial readout needs the trajectories' keys (their task_id): outcomes of a run")
    finite = np.isfinite(outcomes.reward)
    n_dropped = int((~finite).sum())
    rows = outcomes.keys[finite].reset_index(drop=True)
    if rows.empty:
        raise ValueError("no trajectory with a finite reward to report on")
    scores = {"uncertainty": uncertainty, "probability": probability}
    for name, values in scores.items():
        if values is not None:
            rows[name] = np.asarray(values, dtype=float)[finite]
    failure_threshold = outcomes.threshold
    tasks = task_counts(rows, outcomes.failed[finite])
    min_trials = int(tasks["n_trials"].min())
    ks = list(range(1, min_trials + 1)) if k_values is None else sorted({int(k) for k in k_values})
    notes = []
    if any(k < 1 for k in ks):
        raise ValueError(f"k_values must be positive integers, got {list(k_values)}")
    if any(k > min_trials for k in ks):
        notes.append(f"pass^k for k > {min_trials} left out: a task has only {min_trials} trial(s) "
                     "(τ²-bench caps k at the fewest trials of a task)")
        ks = [k for k in ks if k <= min_trials]
    # the point estimates first (pass^k per task, the label noise, the soft labels with their intervals), then the
    # pass^k intervals (tasks resampled: one generator over the ks, in order)
    pass_values = {k: pass_hat_k(tasks["n_trials"].to_numpy(), tasks["n_successes"].to_numpy(), k) for k in ks}
    for k, values in pass_values.items():
        tasks[f"pass^{k}"] = values
    noise = label_noise(tasks)
    named = {name: None if values is None else name for name, values in scores.items()}  # the columns given
    soft = (soft_label_metrics(rows, tasks, named["uncertainty"], invert, named["probability"], n_boot, ci, seed)
            if uncertainty is not None or probability is not None else None)
    rng = np.random.default_rng(seed)
    pass_k = {}
    for k, values in pass_values.items():
        lo, hi = mean_ci(values, n_boot, ci, rng) if n_boot > 0 else (np.nan, np.nan)
        pass_k[str(k)] = {"value": float(values.mean()),
                          "ci": None if not np.isfinite(lo) else [float(lo), float(hi)]}
    report = {
        "n_trajectories": int(len(rows)), "n_dropped": n_dropped, "n_tasks": int(len(tasks)),
        "trials_per_task": {"min": min_trials, "max": int(tasks["n_trials"].max()),
                            "mean": float(tasks["n_trials"].mean())},
        "failure_threshold": float(failure_threshold),
        "mean_task_success_rate": float(tasks["success_rate"].mean()),
        "pass_hat_k": pass_k,
        "label_noise": noise,
    }
    if soft is not None:
        report["soft_labels"] = soft
    report["bootstrap"] = {"n_boot": int(n_boot), "ci": float(ci), "method": CLUSTER_METHOD,
                           "n_clusters": int(len(tasks)),
                           "seed": int(seed) if isinstance(seed, (int, np.integer)) else None}
    report["notes"] = notes
    return report, tasks


def soft_label_metrics(rows: pd.DataFrame, tasks: pd.DataFrame, uncertainty: str | None, invert: bool,
                       probability: str | None, n_boot: int, ci: float, seed=0) -> dict:
    """Soft-label AUROC of ``rows[uncertainty]`` and Brier score of ``rows[probability]`` against the
    per-task failure rate of ``tasks`` (over all their trials), on the rows where the scores are
    finite (``n``), each with a task-clustered percentile interval."""
    keys = [k for k in TASK_KEYS if k in rows.columns]
    scored = [c for c in (uncertainty, probability) if c is not None]
    rows = rows[np.isfinite(rows[scored].to_numpy(dtype=float)).all(axis=1)].reset_index(drop=True)
    out: dict = {"n": int(len(rows)), "label": "per-task failure rate"}
    if rows.empty:
        return out
    p = rows[keys].merge(tasks[keys + ["failure_rate"]], on=keys, how="left")["failure_rate"].to_numpy()
    codes = task_labels(rows)
    metrics = {}
    if uncertainty is not None:
        u = rows[uncertainty].to_numpy(dtype=float) * (-1.0 if invert else 1.0)
        metrics["auroc"] = lambda w, u=u: soft_auroc(u, p, w)
    if probability is not None:
        q = rows[probability].to_numpy(dtype=float)
        metrics["brier"] = lambda w, q=q: soft_brier(q, p, w)
    samples = {name: [] for name in metrics}
    for counts in cluster_count_chunks(codes, n_boot, seed):
        for name, fn in metrics.items():
            samples[name].append(fn(counts))
    for name, fn in metrics.items():
        value = float(fn(None))
        s = np.concatenate(samples[name]) if samples[name] else np.array([])
        out[name] = {"value": None if not np.isfinite(value) else value,
                     "ci": None if not np.isfinite(value) else percentile_ci(s, ci),
                     "n_skipped": int(np.sum(~np.isfinite(s)))}
    return out
