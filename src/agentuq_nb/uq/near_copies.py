"""Near-copies of trajectories: which trajectories of one set repeat, whole or nearly, a trajectory of another.

A detector judged on a run it was trained on - or on a copy of one with a few messages edited - scores what it has
seen: the fingerprint (:func:`~agentuq_nb.uq.detector_features.fingerprint`) finds exact copies only. Here a
trajectory is its set of 5-word shingles (:data:`SHINGLE_WORDS` consecutive words of its messages' roles, contents and
tool calls, case-folded) summarized by a MinHash signature of :data:`NUM_HASHES` values (Broder 1997): the share of
equal values between two signatures estimates the Jaccard similarity of their shingle sets (standard error
√(J(1-J)/64) ≈ 0.05 at J = 0.8). Two trajectories are **near-copies** when that estimate is at least
:data:`NEAR_COPY_JACCARD`; candidate pairs are found by banding the signatures (16 bands of 4 values: a pair at
J = 0.8 shares a band with probability 0.9998, at J = 0.3 with 0.12), then compared on the whole signature.

The threshold, measured on the ten shared real runs (400 trajectories, benchmarks/RESULTS.md): between trajectories
of *different* runs the exact Jaccard reaches 0.80 for 6 of 400 trajectories (two telecom solo-mode runs, where
different agents call the same tools and read the same outputs) and never 0.85; a copy with two words changed in
each of three messages keeps 0.83-0.97 (median 0.91-0.96 by run). Written with numpy because no MinHash library is
installed (datasketch would be the one); the hashes are stable across processes and machines (a signature is stored
in a detector folder and compared by ``predict`` elsewhere).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd

SHINGLE_WORDS = 5
NUM_HASHES = 64
BANDS = 16
NEAR_COPY_JACCARD = 0.8
#: at most this many trajectories of one band bucket are paired with a query (a bound on the pairs compared when a
#: reference holds many near-identical trajectories; each of them then still meets the query in its other bands)
MAX_BUCKET = 256
_WORD = re.compile(r"\w+")
_rng = np.random.default_rng(20260511)  # fixed: the same hash functions in every process
_A = _rng.integers(0, np.iinfo(np.uint64).max, NUM_HASHES, dtype=np.uint64, endpoint=True) | np.uint64(1)
_B = _rng.integers(0, np.iinfo(np.uint64).max, NUM_HASHES, dtype=np.uint64, endpoint=True)


def trajectory_words(messages: Iterable) -> list[str]:
    """The words a trajectory's shingles are made of: each message's role, then its content's and tool calls' words."""
    words: list[str] = []
    for m in messages:
        calls = getattr(m, "tool_calls", None) or []
        text = (getattr(m, "content", None) or "")
        if calls:
            text += " " + json.dumps([[c.name, c.arguments] for c in calls], sort_keys=True, default=str)
        words.append(str(getattr(m, "role", "")))
        words.extend(_WORD.findall(text.casefold()))
    return words


def signature(messages: Iterable) -> np.ndarray:
    """The MinHash signature (``NUM_HASHES`` uint32) of a trajectory's shingle set (module docstring)."""
    words = trajectory_words(messages)
    if not words:
        return np.full(NUM_HASHES, np.iinfo(np.uint32).max, dtype=np.uint32)
    h = pd.util.hash_array(np.asarray(words, dtype=object), categorize=False).astype(np.uint64)  # stable SipHash
    k = min(SHINGLE_WORDS, len(h))
    shingles = np.zeros(len(h) - k + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):  # a polynomial over the shingle's word hashes (uint64 wraps around)
            shingles = shingles * np.uint64(1_000_003) + h[j:len(h) - k + 1 + j]
        x = np.unique(shingles)
        # multiply-shift hashing (Dietzfelbinger et al. 1997): (a·x + b) mod 2^64, its high 32 bits, a odd
        values = (_A[:, None] * x[None, :] + _B[:, None]) >> np.uint64(32)
    return values.min(axis=1).astype(np.uint32)


def signatures(trajectories: Iterable[Iterable]) -> np.ndarray:
    """One signature per trajectory (each an iterable of messages): ``(n, NUM_HASHES)`` uint32."""
    rows = [signature(t) for t in trajectories]
    return np.vstack(rows) if rows else np.zeros((0, NUM_HASHES), dtype=np.uint32)


