"""Token rows → turn summaries and trajectory summaries (vectorized pandas group-bys).

Turn summary: one row per (domain, task_id, trial, seed, scorer, role, turn_idx).
Trajectory summary: one row per (domain, task_id, trial, seed, scorer, role), plus a
``combined`` role over all of a scorer's roles (agentuq's ``combined``). Means skip tokens
whose log-prob was invalid (null), so one bad token does not poison a trajectory; with clean
input every mean is exactly the agentuq value (sum / number of tokens).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.io.atomic import atomic_write_with
from agentuq_nb.io.token_table import read_token_table
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.extract import TRAJECTORIES_FILE

TURN_KEYS = TRAJECTORY_KEYS + ["scorer", "role", "turn_idx"]
ROLE_KEYS = TRAJECTORY_KEYS + ["scorer", "role"]
AGG_COLUMNS = ["chosen_logprob", "chosen_prob", "topk_entropy", "normalized_entropy", "full_entropy"]
TRAJECTORY_META = ["simulation_id", "reward", "termination_reason", "num_messages", "num_tool_calls", "agent_chars"]

TURN_SUMMARY_FILE = "turn_summary"
TRAJECTORY_SUMMARY_FILE = "trajectory_summary"


def _summarize(tokens: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    t = tokens.assign(nll=-tokens["chosen_logprob"])
    g = t.groupby(keys, sort=True, dropna=False, observed=True)
    out = g.agg(
        num_tokens=("token_idx", "size"),
        nll_sum=("nll", "sum"),
        avg_token_nll=("nll", "mean"),
        mean_topk_entropy=("topk_entropy", "mean"),
        mean_normalized_entropy=("normalized_entropy", "mean"),
        mean_full_entropy=("full_entropy", "mean"),
        min_chosen_prob=("chosen_prob", "min"),
        max_token_nll=("nll", "max"),
        num_turns=("turn_idx", "nunique"),
    )
    return out.reset_index()


def _key_dtypes(df: pd.DataFrame) -> pd.DataFrame:
    # Keys compare as written: task ids are strings ("10" ≠ 10), trial/seed nullable ints.
    df["task_id"] = df["task_id"].astype("string")
    for col in ("trial", "seed"):
        df[col] = df[col].astype("Int64")
    return df


def observation_role(role: pd.Series, scorer: pd.Series) -> pd.Series:
    """User/tool rows scored by another model than their author are observations (AgentUQ)."""
    is_obs = (scorer != "self") & role.isin(["user", "tool"])
    return role.where(~is_obs, "observation_" + role.astype(str))


def turn_summary(tokens: pd.DataFrame) -> pd.DataFrame:
    tokens = tokens.assign(role=observation_role(tokens["role"], tokens["scorer"]))
    out = _summarize(tokens, TURN_KEYS + ["message_idx", "source"]).drop(columns="num_turns")
    out = out.rename(columns={"nll_sum": "turn_nll"})
    return _key_dtypes(out)


def trajectory_summary(tokens: pd.DataFrame, trajectories: pd.DataFrame | None = None) -> pd.DataFrame:
    tokens = tokens.assign(role=observation_role(tokens["role"], tokens["scorer"]))
    per_role = _summarize(tokens, ROLE_KEYS)
    combined_parts = []
    obs = tokens["role"].str.startswith("observation_")
    for label, mask in (("combined", ~obs), ("observation_combined", obs)):
        sub = tokens[mask]
        if sub.empty:
            continue
        # a combined row only where the scorer has more than one role to combine, as agentuq does
        n_roles = sub.groupby(TRAJECTORY_KEYS + ["scorer"], dropna=False)["role"].transform("nunique")
        sub = sub[n_roles > 1]
        if sub.empty:
            continue
        combined_parts.append(_summarize(sub.assign(role=label), ROLE_KEYS))
    out = pd.concat([per_role, *combined_parts], ignore_index=True)
    out = out.rename(columns={"num_tokens": "total_tokens", "nll_sum": "trajectory_nll"})
    out = _key_dtypes(out)
    if trajectories is not None:
        meta = _key_dtypes(trajectories[TRAJECTORY_KEYS + [c for c in TRAJECTORY_META if c in trajectories]].copy())
        out = out.merge(meta, on=TRAJECTORY_KEYS, how="left")
    return out.sort_values(ROLE_KEYS, kind="stable", ignore_index=True)


def _write_table(df: pd.DataFrame, run_dir: Path, stem: str) -> None:
    atomic_write_with(run_dir / f"{stem}.csv", lambda p: df.to_csv(p, index=False))
    atomic_write_with(run_dir / f"{stem}.parquet", lambda p: df.to_parquet(p, index=False))


def aggregate(run_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a run's token tables, write turn and trajectory summaries (CSV + Parquet)."""
    run_dir = Path(run_dir)
    columns = TRAJECTORY_KEYS + ["scorer", "role", "turn_idx", "message_idx", "source", "token_idx"] + AGG_COLUMNS
    tokens = read_token_table(run_dir, columns=columns)
    if tokens.empty:
        raise ValueError(f"{run_dir}: the token table is empty (no message carried log-probs); nothing to aggregate")
    trajectories_path = run_dir / TRAJECTORIES_FILE
    trajectories = pd.read_parquet(trajectories_path) if trajectories_path.exists() else None
    turns = turn_summary(tokens)
    trajs = trajectory_summary(tokens, trajectories)
    _write_table(turns, run_dir, TURN_SUMMARY_FILE)
    _write_table(trajs, run_dir, TRAJECTORY_SUMMARY_FILE)
    return turns, trajs


def read_trajectory_summary(run_dir: str | Path) -> pd.DataFrame:
    path = Path(run_dir) / f"{TRAJECTORY_SUMMARY_FILE}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {path.name}; run 'agentuq-nb aggregate {run_dir}' first")
    return pd.read_parquet(path)


def read_turn_summary(run_dir: str | Path) -> pd.DataFrame:
    path = Path(run_dir) / f"{TURN_SUMMARY_FILE}.parquet"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {path.name}; run 'agentuq-nb aggregate {run_dir}' first")
    return pd.read_parquet(path)
