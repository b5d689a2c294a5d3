"""A bare JSON list of τ²-bench simulations: the shape several leaderboard submissions use (τ²-bench's
``trajectories/<agent>_<domain>_<model>_<n>trial.json``): ``[{id, task_id, messages, reward_info, trial, seed, …}, …]``,
no ``timestamp``, ``info`` or ``tasks`` around them.

:mod:`agentuq_nb.io.ingest.results` tells it from the original τ-bench's list (``{task_id, reward, traj}``) by its
first item (:func:`is_simulation`) and reads each item as the simulation it is. What a results file's header would
say, this module makes from the simulations themselves (:func:`results_header`, from the first
:data:`HEADER_SCAN_ITEMS` of them):

* the **domain**: the first ``# <Domain> Agent Policy`` heading of a simulation's ``policy`` field (τ²-bench 1.x
  records the policy on each simulation), as the τ-bench reader finds it in a system prompt
  (:func:`agentuq_nb.io.ingest.tau_bench.infer_domain`: else ``airline``/``retail`` in the file name, else
  :data:`~agentuq_nb.io.ingest.tau_bench.DEFAULT_DOMAIN`); ``info.domain_inferred_from`` says which rule gave it;
* the **models**: the model most of the assistant's (and the user's) messages name in their ``raw_data.model``
  (the provider's response), ``info.models_inferred_from`` saying so; absent where no message names one.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentuq_nb.io.ingest import tau_bench

LAYOUT = "simulation_list"
RESULTS_FORMAT = "a JSON list of τ²-bench simulations: {id, task_id, messages, reward_info, …}"
#: simulations read for the header's domain and models
HEADER_SCAN_ITEMS = 32


def is_simulation(item: Any) -> bool:
    """Whether a list's item is a τ²-bench simulation (a ``messages`` list, no τ-bench ``traj``)."""
    return isinstance(item, dict) and isinstance(item.get("messages"), list) and "traj" not in item


def _message_models(sim: dict, role: str) -> Iterable[str]:
    for message in sim.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == role:
            raw = message.get("raw_data")
            model = raw.get("model") if isinstance(raw, dict) else None
            if isinstance(model, str) and model:
                yield model


def results_header(first: list[dict], path: str | Path) -> dict[str, Any]:
    """The τ²-shaped header of a simulation list from its first simulations ``first`` (see the module docstring)."""
    policy = next((s["policy"] for s in first if isinstance(s.get("policy"), str) and s["policy"].strip()), None)
    domain, rule = tau_bench.infer_domain(policy, path)
    rule = "policy heading" if rule == "system prompt heading" else rule
    info: dict[str, Any] = {"results_format": LAYOUT, "domain_inferred_from": rule,
                            "environment_info": {"domain_name": domain, **({"policy": policy} if policy else {})}}
    for role, key in (("assistant", "agent_info"), ("user", "user_info")):
        counts = Counter(model for sim in first for model in _message_models(sim, role))
        if counts:
            info[key] = {"llm": counts.most_common(1)[0][0]}
            info["models_inferred_from"] = "the messages' raw_data.model (the most common per role)"
    return {"info": info}
