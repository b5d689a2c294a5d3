"""A file shipped inside an installed distribution package, found through the files its RECORD lists (the package is
never imported): the embedded model's GGUF (``llm.local_model``) and the bundled MiniLM (``uq.bundled_minilm``)."""
from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path


def installed_file(package: str, matches: Callable[[importlib.metadata.PackagePath], bool]) -> Path | None:
    """The first file of the installed ``package`` that ``matches`` and exists on disk; None when it carries none.
    Raises :class:`importlib.metadata.PackageNotFoundError` when ``package`` is not installed."""
    for f in importlib.metadata.files(package) or []:
        if matches(f):
            path = Path(f.locate())
            if path.exists():
                return path
    return None
