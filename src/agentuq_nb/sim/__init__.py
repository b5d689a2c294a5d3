"""The agent–user–tool harness with τ²-bench semantics, its built-in domains and reward evaluator.

* :func:`run_simulations` — tasks × trials → ``results.json`` (τ²-bench v0) + agentuq sidecars,
  resumable, with a progress bar.
* :func:`list_domains`, :func:`load_domain` — the built-in domains (``bookshop``).
* :func:`evaluate_simulation` — τ²-bench's reward (DB hash, actions, communicate checks).
"""
from agentuq_nb.sim.domain import (
    Domain,
    ToolError,
    Toolkit,
    UnknownDomainError,
    UnknownTaskError,
    list_domains,
    load_domain,
    tool,
)
from agentuq_nb.sim.evaluator import evaluate_simulation
from agentuq_nb.sim.runner import LOCAL_MODEL, RunConfigMismatch, SimulationFailed, run_simulations, trial_seeds

__all__ = [
    "Domain", "Toolkit", "ToolError", "UnknownDomainError", "UnknownTaskError", "RunConfigMismatch", "SimulationFailed",
    "LOCAL_MODEL", "list_domains", "load_domain", "tool", "evaluate_simulation", "run_simulations", "trial_seeds",
]
