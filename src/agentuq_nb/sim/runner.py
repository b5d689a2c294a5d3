"""Run a domain's tasks × trials and write a τ²-bench v0 results file plus agentuq sidecars.

Layout of ``out_dir``::

    results.json                 τ²-bench v0: timestamp, info, tasks, simulations (task order)
    sidecars/logprobs_{domain}_{task_id}_trial{t}_seed{s}.jsonl   token rows per simulation
    checkpoints/{task_id}_trial{t}.json                           one finished simulation each
    run_config.json              the parameters the checkpoints were made with

Resumable: each finished simulation writes its sidecar, then its checkpoint, both
atomically. A run killed at any moment and started again with the same parameters
skips every checkpointed simulation and redoes only unfinished ones (a sidecar
without a checkpoint is simply overwritten), so nothing is lost or duplicated;
``results.json`` is assembled atomically from the checkpoints at the end.

With ``scheduler`` (a Dask address, ``local:N`` or a ``distributed.Client``) each pending
(task, trial) is one job on the cluster (:func:`simulate_one` on a worker); the client writes
each returned simulation's sidecar and checkpoint exactly as the in-process run does, once
per key. Which worker ran what does not change any byte but the wall-clock fields.

Seeds per trial follow τ²-bench: ``random.seed(seed)`` then one
``randint(0, 1_000_000)`` per trial (seed 300 → 626729 for trial 0).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import re
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import datetime
from pathlib import Path
from typing import Any

from agentuq_nb.io.atomic import atomic_write_json
from agentuq_nb.io.sidecars import sidecar_name, write_sidecar
from agentuq_nb.records.tokens import SCHEMA_VERSION
from agentuq_nb.sim.agent import AGENT_INSTRUCTION, LLMAgent
from agentuq_nb.sim.domain import Domain, list_domains, load_domain
from agentuq_nb.sim.orchestrator import Orchestrator, SimulationInterrupted, SimulationResult
from agentuq_nb.sim.user_simulator import GLOBAL_USER_SIM_GUIDELINES, UserSimulator

LOCAL_MODEL = "local/smollm2-135m-instruct"  # = agentuq_nb.llm.LOCAL_MODEL (kept here so importing sim is cheap)
DEFAULT_MAX_STEPS = 10
DEFAULT_MAX_ERRORS = 5
DEFAULT_AGENT_MAX_TOKENS = 64
DEFAULT_USER_MAX_TOKENS = 32
RESULTS_NAME = "results.json"
SIDECAR_DIR = "sidecars"
CHECKPOINT_DIR = "checkpoints"
RUN_CONFIG_NAME = "run_config.json"

# the only fields in which two runs with the same parameters and seeds differ (the wall clock)
WALL_CLOCK_FIELDS = frozenset({"timestamp", "start_time", "end_time", "duration", "message_timestamp"})

_SENSITIVE = re.compile(r"key|secret|token|password|passwd|auth|credential|header|cookie", re.I)

__all__ = ["run_simulations", "list_domains", "load_domain", "trial_seeds", "RunConfigMismatch", "SimulationFailed",
           "SimulationJob", "simulate_one", "without_wall_clock", "WALL_CLOCK_FIELDS"]


class RunConfigMismatch(ValueError):
    """``out_dir`` holds checkpoints made with other parameters."""


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


def _safe_component(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value))


def checkpoint_name(task_id: str, trial: int) -> str:
    return f"{_safe_component(task_id)}_trial{trial}.json"


def safe_llm_args(args: dict[str, Any] | None) -> dict[str, Any]:
    """LLM arguments fit to be recorded: no key/secret/token-like names, no value of a secret env var."""
    secrets = {v for k, v in os.environ.items() if _SENSITIVE.search(k) and v and len(v) >= 8}
    out = {}
    for key, value in (args or {}).items():
        if _SENSITIVE.search(str(key)):
            continue
        text = json.dumps(value, default=str)
        if any(s in text for s in secrets):
            continue
        if isinstance(value, str) and re.search(r"//[^/@\s]+:[^/@\s]+@", value):  # user:password@host
            value = re.sub(r"//[^/@\s]+:[^/@\s]+@", "//***@", value)
        out[key] = value
    return out


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


def _run_config(domain: Domain, agent: LLMAgent, user: UserSimulator, seed: int, num_trials: int,
                max_steps: int, max_errors: int) -> dict[str, Any]:
    """What determines a simulation's content; checkpoints are only reused under the same config."""
    return {
        "domain": domain.name,
        "agent_llm": agent.llm,
        "user_llm": user.llm,
        "agent_llm_args": {"temperature": agent.temperature, "max_tokens": agent.max_tokens,
                           "top_logprobs": agent.top_logprobs, **safe_llm_args(agent.llm_args)},
        "user_llm_args": {"temperature": user.temperature, "max_tokens": user.max_tokens,
                          "top_logprobs": user.top_logprobs, **safe_llm_args(user.llm_args)},
        "seed": seed,
        "num_trials": num_trials,
        "max_steps": max_steps,
        "max_errors": max_errors,
        "agent_system_prompt": agent.system_prompt,
        "agent_style": agent.style,
        "user_guidelines": user.guidelines,
        "user_prompt": user.describe(),
    }


