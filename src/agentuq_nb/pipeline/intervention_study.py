"""The intervention study: does acting on the agent's uncertainty pay, against random intervention at the
same rate and against an oracle?

:func:`run_study` runs, into one study folder (each run a run folder of its own, resumable like any
simulation; the study is resumed by calling it again):

1. ``calibration``: the ``observe`` policy (records the online signal at every decision point, never acts)
   with ``calibration_seed``: the thresholds come from it (those that flag ``rates`` of its trajectories),
   and the certified threshold (Learn-then-Test, ``risk`` δ with probability 1 − ``alpha``);
2. ``baseline``: ``observe`` with ``seed``: the held-out runs share this seed, so that they differ from it
   only by what the policy did; the certified risk is checked on it;
3. each policy at each threshold, ``random`` doing each policy's action at the per-decision probability that
   flags the same expected share of the baseline's trajectories, ``defer`` at the certified threshold, and
   (``oracle``) ``resample_vote`` and ``confirm`` on exactly the runs that failed in the baseline.

Deferring's curve and its oracle are also computed exactly from the baseline (a run deferred at its first
flag is the baseline run up to there: every LLM call's seed is a function of the trial seed, task and
message index), which the real ``defer`` runs check.

The study folder: ``study.json`` (the configuration, thresholds and random rates), one folder per run
(:func:`run_name`), ``outcomes.csv`` (one row per simulation of every run), ``summary.csv`` (one row per
run, task-clustered intervals) and ``certificate.json``, published together at the end.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import pandas as pd
from pydantic import Field, field_validator

from agentuq_nb.distributed.cluster import connect
from agentuq_nb.intervention.certify import certify_threshold, heldout_risk
from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.intervention.outcomes import (
    defer_curve_from_observe,
    oracle_defer_summary,
    outcome_table,
    policy_summary,
    random_rate_for,
    threshold_grid,
)
from agentuq_nb.intervention.policies import build_policy
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_text
from agentuq_nb.io.store.run_lock import run_lock
from agentuq_nb.records.config import Config, ExecutionConfig, SimulationConfig
from agentuq_nb.sim.runner import simulate

CALIBRATION = "calibration"
BASELINE = "baseline"


class InterventionStudyConfig(Config):
    """The intervention study (``intervention.run_study``, notebook 12): a calibration run and a held-out
    baseline run under the ``observe`` policy, then each of ``policies`` at the thresholds that flag
    ``rates`` of the calibration run's trajectories, ``random`` at the same rates, ``defer`` at the threshold
    certified for ``risk``, and the oracle. Held-out runs share their seed: they differ only by the policy."""

    domain: str = "bookshop"
    task_ids: Optional[list[str]] = None
    num_tasks: Optional[int] = Field(None, ge=1)
    num_trials: int = Field(1, ge=1)
    seed: int = Field(300, description="the held-out runs (baseline and every policy)")
    calibration_seed: int = Field(301, description="the calibration run: the same tasks, other trial seeds")
    temperature: float = Field(0.5, ge=0.0)
    agent_max_tokens: Optional[int] = Field(None, ge=1, description="tokens an agent message may have (None: the "
                                            "simulator's default)")
    signal: str = "turn_avg_nll"
    policies: list[Literal["defer", "resample_vote", "confirm"]] = Field(
        default_factory=lambda: ["defer", "resample_vote", "confirm"])
    rates: list[float] = Field(default_factory=lambda: [0.25, 0.5],
                               description="target shares of trajectories flagged (thresholds from the calibration run)")
    risk: float = Field(0.7, gt=0.0, lt=1.0, description="δ for the certified defer threshold")
    alpha: float = Field(0.1, gt=0.0, lt=1.0)
    k: int = Field(4, ge=2)
    escalation_cost: float = Field(1.0, ge=0.0)
    oracle: bool = Field(True, description="also run resample_vote and confirm on exactly the baseline's failures")
    n_boot: int = Field(1000, ge=100)

    @field_validator("task_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value):
        return None if value is None else [str(v) for v in value]

    @field_validator("rates")
    @classmethod
    def _rates_in_unit_interval(cls, value):
        if not value or any(not 0.0 < r < 1.0 for r in value):
            raise ValueError(f"rates must be shares strictly between 0 and 1, got {value}")
        return sorted(value)



def run_name(policy: str, trigger: str, value: float | None = None) -> str:
    """A run's folder in the study: ``defer_rate0.25``, ``random-confirm_rate0.50``, ``defer_risk0.70`` (certified for δ = 0.7) …"""
    return f"{policy}_{trigger}" if value is None else f"{policy}_{trigger}{value:.2f}"


@dataclass
class StudyRun:
    name: str
    policy: PolicyConfig
    seed: int
    target_rate: float | None = None

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed, "target_rate": self.target_rate,
                "policy": self.policy.model_dump(mode="json", exclude_defaults=True)}


@dataclass
class StudyResult:
    folder: Path
    outcomes: pd.DataFrame  # one row per simulation of every run (column ``run``)
    summary: pd.DataFrame  # one row per run (and the exact defer curve, the defer oracle)
    certificate: dict[str, Any]
    plan: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per run


