"""τ²-bench results as tolerant pydantic models.

Unknown keys are kept (``extra="allow"``): real results carry fields the
published schema lacks (``reasoning``, ``errors``) and newer τ²-bench versions
add more. Only what the toolkit relies on is typed.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

#: the largest trial number taken (trials count from 0; a run of more is not a run of one task)
MAX_TRIAL = 2**31 - 1
#: a seed is stored as a 64-bit integer
INT64 = 2**63 - 1


def _not_a_boolean(value: Any) -> Any:
    """JSON's ``true`` is no number (pydantic would read it as 1, and the key as trial 1)."""
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not a boolean")
    return value


#: a trial number: a whole number from 0 (τ²-bench counts trials from 0)
TrialNumber = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=0, le=MAX_TRIAL)]
#: a position (a message's turn index): a whole number from 0 that fits 32 bits
Position = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=0, le=MAX_TRIAL)]
#: a seed: a whole number that fits 64 bits
SeedNumber = Annotated[int, BeforeValidator(_not_a_boolean), Field(ge=-INT64 - 1, le=INT64)]


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class ToolCall(_Tolerant):
    id: str = ""
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    requestor: Literal["assistant", "user"] = "assistant"


class Message(_Tolerant):
    role: Literal["system", "assistant", "user", "tool"]
    content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    turn_idx: Optional[Position] = None
    timestamp: Optional[str] = None
    cost: Optional[float] = None
    usage: Optional[dict[str, Any]] = None
    raw_data: Optional[dict[str, Any]] = None
    # tool messages
    id: Optional[str] = None
    requestor: Optional[str] = None
    error: Optional[bool] = None
    # present when a provider returned logprobs at message level (form c)
    logprobs: Optional[Any] = None


class RewardInfo(_Tolerant):
    reward: float
    reward_basis: Optional[list[str]] = None
    reward_breakdown: Optional[dict[str, float]] = None


class Simulation(_Tolerant):
    id: str
    task_id: str
    trial: Optional[TrialNumber] = None
    seed: Optional[SeedNumber] = None
    messages: list[Message] = Field(default_factory=list)
    reward_info: Optional[RewardInfo] = None
    termination_reason: Optional[str] = None
    timestamp: Optional[str] = None
    start_time: Optional[str] = None
    end_time: Optional[str] = None
    duration: Optional[float] = None
    agent_cost: Optional[float] = None
    user_cost: Optional[float] = None
    uq_summary: Optional[dict[str, Any]] = None

    @property
    def reward(self) -> Optional[float]:
        return None if self.reward_info is None else self.reward_info.reward


class Results(_Tolerant):
    timestamp: Optional[str] = None
    info: dict[str, Any] = Field(default_factory=dict)
    tasks: list[dict[str, Any]] = Field(default_factory=list)
    simulations: list[Simulation] = Field(default_factory=list)

    @property
    def domain(self) -> str:
        return self.domain_of(self.info)

    @staticmethod
    def domain_of(info: dict[str, Any] | None) -> str:
        """The domain a results ``info`` names (``environment_info.domain_name``, else ``domain``)."""
        info = info or {}
        env = info.get("environment_info") or {}
        return str(env.get("domain_name") or info.get("domain") or "unknown")
