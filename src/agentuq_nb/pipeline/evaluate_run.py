"""``evaluate``: failure prediction from a run's trajectory summary → eval_metrics.json + eval_curves.csv."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from agentuq_nb.evaluation import failure_curves, failure_metrics
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.uq.aggregation import read_trajectory_summary

EVAL_METRICS_FILE = "eval_metrics.json"
EVAL_CURVES_FILE = "eval_curves.csv"


def default_scorer(summary: pd.DataFrame, role: str) -> str:
    """The generating model's own rows (``self``) when present, else the only scorer there is."""
    scorers = sorted(summary.loc[summary["role"] == role, "scorer"].dropna().unique())
    if "self" in scorers:
        return "self"
    if len(scorers) == 1:
        return scorers[0]
    if not scorers:
        raise ValueError(f"no trajectory has role '{role}'; roles present: {sorted(summary['role'].unique())}")
    raise ValueError(f"role '{role}' is scored by several scorers {scorers}; choose one with --scorer")


def select_estimator(summary: pd.DataFrame, role: str, uncertainty: str, scorer: str | None = None) -> pd.DataFrame:
    """One row per trajectory: its reward and the chosen uncertainty of the chosen role/scorer."""
    scorer = scorer or default_scorer(summary, role)
    if uncertainty not in summary.columns:
        numeric = [c for c in summary.columns if pd.api.types.is_numeric_dtype(summary[c])]
        raise ValueError(f"unknown uncertainty column '{uncertainty}'; available: {numeric}")
    rows = summary[(summary["role"] == role) & (summary["scorer"] == scorer)]
    if rows.empty:
        raise ValueError(f"no rows for role '{role}' and scorer '{scorer}'")
    return rows.assign(uncertainty=rows[uncertainty].astype(float), scorer=scorer)


def evaluate(
    run_dir: str | Path,
    role: str = "assistant",
    uncertainty: str = "avg_token_nll",
    failure_threshold: float = 1.0,
    invert: bool = False,
    scorer: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict:
    run_dir = Path(run_dir)
    rows = select_estimator(read_trajectory_summary(run_dir), role, uncertainty, scorer)
    kwargs = dict(failure_threshold=failure_threshold, invert=invert)
    result = failure_metrics(rows["uncertainty"].to_numpy(), rows["reward"].to_numpy(dtype=float), n_boot=n_boot, seed=seed, **kwargs)
    result.update(role=role, scorer=rows["scorer"].iloc[0], uncertainty=uncertainty, invert=invert,
                  failure_threshold=failure_threshold, n_boot=n_boot, seed=seed)
    curves = failure_curves(rows["uncertainty"].to_numpy(), rows["reward"].to_numpy(dtype=float), **kwargs)
    atomic_write_json(run_dir / EVAL_METRICS_FILE, result)
    atomic_write_with(run_dir / EVAL_CURVES_FILE, lambda p: curves.to_csv(p, index=False))
    return result
