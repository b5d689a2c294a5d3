"""Does uncertainty over the turns tell failures from successes? The dynamics curve and early warning.

* :func:`dynamics_curve` - positions (``uq.dynamics.agent_turns``) binned into ``n_bins`` equal bins
  on [0, 1]; per bin and outcome (success / failure) the mean over trajectories of each trajectory's
  mean turn value in that bin (so long trajectories do not dominate), with a band: ``se`` = mean ±
  1.96 standard errors across trajectories, or ``bootstrap`` = percentile interval of the mean over
  resampled trajectories (:mod:`agentuq_nb.evaluation.bootstrap`).
* :func:`early_warning_table` - AUROC with bootstrap CI of the ``early_warning_f{f}`` scores
  (``uq.dynamics.compute_early_warning``) per fraction f, and how many turns each had seen.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.bootstrap import mean_bootstrap
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.dynamics import FRACTIONS, compute_early_warning, read_agent_turns


def dynamics_curve(turns: pd.DataFrame, n_bins: int = 10, band: str = "se", n_boot: int = DEFAULT_N_BOOT,
                   seed: int = 0) -> pd.DataFrame:
    """Binned mean and band of ``value`` over ``position``, per outcome (see module docstring)."""
    if band not in ("se", "bootstrap"):
        raise ValueError(f"band must be 'se' or 'bootstrap', not {band!r}")
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    t = turns.assign(bin=np.clip(np.searchsorted(edges, turns["position"], side="right") - 1, 0, n_bins - 1))
    per_traj = t.groupby(TRAJECTORY_KEYS + ["failed", "bin"], dropna=False)["value"].mean().reset_index()
    rng = np.random.default_rng(seed)
    rows = []
    for failed in (False, True):
        for b in range(n_bins):
            v = per_traj.loc[(per_traj["failed"] == failed) & (per_traj["bin"] == b), "value"].to_numpy(dtype=float)
            mean = float(v.mean()) if len(v) else np.nan
            if len(v) < 2:
                lo = hi = mean
            elif band == "se":
                se = float(v.std(ddof=1) / np.sqrt(len(v)))
                lo, hi = mean - 1.96 * se, mean + 1.96 * se
            else:
                lo, hi = (float(x) for x in np.percentile(mean_bootstrap(v, n_boot, rng), [2.5, 97.5]))
            rows.append({"outcome": "failure" if failed else "success", "bin": b, "bin_lo": edges[b],
                         "bin_hi": edges[b + 1], "bin_center": (edges[b] + edges[b + 1]) / 2, "mean": mean,
                         "lo": lo, "hi": hi, "n_trajectories": int(len(v)),
                         "n_turns": int(((t["failed"] == failed) & (t["bin"] == b)).sum())})
    out = pd.DataFrame(rows)
    # trajectories with a turn, per outcome: what the figure's n counts (a bin holds only some of them)
    per_outcome = t.drop_duplicates(TRAJECTORY_KEYS)["failed"].astype(bool).value_counts()
    out.attrs["n_trajectories"] = {"success": int(per_outcome.get(False, 0)), "failure": int(per_outcome.get(True, 0))}
    out.attrs["band"] = ("mean ± 1.96 standard errors across trajectories" if band == "se"
                         else "95% bootstrap interval of the mean (trajectories resampled)")
    return out


def early_warning_table(run_dir: str | os.PathLike | RunDir, fractions=FRACTIONS, role: str = "assistant",
                        scorer: str = "self", value: str = "avg_token_nll", failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                        n_boot: int = DEFAULT_N_BOOT, seed=0,
                        table: str = "turn_summary") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AUROC per fraction with CI, per-trajectory scores); the ``early-warning`` step publishes the scores.

    Scored over all trajectories of the run: a trajectory without any agent turn has NaN scores and
    is dropped by the metrics (counted in ``n``). ``table``/``scorer``/``value``: the per-turn values followed
    (``table="blackbox_turns"``, ``scorer="blackbox"`` for a run without log-probs; see ``read_agent_turns``).
    """
    run = RunDir.of(run_dir)
    scores = compute_early_warning(run, fractions, role, scorer, value, table=table)
    turns = read_agent_turns(run, role, scorer, value, failure_threshold, table=table)
    rows = []
    for f in fractions:
        col = f"early_warning_f{f:g}"
        rep = failure_metrics(scores[col], scores["reward"], failure_threshold=failure_threshold,
                              n_boot=n_boot, seed=seed)
        ci = rep["ci"]["auroc"] or (None, None)
        rows.append({"fraction": f, "estimator": col, "auroc": rep["metrics"]["auroc"], "auroc_lo": ci[0],
                     "auroc_hi": ci[1], "n": rep["n"], "n_failures": rep["n_failures"],
                     "mean_turns_seen": float(turns[turns["position"] <= f + 1e-12]
                                              .groupby(TRAJECTORY_KEYS, dropna=False).size().mean())})
    return pd.DataFrame(rows), scores
