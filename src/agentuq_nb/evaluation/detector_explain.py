"""Why the detector gave a trajectory its probability, in terms a person reads: each reason in percentage points of
the printed probability, the embedding blocks named by the message(s) that moved them.

**How the points sum.** The detector's log-odds is additive over its reported features (a term, a black-box or
length column, an embedding block, the task prior; :meth:`~.detector_selection.SelectedDetector.block_contributions`):
``s(x) = b + Σ_j c_j(x)``. The reference trajectory is the training rows' average: every contribution at its
training mean ``c̄_j``, log-odds ``s₀ = b + Σ_j c̄_j`` (the mean training log-odds), printed probability
``base = f(s₀)``, where ``f`` maps log-odds to the printed probability (the detector's calibration, and whatever
adjustment the caller applies - it is given as a function). Along the straight path from the reference to the
trajectory every feature moves by ``d_j = c_j(x) - c̄_j`` and the log-odds by ``s(x) - s₀ = Σ_j d_j``; the path
(integrated-gradients) attribution of ``f`` along it gives feature j

    points_j = 100 · d_j · (f(s(x)) - f(s₀)) / (s(x) - s₀)        (f'(s₀) where s(x) = s₀)

so that ``base + Σ_j points_j / 100 = f(s(x))``, the printed probability, exactly: each reason's share of the move
from the base probability, in percentage points. (For an additive log-odds under one monotone link this is also the
DeepLIFT rescale rule.) A GBM's contributions are occlusion effects that do not add up; its points are
``100 · (f(s) - f(s - c_j))`` - each feature's effect with the others held - and the row says they do not sum.

**The embedding blocks as messages.** For the logistic model an embedding block's contribution is linear in its
vector, and the block is a mean of unit message vectors (or the agent's last message), so it splits over the
messages exactly: message i of the m the block averages moves it by ``(w·e_i - offset - c̄_block) / m``
(:meth:`~.detector_selection.SelectedDetector.embedding_weights`; up to the ±MAX_Z clip of a standardized value).
The reason names the message that moved the block most in the block's direction: its role, position and first
words.

**Interpretable first.** The ``top`` reasons of a row are the ``top`` largest in absolute points; they are listed
interpretable ones first (length, black-box signals, terms, the task prior), then the embedding blocks, each group
largest first.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.detector_model import term_matrix
from agentuq_nb.evaluation.detector_selection import PRIOR_BLOCK, SelectedDetector, row_task_keys
from agentuq_nb.uq.detector_features import EMBEDDING_BLOCKS, TrajectoryFeatures

#: how the points are made (the predictions' report says it)
POINTS = ("percentage points of the printed probability: each reason's share of the move from the base probability "
          "(the training trajectories' average log-odds, through the same calibration) to the trajectory's, by the "
          "path (integrated-gradients) attribution of an additive log-odds; base + sum of all points = the "
          "probability (for a GBM: each feature's occlusion effect, which does not sum)")
LENGTH_TEXT = {"length.num_messages": "{:,.0f} messages", "length.num_tool_calls": "{:,.0f} tool calls",
               "length.agent_chars": "the agent wrote {:,.0f} characters"}
BLACKBOX_TEXT = {
    "structure.tool_errors": "tool errors", "structure.repeated_tool_calls": "repeated identical tool calls",
    "structure.retried_tool_calls": "tool calls retried with other arguments", "structure.agent_hedging":
    "hedges in the agent's text", "structure.agent_apology": "apologies by the agent", "structure.agent_inability":
    "the agent saying it cannot", "structure.transfer_to_human": "a transfer to a human",
    "structure.user_repetition": "the user repeating a message (similarity)", "structure.user_frustration":
    "frustration in the user's text", "structure.distinct_tools": "distinct tools used",
    "structure.longest_tool_streak": "the longest run of tool calls", "structure.turns_after_last_write":
    "messages after the last write", "tracer.default": "TRACER score", "tracer.repetition": "TRACER repetition",
    "tracer.action_gap": "TRACER action gap", "tracer.user_gap": "TRACER user gap"}
EMBEDDING_TEXT = {"embedding.agent_mean": ("assistant", "the wording of the agent's messages"),
                  "embedding.user_mean": ("user", "the wording of the user's messages"),
                  "embedding.agent_last": ("assistant", "the wording of the agent's last message")}
ROLE_NAMES = {"assistant": "agent", "user": "user"}
#: features an explanation lists one by one (the largest in absolute points); the rest are summed into OTHERS
LISTED = 20
OTHERS = "others"
HEAD_WORDS = 12


def is_embedding(name: str) -> bool:
    return name in EMBEDDING_BLOCKS


def first_words(text: str, n: int = HEAD_WORDS) -> str:
    words = str(text).split()
    return " ".join(words[:n]) + (" …" if len(words) > n else "")


def term_reason(term: str, count: float) -> str:
    """A text term as a sentence (``count`` times in the trajectory; 0: it was absent)."""
    times = "" if count <= 1 else f" ({count:.0f}×)"
    kind, _, rest = term.partition(":")
    if kind in ("agent", "user"):
        who = "the agent" if kind == "agent" else "the user"
        return f"{who} said “{rest}”{times}" if count else f"{who} never said “{rest}”"
    if kind == "call":
        name, _, key = rest.partition(".")
        what = f"a call of {name} with “{key}”" if key else f"a call of {name}"
        return f"{what}{times}" if count else f"no {what}"
    if rest == "error":
        what = "a tool returning an error"
    elif rest == "empty":
        what = "a tool returning nothing"
    elif rest == "ok":
        what = "a tool call that succeeded"
    elif rest.startswith("status_"):
        what = f"a tool result with status “{rest.removeprefix('status_')}”"
    else:
        what = f"a tool result saying “{rest}”"
    return f"{what}{times}" if count else f"no {what}"


def reasons_of(detector: SelectedDetector, features: TrajectoryFeatures, names: list[str],
               wanted: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(text, value)`` (rows × names): each reported feature as a sentence about the trajectory and its raw value
    (a term's count, a signal's value, a length as counted, the task's training failure rate; NaN for an embedding
    block). ``wanted`` (rows × names, bool): the cells whose term sentence is needed (an explanation lists a few of
    thousands of terms); the other terms' cells hold the feature's name."""
    n = len(features)
    text = np.empty((n, len(names)), dtype=object)
    value = np.full((n, len(names)), np.nan)
    terms = [(i, name.removeprefix("text:")) for i, name in enumerate(names) if name.startswith("text:")]
    if terms:
        counts = term_matrix(features, [t for _, t in terms]).toarray()
        for (i, term), col in zip(terms, counts.T):
            value[:, i] = col
            rows = np.arange(n) if wanted is None else np.flatnonzero(wanted[:, i])
            text[rows, i] = [term_reason(term, c) for c in col[rows]]
    have = {name: i for i, name in enumerate(features.dense_names)}
    for i, name in enumerate(names):
        if name in LENGTH_TEXT:
            v = features.index[name.removeprefix("length.")].to_numpy(dtype=float)
            value[:, i] = v
            text[:, i] = [LENGTH_TEXT[name].format(x) if np.isfinite(x) else f"{name}: unknown" for x in v]
        elif name == PRIOR_BLOCK and detector.prior is not None:
            failures, count = detector.prior.lookup(row_task_keys(features))
            with np.errstate(invalid="ignore", divide="ignore"):
                value[:, i] = np.where(count > 0, failures / np.where(count > 0, count, 1), np.nan)
            text[:, i] = [f"this task failed in {f:.0f} of {c:.0f} training trajectories" if c else
                          "this task is new to the detector (no training trajectory of it)"
                          for f, c in zip(failures, count)]
        elif name in BLACKBOX_TEXT:
            v = features.dense[:, have[name]] if name in have else np.full(n, np.nan)
            value[:, i] = v
            text[:, i] = [f"{BLACKBOX_TEXT[name]}: {x:.3g}" if np.isfinite(x) else f"{BLACKBOX_TEXT[name]}: none"
                          for x in v]
        elif is_embedding(name):
            text[:, i] = EMBEDDING_TEXT.get(name, (None, name))[1]
    text[pd.isna(text)] = np.broadcast_to(np.asarray(names, dtype=object), text.shape)[pd.isna(text)]
    return text, value


