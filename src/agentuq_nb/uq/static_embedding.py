"""all-MiniLM-L6-v2 distilled into a static table: the black-box signals' embeddings (``embedder="minilm-static"``).

A 50-trajectory real run holds ~1,000 distinct texts and ~80,000 word pieces; the transformer costs ~21 MFLOP a piece,
so a first read of a run takes ~57 CPU-s however the work is batched or cached (benchmarks/RESULTS.md, issue 38).
A static model does that transformer's work once per *vocabulary* instead of once per text (Model2Vec, Tulkens & van
Dongen 2024): every word piece of MiniLM's vocabulary goes through MiniLM once, as ``[CLS] piece [SEP]``, mean-pooled
as the model pools; the 30,522 × 384 outputs (the ``[unused…]`` placeholders left out) are reduced by PCA to
:data:`DIMS` dimensions and each row weighted by SIF with Zipf's law on the piece's rank (``a / (a + p(rank))``,
``a`` = :data:`SIF_COEFFICIENT`), as Model2Vec's ``distill`` does with its defaults. A text is then the normalised
mean of its pieces' rows (model2vec's :class:`~model2vec.StaticModel`): ~1,700 texts in 0.25 s, against ~60 s.

The distillation is written here, not called from ``model2vec.distill``, because that extra pins
``transformers<5.4``, which this project's sentence-transformers stack is past; it takes ~25 s on 2 cores, once per
machine (``make setup`` does it), and the table is kept as a file (:mod:`agentuq_nb.io.static_table`: checked, never
unpickled) beside the embedding cache. With the cache off it is distilled in memory, once per process.

What it changes: the vectors are not MiniLM's (a static model knows no word order or context), and the texts are read
whole (up to :data:`MAX_TOKENS` pieces; MiniLM reads 128). The AUROCs of the signals built on them, on the ten shared
real runs, pooled with task-resampled intervals, are in benchmarks/RESULTS.md beside MiniLM's; ``embedder="minilm"``
keeps the transformer.
"""
from __future__ import annotations

import os
import re
import threading
import time
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np

from agentuq_nb.common.offline import ensure_offline_env
from agentuq_nb.common.progress import progress_bar
from agentuq_nb.io.embedding_cache import cache_path
from agentuq_nb.io.static_table import StaticTableWarning, read_table, table_path, write_table
from agentuq_nb.uq.bundled_minilm import bundled_model_path, model_identity, sentence_model

#: dimensions the distilled table keeps (PCA), Model2Vec's default
DIMS = 256
#: SIF weighting's ``a``, Model2Vec's default
SIF_COEFFICIENT = 1e-4
#: word pieces of a text read (bounds the memory of one text: a piece costs DIMS floats while it is averaged)
MAX_TOKENS = 8192
#: vocabulary entries left out of the table (zero rows): placeholders no text contains
UNUSED = re.compile(r"\[unused\d+\]")
#: pieces a batch of the distillation forwards
BATCH = 1024
METHOD = f"static;[CLS] piece [SEP] mean-pooled;unused dropped;pca={DIMS};sif={SIF_COEFFICIENT};zipf by id"
_lock = threading.Lock()
#: seconds of each distillation this process made (the one-off cost a caller may want to say apart from its own work)
DISTILLATIONS: list[float] = []


@lru_cache(maxsize=1)
def table_identity() -> str:
    """What names a distilled table: the bundled model's identity and the distillation's settings."""
    return f"{model_identity()};{METHOD}"


def vocabulary_size() -> int:
    """Word pieces in the bundled model's vocabulary (from its vocab.txt, no load)."""
    with open(bundled_model_path() / "vocab.txt", encoding="utf-8") as f:
        return sum(1 for _ in f)


def distilled_pieces() -> np.ndarray:
    """The ids of the vocabulary's word pieces that get a row (every piece but the :data:`UNUSED` placeholders), in
    id order: the order of the Zipf ranks of the SIF weighting."""
    with open(bundled_model_path() / "vocab.txt", encoding="utf-8") as f:
        return np.array([i for i, line in enumerate(f) if not UNUSED.fullmatch(line.rstrip("\n"))], dtype=np.int64)


