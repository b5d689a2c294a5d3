"""Numbers in generated prose: a count with its noun, and a verb that agrees with it ("1 falls", "2 fall").

Written by hand: three lines of English agreement for the findings, the report and the guides; ``inflect`` would
bring a dependency for the same."""
from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with its noun: ``1 run``, ``2 runs`` (``plural`` where adding an s is wrong)."""
    return f"{n} {noun if n == 1 else (plural or noun + 's')}"


def agreeing(n: int, singular: str, plural: str) -> str:
    """``n`` with the verb that agrees with it: ``agreeing(1, "falls", "fall")`` is ``1 falls``."""
    return f"{n} {singular if n == 1 else plural}"
