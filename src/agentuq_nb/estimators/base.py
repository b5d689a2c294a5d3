"""The estimator interface and its registry (LM-Polygraph's split: statistics are computed once by
the calculators in ``agentuq_nb.uq``; an estimator is a small named class that reads them).

An estimator has a ``name``, a ``family``, an orientation (``higher_is_uncertain``: False for a
confidence such as the lowest token probability or a verbalized confidence), what the run must hold
(``requires``: artefact names of :class:`~agentuq_nb.io.store.rundir.RunDir`) and
``scores(run) -> pandas.Series`` indexed by the trajectory keys (``domain, task_id, trial, seed``).

Two ways to add one:

* a class with a fixed name, decorated with :func:`register`::

      @register
      class LongestTurn(Estimator):
          name = "assistant.max_turn_nll"
          family = "custom"
          higher_is_uncertain = True
          requires = ("turn_summary",)

          def scores(self, run):
              t = read_turn_summary(run)
              t = t[(t["role"] == "assistant") & (t["scorer"] == "self")]
              return by_trajectory(t.groupby(TRAJECTORY_KEYS, dropna=False)["turn_nll"].max())

* a family of parametrized estimators (one per role and scorer found in a run, one per early-warning
  fraction…): an :class:`EstimatorFamily` subclass, also registered with :func:`register`.

Packages publish estimators through the entry-point group ``agentuq_nb.estimators`` (loaded on first
use of the registry); a script's module or file is loaded with :func:`load_plugin` (the command
line's ``--plugin``).
"""
from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pandas as pd

from agentuq_nb.io.errors import remedy
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

ENTRY_POINT_GROUP = "agentuq_nb.estimators"
#: where a family without a rank of its own sorts: after the built-in ones that come before it
CUSTOM_RANK = 50
#: the :attr:`Estimator.protocol` of a score tuned on the very trajectories it scores
IN_SAMPLE = "in-sample"


@dataclass(frozen=True)
class Family:
    """An estimator family as it declares itself, on its estimator module (:func:`declare_family`), read by every
    place that treats families apart: ``rank``, where it sorts in a listing and in the estimator table (registered
    order within a rank); ``label`` and ``color``, how figures name and draw it (a colour is a role of
    ``figures.style.PALETTE`` or a colour itself; None: the neutral grey and the family's name); ``forest_order``,
    its place top to bottom in the estimator forest (None: after the placed ones, by name); ``blackbox``: computed
    from the messages alone (the black-box combinations' inputs, and what the black-box step adds); ``reference``:
    a yardstick the uncertainty estimators are measured against (the length baselines: never an input of a
    combination, listed and drawn apart, the row a significance test compares with); ``combination``: made from
    the other estimators' scores (cross-fitted probabilities: never an input of itself, nor of calibration's
    re-fit). What a run lacking it needs, and the command that adds it, is said by the step that makes it
    (``agentuq_nb.steps.base.FamilyHint``): a family names no command."""

    name: str
    rank: int = CUSTOM_RANK
    label: str | None = None
    color: str | None = None
    forest_order: float | None = None
    blackbox: bool = False
    reference: bool = False
    combination: bool = False


#: every declared family by name (each estimator module declares its own when the package is imported)
FAMILIES: dict[str, Family] = {}


def declare_family(family: Family) -> Family:
    """Declare ``family``; returns it. A name is declared once: another declaration under it is refused (the same
    one again, as a module imported anew declares it, is the same family)."""
    known = FAMILIES.get(family.name)
    if known is not None and known != family:
        raise ValueError(f"estimator family {family.name!r} is declared already ({known}); a family has one "
                         "declaration (choose another name)")
    FAMILIES[family.name] = family
    return family


def declared_families() -> dict[str, Family]:
    """Every declared family by name, the package's estimator modules (and plugins) loaded first."""
    importlib.import_module("agentuq_nb.estimators")  # its modules declare theirs on import
    load_plugins()
    return FAMILIES


def family_of(name: str) -> Family:
    """The family called ``name`` as declared, or an undeclared family's defaults (a plugin's ``custom``…)."""
    return declared_families().get(name) or Family(name)


def reference_families() -> frozenset[str]:
    """The families declared as yardsticks (``Family.reference``: the length baselines)."""
    return frozenset(f.name for f in declared_families().values() if f.reference)


def combination_families() -> frozenset[str]:
    """The families made from the other estimators' scores (``Family.combination``: the combined predictors)."""
    return frozenset(f.name for f in declared_families().values() if f.combination)


def blackbox_families() -> tuple[str, ...]:
    """The families computed from the messages alone (``Family.blackbox``), in rank order."""
    found = [f for f in declared_families().values() if f.blackbox]
    return tuple(f.name for f in sorted(found, key=lambda f: f.rank))


