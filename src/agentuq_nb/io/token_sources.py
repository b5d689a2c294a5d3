"""Find a trajectory's token log-probs in every form seen in the wild.

(a) agentuq sidecar JSONL, referenced by ``raw_data.uq_logprobs.path`` on each generated
    message; the rows carry ``message_timestamp`` (and ``turn_idx = null``) and are joined to
    their message by that timestamp, or by order and ``num_tokens`` where timestamps differ.
(b) an OpenAI choice dict in ``raw_data``: ``raw_data.logprobs.content[*]`` (or
    ``raw_data.choices[0].logprobs.content``).
(c) a message-level ``logprobs.content`` list.

Per message the first form present wins for the generating model's own rows (scorer
``self``); sidecar rows written by another scorer (observation scoring) are always kept.
Output is one Arrow table per trajectory with the raw columns of the token-row contract;
derived metrics (entropy, normalized entropy, …) are added by ``uq.token_metrics``.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.records import Simulation
from agentuq_nb.records.tokens import TOKEN_SCHEMA

# Columns read from a sidecar; anything else on a sidecar row (recorded_at, request_params…) is ignored.
SIDECAR_SCHEMA = pa.schema(
    [
        ("message_timestamp", pa.string()),
        ("model", pa.string()),
        ("role", pa.string()),
        ("turn_idx", pa.int64()),
        ("message_idx", pa.int64()),
        ("token_idx", pa.int64()),
        ("token", pa.string()),
        ("chosen_logprob", pa.float64()),
        ("topk_tokens", pa.list_(pa.string())),
        ("topk_logprobs", pa.list_(pa.float64())),
        ("full_entropy", pa.float64()),
        ("domain", pa.string()),
        ("task_id", pa.string()),
        ("trial", pa.int64()),
        ("seed", pa.int64()),
        ("scorer", pa.string()),
        ("source", pa.string()),
    ]
)
RAW_COLUMNS = [
    "domain", "task_id", "trial", "seed", "role", "turn_idx", "message_idx", "token_idx", "token",
    "chosen_logprob", "topk_tokens", "topk_logprobs", "full_entropy", "model", "scorer", "source",
    "message_timestamp",
]
RAW_SCHEMA = pa.schema([TOKEN_SCHEMA.field(name) for name in RAW_COLUMNS])


@dataclass
class SidecarResolver:
    """Finds sidecar files: as written, relative to the results file, or by name in ``sidecar_dir``.

    Keeps the last few parsed files so that a sidecar shared by many simulations (agentuq's
    ``single`` partition mode) is parsed once, while memory stays bounded.
    """

    results_path: Path
    sidecar_dir: Path | None = None
    cache_size: int = 2
    _cache: OrderedDict = field(default_factory=OrderedDict)

    _resolved: dict = field(default_factory=dict)

    def resolve(self, recorded: str) -> Path | None:
        if recorded not in self._resolved:
            self._resolved[recorded] = self._find(recorded)
            if len(self._resolved) > 10_000:  # bounded: one entry per distinct sidecar path
                self._resolved.clear()
        return self._resolved[recorded]

    def _find(self, recorded: str) -> Path | None:
        rec = Path(recorded)
        candidates = [rec] if rec.is_absolute() else [self.results_path.parent / rec, rec]
        if self.sidecar_dir is not None:
            candidates.insert(0, self.sidecar_dir / rec.name)
            if not rec.is_absolute():
                candidates.insert(1, self.sidecar_dir / rec)
        return next((c for c in candidates if c.is_file()), None)

    _pending: dict = field(default_factory=dict)
    _executor: ThreadPoolExecutor | None = None

    def referenced_paths(self, sim: Simulation) -> list[Path]:
        paths = (self.resolve(ref["path"]) for m in sim.messages if (ref := _uq_logprobs_ref(m)) is not None)
        return list(dict.fromkeys(p for p in paths if p is not None))

    def prefetch(self, sim: Simulation) -> None:
        """Start parsing a coming simulation's sidecars on a worker thread (Arrow releases the GIL)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sidecar")
        for path in self.referenced_paths(sim):
            key = os.path.abspath(path)  # a cache key: no filesystem calls (resolve() stats every component)
            if key not in self._cache and key not in self._pending:
                self._pending[key] = self._executor.submit(self._parse, path)

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._pending.clear()

    def read(self, path: Path) -> pa.Table:
        key = os.path.abspath(path)  # a cache key: no filesystem calls (resolve() stats every component)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        future = self._pending.pop(key, None)
        table = future.result() if future is not None else self._parse(path)
        self._cache[key] = table
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return table

    @staticmethod
    def _parse(path: Path) -> pa.Table:
        try:
            table = pajson.read_json(
                path,
                read_options=pajson.ReadOptions(use_threads=False, block_size=1 << 24),
                parse_options=pajson.ParseOptions(explicit_schema=SIDECAR_SCHEMA, unexpected_field_behavior="ignore"),
            )
        except pa.ArrowInvalid as err:
            if path.stat().st_size == 0:
                table = SIDECAR_SCHEMA.empty_table()
            else:
                raise InputError(path, f"sidecar is not valid JSONL: {err}") from err
        return table


