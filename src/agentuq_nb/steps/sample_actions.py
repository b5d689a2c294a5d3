"""``sample-actions``: K alternative next actions at every agent decision point of a run's trajectories
(:mod:`agentuq_nb.uq.action_sampling`) → ``action_samples.parquet``, their per-decision-point statistics
(:mod:`agentuq_nb.uq.action_uq`) → ``action_turns.parquet`` and ``action_sampling.json``, one commit.

Each trajectory is one job (in this process or on a Dask cluster), checkpointed with its counts so a
resumed run reports them; a rerun with other settings (sampler, tools' content, results) is refused.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from agentuq_nb.distributed import JobRunner
from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.files import check_regular
from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.ingest.sidecars import trajectory_table_name
from agentuq_nb.io.input_warnings import emit_input_warnings
from agentuq_nb.io.store.artifacts import results_input, run_results
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Results
from agentuq_nb.records.action_samples import ACTION_SAMPLE_SCHEMA
from agentuq_nb.records.config import EMBEDDED_MODEL, ActionSamplingConfig, ExecutionConfig, configs_from_options
from agentuq_nb.steps.base import Command, FamilyHint, Reporter, Step, StepConfig
from agentuq_nb.steps.scoring_jobs import check_checkpoint_settings, simulation_count
from agentuq_nb.uq.action_sampling import (
    DEFAULT_MAX_TOKENS,
    SampledTrajectory,
    SamplingJob,
    agent_tools,
    decision_points,
    sample_on_worker,
    sample_one,
    tools_digest,
)
from agentuq_nb.uq.observation import agent_system_prompt

#: the settings the suggested command uses (those measured below; README's "Your own run")
SUGGESTED = "--k 4 --turns first:5 --max-tokens 32 --no-conceptual-partials --scheduler local:2"
#: turns the suggested command samples (``--turns first:5``)
SUGGESTED_TURNS = 5
#: what a decision point costs with the embedded model at the suggested settings on the 2-core reference machine:
#: 99 decision points of the GPT-4.1 airline run, K = 4, 32 tokens, in 26 min (benchmarks/RESULTS.md)
EMBEDDED_SECONDS_PER_DECISION = 26 * 60 / 99


def sampling_cost(run: RunDir) -> str | None:
    """What the suggested ``sample-actions`` costs on ``run``, and which model it samples with."""
    if not run.has("messages"):
        return None
    import pandas as pd

    messages = pd.read_parquet(run.file("messages"), columns=["task_id", "trial", "role", "message_idx"])
    agent_turns = messages[(messages["role"] == "assistant") & (messages["message_idx"] > 0)]
    points = int(agent_turns.groupby(["task_id", "trial"]).size().clip(upper=SUGGESTED_TURNS).sum())
    minutes = max(1, round(points * EMBEDDED_SECONDS_PER_DECISION / 60))
    agent = run.manifest().models.get("assistant")
    who = (f"the embedded SmolLM2-135M as an observer, not the run's agent ({agent}): set {agent}'s API key and "
           "leave --model out to sample the agent itself" if agent and agent != EMBEDDED_MODEL
           else "the agent's own model, the embedded SmolLM2-135M" if agent
           else "the embedded SmolLM2-135M as an observer: the results record no agent model")
    return (f"about {minutes} min for its {points} decision points on 2 cores (measured: 99 decision points of 20 "
            f"GPT-4.1 airline trajectories in 26 min); sampled by {who}")


STEP = Step("sample-actions", "agentuq-nb sample-actions RUN_DIR --k K",
            ("action_samples", "action_turns", "action_sampling_report"),
            adds=(FamilyHint("action", "K resampled next actions at each agent decision point",
                             f"agentuq-nb sample-actions RUN_DIR {SUGGESTED}",
                             command_without_tokens=f"agentuq-nb sample-actions RUN_DIR --model {EMBEDDED_MODEL} "
                                                    f"{SUGGESTED}", cost=sampling_cost),))


class SampleActionsConfig(StepConfig):
    """The results sampled (default: the run's own), what is sampled, how the jobs run."""

    results: Optional[Path] = Field(None, description="the results file (default: the one the run was extracted from)")
    sampling: ActionSamplingConfig = Field(default_factory=ActionSamplingConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    embedder: Any = Field(None, description="the sentence embedder of the semantic clusters (default: MiniLM)")



@dataclass
class ActionSamplingReport:
    run_dir: Path
    sampler_model: str = ""
    sampler_kind: str = ""
    tools_source: str = ""
    sampled: int = 0  # trajectories sampled now
    skipped: int = 0  # trajectories already sampled (a resumed run)
    without_decisions: int = 0  # trajectories with no selected agent decision point
    decisions: int = 0
    samples: int = 0
    overflow_decisions: int = 0
    fitted_decisions: int = 0
    dropped_messages: int = 0
    cost: float = 0.0
    warnings: InputWarnings = field(default_factory=InputWarnings)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["run_dir"] = str(self.run_dir)
        out["warnings"] = self.warnings.as_dict()
        return out


def sampler_for(info: dict, model: str | None) -> tuple[str, str]:
    """``(model, sampler_kind)``: the agent's own model unless another is given (then an observer).
    A clear error when the agent's model cannot be run here (no API key for it)."""
    import litellm

    agent_model = str((info.get("agent_info") or {}).get("llm") or "")
    if model is None:
        if not agent_model:
            raise ValueError("the results do not name the agent's model (info.agent_info.llm); model must name the sampler")
        if agent_model != EMBEDDED_MODEL:
            missing = litellm.validate_environment(model=agent_model).get("missing_keys") or []
            if missing:
                raise ValueError(f"the agent's model {agent_model!r} cannot be run here (missing {', '.join(missing)}); "
                                 f"model={EMBEDDED_MODEL} samples with the embedded model as an observer")
        model = agent_model
    return model, ("self" if model == agent_model else "observer")


def sampling_jobs(results_path: Path, checkpoint_dir: Path, config: ActionSamplingConfig, report: ActionSamplingReport,
          info: dict, tools: list[dict], model: str):
    """``(checkpoint path, job)`` for every simulation not sampled yet, in file order."""
    domain = Results.domain_of(info)
    system = agent_system_prompt(info)
    agent = info.get("agent_info") or {}
    tiny = agent.get("style") == "tiny"
    max_tokens = config.max_tokens or int((agent.get("llm_args") or {}).get("max_tokens") or DEFAULT_MAX_TOKENS)
    for sim in islice(iter_simulations(results_path), config.limit):
        out = checkpoint_dir / trajectory_table_name(domain, sim.task_id, sim.trial, sim.seed)
        if out.exists():
            report.skipped += 1
            continue
        decisions = decision_points(sim, config, tiny)  # none: counted from its checkpoint (a resumed run too)
        yield out, SamplingJob(sim=sim, domain=domain, where=f"{results_path} simulation {sim.id}", system=system,
                               tools=tools, decisions=decisions, model=model, sampler_kind=report.sampler_kind,
                               config=config, max_tokens=max_tokens)


COUNTS = ("without_decisions", "decisions", "overflow_decisions", "fitted_decisions", "dropped_messages", "cost")
COUNTS_KEY = b"agentuq_nb.action_sampling"


def save_sampled(out: Path, sampled: SampledTrajectory, report: ActionSamplingReport) -> None:
    """Checkpoint one sampled trajectory with its counts (the first written wins)."""
    if out.exists():  # dedupe by trajectory: the first result written wins
        return
    counts = json.dumps({**{name: getattr(sampled, name) for name in COUNTS}, "where": sampled.where}).encode()
    table = sampled.table.replace_schema_metadata({COUNTS_KEY: counts})  # a resumed run still reports them
    atomic_write_with(out, lambda p: pq.write_table(table, p))
    report.sampled += 1


def read_checkpoints(checkpoints: list[Path], report: ActionSamplingReport, turns: str) -> pa.Table:
    """Every finished trajectory's samples (of this run and the ones it resumes), each file read once,
    with their counts added to the report's totals (and the warning for trajectories without a decision point)."""
    tables = []
    for part in checkpoints:
        check_regular(part, "a sampling checkpoint")
        try:
            table = pq.read_table(part)
            counts = json.loads((table.schema.metadata or {}).get(COUNTS_KEY, b"{}"))
        except (pa.ArrowException, OSError, ValueError) as err:
            raise InputError(part, f"is not a readable sampling checkpoint ({str(err).splitlines()[0]}); delete it "
                                   "and run the command again to sample that trajectory anew") from None
        if not counts.get("without_decisions") and table.num_rows == 0 and "without_decisions" not in counts:
            counts["without_decisions"] = 1  # written before the count was kept: an empty table is one
        for name in COUNTS:
            setattr(report, name, getattr(report, name) + counts.get(name, 0))
        if counts.get("without_decisions"):
            report.warnings.add("trajectories_without_decision_points",
                                f"{counts.get('where') or part.name}: no agent decision point (turns={turns})")
        report.samples += table.num_rows
        tables.append(table.replace_schema_metadata(None).cast(ACTION_SAMPLE_SCHEMA))
    return pa.concat_tables(tables) if tables else ACTION_SAMPLE_SCHEMA.empty_table()


def run(run_dir: str | Path | RunDir, config: SampleActionsConfig = SampleActionsConfig()) -> ActionSamplingReport:
    """K alternative next actions at every decision point → ``RUN_DIR/action_samples.parquet`` and the
    per-decision-point statistics → ``RUN_DIR/action_turns.parquet``, one commit.

    ``config.sampling`` (:class:`~agentuq_nb.records.config.ActionSamplingConfig`: ``k``, ``model``,
    ``temperature``, ``turns``, ``limit``, ``max_tokens``, ``top_logprobs``, ``seed``, ``tools``) says what is
    sampled, ``config.execution`` (``scheduler``, ``max_concurrency``, ``progress`` …) how. Resumable per
    trajectory; a rerun with other settings is refused; the run folder is locked meanwhile."""
    from agentuq_nb import llm
    from agentuq_nb.uq.action_uq import action_turn_table

    folder = RunDir.of(run_dir)
    with folder.lock(STEP.name):
        results_path, digest = run_results(folder, config.results)
        info = read_header(results_path).get("info") or {}
        model, kind = sampler_for(info, config.sampling.model)
        if config.execution.scheduler is None:  # on a cluster the workers' environment is what counts
            llm.check_model(model)
        report = ActionSamplingReport(folder.path, sampler_model=model, sampler_kind=kind)
        tools, report.tools_source = agent_tools(info, results_path, config.sampling.tools, report.warnings)
        checkpoint_dir = folder.folder(f"{folder.relative('checkpoints')}/action_samples", make=True)
        # the tools' content, not the file's path: an edited --tools file between two runs is another setting
        check_checkpoint_settings(checkpoint_dir / "sampler.json",
                                  {**config.sampling.fingerprint(), "tools_sha256": tools_digest(tools), "model": model,
                                   "results": str(results_path.resolve()), "results_sha256": digest})
        runner = JobRunner(label="sample_actions", desc=f"sample actions (K={config.sampling.k})", unit="traj",
                           noun="trajectories", kept_as=f"checkpointed in {checkpoint_dir}",
                           **config.execution.runner_options())
        runner.run(sample_one, sampling_jobs(results_path, checkpoint_dir, config.sampling, report, info, tools, model),
                   lambda out, sampled: save_sampled(out, sampled, report),
                   total=simulation_count(results_path, config.sampling.limit),
                   done=lambda: report.skipped, worker_fn=sample_on_worker)
        samples = read_checkpoints(sorted(checkpoint_dir.glob("*.parquet")), report, config.sampling.turns)
        if samples.num_rows == 0:
            raise ValueError(f"{results_path}: no decision point was sampled ({report.without_decisions} trajectories "
                             f"without an agent decision point under turns={config.sampling.turns!r}, "
                             f"{report.overflow_decisions} decision points whose context does not fit)")
        turns = action_turn_table(samples.to_pandas(), embedder=config.embedder, conceptual_partials=config.sampling.conceptual_partials)
        with folder.commit(STEP.name) as commit:
            based_on = results_input(folder, results_path, digest)
            commit.write_parquet("action_samples", samples, based_on)
            commit.write_parquet("action_turns", turns, based_on)  # made from the samples published with it
            commit.write_json("action_sampling_report", {"settings": config.sampling.fingerprint(), **report.as_dict()}, based_on)
    emit_input_warnings(report.warnings)
    return report


def show(report: ActionSamplingReport, run_dir: Path, config: SampleActionsConfig, say: Reporter) -> None:
    """What the command prints: the sampling report; a note when the sampler is not the agent's model."""
    say.say(json.dumps(report.as_dict(), indent=2))
    if report.sampler_kind == "observer":
        say.say(f"note: sampled by {report.sampler_model}, an observer (not the agent's model)", warn=True)


COMMAND = Command(summary="K alternative next actions at every agent decision point → RUN_DIR/action_samples.parquet, "
                          "action_turns.parquet.",
                  options=("results", "sampling.k", "sampling.model", "sampling.temperature", "sampling.turns",
                           "sampling.limit", "sampling.max_tokens", "sampling.tools", "sampling.seed",
                           "sampling.conceptual_partials", "execution.scheduler", "execution.max_concurrency",
                           "execution.api_bases"),
                  flags={"execution.api_bases": "--api-base"},
                  help={"run_dir": "run directory (its manifest or results.json names the results)",
                        "results": "results file, if not the run's own",
                        "sampling.model": "sampler (default: the agent's own model; another model is an observer, "
                                          "labelled as such)",
                        "sampling.max_tokens": "per sample (default: the agent's, else 128)",
                        "sampling.tools": "JSON file of the agent's tool schemas, where the results do not record "
                                          "them (else they are inferred from the calls)",
                        "execution.max_concurrency": "trajectories in flight (remote samplers)"},
                  errors=("FanOutFailed",), show=show)


def sample_actions(run_dir: str | Path | RunDir, results: str | Path | None = None, embedder: Any = None,
                   **options: Any) -> ActionSamplingReport:
    """:func:`run` with the fields of ``ActionSamplingConfig`` and ``ExecutionConfig`` as keywords."""
    sampling, execution = configs_from_options(options, ActionSamplingConfig, "sampling")
    return run(run_dir, SampleActionsConfig(results=results, embedder=embedder, sampling=sampling, execution=execution))
