"""``rescore``: rows for every message of any results file (assistant actions, tool calls as their serialized
JSON, observations) scored teacher-forced by a model → the run's base tables and manifest, so that ``aggregate``
and ``evaluate`` work on a run recorded without log-probs (see :mod:`agentuq_nb.uq.observation`).
"""
from __future__ import annotations

import os
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pydantic import Field

from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.ingest.sidecars import trajectory_table_name
from agentuq_nb.io.store.artifacts import results_input
from agentuq_nb.io.store.rundir import RESULTS_CONTENT, RunDir
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig, ScoringConfig, configs_from_options
from agentuq_nb.steps.base import RESULTS_HELP, Command, FamilyHint, Reporter, Step, StepConfig
from agentuq_nb.steps.scoring_jobs import check_checkpoint_settings, score_results
from agentuq_nb.uq.base_tables import BaseTables
from agentuq_nb.uq.observation import ScoringReport

#: what rescore costs with the embedded model on the 2-core reference machine: the 20 real GPT-4.1 airline
#: trajectories (510 messages) took 20 min 26 s in one process (benchmarks/RESULTS.md, "Your own run")
EMBEDDED_SECONDS_PER_MESSAGE = (20 * 60 + 26) / 510


def rescore_cost(run: RunDir) -> str | None:
    """What ``rescore`` of ``run``'s results costs with the default scorer, and that the scorer is not the agent."""
    if not run.has("messages"):
        return None
    n = pq.read_metadata(run.file("messages")).num_rows
    agent = run.manifest().models.get("assistant")
    minutes = max(1, round(n * EMBEDDED_SECONDS_PER_MESSAGE / 60))
    scorer = (f"not the run's agent ({agent})" if agent and agent != EMBEDDED_MODEL else "the run's own agent" if agent
              else "a stand-in: the results record no agent model")
    return (f"about {minutes} min for its {n} messages in one process on 2 cores (measured: 510 messages of 20 GPT-4.1 "
            f"airline trajectories in 20 min); scored by the embedded SmolLM2-135M ({EMBEDDED_MODEL}), {scorer}; "
            "--scorer-llm MODEL scores with another, --limit N scores the first N trajectories only")


STEP = Step("rescore", "agentuq-nb rescore RESULTS --out RUN_DIR",
            ("manifest", "tokens", "messages", "trajectories", "turn_partials", "checkpoints"),
            adds=(FamilyHint("token", "the run has no token log-probs; score its messages teacher-forced under a "
                             "model of your choosing", "agentuq-nb rescore RESULTS --out RUN_DIR-nll --scheduler "
                             "local:2, then agentuq-nb compare-estimators RUN_DIR-nll", cost=rescore_cost),))


class RescoreConfig(StepConfig):
    """The results rescored, what is scored and how the jobs run."""

    results: Path = Field(description="the results file whose messages are scored")
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)


def run(run_dir: str | Path | RunDir, config: RescoreConfig) -> ScoringReport:
    """Rows for every message of a results file → ``OUT``'s base tables (tokens, partials, messages,
    trajectories) and manifest, published as one commit, so that ``aggregate`` and ``evaluate`` work on
    any recorded run.

    ``config.scoring`` and ``config.execution`` as in ``score-observations``; ``limit`` scores only the first N
    simulations (a quick look at a large file)."""
    results_path, folder = Path(config.results), RunDir.of(run_dir)
    with folder.lock(STEP.name):
        checkpoint_dir = folder.checkpoint_dir(f"rescore_{config.scoring.scorer_mode}")
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        check_checkpoint_settings(checkpoint_dir / "scorer.json", {"model": config.scoring.scorer_llm, "backend": config.scoring.source,
                                                             "results": str(results_path.resolve())})
        report = ScoringReport(folder.path)
        score_results(results_path, checkpoint_dir, config.scoring, {"assistant", "user", "tool"}, report, config.execution)
        file = ResultsFile.open(results_path, tell_version=False)  # its header and both streams: one sniff
        domain = file.domain
        # the checkpoints of the simulations scored now: with --limit, never those an earlier, longer run left
        chosen = {trajectory_table_name(domain, sim.task_id, sim.trial, sim.seed)
                  for sim in islice(file.simulations(), config.scoring.limit)}
        based_on = results_input(folder, results_path)
        with folder.commit(STEP.name) as commit, BaseTables(commit, based_on) as tables:
            for part in sorted(checkpoint_dir.glob("*.parquet")):
                if part.name in chosen:
                    tables.add_tokens(pq.read_table(part))
            tables.add_simulations(islice(file.checked_simulations(report.warnings), config.scoring.limit), domain,
                                   str(results_path), report.warnings)
            tables.close(str(results_path), report.warnings)
            report.num_tokens = tables.num_tokens
            commit.update_manifest(
                step=STEP.name, results=str(results_path.resolve()), results_sha256=based_on[RESULTS_CONTENT],
                layout=None, sidecar_dir=None, domain=domain,
                models={}, num_simulations=len(tables.trajectories), num_tokens=report.num_tokens,
                warnings=report.warnings.as_dict(),
                scoring={"scorer_llm": config.scoring.scorer_llm, "scorer_mode": config.scoring.scorer_mode, "backend": config.scoring.source,
                         **report.as_dict()})
    return report


def before(run_dir: Path, config: RescoreConfig, say: Reporter) -> None:
    """Said before the command scores in one process on a machine with more cores."""
    cores = os.cpu_count() or 1
    if config.execution.scheduler is None and cores > 1:
        say.say(f"note: scoring in this one process; --scheduler local:{cores} scores on {cores} worker processes, "
                "each with its own copy of the scorer (the embedded model scores one trajectory per core)", warn=True)


def show(report: ScoringReport, run_dir: Path, config: RescoreConfig, say: Reporter) -> None:
    """What the command prints: the scoring report, its terms, what it cost, what to run next."""
    from agentuq_nb.steps.score_observations import show as show_scoring

    show_scoring(report, run_dir, config, say)
    say.say(f"next: agentuq-nb aggregate {run_dir}, then agentuq-nb compare-estimators {run_dir}", warn=True)


COMMAND = Command(summary="Teacher-forced token rows for every message of a results file → OUT/tokens.parquet (then "
                          "aggregate, evaluate).", arguments=("results",), out=True,
                  out_help="run directory for tokens.parquet and the manifest",
                  options=("scoring.scorer_llm", "scoring.scorer_mode", "scoring.backend", "scoring.limit",
                           "execution.scheduler", "execution.api_bases"),
                  flags={"execution.api_bases": "--api-base"},
                  help={"results": RESULTS_HELP + ", with or without log-probs",
                        "scoring.limit": "score only the first N simulations (a first look at the cost)"},
                  errors=("FanOutFailed",), before=before, show=show)


def rescore(results: str | Path, out: str | Path | RunDir, **options: Any) -> ScoringReport:
    """:func:`run` with the fields of ``ScoringConfig`` and ``ExecutionConfig`` as keywords."""
    scoring, execution = configs_from_options(options, ScoringConfig, "scoring")
    return run(out, RescoreConfig(results=results, scoring=scoring, execution=execution))
