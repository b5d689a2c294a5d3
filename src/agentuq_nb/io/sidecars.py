"""agentuq-compatible sidecar JSONL files: one token row per line, one file per trajectory."""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agentuq_nb.io.atomic import atomic_open


def _component(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value))


def sidecar_name(domain: str, task_id: str, trial: int | None, seed: int | None) -> str:
    """agentuq's file name: ``logprobs_{domain}_{task_id}_trial{t}_seed{s}.jsonl``."""
    trial_s = f"trial{trial}" if trial is not None else "trialNA"
    seed_s = f"seed{seed}" if seed is not None else "seedNA"
    return f"logprobs_{_component(domain)}_{_component(task_id)}_{trial_s}_{seed_s}.jsonl"


def _jsonable(value: Any) -> Any:
    # NaN/inf are not JSON; agentuq writes null for a missing value, so do we.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_sidecar(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write token rows to ``path`` atomically; returns the number of rows written."""
    n = 0
    with atomic_open(path, "w") as fh:
        for row in rows:
            fh.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, ensure_ascii=False))
            fh.write("\n")
            n += 1
    return n
