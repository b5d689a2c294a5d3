"""Per-token uncertainty metrics, vectorized over a whole Arrow table of token rows.

For each token:
* ``chosen_prob`` = exp(chosen_logprob)
* ``topk_entropy`` – entropy (nats) of the top-k distribution renormalized to sum to 1 (agentuq)
* ``topk_mass`` – Σ p over the top-k
* ``normalized_entropy`` – −Σ p·log p / log k over the top-k as given, not renormalized
  (the Watchful "structural" quantity); null for k < 2
* ``full_entropy`` – whole-vocabulary entropy, kept as the backend reported it

* ``toolcall_span`` – which part of a tool call the token is (``tool_name``, ``arg_key``,
  ``arg_value``, ``syntax``; null outside calls), from the texts of its message's tokens
  (:mod:`agentuq_nb.records.toolcall_spans`). Only messages with a token holding ``{`` or ``<``
  (every call's JSON opens a brace) and not of role ``tool`` (results are not calls) are scanned,
  in Python, one message at a time; a table without such a token costs two substring searches.

Validation happens here too: a non-finite chosen log-prob, or a positive one beyond rounding
noise, is set to null (and counted); tiny positive values (≤ 1e-6, rounding) are clipped to 0.
Non-finite top-k entries are dropped from the top-k statistics. The scalar reference for these
formulas is ``records.tokens.topk_statistics``.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentuq_nb.io.errors import InputWarnings
from agentuq_nb.records.tokens import TOKEN_COLUMNS, TOKEN_SCHEMA
from agentuq_nb.records.toolcall_spans import SPAN_LABELS, token_span_codes
from agentuq_nb.uq.turn_partials import key_runs

POSITIVE_TOLERANCE = 1e-6
# where a problem is: a fixed description, or a function of the first offending row's index
Where = str | Callable[[int], str]


def _count(warnings: InputWarnings, kind: str, where: Where, bad: np.ndarray, row_of: np.ndarray | None = None) -> None:
    """Count the rows marked in ``bad`` under ``kind``, naming the place of the first one."""
    n = int(bad.sum())
    if n:
        first = int(np.argmax(bad))
        warnings.add(kind, where if isinstance(where, str) else where(int(row_of[first]) if row_of is not None else first), n)


def _clean_chosen(chosen: np.ndarray, where: Where, warnings: InputWarnings) -> np.ndarray:
    chosen = chosen.astype(np.float64, copy=True)
    nonfinite = ~np.isfinite(chosen) & ~np.isnan(chosen)
    positive = np.isfinite(chosen) & (chosen > POSITIVE_TOLERANCE)
    _count(warnings, "chosen_logprob_infinite_set_null", where, nonfinite)
    _count(warnings, "chosen_logprob_positive_set_null", where, positive)
    # null (missing) and NaN arrive alike as NaN; a NaN that was written is not distinguishable from null here
    chosen[nonfinite | positive] = np.nan
    return np.minimum(chosen, 0.0, where=~np.isnan(chosen), out=chosen)


def topk_stats(topk: pa.ChunkedArray | pa.Array, where: Where, warnings: InputWarnings):
    """Vectorized top-k entropy, mass and normalized entropy for a list<double> column.

    With p = exp(lp) and m = Σ p, the sums need one exp per entry and no log:
    Σ p log p = Σ p·lp, and the renormalized entropy −Σ (p/m) log(p/m) = log m − Σ p·lp / m.
    """
    if isinstance(topk, pa.ChunkedArray):
        topk = topk.combine_chunks() if topk.num_chunks else pa.array([], pa.list_(pa.float64()))
    n = len(topk)
    lengths = pc.fill_null(pc.list_value_length(topk), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(topk).to_numpy(zero_copy_only=False)
    bad = ~np.isfinite(flat)
    any_bad = bool(bad.any())
    row_of = None
    if any_bad:
        row_of = np.repeat(np.arange(n), lengths)
        _count(warnings, "topk_logprob_nonfinite_dropped", where, bad, row_of)
    lp = np.minimum(flat, 0.0, dtype=np.float64)  # a new array: the steps below work in place
    if any_bad:
        lp[bad] = 0.0  # any finite value: its p and p·lp are zeroed below
    p = np.exp(lp)
    p_lp = np.multiply(p, lp, out=lp)  # p = 0 (underflow) gives 0·lp = 0, as 0·log 0 = 0
    if any_bad:
        p[bad] = 0.0  # a dropped entry adds nothing
        p_lp[bad] = 0.0
    if lengths.all():  # every row has a top-k: sum the contiguous runs
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if n else lengths
        per_row = lambda x: np.add.reduceat(x, starts) if n else x[:0]  # noqa: E731
    else:
        row_of = np.repeat(np.arange(n), lengths) if row_of is None else row_of
        per_row = lambda x: np.bincount(row_of, weights=x, minlength=n)  # noqa: E731
    k = lengths - (per_row(bad.astype(np.float64)) if any_bad else 0.0)  # entries that count
    mass = per_row(p)
    sum_p_lp = per_row(p_lp)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = np.log(mass) - sum_p_lp / mass
        normalized = -sum_p_lp / np.log(k)
    valid = (k > 0) & (mass > 0)  # as records.tokens.topk_statistics: no usable entry, no statistic
    entropy = np.where(valid, np.maximum(entropy, 0.0), np.nan)
    mass = np.where(valid, mass, np.nan)
    normalized = np.where(valid & (k >= 2), normalized, np.nan)
    return entropy, mass, normalized


#: the keys that make one message's rows (rows of a message lie next to each other, in token order)
MESSAGE_KEYS = ["domain", "task_id", "trial", "seed", "scorer", "message_idx"]
CALL_MARKS = ("{", "<")


def toolcall_span_column(raw: pa.Table) -> pa.Array:
    """Each row's ``toolcall_span`` label (null outside tool calls), computed per message."""
    n = raw.num_rows
    if not n or "token" not in raw.column_names:
        return pa.nulls(n, pa.string())
    token = raw.column("token")
    marked = pc.or_(*(pc.match_substring(token, mark) for mark in CALL_MARKS))
    if "role" in raw.column_names:
        marked = pc.and_(marked, pc.not_equal(raw.column("role"), "tool"))
    marked = pc.fill_null(marked, False).to_numpy(zero_copy_only=False)
    if not marked.any():
        return pa.nulls(n, pa.string())
    starts = key_runs(raw, [k for k in MESSAGE_KEYS if k in raw.column_names])
    ends = np.append(starts[1:], n)
    first_of_message = np.zeros(n, dtype=np.int64)
    first_of_message[starts] = 1
    message = np.cumsum(first_of_message) - 1
    codes = np.zeros(n, dtype=np.int8)
    for m in np.unique(message[marked]):
        first, last = int(starts[m]), int(ends[m])
        codes[first:last] = token_span_codes(token.slice(first, last - first).to_pylist())
    return pa.array((None,) + SPAN_LABELS, pa.string()).take(pa.array(codes))


