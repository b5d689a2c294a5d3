"""What the learned detector's commands read: labelled or unlabelled runs given as results (every layout the readers
take) or as run folders, and their features, extracted batch by batch on the job executor.

* :func:`resolve_sources` - each input once, into a :class:`Source` the layers below take: a run folder opened once
  (its manifest, the results it names, the rewards its ``trajectories.parquet`` holds - so an Inspect log's
  ``--score`` choice stands), a results file or directory opened once
  (:class:`~agentuq_nb.io.ingest.results.ResultsFile`: layout and header); its domain, its tool types, its tasks'
  content keys, its content hash (:meth:`~agentuq_nb.io.ingest.results.ResultsFile.content_sha256`).
* :func:`corpus_features` - the features (:mod:`agentuq_nb.uq.detector_features`) of every trajectory of the
  sources, in order, with ``run`` (the source's short name) and ``task_key`` (the task's identity: a hash of its
  instructions, :mod:`agentuq_nb.records.task_identity`; a run without task content is matched to the other
  sources' tasks of the same domain and id) on each row: simulations are streamed in batches of
  ``batch_size``; each batch is one job of the job executor (:class:`~agentuq_nb.distributed.JobRunner`: in this
  process, or on Dask with ``scheduler``, where each worker loads the embedder once), so memory holds one batch of
  simulations and the features, never a whole file of simulations. The ``monitors`` group is read from each run
  folder's monitor tables (:func:`monitor_table_of`), not from the messages. Two judge summaries of one run are
  refused here, by the simulation ids their rows share (:func:`refuse_judged_twice`).
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.distributed import JobRunner
from agentuq_nb.estimators.monitor import monitor_families
from agentuq_nb.io.errors import InputError, remedy
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.store.artifacts import read_monitor_rows
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.task_identity import header_task_contents, resolve_id_keys
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.blackbox_signals import tool_types
from agentuq_nb.uq.detector_features import (
    MONITOR_GROUP,
    FeatureJob,
    TrajectoryFeatures,
    extract_job,
    with_monitor_columns,
)

#: simulations per feature-extraction job
BATCH_SIZE = 200


@dataclass
class Source:
    """One input: its short ``name``, the path given, its results ``file`` (opened once: its layout and header),
    the run folder (if one was given)."""

    name: str
    given: Path
    file: ResultsFile
    run: RunDir | None
    domain: str
    sha256: str
    tool_kinds: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    #: task id -> content key of the results header's tasks (:mod:`agentuq_nb.records.task_identity`)
    task_contents: dict[str, str] = field(default_factory=dict)
    #: a run folder's rewards (its keys and ``reward``, :meth:`~agentuq_nb.io.store.rundir.RunDir.rewards`), read when
    #: the folder was opened; None for results given as they are
    rewards: pd.DataFrame | None = None

    @property
    def results(self) -> Path:
        """The results read (a run folder's names them)."""
        return self.file.path

    @property
    def layout(self) -> str:
        return self.file.layout

    def describe(self) -> dict:
        return {"name": self.name, "given": str(self.given), "results": str(self.results), "layout": self.layout,
                "domain": self.domain, "models": self.models, "sha256": self.sha256}


def resolve_source(path: str | os.PathLike, name: str) -> Source:
    """The :class:`Source` of an input path (see the module docstring): a run folder is opened once (its manifest,
    the results it names, its rewards), a results input once (:class:`~agentuq_nb.io.ingest.results.ResultsFile`)."""
    path = Path(path)
    run = RunDir(path)
    if path.is_dir() and run.has("manifest"):
        manifest = run.require_manifest()
        results = run.results_path()
        if not results.exists():
            raise InputError(path, f"names the results {results}, which are not there any more: give the results "
                                   "file instead")
        rewards = run.rewards()  # an Inspect log's rewards: the run folder's, whatever score it chose
        file = ResultsFile.open(results)
        domain, models = manifest.domain or "unknown", dict(manifest.models)
    else:
        run, rewards = None, None
        file = ResultsFile.open(path)  # what the file is, told once, and its header, read once
        domain, models = file.domain, file.models
    return Source(name, path, file, run, domain, file.content_sha256(), tool_types(file.header), models,
                  header_task_contents(file.header), rewards)


def resolve_sources(paths: Sequence[str | os.PathLike]) -> list[Source]:
    """Every input once (the same results twice, by path or by content, are refused: they would count twice; two judge
    summaries of one run are refused by :func:`corpus_features`, which reads their simulation ids), in the order of
    their paths (sorted: what is learned and reported does not depend on the order they were given in)."""
    # the pooled statistics load scipy and statsmodels: only when run folders are named
    from agentuq_nb.evaluation.pooled_auroc import run_names

    if not paths:
        raise ValueError("give at least one labelled run (results file or run folder)")
    paths = sorted(paths, key=lambda p: (str(Path(p).absolute()), str(p)))
    names = run_names([Path(p).with_suffix("") if Path(p).is_file() else Path(p) for p in paths])
    sources = [resolve_source(p, n) for p, n in zip(paths, names)]
    seen: dict[str, Source] = {}
    for s in sources:
        if s.sha256 in seen:
            raise InputError(s.given, f"holds the same results as {seen[s.sha256].given}: each run counts once")
        seen[s.sha256] = s
    return sources


def refuse_judged_twice(sources: Sequence[Source], index: pd.DataFrame) -> None:
    """Refuse two judge summaries of one run (one per prompt: the same trajectories under another content hash), told
    by the simulation ids their features' rows (``index``) share: the ids read with the simulations, not streamed
    from the files again."""
    judged: list[tuple[Source, frozenset]] = []
    for s in sources:
        if s.layout == judge_summary.LAYOUT:
            ids = frozenset(index.loc[(index["run"] == s.name).to_numpy(), "simulation_id"].astype(str))
            shared = next(((o, len(ids & o_ids)) for o, o_ids in judged if ids & o_ids), None)
            if shared:
                raise InputError(s.given, judge_summary.same_run_message(shared[1], str(shared[0].given)))
            judged.append((s, ids))


def batches(iterable, size: int) -> Iterator[list]:
    it = iter(iterable)
    while chunk := list(islice(it, size)):
        yield chunk


def corpus_features(sources: Sequence[Source], groups: Sequence[str], embedder: str = "minilm",
                    embed_max_tokens: int | None = 128, turns: int | None = None, fraction: float | None = None,
                    scheduler=None, batch_size: int = BATCH_SIZE, progress: bool = False,
                    label: str = "features") -> TrajectoryFeatures:
    """The features of every trajectory of ``sources`` (see the module docstring), each row's ``run`` its source's name,
    its ``reward`` the run folder's where one was given; ``turns`` / ``fraction``: of each trajectory's prefix."""
    groups = tuple(groups)

    def jobs():
        for i, source in enumerate(sources):
            for k, sims in enumerate(batches(source.file.simulations(), batch_size)):
                yield (i, k), FeatureJob(sims, source.domain, groups, embedder, embed_max_tokens, source.tool_kinds,
                                         turns, fraction, source.task_contents)

    parts: dict[tuple[int, int], TrajectoryFeatures] = {}
    runner = JobRunner(label="detector-features", desc=label, unit="batch", noun="batches", scheduler=scheduler,
                       progress=progress)
    runner.run(extract_job, jobs(), lambda key, value: parts.__setitem__(key, value))
    ordered = []
    for (i, _), part in sorted(parts.items()):
        part.index["run"] = sources[i].name
        ordered.append(part)
    if not ordered:
        raise InputError(sources[0].given, "holds no simulation")
    features = TrajectoryFeatures.concat(ordered)
    refuse_judged_twice(sources, features.index)
    for source in sources:
        if source.rewards is not None:
            features.index = with_run_rewards(features.index, source)
    index = features.index
    index["task_key"] = resolve_id_keys(index["domain"].astype(str), index["task_id"].astype(str), index["task_key"])
    if MONITOR_GROUP in groups:
        monitors = monitor_columns(sources)
        features = with_monitor_columns(features, monitors)
    return features


def trajectory_signatures(sources: Sequence[Source], features: TrajectoryFeatures) -> np.ndarray | None:
    """The near-copy signature (:mod:`agentuq_nb.uq.near_copies`) of every trajectory of ``sources``, in the rows'
    order of ``features`` (their :func:`corpus_features`); the simulations streamed again, one at a time (a
    signature is 256 bytes). None when the results no longer line up with the features' rows."""
    from agentuq_nb.uq.near_copies import signatures

    ids: list[str] = []

    def messages(source: Source):
        for sim in source.file.simulations():
            ids.append(str(sim.id))
            yield sim.messages

    parts = [signatures(messages(s)) for s in sources]
    if ids != [str(i) for i in features.index["simulation_id"]]:
        return None
    return np.vstack(parts)


def monitor_table_of(source: Source) -> pd.DataFrame:
    """The trajectory keys and one column per monitor of a run folder (its risk; every monitor family's table,
    :func:`agentuq_nb.io.store.artifacts.read_monitor_rows`); an InputError for an input that is no run folder."""
    if source.run is None:
        raise InputError(source.given, f"the '{MONITOR_GROUP}' feature group reads the monitors imported into a run "
                                       f"folder ({remedy('monitor_scores', 'a monitor table')}): give the run folder, "
                                       "not its results")
    parts = []
    for family in monitor_families():
        rows = read_monitor_rows(source.run, family)
        if len(rows):
            parts.append(rows.assign(estimator=family + "." + rows["monitor"].astype(str)))
    if not parts:
        return pd.DataFrame(columns=TRAJECTORY_KEYS)
    rows = pd.concat(parts, ignore_index=True)
    wide = rows.pivot_table(index=TRAJECTORY_KEYS, columns="estimator", values="risk", dropna=False, observed=True)
    return key_dtypes(wide.reset_index().rename_axis(columns=None))


def monitor_columns(sources: Sequence[Source]) -> pd.DataFrame:
    """Every source's monitor columns, ``run`` on each row; refused (naming the run) unless every source holds the
    same monitors: a monitor some runs lack would be a column of missing values in them."""
    tables = [monitor_table_of(s).assign(run=s.name) for s in sources]
    held = [sorted(c for c in t.columns if c not in (*TRAJECTORY_KEYS, "run")) for t in tables]
    for source, names in zip(sources, held):
        if not names:
            raise InputError(source.given, f"the '{MONITOR_GROUP}' feature group needs monitors in every run: this "
                                           f"one holds none ({remedy('monitor_scores', 'a monitor table')})")
        if names != held[0]:
            raise InputError(source.given, f"holds the monitors {', '.join(names)} where {sources[0].given} holds "
                                           f"{', '.join(held[0])}: import the same monitors into every run")
    return pd.concat(tables, ignore_index=True)


def with_run_rewards(index, source: Source):
    """``index`` with the rewards of ``source``'s run folder on its rows (the folder's, not the results', rewards)."""
    rows = (index["run"] == source.name).to_numpy()
    mine = key_dtypes(index.loc[rows, TRAJECTORY_KEYS]).merge(source.rewards, on=TRAJECTORY_KEYS, how="left")
    index = index.copy()
    index.loc[rows, "reward"] = mine["reward"].to_numpy(dtype=float)
    return index
