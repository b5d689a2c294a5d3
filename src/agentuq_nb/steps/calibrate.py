"""The calibration report of a run folder (``agentuq-nb calibrate``): its estimators as failure probabilities.

For every chosen estimator (default: all the run holds) and method (Platt, isotonic), the probabilities are
cross-fitted by task (:func:`~agentuq_nb.evaluation.calibration.cross_fitted_probabilities`) and scored
with :func:`~agentuq_nb.evaluation.calibration.calibration_report` (ECE, debiased ECE, Brier and its
decomposition, log loss); with several estimators the combined predictor
(:mod:`~agentuq_nb.evaluation.combined_predictor`) is reported beside them. With ``transfer_to`` every map
is also fitted on the whole run and applied to the other run's scores: the ``transfer`` section names the
run it was ``fitted_on`` and the one ``evaluated_on``.

Written to ``RUN_DIR/calibration.json`` and ``RUN_DIR/calibration_bins.csv`` (one row per reliability bin:
``setting`` (cross_fitted | transfer), ``estimator``, ``method``, ``bin, lo, hi, mean_prob, failure_rate,
count, sq_error``) under the run's lock.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from agentuq_nb.estimators import Estimator, get
from agentuq_nb.estimators.base import combination_families
from agentuq_nb.estimators.combined import COMBINED, COMBINED_FAMILY
from agentuq_nb.estimators.scores import estimator_inputs, score_table, with_length_columns
from agentuq_nb.evaluation.defaults import METHODS
from agentuq_nb.io.atomic import json_ready
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.config import NBins
from agentuq_nb.records.outcomes import Outcomes
from agentuq_nb.steps.base import (
    Command,
    FailureThresholdField,
    GbmGridField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
    num_text,
)

STEP = Step("calibrate", "agentuq-nb calibrate RUN_DIR", ("calibration", "calibration_bins"))


class CalibrateConfig(StepConfig):
    """What is calibrated (estimators, methods), on what bins and folds, and where the maps are carried to."""

    names: Optional[list[str]] = Field(None, description="only these estimators (default: every one the run holds)")
    methods: tuple[str, ...] = Field("both", validate_default=True, description="platt | isotonic | both")
    transfer_to: Optional[Path] = Field(None, description="another run folder: maps fitted on RUN_DIR are evaluated "
                                        "on it")
    n_bins: NBins = Field(10, description="equal-mass bins of the ECE, the Brier decomposition and the diagram")
    failure_threshold: FailureThresholdField
    n_splits: int = Field(5, ge=2, description="folds (by task) of the cross-fitting")
    seed: SeedField = Field(description="seed of the folds")
    combine: bool = Field(True, description="report the combined predictor beside the estimators")
    combined_input_names: Optional[list[str]] = Field(None, description="inputs of the combined predictor (default: "
                                                      "one estimator per kind of signal)")
    gbm_grid: GbmGridField
    progress: bool = Field(False, description="show a progress bar (stderr) counting the estimators calibrated")

    @field_validator("methods", mode="before")
    @classmethod
    def known_methods(cls, value: Any) -> tuple[str, ...]:
        """``"both"`` (or a method's name) stands for its methods; an unknown method is refused."""
        value = METHODS if value == "both" else (value,) if isinstance(value, str) else tuple(value)
        bad = [m for m in value if m not in METHODS]
        if bad or not value:
            raise ValueError(f"methods must be one of {', '.join(METHODS)} (or both); got {', '.join(bad) or 'none'}")
        return value


BIN_COLUMNS = ["setting", "estimator", "method", "bin", "lo", "hi", "mean_prob", "failure_rate", "count",
               "sq_error"]


def labelled_scores(run: RunDir, names: list[str] | None, outcomes: Outcomes
                    ) -> tuple[pd.DataFrame, list[Estimator], np.ndarray]:
    """The run's score table (finite rewards only, length columns added), its estimators and the failure labels of
    its rows (``outcomes``: the run's, labelled once by the caller); the combined predictors read back from
    ``compare-estimators`` are left out (calibrate fits them itself)."""
    table, estimators = score_table(run, names, outcomes)
    estimators = [e for e in estimators if e.family not in combination_families()]
    table = with_length_columns(run, table)
    table = table[np.isfinite(table["reward"].to_numpy(dtype=float))].reset_index(drop=True)
    return table, estimators, table["failed"].to_numpy(dtype=bool)


def _bins(prob, failure, n_bins, **labels) -> pd.DataFrame:
    from agentuq_nb.evaluation.calibration import reliability_table

    return reliability_table(prob, failure, n_bins).assign(**labels)


def _cross_fitted(table, estimators, failure, methods, n_bins, n_splits, seed, combine, combined_input_names,
                  progress=False, gbm_grid=None):
    from agentuq_nb.common.progress import progress_bar
    from agentuq_nb.evaluation.calibration import calibration_report, cross_fitted_probabilities
    from agentuq_nb.evaluation.combined_predictor import cross_fitted_combination
    from agentuq_nb.evaluation.estimator_table import combined_inputs
    from agentuq_nb.evaluation.multi_trial import task_labels

    groups = task_labels(table)
    sections, bins = {}, []
    scored = [(e.name, e.family, e.invert, table[e.name].to_numpy(dtype=float), None) for e in estimators]
    protocols = {e.name: e.protocol for e in estimators}
    if combine and len(estimators) > 1 and 0 < failure.sum() < len(failure) and len(np.unique(groups)) >= 2:
        for name, spec in COMBINED.items():
            features = combined_inputs(table, estimators, spec.with_length, combined_input_names, spec.inputs)
            if features.shape[1]:
                prob = cross_fitted_combination(features, failure, groups, n_splits=n_splits, seed=seed,
                                                model=spec.model, gbm_grid=gbm_grid).prob
                scored.append((name, COMBINED_FAMILY.name, False, prob, prob))
    bar = progress_bar(len(scored), "calibration", "estimator", progress)
    for name, family, invert, u, prob in scored:
        entry = {"family": family, "protocol": protocols[name] if name in protocols else get(name).protocol, "invert": bool(invert),
                 "methods": {}}
        ok = np.isfinite(u)
        if prob is not None:  # a combined predictor: already a cross-fitted probability
            method = COMBINED[name].model
            entry["methods"][method] = calibration_report(prob, failure, n_bins)
            bins.append(_bins(prob, failure, n_bins, setting="cross_fitted", estimator=name, method=method))
        elif not 0 < failure[ok].sum() < ok.sum() or len(np.unique(groups[ok])) < 2:
            entry["undefined"] = (f"{int(ok.sum())} scored trajectories of {len(np.unique(groups[ok]))} task(s) with "
                                  f"{int(failure[ok].sum())} failure(s): calibration needs both classes and 2 tasks")
        else:
            for method in methods:
                p = cross_fitted_probabilities(u, failure, groups, method, n_splits, seed, invert=invert).prob
                entry["methods"][method] = calibration_report(p, failure, n_bins)
                bins.append(_bins(p, failure, n_bins, setting="cross_fitted", estimator=name, method=method))
        sections[name] = entry
        bar.update()
    bar.close()
    return sections, bins


def _transfer(table, estimators, failure, other: RunDir, methods, n_bins, failure_threshold):
    from agentuq_nb.evaluation.calibration import calibration_report, fit_calibrator

    available = [e for e in estimators if e.is_available(other)]
    sections, bins = {}, []
    table2, _, failure2 = (labelled_scores(other, [e.name for e in available], other.outcomes(failure_threshold))
                           if available else (None, None, None))
    for est in estimators:
        entry = {"family": est.family, "protocol": est.protocol, "invert": bool(est.invert), "methods": {}}
        u = table[est.name].to_numpy(dtype=float)
        ok = np.isfinite(u)
        if est not in available:
            entry["undefined"] = f"{other.path} holds no data for this estimator"
        elif not 0 < failure[ok].sum() < ok.sum():
            entry["undefined"] = "the fitted run's scored trajectories hold one class only"
        else:
            for method in methods:
                prob = fit_calibrator(u, failure, method, invert=est.invert).predict(table2[est.name])
                entry["methods"][method] = calibration_report(prob, failure2, n_bins)
                bins.append(_bins(prob, failure2, n_bins, setting="transfer", estimator=est.name, method=method))
        sections[est.name] = entry
    return sections, bins


def run(run_dir: str | os.PathLike | RunDir, config: CalibrateConfig = CalibrateConfig()) -> dict:
    """The calibration report of ``run_dir`` (see the module docstring); publishes ``calibration.json`` and
    ``calibration_bins.csv`` in ``run_dir`` and returns the report."""
    folder = RunDir.of(run_dir)
    folder.require_folder(STEP.name)
    other = None if config.transfer_to is None else RunDir.of(config.transfer_to)
    if other is not None:
        other.require_folder("calibrate transfer_to")
        if other.path.resolve() == folder.path.resolve():
            raise InputError(other.path, "is the run being calibrated: transfer_to needs another run")
        if not other.has("trajectories") and not other.has("trajectory_summary"):
            raise InputError(other.path, "transfer_to: not a run folder (no trajectories.parquet or "
                                         "trajectory_summary.parquet): the maps are evaluated on another run's "
                                         "trajectories (a run folder 'agentuq-nb analyze RESULTS --out RUN_DIR' made)")
    with folder.lock(STEP.name):  # from the first read to the commit: based_on is what was read
        table, estimators, failure = labelled_scores(folder, config.names, folder.outcomes(config.failure_threshold))
        report = {"run": str(folder.path), "failure_threshold": float(config.failure_threshold), "n_bins": int(config.n_bins),
                  "bins": "quantile (equal mass)", "methods": list(config.methods), "n_splits": int(config.n_splits),
                  "seed": config.seed, "cross_fitting": cross_fitting_text(config.n_splits),
                  "n": int(len(table)), "n_failures": int(failure.sum())}
        report["estimators"], bins = _cross_fitted(table, estimators, failure, config.methods, config.n_bins, config.n_splits, config.seed,
                                                   config.combine, config.combined_input_names, config.progress,
                                                   config.gbm_grid)
        if config.gbm_grid is not None:  # said only when not the default grid (a default report is as it was)
            report["gbm_grid"] = config.gbm_grid
        report["transfer"] = None
        if other is not None:
            sections, transfer_bins = _transfer(table, estimators, failure, other, config.methods, config.n_bins, config.failure_threshold)
            report["transfer"] = {"fitted_on": str(folder.path), "evaluated_on": str(other.path),
                                  "fit": "each map fitted on every scored trajectory of fitted_on",
                                  "estimators": sections}
            bins += transfer_bins
        report = json_ready(report)
        frame = pd.concat(bins, ignore_index=True)[BIN_COLUMNS] if bins else pd.DataFrame(columns=BIN_COLUMNS)
        with folder.commit(STEP.name) as commit:
            based_on = folder.based_on(*estimator_inputs(folder, estimators))
            commit.write_json("calibration", report, based_on)
            commit.write_with("calibration_bins", lambda p: frame.to_csv(p, index=False), based_on)
    return report


def show(report: dict, run_dir: Path, config: CalibrateConfig, say: Reporter) -> None:
    """What the command prints: each estimator's and method's scores, cross-fitted and (with transfer_to) carried
    over."""
    sections = [("cross-fitted on " + report["run"], report["estimators"])]
    if report["transfer"]:
        t = report["transfer"]
        sections.append((f"fitted on {t['fitted_on']}, evaluated on {t['evaluated_on']}", t["estimators"]))
    for title, entries in sections:
        say.say(title)
        for name, entry in entries.items():
            label = f"{name} [in-sample]" if entry.get("protocol") == "in-sample" else name
            for m, rep in entry["methods"].items():
                say.say(f"  {label:40s} {m:9s} n={rep['n']:<4d} ECE={num_text(rep['ece'])} "
                        f"ECE_debiased={num_text(rep['ece_debiased'])} Brier={num_text(rep['brier'])} "
                        f"log_loss={num_text(rep['log_loss'])}")
            if entry.get("undefined"):
                say.say(f"  {name}: not calibrated: {entry['undefined']}", warn=True)


COMMAND = Command(
    summary="Estimators as failure probabilities (Platt, isotonic; cross-fitted by task): ECE, debiased ECE, Brier "
            "and its decomposition, log loss, reliability bins → RUN_DIR/calibration.json, calibration_bins.csv.",
    options=("names", "methods", "transfer_to", "n_bins", "failure_threshold", "seed", "combined_input_names"),
    flags={"names": "--estimator", "methods": "--method", "combined_input_names": "--combine-input"},
    kinds={"methods": Literal["platt", "isotonic", "both"]},
    help={"names": "only these estimators (repeat the option)",
          "combined_input_names": "an input of the combined predictor (repeat; default: one estimator per kind of "
                                  "signal)"},
    set={"progress": True}, plugins=True, show=show)


def calibrate(run_dir: str | os.PathLike | RunDir, **options: Any) -> dict:
    """:func:`run` with the :class:`CalibrateConfig` fields as keywords."""
    return run(run_dir, CalibrateConfig(**options))


def cross_fitting_text(n_splits: int) -> str:
    """How the calibration maps are cross-fitted, as :func:`~agentuq_nb.evaluation.calibration.group_folds` does it
    (the report's ``cross_fitting``)."""
    return (f"{n_splits}-fold StratifiedGroupKFold by task (domain, task_id) and failure label; GroupKFold by task "
            f"for an estimator whose rarer class has fewer scored trajectories than {n_splits}")
