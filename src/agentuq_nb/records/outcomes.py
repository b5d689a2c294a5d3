"""What counts as a failure: reward < threshold (default 1.0, the binary τ² reward's success).

agentuq's default threshold 0.0 labels nothing a failure; here failure is the positive class of
every failure-prediction metric, and the SAUP-HMM weights are failure rates.
"""
from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from pydantic import BeforeValidator

DEFAULT_FAILURE_THRESHOLD = 1.0


def failure_labels(reward, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> np.ndarray:
    """Boolean array: ``reward < failure_threshold`` (NaN rewards are not failures); a threshold that
    is not a finite number is refused (NaN would label nothing a failure, silently)."""
    check_failure_threshold(failure_threshold)
    return np.asarray(reward, dtype=float) < float(failure_threshold)


def finite_failure_threshold(value: object) -> float:
    """``value`` as a failure threshold (a config field's validator): refused with :func:`check_failure_threshold`'s
    words unless it is a finite number."""
    check_failure_threshold(value)
    return float(value)


#: the type of a config's failure-threshold field: a finite number, else refused saying what a threshold is
FailureThreshold = Annotated[float, BeforeValidator(finite_failure_threshold)]


def check_failure_threshold(failure_threshold: float) -> None:
    """A failure is ``reward < failure_threshold``: only a finite number makes that a split."""
    try:
        finite = math.isfinite(float(failure_threshold))
    except (TypeError, ValueError):
        finite = False
    if not finite:
        raise ValueError(f"failure threshold {failure_threshold!r} is not a finite number: failure is "
                         "reward < threshold, e.g. --failure-threshold 1.0 (a reward below 1 is a failure)")