def _check_run_config(out_dir: Path, config: dict[str, Any]) -> None:
    config = json.loads(json.dumps(config, default=str))  # compare as stored (tuples -> lists)
    path = out_dir / RUN_CONFIG_NAME
    if path.is_file():
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            old = None
        if old is not None and old != config:
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise RunConfigMismatch(
                f"{out_dir} holds a run made with other parameters ({', '.join(diff)} differ); "
                f"its checkpoints would be mixed with new simulations. Use another output directory "
                f"or delete {out_dir / CHECKPOINT_DIR} and {path}."
            )
        if old is not None:
            return
    atomic_write_json(path, config)


def _info(domain: Domain, agent: LLMAgent, user: UserSimulator, config: dict[str, Any], top_logprobs: int) -> dict:
    return {
        "git_commit": _git_commit(),
        "num_trials": config["num_trials"],
        "max_steps": config["max_steps"],
        "max_errors": config["max_errors"],
        "user_info": {
            "implementation": "user_simulator",
            "llm": user.llm,
            "llm_args": config["user_llm_args"],
            "global_simulation_guidelines": user.guidelines,
            **user.describe(),
        },
        "agent_info": {
            "implementation": "llm_agent",
            "llm": agent.llm,
            "llm_args": config["agent_llm_args"],
            "instructions": agent.instructions,
            "system_prompt": agent.system_prompt,
            "style": agent.style,
        },
        "environment_info": {
            "domain_name": domain.name,
            "policy": domain.policy,
            "tool_defs": {t["function"]["name"]: t for t in domain.tool_schemas()},
        },
        "seed": config["seed"],
        "uq_logprobs": {
            "enabled": True,
            "format": "jsonl",
            "sidecar_dir": SIDECAR_DIR,
            "top_logprobs": top_logprobs,
            "schema_version": SCHEMA_VERSION,
        },
    }


