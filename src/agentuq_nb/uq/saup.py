"""SAUP: situation-aware uncertainty propagation (Zhao et al., ACL 2025), issue 6 point 3.

**Steps.**  A step is one generated message with token log-probs (turn summary, scorer ``self``);
its actor is ``assistant`` (agent) or ``user`` (simulated user).  Single-step uncertainty
``U_i`` = mean token NLL of the step (``avg_token_nll``).

**Propagation.**  Per actor, over its n steps in chronological order:
``SAUP = sqrt( mean_i (W_i · U_i)² )`` with situational weights W_i:

* ``saup_rms`` - uniform, W_i = 1;
* ``saup_position`` - W_i = 2i/(n+1), i = 1..n (linear in position, mean 1: later steps weigh
  more; one step → W = 1);
* ``saup_distance`` - W_i = D_a,i + D_o,i with
  - inquiry drift D_a,i = cosine distance between the *trajectory so far* and the user's first
    request (first user message with text; if none, the first message).  The trajectory so far is
    the renormalized mean of the unit embeddings of messages 0..m_i (m_i = the step's message) -
    embedding one concatenated string would be truncated to its first 256 word pieces by MiniLM;
  - inference gap D_o,i = cosine distance between the step's message (its action: text + tool
    calls) and its observation = renormalized mean embedding of the following messages up to the
    actor's next message (tool results / the other actor's reply); 0 if there is none;
* ``saup_hmm`` - W_i = Σ_s P(state_i = s | D sequence) · w_s: a 3-state Gaussian HMM
  (hmmlearn, diagonal covariances) over each trajectory's (D_a, D_o) sequence of agent steps;
  state weight w_s = failure rate of the training trajectories weighted by the posterior mass of
  their steps in state s, ``w_s = Σ_steps γ(s)·failed / Σ_steps γ(s)`` (the training failure rate
  if the state's total posterior mass is below 1e-6).  The HMM is fitted (Baum-Welch) on the
  training trajectories' sequences; held-out steps get posteriors γ from the same model.
  **Cross-fitting**: trajectories are split into K folds (stratified by failure when every class
  has ≥ K members, else plain KFold; shuffled with ``seed``); fold k is scored by an HMM and
  weights fitted only on the other folds, so no trajectory is ever scored by a model that saw it
  (its fold is recorded in ``saup_hmm_fold``).  A fold whose fit fails stays NaN.

Agent scores are the estimators (``saup_*``); the user's (``user_saup_rms``, ``user_saup_position``,
``user_saup_distance``) give SAUP's Step 2 per-actor breakdown (agent reasoning uncertainty vs user
confusion).  ``saup`` writes ``RUN_DIR/saup_scores.parquet`` for ``compare-estimators``.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.io.ingest.results import iter_simulations
from agentuq_nb.io.store.artifacts import read_turn_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, row_failures
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.embeddings import cosine_distance, get_embedder, unit_rows

#: the per-trajectory score columns (the ``saup_*`` estimators; ``user_saup_*`` is SAUP's per-actor view)
AGENT_COLUMNS = ("saup_rms", "saup_position", "saup_distance")
USER_COLUMNS = ("user_saup_rms", "user_saup_position", "user_saup_distance")
ACTORS = ("assistant", "user")
N_STATES = 3
#: a state with less total posterior mass than this on the training steps gets the training failure rate
MIN_STATE_MASS = 1e-6


# --------------------------------------------------------------------------- definitions
def saup_score(u, w=None) -> float:
    """sqrt(mean_i (W_i·U_i)²); W = 1 when ``w`` is None; NaN for no steps."""
    u = np.asarray(u, dtype=float)
    if u.size == 0:
        return float("nan")
    w = np.ones_like(u) if w is None else np.asarray(w, dtype=float)
    return float(np.sqrt(np.mean((w * u) ** 2)))


def position_weights(n: int) -> np.ndarray:
    """W_i = 2i/(n+1), i = 1..n (mean 1)."""
    i = np.arange(1, n + 1, dtype=float)
    return 2.0 * i / (n + 1)


def distance_weights(d_a, d_o) -> np.ndarray:
    """W_i = D_a,i + D_o,i."""
    return np.asarray(d_a, dtype=float) + np.asarray(d_o, dtype=float)


# --------------------------------------------------------------------------- steps
def message_text(msg) -> str:
    """A message as text: its content plus its tool calls as ``name(arguments)``."""
    parts = [msg.content or ""]
    for call in msg.tool_calls or []:
        args = getattr(call, "arguments", None)
        parts.append(f"{getattr(call, 'name', '')}({json.dumps(args, sort_keys=True, default=str)})")
    text = "\n".join(p for p in parts if p)
    return text if text.strip() else "(empty)"


def message_distances(texts: list[str], roles: list[str], embedder=None, emb: np.ndarray | None = None) -> pd.DataFrame:
    """D_a and D_o of every message of one trajectory (see the module docstring).

    Pass ``emb`` (unit embeddings of ``texts``) to skip embedding.
    """
    n = len(texts)
    if n == 0:
        return pd.DataFrame({"message_idx": [], "d_a": [], "d_o": []})
    if emb is None:
        emb = embedder.embed(texts)
    emb = np.asarray(emb, dtype=float)
    first_user = next((i for i, (r, t) in enumerate(zip(roles, texts)) if r == "user" and t != "(empty)"), 0)
    request = emb[first_user]
    so_far = unit_rows(np.cumsum(emb, axis=0))
    d_a = cosine_distance(so_far, request[None, :])
    d_o = np.zeros(n)
    for i in range(n):
        j = i + 1
        while j < n and roles[j] != roles[i]:
            j += 1
        if j > i + 1:
            d_o[i] = float(cosine_distance(emb[i], unit_rows(emb[i + 1:j].mean(axis=0))))
    return pd.DataFrame({"message_idx": np.arange(n), "d_a": np.clip(d_a, 0, None), "d_o": np.clip(d_o, 0, None)})




def _key(task_id, trial, seed) -> tuple:
    def _int(v):
        return None if v is None or pd.isna(v) else int(v)

    return str(task_id), _int(trial), _int(seed)


def saup_steps(run_dir: str | Path | RunDir, embedder=None, scorer: str = "self") -> pd.DataFrame:
    """One row per step (agent and user turns): keys, message_idx, turn_idx, actor, u, d_a, d_o.

    Message texts come from the results named in ``RUN_DIR/manifest.json``.
    """
    run = RunDir.of(run_dir)
    turns = key_dtypes(read_turn_summary(run))
    turns = turns[(turns["scorer"] == scorer) & turns["role"].isin(ACTORS)]
    turns = turns[np.isfinite(turns["avg_token_nll"].to_numpy(dtype=float))]
    manifest = run.require_manifest()
    domain = manifest.domain
    embedder = get_embedder(embedder)
    wanted = {_key(t, tr, sd) for t, tr, sd in turns[["task_id", "trial", "seed"]].itertuples(index=False)}
    sims = []
    for sim in iter_simulations(manifest.results):
        if _key(sim.task_id, sim.trial, sim.seed) in wanted:
            sims.append((sim.task_id, sim.trial, sim.seed, [message_text(m) for m in sim.messages],
                         [m.role for m in sim.messages]))
    all_texts = [t for s in sims for t in s[3]]
    all_emb = np.asarray(embedder.embed(all_texts), dtype=float) if all_texts else np.zeros((0, 1))
    dist, start = [], 0
    for task_id, trial, seed, texts, roles in sims:  # one batched embedding call for the whole run
        d = message_distances(texts, roles, emb=all_emb[start:start + len(texts)])
        start += len(texts)
        dist.append(d.assign(task_id=str(task_id), trial=trial, seed=seed))
    cols = TRAJECTORY_KEYS + ["message_idx", "turn_idx", "actor", "u"]
    steps = turns.rename(columns={"role": "actor", "avg_token_nll": "u"})[cols]
    if dist:
        d = key_dtypes(pd.concat(dist, ignore_index=True).assign(domain=domain))
        steps = steps.merge(d.drop(columns="domain"), on=["task_id", "trial", "seed", "message_idx"], how="left")
    else:
        steps = steps.assign(d_a=np.nan, d_o=np.nan)
    steps[["d_a", "d_o"]] = steps[["d_a", "d_o"]].fillna(0.0)
    return steps.sort_values(TRAJECTORY_KEYS + ["turn_idx", "message_idx"], kind="stable", ignore_index=True)


# --------------------------------------------------------------------------- HMM
def fit_hmm(sequences: list[np.ndarray], failed: np.ndarray, seed: int):
    """A Gaussian HMM (hmmlearn) fitted on the trajectories' distance sequences, and each hidden state's
    weight: the failure rate of the trajectories weighted by their time in that state (the overall rate
    for a state with almost no mass)."""
    from hmmlearn.hmm import GaussianHMM

    X = np.concatenate(sequences)
    model = GaussianHMM(n_components=N_STATES, covariance_type="diag", n_iter=50, random_state=seed,
                        min_covar=1e-4)
    # tiny deterministic jitter keeps the covariances positive when distances repeat exactly
    jitter = np.random.default_rng(seed).normal(0, 1e-6, X.shape)
    model.fit(X + jitter, [len(s) for s in sequences])
    gammas = [model.predict_proba(s) for s in sequences]
    mass = np.stack([g.sum(axis=0) for g in gammas])  # (n_traj, states)
    rate = float(failed.mean())
    num, den = (mass * failed[:, None]).sum(axis=0), mass.sum(axis=0)
    weights = np.where(den > MIN_STATE_MASS, num / np.where(den > MIN_STATE_MASS, den, 1.0), rate)
    return model, weights


def hmm_folds(failed: np.ndarray, k_folds: int = 5, seed: int = 0, stratify: bool = True) -> np.ndarray:
    """Fold id of each trajectory (see module docstring)."""
    from sklearn.model_selection import KFold, StratifiedKFold

    n = len(failed)
    k = max(2, min(k_folds, n))
    folds = np.zeros(n, dtype=int)
    counts = np.bincount(failed.astype(int), minlength=2)
    splitter = (StratifiedKFold(k, shuffle=True, random_state=seed) if stratify and counts.min() >= k
                else KFold(k, shuffle=True, random_state=seed))
    for f, (_, test) in enumerate(splitter.split(np.zeros(n), failed.astype(int))):
        folds[test] = f
    return folds


def saup_hmm_scores(sequences: list[np.ndarray], u_seqs: list[np.ndarray], failed: np.ndarray,
                    k_folds: int = 5, seed: int = 0, stratify: bool = True) -> tuple[np.ndarray, np.ndarray, dict]:
    """Cross-fitted ``saup_hmm`` per trajectory; returns (scores, folds, fit log).

    The fit log maps fold → {"train": indices fitted on, "test": indices scored, "weights": w_s}.
    """
    n = len(sequences)
    folds = hmm_folds(failed, k_folds, seed, stratify)
    scores = np.full(n, np.nan)
    log = {}
    for f in np.unique(folds):
        test = np.flatnonzero(folds == f)
        train = np.flatnonzero((folds != f) & np.array([len(s) > 0 for s in sequences]))
        log[int(f)] = {"train": train.tolist(), "test": test.tolist(), "weights": None}
        if sum(len(sequences[i]) for i in train) < N_STATES:
            continue
        try:
            model, w = fit_hmm([sequences[i] for i in train], failed[train].astype(float), seed)
        except (ValueError, np.linalg.LinAlgError):
            continue
        log[int(f)]["weights"] = w.tolist()
        for i in test:
            if len(sequences[i]):
                W = model.predict_proba(sequences[i]) @ w
                scores[i] = saup_score(u_seqs[i], W)
    return scores, folds, log


# --------------------------------------------------------------------------- scores
def saup_from_steps(steps: pd.DataFrame, rewards: pd.DataFrame | None = None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                    k_folds: int = 5, seed: int = 0, stratify: bool = True, hmm: bool = True) -> pd.DataFrame:
    """Per-trajectory SAUP scores from a step table (agent ``saup_*``, user ``user_saup_*``)."""
    rows = []
    agent_seq, agent_u = [], []
    for key, g in steps.groupby(TRAJECTORY_KEYS, sort=True, dropna=False):
        row = dict(zip(TRAJECTORY_KEYS, key))
        for actor, prefix in (("assistant", "saup_"), ("user", "user_saup_")):  # AGENT_COLUMNS, USER_COLUMNS
            a = g[g["actor"] == actor]
            u = a["u"].to_numpy(dtype=float)
            row[f"{prefix}rms"] = saup_score(u)
            row[f"{prefix}position"] = saup_score(u, position_weights(len(u)))
            row[f"{prefix}distance"] = saup_score(u, distance_weights(a["d_a"], a["d_o"]))
            row[f"num_{actor}_steps"] = len(u)
            if actor == "assistant":
                agent_seq.append(a[["d_a", "d_o"]].to_numpy(dtype=float))
                agent_u.append(u)
        rows.append(row)
    out = key_dtypes(pd.DataFrame(rows))
    if rewards is not None:  # the labels the rewards carry (a run's Outcomes.frame()), else made at the threshold
        labelled = key_dtypes(rewards)
        labelled = labelled.assign(failed=row_failures(labelled, failure_threshold))
        out = out.merge(labelled[TRAJECTORY_KEYS + ["reward", "failed"]], on=TRAJECTORY_KEYS, how="left")
        failed = row_failures(out)
        out = out.drop(columns="failed")
    if hmm and rewards is not None and len(out) >= 2:
        scores, folds, _ = saup_hmm_scores(agent_seq, agent_u, failed, k_folds, seed, stratify)
        out["saup_hmm"], out["saup_hmm_fold"] = scores, folds
    return out


def saup(run_dir: str | Path | RunDir, embedder=None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, k_folds: int = 5,
         seed: int = 0, hmm: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-trajectory scores, step table) of a run (the ``saup`` step publishes the scores)."""
    run = RunDir.of(run_dir)
    steps = saup_steps(run, embedder)
    return saup_from_steps(steps, run.outcomes(failure_threshold).frame(), failure_threshold, k_folds, seed, hmm=hmm), steps


