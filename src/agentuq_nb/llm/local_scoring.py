"""Teacher-forced log-probs of observed messages under the embedded model.

The conversation is rendered (``chat_format``), tokenized segment by segment, and
decoded in one left-to-right pass with logits requested only for the positions
that predict a message-body token. Because generation and scoring share the
rendering and the decode path (see ``local_model``), the log-probs of a message
the model generated are reproduced exactly.

A conversation that fits the context window (8192 tokens) is one call, so its
numbers are those of a fresh full-context decode, whatever was cached before. What
was cached before is what saves time: the trajectories of one results file share
their system prompt, which the model takes from its cache (from another slot if need
be, see ``local_model``) instead of decoding it again, so within one process it is
decoded once per file, not once per trajectory. ``ScoredConversation.reuse`` says how
many tokens were decoded and how many came from the cache.

Longer conversations (policy "context shift", since issue 16): the system prompt
is pinned at positions ``0…P-1``; the rest, the body, is scored in one pass in
which every token is decoded exactly once. The first ``W = n_ctx - P`` body tokens
are scored as in a fitting conversation (identical numbers). Whenever the window
is full, the oldest ``S = W/2`` body tokens are dropped from the KV cache and the
remaining ones are moved ``S`` positions back (``Session.shift_out``: llama.cpp
re-rotates their cached keys), and the next ``S`` body tokens are decoded after
them. So every body token is scored once, conditioned on the system prompt and on
at least the ``W - S = W/2`` tokens right before it (all of them when fewer), at
positions renumbered after the system prompt as a fresh window would see them;
and ``truncations``, the number of times earlier text was dropped, counts the
same cuts as before. What differs from the former policy (each window of ``W``
tokens decoded afresh, advancing by ``W/2``, so every token decoded about twice):
the kept tokens' keys and values were computed when they still saw the dropped
text, and their keys are rotated rather than recomputed. Neither is a full-context
decode, which is impossible past the window. On the real 14,080-token τ²-bench
trajectory (gpt-4.1 airline, 2 cuts) 5,637 of 11,686 scored tokens moved: mean
|diff| 0.021 nats over all (0.043 over those moved), max 4.96; it decodes 14,080
tokens instead of ~20,800 (``benchmarks/bench_observation.py --trajectories``).
A system prompt longer than half the context window is an error: it would leave
too little room to score anything.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from agentuq_nb.llm.chat_format import Segment
from agentuq_nb.llm.local_model import LocalModel, PrefixReuse, Session, TokenStats, get_local_model
from agentuq_nb.llm.local_provider import TokenLogprob, stats_to_logprobs


@dataclass
class ScoredConversation:
    tokens: dict[int, list[TokenLogprob]]  # message_idx -> its body tokens, in order
    truncations: int
    n_tokens: int
    reuse: PrefixReuse = field(default_factory=PrefixReuse)  # tokens decoded, and taken from the cache instead


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
        reuse = session.reuse
    per_message: dict[int, list[TokenLogprob]] = {}
    target_ids = [ids[t] for t in targets]
    for pos, lp in zip(targets, stats_to_logprobs(model, target_ids, stats)):
        per_message.setdefault(int(owner_arr[pos]), []).append(lp)
    return ScoredConversation(per_message, truncations, len(ids), reuse)


def _score_windows(session: Session, ids: list[int], targets: np.ndarray, n_pinned: int,
                   k: int) -> tuple[TokenStats, int]:
    n_ctx = session.model.n_ctx
    if len(ids) <= n_ctx:
        # one call with the whole sequence, so that the model can pick the cache slot it continues
        return session.score(ids, targets, k), 0
    if n_pinned > n_ctx // 2:
        raise ValueError(f"the system prompt ({n_pinned} tokens) takes more than half of the "
                         f"{n_ctx}-token context window; a sliding window cannot keep it")
    stride = (n_ctx - n_pinned) // 2
    parts = [session.score(ids[:n_ctx], targets[targets < n_ctx], k)]
    shifts = 0
    for lo in range(n_ctx, len(ids), stride):
        hi = min(lo + stride, len(ids))
        session.shift_out(n_pinned, len(session.tokens) + (hi - lo) - n_ctx)
        shifts += 1
        window_targets = targets[(targets >= lo) & (targets < hi)] - lo
        parts.append(session.score(ids[lo:hi], window_targets, k))
    return TokenStats.concat(parts, k), shifts
