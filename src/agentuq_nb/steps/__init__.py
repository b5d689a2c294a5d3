"""The steps: one module per command, each a pydantic ``Config``, ``run(run_dir, config)`` and a ``STEP``
declaring the name its commits are recorded under, the command a user types and the artefacts it makes
(:mod:`.base`). The command line (``agentuq_nb.cli``) builds its options from the configs; notebooks call the
keyword form a module offers beside ``run`` (``from agentuq_nb.steps.evaluate import evaluate``;
``evaluate(run_dir, n_boot=200)``).

Steps read and commit run folders; what they compute comes from the layers below: calculators
(``agentuq_nb.uq``), estimators, statistics (``agentuq_nb.evaluation``), figures. Importing this package
imports every step module, so each has registered its artefacts' producer with the store
(``io.store.rundir.register_producer``) and a missing table says which command makes it; the other things a
lower layer's message names are said in commands by :mod:`.hints`.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

#: modules of this package that are not steps (shared by several)
SHARED = frozenset({"base", "scoring_jobs", "family_gaps", "detector_inputs", "hints", "provenance"})


def step_modules() -> list[ModuleType]:
    """Every step module of this package (each declares its ``STEP``), imported; a new one is found, not listed."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in SHARED)
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


#: the step modules' names (all imported here: each declares its STEP, so the store knows who makes what)
STEP_MODULES = tuple(module.__name__.rsplit(".", 1)[1] for module in step_modules())

# the steps' words for what a lower layer's message names (each step is declared by now): see .hints
from agentuq_nb.io.errors import REMEDIES  # noqa: E402
from agentuq_nb.steps.hints import remedies  # noqa: E402

REMEDIES.update(remedies())
