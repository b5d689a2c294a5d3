"""``score-observations``: how surprising each user message and tool result is under a scorer (see
:mod:`agentuq_nb.uq.observation`) → ``RUN_DIR/tokens.observations_<mode>[_replay].parquet``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from agentuq_nb.io.atomic import atomic_write_json
from agentuq_nb.io.store.rundir import OBSERVATION_TOKENS, RunDir
from agentuq_nb.records.config import ExecutionConfig, ScoringConfig, configs_from_options
from agentuq_nb.steps.base import Command, FamilyHint, Reporter, Step, StepConfig
from agentuq_nb.steps.scoring_jobs import check_checkpoint_settings, consolidate, score_results
from agentuq_nb.uq.observation import ScoringReport

STEP = Step("score-observations", "agentuq-nb score-observations RUN_DIR", (OBSERVATION_TOKENS, "checkpoints"),
            adds=(FamilyHint("observation", "how surprising user and tool messages are under an observer model",
                             "agentuq-nb score-observations RUN_DIR --scorer-mode auxiliary_llm"),))


class ScoreObservationsConfig(StepConfig):
    """The results scored (default: the run's own), what is scored and how the jobs run."""

    results: Optional[Path] = Field(None, description="the results file (default: the one the run was extracted from)")
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)


def run(run_dir: str | Path | RunDir, config: ScoreObservationsConfig = ScoreObservationsConfig()) -> ScoringReport:
    """Token rows of every user and tool message → ``RUN_DIR/tokens.observations_<mode>[_replay].parquet``.

    ``config.scoring`` (:class:`~agentuq_nb.records.config.ScoringConfig`: ``scorer_mode``, ``scorer_llm``,
    ``backend``, ``user_messages``, ``tool_messages``, ``top_logprobs``, ``limit``) says what is scored,
    ``config.execution`` (``scheduler``: one job per trajectory on a Dask cluster, ``api_bases``: one scorer
    server per worker, ``progress`` …) how; the tables are the same however the jobs run. Resumable per
    trajectory; the run folder is locked meanwhile."""
    roles = config.scoring.observation_roles()
    folder = RunDir.of(run_dir)
    with folder.lock(STEP.name):
        results_path = Path(config.results) if config.results else folder.results_path()
        suffix = config.scoring.observation_table_suffix()
        checkpoint_dir = folder.checkpoint_dir(f"observations_{suffix}")
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        check_checkpoint_settings(checkpoint_dir / "scorer.json", {"model": config.scoring.scorer_llm, "backend": config.scoring.source,
                                                             "roles": sorted(roles),
                                                             "results": str(results_path.resolve())})
        report = ScoringReport(folder.path)
        score_results(results_path, checkpoint_dir, config.scoring, roles, report, config.execution)
        with folder.commit(STEP.name) as commit:
            table = folder.observation_tokens(suffix).name
            report.num_tokens = consolidate(checkpoint_dir, commit.stage(table, folder.based_on("tokens")),
                                             commit.metadata)
        atomic_write_json(checkpoint_dir / "report.json", report.as_dict())
    return report


def show(report: ScoringReport, run_dir: Path, config: ScoreObservationsConfig, say: Reporter) -> None:
    """What the command prints: the scoring report, its terms, what the scoring cost."""
    say.say(json.dumps(report.as_dict(), indent=2))
    for line in report.explain():
        say.say(f"  {line}", warn=True)
    if report.cost.line():
        say.say(f"cost: {report.cost.line()}", warn=True)


COMMAND = Command(summary="Surprise of every user and tool message under a scorer → "
                          "RUN_DIR/tokens.observations_<mode>.parquet.",
                  options=("results", "scoring.scorer_mode", "scoring.scorer_llm", "scoring.backend",
                           "scoring.user_messages", "scoring.tool_messages", "execution.scheduler",
                           "execution.api_bases"),
                  flags={"execution.api_bases": "--api-base"},
                  help={"run_dir": "run directory (its manifest or results.json names the results)",
                        "results": "results file, if not the run's own"}, errors=("FanOutFailed",), show=show)


def score_observations(run_dir: str | Path | RunDir, results: str | Path | None = None, **options: Any) -> ScoringReport:
    """:func:`run` with the fields of ``ScoringConfig`` and ``ExecutionConfig`` as keywords."""
    scoring, execution = configs_from_options(options, ScoringConfig, "scoring")
    return run(run_dir, ScoreObservationsConfig(results=results, scoring=scoring, execution=execution))
