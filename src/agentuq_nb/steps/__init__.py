"""The steps: one module per command, each a pydantic ``Config``, ``run(run_dir, config)`` and a ``STEP``
declaring the name its commits are recorded under, the command a user types and the artefacts it makes
(:mod:`.base`). The command line (``agentuq_nb.cli``) builds its options from the configs; notebooks call the
keyword form each module offers beside ``run`` (``from agentuq_nb.steps.evaluate import evaluate``;
``evaluate(run_dir, n_boot=200)``).

Steps read and commit run folders; what they compute comes from the layers below: calculators
(``agentuq_nb.uq``), estimators, statistics (``agentuq_nb.evaluation``), figures. Importing this package
imports every step module, so each has registered its artefacts' producer with the store
(``io.store.rundir.register_producer``) and a missing table says which command makes it.
"""
from __future__ import annotations

import importlib

#: the step modules, in the order a study runs them
STEP_MODULES = ("simulate", "extract", "rescore", "aggregate", "score_observations", "sample_actions", "verbalized",
                "blackbox", "saup", "early_warning", "evaluate", "compare_estimators", "calibrate", "trials",
                "compare_runs", "probe", "analyze", "recorded_summary")

for _module in STEP_MODULES:  # each declares its STEP: the store learns who makes what
    importlib.import_module(f"{__name__}.{_module}")
