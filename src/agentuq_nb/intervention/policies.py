"""Policies that act on the agent's uncertainty inside the loop (``sim.decisions.DecisionPolicy``).

:func:`build_policy` makes one from a :class:`~agentuq_nb.intervention.config.PolicyConfig`: the online
signal (:mod:`.signals`), the trigger and what an intervention does.

Trigger (when a decision point is *flagged*):

* ``threshold``: the signal exceeds the threshold given (``signal > threshold``; an undefined, NaN
  signal never fires);
* ``certified``: the same with the threshold certified on the calibration run by Learn-then-Test
  (``intervention.certify.certify_threshold``: the failure rate of unflagged runs <= ``risk`` with
  probability >= 1 - ``alpha``); where no threshold is certifiable the policy intervenes at every
  decision point with a defined signal (threshold -inf), and says so in :meth:`describe`;
* ``oracle``: every decision point of the runs ``(task_id, trial, seed)`` that failed (reward < 1) in
  the oracle run;
* ``random``: a coin with probability ``rate`` per decision point, from numpy's generator seeded by
  ``(config.seed, point.call_seed)`` (reproducible, and independent of the signal).

Actions (``config.action``): ``defer`` hands the task to a human; ``resample_vote`` votes among the
proposal and ``k`` resampled actions (canonical action keys) and, where the majority is another action
than the proposal's, executes that action's first sample (a tie goes to the proposal's action if it is
among the tied, else to the tied action seen first); ``confirm`` asks the user first, only for a write
call not confirmed before (otherwise the flagged point proceeds). ``observe`` computes and records the
signal and never acts. The signal is computed and recorded at every decision point, whatever fires.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.intervention.signals import (
    ActionSamples,
    CalibratedSignal,
    OnlineSignal,
    SignalValue,
    key_label,
    online_signal,
)
from agentuq_nb.sim.decisions import DecisionPoint, Verdict

#: the certification summary recorded in the description
CERTIFICATE_FIELDS = ("signal", "feasible", "n", "n_accepted", "coverage", "empirical_risk")  # signal: certified on


def trigger_of(config: PolicyConfig) -> str | None:
    """How the policy's trigger is set: threshold, certified, oracle, random (None for observe)."""
    if config.policy == "random":
        return "random"
    if config.oracle is not None:
        return "oracle"
    if config.risk is not None:
        return "certified"
    if config.threshold is not None:
        return "threshold"
    return None


def oracle_runs(run: str) -> tuple[frozenset[tuple[str, int, int]], frozenset[tuple[str, int, int]]]:
    """``(all, failed)``: ``(task_id, trial, seed)`` of every simulation of the run folder (or results file)
    ``run``, and of those whose reward is below 1 (an escalated simulation counts 0)."""
    from agentuq_nb.io.ingest.results import iter_simulations

    path = Path(run)
    if not path.exists():
        raise FileNotFoundError(f"oracle run {run!r} does not exist (give the folder of an earlier run of the same tasks)")
    every, failed = set(), set()
    for s in iter_simulations(path):
        key = (str(s.task_id), int(s.trial or 0), int(s.seed or 0))
        every.add(key)
        if s.reward is not None and s.reward < 1.0:
            failed.add(key)
    return frozenset(every), frozenset(failed)


def failed_runs(run: str) -> frozenset[tuple[str, int, int]]:
    """``(task_id, trial, seed)`` of the simulations of ``run`` whose reward is below 1 (:func:`oracle_runs`)."""
    return oracle_runs(run)[1]


def coin(seed: int, call_seed: int) -> float:
    """The random policy's uniform draw at a decision point (a function of the point alone)."""
    return float(np.random.default_rng([int(seed) & 0xFFFFFFFFFFFFFFFF, int(call_seed) & 0xFFFFFFFFFFFFFFFF]).random())


