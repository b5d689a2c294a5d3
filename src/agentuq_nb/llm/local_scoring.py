"""Teacher-forced log-probs of observed messages under the embedded model.

The conversation is rendered (``chat_format``), tokenized segment by segment, and
decoded in one left-to-right pass with logits requested only for the positions
that predict a message-body token. Because generation and scoring share the
rendering and the decode path (see ``local_model``), the log-probs of a message
the model generated are reproduced exactly.

Sliding window (conversations longer than the context window, 8192 tokens): the
system prompt stays pinned at the start of every window; the rest is scored in
windows of ``W = n_ctx - len(system prompt)`` tokens that advance by ``W/2``, so
every token is scored once, conditioned on the system prompt and at least the
``W/2`` tokens before it (positions are renumbered after the system prompt, as a
fresh context would see them). Each window after the first dropped earlier text;
their number is reported as ``truncations``. A system prompt longer than half the
context window is an error: it would leave too little room to score anything.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentuq_nb.llm.chat_format import Segment
from agentuq_nb.llm.local_model import LocalModel, Session, TokenStats, get_local_model
from agentuq_nb.llm.local_provider import TokenLogprob, stats_to_logprobs


@dataclass
class ScoredConversation:
    tokens: dict[int, list[TokenLogprob]]  # message_idx -> its body tokens, in order
    truncations: int
    n_tokens: int


def score_segments(segments: list[Segment], top_logprobs: int = 5, model: LocalModel | None = None,
                   score_messages: set[int] | None = None) -> ScoredConversation:
    """Teacher-forced log-probs of every message body (or of ``score_messages`` only)."""
    model = model or get_local_model()
    ids: list[int] = []
    owner: list[int] = []  # message_idx of each token, -1 for scaffolding
    n_pinned = 0
    for seg in segments:
        seg_ids = model.tokenize(seg.text, special=seg.special)
        ids.extend(seg_ids)
        scored = seg.message_idx is not None and (score_messages is None or seg.message_idx in score_messages)
        owner.extend([seg.message_idx if scored else -1] * len(seg_ids))
        if seg.pinned:
            n_pinned = len(ids)
    owner_arr = np.asarray(owner, dtype=np.int64)
    targets = np.flatnonzero(owner_arr >= 0)
    if len(targets) and targets[0] == 0:
        raise ValueError("a message body cannot be the first token of the conversation")
    with model.session() as session:
        stats, truncations = _score_windows(session, ids, targets, n_pinned, top_logprobs)
    per_message: dict[int, list[TokenLogprob]] = {}
    target_ids = [ids[t] for t in targets]
    for pos, lp in zip(targets, stats_to_logprobs(model, target_ids, stats)):
        per_message.setdefault(int(owner_arr[pos]), []).append(lp)
    return ScoredConversation(per_message, truncations, len(ids))


def _score_windows(session: Session, ids: list[int], targets: np.ndarray, n_pinned: int,
                   k: int) -> tuple[TokenStats, int]:
    n_ctx = session.model.n_ctx
    if len(ids) <= n_ctx:
        # one call with the whole sequence, so that the model can pick the cache slot it continues
        return session.score(ids, targets, k), 0
    width = n_ctx - n_pinned
    if n_pinned > n_ctx // 2:
        raise ValueError(f"the system prompt ({n_pinned} tokens) takes more than half of the "
                         f"{n_ctx}-token context window; a sliding window cannot keep it")
    body = ids[n_pinned:]
    body_targets = targets - n_pinned
    if n_pinned:
        session.feed(ids[:n_pinned])
    parts, lo, hi, windows = [], 0, min(width, len(body)), 0
    while True:
        start = max(0, hi - width)
        window_targets = body_targets[(body_targets >= lo) & (body_targets < hi)] - start
        session.truncate(n_pinned)
        parts.append(session.score(body[start:hi], window_targets, k))
        windows += 1
        if hi == len(body):
            return TokenStats.concat(parts, k), windows - 1
        lo, hi = hi, min(hi + width // 2, len(body))
