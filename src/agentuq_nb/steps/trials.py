"""``trials``: the multi-trial labels of a run (:func:`agentuq_nb.evaluation.multi_trial.multi_trial_report`):
pass^k as τ²-bench defines it (CIs resample tasks) and label noise. Writes nothing."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import Field

from agentuq_nb.common.limits import MAX_GRID_OPTION
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import NBoot, Seed
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, FailureThreshold
from agentuq_nb.steps.base import Step, StepConfig

STEP = Step("trials", "agentuq-nb trials RUN_DIR")


class TrialsConfig(StepConfig):
    """Which k of pass^k, the labels and the bootstrap."""

    k_values: Optional[list[Annotated[int, Field(ge=1)]]] = Field(
        None, max_length=MAX_GRID_OPTION, description="the k of pass^k (default 1 .. the fewest trials of a task)")
    failure_threshold: FailureThreshold = Field(DEFAULT_FAILURE_THRESHOLD, description="failure = reward < threshold")
    n_boot: NBoot = Field(DEFAULT_N_BOOT, description="bootstrap resamples of tasks for the 95% CIs (0: none)")
    seed: Seed = Field(0, description="seed of the bootstrap")


def run(run_dir: str | Path | RunDir, config: TrialsConfig = TrialsConfig()) -> dict[str, Any]:
    """The multi-trial report of the run (see :func:`~agentuq_nb.evaluation.multi_trial.multi_trial_report`)."""
    from agentuq_nb.evaluation.multi_trial import multi_trial_report

    report, _ = multi_trial_report(run_dir, **config.model_dump())
    return report
