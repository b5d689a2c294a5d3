"""Several samples of one prompt decoded together by the embedded model (llama.cpp sequences in one batch).

``decode_together`` runs step-wise decoders (``local_provider.ChatDecoder``) over a
prompt the caller has already decoded in the model's main context (so the prefix cache
works as for ``generate``: successive decision points of one trajectory only decode
the new turn, and the first decision point of the next trajectory copies the domain's
system prompt and tools from the slot that holds them, see ``local_model``):

* **The prompt is copied, not decoded again.** Its keys/values are read out of the
  main context's cache slot once (``llama_state_seq_get_data``) and written into the
  first sample's sequence of a second context, the *parallel context*
  (``llama_state_seq_set_data``), then copied from there into the other samples'
  sequences (``llama_memory_seq_cp``: a buffer copy inside llama.cpp, where reading
  the state in again took ~0.18 s per sample for a 3,100-token prompt).
  ``llama_memory_seq_cp`` cannot do the first step: it only copies between sequences
  of one context, and between buffers (``kv_unified=False``) only whole buffers (its
  ``is_full`` assertion). Written into an empty buffer the prompt occupies the same
  cells as a fresh decode, so the numbers are the same.
* **One batch per step.** Every live sample contributes ``[token, pad]`` (two tokens,
  for the multi-token kernel path, see ``local_model``) to ONE ``llama_decode``; the
  weights are read once per step for all samples, which is where the time goes on a
  CPU. Pads are dropped from the cache after each step.
* **Separate buffers.** The parallel context, like the main one, keeps one KV buffer
  per sequence (``kv_unified=False``): in a unified buffer the attention spans masked
  cells of the other samples and the log-probs move by up to ~0.03 nats. So each
  sample's numbers equal those of ``generate`` with the same seed and of a
  teacher-forced ``score`` of its message (tested to 1e-3; tokens identical).
* **Steps that are not one token** (a tool call's canonical prefix after
  ``<tool_call>``, the teacher-forced rows of a finished call) are decoded for that
  sample alone, between batch steps.
* **Sequences stay contiguous.** llama.cpp splits a batch whose sequence ids have gaps
  into several compute passes (``split_equal`` keeps streams consecutive), so when a
  sample finishes, the highest live one is moved into its buffer (``llama_memory_seq_cp``
  of the whole buffer, a memcpy) and each step stays one pass.
* The prompt-lookup drafts of the sequential path are not used here: a guess per
  sample would double the batch for a gain only repetitive text sees.

Memory: the parallel context is created on first use with ``min(k, MAX_PARALLEL)``
buffers of ``n`` tokens each, where ``n`` is the prompt plus ``max_tokens`` plus
``ROOM_SLACK``, rounded up to ``CTX_STEP`` (at most the model's window); it only ever
grows (a larger request recreates it) and is freed with the model. For SmolLM2-135M a
cached token takes 30 layers x 2 (K, V) x 192 values x 2 bytes = 23,040 bytes, so
8 buffers of 8,192 tokens take 1.5 GB and 5 buffers of 5,120 tokens 0.59 GB. More
than ``MAX_PARALLEL`` samples run in several rounds over the same copied prompt.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from agentuq_nb.llm.local_model import (
    N_BATCH,
    STATS_BLOCK,
    ContextWindowError,
    GenerationCancelled,
    LocalModel,
    TokenStats,
    llama_cpp,
    logit_stats,
)

MAX_PARALLEL = 8  # sequences decoded in one batch (and KV buffers of the parallel context)
CTX_STEP = 1024  # buffer sizes are rounded up to this many tokens
ROOM_SLACK = 128  # room beyond prompt + max_tokens: a call's canonical body may re-tokenize longer


@dataclass
class Feed:
    """A decoder's request: keep the first ``keep`` tokens of its sequence (None: all), append ``tokens``,
    and hand back the logits of the last one."""

    tokens: list[int]
    keep: int | None = None


@dataclass
class Score:
    """A decoder's last request: keep ``keep`` tokens, append ``tokens`` and hand back their ``TokenStats``."""

    tokens: list[int]
    keep: int


