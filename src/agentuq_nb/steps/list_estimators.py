"""``estimators``: the registered estimators a run folder holds data for (reads only)."""
from __future__ import annotations

import os
from pathlib import Path

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import Command, Reporter, Step, StepConfig

STEP = Step("estimators", "agentuq-nb estimators RUN_DIR")


class ListEstimatorsConfig(StepConfig):
    """Nothing to choose: every registered estimator (plugins included) the run holds data for."""


def run(run_dir: str | os.PathLike | RunDir, config: ListEstimatorsConfig = ListEstimatorsConfig()) -> list[tuple]:
    """``(estimator, what it reads)`` of every registered estimator with data in the run."""
    from agentuq_nb.estimators import estimators

    folder = RunDir.of(run_dir)
    folder.require_folder(STEP.name)
    found = estimators(folder.path)
    if not found:
        raise InputError(folder.path, "holds no table an estimator reads (no trajectory summary or score file); "
                                      f"run 'agentuq-nb aggregate {folder.path}' after extract")
    return [(e, ", ".join(e.reads(folder))) for e in found]


def show(rows: list[tuple], run_dir: Path, config: ListEstimatorsConfig, say: Reporter) -> None:
    """One line per estimator: name, family, orientation, what it reads."""
    for e, reads in rows:
        say.say(f"{e.name:45s} {e.family:14s} {e.orientation:32s} {reads}")


COMMAND = Command(summary="The registered estimators this run holds data for: name, family, orientation, what it reads.",
                  plugins=True, show=show)
