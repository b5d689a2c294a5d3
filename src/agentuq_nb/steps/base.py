"""What every step shares: a typed config (:class:`StepConfig`) and a declaration (:class:`Step`) of the name its
commits are recorded under, the command a user types and the artefacts it makes.

A step module is one command: ``STEP = Step(...)``, a config (a :class:`StepConfig`: each default written once,
the command line's options made from its fields), ``run(run_dir, config)`` (``run(config)`` for a step that
declares no run folder) and, where the command needs more than its config says, a :class:`Command`. Declaring a step registers its
command as the producer of its artefacts with the store, so a reader missing one says what to run
(``io.store.rundir.register_producer``: the store knows every artefact's file name, not who makes it), and the
estimator families it adds (:class:`FamilyHint`), so ``compare-estimators`` says how to get a missing one.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, Field

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir, register_producer
from agentuq_nb.records.config import Config, NBoot, Seed
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, FailureThreshold

#: a step's options are a :class:`~agentuq_nb.records.config.Config` (the one config base class: unknown names
#: refused, each field validated on construction and assignment); the name says where it is used
StepConfig = Config

#: what a results file may be (the help of every command that reads one)
RESULTS_HELP = ("τ²-bench results (a v0/v1 JSON file or a v1.0.1 results directory), the original τ-bench's "
                "results (a JSON list of {task_id, reward, info, traj, trial}) or an Inspect AI log (.eval; the "
                "[inspect] extra)")
#: a Dask scheduler option's help
SCHEDULER_HELP = "run on Dask: a scheduler address (tcp://host:8786) or local:N for N local worker processes"

#: the fields several steps share, each declared once here (type, bounds, default, description); a config that
#: words a field's description for its own use writes ``= Field(description=...)`` and keeps the rest
FailureThresholdField = Annotated[FailureThreshold, Field(DEFAULT_FAILURE_THRESHOLD,
                                                          description="failure = reward < threshold")]
NBootField = Annotated[NBoot, Field(DEFAULT_N_BOOT, description="bootstrap resamples for the 95% CIs (0: none)")]
SeedField = Annotated[Seed, Field(0, description="seed of the bootstrap")]


def gbm_grid_checked(value: dict[str, list] | None) -> dict[str, list] | None:
    """A ``gbm_grid`` field's value, checked by the combined predictor (imported when one is given: the step modules
    do not load the evaluation package on import)."""
    if value is None:
        return None
    from agentuq_nb.evaluation.combined_predictor import gbm_search_grid

    gbm_search_grid(value)
    return value


#: the combined predictors' gradient boosting tuning grid: lists replacing some of GBM_GRID's (None: GBM_GRID itself)
GbmGridField = Annotated[Optional[dict[str, list[Union[int, float]]]], AfterValidator(gbm_grid_checked),
                         Field(None, description="gradient boosting's tuning grid of the combined predictors: lists "
                                                 "that replace the default grid's (max_depth, learning_rate); None "
                                                 "searches the default grid (a smaller grid: a faster smoke run)")]
#: the embeddings the black-box signals can be computed with (the first is the default): the black-box step's field,
#: which the commands that bring the black-box families up to date (compare-estimators, analyze) offer too
BlackBoxEmbedder = Literal["minilm-static", "minilm", "hash", "none"]


def step_config(module: ModuleType) -> type[Config] | None:
    """The config class a step module defines (its one :class:`Config` subclass of its own), or None."""
    found = [v for v in vars(module).values() if isinstance(v, type) and issubclass(v, Config)
             and v is not Config and v.__module__ == module.__name__]
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True)
class FamilyHint:
    """The estimator family a step adds to a run that lacks it: what the family needs and the command that adds it
    (``RUN_DIR`` and ``RESULTS`` stand for the run folder and its results); the ``*_without_tokens`` variants are
    said to a run without token rows. ``cost(run)``: what the command will cost on this run and which model it will
    run, in a sentence (None: nothing to say), from the step's own measured rates."""

    family: str
    needs: str
    command: str
    needs_without_tokens: str | None = None
    command_without_tokens: str | None = None
    cost: Callable[[RunDir], str | None] | None = None


#: every declared step by name (filled as the step modules are imported: ``import agentuq_nb.steps`` imports all;
#: a name declared twice is refused)
STEPS: dict[str, Step] = {}


@dataclass(frozen=True)
class Step:
    """A step: ``name`` is what its commits record (``manifest.json``'s ``step``) and the command's name,
    ``command`` how to run it (``RUN_DIR`` stands for the run folder), ``produces`` the artefacts (``rundir.ARTIFACTS``
    names, or a family's ``<name>_scores``) it writes, ``adds`` the estimator families it gives a run that lacks them
    (said by ``compare-estimators``), ``command_line``: whether it is a command of its own (else a part of one),
    ``run_folder``: whether its ``run`` is ``run(run_dir, config)`` (else ``run(config)``: a step that writes no run
    folder, as ``compare-runs`` or ``probe``)."""

    name: str
    command: str
    produces: tuple[str, ...] = ()
    adds: tuple[FamilyHint, ...] = ()
    command_line: bool = True
    run_folder: bool = True

    def __post_init__(self) -> None:
        known = STEPS.get(self.name)
        if known is not None and (known.command, known.produces) != (self.command, self.produces):
            raise ValueError(f"step {self.name!r} is declared already ({known.command}); a step name is one command")
        register_producer(self.command, self.produces)
        STEPS[self.name] = self


