"""Per-token uncertainty metrics, vectorized over a whole Arrow table of token rows.

For each token:
* ``chosen_prob`` = exp(chosen_logprob)
* ``topk_entropy`` – entropy (nats) of the top-k distribution renormalized to sum to 1 (agentuq)
* ``topk_mass`` – Σ p over the top-k
* ``normalized_entropy`` – −Σ p·log p / log k over the top-k as given, not renormalized
  (the Watchful "structural" quantity); null for k < 2
* ``full_entropy`` – whole-vocabulary entropy, kept as the backend reported it

Validation happens here too: a non-finite chosen log-prob, or a positive one beyond rounding
noise, is set to null (and counted); tiny positive values (≤ 1e-6, rounding) are clipped to 0.
Non-finite top-k entries are dropped from the top-k statistics. The scalar reference for these
formulas is ``records.tokens.topk_statistics``.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentuq_nb.io.errors import InputWarnings
from agentuq_nb.records.tokens import TOKEN_COLUMNS, TOKEN_SCHEMA

POSITIVE_TOLERANCE = 1e-6


def _clean_chosen(chosen: np.ndarray, where: str, warnings: InputWarnings) -> np.ndarray:
    chosen = chosen.astype(np.float64, copy=True)
    nonfinite = ~np.isfinite(chosen) & ~np.isnan(chosen)
    nan = np.isnan(chosen)
    positive = np.isfinite(chosen) & (chosen > POSITIVE_TOLERANCE)
    warnings.add("chosen_logprob_infinite_set_null", where, int(nonfinite.sum()))
    warnings.add("chosen_logprob_positive_set_null", where, int(positive.sum()))
    # null (missing) and NaN arrive alike as NaN; a NaN that was written is not distinguishable from null here
    chosen[nonfinite | positive] = np.nan
    return np.minimum(chosen, 0.0, where=~np.isnan(chosen), out=chosen)


def _topk_stats(topk: pa.ChunkedArray | pa.Array, where: str, warnings: InputWarnings):
    """Vectorized top-k entropy, mass and normalized entropy for a list<double> column."""
    if isinstance(topk, pa.ChunkedArray):
        topk = topk.combine_chunks() if topk.num_chunks else pa.array([], pa.list_(pa.float64()))
    n = len(topk)
    lengths = pc.fill_null(pc.list_value_length(topk), 0).to_numpy(zero_copy_only=False)
    flat = pc.list_flatten(topk).to_numpy(zero_copy_only=False).astype(np.float64)
    row_of = np.repeat(np.arange(n), lengths)
    bad = ~np.isfinite(flat)
    warnings.add("topk_logprob_nonfinite_dropped", where, int(bad.sum()))
    p = np.where(bad, 0.0, np.exp(np.minimum(np.where(bad, 0.0, flat), 0.0)))
    k = np.bincount(row_of, weights=(~bad).astype(np.float64), minlength=n)
    mass = np.bincount(row_of, weights=p, minlength=n)
    plogp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0)
    sum_plogp = np.bincount(row_of, weights=plogp, minlength=n)
    with np.errstate(divide="ignore", invalid="ignore"):
        # renormalized entropy: −Σ (p/m) log(p/m) = log m − Σ p log p / m
        q = np.where(p > 0, p / np.maximum(mass[row_of], 1e-300), 0.0)
        qlogq = np.where(q > 0, q * np.log(np.maximum(q, 1e-12)), 0.0)
        entropy = -np.bincount(row_of, weights=qlogq, minlength=n)
        normalized = -sum_plogp / np.log(k)
    valid = k > 0
    entropy = np.where(valid & (mass > 0), entropy, np.nan)
    mass = np.where(valid, mass, np.nan)
    normalized = np.where(k >= 2, normalized, np.nan)
    return entropy, mass, normalized


def with_token_metrics(raw: pa.Table, where: str = "", warnings: InputWarnings | None = None) -> pa.Table:
    """The full token-row table (TOKEN_SCHEMA column order) with derived metrics added."""
    warnings = warnings if warnings is not None else InputWarnings()
    n = raw.num_rows
    chosen = raw.column("chosen_logprob").to_numpy(zero_copy_only=False) if n else np.zeros(0)
    chosen = _clean_chosen(np.asarray(chosen, dtype=np.float64), where, warnings)
    missing = int(np.isnan(chosen).sum())
    warnings.add("tokens_without_chosen_logprob", where, missing)
    entropy, mass, normalized = _topk_stats(raw.column("topk_logprobs"), where, warnings) if n else (np.zeros(0),) * 3
    columns = {name: raw.column(name) for name in raw.column_names if name in TOKEN_COLUMNS}
    nan_to_null = lambda a: pa.array(a, type=pa.float64(), from_pandas=True)  # noqa: E731
    columns.update(
        chosen_logprob=nan_to_null(chosen),
        chosen_prob=nan_to_null(np.exp(chosen)),
        topk_entropy=nan_to_null(entropy),
        topk_mass=nan_to_null(mass),
        normalized_entropy=nan_to_null(normalized),
    )
    arrays = [columns[name] if name in columns else pa.nulls(n, TOKEN_SCHEMA.field(name).type) for name in TOKEN_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=TOKEN_SCHEMA)
