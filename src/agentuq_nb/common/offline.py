"""Environment defaults that keep every run offline-capable.

litellm fetches a model price list at import unless told otherwise, and the
Hugging Face hub would try the network when sentence-transformers loads a
model; neither is reachable (or wanted) in a reproducible study, so both are
switched off before anything imports them. A user can still override them
by setting the variables explicitly.
"""
import os

OFFLINE_DEFAULTS = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # "Loading weights" bars of transformers 5 on every model load
    "TOKENIZERS_PARALLELISM": "false",
}


def ensure_offline_env() -> None:
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)
