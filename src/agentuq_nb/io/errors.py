"""Errors and counted warnings about bad input, each naming the file and the place."""
from __future__ import annotations

import importlib
import unicodedata
from collections import Counter
from dataclasses import dataclass, field


class InputError(ValueError):
    """Input that cannot be used: says which file, what is wrong, and where."""

    def __init__(self, path, what: str, where: str | None = None):
        self.path, self.what, self.where = str(path), what, where
        loc = f" (at {where})" if where else ""
        super().__init__(f"{self.path}: {what}{loc}")


def validation_problem(err) -> str:
    """A pydantic ValidationError's first problem in words: what is wrong, where, and (for a plain value) what it
    is - ``Input should be greater than or equal to 0 at 'trial' (it is -1)``."""
    first = err.errors()[0]
    # a union's branch tags (``function-wrap[_wrap()]``, a model's name) are pydantic's, not the input's
    loc = ".".join(str(p) for p in first["loc"] if isinstance(p, int) or not any(c in p for c in "[]()")) \
        or "(top level)"
    value = first.get("input")
    shown = f" (it is {value!r})" if isinstance(value, (int, float, str, bool)) and len(repr(value)) <= 60 else ""
    return f"{first['msg'].removeprefix('Value error, ')} at '{loc}'{shown}"


#: how a user gets what a lower layer's message names, by the thing's name (``"detector_folder"``,
#: ``"estimator_listing"``…; a run folder's artefacts are the store's producers,
#: :func:`agentuq_nb.io.store.rundir.register_producer`), in the words of the layer that has commands: filled by
#: :mod:`agentuq_nb.steps.hints` from the steps' declarations when that layer is loaded (:func:`load_command_layer`),
#: which every reader of these words does first. The layers below name no command; a message says what it lacks in
#: its own terms (:func:`remedy`'s default) only where the layer with commands is not there at all.
REMEDIES: dict[str, str] = {}
#: the package that fills :data:`REMEDIES` and the store's producers as it is imported (the layer with commands):
#: named by the package's root (``agentuq_nb/__init__.py``, run before any module of the package), the one place that
#: knows every layer, and imported by :func:`load_command_layer`: what a message says does not depend on what the
#: user imported before
COMMAND_LAYER: list[str] = []


def load_command_layer() -> None:
    """Import the layer with commands (:data:`COMMAND_LAYER`: its modules declare what makes each artefact and fill
    :data:`REMEDIES`), so that a message reads the same words whatever was imported before it (cheap once done)."""
    for name in COMMAND_LAYER:
        importlib.import_module(name)


def remedy(name: str, default: str, **fields) -> str:
    """How to get ``name`` as the layer with commands says it (:data:`REMEDIES`, that layer loaded first), else
    ``default`` (which names it), each ``{field}`` of the text replaced by its value in ``fields`` (a path…)."""
    load_command_layer()
    text = REMEDIES.get(name, default)
    for key, value in fields.items():
        text = text.replace("{" + key + "}", str(value))
    return text


class MissingArtifactError(FileNotFoundError):
    """A run folder lacks artefact ``artifact`` (its file ``file``) that a reader needs; ``fix`` says how to make
    it (the command of the step that does, where the steps are loaded; else the artefact's own name)."""

    def __init__(self, run_dir, artifact: str, file: str, fix: str):
        self.run_dir, self.artifact, self.file, self.fix = str(run_dir), artifact, file, fix
        super().__init__(f"{self.run_dir}: no {file}; {fix}")


class MixedRunError(RuntimeError):
    """A run folder holds files that do not belong together (two runs' files side by side)."""


class StaleArtifactError(RuntimeError):
    """A derived table was computed from an input that has since been replaced."""


@dataclass
class InputWarnings:
    """Problems that do not stop a run; counted and reported in the manifest/output."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    #: per kind counted "n of a total", that total (the trajectories compared, …)
    totals: Counter = field(default_factory=Counter)

    def add(self, kind: str, example: str, n: int = 1, of: int | None = None) -> None:
        if n <= 0:
            return
        self.counts[kind] += n
        self.examples.setdefault(kind, example)
        if of is not None:
            self.totals[kind] += of

    def merge(self, other: "InputWarnings") -> None:
        for kind, n in other.counts.items():
            self.add(kind, other.examples.get(kind, ""), n, other.totals.get(kind))

    def as_dict(self) -> dict:
        return {k: {"count": int(n), "example": self.examples.get(k, ""),
                    **({"of": int(self.totals[k])} if k in self.totals else {})}
                for k, n in sorted(self.counts.items())}

    def __bool__(self) -> bool:
        return bool(self.counts)


def one_line(text: str) -> str:
    """A message in one line: its lines joined, cut where a traceback starts, and every other control or format
    character (an escape sequence, a bidi override, a NUL typed into a name) shown escaped."""
    lines = []
    for line in str(text).splitlines():
        if line.lstrip().startswith("Traceback (most recent call last)"):
            break
        if line.strip():
            lines.append(line.strip())
    return "".join(c if c == " " or unicodedata.category(c) not in ("Cc", "Cf") else c.encode("unicode_escape")
                   .decode("ascii") for c in " ".join(lines))
