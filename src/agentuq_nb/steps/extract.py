"""``extract``: results (+ sidecars) → the run's base tables: tokens, turn partials, messages, trajectories.

Simulations stream from the results (ijson) in batches of about ``batch_bytes`` of sidecar
JSON; a batch's sidecars are parsed on a thread of their own (the compiled scanner, or DuckDB for
files beyond its scope: :mod:`agentuq_nb.io.ingest.sidecars`) while the previous batch is joined,
measured and written, and every step works on the whole batch at once (Arrow and numpy). Memory
is bounded by two batches and one Parquet row group, not by the number of simulations or sidecar
files.

The tables and the manifest are published as one commit of the run folder
(:class:`~agentuq_nb.io.store.rundir.RunDir`): an input that turns out to be bad, a kill or a Ctrl-C at
any moment leaves the folder's previous run as it was, never half replaced.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
from pydantic import Field

from agentuq_nb.common.collector import fewer_collections
from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest.results import iter_simulations, layout_before_simulations, read_header, simulation_layout
from agentuq_nb.io.ingest.sidecars import release_scanner_memory
from agentuq_nb.io.ingest.token_sources import SidecarResolver, batch_raw_tokens
from agentuq_nb.io.input_warnings import emit_input_warnings
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Results, Simulation
from agentuq_nb.records.run_tables import MessageColumns
from agentuq_nb.steps.base import Step, StepConfig
from agentuq_nb.uq.base_tables import BaseTables
from agentuq_nb.uq.token_metrics import with_token_metrics

BATCH_BYTES = 32 << 20  # sidecar JSON per batch: few batches (each costs a query), small enough that two in
# memory stay well under AgentUQ's own peak (with base_tables.TOKEN_ROW_GROUP_ROWS; see there)
BATCH_SIMULATIONS = 512  # and at most this many simulations (log-probs inline in the results have no sidecar bytes)

STEP = Step("extract", "agentuq-nb extract RESULTS --out RUN_DIR",
            ("manifest", "tokens", "messages", "trajectories", "turn_partials"))


class ExtractConfig(StepConfig):
    """What is extracted: the results, where their sidecars are, which score is the reward."""

    results: Path = Field(description="τ²-bench results (a v0/v1 JSON file or a v1.0.1 results directory), the "
                          "original τ-bench's results (a JSON list of {task_id, reward, info, traj, trial}) or an "
                          "Inspect AI log (.eval; the [inspect] extra)")
    sidecar_dir: Optional[Path] = Field(None, description="where agentuq sidecar JSONL files are, if not beside the "
                                        "results")
    score: Optional[str] = Field(None, description="Inspect AI logs: the scorer whose value is the reward, NAME or "
                                 "NAME:KEY for a dict-valued score (default: the eval's first scorer; C/P/I/N → "
                                 "1/0.5/0/0, numbers as they are)")
    progress: bool = Field(False, description="show a progress bar")
    batch_bytes: int = Field(BATCH_BYTES, ge=1, description="sidecar JSON per batch (memory is bounded by two)")


@dataclass
class ExtractReport:
    run_dir: Path
    num_simulations: int = 0
    num_tokens: int = 0
    warnings: InputWarnings = field(default_factory=InputWarnings)


def models_by_role(header: dict) -> dict[str, str]:
    """The generating model of each role, as the results' ``info`` records them."""
    info = header.get("info") or {}
    out = {}
    for role, key in (("assistant", "agent_info"), ("user", "user_info")):
        llm = (info.get(key) or {}).get("llm")
        if llm:
            out[role] = str(llm)
    return out


def results_input(run: RunDir, results_path: Path) -> dict[str, str]:
    """``based_on`` of tables made from ``results_path``: its commit when it is the run's own results."""
    if results_path.resolve() == run.results_json.resolve():
        return run.based_on("results")
    return {}


def _remember_first(sims: Iterable[Simulation], first: list[Simulation]) -> Iterator[Simulation]:
    for sim in sims:
        if not first:
            first.append(sim)
        yield sim


