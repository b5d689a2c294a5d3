"""``RunDir``: the one owner of a run folder's contract.

Every artefact of a run has its path here (:data:`ARTIFACTS`), and every step writes through it:

* **Commits.** A step stages its files in ``.staging/<commit>/`` and :meth:`RunDir.commit` publishes
  them as a set: a journal (``PUBLISH.json``) is written first - the commit point - then the files
  are renamed into place and ``manifest.json`` last. A process killed before the journal leaves the
  folder as it was (its staging is removed later); one killed after it is rolled forward by the next
  process that takes the lock or finds the set half-published. Nothing is published when the step
  raises, so a bad input never replaces a good run's files.
* **Stamps.** ``manifest.json`` (:class:`Manifest`) records every artefact a commit wrote - its commit
  id, step, size and the commits of the artefacts it was computed from (``based_on``) - and every
  Parquet file carries its commit id in its footer. Readers (:meth:`RunDir.verify`,
  :meth:`RunDir.read_frame`) refuse a file that does not belong with the manifest (files of two runs
  side by side, or a listed table replaced by one without the stamp) and a derived table computed
  from an input that has since been replaced (stale). Files the manifest does not list - older runs,
  tables put there by hand - are taken as they are; :meth:`RunDir.forget` un-lists one replaced on purpose.
  Steps that derive a table from others hold the lock from their first read to their commit, so what
  they record as ``based_on`` is what they read.
* **A lock.** :meth:`RunDir.lock` lets one process write the folder; a second one is refused with a
  message naming the holder (:mod:`agentuq_nb.io.store.run_lock`).
* **Untrusted.** A run folder may come from someone else. A journal names only plain artefact names
  (:func:`known_file`), each a regular file of its staging folder; the folders the run owns
  (:data:`OWNED_FOLDERS`: ``.staging``, ``sidecars``, ``checkpoints``, ``tokens_by_task``,
  ``notebooks``) must be real directories inside it (:meth:`RunDir.folder`: a symlink is refused);
  recovery removes only entries inside those folders, never through a link; files read from the folder
  must be regular files (a FIFO or ``/dev/zero`` planted as ``tokens.parquet`` is refused, not read).
  Anything else is refused with one line naming the path (:class:`InputError`), before any work.

Readers get typed access to what later steps need: :meth:`RunDir.manifest`,
:meth:`RunDir.results_path`, :meth:`RunDir.rewards`, :meth:`RunDir.read_frame`.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.common.naming import short_model_name
from agentuq_nb.io.atomic import atomic_write_json, fsync_path
from agentuq_nb.io.errors import (
    InputError,
    MissingArtifactError,
    MixedRunError,
    StaleArtifactError,
    load_command_layer,
    remedy,
)
from agentuq_nb.io.files import check_regular, kind_of, read_limited_json, regular_stat
from agentuq_nb.io.store.run_lock import RunBusyError, holder, is_locked, run_lock
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, Outcomes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: footer key of a Parquet file's commit id
STAMP_KEY = b"agentuq_nb.commit"
STAGING = ".staging"
JOURNAL = "PUBLISH.json"
MANIFEST = "manifest.json"
#: the ``based_on`` entry of an artefact made from a results file: the SHA-256 of its content
#: (:func:`~agentuq_nb.io.files.content_digest`), compared with the manifest's ``results_sha256``
RESULTS_CONTENT = "results content"


#: every artefact of a run folder, by name: its file (or folder) name there. The store keeps every name - recovery
#: must know all files a journal may publish, whatever step made them; the command that makes each is said by
#: its step (``agentuq_nb.steps``), which registers it here (:func:`register_producer`).
ARTIFACTS: dict[str, str] = {
    "results": "results.json",
    "run_config": "run_config.json",
    "sidecars": "sidecars",
    "checkpoints": "checkpoints",
    "manifest": MANIFEST,
    "tokens": "tokens.parquet",
    "messages": "messages.parquet",
    "trajectories": "trajectories.parquet",
    "turn_partials": "turn_partials.parquet",
    "turn_summary": "turn_summary.parquet",
    "trajectory_summary": "trajectory_summary.parquet",
    "turn_summary_csv": "turn_summary.csv",
    "trajectory_summary_csv": "trajectory_summary.csv",
    "eval_metrics": "eval_metrics.json",
    "eval_curves": "eval_curves.csv",
    "estimator_table": "estimator_table.csv",
    "combined_scores": "combined_scores.parquet",
    "calibration": "calibration.json",
    "calibration_bins": "calibration_bins.csv",
    "saup_scores": "saup_scores.parquet",
    "early_warning_scores": "early_warning_scores.parquet",
    "verbalized_confidence": "verbalized_confidence.csv",
    "verbalized_confidence_turns": "verbalized_confidence_turns.csv",
    "verbalized_confidence_parquet": "verbalized_confidence.parquet",
    "tokens_by_task": "tokens_by_task",
    "notebooks": "notebooks",
    "figures": "figures",
    "report": "report.html",
    # pages and tables other commands leave in a run folder, which the report links and shows: the explorer page as
    # the README makes it (``explore RUN_DIR --out RUN_DIR/explorer.html``) and a detector's predictions
    "explorer": "explorer.html",
    "predictions": "predictions.csv",
    "paper_auroc_table": "paper_auroc_table.csv",
    "action_samples": "action_samples.parquet",
    "action_turns": "action_turns.parquet",
    "action_sampling_report": "action_sampling.json",
    "blackbox_turns": "blackbox_turns.parquet",
    "blackbox_scores": "blackbox_scores.parquet",
    "blackbox_report": "blackbox.json",
    "tracer_tuned": "tracer_tuned.parquet",
    "tracer_tuning": "tracer_tuning.json",
    "detector_report": "detector.json",
}
#: artefact name -> the command that makes it, registered by the layer with commands as it is loaded
#: (:func:`~agentuq_nb.io.errors.load_command_layer`, which :meth:`RunDir.producer` calls first)
PRODUCERS: dict[str, str] = {}
OBSERVATION_TOKENS_PREFIX = "tokens.observations_"
#: artefacts that are folders the run owns (its steps write inside them), and the staging root
FOLDER_ARTIFACTS = frozenset({"sidecars", "checkpoints", "tokens_by_task", "notebooks"})
OWNED_FOLDERS = frozenset({STAGING} | {ARTIFACTS[name] for name in FOLDER_ARTIFACTS})
#: token tables added beside tokens.parquet (observation scoring: ``tokens.observations_<mode>.parquet``)
EXTRA_TOKEN_TABLE = re.compile(r"tokens\.[A-Za-z0-9_][A-Za-z0-9_.\-]*\.parquet")
#: an estimator family's per-trajectory table: artefact ``<family>_scores`` is ``<family>_scores.parquet``, known
#: to the store without being listed (a new family's step names it; recovery knows it by its shape)
FAMILY_SCORES = re.compile(r"[a-z][a-z0-9_]*_scores")
#: temporary files of killed writers, removed by recovery: ``.<name>.<random>.tmp`` (atomic writes) in the
#: folder, in ``sidecars/`` and anywhere under ``checkpoints/``; ``.tokens_by_task.*`` (a partitioning under way)
TEMP_FILE = re.compile(r"\..+\.tmp")
TEMP_PARTITIONS = re.compile(r"\.tokens_by_task\..+")


#: artefact name of each listed file (the folders aside)
ARTIFACT_OF_FILE = {filename: name for name, filename in ARTIFACTS.items() if name not in FOLDER_ARTIFACTS}
#: the artefact name every extra token table is registered under (``tokens.observations_<mode>.parquet``)
OBSERVATION_TOKENS = "observation_tokens"


def artifact_name(rel: str) -> str | None:
    """The artefact a plain file name of a run folder is (a listed one, a family's ``<family>_scores``, an extra
    token table as :data:`OBSERVATION_TOKENS`), or None: the one place that knows which files a run folder holds."""
    if rel in ARTIFACT_OF_FILE:
        return ARTIFACT_OF_FILE[rel]
    if rel.endswith(".parquet") and FAMILY_SCORES.fullmatch(rel.removesuffix(".parquet")):
        return rel.removesuffix(".parquet")
    if EXTRA_TOKEN_TABLE.fullmatch(rel):
        return OBSERVATION_TOKENS
    return None


def known_file(rel: str) -> bool:
    """Whether ``rel`` is the plain name of a file artefact of a run folder (what a commit may publish)."""
    if not isinstance(rel, str) or "/" in rel or "\\" in rel or "\x00" in rel or rel in (".", ".."):
        return False
    return artifact_name(rel) is not None


#: files whose presence makes a folder a run folder (a manifest, or a base table of an older run without one, or
#: a simulation's results and settings)
RUN_FOLDER_SIGNS = (MANIFEST, "tokens.parquet", "trajectories.parquet", "trajectory_summary.parquet", "run_config.json")


def is_run_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a run (one of :data:`RUN_FOLDER_SIGNS`)."""
    return any(os.path.lexists(folder / sign) for sign in RUN_FOLDER_SIGNS)


