"""Online signals: the uncertainty computable at an agent decision point from the trajectory so far.

A signal is asked at each :class:`~agentuq_nb.sim.decisions.DecisionPoint` (the agent has proposed
its next message) and answers a :class:`SignalValue` - higher = more uncertain, NaN where undefined.
Found by name with :func:`online_signal`:

* ``turn_avg_nll``, ``turn_max_nll``, ``turn_entropy``: the mean token NLL, the worst token NLL and the
  mean top-k entropy of the *proposal's* tokens (its row of the turn summary: ``avg_token_nll``,
  ``max_token_nll``, ``mean_topk_entropy``; note that the turn summary's own ``turn_nll`` column is the
  NLL's sum, this signal is the mean);
* ``action_disagreement``, ``action_entropy``: K actions resampled at the point (``llm.sample``, batched
  on the embedded model, as ``uq.action_sampling`` draws them), keyed by the canonical action
  (``uq.action_uq.sample_action_key``); over the proposal and the K samples, 1 - the majority's share,
  and the entropy (nats) of the shares. The samples ride along in the value, so that a policy voting
  on them (``resample_vote``) does not draw again;
* any registered token estimator of the generating model's own rows (``assistant.avg_token_nll``,
  ``user.mean_normalized_entropy``, ``combined.max_token_nll`` …): computed on the trajectory's token
  rows so far through the offline code (``uq.token_metrics`` → ``uq.aggregation.trajectory_summary`` →
  the estimator's ``scores_from_summary``), so that at the last decision point it equals the offline
  estimator on the finished trajectory's rows. A confidence (``min_chosen_prob``) is negated;
* ``calibrated:<base>``: the failure probability of a Platt map fitted on the calibration run's
  per-trajectory maximum of ``<base>`` (``intervention.certify.fit_signal_calibrator``);
* ``detector:<DETECTOR_DIR>``: a learned failure detector's calibrated probability (the
  train-detector step's) on the trajectory so far, the proposal included - what the predict step gives the
  finished trajectory, computed on its prefix (``evaluation.detector_apply``); it needs no log-probs.

Signals are picklable (a Dask worker runs the policy holding them) and deterministic given the point:
the resampling seed is a function of ``(config.seed, point.call_seed)``.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.io.errors import remedy
from agentuq_nb.io.ingest.sidecars import SIDECAR_SCHEMA
from agentuq_nb.sim.decisions import DecisionPoint

#: the fixed signals' names (the estimators' and ``calibrated:<base>`` come on top)
TURN_SIGNALS = {"turn_avg_nll": "avg_token_nll", "turn_max_nll": "max_token_nll", "turn_entropy": "mean_topk_entropy"}
ACTION_SIGNALS = ("action_disagreement", "action_entropy")
CALIBRATED_PREFIX = "calibrated:"
DETECTOR_PREFIX = "detector:"
#: roles whose rows exist while the simulation runs (the generated ones): observation and total rows
#: come from teacher-forced scoring after the run
ONLINE_ROLES = ("assistant", "user", "combined")


@dataclass
class SignalValue:
    """A signal at one decision point: ``value`` (NaN where undefined), the generations it drew (for a
    resampling signal, with their canonical action keys), what they cost, and JSON-able details."""

    value: float
    samples: ActionSamples | None = None  # the K generations drawn and their action keys (action signals)
    extra_tokens: int = 0
    extra_cost: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)


class OnlineSignal(ABC):
    """An uncertainty computable at a decision point (higher = more uncertain)."""

    name: str = ""

    @abstractmethod
    def value(self, point: DecisionPoint) -> SignalValue:
        """The signal at ``point``."""

    def describe(self) -> dict[str, Any]:
        """The signal as a policy's description records it (JSON)."""
        return {"name": self.name}


# --------------------------------------------------------------------------- token rows

