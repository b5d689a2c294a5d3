"""``explore``: every trajectory of one or more runs in one standalone HTML page (:mod:`agentuq_nb.figures.explorer`).
Reads run folders, writes the one page it names (never a file of a run folder)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import Field

from agentuq_nb.steps.base import Command, FailureThresholdField, Reporter, Step, StepConfig

STEP = Step("explore", "agentuq-nb explore RUN_DIR", run_folder=False)


class ExploreConfig(StepConfig):
    """The runs shown, the page written, the estimators offered."""

    run_dirs: list[Path] = Field(min_length=1, description="run folder(s) (after analyze); with several, the same task "
                                 "can be compared across them side by side")
    out: Optional[Path] = Field(None, description="the HTML file to write (one standalone file, opens offline; "
                                "default: RUN_DIR/explorer.html for one run)")
    names: Optional[list[str]] = Field(None, description="estimators offered in the list (repeat; default: every one "
                                       "the runs hold)")
    failure_threshold: FailureThresholdField
    force: bool = Field(False, description="replace an existing file at --out that explore did not write (never a "
                        "folder, a link, a special file or a file of a run folder)")


def run(config: ExploreConfig) -> tuple[Path, int]:
    """Write the page; its path and the number of trajectories it shows."""
    from agentuq_nb.figures.explorer import (
        check_page_path,
        default_page_path,
        explorer_data,
        export_html,
        require_run_folder,
    )
    from agentuq_nb.io.store.rundir import RunDir

    for run_dir in config.run_dirs:  # a results file named first: "run analyze first", not a complaint about --out
        require_run_folder(RunDir(run_dir))
    out = config.out or default_page_path(config.run_dirs)
    check_page_path(out, config.run_dirs, config.force)  # before the work; export_html checks again before it writes
    data = explorer_data(config.run_dirs, estimators=config.names, failure_threshold=config.failure_threshold)
    return export_html(data, out, config.force, config.run_dirs), len(data["trajectories"])


def show(done: tuple[Path, int], run_dir: None, config: ExploreConfig, say: Reporter) -> None:
    """What the command prints: the trajectories shown, where."""
    say.say(f"{done[1]} trajectories → {done[0]}")


COMMAND = Command(summary="Every trajectory of one or more runs in one HTML page: why each got its reward (the checks, "
                          "the expected tool calls beside those made, the task), the same task's other trials side by "
                          "side, search, sort by any estimator (with its AUROC), per-message signals, tokens coloured "
                          "by NLL where the run has them (in JupyterLab: agentuq_nb.explore(RUN_DIR)).",
                  arguments=("run_dirs",), options=("out", "names", "failure_threshold", "force"),
                  flags={"run_dirs": "--run-dir", "names": "--estimator"}, show=show,
                  interrupted="interrupted: the page was not written")