#: entries of a run folder that a command writes where its user says (the explorer's page, a detector's
#: predictions) or draws again from the tables (``figures/``): the output rule of ``io.outputs`` governs them (replaced
#: when the command made them), not the run's commits
USER_PLACED = frozenset(ARTIFACTS[name] for name in ("figures", "explorer", "predictions") if name in ARTIFACTS)


def run_folder_entry(path: Path) -> tuple[Path, str] | None:
    """(the run folder, the path inside it) when ``path`` is one of a run folder's own entries: its manifest, an
    artefact (a file, or anything under one of its folders - ``sidecars/``, ``checkpoints/``, ``notebooks/`` …), a
    hidden entry (the lock, staging, a writer's temporary file); None for anything else, e.g. a page written beside
    the tables, or one of :data:`USER_PLACED` (the explorer's page, a figure in ``figures/``: a file there is
    replaced only as any other file is)."""
    resolved = Path(os.path.abspath(path))
    try:
        resolved = resolved.parent.resolve() / resolved.name  # a symlinked folder on the way counts as its target
    except (OSError, RuntimeError):
        pass
    for folder in resolved.parents:
        if is_run_folder(folder):
            rel = resolved.relative_to(folder)
            first = rel.parts[0]
            if first not in USER_PLACED and (first == MANIFEST or first in ARTIFACTS.values()
                                             or artifact_name(first) or first.startswith(".")):
                return folder, str(rel)
            return None  # the nearest run folder decides
    return None


