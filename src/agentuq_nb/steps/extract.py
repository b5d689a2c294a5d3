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
from agentuq_nb.io.files import content_digest
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.ingest.sidecars import release_scanner_memory
from agentuq_nb.io.ingest.token_sources import SidecarResolver, batch_raw_tokens
from agentuq_nb.io.input_warnings import emit_input_warnings
from agentuq_nb.io.outputs import check_run_destination
from agentuq_nb.io.store.artifacts import results_input
from agentuq_nb.io.store.detector_dir import own_card
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Simulation
from agentuq_nb.records.run_tables import MessageColumns
from agentuq_nb.steps.base import RESULTS_HELP, Command, Reporter, Step, StepConfig
from agentuq_nb.uq.base_tables import BaseTables
from agentuq_nb.uq.token_metrics import with_token_metrics

BATCH_BYTES = 32 << 20  # sidecar JSON per batch: few batches (each costs a query), small enough that two in
# memory stay well under AgentUQ's own peak (with base_tables.TOKEN_ROW_GROUP_ROWS; see there)
BATCH_SIMULATIONS = 512  # and at most this many simulations (log-probs inline in the results have no sidecar bytes)

STEP = Step("extract", "agentuq-nb extract RESULTS --out RUN_DIR",
            ("manifest", "tokens", "messages", "trajectories", "turn_partials"))


class ExtractConfig(StepConfig):
    """What is extracted: the results, where their sidecars are, which score is the reward."""

    results: Path = Field(description=RESULTS_HELP)
    sidecar_dir: Optional[Path] = Field(None, description="where agentuq sidecar JSONL files are, if not beside the "
                                        "results")
    score: Optional[str] = Field(None, description="Inspect AI logs: the scorer whose value is the reward, NAME or "
                                 "NAME:KEY for a dict-valued score (default: the eval's first scorer; C/P/I/N → "
                                 "1/0.5/0/0, numbers as they are)")
    progress: bool = Field(False, description="show a progress bar")
    batch_bytes: int = Field(BATCH_BYTES, ge=1, description="sidecar JSON per batch (memory is bounded by two)")
    force: bool = Field(False, description="replace a run folder made from other results (by content): its tables "
                        "are replaced whole and what was made from them is found stale")


@dataclass
class ExtractReport:
    run_dir: Path
    num_simulations: int = 0
    num_tokens: int = 0
    warnings: InputWarnings = field(default_factory=InputWarnings)


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
    folder = RunDir.of(run_dir)
    if folder.path.exists() and not folder.path.is_dir():
        raise InputError(folder.path, "is a file, not a run folder: give --out a folder (new or holding a run)")
    # never inside the results; a run of other results only with --force (replaced whole, its artefacts then found
    # stale: RunDir's contract) - the one output rule of analyze and predict
    check_run_destination(folder.path, config.results, command=STEP.name, force=config.force)
    if folder.path.is_dir() and own_card(folder.path) is not None:  # (extract is how analyze, predict, judge write)
        raise InputError(folder.path, "is a detector folder: a run is extracted into a folder of its own - its tables "
                                      "would be mixed with the detector's files; name another folder")
    if config.sidecar_dir is not None and not Path(config.sidecar_dir).is_dir():
        raise InputError(config.sidecar_dir, "sidecar_dir " + ("is not a directory" if Path(config.sidecar_dir).exists() else "does not exist"))
    file = ResultsFile.open(config.results, config.score)  # what the results are, told once; their header read once
    domain, models = file.domain, file.models
    reward_from = (file.header.get("info") or {}).get("reward_from")
    resolver = SidecarResolver(config.results if config.results.is_file() else config.results / "results.json",
                               Path(config.sidecar_dir) if config.sidecar_dir else None)
    digest = content_digest(config.results)  # what the run's artefacts are made from (their stamp)
    report = ExtractReport(folder.path)
    bar = None
    if config.progress:
        from tqdm.auto import tqdm

        bar = tqdm(desc="extract", unit="sim")
    try:
        with fewer_collections(), folder.commit(STEP.name) as commit, closing(resolver), \
                BaseTables(commit, results_input(folder, config.results, digest)) as tables:
            sims = file.checked_simulations(report.warnings)
            for batch, parsed in _batches(sims, resolver, config.batch_bytes):
                messages = MessageColumns.of(batch)  # one pass over the messages, for the tokens and the message table
                raw, sim_pos = batch_raw_tokens(batch, domain, resolver, report.warnings, models, parsed.result(), messages)
                where = lambda row, batch=batch, sim_pos=sim_pos: f"{config.results} simulation {batch[sim_pos[row]].id}"  # noqa: E731
                tables.add_tokens(with_token_metrics(raw, where, report.warnings))
                report.num_simulations += tables.add_simulations(batch, domain, str(config.results), report.warnings,
                                                                 messages)
                if bar is not None:
                    bar.update(len(batch))
            if report.num_simulations == 0:
                raise InputError(config.results, "the results hold no simulations ('simulations' is empty: an aborted "
                                 "τ²-bench run leaves this); nothing was extracted")
            resolver.report_unplaced(report.warnings)
            report.warnings.merge(resolver.warnings)
            tables.close(str(config.results), report.warnings)
            report.num_tokens = tables.num_tokens
            commit.update_manifest(
                step=STEP.name, results=str(config.results.resolve()), results_sha256=digest,
                layout=file.layout,
                sidecar_dir=str(Path(config.sidecar_dir).resolve()) if config.sidecar_dir else None, domain=domain, models=models,
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
            news.add(kind, info["example"], info["count"], info.get("of"))
    return news


def show(report: ExtractReport, run_dir: Path, config: ExtractConfig, say: Reporter) -> None:
    """What the command prints: the simulations and token rows extracted, where; what to run without log-probs."""
    say.say(f"{report.num_simulations} simulations, {report.num_tokens} token rows → {run_dir / 'tokens.parquet'}")
    if report.num_tokens == 0:
        say.say(f"note: no message carried log-probs, so there is nothing to aggregate; 'agentuq-nb rescore "
                f"{config.results} --out RUN_DIR' scores the messages with a model instead", warn=True)


COMMAND = Command(summary="Token rows from results + sidecars → RUN_DIR/tokens.parquet.", arguments=("results",),
                  out=True, out_help="run directory to write tokens.parquet and the manifest to",
                  options=("sidecar_dir", "score", "force"), set={"progress": True}, show=show)


def extract(results_path: str | Path, run_dir: str | Path | RunDir, **options: Any) -> ExtractReport:
    """:func:`run` with ``results_path`` and the other :class:`ExtractConfig` fields as keywords."""
    return run(run_dir, ExtractConfig(results=results_path, **options))
