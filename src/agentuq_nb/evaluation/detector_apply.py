"""A trained failure detector read back from its folder and applied to trajectories' features.

:func:`load_detector` reads the folder through :func:`agentuq_nb.io.store.detector_dir.read_detector_dir` (checked,
no pickle) and rebuilds its models (:meth:`~agentuq_nb.evaluation.detector_selection.SelectedDetector.from_arrays`):
the final model, the leave-one-run-out models and their Platt maps. :meth:`Detector.predict` scores rows:

* a trajectory the detector was trained on (its fingerprint, :func:`~agentuq_nb.uq.detector_features.fingerprint`,
  is among the training trajectories') is scored by the model that left its run out, with that model's map (fitted
  on the other runs): ``model`` = ``leave-one-run-out:<run>``, ``in_training`` True. Its probability is then what the
  detector says of a run it has not seen, not an in-sample number;
* any other trajectory by the final model, with the map fitted on all training runs' leave-one-run-out log-odds:
  ``model`` = ``final``. Either way the probability was calibrated on runs other than the one predicted.

**The run's own failure rate.** Each map was fitted where the failure rate was its ``source_rate`` (the training
runs'); the predicted run has its own. :meth:`Detector.adapt_to_run` estimates it from the run's probabilities by
label-shift EM with a bootstrap interval (:func:`~agentuq_nb.evaluation.label_shift.adapt`; MAP-EM with the prior
strength the training runs chose, ``prior_strength`` of the map: infinite = the training rate, with the spread of the
training runs' own rates as its interval) and moves every probability by one log-odds shift so that their mean is
that rate (an adjusted intercept, the within-run slope kept: the models are fitted within runs and their run
intercepts dropped, so a new run's mean log-odds carries no level of its own). **Seen tasks**: :meth:`Detector.tasks_seen` tells, per trajectory, whether
its task - its domain and the hash of its instructions (:mod:`agentuq_nb.records.task_identity`) - was among the
training tasks, and that task's failure rate there (the task prior); a final model that chose the task prior scores
a trajectory of a task it never saw by its fallback (:attr:`~.detector_selection.SelectedDetector.fallback`).

**Reasons.** Each model's own, in percentage points of the *printed* probability that sum with the base probability
to it (:func:`~agentuq_nb.evaluation.detector_explain.explain`): :meth:`Detector.predict` given the run's estimated
failure rate's log-odds shift (``logit_shift``) hands explain the map from log-odds to the adapted probability (the
Platt map, then the label-shift move of the intercept), so the points sum to the probability ``predict`` writes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.detector_explain import explain
from agentuq_nb.evaluation.detector_model import FittedDetector, PlattMap, StateError, first_error, platt_probability
from agentuq_nb.evaluation.detector_selection import SelectedDetector
from agentuq_nb.evaluation.label_shift import RateEstimate, adapt, shift_by
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.detector_dir import ARRAYS, CARD, MODEL, DetectorFolder, read_detector_dir
from agentuq_nb.records.task_identity import TASK_KEY, resolve_id_keys
from agentuq_nb.uq.detector_features import (
    BLACKBOX_COLUMNS,
    EMBED_MAX_TOKENS_RANGE,
    EMBEDDERS,
    EMBEDDING_BLOCKS,
    FEATURE_VERSION,
    LENGTH_COLUMNS,
    MONITOR_GROUP,
    MONITOR_PREFIX,
    TrajectoryFeatures,
    check_groups,
    embedder_dim,
)

FINAL = "final"
LORO_PREFIX = "leave-one-run-out:"


@dataclass
class Detector:
    """A detector folder read and rebuilt (see the module docstring)."""

    folder: DetectorFolder
    final: SelectedDetector
    final_map: dict[str, Any] | None
    loro: dict[str, tuple[SelectedDetector, dict[str, Any] | None]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    fingerprints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fingerprint_runs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    #: the training tasks (``domain``, ``task_key``, ``task_id``, ``n``, ``failures``); empty for a folder without them
    tasks: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: the training trajectories' near-copy signatures (:mod:`agentuq_nb.uq.near_copies`), in the fingerprints'
    #: order; none for a folder written before them
    near_copy_signatures: np.ndarray | None = None

    @property
    def card(self) -> dict[str, Any]:
        return self.folder.card

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self.card["feature_groups"])

    @property
    def embedder(self) -> str:
        return str(self.card["embedder"]["name"])

    @property
    def embed_max_tokens(self) -> int:
        return int(self.card["embedder"]["max_tokens"])

    def training_run_of(self, fingerprints: np.ndarray) -> list[str | None]:
        """The training run of each fingerprint (None: not a training trajectory)."""
        order = np.argsort(self.fingerprints, kind="stable")
        sorted_fp = self.fingerprints[order]
        pos = np.searchsorted(sorted_fp, fingerprints)
        found = (pos < len(sorted_fp)) & (sorted_fp[np.minimum(pos, len(sorted_fp) - 1)] == fingerprints)
        return [self.runs[self.fingerprint_runs[order[p]]] if ok else None for p, ok in zip(pos, found)]

    def near_copies(self, signatures: np.ndarray) -> pd.DataFrame:
        """Per trajectory (its near-copy signature): ``training_similarity`` (the estimated Jaccard of its closest
        training trajectory; NaN when the folder keeps no signatures) and ``near_copy_of`` (that trajectory's run
        when it is a near-copy, :data:`~agentuq_nb.uq.near_copies.NEAR_COPY_JACCARD`; else None)."""
        from agentuq_nb.uq.near_copies import closest

        n = len(signatures)
        if self.near_copy_signatures is None:
            return pd.DataFrame({"training_similarity": np.full(n, np.nan), "near_copy_of": [None] * n})
        matches = closest(signatures, self.near_copy_signatures)
        near = matches.near()
        runs = [self.runs[self.fingerprint_runs[r]] if ok else None for r, ok in zip(matches.reference, near)]
        return pd.DataFrame({"training_similarity": matches.similarity, "near_copy_of": runs})

    def tasks_seen(self, domains, task_ids, task_keys) -> pd.DataFrame:
        """Per row: ``task_key`` (an ``id:`` key resolved to the training task of the same domain and id where that
        names one, :func:`~agentuq_nb.records.task_identity.resolve_id_keys`), ``task_seen`` (its task is a training
        task; NA when the folder does not list them) and ``task_prior`` (that task's failure rate in training)."""
        domains = [str(d) for d in domains]
        if self.tasks.empty:
            return pd.DataFrame({"task_key": list(task_keys), "task_seen": pd.array([pd.NA] * len(domains),
                                                                                    dtype="boolean"),
                                 "task_prior": np.full(len(domains), np.nan)})
        reference = list(zip(self.tasks["domain"], self.tasks["task_id"], self.tasks["task_key"]))
        keys = resolve_id_keys(domains, [str(t) for t in task_ids], list(task_keys), reference)
        table = self.tasks.set_index(["domain", "task_key"])
        rate = (table["failures"] / table["n"]).to_dict()
        seen = [(d, k) in rate for d, k in zip(domains, keys)]
        return pd.DataFrame({"task_key": keys, "task_seen": pd.array(seen, dtype="boolean"),
                             "task_prior": [rate.get((d, k), np.nan) for d, k in zip(domains, keys)]})

    def adapt_to_run(self, scored: pd.DataFrame, groups=None, n_boot: int = DEFAULT_N_BOOT, seed=0,
                     agent: str | None = None) -> tuple[RateEstimate | None, np.ndarray]:
        """``(the run's estimated failure rate, adapted probabilities)`` of :meth:`predict`'s rows (module docstring);
        ``(None, the probabilities as they are)`` when the maps carry no ``source_rate`` (a folder of an older
        version) or give a constant. A rate not estimated from the run's scores (κ = ∞) is the training rate moved
        by the effect of the run's ``agent`` model (what its results name; None: unknown) in the training runs of
        the same agent, with the interval of the share of its trajectories that fail
        (:func:`~agentuq_nb.evaluation.run_rate.agent_rate`; the card's ``training_runs``, the run predicted left out
        when it is one of them)."""
        p = scored["failure_probability"].to_numpy(dtype=float)
        source = scored["source_rate"].to_numpy(dtype=float)
        if not (np.isfinite(source) & np.isfinite(p)).any() or np.nanstd(p) == 0:
            return None, p
        models = scored["model"].to_numpy(dtype=object)
        main = pd.Series(models).mode().iloc[0]  # the map that scores most rows gives the prior strength
        mapping = self.final_map if main == FINAL else self.loro[main[len(LORO_PREFIX):]][1]
        raw = (mapping or {}).get("prior_strength", 0.0)
        strength = float("inf") if raw is None else float(raw)  # JSON has no infinity: null = not adapted
        held_out = None if main == FINAL else main[len(LORO_PREFIX):]
        counts = [(float(r["n_failures"]), float(r["n_labelled"]), training_agent(r))
                  for r in self.card.get("training_runs", [])
                  if r.get("name") != held_out and isinstance(r.get("n_failures"), (int, float))
                  and isinstance(r.get("n_labelled"), (int, float)) and r["n_labelled"] > 0]
        run_rates = (np.array([c[0] for c in counts]), np.array([c[1] for c in counts])) if len(counts) > 1 else None
        return adapt(p, np.where(np.isfinite(source), source, np.nan), n_boot, seed, groups, strength=strength,
                     run_rates=run_rates, agents=[c[2] for c in counts], agent=agent or None)

    def with_training_task_keys(self, features: TrajectoryFeatures) -> TrajectoryFeatures:
        """``features`` with each row's ``task_key`` resolved as :meth:`tasks_seen` resolves it (an ``id:`` key to the
        training task of its domain and id), so that the task prior looks a task up as it was keyed in training."""
        if self.tasks.empty or TASK_KEY not in features.index:
            return features
        index = features.index
        reference = list(zip(self.tasks["domain"], self.tasks["task_id"], self.tasks["task_key"]))
        keys = resolve_id_keys([str(d) for d in index["domain"]], [str(t) for t in index["task_id"]],
                               list(index[TASK_KEY]), reference)
        return replace(features, index=index.assign(**{TASK_KEY: list(keys)}))

    def predict(self, features: TrajectoryFeatures, top: int = 5, logit_shift: float | None = None,
                explained: bool = True) -> pd.DataFrame:
        """One row per row of ``features``: ``failure_probability`` (calibrated; with ``logit_shift``, the ``shift`` of
        the run's estimated failure rate from :meth:`adapt_to_run`, moved by it as :func:`~.label_shift.adapt` moves
        them: centred on that rate),
        ``base_probability``, ``log_odds``, ``source_rate`` (the failure rate its map was calibrated at), ``model``,
        ``in_training``, the ``top`` reasons as ``reason_k`` (a sentence), ``points_k`` (percentage points of the
        probability) and ``feature_k`` (the feature's name), k = 1 … top, and ``explanation``: the JSON text of the
        reasons (:func:`~agentuq_nb.evaluation.detector_explain.explain`: base + all points / 100 = the
        ``failure_probability`` written, adapted or not). ``explained=False``: the probabilities only (no reasons)."""
        n = len(features)
        features = self.with_training_task_keys(features)
        out = pd.DataFrame({"failure_probability": np.full(n, np.nan), "base_probability": np.full(n, np.nan),
                            "log_odds": np.full(n, np.nan), "source_rate": np.full(n, np.nan), "model": FINAL,
                            "in_training": False})
        for k in range(1, top + 1):
            out[f"reason_{k}"], out[f"points_{k}"], out[f"feature_{k}"] = None, np.nan, None
        out["explanation"] = "[]"
        training = self.training_run_of(features.index["fingerprint"].to_numpy(dtype=np.int64))
        assignment = np.array([LORO_PREFIX + r if r is not None and r in self.loro else FINAL for r in training],
                              dtype=object)
        out["in_training"] = [r is not None for r in training]
        for name in dict.fromkeys(assignment):
            rows = np.flatnonzero(assignment == name)
            model, mapping = (self.final, self.final_map) if name == FINAL else self.loro[name[len(LORO_PREFIX):]]
            part = features.take(rows)
            log_odds = model.log_odds(part)
            out.loc[rows, "log_odds"] = log_odds
            source = (mapping or {}).get("source_rate")
            printed = printed_probability(mapping, logit_shift)
            out.loc[rows, "failure_probability"] = printed(log_odds)
            out.loc[rows, "source_rate"] = np.nan if source is None else source
            out.loc[rows, "model"] = name
            if not explained:
                continue
            reasons = explain(model, part, printed, top)
            for column in reasons.columns:
                out.loc[rows, column] = reasons[column].to_numpy()
        return out


def training_agent(row: dict[str, Any]) -> str | None:
    """The agent model a training run's row of the card names (``models.assistant``), None where it names none."""
    models = row.get("models")
    agent = models.get("assistant") if isinstance(models, dict) else None
    return str(agent) if isinstance(agent, str) and agent else None


def printed_probability(mapping: dict[str, Any] | None, logit_shift: float | None):
    """The function from a model's log-odds to the probability ``predict`` writes: its Platt map, then (with a
    ``logit_shift``, the run's :attr:`~.label_shift.RateEstimate.shift`) the move of the intercept that centres the
    run's probabilities on its estimated rate (:func:`~.label_shift.shift_by`, as :func:`~.label_shift.adapt` moves
    them) - the one function the points of an explanation are taken along, so that they sum to the probability
    written."""
    if logit_shift is None or not np.isfinite(logit_shift) or logit_shift == 0:
        return lambda s: platt_probability(mapping, s)
    return lambda s: shift_by(platt_probability(mapping, s), logit_shift)


class EmbedderCard(BaseModel):
    """The card's ``embedder``: which one, and how many word pieces of a text it reads (bounded as train-detector's
    option is)."""

    model_config = ConfigDict(extra="ignore")

    name: Literal[EMBEDDERS]
    max_tokens: StrictInt = Field(ge=EMBED_MAX_TOKENS_RANGE[0], le=EMBED_MAX_TOKENS_RANGE[1])


class CardFields(BaseModel):
    """The fields of a detector's card that predicting reads, checked (the others are only shown)."""

    model_config = ConfigDict(extra="ignore")

    feature_groups: list[str] = Field(min_length=1)
    embedder: EmbedderCard
    settings: dict[str, Any]
    training_runs: list[dict[str, Any]] = Field(default_factory=list)
    calibration: dict[str, Any] = Field(default_factory=dict)
    protocols: dict[str, Any] = Field(default_factory=dict)


class LoroEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")

    run: str
    model: dict[str, Any]
    calibration: Optional[dict[str, Any]] = None


class ModelFile(BaseModel):
    """``model.json``: the training runs, the final model and its map, the leave-one-run-out models and theirs."""

    model_config = ConfigDict(extra="ignore")

    runs: list[str]
    final: dict[str, Any]
    final_calibration: Optional[dict[str, Any]] = None
    loro: list[LoroEntry] = Field(default_factory=list)


def checked(model: type[BaseModel], value: Any, path: Path, what: str) -> Any:
    try:
        return model.model_validate(value)
    except ValidationError as err:
        where, message = first_error(err)
        raise InputError(path, f"{what}{where}: {message}") from None


def dense_names_made(groups: tuple[str, ...], embedder: str) -> tuple[set[str], int]:
    """The dense columns the feature extraction makes for ``groups`` with ``embedder``, and its vectors' size."""
    dim = embedder_dim(embedder) if "embeddings" in groups else 0
    made = set(BLACKBOX_COLUMNS) if "blackbox" in groups else set()
    made |= {f"length.{name}" for name in LENGTH_COLUMNS} if "length" in groups else set()
    made |= {f"{block}:{i}" for block in EMBEDDING_BLOCKS for i in range(dim)}
    return made, dim


MAX_MONITOR_COLUMN = 256  # characters of a monitor column's name


def check_columns(model: FittedDetector, made: set[str], dim: int, embedder: str, path: Path, where: str,
                  monitors: bool = False) -> None:
    """Refuse a model whose dense columns are not the extraction's, or whose embedding blocks are not whole blocks of
    the card's embedder (the weights of another embedder). ``monitors`` (the card names the monitors group): a
    ``monitor.<name>`` column, named by a monitor the training runs held, is the extraction's too."""
    unknown = [name for name in model.dense_names if name not in made
               and not (monitors and name.startswith(MONITOR_PREFIX) and len(name) <= MAX_MONITOR_COLUMN)]
    if unknown:
        raise InputError(path, f"{where}.dense_names: {unknown[0]!r} is not a column the extraction makes for the "
                               f"card's feature groups and embedder {embedder!r} ({dim} dimensions)")
    for block in EMBEDDING_BLOCKS:
        n = sum(name.startswith(block + ":") for name in model.dense_names)
        if n not in (0, dim):
            raise InputError(path, f"{where}.dense_names: {block} has {n} dimensions where the card's embedder "
                                   f"{embedder!r} makes {dim}: the weights are another embedder's")


def load_detector(path: str | os.PathLike) -> Detector:
    """The detector folder at ``path``, checked and rebuilt (an :class:`~agentuq_nb.io.errors.InputError` naming the
    file and the field when it is not a detector this version can read: every field, array and number is checked
    before it is used, and reading is linear in the folder's size)."""
    folder = read_detector_dir(path, FEATURE_VERSION)
    model, arrays = folder.model, folder.arrays
    card_path, model_path, arrays_path = Path(path) / CARD, Path(path) / MODEL, Path(path) / ARRAYS
    card = checked(CardFields, folder.card, card_path, "")
    try:
        groups = check_groups(card.feature_groups)
    except ValueError as err:
        raise InputError(card_path, f"feature_groups: {err}") from None
    made, dim = dense_names_made(groups, card.embedder.name)
    described = checked(ModelFile, model, model_path, "")
    by_prefix: dict[str, dict[str, np.ndarray]] = {}  # one pass over the arrays: loading stays linear in the folder
    for key, value in arrays.items():
        prefix, _, name = key.partition(".")
        by_prefix.setdefault(prefix, {})[name] = value

    def rebuilt(prefix: str, meta: dict[str, Any], where: str) -> SelectedDetector:
        try:
            selected = SelectedDetector.from_arrays(meta, by_prefix.get(prefix, {}))
        except StateError as err:
            if err.part == "arrays":
                raise InputError(arrays_path, f"{prefix}.{err}") from None
            raise InputError(model_path, f"{where}.{err}") from None
        written_by_selection = isinstance(meta, dict) and "candidate" in meta  # else: a folder before the selection
        for at, fitted in ((f"{where}.full" if written_by_selection else where, selected.full),
                           (f"{where}.fallback.full", None if selected.fallback is None else selected.fallback.full)):
            if fitted is None:
                continue
            if set(fitted.settings.groups) != set(groups):
                raise InputError(model_path, f"{at}.settings.groups: {list(fitted.settings.groups)} are not the "
                                             f"card's feature_groups {list(groups)}")
            check_columns(fitted, made, dim, card.embedder.name, model_path, at, MONITOR_GROUP in groups)
        return selected

    def calibration(params: Any, where: str) -> dict[str, Any] | None:
        try:
            return PlattMap.check(params)
        except StateError as err:
            raise InputError(model_path, f"{where}.{err}") from None

    runs = described.runs
    final = rebuilt("final", described.final, "final")
    final_map = calibration(described.final_calibration, "final_calibration")
    loro = {}
    for i, entry in enumerate(described.loro):
        if entry.run not in runs or entry.run in loro:
            raise InputError(model_path, f"loro.{i}.run: {entry.run!r} is not one of the runs or is named twice")
        loro[entry.run] = (rebuilt(f"loro{i}", entry.model, f"loro.{i}.model"),
                           calibration(entry.calibration, f"loro.{i}.calibration"))
    fingerprints = arrays.get("fingerprints", np.zeros(0, dtype=np.int64))
    fingerprint_runs = arrays.get("fingerprint_runs", np.zeros(0, dtype=np.int32))
    for name, value in (("fingerprints", fingerprints), ("fingerprint_runs", fingerprint_runs)):
        if value.dtype.kind not in "iu" or value.ndim != 1:
            raise InputError(arrays_path, f"{name}: is {value.dtype} of {value.ndim} dimension(s), not integers of 1")
    if len(fingerprints) != len(fingerprint_runs) or (fingerprint_runs.size and (
            fingerprint_runs.min() < 0 or fingerprint_runs.max() >= len(runs))):
        raise InputError(arrays_path, "fingerprints: the training fingerprints do not match the runs of model.json")
    tasks = pd.DataFrame(model.get("tasks") or [], columns=["domain", "task_key", "task_id", "n", "failures"])
    try:
        tasks = tasks.astype({"domain": str, "task_key": str, "task_id": str, "n": int, "failures": int})
    except (TypeError, ValueError, OverflowError) as err:
        raise InputError(model_path, f"tasks: not (domain, task_key, task_id, n, failures) each: {err}") from None
    if (tasks["n"] < 1).any() or (tasks["failures"] < 0).any() or (tasks["failures"] > tasks["n"]).any():
        raise InputError(model_path, "tasks: training tasks with impossible counts (n < 1 or failures outside [0, n])")
    signatures = arrays.get("near_copy_signatures")
    if signatures is not None:
        from agentuq_nb.uq.near_copies import NUM_HASHES

        if signatures.dtype != np.uint32 or signatures.shape != (len(fingerprints), NUM_HASHES):
            raise InputError(arrays_path, f"near_copy_signatures: is {signatures.dtype} of shape {signatures.shape}, "
                                          f"not uint32 of shape ({len(fingerprints)}, {NUM_HASHES}) (one per "
                                          "training fingerprint)")
    return Detector(folder, final, final_map, loro, runs, fingerprints.astype(np.int64),
                    fingerprint_runs.astype(np.int32), tasks, signatures)