def register_producer(command: str, names: Iterable[str]) -> None:
    """Say that ``command`` (``RUN_DIR`` stands for the run folder) makes the artefacts ``names``: called by each
    step of ``agentuq_nb.steps`` beside its code. Several steps may make one artefact (``checkpoints``): their
    commands are joined with ``|``."""
    for name in names:
        if name not in ARTIFACTS and name != OBSERVATION_TOKENS and not FAMILY_SCORES.fullmatch(name):
            raise ValueError(f"{name!r} is not an artefact of a run folder (see rundir.ARTIFACTS)")
        known = PRODUCERS.get(name)
        if known is None or command in known.split(" | "):
            PRODUCERS[name] = known or command
        else:
            PRODUCERS[name] = f"{known} | {command}"


class ArtifactRecord(BaseModel):
    model_config = ConfigDict(extra="allow")

    commit: str
    step: str
    written_at: str
    size: int
    based_on: dict[str, str] = Field(default_factory=dict)


class Manifest(BaseModel):
    """``manifest.json``: what the run's token tables were made from, and every artefact's stamp.

    Unknown keys are kept (manifests of older versions carry ``extracted_at``, ``rescored`` …).
    """

    model_config = ConfigDict(extra="allow")

    step: Optional[str] = Field(None, description="the step that made the token tables: extract | rescore")
    results: Optional[str] = None
    results_sha256: Optional[str] = Field(None, description="the SHA-256 of the results' content (io.files."
                                          "content_digest): what the run's artefacts were made from")
    layout: Optional[str] = None
    sidecar_dir: Optional[str] = None
    domain: Optional[str] = None
    models: dict[str, str] = Field(default_factory=dict)
    num_simulations: Optional[int] = None
    num_tokens: Optional[int] = None
    warnings: dict[str, Any] = Field(default_factory=dict)
    scoring: Optional[dict[str, Any]] = Field(None, description="rescore: the scorer and its report")
    created_at: Optional[str] = None
    artifacts: dict[str, ArtifactRecord] = Field(default_factory=dict)

    def title(self) -> str | None:
        """The run as tables and figures name it: its agent's model and its domain (``gpt-4.1 · airline``), from
        the results' own metadata; None when the results name neither."""
        parts = [short_model_name(self.models["assistant"]) if self.models.get("assistant") else None, self.domain]
        return " · ".join(p for p in parts if p) or None


def upper_first(text: str) -> str:
    """``text`` with its first letter a capital (the rest as it is)."""
    return text[:1].upper() + text[1:]


def _first_problem(err: ValidationError) -> tuple[str, str]:
    first = err.errors()[0]
    return first["msg"], ".".join(str(p) for p in first["loc"]) or "(top level)"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def parquet_error(path: Path, err: Exception) -> InputError:
    """A Parquet file that cannot be read, said with its name (pyarrow's messages leave it out)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
    return InputError(path, f"is not a readable Parquet file ({first}); run the step that writes it again")


def read_parquet_file(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """A Parquet file as a DataFrame; a file that is not one is an :class:`InputError` naming it."""
    check_regular(path, "a Parquet table")
    return _parquet_frame(path, columns)


def _parquet_frame(path: Path, columns: list[str] | None = None) -> pd.DataFrame:
    """:func:`read_parquet_file` of a path already found to be a regular file."""
    try:
        return pd.read_parquet(path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise parquet_error(path, err) from None


def parquet_commit(path: Path) -> str | None:
    """The commit id in a Parquet file's footer (None for a file written elsewhere)."""
    check_regular(path, "a Parquet table")
    try:
        metadata = pq.read_metadata(path).metadata or {}
    except (pa.ArrowException, OSError) as err:
        raise parquet_error(path, err) from None
    value = metadata.get(STAMP_KEY)
    return None if value is None else value.decode()


def with_stamp(table: pa.Table, commit: str) -> pa.Table:
    return table.replace_schema_metadata({**(table.schema.metadata or {}), STAMP_KEY: commit.encode()})


