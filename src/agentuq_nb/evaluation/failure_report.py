"""The failure-prediction report: every metric with a bootstrap CI, as JSON-ready data.

This is what the evaluate step (:mod:`agentuq_nb.steps.evaluate`) writes to ``eval_metrics.json``.
"""
from __future__ import annotations

import numpy as np

from agentuq_nb.evaluation.bootstrap import bootstrap_samples, cluster_codes, percentile_ci
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.metrics import METRICS, clean_outcomes, point_metrics
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, Outcomes


def failure_metrics(uncertainty, reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, invert: bool = False,
                    n_boot: int = DEFAULT_N_BOOT, ci: float = 0.95, seed=0, groups=None) -> dict:
    """How well ``uncertainty`` predicts failure, with percentile bootstrap CIs.

    Contract: **higher uncertainty = more likely failure**; pass ``invert=True`` for scores where
    higher means more confident (the score is negated).  Failure is ``reward <
    failure_threshold`` (default 1.0) and is the positive class; ``reward`` may be the rewards' :class:`Outcomes`
    instead (labelled once by the caller: their labels are read, and their threshold is the one reported).  Metric definitions are in
    :mod:`agentuq_nb.evaluation.metrics` (AUROC with ties 1/2, AgentUQ's AUARC and its tie-invariant
    mean over orders of ties, AURC, PRR,
    Pearson/Spearman/Kendall tau-b of uncertainty vs -reward).

    Rows with NaN/inf uncertainty or reward are dropped and counted (``n_dropped``).  A metric
    that is undefined (fewer than 2 rows; one class only for AUROC and PRR; constant
    uncertainty or reward for the correlations) is ``None`` with its reason in ``undefined``
    and a ``None`` CI - never an exception.  The bootstrap resamples trajectories ``n_boot``
    times (seeded); resamples on which a metric is undefined are skipped and counted in
    ``bootstrap.n_skipped``.

    ``groups`` (one label per row, e.g. the task ids; a label may be a tuple such as (domain,
    task_id)): when labels repeat (several trials of a task), every resample draws tasks with
    replacement and takes all their trajectories (the task-clustered bootstrap);
    ``bootstrap.method`` is then ``"percentile, resampling tasks (clusters)"`` and
    ``bootstrap.n_clusters`` the number of tasks.  With unique labels, or ``groups=None``, it is
    the trajectory bootstrap (``bootstrap.n_clusters`` = n when ``groups`` is given).

    Returns (JSON-serializable)::

        {"metrics": {"auroc", "auarc", "auarc_tie_mean", "aurc", "prr", "pearson", "spearman", "kendall"},
         "ci": {name: [lo, hi] or None}, "n": int, "n_failures": int,
         "undefined": {name: reason}, "n_dropped": int, "failure_threshold": float,
         "invert": bool, "bootstrap": {"n_boot", "ci", "seed", "method", "n_skipped"}}
    """
    u, outcomes, n_dropped = clean_outcomes(uncertainty, reward, failure_threshold, invert)  # labelled once (or
    # carried): the point estimates, resamples and count read them
    failure_threshold = outcomes.threshold
    codes = None
    if groups is not None:
        rewards = reward.reward if isinstance(reward, Outcomes) else np.asarray(reward, dtype=float).ravel()
        kept = np.isfinite(np.asarray(uncertainty, dtype=float).ravel()) & np.isfinite(rewards)
        codes = cluster_codes(groups, kept.size, kept)
    values, undefined = point_metrics(u, outcomes, METRICS)
    samples = bootstrap_samples(u, outcomes, METRICS, n_boot, seed, groups=codes)
    cis, skipped = {}, {}
    for name in METRICS:
        s = samples[name]
        skipped[name] = int(np.sum(~np.isfinite(s)))
        cis[name] = None if values[name] is None else percentile_ci(s, ci)
    method = {"method": "percentile"}
    if groups is not None:
        method = {"method": "percentile" if codes is None else "percentile, resampling tasks (clusters)",
                  "n_clusters": int(len(u) if codes is None else codes.max() + 1)}
    return {
        "metrics": values,
        "ci": cis,
        "n": int(len(u)),
        "n_failures": int(outcomes.failed.sum()),
        "undefined": undefined,
        "n_dropped": int(n_dropped),
        "failure_threshold": float(failure_threshold),
        "invert": bool(invert),
        "bootstrap": {"n_boot": int(n_boot), "ci": float(ci),
                      "seed": (int(seed) if isinstance(seed, (int, np.integer))
                               else None if seed is None else str(seed)),
                      **method, "n_skipped": skipped},
    }
