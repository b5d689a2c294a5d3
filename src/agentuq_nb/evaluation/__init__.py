"""Evaluation layer: failure-prediction metrics with bootstrap CIs, and distribution-free tools.

Contract: **higher uncertainty = more likely failure**; failure = ``reward < failure_threshold``
(default 1.0) is the positive class.

Modules (one job each):

* :mod:`.metrics` - metric definitions (AUROC, AUARC, AURC, PRR, correlations), batched for the
  bootstrap, and the ROC / accuracy-rejection / risk-coverage curves;
* :mod:`.bootstrap` - trajectory or task-clustered resampling, percentile CIs, paired bootstrap p-values;
* :mod:`.failure_report` - :func:`failure_metrics`, the JSON report behind ``eval_metrics.json``;
* :mod:`.multi_trial` - several trials per task: success rates, τ²-bench's pass^k, soft-label
  AUROC/Brier, label noise;
* :mod:`.conformal` - AgentPulse: split/Mondrian conformal, ACI, BH, pipeline bounds,
  risk-controlled thresholds, coverage reports;
* :mod:`.agent_comparison` - the same tools applied to agents: leaderboard with FDR marks,
  success-rate intervals, abstention report, ACI on a stream of runs;
* :mod:`.calibration` - scores as failure probabilities (Platt, isotonic, cross-fitted by task), ECE,
  Brier decomposition, reliability tables;
* :mod:`.estimator_table` - every estimator of a score table on equal footing (metrics, CIs, calibration,
  length control, combined predictors);
* :mod:`.combined_predictor` - cross-fitted logistic regression or gradient boosting over several estimators;
* :mod:`.tracer_tuning` - TRACER's parameters tuned in-sample (its protocol) and by nested cross-fitting by task;
* :mod:`.length_control` - AUROC within message-count strata and after regressing out log length;
* :mod:`.pooled_auroc` - AUROC pooled over runs, stratified by run (and length), its within-run task
  bootstrap, the paired test against the best length baseline and BH over estimators.

What reads and commits run folders (``evaluate``, ``compare-estimators``, ``calibrate``, ``blackbox``,
``compare-runs``) is a step: :mod:`agentuq_nb.steps`.
"""
from agentuq_nb.common.lazy import lazy_exports

# Names are imported on first use: ``evaluate`` needs the metrics, not statsmodels and the
# conformal stack, and a command line run should not pay for what it does not use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "agent_comparison": ["Leaderboard", "abstention_report", "aci_stream", "leaderboard", "success_rate_intervals"],
    "bootstrap": ["paired_bootstrap_pvalue", "percentile_ci", "mean_ci"],
    "multi_trial": ["label_noise", "multi_trial_readout", "multi_trial_report", "pass_hat_k", "soft_auroc", "soft_brier",
                    "task_labels", "task_outcomes", "tasks_repeat"],
    "conformal": ["aci", "bh", "bh_adjusted", "conformal_quantile", "coverage_report", "pipeline_bounds",
                  "risk_control_threshold", "split_interval"],
    "failure_report": ["failure_metrics"],
    "metrics": ["HIGHER_IS_BETTER", "METRICS", "UndefinedMetricError", "auarc", "auarc_tie_mean", "auroc", "aurc", "correlation",
                "failure_curves", "failure_labels", "prr"],
    "estimator_table": ["evaluate_estimators", "evaluate_estimators_and_combinations", "estimator_metrics",
                        "REPORTED_METRICS"],
    "dynamics": ["dynamics_curve", "early_warning_table"],
    "calibration": ["brier_decomposition", "calibration_report", "calibration_table", "cross_fitted_probabilities",
                    "expected_calibration_error", "fit_calibrator", "reliability_table"],
    "combined_predictor": ["cross_fitted_combination"],
    "length_control": ["beats_length_baseline", "length_controlled", "residual_auroc", "stratified_auroc"],
    "pooled_auroc": ["pooled_leaderboard", "stratified_auroc_batch", "stratum_pair_sums"],
})