def token_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Token rows held in memory (a simulation's, sidecar-shaped) as the token table the offline
    extraction makes of their sidecar: the sidecar's columns, then ``uq.token_metrics``' derived ones."""
    from agentuq_nb.uq.token_metrics import with_token_metrics

    raw = pa.Table.from_pylist(rows, schema=SIDECAR_SCHEMA)  # the schema's columns; other keys are left out
    return with_token_metrics(raw, where="the trajectory's token rows at a decision point")


def finite_or_nan(value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


class TurnSignal(OnlineSignal):
    """One statistic of the proposal's own tokens, as the turn summary makes it (means and maxima over the
    tokens that have a value) from the token table's columns (``uq.token_metrics``). Computed here with
    numpy on the one turn: ``uq.aggregation.turn_summary`` gives the same number through pandas group-bys
    at ~20x the cost per decision point (tests hold them equal)."""

    #: statistic -> (token-table column, negated, reduction)
    STATISTICS = {"avg_token_nll": ("chosen_logprob", True, np.nanmean),
                  "max_token_nll": ("chosen_logprob", True, np.nanmax),
                  "mean_topk_entropy": ("topk_entropy", False, np.nanmean)}

    def __init__(self, name: str, statistic: str):
        if statistic not in self.STATISTICS:
            raise ValueError(f"turn signal {name!r}: statistic must be one of {', '.join(self.STATISTICS)}")
        self.name, self.statistic = name, statistic

    def value(self, point: DecisionPoint) -> SignalValue:
        column, negated, reduce = self.STATISTICS[self.statistic]
        values = token_table(point.proposal_rows).column(column).to_numpy(zero_copy_only=False).astype(float)
        details = {"num_tokens": len(point.proposal_rows)}
        if not np.isfinite(values).any():
            return SignalValue(math.nan, details={**details, "reason": "the proposal has no token with a value"})
        return SignalValue(float(reduce(-values if negated else values)), details=details)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "turn", "statistic": self.statistic, "of": "the proposal's tokens"}


class EstimatorSignal(OnlineSignal):
    """A registered token estimator computed on the trajectory's rows so far (see the module docstring)."""

    def __init__(self, estimator: Any):
        self.estimator = estimator
        self.name = estimator.name
        self.negated = bool(estimator.invert)

    def value(self, point: DecisionPoint) -> SignalValue:
        from agentuq_nb.uq.aggregation import trajectory_summary

        details = {"negated": True} if self.negated else {}
        if not point.rows:
            return SignalValue(math.nan, details={**details, "reason": "no token rows yet"})
        summary = trajectory_summary(token_table(point.rows))
        try:
            scores = self.estimator.scores_from_summary(summary)
        except ValueError:  # the role has no rows yet (a user statistic before the user spoke …)
            return SignalValue(math.nan, details={**details, "reason": f"no {self.estimator.role} rows yet"})
        score = finite_or_nan(scores.iloc[0]) if len(scores) else math.nan
        return SignalValue(-score if self.negated else score, details=details)

    def describe(self) -> dict[str, Any]:
        out = {"name": self.name, "kind": "estimator", "family": self.estimator.family}
        if self.negated:
            out["orientation"] = "negated: the estimator is a confidence (lower = more uncertain)"
        return out


def online_estimator(name: str) -> EstimatorSignal:
    """The registered estimator ``name`` as an online signal; a clear error when it has no online form."""
    from agentuq_nb import estimators

    estimator = estimators.get(name)  # KeyError naming the close names
    role, scorer = getattr(estimator, "role", None), getattr(estimator, "scorer", None)
    if not hasattr(estimator, "scores_from_summary"):
        raise ValueError(f"estimator {name!r} ({estimator.family}) cannot be computed online: it reads tables "
                         f"made after the run; online are the token estimators of the generating model's own "
                         f"rows (roles {', '.join(ONLINE_ROLES)}, no @scorer)")
    if scorer != "self" or role not in ONLINE_ROLES:
        raise ValueError(f"estimator {name!r} cannot be computed online: its rows (role {role!r}, scorer {scorer!r}) "
                         f"come from scoring after the run; online are the roles {', '.join(ONLINE_ROLES)} of the "
                         f"generating model's own rows (no @scorer)")
    return EstimatorSignal(estimator)


# --------------------------------------------------------------------------- resampled actions

def action_seed(config_seed: int, call_seed: int) -> int:
    """The first resample's seed at a decision point (sample i uses it + i): numpy's SeedSequence over
    the policy's seed and the proposal's call seed, 30 bits (room for + i)."""
    entropy = [int(config_seed) & 0xFFFFFFFFFFFFFFFF, int(call_seed) & 0xFFFFFFFFFFFFFFFF]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] & 0x3FFFFFFF)


