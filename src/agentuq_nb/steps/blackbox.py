"""The black-box step: uncertainty signals a run's messages carry without any log-prob (``agentuq-nb blackbox``).

Most real agent runs have no token log-probs (API models that return none for tool calls, Claude,
reasoning models, leaderboard submissions). What they do have is the conversation. From the results a run
was extracted from, this step computes
(:func:`agentuq_nb.uq.blackbox_signals.signal_tables`)

* the **structure** signals (:mod:`agentuq_nb.uq.structure_signals`): tool errors, repeated and retried
  calls, hedging / apology / inability markers, transfers, user repetition and frustration, tool breadth,
  tool streaks, talk after the last write;
* **TRACER**'s components and its default score (:mod:`agentuq_nb.uq.tracer`), with its content-token NLL
  where the run has the generating model's own log-probs;

and publishes them in one commit: ``blackbox_turns.parquet`` (one row per message: the per-message
signals, TRACER's components and default step risk, ``scorer = "blackbox"`` so that the dynamics and the
early-warning code read it like a turn summary), ``blackbox_scores.parquet`` (one row per trajectory: the
``structure.*`` and ``tracer.*`` estimators' columns) and ``blackbox.json`` (what was computed, in how
many seconds, how many of them embedding).

Then, in a second commit, TRACER's two tuned readouts (:mod:`agentuq_nb.evaluation.tracer_tuning`), which
depend on the failure labels: ``tracer_tuned.parquet`` (``tracer_nested``, cross-fitted by task;
``tracer_optimistic``, tuned on the run itself as TRACER's code does) and ``tracer_tuning.json`` (the
threshold, seed and folds, and the setting each fold chose).

:func:`run` recomputes what is missing, stale (its inputs were replaced) or made with another
configuration (:func:`ensure_blackbox`); ``compare-estimators`` (and so ``analyze``) calls it with ``required`` off -
a run that cannot have the families is then told in the status it returns, not refused -, so a run without log-probs
gets these families without a command of its own. Embeddings are all-MiniLM-L6-v2 distilled into a static table
(``embedder="minilm-static"``, :mod:`agentuq_nb.uq.static_embedding`: ~1,700 texts in 0.25 s, the table made once per
machine), or the transformer itself (``"minilm"``: ~60 s for a 50-trajectory run's first read, cached by text in the
process and in the persistent embedding cache shared by runs and processes, :mod:`agentuq_nb.io.embedding_cache`;
``embed_cache``), or a bag-of-words hash (``"hash"``, for fast tests).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from pydantic import Field

from agentuq_nb.io.atomic import json_ready
from agentuq_nb.io.embedding_cache import DEFAULT_MAX_MB
from agentuq_nb.io.errors import InputError, MixedRunError, StaleArtifactError
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.store.artifacts import read_json_artifact, run_results
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import (
    BlackBoxEmbedder,
    Command,
    FailureThresholdField,
    FamilyHint,
    Reporter,
    SeedField,
    Step,
    StepConfig,
)
from agentuq_nb.uq.blackbox_signals import signal_tables, tool_types
from agentuq_nb.uq.embeddings import Embedder, embeddings_available, get_embedder, unit_rows
from agentuq_nb.uq.tracer import content_token_nll
from agentuq_nb.uq.transcript import transcript

STEP = Step("blackbox", "agentuq-nb blackbox RUN_DIR",
            ("blackbox_turns", "blackbox_scores", "blackbox_report", "tracer_tuned", "tracer_tuning"),
            adds=tuple(FamilyHint(family, "the run's messages", "agentuq-nb blackbox RUN_DIR --results RESULTS")
                       for family in ("structure", "tracer")))


class BlackBoxConfig(StepConfig):
    """What the black-box step computes with; the tuned readouts depend on the first three."""

    failure_threshold: FailureThresholdField
    seed: SeedField = Field(description="seed of the folds of TRACER's nested tuning")
    n_splits: int = Field(5, ge=2, description="folds (by task) of TRACER's nested tuning")
    embedder: BlackBoxEmbedder = Field(
        "minilm-static", description="sentence embeddings (minilm-static: all-MiniLM-L6-v2 distilled into a static "
        "table, whole texts, ~1,700 texts in 0.25 s; minilm: the transformer itself, closer to TRACER's embeddings, "
        "~60 s for a 50-trajectory run's first read; hash: a bag-of-words hash, for tests; none: the signals that "
        "need none, as where the [embeddings] extra is not installed)")
    embed_max_tokens: int = Field(128, ge=8, le=512, description="word pieces the minilm transformer reads of each "
                                  "text: 128, the length it was trained on (its cost grows with each piece; "
                                  "minilm-static reads whole texts)")
    embed_cache: Optional[str] = Field(None, description="file of the persistent embedding cache shared by runs and "
                                       "processes (default: $AGENTUQ_NB_EMBED_CACHE, else embeddings.sqlite in the "
                                       "user's cache folder); 'off': none")
    embed_cache_max_mb: float = Field(DEFAULT_MAX_MB, gt=0, description="size bound of the embedding cache (MiB): past "
                                      "it the least recently used embeddings go")
    results: Optional[Path] = Field(None, description="the results to read messages from (default: the run's own)")
    progress: bool = Field(False, description="show a progress bar (stderr) while texts are embedded")
    force: bool = Field(False, description="recompute even when the tables are up to date (the command's --force)")
    required: bool = Field(True, description="refuse (FileNotFoundError) a run that cannot have the families (no "
                           "trajectories table, its results not at hand); False: the status returned says why "
                           "(compare-estimators, analyze: the table then names the families missing)")

NO_EMBEDDINGS = ("TRACER and structure.user_repetition need sentence embeddings, which this install lacks: "
                 "pip install 'agentuq_nb[embeddings]' (after torch==2.13.0 on a CPU machine)")


@dataclass
class BlackBoxStatus:
    """What :func:`ensure_blackbox` did: the commits it made, and why it computed nothing if it did not."""

    computed: list[str] = field(default_factory=list)
    skipped: Optional[str] = None
    report: dict[str, Any] = field(default_factory=dict)  # the signals' (``blackbox.json``)
    tuning: dict[str, Any] = field(default_factory=dict)  # TRACER's tuned readouts' (``tracer_tuning.json``)


# --------------------------------------------------------------------------- inputs
def results_for(run: RunDir, config: BlackBoxConfig) -> tuple[Path, str]:
    """(the results holding the run's messages, their content's SHA-256): ``config.results`` (a copy of the run's
    own results, by content; other content is refused), else the ones it was extracted from."""
    path = Path(config.results) if config.results is not None else run.results_path()
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{run.path}: the results it was made from ({path}) are not there any more; "
                                "give them as results (the black-box config's) to compute the black-box signals")
    return run_results(run, path)


def message_u(run: RunDir) -> pd.DataFrame | None:
    """TRACER's U per agent and user message from the generating model's own token rows (None without them)."""
    if not run.has("tokens"):
        return None
    run.verify("tokens")
    path = run.file("tokens")
    if pq.read_metadata(path).num_rows == 0:
        return None
    filters = [("scorer", "=", "self"), ("source", "=", "generated"), ("role", "in", ["assistant", "user"])]
    tokens = pq.read_table(path, columns=TRAJECTORY_KEYS + ["message_idx", "token", "chosen_logprob"],
                           filters=filters).to_pandas()
    if tokens.empty:
        return None
    return key_dtypes(content_token_nll(key_dtypes(tokens, deep=False)), deep=False)


def check_same_trajectories(run: RunDir, found: pd.DataFrame, results: Path) -> None:
    """The results must hold the run's trajectories, no more and no fewer (they may have changed since)."""
    have = set(map(tuple, key_dtypes(run.rewards())[TRAJECTORY_KEYS].astype(object).to_numpy()))
    got = set(map(tuple, found[TRAJECTORY_KEYS].drop_duplicates().astype(object).to_numpy()))
    if have != got:
        raise InputError(results, f"holds {len(got)} trajectories, {len(got - have)} of them not in the run "
                         f"{run.path}, which has {len(have)} ({len(have - got)} missing here): the results "
                         "changed since they were extracted; extract them again")


