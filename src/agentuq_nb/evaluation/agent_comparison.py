"""Distribution-free evaluation applied to agents, over tidy DataFrames.

Input is one row per run: ``agent`` (configuration: model, prompt, run), ``task_id``, ``trial``,
``reward`` and, where needed, ``uncertainty`` (higher = more likely failure).  Column names are
parameters.  Functions:

* :func:`leaderboard` - mean reward per agent with bootstrap CIs, all pairwise differences with
  permutation p-values (paired by task when tasks are shared), Benjamini-Hochberg at q, and
  ``indistinguishable`` pairs marked.  scipy ``bootstrap`` / ``permutation_test`` do the
  resampling, statsmodels the BH step.
* :func:`success_rate_intervals` - per-agent success rate over trials with statsmodels
  ``proportion_confint`` (Wilson by default, ``"beta"`` = Clopper-Pearson).
* :func:`abstention_report` - split runs into calibration / held-out (sklearn
  ``GroupShuffleSplit`` by task, so trials of one task never straddle the split), choose the
  uncertainty threshold with :func:`~agentuq_nb.evaluation.conformal.risk_control_threshold`,
  report coverage (fraction kept) and realized failure rate on the held-out runs.
* :func:`aci_stream` - adaptive conformal intervals along a stream of runs whose difficulty
  drifts.
"""
from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.bootstrap import mean_ci, mean_difference, mean_difference_ci
from agentuq_nb.evaluation.conformal import aci, bh, bh_adjusted, risk_control_threshold
from agentuq_nb.evaluation.metrics import risk_coverage_batch
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD


class Leaderboard(NamedTuple):
    """``agents``: one row per agent; ``pairs``: one row per unordered pair of agents."""
    agents: pd.DataFrame
    pairs: pd.DataFrame


def _require(df: pd.DataFrame, cols) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s) {missing}; have {list(df.columns)}")


def leaderboard(per_task_rewards: pd.DataFrame, q: float = 0.1, n_boot: int = 2000,
                n_perm: int = 9999, ci: float = 0.95, seed=0, min_shared: int = 2,
                agent_col: str = "agent", task_col: str = "task_id",
                reward_col: str = "reward") -> Leaderboard:
    """Leaderboard of agent configurations with FDR-controlled pairwise comparisons.

    Rewards are first averaged over trials within (agent, task); tasks are the resampling unit.

    ``agents`` columns: agent, n_tasks, n_runs, mean_reward (mean over tasks), ci_lo, ci_hi
    (percentile bootstrap over tasks, ``scipy.stats.bootstrap``), rank (1 = best, ties share the
    best rank), indistinguishable_from (agents whose difference is not significant).

    ``pairs`` columns (agent_a is the one with the higher mean reward): agent_a, agent_b,
    n_shared, paired, diff (a - b), ci_lo, ci_hi, p_value, p_adjusted, significant,
    indistinguishable.  With at least ``min_shared`` shared tasks the comparison is *paired*:
    ``diff`` is the mean over shared tasks of r_a - r_b, its CI a paired bootstrap, and the
    p-value a sign-flip permutation test (``scipy.stats.permutation_test(permutation_type=
    "samples")``; exact when 2^n_shared <= n_perm).  Otherwise it is unpaired: difference of
    the agents' mean rewards, independent bootstrap, label-permutation test.  Benjamini-Hochberg
    at ``q`` over all pairs (statsmodels) decides ``significant``; ``indistinguishable`` is its
    negation.
    """
    from scipy import stats

    _require(per_task_rewards, [agent_col, task_col, reward_col])
    df = per_task_rewards[[agent_col, task_col, reward_col]].dropna()
    n_runs = df.groupby(agent_col, sort=False).size()
    per_task = df.groupby([agent_col, task_col], sort=False)[reward_col].mean()
    rng = np.random.default_rng(seed)
    agents = list(pd.unique(df[agent_col]))
    task_rewards = {a: per_task.loc[a] for a in agents}   # Series indexed by task

    rows = []
    for a in agents:
        x = task_rewards[a].to_numpy(dtype=float)
        lo, hi = mean_ci(x, n_boot, ci, rng)
        rows.append({"agent": a, "n_tasks": int(x.size), "n_runs": int(n_runs[a]),
                     "mean_reward": float(x.mean()), "ci_lo": lo, "ci_hi": hi})
    table = pd.DataFrame(rows)
    table["rank"] = table["mean_reward"].rank(ascending=False, method="min").astype(int)
    table = table.sort_values(["rank", "agent"], kind="stable").reset_index(drop=True)

    pair_rows = []
    order = list(table["agent"])
    for a, b in itertools.combinations(order, 2):
        ra, rb = task_rewards[a], task_rewards[b]
        shared = ra.index.intersection(rb.index)
        row = {"agent_a": a, "agent_b": b, "n_shared": int(len(shared))}
        if len(shared) >= min_shared:
            x = ra.loc[shared].to_numpy(dtype=float)
            y = rb.loc[shared].to_numpy(dtype=float)
            d = x - y
            row["paired"] = True
            row["diff"] = float(d.mean())
            row["ci_lo"], row["ci_hi"] = mean_ci(d, n_boot, ci, rng)
            if np.all(d == 0):
                row["p_value"] = 1.0
            else:
                row["p_value"] = float(stats.permutation_test(
                    (x, y), mean_difference, permutation_type="samples", vectorized=True,
                    n_resamples=n_perm, rng=rng).pvalue)
        else:
            x = ra.to_numpy(dtype=float)
            y = rb.to_numpy(dtype=float)
            row["paired"] = False
            row["diff"] = float(x.mean() - y.mean())
            if x.size >= 2 and y.size >= 2:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", stats.DegenerateDataWarning)
                    row["ci_lo"], row["ci_hi"] = mean_difference_ci(x, y, n_boot, ci, rng)
                row["p_value"] = (1.0 if np.ptp(np.r_[x, y]) == 0 else float(stats.permutation_test(
                    (x, y), mean_difference, permutation_type="independent", vectorized=True,
                    n_resamples=n_perm, rng=rng).pvalue))
            else:
                row["ci_lo"] = row["ci_hi"] = row["p_value"] = np.nan
        pair_rows.append(row)
    cols = ["agent_a", "agent_b", "n_shared", "paired", "diff", "ci_lo", "ci_hi", "p_value",
            "p_adjusted", "significant", "indistinguishable"]
    pairs = pd.DataFrame(pair_rows, columns=cols[:8])
    pairs["p_adjusted"] = bh_adjusted(pairs["p_value"].to_numpy(dtype=float)) if len(pairs) else []
    pairs["significant"] = bh(pairs["p_value"].to_numpy(dtype=float), q) if len(pairs) else []
    pairs["indistinguishable"] = ~pairs["significant"].astype(bool)
    same = pairs[pairs["indistinguishable"]]
    table["indistinguishable_from"] = [
        ", ".join(map(str, list(same.loc[same["agent_a"] == a, "agent_b"])
                      + list(same.loc[same["agent_b"] == a, "agent_a"])))
        for a in table["agent"]]
    return Leaderboard(table, pairs[cols])


