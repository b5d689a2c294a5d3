"""The judges study (notebook ``15_judges``, ``params/judges.yaml``): published LLM-judge verdicts on real τ²-bench runs
against the length of the conversation, the task's failure rate in other runs and a failure detector trained on those
other runs, with what each costs; and the embedded model judging a few of the same trajectories, to show that path
end to end.

The inputs are τ²-bench judge summaries (:mod:`agentuq_nb.io.ingest.judge_summary`: one file per run and judge prompt;
the summaries of one run hold the same simulations) and the other labelled runs (:func:`read_inputs`). A task is known
by its content (:mod:`agentuq_nb.records.task_identity`): a summary holds no task text, so its (domain, task id) takes
the content key the other runs give that pair where they give exactly one. Three comparators, on the same
trajectories as the verdicts:

* **length** - the best of the length baselines;
* **the task prior** - the failure rate of the same task in the other runs (on the trajectories whose task they hold);
* **the detector** - ``train-detector`` on the other runs (:func:`train_detector`; a folder trained on the same files
  is reused), then ``predict`` on each judged run extracted into the study's run folder (:func:`detector_scores`):
  the judged runs' trajectories are in none of its training runs.

The embedded model (SmolLM2-135M, :data:`agentuq_nb.records.config.EMBEDDED_MODEL`) judges the first
``limit`` trajectories of one judged run with the outcome prompt through ``agentuq-nb judge``
(:func:`embedded_judge`; cached per trajectory, so a rerun asks nothing again): a demonstration of the path on real
trajectories, not a judge to compare with GPT-4o on merit (135M parameters, the transcript cut to a small context).

For each run and monitor (:func:`judge_rows`): the AUROC (failure = reward below the threshold) with its task-resampled
95% interval, and the paired difference from each comparator with its interval and verdict - the statistics of the
detector's protocols (:func:`agentuq_nb.evaluation.detector_protocols.protocol_comparison`,
:func:`agentuq_nb.evaluation.pooled_auroc.pooled_leaderboard`) - and the cost per trajectory. :func:`findings_record`
is what the study found, with the inputs it was measured on (``findings.json``; committed as
:data:`COMMITTED_FINDINGS`); :func:`findings` its sentences, made from it.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentuq_nb.common.wording import agreeing
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.detector_protocols import LENGTH_BASELINES, evaluation_frame, protocol_comparison, verdict
from agentuq_nb.evaluation.pooled_auroc import POOLED, pooled_leaderboard
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.results import ResultsFile, read_header
from agentuq_nb.io.ingest.score_files import read_judge_verdicts
from agentuq_nb.records import Results
from agentuq_nb.records.config import EMBEDDED_MODEL
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, failure_labels
from agentuq_nb.records.run_tables import trajectory_record
from agentuq_nb.records.task_identity import TASK_KEY, header_task_contents, resolve_id_keys
from agentuq_nb.uq.detector_features import task_key_of

#: the committed copy of the study's findings (``findings.json`` of ``params/judges.yaml``'s run)
COMMITTED_FINDINGS = "docs/findings/judges.json"
#: the monitors' kinds, in the order tables and figures show them
PUBLISHED = "published judge"
DETECTOR = "detector"
EMBEDDED = "embedded judge (path demonstration)"
#: the detector's row name
DETECTOR_NAME = "detector (trained on the other runs)"
#: the columns of :func:`judge_rows`' table, in order
COLUMNS = ["run", "prompt", "kind", "judge_model", "n", "n_failures", "auroc", "auroc_lo", "auroc_hi",
           "length_baseline", "length_auroc", "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi", "vs_length",
           "prior_n", "prior_auroc", "auroc_on_prior_rows", "diff_vs_prior", "diff_vs_prior_lo", "diff_vs_prior_hi",
           "vs_prior", "detector_auroc", "diff_vs_detector", "diff_vs_detector_lo", "diff_vs_detector_hi",
           "vs_detector", "cost_per_trajectory_usd", "total_cost_usd", "seconds_per_trajectory"]


@dataclass
class JudgeInputs:
    """What was read: ``trajectories`` (one row per trajectory of every run: ``run``, keys, ``task_key``,
    ``simulation_id``, ``failure``, the length baselines; the judged runs and the other runs), ``verdicts`` (``run``,
    ``prompt``, ``kind``, ``judge_model``, ``simulation_id``, ``score``, ``verdict``, ``cost_usd``), ``judged`` (the
    judged runs' names → the first summary of each: its trajectories), ``skipped`` (file → why); ``detector``
    (``run``, ``simulation_id``, ``score``) and what its ``predict`` reported per run, and the embedded judge's
    report, once added."""

    trajectories: pd.DataFrame
    verdicts: pd.DataFrame
    judged: dict[str, Path]
    skipped: dict[str, str] = field(default_factory=dict)
    detector: pd.DataFrame | None = None
    detector_report: dict[str, Any] = field(default_factory=dict)
    embedded_report: dict[str, Any] = field(default_factory=dict)


def _rows(path: Path, run: str, failure_threshold: float) -> pd.DataFrame:
    file = ResultsFile.open(path, tell_version=False)  # its header and its simulations: one sniff
    header = file.header
    domain = Results.domain_of(header.get("info"))
    contents = header_task_contents(header)
    records = []
    for sim in file.simulations():
        records.append({**trajectory_record(sim, domain), TASK_KEY: task_key_of(sim, contents)})
    frame = pd.DataFrame(records)
    frame["failure"] = failure_labels(frame["reward"].to_numpy(dtype=float), failure_threshold)
    return frame.assign(run=run)[["run", "domain", "task_id", TASK_KEY, "trial", "simulation_id", "reward", "failure",
                                  *LENGTH_BASELINES]]


def read_inputs(summaries: list[str | os.PathLike], other_runs: list[str | os.PathLike] = (),
                failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> JudgeInputs:
    """Read the judge summaries (grouped into runs by the simulations they hold: the first of a run is its
    trajectories) and the other runs (see the module docstring)."""
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
    tables, verdicts, judged = [], [], {}
    for files in runs.values():
        name = read_header(files[0])["info"]["environment_info"]["domain_name"]
        name = name if name not in judged else f"{name}-{len(judged)}"
        judged[name] = files[0]
        tables.append(_rows(files[0], name, failure_threshold))
        for path in files:
            v = read_judge_verdicts(path)
            verdicts.append(v.assign(run=name, prompt=v.attrs.get("prompt_name") or path.stem, kind=PUBLISHED,
                                     judge_model=v.attrs.get("judge_model")))
    for given in other_runs:
        path = Path(given)
        try:
            tables.append(_rows(path, path.stem, failure_threshold))
        except (InputError, OSError) as err:
            skipped[str(given)] = str(err)
    if not judged:
        raise InputError(summaries[0] if summaries else "judges", "no judge summary could be read: "
                         + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
    trajectories = pd.concat(tables, ignore_index=True)
    trajectories[TASK_KEY] = resolve_id_keys(trajectories["domain"].astype(str), trajectories["task_id"].astype(str),
                                             trajectories[TASK_KEY])
    return JudgeInputs(trajectories, pd.concat(verdicts, ignore_index=True), judged, skipped)


# --------------------------------------------------------------------------- the detector


def train_detector(other_runs: list[str | os.PathLike], out: str | os.PathLike, embedder: str = "minilm-static",
                   seed: int = 0, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> Path:
    """``train-detector`` on ``other_runs`` into ``out`` (the default feature groups and model; the run-disjoint
    protocol only, which calibrates its probabilities: its other protocols are notebook 14's study), unless ``out``
    already holds a detector trained on the same files (by content) with the same embedder."""
    import json

    from agentuq_nb.evaluation.detector_inputs import resolve_sources
    from agentuq_nb.steps.train_detector import TrainDetectorConfig
    from agentuq_nb.steps.train_detector import run as train

    out = Path(out)
    card = out / "card.json"
    if card.is_file():
        made = json.loads(card.read_text())
        wanted = sorted(s.sha256 for s in resolve_sources(other_runs))
        if (sorted(r.get("sha256") for r in made.get("training_runs", [])) == wanted
                and (made.get("embedder") or {}).get("name") == embedder
                and made.get("failure_threshold") == failure_threshold and made.get("seed") == seed):
            return out
    train(TrainDetectorConfig(inputs=list(other_runs), out=out, protocols=["leave_one_run_out"], n_boot=0, seed=seed,
                              embedder=embedder, failure_threshold=failure_threshold))
    return out


def judged_run_folder(run_dir: str | os.PathLike, run: str) -> Path:
    """Where a judged run is extracted in the study's run folder (its detector predictions, the embedded judge)."""
    return Path(run_dir) / "judged" / run


def extracted(inputs: JudgeInputs, run_dir: str | os.PathLike, run: str) -> Path:
    """The judged run ``run`` extracted into :func:`judged_run_folder` (once)."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.extract import extract

    folder = judged_run_folder(run_dir, run)
    if not RunDir(folder).has("trajectories"):
        extract(inputs.judged[run], folder)
    return folder


def detector_scores(inputs: JudgeInputs, detector: str | os.PathLike, run_dir: str | os.PathLike,
                    failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, seed: int = 0) -> JudgeInputs:
    """``predict`` with ``detector`` on each judged run (extracted into the study's run folder): ``inputs`` with
    its ``detector`` scores (the log-odds: the ranking of every probability it prints) and, per run, what predict
    reported (tasks seen in training, the run's estimated failure rate, seconds)."""
    from agentuq_nb.steps.predict import PredictConfig
    from agentuq_nb.steps.predict import run as predict

    parts = []
    for run in inputs.judged:
        start = time.perf_counter()
        done = predict(extracted(inputs, run_dir, run), PredictConfig(detector=detector, n_boot=0, seed=seed,
                                                                      failure_threshold=failure_threshold))
        p = done.predictions
        parts.append(pd.DataFrame({"run": run, "simulation_id": p["simulation_id"].astype(str),
                                   "score": p["log_odds"].to_numpy(dtype=float)}))
        seen = done.report.get("tasks_seen") or {}
        rate = done.report.get("failure_rate") or {}
        inputs.detector_report[run] = {
            "n": int(len(p)), "tasks_seen": seen.get("n_seen"), "by_content": seen.get("by_content"),
            "training_runs": [r.get("name") for r in done.report.get("training_runs", [])],
            "estimated_failure_rate": rate.get("estimate"), "true_failure_rate": rate.get("true_rate"),
            "seconds_per_trajectory": (time.perf_counter() - start) / max(len(p), 1)}
    inputs.detector = pd.concat(parts, ignore_index=True)
    return inputs


# --------------------------------------------------------------------------- the embedded model as a judge


def embedded_judge(inputs: JudgeInputs, run_dir: str | os.PathLike, run: str, limit: int,
                   context_tokens: int | None = 2048, prompt: str = "outcome") -> JudgeInputs:
    """The embedded model judges the first ``limit`` trajectories of the judged run ``run`` with ``prompt``
    (``agentuq-nb judge`` into the run's folder in the study's run folder: each verdict cached, a rerun asks none
    again); ``inputs`` with its verdicts (kind :data:`EMBEDDED`) and its report: verdicts asked now and cached, their
    probability's source, tokens, the seconds the verdicts asked now took."""
    from agentuq_nb.steps.judge import JudgeConfig
    from agentuq_nb.steps.judge import run as judge

    if run not in inputs.judged:
        raise ValueError(f"the embedded judge's run {run!r} is not a judged run ({', '.join(inputs.judged)})")
    folder = extracted(inputs, run_dir, run)
    start = time.perf_counter()
    report = judge(folder, JudgeConfig(results=inputs.judged[run], prompts=[prompt], limit=limit,
                                       context_tokens=context_tokens))
    seconds = time.perf_counter() - start
    table = pd.read_parquet(folder / "judge_scores.parquet")
    table = table[(table["model"] == EMBEDDED_MODEL) & (table["prompt"] == prompt)]
    name = f"SmolLM2-135M {prompt} (first {limit})"
    inputs.verdicts = pd.concat([inputs.verdicts, pd.DataFrame({
        "run": run, "prompt": name, "kind": EMBEDDED, "judge_model": EMBEDDED_MODEL,
        "simulation_id": table["simulation_id"].astype(str).to_numpy(), "score": table["score"].to_numpy(dtype=float),
        "verdict": table["verdict"].to_numpy(), "cost_usd": table["cost_usd"].to_numpy(dtype=float)})],
        ignore_index=True)
    inputs.embedded_report = {
        "run": run, "prompt": prompt, "name": name, "model": EMBEDDED_MODEL, "limit": limit,
        "context_tokens": context_tokens, "verdicts": int(len(table)), "asked_now": report.judged,
        "cached": report.cached, "logprobs": report.logprobs, "verbalized": report.verbalized,
        "unparsed": report.unparsed, "elided": report.elided,
        "p_fail_min": float(table["score"].min()) if len(table) else None,
        "p_fail_max": float(table["score"].max()) if len(table) else None,
        "prompt_tokens_per_trajectory": float(table["prompt_tokens"].mean()) if len(table) else None,
        "seconds_per_verdict_asked": seconds / report.judged if report.judged else None}
    return inputs


# --------------------------------------------------------------------------- the comparison


def paired_difference(frame: pd.DataFrame, score: str, other: str, n_boot: int, seed: int) -> dict[str, Any]:
    """``score``'s AUROC minus ``other``'s on the rows both score, with its paired task-resampled 95% interval and
    verdict (:func:`~agentuq_nb.evaluation.pooled_auroc.pooled_leaderboard` with ``other`` as the comparator)."""
    both = frame[np.isfinite(frame[score].to_numpy(dtype=float)) & np.isfinite(frame[other].to_numpy(dtype=float))]
    both = both.reset_index(drop=True)
    if both.empty or not (0 < both["failure"].sum() < len(both)):
        return {}
    board = pooled_leaderboard(both, [score], [other], n_boot=n_boot, seed=seed, runs=list(dict.fromkeys(both["run"])))
    long = board.long
    theirs = long[(long["estimator"] == other) & (long["run"] == POOLED)].iloc[0]
    c = board.comparison.set_index("estimator").loc[score]
    lo, hi = float(c["diff_vs_length_lo"]), float(c["diff_vs_length_hi"])
    return {f"{other}_auroc": float(theirs["auroc"]), f"diff_vs_{other}": float(c["diff_vs_length"]),
            f"diff_vs_{other}_lo": lo, f"diff_vs_{other}_hi": hi, f"vs_{other}": verdict(lo, hi)}


def judge_rows(inputs: JudgeInputs, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per judged run and monitor - each published prompt, the detector, the embedded judge - (columns
    :data:`COLUMNS`; see the module docstring)."""
    t = inputs.trajectories
    frame = evaluation_frame(t["run"], t["domain"], t[TASK_KEY], t["failure"], t[list(LENGTH_BASELINES)])
    detector = np.full(len(t), np.nan)
    if inputs.detector is not None:
        keyed = inputs.detector.set_index(["run", "simulation_id"])["score"]
        pairs = pd.MultiIndex.from_arrays([t["run"], t["simulation_id"].astype(str)])
        detector = keyed.reindex(pairs).to_numpy(dtype=float)
    frame["detector"] = detector
    monitors = [((run, prompt), v) for (run, prompt), v in inputs.verdicts.groupby(["run", "prompt"], sort=False)]
    if inputs.detector is not None:
        monitors += [((run, DETECTOR_NAME), None) for run in inputs.judged]
    rows = []
    for (run, prompt), v in monitors:
        on_run = (t["run"] == run).to_numpy()
        if v is None:
            score = np.where(on_run, detector, np.nan)
            kind, model, cost, seconds = DETECTOR, None, np.zeros(int(on_run.sum())), \
                inputs.detector_report.get(run, {}).get("seconds_per_trajectory")
        else:
            by_id = dict(zip(v["simulation_id"].astype(str), v["score"]))
            score = np.full(len(t), np.nan)
            score[on_run] = t.loc[on_run, "simulation_id"].astype(str).map(by_id).to_numpy(dtype=float)
            kind, model, cost = v["kind"].iloc[0], v["judge_model"].iloc[0], v["cost_usd"].to_numpy(dtype=float)
            seconds = inputs.embedded_report.get("seconds_per_verdict_asked") if kind == EMBEDDED else None
        scored = frame.assign(monitor=score)
        result = protocol_comparison(scored, "monitor", n_boot=n_boot, seed=seed)
        if v is not None and inputs.detector is not None:
            result.update(paired_difference(scored[np.isfinite(score)], "monitor", "detector", n_boot, seed))
        has_cost = np.isfinite(cost).any()
        rows.append({"run": run, "prompt": prompt, "kind": kind, "judge_model": model, **result,
                     "cost_per_trajectory_usd": float(np.nanmean(cost)) if has_cost else None,
                     "total_cost_usd": float(np.nansum(cost)) if has_cost else None,
                     "seconds_per_trajectory": seconds})
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


# --------------------------------------------------------------------------- what was read, what was found


def describe_inputs(inputs: JudgeInputs) -> str:
    """What was read, in a sentence per run, from the files themselves."""
    t = inputs.trajectories
    lines = []
    for run in inputs.judged:
        rows = t[t["run"] == run]
        prompts = inputs.verdicts.loc[(inputs.verdicts["run"] == run) & (inputs.verdicts["kind"] == PUBLISHED),
                                      "prompt"].unique()
        lines.append(f"* **{run}**: {len(rows)} trajectories, {int(rows['failure'].sum())} failed, judged with "
                     f"{len(prompts)} prompt(s) ({', '.join(prompts)})")
    others = [r for r in t["run"].unique() if r not in inputs.judged]
    if others:
        lines.append(f"* the other runs (the task prior's history and the detector's training data): {len(others)} "
                     f"runs, {int((~t['run'].isin(list(inputs.judged))).sum())} trajectories ({', '.join(others)})")
    lines += [f"* skipped {k}: {v}" for k, v in inputs.skipped.items()]
    return "\n".join(lines)


#: the table's counts (integers in the record)
COUNTS = ("n", "n_failures", "prior_n")


def _value(key: str, value):
    """A table cell as JSON: None for a missing value, an int for a count, a number to 4 decimals."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return None
    if key in COUNTS:
        return int(value)
    return round(float(value), 4) if isinstance(value, (int, float, np.number)) else value


def findings_record(table: pd.DataFrame, inputs: JudgeInputs) -> dict[str, Any]:
    """What the study found: per judged run its trajectories and failures, and per monitor its AUROC and paired
    differences from length, the task prior and the detector with their intervals and verdicts, and its cost; the
    detector's and the embedded judge's reports (``findings.json``)."""
    t = inputs.trajectories
    runs = []
    for run in inputs.judged:
        rows = t[t["run"] == run]
        monitors = []
        for _, r in table[table["run"] == run].iterrows():
            monitors.append({k: _value(k, r[k]) for k in COLUMNS if k != "run"})
        runs.append({"run": run, "trajectories": int(len(rows)), "failures": int(rows["failure"].sum()),
                     "monitors": monitors})
    others = t[~t["run"].isin(list(inputs.judged))]
    return {"study": "params/judges.yaml (notebook 15_judges)",
            "failure": "reward < the failure threshold; AUROC with failure the positive class",
            "intervals": "95%, tasks resampled (paired for differences)",
            "runs": runs,
            "other_runs": {"runs": list(dict.fromkeys(others["run"])), "trajectories": int(len(others))},
            "detector": inputs.detector_report or None, "embedded_judge": inputs.embedded_report or None}


def _ci(m: dict, key: str) -> str:
    value, lo, hi = m.get(key), m.get(f"{key}_lo"), m.get(f"{key}_hi")
    if value is None:
        return "n/a"
    return f"{value:.2f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{value:.2f}"


def _signed(m: dict, key: str) -> str:
    value, lo, hi = m.get(key), m.get(f"{key}_lo"), m.get(f"{key}_hi")
    if value is None:
        return "n/a"
    return f"{value:+.2f} [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else f"{value:+.2f}"


def _list(names: list[str]) -> str:
    return ", ".join(names) if names else "none"


def findings(record: dict[str, Any]) -> str:
    """The study's sentences, made from ``record`` (:func:`findings_record`) whichever way the numbers fell."""
    out = []
    for run in record["runs"]:
        monitors = [m for m in run["monitors"] if m.get("auroc") is not None]
        published = sorted([m for m in monitors if m["kind"] == PUBLISHED], key=lambda m: m["auroc"])
        detector = next((m for m in monitors if m["kind"] == DETECTOR), None)
        text = f"**{run['run']}** (n = {run['trajectories']}, {run['failures']} failures). "
        if published:
            worst, best = published[0], published[-1]
            text += (f"The published verdicts' AUROC runs from {_ci(worst, 'auroc')} ({worst['prompt']}) to "
                     f"{_ci(best, 'auroc')} ({best['prompt']}); the best length baseline ({best['length_baseline']}) "
                     f"reaches {best['length_auroc']:.2f}. Beating length (paired 95% interval of the difference above "
                     f"0): {_list([m['prompt'] for m in published if m.get('vs_length') == 'beats'])}; below it: "
                     f"{_list([m['prompt'] for m in published if m.get('vs_length') == 'below'])}. ")
            prior = [m for m in published if m.get("prior_auroc") is not None]
            if prior:
                text += (f"The task prior (the same task's failure rate in the other runs) covers {prior[0]['prior_n']} "
                         f"of the trajectories and reaches {prior[0]['prior_auroc']:.2f} there; each prompt minus it: "
                         + "; ".join(f"{m['prompt']} {_signed(m, 'diff_vs_prior')} ({m['vs_prior']} the prior)"
                                     for m in prior) + ". ")
            else:
                text += "No other run holds its tasks: no task prior. "
        if detector is not None:
            text += (f"The detector trained on the other runs reaches {_ci(detector, 'auroc')} "
                     f"({detector['vs_length']} length: {_signed(detector, 'diff_vs_length')})")
            text += "; each prompt minus the detector: " + "; ".join(
                f"{m['prompt']} {_signed(m, 'diff_vs_detector')} ({m['vs_detector']} the detector)"
                for m in published if m.get("diff_vs_detector") is not None) + ". "
        cost = [m["cost_per_trajectory_usd"] for m in published if m.get("cost_per_trajectory_usd") is not None]
        totals = [m["total_cost_usd"] for m in published if m.get("total_cost_usd") is not None]
        if cost:
            text += (f"GPT-4o's judging cost ${min(cost):.4f}-${max(cost):.4f} per trajectory "
                     f"(${min(totals):.2f}-${max(totals):.2f} per prompt for the run); the detector and length cost "
                     "no API call.")
        out.append(text)
    e = record.get("embedded_judge")
    if e:
        run = next(r for r in record["runs"] if r["run"] == e["run"])
        m = next((m for m in run["monitors"] if m["kind"] == EMBEDDED), {})
        text = (f"**The embedded model as a judge (a path demonstration, not a contender).** SmolLM2-135M judged the "
                f"first {e['limit']} trajectories of {e['run']} with the {e['prompt']} prompt, each transcript fitted "
                f"to {e['context_tokens']} tokens: {e['verdicts']} verdicts ({e['logprobs']} with a probability from "
                f"the verdict token's log-probs, {e['verbalized']} verbalized, {e['unparsed']} unparsed), "
                f"{m.get('n_failures', 0)} of its {m.get('n', 0)} trajectories failed. ")
        if e.get("p_fail_min") is not None and e["p_fail_min"] == e["p_fail_max"]:
            text += f"Every verdict gave P(fail) = {e['p_fail_min']:.2f}: it ranks nothing. "
        elif e.get("p_fail_min") is not None:
            text += f"Its P(fail) ran from {e['p_fail_min']:.2f} to {e['p_fail_max']:.2f}. "
        if m.get("auroc") is not None:
            text += (f"Its AUROC is {_ci(m, 'auroc')}, against {m['length_auroc']:.2f} for length on the same "
                     f"trajectories ({m['vs_length']} length)")
            published = [x for x in run["monitors"] if x["kind"] == PUBLISHED]
            text += (f"; GPT-4o's prompts reach {min(x['auroc'] for x in published):.2f}-"
                     f"{max(x['auroc'] for x in published):.2f} on the whole run. " if published else ". ")
        else:
            text += "Its AUROC is undefined on these trajectories (one class, or no verdict). "
        seconds = e.get("seconds_per_verdict_asked")
        text += ("It costs no API call" + (f"; each verdict took {seconds:.0f} s on this machine's CPU" if seconds
                                           else " (every verdict came from the cache this time)") + ".")
        out.append(text)
    return "\n\n".join(out)


@dataclass
class JudgesStudy:
    """The study's inputs, its table (:func:`judge_rows`) and its record (:func:`findings_record`)."""

    inputs: JudgeInputs
    table: pd.DataFrame
    record: dict[str, Any]


def judges_study(summaries: list[str | os.PathLike], other_runs: list[str | os.PathLike], run_dir: str | os.PathLike,
                 detector: bool = True, detector_embedder: str = "minilm-static", embedded_run: str | None = None,
                 embedded_limit: int = 0, embedded_context_tokens: int | None = 2048,
                 failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, n_boot: int = DEFAULT_N_BOOT,
                 seed: int = 0) -> JudgesStudy:
    """Notebook 15 in one call: read, train the detector on ``other_runs`` into ``run_dir/detector`` and predict on
    each judged run, let the embedded model judge ``embedded_limit`` trajectories of ``embedded_run`` (0: not),
    compare (see the module docstring)."""
    inputs = read_inputs(summaries, other_runs, failure_threshold)
    readable = [p for p in other_runs if str(p) not in inputs.skipped]
    if detector and readable:
        folder = train_detector(readable, Path(run_dir) / "detector", detector_embedder, seed, failure_threshold)
        detector_scores(inputs, folder, run_dir, failure_threshold, seed)
    if embedded_limit:
        embedded_judge(inputs, run_dir, embedded_run or next(iter(inputs.judged)), embedded_limit,
                       embedded_context_tokens)
    table = judge_rows(inputs, n_boot=n_boot, seed=seed)
    return JudgesStudy(inputs, table, findings_record(table, inputs))


def headline(record: dict[str, Any], link: str = COMMITTED_FINDINGS) -> str:
    """The guide's paragraph (``docs/guide/judges.md``), from :func:`findings_record`: per judged run the range of the
    published prompts' AUROC against length and the detector, how many prompts beat either, and their cost; the
    embedded judge's demonstration. ``link``: where the findings are, as the page links them."""
    parts = []
    for run in record["runs"]:
        monitors = [m for m in run["monitors"] if m.get("auroc") is not None]
        published = [m for m in monitors if m["kind"] == PUBLISHED]
        detector = next((m for m in monitors if m["kind"] == DETECTOR), None)
        if not published:
            continue
        text = (f"{run['run']} ({run['trajectories']} trajectories, {run['failures']} failures): the "
                f"{len(published)} prompts reach AUROC {min(m['auroc'] for m in published):.2f}-"
                f"{max(m['auroc'] for m in published):.2f}, the best length baseline "
                f"({published[0]['length_baseline']}) {published[0]['length_auroc']:.2f}")
        prior = next((m for m in published if m.get("prior_auroc") is not None), None)
        if prior is not None:
            text += f", the task prior {prior['prior_auroc']:.2f} on the {prior['prior_n']} trajectories it covers"
        if detector is not None:
            text += f", the detector {_ci(detector, 'auroc')}"
        text += (f"; {sum(m.get('vs_length') == 'beats' for m in published)} of {len(published)} prompts beat length "
                 f"and {agreeing(sum(m.get('vs_length') == 'below' for m in published), 'falls', 'fall')} below it")
        if detector is not None:
            text += (f", {agreeing(sum(m.get('vs_detector') == 'beats' for m in published), 'beats', 'beat')} the "
                     f"detector and {agreeing(sum(m.get('vs_detector') == 'below' for m in published), 'falls', 'fall')}"
                     " below it")
        cost = [m["cost_per_trajectory_usd"] for m in published if m.get("cost_per_trajectory_usd") is not None]
        if cost:
            text += f"; GPT-4o cost ${min(cost):.3f}-${max(cost):.3f} per trajectory"
        parts.append(text)
    out = ("**Published LLM-judge verdicts against length, the task prior and a detector** (`params/judges.yaml`, "
           f"notebook 15; every number with its interval: [{Path(link).name}]({link})). " + ". ".join(parts) + ".")
    e = record.get("embedded_judge")
    if e:
        run = next(r for r in record["runs"] if r["run"] == e["run"])
        m = next((m for m in run["monitors"] if m["kind"] == EMBEDDED), {})
        auroc = f"AUROC {_ci(m, 'auroc')}" if m.get("auroc") is not None else "AUROC undefined"
        out += (f" The embedded SmolLM2-135M, as a path demonstration, judged the first {e['limit']} {e['run']} "
                f"trajectories with the {e['prompt']} prompt at {e['context_tokens']} tokens: {e['verdicts']} verdicts "
                f"({e['unparsed']} answers without one), {auroc}"
                + (f", every one P(fail) = {e['p_fail_min']:.2f}" if e.get("p_fail_min") is not None
                   and e["p_fail_min"] == e["p_fail_max"] else "") + ", no API cost.")
    return out