def _simulation_config(config: InterventionStudyConfig, seed: int) -> SimulationConfig:
    bound = {} if config.agent_max_tokens is None else {"agent_max_tokens": config.agent_max_tokens}
    return SimulationConfig(domain=config.domain, task_ids=config.task_ids, num_tasks=config.num_tasks,
                            num_trials=config.num_trials, seed=seed, temperature=config.temperature, **bound)


def _policy(config: InterventionStudyConfig, **fields: Any) -> PolicyConfig:
    return PolicyConfig(signal=config.signal, k=config.k, escalation_cost=config.escalation_cost, **fields)


def run_study(config: InterventionStudyConfig, folder: str | Path, scheduler: Any = None,
              progress: bool = False) -> StudyResult:
    """Run (or resume) the study ``config`` into ``folder``; ``scheduler``: ``local:N`` or a Dask address to
    run each run's simulations on worker processes (one cluster for the whole study)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with run_lock(folder, "intervention study"):  # one study writer; each run folder has its own lock too
        if scheduler is None:
            return _run(config, folder, None, progress)
        with connect(scheduler, dashboard_address=None) as client:
            return _run(config, folder, client, progress)


def _run(config: InterventionStudyConfig, folder: Path, client: Any, progress: bool) -> StudyResult:
    execution = ExecutionConfig(scheduler=client, progress=progress)
    seconds: dict[str, float] = {}
    tables: dict[str, pd.DataFrame] = {}  # each run's outcome table, read once after it is simulated

    def simulate_run(run: StudyRun) -> Path:
        start = time.perf_counter()
        simulate(_simulation_config(config, run.seed), folder / run.name, execution, policy=build_policy(run.policy))
        seconds[run.name] = round(time.perf_counter() - start, 1)
        tables[run.name] = outcome_table(folder / run.name, run.name).assign(target_rate=run.target_rate)
        return folder / run.name

    observe = _policy(config, policy="observe")
    calibration = simulate_run(StudyRun(CALIBRATION, observe, config.calibration_seed))
    baseline = simulate_run(StudyRun(BASELINE, observe, config.seed))

    grid = threshold_grid(tables[CALIBRATION], config.rates)
    thresholds = [float(t) for t in grid["threshold"]]
    random_rates = [float(random_rate_for(rate, tables[BASELINE]["num_decisions"])) for rate in config.rates]
    certificate = certify_threshold(calibration, config.signal, config.risk, config.alpha)

    runs: list[StudyRun] = []
    for action in config.policies:
        for rate, threshold in zip(config.rates, thresholds):
            runs.append(StudyRun(run_name(action, "rate", rate), _policy(config, policy=action, threshold=threshold),
                                 config.seed, rate))
        for rate, p in zip(config.rates, random_rates):
            runs.append(StudyRun(run_name(f"random-{action}", "rate", rate),
                                 _policy(config, policy="random", rate=p, random_action=action), config.seed, rate))
    if "defer" in config.policies:
        runs.append(StudyRun(run_name("defer", "risk", config.risk), _policy(
            config, policy="defer", calibration=str(calibration), risk=config.risk, alpha=config.alpha), config.seed))
    if config.oracle:
        runs += [StudyRun(run_name(action, "oracle"), _policy(config, policy=action, oracle=str(baseline)), config.seed)
                 for action in config.policies if action != "defer"]
    plan = {"config": config.model_dump(mode="json"), "thresholds": dict(zip(map(str, config.rates), thresholds)),
            "calibration_flagged_share": dict(zip(map(str, config.rates), map(float, grid["flagged_share"]))),
            "random_rates": dict(zip(map(str, config.rates), random_rates)),
            "runs": [r.describe() for r in runs]}
    atomic_write_json(folder / "study.json", plan)
    for run in runs:
        simulate_run(run)

    outcomes = pd.concat(tables.values(), ignore_index=True)  # calibration, baseline, then the plan's order
    summary = policy_summary(outcomes, n_boot=config.n_boot, seed=config.seed)
    summary.insert(1, "target_rate", summary["run"].map({name: t["target_rate"].iloc[0] for name, t in tables.items()}))
    exact = defer_curve_from_observe(baseline, thresholds, escalation_cost=config.escalation_cost,
                                     n_boot=config.n_boot, seed=config.seed)
    exact = exact.assign(run=[run_name("defer", "rate", r) + " (exact)" for r in config.rates],
                         target_rate=config.rates)
    oracle = oracle_defer_summary(tables[BASELINE], n_boot=config.n_boot, seed=config.seed,
                                  escalation_cost=config.escalation_cost).assign(run="defer_oracle (exact)")
    summary = pd.concat([summary, exact, oracle], ignore_index=True)
    certificate = {**certificate, "heldout": heldout_risk(baseline, certificate.get("threshold"), config.signal)}
    atomic_write_text(folder / "outcomes.csv", outcomes.to_csv(index=False))
    atomic_write_text(folder / "summary.csv", summary.to_csv(index=False))
    atomic_write_json(folder / "certificate.json", certificate)
    return StudyResult(folder, outcomes, summary, certificate, plan, seconds)
