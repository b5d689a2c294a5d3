"""``evaluate``: how well one estimator of a run predicts failure → ``eval_metrics.json`` + ``eval_curves.csv``.

The estimator is chosen by registry name (``assistant.avg_token_nll``, ``saup_hmm``, a plugin's
name…) and oriented by itself: a confidence such as ``min_chosen_prob`` is inverted without being
asked. The command line's ``--role/--uncertainty/--scorer`` name a token estimator the old way
(``--uncertainty min_chosen_prob`` → ``assistant.min_chosen_prob``); ``--invert`` is only for a raw
trajectory-summary column that is not a registered estimator (``total_tokens``, ``num_turns`` …).

The rows are the trajectories the estimator scores, in its order, with their rewards.

With ``scheduler`` a token estimator's summary rows are read by ``dask.dataframe`` on the cluster
with the role filter pushed into the Parquet read, so only that role's rows reach the client; the
metrics are the same as without it.

When a task has several trajectories (``num_trials > 1``), every interval comes from the
task-clustered bootstrap (tasks resampled with all their trials; ``bootstrap.method`` says so) and
``evaluate``'s report gains ``multi_trial``: pass^k and the label-noise readout over all the run's
trajectories, and the estimator's AUROC against the per-task failure rate on the trajectories it
scores (:mod:`agentuq_nb.evaluation.multi_trial`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from pydantic import Field

from agentuq_nb.estimators import TokenEstimator, get
from agentuq_nb.estimators.scores import estimator_scores
from agentuq_nb.estimators.token import RawColumn, resolve_estimator
from agentuq_nb.io.store.artifacts import read_trajectory_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.records.token_statistics import STATISTICS_BY_NAME
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import Command, FailureThresholdField, NBootField, Reporter, SeedField, Step, StepConfig

STEP = Step("evaluate", "agentuq-nb evaluate RUN_DIR", ("eval_metrics", "eval_curves"))


class EvaluateConfig(StepConfig):
    """Which estimator is evaluated (``estimator``, or ``role``/``uncertainty``/``scorer``) and how."""

    uncertainty: str = Field("avg_token_nll", description="a registered estimator's name (see 'agentuq-nb estimators "
                             "RUN_DIR'), a token statistic of --role, or a raw trajectory-summary column")
    role: str = Field("assistant", description="role of a token statistic (assistant, user, combined, "
                      "observation_*, total)")
    scorer: Optional[str] = Field(None, description="scorer of a token statistic (default: self, else the only one)")
    invert: bool = Field(False, description="only for a raw column: it is a confidence (higher = success); "
                         "registered estimators carry their own orientation")
    estimator: Optional[str] = Field(None, description="a registered estimator's name (instead of role/uncertainty)")
    failure_threshold: FailureThresholdField
    n_boot: NBootField
    seed: SeedField
    scheduler: Any = Field(None, description="run on Dask: a scheduler address (tcp://host:8786) or local:N for N local "
                           "worker processes (the summary rows of the role are read on it)")


def _role_rows_on_cluster(run: RunDir, role: str, scheduler: Any) -> pd.DataFrame:
    """The trajectory-summary rows of ``role`` (all rows if there are none, for the error message)."""
    import dask
    import dask.dataframe as dd

    from agentuq_nb.distributed import connect

    path = run.require("trajectory_summary")
    run.verify("trajectory_summary")
    with connect(scheduler) as client, dask.config.set({"dataframe.convert-string": False}):
        rows = client.compute(dd.read_parquet(path, filters=[("role", "==", role)])).result()
        if rows.empty:
            rows = client.compute(dd.read_parquet(path)).result()
    return rows.reset_index(drop=True)


def run(run_dir: str | os.PathLike | RunDir, config: EvaluateConfig = EvaluateConfig()) -> dict:
    """Failure-prediction metrics of one estimator with bootstrap CIs; publishes ``eval_metrics.json``
    and ``eval_curves.csv``. ``config.estimator`` (a registry name) or ``role``/``uncertainty``/``scorer``
    (see :func:`resolve_estimator`) choose it."""
    from agentuq_nb.evaluation.failure_report import failure_metrics
    from agentuq_nb.evaluation.metrics import failure_curves
    from agentuq_nb.evaluation.multi_trial import multi_trial_readout, task_labels, tasks_repeat

    folder = RunDir.of(run_dir)  # the failure threshold: checked by the config
    folder.require_folder(STEP.name)
    with folder.lock(STEP.name):  # from the first read to the commit: based_on is what was read
        if config.scheduler is not None and config.estimator is None:
            summary = _role_rows_on_cluster(folder, _summary_role(config.uncertainty, config.role), config.scheduler)
        else:
            summary = read_trajectory_summary(folder) if folder.has("trajectory_summary") or config.estimator is None else None
        chosen = (get(config.estimator) if config.estimator is not None
                  else resolve_estimator(config.uncertainty, config.role, config.scorer, config.invert, summary))
        from_summary = summary if isinstance(chosen, (TokenEstimator, RawColumn)) else None
        # what the evaluation reads, known once the estimator is chosen: the based_on of what it writes
        inputs = [name for name in ("trajectory_summary", "trajectories", *chosen.requires) if folder.has(name)]
        labelled = folder.outcomes(config.failure_threshold)  # every trajectory's reward read and labelled once
        every = labelled.frame()  # their keys, reward and failed
        rows = estimator_scores(folder, chosen, from_summary).merge(every, on=TRAJECTORY_KEYS, how="inner")
        if rows.empty:
            raise ValueError(f"{folder.path}: estimator '{chosen.name}' scores no trajectory with a reward")
        u = rows["uncertainty"].to_numpy(dtype=float)
        scored = Outcomes(rows["reward"].to_numpy(dtype=float), rows["failed"].to_numpy(dtype=bool), labelled.threshold)
        repeated = tasks_repeat(rows)  # tasks repeat among the scored trajectories: the intervals resample tasks
        groups = task_labels(rows) if repeated else None
        trials = None
        if labelled.tasks_repeat:  # task rates over every trial, scored or not: the outcomes made once, handed on
            scores = every[TRAJECTORY_KEYS].merge(rows[TRAJECTORY_KEYS + ["uncertainty"]], on=TRAJECTORY_KEYS, how="left")
            trials = multi_trial_readout(labelled, uncertainty=scores["uncertainty"].to_numpy(dtype=float),
                                         invert=chosen.invert, n_boot=config.n_boot, seed=config.seed)[0]
        result = failure_metrics(u, scored, invert=chosen.invert, n_boot=config.n_boot, seed=config.seed, groups=groups)
        curves = failure_curves(u, scored, invert=chosen.invert)
        result.update(role=chosen.role, scorer=chosen.scorer, uncertainty=chosen.statistic or chosen.name,
                      invert=chosen.invert, failure_threshold=config.failure_threshold, n_boot=config.n_boot, seed=config.seed)
        if repeated:
            result["bootstrap"]["clusters"] = "tasks (domain, task_id): trajectories of one task are resampled together"
        if trials is not None:
            result["multi_trial"] = trials
        with folder.commit(STEP.name) as commit:
            based_on = folder.based_on(*inputs)
            commit.write_json("eval_metrics", result, based_on)
            commit.write_with("eval_curves", lambda p: curves.to_csv(p, index=False), based_on)
    return result


def show(result: dict, run_dir: Path | None = None, config: EvaluateConfig | None = None,
         say: Reporter = Reporter()) -> None:
    """What ``evaluate`` (and ``analyze``) print of an evaluation: the metrics (and, where tasks repeat, the
    multi-trial readout) on stdout, the notes on stderr."""
    shown = {"n": result["n"], "n_failures": result["n_failures"], "metrics": result["metrics"]}
    if "multi_trial" in result:  # tasks repeat: intervals resample tasks; the multi-trial readout beside
        multi = result["multi_trial"]
        shown["multi_trial"] = {"n_tasks": multi["n_tasks"], "bootstrap": result["bootstrap"]["method"],
                                "pass_hat_k": {k: v["value"] for k, v in multi["pass_hat_k"].items()},
                                "share_flipping": multi["label_noise"]["share_flipping"],
                                "soft_label_auroc": multi["soft_labels"].get("auroc", {}).get("value")}
    say.say(json.dumps(shown, indent=2))
    if result.get("n_dropped"):
        say.say(f"note: {result['n_dropped']} trajectories left out: their uncertainty or reward is not a finite "
                "number", warn=True)
    for metric, reason in result["undefined"].items():
        say.say(f"note: {metric} is null: {reason}", warn=True)


COMMAND = Command(summary="Failure prediction metrics of one estimator with bootstrap CIs → RUN_DIR/eval_metrics.json, "
                          "eval_curves.csv.",
                  options=("uncertainty", "role", "scorer", "invert", "failure_threshold", "n_boot", "seed",
                           "scheduler"), plugins=True, show=show)


def evaluate(run_dir: str | os.PathLike | RunDir, **options: Any) -> dict:
    """:func:`run` with the :class:`EvaluateConfig` fields as keywords (``evaluate(run, n_boot=200)``)."""
    return run(run_dir, EvaluateConfig(**options))


def _summary_role(uncertainty: str, role: str) -> str:
    """The summary role an estimator named ``uncertainty`` reads (``--role`` for a bare statistic)."""
    if uncertainty in STATISTICS_BY_NAME:
        return role
    try:
        return get(uncertainty).role or role
    except KeyError:
        return role


