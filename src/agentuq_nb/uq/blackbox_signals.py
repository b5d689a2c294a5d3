"""The black-box signals of a run's conversation, per message and per trajectory, from its transcript
(:mod:`agentuq_nb.uq.transcript`): the structure signals (:mod:`agentuq_nb.uq.structure_signals`) and TRACER's
components and default score (:mod:`agentuq_nb.uq.tracer`). The black-box step
(:mod:`agentuq_nb.steps.blackbox`) publishes these tables; the learned failure detector's features
(:mod:`agentuq_nb.uq.detector_features`) read the per-trajectory ones.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.structure_signals import MESSAGE_SIGNALS, structure_messages, structure_trajectories
from agentuq_nb.uq.tracer import COMPONENTS, StepArrays, TracerParams, step_risk, tracer_components, tracer_scores

#: the ``scorer`` of the per-message table (so that dynamics and early warning read it like a turn summary)
SCORER = "blackbox"


def tool_types(header: dict) -> dict[str, str]:
    """Tool name → type (``read | write | …``) where the results' ``info`` defines its tools with a type."""
    env = (header.get("info") or {}).get("environment_info") or {}
    defs = env.get("tool_defs") or env.get("tools") or {}
    items = defs.items() if isinstance(defs, dict) else ((d.get("name"), d) for d in defs if isinstance(d, dict))
    out = {}
    for name, d in items:
        kind = isinstance(d, dict) and (d.get("tool_type") or d.get("type"))
        if name and isinstance(kind, str) and kind.lower() in ("read", "write", "think", "generic"):
            out[str(name)] = kind.lower()
    return out



def signal_tables(transcript_frame: pd.DataFrame, embed, u: pd.DataFrame | None, kinds: dict[str, str],
                  trajectories: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per-message table, per-trajectory table) of the module docstring, for the rows of ``trajectories``.
    ``embed`` None: the signals that need no embedding only (no TRACER, no user repetition)."""
    t = transcript_frame
    user = (t["role"] == "user").to_numpy()
    user_emb = None
    if embed is not None:
        components = tracer_components(t, embed, u)  # first: its one call embeds every text, the users' too
        user_text = t.loc[user, "text"].tolist()
        user_emb = embed(user_text) if user_text else np.zeros((0, 1))
        if len(user_emb):  # an empty text is like none
            user_emb = np.where(np.array([bool(x) for x in user_text])[:, None], user_emb, 0.0)
    messages = structure_messages(t, user_emb, kinds)
    per_traj = structure_trajectories(t, messages)
    scores = key_dtypes(trajectories[TRAJECTORY_KEYS], deep=False).merge(key_dtypes(per_traj), on=TRAJECTORY_KEYS,
                                                                           how="left")
    if embed is not None:
        default = TracerParams()
        risk = step_risk(*(np.nan_to_num(components[c].to_numpy(dtype=float)) for c in COMPONENTS),
                         default.alpha, default.beta, default.gamma)
        components["tracer_step_risk"] = np.where(components["is_step"], risk, np.nan)
        agg = components.groupby(TRAJECTORY_KEYS, dropna=False, sort=False).agg(
            tracer_repetition=("tracer_da", "max"), tracer_action_gap=("tracer_do_agent", "mean"),
            tracer_user_gap=("tracer_do_user", "mean"), tracer_content_nll=("tracer_u", "mean")).reset_index()
        steps = StepArrays.of(components, trajectories)
        scores = scores.assign(tracer_default=tracer_scores(steps, default)).merge(key_dtypes(agg),
                                                                                on=TRAJECTORY_KEYS, how="left")
        if not np.isfinite(scores["tracer_content_nll"].to_numpy(dtype=float)).any():
            scores = scores.drop(columns="tracer_content_nll")  # no log-probs: no such estimator
    else:
        components = t[TRAJECTORY_KEYS + ["message_idx"]].assign(
            is_step=t["role"].isin(["assistant", "user"]), **{c: np.nan for c in COMPONENTS + ("tracer_step_risk",)})
    turns = messages.assign(scorer=SCORER, **{c: components[c].to_numpy() for c in
                                              ("is_step",) + COMPONENTS + ("tracer_step_risk",)})
    cols = TRAJECTORY_KEYS + ["message_idx", "turn_idx", "role", "scorer"] + list(MESSAGE_SIGNALS) + ["is_step"] \
        + list(COMPONENTS) + ["tracer_step_risk"]
    return turns[cols], scores