def success_rate_intervals(runs: pd.DataFrame, by="agent", failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                           method: str = "wilson", alpha: float = 0.05,
                           reward_col: str = "reward") -> pd.DataFrame:
    """Success rate (reward >= ``failure_threshold``) over trials with a binomial CI.

    One row per ``by`` group (a column name or list, e.g. ``["agent", "task_id"]``): n_runs,
    n_success, success_rate, ci_lo, ci_hi from ``statsmodels.stats.proportion.proportion_confint``
    (``method="wilson"``; ``"beta"`` is Clopper-Pearson) at level ``1 - alpha``.
    """
    by = [by] if isinstance(by, str) else list(by)
    _require(runs, by + [reward_col])
    df = runs[by + [reward_col]].dropna(subset=[reward_col])
    success = (df[reward_col].to_numpy(dtype=float) >= failure_threshold)
    g = df.assign(_s=success).groupby(by, sort=False)["_s"]
    out = pd.DataFrame({"n_runs": g.size(), "n_success": g.sum().astype(int)}).reset_index()
    out["success_rate"] = out["n_success"] / out["n_runs"]
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(out["n_success"].to_numpy(), out["n_runs"].to_numpy(),
                                alpha=alpha, method=method)
    out["ci_lo"], out["ci_hi"] = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    out["method"] = method
    return out


