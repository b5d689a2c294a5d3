"""``evaluate``: failure prediction from a run's trajectory summary → eval_metrics.json + eval_curves.csv.

With ``scheduler`` the summary is read by ``dask.dataframe`` on the cluster with the role
filter pushed into the Parquet read, so only that role's rows reach the client; the metrics
are the same as without it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from agentuq_nb.evaluation import failure_curves, failure_metrics
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.uq.aggregation import TRAJECTORY_SUMMARY_FILE, read_trajectory_summary

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


def _role_rows_on_cluster(run_dir: Path, role: str, scheduler: Any) -> pd.DataFrame:
    """The trajectory-summary rows of ``role`` (all rows if there are none, for the error message)."""
    import dask
    import dask.dataframe as dd

    from agentuq_nb.distributed import connect

    path = run_dir / f"{TRAJECTORY_SUMMARY_FILE}.parquet"
    if not path.exists():
        read_trajectory_summary(run_dir)  # raises the usual "run aggregate first"
    with connect(scheduler) as client, dask.config.set({"dataframe.convert-string": False}):
        rows = client.compute(dd.read_parquet(path, filters=[("role", "==", role)])).result()
        if rows.empty:
            rows = client.compute(dd.read_parquet(path)).result()
    return rows.reset_index(drop=True)


def evaluate(
    run_dir: str | Path,
    role: str = "assistant",
    uncertainty: str = "avg_token_nll",
    failure_threshold: float = 1.0,
    invert: bool = False,
    scorer: str | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    scheduler: Any = None,
) -> dict:
    run_dir = Path(run_dir)
    summary = read_trajectory_summary(run_dir) if scheduler is None else _role_rows_on_cluster(run_dir, role, scheduler)
    rows = select_estimator(summary, role, uncertainty, scorer)
    kwargs = dict(failure_threshold=failure_threshold, invert=invert)
    result = failure_metrics(rows["uncertainty"].to_numpy(), rows["reward"].to_numpy(dtype=float), n_boot=n_boot, seed=seed, **kwargs)
    result.update(role=role, scorer=rows["scorer"].iloc[0], uncertainty=uncertainty, invert=invert,
                  failure_threshold=failure_threshold, n_boot=n_boot, seed=seed)
    curves = failure_curves(rows["uncertainty"].to_numpy(), rows["reward"].to_numpy(dtype=float), **kwargs)
    atomic_write_json(run_dir / EVAL_METRICS_FILE, result)
    atomic_write_with(run_dir / EVAL_CURVES_FILE, lambda p: curves.to_csv(p, index=False))
    return result