# --------------------------------------------------------------------------- the signals
class TimedEmbedder:
    """An embedder that counts the texts it embeds and the seconds it takes (for ``blackbox.json``); with
    ``progress``, the bundled model's embedder shows a bar while it computes."""

    def __init__(self, embedder, progress: bool = False):
        self.embedder, self.seconds, self.texts, self.progress = embedder, 0.0, 0, progress
        self.computed = 0  # texts the model computed (the rest came from a cache)

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 1))
        start = time.perf_counter()
        if isinstance(self.embedder, Embedder):
            before = self.embedder.misses
            vectors = self.embedder.embed(list(texts), progress=self.progress)
            self.computed += self.embedder.misses - before
        else:
            vectors = self.embedder.embed(list(texts))
            self.computed += len(texts)
        vectors = unit_rows(np.asarray(vectors, dtype=float))
        self.seconds += time.perf_counter() - start
        self.texts += len(texts)
        return vectors


def distillation_seconds() -> float:
    """Seconds this process has spent distilling the static embedding table so far (0 when it never did)."""
    import sys

    module = sys.modules.get("agentuq_nb.uq.static_embedding")  # never imported: never distilled
    return float(sum(module.DISTILLATIONS)) if module is not None else 0.0


def effective_embedder(config: BlackBoxConfig, embedder=None) -> str:
    """The embeddings the signals will be computed with: an embedder object's class name, else ``config``'s,
    with ``minilm`` becoming ``none`` where the ``[embeddings]`` extra is not installed."""
    if embedder is not None:
        return type(embedder).__name__
    if config.embedder in ("minilm", "minilm-static") and not embeddings_available():
        return "none"
    return config.embedder


