"""What made a page or a record: the package version, the command, its settings and the content hashes of its inputs
(``report.html`` of ``analyze`` and ``compare-runs``, a study's ``findings.json``), in one shape."""
from __future__ import annotations

import os
from pathlib import Path


def package_version() -> str:
    """The installed agentuq_nb's version (its distribution's metadata, which pyproject.toml's ``version`` makes);
    ``0+not-installed`` when it runs from a source tree that was never installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("agentuq_nb")
    except importlib.metadata.PackageNotFoundError:
        return "0+not-installed"


def provenance(command: str, settings: dict, inputs: dict) -> dict:
    """``{"agentuq_nb": version, "command", "settings", "inputs"}``: ``settings`` the options the output depends on,
    ``inputs`` what it was read from with their SHA-256 (:func:`file_digest`, or a run's recorded
    ``results_sha256``)."""
    return {"agentuq_nb": package_version(), "command": command, "settings": dict(settings), "inputs": dict(inputs)}


def file_digest(path: str | os.PathLike) -> str | None:
    """The SHA-256 of a file's or a folder's content (:func:`agentuq_nb.io.files.content_digest`), None when it is
    not there."""
    from agentuq_nb.io.files import content_digest

    return content_digest(path) if Path(path).exists() else None