class UnknownEstimatorError(KeyError, ValueError):
    """A name no registered estimator (nor family pattern) answers to: ``name``, the close names
    (``suggestions``, for "did you mean") and the message in ``args[0]``. A KeyError (a lookup by name) and a
    ValueError (bad input) alike."""

    def __init__(self, name: str, suggestions: tuple[str, ...] | list[str], message: str):
        self.name, self.suggestions = name, tuple(suggestions)
        super().__init__(message)

    @property
    def did_you_mean(self) -> str:
        """``"; did you mean a, b?"`` with the suggestions, or ``""``."""
        return f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""


class Estimator(ABC):
    """One trajectory-level uncertainty estimator (see the module docstring)."""

    name: ClassVar[str] = ""
    family: ClassVar[str] = "custom"
    higher_is_uncertain: ClassVar[bool] = True
    requires: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    #: scores fitted to the run's own failure labels (a tuned readout): never an input of a combined predictor,
    #: whose cross-fitting would then see labels of the trajectories it holds out
    uses_labels: ClassVar[bool] = False
    #: for a score fitted to failure labels, the protocol that kept (or did not keep) the scored trajectories out of
    #: the fit: :data:`IN_SAMPLE` (tuned on the very trajectories it scores: optimistic by construction), or the
    #: cross-fitting used (``"cross-fitted by task"``…); None for a score that saw no labels
    protocol: ClassVar[str | None] = None
    # what a token estimator is made of (None for the others); columns of the estimator table
    scorer: str | None = None
    role: str | None = None
    statistic: str | None = None

    @abstractmethod
    def scores(self, run: RunDir) -> pd.Series:
        """One score per trajectory, indexed by the trajectory keys (see :func:`by_trajectory`)."""

    def is_available(self, run: RunDir) -> bool:
        """Whether ``run`` holds what :meth:`scores` needs (default: every artefact of ``requires``)."""
        return all(run.has(name) for name in self.requires)

    def reads(self, run: RunDir) -> tuple[str, ...]:
        """The artefacts :meth:`scores` reads in ``run`` (default: ``requires``): what a table of its scores is
        ``based_on``, so that it is found stale when one of them is replaced."""
        return self.requires

    @property
    def in_sample(self) -> bool:
        """Whether its scores were tuned on the labels of the trajectories they score (never a result to trust)."""
        return self.protocol == IN_SAMPLE

    @property
    def invert(self) -> bool:
        """Whether the metrics negate the score (a confidence) to rank failures first."""
        return not self.higher_is_uncertain

    @property
    def label(self) -> str:
        """How figures name it."""
        return self.name

    @property
    def orientation(self) -> str:
        return "inverted: lower = more uncertain" if self.invert else "higher = more uncertain"

    def __repr__(self) -> str:
        return f"<estimator {self.name} ({self.family}, {self.orientation})>"


class EstimatorFamily(ABC):
    """Parametrized estimators whose names follow a pattern (``{role}.{statistic}[@{scorer}]`` …)."""

    family: ClassVar[str] = "custom"

    @abstractmethod
    def discover(self, run: RunDir) -> list[Estimator]:
        """The family's estimators that ``run`` holds data for, in listing order."""

    @abstractmethod
    def parse(self, name: str) -> Estimator | None:
        """The estimator called ``name``, if the name is of this family."""

    def pattern(self) -> str:
        return self.family

    def near(self, name: str) -> list[str]:
        """Names of this family close to ``name`` (for "did you mean")."""
        return []


def by_trajectory(values: pd.Series | pd.DataFrame, column: str | None = None) -> pd.Series:
    """Scores indexed by the trajectory keys, keys typed alike (a column of a frame that has the keys,
    or a Series whose index holds them)."""
    frame = values.reset_index() if isinstance(values, pd.Series) else values
    column = column or (values.name if isinstance(values, pd.Series) else None)
    frame = key_dtypes(frame)
    return frame.set_index(TRAJECTORY_KEYS)[column].astype(float)


class ScoreColumn(Estimator):
    """A column of a score file (``requires[0]``) as an estimator; listed where the file has the column."""

    column: str = ""

    def scores(self, run: RunDir) -> pd.Series:
        return by_trajectory(run.read_frame(self.requires[0]), self.column or self.name).rename(self.name)

    def is_available(self, run: RunDir) -> bool:
        if not run.has(self.requires[0]):
            return False
        return (self.column or self.name) in run.read_frame(self.requires[0]).columns


# --------------------------------------------------------------------------- registry
_FIXED: dict[str, Estimator] = {}
_FAMILIES: list[EstimatorFamily] = []
_plugins_loaded = False