def _load_checkpoint(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None  # unreadable: treat as not done (writes are atomic, so this means foreign damage)
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

    @property
    def key(self) -> tuple[str, int]:
        return str(self.task["id"]), self.trial


def simulate_one(job: SimulationJob, stop_event: threading.Event | None = None) -> SimulationResult:
    """Run one simulation; a failure becomes :class:`SimulationFailed` naming the task and trial."""
    domain = load_domain(job.domain)
    user = dataclasses.replace(job.user, scenario=job.task.get("user_scenario"))
    orch = Orchestrator(domain, job.task, job.agent, user, trial=job.trial, seed=job.seed, max_steps=job.max_steps,
                        max_errors=job.max_errors, sidecar_path=job.sidecar_path, retry=job.retry,
                        stop_event=stop_event)
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
    from agentuq_nb.distributed import with_worker_api_base

    agent, user = job.agent, job.user
    if agent.llm != LOCAL_MODEL:
        agent = dataclasses.replace(agent, llm_args=with_worker_api_base(agent.llm_args))
    if user.llm != LOCAL_MODEL:
        user = dataclasses.replace(user, llm_args=with_worker_api_base(user.llm_args))
    try:
        return simulate_one(dataclasses.replace(job, agent=agent, user=user))
    except SimulationFailed as exc:
        raise SimulationFailed(str(exc)) from None  # the cause (an LLM client error) may not pickle


def _save_simulation(out_dir: Path, job: SimulationJob, result: SimulationResult) -> None:
    """The sidecar first, then the checkpoint: a checkpoint implies its token rows."""
    write_sidecar(out_dir / job.sidecar_path, result.token_rows)
    atomic_write_json(out_dir / CHECKPOINT_DIR / checkpoint_name(*job.key), {"simulation": result.simulation})


def run_simulations(
    domain: str | Domain,
    out_dir: str | os.PathLike,
    agent_llm: str = LOCAL_MODEL,
    user_llm: str = LOCAL_MODEL,
    task_ids: list[str] | None = None,
    num_tasks: int | None = None,
    num_trials: int = 1,
    top_logprobs: int = 5,
    max_concurrency: int = 1,
    seed: int = 300,
    max_steps: int = DEFAULT_MAX_STEPS,
    max_errors: int = DEFAULT_MAX_ERRORS,
    retries: int = 3,
    progress: bool = True,
    agent_max_tokens: int = DEFAULT_AGENT_MAX_TOKENS,
    user_max_tokens: int = DEFAULT_USER_MAX_TOKENS,
    temperature: float = 0.0,
    agent_llm_args: dict[str, Any] | None = None,
    user_llm_args: dict[str, Any] | None = None,
    scaffold: str = "auto",
    scheduler: Any = None,
    api_bases: list[str] | None = None,
    task_retries: int = 2,
) -> Path:
    """Simulate ``num_trials`` trials of the selected tasks; return the path of ``results.json``.

    ``task_ids`` (in the given order) or the first ``num_tasks`` tasks of the domain; all
    tasks when neither is given. ``agent_llm_args`` / ``user_llm_args`` go to
    ``llm.generate`` (e.g. ``api_base``); key-like entries are never recorded. Rerunning
    with the same ``out_dir`` and parameters resumes; other parameters raise
    :class:`RunConfigMismatch`.

    ``scaffold``: ``"tau2"`` (τ²-bench's prompts), ``"tiny"`` (prompt scaffolding for the
    embedded 135M model, see :mod:`agentuq_nb.sim.user_simulator` and :mod:`agentuq_nb.sim.agent`)
    or ``"auto"`` (``tiny`` for a role played by the embedded model, ``tau2`` otherwise).

    ``scheduler``: run the simulations as jobs on a Dask cluster (an address, ``"local:N"`` or
    a ``distributed.Client``; ``max_concurrency`` is then the cluster's business); a job that
    raises is retried ``task_retries`` times, one whose worker dies runs again elsewhere.
    ``api_bases``: servers for remote models, one per worker (see
    :mod:`agentuq_nb.distributed.worker`).
    """
    if scaffold not in ("auto", "tiny", "tau2"):
        raise ValueError(f"scaffold must be 'auto', 'tiny' or 'tau2', got {scaffold!r}")
    agent_style = scaffold if scaffold != "auto" else ("tiny" if agent_llm == LOCAL_MODEL else "tau2")
    user_style = scaffold if scaffold != "auto" else ("tiny" if user_llm == LOCAL_MODEL else "tau2")
    domain = load_domain(domain) if not isinstance(domain, Domain) else domain
    tasks = domain.select_tasks(task_ids, num_tasks)
    if num_trials < 1:
        raise ValueError(f"num_trials must be >= 1, got {num_trials}")
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    out_dir = Path(out_dir)
    (out_dir / SIDECAR_DIR).mkdir(parents=True, exist_ok=True)
    (out_dir / CHECKPOINT_DIR).mkdir(parents=True, exist_ok=True)

    from agentuq_nb import llm  # the LLM layer registers the local provider on import

    retry = llm.RetryPolicy(max_retries=retries)
    agent_proto = LLMAgent(llm=agent_llm, policy=domain.policy, tools=domain.tool_schemas(),
                           instructions=AGENT_INSTRUCTION, max_tokens=agent_max_tokens, temperature=temperature,
                           top_logprobs=top_logprobs, llm_args=dict(agent_llm_args or {}), style=agent_style)
    user_proto = UserSimulator(llm=user_llm, scenario=None, style=user_style, guidelines=GLOBAL_USER_SIM_GUIDELINES,
                               max_tokens=user_max_tokens, temperature=temperature, top_logprobs=top_logprobs,
                               llm_args=dict(user_llm_args or {}))
    config = _run_config(domain, agent_proto, user_proto, seed, num_trials, max_steps, max_errors)
    _check_run_config(out_dir, config)
    seeds = trial_seeds(seed, num_trials)

    jobs = [(task, trial) for task in tasks for trial in range(num_trials)]
    ckpt_path = {(str(t["id"]), k): out_dir / CHECKPOINT_DIR / checkpoint_name(str(t["id"]), k) for t, k in jobs}
    pending = [(t, k) for t, k in jobs if _load_checkpoint(ckpt_path[(str(t["id"]), k)]) is None]
    stop_event = threading.Event()

    def job_of(task: dict[str, Any], trial: int) -> SimulationJob:
        sidecar = sidecar_name(domain.name, str(task["id"]), trial, seeds[trial])
        builtin = domain.name in list_domains() and load_domain(domain.name) is domain
        return SimulationJob(domain=domain.name if builtin else domain, task=task, trial=trial, seed=seeds[trial],
                             agent=agent_proto, user=user_proto, max_steps=max_steps, max_errors=max_errors,
                             sidecar_path=f"{SIDECAR_DIR}/{sidecar}", retry=retry,
                             checkpoint_dir=str(out_dir / CHECKPOINT_DIR))

    def run_one(task: dict[str, Any], trial: int) -> None:
        job = job_of(task, trial)
        _save_simulation(out_dir, job, simulate_one(job, stop_event))

    bar = None
    if progress:
        from tqdm import tqdm  # text bar: works in terminals and in papermill-executed notebooks

        bar = tqdm(total=len(jobs), initial=len(jobs) - len(pending), desc=f"simulate {domain.name}",
                   unit="sim", file=sys.stderr)
    try:
        if scheduler is not None:
            _run_on_cluster(scheduler, api_bases, task_retries, out_dir, [job_of(t, k) for t, k in pending], bar)
        elif max_concurrency == 1:
            for task, trial in pending:
                if bar is not None:
                    bar.set_postfix_str(f"task {task['id']} trial {trial}")
                run_one(task, trial)
                if bar is not None:
                    bar.update(1)
        else:
            with ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="sim") as pool:
                futures: dict[Future, tuple] = {pool.submit(run_one, t, k): (t, k) for t, k in pending}
                try:
                    remaining = set(futures)
                    while remaining:
                        done, remaining = wait(remaining, timeout=0.5, return_when=FIRST_COMPLETED)
                        for fut in done:
                            fut.result()  # re-raise a simulation's error here
                            if bar is not None:
                                bar.update(1)
                except BaseException:
                    stop_event.set()
                    for fut in futures:
                        fut.cancel()
                    raise
    except (KeyboardInterrupt, SimulationInterrupted):
        stop_event.set()
        done_now = sum(1 for p in ckpt_path.values() if p.is_file())
        print(
            f"\nInterrupted: {done_now} of {len(jobs)} simulations are checkpointed in {out_dir / CHECKPOINT_DIR}. "
            f"Run the same command again to finish the remaining {len(jobs) - done_now}.",
            file=sys.stderr,
        )
        raise KeyboardInterrupt from None
    finally:
        if bar is not None:
            bar.close()

    return assemble_results(out_dir, domain, tasks, num_trials, agent_proto, user_proto, config, top_logprobs)


