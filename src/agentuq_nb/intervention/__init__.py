"""Acting on uncertainty inside the loop: online signals, policies (defer, resample_vote, confirm,
random), thresholds certified by risk control, and the outcome accounting of intervention runs.

The simulator's side of the contract is :mod:`agentuq_nb.sim.decisions`; this layer sits above the
estimators and the evaluation (the signals use the registry and the action resampler, certification
uses Learn-then-Test and the calibration).
"""
from agentuq_nb.common.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "certify": ["certify_threshold", "certify_arrays", "fit_signal_calibrator", "heldout_risk", "unflagged_risk",
                "trajectory_signals", "SignalCalibrator"],
    "outcomes": ["read_intervention_run", "outcome_table", "policy_summary", "oracle_defer_summary",
                 "defer_curve_from_observe", "random_rate_for", "threshold_grid"],
    "signals": ["OnlineSignal", "SignalValue", "online_signal", "signal_names"],
    "policies": ["InterventionPolicy", "build_policy"],
})