def majority(keys: list[tuple]) -> tuple[tuple, int]:
    """The majority key among ``keys`` (the proposal's first) and the index of its first occurrence:
    a tie goes to the proposal's key when tied, else to the tied key seen first."""
    counts = Counter(keys)
    top = max(counts.values())
    winner = keys[0] if counts[keys[0]] == top else next(key for key in keys if counts[key] == top)
    return winner, keys.index(winner)


@dataclass
class InterventionPolicy:
    """A :class:`~agentuq_nb.sim.decisions.DecisionPolicy` (see the module docstring); picklable."""

    config: PolicyConfig
    signal: OnlineSignal
    threshold: float | None = None  # -inf where certification was infeasible
    certificate: dict[str, Any] = field(default_factory=dict)
    oracle_failed: frozenset = frozenset()
    oracle_all: frozenset = frozenset()  # every (task_id, trial, seed) of the oracle run

    @property
    def escalation_cost(self) -> float:
        return float(self.config.escalation_cost)

    @property
    def trigger(self) -> str | None:
        return trigger_of(self.config)

    # ------------------------------------------------------------------ the decision
    def fires(self, value: float, point: DecisionPoint) -> tuple[bool, dict[str, Any]]:
        """Whether the trigger fires at ``point`` (given the signal's value), and what to record of it."""
        trigger = self.trigger
        if trigger == "random":
            draw = coin(self.config.seed, point.call_seed)
            return draw < float(self.config.rate), {"coin": draw}
        if trigger == "oracle":
            return (point.task_id, int(point.trial), int(point.seed)) in self.oracle_failed, {}
        if self.threshold is None or math.isnan(value):
            return False, {}
        return value > self.threshold, {}

    def decide(self, point: DecisionPoint) -> Verdict:
        measured = self.signal.value(point)
        value = float(measured.value)
        flagged, details = self.fires(value, point)
        details = {**measured.details, **details}
        verdict = Verdict("proceed", signal=None if math.isnan(value) else value, flagged=flagged,
                          extra_tokens=measured.extra_tokens, extra_cost=measured.extra_cost, details=details)
        action = self.config.action
        if not flagged or action is None:
            return verdict
        if action == "defer":
            verdict.action = "defer"
        elif action == "confirm":
            if point.proposes_write and point.calls_key() not in point.confirmed_calls:
                verdict.action = "confirm"
            else:
                details["confirm"] = "not an unconfirmed write call: proceeds"
        else:
            self.vote(point, measured, verdict)
        return verdict

    def vote(self, point: DecisionPoint, measured: SignalValue, verdict: Verdict) -> None:
        """``resample_vote``: reuse the signal's samples where it drew them, else draw ``k``."""
        drawn = measured.samples
        if drawn is None:
            from agentuq_nb.uq.action_sampling import context_overflow_errors

            try:
                drawn = ActionSamples.draw(point, self.config.k, self.config.sample_temperature, self.config.seed)
            except context_overflow_errors() as err:
                verdict.details["vote"] = f"skipped: the context does not fit the sampler ({type(err).__name__})"
                return
            verdict.extra_tokens += drawn.extra_tokens
            verdict.extra_cost += drawn.extra_cost
        verdict.acted = True  # the vote was held (its K actions drawn and counted), whichever action it executes
        _, first = majority(drawn.keys)
        counts = Counter(drawn.keys)
        generations = [point.generation, *drawn.samples]
        verdict.details["vote"] = [{"action": key_label(key, generations[drawn.keys.index(key)]), "votes": n}
                                   for key, n in counts.items()]
        verdict.details["vote_over"] = f"the proposal and {len(drawn.samples)} resampled actions"
        if first > 0:  # the majority is another action than the proposal's: execute its first sample
            verdict.action, verdict.replacement = "replace", drawn.samples[first - 1]
            verdict.details["executed_sample"] = first - 1

    # ------------------------------------------------------------------ before the run
    def check_runs(self, keys: list[tuple[str, int, int]]) -> None:
        """Refuse a run this policy could never act in: an oracle run none of whose simulations is one of the
        run's ``(task_id, trial, seed)`` (it would never intervene, silently)."""
        if self.trigger != "oracle" or not keys:
            return
        matched = set(keys) & self.oracle_all
        if not matched:
            example = next(iter(sorted(self.oracle_all)), None)
            raise ValueError(f"policy.oracle {self.config.oracle}: none of its {len(self.oracle_all)} simulations is "
                             f"one of this run's {len(keys)} (task, trial, seed), e.g. {keys[0]} is not there"
                             f"{f' (it holds {example})' if example else ''}; the oracle would never intervene. Give "
                             "an earlier run of the same tasks, trials and seed")

    # ------------------------------------------------------------------ the description
    def describe(self) -> dict[str, Any]:
        c = self.config
        certified = self.trigger == "certified"
        out = {
            "policy": c.policy, "action": c.action, "signal": c.signal, "signal_details": self.signal.describe(),
            "trigger": self.trigger,
            "threshold": None if self.threshold is None or math.isinf(self.threshold) else float(self.threshold),
            "rate": c.rate, "risk": c.risk, "alpha": c.alpha, "k": c.k, "sample_temperature": c.sample_temperature,
            "escalation_cost": c.escalation_cost, "seed": c.seed, "calibration": c.calibration, "oracle": c.oracle,
            "certification": {key: self.certificate.get(key) for key in CERTIFICATE_FIELDS} if certified else None,
        }
        if certified and self.threshold is not None and math.isinf(self.threshold):
            out["certification"]["note"] = ("no threshold is certifiable at this risk: the policy intervenes at every "
                                            "decision point with a defined signal")
        if c.oracle is not None:
            out["oracle_failed_runs"] = len(self.oracle_failed)
        return out


