"""``saup``: SAUP scores of a run (:mod:`agentuq_nb.uq.saup`: each step's uncertainty weighted by its drift from the
task and the dialogue, propagated per actor) → ``RUN_DIR/saup_scores.parquet`` (family ``saup``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field

from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import Command, FailureThresholdField, FamilyHint, Reporter, SeedField, Step, StepConfig
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


def show(result: tuple[pd.DataFrame, pd.DataFrame], run_dir: Path, config: SaupConfig, say: Reporter) -> None:
    """What the command prints: the trajectories and steps scored, SAUP by actor and weighting, where."""
    from agentuq_nb.uq.saup import actor_breakdown

    scores, steps = result
    summary = actor_breakdown(scores).groupby(["actor", "weighting"])["saup"].describe()
    say.say(f"{len(scores)} trajectories, {len(steps)} steps ({int((steps['actor'] == 'assistant').sum())} agent)")
    say.say(summary[["count", "mean", "50%", "max"]].to_string(float_format=lambda x: f"{x:.3f}"))
    say.say(f"→ {RunDir(run_dir).file('saup_scores')}")


COMMAND = Command(summary="SAUP: each step's uncertainty weighted by its drift from the task and the dialogue, "
                          "propagated per actor → RUN_DIR/saup_scores.parquet (family saup in compare-estimators).",
                  options=("embedder", "failure_threshold", "k_folds", "seed", "hmm"),
                  kinds={"embedder": Literal["minilm", "hash"]},
                  help={"run_dir": "run directory with token rows (after aggregate)",
                        "embedder": "sentence embeddings of the steps' drift (D_a, D_o)"}, show=show)


def saup(run_dir: str | Path | RunDir, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run` with the :class:`SaupConfig` fields as keywords."""
    return run(run_dir, SaupConfig(**options))
