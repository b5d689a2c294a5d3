"""How a user gets what a lower layer's message names, in commands: the step layer's words for the layers below,
which name none (the artefact a reader lacks, a detector folder, the listing of a run's estimators…).

A run folder's artefacts are said by each step's own declaration (``Step.produces``, registered with the store as
their producer: ``RunDir.fix``); the other things are said here, from the steps' declared commands
(:data:`agentuq_nb.io.errors.REMEDIES`, read by :func:`agentuq_nb.io.errors.remedy`), with the makers of the artefacts
no step makes (:data:`OTHER_PRODUCERS`). ``agentuq_nb.steps`` registers them as it is imported, and a lower layer's
message imports it before it reads them (``io.errors.load_command_layer``): a library user reads the same text as the
command line, whatever was imported before.
"""
from __future__ import annotations

from agentuq_nb.steps.base import STEPS

#: the command line's program
PROGRAM = "agentuq-nb"
#: what makes the artefacts of a run folder that no step makes: a study's executed notebooks
#: (``agentuq_nb.pipeline.reproduce``), the paper figures notebook's AUROC table (``agentuq_nb.pipeline.paper``) and
#: the verbalized confidences a user brings (read by the verbalized-confidence step)
OTHER_PRODUCERS = {"notebooks": f"{PROGRAM} reproduce PARAMS", "paper_auroc_table": "notebook 09_paper_figures",
                   "verbalized_confidence_parquet": "a table of your own (keys + verbalized_confidence)"}


def command_of(step: str) -> str:
    """The declared command of step ``step`` (``STEP.command``: placeholders such as ``RUN_DIR`` kept)."""
    return STEPS[step].command


def command_name(step: str) -> str:
    """What a user types to run step ``step``, without its arguments (``agentuq-nb train-detector``)."""
    return f"{PROGRAM} {step}"


def remedies() -> dict[str, str]:
    """The step layer's text for each thing a lower layer's message names (``{…}`` fields filled by that layer)."""
    extract = command_of("extract")
    aggregate = command_of("aggregate").replace("RUN_DIR", "{run}")
    analyze = command_of("analyze").replace("RESULTS", "{results}").replace("RUN_DIR", "runs/{stem}")
    explore = command_name("explore")
    return {
        "tokens": f"run '{command_name('extract')}' first",
        "manifest": f"run '{extract.replace('RUN_DIR', '{run}')}' first",
        "run_folder_from_results": f"with '{extract.replace('RESULTS', '{results}')}'",
        "new_run_folder": f"with '{extract.replace('RUN_DIR', '{run}')}' (then '{aggregate}')",
        "run_folder_of_results": f"run analyze first ('{analyze}'), then '{explore} runs/{{stem}}'",
        "explorer_page": f" once it is made: {explore} {{run}} --out {{page}}.",
        "estimator_listing": f"see '{command_of('estimators')}'",
        "detector_folder": f"(made by '{command_name('train-detector')}')",
        "detector_signal_folder": f"a folder made by {command_name('train-detector')}",
        "policy_run": f"a run of '{command_name('simulate')} --policy'",
        "monitor_scores": f"'{command_of('import-scores')}'",
    }
