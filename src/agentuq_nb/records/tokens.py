"""The token-row contract (one row per token), a superset of agentuq's uq_logprobs_v1.

Rows written by this project load in agentuq's tools and agentuq's sidecars load here.

``toolcall_span`` (our addition, last) says which part of a tool call a token is - ``tool_name``,
``arg_key``, ``arg_value``, ``syntax``, null outside calls (:mod:`agentuq_nb.records.toolcall_spans`).
It is derived from the token texts when the token table is made (``uq.token_metrics``), like the
entropies, so sidecars need not carry it: agentuq's files (without it) load, and the rows the
simulator writes into its sidecars (:func:`make_token_row`) leave it out.
"""
from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = "uq_logprobs_v1"

# Identify one trajectory (agentuq's partition key).
TRAJECTORY_KEYS = ["domain", "task_id", "trial", "seed"]
ROLES = ("assistant", "user", "tool")
SOURCES = ("generated", "teacher_forced", "chat_replay")

TOKEN_SCHEMA = pa.schema(
    [
        ("domain", pa.string()),
        ("task_id", pa.string()),
        ("trial", pa.int64()),
        ("seed", pa.int64()),
        ("role", pa.string()),
        ("turn_idx", pa.int64()),
        ("message_idx", pa.int64()),
        ("token_idx", pa.int64()),
        ("token", pa.string()),
        ("chosen_logprob", pa.float64()),
        ("chosen_prob", pa.float64()),
        ("topk_tokens", pa.list_(pa.string())),
        ("topk_logprobs", pa.list_(pa.float64())),
        ("topk_entropy", pa.float64()),
        ("topk_mass", pa.float64()),
        ("normalized_entropy", pa.float64()),
        ("full_entropy", pa.float64()),
        ("model", pa.string()),
        ("scorer", pa.string()),
        ("source", pa.string()),
        ("message_timestamp", pa.string()),
        ("toolcall_span", pa.string()),
    ]
)
TOKEN_COLUMNS = TOKEN_SCHEMA.names
#: columns derived from a message's token texts when the table is made, not written per generated row
DERIVED_FROM_MESSAGE = ("toolcall_span",)


def topk_statistics(topk_logprobs) -> tuple[float | None, float | None, float | None]:
    """(topk_entropy, topk_mass, normalized_entropy) of one token's top-k log-probs.

    * ``topk_entropy``: entropy in nats of the top-k distribution renormalized to sum to 1
      (agentuq's definition).
    * ``topk_mass``: Σ p over the top-k (how much of the full distribution the top-k hold).
    * ``normalized_entropy``: −Σ p·log p / log k over the *un*-renormalized top-k
      probabilities (the Watchful "structural" quantity); undefined (None) for k < 2.
    Non-finite log-probs are ignored; an empty list gives (None, None, None).
    """
    import math

    lps = [float(x) for x in (topk_logprobs or []) if x is not None and math.isfinite(float(x))]
    if not lps:
        return None, None, None
    probs = [math.exp(min(lp, 0.0)) for lp in lps]
    mass = sum(probs)
    if mass <= 0.0:
        return None, None, None
    entropy = -sum((p / mass) * math.log(max(p / mass, 1e-12)) for p in probs)
    k = len(probs)
    normalized = (
        -sum(p * math.log(p) for p in probs if p > 0.0) / math.log(k) if k >= 2 else None
    )
    return entropy, mass, normalized


def make_token_row(
    token: str,
    chosen_logprob: float,
    topk_tokens: list[str],
    topk_logprobs: list[float],
    full_entropy: float | None = None,
    **keys,
) -> dict:
    """One token row per the contract; ``keys`` fill domain/task_id/role/... columns."""
    import math

    entropy, mass, normalized = topk_statistics(topk_logprobs)
    row = {name: None for name in TOKEN_COLUMNS if name not in DERIVED_FROM_MESSAGE}
    row.update(keys)
    row.update(
        token=token,
        chosen_logprob=float(chosen_logprob),
        chosen_prob=math.exp(float(chosen_logprob)),
        topk_tokens=list(topk_tokens),
        topk_logprobs=[float(x) for x in topk_logprobs],
        topk_entropy=entropy,
        topk_mass=mass,
        normalized_entropy=normalized,
        full_entropy=None if full_entropy is None else float(full_entropy),
    )
    return row
