"""``saup``: SAUP scores of a run (:mod:`agentuq_nb.uq.saup`: each step's uncertainty weighted by its drift from the
task and the dialogue, propagated per actor) → ``RUN_DIR/saup_scores.parquet`` (family ``saup``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import Field

from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import FailureThresholdField, FamilyHint, SeedField, Step, StepConfig
from agentuq_nb.uq import saup as calculators

STEP = Step("saup", "agentuq-nb saup RUN_DIR", ("saup_scores",),
            adds=(FamilyHint("saup", "each step's uncertainty weighted by its drift", "agentuq-nb saup RUN_DIR",
                             needs_without_tokens="agent and user token rows (rescore first)"),))


class SaupConfig(StepConfig):
    """The embeddings of the steps' drift and the HMM weighting."""

    embedder: Any = Field("minilm", description="sentence embeddings of the steps' drift (D_a, D_o): minilm | hash, "
                          "or an embedder object")
    failure_threshold: FailureThresholdField = Field(description="failure = reward < threshold (the HMM's state weights)")
    k_folds: int = Field(5, ge=2, description="folds (by task) of the cross-fitted HMM weighting")
    seed: SeedField = Field(description="seed of the folds")
    hmm: bool = Field(True, description="also the 3-state HMM weighting (saup_hmm)")


def run(run_dir: str | Path | RunDir, config: SaupConfig = SaupConfig()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-trajectory scores, step table) of a run; publishes the scores (the inputs held still by the lock)."""
    folder = RunDir.of(run_dir)
    with folder.lock(STEP.name):
        scores, steps = calculators.saup(folder, **config.model_dump())
        with folder.commit(STEP.name) as commit:
            commit.write_parquet("saup_scores", scores, based_on=folder.based_on("turn_summary", "trajectories"))
    return scores, steps


def saup(run_dir: str | Path | RunDir, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run` with the :class:`SaupConfig` fields as keywords."""
    return run(run_dir, SaupConfig(**options))
