"""``agentuq-nb compare-runs``: one estimator leaderboard across several run folders.

AgentPulse's distribution-free evaluation with FDR control (:mod:`agentuq_nb.evaluation.agent_comparison` applies
it to agents) applied to *estimators*: every estimator the runs share is scored on each run and pooled over the
runs, its difference from the best length baseline is tested by a paired bootstrap, and Benjamini-Hochberg controls
the false discovery rate over the estimators. The statistics (definitions, bootstrap, test) are
:mod:`agentuq_nb.evaluation.pooled_auroc`'s; this module reads the run folders and writes the output folder.

* **Which estimators.** Those available in *every* run (``--estimator`` restricts them; one that some run lacks is
  refused): a pooled number then always covers the same runs, so the leaderboard compares like with like. The
  others are listed in the JSON (``left_out``, with the runs that lack them). The length baselines
  (``num_messages``, ``num_tool_calls``, ``agent_chars``) the runs share are always rows - they are the
  comparators. The estimator table's combined predictors are here too, through their out-of-fold probabilities
  (``combined_scores.parquet``, read back by the ``combined`` estimators): each fitted on its own run.
* **In-sample estimators** (``tracer.optimistic``: tuned on the labels it is evaluated on) are rows, marked
  (``protocol``, ``in_sample``), but never tested against length nor counted in the FDR family.
* **Per run** the numbers are the estimator table's (``estimator_table.csv``): same trajectories (finite reward),
  same failure label, ``auroc`` = its ``auroc``, ``auroc_lc`` = its ``auroc_stratified`` (the run's
  message-count strata, :func:`~agentuq_nb.evaluation.length_control.length_strata`). Their CIs come from this
  command's own resampling (tasks within the run), not bit-identical to the table's.
* **Reading only.** Runs are read through :class:`~agentuq_nb.io.store.rundir.RunDir` (checked reads), never locked
  or written; the commits of the tables read are taken from each manifest before and after reading, and a run
  whose tables were replaced meanwhile is refused (read again).
* **Output** (a plain folder, not a run folder; refused when it is an input run folder, inside one, a run folder
  or a file): ``run_leaderboard.csv`` (one row per estimator), ``run_leaderboard_long.csv`` (estimator x run and
  ``pooled``), the figure (:func:`draw_run_leaderboard`), the page ``report.html`` (:func:`write_report`), and
  ``run_leaderboard.json`` last: the inputs (run
  paths, their manifests' source and the commits of the tables read), threshold, seed, q, and the SHA-256 of
  every file written with it.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
from pydantic import Field

from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
from agentuq_nb.estimators import BASELINES, Estimator, get
from agentuq_nb.estimators import estimators as run_estimators
from agentuq_nb.estimators.base import reference_families
from agentuq_nb.estimators.scores import score_table, with_length_columns
from agentuq_nb.evaluation.defaults import DEFAULT_FDR_Q, DEFAULT_N_BOOT
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import read_limited_json
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.outputs import check_output_folder
from agentuq_nb.io.store.run_lock import RunBusyError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, check_failure_threshold
from agentuq_nb.steps.base import Command, FailureThresholdField, NBootField, Reporter, SeedField, Step, StepConfig
from agentuq_nb.steps.provenance import package_version

STEP = Step("compare-runs", "agentuq-nb compare-runs RUN_DIR ... --out OUT", run_folder=False)
#: the files written to the output folder (the figure's are the caller's: ``FIGURE_NAME``.png/.pdf)
OUTPUTS = {"leaderboard": "run_leaderboard.csv", "long": "run_leaderboard_long.csv", "inputs": "run_leaderboard.json",
           "report": "report.html"}
FIGURE_NAME = "run_leaderboard"
#: the tables every run is read for besides its estimators' ``requires`` (the rewards and the lengths)
TRAJECTORY_TABLES = ("trajectories", "trajectory_summary")


@dataclass
class RunLeaderboard:
    """What ``compare-runs`` computed: the wide ``leaderboard`` (ordered, ``rank`` 1 = highest pooled
    length-controlled AUROC), the tidy ``long`` table, ``runs`` (name, title - model · domain -, path, n_trajectories,
    n_failures, n_tasks),
    the chosen comparators ``baselines``, the JSON-ready ``inputs`` and the ``notes`` to tell the user."""

    leaderboard: pd.DataFrame
    long: pd.DataFrame
    runs: pd.DataFrame
    baselines: dict
    inputs: dict
    notes: list[str] = field(default_factory=list)

    @property
    def q(self) -> float:
        return self.inputs["q"]

    @property
    def failure_threshold(self) -> float:
        return self.inputs["failure_threshold"]


def run_titles(names: Sequence[str], titles: Sequence[str | None]) -> list[str]:
    """How tables and figures head each run: its agent's model and domain from the results' metadata
    (:meth:`~agentuq_nb.io.store.rundir.Manifest.title`), with the run's name beside it where two runs share a
    title, and the name alone where the results name neither."""
    shared = {t for t in titles if t and list(titles).count(t) > 1}
    return [name if not title else f"{title} ({name})" if title in shared else title
            for name, title in zip(names, titles)]


def check_out_folder(out: str | os.PathLike, run_dirs: Sequence[str | os.PathLike], force: bool = False) -> Path:
    """Refuse an output folder that is a file (or under one), a link, a run folder, an input run folder or inside one,
    or that holds a file of the leaderboard's names this command did not write (unless ``force``): the rule of
    :mod:`agentuq_nb.io.outputs`. Returns it resolved; nothing is made here."""
    out = Path(out)
    resolved = Path(os.path.abspath(out)).resolve()
    for run in run_dirs:
        run_path = Path(run).resolve()
        if resolved == run_path or run_path in resolved.parents:
            where = "is" if resolved == run_path else "is inside"
            raise InputError(out, f"{where} the input run folder {run}: '{STEP.name}' only reads run folders; "
                                  "write the leaderboard to a folder of its own")
    check_output_folder(out, command=STEP.name, files=[*OUTPUTS.values(), f"{FIGURE_NAME}.png", f"{FIGURE_NAME}.pdf"],
                        made_before=lambda path: listed_output(path), inputs=run_dirs, force=force)
    return resolved


def listed_output(path: Path) -> bool:
    """Whether ``path`` is a file an earlier ``compare-runs`` wrote: its folder's record (``OUTPUTS['inputs']``)
    lists it with the SHA-256 it still has."""
    record = path.parent / OUTPUTS["inputs"]
    if path.name == OUTPUTS["inputs"]:
        record = path
    try:
        outputs = read_limited_json(record, MAX_SMALL_JSON_BYTES, "compare-runs record").get("outputs")
    except (InputError, AttributeError):
        return False
    if not isinstance(outputs, dict):
        return False
    return path.name == OUTPUTS["inputs"] or outputs.get(path.name) == sha256(path)


def _check_runs(run_dirs: Sequence[str | os.PathLike]) -> list[RunDir]:
    if not run_dirs:
        raise ValueError(f"'{STEP.name}' needs at least one run folder")
    runs, seen = [], {}  # by resolved path and by results content
    for path in run_dirs:
        run = RunDir(path)
        run.require_folder(STEP.name)
        key = run.path.resolve()
        if key in seen:
            raise InputError(run.path, f"is given twice (also as {seen[key]}): each run counts once")
        seen[key] = run.path
        content = run.manifest().results_sha256  # a run is its results' content: a copy's run is the same run
        if content is not None and content in seen:
            raise InputError(run.path, f"was made from the same results as {seen[content]} (their content is one): "
                                       "each run counts once")
        if content is not None:
            seen[content] = run.path
        if not any(run.has(name) for name in TRAJECTORY_TABLES):
            raise InputError(run.path, "holds no trajectories (no trajectories.parquet or trajectory_summary.parquet):"
                                       f" make them with 'agentuq-nb extract RESULTS --out {run.path}'")
        runs.append(run)
    _check_judged_once(runs)
    return sorted(runs, key=lambda r: str(r.path.resolve()))  # the same leaderboard whatever order they came in


def _check_judged_once(runs: Sequence[RunDir]) -> None:
    """Refuse runs made from judge summaries of one run (one per judge prompt): the same trajectories twice."""
    judged: list[tuple[RunDir, set]] = []
    for run in runs:
        if run.manifest().layout != judge_summary.LAYOUT:
            continue
        ids = set(run.read_frame("trajectories")["simulation_id"].dropna().astype(str))
        for other, other_ids in judged:
            if ids & other_ids:
                raise InputError(run.path, judge_summary.same_run_message(len(ids & other_ids), str(other.path)))
        judged.append((run, ids))


def shared_estimators(runs: Sequence[RunDir], names: Sequence[str] | None = None,
                      labels: Sequence[str] | None = None) -> tuple[list[Estimator], list[Estimator], dict]:
    """``(candidates, baselines, left_out)``: the non-baseline estimators available in every run (``names``
    only, refused when a run lacks one), the length baselines available in every run, and the estimators some
    runs lack ``{name: [runs without it]}``."""
    labels = list(labels) if labels is not None else [str(r.path) for r in runs]
    found = [{e.name: e for e in run_estimators(run)} for run in runs]
    order = list(dict.fromkeys(name for f in found for name in f))
    shared = [name for name in order if all(name in f for f in found)]
    left_out = {name: [label for label, f in zip(labels, found) if name not in f]
                for name in order if name not in shared}
    if names is not None:
        for name in names:
            get(name)  # an unknown name: KeyError with the close names
            for run, f in zip(runs, found):
                if name not in f:
                    raise InputError(run.path, f"holds no data for estimator {name!r}: '{STEP.name}' compares an "
                                               "estimator on every run given")
        candidates = [found[0][name] for name in dict.fromkeys(names) if name not in BASELINES]
    else:
        candidates = [found[0][name] for name in shared if found[0][name].family not in reference_families()]
    baselines = [found[0][name] for name in BASELINES if name in shared]
    return candidates, baselines, left_out


def _inputs_read(run: RunDir, estimators: Sequence[Estimator]) -> list[str]:
    names = [*TRAJECTORY_TABLES, *(name for e in estimators for name in e.requires)]
    return [name for name in dict.fromkeys(names) if run.has(name)]


def read_run(run: RunDir, name: str, estimators: Sequence[Estimator],
             failure_threshold: float) -> tuple[pd.DataFrame, dict]:
    """One run's rows of the leaderboard frame (:mod:`agentuq_nb.evaluation.pooled_auroc`: run, task, failure,
    length_stratum and the oriented score of each estimator) and what was read ``{"tables": {file: commit}, ...}``."""
    from agentuq_nb.evaluation.calibration import oriented
    from agentuq_nb.evaluation.estimator_table import LENGTH_COLUMN
    from agentuq_nb.evaluation.length_control import DEFAULT_STRATA, length_strata
    from agentuq_nb.evaluation.multi_trial import task_labels

    tables = _inputs_read(run, estimators)
    before = run.based_on(*tables)
    table, _ = score_table(run, [e.name for e in estimators], run.outcomes(failure_threshold))  # labelled once
    table = with_length_columns(run, table)
    table = table[np.isfinite(table["reward"].to_numpy(dtype=float))].reset_index(drop=True)
    run.forget_cache()
    if run.based_on(*tables) != before:
        raise RunBusyError(f"{run.path}: its tables were replaced while '{STEP.name}' read them; run it again")
    if table.empty:
        raise InputError(run.path, "holds no trajectory with a finite reward")
    frame = pd.DataFrame({"run": name, "task": task_labels(table),
                          "failure": table["failed"].to_numpy(dtype=bool),
                          "length_stratum": (length_strata(table[LENGTH_COLUMN], DEFAULT_STRATA)
                                             if LENGTH_COLUMN in table.columns else -1)})
    for e in estimators:
        frame[e.name] = oriented(table[e.name], e.invert)
    manifest = run.manifest()
    return frame, {"name": name, "path": str(run.path.resolve()), "results": manifest.results,
                   "results_sha256": manifest.results_sha256, "title": manifest.title(),
                   "domain": manifest.domain, "models": manifest.models, "manifest_created_at": manifest.created_at,
                   "tables": {rel: before.get(rel) for rel in (run.relative(t) for t in tables)}}


def build_run_leaderboard(run_dirs: Sequence[str | os.PathLike], failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, n_boot: int = DEFAULT_N_BOOT,
                    seed: int = 0, names: Sequence[str] | None = None, q: float = DEFAULT_FDR_Q) -> RunLeaderboard:
    """Read the runs and compute the leaderboard (see the module docstring); writes nothing."""
    from agentuq_nb.evaluation.estimator_table import LENGTH_COLUMN
    from agentuq_nb.evaluation.length_control import DEFAULT_STRATA
    from agentuq_nb.evaluation.pooled_auroc import check_fdr_level, leaderboard_table, pooled_leaderboard, run_names

    check_failure_threshold(failure_threshold)
    check_fdr_level(q)
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, not {n_boot}")
    runs = _check_runs(run_dirs)
    labels = run_names([r.path for r in runs])
    candidates, baselines, left_out = shared_estimators(runs, names, labels)
    chosen = [*candidates, *baselines]
    if not chosen:
        raise InputError(runs[0].path, f"no estimator is available in every run given (left out: "
                                       f"{', '.join(left_out) or 'none found'}); see 'agentuq-nb estimators RUN_DIR'")
    frames, read = [], []
    for run, label in zip(runs, labels):
        frame, info = read_run(run, label, chosen, failure_threshold)
        frames.append(frame)
        read.append(info)
    frame = pd.concat(frames, ignore_index=True)
    result = pooled_leaderboard(frame, [e.name for e in candidates], [e.name for e in baselines],
                                n_boot=n_boot, seed=seed, q=q, runs=labels,
                                in_sample=[e.name for e in candidates if e.in_sample], stratified_on=LENGTH_COLUMN)
    meta = pd.DataFrame({"estimator": [e.name for e in chosen], "family": [e.family for e in chosen],
                         "protocol": [e.protocol for e in chosen], "in_sample": [e.in_sample for e in chosen],
                         "orientation": [e.orientation for e in chosen], "invert": [e.invert for e in chosen]})
    table = leaderboard_table(result, meta, labels)
    long = meta[["estimator", "family"]].merge(result.long, on="estimator", how="right")
    run_info = pd.DataFrame({"run": labels, "title": run_titles(labels, [info["title"] for info in read]),
                             "path": [info["path"] for info in read],
                             "n_trajectories": [int((frame["run"] == r).sum()) for r in labels],
                             "n_failures": [int(frame.loc[frame["run"] == r, "failure"].sum()) for r in labels],
                             "n_tasks": [int(frame.loc[frame["run"] == r, "task"].nunique()) for r in labels]})
    for info, (_, row) in zip(read, run_info.iterrows()):
        info.update(n_trajectories=int(row["n_trajectories"]), n_failures=int(row["n_failures"]),
                    n_tasks=int(row["n_tasks"]))
    notes = _notes(run_info, candidates, baselines, left_out, result.baselines, failure_threshold)
    inputs = {"command": STEP.name, "agentuq_nb": package_version(),
              "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "runs": read, "failure_threshold": float(failure_threshold), "n_boot": int(n_boot), "seed": int(seed),
              "q": float(q), "ci": 0.95, "length_strata": DEFAULT_STRATA, "estimators": [e.name for e in candidates],
              "length_baselines": [e.name for e in baselines], "left_out": left_out,
              "compared_with": {"auroc_lc": result.baselines["auroc_lc"], "auroc": result.baselines["auroc"]},
              "bootstrap": "percentile; tasks resampled with replacement within each run, runs fixed; run i draws "
                           "from numpy SeedSequence(seed).spawn(number of runs)[i]",
              "test": "two-sided null-shifted paired bootstrap of pooled auroc_lc(estimator) - pooled "
                      "auroc_lc(best length baseline); Benjamini-Hochberg over the estimators at q",
              "notes": notes}
    return RunLeaderboard(table, long, run_info, result.baselines, inputs, notes)


def _notes(run_info: pd.DataFrame, candidates, baselines, left_out: dict, compared: dict,
           failure_threshold: float) -> list[str]:
    notes = []
    if len(run_info) == 1:
        notes.append("one run: the pooled columns are that run's numbers")
    one_class = run_info[(run_info["n_failures"] == 0) | (run_info["n_failures"] == run_info["n_trajectories"])]
    for _, row in one_class.iterrows():
        notes.append(f"run {row['run']} holds one class only ({row['n_failures']} failures of "
                     f"{row['n_trajectories']} at failure threshold {failure_threshold:g}): its AUROCs are undefined "
                     "and it adds nothing to the pooled ones")
    if left_out:
        notes.append(f"{len(left_out)} estimator(s) not available in every run left out (listed in the JSON): "
                     + ", ".join(list(left_out)[:5]) + (" …" if len(left_out) > 5 else ""))
    if not baselines:
        notes.append("no length baseline in every run: no comparison with length, no p-values")
    elif compared["auroc_lc"] is None:
        notes.append("the length-controlled AUROC of no length baseline is defined: no p-values")
    if not candidates:
        notes.append("the runs share no estimator besides the length baselines (runs without log-probs: add "
                     "black-box estimators or rescore them)")
    return notes


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    return value


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_report(result: RunLeaderboard, out: Path, figures: Sequence[Path]) -> Path:
    """``OUT/report.html``: the runs, the figure and the leaderboard in one offline page
    (:func:`agentuq_nb.figures.report.runs_report`)."""
    from agentuq_nb.figures.report import runs_report

    n_runs = len(result.runs)
    title = f"Estimators across {n_runs} run{'s' if n_runs != 1 else ''}"
    subtitle = (f"failure = reward < {result.failure_threshold:g}; {result.inputs['n_boot']} bootstrap resamples of "
                f"tasks within runs (seed {result.inputs['seed']}); Benjamini-Hochberg at q = {result.q:g}; "
                f"made by agentuq-nb {STEP.name}")
    pages = result.runs.assign(report=[RunDir(p).file("report") for p in result.runs["path"]],
                               explorer=[RunDir(p).file("explorer") for p in result.runs["path"]])
    from agentuq_nb.steps.provenance import provenance

    settings = {k: result.inputs[k] for k in ("failure_threshold", "n_boot", "seed", "q", "ci", "length_strata")}
    inputs = {run["name"]: {"results": run.get("results"), "results_sha256": run.get("results_sha256"),
                            "tables (commit ids)": run.get("tables")} for run in result.inputs["runs"]}
    page = runs_report(title, subtitle, pages, result.notes, result.leaderboard, result.q,
                       [("Every estimator on every run", p) for p in figures], out,
                       provenance(STEP.command.split(" RUN_DIR")[0], settings, inputs))
    path = out / OUTPUTS["report"]
    atomic_write_with(path, lambda p: p.write_text(page, encoding="utf-8"))
    return path


def write_run_leaderboard(result: RunLeaderboard, out: str | os.PathLike,
                          figure: Callable[[RunLeaderboard, Path], list[Path]] | None = None,
                          report: bool = False) -> list[Path]:
    """Write the tables, the figure (``figure(result, out)`` returns the paths it wrote), the page (``report``:
    :func:`write_report`) and, last, the JSON that names them with their SHA-256 (each file atomically); returns the
    paths. An earlier JSON is removed first, so a folder that holds the JSON holds the complete set it lists (an
    interrupted write leaves none)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / OUTPUTS["inputs"]).unlink(missing_ok=True)
    written = []
    for key, frame in (("leaderboard", result.leaderboard), ("long", result.long)):
        path = out / OUTPUTS[key]
        atomic_write_with(path, lambda p, frame=frame: frame.to_csv(p, index=False))
        written.append(path)
    if figure is not None:
        written.extend(Path(p) for p in figure(result, out))
    if report:
        written.append(write_report(result, out, [p for p in written if p.suffix == ".png"]))
    inputs = {**result.inputs, "outputs": {p.name: sha256(p) for p in written}}
    atomic_write_json(out / OUTPUTS["inputs"], _jsonable(inputs))
    return [*written, out / OUTPUTS["inputs"]]


