"""The judges study (notebook ``15_judges``, ``params/judges.yaml``): published LLM-judge verdicts on real τ²-bench runs
against the length of the conversation and the task's failure rate in other runs, with their cost.

The inputs are τ²-bench judge summaries (:mod:`agentuq_nb.io.ingest.judge_summary`: one file per run and judge prompt;
the summaries of one run hold the same simulations) and other labelled runs that give the task prior. For each run and
prompt (:func:`judge_rows`): the verdict's AUROC (failure 1, pass 0: :func:`agentuq_nb.io.ingest.score_files.verdict_score`)
with its task-resampled 95% interval, the best length baseline's and the paired difference from it, the task prior's
(the failure rate of the same domain and task id in the other runs given, where one holds it) and the paired
difference from it on the trajectories it covers - the statistics of the detector's protocols
(:func:`agentuq_nb.evaluation.detector_protocols.protocol_comparison`) - and what judging cost: per trajectory and in
all (the file's ``judge_cost_usd``). Files that are absent are skipped with the reason; what was read is said from the
files themselves. Nothing is written but the figure the notebook saves.
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.detector_protocols import LENGTH_BASELINES, evaluation_frame, protocol_comparison
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.ingest.score_files import read_judge_verdicts
from agentuq_nb.records import Results
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, failure_labels
from agentuq_nb.records.run_tables import trajectory_record

#: the columns of :func:`judge_rows`' table, in order
COLUMNS = ["run", "prompt", "judge_model", "n", "n_failures", "auroc", "auroc_lo", "auroc_hi", "length_baseline",
           "length_auroc", "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi", "vs_length", "prior_n",
           "prior_auroc", "auroc_on_prior_rows", "diff_vs_prior", "diff_vs_prior_lo", "diff_vs_prior_hi", "vs_prior",
           "cost_per_trajectory_usd", "total_cost_usd"]


@dataclass
class JudgeInputs:
    """What was read: ``trajectories`` (one row per trajectory of every run: ``run``, keys, ``simulation_id``,
    ``failure``, the length baselines; the judged runs and the prior runs), ``verdicts`` (``run``, ``prompt``,
    ``simulation_id``, ``score``, ``verdict``, ``cost_usd``), ``judged`` (the judged runs' names), ``skipped``
    (file → why)."""

    trajectories: pd.DataFrame
    verdicts: pd.DataFrame
    judged: list[str]
    skipped: dict[str, str] = field(default_factory=dict)


def _rows(path: Path, run: str, failure_threshold: float) -> pd.DataFrame:
    domain = Results.domain_of(read_header(path).get("info"))
    frame = pd.DataFrame([trajectory_record(s, domain) for s in iter_simulations(path)])
    frame["failure"] = failure_labels(frame["reward"].to_numpy(dtype=float), failure_threshold)
    return frame.assign(run=run)[["run", "domain", "task_id", "trial", "simulation_id", "reward", "failure",
                                  *LENGTH_BASELINES]]


def read_inputs(summaries: list[str | os.PathLike], prior_runs: list[str | os.PathLike] = (),
                failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> JudgeInputs:
    """Read the judge summaries (grouped into runs by the simulations they hold: the first of a run is its
    trajectories) and the prior runs (see the module docstring)."""
    skipped: dict[str, str] = {}
    runs: dict[frozenset, list[Path]] = defaultdict(list)
    for given in summaries:
        path = Path(given)
        if not path.is_file():
            skipped[str(given)] = "not found"
            continue
        if not judge_summary.is_judge_summary(path):
            skipped[str(given)] = "not a τ²-bench judge summary"
            continue
        runs[judge_summary.simulation_ids(path)].append(path)
    tables, verdicts, judged = [], [], []
    for files in runs.values():
        header = read_header(files[0])["info"]
        name = header["environment_info"]["domain_name"]
        name = name if name not in judged else f"{name}-{len(judged)}"
        judged.append(name)
        tables.append(_rows(files[0], name, failure_threshold))
        for path in files:
            v = read_judge_verdicts(path)
            verdicts.append(v.assign(run=name, prompt=v.attrs.get("prompt_name") or path.stem,
                                     judge_model=v.attrs.get("judge_model")))
    for given in prior_runs:
        path = Path(given)
        try:
            tables.append(_rows(path, path.stem, failure_threshold))
        except (InputError, OSError) as err:
            skipped[str(given)] = str(err)
    if not judged:
        raise InputError(summaries[0] if summaries else "judges", "no judge summary could be read: "
                         + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    return JudgeInputs(pd.concat(tables, ignore_index=True), pd.concat(verdicts, ignore_index=True), judged, skipped)


def judge_rows(inputs: JudgeInputs, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per judged run and prompt (columns :data:`COLUMNS`; see the module docstring)."""
    t = inputs.trajectories
    frame = evaluation_frame(t["run"], t["domain"], t["task_id"], t["failure"], t[list(LENGTH_BASELINES)])
    rows = []
    for (run, prompt), v in inputs.verdicts.groupby(["run", "prompt"], sort=False):
        on_run = (t["run"] == run).to_numpy()
        score = pd.Series(np.nan, index=t.index)
        score[on_run] = t.loc[on_run, "simulation_id"].map(dict(zip(v["simulation_id"], v["score"]))).to_numpy()
        result = protocol_comparison(frame.assign(judge=score.to_numpy(dtype=float)), "judge", n_boot=n_boot,
                                     seed=seed)
        cost = v["cost_usd"].to_numpy(dtype=float)
        rows.append({"run": run, "prompt": prompt, "judge_model": v["judge_model"].iloc[0], **result,
                     "cost_per_trajectory_usd": float(np.nanmean(cost)) if np.isfinite(cost).any() else None,
                     "total_cost_usd": float(np.nansum(cost)) if np.isfinite(cost).any() else None})
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def describe_inputs(inputs: JudgeInputs) -> str:
    """What was read, in a sentence per run, from the files themselves."""
    t = inputs.trajectories
    lines = []
    for run in inputs.judged:
        rows = t[t["run"] == run]
        prompts = inputs.verdicts.loc[inputs.verdicts["run"] == run, "prompt"].unique()
        lines.append(f"* **{run}**: {len(rows)} trajectories, {int(rows['failure'].sum())} failed, judged with "
                     f"{len(prompts)} prompt(s) ({', '.join(prompts)})")
    others = [r for r in t["run"].unique() if r not in inputs.judged]
    if others:
        lines.append(f"* the task prior from {len(others)} other run(s): {', '.join(others)} "
                     f"({int((~t['run'].isin(inputs.judged)).sum())} trajectories)")
    lines += [f"* skipped {k}: {v}" for k, v in inputs.skipped.items()]
    return "\n".join(lines)


def _ci(row, key: str) -> str:
    value, lo, hi = row.get(key), row.get(f"{key}_lo"), row.get(f"{key}_hi")
    if value is None or not np.isfinite(value):
        return "n/a"
    return f"{value:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and np.isfinite(lo) else f"{value:.2f}"


def findings(table: pd.DataFrame) -> str:
    """The study's sentences, made from ``table`` (:func:`judge_rows`) whichever way the numbers fell."""
    out = []
    for run, rows in table.groupby("run", sort=False):
        rows = rows.sort_values("auroc", ascending=False)
        best, worst = rows.iloc[0], rows.iloc[-1]
        beats = rows[rows["vs_length"] == "beats"]["prompt"].tolist()
        below = rows[rows["vs_length"] == "below"]["prompt"].tolist()
        text = (f"**{run}** (n = {int(best['n'])}, {int(best['n_failures'])} failures): the verdicts' AUROC runs from "
                f"{_ci(worst, 'auroc')} ({worst['prompt']}) to {_ci(best, 'auroc')} ({best['prompt']}); the best "
                f"length baseline ({best['length_baseline']}) reaches {best['length_auroc']:.2f}. ")
        text += (f"Beating length (the paired 95% interval above 0): {', '.join(beats)}. " if beats else
                 "No prompt beats length (no paired 95% interval of the difference lies above 0). ")
        if below:
            text += f"Below length: {', '.join(below)}. "
        prior = rows[rows["prior_n"].fillna(0) > 0]
        if len(prior):
            p = prior.iloc[0]
            text += (f"The task prior covers {int(p['prior_n'])} of its trajectories, where it reaches "
                     f"{p['prior_auroc']:.2f}; against it: "
                     + ", ".join(f"{r['prompt']} {r['diff_vs_prior']:+.2f} ({r['vs_prior']} the prior)"
                                 for _, r in prior.iterrows()) + ". ")
        else:
            text += "No other run given holds its tasks: no task prior. "
        cost = rows["cost_per_trajectory_usd"].dropna()
        if len(cost):
            text += (f"Judging cost ${cost.min():.4f}-${cost.max():.4f} per trajectory "
                     f"(${rows['total_cost_usd'].min():.2f}-${rows['total_cost_usd'].max():.2f} per prompt for the run).")
        out.append(text)
    return "\n\n".join(out)
