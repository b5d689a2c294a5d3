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
import importlib

# Names are imported on first use (PEP 562): ``evaluate`` needs the metrics, not statsmodels and
# the conformal stack, and a command line run should not pay for what it does not use.
_EXPORTS = {
    "agent_comparison": ["Leaderboard", "abstention_report", "aci_stream", "leaderboard", "success_rate_intervals"],
    "bootstrap": ["paired_bootstrap_pvalue", "percentile_ci"],
    "conformal": ["aci", "bh", "bh_adjusted", "conformal_quantile", "coverage_report", "pipeline_bounds",
                  "risk_control_threshold", "split_interval"],
    "failure_report": ["failure_metrics"],
    "metrics": ["HIGHER_IS_BETTER", "METRICS", "UndefinedMetricError", "auarc", "auroc", "aurc", "correlation",
                "failure_curves", "failure_labels", "prr"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
