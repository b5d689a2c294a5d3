"""agentuq_nb: uncertainty quantification for LLM agents.

Layers, bottom to top (a layer imports only layers below it; an import-linter contract):
common -> records -> io -> llm -> sim -> uq -> estimators -> evaluation -> figures -> pipeline -> cli,
with ``distributed`` (the job executor, Dask) beside them. Notebooks use the facades
``agentuq_nb.uq``, ``agentuq_nb.estimators`` and ``agentuq_nb.evaluation``.
"""
from agentuq_nb.common.offline import ensure_offline_env

ensure_offline_env()

__version__ = "0.1.0"