class CompareRunsConfig(StepConfig):
    """The runs compared, where the leaderboard goes, and how it is computed."""

    run_dirs: list[Path] = Field(min_length=1, description="run folders to compare the estimators across (read only)")
    out: Path = Field(description="output folder for the leaderboard (a plain folder, not a run folder)")
    failure_threshold: FailureThresholdField
    n_boot: NBootField = Field(description="bootstrap resamples (tasks within each run) for CIs and "
                        "p-values")
    seed: SeedField
    names: Optional[list[str]] = Field(None, description="only these estimators (each must be in every run; length "
                                       "baselines always)")
    q: float = Field(DEFAULT_FDR_Q, description="false discovery rate of the Benjamini-Hochberg step over "
                     "estimators")
    figure: bool = Field(False, description="draw the estimators x runs figure beside the tables (the command does)")
    report: bool = Field(False, description="write OUT/report.html, the runs, the figure and the leaderboard in one "
                         "offline page (the command does)")
    force: bool = Field(False, description="replace files of the leaderboard's names in --out that compare-runs did "
                        "not write (an interrupted run's, someone else's)")


def draw_run_leaderboard(result: RunLeaderboard, folder: Path) -> list[Path]:
    """The estimators x runs figure of ``result`` in ``folder`` (PNG and PDF)."""
    import matplotlib.pyplot as plt

    from agentuq_nb.figures import save
    from agentuq_nb.figures.run_leaderboard import run_leaderboard_figure

    fig = run_leaderboard_figure(result.leaderboard, result.long, result.runs, q=result.q,
                                 failure_threshold=result.failure_threshold)
    try:
        return save(fig, FIGURE_NAME, folder)
    finally:
        plt.close(fig)