class StepDecoder(Protocol):
    k: int

    def advance(self, logits: np.ndarray) -> Feed | Score | None: ...
    def scored(self, stats: TokenStats) -> None: ...
    def close(self) -> None: ...


class ParallelContext:
    """A llama.cpp context of ``n_seqs`` sequences with a KV buffer of ``n_ctx_seq`` tokens each."""

    def __init__(self, model: LocalModel, n_seqs: int, n_ctx_seq: int):
        self.model = model
        params = type(model.llama.context_params).from_buffer_copy(model.llama.context_params)
        params.n_ctx = n_ctx_seq * n_seqs
        params.n_seq_max = n_seqs
        params.n_batch = params.n_ubatch = max(N_BATCH, 2 * n_seqs)
        params.kv_unified = False  # a buffer per sequence: see the module docstring
        self.ctx = llama_cpp.llama_init_from_model(model.llama.model, params)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {n_seqs} x {n_ctx_seq} tokens")
        threads = model.n_threads_generate
        llama_cpp.llama_set_n_threads(self.ctx, threads, threads)
        self.n_seqs = n_seqs
        self.n_ctx_seq = llama_cpp.llama_n_ctx_seq(self.ctx)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(max(N_BATCH + 1, 2 * n_seqs), 0, 1)
        self.tokens: list[list[int]] = [[] for _ in range(n_seqs)]

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
            self.ctx = None

    def load(self, seq: int, state: "PromptState", tokens: list[int]) -> None:
        """Make sequence ``seq`` hold a cached prompt (``state`` from ``sequence_state``)."""
        llama_cpp.llama_memory_seq_rm(self.memory, seq, -1, -1)
        blob = state.for_streams(self.n_seqs)
        if not llama_cpp.llama_state_seq_set_data(self.ctx, blob, len(blob), seq):
            raise RuntimeError(f"llama.cpp could not load a {len(tokens)}-token prompt into sequence {seq}")
        self.tokens[seq] = list(tokens)

    def copy(self, src: int, dst: int) -> None:
        """Sequence ``dst`` becomes a copy of ``src`` (its whole buffer; llama.cpp copies it at the next decode,
        copies in the order they were asked for)."""
        llama_cpp.llama_memory_seq_rm(self.memory, dst, -1, -1)
        llama_cpp.llama_memory_seq_cp(self.memory, src, dst, -1, -1)
        self.tokens[dst] = list(self.tokens[src])

    def move(self, src: int, dst: int) -> None:
        """Sequence ``src`` becomes ``dst`` (its whole buffer is copied; ``src`` is emptied)."""
        self.copy(src, dst)
        llama_cpp.llama_memory_seq_rm(self.memory, src, -1, -1)
        self.tokens[src] = []

    def feed(self, seq: int, tokens: list[int], keep: int, rows: np.ndarray) -> list[np.ndarray]:
        """Keep ``keep`` tokens of ``seq``, append ``tokens``, return copies of the logits at ``rows``."""
        self._check_room(keep + len(tokens))
        llama_cpp.llama_memory_seq_rm(self.memory, seq, keep, -1)
        del self.tokens[seq][keep:]
        out: list[np.ndarray] = []
        for start in range(0, len(tokens), N_BATCH):
            chunk = tokens[start:start + N_BATCH]
            wanted = rows[(rows >= start) & (rows < start + len(chunk))] - start
            flags = np.zeros(len(chunk), dtype=bool)
            flags[wanted] = True
            entries = [(seq, tok, keep + start + j, bool(flags[j])) for j, tok in enumerate(chunk)]
            if len(chunk) == 1:  # a one-token batch takes another kernel: add a pad (see local_model)
                entries.append((seq, self.model.eos_id, keep + start + 1, False))
            self._decode(entries)
            out.extend(self._logits(i) for i in np.flatnonzero(flags))
            llama_cpp.llama_memory_seq_rm(self.memory, seq, keep + start + len(chunk), -1)
            self.tokens[seq].extend(chunk)
        return out

    def score(self, seq: int, tokens: list[int], keep: int, k: int) -> TokenStats:
        """Keep ``keep`` tokens of ``seq``, append ``tokens`` and return their stats (the first one
        predicted from the last kept token, which is decoded again as ``Session.score`` does)."""
        replay = [self.tokens[seq][keep - 1]]
        seq_tokens = replay + list(tokens)
        chosen = np.asarray(seq_tokens, dtype=np.int64)
        rows = np.arange(len(tokens))
        logits = self.feed(seq, seq_tokens, keep - 1, rows)
        parts = [logit_stats(np.stack(logits[b:b + STATS_BLOCK]), chosen[rows[b:b + STATS_BLOCK] + 1], k)
                 for b in range(0, len(rows), STATS_BLOCK)]
        return TokenStats.concat(parts, k)

    def step(self, seqs: list[int], tokens: list[int]) -> list[np.ndarray]:
        """Append one token to each of ``seqs`` in one batch; the logits after each (copies)."""
        for seq in seqs:
            self._check_room(len(self.tokens[seq]) + 2)
        pad = True
        entries = []
        for seq, tok in zip(seqs, tokens):
            pos = len(self.tokens[seq])
            entries += [(seq, tok, pos, True)] + ([(seq, self.model.eos_id, pos + 1, False)] if pad else [])
        self._decode(entries)
        out = [self._logits((2 if pad else 1) * i) for i in range(len(seqs))]
        for seq, tok in zip(seqs, tokens):
            self.tokens[seq].append(tok)
            llama_cpp.llama_memory_seq_rm(self.memory, seq, len(self.tokens[seq]), -1)  # the pad
        return out

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        batch = self.batch
        batch.n_tokens = len(entries)
        for j, (seq, tok, pos, wanted) in enumerate(entries):
            batch.token[j] = tok
            batch.pos[j] = pos
            batch.n_seq_id[j] = 1
            batch.seq_id[j][0] = seq
            batch.logits[j] = int(wanted)
        code = llama_cpp.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed with code {code} (parallel context, {len(entries)} tokens)")

    def _logits(self, batch_index: int) -> np.ndarray:
        ptr = llama_cpp.llama_get_logits_ith(self.ctx, int(batch_index))
        return np.ctypeslib.as_array(ptr, shape=(self.model.n_vocab,)).copy()

    def _check_room(self, n: int) -> None:
        if n > self.n_ctx_seq:
            raise ContextWindowError(n, self.n_ctx_seq)


