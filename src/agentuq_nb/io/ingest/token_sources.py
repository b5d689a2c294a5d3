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
import stat
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest.sidecars import SidecarReader, blank
from agentuq_nb.records import Simulation
from agentuq_nb.records.run_tables import MessageColumns
from agentuq_nb.records.tokens import TOKEN_SCHEMA

RAW_COLUMNS = [
    "domain", "task_id", "trial", "seed", "role", "turn_idx", "message_idx", "token_idx", "token",
    "chosen_logprob", "topk_tokens", "topk_logprobs", "full_entropy", "model", "scorer", "source",
    "message_timestamp",
]
RAW_SCHEMA = pa.schema([TOKEN_SCHEMA.field(name) for name in RAW_COLUMNS])
SIMULATION_KEYS = ("task_id", "trial", "seed")  # a sidecar row's own trajectory (agentuq writes them on every row)
#: a batch's rows come in one chunk per sidecar file; past this many chunks (one sidecar per message: ~1,000
#: a batch) they are copied into one, which costs less than every later step's work per chunk (10⁷ rows in
#: 199,980 files: extract 23.2 -> 17.9 s); with one sidecar per trajectory (~34 a batch) the copy costs more
COMBINED_CHUNKS = 64
_UNRESOLVED = object()  # a path not looked up yet (None means looked up and not found)


