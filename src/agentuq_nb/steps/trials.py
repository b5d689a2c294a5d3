"""``trials``: the multi-trial labels of a run (:func:`agentuq_nb.evaluation.multi_trial.multi_trial_report`):
pass^k as τ²-bench defines it (CIs resample tasks) and label noise. Writes nothing.

It reads a run folder (its trajectory table) or, as ``analyze`` does, a results file itself (any format
``analyze`` reads: the rewards are streamed from it, nothing is extracted); runs without a seed (the original
τ-bench's) are read like any other."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import pandas as pd
from pydantic import Field

from agentuq_nb.common.limits import MAX_GRID_OPTION
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import (
    RESULTS_HELP,
    Command,
    FailureThresholdField,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
)

STEP = Step("trials", "agentuq-nb trials RUN_DIR|RESULTS")


class TrialsConfig(StepConfig):
    """Which k of pass^k, the labels and the bootstrap."""

    k_values: Optional[list[Annotated[int, Field(ge=1)]]] = Field(
        None, max_length=MAX_GRID_OPTION, description="the k of pass^k (default 1 .. the fewest trials of a task)")
    failure_threshold: FailureThresholdField
    n_boot: NBootField = Field(description="bootstrap resamples of tasks for the 95% CIs (0: none)")
    seed: SeedField
    score: Optional[str] = Field(None, description="Inspect AI logs given as results: the scorer whose value is the "
                                 "reward (as analyze's --score)")


def is_run_folder(path: str | Path | RunDir) -> bool:
    """Whether ``path`` is a run folder (its manifest, or a trajectory table of an older run), not results."""
    run = RunDir.of(path)
    return run.path.is_dir() and any(run.has(name) for name in ("manifest", "trajectories", "trajectory_summary"))


def results_rewards(results: str | Path, score: str | None = None) -> pd.DataFrame:
    """One row per simulation of a results file: the trajectory keys and ``reward``, streamed from the file (the
    trajectory table ``extract`` would make, without a run folder)."""
    from agentuq_nb.io.ingest.results import ResultsFile
    from agentuq_nb.records.keys import key_dtypes
    from agentuq_nb.records.run_tables import trajectory_record, trajectory_table
    from agentuq_nb.records.tokens import TRAJECTORY_KEYS

    file = ResultsFile.open(results, score, tell_version=False)  # told once what the results are; their header read once
    records = [trajectory_record(sim, file.domain) for sim in file.simulations()]
    return key_dtypes(trajectory_table(records).to_pandas()[[*TRAJECTORY_KEYS, "reward"]])


def run(run_dir: str | Path | RunDir, config: TrialsConfig = TrialsConfig()) -> dict[str, Any]:
    """The multi-trial report of a run folder, or of a results file (see the module docstring and
    :func:`~agentuq_nb.evaluation.multi_trial.multi_trial_report`)."""
    from agentuq_nb.evaluation.multi_trial import multi_trial_report

    source = run_dir if is_run_folder(run_dir) else results_rewards(RunDir.of(run_dir).path, config.score)
    report, _ = multi_trial_report(source, **config.model_dump(exclude={"score"}))
    return report


def show(report: dict[str, Any], run_dir: Path, config: TrialsConfig, say: Reporter) -> None:
    """What the command prints: the trials per task, pass^k with its interval, the label noise, notes."""
    trials_per_task = report["trials_per_task"]
    say.say(f"{report['n_trajectories']} trajectories, {report['n_tasks']} tasks, trials per task "
            f"{trials_per_task['min']}–{trials_per_task['max']}; mean task success rate "
            f"{report['mean_task_success_rate']:.3f}")
    say.say(f"{'k':>3}  {'pass^k':>7}  95% CI (tasks resampled)")
    for key, v in report["pass_hat_k"].items():
        ci = "—" if v["ci"] is None else f"[{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]"
        say.say(f"{key:>3}  {v['value']:7.3f}  {ci}")
    noise = report["label_noise"]
    if noise["n_tasks_with_repeats"]:
        say.say(f"label noise: {noise['n_flipping']} of {noise['n_tasks_with_repeats']} tasks with ≥ 2 trials flip "
                f"verdict ({noise['share_flipping']:.1%}); mean within-task variance of failure "
                f"{noise['mean_within_task_variance']:.3f}")
    else:
        say.say("label noise: no task has 2 trials (run with --num-trials ≥ 2)")
    for note in report["notes"]:
        say.say(f"note: {note}", warn=True)


COMMAND = Command(summary="Multi-trial labels of a run: pass^k as τ²-bench defines it (CIs resample tasks) and label "
                          "noise (prints only).",
                  options=("k_values", "failure_threshold", "n_boot", "seed", "score"), flags={"k_values": "--k"},
                  help={"run_dir": "a run folder, or a results file as analyze takes it: " + RESULTS_HELP,
                        "k_values": "the k of pass^k (repeat the option; default 1 .. the fewest trials of a task)"},
                  show=show)
