"""jsonschema imported without the IRI grammar it does not need here.

``import jsonschema`` imports ``rfc3987_syntax`` when it is installed (jupyter's ``format-nongpl`` extra brings it),
which compiles its lark grammar 38 times at import: 1.5 s of CPU in every process that imports jsonschema (serve-local
and each simulation's process, kernel and Dask worker check tool schemas with it; papermill imports it through
nbformat), for the ``iri`` and ``iri-reference`` formats only. jsonschema imports that module in a
``suppress(ImportError)`` and leaves those two formats unchecked without it. Nothing here validates them: the Draft
2020-12 meta-schema, which tool schemas are checked against, names uri, uri-reference and regex (still checked), and
nbformat's notebook schemas name no format. A hand-written guard: neither library offers a switch for it.
"""
from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()


def import_jsonschema() -> None:
    """Import jsonschema, if this process has not yet, with ``rfc3987_syntax`` unimportable while it is imported (then
    importable again for whoever asks for it). A process that imported jsonschema before keeps it as it was."""
    with _LOCK:
        if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
            return
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # importing it raises ImportError
        try:
            import jsonschema  # noqa: F401
        finally:
            del sys.modules["rfc3987_syntax"]