def run(config: CompareRunsConfig) -> RunLeaderboard:
    """``agentuq-nb compare-runs``: refuse a bad ``out`` before any work, compute, write (see the module docstring)."""
    check_out_folder(config.out, config.run_dirs, config.force)
    result = build_run_leaderboard(config.run_dirs, config.failure_threshold, config.n_boot, config.seed, config.names, config.q)
    check_out_folder(config.out, config.run_dirs, config.force)  # again: the work took a while
    write_run_leaderboard(result, config.out, draw_run_leaderboard if config.figure else None, config.report)
    return result


#: rows of the leaderboard printed by compare-runs (the CSV holds them all)
SHOWN_ROWS = 20


def show(result: RunLeaderboard, run_dir: None, config: CompareRunsConfig, say: Reporter) -> None:
    """What compare-runs prints: the runs, the top of the leaderboard (the report's view of it), where the files are,
    notes."""
    from agentuq_nb.figures.report import leaderboard_view

    say.say(f"{len(result.runs)} run(s): " + ", ".join(
        f"{getattr(r, 'title', r.run)} [{r.run}] (n={r.n_trajectories}, {r.n_failures} failed)"
        for r in result.runs.itertuples()))
    shown = leaderboard_view(result.leaderboard.head(SHOWN_ROWS), result.q).drop(columns=["n (failures)"])
    say.say(f"pooled over the runs (pairs within a run only): candidates ranked by the length-controlled AUROC, then "
            f"the length baselines; vs length: paired difference from "
            f"{result.baselines.get('auroc_lc') or 'no length baseline'}'s, Benjamini-Hochberg at q = {result.q:g}:")
    say.say(shown.to_string(index=False))
    if len(result.leaderboard) > SHOWN_ROWS:
        say.say(f"… {len(result.leaderboard) - SHOWN_ROWS} more rows in {config.out / OUTPUTS['leaderboard']}")
    files = [OUTPUTS["leaderboard"], OUTPUTS["long"], f"{FIGURE_NAME}.png", f"{FIGURE_NAME}.pdf", OUTPUTS["report"],
             OUTPUTS["inputs"]]
    say.say(f"→ {config.out}: {', '.join(files)}")
    for note in result.notes:
        say.say(f"note: {note}", warn=True)


