"""Data contracts: τ²-bench results, token rows, the token statistics, run tables, outcomes, configs."""
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, failure_labels
from agentuq_nb.records.tau2 import Message, Results, RewardInfo, Simulation, ToolCall
from agentuq_nb.records.token_statistics import TOKEN_STATISTICS, TokenStatistic
from agentuq_nb.records.tokens import (
    ROLES,
    SCHEMA_VERSION,
    SOURCES,
    TOKEN_COLUMNS,
    TOKEN_SCHEMA,
    TRAJECTORY_KEYS,
)

__all__ = [
    "Message", "Results", "RewardInfo", "Simulation", "ToolCall",
    "ROLES", "SCHEMA_VERSION", "SOURCES", "TOKEN_COLUMNS", "TOKEN_SCHEMA", "TRAJECTORY_KEYS",
    "TOKEN_STATISTICS", "TokenStatistic", "DEFAULT_FAILURE_THRESHOLD", "failure_labels",
]