def probability_points(detector: SelectedDetector, names: list[str], values: np.ndarray, intercept: float,
                       log_odds: np.ndarray, to_probability: Callable[[np.ndarray], np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray, float]:
    """``(points, per_log_odds, base)``: each row's points per feature (module docstring), each row's points per
    unit of log-odds moved (the rescale factor, x 100; NaN for a GBM) and the base probability."""
    f = to_probability
    if not detector.additive:
        base = float(f(np.array([detector.mean_log_odds]))[0])
        return 100 * (f(log_odds)[:, None] - f(log_odds[:, None] - values)), np.full(len(values), np.nan), base
    reference = dict(zip(detector.reference_names, detector.reference))
    ref = np.array([reference.get(name, 0.0) for name in names])
    s = intercept + values.sum(axis=1)
    s0 = intercept + ref.sum()
    p, base = f(s), float(f(np.array([s0]))[0])
    ds = s - s0
    h = 1e-4
    slope = float((f(np.array([s0 + h]))[0] - f(np.array([s0 - h]))[0]) / (2 * h))
    moved = np.abs(ds) > 1e-9
    ratio = 100 * np.where(moved, (p - base) / np.where(moved, ds, 1.0), slope)
    return (values - ref[None, :]) * ratio[:, None], ratio, base


def message_shares(detector: SelectedDetector, features: TrajectoryFeatures, block: str
                   ) -> pd.DataFrame | None:
    """Each embedded message's move of ``block`` from its training mean on the log-odds scale (module docstring):
    ``row, message_idx, role, head, share``; None where the detector does not read the block linearly or the
    features kept no messages."""
    weights = detector.embedding_weights(block)
    if weights is None or features.messages is None or not len(features.messages):
        return None
    w, offset = weights
    role, _ = EMBEDDING_TEXT[block]
    msgs = features.messages
    mine = np.flatnonzero(msgs["role"].to_numpy() == role)
    frame = msgs.iloc[mine].copy()
    proj = features.message_vectors[mine].astype(float) @ w
    reference = dict(zip(detector.reference_names, detector.reference)).get(block, 0.0)
    frame["proj"] = proj - offset - reference
    if block == "embedding.agent_last":
        frame = frame.groupby("row", sort=False).tail(1)
        frame["share"] = frame["proj"]
    else:
        frame["share"] = frame["proj"] / frame.groupby("row")["proj"].transform("size")
    return frame.drop(columns="proj")


def explain(detector: SelectedDetector, features: TrajectoryFeatures,
            to_probability: Callable[[np.ndarray], np.ndarray], top: int = 5) -> pd.DataFrame:
    """One row per row of ``features``: ``base_probability``, ``reason_k``, ``points_k`` and ``feature_k`` (k = 1 …
    ``top``; module docstring) and ``explanation``: the JSON text of the :data:`LISTED` largest features'
    ``{feature, reason, value, points, log_odds}`` (an embedding block with ``messages``: the messages that moved
    it most, each ``{message_idx, role, words, points}``), interpretable features first, and the rest summed as
    :data:`OTHERS` - base + all points / 100 = the probability. ``to_probability`` maps log-odds to the printed
    probability. A task prior with a fallback is explained part by part (its rows of seen tasks by the prior, the
    others by the fallback that scored them: :meth:`~.detector_selection.SelectedDetector.parts`)."""
    n = len(features)
    if detector.fallback is not None:
        pieces = [explain(part, features.take(rows), to_probability, top).set_axis(rows)
                  for rows, part in detector.parts(features)]
        return pd.concat(pieces).sort_index().reset_index(drop=True) if pieces else \
            explain(replace(detector, fallback=None), features, to_probability, top)
    out = pd.DataFrame({"base_probability": np.full(n, np.nan), "explanation": "[]"})
    for k in range(1, top + 1):
        out[f"feature_{k}"], out[f"reason_{k}"], out[f"points_{k}"] = None, None, np.nan
    names, values, intercept = detector.block_contributions(features)
    log_odds = detector.log_odds(features)
    if not names or n == 0:
        if n:
            out["base_probability"] = to_probability(log_odds)
        return out
    points, ratio, base = probability_points(detector, names, values, intercept, log_odds, to_probability)
    out["base_probability"] = base
    embedding = np.array([is_embedding(name) for name in names])
    k = min(top, len(names))
    order = np.argsort(-np.abs(points), axis=1, kind="stable")
    listed = min(len(names), max(LISTED, top))
    wanted = np.zeros(points.shape, dtype=bool)  # the sentences an explanation shows: its listed features'
    wanted[np.arange(n)[:, None], order[:, :listed]] = True
    text, raw = reasons_of(detector, features, names, wanted)
    shares = {b: message_shares(detector, features, b) for b in names if is_embedding(b)}
    for r in range(n):
        kept = [j for j in order[r, :listed] if points[r, j] != 0]
        items = []
        for j in sorted(kept, key=lambda j: (embedding[j], -abs(points[r, j]))):
            item = {"feature": names[j], "reason": text[r, j], "value": None if not np.isfinite(raw[r, j]) else
                    float(raw[r, j]), "points": float(points[r, j]), "log_odds": float(values[r, j])}
            frame = shares.get(names[j])
            mine = frame[frame["row"] == r] if frame is not None else None
            if mine is not None and len(mine) and np.isfinite(ratio[r]):
                sign = 1.0 if points[r, j] >= 0 else -1.0
                best = mine.assign(key=-sign * mine["share"]).sort_values("key", kind="stable").head(2)
                item["messages"] = [{"message_idx": int(m.message_idx), "role": ROLE_NAMES.get(m.role, m.role),
                                     "words": first_words(m.head), "points": float(m.share * ratio[r])}
                                    for m in best.itertuples()]
                lead = item["messages"][0]
                item["reason"] = (f"{text[r, j]}, most of all message {lead['message_idx']} ({lead['role']}): "
                                  f"“{lead['words']}”")
            items.append(item)
        rest = np.delete(points[r], kept).sum() if len(kept) < len(names) else 0.0
        if rest:
            items.append({"feature": OTHERS, "reason": f"the {len(names) - len(kept)} other features together",
                          "value": None, "points": float(rest), "log_odds": None})
        by_feature = {it["feature"]: it for it in items}
        top_here = sorted((j for j in order[r, :k] if points[r, j] != 0),
                          key=lambda j: (embedding[j], -abs(points[r, j])))
        for rank, j in enumerate(top_here, start=1):
            out.at[r, f"feature_{rank}"] = names[j]
            out.at[r, f"reason_{rank}"] = by_feature[names[j]]["reason"]
            out.at[r, f"points_{rank}"] = float(points[r, j])
        out.at[r, "explanation"] = json.dumps(items, ensure_ascii=False)
    return out
