"""agentuq's ``uq_summary`` shape, computed from token rows.

Per role (``assistant``, ``user``, …) and ``combined`` when more than one role is
present: ``total_tokens, trajectory_nll, avg_token_nll, mean_topk_entropy,
min_chosen_prob``. It lives here, beside the row contract, because the
simulator (below ``uq``) writes it into every simulation; ``uq.aggregation``
computes the same numbers vectorized over whole tables (tests hold them equal).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def _role_summary(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    nll = sum(-float(r["chosen_logprob"]) for r in rows if r.get("chosen_logprob") is not None)
    ent = sum(float(r["topk_entropy"]) for r in rows if r.get("topk_entropy") is not None)
    probs = [float(r["chosen_prob"]) for r in rows if r.get("chosen_prob") is not None]
    return {
        "total_tokens": n,
        "trajectory_nll": nll,
        "avg_token_nll": nll / n if n else None,
        "mean_topk_entropy": ent / n if n else None,
        "min_chosen_prob": min(probs) if probs else None,
    }


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