class Commit:
    """The files one step writes, staged and then published together (see the module docstring)."""

    def __init__(self, run: "RunDir", step: str):
        self.run, self.step = run, step
        self.id = uuid.uuid4().hex
        run.manifest(check=False)  # a manifest that cannot be read is said now, before the step's work
        self.dir = run.folder(STAGING, make=True) / self.id
        self.dir.mkdir()
        self._based_on: dict[str, dict[str, str]] = {}
        self._manifest_fields: dict[str, Any] = {}
        self._order: list[str] = []

    # ---------------------------------------------------------------- staging
    def stage(self, name: str, based_on: dict[str, str] | None = None) -> Path:
        """The staging path to write artefact ``name`` (an :data:`ARTIFACTS` name or a file name) to."""
        rel = self.run.relative(name)
        if rel == MANIFEST:
            raise ValueError("the manifest is written by the commit itself; use update_manifest()")
        if not known_file(rel):
            raise ValueError(f"{name!r} is not a file artefact of a run folder (see rundir.ARTIFACTS)")
        if rel not in self._order:
            self._order.append(rel)
        self._based_on[rel] = dict(based_on or {})
        path = self.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    @property
    def metadata(self) -> dict[bytes, bytes]:
        """Footer metadata that stamps a Parquet file with this commit."""
        return {STAMP_KEY: self.id.encode()}

    def write_parquet(self, name: str, data: pd.DataFrame | pa.Table, based_on: dict[str, str] | None = None) -> Path:
        table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        path = self.stage(name, based_on)
        pq.write_table(with_stamp(table, self.id), path)
        return path

    def write_json(self, name: str, obj: Any, based_on: dict[str, str] | None = None) -> Path:
        path = self.stage(name, based_on)
        atomic_write_json(path, obj)
        return path

    def write_with(self, name: str, write: Callable[[Path], Any], based_on: dict[str, str] | None = None) -> Path:
        """Let ``write(path)`` produce the file (``df.to_csv`` …)."""
        path = self.stage(name, based_on)
        write(path)
        return path

    def update_manifest(self, **fields: Any) -> None:
        """Fields of :class:`Manifest` this commit sets (extract and rescore describe the token tables);
        ``created_at`` is the commit's time unless given."""
        fields.setdefault("created_at", _now())  # when the token tables were made
        Manifest.model_validate({**fields, "artifacts": {}})  # a wrong field fails here, before publishing
        self._manifest_fields.update(fields)

    # ---------------------------------------------------------------- publishing
    def publish(self) -> None:
        missing = [rel for rel in self._order if not (self.dir / rel).exists()]
        if missing:
            raise RuntimeError(f"{self.run.path}: step '{self.step}' staged {missing} but wrote nothing there")
        manifest = self.run.manifest(check=False)
        data = manifest.model_dump(mode="json")
        data.update(self._manifest_fields)
        for rel in self._order:
            record = ArtifactRecord(commit=self.id, step=self.step, written_at=_now(),
                                    size=(self.dir / rel).stat().st_size, based_on=self._based_on[rel])
            data["artifacts"][rel] = record.model_dump(mode="json")
        atomic_write_json(self.dir / MANIFEST, Manifest.model_validate(data).model_dump(mode="json", exclude_none=True))
        files = self._order + [MANIFEST]
        for rel in files:  # on disk before the journal makes them the run's (a power cut, not only a kill)
            fsync_path(self.dir / rel)
        atomic_write_json(self.dir / JOURNAL, {"commit": self.id, "step": self.step, "files": files,
                                               "pid": os.getpid(), "at": _now()})  # the commit point
        move_staged(self.run.path, self.dir, files)
        self.run.forget_cache()

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        _remove_if_empty(self.dir.parent)


def roll_forward(folder: Path, staging: Path) -> None:
    """Finish publishing a journaled commit that its writer left half-published (recovery, by the next process): the
    files its journal names, read back and checked first (:func:`journaled_files`: a planted or damaged journal moves
    nothing), moved into place (:func:`move_staged`)."""
    move_staged(folder, staging, journaled_files(staging))


def move_staged(folder: Path, staging: Path, files: list[str]) -> None:
    """Rename what is still staged of ``files`` into place, flush the renames, then drop the staging: the end of a
    commit, done by its writer with the files it staged and journaled (it does not read its own journal back), or by
    :func:`roll_forward` with those a journal left behind names."""
    for rel in files:
        source = staging / rel
        if os.path.lexists(source):
            os.replace(source, folder / rel)  # a plain name: the target is in the folder itself
    fsync_path(folder, directory=True)  # the renames themselves
    shutil.rmtree(staging, ignore_errors=True)
    _remove_if_empty(staging.parent)


def journaled_files(staging: Path) -> list[str]:
    """The files a commit's journal (``staging/PUBLISH.json``) publishes, checked: the journal is a regular
    file (not a link), names only plain artefact names (:func:`known_file`), and each of those still staged
    is a regular file there. Anything else is an :class:`InputError` that moves nothing."""
    journal = staging / JOURNAL
    fix = f"remove {staging} (it was not written by agentuq-nb, or it was damaged) and run the command again"
    if not stat.S_ISREG(os.lstat(journal).st_mode):
        raise InputError(journal, f"is {_lkind(journal)}, not a commit journal: {fix}")
    data = read_limited_json(journal, MAX_SMALL_JSON_BYTES, "commit journal")
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not files:
        raise InputError(journal, f"is not a commit journal (no 'files' list): {fix}")
    for rel in files:
        if not known_file(rel):
            raise InputError(journal, f"names {rel!r}, which is not a file of a run folder: {fix}")
        source = staging / rel
        if os.path.lexists(source) and not stat.S_ISREG(os.lstat(source).st_mode):
            raise InputError(source, f"is {_lkind(source)}, not a staged file: {fix}")
    if len(set(files)) != len(files):
        raise InputError(journal, f"names a file twice: {fix}")
    return list(files)