def _batches(sims: Iterable[Simulation], resolver: SidecarResolver, batch_bytes: int) -> Iterator[tuple[list[Simulation], Future]]:
    """Simulations in batches, each with the parse of its sidecars under way in the background.

    The next batch's sidecars parse (off the GIL) while the caller works on the current
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
                    size += 0 if path in previous else resolver.size_of(path)
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


def run(run_dir: str | Path | RunDir, config: ExtractConfig) -> ExtractReport:
    """Publish ``tokens.parquet``, ``turn_partials.parquet``, ``messages.parquet``, ``trajectories.parquet``
    and the manifest in ``run_dir``, as one commit, from ``config.results``."""
    results_path, sidecar_dir, progress, batch_bytes, score = (
        config.results, config.sidecar_dir, config.progress, config.batch_bytes, config.score)
    results_path, run = Path(results_path), RunDir.of(run_dir)
    if run.path.exists() and not run.path.is_dir():
        raise InputError(run.path, "is a file, not a run folder: give --out a folder (new or holding a run)")
    if sidecar_dir is not None and not Path(sidecar_dir).is_dir():
        raise InputError(sidecar_dir, "--sidecar-dir " + ("is not a directory" if Path(sidecar_dir).exists() else "does not exist"))
    layout = layout_before_simulations(results_path)  # v0 or v1: told by the first simulation, as it streams
    header = read_header(results_path, score)
    domain = Results.domain_of(header.get("info"))
    models = models_by_role(header)
    reward_from = (header.get("info") or {}).get("reward_from")
    resolver = SidecarResolver(results_path if results_path.is_file() else results_path / "results.json",
                               Path(sidecar_dir) if sidecar_dir else None)
    report = ExtractReport(run.path)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="extract", unit="sim")
    try:
        with fewer_collections(), run.commit(STEP.name) as commit, closing(resolver), \
                BaseTables(commit, results_input(run, results_path)) as tables:
            first: list[Simulation] = []
            sims = _remember_first(iter_simulations(results_path, report.warnings, score), first)
            for batch, parsed in _batches(sims, resolver, batch_bytes):
                messages = MessageColumns.of(batch)  # one pass over the messages, for the tokens and the message table
                raw, sim_pos = batch_raw_tokens(batch, domain, resolver, report.warnings, models, parsed.result(), messages)
                where = lambda row, batch=batch, sim_pos=sim_pos: f"{results_path} simulation {batch[sim_pos[row]].id}"  # noqa: E731
                tables.add_tokens(with_token_metrics(raw, where, report.warnings))
                report.num_simulations += tables.add_simulations(batch, domain, str(results_path), report.warnings,
                                                                 messages)
                if bar is not None:
                    bar.update(len(batch))
            if report.num_simulations == 0:
                raise InputError(results_path, "the results hold no simulations ('simulations' is empty: an aborted "
                                 "τ²-bench run leaves this); nothing was extracted")
            resolver.report_unplaced(report.warnings)
            report.warnings.merge(resolver.warnings)
            tables.close(str(results_path), report.warnings)
            report.num_tokens = tables.num_tokens
            commit.update_manifest(
                step=STEP.name, results=str(results_path.resolve()),
                layout=layout or simulation_layout(first[0] if first else None),
                sidecar_dir=str(Path(sidecar_dir).resolve()) if sidecar_dir else None, domain=domain, models=models,
                num_simulations=report.num_simulations, num_tokens=report.num_tokens,
                warnings=report.warnings.as_dict(), scoring=None,
                **({"reward_from": reward_from} if reward_from else {}))
    finally:
        if bar is not None:
            bar.close()
    emit_input_warnings(_news(report))
    # hand the batches' freed Arrow buffers and the scanner's blocks back to the system (mimalloc and glibc
    # keep them otherwise), so that the steps run after extract in the same process (``agentuq-nb analyze``)
    # start from a lower peak
    pa.default_memory_pool().release_unused()
    release_scanner_memory()
    return report


#: counted per message without log-probs: news when some messages have them, the normal case when none has
WITHOUT_LOGPROBS = ("assistant_messages_without_logprobs", "user_messages_without_logprobs")


def _news(report: ExtractReport) -> InputWarnings:
    """The warnings worth saying: all of them, except - for a run where no message carries log-probs, as most real
    runs - the count of messages without (the manifest keeps it; the command says once that the run has none)."""
    if report.num_tokens:
        return report.warnings
    news = InputWarnings()
    for kind, info in report.warnings.as_dict().items():
        if kind not in WITHOUT_LOGPROBS:
            news.add(kind, info["example"], info["count"])
    return news


def extract(results_path: str | Path, run_dir: str | Path | RunDir, **options: Any) -> ExtractReport:
    """:func:`run` with ``results_path`` and the other :class:`ExtractConfig` fields as keywords."""
    return run(run_dir, ExtractConfig(results=results_path, **options))