def _content_items(obj: Any) -> list[dict] | None:
    """``obj.content`` of an OpenAI logprobs object, if it is a non-empty list."""
    if isinstance(obj, dict):
        content = obj.get("content")
        if isinstance(content, list) and content:
            return [c for c in content if isinstance(c, dict)]
    return None


def inline_logprob_items(message) -> list[dict] | None:
    """Forms (b) and (c): the OpenAI ``logprobs.content`` list stored with the message."""
    raw = message.raw_data or {}
    items = _content_items(raw.get("logprobs"))
    if items is None and isinstance(raw.get("choices"), list) and raw["choices"]:
        first = raw["choices"][0]
        if isinstance(first, dict):
            items = _content_items(first.get("logprobs"))
    if items is None:
        items = _content_items(message.logprobs)
    return items


def _rows_from_items(items: list[dict], base: dict) -> dict[str, list]:
    cols: dict[str, list] = {name: [] for name in RAW_COLUMNS}
    for token_idx, item in enumerate(items):
        top = [t for t in (item.get("top_logprobs") or []) if isinstance(t, dict) and t.get("logprob") is not None]
        lp = item.get("logprob")
        for name, value in base.items():
            cols[name].append(value)
        cols["token_idx"].append(token_idx)
        cols["token"].append(None if item.get("token") is None else str(item.get("token")))
        cols["chosen_logprob"].append(None if lp is None else float(lp))
        cols["topk_tokens"].append([str(t.get("token")) for t in top])
        cols["topk_logprobs"].append([float(t["logprob"]) for t in top])
        cols["full_entropy"].append(item.get("full_entropy"))
    return cols


def _uq_logprobs_ref(message) -> dict | None:
    ref = (message.raw_data or {}).get("uq_logprobs")
    return ref if isinstance(ref, dict) and ref.get("path") else None


def _join_sidecar_rows(
    table: pa.Table, sim: Simulation, messages_with_ref: list[int], results_path: Path, warnings: InputWarnings
) -> pa.Table:
    """Give sidecar rows their message_idx/turn_idx: by timestamp, else by order and num_tokens."""
    # keep only this trajectory's rows when the file holds several (single-file partition mode)
    mask = None
    for col, value in (("task_id", sim.task_id), ("trial", sim.trial), ("seed", sim.seed)):
        if value is None:
            continue
        column = table.column(col)
        cond = pc.or_kleene(pc.is_null(column), pc.equal(column, pa.scalar(value, column.type)))
        mask = cond if mask is None else pc.and_kleene(mask, cond)
    if mask is not None:
        table = table.filter(pc.fill_null(mask, True))
    n = table.num_rows
    stamped = [(m.timestamp, i) for i, m in enumerate(sim.messages) if m.timestamp is not None]
    positions = pc.index_in(table.column("message_timestamp"), value_set=pa.array([t for t, _ in stamped], pa.string()))
    lookup = np.array([i for _, i in stamped] + [-1], dtype=np.int64)
    message_idx = lookup[pc.fill_null(positions, len(stamped)).to_numpy(zero_copy_only=False)] if n else np.zeros(0, np.int64)
    recorded = table.column("message_idx").to_numpy(zero_copy_only=False)
    recorded = np.where(np.isnan(recorded.astype(float)), -1, recorded).astype(np.int64) if n else recorded
    use_recorded = (message_idx < 0) & (recorded >= 0) & (recorded < len(sim.messages))
    message_idx[use_recorded] = recorded[use_recorded]
    unmatched = message_idx < 0
    if unmatched.any():
        # agentuq's user simulator re-stamps the user message after its rows were written, so
        # those rows match no timestamp; rows are appended in message order, so the unmatched
        # rows belong, in order, to the referencing messages that no row matched (num_tokens each).
        matched = set(message_idx[~unmatched].tolist())
        orphans = [i for i in messages_with_ref if i not in matched]
        counts = [int(_uq_logprobs_ref(sim.messages[i]).get("num_tokens") or 0) for i in orphans]
        if counts and sum(counts) == int(unmatched.sum()):
            message_idx[unmatched] = np.repeat(orphans, counts)
            warnings.add("sidecar_rows_joined_by_order", f"{results_path} simulation {sim.id}", int(unmatched.sum()))
        else:
            warnings.add(
                "sidecar_rows_unmatched_dropped",
                f"{results_path} simulation {sim.id}: {int(unmatched.sum())} rows match no message timestamp",
                int(unmatched.sum()),
            )
            keep = ~unmatched
            table, message_idx = table.filter(pa.array(keep)), message_idx[keep]
    turn_of_message = np.array(
        [m.turn_idx if m.turn_idx is not None else i for i, m in enumerate(sim.messages)], dtype=np.int64
    )
    table = table.set_column(table.schema.get_field_index("message_idx"), "message_idx", pa.array(message_idx))
    return table.set_column(table.schema.get_field_index("turn_idx"), "turn_idx", pa.array(turn_of_message[message_idx]))


