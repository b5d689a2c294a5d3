"""Trajectory-level uncertainty estimators compared on equal footing (issue 6, point 5).

LM-Polygraph style: the heavy statistics are computed once elsewhere (``aggregate`` writes the
trajectory summary; :mod:`agentuq_nb.uq.saup` and :mod:`agentuq_nb.uq.dynamics` write their score
files) and each *estimator* here is a small named definition that reads one column of one
score table.  Contract: **higher = more uncertain = more likely failure**.  Estimators whose
raw score means *confidence* (``min_chosen_prob``, ``verbalized_confidence``) carry
``invert=True``; the metrics negate them, so every row of the table is oriented the same way.

Estimators found in a run:

* token-level, always, one per (scorer, role) present in ``trajectory_summary`` (including
  observation_* and ``total`` roles): ``avg_token_nll``, ``trajectory_nll``,
  ``mean_topk_entropy``, ``mean_normalized_entropy``, ``mean_full_entropy`` (only where the backend
  gave full logits), ``min_chosen_prob`` (inverted: a low minimum token probability = uncertain),
  ``max_token_nll``.  Named ``{role}.{statistic}`` for scorer ``self``, else
  ``{role}.{statistic}@{scorer}``;
* SAUP variants (``saup_scores.parquet``, written by :func:`agentuq_nb.uq.saup.saup`);
* early warning at turn fractions (``early_warning_scores.parquet``, written by
  :func:`agentuq_nb.uq.dynamics.early_warning`);
* ``verbalized_confidence`` (inverted) from ``verbalized_confidence.csv`` (written by
  :func:`agentuq_nb.uq.verbalized.verbalized_confidence`), else ``verbalized_confidence.parquet``, else a
  column of that name in ``trajectories.parquet`` or the trajectory summary;
* trivial baselines, always: ``num_messages``, ``num_tool_calls``, ``agent_chars``.

The table (``RUN_DIR/estimator_table.csv``) has, per estimator, AUROC, AUARC, AURC, PRR and
Spearman with percentile bootstrap 95% CIs (``failure_metrics``) and a paired bootstrap p-value of
the AUROC difference against the reference ``assistant.avg_token_nll`` (scorer ``self``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.evaluation import failure_metrics, paired_bootstrap_pvalue
from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.aggregation import key_dtypes, read_trajectory_summary
from agentuq_nb.uq.dynamics import EARLY_WARNING_SCORES_FILE
from agentuq_nb.uq.extract import TRAJECTORIES_FILE
from agentuq_nb.uq.saup import SAUP_SCORES_FILE

ESTIMATOR_TABLE_FILE = "estimator_table.csv"
VERBALIZED_CSV = "verbalized_confidence.csv"
VERBALIZED_FILE = "verbalized_confidence.parquet"

#: token-level statistics of the trajectory summary → invert? (True = confidence score)
TOKEN_STATISTICS: dict[str, bool] = {
    "avg_token_nll": False,
    "trajectory_nll": False,
    "mean_topk_entropy": False,
    "mean_normalized_entropy": False,
    "mean_full_entropy": False,
    "min_chosen_prob": True,
    "max_token_nll": False,
}
BASELINES = ("num_messages", "num_tool_calls", "agent_chars")
REPORTED_METRICS = ("auroc", "auarc", "aurc", "prr", "spearman")
REFERENCE = "assistant.avg_token_nll"


@dataclass(frozen=True)
class Estimator:
    """One named estimator: which column of the score table, oriented how."""

    name: str
    column: str
    family: str  # token | baseline | saup | early_warning | verbalized
    invert: bool = False
    scorer: str | None = None
    role: str | None = None
    statistic: str | None = None

    @property
    def orientation(self) -> str:
        return "inverted: lower = more uncertain" if self.invert else "higher = more uncertain"




def token_estimator_name(role: str, statistic: str, scorer: str = "self") -> str:
    return f"{role}.{statistic}" if scorer == "self" else f"{role}.{statistic}@{scorer}"


def score_table(run_dir: str | Path) -> tuple[pd.DataFrame, list[Estimator]]:
    """One row per trajectory (keys + ``reward``) and one column per estimator; and the estimators."""
    run_dir = Path(run_dir)
    summary = key_dtypes(read_trajectory_summary(run_dir))
    traj_path = run_dir / TRAJECTORIES_FILE
    if traj_path.exists():
        base = key_dtypes(pd.read_parquet(traj_path))
    else:  # older runs: the summary carries reward and the baselines
        base = summary.drop_duplicates(TRAJECTORY_KEYS)
    cols = TRAJECTORY_KEYS + ["reward"] + [c for c in BASELINES if c in base]
    table = base[cols].drop_duplicates(TRAJECTORY_KEYS).reset_index(drop=True)
    estimators: list[Estimator] = []

    # token-level: pivot (scorer, role, statistic) → one column each
    wide = {}
    scorers = sorted(summary["scorer"].astype(str).unique(), key=lambda s: (s != "self", s))
    for scorer in scorers:
        for role in sorted(summary.loc[summary["scorer"] == scorer, "role"].astype(str).unique(),
                           key=_role_order):
            rows = summary[(summary["scorer"] == scorer) & (summary["role"] == role)].set_index(TRAJECTORY_KEYS)
            for stat, inv in TOKEN_STATISTICS.items():
                if stat not in rows or not np.isfinite(rows[stat].to_numpy(dtype=float)).any():
                    continue
                name = token_estimator_name(role, stat, scorer)
                wide[name] = rows[stat].astype(float)
                estimators.append(Estimator(name, name, "token", inv, scorer, role, stat))
    if wide:
        wide_df = pd.DataFrame(wide).reset_index()
        table = table.merge(key_dtypes(wide_df), on=TRAJECTORY_KEYS, how="left")

    for path, family in ((run_dir / SAUP_SCORES_FILE, "saup"), (run_dir / EARLY_WARNING_SCORES_FILE, "early_warning")):
        if path.exists():
            extra = key_dtypes(pd.read_parquet(path))
            score_cols = [c for c in extra.columns if c not in TRAJECTORY_KEYS and c != "reward"
                          and c.startswith(("saup_", "user_saup_", "early_warning_")) and not c.endswith("_fold")]
            table = table.merge(extra[TRAJECTORY_KEYS + score_cols], on=TRAJECTORY_KEYS, how="left")
            estimators += [Estimator(c, c, family) for c in score_cols]

    verbal = _verbalized(run_dir, base, summary)
    if verbal is not None:
        table = table.merge(verbal, on=TRAJECTORY_KEYS, how="left")
        estimators.append(Estimator("verbalized_confidence", "verbalized_confidence", "verbalized", invert=True))

    estimators += [Estimator(b, b, "baseline") for b in BASELINES if b in table]
    return table, estimators


def _role_order(role: str) -> tuple[int, str]:
    order = ["assistant", "user", "combined", "observation_user", "observation_tool", "observation_combined", "total"]
    return (order.index(role) if role in order else len(order), role)


def _verbalized(run_dir: Path, base: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame | None:
    col = "verbalized_confidence"
    csv = run_dir / VERBALIZED_CSV
    if csv.exists():  # written by agentuq_nb.uq.verbalized.verbalized_confidence
        src = key_dtypes(pd.read_csv(csv, dtype={"task_id": str}))
    elif (run_dir / VERBALIZED_FILE).exists():
        src = key_dtypes(pd.read_parquet(run_dir / VERBALIZED_FILE))
    elif col in base:
        src = base
    elif col in summary:
        src = summary[summary["role"] == "assistant"] if "role" in summary else summary
    else:
        return None
    if col not in src:
        return None
    return src.groupby(TRAJECTORY_KEYS, dropna=False)[col].mean().reset_index()


def evaluate_estimators(table: pd.DataFrame, estimators: list[Estimator], failure_threshold: float = 1.0,
                        n_boot: int = 1000, seed=0, reference: str = REFERENCE) -> pd.DataFrame:
    """The estimator table from a score table (see the module docstring for the columns)."""
    reward = table["reward"].to_numpy(dtype=float)
    ref = next((e for e in estimators if e.name == reference), None)
    if ref is None:  # no self-scored assistant: first assistant avg_token_nll of any scorer
        ref = next((e for e in estimators if e.role == "assistant" and e.statistic == "avg_token_nll"), None)
    rows = []
    for est in estimators:
        u = table[est.column].to_numpy(dtype=float)
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
            p = paired_bootstrap_pvalue(u, table[ref.column].to_numpy(dtype=float), reward, metric="auroc",
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


def compare_estimators(run_dir: str | Path, failure_threshold: float = 1.0, n_boot: int = 1000,
                       seed=0) -> pd.DataFrame:
    """Evaluate every estimator available in ``run_dir``; write ``RUN_DIR/estimator_table.csv``."""
    run_dir = Path(run_dir)
    table, estimators = score_table(run_dir)
    out = evaluate_estimators(table, estimators, failure_threshold, n_boot, seed)
    atomic_write_with(run_dir / ESTIMATOR_TABLE_FILE, lambda p: out.to_csv(p, index=False))
    return out


def read_estimator_table(run_dir: str | Path) -> pd.DataFrame:
    path = Path(run_dir) / ESTIMATOR_TABLE_FILE
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {ESTIMATOR_TABLE_FILE}; run 'agentuq-nb compare-estimators {run_dir}' first")
    return pd.read_csv(path)