def generation_key(generation: Any) -> tuple:
    """The canonical action key of a generation (``uq.action_uq.sample_action_key``)."""
    from agentuq_nb.uq.action_sampling import is_malformed_message
    from agentuq_nb.uq.action_uq import sample_action_key

    message = generation.message
    return sample_action_key(list(message.get("tool_calls") or []), message.get("content") or "",
                             is_malformed_message(message))


def key_label(key: tuple, generation: Any) -> str:
    from agentuq_nb.uq.action_uq import action_kind, action_label

    message = generation.message
    return action_label(list(message.get("tool_calls") or []), message.get("content") or "", action_kind(key))


def draw_actions(point: DecisionPoint, k: int, temperature: float, config_seed: int) -> list[Any]:
    """``k`` alternative next messages at ``point``, drawn as ``sample-actions`` draws them
    (``uq.action_sampling.draw_samples``); the agent's extra LLM arguments ride along."""
    from agentuq_nb.uq.action_sampling import draw_samples

    explicit = {"temperature", "max_tokens", "top_logprobs", "seed", "tools", "tool_choice", "n"}
    request = {key: value for key, value in point.agent_llm_args.items() if key not in explicit}
    return draw_samples(point.messages, k, point.agent_llm, point.tools, point.tool_choice, point.top_logprobs,
                        temperature, action_seed(config_seed, point.call_seed), point.agent_max_tokens, request)


def vote_shares(keys: list[tuple]) -> np.ndarray:
    """The share of each distinct key among ``keys`` (first-seen order)."""
    counts = Counter(keys)
    return np.array([counts[key] for key in dict.fromkeys(keys)], dtype=float) / len(keys)


@dataclass
class ActionSamples:
    """K resampled actions at a decision point and their keys (the proposal's first)."""

    samples: list[Any]
    keys: list[tuple]  # the proposal's key, then each sample's
    extra_tokens: int
    extra_cost: float

    @classmethod
    def draw(cls, point: DecisionPoint, k: int, temperature: float, config_seed: int) -> "ActionSamples":
        samples = draw_actions(point, k, temperature, config_seed)
        keys = [generation_key(point.generation)] + [generation_key(s) for s in samples]
        cost = sum(float(s.cost) for s in samples if s.cost is not None)
        return cls(samples, keys, sum(len(s.tokens) for s in samples), cost)


class ActionSignal(OnlineSignal):
    """Agreement of the proposal with K actions resampled at the point (see the module docstring)."""

    def __init__(self, name: str, k: int, temperature: float, seed: int):
        if name not in ACTION_SIGNALS:
            raise ValueError(f"action signal must be one of {', '.join(ACTION_SIGNALS)}, got {name!r}")
        self.name, self.k, self.temperature, self.seed = name, k, temperature, seed

    def value(self, point: DecisionPoint) -> SignalValue:
        from agentuq_nb.uq.action_sampling import context_overflow_errors

        try:
            drawn = ActionSamples.draw(point, self.k, self.temperature, self.seed)
        except context_overflow_errors() as err:
            return SignalValue(math.nan, details={"reason": f"the context does not fit the sampler: {type(err).__name__}"})
        shares = vote_shares(drawn.keys)
        if self.name == "action_disagreement":
            value = float(1.0 - shares.max())
        else:
            value = float(-(shares * np.log(shares)).sum()) + 0.0  # + 0.0: one action gives 0.0, not -0.0
        return SignalValue(value, samples=drawn, extra_tokens=drawn.extra_tokens,
                           extra_cost=drawn.extra_cost,
                           details={"k": self.k, "distinct_actions": int(len(shares)),
                                    "majority_share": float(shares.max())})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "action", "k": self.k, "temperature": self.temperature,
                "over": "the proposal and k resampled actions (canonical action keys)"}


# --------------------------------------------------------------------------- calibrated

class CalibratedSignal(OnlineSignal):
    """``calibrated:<base>``: a fitted map (value -> failure probability) applied to the base signal."""

    def __init__(self, base: OnlineSignal, calibrator: Any, calibration: str):
        self.base, self.calibrator, self.calibration = base, calibrator, calibration
        self.name = CALIBRATED_PREFIX + base.name

    def value(self, point: DecisionPoint) -> SignalValue:
        base = self.base.value(point)
        prob = math.nan if math.isnan(base.value) else finite_or_nan(np.asarray(self.calibrator(base.value)).ravel()[0])
        return SignalValue(prob, samples=base.samples, extra_tokens=base.extra_tokens,
                           extra_cost=base.extra_cost,
                           details={**base.details, "base_signal": None if math.isnan(base.value) else base.value})

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "calibrated", "base": self.base.describe(),
                "map": "Platt, fitted on the calibration run's per-trajectory max of the base signal vs failure",
                "calibration": self.calibration}