COMMAND = Command(summary="One estimator leaderboard across runs: AUROC and length-controlled AUROC per run and pooled "
                          "(within-run pairs only), vs the best length baseline with BH-FDR → "
                          "OUT/run_leaderboard.{csv,png,pdf,json}, run_leaderboard_long.csv.",
                  arguments=("run_dirs",), options=("out", "failure_threshold", "n_boot", "seed", "names", "q", "force"),
                  flags={"names": "--estimator"},
                  help={"names": "only these estimators (repeat the option; each must be in every run; length "
                                 "baselines always)"},
                  set={"figure": True, "report": True}, plugins=True, show=show,
                  interrupted=f"interrupted: the run folders are untouched; in {{out}}, {OUTPUTS['inputs']} (written "
                              "last) is there only beside the complete set of files it lists (a rerun replaces the "
                              "others with --force)")


def compare_runs(run_dirs: Sequence[str | os.PathLike], out: str | os.PathLike, **options: Any) -> RunLeaderboard:
    """:func:`run` with the :class:`CompareRunsConfig` fields as keywords."""
    return run(CompareRunsConfig(run_dirs=run_dirs, out=out, **options))


def read_run_leaderboard(out: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leaderboard and the long table of an output folder of ``compare-runs``."""
    out = Path(out)
    return pd.read_csv(out / OUTPUTS["leaderboard"]), pd.read_csv(out / OUTPUTS["long"])
