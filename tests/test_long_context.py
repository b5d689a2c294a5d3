"""Scoring conversations longer than the context window: context shift, each token decoded once.

Small windows (``LocalModel(n_ctx=...)``) keep these fast; the real 8192-token case is timed by
``benchmarks/bench_observation.py --trajectories``.
"""
from __future__ import annotations

import math

import llama_cpp
import numpy as np
import pytest
from scipy.special import log_softmax

from agentuq_nb.llm.chat_format import SMOLLM2_CHAT
from agentuq_nb.llm.local_model import LocalModel
from agentuq_nb.llm.local_scoring import score_segments

SHORT = [{"role": "system", "content": "You are a customer service agent for an airline. Follow the policy."},
         {"role": "user", "content": "Hi, I need to change my flight to Boston on May 3."},
         {"role": "assistant", "content": "Sure. Could you give me your reservation number?"},
         {"role": "user", "content": "It is ZFA04Y."}]
STORY = " ".join(f"Step {i}: the robot mixes paint number {i} with {i % 7} drops of oil." for i in range(40))
LONG = [{"role": "system", "content": "You are a painter who explains every step."},
        {"role": "user", "content": "Tell me how you paint."},
        {"role": "assistant", "content": STORY},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "Then I let it dry for " + " and ".join(f"{i} hours" for i in range(30))}]


def flat(scored) -> np.ndarray:
    return np.array([t.logprob for i in sorted(scored.tokens) for t in scored.tokens[i]])


@pytest.fixture(scope="module")
def small():
    model = LocalModel(n_ctx=256)
    yield model
    model.close()


@pytest.fixture(scope="module")
def medium():
    model = LocalModel(n_ctx=1024)
    yield model
    model.close()


def test_a_conversation_that_fits_keeps_its_numbers_bit_for_bit(medium):
    segments = SMOLLM2_CHAT.render(SHORT)
    cold = flat(score_segments(segments, model=medium))
    warm = flat(score_segments(segments, model=medium))  # the whole conversation is cached now
    fresh_model = LocalModel(n_ctx=1024, prefix_cache=False)
    try:
        fresh = flat(score_segments(segments, model=fresh_model))
    finally:
        fresh_model.close()
    assert np.array_equal(cold, warm) and np.array_equal(cold, fresh)
    # an independent path on this machine: llama-cpp-python's own eval of the whole conversation (one
    # multi-token batch, every row's logits) and scipy's log-softmax. (Constants stored on another
    # machine would not do: llama.cpp compiles for the host CPU; values stored by an earlier session
    # differed by up to 0.15 nats on an AVX-512 machine.)
    ids, scored = [], []
    for seg in segments:
        seg_ids = medium.tokenize(seg.text, special=seg.special)
        ids += seg_ids
        scored += [seg.message_idx is not None] * len(seg_ids)
    targets = np.flatnonzero(scored)
    reference = llama_cpp.Llama(model_path=str(medium.path), n_ctx=1024, n_batch=512, n_ubatch=512,
                                logits_all=True, verbose=False)
    try:
        reference.eval(ids)
        logprobs = log_softmax(np.asarray(reference.scores[:len(ids)], dtype=np.float64), axis=1)
    finally:
        reference.close()
    assert len(cold) == len(targets) > 20
    np.testing.assert_allclose(cold, logprobs[targets - 1, np.asarray(ids)[targets]], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_context_shift_scores_every_token_once_with_the_system_prompt_pinned(small, medium):
    segments = SMOLLM2_CHAT.render(LONG)
    ids = [t for seg in segments for t in small.tokenize(seg.text, special=seg.special)]
    n_pinned = len(small.tokenize(segments[0].text, special=segments[0].special))
    assert segments[0].pinned and n_pinned < small.n_ctx // 2
    decoded = []
    real_decode = small._decode

    def counting_decode(seq, tokens, n_past, out_rows, *rest):
        decoded.append((n_past, len(tokens)))
        return real_decode(seq, tokens, n_past, out_rows, *rest)

    small._decode = counting_decode
    try:
        windowed = score_segments(segments, model=small)
    finally:
        del small._decode
    full = score_segments(segments, model=medium)
    assert len(ids) > 2 * small.n_ctx and full.truncations == 0
    stride = (small.n_ctx - n_pinned) // 2
    assert windowed.truncations == math.ceil((len(ids) - small.n_ctx) / stride)
    # every message body scored once, token by token
    for idx in range(1, len(LONG)):
        assert len(windowed.tokens[idx]) == len(full.tokens[idx]) == len(small.tokenize(LONG[idx]["content"]))
    # each token decoded once (plus, per shift, the token before a window if it predicts a target)
    assert sum(n for _, n in decoded) <= len(ids) + windowed.truncations
    # never past the window; the system prompt is decoded once, at positions 0..n_pinned-1
    assert all(n_past + n <= small.n_ctx for n_past, n in decoded)
    assert all(n_past >= n_pinned for n_past, _ in decoded[1:])
    # the first window sees what a full-context pass sees: identical numbers
    a, b = flat(windowed), flat(full)
    first = small.n_ctx - n_pinned - 30  # well inside the first window (targets skip scaffolding)
    assert np.array_equal(a[:first], b[:first])
    assert not np.array_equal(a, b)  # later tokens lost context
    # the slot keeps the system prompt, positions contiguous from 0 (renumbered after each shift)
    slot = next(s for s, cached in enumerate(small._slots) if -1 in cached)
    assert small._slots[slot][:n_pinned] == ids[:n_pinned]
    memory = llama_cpp.llama_get_memory(small.ctx)
    assert llama_cpp.llama_memory_seq_pos_min(memory, slot) == 0
    assert llama_cpp.llama_memory_seq_pos_max(memory, slot) == small.n_ctx - 1


@pytest.mark.slow
def test_shifted_cache_entries_are_never_reused(small):
    """After a context shift the kept keys were rotated, not decoded: a later request that starts
    with the same tokens must get the numbers of a fresh decode, not reuse them."""
    segments = SMOLLM2_CHAT.render(LONG)
    ids = [t for seg in segments for t in small.tokenize(seg.text, special=seg.special)]
    n_pinned = len(small.tokenize(segments[0].text, special=segments[0].special))
    score_segments(segments, model=small)
    kept = ids[:n_pinned] + ids[len(ids) - (small.n_ctx - n_pinned):][:120]  # what the shifted slot holds
    targets = np.arange(len(kept) - 20, len(kept))  # the tokens before them may come from the cache
    with small.session() as session:
        again = session.score(kept, targets, 5)
    fresh_model = LocalModel(n_ctx=256, prefix_cache=False)
    try:
        with fresh_model.session() as session:
            fresh = session.score(kept, targets, 5)
    finally:
        fresh_model.close()
    assert np.array_equal(again.chosen_logprob, fresh.chosen_logprob)
    assert np.array_equal(again.topk_ids, fresh.topk_ids)
