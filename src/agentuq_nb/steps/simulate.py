"""``simulate``: agent ↔ user ↔ tools with log-prob capture (:mod:`agentuq_nb.sim`) → ``RUN_DIR/results.json``,
``sidecars/``, ``run_config.json`` and ``checkpoints/`` (resumable), optionally under a decision policy that acts
on the agent's uncertainty while it runs (:mod:`agentuq_nb.intervention`)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import ExecutionConfig, SimulationConfig
from agentuq_nb.steps.base import Command, Reporter, Step, StepConfig

STEP = Step("simulate", "agentuq-nb simulate --out RUN_DIR", ("results", "run_config", "sidecars", "checkpoints"))


class SimulateConfig(StepConfig):
    """What is simulated, how the jobs run, and the policy acting on uncertainty (none: the agent acts alone)."""

    simulation: SimulationConfig
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    policy: Optional[PolicyConfig] = Field(None, description="act on uncertainty at each agent decision point")


def run(run_dir: str | os.PathLike | RunDir, config: SimulateConfig) -> Path:
    """Simulate into ``run_dir`` (a rerun with the same configuration resumes); the path of ``results.json``."""
    from agentuq_nb.intervention import build_policy
    from agentuq_nb.sim.runner import simulate

    policy = None if config.policy is None else build_policy(config.policy)
    return simulate(config.simulation, run_dir, config.execution, None, policy)


#: the policy's fields that mean something only with a policy
POLICY_ONLY = ("threshold", "calibration", "risk", "oracle", "rate")


def command_run(options: dict[str, Any], run_dir: Path) -> tuple[Path, SimulateConfig]:
    """The command's config: no policy unless ``policy.policy`` is given (its other options, left at their
    defaults, are then ignored; those that mean something only with a policy are refused)."""
    policy = options.pop("policy", {})
    if "policy" not in policy and (given := [f"policy.{name}" for name in POLICY_ONLY if name in policy]):
        raise ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} used only with policy.policy "
                         "(observe | defer | resample_vote | confirm | random); nothing was run")
    return run_dir, SimulateConfig(**options, policy=policy if "policy" in policy else None)


def before(run_dir: Path, config: SimulateConfig, say: Reporter) -> None:
    """The policy, as built, said before the simulation starts."""
    from agentuq_nb.intervention import build_policy

    if config.policy is not None:
        say.say(f"policy: {json.dumps(build_policy(config.policy).describe())}")


def show(path: Path, run_dir: Path, config: SimulateConfig, say: Reporter) -> None:
    """What the command prints: where the results are."""
    say.say(f"results → {path}")


COMMAND = Command(
    summary="Simulate agent ↔ user ↔ tools with logprob capture → RUN_DIR/results.json + sidecars/ (resumable).\n\n"
            "With --policy the agent's uncertainty is acted on while it runs (defer to a human, resample and vote, "
            "confirm a write with the user, or at random); each simulation records its decisions.",
    arguments=(), out=True, out_help="run directory: results.json, sidecars/, checkpoints/",
    options=("simulation.domain", "simulation.agent_llm", "simulation.user_llm", "simulation.num_tasks",
             "simulation.task_ids", "simulation.num_trials", "simulation.top_logprobs", "execution.max_concurrency",
             "simulation.seed", "simulation.max_steps", "simulation.temperature", "execution.scheduler",
             "execution.api_bases", "policy.policy", "policy.signal", "policy.threshold", "policy.calibration",
             "policy.risk", "policy.alpha", "policy.oracle", "policy.rate", "policy.random_action", "policy.k",
             "policy.escalation_cost"),
    flags={"execution.api_bases": "--api-base", "policy.policy": "--policy", "policy.signal": "--policy-signal",
           "policy.threshold": "--policy-threshold", "policy.calibration": "--policy-calibration",
           "policy.alpha": "--policy-alpha", "policy.oracle": "--policy-oracle", "policy.rate": "--policy-rate",
           "policy.random_action": "--policy-action", "policy.k": "--policy-k"},
    extras={"policy.policy": (Optional[str], None, "act on uncertainty at each agent decision point: observe | defer "
                              "| resample_vote | confirm | random")},
    help={"simulation.domain": "built-in domain, e.g. bookshop", "simulation.num_tasks": "first N tasks of the domain",
          "simulation.task_ids": "run only these task ids: repeat the option (--task-ids 1 --task-ids 2) or separate "
                                 "them by commas (--task-ids 1,2)",
          "execution.max_concurrency": "simulations in flight (helps remote APIs)",
          "policy.calibration": "an earlier observe run: certifies the threshold (with --risk), fits calibrated: "
                                "signals", "policy.risk": "δ: failure rate allowed among the runs left unflagged",
          "policy.oracle": "an earlier run: intervene on the runs that failed in it",
          "policy.rate": "random: probability per decision point"},
    errors=("SimulationFailed",), build=command_run, before=before, show=show)
