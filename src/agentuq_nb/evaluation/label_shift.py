"""Label-shift adaptation of calibrated failure probabilities to a run with its own failure rate (pure statistics).

A detector's probabilities are calibrated on its training runs, whose pooled failure rate π_s is not the rate of the
run it predicts (runs differ: 2 %-82 % of a run fails). Under label shift (the failure rate moves, what a failure
looks like does not), Bayes' rule moves every probability by the same amount on the log-odds scale::

    logit p_t(x) = logit p_s(x) + logit π_t - logit π_s

and the run's own rate π_t is estimated from its unlabelled probabilities by the EM procedure of Saerens, Latinne &
Decaestecker (2002) (:func:`em_failure_rate`): start at π_s, adjust every probability to the current π, take their
mean as the next π, until it stops moving - the maximum-likelihood π of the run's scores under the mixture
(:func:`rate_log_likelihood`; the tests check the fixed point against ``scipy.optimize``). Written here rather than
taken from QuaPy (whose ``EMQ.EM`` is the same dozen lines): that package brings dataset downloaders (``ucimlrepo``,
``xlrd``) and ``abstention`` into the toolkit for a fixed-point loop. Soft black-box shift estimation (Lipton et al.
2018, with the probabilities' class-conditional means for the confusion matrix; :func:`bbse_failure_rate`) is given
beside it.

**When the scores do not carry the run's rate.** Label shift assumes a failure looks the same in every run; across
agents and domains it does not, and where a run's probabilities barely spread, a small offset of their mean drives
the maximum-likelihood rate to 0 or 1. So EM is run as MAP-EM with κ pseudo-trajectories at the training rate (a
Beta prior; the M-step is ``π = (Σ posteriors + κ·π_s) / (n + κ)``), κ chosen among :data:`STRENGTHS` by the mean
per-run Brier score of the centred probabilities on held-out training runs (:func:`choose_strength`; κ = ∞: the
training rate, not estimated from the run, when estimating did not help there). The leave-one-run-out judgement chooses κ for each run on the other
runs only (nested).

**Centred on the run's rate.** The detector's models are fitted within runs (an intercept per training run, dropped
when predicting), so the level of a new run's log-odds is not calibrated to anything: its mean probability may sit
far from any rate (0.20 on a run of which 82 % failed, 0.41 on one of 2 %). Every run's probabilities are therefore
moved by one log-odds shift so that their mean is the run's rate - EM's where adapting helped, else the rate not
estimated from the run's scores (:func:`center_probabilities`; at EM's fixed point the same move as Bayes' rule
above). That rate is the training rate moved by what the training runs of the run's agent model failed, partially
pooled (:func:`~.run_rate.agent_rate`; the training rate itself for an agent no training run had), its interval that
of the share of the run's trajectories that fail under the spread of the runs' rates: the run's scores did not narrow
it.

* :func:`adapt` - a run's estimated rate with its interval (bootstrap: trajectories, or tasks when given, resampled,
  every resample's EM run at once, vectorized; or the runs' spread) and the centred probabilities;
* :func:`leave_one_run_out_adaptation` - the judgement on labelled runs: each run's held-out log-odds calibrated on
  the *other* runs (Platt), then adapted to the run's EM rate; per run the Brier score against the base rate's
  ``ȳ(1 - ȳ)`` (what a constant equal to the run's true rate scores - it knows the rate), against the constant
  training rate's (what knowing nothing of the run scores), the estimated against the true rate, ECE;
* :func:`leave_one_run_out_pooled_rates` - the rate of each held-out run from a model fitted *pooled* across the
  other runs (no run intercepts) on features whose level differs between runs: the mean probability, EM and soft BBSE
  on it - whether such a score carries a run's rate where the within-run detector's cannot (measured in
  ``benchmarks/bench_label_shift.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.calibration import calibration_report, reliability_table
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.detector_model import platt_probability, within_run_platt
from agentuq_nb.evaluation.run_rate import agent_rate

#: probabilities are kept this far from 0 and 1 (a probability of exactly 0 or 1 cannot move on the log-odds scale)
EPS = 1e-6
#: EM stops when the rate moves less than this between two iterations
TOL = 1e-7
MAX_ITER = 2000
#: the prior strengths (pseudo-trajectories at the training rate) among which the held-out training runs choose
STRENGTHS = (0.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, float("inf"))


#: how far from 0 and 1 a probability is kept when it is only moved on the log-odds scale (centring): as close as
#: float64 tells 1 - p apart, so that a run whose probabilities all sit near 1 keeps its order
FINE_EPS = 1e-15


def logit(p, eps: float = EPS) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def shift_probabilities(prob, source_rate, target_rate) -> np.ndarray:
    """``prob`` (calibrated where the failure rate was ``source_rate``: a number, or one per row) moved to a population
    whose rate is ``target_rate`` by the log-odds shift of the module docstring (an adjusted intercept)."""
    z = logit(prob) + logit(target_rate) - logit(source_rate)
    out = 1.0 / (1.0 + np.exp(-z))
    return np.where(np.isfinite(np.asarray(prob, dtype=float)), out, np.nan)


def center_probabilities(prob, rate) -> tuple[np.ndarray, float]:
    """``(probabilities, shift)``: ``prob`` moved by one ``shift`` on the log-odds scale (an adjusted intercept: the
    within-run slope kept) so that their mean is ``rate`` - the run's expected number of failures is then its
    estimated rate times its size. At EM's fixed point this is the Bayes move of :func:`shift_probabilities` (the
    mean of the adapted probabilities is the rate EM returns); at the training rate (no adaptation) it removes the
    offset of the run's mean log-odds, which a model fitted within runs does not fix (its run intercepts are dropped).
    NaN rows stay NaN; a NaN ``rate`` or no finite row: no shift."""
    from scipy.optimize import brentq

    p = np.asarray(prob, dtype=float)
    ok = np.isfinite(p)
    if not ok.any() or not np.isfinite(rate):
        return p.copy(), 0.0
    z = logit(p[ok], FINE_EPS)
    target = float(np.clip(rate, EPS, 1 - EPS))

    def gap(d: float) -> float:
        return float(np.mean(1.0 / (1.0 + np.exp(-(z + d))))) - target

    reach = 40.0 + float(np.abs(z).max())
    shift = float(brentq(gap, -reach, reach, xtol=1e-12)) if gap(-reach) < 0 < gap(reach) else 0.0
    return shift_by(p, shift), shift


def shift_by(prob, shift: float) -> np.ndarray:
    """``prob`` moved by ``shift`` on the log-odds scale (NaN stays NaN)."""
    p = np.asarray(prob, dtype=float)
    out = 1.0 / (1.0 + np.exp(-(logit(p, FINE_EPS) + shift)))
    return np.where(np.isfinite(p), out, np.nan)


def rate_log_likelihood(rate: float, prob, source_rate) -> float:
    """The log-likelihood (up to a constant) of a run's calibrated probabilities when its failure rate is ``rate``:
    Σ log(rate·p/π_s + (1 - rate)(1 - p)/(1 - π_s)) - what EM maximizes."""
    p = np.clip(np.asarray(prob, dtype=float), EPS, 1 - EPS)
    s = np.clip(np.asarray(source_rate, dtype=float), EPS, 1 - EPS)
    return float(np.sum(np.log(rate * p / s + (1 - rate) * (1 - p) / (1 - s))))


def _em(p: np.ndarray, s: np.ndarray, w: np.ndarray, tol: float, max_iter: int, strength: float = 0.0
        ) -> tuple[np.ndarray, int, bool]:
    """EM on ``b`` weighted resamples at once: ``p`` (n,), ``s`` (n,) the source rate of each row, ``w`` (b, n) row
    weights (counts of a resample); ``strength`` κ pseudo-trajectories at the source rate (MAP-EM, module docstring;
    infinite: the source rate itself). Returns the rates (b,), iterations, whether every resample converged."""
    a1, a0 = p / s, (1 - p) / (1 - s)
    total = w.sum(axis=1)
    center = (w @ s) / np.where(total > 0, total, 1)  # the source rate (per resample: its rows' mean)
    if not np.isfinite(strength):
        return center, 0, True
    rate = center.copy()  # start at the source rate
    for it in range(1, max_iter + 1):
        num = rate[:, None] * a1
        post = num / (num + (1 - rate[:, None]) * a0)
        new = ((w * post).sum(axis=1) + strength * center) / np.where(total + strength > 0, total + strength, 1)
        moved = np.max(np.abs(new - rate)) if len(new) else 0.0
        rate = new
        if moved < tol:
            return rate, it, True
    return rate, max_iter, False


#: appended to what an interval resampled where it was widened to the training runs' spread (:func:`adapt`)
WIDENED = " and runs"


@dataclass(frozen=True)
class RateEstimate:
    """A run's failure rate estimated from its unlabelled probabilities: ``rate`` with its interval (``lo``, ``hi``;
    NaN without one), ``source_rate`` (the mean rate the probabilities were calibrated at), ``n`` rows,
    ``iterations`` and ``converged`` of EM, ``method``, ``resampled`` (what the interval resampled: ``trajectories``
    or ``tasks`` of the run; ``runs``: not estimated from the run's scores, the interval is the run's share of
    failures under the spread of the training runs' rates, :func:`~.run_rate.agent_rate`; ``trajectories and runs``
    or ``tasks and runs``: MAP-EM's bootstrap interval widened to that spread; ``none``: no interval),
    ``shift`` (the log-odds move that centres the run's probabilities on ``rate``, :func:`center_probabilities`),
    ``agent`` (the run's agent model, where known) and ``agent_runs`` (training runs of that agent that moved a rate
    not estimated from the run's scores, :func:`~.run_rate.agent_rate`)."""

    rate: float
    lo: float
    hi: float
    source_rate: float
    n: int
    iterations: int
    converged: bool
    method: str = "em"
    resampled: str = "trajectories"
    shift: float = 0.0
    agent: Optional[str] = None
    agent_runs: int = 0

    def as_dict(self) -> dict:
        return {"rate": self.rate, "lo": self.lo, "hi": self.hi, "source_rate": self.source_rate, "n": self.n,
                "iterations": self.iterations, "converged": self.converged, "method": self.method,
                "resampled": self.resampled, "shift": self.shift, "agent": self.agent, "agent_runs": self.agent_runs}


def _clean(prob, source_rate) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    p = np.asarray(prob, dtype=float)
    s = np.broadcast_to(np.asarray(source_rate, dtype=float), p.shape).astype(float)
    ok = np.isfinite(p) & np.isfinite(s)
    if (s[ok] <= 0).any() or (s[ok] >= 1).any():
        raise ValueError("the source failure rate must lie strictly between 0 and 1")
    return np.clip(p[ok], EPS, 1 - EPS), np.clip(s[ok], EPS, 1 - EPS), ok


def em_failure_rate(prob, source_rate, strength: float = 0.0, tol: float = TOL, max_iter: int = MAX_ITER
                    ) -> RateEstimate:
    """The failure rate of a run by Saerens et al.'s EM (module docstring) from its calibrated ``prob`` (NaN rows
    ignored) and the ``source_rate`` they were calibrated at (a number, or one per row); ``strength`` κ > 0: MAP-EM
    with κ pseudo-trajectories at the source rate (a Beta prior), infinite: no adaptation. No interval: :func:`adapt`
    gives one."""
    p, s, _ = _clean(prob, source_rate)
    if not len(p):
        return RateEstimate(float("nan"), float("nan"), float("nan"), float("nan"), 0, 0, False)
    rate, it, ok = _em(p, s, np.ones((1, len(p))), tol, max_iter, strength)
    return RateEstimate(float(rate[0]), float("nan"), float("nan"), float(s.mean()), len(p), it, ok)


def bbse_failure_rate(prob, source_prob, source_failure) -> float:
    """Soft black-box shift estimation: with ``m1``, ``m0`` the mean calibrated probability of the source's failures
    and successes, the run's mean probability ``q̄ = π·m1 + (1 - π)·m0`` gives ``π = (q̄ - m0) / (m1 - m0)``, clipped
    to [0, 1] (NaN when the source's probabilities do not separate its classes)."""
    q = np.asarray(prob, dtype=float)
    sp_, sy = np.asarray(source_prob, dtype=float), np.asarray(source_failure, dtype=bool)
    ok = np.isfinite(sp_)
    if not (q[np.isfinite(q)].size and sy[ok].any() and (~sy[ok]).any()):
        return float("nan")
    m1, m0 = sp_[ok & sy].mean(), sp_[ok & ~sy].mean()
    if m1 - m0 <= 1e-9:
        return float("nan")
    return float(np.clip((np.nanmean(q) - m0) / (m1 - m0), 0.0, 1.0))


def resample_weights(n: int, n_boot: int, seed=0, groups=None) -> tuple[np.ndarray, str]:
    """``(weights (n_boot, n), what was resampled)``: how often each row is drawn in each resample - rows drawn with
    replacement, or, with ``groups`` (e.g. the task of each row) that repeat, whole groups (the cluster bootstrap)."""
    rng = np.random.default_rng(seed)
    if groups is not None:
        codes = pd.factorize(pd.Series(list(groups), dtype=object))[0]
        g = int(codes.max()) + 1 if len(codes) else 0
        if 0 < g < n:
            counts = rng.multinomial(g, np.full(g, 1.0 / g), size=n_boot)
            return counts[:, codes].astype(float), "tasks"
    return rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot).astype(float) if n else np.zeros((n_boot, 0)), \
        "trajectories"


def adapt(prob, source_rate, n_boot: int = DEFAULT_N_BOOT, seed=0, groups=None, ci: float = 0.95, strength: float = 0.0,
          run_rates=None, agents=None, agent: Optional[str] = None) -> tuple[RateEstimate, np.ndarray]:
    """``(estimate, adapted probabilities)`` of a run: its EM failure rate (``strength``: as for
    :func:`em_failure_rate`) with a percentile bootstrap interval (rows resampled, or ``groups`` - its tasks - when
    they repeat) and every probability moved by one log-odds shift so that their mean is that rate
    (:func:`center_probabilities`; NaN stays NaN). With ``strength`` infinite the rate is the training rate, not
    estimated from the run's scores: with the training runs' counts ``run_rates`` = ``(failures, n)`` per training run
    and their ``agents`` (agent model per training run, None where unknown), it is the training rate moved by the
    effect of the run's ``agent`` estimated from the training runs of the same agent, partially pooled, with the
    interval of the share of the run's trajectories that fail (:func:`~.run_rate.agent_rate`; an agent no training
    run had: the training rate, with the spread of the runs' rates); without them, the training rate, no interval."""
    point = em_failure_rate(prob, source_rate, strength)
    adapted = np.full(np.shape(prob), np.nan)
    if point.n == 0:
        return point, adapted
    p, s, ok = _clean(prob, source_rate)
    lo = hi = float("nan")
    resampled = "trajectories"
    if n_boot and np.isfinite(strength):
        kept = None if groups is None else np.asarray(list(groups), dtype=object)[ok]
        w, resampled = resample_weights(len(p), n_boot, seed, kept)
        rates, _, _ = _em(p, s, w, TOL * 10, MAX_ITER, strength)
        lo, hi = (float(q) for q in np.quantile(rates, [(1 - ci) / 2, (1 + ci) / 2]))
        if run_rates is not None and strength > 0:
            # MAP-EM leans on κ pseudo-trajectories at the training rate, which the bootstrap over this run's rows
            # takes as known: with κ large its interval shrinks to a point at that rate (on the shared runs, qwen's
            # fold: [0.241, 0.244] around a true 0.82). How far a run's rate may sit from the training runs' is
            # their spread (:func:`~.run_rate.agent_rate`), so the interval spans both
            failures, n = run_rates
            spread = agent_rate(failures, n, [None] * len(n) if agents is None else agents, agent,
                                training_rate=point.source_rate, n_new=point.n, ci=ci, seed=seed)
            if np.isfinite(spread.lo):
                lo, hi, resampled = min(lo, spread.lo), max(hi, spread.hi), resampled + WIDENED
    rate, agent_runs, method = point.rate, 0, method_name(strength)
    if not np.isfinite(strength):
        resampled = "none"
        if run_rates is not None:
            failures, n = run_rates
            prior = agent_rate(failures, n, [None] * len(n) if agents is None else agents, agent,
                               training_rate=point.rate, n_new=point.n, ci=ci, seed=seed)
            rate, lo, hi, agent_runs = prior.rate, prior.lo, prior.hi, prior.agent_runs
            resampled = "runs" if np.isfinite(lo) else "none"
            method = method_name(strength, agent, agent_runs)
    centred, shift = center_probabilities(np.asarray(prob, dtype=float)[ok], rate)  # unclipped: order kept
    adapted[ok] = centred
    estimate = RateEstimate(rate, lo, hi, point.source_rate, point.n, point.iterations, point.converged,
                            method=method, resampled=resampled, shift=shift, agent=agent, agent_runs=agent_runs)
    return estimate, adapted


def reliability_bands(prob, failure, n_bins: int = 10, n_boot: int = DEFAULT_N_BOOT, seed=0, ci: float = 0.95) -> pd.DataFrame:
    """The reliability table (:func:`~.calibration.reliability_table`, equal-mass bins) with a percentile bootstrap
    band of each bin's observed failure rate (``failure_rate_lo``, ``failure_rate_hi``: the bin's rows resampled
    within it) - what a reliability diagram draws with its bin counts."""
    p = np.asarray(prob, dtype=float)
    y = np.asarray(failure, dtype=float)
    ok = np.isfinite(p) & np.isfinite(y)
    table = reliability_table(p[ok], y[ok], n_bins)
    if table.empty:
        return table.assign(failure_rate_lo=[], failure_rate_hi=[])
    if n_boot < 1:
        return table.assign(failure_rate_lo=np.nan, failure_rate_hi=np.nan)
    rng = np.random.default_rng(seed)
    counts = table["count"].to_numpy(dtype=int)
    rates = table["failure_rate"].to_numpy(dtype=float)
    draws = rng.binomial(counts[None, :], rates[None, :], size=(n_boot, len(table))) / counts[None, :]
    table["failure_rate_lo"] = np.quantile(draws, (1 - ci) / 2, axis=0)
    table["failure_rate_hi"] = np.quantile(draws, (1 + ci) / 2, axis=0)
    return table


def method_name(strength: float, agent: Optional[str] = None, agent_runs: int = 0) -> str:
    """How a rate was estimated with prior strength ``strength`` (infinite: not from the run's scores; then
    ``agent_runs`` training runs of the run's ``agent`` moved the training rate, :func:`~.run_rate.agent_rate`)."""
    if not np.isfinite(strength) and agent_runs:
        return (f"the training rate moved by agent {agent}'s effect, estimated from the {agent_runs} training run"
                f"{'s' if agent_runs > 1 else ''} of that agent and partially pooled with the other runs (EM on the "
                "run's scores did not estimate held-out training runs' rates better); the run's probabilities "
                "centred on it")
    if not np.isfinite(strength):
        return ("the training rate (EM on the run's scores did not estimate held-out training runs' rates better; no "
                "training run of the run's agent model moved it); the run's probabilities centred on it")
    return "em" if strength == 0 else f"em, {strength:g} pseudo-trajectories at the training rate"


def held_out_calibration(log_odds, failure, runs, leave_out=()) -> dict:
    """``{run: (calibrated probabilities, source rate, labels)}``: each run's ``log_odds`` through a Platt map fitted
    on the rows of every *other* run except ``leave_out`` (the source rate: that map's mean probability on its own
    rows); a run whose other runs hold one class only is left out."""
    s = np.asarray(log_odds, dtype=float)
    y = np.asarray(failure, dtype=bool)
    runs = np.asarray(runs, dtype=object)
    out = {}
    for r in dict.fromkeys(runs):
        if r in leave_out:
            continue
        mine = (runs == r) & np.isfinite(s)
        train = ~np.isin(runs, [r, *leave_out]) & np.isfinite(s)
        if not mine.any() or not (y[train].any() and (~y[train]).any()):
            continue
        mapping = within_run_platt(s[train], y[train], runs[train])
        out[r] = (platt_probability(mapping, s[mine]), float(platt_probability(mapping, s[train]).mean()), y[mine],
                  mine)
    return out


def choose_strength(calibrated: dict, strengths=STRENGTHS, prior_rates: Optional[dict] = None
                    ) -> tuple[float, pd.DataFrame]:
    """``(κ, table)``: the prior strength among ``strengths`` whose adapted probabilities have the lowest mean per-run
    Brier score over the held-out runs of ``calibrated`` (:func:`held_out_calibration`); ties go to the stronger
    prior (less adaptation), and with fewer than two runs there is nothing to choose on: no adaptation (κ = ∞).
    ``prior_rates``: per run, the rate κ = ∞ centres it on (:func:`held_out_prior_rates`; else its training rate)."""
    rows = []
    prior_rates = prior_rates or {}
    for k in strengths:
        briers = [float(np.mean((center_probabilities(p, prior_rates.get(r, src) if not np.isfinite(k) else
                                                      em_failure_rate(p, src, k).rate)[0] - y) ** 2))
                  for r, (p, src, y, _) in calibrated.items()]
        rows.append({"strength": k, "mean_brier": float(np.mean(briers)) if briers else float("nan")})
    table = pd.DataFrame(rows)
    if len(calibrated) < 2:
        return float("inf"), table
    best = table.iloc[::-1]["mean_brier"].idxmin()  # the strongest prior among equals
    return float(table.loc[best, "strength"]), table


def _run_row(name: str, y: np.ndarray, calibrated: np.ndarray, adapted: np.ndarray, estimate: RateEstimate,
             bbse: float, strength: float) -> dict:
    truth = float(y.mean())
    unadjusted, after = calibration_report(calibrated, y), calibration_report(adapted, y)
    oracle = center_probabilities(calibrated, truth)[0]  # the run's true rate given: what the ranking adds to it
    return {"run": name, "n": int(len(y)), "n_failures": int(y.sum()), "true_rate": truth,
            "training_rate": estimate.source_rate, "mean_calibrated": float(np.mean(calibrated)),
            "prior_strength": strength, "em_rate": em_failure_rate(calibrated, estimate.source_rate).rate,
            "estimated_rate": estimate.rate, "estimated_rate_lo": estimate.lo, "estimated_rate_hi": estimate.hi,
            "interval": estimate.resampled,
            "bbse_rate": bbse, "rate_error": abs(estimate.rate - truth),
            "rate_error_unadapted": abs(float(np.mean(calibrated)) - truth),
            "brier_base_rate": truth * (1 - truth), "brier_training_rate": float(np.mean((estimate.source_rate - y) ** 2)),
            "brier_calibrated": unadjusted["brier"], "brier_adapted": after["brier"],
            "brier_true_rate_centred": float(np.mean((oracle - y) ** 2)),
            "ece_calibrated": unadjusted["ece"], "ece_adapted": after["ece"],
            "adapted_not_worse_than_base_rate": bool(after["brier"] <= truth * (1 - truth) + 1e-12),
            "adapted_not_worse_than_training_rate": bool(after["brier"] <= float(np.mean((estimate.source_rate - y)
                                                                                         ** 2)) + 1e-12)}


def run_failure_counts(failure, runs, leave_out=()) -> tuple[np.ndarray, np.ndarray]:
    """``(failures, n)`` of each run of ``runs`` except ``leave_out`` (what :func:`~.run_rate.agent_rate` reads)."""
    counts = run_count_table(failure, runs, leave_out)
    return counts["sum"].to_numpy(dtype=float), counts["size"].to_numpy(dtype=float)


def run_count_table(failure, runs, leave_out=()) -> pd.DataFrame:
    """Per run of ``runs`` except ``leave_out`` (the index, in order of appearance): ``sum`` failures of ``size``."""
    frame = pd.DataFrame({"run": np.asarray(runs, dtype=object), "y": np.asarray(failure, dtype=bool)})
    frame = frame[~frame["run"].isin(list(leave_out))]
    return frame.groupby("run", sort=False)["y"].agg(["sum", "size"])


def held_out_prior_rates(calibrated: dict, failure, runs, agents: Optional[dict], leave_out=()) -> dict:
    """Per run of ``calibrated`` (:func:`held_out_calibration`): the rate not estimated from its scores that κ = ∞
    centres it on - its training rate moved by its agent's effect in the *other* runs except ``leave_out``
    (:func:`~.run_rate.agent_rate`); empty without ``agents`` (run -> agent model, None where unknown)."""
    if agents is None:
        return {}
    out = {}
    for r, (_, source, _, _) in calibrated.items():
        counts = run_count_table(failure, runs, (*leave_out, r))
        out[r] = agent_rate(counts["sum"].to_numpy(dtype=float), counts["size"].to_numpy(dtype=float),
                            [agents.get(q) for q in counts.index], agents.get(r), training_rate=source).rate
    return out


def leave_one_run_out_adaptation(log_odds, failure, runs, n_boot: int = DEFAULT_N_BOOT, seed=0, groups=None,
                                 strengths=STRENGTHS, agents: Optional[dict] = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per run, rows)``: each run's held-out ``log_odds`` (from a model that never saw it) calibrated by a Platt map
    fitted on the *other* runs' rows, its failure rate estimated by EM with the prior strength chosen on the other
    runs alone (:func:`choose_strength` over them, each calibrated without the held-out run: nested), with a bootstrap
    interval (``groups``, the tasks, resampled; κ = ∞: the run's share of failures under the other runs'), and by soft BBSE; its
    probabilities centred on that rate (:func:`center_probabilities`). With ``agents`` (run -> agent model, None
    where its results name none), the rate κ = ∞ gives is the training rate moved by the agent's effect in the other
    runs (:func:`~.run_rate.agent_rate`), in the nested choice too (:func:`held_out_prior_rates`).
    ``per run``: the columns of the module docstring (``brier_base_rate`` = ȳ(1 - ȳ), ``rate_error`` = |estimated -
    true|, ``em_rate`` the plain EM's, ``prior_strength`` the κ chosen, ECE before and after,
    ``brier_true_rate_centred`` the Brier had the run's true rate been known; ``brier_training_rate_centred`` centred
    on the training rate alone, ``brier_change`` the adapted Brier minus it with its 95 % bootstrap interval,
    ``brier_change_lo`` / ``_hi``, the run's trajectories resampled: whether a run's change is beyond its noise;
    ``agent``, ``agent_runs``); ``rows``: ``run``, ``failure``,
    ``calibrated``, ``adapted`` per scored row (for the pooled reliability diagram)."""
    y = np.asarray(failure, dtype=bool)
    g = None if groups is None else np.asarray(list(groups), dtype=object)
    outer = held_out_calibration(log_odds, failure, runs)
    out, rows = [], []
    for k, (r, (calibrated, source, yr, mine)) in enumerate(outer.items()):
        inner = held_out_calibration(log_odds, failure, runs, leave_out=(r,))
        strength, _ = choose_strength(inner, strengths, held_out_prior_rates(inner, y, runs, agents, leave_out=(r,))
                                      if not np.isfinite(max(strengths)) else None)
        counts = run_count_table(y, runs, leave_out=(r,))
        estimate, adapted = adapt(calibrated, source, n_boot, seed + k, None if g is None else g[mine],
                                  strength=strength, run_rates=(counts["sum"].to_numpy(dtype=float),
                                                                counts["size"].to_numpy(dtype=float)),
                                  agents=None if agents is None else [agents.get(q) for q in counts.index],
                                  agent=None if agents is None else agents.get(r))
        train = ~mine & np.isfinite(np.asarray(log_odds, dtype=float))
        scores = np.asarray(log_odds, dtype=float)
        source_probs = platt_probability(within_run_platt(scores[train], y[train], np.asarray(runs, dtype=object)[
            train]), scores[train])
        row = _run_row(str(r), yr, calibrated, adapted, estimate, bbse_failure_rate(calibrated, source_probs,
                                                                                    y[train]), strength)
        at_source = center_probabilities(calibrated, source)[0]  # centred on the training rate alone: the agent's gain
        change = (adapted - yr) ** 2 - (at_source - yr) ** 2  # per trajectory; its mean is the change of the Brier
        w, _ = resample_weights(len(yr), n_boot, seed + k) if n_boot else (np.zeros((0, len(yr))), "")
        lo, hi = (np.quantile((w @ change) / len(yr), [0.025, 0.975]) if len(w) else (np.nan, np.nan))
        out.append({**row, "agent": estimate.agent, "agent_runs": estimate.agent_runs,
                    "brier_training_rate_centred": float(np.mean((at_source - yr) ** 2)),
                    "brier_change": float(change.mean()), "brier_change_lo": float(lo), "brier_change_hi": float(hi)})
        rows.append(pd.DataFrame({"run": str(r), "failure": yr, "calibrated": calibrated, "adapted": adapted}))
    return pd.DataFrame(out), (pd.concat(rows, ignore_index=True) if rows else
                               pd.DataFrame(columns=["run", "failure", "calibrated", "adapted"]))


def adaptation_summary(per_run: pd.DataFrame) -> dict:
    """The judgement in a few numbers (JSON-ready): runs, runs whose adapted Brier is ≤ the base rate's (and the
    calibrated one's), mean absolute error of the estimated rate (EM, BBSE, the calibrated mean), mean ECE."""
    if per_run.empty:
        return {"n_runs": 0}
    t = per_run
    return {"n_runs": int(len(t)),
            "runs_brier_adapted_le_base_rate": int(t["adapted_not_worse_than_base_rate"].sum()),
            "runs_brier_calibrated_le_base_rate": int((t["brier_calibrated"] <= t["brier_base_rate"] + 1e-12).sum()),
            "runs_brier_adapted_le_training_rate": int(t["adapted_not_worse_than_training_rate"].sum()),
            "mean_brier_training_rate": float(t["brier_training_rate"].mean()),
            "mean_brier_true_rate_centred": float(t["brier_true_rate_centred"].mean()),
            "rate_mae": float(t["rate_error"].mean()), "rate_mae_unadapted": float(t["rate_error_unadapted"].mean()),
            "rate_mae_plain_em": float((t["em_rate"] - t["true_rate"]).abs().mean()),
            "rate_mae_bbse": float((t["bbse_rate"] - t["true_rate"]).abs().mean()),
            "rate_mae_training_rate": float((t["training_rate"] - t["true_rate"]).abs().mean()),
            "mean_brier_adapted": float(t["brier_adapted"].mean()),
            **({"mean_brier_training_rate_centred": float(t["brier_training_rate_centred"].mean()),
                "runs_agent_informed": int((t["agent_runs"] > 0).sum()),
                "runs_brier_worse_beyond_noise": int((t["brier_change_lo"] > 0).sum()),
                "runs_brier_better_beyond_noise": int((t["brier_change_hi"] < 0).sum())} if "agent_runs" in t else {}),
            "mean_brier_calibrated": float(t["brier_calibrated"].mean()),
            "mean_brier_base_rate": float(t["brier_base_rate"].mean()),
            "mean_ece_adapted": float(t["ece_adapted"].mean()), "mean_ece_calibrated": float(t["ece_calibrated"].mean()),
            "interval_covers_true_rate": int(((t["estimated_rate_lo"] <= t["true_rate"])
                                              & (t["true_rate"] <= t["estimated_rate_hi"])).sum())}


def leave_one_run_out_pooled_rates(X, failure, runs, C: float = 0.1) -> pd.DataFrame:
    """Per run: its failure rate estimated from a logistic regression fitted *pooled* on the other runs' rows of
    ``X`` (median-imputed, standardized, L2 with ``C``; no run intercepts, so a run's level of the features moves its
    probabilities): ``pooled_mean`` (the mean probability: classify-and-count with probabilities), ``pooled_em``
    (Saerens' EM on them, from the other runs' mean), ``pooled_bbse`` (soft BBSE), beside ``true_rate`` and
    ``training_rate`` (the other runs' pooled rate, the constant to beat)."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X = np.asarray(X, dtype=float)
    y = np.asarray(failure, dtype=bool)
    runs = np.asarray(runs, dtype=object)
    usable = np.isfinite(X).any(axis=0)
    X = X[:, usable]
    out = []
    for r in dict.fromkeys(runs):
        mine, train = runs == r, runs != r
        if not (y[train].any() and (~y[train]).any()) or not X.shape[1]:
            continue
        model = make_pipeline(SimpleImputer(strategy="median"), StandardScaler(),
                              LogisticRegression(C=C, max_iter=2000)).fit(X[train], y[train])
        p_train, p_run = model.predict_proba(X[train])[:, 1], model.predict_proba(X[mine])[:, 1]
        out.append({"run": str(r), "n": int(mine.sum()), "true_rate": float(y[mine].mean()),
                    "training_rate": float(y[train].mean()), "pooled_mean": float(p_run.mean()),
                    "pooled_em": em_failure_rate(p_run, float(p_train.mean())).rate,
                    "pooled_bbse": bbse_failure_rate(p_run, p_train, y[train])})
    return pd.DataFrame(out)