def with_token_metrics(raw: pa.Table, where: Where = "", warnings: InputWarnings | None = None) -> pa.Table:
    """The full token-row table (TOKEN_SCHEMA column order) with derived metrics added.

    ``where`` names the input in warnings: a string, or a function from a row index to the
    place of that row (for a table of many trajectories)."""
    warnings = warnings if warnings is not None else InputWarnings()
    n = raw.num_rows
    chosen = raw.column("chosen_logprob").to_numpy(zero_copy_only=False) if n else np.zeros(0)
    chosen = _clean_chosen(np.asarray(chosen, dtype=np.float64), where, warnings)
    _count(warnings, "tokens_without_chosen_logprob", where, np.isnan(chosen))
    entropy, mass, normalized = topk_stats(raw.column("topk_logprobs"), where, warnings) if n else (np.zeros(0),) * 3
    if n and "topk_tokens" in raw.column_names:  # the statistics use the log-probs; the texts label them
        lengths = [pc.fill_null(pc.list_value_length(raw.column(c)), 0).to_numpy(zero_copy_only=False)
                   for c in ("topk_tokens", "topk_logprobs")]
        has_texts = raw.column("topk_tokens").is_valid().to_numpy(zero_copy_only=False)
        _count(warnings, "topk_lengths_differ", where, has_texts & (lengths[0] != lengths[1]))
    columns = {name: raw.column(name) for name in raw.column_names if name in TOKEN_COLUMNS}
    nan_to_null = lambda a: pa.array(a, type=pa.float64(), from_pandas=True)  # noqa: E731
    columns.update(
        chosen_logprob=nan_to_null(chosen),
        chosen_prob=nan_to_null(np.exp(chosen)),
        topk_entropy=nan_to_null(entropy),
        topk_mass=nan_to_null(mass),
        normalized_entropy=nan_to_null(normalized),
        toolcall_span=toolcall_span_column(raw),
    )
    arrays = [columns[name] if name in columns else pa.nulls(n, TOKEN_SCHEMA.field(name).type) for name in TOKEN_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=TOKEN_SCHEMA)