def _band_keys(sig: np.ndarray) -> np.ndarray:
    """``(n, BANDS)`` uint64: a hash of each band of ``NUM_HASHES // BANDS`` values."""
    r = NUM_HASHES // BANDS
    parts = sig.astype(np.uint64).reshape(len(sig), BANDS, r)
    key = np.zeros((len(sig), BANDS), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(r):
            key = key * np.uint64(0x9E3779B97F4A7C15) + parts[:, :, j] + np.uint64(j + 1)
    return key


@dataclass
class Matches:
    """For each query trajectory: ``similarity`` (the estimated Jaccard of its closest reference trajectory among the
    candidates; 0 with none) and ``reference`` (that trajectory's row, -1 with none)."""

    similarity: np.ndarray
    reference: np.ndarray

    def near(self, threshold: float = NEAR_COPY_JACCARD) -> np.ndarray:
        return self.similarity >= threshold


def closest(query: np.ndarray, reference: np.ndarray, exclude_same: np.ndarray | None = None,
            query_groups: np.ndarray | None = None) -> Matches:
    """The closest reference trajectory of each query one (:class:`Matches`). ``query_groups`` and ``exclude_same``
    (one label per query and per reference row): pairs of the same label are not compared (a run against itself)."""
    query = np.asarray(query, dtype=np.uint32).reshape(-1, NUM_HASHES)
    reference = np.asarray(reference, dtype=np.uint32).reshape(-1, NUM_HASHES)
    best = np.zeros(len(query))
    which = np.full(len(query), -1, dtype=np.int64)
    if not len(query) or not len(reference):
        return Matches(best, which)
    qk, rk = _band_keys(query), _band_keys(reference)
    pairs = []
    for b in range(BANDS):
        ref = pd.DataFrame({"key": rk[:, b], "ref": np.arange(len(reference))})
        ref = ref[ref.groupby("key").cumcount() < MAX_BUCKET]
        q = pd.DataFrame({"key": qk[:, b], "query": np.arange(len(query))})
        pairs.append(q.merge(ref, on="key")[["query", "ref"]].to_numpy())
    both = np.unique(np.vstack(pairs), axis=0) if pairs else np.zeros((0, 2), dtype=np.int64)
    if exclude_same is not None and query_groups is not None and len(both):
        keep = np.asarray(query_groups, dtype=object)[both[:, 0]] != np.asarray(exclude_same, dtype=object)[both[:, 1]]
        both = both[keep]
    for start in range(0, len(both), 1 << 16):  # the pairs' similarities, a chunk at a time (bounded memory)
        part = both[start:start + (1 << 16)]
        sim = (query[part[:, 0]] == reference[part[:, 1]]).mean(axis=1)
        order = np.lexsort((-sim, part[:, 0]))  # per query, its most similar pair first
        part, sim = part[order], sim[order]
        first = np.r_[True, part[1:, 0] != part[:-1, 0]]
        q, s, r = part[first, 0], sim[first], part[first, 1]
        better = s > best[q]
        best[q[better]], which[q[better]] = s[better], r[better]
    return Matches(best, which)


def near_copy_runs(sig: np.ndarray, runs: np.ndarray, threshold: float = NEAR_COPY_JACCARD) -> pd.DataFrame:
    """For each run: ``n`` trajectories, ``near_copies`` (how many are near-copies of a trajectory of *another* run),
    ``of_run`` (the other run most of them copy) and ``of_run_count``, ``share`` - what leave-one-run-out must say
    (a held-out run that nearly duplicates a training run is not unseen)."""
    runs = np.asarray(runs, dtype=object)
    matches = closest(sig, sig, exclude_same=runs, query_groups=runs)
    near = matches.near(threshold)
    rows = []
    for run in dict.fromkeys(runs):
        mine = runs == run
        hit = mine & near
        of = pd.Series(runs[matches.reference[hit]]).value_counts() if hit.any() else pd.Series(dtype=int)
        rows.append({"run": str(run), "n": int(mine.sum()), "near_copies": int(hit.sum()),
                     "share": float(hit.sum() / max(1, mine.sum())),
                     "of_run": str(of.index[0]) if len(of) else None, "of_run_count": int(of.iloc[0]) if len(of) else 0})
    return pd.DataFrame(rows)