class Reporter:
    """What a step that runs others says while it runs, and how each inner step is wrapped: a library call
    says nothing; the command line prints (``say``) and wraps each inner step (``stage``) so that a Ctrl-C or a
    bad input is reported with the state that step left the folder in."""

    def say(self, text: str, warn: bool = False) -> None:
        """Tell the user ``text`` (``warn``: a note on stderr)."""

    def stage(self, step: str, run_dir: Path) -> AbstractContextManager:
        """A context around inner step ``step`` writing ``run_dir``."""
        return nullcontext()


@dataclass(frozen=True)
class Command:
    """What a step's command line needs beyond its config, whose fields are the options (flag, default, help from
    the description, choices from a ``Literal``, bounds; pydantic validates what is typed). ``summary``: the text
    ``--help`` starts with.

    ``arguments``: the positionals in order: ``"run_dir"`` (the run folder), or a config field (a list field takes
    several); ``out``: the run folder is the new folder named by ``--out`` (help ``out_help``) instead;
    ``options``: the fields offered, in order (``"scoring.backend"``: a nested config's field; None: every field of
    a plain type, a list of one, or a choice); ``flags``: a field's option name where it is not ``--field-name`` (a
    bool defaulting to True gets ``--x/--no-x``); ``help``: a text where the field's description is not the help;
    ``kinds``: the type of an option typed otherwise than its field (``--method``: a choice of platt, isotonic or
    both, where the field holds a tuple of methods); ``set``: fields the command line sets (``progress=True``);
    ``plugins``: offer ``--plugin``; ``errors``: names of exception classes (beside the input errors) said in one
    line; ``before``/``show``: called with ``(run_dir, config, reporter)`` before the step and with ``(result,
    run_dir, config, reporter)`` after it, to say what it did (``show`` returning True: exit 1); ``interrupted``:
    what a Ctrl-C left, for a step without a run folder (formatted with the config's fields); ``extras``:
    ``(annotation, default, help)`` of a parameter that is no config field, for ``build``: ``build(values,
    run_dir)`` makes ``(run_dir, config)`` from the parameters' values where they do not fill the config one to one
    (``predict``, ``simulate``)."""

    summary: str = ""
    arguments: tuple[str, ...] = ("run_dir",)
    options: tuple[str, ...] | None = None
    flags: dict[str, str] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, object] = field(default_factory=dict)
    extras: dict[str, tuple] = field(default_factory=dict)
    set: dict[str, object] = field(default_factory=dict)
    out: bool = False
    out_help: str = "run directory to write to"
    plugins: bool = False
    errors: tuple[str, ...] = ()
    before: Callable | None = None
    show: Callable | None = None
    interrupted: str = "interrupted: nothing was run"
    build: Callable | None = None


def num_text(x: float | None) -> str:
    """A score as a command prints it (3 decimals; n/a for none)."""
    return "n/a" if x is None else f"{x:.3f}"


def interval_text(lo: float | None, hi: float | None) -> str:
    """An interval as a command prints it (— where it is not finite)."""
    finite = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
    return f"[{lo:.3f}, {hi:.3f}]" if finite else "—"


def manifest_bytes(run_dir: Path) -> bytes | None:
    """The manifest as it is before a step (None: none, or not a small regular file - the step says so)."""
    from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
    from agentuq_nb.io.files import read_limited

    try:
        return read_limited(RunDir(run_dir).file("manifest"), MAX_SMALL_JSON_BYTES, "manifest")
    except (OSError, InputError):
        return None


def after_interrupt(step: str, run_dir: Path, manifest_before: bytes | None) -> str:
    """What a Ctrl-C during ``step`` left in ``run_dir``, after finishing or discarding its publication."""
    if not run_dir.is_dir():
        return f"interrupted: '{step}' stopped before it wrote anything"
    try:  # taking the lock rolls a committed publication forward and removes staged and temporary files
        with RunDir(run_dir).lock(f"{step}: clean up after Ctrl-C"):
            pass
    except Exception as err:  # noqa: BLE001 - said, not raised: the interrupt is what the user must hear about
        return (f"interrupted: '{step}' stopped; {run_dir} could not be checked ({err}); the next agentuq-nb "
                "command on it finishes or discards what was being published")
    if manifest_bytes(run_dir) != manifest_before:
        return f"interrupted after '{step}' committed: {run_dir} holds its new files, complete"
    held = "its previous files, unchanged" if manifest_before is not None else "no run"
    return f"interrupted: '{step}' published nothing; {run_dir} holds {held} (temporary files removed)"