def compute_signals(run_dir: str | os.PathLike | RunDir, config: BlackBoxConfig = BlackBoxConfig(),
                    embedder=None) -> dict[str, Any]:
    """Publish ``blackbox_turns``, ``blackbox_scores`` and ``blackbox.json``; returns the report."""
    run = RunDir.of(run_dir)
    run.require_folder("blackbox")
    start = time.perf_counter()
    with run.lock("blackbox"):
        results, digest = results_for(run, config)
        manifest = run.require_manifest()
        trajectories = key_dtypes(run.rewards())
        file = ResultsFile.open(results, tell_version=False)  # its header and its simulations: one sniff
        header = file.header
        t = transcript(file.simulations(), manifest.domain or "unknown")
        check_same_trajectories(run, t, results)
        kinds = tool_types(header)
        u = message_u(run)
        name = effective_embedder(config, embedder)
        distilled = distillation_seconds()
        embed = None if name == "none" else TimedEmbedder(embedder if embedder is not None else get_embedder(
            name, config.embed_max_tokens, config.embed_cache, config.embed_cache_max_mb, config.progress),
            config.progress)
        distilled = distillation_seconds() - distilled
        turns, scores = signal_tables(t, embed, u, kinds, trajectories)
        report = {"embedder": name, "embed_max_tokens": config.embed_max_tokens, "results": str(results),
                  "results_sha256": digest,
                  "trajectories": len(scores), "messages": len(t),
                  "log_probs": u is not None, "tool_types": "results" if kinds else "name heuristic",
                  "texts_embedded": embed.texts if embed else 0,
                  "texts_computed": embed.computed if embed else 0,
                  "embed_seconds": round(embed.seconds, 3) if embed else 0.0,
                  # the static table distilled for this run (once per machine: then kept beside the embedding cache)
                  "distill_seconds": round(distilled, 3),
                  "seconds": round(time.perf_counter() - start, 3)}
        if embed is None:
            report["left_out"] = NO_EMBEDDINGS if config.embedder != "none" else "embedder 'none': no TRACER"
        based_on = run.based_on("trajectories", *(["tokens"] if u is not None else []))
        with run.commit("blackbox") as commit:
            commit.write_parquet("blackbox_turns", turns, based_on)
            commit.write_parquet("blackbox_scores", scores, based_on)
            commit.write_json("blackbox_report", json_ready(report), based_on)
    return report


# --------------------------------------------------------------------------- TRACER's tuned readouts
def compute_tuning(run_dir: str | os.PathLike | RunDir, config: BlackBoxConfig = BlackBoxConfig()) -> dict:
    """Publish ``tracer_tuned.parquet`` and ``tracer_tuning.json`` from ``blackbox_turns``."""
    from agentuq_nb.evaluation.tracer_tuning import tuning_tables

    run = RunDir.of(run_dir)
    with run.lock("blackbox"):
        turns = key_dtypes(run.read_frame("blackbox_turns"))
        tuned, record = tuning_tables(turns, run.outcomes(config.failure_threshold).frame(), config.failure_threshold,
                                      config.seed, config.n_splits)
        based_on = run.based_on("blackbox_turns", "trajectories")
        with run.commit("blackbox-tuning") as commit:
            commit.write_parquet("tracer_tuned", tuned, based_on)
            commit.write_json("tracer_tuning", json_ready(record), based_on)
    return record


