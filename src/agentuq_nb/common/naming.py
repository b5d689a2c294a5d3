"""The one way a value becomes part of a file name, a study name or a task key: :func:`slug`."""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

#: characters a slug keeps as they are (a class of ``re``); every run of other characters becomes one ``_``
SAFE = r"A-Za-z0-9_.\-"


@lru_cache(maxsize=8)
def _unsafe(keep: str) -> re.Pattern:
    return re.compile(f"[^{SAFE}{''.join(re.escape(c) for c in keep)}]+")


def slug(value: Any, keep: str = "") -> str:
    """``value`` as text with every run of characters outside ``[A-Za-z0-9_.-]`` (plus ``keep``)
    replaced by one ``_``: ``slug("openai/gpt-4.1")`` → ``"openai_gpt-4.1"``."""
    return _unsafe(keep).sub("_", str(value))
