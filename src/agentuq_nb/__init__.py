"""agentuq_nb: uncertainty quantification for LLM agents.

Layers, bottom to top (a layer imports only layers below it; an import-linter contract):
common -> records -> io -> llm -> sim -> uq -> estimators -> evaluation -> figures -> pipeline -> cli,
with ``distributed`` (the job executor, Dask) beside them. Notebooks use the facades
``agentuq_nb.uq``, ``agentuq_nb.estimators`` and ``agentuq_nb.evaluation``.
"""
from agentuq_nb.common.offline import ensure_offline_env
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD

ensure_offline_env()

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
        export_html(data, export)
    return explorer_widget(data)