def actor_breakdown(scores: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (trajectory, actor, weighting) - agent reasoning vs user confusion."""
    rows = []
    for actor, prefix in (("assistant", "saup_"), ("user", "user_saup_")):
        for w in ("rms", "position", "distance"):
            col = f"{prefix}{w}"
            if col in scores:
                part = scores[TRAJECTORY_KEYS + ([c for c in ["reward"] if c in scores])].copy()
                rows.append(part.assign(actor=actor, weighting=w, saup=scores[col].to_numpy()))
    return pd.concat(rows, ignore_index=True)


def turn_table(steps: pd.DataFrame, task_id=None, trial=None, seed=None) -> pd.DataFrame:
    """Turn-by-turn view of one trajectory: the given one, else the one with the most steps among those with
    steps of both actors (agent and user; ties: the first), else the first.

    Per step: actor, U, D_a, D_o, the three weights and the running SAUP of its actor after the step.
    """
    s = steps
    if task_id is None:
        keys = ["task_id", "trial", "seed"]
        sizes = s.groupby(keys, sort=False).agg(steps=("actor", "size"), actors=("actor", "nunique"))
        both = sizes[sizes["actors"] >= 2]
        chosen = (both if len(both) else sizes)["steps"].idxmax()
        task_id, trial, seed = chosen
    s = s[(s["task_id"] == str(task_id)) & (s["trial"] == trial) & (s["seed"] == seed)].copy()
    parts = []
    for actor, a in s.groupby("actor", sort=False):
        a = a.copy()
        n = len(a)
        a["w_uniform"] = 1.0
        a["w_position"] = position_weights(n)
        a["w_distance"] = distance_weights(a["d_a"], a["d_o"])
        u = a["u"].to_numpy(dtype=float)
        for w in ("uniform", "position", "distance"):
            wv = a[f"w_{w}"].to_numpy(dtype=float)
            a[f"running_saup_{w}"] = [saup_score(u[: i + 1], wv[: i + 1]) for i in range(n)]
        parts.append(a)
    out = pd.concat(parts).sort_values(["turn_idx", "message_idx"], kind="stable", ignore_index=True)
    return out
