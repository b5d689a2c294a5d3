"""What every step shares: a typed config (:class:`StepConfig`) and a declaration (:class:`Step`) of the name its
commits are recorded under, the command a user types and the artefacts it makes.

A step module is one command: ``STEP = Step(...)``, a ``Config`` (pydantic: each default written once, the
command line's options made from its fields) and ``run(run_dir, config)``. Declaring a step registers its
command as the producer of its artefacts with the store, so a reader missing one says what to run
(``io.store.rundir.register_producer``: the store knows every artefact's file name, not who makes it).
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agentuq_nb.io.store.rundir import register_producer


class StepConfig(BaseModel):
    """A step's options: unknown names refused, each field validated on construction and assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)


@dataclass(frozen=True)
class Step:
    """A step: ``name`` is what its commits record (``manifest.json``'s ``step``), ``command`` how to run it
    (``RUN_DIR`` stands for the run folder), ``produces`` the artefacts (``rundir.ARTIFACTS`` names) it writes."""

    name: str
    command: str
    produces: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        register_producer(self.command, self.produces)


class Reporter:
    """What a step that runs others says while it runs, and how each inner step is wrapped: a library call
    says nothing; the command line prints (``say``) and wraps each inner step (``stage``) so that a Ctrl-C or a
    bad input is reported with the state that step left the folder in."""

    def say(self, text: str, warn: bool = False) -> None:
        """Tell the user ``text`` (``warn``: a note on stderr)."""

    def show(self, what: str, value: object) -> None:
        """Show an inner step's result as it is made (``what``: the step's name)."""

    def stage(self, step: str, run_dir: Path) -> AbstractContextManager:
        """A context around inner step ``step`` writing ``run_dir``."""
        return nullcontext()
