"""Run a domain's tasks × trials and write a τ²-bench v0 results file plus agentuq sidecars.

Layout of the run folder (:class:`~agentuq_nb.io.store.rundir.RunDir`)::

    results.json                 τ²-bench v0: timestamp, info, tasks, simulations (task order)
    sidecars/logprobs_{domain}_{task_id}_trial{t}_seed{s}.jsonl   token rows per simulation
    checkpoints/{domain}_{task_id}_trial{t}_seed{s}.json          one finished simulation each
    run_config.json              the fingerprint the checkpoints were made with

What a run is comes from :class:`~agentuq_nb.records.config.SimulationConfig`; how its jobs run
(threads, a Dask cluster) from :class:`~agentuq_nb.records.config.ExecutionConfig`, through the one
job executor (:class:`~agentuq_nb.distributed.JobRunner`). The run folder is locked while it runs:
a second process is refused.

Resumable: each finished simulation writes its sidecar, then its checkpoint, both atomically. A
run killed at any moment and started again with the same configuration skips every checkpointed
simulation and redoes only unfinished ones (a sidecar without a checkpoint is simply overwritten),
so nothing is lost or duplicated; ``results.json`` is assembled from the checkpoints at the end and
published as a commit of the run folder. Another configuration (its fingerprint differs) is
refused (:class:`RunConfigMismatch`) instead of mixed in.

On Dask each pending (task, trial) is one job (:func:`simulate_on_worker`); the client writes each
returned simulation's sidecar and checkpoint exactly as the in-process run does, once per key.

Seeds per trial follow τ²-bench: ``random.seed(seed)`` then one ``randint(0, 1_000_000)`` per trial
(seed 300 → 626729 for trial 0).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
from datetime import datetime
from pathlib import Path
from typing import Any

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.common.naming import file_key, slug
from agentuq_nb.common.redaction import redact
from agentuq_nb.distributed import FanOutFailed, JobRunner, with_worker_api_base
from agentuq_nb.io.atomic import atomic_write_json
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import open_regular, read_limited_json
from agentuq_nb.io.ingest.sidecars import sidecar_name, write_sidecar
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig, SimulationConfig, configs_from_options
from agentuq_nb.records.tokens import SCHEMA_VERSION
from agentuq_nb.sim.agent import AGENT_INSTRUCTION, LLMAgent
from agentuq_nb.sim.decisions import DecisionPolicy, check_policy_runs
from agentuq_nb.sim.domain import Domain, list_domains, load_domain
from agentuq_nb.sim.orchestrator import Orchestrator, SimulationInterrupted, SimulationResult
from agentuq_nb.sim.user_simulator import GLOBAL_USER_SIM_GUIDELINES, UserSimulator

LOCAL_MODEL = EMBEDDED_MODEL
CHECKPOINT_DIR = RunDir.relative("checkpoints")  # simulations are checkpointed at its top level
ARTIFACT_SIDECARS = RunDir.relative("sidecars")

# the only fields in which two runs with the same parameters and seeds differ (the wall clock)
WALL_CLOCK_FIELDS = frozenset({"timestamp", "start_time", "end_time", "duration", "message_timestamp"})

__all__ = ["run_simulations", "simulate", "list_domains", "load_domain", "trial_seeds", "RunConfigMismatch",
           "SimulationFailed", "SimulationJob", "simulate_one", "without_wall_clock", "WALL_CLOCK_FIELDS",
           "safe_llm_args"]


class RunConfigMismatch(ValueError):
    """The run folder holds checkpoints made with another configuration."""


class SimulationFailed(RuntimeError):
    """A simulation raised (e.g. the LLM failed after its retries); the run stops, checkpoints stay."""


def trial_seeds(seed: int, num_trials: int) -> list[int]:
    """τ²-bench's per-trial seeds."""
    rng = random.Random(seed)
    return [rng.randint(0, 1_000_000) for _ in range(num_trials)]


def without_wall_clock(obj: Any) -> Any:
    """``obj`` (results JSON, a token row, lists of them) without :data:`WALL_CLOCK_FIELDS`, for comparing runs."""
    if isinstance(obj, dict):
        return {k: without_wall_clock(v) for k, v in obj.items() if k not in WALL_CLOCK_FIELDS}
    if isinstance(obj, list):
        return [without_wall_clock(v) for v in obj]
    return obj


