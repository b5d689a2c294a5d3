"""The real-runs study (notebook ``13_real_runs``, ``params/real_runs.yaml``): several results files recorded
without log-probs, each analysed as ``agentuq-nb analyze`` does (extract, the black-box families, the estimator
table), then compared across runs (``compare-runs``).

Each file becomes the run folder ``<run_dir>/runs/<file stem>``; the cross-run leaderboard goes to
``<run_dir>/leaderboard``. Files that are absent are skipped with a message (the shared real runs live beside
the repository, not in it).
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.calibration import reliability_table
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, failure_labels
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.blackbox import BlackBoxConfig, ensure_blackbox, read_json
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.steps.extract import extract


@dataclass
class AnalysedRuns:
    """The run folders made, the files skipped (with why), and seconds per file."""

    runs: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def summary(self) -> pd.DataFrame:
        """One row per run: trajectories, failures, messages, the black-box step's seconds and share embedding."""
        rows = []
        for name, path in self.runs.items():
            run = RunDir(path)
            rewards = run.rewards()
            report = read_json(run, "blackbox_report")
            rows.append({"run": name, "domain": run.manifest().domain, "trajectories": len(rewards),
                         "failures": int(failure_labels(rewards["reward"]).sum()), "messages": report["messages"],
                         "seconds": round(self.seconds[name], 1), "embed_seconds": report["embed_seconds"]})
        return pd.DataFrame(rows)


def analyse_results(files: list[str | os.PathLike], run_dir: str | os.PathLike, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                    n_boot: int = DEFAULT_N_BOOT, seed: int = 0, embedder: str = "minilm") -> AnalysedRuns:
    """Each results file → ``run_dir/runs/<stem>``: extract, black-box families, estimator table."""
    out = AnalysedRuns()
    config = BlackBoxConfig(failure_threshold=failure_threshold, seed=seed, embedder=embedder)
    for file in map(Path, files):
        if not file.exists():
            out.skipped[file.stem] = f"{file} not found (the shared real runs live in ../shared beside the repository)"
            continue
        start = time.perf_counter()
        run = Path(run_dir) / "runs" / file.stem
        with warnings.catch_warnings():  # "no log-probs" is what these runs are: not news, once per message kind
            warnings.simplefilter("ignore")
            extract(file, run)
        ensure_blackbox(run, config)
        compare_estimators(run, failure_threshold=failure_threshold, n_boot=n_boot, seed=seed, blackbox=False)
        out.runs[file.stem] = run
        out.seconds[file.stem] = time.perf_counter() - start
    return out


