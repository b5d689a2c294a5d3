"""How uncertainty evolves over a trajectory: the calculators (issue 6, point 4; the AgentUQ dynamics figure).

* :func:`agent_turns` - per-turn agent NLL (``avg_token_nll`` of each assistant turn, scorer
  ``self`` by default) with its **normalized turn index**
  ``position = k / (n - 1)`` where k = 0..n-1 is the turn's rank among the trajectory's n agent
  turns (chronological, by ``turn_idx``); a single-turn trajectory has position 0.  So the first
  agent turn is at 0 and the last at 1.
* :func:`early_warning_scores` / :func:`compute_early_warning` - the uncertainty observed up to turn
  fraction f is the mean turn NLL of the agent turns with position ≤ f (every trajectory has its
  first turn at 0, so the score is defined for every f ≥ 0; f = 1 uses all turns).
  ``compute_early_warning`` publishes ``RUN_DIR/early_warning_scores.parquet``, read by the
  ``early_warning_f{f}`` estimators.

How well they predict failure - the binned success/failure curves and the AUROC per fraction - is
evaluation (:mod:`agentuq_nb.evaluation.dynamics`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.io.store.artifacts import read_turn_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, row_failures
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

FRACTIONS = (0.25, 0.5, 0.75, 1.0)


def normalized_positions(n: int) -> np.ndarray:
    """Normalized index of n chronological turns: k/(n-1), k = 0..n-1 ([0.] for one turn)."""
    return np.zeros(1) if n == 1 else np.arange(n) / (n - 1)


def agent_turns(turns: pd.DataFrame, rewards: pd.DataFrame | None = None, role: str = "assistant",
                scorer: str = "self", value: str = "avg_token_nll", failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> pd.DataFrame:
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
    if rewards is not None:  # the labels the rewards carry (a run's Outcomes.frame()), else made at the threshold
        labelled = key_dtypes(rewards)
        t = t.merge(labelled[TRAJECTORY_KEYS + [c for c in ("reward", "failed") if c in labelled.columns]],
                    on=TRAJECTORY_KEYS, how="left")
        t["failed"] = row_failures(t, failure_threshold)
    return t


def read_agent_turns(run_dir: str | Path | RunDir, role: str = "assistant", scorer: str = "self",
                     value: str = "avg_token_nll", failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                     table: str = "turn_summary") -> pd.DataFrame:
    """:func:`agent_turns` of a run: token statistics from the turn summary, or (``table="blackbox_turns"``,
    ``scorer="blackbox"``) a per-message black-box signal such as ``tracer_step_risk`` or ``hedging``."""
    run = RunDir.of(run_dir)
    turns = read_turn_summary(run) if table == "turn_summary" else run.read_frame(table)
    return agent_turns(turns, run.outcomes(failure_threshold).frame(), role, scorer, value, failure_threshold)


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


def compute_early_warning(run_dir: str | Path | RunDir, fractions=FRACTIONS, role: str = "assistant",
                          scorer: str = "self", value: str = "avg_token_nll", table: str = "turn_summary") -> pd.DataFrame:
    """Per trajectory of the run (keys, reward, ``early_warning_f{f}`` per fraction; the ``early-warning`` step
    publishes them). A trajectory without any agent turn has NaN scores. ``table``/``scorer``/``value``: the
    per-turn values followed (see :func:`read_agent_turns`)."""
    run = RunDir.of(run_dir)
    turns = read_agent_turns(run, role, scorer, value, table=table)
    return run.rewards().merge(early_warning_scores(turns.drop(columns=["reward", "failed"]), fractions),
                               on=TRAJECTORY_KEYS, how="left")
