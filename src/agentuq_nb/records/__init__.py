"""Data contracts: τ²-bench results, token rows, summaries."""
from agentuq_nb.records.tau2 import Message, Results, RewardInfo, Simulation, ToolCall
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
]
