"""Around one papermill execution: the notebook's progress shown in the terminal, and no secret
left in the executed copy.

* :class:`ProgressRelay` is given to papermill as the kernel's ``stderr`` sink. Progress bars in the
  package are text bars on stderr (``JobRunner``, ``extract``), so their updates arrive here as
  stream chunks; the relay prints the latest bar line with the study's prefix, at most once per
  ``interval`` seconds (the last one always), so that ``make reproduce`` shows it is alive and how far
  a long cell has got.
* :func:`mask_notebook_secrets` rewrites an executed notebook with every string that holds an API key
  (an environment key's value, or a common key shape) masked - outputs, tracebacks, injected
  parameters - using the one redaction policy (:mod:`agentuq_nb.common.redaction`).
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

from agentuq_nb.common.redaction import mask_secrets, redact
from agentuq_nb.io.atomic import atomic_write_text

#: a tqdm line: "desc:  44%|████      | 12/27 [00:31<00:39, ...]", or without a total "desc: 12traj [00:31, …]"
BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\|\s*\d+/\d+|\d+(?:/\d+)?\s*[A-Za-z]*\s*\[\d")
#: terminal control sequences tqdm may write (cursor up, erase line)
CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ProgressRelay:
    """A file-like stderr sink for papermill: progress-bar lines go to ``log`` with ``prefix``."""

    def __init__(self, prefix: str, log: Callable[[str], None] = print, interval: float = 2.0):
        self.prefix, self.log, self.interval = prefix, log, interval
        self.pending: str | None = None
        self.last_shown = ""
        self.shown_at = float("-inf")

    def write(self, content: str) -> int:
        for piece in re.split(r"[\r\n]", CONTROL.sub("", content)):
            piece = piece.strip()
            if piece and BAR.search(piece):
                self.pending = piece
        if self.pending is not None and time.monotonic() - self.shown_at >= self.interval:
            self._show()
        return len(content)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """Show the last line not shown yet (call when the notebook has finished)."""
        if self.pending is not None:
            self._show()

    def _show(self) -> None:
        if self.pending != self.last_shown:
            self.log(redact(f"{self.prefix} {self.pending}"))
            self.last_shown = self.pending
        self.pending, self.shown_at = None, time.monotonic()


def mask_notebook_secrets(path: str | Path) -> int:
    """Mask secrets in the notebook file at ``path`` in place; returns how many strings held one."""
    path = Path(path)
    if not path.is_file():
        return 0
    notebook = json.loads(path.read_text(encoding="utf-8"))
    masked, count = mask_secrets(notebook)
    if count:
        atomic_write_text(path, json.dumps(masked, indent=1, ensure_ascii=False) + "\n")
    return count
