"""The statistic calculators: each turns a run's rows into a table, computed once and stored.

* token rows: :func:`extract` (results + sidecars → base tables), :func:`rescore` and
  :func:`score_observations` (teacher-forced rows of recorded messages);
* summaries: :func:`aggregate`, :func:`read_turn_summary`, :func:`read_trajectory_summary`;
  :func:`summarize_recorded` (the trajectory summary from a results file's recorded ``uq_summary``,
  when its token sidecars are not at hand);
* the modules :mod:`saup` (``uq.saup.saup(run)``) and :mod:`dynamics` (:func:`read_agent_turns`, :func:`compute_early_warning`),
  :func:`verbalized_confidence`, :func:`probe` (structural / conceptual);
* actions: :func:`sample_actions` (K alternative next actions at every agent decision point) and
  :func:`action_turn_table` (their agreement, clusters, entropies, structural/conceptual per point).

Estimators (``agentuq_nb.estimators``) read these tables; evaluation scores the estimators. Names
load on first use, so ``from agentuq_nb import uq`` stays cheap.
"""
from agentuq_nb.common.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "extraction": ["extract", "ExtractReport"],
    "aggregation": ["aggregate", "read_summary", "read_turn_summary", "read_trajectory_summary", "turn_summary",
                    "trajectory_summary", "example_trajectory", "read_trajectory_tokens"],
    "recorded_summary": ["summarize_recorded", "has_recorded_summary"],
    "observation": ["rescore", "score_observations", "ScoringReport"],
    "dynamics": ["agent_turns", "read_agent_turns", "compute_early_warning", "early_warning_scores", "FRACTIONS"],
    "verbalized": ["verbalized_confidence", "missing_rate"],
    "structural": ["probe"],
    "action_sampling": ["sample_actions", "ActionSamplingReport"],
    "action_uq": ["action_turn_table"],
    "token_metrics": ["with_token_metrics"],
})
