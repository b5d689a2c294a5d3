"""Errors and counted warnings about bad input, each naming the file and the place."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


class InputError(ValueError):
    """Input that cannot be used: says which file, what is wrong, and where."""

    def __init__(self, path, what: str, where: str | None = None):
        self.path, self.what, self.where = str(path), what, where
        loc = f" (at {where})" if where else ""
        super().__init__(f"{self.path}: {what}{loc}")


class MixedRunError(RuntimeError):
    """A run folder holds files that do not belong together (two runs' files side by side)."""


class StaleArtifactError(RuntimeError):
    """A derived table was computed from an input that has since been replaced."""


@dataclass
class InputWarnings:
    """Problems that do not stop a run; counted and reported in the manifest/output."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, example: str, n: int = 1) -> None:
        if n <= 0:
            return
        self.counts[kind] += n
        self.examples.setdefault(kind, example)

    def merge(self, other: "InputWarnings") -> None:
        for kind, n in other.counts.items():
            self.add(kind, other.examples.get(kind, ""), n)

    def as_dict(self) -> dict:
        return {k: {"count": int(n), "example": self.examples.get(k, "")} for k, n in sorted(self.counts.items())}

    def __bool__(self) -> bool:
        return bool(self.counts)