def calibrated_threshold(signal: CalibratedSignal, calibration: str, base_threshold: float | None) -> float:
    """The certified threshold of a calibrated signal: the base signal's, through the fitted map.

    ``probability > map(t)`` flags exactly the points ``base > t`` when the map increases over the
    calibration run's base signals (a Platt map is monotone); a map that does not (the calibration run's
    failures do not grow with the signal, or are all one class) cannot carry the certificate: an error."""
    from agentuq_nb.intervention.certify import trajectory_signals

    if base_threshold is None:
        return -math.inf
    values = trajectory_signals(calibration, signal.base.name)["max_signal"].to_numpy(dtype=float)
    values = values[np.isfinite(values)]
    low, high = signal.calibrator(float(values.min())), signal.calibrator(float(values.max()))
    if not high > low:
        raise ValueError(f"signal {signal.name!r}: the failure probability fitted on {calibration} does not increase "
                         f"with {signal.base.name!r} (map {low:.3g} at its lowest value, {high:.3g} at its highest), so "
                         f"a threshold certified on {signal.base.name!r} does not carry over; certify {signal.base.name!r}")
    return float(signal.calibrator(float(base_threshold)))


def build_policy(config: PolicyConfig) -> InterventionPolicy:
    """The policy ``config`` describes: its signal resolved, its threshold certified on the calibration
    run where a risk is given, the failed runs of the oracle run read."""
    signal = online_signal(config.signal, config)
    threshold, certificate, failed = config.threshold, {}, frozenset()
    if config.risk is not None and config.policy != "random":
        from agentuq_nb.intervention.certify import certify_threshold

        if isinstance(signal, CalibratedSignal):  # certified on the base signal the run recorded, then mapped
            certificate = certify_threshold(config.calibration, signal.base.name, config.risk, config.alpha)
            threshold = calibrated_threshold(signal, config.calibration, certificate.get("threshold"))
        else:
            certificate = certify_threshold(config.calibration, config.signal, config.risk, config.alpha)
            threshold = -math.inf if certificate.get("threshold") is None else float(certificate["threshold"])
    every = frozenset()
    if config.oracle is not None:
        every, failed = oracle_runs(config.oracle)
    return InterventionPolicy(config, signal, threshold, certificate, failed, every)