@dataclass
class SidecarResolver:
    """Finds sidecar files (as written, relative to the results file, or by name in ``sidecar_dir``)
    and parses them, many files per query.

    Keeps the last few parsed files so that a sidecar shared by many simulations (agentuq's
    ``single`` partition mode) is parsed once, while memory stays bounded.
    """

    results_path: Path
    sidecar_dir: Path | None = None
    cache_size: int = 2
    #: sidecar paths whose resolution is remembered (a results file may name hundreds of thousands)
    RESOLVED_PATHS_KEPT: ClassVar[int] = 10_000
    #: what the files parsed so far lack (empty files, blank lines, rows without role or token)
    warnings: InputWarnings = field(default_factory=InputWarnings)
    _cache: OrderedDict = field(default_factory=OrderedDict)
    _resolved: dict = field(default_factory=dict)
    _sizes: dict = field(default_factory=dict)  # sizes of the files found and not asked for yet
    _reader: SidecarReader | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _rows_in_file: dict = field(default_factory=dict)  # files not all of whose rows were taken yet
    _rows_kept: Counter = field(default_factory=Counter)
    #: hashes of the files all of whose rows were taken (at 200k sidecars, keeping their paths and counts
    #: cost ~125 MiB at the peak)
    _all_taken: set = field(default_factory=set)

    def tally(self, path: Path, rows_in_file: int, rows_kept: int) -> None:
        """Count the rows of ``path`` a simulation took (batches add up; the file's size is set once)."""
        key = hash(path)
        if key in self._all_taken:
            return
        kept = self._rows_kept.pop(path, 0) + rows_kept
        if kept >= rows_in_file:
            self._rows_in_file.pop(path, None)
            self._all_taken.add(key)
        else:
            self._rows_in_file[path], self._rows_kept[path] = rows_in_file, kept

    def report_unplaced(self, warnings: InputWarnings) -> None:
        """Rows of the referenced sidecars that no simulation of the results took (their keys name
        trajectories that are not there): counted, with the first file, once every batch is done."""
        for path, total in self._rows_in_file.items():
            lost = total - self._rows_kept[path]
            if lost > 0:
                warnings.add("sidecar_rows_of_no_simulation", f"{path}: {lost} of {total} rows", lost)

    def resolve(self, recorded: str) -> Path | None:
        if not isinstance(recorded, str):  # not a path at all: reported by not_found()
            return None
        found = self._resolved.get(recorded, _UNRESOLVED)
        if found is _UNRESOLVED:
            if len(self._resolved) >= self.RESOLVED_PATHS_KEPT:  # bounded: one entry per distinct sidecar path
                self._resolved.clear()
                self._sizes.clear()
            found = self._resolved[recorded] = self._find(recorded)
        return found

    def _candidates(self, recorded: str) -> Iterator[Path]:
        """Where ``recorded`` may be, in the order looked (made one at a time: the first is usually it)."""
        absolute = os.path.isabs(recorded)
        if self.sidecar_dir is not None:
            yield self.sidecar_dir / Path(recorded).name
            if not absolute:
                yield self.sidecar_dir / recorded
        if not absolute:
            yield self.results_path.parent / recorded
        yield Path(recorded)

    def _find(self, recorded: str) -> Path | None:
        """The first candidate that is a regular file (its size kept for :meth:`size_of`: one stat per file)."""
        for candidate in self._candidates(recorded):
            try:
                info = os.stat(candidate)
            except (OSError, ValueError):
                continue
            if stat.S_ISREG(info.st_mode):
                self._sizes[candidate] = info.st_size
                return candidate
        return None

    def size_of(self, path: Path) -> int:
        """The size of a sidecar :meth:`resolve` found (0 if it cannot be read)."""
        size = self._sizes.pop(path, None)
        if size is None:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0
        return size

    def not_found(self, recorded: str, where: str) -> InputError:
        """The error for a sidecar reference :meth:`resolve` found no file for: a directory is said to be one."""
        if not isinstance(recorded, str):
            return InputError(self.results_path, f"uq_logprobs.path is {recorded!r}, not a file path", where)
        directory = next((c for c in self._candidates(recorded) if c.is_dir()), None)
        if directory is not None:
            return InputError(directory, f"sidecar path '{recorded}' (referenced by {self.results_path}) is a "
                              "directory, not a JSONL file", where)
        special = next((c for c in self._candidates(recorded) if c.exists()), None)
        if special is not None:  # a FIFO, socket or device: reading it could block or never end
            return InputError(special, f"sidecar path '{recorded}' (referenced by {self.results_path}) is not a "
                              "regular file", where)
        looked = " and in " + str(self.sidecar_dir) if self.sidecar_dir else "; give sidecar_dir"
        return InputError(self.results_path, f"sidecar file '{recorded}' does not exist (looked beside the "
                          f"results file{looked})", where)

    def referenced_paths(self, sim: Simulation) -> list[Path]:
        """The sidecar files a simulation's messages point to (resolved; missing ones left out)."""
        recorded = dict.fromkeys(ref["path"] if isinstance(ref["path"], str) else None  # a list: reported later
                                 for m in sim.messages if (ref := _sidecar_ref(m)) is not None)
        paths = (self.resolve(path) for path in recorded)  # each path once: agentuq names one file per trajectory
        return list(dict.fromkeys(p for p in paths if p is not None))

    def read_many(self, paths: Sequence[Path]) -> dict[Path, pa.Table]:
        """Parsed sidecars (``SIDECAR_SCHEMA``) by path; the ones not cached are parsed in one query."""
        paths = list(dict.fromkeys(paths))
        out = {}
        for path in paths:
            key = os.path.abspath(path)  # a cache key: no filesystem calls (resolve() stats every component)
            if key in self._cache:
                self._cache.move_to_end(key)
                out[path] = self._cache[key]
        todo = [p for p in paths if p not in out]
        if todo:
            if self._reader is None:
                self._reader = SidecarReader()
            found = InputWarnings()
            parsed = self._reader.read(todo, found)
            with self._lock:  # parses run on a background thread as well as the caller's
                self.warnings.merge(found)
            for path, table in zip(todo, parsed):
                out[path] = table
                self._cache[os.path.abspath(path)] = table
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return out

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._cache.clear()


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


def uq_logprobs_ref(message) -> dict | None:
    ref = (message.raw_data or {}).get("uq_logprobs")
    return ref if isinstance(ref, dict) and ref.get("path") else None