def _run_on_cluster(scheduler: Any, api_bases: list[str] | None, retries: int, out_dir: Path,
                    jobs: list[SimulationJob], bar) -> None:
    """Each job on a worker; each result saved here, once per (task, trial)."""
    from agentuq_nb.distributed import FanOutFailed, connect, fan_out

    def save(key: tuple[str, int], result: SimulationResult) -> None:
        if _load_checkpoint(out_dir / CHECKPOINT_DIR / checkpoint_name(*key)) is None:  # dedupe by key
            _save_simulation(out_dir, jobs_by_key[key], result)
        if bar is not None:
            bar.update(1)

    jobs_by_key = {job.key: job for job in jobs}
    with connect(scheduler, api_bases) as client:
        try:
            fan_out(client, simulate_on_worker, ((job.key, job) for job in jobs), save, retries=retries,
                    label="simulate")
        except FanOutFailed as err:
            (task_id, trial), first = err.failures[0]
            raise SimulationFailed(
                f"{len(err.failures)} simulation(s) failed on the cluster; first, task {task_id!r} trial {trial}: "
                f"{first}"
            ) from None


def assemble_results(out_dir: Path, domain: Domain, tasks: list[dict[str, Any]], num_trials: int,
                     agent: LLMAgent, user: UserSimulator, config: dict[str, Any], top_logprobs: int) -> Path:
    """Write ``results.json`` (atomically) from the checkpoints, in task order then trial order."""
    simulations = []
    missing = []
    for task in tasks:
        for trial in range(num_trials):
            data = _load_checkpoint(out_dir / CHECKPOINT_DIR / checkpoint_name(str(task["id"]), trial))
            if data is None:
                missing.append(f"{task['id']}/trial{trial}")
            else:
                simulations.append(data["simulation"])
    if missing:
        raise RuntimeError(f"simulations missing from {out_dir / CHECKPOINT_DIR}: {', '.join(missing)}")
    results = {
        "timestamp": datetime.now().isoformat(),
        "info": _info(domain, agent, user, config, top_logprobs),
        "tasks": [copy.deepcopy(t) for t in tasks],
        "simulations": simulations,
    }
    path = out_dir / RESULTS_NAME
    atomic_write_json(path, results)
    return path
