"""How uncertainty evolves over a trajectory (issue 6, point 4; the AgentUQ dynamics figure).

* :func:`agent_turns` - per-turn agent NLL (``avg_token_nll`` of each assistant turn, scorer
  ``self`` by default) with its **normalized turn index**
  ``position = k / (n - 1)`` where k = 0..n-1 is the turn's rank among the trajectory's n agent
  turns (chronological, by ``turn_idx``); a single-turn trajectory has position 0.  So the first
  agent turn is at 0 and the last at 1.
* :func:`dynamics_curve` - positions binned into ``n_bins`` equal bins on [0, 1]; per bin and
  outcome (success / failure) the mean over trajectories of each trajectory's mean turn value in
  that bin (so long trajectories do not dominate), with a band: ``se`` = mean ± 1.96 standard
  errors across trajectories, or ``bootstrap`` = percentile interval of the mean over resampled
  trajectories.
* :func:`early_warning_scores` / :func:`early_warning` - the uncertainty observed up to turn
  fraction f is the mean turn NLL of the agent turns with position ≤ f (every trajectory has its
  first turn at 0, so the score is defined for every f ≥ 0; f = 1 uses all turns);  AUROC with
  bootstrap CI per f ∈ {0.25, 0.5, 0.75, 1.0}.  ``early_warning`` writes
  ``RUN_DIR/early_warning_scores.parquet`` so ``compare-estimators`` lists the
  ``early_warning_f{f}`` estimators.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.evaluation import failure_labels, failure_metrics
from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.aggregation import key_dtypes, read_trajectory_summary, read_turn_summary
from agentuq_nb.uq.extract import TRAJECTORIES_FILE

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
EARLY_WARNING_SCORES_FILE = "early_warning_scores.parquet"




def _rewards(run_dir: str | Path) -> pd.DataFrame:
    run_dir = Path(run_dir)
    path = run_dir / TRAJECTORIES_FILE
    src = pd.read_parquet(path) if path.exists() else read_trajectory_summary(run_dir)
    return key_dtypes(src[TRAJECTORY_KEYS + ["reward"]].drop_duplicates(TRAJECTORY_KEYS))


def normalized_positions(n: int) -> np.ndarray:
    """Normalized index of n chronological turns: k/(n-1), k = 0..n-1 ([0.] for one turn)."""
    return np.zeros(1) if n == 1 else np.arange(n) / (n - 1)


def agent_turns(turns: pd.DataFrame, rewards: pd.DataFrame | None = None, role: str = "assistant",
                scorer: str = "self", value: str = "avg_token_nll", failure_threshold: float = 1.0) -> pd.DataFrame:
    """Per-turn values of one role/scorer with ``position`` in [0, 1] and ``failed`` (if rewards given)."""
    t = key_dtypes(turns[(turns["role"] == role) & (turns["scorer"] == scorer)])
    t = t[np.isfinite(t[value].to_numpy(dtype=float))]
    t = t.sort_values(TRAJECTORY_KEYS + ["turn_idx"], kind="stable")
    rank = t.groupby(TRAJECTORY_KEYS, dropna=False).cumcount()
    size = t.groupby(TRAJECTORY_KEYS, dropna=False)[value].transform("size")
    t = t.assign(turn_rank=rank.to_numpy(), num_agent_turns=size.to_numpy(),
                 position=np.where(size > 1, rank / (size - 1).clip(lower=1), 0.0), value=t[value].astype(float))
    cols = TRAJECTORY_KEYS + ["turn_idx", "message_idx", "turn_rank", "num_agent_turns", "position", "value"]
    t = t[cols].reset_index(drop=True)
    if rewards is not None:
        t = t.merge(key_dtypes(rewards)[TRAJECTORY_KEYS + ["reward"]], on=TRAJECTORY_KEYS, how="left")
        t["failed"] = failure_labels(t["reward"], failure_threshold)
    return t


def read_agent_turns(run_dir: str | Path, role: str = "assistant", scorer: str = "self",
                     value: str = "avg_token_nll", failure_threshold: float = 1.0) -> pd.DataFrame:
    run_dir = Path(run_dir)
    return agent_turns(read_turn_summary(run_dir), _rewards(run_dir), role, scorer, value, failure_threshold)


def dynamics_curve(turns: pd.DataFrame, n_bins: int = 10, band: str = "se", n_boot: int = 1000,
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
                boots = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
                lo, hi = (float(x) for x in np.percentile(boots, [2.5, 97.5]))
            rows.append({"outcome": "failure" if failed else "success", "bin": b, "bin_lo": edges[b],
                         "bin_hi": edges[b + 1], "bin_center": (edges[b] + edges[b + 1]) / 2, "mean": mean,
                         "lo": lo, "hi": hi, "n_trajectories": int(len(v)),
                         "n_turns": int(((t["failed"] == failed) & (t["bin"] == b)).sum())})
    return pd.DataFrame(rows)


def early_warning_scores(turns: pd.DataFrame, fractions=FRACTIONS) -> pd.DataFrame:
    """Per trajectory: ``early_warning_f{f}`` = mean turn value of the turns with position ≤ f."""
    keys = turns[TRAJECTORY_KEYS].drop_duplicates().reset_index(drop=True)
    out = keys.copy()
    for f in fractions:
        seen = turns[turns["position"] <= f + 1e-12]
        m = seen.groupby(TRAJECTORY_KEYS, dropna=False)["value"].mean().rename(f"early_warning_f{f:g}").reset_index()
        out = out.merge(m, on=TRAJECTORY_KEYS, how="left")
    if "reward" in turns:
        out = out.merge(turns[TRAJECTORY_KEYS + ["reward"]].drop_duplicates(TRAJECTORY_KEYS), on=TRAJECTORY_KEYS, how="left")
    return out


def early_warning(run_dir: str | Path, fractions=FRACTIONS, role: str = "assistant", scorer: str = "self",
                  value: str = "avg_token_nll", failure_threshold: float = 1.0, n_boot: int = 1000, seed=0,
                  write: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AUROC per fraction with CI, per-trajectory scores); writes the scores file when ``write``.

    Scored over all trajectories of the run: a trajectory without any agent turn has NaN scores and
    is dropped by the metrics (counted in ``n``).
    """
    run_dir = Path(run_dir)
    rewards = _rewards(run_dir)
    turns = read_agent_turns(run_dir, role, scorer, value, failure_threshold)
    scores = rewards.merge(early_warning_scores(turns.drop(columns=["reward", "failed"]), fractions),
                           on=TRAJECTORY_KEYS, how="left")
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
    if write:
        atomic_write_with(run_dir / EARLY_WARNING_SCORES_FILE, lambda p: scores.to_parquet(p, index=False))
    return pd.DataFrame(rows), scores
