"""The statistic calculators: each turns rows into a table; the steps (``agentuq_nb.steps``) run them over a run
folder and publish what they compute.

* token rows: :func:`with_token_metrics`; the teacher-forced rows of one recorded trajectory
  (:func:`~agentuq_nb.uq.observation.score_one`);
* summaries: :func:`turn_summary`, :func:`trajectory_summary` (the run's stored ones, :func:`read_turn_summary`,
  :func:`read_trajectory_summary` and one trajectory's token rows :func:`read_trajectory_tokens`, are read by the store,
  :mod:`agentuq_nb.io.store.artifacts` and :mod:`agentuq_nb.io.store.token_table`, and offered here too);
* the modules :mod:`saup` (``uq.saup.saup(run)``) and :mod:`dynamics` (:func:`read_agent_turns`,
  :func:`compute_early_warning`), :mod:`verbalized` (parsing a stated confidence), :func:`probe` (structural /
  conceptual);
* actions: the decision points and K samples of one trajectory (:mod:`action_sampling`) and
  :func:`action_turn_table` (their agreement, clusters, entropies, structural/conceptual per point).

Estimators (``agentuq_nb.estimators``) read these tables; evaluation scores the estimators. Names
load on first use, so ``from agentuq_nb import uq`` stays cheap.
"""
from agentuq_nb.common.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "aggregation": ["turn_summary", "trajectory_summary", "example_trajectory"],
    "agentuq_nb.io.store.artifacts": ["read_summary", "read_turn_summary", "read_trajectory_summary"],
    "agentuq_nb.io.store.token_table": ["read_trajectory_tokens"],
    "observation": ["ScoringReport"],
    "dynamics": ["agent_turns", "read_agent_turns", "compute_early_warning", "early_warning_scores", "FRACTIONS"],
    "verbalized": ["parse_confidence", "missing_rate"],
    "structural": ["probe"],
    "action_uq": ["action_turn_table"],
    "token_metrics": ["with_token_metrics"],
})
