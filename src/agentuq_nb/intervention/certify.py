"""Thresholds of an intervention policy certified from an earlier run, and checked on a held-out one.

The trajectory-level online score is the max over a simulation's decision points of the signal: a run
is *unflagged* at threshold t iff its max signal <= t (the trigger fires when ``signal > t``). The
certificate is Learn-then-Test (:func:`agentuq_nb.evaluation.conformal.risk_control_threshold`) on the
calibration run's (max signal, failure) pairs: the failure rate among unflagged runs is <= δ (``risk``)
with probability >= 1 - α (``alpha``). Note the renaming: the issue's δ is the conformal module's
``alpha`` (the risk level) and the issue's α its ``delta`` (the error probability).

A calibrated signal (``calibrated:<base>``) is Platt scaling of failure on the per-trajectory max
``<base>`` signal, fitted by :func:`agentuq_nb.evaluation.calibration.fit_calibrator`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

from agentuq_nb.evaluation.calibration import Calibrator, fit_calibrator, one_thread
from agentuq_nb.evaluation.conformal import risk_control_threshold
from agentuq_nb.intervention.outcomes import read_intervention_run, results_source
from agentuq_nb.io.errors import InputError
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

SIGNAL_COLUMNS = [*TRAJECTORY_KEYS, "max_signal", "n_decisions", "failure", "escalated", "intervened"]
#: stands for the max signal of a run in which no decision point had a defined signal: such a run is never
#: flagged online (NaN never fires), so it is accepted at every threshold
NEVER_FLAGGED = float(np.finfo(float).min)


def recorded_signal(policy: dict[str, Any]) -> str | None:
    """The signal name a run's policy description records."""
    return policy.get("signal")


def trajectory_signals(run_dir, signal_name: str | None = None) -> pd.DataFrame:
    """One row per simulation of the intervention run at ``run_dir``: the keys, ``max_signal`` (max over
    its decision points of the online signal, NaN when none was defined), ``n_decisions``, ``failure``
    (the environment's reward < 1: ``intervention.env_reward``, else the recorded reward; NA when the
    simulation has no reward), ``escalated`` and ``intervened`` (some action != proceed).

    ``signal_name`` (None: whatever the run records) must be the signal the run's policy recorded; a
    clear InputError naming the file otherwise, or when the run has no intervention blocks."""
    run = read_intervention_run(run_dir)
    recorded = recorded_signal(run.policy)
    if signal_name is not None and recorded != signal_name:
        raise InputError(run.path, f"the run's policy recorded the signal {recorded!r}, not {signal_name!r}: "
                                   "certify on a run of the same signal")
    sims = run.simulations
    reward = sims["env_reward"].to_numpy(dtype=float)
    failure = pd.array(np.where(np.isfinite(reward), reward < 1.0, False), dtype="boolean")
    failure[~np.isfinite(reward)] = pd.NA
    out = sims[TRAJECTORY_KEYS].copy()
    out["max_signal"] = sims["max_signal"].to_numpy(dtype=float)
    out["n_decisions"] = sims["num_decisions"].astype(int).to_numpy()
    out["failure"] = failure
    out["escalated"] = sims["escalated"].to_numpy(dtype=bool)
    out["intervened"] = sims["num_interventions"].to_numpy(dtype=int) > 0
    return out


def calibration_signals(calibration_run, signal_name: str) -> pd.DataFrame:
    """:func:`trajectory_signals` of a calibration run, refused (InputError naming the file) when its policy
    acted on some simulation: after an intervention the path, its later signals and its outcome are no
    longer the unacted agent's, which the certificate and the calibration are about (use an observe run)."""
    signals = trajectory_signals(calibration_run, signal_name)
    acted = int(signals["intervened"].sum())
    if acted:
        raise InputError(results_source(calibration_run),
                         f"{acted} of {len(signals)} simulations were intervened on: a calibration run must be "
                         "an observe run (its policy never acts)")
    return signals


def _scored(signals: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, int]:
    """(max signal with never-signalled runs at :data:`NEVER_FLAGGED`, failure, n dropped for lack of a reward)."""
    known = signals["failure"].notna().to_numpy()
    u = signals["max_signal"].to_numpy(dtype=float)[known]
    failure = signals["failure"].to_numpy(dtype=bool, na_value=False)[known]
    return np.where(np.isnan(u), NEVER_FLAGGED, u), failure, int((~known).sum())


def certify_arrays(max_signal, failure, risk: float, alpha: float) -> dict[str, Any]:
    """The certified threshold of per-trajectory ``max_signal`` against ``failure`` (arrays): the
    JSON-able summary of :func:`risk_control_threshold` with ``alpha=risk`` (δ) and ``delta=alpha``."""
    lt = risk_control_threshold(max_signal, failure, alpha=risk, delta=alpha)
    return {"threshold": lt["threshold"], "feasible": bool(lt["feasible"]), "risk": float(risk),
            "alpha": float(alpha), "n": int(lt["n"]), "n_accepted": int(lt["n_accepted"]),
            "coverage": float(lt["coverage"]), "empirical_risk": lt["empirical_risk"], "p_value": lt["p_value"],
            "min_accepted": int(lt["min_accepted"])}


