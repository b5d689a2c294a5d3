"""The estimator table: every registered estimator a run holds data for, on equal footing.

Per estimator (:mod:`agentuq_nb.estimators`, oriented by its own ``higher_is_uncertain``): AUROC,
AUARC, AURC, PRR and Spearman with percentile bootstrap 95% CIs (:func:`failure_metrics`), and a
paired bootstrap p-value of the AUROC difference against the reference ``assistant.avg_token_nll``
(scorer ``self``; else the first assistant ``avg_token_nll`` of any scorer). Written to
``RUN_DIR/estimator_table.csv`` by :func:`compare_estimators` (``agentuq-nb compare-estimators``).

Every trajectory of the run is a row (its reward from ``trajectories.parquet``); an estimator without
a score for a trajectory leaves it out of its own metrics (counted in ``n``).
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from agentuq_nb.estimators import Estimator, get
from agentuq_nb.estimators import estimators as run_estimators
from agentuq_nb.evaluation.bootstrap import paired_bootstrap_pvalue
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.io.rundir import RunDir
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

REPORTED_METRICS = ("auroc", "auarc", "aurc", "prr", "spearman")
REFERENCE = "assistant.avg_token_nll"


def score_table(run_dir: str | os.PathLike | RunDir, names: list[str] | None = None) -> tuple[pd.DataFrame, list[Estimator]]:
    """One row per trajectory (keys + ``reward``) and one column per estimator (all the run holds, or
    ``names``); and the estimators, in table order."""
    run = RunDir.of(run_dir)
    chosen = run_estimators(run) if names is None else [get(name) for name in names]
    table = run.rewards().reset_index(drop=True)
    for estimator in chosen:
        scores = estimator.scores(run).rename(estimator.name).reset_index()
        table = table.merge(scores.drop_duplicates(TRAJECTORY_KEYS), on=TRAJECTORY_KEYS, how="left")
    return table, chosen


def _reference(estimators: list[Estimator], reference: str) -> Estimator | None:
    ref = next((e for e in estimators if e.name == reference), None)
    if ref is None:  # no self-scored assistant: first assistant avg_token_nll of any scorer
        ref = next((e for e in estimators if e.role == "assistant" and e.statistic == "avg_token_nll"), None)
    return ref


def evaluate_estimators(table: pd.DataFrame, estimators: list[Estimator], failure_threshold: float = 1.0,
                        n_boot: int = 1000, seed=0, reference: str = REFERENCE) -> pd.DataFrame:
    """The estimator table from a score table (see the module docstring for the columns)."""
    reward = table["reward"].to_numpy(dtype=float)
    ref = _reference(estimators, reference)
    rows = []
    for est in estimators:
        u = table[est.name].to_numpy(dtype=float)
        rep = failure_metrics(u, reward, failure_threshold=failure_threshold, invert=est.invert,
                              n_boot=n_boot, seed=seed)
        row = {"estimator": est.name, "family": est.family, "scorer": est.scorer, "role": est.role,
               "statistic": est.statistic, "invert": est.invert, "orientation": est.orientation,
               "n": rep["n"], "n_failures": rep["n_failures"]}
        for m in REPORTED_METRICS:
            ci = rep["ci"].get(m)
            row[m] = rep["metrics"].get(m)
            row[f"{m}_lo"], row[f"{m}_hi"] = (ci[0], ci[1]) if ci else (None, None)
        row["reference"] = ref.name if ref is not None else None
        row["auroc_diff_vs_reference"] = None
        row["p_value_vs_reference"] = None
        if ref is not None and est.name != ref.name:
            p = paired_bootstrap_pvalue(u, table[ref.name].to_numpy(dtype=float), reward, metric="auroc",
                                        failure_threshold=failure_threshold, invert_a=est.invert,
                                        invert_b=ref.invert, n_boot=n_boot, seed=seed)
            row["auroc_diff_vs_reference"], row["p_value_vs_reference"] = p["diff"], p["p_value"]
        row["undefined"] = "; ".join(f"{k}: {v}" for k, v in rep["undefined"].items()) or None
        rows.append(row)
    out = pd.DataFrame(rows)
    for m in REPORTED_METRICS:
        for c in (m, f"{m}_lo", f"{m}_hi"):
            out[c] = out[c].astype(float)
    for c in ("auroc_diff_vs_reference", "p_value_vs_reference"):
        out[c] = out[c].astype(float)
    return out


def compare_estimators(run_dir: str | os.PathLike | RunDir, failure_threshold: float = 1.0, n_boot: int = 1000,
                       seed=0, names: list[str] | None = None) -> pd.DataFrame:
    """Evaluate every estimator available in the run (or ``names``); publish ``RUN_DIR/estimator_table.csv``."""
    run = RunDir.of(run_dir)
    run.require_folder("compare-estimators")
    with run.lock("compare-estimators"):  # from the first read to the commit: based_on is what was read
        table, estimators = score_table(run, names)
        out = evaluate_estimators(table, estimators, failure_threshold, n_boot, seed)
        inputs = [name for name in ("trajectory_summary", "trajectories", "saup_scores", "early_warning_scores",
                                    "verbalized_confidence", "action_turns") if run.has(name)]
        with run.commit("compare-estimators") as commit:
            commit.write_with("estimator_table", lambda p: out.to_csv(p, index=False), run.based_on(*inputs))
    return out


def read_estimator_table(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    run = RunDir.of(run_dir)
    path = run.require("estimator_table")
    run.verify("estimator_table")
    return pd.read_csv(Path(path))