# --------------------------------------------------------------------------- a learned detector

class DetectorSignal(OnlineSignal):
    """``detector:<DETECTOR_DIR>``: a trained detector's calibrated failure probability on the trajectory so far."""

    def __init__(self, path: str):
        from agentuq_nb.evaluation.detector_apply import load_detector

        self.path = str(path)
        self.detector = load_detector(path)  # checked now: a bad folder is refused before the simulation starts
        self.name = DETECTOR_PREFIX + self.path

    def value(self, point: DecisionPoint) -> SignalValue:
        from agentuq_nb.records import Simulation
        from agentuq_nb.uq.detector_features import FeatureJob, extract_job

        sim = Simulation.model_validate({"id": f"{point.task_id}-{point.trial}-{point.seed}", "task_id": point.task_id,
                                         "trial": point.trial, "seed": point.seed,
                                         "messages": [*point.trajectory, point.proposal]})
        d = self.detector
        features = extract_job(FeatureJob([sim], point.domain, d.groups, d.embedder, d.embed_max_tokens,
                                          {name: "write" for name in point.write_tools}))
        scored = d.predict(features, top=3).iloc[0]
        top = {scored[f"feature_{k}"]: round(float(scored[f"points_{k}"]), 4) for k in range(1, 4)
               if isinstance(scored[f"feature_{k}"], str)}  # percentage points of the probability
        return SignalValue(finite_or_nan(scored["failure_probability"]),
                           details={"model": scored["model"], "messages_seen": len(sim.messages),
                                    "top_contributions": top})

    def describe(self) -> dict[str, Any]:
        card = self.detector.card
        return {"name": self.name, "kind": "detector", "detector": self.path, "card_sha256": card.get("card_sha256"),
                "feature_groups": card.get("feature_groups"), "calibrated_on": card["calibration"]["probabilities"],
                "of": "the trajectory so far, the proposal included"}


# --------------------------------------------------------------------------- resolver

def signal_names() -> list[str]:
    """The names :func:`online_signal` takes, as a human reads them."""
    return [*TURN_SIGNALS, *ACTION_SIGNALS, "{role}.{statistic} (a token estimator; role: "
            + "|".join(ONLINE_ROLES) + ")", CALIBRATED_PREFIX + "<signal> (needs calibration)",
            DETECTOR_PREFIX + "<DETECTOR_DIR> (a trained failure detector)"]


def online_signal(name: str, config: PolicyConfig) -> OnlineSignal:
    """The online signal called ``name`` (see the module docstring); a clear error listing the names."""
    if name in TURN_SIGNALS:
        return TurnSignal(name, TURN_SIGNALS[name])
    if name in ACTION_SIGNALS:
        return ActionSignal(name, config.k, config.sample_temperature, config.seed)
    if name.startswith(DETECTOR_PREFIX):
        path = name[len(DETECTOR_PREFIX):]
        if not path:
            made = remedy("detector_signal_folder", "a folder made by the train-detector step "
                          "(agentuq_nb.steps.train_detector)")
            raise ValueError(f"signal {name!r}: give detector:<DETECTOR_DIR>, {made}")
        return DetectorSignal(path)
    if name.startswith(CALIBRATED_PREFIX):
        base_name = name[len(CALIBRATED_PREFIX):]
        if not base_name or base_name.startswith(CALIBRATED_PREFIX):
            raise ValueError(f"signal {name!r}: give calibrated:<signal> with a base signal that is not calibrated")
        if config.calibration is None:
            raise ValueError(f"signal {name!r} needs calibration: the earlier run (observe policy, signal "
                             f"{base_name!r}) its failure-probability map is fitted on")
        base = online_signal(base_name, config)
        from agentuq_nb.intervention.certify import fit_signal_calibrator

        return CalibratedSignal(base, fit_signal_calibrator(config.calibration, base_name), config.calibration)
    try:
        return online_estimator(name)
    except KeyError as err:
        raise ValueError(f"unknown online signal {name!r}; available: {'; '.join(signal_names())} "
                         f"({err.args[0]})") from None
