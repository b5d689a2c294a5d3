"""Glue for notebook 08: turn run directories and τ²-bench results files into the tidy
DataFrames that :mod:`agentuq_nb.evaluation.agent_comparison` and
:mod:`agentuq_nb.evaluation.conformal` take, plus the synthetic checks the notebook shows.

* :func:`per_task_rewards` - one row per simulation of each results file (an "agent").
* :func:`leaderboard_runs` - the files to compare, plus the run's own ``results.json`` when it
  shares tasks (same domain and task id) with them.
* :func:`run_uncertainty` - a run's trajectories with reward and one registered estimator's scores.
* :func:`abstention` - :func:`~agentuq_nb.evaluation.agent_comparison.abstention_report` that
  reports "too few runs" instead of raising on tiny runs.
* :func:`drift_stream` - the run's trajectories ordered by task as a stream, or a seeded
  synthetic drift stream (labelled ``source="synthetic"``) when the run is too small.
* :func:`aci_coverage_table` - realized vs nominal coverage of ACI and of a fixed split
  conformal interval (calibrated once on the warm-up) along a stream.
* :func:`synthetic_split_coverage` - split conformal on synthetic exchangeable data and on
  grouped data with unequal noise, plain vs Mondrian (the method's own check).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.estimators.scores import estimator_rows
from agentuq_nb.evaluation.agent_comparison import abstention_report, aci_stream
from agentuq_nb.evaluation.conformal import coverage_report, split_interval
from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.store.rundir import RunDir

REWARD_COLUMNS = ["agent", "domain", "task_id", "task", "trial", "reward"]


#: the ``source`` of a leaderboard row: the run's own results or another results file
THIS_RUN, OTHER_FILE = "this run", "other file"


def _domain(path: Path) -> str:
    try:
        info = read_header(path).get("info") or {}
    except Exception:  # a header we cannot read still has simulations
        info = {}
    env = info.get("environment_info") or {}
    return str(env.get("domain_name") or "unknown")


def _default_label(path: Path) -> str:
    return path.name if path.is_dir() else path.stem


def per_task_rewards(results_paths, labels=None) -> pd.DataFrame:
    """One row per simulation: agent, domain, task_id, task (``domain/task_id``), trial, reward.

    ``labels`` name the agents (default: file stem, or directory name for a run directory).
    Simulations without a reward are dropped.
    """
    paths = [Path(p) for p in ([results_paths] if isinstance(results_paths, (str, Path)) else results_paths)]
    labels = list(labels) if labels else [_default_label(p) for p in paths]
    if len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} results files")
    rows = []
    for path, label in zip(paths, labels):
        domain = _domain(path)
        for sim in iter_simulations(path):
            reward = sim.reward
            if reward is None:
                continue
            rows.append({"agent": str(label), "domain": domain, "task_id": str(sim.task_id),
                         "task": f"{domain}/{sim.task_id}", "trial": int(sim.trial or 0),
                         "reward": float(reward)})
    return pd.DataFrame(rows, columns=REWARD_COLUMNS)


def leaderboard_runs(leaderboard_results, run_dir=None, labels=None,
                     run_label: str | None = None) -> tuple[pd.DataFrame, str]:
    """Rewards of the agents to compare (``source``: "this run" or "other file") and a sentence saying which were
    included.

    The files in ``leaderboard_results`` are always included (missing files are skipped and
    named in the note); the run's ``results.json`` joins when it shares at least one task
    (domain and task id) with them, or alone when no file is given.
    """
    given = [Path(p) for p in (leaderboard_results or [])]
    present = [p for p in given if p.exists()]
    missing = [str(p) for p in given if not p.exists()]
    if labels:
        labels = [lab for p, lab in zip(given, labels) if p.exists()]
    df = per_task_rewards(present, labels or None) if present else pd.DataFrame(columns=REWARD_COLUMNS)
    df["source"] = OTHER_FILE
    notes = []
    if missing:
        notes.append(f"skipped missing file(s): {', '.join(missing)}")
    own = RunDir.of(run_dir).results_json if run_dir is not None else None
    if own is not None and own.exists():
        label = run_label or f"this run ({Path(run_dir).name})"
        mine = per_task_rewards([own], [label]).assign(source=THIS_RUN)
        shared = set(mine["task"]) & set(df["task"])
        if df.empty or shared:
            df = pd.concat([df, mine], ignore_index=True)
            notes.append(f"included the run's own results as '{label}' ({len(shared)} shared tasks)")
        else:
            domains = sorted(set(mine["domain"]))
            notes.append(f"the run's own results ({', '.join(domains)}) share no task with the files: "
                         "not on the leaderboard")
    notes.insert(0, f"{df['agent'].nunique()} agent(s), {len(df)} runs")
    return df, "; ".join(notes)


def leaderboard_subject(rewards: pd.DataFrame) -> dict:
    """What the leaderboard figures are about, for their file names and titles: ``prefix`` ("" when the run's own
    results are on the board, ``other_runs_`` when only other files are), ``about`` (a phrase for the title) and
    ``trials`` ("1 trial per task", "5 trials per task", "1–5 trials per task")."""
    own = bool((rewards.get("source", pd.Series(dtype=object)) == THIS_RUN).any())
    others = sorted(set(rewards.loc[rewards.get("source", pd.Series(OTHER_FILE, index=rewards.index)) == OTHER_FILE,
                                    "agent"]))
    if own and others:
        about = f"this run vs {len(others)} other results file{'s' if len(others) != 1 else ''}"
    elif own:
        about = "this run"
    else:
        about = f"{len(others)} other results file{'s' if len(others) != 1 else ''}, not this run"
    per_task = rewards.groupby(["agent", "task"]).size() if len(rewards) else pd.Series([0])
    lo, hi = int(per_task.min()), int(per_task.max())
    trials = f"{lo} trial{'s' if lo != 1 else ''} per task" if lo == hi else f"{lo}–{hi} trials per task"
    return {"prefix": "" if own else "other_runs_", "about": about, "trials": trials}


def run_uncertainty(run_dir, estimator: str = "assistant.avg_token_nll") -> pd.DataFrame:
    """A run's trajectories: task_id, trial, reward, uncertainty (one registered estimator's scores, as
    it gives them; ``get(estimator).invert`` says whether it is a confidence)."""
    rows = estimator_rows(run_dir, estimator)
    out = rows[["task_id", "trial", "reward", "uncertainty"]].copy()
    out["task_id"] = out["task_id"].astype(str)
    out["reward"] = out["reward"].astype(float)
    return out.reset_index(drop=True)


def abstention(runs: pd.DataFrame, alpha: float = 0.1, delta: float = 0.1, **kwargs) -> dict:
    """:func:`abstention_report`, or ``{"feasible": False, "threshold": None, "reason": ...}``
    when there are fewer than 4 usable runs (the report needs a calibration and a held-out half).
    """
    usable = runs.dropna(subset=["uncertainty", "reward"])
    usable = usable[np.isfinite(usable["uncertainty"].to_numpy(dtype=float))]
    if len(usable) < 4:
        return {"threshold": None, "feasible": False, "alpha": float(alpha), "delta": float(delta),
                "reason": f"only {len(usable)} run(s) with uncertainty and reward; need >= 4",
                "heldout": None, "candidates": pd.DataFrame(), "heldout_curves": pd.DataFrame()}
    report = abstention_report(usable, alpha=alpha, delta=delta, **kwargs)
    if not report["feasible"]:
        m = report["calibration"]["min_accepted"]
        report["reason"] = (f"no threshold certifiable: with {report['calibration']['n']} calibration runs, "
                            f"risk <= {alpha:g} at 1-delta = {1 - delta:g} needs >= {m} accepted runs; "
                            "abstain on everything")
    return report


def abstention_summary(report: dict) -> pd.Series:
    """The headline numbers of :func:`abstention` as one Series for display."""
    held = report.get("heldout") or {}
    cal = report.get("calibration") or {}
    return pd.Series({"alpha": report["alpha"], "delta": report["delta"],
                      "feasible": report["feasible"], "threshold": report["threshold"],
                      "calibration n": cal.get("n"), "calibration coverage": cal.get("coverage"),
                      "held-out n": held.get("n"), "held-out coverage (kept)": held.get("coverage"),
                      "held-out failure rate among kept": held.get("realized_failure_rate"),
                      "held-out failure rate, no abstention": held.get("baseline_failure_rate"),
                      "note": report.get("reason", "")}, dtype=object)


def _task_order_key(task_id) -> tuple:
    s = str(task_id)
    return (0, int(s), "") if s.lstrip("-").isdigit() else (1, 0, s)


def drift_stream(runs: pd.DataFrame, value_col: str = "uncertainty", min_runs: int = 40,
                 n_synthetic: int = 400, seed: int = 0) -> pd.DataFrame:
    """A stream for ACI: columns t, task_id, value, source.

    With at least ``min_runs`` finite values, the run's trajectories ordered by task id (then
    trial) - task order is where difficulty drifts in a benchmark.  Otherwise a seeded
    synthetic stream (``source="synthetic"``) of ``n_synthetic`` runs whose difficulty drifts:
    a slow upward trend, a level shift at 60% of the stream and noise that doubles after it.
    """
    df = runs[np.isfinite(runs[value_col].to_numpy(dtype=float))] if value_col in runs else runs.iloc[:0]
    if len(df) >= min_runs:
        key = df["task_id"].map(_task_order_key)
        df = df.assign(_k=key).sort_values(["_k", "trial"], kind="stable")
        return pd.DataFrame({"t": np.arange(len(df)), "task_id": df["task_id"].astype(str).to_numpy(),
                             "value": df[value_col].to_numpy(dtype=float), "source": "run"})
    rng = np.random.default_rng(seed)
    t = np.arange(n_synthetic)
    shift = t >= int(0.6 * n_synthetic)
    level = 1.0 + 0.5 * t / n_synthetic + 1.0 * shift
    value = level + rng.normal(0.0, 0.25, n_synthetic) * np.where(shift, 2.0, 1.0)
    return pd.DataFrame({"t": t, "task_id": [f"synthetic-{i}" for i in t], "value": value,
                         "source": "synthetic"})


def aci_coverage_table(stream: pd.DataFrame, alphas=(0.05, 0.1, 0.2, 0.3), gamma: float = 0.01,
                       warmup: int = 30, window: int | None = None) -> pd.DataFrame:
    """Realized coverage vs nominal on a stream, ACI vs a fixed split interval.

    Both use the running mean of past values as point prediction; "fixed split" is calibrated
    once on the warm-up residuals and never adapts.  Columns: method, alpha, nominal, n,
    coverage, coverage_lo, coverage_hi, mean_width.
    """
    rows = []
    for a in alphas:
        s = aci_stream(stream, alpha=a, gamma=gamma, warmup=warmup, value_col="value", window=window)
        rep = coverage_report(s["lo"], s["hi"], s["true"], alpha=a).iloc[0]
        rows.append({"method": f"ACI (gamma {gamma:g})", "alpha": a, **rep.drop("group").to_dict()})
        pred, true = s["pred"].to_numpy(), s["true"].to_numpy()
        lo, hi = split_interval(pred[:warmup], true[:warmup], pred[warmup:], a)
        rep = coverage_report(lo, hi, true[warmup:], alpha=a).iloc[0]
        rows.append({"method": "fixed split (warm-up calibration)", "alpha": a, **rep.drop("group").to_dict()})
    cols = ["method", "alpha", "nominal", "n", "coverage", "coverage_lo", "coverage_hi", "mean_width"]
    return pd.DataFrame(rows)[cols]


def synthetic_split_coverage(alphas=(0.05, 0.1, 0.2, 0.3), n_cal: int = 200, n_test: int = 200,
                             n_reps: int = 200, seed: int = 0) -> pd.DataFrame:
    """Split conformal coverage on synthetic data, pooled over ``n_reps`` random splits.

    Exchangeable data: y = x + N(0, 1), prediction x ("split, exchangeable").  Grouped data: two
    equally likely groups with noise sd 0.5 ("low noise") and 2.0 ("high noise"); plain split
    conformal calibrates one quantile for both (under-covers the noisy group), Mondrian one per
    group.  Columns: method, group, alpha, nominal, n, coverage, coverage_lo, coverage_hi,
    mean_width.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for a in alphas:
        acc = {k: ([], [], [], []) for k in ("exch", "plain", "mondrian")}
        for _ in range(n_reps):
            n = n_cal + n_test
            x = rng.normal(0.0, 1.0, n)
            y = x + rng.normal(0.0, 1.0, n)
            lo, hi = split_interval(x[:n_cal], y[:n_cal], x[n_cal:], a)
            for lst, v in zip(acc["exch"], (lo, hi, y[n_cal:], np.full(n_test, "all"))):
                lst.append(v)
            g = np.where(rng.random(n) < 0.5, "low noise", "high noise")
            y = x + rng.normal(0.0, 1.0, n) * np.where(g == "low noise", 0.5, 2.0)
            for key, groups in (("plain", None), ("mondrian", g[:n_cal])):
                lo, hi = split_interval(x[:n_cal], y[:n_cal], x[n_cal:], a, groups=groups,
                                        test_groups=None if groups is None else g[n_cal:])
                for lst, v in zip(acc[key], (lo, hi, y[n_cal:], g[n_cal:])):
                    lst.append(v)
        for key, method in (("exch", "split, exchangeable"), ("plain", "split (plain), grouped"),
                            ("mondrian", "Mondrian, grouped")):
            lo, hi, true, groups = (np.concatenate(v) for v in acc[key])
            rep = coverage_report(lo, hi, true, alpha=a, groups=None if key == "exch" else groups)
            if key != "exch":
                rep = rep[rep["group"] != "all"]
            for _, r in rep.iterrows():
                rows.append({"method": method, "alpha": a, **r.to_dict()})
    cols = ["method", "group", "alpha", "nominal", "n", "coverage", "coverage_lo", "coverage_hi", "mean_width"]
    return pd.DataFrame(rows)[cols]
