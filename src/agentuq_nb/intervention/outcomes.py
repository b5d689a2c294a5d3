"""The outcome accounting of intervention runs: what each simulation's ``intervention`` block says.

:func:`read_intervention_run` streams a run's simulations once (the project's reader,
:func:`agentuq_nb.io.results.iter_simulations`) into two tables: one row per simulation (keys,
rewards, escalation, tokens, the trajectory's max online signal) and one row per decision point.
Everything else here is table work on those.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.results import iter_simulations, read_header
from agentuq_nb.io.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tau2 import Results

#: the scalar fields of a simulation's intervention block copied into the per-simulation table
BLOCK_FIELDS = ("num_decisions", "num_flagged", "num_interventions", "agent_tokens", "extra_agent_tokens",
                "extra_agent_cost", "escalation_cost")
DECISION_COLUMNS = ["sim", "decision_idx", "message_idx", "signal", "flagged", "action"]


class InterventionRun(NamedTuple):
    """A run's intervention records: ``path`` (the results read), ``policy`` (``describe()`` of the run's
    policy), ``simulations`` (one row per simulation, in file order; ``sim`` = its position) and
    ``decisions`` (one row per decision point, ``sim`` naming its simulation)."""

    path: Path
    policy: dict[str, Any]
    simulations: pd.DataFrame
    decisions: pd.DataFrame


def results_source(run_dir) -> Path:
    """The results a run folder holds (its ``results.json``, else the results its manifest names); a
    results file or τ²-bench results directory is taken as it is."""
    path = Path(run_dir)
    if not path.exists():
        raise InputError(path, "run folder or results file does not exist")
    if path.is_file():
        return path
    run = RunDir(path)
    if (path / "simulations").is_dir():  # τ²-bench ≥ 1.0.1's directory layout: read as a whole
        return path
    return run.results_json if run.results_json.exists() else run.results_path()


def read_intervention_run(run_dir) -> InterventionRun:
    """Every simulation's ``intervention`` block of the run at ``run_dir`` as tables.

    ``simulations``: ``sim``, the trajectory keys, ``reward`` (as recorded: 0 when escalated),
    ``env_reward`` (the environment's verdict; the recorded reward when the block has none),
    ``escalated``, the block's counts and tokens (:data:`BLOCK_FIELDS`), ``max_signal`` (max over the
    decision points of the online signal; NaN when none was defined). Raises InputError naming the file
    when the run holds no simulation, a simulation has no intervention block, or simulations disagree on
    the policy."""
    path = results_source(run_dir)
    info = read_header(path).get("info") or {}
    domain = Results.domain_of(info)
    rows, decisions, policies = [], [], {}
    for i, sim in enumerate(iter_simulations(path)):  # one pass over the stream; tables are built after it
        block = (sim.model_extra or {}).get("intervention")
        if not isinstance(block, dict):
            raise InputError(path, f"simulation {sim.id} (task {sim.task_id}, trial {sim.trial}) has no "
                                   "intervention block: not a run of 'agentuq-nb simulate --policy'",
                             f"simulations[{i}]")
        policy = block.get("policy") or {}
        policies.setdefault(repr(sorted(policy.items())), policy)
        env_reward = block.get("env_reward")
        rows.append({"sim": i, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
                     "reward": np.nan if sim.reward is None else float(sim.reward),
                     "env_reward": np.nan if env_reward is None else float(env_reward),
                     "escalated": bool(block.get("escalated", False)),
                     **{k: block.get(k, 0) for k in BLOCK_FIELDS}})
        decisions.extend({"sim": i, **{k: d.get(k) for k in DECISION_COLUMNS[1:]}}
                         for d in block.get("decisions") or [])
    if not rows:
        raise InputError(path, "holds no simulation")
    if len(policies) > 1:
        names = sorted({str(p.get("name")) for p in policies.values()})
        raise InputError(path, f"simulations were run under {len(policies)} different policies ({', '.join(names)}): "
                               "one run, one policy")
    sims = pd.DataFrame(rows)
    sims.insert(1, "domain", domain)
    sims["env_reward"] = sims["env_reward"].fillna(sims["reward"])
    dec = pd.DataFrame(decisions, columns=DECISION_COLUMNS)
    dec["signal"] = pd.to_numeric(dec["signal"], errors="coerce").astype(float)
    dec["flagged"] = dec["flagged"].astype(bool)
    sims["max_signal"] = dec.groupby("sim")["signal"].max().reindex(sims["sim"]).to_numpy()
    sims = key_dtypes(sims)
    return InterventionRun(path, info.get("intervention_policy") or next(iter(policies.values())), sims, dec)

