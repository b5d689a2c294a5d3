"""The data contracts of action resampling: one row per sampled next action, one row per decision point.

A *decision point* is an agent (assistant) message of a recorded trajectory: at that point the agent's
context (system prompt with policy, the history before the message, the tools) is rebuilt and K
alternative next messages are drawn from a *sampler* model. The sampler is the agent's own model
(``sampler_kind = "self"``) or another one, an *observer* (``"observer"``): its spread says how unsure
that model would be in the agent's place, not how unsure the agent was.

``action_samples`` (``RUN_DIR/action_samples.parquet``) holds one row per sample, with the taken action
repeated on each row so that a row is self-contained; ``action_turns`` (``RUN_DIR/action_turns.parquet``)
holds the per-decision-point statistics computed from them once (``uq.action_uq``), which the
registered ``action_*`` estimators aggregate per trajectory.

Tool calls are stored as JSON text: a list of ``{"name": str, "arguments": object | str}`` (arguments a
string only when they did not parse), ``"[]"`` for a text reply. Token lists are empty when the backend
returned no log-probs (``has_logprobs`` False).
"""
from __future__ import annotations

import pyarrow as pa

from agentuq_nb.records.tokens import TRAJECTORY_KEYS

SAMPLER_KINDS = ("self", "observer")
#: where a decision point is in its trajectory
DECISION_KEYS = [*TRAJECTORY_KEYS, "decision_idx"]

ACTION_SAMPLE_SCHEMA = pa.schema([
    ("domain", pa.string()), ("task_id", pa.string()), ("trial", pa.int64()), ("seed", pa.int64()),
    ("decision_idx", pa.int64()),  # 0-based index of the decision point among the trajectory's agent messages
    ("message_idx", pa.int64()),  # index in the simulation's messages of the action the agent took
    ("turn_idx", pa.int64()),  # that message's turn_idx (its message_idx where the file has none)
    ("sample_idx", pa.int64()),  # 0 … K-1
    ("sampler_model", pa.string()), ("sampler_kind", pa.string()),
    ("temperature", pa.float64()), ("sample_seed", pa.int64()),
    ("content", pa.string()), ("tool_calls", pa.string()),
    ("finish_reason", pa.string()),
    ("malformed", pa.bool_()),  # a tool call was begun but did not parse
    ("taken_content", pa.string()), ("taken_tool_calls", pa.string()),
    ("has_logprobs", pa.bool_()),
    ("tokens", pa.list_(pa.string())), ("token_logprobs", pa.list_(pa.float64())),
    ("topk_tokens", pa.list_(pa.list_(pa.string()))), ("topk_logprobs", pa.list_(pa.list_(pa.float64()))),
    ("sum_logprob", pa.float64()),  # NaN without log-probs
    ("num_tokens", pa.int64()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()),
    ("cost", pa.float64()),  # USD as litellm prices it (0 for the embedded model); NaN when unknown
    ("context_dropped_messages", pa.int64()),  # the context-window policy: oldest turns left out
])
ACTION_SAMPLE_COLUMNS = ACTION_SAMPLE_SCHEMA.names

#: per-decision-point statistics (``uq.action_uq``): name → (higher is uncertain, what it is)
ACTION_TURN_STATISTICS: dict[str, tuple[bool, str]] = {
    "action_agreement": (False, "share of the K samples whose canonical action equals the action taken"),
    "action_clusters": (True, "number of distinct canonical actions (text replies clustered by meaning)"),
    "action_semantic_entropy": (True, "entropy (nats) of the cluster frequencies"),
    "action_semantic_entropy_weighted": (True, "entropy (nats) of the clusters' normalized sequence "
                                               "likelihoods (Kuhn et al.); needs sample log-probs"),
    "tool_name_entropy": (True, "entropy (nats) over which tool (or none) the samples call"),
    "structural": (True, "Watchful structural uncertainty: mean normalized top-k entropy H/log k per "
                         "sample, averaged over the samples; needs top-k log-probs"),
    "conceptual": (True, "Watchful conceptual uncertainty: ½ mean pairwise cosine distance + ½ mean "
                         "partial-response distance; the partial half needs top-k tokens"),
}
