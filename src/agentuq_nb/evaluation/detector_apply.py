"""A trained failure detector read back from its folder and applied to trajectories' features.

:func:`load_detector` reads the folder through :func:`agentuq_nb.io.store.detector_dir.read_detector_dir` (checked,
no pickle) and rebuilds its models (:meth:`~agentuq_nb.evaluation.detector_model.FittedDetector.from_arrays`): the
final model, the leave-one-run-out models and their Platt maps. :meth:`Detector.predict` scores rows:

* a trajectory the detector was trained on (its fingerprint, :func:`~agentuq_nb.uq.detector_features.fingerprint`,
  is among the training trajectories') is scored by the model that left its run out, with that model's map (fitted
  on the other runs): ``model`` = ``leave-one-run-out:<run>``, ``in_training`` True. Its probability is then what the
  detector says of a run it has not seen, not an in-sample number;
* any other trajectory by the final model, with the map fitted on all training runs' leave-one-run-out log-odds:
  ``model`` = ``final``. Either way the probability was calibrated on runs other than the one predicted.

Contributions are each model's own (:meth:`~agentuq_nb.evaluation.detector_model.FittedDetector.contributions`).

**The run's own failure rate.** Each map was fitted where the failure rate was its ``source_rate`` (the training
runs'); the predicted run has its own. :meth:`Detector.adapt_to_run` estimates it from the run's probabilities by
label-shift EM with a bootstrap interval (:func:`~agentuq_nb.evaluation.label_shift.adapt`; MAP-EM with the prior
strength the training runs chose, ``prior_strength`` of the map: infinite = not adapted) and moves every probability
to it (an adjusted intercept). **Seen tasks**: :meth:`Detector.tasks_seen` tells, per trajectory, whether
its task - its domain and the hash of its instructions (:mod:`agentuq_nb.records.task_identity`) - was among the
training tasks, and that task's failure rate there (the task prior).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.detector_model import FittedDetector, platt_probability
from agentuq_nb.evaluation.label_shift import RateEstimate, adapt
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.detector_dir import ARRAYS, MODEL, DetectorFolder, read_detector_dir
from agentuq_nb.records.task_identity import resolve_id_keys
from agentuq_nb.uq.detector_features import FEATURE_VERSION, TrajectoryFeatures

FINAL = "final"
LORO_PREFIX = "leave-one-run-out:"


@dataclass
class Detector:
    """A detector folder read and rebuilt (see the module docstring)."""

    folder: DetectorFolder
    final: FittedDetector
    final_map: dict[str, Any] | None
    loro: dict[str, tuple[FittedDetector, dict[str, Any] | None]] = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    fingerprints: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    fingerprint_runs: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    #: the training tasks (``domain``, ``task_key``, ``task_id``, ``n``, ``failures``); empty for a folder without them
    tasks: pd.DataFrame = field(default_factory=pd.DataFrame)

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

    def adapt_to_run(self, scored: pd.DataFrame, groups=None, n_boot: int = 1000, seed=0
                     ) -> tuple[RateEstimate | None, np.ndarray]:
        """``(the run's estimated failure rate, adapted probabilities)`` of :meth:`predict`'s rows (module docstring);
        ``(None, the probabilities as they are)`` when the maps carry no ``source_rate`` (a folder of an older
        version) or give a constant."""
        p = scored["failure_probability"].to_numpy(dtype=float)
        source = scored["source_rate"].to_numpy(dtype=float)
        if not (np.isfinite(source) & np.isfinite(p)).any() or np.nanstd(p) == 0:
            return None, p
        models = scored["model"].to_numpy(dtype=object)
        main = pd.Series(models).mode().iloc[0]  # the map that scores most rows gives the prior strength
        mapping = self.final_map if main == FINAL else self.loro[main[len(LORO_PREFIX):]][1]
        raw = (mapping or {}).get("prior_strength", 0.0)
        strength = float("inf") if raw is None else float(raw)  # JSON has no infinity: null = not adapted
        return adapt(p, np.where(np.isfinite(source), source, np.nan), n_boot, seed, groups, strength=strength)

    def predict(self, features: TrajectoryFeatures, top: int = 5) -> pd.DataFrame:
        """One row per row of ``features``: ``failure_probability`` (calibrated on the training runs), ``log_odds``,
        ``source_rate`` (the failure rate its map was calibrated at), ``model``,
        ``in_training``, the ``top`` contributions as ``feature_k`` / ``contribution_k`` (k = 1 … top) and all of them
        as ``contributions``: the JSON text of ``[{feature, value, contribution}, …]`` (``value``: the feature's value
        in the trajectory, null for an embedding block)."""
        n = len(features)
        out = pd.DataFrame({"failure_probability": np.full(n, np.nan), "log_odds": np.full(n, np.nan),
                            "source_rate": np.full(n, np.nan), "model": FINAL, "in_training": False,
                            "contributions": "[]"})
        for k in range(1, top + 1):
            out[f"feature_{k}"], out[f"contribution_{k}"] = None, np.nan
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
            out.loc[rows, "failure_probability"] = platt_probability(mapping, log_odds)
            out.loc[rows, "source_rate"] = (mapping or {}).get("source_rate", np.nan)
            out.loc[rows, "model"] = name
            contributions = model.contributions(part, top)
            for rank, group in contributions.groupby("rank"):
                at = rows[group["row"].to_numpy()]
                out.loc[at, f"feature_{rank}"] = group["feature"].to_numpy()
                out.loc[at, f"contribution_{rank}"] = group["contribution"].to_numpy()
            for row, group in contributions.groupby("row"):
                out.at[rows[row], "contributions"] = json.dumps(
                    [{"feature": f, "value": None if not np.isfinite(v) else float(v), "contribution": float(c)}
                     for f, v, c in zip(group["feature"], group["value"], group["contribution"])])
        return out


def load_detector(path: str | os.PathLike) -> Detector:
    """The detector folder at ``path``, checked and rebuilt (an :class:`~agentuq_nb.io.errors.InputError` naming the
    file when it is not a detector this version can read)."""
    folder = read_detector_dir(path, FEATURE_VERSION)
    model, arrays = folder.model, folder.arrays

    def rebuilt(prefix: str, meta: Any) -> FittedDetector:
        mine = {k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + ".")}
        try:
            return FittedDetector.from_arrays(meta, mine)
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(Path(path) / (ARRAYS if isinstance(err, ValueError) else MODEL),
                             f"does not describe a detector this version rebuilds ({prefix}: {err})") from None

    try:
        runs = [str(r) for r in model["runs"]]
        final = rebuilt("final", model["final"])
        loro = {str(e["run"]): (rebuilt(f"loro{i}", e["model"]), e.get("calibration"))
                for i, e in enumerate(model.get("loro") or [])}
        fingerprints = np.asarray(arrays.get("fingerprints", np.zeros(0)), dtype=np.int64)
        fingerprint_runs = np.asarray(arrays.get("fingerprint_runs", np.zeros(0)), dtype=np.int32)
    except (KeyError, TypeError) as err:
        raise InputError(Path(path) / MODEL, f"lacks what a detector holds ({type(err).__name__}: {err})") from None
    if len(fingerprints) != len(fingerprint_runs) or (fingerprint_runs.size and (
            fingerprint_runs.min() < 0 or fingerprint_runs.max() >= len(runs))):
        raise InputError(Path(path) / ARRAYS, "its training fingerprints do not match its runs")
    tasks = pd.DataFrame(model.get("tasks") or [], columns=["domain", "task_key", "task_id", "n", "failures"])
    try:
        tasks = tasks.astype({"domain": str, "task_key": str, "task_id": str, "n": int, "failures": int})
    except (TypeError, ValueError) as err:
        raise InputError(Path(path) / MODEL, f"lists training tasks that are not (domain, key, id, n, failures): {err}"
                         ) from None
    if (tasks["n"] < 1).any() or (tasks["failures"] < 0).any() or (tasks["failures"] > tasks["n"]).any():
        raise InputError(Path(path) / MODEL, "lists training tasks with impossible counts")
    return Detector(folder, final, model.get("final_calibration"), loro, runs, fingerprints, fingerprint_runs, tasks)
