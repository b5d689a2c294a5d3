"""``early-warning``: how early failure shows - the mean per-turn uncertainty of the first f of each trajectory vs
failure (:func:`agentuq_nb.evaluation.dynamics.early_warning_table`) → ``RUN_DIR/early_warning_scores.parquet``
(family ``early_warning``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, FailureThreshold
from agentuq_nb.steps.base import FamilyHint, Step, StepConfig
from agentuq_nb.uq.dynamics import FRACTIONS

STEP = Step("early-warning", "agentuq-nb early-warning RUN_DIR", ("early_warning_scores",),
            adds=(FamilyHint("early_warning", "how early failure shows in the per-turn values",
                             "agentuq-nb early-warning RUN_DIR", command_without_tokens="agentuq-nb early-warning "
                             "RUN_DIR --table blackbox_turns --scorer blackbox --value tracer_step_risk"),))


class EarlyWarningConfig(StepConfig):
    """Which per-turn values are followed, at which fractions, and the bootstrap of the AUROCs."""

    fractions: tuple[float, ...] = Field(FRACTIONS, min_length=1, description="shares of the trajectory seen")
    role: str = Field("assistant", description="whose turns are followed")
    scorer: str = Field("self", description="scorer of the per-turn values (blackbox for --table blackbox_turns)")
    value: str = Field("avg_token_nll", description="the per-turn value, a column of --table")
    table: Literal["turn_summary", "blackbox_turns"] = Field(
        "turn_summary", description="turn_summary (token statistics) | blackbox_turns (per-message black-box "
        "signals, e.g. --value tracer_step_risk --scorer blackbox)")
    failure_threshold: FailureThreshold = Field(DEFAULT_FAILURE_THRESHOLD, description="failure = reward < threshold")
    n_boot: int = Field(DEFAULT_N_BOOT, ge=0, description="bootstrap resamples for the 95% CIs (0: none)")
    seed: int = Field(0, description="seed of the bootstrap")


def run(run_dir: str | Path | RunDir, config: EarlyWarningConfig = EarlyWarningConfig()
        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AUROC per fraction with CI, per-trajectory scores); publishes the scores."""
    from agentuq_nb.evaluation.dynamics import early_warning_table

    run = RunDir.of(run_dir)
    with run.lock(STEP.name):  # the inputs cannot change before the commit
        aurocs, scores = early_warning_table(run, **config.model_dump())
        with run.commit(STEP.name) as commit:
            commit.write_parquet("early_warning_scores", scores, based_on=run.based_on(config.table, "trajectories"))
    return aurocs, scores


def early_warning(run_dir: str | Path | RunDir, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run` with the :class:`EarlyWarningConfig` fields as keywords."""
    return run(run_dir, EarlyWarningConfig(**options))