def _sidecar_ref(message) -> dict | None:
    """The message's sidecar reference, unless agentuq recorded it as disabled (a failed save)."""
    ref = uq_logprobs_ref(message)
    return ref if ref is not None and ref.get("enabled", True) is not False else None


def batch_raw_tokens(
    sims: Sequence[Simulation],
    domain: str,
    resolver: SidecarResolver,
    warnings: InputWarnings,
    model_by_role: dict[str, str] | None = None,
    sidecars: dict[Path, pa.Table] | None = None,
    messages: MessageColumns | None = None,
) -> tuple[pa.Table, np.ndarray]:
    """All token rows of a batch of simulations (raw columns, not yet validated or derived).

    Returns the rows in simulation order and, for each row, the position in ``sims`` of its
    simulation. Within a simulation rows run by (scorer, message_idx, token_idx); on ties
    inline rows come before sidecar rows. ``sidecars`` holds files already parsed (by path),
    ``messages`` the batch's message values if the caller gathered them;
    the others are parsed here, all in one query. Everything is vectorized over the batch, so
    the cost per simulation is a few Python steps, whatever the number of tokens.
    """
    model_by_role = model_by_role or {}
    inline: dict[str, list] = {name: [] for name in RAW_COLUMNS}
    inline_pos: list[int] = []
    pieces: list[tuple[int, Path, list[int]]] = []  # (simulation position, sidecar, messages that reference it)
    recorded_counts: list[tuple[int, int, int, Path]] = []  # (simulation position, message, its num_tokens, sidecar)
    for pos, sim in enumerate(sims):
        keys = {"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed}
        by_sidecar: dict[Path, list[int]] = {}
        for idx, message in enumerate(sim.messages):
            ref = _sidecar_ref(message)
            if ref is not None:
                path = resolver.resolve(ref["path"])
                if path is None:
                    raise resolver.not_found(ref["path"], f"simulation {sim.id} message {idx}")
                by_sidecar.setdefault(path, []).append(idx)
                if (count := ref_num_tokens(ref)) is not None:
                    recorded_counts.append((pos, idx, count, path))
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
                inline_pos.extend([pos] * len(items))
            elif message.role in ("assistant", "user") and idx > 0:  # message 0 is the fixed greeting
                warnings.add(f"{message.role}_messages_without_logprobs", f"{resolver.results_path} simulation {sim.id} message {idx}")
        pieces.extend((pos, path, indices) for path, indices in by_sidecar.items())
    parts, positions, part_rank = [], [], []
    if inline_pos:
        parts.append(pa.table(inline, schema=RAW_SCHEMA))
        positions.append(np.asarray(inline_pos, dtype=np.int64))
        part_rank.append(np.zeros(len(inline_pos), dtype=np.int8))
    if pieces:
        tables = dict(sidecars or {})
        missing = [path for _, path, _ in pieces if path not in tables]
        if missing:
            tables.update(resolver.read_many(missing))
        messages = messages if messages is not None else MessageColumns.of(sims)
        table, pos = _sidecar_rows(pieces, tables, sims, messages, domain, resolver, warnings)
        _count_differing(recorded_counts, sims, pos, table.column("message_idx").to_numpy(), table.column("scorer"),
                         resolver.results_path, warnings)
        if table.num_rows:
            parts.append(table)
            positions.append(pos)
            part_rank.append(np.ones(len(pos), dtype=np.int8))
    if not parts:
        return RAW_SCHEMA.empty_table(), np.zeros(0, dtype=np.int64)
    out = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    pos, rank = np.concatenate(positions), np.concatenate(part_rank)
    order = _row_order(out, pos, rank)
    if order is None:
        return out, pos
    return out.take(order), pos[order]


def _sidecar_rows(
    pieces: list[tuple[int, Path, list[int]]],
    tables: dict[Path, pa.Table],
    sims: Sequence[Simulation],
    messages: MessageColumns,
    domain: str,
    resolver: SidecarResolver,
    warnings: InputWarnings,
) -> tuple[pa.Table, np.ndarray]:
    """The sidecar rows of every (simulation, file) piece, joined to their messages.

    A row belongs to the message whose timestamp it carries; else to the ``message_idx`` it
    recorded; else (agentuq's user simulator re-stamps a user message after its rows were
    written) rows left over in a piece go, in order, to the referencing messages no row
    matched, ``num_tokens`` each. Rows of other trajectories in a shared file (agentuq's
    ``single`` partition mode) are dropped.
    """
    # the keys of each simulation (null where it has none)
    sim_keys = {
        "domain": pa.array([domain] * len(sims), pa.string()),
        "task_id": pa.array([str(s.task_id) for s in sims], pa.string()),
        "trial": pa.array([s.trial for s in sims], pa.int64()),
        "seed": pa.array([s.seed for s in sims], pa.int64()),
    }
    piece_pos = np.array([pos for pos, _, _ in pieces], dtype=np.int64)
    table, piece_of_row = _rows_of_pieces(pieces, tables, sim_keys, piece_pos)
    kept = np.bincount(piece_of_row, minlength=len(pieces))
    for p, (_, path, _) in enumerate(pieces):
        resolver.tally(path, tables[path].num_rows, int(kept[p]))
    results_path = resolver.results_path
    row_pos = piece_pos[piece_of_row]

    # by timestamp: the first message of the row's simulation with the row's message_timestamp
    n_messages = np.array(messages.counts, dtype=np.int64)
    first_message = np.concatenate([[0], np.cumsum(n_messages)[:-1]])
    all_stamps = pa.array(messages.stamps, pa.string())
    has_stamp = all_stamps.is_valid().to_numpy(zero_copy_only=False)
    message_idx = np.full(table.num_rows, -1, dtype=np.int64)
    if has_stamp.any():
        stamps = all_stamps.filter(pa.array(has_stamp)) if all_stamps.null_count else all_stamps
        stamp_sim = np.repeat(np.arange(len(sims), dtype=np.int64), n_messages)[has_stamp]
        stamp_message = (np.arange(len(has_stamp), dtype=np.int64) - np.repeat(first_message, n_messages))[has_stamp]
        values = pc.unique(stamps)
        width = len(values) + 1
        message_key = stamp_sim * width + pc.index_in(stamps, value_set=values).to_numpy()
        keys, first = np.unique(message_key, return_index=True)  # (simulation, stamp) → its first message
        key_message = stamp_message[first]
        code = pc.fill_null(pc.index_in(table.column("message_timestamp"), value_set=values), -1).to_numpy(zero_copy_only=False)
        if len(keys) == len(values):  # each stamp in one simulation (the usual case): a lookup by stamp
            key_stamp, key_sim = keys % width, keys // width
            stamp_sim, stamp_message = np.empty(len(values), np.int64), np.empty(len(values), np.int64)
            stamp_sim[key_stamp], stamp_message[key_stamp] = key_sim, key_message
            at = np.maximum(code, 0)
            found = (code >= 0) & (stamp_sim[at] == row_pos)
            message_idx[found] = stamp_message[at[found]]
        else:
            row_key = row_pos * width + code
            at = np.minimum(np.searchsorted(keys, row_key), len(keys) - 1)
            found = (code >= 0) & (keys[at] == row_key)
            message_idx[found] = key_message[at[found]]
    recorded = table.column("message_idx").to_numpy(zero_copy_only=False).astype(np.float64)
    use_recorded = (message_idx < 0) & (recorded >= 0) & (recorded < n_messages[row_pos])  # NaN compares False
    message_idx[use_recorded] = recorded[use_recorded]

    unmatched = message_idx < 0
    if unmatched.any():
        starts = np.searchsorted(piece_of_row, np.arange(len(pieces) + 1))
        for p in np.unique(piece_of_row[unmatched]):
            pos, _, referencing = pieces[p]
            sim = sims[pos]
            rows = message_idx[starts[p]:starts[p + 1]]  # a view: assignments land in message_idx
            left = rows < 0
            matched = set(rows[~left].tolist())
            orphans = [i for i in referencing if i not in matched]
            counts = [num_tokens(sim.messages[i]) or 0 for i in orphans]
            if counts and sum(counts) == int(left.sum()):
                rows[left] = np.repeat(orphans, counts)
                warnings.add("sidecar_rows_joined_by_order", f"{results_path} simulation {sim.id}", int(left.sum()))
            else:
                warnings.add(
                    "sidecar_rows_unmatched_dropped",
                    f"{results_path} simulation {sim.id}: {int(left.sum())} rows match no message timestamp",
                    int(left.sum()),
                )
        keep = message_idx >= 0
        if not keep.all():
            table, row_pos, message_idx = table.filter(pa.array(keep)), row_pos[keep], message_idx[keep]

    turn_of_message = np.array(messages.turns, dtype=np.int64)
    columns = {name: table.column(name) for name in table.column_names}
    columns["message_idx"] = pa.array(message_idx)
    message_of_row = first_message[row_pos] + message_idx
    columns["turn_idx"] = pa.array(turn_of_message[message_of_row])
    columns["role"] = _message_roles(columns["role"], sims, messages, message_of_row, row_pos, message_idx,
                                     results_path, warnings)
    for col, values in sim_keys.items():
        if columns[col].null_count:  # agentuq writes the keys on every row: usually nothing to fill
            columns[col] = pc.fill_null(columns[col], values.take(row_pos))
    if columns["scorer"].null_count:
        columns["scorer"] = pc.fill_null(columns["scorer"], "self")
    if columns["source"].null_count:
        # a sidecar row without 'source' was generated by its own model, or replayed by an observer scorer
        if pc.all(pc.equal(columns["scorer"], "self")).as_py():  # agentuq's own rows: one value to fill in
            columns["source"] = pc.fill_null(columns["source"], "generated")
        else:
            default_source = pc.if_else(pc.equal(columns["scorer"], "self"), pa.scalar("generated"), pa.scalar("chat_replay"))
            columns["source"] = pc.coalesce(columns["source"], default_source)
    return pa.table([columns[name] for name in RAW_COLUMNS], schema=RAW_SCHEMA), row_pos


def _message_roles(role: pa.ChunkedArray, sims: Sequence[Simulation], messages: MessageColumns,
                   message_of_row: np.ndarray, row_pos: np.ndarray, message_idx: np.ndarray, results_path: Path,
                   warnings: InputWarnings) -> pa.Array:
    """A placed row's role is its message's: a missing or empty role (counted where the file was read) is
    filled in, one that names another role is counted and replaced (a row never makes a group of its own)."""
    roles = pa.array(messages.roles, pa.string()).take(pa.array(message_of_row))
    differs = pc.fill_null(pc.not_equal(role, roles), False)
    if not pc.any(differs).as_py():  # the usual case: every row names its message's role (or none)
        return roles
    given = pc.if_else(blank(role), pa.scalar(None, pa.string()), role)
    differs = pc.fill_null(pc.not_equal(given, roles), False)  # a blank role is a missing one, not another
    if pc.any(differs).as_py():
        first = int(pc.index(differs, True).as_py())
        warnings.add("sidecar_rows_role_differs", f"{results_path} simulation {sims[row_pos[first]].id} message "
                     f"{message_idx[first]}: a row says '{given[first].as_py()}', the message is "
                     f"'{roles[first].as_py()}'", int(pc.sum(differs).as_py()))
    return roles


def num_tokens(message) -> int | None:
    """The ``uq_logprobs.num_tokens`` a message records for its sidecar rows (None: not recorded)."""
    return ref_num_tokens(uq_logprobs_ref(message) or {})


def ref_num_tokens(ref: dict) -> int | None:
    """The ``num_tokens`` a sidecar reference records (None: not recorded or not a count)."""
    value = ref.get("num_tokens")
    try:
        return None if value is None or isinstance(value, bool) else int(value)
    except (TypeError, ValueError):
        return None


def _count_differing(expected: list[tuple[int, int, int, Path]], sims: Sequence[Simulation], row_pos: np.ndarray,
                     message_idx: np.ndarray, scorer: pa.ChunkedArray | pa.Array, results_path: Path,
                     warnings: InputWarnings) -> None:
    """Count the messages whose own (scorer ``self``) sidecar rows are not the ``num_tokens`` they record
    (``expected``: simulation position, message, num_tokens, sidecar)."""
    if not expected:
        return
    width = max(len(s.messages) for s in sims) + 1
    own = pc.equal(scorer, "self").to_numpy(zero_copy_only=False)
    key = row_pos * width + message_idx
    # rows per (simulation, message) of the batch: a count per slot (a few thousand), no sort of the rows
    counts = np.bincount(key if own.all() else key[own], minlength=len(sims) * width)
    got = counts[np.array([pos * width + i for pos, i, _, _ in expected], dtype=np.int64)]
    differs = np.flatnonzero(got != np.array([n for _, _, n, _ in expected], dtype=np.int64))
    if differs.size:
        pos, i, n, path = expected[differs[0]]
        warnings.add("sidecar_row_count_differs", f"{results_path} simulation {sims[pos].id} message {i}: "
                     f"{int(got[differs[0]])} rows in {path}, num_tokens {n}", int(differs.size))


def _rows_of_pieces(
    pieces: list[tuple[int, Path, list[int]]],
    tables: dict[Path, pa.Table],
    sim_keys: dict[str, pa.Array],
    piece_pos: np.ndarray,
) -> tuple[pa.Table, np.ndarray]:
    """The rows each piece may own, in piece order (file order within a piece), and each row's piece.

    A piece may own the rows of its file whose keys equal its simulation's, a null key
    matching any. A file referenced by one piece is filtered by comparison. A file shared by
    several simulations (agentuq's ``single`` partition mode) is split among them by one hash
    join, so its rows are looked at once per batch, not once per simulation.
    """
    by_path: dict[Path, list[int]] = {}
    for p, (_, path, _) in enumerate(pieces):
        by_path.setdefault(path, []).append(p)
    alone = [owning[0] for owning in by_path.values() if len(owning) == 1]  # the usual case: a file per trajectory
    parts, owners = [], []
    if alone:
        alone_tables = [tables[pieces[p][1]] for p in alone]
        table = pa.concat_tables(alone_tables)
        if table.column(0).num_chunks > COMBINED_CHUNKS:  # many small files: one copy beats per-chunk work after
            table = table.combine_chunks()
        piece = np.repeat(np.asarray(alone, dtype=np.int64), [t.num_rows for t in alone_tables])
        own_keys = {col: sim_keys[col].take(piece_pos[piece]) for col in SIMULATION_KEYS}
        keep = _keys_match(table, own_keys)
        if not keep.all():
            table, piece = table.filter(pa.array(keep)), piece[keep]
        parts.append(table)
        owners.append(piece)
    for path, owning in by_path.items():
        if len(owning) > 1:
            rows, piece = _split_shared(tables[path], np.asarray(owning, dtype=np.int64), sim_keys, piece_pos)
            parts.append(tables[path].take(rows))
            owners.append(piece)
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    piece_of_row = np.concatenate(owners)
    if len(piece_of_row) > 1 and (np.diff(piece_of_row) < 0).any():
        order = np.argsort(piece_of_row, kind="stable")
        table, piece_of_row = table.take(order), piece_of_row[order]
    return table, piece_of_row


def _keys_match(table: pa.Table, keys: dict[str, pa.Array | pa.Scalar]) -> np.ndarray:
    """Rows whose simulation keys equal ``keys`` (one value, or one per row); a null on either side matches."""
    keep = np.ones(table.num_rows, dtype=bool)
    for col, value in keys.items():
        if isinstance(value, pa.Scalar) and not value.is_valid:
            continue
        keep &= pc.fill_null(pc.equal(table.column(col), value), True).to_numpy(zero_copy_only=False)
    return keep


def _split_shared(table: pa.Table, owning: np.ndarray, sim_keys: dict[str, pa.Array],
                  piece_pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, piece) pairs of a file shared by the pieces ``owning``, sorted by piece then row."""
    piece_keys = {col: sim_keys[col].take(piece_pos[owning]) for col in SIMULATION_KEYS}
    complete = np.ones(table.num_rows, dtype=bool)
    for col in SIMULATION_KEYS:
        complete &= table.column(col).is_valid().to_numpy(zero_copy_only=False)
    complete_pieces = np.ones(len(owning), dtype=bool)
    for values in piece_keys.values():
        complete_pieces &= values.is_valid().to_numpy(zero_copy_only=False)
    rows, piece = [], []
    # rows and simulations with every key: one inner join (a null key never joins)
    left = pa.table({**{col: table.column(col) for col in SIMULATION_KEYS}, "_row": np.arange(table.num_rows)})
    right = pa.table({**piece_keys, "_piece": owning})
    joined = left.join(right, keys=list(SIMULATION_KEYS), join_type="inner", use_threads=False)
    rows.append(joined.column("_row").to_numpy())
    piece.append(joined.column("_piece").to_numpy())
    # a missing key on either side matches any value: compared piece by piece (rare)
    partial_rows = np.flatnonzero(~complete)
    key_columns = table.select(list(SIMULATION_KEYS))
    partial_keys = key_columns.take(partial_rows)
    for p, complete_piece in zip(owning, complete_pieces):
        keys = {col: sim_keys[col][int(piece_pos[p])] for col in SIMULATION_KEYS}
        if complete_piece:
            found = partial_rows[_keys_match(partial_keys, keys)]
        else:  # a piece with a null key joined nothing: every row is a candidate
            found = np.flatnonzero(_keys_match(key_columns, keys))
        rows.append(found)
        piece.append(np.full(len(found), p, dtype=np.int64))
    rows_all, piece_all = np.concatenate(rows).astype(np.int64), np.concatenate(piece).astype(np.int64)
    order = np.lexsort((rows_all, piece_all))
    return rows_all[order], piece_all[order]


def _row_order(table: pa.Table, pos: np.ndarray, part_rank: np.ndarray) -> np.ndarray | None:
    """The stable order by (simulation, scorer, message_idx, token_idx, inline before sidecar);
    None when the rows already run in it (the usual case: one sidecar per trajectory)."""
    scorer = table.column("scorer")
    names = pa.array(sorted(pc.unique(scorer).drop_null().to_pylist()), pa.string())
    if len(names) == 1 and not scorer.null_count:  # one scorer (the usual case): every rank is 0
        scorer_rank = np.zeros(len(pos), dtype=np.int64)
    else:
        scorer_rank = pc.fill_null(pc.index_in(scorer, value_set=names), len(names)).to_numpy(zero_copy_only=False)
    message = table.column("message_idx").to_numpy(zero_copy_only=False).astype(np.int64)
    token = pc.fill_null(table.column("token_idx"), np.iinfo(np.int64).max).to_numpy(zero_copy_only=False)
    keys = (pos, scorer_rank, message, token, part_rank)
    ordered = np.zeros(len(pos) - 1, dtype=bool) if len(pos) > 1 else np.zeros(0, dtype=bool)
    tied = np.ones_like(ordered)
    for key in keys:  # lexicographic: each pair of neighbours is ordered by its first differing key
        step = np.diff(key.astype(np.int64))
        ordered |= tied & (step > 0)
        tied &= step == 0
    if np.all(ordered | tied):
        return None
    return np.lexsort(keys[::-1])