def parallel_context(model: LocalModel, n_seqs: int, n_tokens: int) -> ParallelContext:
    """The model's parallel context (``model.parallel``), (re)created when it has fewer than ``n_seqs``
    buffers of ``n_tokens``; call with the model's lock held."""
    n_seqs = min(n_seqs, MAX_PARALLEL)
    n_ctx_seq = min(model.n_ctx, -(-(n_tokens + ROOM_SLACK) // CTX_STEP) * CTX_STEP)
    current = model.parallel
    if current is not None and current.n_seqs >= n_seqs and current.n_ctx_seq >= n_ctx_seq:
        return current
    if current is not None:
        n_seqs, n_ctx_seq = max(n_seqs, current.n_seqs), max(n_ctx_seq, current.n_ctx_seq)
        current.close()
        model.parallel = None
    model.parallel = ParallelContext(model, n_seqs, n_ctx_seq)
    return model.parallel


@dataclass
class PromptState:
    """A cached prompt's keys/values in llama.cpp's serialization, re-addressable to any context.

    ``llama_state_seq_get_data`` writes ``header, n_stream, then per buffer: cell count
    [, cells]`` and ``llama_state_seq_set_data`` refuses a state whose ``n_stream`` differs
    from its context's ("n_stream mismatch") although a one-sequence state has cells in
    one buffer only, which it reads into the target sequence's buffer. So the one
    non-empty section is kept (``section``) and wrapped for the target (``for_streams``).
    """

    header: bytes
    section: bytes
    n_tokens: int

    def for_streams(self, n_stream: int) -> ctypes.Array:
        blob = self.header + np.uint32(n_stream).tobytes() + self.section + bytes(4 * (n_stream - 1))
        return (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)


def sequence_state(model: LocalModel, seq: int, n_tokens: int, n_stream: int) -> PromptState:
    """The cached keys/values of sequence ``seq`` (``n_tokens`` cells) of the model's main context."""
    size = llama_cpp.llama_state_seq_get_size(model.ctx, seq)
    buffer = (ctypes.c_uint8 * size)()
    if llama_cpp.llama_state_seq_get_data(model.ctx, buffer, size, seq) != size:
        raise RuntimeError(f"llama.cpp could not serialize sequence {seq}'s cache")
    raw = bytes(buffer)
    words = np.frombuffer(raw[: len(raw) // 4 * 4], dtype=np.uint32)
    for at in range(0, 5):  # the header is a few words; then n_stream and the buffers' cell counts
        if at + 1 + seq < len(words) and words[at] == n_stream and words[at + 1 + seq] == n_tokens \
                and not words[at + 1:at + 1 + seq].any() and not raw[len(raw) - 4 * (n_stream - 1 - seq):].strip(b"\0"):
            start, end = 4 * (at + 1 + seq), len(raw) - 4 * (n_stream - 1 - seq)
            return PromptState(raw[: 4 * at], raw[start:end], n_tokens)
    raise RuntimeError(f"unexpected layout of llama.cpp's sequence state ({size} bytes, {n_tokens} cells, "
                       f"{n_stream} buffers): this llama-cpp-python version is not supported for batched sampling")


def decode_together(parallel: ParallelContext, decoders: list[StepDecoder], prompt: list[int],
                    state: PromptState, logits: np.ndarray, cancelled: threading.Event | None = None) -> None:
    """Run up to ``parallel.n_seqs`` decoders from a prompt whose cache is ``state`` and last logits ``logits``.

    Sequence ``i`` of the parallel context serves ``decoders[i]`` (until a finished one's
    buffer is taken over, see the module docstring); the decoders are closed on return.
    """
    if len(decoders) > parallel.n_seqs:
        raise ValueError(f"{len(decoders)} decoders for a parallel context of {parallel.n_seqs} sequences")
    try:
        parallel.load(0, state, prompt)
        for seq in range(1, len(decoders)):  # a buffer copy each instead of reading the state again
            parallel.copy(0, seq)
        pending = {i: d.advance(logits) for i, d in enumerate(decoders)}
        pending = {i: r for i, r in pending.items() if r is not None}
        where = {i: i for i in pending}  # decoder -> its sequence
        while pending:
            if cancelled is not None and cancelled.is_set():
                raise GenerationCancelled("the request was cancelled (its client disconnected)")
            for i in list(pending):  # requests other than "append one token": this sample alone
                request = pending[i]
                while request is not None and request.keep is not None:
                    if isinstance(request, Score):
                        decoders[i].scored(parallel.score(where[i], request.tokens, request.keep, decoders[i].k))
                        request = None
                    else:
                        last = np.array([len(request.tokens) - 1])
                        (row,) = parallel.feed(where[i], request.tokens, request.keep, last)
                        request = decoders[i].advance(row)
                pending[i] = request
            _finish(parallel, pending, where)
            if not pending:
                break
            order = sorted(pending, key=where.__getitem__)
            rows = parallel.step([where[i] for i in order], [pending[i].tokens[0] for i in order])
            for i, row in zip(order, rows):
                pending[i] = decoders[i].advance(row)
            _finish(parallel, pending, where)
    finally:
        for decoder in decoders:
            decoder.close()


def _finish(parallel: ParallelContext, pending: dict, where: dict) -> None:
    """Drop finished decoders; move live sequences from above the live count into the freed slots (no gaps)."""
    for i in [i for i, r in pending.items() if r is None]:
        del pending[i]
        parallel.tokens[where.pop(i)] = []
    n_live = len(pending)
    free = sorted(set(range(n_live)) - set(where.values()))
    for i in sorted((i for i in pending if where[i] >= n_live), key=where.__getitem__):
        slot = free.pop(0)
        parallel.move(where[i], slot)
        where[i] = slot