def certify_threshold(calibration_run, signal_name: str, risk: float, alpha: float = 0.1) -> dict[str, Any]:
    """The threshold of ``signal_name`` certified on ``calibration_run`` (an observe run of that signal):
    the failure rate among runs whose max signal <= threshold is <= ``risk`` (δ) with probability >= 1 -
    ``alpha``. Returns (JSON-able) ``threshold`` (None: infeasible, intervene everywhere), ``feasible``,
    ``risk``, ``alpha``, ``n``, ``n_accepted``, ``coverage``, ``empirical_risk``, ``p_value``,
    ``min_accepted``, plus ``signal``, ``calibration`` (the results read), ``n_no_reward`` (left out) and
    ``n_never_signalled`` (no defined signal: never flagged, so accepted at every threshold)."""
    signals = calibration_signals(calibration_run, signal_name)
    u, f, dropped = _scored(signals)
    out = certify_arrays(u, f, risk, alpha)
    out.update(signal=signal_name, calibration=str(results_source(calibration_run)),
               n_no_reward=dropped, n_never_signalled=int((u == NEVER_FLAGGED).sum()))
    return out


@dataclass
class SignalCalibrator:
    """A signal value -> failure probability map (Platt scaling on the per-trajectory max ``signal``),
    picklable; NaN/None maps to NaN. Called on a scalar it returns a float, on an array an array."""

    signal: str
    calibrator: Calibrator

    def __call__(self, value):
        scalar = np.ndim(value) == 0
        x = np.asarray(np.nan if value is None else value, dtype=float).reshape(-1)
        with one_thread():
            prob = self.calibrator.predict(x)
        return float(prob[0]) if scalar else prob


def fit_signal_calibrator(calibration_run, signal_name: str) -> SignalCalibrator:
    """Platt scaling (:func:`fit_calibrator`) of failure on the max ``signal_name`` of every simulation of
    ``calibration_run`` (runs without a defined signal or a reward are left out)."""
    signals = calibration_signals(calibration_run, signal_name)
    keep = signals["failure"].notna().to_numpy() & np.isfinite(signals["max_signal"].to_numpy(dtype=float))
    if not keep.any():
        raise InputError(results_source(calibration_run),
                         f"no simulation has both a defined {signal_name!r} signal and a reward: nothing to calibrate on")
    with one_thread():
        cal = fit_calibrator(signals["max_signal"].to_numpy(dtype=float)[keep],
                             signals["failure"].to_numpy(dtype=bool, na_value=False)[keep], method="platt")
    return SignalCalibrator(signal_name, cal)


def unflagged_risk(max_signal, failure, threshold: float | None, ci_alpha: float = 0.05) -> dict[str, Any]:
    """The failure rate among trajectories whose max signal <= ``threshold`` (NaN max signal: never
    flagged), with a Wilson interval (statsmodels ``proportion_confint``). ``threshold`` None: nothing is
    unflagged (rate None)."""
    u = np.where(np.isnan(np.asarray(max_signal, dtype=float)), NEVER_FLAGGED, np.asarray(max_signal, dtype=float))
    f = np.asarray(failure, dtype=bool)
    accepted = np.zeros(u.shape, bool) if threshold is None else u <= threshold
    n, k = int(accepted.sum()), int(f[accepted].sum())
    lo, hi = proportion_confint(k, n, alpha=ci_alpha, method="wilson") if n else (np.nan, np.nan)
    return {"threshold": threshold, "n": int(u.size), "n_unflagged": n, "n_unflagged_failures": k,
            "coverage": n / u.size if u.size else None, "risk": k / n if n else None,
            "risk_lo": float(lo) if n else None, "risk_hi": float(hi) if n else None}


def heldout_risk(run_dir, threshold: float | None, signal_name: str | None = None,
                 ci_alpha: float = 0.05) -> dict[str, Any]:
    """The certificate checked on a held-out run (any policy that records the signal, e.g. observe: an
    unflagged simulation was never acted on, so it is the observe run's whatever the policy): the
    failure rate (environment's reward < 1) among its runs whose max signal <= ``threshold`` with a Wilson
    interval, the count of such runs (``n_unflagged``) and of failures among them. Simulations without a
    reward are left out (``n_no_reward``)."""
    signals = trajectory_signals(run_dir, signal_name)
    known = signals["failure"].notna().to_numpy()
    out = unflagged_risk(signals["max_signal"].to_numpy(dtype=float)[known],
                         signals["failure"].to_numpy(dtype=bool, na_value=False)[known], threshold, ci_alpha)
    out["n_no_reward"] = int((~known).sum())
    return out
