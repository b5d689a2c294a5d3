"""``extract``: results (+ sidecars) → the run's token table, message table and trajectory table.

Simulations stream from the results (ijson) in batches of about ``batch_bytes`` of sidecar
JSON; a batch's sidecars are parsed in one DuckDB query on all cores while the previous batch
is joined, measured and written, and every step works on the whole batch at once (Arrow and
numpy). Memory is bounded by two batches and one Parquet row group, not by the number of
simulations or sidecar files.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa

from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.results import detect_layout, iter_simulations, read_header
from agentuq_nb.io.token_sources import SidecarResolver, batch_raw_tokens
from agentuq_nb.io.token_table import TOKENS_FILE, TokenTableWriter
from agentuq_nb.records import Results, Simulation
from agentuq_nb.uq.token_metrics import with_token_metrics
from agentuq_nb.uq.turn_partials import PARTIALS_FILE, PARTIALS_SCHEMA, table_stamp, token_partials_table

MANIFEST_FILE = "manifest.json"
# one row per message of every simulation: what later estimators need without re-reading the results
MESSAGE_SCHEMA = pa.schema([
    ("domain", pa.string()), ("task_id", pa.string()), ("trial", pa.int64()), ("seed", pa.int64()),
    ("message_idx", pa.int64()), ("turn_idx", pa.int64()), ("role", pa.string()), ("content_chars", pa.int64()),
    ("num_tool_calls", pa.int64()), ("is_error", pa.bool_()), ("timestamp", pa.string()),
])
MESSAGES_FILE = "messages.parquet"
TRAJECTORIES_FILE = "trajectories.parquet"
BATCH_BYTES = 96 << 20  # sidecar JSON per batch: few batches (each costs a query), small enough to hold two
BATCH_SIMULATIONS = 512  # and at most this many simulations (log-probs inline in the results have no sidecar bytes)


@dataclass
class ExtractReport:
    run_dir: Path
    num_simulations: int = 0
    num_tokens: int = 0
    warnings: InputWarnings = field(default_factory=InputWarnings)


def _domain(header: dict) -> str:
    return Results.model_validate({k: v for k, v in header.items() if k in ("info",)}).domain


def _models_by_role(header: dict) -> dict[str, str]:
    info = header.get("info") or {}
    out = {}
    for role, key in (("assistant", "agent_info"), ("user", "user_info")):
        llm = (info.get(key) or {}).get("llm")
        if llm:
            out[role] = str(llm)
    return out


def message_columns(sims: Iterable[Simulation], domain: str) -> dict[str, list]:
    """One row per message of each simulation, as columns (``MESSAGE_SCHEMA``): what later
    estimators need without re-reading the results."""
    cols: dict[str, list] = {name: [] for name in MESSAGE_SCHEMA.names}
    for sim in sims:
        n = len(sim.messages)
        cols["domain"] += [domain] * n
        cols["task_id"] += [str(sim.task_id)] * n
        cols["trial"] += [sim.trial] * n
        cols["seed"] += [sim.seed] * n
        cols["message_idx"] += range(n)
        for idx, m in enumerate(sim.messages):
            cols["turn_idx"].append(m.turn_idx if m.turn_idx is not None else idx)
            cols["role"].append(m.role)
            cols["content_chars"].append(len(m.content or ""))
            cols["num_tool_calls"].append(len(m.tool_calls or []))
            cols["is_error"].append(bool(m.error))
            cols["timestamp"].append(m.timestamp)
    return cols


def message_records(sim: Simulation, domain: str) -> list[dict]:
    """:func:`message_columns` of one simulation, as one dict per message."""
    cols = message_columns([sim], domain)
    return [dict(zip(cols, row)) for row in zip(*cols.values())]


def trajectory_record(sim: Simulation, domain: str) -> dict:
    msgs = sim.messages
    return {
        "domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
        "simulation_id": sim.id,
        "reward": sim.reward,
        "termination_reason": sim.termination_reason,
        "num_messages": len(msgs),
        "num_tool_calls": sum(len(m.tool_calls or []) for m in msgs if m.role == "assistant"),
        "agent_chars": sum(len(m.content or "") for m in msgs if m.role == "assistant"),
    }


def _batches(sims: Iterable[Simulation], resolver: SidecarResolver, batch_bytes: int) -> Iterator[tuple[list[Simulation], Future]]:
    """Simulations in batches, each with the parse of its sidecars under way in the background.

    The next batch's sidecars parse (DuckDB, off the GIL) while the caller works on the current
    batch; a batch's parse starts only after the previous one finished, so a sidecar shared by
    many simulations is parsed once and then found in the resolver's cache.
    """
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sidecars")
    pending: tuple[list[Simulation], Future] | None = None

    def submit(batch: list[Simulation], paths: dict[Path, None]) -> tuple[list[Simulation], Future]:
        return batch, executor.submit(resolver.read_many, list(paths))

    def advance(batch: list[Simulation], paths: dict[Path, None]):
        """Start the parse of ``batch`` once the pending one is done; hand out the pending one."""
        nonlocal pending
        if pending is not None:
            pending[1].exception()  # wait for it (its errors surface where the batch is used)
        previous, pending = pending, submit(batch, paths)
        return previous

    try:
        batch: list[Simulation] = []
        paths: dict[Path, None] = {}  # the batch's sidecars, in order, each once
        previous: dict[Path, None] = {}
        size = 0
        for sim in sims:
            batch.append(sim)
            for path in resolver.referenced_paths(sim):
                if path not in paths:
                    paths[path] = None
                    # a file the previous batch read too (one shared by all trajectories: agentuq's ``single``
                    # partition mode) is usually still in the resolver's cache; counting it in every batch
                    # would make each batch one simulation
                    size += 0 if path in previous else _file_size(path)
            if size >= batch_bytes or len(batch) >= BATCH_SIMULATIONS:
                if (ready := advance(batch, paths)) is not None:
                    yield ready
                batch, previous, paths, size = [], paths, {}, 0
        if batch and (ready := advance(batch, paths)) is not None:
            yield ready
        if pending is not None:
            yield pending
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def extract(results_path: str | Path, run_dir: str | Path, sidecar_dir: str | Path | None = None, progress: bool = False,
            batch_bytes: int = BATCH_BYTES) -> ExtractReport:
    """Write ``tokens.parquet``, ``messages.parquet``, ``trajectories.parquet`` and a manifest to ``run_dir``."""
    results_path, run_dir = Path(results_path), Path(run_dir)
    layout = detect_layout(results_path)
    header = read_header(results_path)
    domain = _domain(header)
    models = _models_by_role(header)
    resolver = SidecarResolver(results_path if results_path.is_file() else results_path / "results.json",
                               Path(sidecar_dir) if sidecar_dir else None)
    report = ExtractReport(run_dir)
    trajectories = []
    sims = iter_simulations(results_path)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="extract", unit="sim")
    run_dir.mkdir(parents=True, exist_ok=True)
    # messages and turn partials stream to disk like tokens (lists would grow with the number of simulations)
    with TokenTableWriter(run_dir / TOKENS_FILE, background=True) as writer, closing(resolver), \
            TokenTableWriter(run_dir / MESSAGES_FILE, row_group_rows=65_536, schema=MESSAGE_SCHEMA) as message_writer, \
            TokenTableWriter(run_dir / PARTIALS_FILE, row_group_rows=65_536, schema=PARTIALS_SCHEMA) as partials_writer:
        for batch, parsed in _batches(sims, resolver, batch_bytes):
            raw, sim_pos = batch_raw_tokens(batch, domain, resolver, report.warnings, models, parsed.result())
            where = lambda row, batch=batch, sim_pos=sim_pos: f"{results_path} simulation {batch[sim_pos[row]].id}"  # noqa: E731
            tokens = with_token_metrics(raw, where, report.warnings)
            writer.write(tokens)
            # per-turn sums, stored for aggregate: the summaries need no second pass over the table
            partials_writer.write(token_partials_table(tokens))
            message_writer.write(pa.table(message_columns(batch, domain), schema=MESSAGE_SCHEMA))
            for sim in batch:
                trajectories.append(trajectory_record(sim, domain))
                if sim.reward is None:
                    report.warnings.add("simulations_without_reward", f"{results_path} simulation {sim.id}")
            report.num_simulations += len(batch)
            if bar is not None:
                bar.update(len(batch))
        report.num_tokens = writer.num_rows
        writer.close()  # publish the token table, then say in the partials which table they describe
        partials_writer.add_metadata(table_stamp(run_dir / TOKENS_FILE))
    if bar is not None:
        bar.close()
    if report.num_simulations == 0:
        raise InputError(results_path, "results contain no simulations")
    atomic_write_with(run_dir / TRAJECTORIES_FILE, pd.DataFrame(trajectories).to_parquet)
    keys = pd.DataFrame(trajectories)[["task_id", "trial", "seed"]]
    dupes = int(keys.duplicated().sum())
    report.warnings.add("duplicate_trajectory_keys", f"{results_path}: (task_id, trial, seed) repeats", dupes)
    manifest = {
        "results": str(results_path.resolve()),
        "layout": layout,
        "sidecar_dir": str(Path(sidecar_dir).resolve()) if sidecar_dir else None,
        "domain": domain,
        "models": models,
        "num_simulations": report.num_simulations,
        "num_tokens": report.num_tokens,
        "warnings": report.warnings.as_dict(),
        "extracted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_json(run_dir / MANIFEST_FILE, manifest)
    return report


def read_manifest(run_dir: str | Path) -> dict:
    path = Path(run_dir) / MANIFEST_FILE
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no {MANIFEST_FILE}; run 'agentuq-nb extract RESULTS --out {run_dir}' first")
    return json.loads(path.read_text())