# --------------------------------------------------------------------------- up to date
def is_fresh(run: RunDir, names: tuple[str, ...], record: str, expect: dict) -> bool:
    """Whether artefacts ``names`` exist, belong with the manifest, are not stale, and their ``record`` JSON
    holds the values of ``expect``."""
    if not all(run.has(n) for n in names + (record,)):
        return False
    try:
        run.verify(*names, record)
        found = read_json_artifact(run, record)
    except (StaleArtifactError, MixedRunError, ValueError):
        return False
    return all(found.get(k) == v for k, v in expect.items())


def ensure_blackbox(run_dir: str | os.PathLike | RunDir, config: BlackBoxConfig = BlackBoxConfig(),
                    embedder=None) -> BlackBoxStatus:
    """Compute what is missing, stale or made with another configuration; say why when nothing can be."""
    run = RunDir.of(run_dir)
    status = BlackBoxStatus()
    if not run.has("trajectories"):
        status.skipped = f"{run.path} has no trajectories.parquet (extracted by an older version: extract it again)"
        return status
    with run.lock("blackbox"):
        if config.results is not None:
            results_for(run, config)  # --results: a copy of the run's own results (by content), else refused
        expect = {"embedder": effective_embedder(config, embedder), "embed_max_tokens": config.embed_max_tokens}
        if run.manifest().results_sha256 is not None:  # computed from the results the run was made from
            expect["results_sha256"] = run.manifest().results_sha256
        if not is_fresh(run, ("blackbox_turns", "blackbox_scores"), "blackbox_report", expect):
            try:
                results_for(run, config)
            except FileNotFoundError as err:
                status.skipped = str(err)
                return status
            status.report = compute_signals(run, config, embedder)
            status.computed.append("signals")
        else:
            status.report = read_json_artifact(run, "blackbox_report")
        if status.report.get("embedder") == "none":
            status.skipped = status.report.get("left_out")
            return status
        expect = {"failure_threshold": config.failure_threshold, "seed": config.seed, "n_splits": config.n_splits}
        if status.computed or not is_fresh(run, ("tracer_tuned",), "tracer_tuning", expect):
            compute_tuning(run, config)
            status.computed.append("tuning")
    return status


def run(run_dir: str | os.PathLike | RunDir, config: BlackBoxConfig = BlackBoxConfig()) -> BlackBoxStatus:
    """The black-box step: the signals and TRACER's tuned readouts brought up to date (recomputed with
    ``config.force``); returns what was computed and the two reports. Where the run cannot have them (no
    trajectories table, no results at hand) a FileNotFoundError says why, or (``config.required`` False) the status
    does (``skipped``)."""
    if config.force:
        return BlackBoxStatus(["signals", "tuning"], None, compute_signals(run_dir, config),
                              compute_tuning(run_dir, config))
    status = ensure_blackbox(run_dir, config)
    if status.skipped:
        if config.required:
            raise FileNotFoundError(status.skipped)
        return status
    status.tuning = read_json_artifact(RunDir.of(run_dir), "tracer_tuning")
    return status


def show(done: BlackBoxStatus, run_dir: Path, config: BlackBoxConfig, say: Reporter) -> None:
    """What the command prints: the signals' and the tuning's reports."""
    say.say(json.dumps({"signals": done.report, "tracer_tuning": done.tuning}, indent=2))


COMMAND = Command(summary="Uncertainty from the messages alone (no log-probs): structure signals and TRACER → "
                          "blackbox_*.parquet, tracer_tuned.parquet.",
                  options=("results", "failure_threshold", "seed", "embedder", "force"),
                  help={"run_dir": "run directory (its manifest names the results)",
                        "results": "results file, if not the one the run was made from",
                        "failure_threshold": "failure = reward < threshold (TRACER's tuned readouts)",
                        "force": "recompute even when the tables are up to date"},
                  set={"progress": True}, show=show)