def abstention_report(runs: pd.DataFrame, alpha: float = 0.1, delta: float = 0.1,
                      cal_fraction: float = 0.5, seed=0, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                      invert: bool = False, min_coverage: float = 0.1,
                      uncertainty_col: str = "uncertainty", reward_col: str = "reward",
                      group_col: str | None = "task_id") -> dict:
    """Risk-controlled abstention: calibrate a threshold, then check it on held-out runs.

    Higher uncertainty = more likely failure (``invert=True`` negates confidence scores); a run
    is kept (answered automatically) when its uncertainty is <= the threshold, otherwise the
    agent abstains / hands over.  Runs are split into calibration (``cal_fraction``) and
    held-out by ``group_col`` (sklearn ``GroupShuffleSplit``; all trials of a task on the same
    side), or by row when ``group_col`` is None or absent.  The threshold is the Learn-then-Test
    choice of :func:`risk_control_threshold` at (alpha, delta).

    Returns a dict: ``threshold``, ``feasible``, ``alpha``, ``delta``, ``calibration`` (the
    risk-control result without its candidate table), ``candidates`` (DataFrame),
    ``heldout`` = {n, n_kept, coverage, realized_failure_rate (None if nothing kept),
    failure_rate_ci (Wilson 95%), baseline_failure_rate}, ``heldout_curves`` (held-out
    risk-coverage curve, DataFrame with curve, x, y) and ``cal_index`` / ``heldout_index``
    (row labels of ``runs``).
    """
    _require(runs, [uncertainty_col, reward_col])
    df = runs.dropna(subset=[uncertainty_col, reward_col])
    df = df[np.isfinite(df[uncertainty_col].to_numpy(dtype=float))]
    if len(df) < 4:
        raise ValueError(f"abstention_report needs at least 4 runs with uncertainty and reward, got {len(df)}")
    from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit
    from statsmodels.stats.proportion import proportion_confint

    if group_col is not None and group_col in df.columns:
        splitter = GroupShuffleSplit(n_splits=1, train_size=cal_fraction, random_state=seed)
        cal_pos, test_pos = next(splitter.split(df, groups=df[group_col].astype(str)))
    else:
        splitter = ShuffleSplit(n_splits=1, train_size=cal_fraction, random_state=seed)
        cal_pos, test_pos = next(splitter.split(df))
    u = df[uncertainty_col].to_numpy(dtype=float) * (-1.0 if invert else 1.0)
    fail = df[reward_col].to_numpy(dtype=float) < failure_threshold
    rc = risk_control_threshold(u[cal_pos], fail[cal_pos], alpha, delta, min_coverage)
    candidates = rc.pop("candidates")
    u_t, f_t = u[test_pos], fail[test_pos]
    kept = np.zeros(u_t.size, dtype=bool) if rc["threshold"] is None else u_t <= rc["threshold"]
    n_kept = int(kept.sum())
    n_fail_kept = int(f_t[kept].sum())
    ci = proportion_confint(n_fail_kept, n_kept, alpha=0.05, method="wilson") if n_kept else (None, None)
    heldout = {"n": int(u_t.size), "n_kept": n_kept,
               "coverage": float(n_kept / u_t.size) if u_t.size else 0.0,
               "realized_failure_rate": float(n_fail_kept / n_kept) if n_kept else None,
               "failure_rate_ci": [float(ci[0]), float(ci[1])] if n_kept else None,
               "baseline_failure_rate": float(f_t.mean()) if u_t.size else None}
    curve = pd.DataFrame({"curve": "risk_coverage",
                          "x": np.arange(1, u_t.size + 1) / max(u_t.size, 1),
                          "y": risk_coverage_batch(u_t[None], f_t[None])[0] if u_t.size else []})
    return {"threshold": rc["threshold"], "feasible": rc["feasible"], "alpha": float(alpha),
            "delta": float(delta), "calibration": rc, "candidates": candidates,
            "heldout": heldout,
            "heldout_curves": curve,
            "cal_index": list(df.index[cal_pos]), "heldout_index": list(df.index[test_pos])}


def aci_stream(runs: pd.DataFrame, alpha: float = 0.1, gamma: float = 0.01, warmup: int = 30,
               value_col: str = "reward", pred_col: str | None = None,
               order_col: str | None = None, window: int | None = None) -> pd.DataFrame:
    """Adaptive conformal intervals (:func:`~agentuq_nb.evaluation.conformal.aci`) along a stream.

    Runs are taken in ``order_col`` order (or row order).  The point prediction is ``pred_col``
    when given, else the running mean of all *previous* values (the first run, which has no
    past, predicts itself and only feeds the warm-up).  Returns one row per run: t, pred, true,
    lo, hi, alpha_t, covered (NaN during warm-up), cum_miscoverage (running mean of misses
    since warm-up) and width.
    """
    _require(runs, [value_col] + ([pred_col] if pred_col else []) + ([order_col] if order_col else []))
    df = runs.sort_values(order_col, kind="stable") if order_col else runs
    true = df[value_col].to_numpy(dtype=float)
    if pred_col:
        pred = df[pred_col].to_numpy(dtype=float)
    else:
        csum = np.cumsum(true)
        pred = np.empty_like(true)
        if true.size:
            pred[0] = true[0]
            pred[1:] = csum[:-1] / np.arange(1, true.size)
    lo, hi, alpha_t = aci(pred, true, alpha, gamma, warmup, window)
    evaluated = ~np.isnan(lo)
    covered = np.where(evaluated, (lo <= true) & (true <= hi), np.nan)
    miss = np.where(evaluated, 1.0 - covered, 0.0)
    count = np.cumsum(evaluated)
    with np.errstate(invalid="ignore", divide="ignore"):
        cum_mis = np.where(count > 0, np.cumsum(miss) / count, np.nan)
    out = pd.DataFrame({"t": np.arange(true.size), "pred": pred, "true": true, "lo": lo,
                        "hi": hi, "alpha_t": alpha_t, "covered": covered,
                        "cum_miscoverage": cum_mis, "width": hi - lo}, index=df.index)
    return out
