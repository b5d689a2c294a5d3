"""The configuration of a decision policy (:class:`PolicyConfig`): what is done when the agent's uncertainty
triggers, and the trigger."""
from __future__ import annotations

import math
from typing import Any, Literal, Optional

from pydantic import Field, field_validator

from agentuq_nb.records.config import Config

POLICIES = ("observe", "defer", "resample_vote", "confirm", "random")
POLICY_ACTIONS = ("defer", "resample_vote", "confirm")


class PolicyConfig(Config):
    """Acting on the agent's uncertainty inside the loop (``agentuq_nb.intervention``, ``sim.decisions``).

    ``policy`` says what is done when the trigger fires at a decision point: ``observe`` never acts (it
    records the online signal at every decision point: the baseline and calibration run), ``defer``
    hands the task to a human, ``resample_vote`` executes the majority of ``k`` resampled actions,
    ``confirm`` asks the user before a write tool call, ``random`` does ``random_action`` with
    probability ``rate`` at each decision point (the baseline at equal intervention rate). The trigger
    of the other three: ``signal > threshold``, the threshold given, or certified from the earlier run
    ``calibration`` by Learn-then-Test so that the failure rate of unflagged runs is <= ``risk`` with
    probability >= 1 - ``alpha``; or ``oracle``: every decision point of the runs that failed in the
    earlier run ``oracle`` (same tasks, trials and seeds).
    """

    policy: Literal["observe", "defer", "resample_vote", "confirm", "random"] = "observe"
    signal: str = Field("turn_avg_nll", min_length=1, description="the online signal (higher = more uncertain)")
    threshold: Optional[float] = Field(None, description="intervene where the signal exceeds it")
    calibration: Optional[str] = Field(None, description="an earlier run folder (observe policy, same signal): "
                                                         "certifies the threshold, fits calibrated signals")
    risk: Optional[float] = Field(None, gt=0.0, lt=1.0, description="δ: the failure rate allowed among unflagged runs")
    alpha: float = Field(0.1, gt=0.0, lt=1.0, description="the certificate fails with probability at most alpha")
    oracle: Optional[str] = Field(None, description="an earlier run folder: intervene on the runs that failed in it")
    rate: Optional[float] = Field(None, ge=0.0, le=1.0, description="random: the probability per decision point")
    random_action: Literal["defer", "resample_vote", "confirm"] = Field("defer", description="random: what an "
                                                                        "intervention does")
    k: int = Field(5, ge=2, description="resampled actions (resample_vote, and the action signals)")
    sample_temperature: float = Field(1.0, gt=0.0)
    escalation_cost: float = Field(1.0, ge=0.0, description="the cost of one hand-off to a human, in study units")
    seed: int = 0

    @field_validator("threshold")
    @classmethod
    def _threshold_is_a_number(cls, value):
        if value is not None and math.isnan(value):
            raise ValueError("threshold is NaN: give the signal's value above which the policy intervenes")
        return value

    @property
    def action(self) -> str | None:
        """What an intervention does (None for ``observe``)."""
        return None if self.policy == "observe" else self.random_action if self.policy == "random" else self.policy

    def model_post_init(self, context: Any) -> None:
        if self.policy == "random":
            if self.rate is None:
                raise ValueError("policy 'random' needs rate (the intervention probability per decision point)")
            return
        if self.rate is not None:
            raise ValueError(f"rate is for policy 'random', not {self.policy!r}")
        if self.policy == "observe":
            return
        triggers = [self.threshold is not None, self.risk is not None, self.oracle is not None]
        if sum(triggers) != 1:
            raise ValueError(f"policy {self.policy!r} needs exactly one trigger: threshold, risk (with calibration) "
                             f"or oracle")
        if self.risk is not None and self.calibration is None:
            raise ValueError("risk needs calibration: the earlier run the threshold is certified on")
