"""Environment defaults that keep every run offline-capable.

litellm fetches a model price list at import unless told otherwise, and the
Hugging Face hub would try the network when sentence-transformers loads a
model; neither is reachable (or wanted) in a reproducible study, so both are
switched off before anything imports them. A user can still override them
by setting the variables explicitly.

tiktoken downloads its encodings at first use (Inspect AI counts tokens with
``o200k_base``, so offline an Inspect eval fails at its first sample); litellm ships
them in its package under tiktoken's cache names, so ``TIKTOKEN_CACHE_DIR`` points
there unless the user set it (found without importing litellm, which takes seconds).
"""
import importlib.util
import os
from pathlib import Path

OFFLINE_DEFAULTS = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # "Loading weights" bars of transformers 5 on every model load
    "TOKENIZERS_PARALLELISM": "false",
}


LITELLM_ENCODINGS = ("litellm_core_utils", "tokenizers")  # litellm's bundled tiktoken files, under its package


def bundled_tiktoken_dir() -> str | None:
    """litellm's folder of tiktoken encodings (None where litellm or the folder is not there)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))).joinpath(*LITELLM_ENCODINGS)
    return str(folder) if folder.is_dir() else None


def ensure_offline_env() -> None:
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)
    if "TIKTOKEN_CACHE_DIR" not in os.environ and (folder := bundled_tiktoken_dir()) is not None:
        os.environ["TIKTOKEN_CACHE_DIR"] = folder
