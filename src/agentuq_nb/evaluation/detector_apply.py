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

The reasons are each model's own, in percentage points of the printed probability that sum with the base
probability to it (:func:`~agentuq_nb.evaluation.detector_explain.explain`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.detector_explain import explain
from agentuq_nb.evaluation.detector_model import platt_probability
from agentuq_nb.evaluation.detector_selection import SelectedDetector
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.detector_dir import ARRAYS, MODEL, DetectorFolder, read_detector_dir
from agentuq_nb.uq.detector_features import FEATURE_VERSION, TrajectoryFeatures

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

    def predict(self, features: TrajectoryFeatures, top: int = 5) -> pd.DataFrame:
        """One row per row of ``features``: ``failure_probability`` (calibrated), ``base_probability``, ``log_odds``,
        ``model``, ``in_training``, the ``top`` reasons as ``reason_k`` (a sentence), ``points_k`` (percentage points
        of the probability) and ``feature_k`` (the feature's name), k = 1 … top, and ``explanation``: the JSON text of
        the reasons (:func:`~agentuq_nb.evaluation.detector_explain.explain`: base + all points / 100 = the
        probability)."""
        n = len(features)
        out = pd.DataFrame({"failure_probability": np.full(n, np.nan), "base_probability": np.full(n, np.nan),
                            "log_odds": np.full(n, np.nan), "model": FINAL, "in_training": False})
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
            out.loc[rows, "failure_probability"] = platt_probability(mapping, log_odds)
            out.loc[rows, "model"] = name
            reasons = explain(model, part, lambda s, mapping=mapping: platt_probability(mapping, s), top)
            for column in reasons.columns:
                out.loc[rows, column] = reasons[column].to_numpy()
        return out


def load_detector(path: str | os.PathLike) -> Detector:
    """The detector folder at ``path``, checked and rebuilt (an :class:`~agentuq_nb.io.errors.InputError` naming the
    file when it is not a detector this version can read)."""
    folder = read_detector_dir(path, FEATURE_VERSION)
    model, arrays = folder.model, folder.arrays

    def rebuilt(prefix: str, meta: Any) -> SelectedDetector:
        mine = {k[len(prefix) + 1:]: v for k, v in arrays.items() if k.startswith(prefix + ".")}
        try:
            return SelectedDetector.from_arrays(meta, mine)
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
    return Detector(folder, final, model.get("final_calibration"), loro, runs, fingerprints, fingerprint_runs)
