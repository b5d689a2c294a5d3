"""Evaluation layer: failure-prediction metrics with bootstrap CIs, and distribution-free tools.

Contract: **higher uncertainty = more likely failure**; failure = ``reward < failure_threshold``
(default 1.0) is the positive class.

Modules (one job each):

* :mod:`.metrics` - metric definitions (AUROC, AUARC, AURC, PRR, correlations), batched for the
  bootstrap, and the ROC / accuracy-rejection / risk-coverage curves;
* :mod:`.bootstrap` - trajectory resampling, percentile CIs, paired bootstrap p-values;
* :mod:`.failure_report` - :func:`failure_metrics`, the JSON report behind ``eval_metrics.json``;
* :mod:`.conformal` - AgentPulse: split/Mondrian conformal, ACI, BH, pipeline bounds,
  risk-controlled thresholds, coverage reports;
* :mod:`.agent_comparison` - the same tools applied to agents: leaderboard with FDR marks,
  success-rate intervals, abstention report, ACI on a stream of runs.
"""
from agentuq_nb.evaluation.agent_comparison import (
    Leaderboard,
    abstention_report,
    aci_stream,
    leaderboard,
    success_rate_intervals,
)
from agentuq_nb.evaluation.bootstrap import paired_bootstrap_pvalue, percentile_ci
from agentuq_nb.evaluation.conformal import (
    aci,
    bh,
    bh_adjusted,
    conformal_quantile,
    coverage_report,
    pipeline_bounds,
    risk_control_threshold,
    split_interval,
)
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.evaluation.metrics import (
    HIGHER_IS_BETTER,
    METRICS,
    UndefinedMetricError,
    auarc,
    auroc,
    aurc,
    correlation,
    failure_curves,
    failure_labels,
    prr,
)

__all__ = [
    "HIGHER_IS_BETTER", "METRICS", "Leaderboard", "UndefinedMetricError", "abstention_report", "aci", "aci_stream",
    "auarc", "auroc", "aurc", "bh", "bh_adjusted", "conformal_quantile", "correlation",
    "coverage_report", "failure_curves", "failure_labels", "failure_metrics", "leaderboard",
    "paired_bootstrap_pvalue", "percentile_ci", "pipeline_bounds", "prr",
    "risk_control_threshold", "split_interval", "success_rate_intervals",
]
