"""The outcome accounting of intervention runs: what each simulation's ``intervention`` block says.

:func:`read_intervention_run` streams a run's simulations once (the project's reader,
:func:`agentuq_nb.io.ingest.results.iter_simulations`) into two tables: one row per simulation (keys,
rewards, escalation, tokens, the trajectory's max online signal) and one row per decision point.
Everything else here is table work on those.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.bootstrap import cluster_codes, percentile_ci, resample_batches
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.multi_trial import task_labels
from agentuq_nb.io.errors import InputError, remedy
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tau2 import Results
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: the scalar fields of a simulation's intervention block copied into the per-simulation table
#: what a folder of intervention outcomes is, said where one is not (the steps name its command: io.errors.remedy)
POLICY_RUN = "a run of the simulate step with a policy (agentuq_nb.steps.simulate, PolicyConfig)"
BLOCK_FIELDS = ("num_decisions", "num_flagged", "num_interventions", "agent_tokens", "extra_agent_tokens",
                "extra_agent_cost", "escalation_cost")
DECISION_COLUMNS = ["sim", "decision_idx", "message_idx", "signal", "flagged", "action"]


def completion_tokens(message) -> int:
    """The tokens an assistant message's generation produced (its ``usage.completion_tokens``); 0 for a
    message with no usage (written, not generated: the greeting, a policy's message) and other roles."""
    if message.role != "assistant":
        return 0
    return int((message.usage or {}).get("completion_tokens") or 0)


def tokens_through(sim, agent_tokens: int) -> np.ndarray:
    """Agent tokens generated up to and including each message of ``sim``, from the messages' usage; all
    NaN unless they add up to the block's ``agent_tokens`` (then every generation is in the trajectory, as
    in an observe run: a policy that replaced or dropped a proposal leaves it out, and a results file
    without usage adds up to 0)."""
    through = np.cumsum([completion_tokens(m) for m in sim.messages], dtype=float)
    if not len(through) or through[-1] != agent_tokens:
        through[:] = np.nan
    return through


class InterventionRun(NamedTuple):
    """A run's intervention records: ``path`` (the results read), ``policy`` (``describe()`` of the run's
    policy), ``simulations`` (one row per simulation, in file order; ``sim`` = its position) and
    ``decisions`` (one row per decision point, ``sim`` naming its simulation; ``agent_tokens_through``: the
    agent tokens of the recorded trajectory's messages up to and including the decision's message, from
    their ``usage``; see :func:`tokens_through`)."""

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
    file = ResultsFile.open(path, tell_version=False)  # its header and its simulations: one sniff
    info = file.header.get("info") or {}
    domain = Results.domain_of(info)
    rows, decisions, policies = [], [], {}
    for i, sim in enumerate(file.simulations()):  # one pass over the stream; tables are built after it
        block = (sim.model_extra or {}).get("intervention")
        if not isinstance(block, dict):
            raise InputError(path, f"simulation {sim.id} (task {sim.task_id}, trial {sim.trial}) has no "
                                   f"intervention block: not {remedy('policy_run', POLICY_RUN)}",
                             f"simulations[{i}]")
        policy = block.get("policy") or {}
        policies.setdefault(repr(sorted(policy.items())), policy)
        env_reward = block.get("env_reward")
        rows.append({"sim": i, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
                     "reward": np.nan if sim.reward is None else float(sim.reward),
                     "env_reward": np.nan if env_reward is None else float(env_reward),
                     "escalated": bool(block.get("escalated", False)),
                     **{k: block.get(k, 0) for k in BLOCK_FIELDS}})
        # agent tokens generated up to and including each message (what a defer there would have spent)
        through = tokens_through(sim, int(block.get("agent_tokens") or 0))
        decisions.extend({"sim": i, **{k: d.get(k) for k in DECISION_COLUMNS[1:]},
                          "agent_tokens_through": (through[d["message_idx"]] if 0 <= d.get("message_idx", -1) < len(through)
                                                   else np.nan)}
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
    dec = pd.DataFrame(decisions, columns=[*DECISION_COLUMNS, "agent_tokens_through"])
    dec["signal"] = pd.to_numeric(dec["signal"], errors="coerce").astype(float)
    dec["flagged"] = dec["flagged"].astype(bool)
    sims["max_signal"] = dec.groupby("sim")["signal"].max().reindex(sims["sim"]).to_numpy()
    sims = key_dtypes(sims)
    return InterventionRun(path, info.get("intervention_policy") or next(iter(policies.values())), sims, dec)


# ------------------------------------------------------------------------------------------ outcome table

#: what names a policy setting (one line of the summary): the run and its policy's description
SETTING_COLUMNS = ["run", "policy", "action", "signal", "trigger", "threshold", "rate"]
OUTCOME_COLUMNS = [*SETTING_COLUMNS, *TRAJECTORY_KEYS, "reward", "env_reward", "escalated", "intervened", "flagged",
                   "num_interventions", "num_decisions", "agent_tokens", "extra_agent_tokens", "escalation_cost",
                   "max_signal", "agent_tokens_first_decision", "success"]


def run_label(run_dir) -> str:
    """A run's default label: its folder's name (a results file's stem)."""
    path = Path(run_dir)
    return path.stem if path.is_file() else path.name


def outcome_table(run_dir, label: str | None = None) -> pd.DataFrame:
    """One row per simulation of the intervention run at ``run_dir``: the setting (``run`` = ``label`` or
    the folder's name; ``policy``, ``action``, ``signal``, ``trigger``, ``threshold``, ``rate`` from the
    recorded policy), the keys, ``reward`` (as recorded: 0 when escalated), ``env_reward`` (the
    environment's verdict), ``escalated``, ``intervened`` (some action != proceed), ``flagged`` (some
    trigger fired), the counts and tokens of the block, ``max_signal``, ``agent_tokens_first_decision``
    (agent tokens up to the first decision point, from the messages' usage: what a defer there spends) and
    ``success`` (reward >= 1)."""
    return outcomes_of(read_intervention_run(run_dir), label or run_label(run_dir))


def outcomes_of(run: InterventionRun, label: str) -> pd.DataFrame:
    """:func:`outcome_table` of a run already read (:func:`read_intervention_run`)."""
    sims, dec = run.simulations, run.decisions
    setting = {"run": label, "policy": run.policy.get("name") or run.policy.get("policy"),
               "action": run.policy.get("action"), "signal": run.policy.get("signal"),
               "trigger": run.policy.get("trigger"),
               **{c: np.nan if run.policy.get(c) is None else float(run.policy[c]) for c in ("threshold", "rate")}}
    out = sims[TRAJECTORY_KEYS].copy()
    for col, value in setting.items():
        out[col] = value
    out["reward"] = sims["reward"].to_numpy(dtype=float)
    out["env_reward"] = sims["env_reward"].to_numpy(dtype=float)
    out["escalated"] = sims["escalated"].to_numpy(dtype=bool)
    out["intervened"] = sims["num_interventions"].to_numpy(dtype=int) > 0
    out["flagged"] = sims["num_flagged"].to_numpy(dtype=int) > 0
    for col in ("num_interventions", "num_decisions", "agent_tokens", "extra_agent_tokens"):
        out[col] = sims[col].to_numpy(dtype=int)
    out["escalation_cost"] = sims["escalation_cost"].to_numpy(dtype=float)
    out["max_signal"] = sims["max_signal"].to_numpy(dtype=float)
    first = dec.sort_values(["sim", "decision_idx"]).drop_duplicates("sim").set_index("sim")["agent_tokens_through"]
    out["agent_tokens_first_decision"] = first.reindex(sims["sim"]).to_numpy(dtype=float)
    out["success"] = out["reward"].to_numpy(dtype=float) >= 1.0
    return out[OUTCOME_COLUMNS]


# ---------------------------------------------------------------------------------------------- summary

#: the summary's statistics: name -> (the per-trajectory value, the rows it is averaged over (None: all))
SUMMARY_STATISTICS = {
    "intervention_rate": ("intervened", None),
    "flagged_rate": ("flagged", None),
    "escalation_rate": ("escalated", None),
    "success_all": ("success", None),  # escalated = not solved
    "success_non_escalated": ("success", "kept"),  # over the tasks not escalated
    "agent_tokens": ("agent_tokens", None),
    "total_cost": ("total_cost", None),  # agent tokens + escalation cost
}


def statistic_matrices(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights), each (n, statistics): every statistic of :data:`SUMMARY_STATISTICS` is the
    ratio sum(values * weights) / sum(weights) over a set of rows - a mean, or a mean over kept rows."""
    kept = ~rows["escalated"].to_numpy(dtype=bool)
    cols = {**{c: rows[c].to_numpy(dtype=float) for c in ("intervened", "flagged", "escalated", "success",
                                                           "agent_tokens")},
            "total_cost": rows["agent_tokens"].to_numpy(dtype=float) + rows["escalation_cost"].to_numpy(dtype=float)}
    values = np.column_stack([cols[v] for v, _ in SUMMARY_STATISTICS.values()])
    weights = np.column_stack([kept.astype(float) if w == "kept" else np.ones(len(rows))
                               for _, w in SUMMARY_STATISTICS.values()])
    return values, weights


def ratio(weighted: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """sum(weighted) / sum(weights) along ``axis``; NaN where no weight."""
    den = weights.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, weighted.sum(axis=axis) / np.where(den > 0, den, 1.0), np.nan)


def summarize_rows(rows: pd.DataFrame, n_boot: int = DEFAULT_N_BOOT, seed=0, ci: float = 0.95,
                   clustered: bool = True) -> dict[str, Any]:
    """The statistics of one policy setting's trajectories with percentile intervals of the bootstrap
    that resamples tasks (clusters, :func:`agentuq_nb.evaluation.bootstrap.resample_batches` with the
    :func:`~agentuq_nb.evaluation.multi_trial.task_labels` codes); ``clustered=False``: trajectories."""
    values, weights = statistic_matrices(rows)
    weighted = values * weights
    n = len(rows)
    tasks = task_labels(rows)
    codes = cluster_codes(tasks, n) if clustered else None
    point = ratio(weighted, weights, axis=0)
    boot = np.full((max(n_boot, 0), values.shape[1]), np.nan)
    for positions, idx in resample_batches(n, n_boot, seed, codes):
        boot[positions] = ratio(weighted[idx], weights[idx], axis=1)
    out: dict[str, Any] = {"n": n, "n_tasks": int(tasks.max() + 1) if n else 0,
                           "n_escalated": int(rows["escalated"].sum())}
    for j, name in enumerate(SUMMARY_STATISTICS):
        lo_hi = percentile_ci(boot[:, j], ci)
        out[name] = float(point[j])
        out[f"{name}_lo"], out[f"{name}_hi"] = (np.nan, np.nan) if lo_hi is None or np.isnan(point[j]) else lo_hi
    return out


def policy_summary(outcomes: pd.DataFrame, n_boot: int = DEFAULT_N_BOOT, seed=0, ci: float = 0.95,
                   clustered: bool = True) -> pd.DataFrame:
    """One row per policy setting (:data:`SETTING_COLUMNS`) of ``outcomes`` (one or several
    :func:`outcome_table` frames concatenated): ``n``, ``n_tasks``, ``n_escalated`` and every statistic of
    :data:`SUMMARY_STATISTICS` (intervention, flagged and escalation rates, success over all tasks with
    escalated = not solved, success over the non-escalated tasks, mean agent tokens, mean total cost =
    tokens + escalation cost), each with ``_lo``/``_hi``: a ``ci`` percentile interval of a bootstrap over
    tasks (all trajectories of a drawn task together; ``clustered=False``: over trajectories)."""
    missing = sorted(set(OUTCOME_COLUMNS) - set(outcomes.columns) - {"agent_tokens_first_decision", "max_signal"})
    if missing:
        raise ValueError(f"outcomes lack the column(s) {', '.join(missing)}: pass outcome_table(...) frames")
    settings = [c for c in SETTING_COLUMNS if c in outcomes.columns]
    rows = []
    for key, group in outcomes.groupby(settings, sort=False, dropna=False):  # a handful of settings
        rows.append({**dict(zip(settings, key)), **summarize_rows(group, n_boot, seed, ci, clustered)})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------- defer computed exactly

def deferred_outcomes(observe: pd.DataFrame, escalate: np.ndarray, tokens_at_escalation: np.ndarray,
                      escalation_cost: float, **setting: Any) -> pd.DataFrame:
    """The outcome table a ``defer`` policy would have written, from an observe run's table: the rows
    ``escalate`` are handed over (reward 0, tokens ``tokens_at_escalation``, ``escalation_cost``), the
    others keep the observe run's outcome."""
    out = observe.copy()
    esc = np.asarray(escalate, dtype=bool)
    for col, value in {"policy": "defer", "action": "defer", **setting}.items():
        out[col] = value
    out["escalated"] = out["intervened"] = out["flagged"] = esc
    out["num_interventions"] = esc.astype(int)
    out["reward"] = np.where(esc, 0.0, observe["env_reward"].to_numpy(dtype=float))
    out["agent_tokens"] = np.where(esc, tokens_at_escalation, observe["agent_tokens"].to_numpy(dtype=float))
    out["escalation_cost"] = np.where(esc, float(escalation_cost), 0.0)
    out["success"] = out["reward"].to_numpy(dtype=float) >= 1.0
    return out


def oracle_outcomes(observe_outcomes: pd.DataFrame, escalation_cost: float = 1.0) -> pd.DataFrame:
    """The defer oracle's outcome table from an observe run's: it defers at the first decision point of
    exactly the runs that fail (environment's reward < 1). A failed run without a decision point (it ended
    before the agent's first turn) cannot be deferred by a policy acting in the loop: it stays a failure,
    as for the oracle runs of the other policies, whose trigger fires at decision points only."""
    failed = ((observe_outcomes["env_reward"].to_numpy(dtype=float) < 1.0)
              & (observe_outcomes["num_decisions"].to_numpy(dtype=int) > 0))
    return deferred_outcomes(observe_outcomes, failed, observe_outcomes["agent_tokens_first_decision"].to_numpy(float),
                             escalation_cost, run=f"{observe_outcomes['run'].iloc[0]} (oracle)", policy="oracle",
                             trigger="oracle", threshold=np.nan, rate=np.nan)


def oracle_defer_summary(observe_outcomes: pd.DataFrame, n_boot: int = DEFAULT_N_BOOT, seed=0, ci: float = 0.95,
                         escalation_cost: float = 1.0, clustered: bool = True) -> pd.DataFrame:
    """The defer oracle, computed exactly from an observe run's :func:`outcome_table`: it escalates exactly
    the runs that fail and have a decision point, so success over all tasks = the observe run's, and over
    the non-escalated it is 1 when every failed run had a decision point. Same interval method as :func:`policy_summary` (one row).
    Its tokens are those up to the first decision point of a failed run (from the messages' usage)."""
    return policy_summary(oracle_outcomes(observe_outcomes, escalation_cost), n_boot, seed, ci, clustered)


def defer_curve_from_observe(observe_run, thresholds, escalation_cost: float = 1.0, n_boot: int = DEFAULT_N_BOOT, seed=0,
                             ci: float = 0.95, clustered: bool = True) -> pd.DataFrame:
    """The ``defer`` policy's summary at every threshold, computed exactly from an observe run (one
    :func:`policy_summary` row per threshold, ``run`` = "<observe run> (defer, exact)").

    Exact because every LLM call's seed is a function of (trial seed, task, message index) only: under
    ``defer`` a simulation is the observe run's, message for message, up to its first decision point whose
    signal exceeds the threshold, where it ends escalated (reward 0, the agent tokens spent up to and
    including that proposal, one escalation cost); a simulation never flagged is the observe run's whole.
    So a trajectory is escalated iff its max signal > t, and its outcome otherwise is the observe run's.
    This does NOT hold for ``resample_vote`` or ``confirm``: after their first flag the executed message
    (a voted sample, a confirmation request) differs from the observe run's, and the rest of the path
    with it - those must be simulated.
    """
    run = read_intervention_run(observe_run)
    observe = outcomes_of(run, run_label(observe_run))
    dec = run.decisions.sort_values(["sim", "decision_idx"])
    sim_pos = pd.Index(run.simulations["sim"])
    label = f"{run_label(observe_run)} (defer, exact)"
    frames = []
    for t in np.atleast_1d(np.asarray(thresholds, dtype=float)):  # a handful of thresholds
        first = dec[dec["signal"].to_numpy(dtype=float) > t].drop_duplicates("sim")
        escalate = np.zeros(len(observe), bool)
        tokens = np.full(len(observe), np.nan)
        at = sim_pos.get_indexer(first["sim"])
        escalate[at] = True
        tokens[at] = first["agent_tokens_through"].to_numpy(dtype=float)
        frames.append(deferred_outcomes(observe, escalate, tokens, escalation_cost, run=label, threshold=float(t),
                                        trigger="threshold", rate=np.nan))
    return policy_summary(pd.concat(frames, ignore_index=True), n_boot, seed, ci, clustered)


# ------------------------------------------------------------------------------- equal-rate baselines

def random_rate_for(target_rate: float, decisions_per_trajectory) -> float:
    """The per-decision probability p at which ``random`` flags, in expectation, the share ``target_rate``
    of trajectories: mean_i (1 - (1 - p)^n_i) = target, with n_i the decision points of trajectory i
    (e.g. an observe run's ``num_decisions``); solved by ``scipy.optimize.brentq`` (the left side
    increases with p). A target above the share of trajectories with a decision point is unreachable.

    Exact for ``random`` with ``random_action = defer`` given the observe run's n_i (a deferring run is the
    observe run up to its flag, so it meets the same decision points until then); for ``resample_vote`` and
    ``confirm`` the path changes after a flag, so the realized share is only close to the target."""
    n = np.asarray(decisions_per_trajectory, dtype=float).ravel()
    if n.size == 0 or (n < 0).any() or not np.isfinite(n).all():
        raise ValueError("decisions_per_trajectory must be a non-empty list of non-negative counts")
    reachable = float((n > 0).mean())
    if not 0.0 <= target_rate <= reachable:
        raise ValueError(f"target_rate must be in [0, {reachable:g}] (the share of trajectories with a decision "
                         f"point), got {target_rate}")
    if target_rate == 0.0:
        return 0.0
    if target_rate == reachable:
        return 1.0
    from scipy.optimize import brentq

    return float(brentq(lambda p: np.mean(1.0 - (1.0 - p) ** n) - target_rate, 0.0, 1.0, xtol=1e-12))


def threshold_grid(observe, rates) -> pd.DataFrame:
    """Thresholds that flag the shares ``rates`` of an observe run's trajectories (a trajectory is flagged
    at t iff its max signal > t): order statistics of the per-trajectory max signal. ``observe``: an
    :func:`outcome_table` / :func:`~agentuq_nb.intervention.certify.trajectory_signals` frame (its
    ``max_signal``) or the max signals themselves. Returns ``rate`` (asked), ``threshold`` and
    ``flagged_share`` (realized on the observe run: ties and never-signalled runs make it differ)."""
    u = np.asarray(observe["max_signal"] if isinstance(observe, pd.DataFrame) else observe, dtype=float).ravel()
    if u.size == 0:
        raise ValueError("no trajectory to take thresholds from")
    s = np.sort(u[np.isfinite(u)])
    rates = np.asarray(rates, dtype=float).ravel()
    if ((rates < 0) | (rates > 1)).any():
        raise ValueError(f"rates must lie in [0, 1], got {rates.tolist()}")
    if s.size == 0:
        raise ValueError("no trajectory of the observe run has a defined signal: no threshold flags any")
    k = np.minimum(np.rint(rates * u.size).astype(int), s.size)  # trajectories to flag
    thresholds = np.where(k >= s.size, np.nextafter(s[0], -np.inf), s[np.clip(s.size - k - 1, 0, None)])
    flagged = (u[None, :] > thresholds[:, None]).mean(axis=1)
    return pd.DataFrame({"rate": rates, "threshold": thresholds, "flagged_share": flagged})