def pooled_predictions(runs: dict[str, Path], estimator: str, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> pd.DataFrame:
    """One row per trajectory of every run: ``run``, the keys, ``failed`` and the estimator's score."""
    from agentuq_nb.estimators import get

    frames = []
    est = get(estimator)
    for name, path in runs.items():
        run = RunDir(path)
        if not est.is_available(run):
            continue
        scores = est.scores(run).rename("score").reset_index()
        rewards = key_dtypes(run.rewards())
        frame = rewards.merge(key_dtypes(scores), on=TRAJECTORY_KEYS, how="left")
        frames.append(frame.assign(run=name, failed=failure_labels(frame["reward"], failure_threshold)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def pooled_reliability(predictions: pd.DataFrame, n_bins: int = 10) -> pd.DataFrame:
    """The reliability table (equal-mass bins) of pooled out-of-fold failure probabilities."""
    ok = np.isfinite(predictions["score"].to_numpy(dtype=float))
    return reliability_table(predictions["score"].to_numpy(dtype=float)[ok], predictions["failed"].to_numpy()[ok],
                             n_bins)


def example_trajectory(run: str | os.PathLike, rank: int = 0, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> tuple:
    """The keys of a failed trajectory of ``run`` to show turn by turn: the ``rank``-th riskiest by TRACER's default
    score among failures with at least one agent and one user message."""
    r = RunDir(run)
    scores = key_dtypes(r.read_frame("blackbox_scores"))[TRAJECTORY_KEYS + ["tracer_default"]]
    frame = key_dtypes(r.rewards()).merge(scores, on=TRAJECTORY_KEYS)
    frame = frame[failure_labels(frame["reward"], failure_threshold)].sort_values("tracer_default", ascending=False)
    if frame.empty:
        raise ValueError(f"{run}: no failed trajectory to show")
    return tuple(frame.iloc[min(rank, len(frame) - 1)][TRAJECTORY_KEYS])


def _pooled(table: pd.DataFrame, estimator: str, metric: str = "auroc") -> float:
    row = table[table["estimator"] == estimator]
    return float(row[f"{metric}[pooled]"].iloc[0]) if len(row) else float("nan")


def findings(leaderboard: pd.DataFrame) -> str:
    """What the cross-run leaderboard shows, in sentences made from its numbers (so the text cannot go stale):
    the best length baseline, the estimators that beat it after FDR control (or none), TRACER's three readouts,
    and the best combination."""
    t = leaderboard
    runs = [c[len("n["):-1] for c in t.columns if c.startswith("n[") and c != "n[pooled]"]
    base = t[t["family"] == "baseline"].sort_values("auroc[pooled]", ascending=False)
    others = t[t["family"] != "baseline"]
    n, fails = int(t["n[pooled]"].max()), int(t["n_failures[pooled]"].max())
    lines = [f"**{len(runs)} runs, {n} trajectories, {fails} failures.** Pooled AUROCs compare failures and "
             "successes of the same run only; intervals resample tasks within runs."]
    if len(base):
        b = base.iloc[0]
        lines.append(f"Length alone: `{b['estimator']}` reaches a pooled AUROC of {b['auroc[pooled]']:.3f} "
                     f"[{b['auroc_lo[pooled]']:.3f}, {b['auroc_hi[pooled]']:.3f}].")
    beats = others[others["verdict"] == "beats length"]
    below = others[others["verdict"] == "below length"]
    if len(beats):
        lines.append(f"{len(beats)} of {len(others)} estimators beat the best length baseline on the pooled "
                     "length-controlled AUROC after Benjamini–Hochberg control: "
                     + ", ".join(f"`{e}` (q = {q:.3f})" for e, q in zip(beats["estimator"], beats["q_value"])) + ".")
    else:
        lines.append(f"None of the {len(others)} estimators beats the best length baseline on the pooled "
                     f"length-controlled AUROC after Benjamini–Hochberg control ({len(below)} are significantly "
                     "below it).")
    if len(others):
        top = others.sort_values("auroc_lc[pooled]", ascending=False).iloc[0]
        ref = top["length_baseline_lc"]
        lines.append(f"The highest pooled length-controlled AUROC is `{top['estimator']}`'s, "
                     f"{top['auroc_lc[pooled]']:.3f} (raw {top['auroc[pooled]']:.3f}), against "
                     f"{_pooled(t, ref, 'auroc_lc'):.3f} for the best length baseline, `{ref}`.")
    default, nested, optimistic = (_pooled(t, f"tracer.{k}") for k in ("default", "nested", "optimistic"))
    if np.isfinite(optimistic):
        lines.append(f"TRACER, pooled AUROC: default parameters {default:.3f}; tuned on other tasks (nested) "
                     f"{nested:.3f}; tuned on the evaluated run itself, as its code does, {optimistic:.3f}. The "
                     f"in-sample tuning adds {optimistic - nested:+.3f} over honest tuning.")
    combos = others[others["family"] == "combined"].sort_values("auroc_lc[pooled]", ascending=False)
    if len(combos):
        c = combos.iloc[0]
        lines.append(f"Best combination: `{c['estimator']}`, pooled AUROC {c['auroc[pooled]']:.3f}, "
                     f"length-controlled {c['auroc_lc[pooled]']:.3f} ({c['verdict']}).")
    return "\n\n".join(lines)
