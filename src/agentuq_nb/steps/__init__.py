"""The steps: one module per command, each a pydantic ``Config``, ``run(run_dir, config)`` and a ``STEP``
declaring the name its commits are recorded under, the command a user types and the artefacts it makes
(:mod:`.base`). The command line (``agentuq_nb.cli``) builds its options from the configs; notebooks call the
keyword form a module offers beside ``run`` (``from agentuq_nb.steps.evaluate import evaluate``;
``evaluate(run_dir, n_boot=200)``).

Steps read and commit run folders; what they compute comes from the layers below: calculators
(``agentuq_nb.uq``), estimators, statistics (``agentuq_nb.evaluation``), figures. A step module is any module of
this package that declares a ``STEP`` (found, not listed: :func:`step_modules`); importing this package imports
them all, so each has registered its artefacts' producer with the store (``io.store.rundir.register_producer``)
and a missing table says which command makes it; the other things a lower layer's message names are said in
commands by :mod:`.hints`. The package's root names this package as the layer with commands
(``io.errors.COMMAND_LAYER``): a lower layer's message loads it before it reads these words, so what a message
says does not depend on what was imported before it.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from agentuq_nb.io.errors import REMEDIES
from agentuq_nb.io.store.rundir import register_producer
from agentuq_nb.steps.base import Step
from agentuq_nb.steps.hints import OTHER_PRODUCERS, remedies


def step_modules() -> list[ModuleType]:
    """Every step module of this package - each module that declares a :class:`~.base.Step` as ``STEP`` - imported,
    in name order (a new one is found, not listed; a module that declares none, such as :mod:`.base`, is a shared
    piece). Two modules declaring one step name are refused."""
    modules = [importlib.import_module(f"{__name__}.{name}")
               for name in sorted(m.name for m in pkgutil.iter_modules(__path__))]
    found = [module for module in modules if isinstance(vars(module).get("STEP"), Step)]
    by_name: dict[str, str] = {}
    for module in found:
        other = by_name.setdefault(module.STEP.name, module.__name__)
        if other != module.__name__:
            raise ValueError(f"step {module.STEP.name!r} is declared by {other} and {module.__name__}: a step name "
                             "is one command")
    return found


#: the step modules' names (all imported here: each declares its STEP, so the store knows who makes what)
STEP_MODULES = tuple(module.__name__.rsplit(".", 1)[1] for module in step_modules())

# what the studies and notebooks make in a run folder (no step of their own), and the steps' words for what a lower
# layer's message names (each step is declared by now): see .hints
for _name, _command in OTHER_PRODUCERS.items():
    register_producer(_command, [_name])
REMEDIES.update(remedies())