def _lkind(path: Path) -> str:
    """What ``path`` itself is (a symlink is said to be one)."""
    mode = os.lstat(path).st_mode
    return "a symlink" if stat.S_ISLNK(mode) else kind_of(mode)


def remove_entry(path: Path) -> None:
    """Remove one entry inside the run folder: a real directory with everything in it, anything else (a file,
    a symlink - never what it points to - a FIFO) by unlinking it."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)  # rmtree never follows a symlink inside
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _lstat_mode(path: Path) -> int:
    """``st_mode`` of ``path`` itself (not what a symlink points to); 0 when it does not exist."""
    try:
        return os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return 0


def _remove_if_empty(folder: Path) -> None:
    """Drop the staging root once no commit is staged in it."""
    try:
        folder.rmdir()
    except OSError:
        pass


class RunDir:
    """A run folder: paths, manifest, lock, commits and checked reads (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._cache: dict[tuple, Any] = {}
        self._manifest_key: tuple | None = None

    @classmethod
    def of(cls, run: "RunDir | str | os.PathLike") -> "RunDir":
        return run if isinstance(run, RunDir) else cls(run)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __fspath__(self) -> str:
        return str(self.path)

    # ---------------------------------------------------------------- paths
    @staticmethod
    def relative(name: str) -> str:
        """The file name (relative to the run folder) of artefact ``name`` (or ``name`` itself)."""
        if name in ARTIFACTS:
            return ARTIFACTS[name]
        return f"{name}.parquet" if FAMILY_SCORES.fullmatch(name) else name

    def file(self, name: str) -> Path:
        return self.path / self.relative(name)

    def has(self, name: str) -> bool:
        return self.file(name).exists()

    def producer(self, name: str) -> str | None:
        """The command that makes artefact ``name`` of this run, as its step registered it (the layer with commands
        loaded first: :func:`~agentuq_nb.io.errors.load_command_layer`; None: no step makes it)."""
        load_command_layer()
        rel = self.relative(name)
        command = PRODUCERS.get(artifact_name(rel) or rel)
        return command.replace("RUN_DIR", str(self.path)) if command else None

    def fix(self, name: str, when: str = "first") -> str:
        """How to make artefact ``name``, said after what is wrong with it: ``run '<command>' <when>`` with the
        command its step registered (:func:`register_producer`), else the artefact's own name and where its maker
        lives (the store names no command)."""
        command = self.producer(name)
        rel = self.relative(name)
        what = (f"'{command}'" if command is not None
                else f"the step of agentuq_nb.steps that makes the artefact '{artifact_name(rel) or rel}' ({rel})")
        return f"run {what} {when}" if when else f"run {what}"

    def require(self, name: str) -> Path:
        """The path of artefact ``name``; a clear :class:`~agentuq_nb.io.errors.MissingArtifactError` (a
        FileNotFoundError) naming it and how to make it (:meth:`fix`)."""
        path = self._present(name)
        if name in FOLDER_ARTIFACTS:
            return self.folder(name)
        self._stat(path, f"the run's {path.name}")  # a regular file (the one check every read of the folder makes)
        return path

    def _present(self, name: str) -> Path:
        """The path of artefact ``name`` when there is something there (not yet checked), else :meth:`require`'s
        error."""
        path = self.file(name)
        if not os.path.lexists(path):
            raise MissingArtifactError(self.path, name, path.name, self.fix(name))
        return path

    @property
    def results_json(self) -> Path:
        return self.file("results")

    @property
    def sidecars(self) -> Path:
        return self.folder("sidecars")

    def checkpoint_dir(self, step: str) -> Path:
        """``checkpoints/<step>/``: the per-trajectory checkpoints of a resumable step (checked: see :meth:`folder`)."""
        return self.folder(f"{self.relative('checkpoints')}/{step}")

    def observation_tokens(self, suffix: str) -> Path:
        return self.path / f"{OBSERVATION_TOKENS_PREFIX}{suffix}.parquet"

    def token_tables(self, required: bool = True) -> list[Path]:
        """``tokens.parquet`` (extracted or rescored rows) and every ``tokens.<name>.parquet`` added later
        (observation scoring), in a stable order; none is an error unless not ``required``."""
        main = self.file("tokens")
        files = ([main] if os.path.lexists(main) else []) + sorted(self.path.glob("tokens.*.parquet"))
        if not files and required:
            raise MissingArtifactError(self.path, "tokens", "token table (tokens.parquet)",
                                       remedy("tokens", "run the extract step (agentuq_nb.steps.extract) first"))
        return [check_regular(f, f"the run's {f.name}") for f in files]

    # ---------------------------------------------------------------- lock and commits
    def lock(self, command: str):
        """Hold the folder's write lock for a block (re-entrant in this process); see :mod:`run_lock`."""
        self.require_folder(command, new=True)
        return run_lock(self.path, command, on_acquire=self.recover)

    def require_folder(self, command: str, new: bool = False) -> None:
        """Refuse a path that is a file (and, unless ``new``, one that does not exist, or that cannot be made
        because a file is in its way) with a clear message."""
        if self.path.is_dir():
            return
        if new and not self.path.exists():
            blocking = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
            if blocking is not None:
                raise InputError(self.path, f"cannot be made: {blocking} is a file, not a folder")
            return
        if self.path.exists():
            made = remedy("run_folder_from_results", "with the extract step (agentuq_nb.steps.extract)",
                          results=self.path)
            raise InputError(self.path, f"is a file, not a run folder: '{command}' works on a run folder (if the file "
                             f"is τ²-bench results, make one {made})")
        made = remedy("new_run_folder", "with the extract step, then the aggregate step (agentuq_nb.steps.extract, "
                      "agentuq_nb.steps.aggregate)", run=self.path)
        raise InputError(self.path, f"no such run folder: '{command}' works on a run folder; make one {made}")

    @contextmanager
    def commit(self, step: str) -> Iterator[Commit]:
        """Stage a step's files and publish them as a set when the block ends without an error."""
        with self.lock(step):
            commit = Commit(self, step)
            try:
                yield commit
            except BaseException:
                commit.discard()
                raise
            try:
                commit.publish()
            except BaseException:
                if not (commit.dir / JOURNAL).exists():  # before its commit point: nothing of it is published
                    commit.discard()
                raise

    def pending(self) -> list[Path]:
        """Staging folders of commits that reached their commit point but were not fully published."""
        root = self.path / STAGING
        if not stat.S_ISDIR(_lstat_mode(root)):  # none (or a planted link, refused when the lock is taken)
            return []
        try:
            return sorted(Path(e.path) for e in os.scandir(root)
                          if e.is_dir(follow_symlinks=False) and os.path.lexists(Path(e.path) / JOURNAL))
        except FileNotFoundError:  # a publisher just removed it
            return []

    def folder(self, name: str, make: bool = False) -> Path:
        """The path of a folder the run owns (``.staging``, an artefact of :data:`FOLDER_ARTIFACTS`, or a path
        below one such as ``checkpoints/<step>``), checked: each part that exists is a real directory, not
        a symlink or a file; with ``make`` the missing parts are made."""
        rel = Path(self.relative(name))
        if rel.is_absolute() or ".." in rel.parts or not rel.parts or rel.parts[0] not in OWNED_FOLDERS:
            raise ValueError(f"{name!r} is not a folder of a run folder")
        path = self.path
        for part in rel.parts:
            path = path / part
            mode = _lstat_mode(path)
            if mode == 0:
                if not make:
                    continue
                path.mkdir(exist_ok=True)
            elif not stat.S_ISDIR(mode):
                what = f"a symlink to {os.path.realpath(path)}" if stat.S_ISLNK(mode) else kind_of(mode)
                raise InputError(path, f"is {what}, not a folder of this run: the run folder's own folders "
                                       f"({', '.join(sorted(OWNED_FOLDERS))}) must be real directories inside it; "
                                       "move it away and run the command again")
        return self.path / rel

    def recover(self) -> None:
        """Roll journaled commits forward; drop unjournaled staging and temp files of killed writers.

        Called with the lock held (when it is taken). Only entries inside the run's own folders are removed,
        never through a symlink; a folder that is a link, or a journal that is not one of ours, is refused."""
        for name in OWNED_FOLDERS:
            self.folder(name)  # a symlinked or non-folder one is refused before anything is touched
        root = self.path / STAGING
        if os.path.isdir(root):
            for staging in sorted(Path(e.path) for e in os.scandir(root)):
                if stat.S_ISDIR(_lstat_mode(staging)) and os.path.lexists(staging / JOURNAL):
                    roll_forward(self.path, staging)
                else:  # a killed writer's staging (or something that is no staging at all): inside the folder
                    remove_entry(staging)
            _remove_if_empty(root)
        for entry in os.scandir(self.path):
            if TEMP_FILE.fullmatch(entry.name) or TEMP_PARTITIONS.fullmatch(entry.name):
                remove_entry(Path(entry.path))
        for name in ("sidecars", "checkpoints"):
            top = self.file(name)
            if not os.path.isdir(top):
                continue
            for parent, dirs, files in os.walk(top):  # os.walk does not descend into symlinked folders
                if name == "sidecars":
                    dirs.clear()
                for leftover in files + [d for d in dirs if os.path.islink(os.path.join(parent, d))]:
                    if TEMP_FILE.fullmatch(leftover):
                        remove_entry(Path(parent) / leftover)
        self.forget_cache()

    def forget_cache(self) -> None:
        self._cache.clear()

    # ---------------------------------------------------------------- manifest and checks
    def manifest(self, check: bool = True) -> Manifest:
        """``manifest.json`` (an empty one for a folder without it); with ``check``, a commit half-published is
        settled first (:meth:`_settle`): the manifest read is then the one its commit wrote."""
        if check and self.pending():
            self._settle()
        path = self.path / MANIFEST
        if not os.path.lexists(path):
            self._manifest_key = None
            return Manifest()
        key = self._manifest_key = ("manifest", *self._stat(path, "manifest"))
        if key not in self._cache:
            hint = ("move it away to take the folder's files as they are (unchecked), or write to a new run "
                    "folder")
            try:
                self._cache[key] = Manifest.model_validate(read_limited_json(path, MAX_SMALL_JSON_BYTES, "manifest"))
            except ValidationError as err:
                what, where = _first_problem(err)
                raise InputError(path, f"is not a run manifest ({what} at '{where}'); {hint}") from None
            except InputError as err:
                raise InputError(path, f"{err.what}; {hint}") from None
        return self._cache[key]

    def require_manifest(self) -> Manifest:
        if not (self.path / MANIFEST).exists():
            raise MissingArtifactError(self.path, "manifest", MANIFEST,
                                       remedy("manifest", self.fix("manifest"), run=self.path))
        return self.manifest()

    def commit_of(self, name: str) -> str | None:
        record = self.manifest().artifacts.get(self.relative(name))
        return None if record is None else record.commit

    def based_on(self, *names: str) -> dict[str, str]:
        """``{file: commit}`` of the given artefacts that a commit recorded (for a derived table's stamp)."""
        out = {}
        for name in names:
            rel = self.relative(str(name)) if not isinstance(name, Path) else name.name
            record = self.manifest().artifacts.get(rel)
            if record is not None:
                out[rel] = record.commit
        return out

    def verify(self, *names: str | Path, fresh: bool = True) -> None:
        """Refuse artefacts that do not belong with the manifest, or (``fresh``) that are stale.

        A Parquet file belongs when its footer carries the commit the manifest records for it; another
        file when its size is the recorded one; a file the manifest does not list is taken as it is.
        Stale: an artefact its ``based_on`` names has been replaced since. A file found to belong is
        not checked again while neither it nor the manifest changes (estimators read the same few
        tables dozens of times).
        """
        manifest = self.manifest()
        manifest_key = self._manifest_key
        seen: set[str] = set()
        todo = [n.name if isinstance(n, Path) else self.relative(n) for n in names]
        while todo:
            rel = todo.pop()
            if rel in seen:
                continue
            seen.add(rel)
            record = manifest.artifacts.get(rel)
            if record is None:
                continue
            path = self.path / rel
            checked = ("verified", rel, fresh, manifest_key,
                       *(self._stat(path, f"the run's {rel}") if path.exists() else ()))
            if checked in self._cache:
                continue
            self._check_belongs(rel, record)
            if not fresh:
                continue
            for dependency, commit in record.based_on.items():
                if dependency == RESULTS_CONTENT:
                    if manifest.results_sha256 and commit != manifest.results_sha256:
                        raise StaleArtifactError(
                            f"{self.path / rel} was made from other results than the run's (their content differs: "
                            f"sha256 {commit[:12]}…, the run's {manifest.results_sha256[:12]}… from {manifest.results}); "
                            f"{self.fix(rel, 'again')}")
                    continue
                current = manifest.artifacts.get(dependency)
                if current is not None and current.commit != commit:
                    raise StaleArtifactError(
                        f"{self.path / rel} was computed from an earlier {dependency} (replaced since by "
                        f"'{current.step}' at {current.written_at}); {self.fix(rel, 'again')}")
                todo.append(dependency)
            self._cache[checked] = True

    def _check_belongs(self, rel: str, record: ArtifactRecord, retried: bool = False) -> None:
        path = self.path / rel
        problem = self._mismatch(rel, record)
        if problem is None:
            return
        if not retried:  # a publication may have finished (or be under way) since the manifest was read
            if self.pending():
                self._settle()
            self.forget_cache()
            current = self.manifest(check=False).artifacts.get(rel)
            if current is None:
                return
            return self._check_belongs(rel, current, retried=True)
        if problem == "missing":
            raise MixedRunError(f"{path}: the manifest lists it (written by '{record.step}' at "
                                f"{record.written_at}) but it is missing; {self.fix(rel, 'again')}")
        raise MixedRunError(f"{path} does not belong with the rest of the run folder ({problem}): a write was "
                            f"interrupted or the file was replaced. {upper_first(self.fix(rel, 'again'))}; if you "
                            f"replaced it on purpose, RunDir({str(self.path)!r}).forget({rel!r}) takes it as it is.")

    def _mismatch(self, rel: str, record: ArtifactRecord) -> str | None:
        """What makes the file at ``rel`` not the one ``record`` describes (None: it is)."""
        path = self.path / rel
        if not path.exists():
            return "missing"
        size = self._stat(path, f"the run's {rel}")[0]
        if rel.endswith(".parquet"):
            found = parquet_commit(path)
            if found == record.commit:
                return None
            if found is None:
                return f"it carries no commit stamp, the manifest records {record.commit[:12]} by '{record.step}'"
            return f"it carries commit {found[:12]}, the manifest records {record.commit[:12]}"
        return None if size == record.size else f"it has {size} bytes, the manifest records {record.size}"

    def forget(self, name: str) -> None:
        """Drop artefact ``name``'s record from the manifest: the file there is then taken as it is (a table
        you replaced on purpose), unchecked."""
        rel = self.relative(name)
        with self.lock("forget"):
            manifest = self.manifest(check=False).model_dump(mode="json", exclude_none=True)
            if manifest.get("artifacts", {}).pop(rel, None) is not None:
                atomic_write_json(self.path / MANIFEST, manifest)
            self.forget_cache()

    def _settle(self, wait: float = 10.0) -> None:
        """A commit is half-published: wait for its writer to finish it (renames take milliseconds), or
        finish it when its writer is gone; a publication that does not end is reported as busy."""
        deadline = time.monotonic() + wait
        while self.pending():
            if not is_locked(self.path):  # (a folder with staged commits: no folder check to make first)
                with run_lock(self.path, "recover", on_acquire=self.recover):
                    pass  # taking the lock rolls journaled commits forward
                return
            if time.monotonic() >= deadline:
                info = holder(self.path)
                raise RunBusyError(f"{self.path}: process {info.get('pid')} ('{info.get('command')}') is publishing "
                                   "new files in this run folder; read it again when it has finished")
            time.sleep(0.02)
        self.forget_cache()

    # ---------------------------------------------------------------- reading
    @staticmethod
    def _stat(path: Path, what: str) -> tuple[int, int]:
        """The size and time of a regular file (what a read is keyed by); anything else refused, naming ``what``."""
        st = regular_stat(path, what)
        return st.st_size, st.st_mtime_ns

    def read_frame(self, name: str, columns: list[str] | None = None, fresh: bool = True) -> pd.DataFrame:
        """A Parquet artefact as a DataFrame, checked (:meth:`verify`) and cached while unchanged.

        The cached frame is shared: copy it before changing it in place."""
        path = self._present(name)
        what = f"the run's {path.name}"
        for _ in range(3):  # a publication between the check and the read: check again
            self.verify(name, fresh=fresh)
            key = ("frame", path.name, tuple(columns or ()), *self._stat(path, what))
            if key not in self._cache:
                self._cache[key] = _parquet_frame(path, columns)
            if key == ("frame", path.name, tuple(columns or ()), *self._stat(path, what)):
                return self._cache[key]
            self.forget_cache()
        raise RunBusyError(f"{path} keeps being replaced while it is read; read it again when the writer is done")

    def results_path(self) -> Path:
        """The τ²-bench results this run was extracted (or rescored) from, else its own ``results.json``."""
        manifest = self.manifest()
        if manifest.results:
            return Path(manifest.results)
        if self.results_json.exists():
            return self.results_json
        raise FileNotFoundError(f"{self.path}: no manifest.json or results.json; results: name the results file")

    def rewards(self) -> pd.DataFrame:
        """One row per trajectory: the keys and ``reward`` (from ``trajectories.parquet``, else the summary)."""
        name = "trajectories" if self.has("trajectories") else "trajectory_summary"
        return self._rewards_of(name, self.read_frame(name))

    def _rewards_of(self, name: str, table: pd.DataFrame) -> pd.DataFrame:
        src = table[TRAJECTORY_KEYS + ["reward"]]
        if name == "trajectory_summary":  # one row per role: the same reward repeated
            src = src.drop_duplicates()
        repeated = src.duplicated(TRAJECTORY_KEYS, keep=False)
        if repeated.any():  # two trajectories under one key: both would be counted (or their rewards mixed)
            by_key = src[repeated].groupby(TRAJECTORY_KEYS, dropna=False, sort=False)["reward"].agg(list)
            key = tuple(v.item() if isinstance(v, np.generic) else v for v in by_key.index[0])
            raise InputError(self.file(name), f"(domain, task_id, trial, seed) = {key} repeats (rewards "
                             f"{by_key.iloc[0]}; {len(by_key)} repeated key(s) in all): remove the repeats from the "
                             "results and extract them again")
        return key_dtypes(src.reset_index(drop=True))

    def outcomes(self, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> Outcomes:
        """The run's trajectories labelled once (:meth:`rewards` with ``failed = reward < failure_threshold``): what a
        command hands to every part of it that tells failures apart, instead of each labelling the rewards again. Kept
        with the run folder while its table is unchanged: the steps of one command that share this ``RunDir`` (those of
        ``analyze``) share these outcomes too. Shared: do not change their arrays in place."""
        name = "trajectories" if self.has("trajectories") else "trajectory_summary"
        table = self.read_frame(name)  # the cached table while the file is unchanged: so are its outcomes
        made = self._cache.get(key := ("outcomes", name, repr(failure_threshold)))  # (Outcomes.of checks it)
        if made is None or made[0] is not table:
            rewards = self._rewards_of(name, table)
            made = self._cache[key] = (table, Outcomes.of(rewards["reward"].to_numpy(dtype=float), failure_threshold,
                                                          rewards[TRAJECTORY_KEYS]))
        return made[1]
