"""What counts as a failure: reward < threshold (default 1.0, the binary τ² reward's success).

agentuq's default threshold 0.0 labels nothing a failure; here failure is the positive class of
every failure-prediction metric, and the SAUP-HMM weights are failure rates.
"""
from __future__ import annotations

import numpy as np

DEFAULT_FAILURE_THRESHOLD = 1.0


def failure_labels(reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> np.ndarray:
    """Boolean array: ``reward < failure_threshold`` (NaN rewards are not failures)."""
    return np.asarray(reward, dtype=float) < float(failure_threshold)