def simulation_raw_tokens(
    sim: Simulation,
    domain: str,
    resolver: SidecarResolver,
    warnings: InputWarnings,
    model_by_role: dict[str, str] | None = None,
) -> pa.Table:
    """All token rows of one simulation (raw columns, not yet validated or derived)."""
    model_by_role = model_by_role or {}
    keys = {"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed}
    parts: list[pa.Table] = []
    by_sidecar: dict[Path, list[int]] = {}
    inline: dict[str, list] = {name: [] for name in RAW_COLUMNS}
    for idx, message in enumerate(sim.messages):
        ref = _uq_logprobs_ref(message)
        if ref is not None and ref.get("enabled", True) is not False:
            path = resolver.resolve(ref["path"])
            if path is None:
                raise InputError(
                    resolver.results_path,
                    f"sidecar file '{ref['path']}' does not exist (looked beside the results file"
                    + (f" and in {resolver.sidecar_dir}" if resolver.sidecar_dir else "; pass --sidecar-dir")
                    + ")",
                    f"simulation {sim.id} message {idx}",
                )
            by_sidecar.setdefault(path, []).append(idx)
            continue
        items = inline_logprob_items(message)
        if items is not None:
            base = dict(
                keys,
                role=message.role,
                turn_idx=message.turn_idx if message.turn_idx is not None else idx,
                message_idx=idx,
                model=model_by_role.get(message.role),
                scorer="self",
                source="generated",
                message_timestamp=message.timestamp,
            )
            for name, values in _rows_from_items(items, base).items():
                inline[name].extend(values)
        elif message.role in ("assistant", "user") and idx > 0:  # message 0 is the fixed greeting
            warnings.add(f"{message.role}_messages_without_logprobs", f"{resolver.results_path} simulation {sim.id} message {idx}")
    if inline["token_idx"]:
        parts.append(pa.table(inline, schema=RAW_SCHEMA))
    for path, message_indices in by_sidecar.items():
        table = resolver.read(path)
        table = _join_sidecar_rows(table, sim, message_indices, resolver.results_path, warnings)
        n = table.num_rows
        fill = {"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed, "scorer": "self"}
        for col, value in fill.items():
            column = table.column(col)
            table = table.set_column(table.schema.get_field_index(col), col, pc.fill_null(column, pa.scalar(value, column.type)) if value is not None else column)
        # a sidecar row without 'source' was generated by its own model, or replayed by an observer scorer
        scorer = table.column("scorer")
        default_source = pc.if_else(pc.equal(scorer, "self"), pa.scalar("generated"), pa.scalar("chat_replay"))
        table = table.set_column(table.schema.get_field_index("source"), "source", pc.coalesce(table.column("source"), default_source))
        if n:
            parts.append(table.select(RAW_COLUMNS).cast(RAW_SCHEMA))
    if not parts:
        return RAW_SCHEMA.empty_table()
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    if len(parts) == 1 and _is_in_message_order(out):
        return out
    order = pc.sort_indices(out, sort_keys=[("scorer", "ascending"), ("message_idx", "ascending"), ("token_idx", "ascending")])
    return out.take(order)


def _is_in_message_order(table: pa.Table) -> bool:
    """True when rows of one scorer already run message by message, token by token (the usual case)."""
    if pc.count_distinct(table.column("scorer")).as_py() > 1:
        return False
    key = table.column("message_idx").to_numpy(zero_copy_only=False).astype(np.int64) * (1 << 32) + table.column(
        "token_idx").to_numpy(zero_copy_only=False).astype(np.int64)
    return bool(np.all(np.diff(key) > 0))
