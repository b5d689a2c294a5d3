"""agentuq_nb: uncertainty quantification for LLM agents.

Layers, bottom to top (a layer imports only layers below it; the import-linter contract of pyproject.toml):
common -> records -> io -> llm -> sim -> uq -> estimators -> evaluation -> intervention -> figures -> steps ->
pipeline -> cli, with ``distributed`` (the job executor, Dask) beside them. The layers up to ``figures`` compute
(calculators, estimators, statistics, figures) and name no command; ``steps`` (one module per command) reads and
commits run folders; ``pipeline`` runs the studies; ``cli`` is the command line over the steps.

Notebooks import the facades ``agentuq_nb.figures``, ``agentuq_nb.evaluation``, ``agentuq_nb.estimators``,
``agentuq_nb.uq`` and ``agentuq_nb.intervention``, a step's keyword form from its module
(``from agentuq_nb.steps.evaluate import evaluate``) and the studies of ``agentuq_nb.pipeline``; :func:`explore`
opens the trajectory explorer.
"""
from agentuq_nb.common.offline import ensure_offline_env
from agentuq_nb.io.errors import COMMAND_LAYER
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD

ensure_offline_env()
# the layer whose declarations say which command makes each artefact and what a lower layer's message names
# (loaded when a message first needs its words, io.errors.load_command_layer): the same words whatever was imported
COMMAND_LAYER[:] = ["agentuq_nb.steps"]

__version__ = "0.1.0"


def explore(run_dir, estimators=None, scorer=None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, export=None):
    """Explore the trajectories of a run folder (or a list of them) in JupyterLab: why each got its reward (the
    harness's checks, the expected tool calls beside those made, the task), the same task's other trials side by
    side, search and sort by any estimator (with its AUROC), per-message signals, tokens coloured by NLL with the
    top-k alternatives on hover where the run has them, the K resampled actions at each decision point. Returns the
    widget (anywidget); ``widget.export("view.html")`` (or ``export=`` here) writes the same view as one standalone
    HTML file. See :mod:`agentuq_nb.figures.explorer`."""
    from agentuq_nb.figures.explorer import explorer_data, explorer_widget, export_html

    data = explorer_data(run_dir, estimators=estimators, scorer=scorer, failure_threshold=failure_threshold)
    if export is not None:
        export_html(data, export, run_dirs=run_dir if isinstance(run_dir, (list, tuple)) else [run_dir])
    return explorer_widget(data)