def piece_outputs(ids: np.ndarray, progress: bool = False) -> np.ndarray:
    """MiniLM's output for each word piece of ``ids``, as ``[CLS] piece [SEP]`` mean-pooled (the distillation's
    forward pass, :data:`BATCH` pieces at a time): (len(ids), 384) float32."""
    import torch

    ensure_offline_env()
    model = sentence_model()
    tokenizer = model.tokenizer
    bert = model[0].auto_model.eval()
    outputs = np.zeros((len(ids), bert.config.hidden_size), np.float32)
    with torch.inference_mode(), progress_bar(len(ids), "distilling MiniLM (once)", "piece", progress) as bar:
        for start in range(0, len(ids), BATCH):
            part = torch.from_numpy(np.asarray(ids[start:start + BATCH], dtype=np.int64))
            inputs = torch.stack([torch.full_like(part, tokenizer.cls_token_id), part,
                                  torch.full_like(part, tokenizer.sep_token_id)], dim=1)
            hidden = bert(input_ids=inputs, attention_mask=torch.ones_like(inputs),
                          token_type_ids=torch.zeros_like(inputs)).last_hidden_state
            outputs[start:start + len(part)] = hidden.mean(dim=1).float().numpy()
            bar.update(len(part))
    return outputs


def sif_weights(n_pieces: int) -> np.ndarray:
    """SIF's ``a / (a + p(rank))`` of each of ``n_pieces`` pieces, ``p`` Zipf's law on the rank (the piece's place in
    :func:`distilled_pieces`)."""
    proba = 1.0 / np.arange(2, n_pieces + 2)
    proba /= proba.sum()
    return SIF_COEFFICIENT / (SIF_COEFFICIENT + proba)


def distill_table(progress: bool = False) -> np.ndarray:
    """The (vocabulary, :data:`DIMS`) float32 table of the module docstring, computed with the bundled MiniLM: the
    :func:`piece_outputs` of the :func:`distilled_pieces`, reduced by PCA over all of them, weighted by
    :func:`sif_weights`."""
    from sklearn.decomposition import PCA

    ids = distilled_pieces()
    outputs = piece_outputs(ids, progress)
    reduced = PCA(n_components=DIMS, svd_solver="full").fit_transform(np.nan_to_num(outputs))
    table = np.zeros((vocabulary_size(), DIMS), np.float32)
    table[ids] = reduced * sif_weights(len(ids))[:, None]
    return table


def load_table(cache: str | os.PathLike | None = None, progress: bool = False) -> np.ndarray:
    """The distilled table: read from its file beside the embedding cache (``cache`` as
    :func:`~agentuq_nb.io.embedding_cache.cache_path` takes it), else distilled (and written there)."""
    identity, shape = table_identity(), (vocabulary_size(), DIMS)
    path = table_path(cache_path(cache), identity)
    with _lock:
        table = read_table(path, identity, shape) if path is not None else None
        if table is None:
            start = time.perf_counter()
            table = distill_table(progress)
            DISTILLATIONS.append(time.perf_counter() - start)
            if path is not None and not os.path.lexists(path):  # a refused file stays as it is
                try:
                    write_table(path, table, identity)
                except OSError as err:  # a read-only cache folder: the table serves this process only
                    warnings.warn(f"{path}: the static embedding table could not be kept ({err}); it is distilled "
                                  "again by the next process", StaticTableWarning, stacklevel=2)
    return table


class StaticEmbedder:
    """Unit vectors of texts from the distilled table (see the module docstring), each text read whole up to
    ``max_tokens`` word pieces; an empty text (or one of no known piece) is the zero vector."""

    def __init__(self, table: np.ndarray, max_tokens: int = MAX_TOKENS):
        from model2vec import StaticModel
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.model = StaticModel(vectors=table, tokenizer=tokenizer, normalize=True, max_length=max_tokens)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not len(texts):
            return np.zeros((0, DIMS), np.float32)
        return np.asarray(self.model.encode(list(texts), show_progress_bar=False), dtype=np.float32)


_defaults: dict[Path | None, StaticEmbedder] = {}


def static_embedder(cache: str | os.PathLike | None = None, progress: bool = False) -> StaticEmbedder:
    """The process's static embedder for the table kept beside ``cache`` (loaded, or distilled, once)."""
    key = cache_path(cache)
    if key not in _defaults:
        _defaults[key] = StaticEmbedder(load_table(cache, progress))
    return _defaults[key]


def main() -> None:
    """``make setup``: distil the table once per machine (or check the kept one), and say where it is."""
    start = time.perf_counter()
    table = load_table(progress=True)
    path = table_path(cache_path(None), table_identity())
    print(f"static MiniLM table {table.shape[0]:,}×{table.shape[1]} ready in {time.perf_counter() - start:.1f} s"
          + (f": {path}" if path is not None else " (embedding cache off: kept in memory only)"))


if __name__ == "__main__":
    main()
