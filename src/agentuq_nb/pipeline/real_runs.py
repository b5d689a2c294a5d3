"""The real-runs study (notebook ``13_real_runs``, ``params/real_runs.yaml``): several results files recorded
without log-probs, each analysed as ``agentuq-nb analyze`` does (extract, the black-box families, the estimator
table), then compared across runs (``compare-runs``).

Each file becomes the run folder ``<run_dir>/runs/<file stem>``; the cross-run leaderboard goes to
``<run_dir>/leaderboard``. Files that are absent, or that this version cannot read, are skipped with the reason
(the shared real runs live beside the repository, not in it); what was analysed is said from the runs themselves
(:func:`describe_runs`), never from a count written by hand.

What the study found is one record (:func:`findings_record`: every headline number with the runs it was measured
on), written as ``findings.json`` beside the figures (:func:`agentuq_nb.pipeline.findings.write_findings`); the notebook's sentences
(:func:`findings`) are made from it, and the README's and the guide's headline numbers are checked against the
committed copy of it (``docs/findings/real_runs.json``, :data:`COMMITTED_FINDINGS`) by the tests.
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.estimators.base import combination_families, reference_families
from agentuq_nb.evaluation.calibration import reliability_table
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.io.store.artifacts import read_json_artifact
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.blackbox import BlackBoxConfig
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
            outcomes = run.outcomes()
            report = read_json_artifact(run, "blackbox_report")
            rows.append({"run": name, "title": run.manifest().title() or name, "domain": run.manifest().domain,
                         "trajectories": len(outcomes),
                         "failures": int(outcomes.failed.sum()), "messages": report["messages"],
                         "seconds": round(self.seconds[name], 1), "embed_seconds": report["embed_seconds"]})
        return pd.DataFrame(rows)


def analyse_results(files: list[str | os.PathLike], run_dir: str | os.PathLike, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                    n_boot: int = DEFAULT_N_BOOT, seed: int = 0, embedder: str = "minilm",
                    gbm_grid: dict[str, list] | None = None) -> AnalysedRuns:
    """Each results file → ``run_dir/runs/<stem>``: extract, black-box families, estimator table (``gbm_grid``: the
    combined predictors' gradient boosting grid, None the default one). A file that is absent or that this version
    cannot read (``InputError``: a shape it does not know) is skipped with its reason."""
    from agentuq_nb.io.errors import InputError

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
            try:
                extract(file, run)
            except InputError as err:
                out.skipped[file.stem] = f"not read by this version: {err}"
                continue
        compare_estimators(run, failure_threshold=failure_threshold, n_boot=n_boot, seed=seed, blackbox=config,
                           gbm_grid=gbm_grid)
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
        labelled = key_dtypes(run.outcomes(failure_threshold).frame())  # keys, reward, failed: labelled once
        frame = labelled.merge(key_dtypes(scores), on=TRAJECTORY_KEYS, how="left")
        frames.append(frame.assign(run=name, failed=frame.pop("failed")))
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
    frame = key_dtypes(r.outcomes(failure_threshold).frame()).merge(scores, on=TRAJECTORY_KEYS)
    frame = frame[frame["failed"]].drop(columns="failed").sort_values("tracer_default", ascending=False)
    if frame.empty:
        raise ValueError(f"{run}: no failed trajectory to show")
    return tuple(frame.iloc[min(rank, len(frame) - 1)][TRAJECTORY_KEYS])


#: the committed copy of the study's findings, which the README's and the guide's headline numbers are checked against
COMMITTED_FINDINGS = "docs/findings/real_runs.json"
#: the file the notebook writes beside its figures (copy it to :data:`COMMITTED_FINDINGS` with the README's numbers)


def describe_runs(summary: pd.DataFrame) -> str:
    """What the study analysed, from the runs themselves (:meth:`AnalysedRuns.summary`): how many runs,
    trajectories and failures, each run's agent and domain."""
    if summary.empty:
        return "**No run was analysed** (see the skipped files above)."
    listed = "; ".join(f"{r.title} ({r.trajectories} trajectories, {r.failures} failed)" for r in summary.itertuples())
    return (f"**{len(summary)} runs, {int(summary['trajectories'].sum())} trajectories, "
            f"{int(summary['failures'].sum())} failures**, none with token log-probs: {listed}.")


def _pooled(table: pd.DataFrame, estimator: str, metric: str = "auroc") -> float:
    row = table[table["estimator"] == estimator]
    return float(row[f"{metric}[pooled]"].iloc[0]) if len(row) else float("nan")


def _three(x) -> str | None:
    return f"{float(x):.3f}" if pd.notna(x) and np.isfinite(float(x)) else None


def findings_record(leaderboard: pd.DataFrame, summary: pd.DataFrame | None = None, q: float = 0.1) -> dict:
    """Every headline number of the study, as the notebook and the README print them (AUROCs to three decimals,
    q-values to two significant digits), with the runs they were measured on (``summary``:
    :meth:`AnalysedRuns.summary`; else only the run names the leaderboard holds)."""
    from agentuq_nb.figures.run_leaderboard import q_text

    t = leaderboard
    names = [c[len("n["):-1] for c in t.columns if c.startswith("n[") and c != "n[pooled]"]
    if summary is not None and len(summary):
        runs = [{"run": r.run, "agent_and_domain": r.title, "trajectories": int(r.trajectories),
                 "failures": int(r.failures)} for r in summary.itertuples()]
    else:
        runs = [{"run": name} for name in names]
    record: dict = {"study": "params/real_runs.yaml (notebook 13_real_runs)", "runs": runs, "n_runs": len(names),
                    "n_trajectories": int(t["n[pooled]"].max()), "n_failures": int(t["n_failures[pooled]"].max()),
                    "fdr_level_q": f"{q:g}", "interval": "95 % percentile bootstrap, tasks resampled within runs"}
    base = t[t["family"].isin(reference_families())].sort_values("auroc[pooled]", ascending=False)
    if len(base):
        b = base.iloc[0]
        record["length"] = {"estimator": b["estimator"], "pooled_auroc": _three(b["auroc[pooled]"]),
                            "ci": [_three(b["auroc_lo[pooled]"]), _three(b["auroc_hi[pooled]"])]}
    others = t[~t["family"].isin(reference_families())]
    tested = others[others["verdict"].isin(["beats length", "below length", "not distinguishable from length"])]
    record["tested"] = {"estimators": int(len(tested)),
                        "beat_length": sorted(tested.loc[tested["verdict"] == "beats length", "estimator"]),
                        "below_length": int((tested["verdict"] == "below length").sum())}
    if len(tested):
        top = tested.sort_values("auroc_lc[pooled]", ascending=False).iloc[0]
        record["top"] = {"estimator": top["estimator"], "pooled_auroc": _three(top["auroc[pooled]"]),
                         "pooled_auroc_lc": _three(top["auroc_lc[pooled]"]), "compared_with": top["length_baseline_lc"],
                         "compared_auroc_lc": _three(_pooled(t, top["length_baseline_lc"], "auroc_lc")),
                         "diff_lc": f"{top['diff_lc_vs_length']:+.3f}",
                         "diff_lc_ci": [f"{top['diff_lc_vs_length_lo']:+.3f}", f"{top['diff_lc_vs_length_hi']:+.3f}"],
                         "p": q_text(top["p_value"]), "q": q_text(top["q_value"]), "verdict": top["verdict"]}
    readouts = {k: t[t["estimator"] == f"tracer.{k}"] for k in ("default", "nested", "optimistic")}
    if all(len(r) for r in readouts.values()):
        tracer = {}
        for k, row in readouts.items():
            r = row.iloc[0]
            tracer[k] = {"pooled_auroc": _three(r["auroc[pooled]"]),
                         "ci": [_three(r["auroc_lo[pooled]"]), _three(r["auroc_hi[pooled]"])]}
        gain = float(readouts["optimistic"].iloc[0]["auroc[pooled]"] - readouts["nested"].iloc[0]["auroc[pooled]"])
        tracer["in_sample_gain"] = f"{gain:+.3f}"
        lo, hi = (float(x) for x in tracer["nested"]["ci"])
        tracer["nested_interval_holds_chance"] = bool(lo <= 0.5 <= hi)
        record["tracer"] = tracer
    combos = others[others["family"].isin(combination_families())].sort_values("auroc_lc[pooled]", ascending=False)
    if len(combos):
        c = combos.iloc[0]
        record["best_combination"] = {"estimator": c["estimator"], "pooled_auroc": _three(c["auroc[pooled]"]),
                                      "pooled_auroc_lc": _three(c["auroc_lc[pooled]"]), "verdict": c["verdict"]}
    return record


def findings(leaderboard: pd.DataFrame, summary: pd.DataFrame | None = None, q: float = 0.1) -> str:
    """What the cross-run leaderboard shows, in sentences made from :func:`findings_record` (so the text cannot go
    stale and says the same as the committed findings): the runs, the best length baseline, the estimators that
    beat it after FDR control (or none), TRACER's three readouts, and the best combination."""
    r = findings_record(leaderboard, summary, q)
    lines = [f"**{r['n_runs']} runs, {r['n_trajectories']} trajectories, {r['n_failures']} failures.** Pooled AUROCs "
             "compare failures and successes of the same run only; intervals resample tasks within runs."]
    if "length" in r:
        b = r["length"]
        lines.append(f"Length alone: `{b['estimator']}` reaches a pooled AUROC of {b['pooled_auroc']} "
                     f"[{b['ci'][0]}, {b['ci'][1]}].")
    tested = r["tested"]
    if tested["beat_length"]:
        lines.append(f"{len(tested['beat_length'])} of {tested['estimators']} tested estimators beat the best length "
                     "baseline on the pooled length-controlled AUROC after Benjamini–Hochberg control: "
                     + ", ".join(f"`{e}`" for e in tested["beat_length"]) + ".")
    else:
        lines.append(f"None of the {tested['estimators']} tested estimators beats the best length baseline on the pooled "
                     f"length-controlled AUROC after Benjamini–Hochberg control ({tested['below_length']} are "
                     "significantly below it); estimators tuned in-sample are not tested.")
    if "top" in r:
        top = r["top"]
        lines.append(f"The highest pooled length-controlled AUROC is `{top['estimator']}`'s, {top['pooled_auroc_lc']} "
                     f"(raw {top['pooled_auroc']}), against {top['compared_auroc_lc']} for the best length baseline, "
                     f"`{top['compared_with']}`: {top['diff_lc']} [{top['diff_lc_ci'][0]}, {top['diff_lc_ci'][1]}], "
                     f"p = {top['p']}, q = {top['q']}.")
    if "tracer" in r:
        tr = r["tracer"]
        chance = ("its interval holds chance (0.5)" if tr["nested_interval_holds_chance"]
                  else "its interval excludes chance (0.5)")
        lines.append(f"TRACER, pooled AUROC on these runs: default parameters {tr['default']['pooled_auroc']}; tuned on "
                     f"other tasks (nested) {tr['nested']['pooled_auroc']} [{tr['nested']['ci'][0]}, "
                     f"{tr['nested']['ci'][1]}], {chance}; tuned on the evaluated run itself, as its code does, "
                     f"{tr['optimistic']['pooled_auroc']}. The in-sample tuning adds {tr['in_sample_gain']} over honest "
                     "tuning on these runs.")
    if "best_combination" in r:
        c = r["best_combination"]
        lines.append(f"Best combination: `{c['estimator']}`, pooled AUROC {c['pooled_auroc']}, length-controlled "
                     f"{c['pooled_auroc_lc']} ({c['verdict']}).")
    return "\n\n".join(lines)