def register(obj):
    """Register an :class:`Estimator` or :class:`EstimatorFamily` (a class or an instance); returns it,
    so it works as a class decorator. A name is registered once: another class under a registered estimator name, or
    another family class for a registered family, is refused (:func:`unregister` frees a name); the same class again
    (its module imported anew, a plugin loaded twice) takes its place."""
    instance = obj() if isinstance(obj, type) else obj
    if isinstance(instance, Estimator):
        if not instance.name:
            raise ValueError(f"{type(instance).__name__}: an estimator needs a name")
        known = _FIXED.get(instance.name)
        if known is not None and _class_path(known) != _class_path(instance):
            raise ValueError(f"estimator {instance.name!r} is registered already (by {_class_path(known)}); "
                             f"{_class_path(instance)} needs another name")
        _FIXED[instance.name] = instance
    elif isinstance(instance, EstimatorFamily):
        known = next((f for f in _FAMILIES if f.family == instance.family), None)
        if known is not None and _class_path(known) != _class_path(instance):
            raise ValueError(f"the estimators of family {instance.family!r} are registered already (by "
                             f"{_class_path(known)}); {_class_path(instance)} needs another family")
        _FAMILIES[:] = [f for f in _FAMILIES if f is not known] + [instance]
    else:
        raise TypeError(f"register() takes an Estimator or EstimatorFamily, not {type(obj).__name__}")
    return obj


def _class_path(instance: object) -> str:
    """Where the class of ``instance`` is defined (``module.Class``): the same class, however often imported."""
    return f"{type(instance).__module__}.{type(instance).__qualname__}"


def unregister(name: str) -> Estimator:
    """Remove the estimator registered under ``name`` (a family member it overrode is listed again)."""
    try:
        return _FIXED.pop(name)
    except KeyError:
        raise KeyError(f"no estimator registered under {name!r}") from None


def listing_hint() -> str:
    """How a user lists a run's estimators (said where a name is unknown): the command, where the steps are loaded
    (:data:`agentuq_nb.io.errors.REMEDIES`), else the library call."""
    return remedy("estimator_listing", "agentuq_nb.estimators.available(RUN_DIR) lists them")


def family_rank(family: str) -> int:
    """Where a family sorts among the others (its declared ``Family.rank``; a family that declared none:
    :data:`CUSTOM_RANK`)."""
    return family_of(family).rank


def load_plugins() -> None:
    """Import the estimators published under the entry-point group ``agentuq_nb.estimators`` (once)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True  # set first: a plugin that uses the registry while it loads does not load them again
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry_point.load()
        except Exception as err:  # one broken plugin must not take the others (or the registry) down
            warnings.warn(f"estimator plugin {entry_point.name!r} ({entry_point.value}) failed to load: "
                          f"{type(err).__name__}: {err}", stacklevel=2)
            continue
        if isinstance(loaded, (Estimator, EstimatorFamily)) or (
                isinstance(loaded, type) and issubclass(loaded, (Estimator, EstimatorFamily))):
            register(loaded)  # an entry point may name a class; a module registers its own on import


def load_plugin(spec: str | os.PathLike) -> None:
    """Import a module (``my_pkg.estimators``) or a Python file whose estimators register themselves."""
    path = Path(spec)
    if path.suffix == ".py" or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"{path}: estimator plugin file does not exist")
        name = f"agentuq_nb_plugin_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        importlib.import_module(str(spec))


def get(name: str) -> Estimator:
    """The estimator called ``name``; :class:`UnknownEstimatorError` (a KeyError) with the close names otherwise."""
    load_plugins()
    if name in _FIXED:
        return _FIXED[name]
    for family in _FAMILIES:
        estimator = family.parse(name)
        if estimator is not None:
            return estimator
    known = list(_FIXED)
    close = difflib.get_close_matches(name, known + [n for f in _FAMILIES for n in f.near(name)], n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    patterns = ", ".join(f.pattern() for f in _FAMILIES)
    raise UnknownEstimatorError(name, close, f"no estimator named {name!r}{hint} (fixed names: {', '.join(known)}; "
                                f"patterns: {patterns})")


def estimators(run: RunDir | str | os.PathLike) -> list[Estimator]:
    """Every estimator ``run`` holds data for, in listing order (family rank, then registration)."""
    load_plugins()
    run = RunDir.of(run)
    found: list[tuple[int, int, Estimator]] = []  # (family rank, order of registration/discovery, estimator)
    for estimator in _FIXED.values():
        if estimator.is_available(run):
            found.append((family_rank(estimator.family), len(found), estimator))
    for family in _FAMILIES:
        for estimator in family.discover(run):
            if estimator.name in _FIXED:  # registered under this name: the registered one, as get() says
                continue
            found.append((family_rank(estimator.family), len(found), estimator))
    return [estimator for _, _, estimator in sorted(found, key=lambda t: (t[0], t[1]))]


def available(run: RunDir | str | os.PathLike) -> list[str]:
    """The names of the estimators ``run`` holds data for."""
    return [e.name for e in estimators(run)]
