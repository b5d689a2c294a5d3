"""Fewer runs of Python's cycle collector while a loop allocates millions of short-lived objects.

Streaming a results file builds a dict, a list and a pydantic model per message; with the collector's
defaults a full collection runs every ~70k container allocations and walks every live object, the
imported libraries included (~10 % of ``extract``'s CPU at 10⁷ token rows, ``benchmarks/bench_pipeline.py``).
Inside :func:`fewer_collections` the objects alive at entry are frozen out of the collector's view
(``gc.freeze``) and the youngest generation is collected every 50,000 allocations instead of 700;
cycles are still collected, only less often. Entries nest and may come from several threads: the first
sets, the last restores.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_THRESHOLD = 50_000
_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] | None = None


@contextmanager
def fewer_collections() -> Iterator[None]:
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(YOUNG_THRESHOLD, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