def checkpoint_name(domain: str, task_id: str, trial: int, seed: int) -> str:
    """A simulation's checkpoint file: every key of the simulation in the name, like its sidecar's
    (:func:`~agentuq_nb.common.naming.file_key`: two task ids never share a file)."""
    return f"{file_key(domain)}_{file_key(task_id)}_trial{trial}_seed{seed}.json"


def legacy_checkpoint_name(task_id: str, trial: int) -> str:
    """The checkpoint name of versions before the seed was in it (read so that their runs resume)."""
    return f"{slug(task_id)}_trial{trial}.json"


#: LLM arguments fit to be recorded (the one redaction policy, :mod:`agentuq_nb.common.redaction`)
safe_llm_args = redact


def _git_commit() -> str:
    """The commit of the agentuq_nb checkout, if it is one (read from .git, no subprocess)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        head = parent / ".git" / "HEAD"
        if head.is_file():
            try:
                ref = head.read_text().strip()
                if ref.startswith("ref: "):
                    ref_file = parent / ".git" / ref[5:]
                    return ref_file.read_text().strip() if ref_file.is_file() else "unknown"
                return ref
            except OSError:
                return "unknown"
    return "unknown"


def _recorded_llm_args(temperature: float, max_tokens: int, top_logprobs: int, extra: dict[str, Any]) -> dict:
    return {"temperature": temperature, "max_tokens": max_tokens, "top_logprobs": top_logprobs, **redact(extra)}


def run_fingerprint(config: SimulationConfig, agent: LLMAgent, user: UserSimulator,
                    policy: DecisionPolicy | None = None) -> dict[str, Any]:
    """What determines a simulation's content: the configuration's dump, the prompts the code makes of it
    and the intervention policy, if any (its description, a certified threshold included)."""
    fingerprint = {
        "simulation": config.fingerprint(),
        "prompts": {"agent_system_prompt": agent.system_prompt, "agent_style": agent.style,
                    "user_guidelines": user.guidelines, "user_prompt": user.describe()},
    }
    if config.temperature > 0:  # sampled runs of versions that gave every call the trial seed differ: not resumed
        fingerprint["call_seeds"] = "per message (orchestrator.message_seed)"
    if policy is not None:
        fingerprint["intervention_policy"] = policy.describe()
    return fingerprint


def legacy_fingerprint(config: SimulationConfig, agent: LLMAgent, user: UserSimulator) -> dict[str, Any]:
    """The flat ``run_config.json`` of the versions before typed configs (so their runs still resume)."""
    return {
        "domain": config.domain, "agent_llm": agent.llm, "user_llm": user.llm,
        "agent_llm_args": _recorded_llm_args(agent.temperature, agent.max_tokens, agent.top_logprobs, agent.llm_args),
        "user_llm_args": _recorded_llm_args(user.temperature, user.max_tokens, user.top_logprobs, user.llm_args),
        "seed": config.seed, "num_trials": config.num_trials, "max_steps": config.max_steps,
        "max_errors": config.max_errors, "agent_system_prompt": agent.system_prompt, "agent_style": agent.style,
        "user_guidelines": user.guidelines, "user_prompt": user.describe(),
    }


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new), key=str)
                for d in _differences(old.get(k), new.get(k), f"{where}.{k}" if where else str(k))]
    return [] if old == new else [where]


def check_run_config(run: RunDir, fingerprint: dict[str, Any], legacy: dict[str, Any] | None = None) -> None:
    as_stored = lambda obj: json.loads(json.dumps(obj, default=str))  # noqa: E731  (tuples -> lists)
    fingerprint = as_stored(fingerprint)
    path = run.file("run_config")
    if path.is_file():
        try:
            old = read_limited_json(path, MAX_SMALL_JSON_BYTES, "run configuration")
        except InputError:
            old = None
        if old is not None and legacy is not None and "simulation" not in old:  # written by an older version
            if old == as_stored(legacy):
                atomic_write_json(path, fingerprint)  # the same run: resume, recorded in today's form
                return
            fingerprint = as_stored(legacy)
        if old is not None and old != fingerprint:
            raise RunConfigMismatch(
                f"{run.path} holds a run made with other parameters ({', '.join(_differences(old, fingerprint))} "
                f"differ); its checkpoints would be mixed with new simulations. Use another output directory "
                f"or delete {run.path / CHECKPOINT_DIR} and {path}."
            )
        if old is not None:
            return
    atomic_write_json(path, fingerprint)


def _info(domain: Domain, agent: LLMAgent, user: UserSimulator, config: SimulationConfig,
          policy: DecisionPolicy | None = None) -> dict:
    info = {
        "git_commit": _git_commit(),
        "num_trials": config.num_trials,
        "max_steps": config.max_steps,
        "max_errors": config.max_errors,
        "user_info": {
            "implementation": "user_simulator",
            "llm": user.llm,
            "llm_args": _recorded_llm_args(user.temperature, user.max_tokens, user.top_logprobs, user.llm_args),
            "global_simulation_guidelines": user.guidelines,
            **user.describe(),
        },
        "agent_info": {
            "implementation": "llm_agent",
            "llm": agent.llm,
            "llm_args": _recorded_llm_args(agent.temperature, agent.max_tokens, agent.top_logprobs, agent.llm_args),
            "instructions": agent.instructions,
            "system_prompt": agent.system_prompt,
            "style": agent.style,
        },
        "environment_info": {
            "domain_name": domain.name,
            "policy": domain.policy,
            "tool_defs": tool_signatures(domain),
        },
        "seed": config.seed,
        "uq_logprobs": {
            "enabled": True,
            "format": "jsonl",
            "sidecar_dir": ARTIFACT_SIDECARS,
            "top_logprobs": config.top_logprobs,
            "schema_version": SCHEMA_VERSION,
        },
    }
    if policy is not None:
        info["intervention_policy"] = policy.describe()
    return info


def tool_signatures(domain: Domain) -> dict[str, dict[str, Any]]:
    """The domain's tools in τ²-bench's ``ToolSignature`` shape (name, doc, JSON schema of the params), which its
    ``Results`` model requires of ``environment_info.tool_defs``."""
    return {t["function"]["name"]: {"name": t["function"]["name"], "doc": t["function"].get("description") or "",
                                    "params": t["function"].get("parameters"), "returns": None}
            for t in domain.tool_schemas()}


def load_checkpoint(run: RunDir, job: "SimulationJob") -> dict[str, Any] | None:
    """The finished simulation of ``job``, or None. A checkpoint of an older version (no seed in its
    name) counts when it holds this very simulation (the run's fingerprint, seed included, matched)."""
    checkpoints = run.folder("checkpoints")
    for name in (job.checkpoint_name, legacy_checkpoint_name(*job.key)):
        data = _read_checkpoint(checkpoints / name)
        sim = (data or {}).get("simulation") or {}
        if sim.get("seed") == job.seed and str(sim.get("task_id")) == job.key[0] and sim.get("trial") == job.trial:
            return data  # the key inside is checked too: a file name is not a proof
    return None


def _read_checkpoint(path: Path) -> dict[str, Any] | None:
    try:
        with open_regular(path, "simulation checkpoint") as fh:
            data = json.load(fh)
    except (InputError, OSError, ValueError, RecursionError):
        return None  # missing or unreadable: treat as not done (writes are atomic, so this means foreign damage)
    return data if isinstance(data, dict) and "simulation" in data else None


@dataclasses.dataclass(frozen=True)
class SimulationJob:
    """Everything one simulation needs, picklable so that a Dask worker can run it."""

    domain: str | Domain  # a built-in domain's name (loaded once per process) or the Domain itself
    task: dict[str, Any]
    trial: int
    seed: int
    agent: LLMAgent
    user: UserSimulator  # the prototype: the task's scenario is filled in per job
    max_steps: int
    max_errors: int
    sidecar_path: str  # relative to the run directory, as recorded in the messages
    retry: Any
    checkpoint_dir: str  # named in the error message only
    policy: Any = None  # a sim.decisions.DecisionPolicy acting at each agent decision point, or None

    @property
    def key(self) -> tuple[str, int]:
        return str(self.task["id"]), self.trial

    @property
    def checkpoint_name(self) -> str:
        domain = self.domain if isinstance(self.domain, str) else self.domain.name
        return checkpoint_name(domain, str(self.task["id"]), self.trial, self.seed)


def simulate_one(job: SimulationJob, stop_event=None) -> SimulationResult:
    """Run one simulation; a failure becomes :class:`SimulationFailed` naming the task and trial."""
    domain = load_domain(job.domain)
    user = dataclasses.replace(job.user, scenario=job.task.get("user_scenario"))
    orch = Orchestrator(domain, job.task, job.agent, user, trial=job.trial, seed=job.seed, max_steps=job.max_steps,
                        max_errors=job.max_errors, sidecar_path=job.sidecar_path, retry=job.retry,
                        stop_event=stop_event, policy=job.policy)
    try:
        return orch.run()
    except SimulationInterrupted:
        raise
    except Exception as exc:
        task_id, trial = job.key
        raise SimulationFailed(
            f"simulation of task {task_id!r} trial {trial} (domain {domain.name}) failed after "
            f"{len(orch.trajectory)} messages: {type(exc).__name__}: {exc}. Finished simulations are "
            f"checkpointed in {job.checkpoint_dir}; fix the cause and run the same command again."
        ) from exc


def simulate_on_worker(job: SimulationJob) -> SimulationResult:
    """:func:`simulate_one` on a Dask worker: remote models use the worker's ``api_base``, if it has one."""
    agent, user = job.agent, job.user
    if agent.llm != LOCAL_MODEL:
        agent = dataclasses.replace(agent, llm_args=with_worker_api_base(agent.llm_args))
    if user.llm != LOCAL_MODEL:
        user = dataclasses.replace(user, llm_args=with_worker_api_base(user.llm_args))
    try:
        return simulate_one(dataclasses.replace(job, agent=agent, user=user))
    except SimulationFailed as exc:
        raise SimulationFailed(str(exc)) from None  # the cause (an LLM client error) may not pickle


def _save_simulation(run: RunDir, job: SimulationJob, result: SimulationResult) -> None:
    """The sidecar first, then the checkpoint: a checkpoint implies its token rows."""
    write_sidecar(run.path / job.sidecar_path, result.token_rows)
    atomic_write_json(run.folder("checkpoints") / job.checkpoint_name, {"simulation": result.simulation})


def run_simulations(domain: str | Domain, out_dir: str | os.PathLike | RunDir, policy: DecisionPolicy | None = None,
                    **options: Any) -> Path:
    """Simulate ``domain`` into ``out_dir``; ``options`` are fields of
    :class:`~agentuq_nb.records.config.SimulationConfig` (what runs) and
    :class:`~agentuq_nb.records.config.ExecutionConfig` (how); ``policy`` acts at the agent's decision
    points (see :func:`simulate`). Returns the path of ``results.json``.

    A field with a wrong value raises ``ValueError`` naming it. Rerunning with the same ``out_dir``
    and configuration resumes; another configuration raises :class:`RunConfigMismatch`.
    """
    name = domain.name if isinstance(domain, Domain) else domain
    config, execution = configs_from_options(options, SimulationConfig, "simulation", domain=name)
    return simulate(config, out_dir, execution, domain if isinstance(domain, Domain) else None, policy)


def simulate(config: SimulationConfig, out_dir: str | os.PathLike | RunDir, execution: ExecutionConfig | None = None,
             domain: Domain | None = None, policy: DecisionPolicy | None = None) -> Path:
    """Run ``config`` into the run folder (see the module docstring); ``domain``: a custom Domain object;
    ``policy``: acts on the agent's uncertainty at each decision point (:mod:`agentuq_nb.sim.decisions`,
    built by :mod:`agentuq_nb.intervention`), recorded in the fingerprint and in each simulation."""
    execution = execution or ExecutionConfig()
    domain = domain or load_domain(config.domain)
    tasks = domain.select_tasks(config.task_ids, config.num_tasks)
    run = RunDir.of(out_dir)

    from agentuq_nb import llm  # the LLM layer registers the local provider on import

    if execution.scheduler is None:  # on a cluster the workers' environment is what counts
        llm.check_model(config.agent_llm, config.agent_llm_args)
        llm.check_model(config.user_llm, config.user_llm_args)
    retry = llm.RetryPolicy(max_retries=config.retries)
    agent_proto = LLMAgent(llm=config.agent_llm, policy=domain.policy, tools=domain.tool_schemas(),
                           instructions=AGENT_INSTRUCTION, max_tokens=config.agent_max_tokens,
                           temperature=config.temperature, top_logprobs=config.top_logprobs,
                           llm_args=dict(config.agent_llm_args), style=config.style(config.agent_llm))
    user_proto = UserSimulator(llm=config.user_llm, scenario=None, style=config.style(config.user_llm),
                               guidelines=GLOBAL_USER_SIM_GUIDELINES, max_tokens=config.user_max_tokens,
                               temperature=config.temperature, top_logprobs=config.top_logprobs,
                               llm_args=dict(config.user_llm_args))
    seeds = trial_seeds(config.seed, config.num_trials)
    checkpoints = run.folder("checkpoints")
    builtin = domain.name in list_domains() and load_domain(domain.name) is domain

    def job_of(task: dict[str, Any], trial: int) -> SimulationJob:
        sidecar = sidecar_name(domain.name, str(task["id"]), trial, seeds[trial])
        return SimulationJob(domain=domain.name if builtin else domain, task=task, trial=trial, seed=seeds[trial],
                             agent=agent_proto, user=user_proto, max_steps=config.max_steps,
                             max_errors=config.max_errors, sidecar_path=f"{ARTIFACT_SIDECARS}/{sidecar}",
                             retry=retry, checkpoint_dir=str(checkpoints), policy=policy)

    keys = [(str(task["id"]), trial, seeds[trial]) for task in tasks for trial in range(config.num_trials)]
    check_policy_runs(policy, keys)  # before the folder is touched
    with run.lock("simulate"):
        check_run_config(run, run_fingerprint(config, agent_proto, user_proto, policy),
                          legacy_fingerprint(config, agent_proto, user_proto))
        run.folder("sidecars", make=True)
        run.folder("checkpoints", make=True)
        all_jobs = [job_of(task, trial) for task in tasks for trial in range(config.num_trials)]
        pending = [job for job in all_jobs if load_checkpoint(run, job) is None]
        runner = JobRunner(label="simulate", desc=f"simulate {domain.name}", unit="sim", noun="simulations",
                           kept_as=f"checkpointed in {checkpoints}", **execution.runner_options())

        def save(key: tuple[str, int], result: SimulationResult) -> None:
            if load_checkpoint(run, jobs_by_key[key]) is None:  # once per key
                _save_simulation(run, jobs_by_key[key], result)

        jobs_by_key = {job.key: job for job in pending}
        try:
            runner.run(lambda job: simulate_one(job, runner.stop_event), ((job.key, job) for job in pending), save,
                       total=len(all_jobs), done=len(all_jobs) - len(pending), worker_fn=simulate_on_worker,
                       describe=lambda key: f"task {key[0]} trial {key[1]}")
        except FanOutFailed as err:
            (task_id, trial), first = err.failures[0]
            raise SimulationFailed(
                f"{len(err.failures)} simulation(s) failed on the cluster; first, task {task_id!r} trial {trial}: "
                f"{first}"
            ) from None
        return assemble_results(run, domain, tasks, all_jobs, agent_proto, user_proto, config, policy)


def assemble_results(run: RunDir, domain: Domain, tasks: list[dict[str, Any]], jobs: list[SimulationJob],
                     agent: LLMAgent, user: UserSimulator, config: SimulationConfig,
                     policy: DecisionPolicy | None = None) -> Path:
    """Publish ``results.json`` from the checkpoints of ``jobs`` (task order, then trial order)."""
    simulations = []
    missing = []
    for job in jobs:
        data = load_checkpoint(run, job)
        if data is None:
            missing.append(f"{job.key[0]}/trial{job.trial}")
        else:
            simulations.append(data["simulation"])
    if missing:
        raise RuntimeError(f"simulations missing from {run.file('checkpoints')}: {', '.join(missing)}")
    results = {
        "timestamp": datetime.now().isoformat(),
        "info": _info(domain, agent, user, config, policy),
        "tasks": [copy.deepcopy(t) for t in tasks],
        "simulations": simulations,
    }
    with run.commit("simulate") as commit:
        commit.write_json("results", results)
    return run.results_json
