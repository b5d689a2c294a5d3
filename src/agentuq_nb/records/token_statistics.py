"""The one table of token statistics: how each turn- and trajectory-level statistic is made from
token rows, how per-turn partials of it merge, and which way it points.

Everything that names a statistic reads it from :data:`TOKEN_STATISTICS`: the per-turn partials
(``uq.turn_partials``), the summaries (``uq.aggregation``), agentuq's ``uq_summary`` written by the
simulator (:mod:`agentuq_nb.records.summary`) and the token estimators (``estimators.token``). A new
statistic is one row here.

A statistic reduces one *token value* over the tokens of a turn (or of a role in a trajectory):

* ``mean`` - Σ value / number of tokens with a value (null values are skipped);
* ``sum``  - Σ value, null when no token has a value;
* ``min`` / ``max`` - the extreme value (nulls skipped).

A token value may be restricted to one tool-call span (:data:`VALUE_SPANS`, the ``toolcall_span``
column of :mod:`agentuq_nb.records.toolcall_spans`): ``toolcall_value_nll`` is the NLL of the tokens
of argument values and null on every other token, so its mean is over those tokens alone (JSON
syntax tokens, near-certain, would dilute it). A turn or trajectory without such tokens has NaN.
The number of tokens each span value was read from is kept in the summaries (:data:`SPAN_COUNTS`).

Mergeable per-turn partials: ``sum_<value>`` and ``n_<value>`` for means and sums (added when
merged), the statistic itself for extremes (min of mins, max of maxes). Summaries list the token
count, then sums, means and extremes, each in table order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Reduce = Literal["mean", "sum", "min", "max"]

#: token values: the token-row column each is read from (``nll`` is −``chosen_logprob``)
TOKEN_VALUES = {
    "nll": "chosen_logprob",
    "topk_entropy": "topk_entropy",
    "normalized_entropy": "normalized_entropy",
    "full_entropy": "full_entropy",
    "chosen_prob": "chosen_prob",
    "toolcall_name_nll": "chosen_logprob",
    "toolcall_value_nll": "chosen_logprob",
}
#: token values that are the negated column (a log-prob read as a negative log-likelihood)
NEGATED_VALUES = frozenset({"nll", "toolcall_name_nll", "toolcall_value_nll"})
#: token values read only on the tokens of one tool-call span (null elsewhere)
VALUE_SPANS = {"toolcall_name_nll": "tool_name", "toolcall_value_nll": "arg_value"}
#: the summary column counting the tokens a span value was read from (tokens with a log-prob)
SPAN_COUNTS = {"toolcall_name_nll": "toolcall_name_tokens", "toolcall_value_nll": "toolcall_value_tokens"}
SPAN_COLUMN = "toolcall_span"


@dataclass(frozen=True)
class TokenStatistic:
    name: str                  # column of the trajectory summary, and estimator statistic name
    value: str                 # key of TOKEN_VALUES
    reduce: Reduce
    higher_is_uncertain: bool  # False: a confidence (a low minimum token probability = uncertain)
    turn_name: str | None = None  # its column in the turn summary, where that differs
    description: str = ""

    @property
    def turn_column(self) -> str:
        return self.turn_name or self.name

    @property
    def partials(self) -> tuple[str, ...]:
        """The partial columns this statistic is finalized from."""
        return (f"sum_{self.value}", f"n_{self.value}") if self.reduce in ("mean", "sum") else (self.name,)


TOKEN_STATISTICS: tuple[TokenStatistic, ...] = (
    TokenStatistic("avg_token_nll", "nll", "mean", True, description="mean token negative log-likelihood (nats)"),
    TokenStatistic("trajectory_nll", "nll", "sum", True, turn_name="turn_nll",
                   description="total negative log-likelihood (nats); grows with length"),
    TokenStatistic("mean_topk_entropy", "topk_entropy", "mean", True,
                   description="mean entropy of the renormalized top-k distribution (nats)"),
    TokenStatistic("mean_normalized_entropy", "normalized_entropy", "mean", True,
                   description="mean −Σp·log p / log k over the top-k (Watchful structural)"),
    TokenStatistic("mean_full_entropy", "full_entropy", "mean", True,
                   description="mean whole-vocabulary entropy (nats), where the backend gave logits"),
    TokenStatistic("min_chosen_prob", "chosen_prob", "min", False,
                   description="lowest probability of a chosen token (a confidence)"),
    TokenStatistic("max_token_nll", "nll", "max", True, description="highest token negative log-likelihood"),
    TokenStatistic("toolcall_name_nll", "toolcall_name_nll", "mean", True,
                   description="mean negative log-likelihood of the tool-name tokens of tool calls (nats)"),
    TokenStatistic("toolcall_value_nll", "toolcall_value_nll", "mean", True,
                   description="mean negative log-likelihood of the argument-value tokens of tool calls (nats)"),
    TokenStatistic("toolcall_value_max_nll", "toolcall_value_nll", "max", True,
                   description="highest negative log-likelihood of an argument-value token of a tool call"),
)
STATISTICS_BY_NAME = {s.name: s for s in TOKEN_STATISTICS}
#: the token count: ``num_tokens`` per turn, ``total_tokens`` per trajectory
TURN_COUNT, TRAJECTORY_COUNT = "num_tokens", "total_tokens"
#: the order of reductions in the summaries' columns
SUMMARY_ORDER: tuple[Reduce, ...] = ("sum", "mean", "min", "max")


def token_values() -> list[str]:
    """The token values some statistic reads, in table order, each once."""
    return list(dict.fromkeys(s.value for s in TOKEN_STATISTICS))


def additive_values() -> list[str]:
    """Token values with ``sum_``/``n_`` partials (read by a mean or a sum)."""
    return list(dict.fromkeys(s.value for s in TOKEN_STATISTICS if s.reduce in ("mean", "sum")))


def extreme_statistics() -> list[TokenStatistic]:
    return [s for s in TOKEN_STATISTICS if s.reduce in ("min", "max")]


def summary_statistics() -> list[TokenStatistic]:
    """The statistics over all tokens in the summaries' column order: sums, means, then extremes."""
    return sorted((s for s in TOKEN_STATISTICS if s.value not in VALUE_SPANS), key=lambda s: SUMMARY_ORDER.index(s.reduce))


def toolcall_statistics() -> list[TokenStatistic]:
    """The statistics over tool-call spans (after the others in the summaries), in the same order."""
    return sorted((s for s in TOKEN_STATISTICS if s.value in VALUE_SPANS), key=lambda s: SUMMARY_ORDER.index(s.reduce))


def span_counts() -> list[str]:
    """The summaries' token-count columns of the span values, in table order."""
    return [SPAN_COUNTS[v] for v in token_values() if v in SPAN_COUNTS]


def get_statistic(name: str) -> TokenStatistic:
    try:
        return STATISTICS_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown token statistic {name!r}; known: {', '.join(STATISTICS_BY_NAME)}") from None
