"""agentuq_nb: uncertainty quantification for LLM agents.

Layers, bottom to top (a layer imports only layers below it):
records -> io -> llm -> sim -> uq -> evaluation -> figures -> pipeline/cli.
"""
from agentuq_nb.common.offline import ensure_offline_env

ensure_offline_env()

__version__ = "0.1.0"
