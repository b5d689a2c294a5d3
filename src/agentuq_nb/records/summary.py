"""agentuq's ``uq_summary`` shape, computed from token rows.

Per role (``assistant``, ``user``, …) and ``combined`` when more than one role is present:
``total_tokens, trajectory_nll, avg_token_nll, mean_topk_entropy, min_chosen_prob`` - the
statistics of :data:`AGENTUQ_SUMMARY`, each made as :mod:`agentuq_nb.records.token_statistics`
defines it. It lives here, beside the row contract, because the simulator (below ``uq``) writes it
into every simulation; ``uq.aggregation`` computes the same numbers vectorized over whole tables
(tests hold them equal).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentuq_nb.records.token_statistics import TOKEN_VALUES, TRAJECTORY_COUNT, get_statistic

#: the statistics of agentuq's uq_summary, in its key order (after ``total_tokens``)
AGENTUQ_SUMMARY = ("trajectory_nll", "avg_token_nll", "mean_topk_entropy", "min_chosen_prob")


def _value(row: Mapping[str, Any], value: str) -> float | None:
    raw = row.get(TOKEN_VALUES[value])
    if raw is None:
        return None
    return -float(raw) if value == "nll" else float(raw)


def _role_summary(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """agentuq's definitions: sums over the tokens that have a value, means divided by *every* token
    (a token without top-k adds 0 entropy), extremes over the tokens that have a value. On rows
    without nulls - what the simulator writes - they equal the summaries' (which skip nulls)."""
    n = len(rows)
    out: dict[str, Any] = {TRAJECTORY_COUNT: n}
    for name in AGENTUQ_SUMMARY:
        stat = get_statistic(name)
        values = [v for r in rows if (v := _value(r, stat.value)) is not None]
        if stat.reduce == "sum":
            out[name] = sum(values)
        elif stat.reduce == "mean":
            out[name] = sum(values) / n if n else None
        else:
            out[name] = (min if stat.reduce == "min" else max)(values) if values else None
    return out


def uq_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    by_role: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_role.setdefault(str(row["role"]), []).append(row)
    if not by_role:
        return None
    summary = {role: _role_summary(role_rows) for role, role_rows in by_role.items()}
    if len(by_role) > 1:
        summary["combined"] = _role_summary([r for rs in by_role.values() for r in rs])
    return summary
