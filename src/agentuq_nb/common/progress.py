"""Progress bars: what a user waits for is counted on stderr, with its rate and time left (tqdm, as the job
executor's), and says nothing when ``show`` is off (library calls, tests)."""
from __future__ import annotations

import sys


def progress_bar(total: int | None, desc: str, unit: str, show: bool = True):
    """A tqdm bar on stderr over ``total`` ``unit``s (a no-op bar when not ``show``); use it as a context."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not show, dynamic_ncols=True)
