"""``simulate``: agent ↔ user ↔ tools with log-prob capture (:mod:`agentuq_nb.sim`) → ``RUN_DIR/results.json``,
``sidecars/``, ``run_config.json`` and ``checkpoints/`` (resumable), optionally under a decision policy that acts
on the agent's uncertainty while it runs (:mod:`agentuq_nb.intervention`)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import ExecutionConfig, SimulationConfig
from agentuq_nb.steps.base import Step, StepConfig

STEP = Step("simulate", "agentuq-nb simulate --out RUN_DIR", ("results", "run_config", "sidecars", "checkpoints"))


class SimulateConfig(StepConfig):
    """What is simulated, how the jobs run, and the policy acting on uncertainty (none: the agent acts alone)."""

    simulation: SimulationConfig
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    policy: Optional[PolicyConfig] = Field(None, description="act on uncertainty at each agent decision point")


def run(run_dir: str | os.PathLike | RunDir, config: SimulateConfig, policy: Any = None) -> Path:
    """Simulate into ``run_dir`` (a rerun with the same configuration resumes); the path of ``results.json``.
    ``policy``: the decision policy already built from ``config.policy`` (else it is built here)."""
    from agentuq_nb.intervention import build_policy
    from agentuq_nb.sim.runner import simulate

    if policy is None and config.policy is not None:
        policy = build_policy(config.policy)
    return simulate(config.simulation, run_dir, config.execution, None, policy)
