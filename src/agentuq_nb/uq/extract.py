"""``extract``: results (+ sidecars) → the run's token table, message table and trajectory table.

Streams one simulation at a time (ijson + Arrow), so memory is bounded by one trajectory and
one Parquet row group, not by the number of simulations or sidecar files.
"""
from __future__ import annotations

import json
from collections import deque
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa

from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.results import detect_layout, iter_simulations, read_header
from agentuq_nb.io.token_sources import SidecarResolver, simulation_raw_tokens
from agentuq_nb.io.token_table import TOKENS_FILE, TokenTableWriter
from agentuq_nb.records import Results, Simulation
from agentuq_nb.uq.token_metrics import with_token_metrics

MANIFEST_FILE = "manifest.json"
# one row per message of every simulation: what later estimators need without re-reading the results
MESSAGE_SCHEMA = pa.schema([
    ("domain", pa.string()), ("task_id", pa.string()), ("trial", pa.int64()), ("seed", pa.int64()),
    ("message_idx", pa.int64()), ("turn_idx", pa.int64()), ("role", pa.string()), ("content_chars", pa.int64()),
    ("num_tool_calls", pa.int64()), ("is_error", pa.bool_()), ("timestamp", pa.string()),
])
MESSAGES_FILE = "messages.parquet"
TRAJECTORIES_FILE = "trajectories.parquet"


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


def message_records(sim: Simulation, domain: str) -> list[dict]:
    """One row per message: what later estimators need without re-reading the results."""
    rows = []
    for idx, m in enumerate(sim.messages):
        rows.append(
            {
                "domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
                "message_idx": idx, "turn_idx": m.turn_idx if m.turn_idx is not None else idx,
                "role": m.role, "content_chars": len(m.content or ""),
                "num_tool_calls": len(m.tool_calls or []), "is_error": bool(m.error),
                "timestamp": m.timestamp,
            }
        )
    return rows


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


def _read_ahead(sims, resolver: SidecarResolver, window: int = 4):
    """Yield simulations in order while the next ``window`` ones' sidecars parse in the background."""
    queue: deque = deque()
    for sim in sims:
        resolver.prefetch(sim)
        queue.append(sim)
        if len(queue) > window:
            yield queue.popleft()
    yield from queue


def extract(results_path: str | Path, run_dir: str | Path, sidecar_dir: str | Path | None = None, progress: bool = False) -> ExtractReport:
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
    sims = _read_ahead(iter_simulations(results_path), resolver)
    if progress:
        from tqdm.auto import tqdm

        sims = tqdm(sims, desc="extract", unit="sim")
    run_dir.mkdir(parents=True, exist_ok=True)
    # messages stream to disk like tokens (a list of dicts would grow with the number of simulations)
    with TokenTableWriter(run_dir / TOKENS_FILE) as writer, closing(resolver), \
            TokenTableWriter(run_dir / MESSAGES_FILE, row_group_rows=65_536, schema=MESSAGE_SCHEMA) as message_writer:
        for sim in sims:
            raw = simulation_raw_tokens(sim, domain, resolver, report.warnings, models)
            writer.write(with_token_metrics(raw, f"{results_path} simulation {sim.id}", report.warnings))
            message_writer.write(pa.Table.from_pylist(message_records(sim, domain), schema=MESSAGE_SCHEMA))
            trajectories.append(trajectory_record(sim, domain))
            if sim.reward is None:
                report.warnings.add("simulations_without_reward", f"{results_path} simulation {sim.id}")
            report.num_simulations += 1
        report.num_tokens = writer.num_rows
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
