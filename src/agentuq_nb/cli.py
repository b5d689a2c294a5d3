"""The ``agentuq-nb`` command line: one command per step of a study.

Heavy modules (the LLM, the simulator, papermill) are imported inside the commands that need
them, so ``agentuq-nb --help`` and the analysis commands start fast.
"""
from __future__ import annotations

import inspect
import json
import math
import os
import sys
import unicodedata
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Literal, Optional, Union, get_args, get_origin

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from agentuq_nb.common.limits import DEFAULT_MAX_REQUEST_SECONDS
from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.io.errors import InputError, MixedRunError, StaleArtifactError
from agentuq_nb.io.input_warnings import InputDataWarning
from agentuq_nb.io.store.run_lock import RunBusyError
from agentuq_nb.records.config import ActionSamplingConfig, ExecutionConfig, ScoringConfig, SimulationConfig
from agentuq_nb.steps.analyze import AnalyzeConfig
from agentuq_nb.steps.base import Reporter
from agentuq_nb.steps.blackbox import BlackBoxConfig
from agentuq_nb.steps.calibrate import CalibrateConfig
from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig
from agentuq_nb.steps.compare_runs import CompareRunsConfig
from agentuq_nb.steps.doctor import DoctorConfig
from agentuq_nb.steps.early_warning import EarlyWarningConfig
from agentuq_nb.steps.evaluate import EvaluateConfig
from agentuq_nb.steps.predict import PredictConfig
from agentuq_nb.steps.probe import ProbeConfig
from agentuq_nb.steps.saup import SaupConfig
from agentuq_nb.steps.train_detector import TrainDetectorConfig
from agentuq_nb.steps.trials import TrialsConfig
from agentuq_nb.steps.verbalized import VerbalizedConfig

#: set to 1 to see the traceback of an unexpected error (a bug) instead of its one line
TRACEBACK_ENV = "AGENTUQ_NB_TRACEBACK"


class OneLineErrors(TyperGroup):
    """Every refusal is one line on stderr: a usage error (a missing argument, ``--port abc``) as ``error: …``
    with exit 2, and an unexpected exception - a bug, not the user's input - as ``error: internal error …``
    with exit 1, its traceback only with ``AGENTUQ_NB_TRACEBACK=1`` (a command's own errors are said by
    ``_fail``, exit 2)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except (typer.Exit, typer.Abort) as done:
            sys.exit(getattr(done, "exit_code", 1))
        except KeyboardInterrupt:
            typer.secho("interrupted", fg=typer.colors.RED, err=True)
            sys.exit(130)
        except Exception as err:  # noqa: BLE001 - said in one line, never a traceback
            ctx = getattr(err, "ctx", None)
            if type(err).__name__ == "NoArgsIsHelpError":  # the bare command: its help is shown already
                sys.exit(2)
            if hasattr(err, "format_message") and hasattr(err, "exit_code"):  # click's usage errors (typer's copy)
                see = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
                typer.secho(f"error: {one_line(err.format_message())}{see}", fg=typer.colors.RED, err=True)
                sys.exit(err.exit_code)
            if os.environ.get(TRACEBACK_ENV):
                raise
            typer.secho(f"error: internal error (a bug, not your input): {type(err).__name__}: "
                        f"{one_line(str(err))[:500]}; set {TRACEBACK_ENV}=1 to see the traceback",
                        fg=typer.colors.RED, err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=OneLineErrors, pretty_exceptions_enable=False,
                  rich_markup_mode=None,  # help as written: "[inspect]" is not markup, long names wrap (click's formatter)
                  help="agentuq-nb: uncertainty quantification for LLM agents, one command per step of a study.")


def one_line(text: str) -> str:
    """A message in one line: its lines joined, cut where a traceback starts, and every other control or format
    character (an escape sequence, a bidi override, a NUL a user typed into a name) shown escaped, never sent to
    the terminal."""
    lines = []
    for line in str(text).splitlines():
        if line.lstrip().startswith("Traceback (most recent call last)"):
            break
        if line.strip():
            lines.append(line.strip())
    return "".join(c if c == " " or unicodedata.category(c) not in ("Cc", "Cf") else c.encode("unicode_escape")
                   .decode("ascii") for c in " ".join(lines))


SCHEDULER_HELP = "run on Dask: a scheduler address (tcp://host:8786) or local:N for N local worker processes"
API_BASE_HELP = "OpenAI-compatible server for remote models, one per worker with --scheduler (repeat the option)"
PLUGIN_HELP = "a module or .py file whose estimators register themselves (repeat the option)"
RESULTS_HELP = ("τ²-bench results (a v0/v1 JSON file or a v1.0.1 results directory), the original τ-bench's "
                "results (a JSON list of {task_id, reward, info, traj, trial}) or an Inspect AI log (.eval; the "
                "[inspect] extra)")
SCORE_HELP = ("Inspect AI logs: the scorer whose value is the reward, NAME or NAME:KEY for a dict-valued score "
              "(default: the eval's first scorer; C/P/I/N → 1/0.5/0/0, numbers as they are)")


class Embedder(str, Enum):
    """Sentence embeddings of the black-box signals (hash: a bag-of-words hash, fast, for tests; none: only the
    signals that need none)."""

    minilm = "minilm"
    hash = "hash"
    none = "none"


class DriftEmbedder(str, Enum):
    """Sentence embeddings of SAUP's drift distances (which need embeddings: no ``none``)."""

    minilm = "minilm"
    hash = "hash"


def config_option(config: type, field: str, *flags: str, **extra):
    """A typer option whose default (and help, unless given) is the pydantic config field's: each default is
    written once, in its config. Hand-written because typer builds options from signatures, not from pydantic
    models (typer-pydantic adapters on PyPI are unmaintained); a test checks every such option's default."""
    info = config.model_fields[field]
    extra.setdefault("help", info.description)
    for bound in info.metadata:  # the field's bounds (ge/le): typer refuses a value outside naming the option
        if getattr(bound, "ge", None) is not None:
            extra.setdefault("min", bound.ge)
        if getattr(bound, "le", None) is not None:
            extra.setdefault("max", bound.le)
    return typer.Option(info.get_default(call_default_factory=True), *flags, **extra)


def failure_threshold_option(help: str = "failure = reward < threshold"):
    from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD

    return typer.Option(DEFAULT_FAILURE_THRESHOLD, "--failure-threshold", help=help)


#: errors that are the user's to fix: said in one line, exit code 2, no traceback
USER_ERRORS = (InputError, FileNotFoundError, ValueError, KeyError, ConnectionError, RunBusyError, MixedRunError,
               StaleArtifactError, ModuleNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)


def _fail(err: Exception) -> None:
    if isinstance(err, ValidationError):  # pydantic's own text spans lines and links to its docs
        from agentuq_nb.records.config import validation_message

        what, where = validation_message(err)
        if what.startswith("--"):  # the check named the option already
            message = what
        else:
            message = f"{err.title}: {what}" + ("" if where == "(top level)" else f" ('{where}')")
    else:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
    typer.secho(f"error: {one_line(str(message))}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


def _manifest_bytes(run_dir: Path) -> bytes | None:
    """The manifest as it is before a step (None: none, or not a small regular file - the step says so)."""
    from agentuq_nb.common.limits import MAX_SMALL_JSON_BYTES
    from agentuq_nb.io.files import read_limited
    from agentuq_nb.io.store.rundir import RunDir

    try:
        return read_limited(RunDir(run_dir).file("manifest"), MAX_SMALL_JSON_BYTES, "manifest")
    except (OSError, InputError):
        return None


def _after_interrupt(step: str, run_dir: Path, manifest_before: bytes | None) -> str:
    """What a Ctrl-C during ``step`` left in ``run_dir``, after finishing or discarding its publication."""
    from agentuq_nb.io.store.rundir import RunDir

    if not run_dir.is_dir():
        return f"interrupted: '{step}' stopped before it wrote anything"
    try:  # taking the lock rolls a committed publication forward and removes staged and temporary files
        with RunDir(run_dir).lock(f"{step}: clean up after Ctrl-C"):
            pass
    except Exception as err:  # noqa: BLE001 - said, not raised: the interrupt is what the user must hear about
        return (f"interrupted: '{step}' stopped; {run_dir} could not be checked ({err}); the next agentuq-nb "
                "command on it finishes or discards what was being published")
    if _manifest_bytes(run_dir) != manifest_before:
        return f"interrupted after '{step}' committed: {run_dir} holds its new files, complete"
    held = "its previous files, unchanged" if manifest_before is not None else "no run"
    return f"interrupted: '{step}' published nothing; {run_dir} holds {held} (temporary files removed)"


def _say_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Counted input warnings once per kind (the first report of a kind); any other warning as Python shows it."""
    said: set[str] = set()
    for record in caught:
        message = record.message
        if isinstance(message, InputDataWarning):
            if message.kind not in said:
                said.add(message.kind)
                typer.secho(f"warning: {one_line(str(message))}", fg=typer.colors.YELLOW, err=True)
        else:
            warnings.showwarning(message, record.category, record.filename, record.lineno)


@contextmanager
def _reported(after_interrupt: Callable[[], str]) -> Iterator[None]:
    """Input warnings said once per kind, bad-input errors in one line (exit 2), and a Ctrl-C answered with
    ``after_interrupt()`` (exit 130)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InputDataWarning)
        try:
            yield
        except USER_ERRORS as err:
            _say_warnings(caught)
            _fail(err)
        except KeyboardInterrupt:
            typer.secho(after_interrupt(), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=130) from None
    _say_warnings(caught)


@contextmanager
def _step(step: str, run_dir: Path) -> Iterator[None]:
    """Run a step that writes ``run_dir``: its input warnings said once per kind, its bad-input errors in one
    line (exit 2), and a Ctrl-C answered with the state it left the folder in (exit 130)."""
    manifest_before = _manifest_bytes(run_dir)
    with _reported(lambda: _after_interrupt(step, run_dir, manifest_before)):
        yield


def _out_folder(out: Path, command: str) -> None:
    """Refuse an ``--out`` that is a file, or that a file is in the way of, before any work."""
    from agentuq_nb.io.store.rundir import RunDir

    try:
        RunDir(out).require_folder(command, new=True)
    except InputError as err:
        _fail(err)


def _load_plugins(plugins: Optional[list[str]]) -> None:
    from agentuq_nb.estimators import load_plugin

    for spec in plugins or []:
        try:
            load_plugin(spec)
        except (ImportError, FileNotFoundError, SyntaxError) as err:
            _fail(ValueError(f"--plugin {spec}: {type(err).__name__}: {err}"))


@app.command()
def extract(
    results: Path = typer.Argument(..., help=RESULTS_HELP),
    out: Path = typer.Option(..., "--out", help="run directory to write tokens.parquet and the manifest to"),
    sidecar_dir: Optional[Path] = typer.Option(None, "--sidecar-dir", help="where agentuq sidecar JSONL files are, if not beside the results"),
    score: Optional[str] = typer.Option(None, "--score", help=SCORE_HELP),
):
    """Token rows from results + sidecars → RUN_DIR/tokens.parquet."""
    from agentuq_nb.steps.extract import ExtractConfig
    from agentuq_nb.steps.extract import run as run_extract

    _out_folder(out, "extract")
    with _step("extract", out):
        report = run_extract(out, ExtractConfig(results=results, sidecar_dir=sidecar_dir, progress=True, score=score))
    typer.echo(f"{report.num_simulations} simulations, {report.num_tokens} token rows → {out / 'tokens.parquet'}")
    if report.num_tokens == 0:
        typer.secho(f"note: no message carried log-probs, so there is nothing to aggregate; 'agentuq-nb rescore "
                    f"{results} --out RUN_DIR' scores the messages with a model instead", fg=typer.colors.YELLOW, err=True)


@app.command()
def aggregate(
    run_dir: Path = typer.Argument(..., help="run directory with tokens.parquet"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP + "; reads the token table partitioned by task"),
):
    """Turn and trajectory summaries → RUN_DIR/{turn,trajectory}_summary.{csv,parquet}."""
    from agentuq_nb.steps.aggregate import aggregate as run_aggregate
    from agentuq_nb.steps.aggregate import summary_counts

    with _step("aggregate", run_dir):
        turns, trajs = run_aggregate(run_dir, scheduler=scheduler)
    typer.echo(f"{summary_counts(turns, trajs)} → {run_dir}")


@app.command()
def evaluate(
    run_dir: Path = typer.Argument(...),
    uncertainty: str = config_option(EvaluateConfig, "uncertainty", "--uncertainty"),
    role: str = config_option(EvaluateConfig, "role", "--role"),
    scorer: Optional[str] = config_option(EvaluateConfig, "scorer", "--scorer"),
    invert: bool = config_option(EvaluateConfig, "invert", "--invert"),
    failure_threshold: float = config_option(EvaluateConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(EvaluateConfig, "n_boot", "--n-boot"),
    seed: int = config_option(EvaluateConfig, "seed", "--seed"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    plugin: Optional[list[str]] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Failure prediction metrics of one estimator with bootstrap CIs → RUN_DIR/eval_metrics.json, eval_curves.csv."""
    from agentuq_nb.steps.evaluate import run as run_evaluate

    _load_plugins(plugin)
    with _step("evaluate", run_dir):
        result = run_evaluate(run_dir, EvaluateConfig(role=role, uncertainty=uncertainty, failure_threshold=failure_threshold,
                                                      invert=invert, scorer=scorer, n_boot=n_boot, seed=seed,
                                                      scheduler=scheduler))
    _show_evaluation(result)


def _show_evaluation(result: dict) -> None:
    """What ``evaluate`` and ``analyze`` print of an evaluation: the metrics (and, where tasks repeat, the
    multi-trial readout) on stdout, the notes on stderr."""
    shown = {"n": result["n"], "n_failures": result["n_failures"], "metrics": result["metrics"]}
    if "multi_trial" in result:  # tasks repeat: intervals resample tasks; the multi-trial readout beside
        multi = result["multi_trial"]
        shown["multi_trial"] = {"n_tasks": multi["n_tasks"], "bootstrap": result["bootstrap"]["method"],
                                "pass_hat_k": {k: v["value"] for k, v in multi["pass_hat_k"].items()},
                                "share_flipping": multi["label_noise"]["share_flipping"],
                                "soft_label_auroc": multi["soft_labels"].get("auroc", {}).get("value")}
    typer.echo(json.dumps(shown, indent=2))
    if result.get("n_dropped"):
        typer.secho(f"note: {result['n_dropped']} trajectories left out: their uncertainty or reward is not a finite "
                    "number", fg=typer.colors.YELLOW, err=True)
    for metric, reason in result["undefined"].items():
        typer.secho(f"note: {metric} is null: {reason}", fg=typer.colors.YELLOW, err=True)


@app.command()
def trials(
    run_dir: Path = typer.Argument(..., help="a run folder, or a results file as analyze takes it: " + RESULTS_HELP),
    k: Optional[list[int]] = typer.Option(None, "--k", help="the k of pass^k (repeat the option; default 1 .. the "
                                          "fewest trials of a task)"),
    failure_threshold: float = config_option(TrialsConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(TrialsConfig, "n_boot", "--n-boot"),
    seed: int = config_option(TrialsConfig, "seed", "--seed"),
    score: Optional[str] = config_option(TrialsConfig, "score", "--score"),
):
    """Multi-trial labels of a run: pass^k as τ²-bench defines it (CIs resample tasks) and label noise (prints only)."""
    from agentuq_nb.steps.trials import run as run_trials

    with _reported(lambda: "interrupted: trials writes nothing"):
        report = run_trials(run_dir, TrialsConfig(k_values=k or None, failure_threshold=failure_threshold,
                                                  n_boot=n_boot, seed=seed, score=score))
    trials_per_task = report["trials_per_task"]
    typer.echo(f"{report['n_trajectories']} trajectories, {report['n_tasks']} tasks, trials per task "
               f"{trials_per_task['min']}–{trials_per_task['max']}; mean task success rate "
               f"{report['mean_task_success_rate']:.3f}")
    typer.echo(f"{'k':>3}  {'pass^k':>7}  95% CI (tasks resampled)")
    for key, v in report["pass_hat_k"].items():
        ci = "—" if v["ci"] is None else f"[{v['ci'][0]:.3f}, {v['ci'][1]:.3f}]"
        typer.echo(f"{key:>3}  {v['value']:7.3f}  {ci}")
    noise = report["label_noise"]
    if noise["n_tasks_with_repeats"]:
        typer.echo(f"label noise: {noise['n_flipping']} of {noise['n_tasks_with_repeats']} tasks with ≥ 2 trials flip "
                   f"verdict ({noise['share_flipping']:.1%}); mean within-task variance of failure "
                   f"{noise['mean_within_task_variance']:.3f}")
    else:
        typer.echo("label noise: no task has 2 trials (run with --num-trials ≥ 2)")
    for note in report["notes"]:
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)


@app.command()
def analyze(
    results: Path = typer.Argument(..., help=RESULTS_HELP),
    out: Path = typer.Option(..., "--out", help="run directory to write the tables, summaries and metrics to"),
    sidecar_dir: Optional[Path] = config_option(AnalyzeConfig, "sidecar_dir", "--sidecar-dir"),
    uncertainty: str = config_option(AnalyzeConfig, "uncertainty", "--uncertainty"),
    role: str = config_option(AnalyzeConfig, "role", "--role"),
    scorer: Optional[str] = config_option(AnalyzeConfig, "scorer", "--scorer"),
    failure_threshold: float = config_option(AnalyzeConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(AnalyzeConfig, "n_boot", "--n-boot"),
    seed: int = config_option(AnalyzeConfig, "seed", "--seed"),
    blackbox: bool = config_option(AnalyzeConfig, "blackbox", "--blackbox/--no-blackbox"),
    embedder: Embedder = config_option(AnalyzeConfig, "embedder", "--embedder",
                                       help="sentence embeddings of the black-box signals"),
    score: Optional[str] = config_option(AnalyzeConfig, "score", "--score"),
    figures: bool = config_option(AnalyzeConfig, "figures", "--figures/--no-figures"),
    report: bool = config_option(AnalyzeConfig, "report", "--report/--no-report"),
):
    """Results → RUN_DIR in one process: extract, aggregate and evaluate where the run has token log-probs; the
    black-box families and the estimator table of every family it holds (with or without log-probs); its figures."""
    from agentuq_nb.steps.analyze import run as run_analyze

    _out_folder(out, "analyze")
    with _reported(lambda: "interrupted: nothing was run"):
        config = AnalyzeConfig(results=results, sidecar_dir=sidecar_dir, score=score, uncertainty=uncertainty, role=role,
                               scorer=scorer, failure_threshold=failure_threshold, n_boot=n_boot, seed=seed,
                               blackbox=blackbox, embedder=Embedder(embedder).value, figures=figures, report=report)
    done = run_analyze(out, config, CommandLine())
    if done.figures:
        typer.echo(f"figures → {out / 'figures'}: {', '.join(p.stem for p in done.figures)} (PNG and PDF)")
    if done.page is not None:
        typer.echo(f"report → {done.page} (one offline page: counts, table, figures, every trajectory)")
    if done.figures or done.page is not None:
        typer.echo(f"every trajectory, interactively: agentuq-nb explore {out} (→ {out / 'explorer.html'}, which "
                   "report.html links)")


class CommandLine(Reporter):
    """How a step that runs others (``analyze``, ``compare-estimators``) talks here: notes on stderr, each inner
    step wrapped by :func:`_step` (one-line errors, a Ctrl-C answered with the state it left), results printed."""

    def say(self, text: str, warn: bool = False) -> None:
        if warn:
            typer.secho(text, fg=typer.colors.YELLOW, err=True)
        else:
            typer.echo(text)

    def stage(self, step: str, run_dir: Path):
        if step == "check":
            return _reported(lambda: "interrupted: nothing was run")
        if step in ("figures", "report"):
            return _reported(lambda: f"interrupted while making the {step}; {run_dir} holds its tables, complete")
        return _step(step, run_dir)

    def show(self, what: str, value) -> None:
        if what == "evaluate":
            extracted = value.extracted
            if value.evaluation is not None:
                typer.echo(f"{extracted.num_simulations} simulations, {extracted.num_tokens} token rows; "
                           f"{value.summary_counts} → {extracted.run_dir}")
                _show_evaluation(value.evaluation)
            else:
                typer.echo(f"{extracted.num_simulations} simulations, no token log-probs → {extracted.run_dir}")
        elif what == "compare-estimators":
            _show_estimator_table(value)
        elif what == "trials":  # the multi-trial lines of a run whose tasks repeat
            for line in value:
                typer.echo(line)


@app.command("compare-estimators")
def compare_estimators(
    run_dir: Path = typer.Argument(...),
    failure_threshold: float = config_option(CompareEstimatorsConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(CompareEstimatorsConfig, "n_boot", "--n-boot"),
    seed: int = config_option(CompareEstimatorsConfig, "seed", "--seed"),
    estimator: Optional[list[str]] = typer.Option(None, "--estimator", help="only these estimators (repeat the option)"),
    combine_input: Optional[list[str]] = typer.Option(None, "--combine-input", help="an input of the combined predictor "
                                                      "(repeat; default: one estimator per kind of signal)"),
    blackbox: bool = typer.Option(True, "--blackbox/--no-blackbox", help="bring the black-box families (structure, "
                                  "TRACER) up to date first"),
    embedder: Embedder = config_option(BlackBoxConfig, "embedder", "--embedder",
                                       help="sentence embeddings of the black-box signals"),
    plugin: Optional[list[str]] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Every estimator in the run vs failure (AUROC, AUARC, AURC, PRR, Spearman, CIs, p vs avg NLL) → estimator_table.csv."""
    from agentuq_nb.steps.compare_estimators import estimator_table

    _load_plugins(plugin)
    with _reported(lambda: "interrupted: nothing was run"):
        config = CompareEstimatorsConfig(failure_threshold=failure_threshold, n_boot=n_boot, seed=seed,
                                         names=estimator or None, combined_input_names=combine_input or None,
                                         blackbox=BlackBoxConfig(embedder=Embedder(embedder).value) if blackbox else False,
                                         progress=True)
    _show_estimator_table(estimator_table(run_dir, config, CommandLine()))


def _show_estimator_table(report) -> None:
    """What compare-estimators (and analyze) print of the table (the report's view of it: figures.report), the notes
    that say how to read it, where it is, why no AUROC is defined (said once), and the families the run lacks with
    the command that adds each, its cost and the model it runs."""
    from agentuq_nb.evaluation.estimator_table import SORT_COLUMN
    from agentuq_nb.figures.report import estimator_notes, estimator_view, undefined_reason

    table = report.table
    undefined = undefined_reason(table)
    if undefined is None:
        typer.echo(estimator_view(table).to_string(index=False))
        for note in estimator_notes(table, SORT_COLUMN):
            typer.echo(f"  {note}")
    else:
        typer.secho(f"note: {undefined} (failure threshold {report.failure_threshold:g}); the table lists "
                    f"{len(table)} estimators without it", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"→ {report.path}")
    if undefined is None:
        one_class = table[table["auroc"].isna() & ((table["n_failures"] == 0) | (table["n_failures"] == table["n"]))]
        if len(one_class):
            typer.secho(f"note: AUROC is undefined for {len(one_class)} estimator(s) whose scored trajectories hold one "
                        f"outcome only: {', '.join(one_class['estimator'].astype(str).head(5))}"
                        + (" …" if len(one_class) > 5 else ""), fg=typer.colors.YELLOW, err=True)
    if report.gaps:
        typer.secho("families not computed for this run (what each needs: the command that adds it):\n"
                    + "\n".join(f"  - {gap}" for gap in report.gaps), fg=typer.colors.YELLOW, err=True)


@app.command()
def blackbox(
    run_dir: Path = typer.Argument(..., help="run directory (its manifest names the results)"),
    results: Optional[Path] = typer.Option(None, "--results", help="results file, if not the one the run was made from"),
    failure_threshold: float = config_option(BlackBoxConfig, "failure_threshold", "--failure-threshold",
                                             help="failure = reward < threshold (TRACER's tuned readouts)"),
    seed: int = config_option(BlackBoxConfig, "seed", "--seed"),
    embedder: Embedder = config_option(BlackBoxConfig, "embedder", "--embedder"),
    force: bool = config_option(BlackBoxConfig, "force", "--force", help="recompute even when the tables are up to date"),
):
    """Uncertainty from the messages alone (no log-probs): structure signals and TRACER → blackbox_*.parquet, tracer_tuned.parquet."""
    from agentuq_nb.steps.blackbox import run as run_blackbox

    with _step("blackbox", run_dir):
        done = run_blackbox(run_dir, BlackBoxConfig(failure_threshold=failure_threshold, seed=seed,
                                                    embedder=embedder.value, results=results, force=force,
                                                    progress=True))
    typer.echo(json.dumps(done, indent=2))


@app.command()
def saup(
    run_dir: Path = typer.Argument(..., help="run directory with token rows (after aggregate)"),
    embedder: DriftEmbedder = config_option(SaupConfig, "embedder", "--embedder",
                                            help="sentence embeddings of the steps' drift (D_a, D_o)"),
    failure_threshold: float = config_option(SaupConfig, "failure_threshold", "--failure-threshold"),
    k_folds: int = config_option(SaupConfig, "k_folds", "--k-folds"),
    seed: int = config_option(SaupConfig, "seed", "--seed"),
    hmm: bool = config_option(SaupConfig, "hmm", "--hmm/--no-hmm"),
):
    """SAUP: each step's uncertainty weighted by its drift from the task and the dialogue, propagated per actor
    → RUN_DIR/saup_scores.parquet (family saup in compare-estimators)."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.saup import run as run_saup
    from agentuq_nb.uq.saup import actor_breakdown

    with _step("saup", run_dir):
        scores, steps = run_saup(run_dir, SaupConfig(embedder=DriftEmbedder(embedder).value, failure_threshold=failure_threshold,
                                                     k_folds=k_folds, seed=seed, hmm=hmm))
    summary = actor_breakdown(scores).groupby(["actor", "weighting"])["saup"].describe()
    typer.echo(f"{len(scores)} trajectories, {len(steps)} steps ({int((steps['actor'] == 'assistant').sum())} agent)")
    typer.echo(summary[["count", "mean", "50%", "max"]].to_string(float_format=lambda x: f"{x:.3f}"))
    typer.echo(f"→ {RunDir(run_dir).file('saup_scores')}")


@app.command("early-warning")
def early_warning(
    run_dir: Path = typer.Argument(..., help="run directory (after aggregate, or after blackbox for --table "
                                   "blackbox_turns)"),
    fraction: Optional[list[float]] = typer.Option(None, "--fraction", help="share of the trajectory seen (repeat; "
                                                   "default 0.25 0.5 0.75 1)"),
    role: str = config_option(EarlyWarningConfig, "role", "--role"),
    scorer: str = config_option(EarlyWarningConfig, "scorer", "--scorer"),
    value: str = config_option(EarlyWarningConfig, "value", "--value"),
    table: str = config_option(EarlyWarningConfig, "table", "--table"),
    failure_threshold: float = config_option(EarlyWarningConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(EarlyWarningConfig, "n_boot", "--n-boot"),
    seed: int = config_option(EarlyWarningConfig, "seed", "--seed"),
):
    """How early failure shows: the mean per-turn uncertainty of the first f of each trajectory vs failure, per
    fraction → RUN_DIR/early_warning_scores.parquet (family early_warning in compare-estimators)."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.early_warning import run as run_early_warning

    if table not in ("turn_summary", "blackbox_turns"):
        _fail(ValueError(f"--table must be turn_summary or blackbox_turns, got {table!r}"))
    with _step("early-warning", run_dir):
        options = dict(role=role, scorer=scorer, value=value, failure_threshold=failure_threshold, n_boot=n_boot,
                       seed=seed, table=table)
        if fraction:
            options["fractions"] = tuple(fraction)
        aurocs, _ = run_early_warning(run_dir, EarlyWarningConfig(**options))
    cols = ["fraction", "auroc", "auroc_lo", "auroc_hi", "n", "n_failures", "mean_turns_seen"]
    typer.echo(aurocs[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    typer.echo(f"→ {RunDir(run_dir).file('early_warning_scores')}")


@app.command("compare-runs")
def compare_runs(
    run_dirs: list[Path] = typer.Argument(..., help="run folders to compare the estimators across (read only)"),
    out: Path = typer.Option(..., "--out", help="output folder for the leaderboard (a plain folder, not a run folder)"),
    failure_threshold: float = config_option(CompareRunsConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(CompareRunsConfig, "n_boot", "--n-boot"),
    seed: int = config_option(CompareRunsConfig, "seed", "--seed"),
    estimator: Optional[list[str]] = typer.Option(None, "--estimator", help="only these estimators (repeat the "
                                                  "option; each must be in every run; length baselines always)"),
    q: float = config_option(CompareRunsConfig, "q", "--q"),
    plugin: Optional[list[str]] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
    force: bool = config_option(CompareRunsConfig, "force", "--force"),
):
    """One estimator leaderboard across runs: AUROC and length-controlled AUROC per run and pooled (within-run pairs
    only), vs the best length baseline with BH-FDR → OUT/run_leaderboard.{csv,png,pdf,json}, run_leaderboard_long.csv."""
    from agentuq_nb.steps.compare_runs import OUTPUTS
    from agentuq_nb.steps.compare_runs import run as run_compare

    _load_plugins(plugin)
    with _reported(lambda: f"interrupted: the run folders are untouched; in {out}, {OUTPUTS['inputs']} (written "
                           "last) is there only beside the complete set of files it lists (a rerun replaces the others "
                           "with --force)"):
        result = run_compare(CompareRunsConfig(run_dirs=run_dirs, out=out, failure_threshold=failure_threshold,
                                               n_boot=n_boot, seed=seed, names=estimator or None, q=q, figure=True,
                                               report=True, force=force))
    _show_run_leaderboard(result, out)


#: rows of the leaderboard printed by compare-runs (the CSV holds them all)
SHOWN_ROWS = 20


def _show_run_leaderboard(result, out: Path) -> None:
    """What compare-runs prints: the runs, the top of the leaderboard (the report's view of it), where the files are,
    notes."""
    from agentuq_nb.figures.report import leaderboard_view
    from agentuq_nb.steps.compare_runs import FIGURE_NAME, OUTPUTS

    typer.echo(f"{len(result.runs)} run(s): " + ", ".join(
        f"{getattr(r, 'title', r.run)} [{r.run}] (n={r.n_trajectories}, {r.n_failures} failed)"
        for r in result.runs.itertuples()))
    shown = leaderboard_view(result.leaderboard.head(SHOWN_ROWS), result.q).drop(columns=["n (failures)"])
    typer.echo(f"pooled over the runs (pairs within a run only): candidates ranked by the length-controlled AUROC, then "
               f"the length baselines; vs length: paired difference from "
               f"{result.baselines.get('auroc_lc') or 'no length baseline'}'s, Benjamini-Hochberg at q = {result.q:g}:")
    typer.echo(shown.to_string(index=False))
    if len(result.leaderboard) > SHOWN_ROWS:
        typer.echo(f"… {len(result.leaderboard) - SHOWN_ROWS} more rows in {out / OUTPUTS['leaderboard']}")
    files = [OUTPUTS["leaderboard"], OUTPUTS["long"], f"{FIGURE_NAME}.png", f"{FIGURE_NAME}.pdf", OUTPUTS["report"],
             OUTPUTS["inputs"]]
    typer.echo(f"→ {out}: {', '.join(files)}")
    for note in result.notes:
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)


def _interval(lo: float | None, hi: float | None) -> str:
    finite = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
    return f"[{lo:.3f}, {hi:.3f}]" if finite else "—"


@app.command("train-detector")
def train_detector(
    inputs: list[Path] = typer.Argument(..., help="labelled runs: " + RESULTS_HELP + ", or run folders"),
    out: Path = typer.Option(..., "--out", help="the detector folder to write (new, or a detector folder to replace)"),
    group: Optional[list[str]] = typer.Option(None, "--group", help="a feature group: text, blackbox, embeddings, "
                                              "length (repeat; default: all four)"),
    model: str = config_option(TrainDetectorConfig, "model", "--model", help="logistic | gbm"),
    protocol: Optional[list[str]] = typer.Option(None, "--protocol", help="a protocol reported: within_run, "
                                                 "leave_one_run_out, leave_run_and_task_out, leave_one_domain_out "
                                                 "(repeat; default: all four)"),
    failure_threshold: float = config_option(TrainDetectorConfig, "failure_threshold", "--failure-threshold"),
    n_splits: int = config_option(TrainDetectorConfig, "n_splits", "--n-splits"),
    n_boot: int = config_option(TrainDetectorConfig, "n_boot", "--n-boot"),
    seed: int = config_option(TrainDetectorConfig, "seed", "--seed"),
    embedder: Embedder = config_option(TrainDetectorConfig, "embedder", "--embedder"),
    max_terms: int = config_option(TrainDetectorConfig, "max_terms", "--max-terms"),
    min_tasks: int = config_option(TrainDetectorConfig, "min_tasks", "--min-tasks"),
    early_turn: Optional[list[int]] = typer.Option(None, "--early-turn", help="early detection: also score the first "
                                                   "K agent turns (repeat)"),
    early_fraction: Optional[list[float]] = typer.Option(None, "--early-fraction", help="early detection: also score "
                                                         "the first fraction F of the messages (repeat)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP + "; feature extraction"),
):
    """A failure detector learned from labelled runs, judged by every protocol against length and the task prior →
    DETECTOR_DIR (card.json, model.json, arrays.npz, protocols.csv …; never pickle)."""
    from agentuq_nb.steps.train_detector import run as run_train

    with _reported(lambda: f"interrupted: nothing was written to {out} (a detector folder is published whole)"):
        config = TrainDetectorConfig(inputs=inputs, out=out, model=model, failure_threshold=failure_threshold,
                                     n_splits=n_splits, n_boot=n_boot, seed=seed, embedder=Embedder(embedder).value,
                                     max_terms=max_terms, min_tasks=min_tasks, early_turns=early_turn or [],
                                     early_fractions=early_fraction or [], scheduler=scheduler, progress=True,
                                     **({"groups": group} if group else {}), **({"protocols": protocol} if protocol else {}))
        trained = run_train(config)
    _show_detector(trained)


def _show_detector(trained) -> None:
    """What train-detector prints: what it learned from, each protocol against length and the task prior, where."""
    card = trained.card
    typer.echo(f"{card['n']} labelled trajectories ({card['n_failures']} failures) of {card['n_runs']} run(s), "
               f"{', '.join(card['domains'])}; features {', '.join(card['feature_groups'])}; "
               f"{card['settings']['model']}; {card['seconds']['total']:.1f} s")
    rows = []
    for name, row in card["protocols"].items():
        if "auroc" not in row:
            rows.append({"protocol": name, "auroc": "—", "vs length": row.get("note", "—"), "vs task prior": "—"})
            continue
        prior = (f"{row['vs_prior']} ({row['diff_vs_prior']:+.3f} [{row['diff_vs_prior_lo']:+.3f}, "
                 f"{row['diff_vs_prior_hi']:+.3f}])" if "vs_prior" in row else "no recurring task")
        rows.append({"protocol": name, "auroc": f"{row['auroc']:.3f} {_interval(row['auroc_lo'], row['auroc_hi'])}",
                     "vs length": f"{row['vs_length']} {row['length_baseline']} ({row['diff_vs_length']:+.3f} "
                                  f"[{row['diff_vs_length_lo']:+.3f}, {row['diff_vs_length_hi']:+.3f}])",
                     "vs task prior": prior, "ECE": f"{row.get('calibration_ece', float('nan')):.3f}"})
    typer.echo("pooled within-run AUROC of the held-out scores (tasks resampled within runs); 'beats' = the paired "
               "interval of the difference excludes 0:")
    import pandas as pd

    typer.echo(pd.DataFrame(rows).to_string(index=False))
    typer.echo(f"→ {trained.path} (probabilities calibrated on {card['calibration']['probabilities']})")
    for note in card.get("notes", []):
        typer.secho(f"note: {note}", fg=typer.colors.YELLOW, err=True)


@app.command()
def predict(
    detector: Path = typer.Argument(..., help="a detector folder (made by agentuq-nb train-detector)"),
    run_or_results: Path = typer.Argument(..., help="a run folder (predictions committed into it), or " + RESULTS_HELP),
    out: Optional[Path] = typer.Option(None, "--out", help="run folder to extract results into first (not for a run "
                                       "folder)"),
    top: int = config_option(PredictConfig, "top", "--top"),
    failure_threshold: float = config_option(PredictConfig, "failure_threshold", "--failure-threshold"),
    n_boot: int = config_option(PredictConfig, "n_boot", "--n-boot"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP + "; feature extraction"),
):
    """A trained detector on a run, labelled or not → RUN_DIR/predictions.csv (calibrated failure probability, top
    contributions), detector_scores.parquet (the detector estimator family), detector.json."""
    from agentuq_nb.steps.predict import predict as run_predict

    target = out if out is not None else run_or_results
    if out is not None:
        _out_folder(out, "predict")
    with _step("predict", target):
        result = run_predict(detector, run_or_results, out, top=top, failure_threshold=failure_threshold,
                             n_boot=n_boot, scheduler=scheduler, progress=True)
    shown = result.predictions.sort_values("failure_probability", ascending=False).head(SHOWN_ROWS)
    cols = [c for c in ("task_id", "trial", "failure_probability", "failed", "model", "feature_1", "contribution_1")
            if c in shown]
    typer.echo(shown[cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    report = result.report
    typer.echo(f"{report['n']} trajectories ({report['n_in_training']} met in training: scored by the model that left "
               f"their run out) → {result.run_dir / 'predictions.csv'}")
    row = report.get("estimator_table_row")
    if row and row.get("auroc") is None:
        typer.echo(f"detector on this run: AUROC undefined ({row.get('undefined') or 'one class only'}; n = {row['n']}, "
                   f"{row['n_failures']} failures)")
    elif row:
        typer.echo(f"detector on this run: AUROC {_num(row['auroc'])} {_interval(row['auroc_lo'], row['auroc_hi'])}, "
                   f"length-controlled {_num(row['auroc_stratified'])}, best length baseline {_num(row['length_baseline_auroc'])} "
                   f"(n = {row['n']}, {row['n_failures']} failures); 'agentuq-nb compare-estimators "
                   f"{result.run_dir}' ranks it with every family")


@app.command("calibrate")
def calibrate(
    run_dir: Path = typer.Argument(...),
    estimator: Optional[list[str]] = typer.Option(None, "--estimator", help="only these estimators (repeat the option)"),
    method: str = typer.Option("both", help="platt | isotonic | both"),
    transfer_to: Optional[Path] = typer.Option(None, "--transfer-to", help="another run folder: maps fitted on "
                                               "RUN_DIR are evaluated on it"),
    n_bins: int = config_option(CalibrateConfig, "n_bins", "--n-bins"),
    failure_threshold: float = config_option(CalibrateConfig, "failure_threshold", "--failure-threshold"),
    seed: int = config_option(CalibrateConfig, "seed", "--seed"),
    combine_input: Optional[list[str]] = typer.Option(None, "--combine-input", help="an input of the combined predictor "
                                                      "(repeat; default: one estimator per kind of signal)"),
    plugin: Optional[list[str]] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Estimators as failure probabilities (Platt, isotonic; cross-fitted by task): ECE, debiased ECE, Brier and its
    decomposition, log loss, reliability bins → RUN_DIR/calibration.json, calibration_bins.csv."""
    from agentuq_nb.steps.calibrate import calibrate as run_calibrate

    if method not in ("platt", "isotonic", "both"):
        _fail(ValueError(f"--method must be platt, isotonic or both, not {method!r}"))
    _load_plugins(plugin)
    with _step("calibrate", run_dir):
        report = run_calibrate(run_dir, names=estimator or None,
                               methods=("platt", "isotonic") if method == "both" else (method,),
                               transfer_to=transfer_to, n_bins=n_bins, failure_threshold=failure_threshold, seed=seed,
                               combined_input_names=combine_input or None, progress=True)
    sections = [("cross-fitted on " + report["run"], report["estimators"])]
    if report["transfer"]:
        t = report["transfer"]
        sections.append((f"fitted on {t['fitted_on']}, evaluated on {t['evaluated_on']}", t["estimators"]))
    for title, entries in sections:
        typer.echo(title)
        for name, entry in entries.items():
            label = f"{name} [in-sample]" if entry.get("protocol") == "in-sample" else name
            for m, rep in entry["methods"].items():
                typer.echo(f"  {label:40s} {m:9s} n={rep['n']:<4d} ECE={_num(rep['ece'])} "
                           f"ECE_debiased={_num(rep['ece_debiased'])} Brier={_num(rep['brier'])} "
                           f"log_loss={_num(rep['log_loss'])}")
            if entry.get("undefined"):
                typer.secho(f"  {name}: not calibrated: {entry['undefined']}", fg=typer.colors.YELLOW, err=True)


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


@app.command("estimators")
def list_estimators(
    run_dir: Path = typer.Argument(..., help="run directory"),
    plugin: Optional[list[str]] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """The registered estimators this run holds data for: name, family, orientation, what it reads."""
    from agentuq_nb.estimators import estimators

    _load_plugins(plugin)
    from agentuq_nb.io.store.rundir import RunDir

    with _step("estimators", run_dir):
        RunDir(run_dir).require_folder("estimators")
        found = estimators(run_dir)
        if not found:
            raise InputError(run_dir, "holds no table an estimator reads (no trajectory summary or score file); "
                                      f"run 'agentuq-nb aggregate {run_dir}' after extract")
        run = RunDir(run_dir)
        rows = [(e, ", ".join(e.reads(run))) for e in found]
    for e, reads in rows:
        typer.echo(f"{e.name:45s} {e.family:14s} {e.orientation:32s} {reads}")


@app.command()
def explore(
    run_dir: list[Path] = typer.Argument(..., help="run folder(s) (after analyze); with several, the same task can be "
                                         "compared across them side by side"),
    out: Optional[Path] = typer.Option(None, "--out", help="the HTML file to write (one standalone file, opens "
                                       "offline; default: RUN_DIR/explorer.html for one run)"),
    estimator: Optional[list[str]] = typer.Option(None, "--estimator", help="estimators offered in the list "
                                                  "(repeat; default: every one the runs hold)"),
    failure_threshold: float = failure_threshold_option(),
    force: bool = typer.Option(False, "--force", help="replace an existing file at --out that explore did not write "
                               "(never a folder, a link, a special file or a file of a run folder)"),
):
    """Every trajectory of one or more runs in one HTML page: why each got its reward (the checks, the expected tool
    calls beside those made, the task), the same task's other trials side by side, search, sort by any estimator
    (with its AUROC), per-message signals, tokens coloured by NLL where the run has them (in JupyterLab:
    agentuq_nb.explore(RUN_DIR))."""
    from agentuq_nb.figures.explorer import check_page_path, default_page_path, explorer_data, export_html

    with _reported(lambda: f"interrupted: {out or 'the page'} not written"):
        out = out or default_page_path(run_dir)
        check_page_path(out, run_dir, force)  # before the work; export_html checks again before it writes
        data = explorer_data(run_dir, estimators=estimator or None, failure_threshold=failure_threshold)
        path = export_html(data, out, force, run_dir)
    typer.echo(f"{len(data['trajectories'])} trajectories → {path}")


@app.command()
def reproduce(
    params: list[Path] = typer.Argument(..., help="params YAML file(s), e.g. params/quickstart.yaml"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP + "; studies run in parallel"),
):
    """Run every notebook of a study (or of each grid point) through papermill; figures → figures/<name>/."""
    from agentuq_nb.pipeline.reproduce import run_studies

    try:
        run_dirs = run_studies(params, scheduler=scheduler)
    except (*USER_ERRORS, RuntimeError) as err:
        _fail(err)
    for run_dir in run_dirs:
        typer.echo(f"done: {run_dir}")


@app.command()
def simulate(
    domain: str = typer.Option(..., "--domain", help="built-in domain, e.g. bookshop"),
    out: Path = typer.Option(..., "--out", help="run directory: results.json, sidecars/, checkpoints/"),
    agent_llm: str = config_option(SimulationConfig, "agent_llm", "--agent-llm", help="litellm model name"),
    user_llm: str = config_option(SimulationConfig, "user_llm", "--user-llm", help="litellm model name"),
    num_tasks: Optional[int] = typer.Option(None, "--num-tasks", help="first N tasks of the domain"),
    task_ids: Optional[list[str]] = typer.Option(None, "--task-ids", help="run only these task ids: repeat the option "
                                                 "(--task-ids 1 --task-ids 2) or separate them by commas (--task-ids 1,2)"),
    num_trials: int = config_option(SimulationConfig, "num_trials", "--num-trials"),
    top_logprobs: int = config_option(SimulationConfig, "top_logprobs", "--top-logprobs"),
    max_concurrency: int = config_option(ExecutionConfig, "max_concurrency", "--max-concurrency",
                                         help="simulations in flight (helps remote APIs)"),
    seed: int = config_option(SimulationConfig, "seed", "--seed"),
    max_steps: int = config_option(SimulationConfig, "max_steps", "--max-steps"),
    temperature: float = config_option(SimulationConfig, "temperature", "--temperature",
                                       help="sampling temperature of both LLMs"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    api_base: Optional[list[str]] = typer.Option(None, "--api-base", help=API_BASE_HELP),
    policy: Optional[str] = typer.Option(None, "--policy", help="act on uncertainty at each agent decision point: "
                                         "observe | defer | resample_vote | confirm | random"),
    policy_signal: str = config_option(PolicyConfig, "signal", "--policy-signal"),
    policy_threshold: Optional[float] = typer.Option(None, "--policy-threshold", help="intervene where the signal exceeds it"),
    policy_calibration: Optional[Path] = typer.Option(None, "--policy-calibration", help="an earlier observe run: "
                                                      "certifies the threshold (with --risk), fits calibrated: signals"),
    risk: Optional[float] = typer.Option(None, "--risk", help="δ: failure rate allowed among the runs left unflagged"),
    policy_alpha: float = config_option(PolicyConfig, "alpha", "--policy-alpha"),
    policy_oracle: Optional[Path] = typer.Option(None, "--policy-oracle", help="an earlier run: intervene on the runs "
                                                 "that failed in it"),
    policy_rate: Optional[float] = typer.Option(None, "--policy-rate", help="random: probability per decision point"),
    policy_action: str = config_option(PolicyConfig, "random_action", "--policy-action",
                                       help="random: what an intervention does"),
    policy_k: int = config_option(PolicyConfig, "k", "--policy-k"),
    escalation_cost: float = config_option(PolicyConfig, "escalation_cost", "--escalation-cost"),
):
    """Simulate agent ↔ user ↔ tools with logprob capture → RUN_DIR/results.json + sidecars/ (resumable).

    With --policy the agent's uncertainty is acted on while it runs (defer to a human, resample and vote,
    confirm a write with the user, or at random); each simulation records its decisions."""
    from agentuq_nb.records.config import configs_from_options
    from agentuq_nb.sim import SimulationFailed
    from agentuq_nb.steps.simulate import SimulateConfig
    from agentuq_nb.steps.simulate import run as run_simulate

    kwargs = {k: v for k, v in dict(agent_llm=agent_llm, user_llm=user_llm, max_steps=max_steps,
                                    temperature=temperature).items() if v is not None}
    policy_options = {"--policy-threshold": policy_threshold, "--policy-calibration": policy_calibration,
                      "--risk": risk, "--policy-oracle": policy_oracle, "--policy-rate": policy_rate}
    if policy is None and any(v is not None for v in policy_options.values()):
        given = [name for name, v in policy_options.items() if v is not None]
        _fail(ValueError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} used only with --policy "
                         "(observe | defer | resample_vote | confirm | random); nothing was run"))
    try:
        decision_policy = None
        if policy is not None:
            from agentuq_nb.intervention import build_policy
            from agentuq_nb.intervention.config import PolicyConfig

            flags = {"policy": "--policy", "signal": "--policy-signal", "threshold": "--policy-threshold",
                     "risk": "--risk", "alpha": "--policy-alpha", "calibration": "--policy-calibration",
                     "oracle": "--policy-oracle", "rate": "--policy-rate", "random_action": "--policy-action",
                     "k": "--policy-k", "escalation_cost": "--escalation-cost"}
            try:
                config = PolicyConfig(
                    policy=policy, signal=policy_signal, threshold=policy_threshold, risk=risk, alpha=policy_alpha,
                    calibration=None if policy_calibration is None else str(policy_calibration),
                    oracle=None if policy_oracle is None else str(policy_oracle), rate=policy_rate,
                    random_action=policy_action, k=policy_k, escalation_cost=escalation_cost)
            except ValidationError as err:
                from agentuq_nb.records.config import validation_message

                what, where = validation_message(err)
                _fail(ValueError(f"{flags.get(where, '--policy')}: {what}" if where in flags else f"--policy: {what}"))
            decision_policy = build_policy(config)
            typer.echo(f"policy: {json.dumps(decision_policy.describe())}")
        task_ids = [t.strip() for value in task_ids or [] for t in value.split(",") if t.strip()]
        simulation, execution = configs_from_options(
            dict(task_ids=task_ids or None, num_tasks=num_tasks, num_trials=num_trials, top_logprobs=top_logprobs,
                 max_concurrency=max_concurrency, seed=seed, scheduler=scheduler, api_bases=api_base or None, **kwargs),
            SimulationConfig, "simulation", domain=domain)
        path = run_simulate(out, SimulateConfig(simulation=simulation, execution=execution,
                                                policy=None if decision_policy is None else config),
                            policy=decision_policy)
    except (*USER_ERRORS, SimulationFailed) as err:
        _fail(err)
    typer.echo(f"results → {path}")


@app.command("score-observations")
def score_observations(
    run_dir: Path = typer.Argument(..., help="run directory (its manifest or results.json names the results)"),
    results: Optional[Path] = typer.Option(None, "--results", help="results file, if not the run's own"),
    scorer_mode: str = config_option(ScoringConfig, "scorer_mode", "--scorer-mode", help="agent_llm | auxiliary_llm"),
    scorer_llm: str = config_option(ScoringConfig, "scorer_llm", "--scorer-llm", help="litellm model name"),
    backend: str = config_option(ScoringConfig, "backend", "--backend", help="teacher_forced | echo | chat_replay"),
    user_messages: bool = config_option(ScoringConfig, "user_messages", "--user-messages/--no-user-messages"),
    tool_messages: bool = config_option(ScoringConfig, "tool_messages", "--tool-messages/--no-tool-messages"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    api_base: Optional[list[str]] = typer.Option(None, "--api-base", help=API_BASE_HELP),
):
    """Surprise of every user and tool message under a scorer → RUN_DIR/tokens.observations_<mode>.parquet."""
    from agentuq_nb.distributed import FanOutFailed
    from agentuq_nb.steps.score_observations import score_observations as run_scoring

    try:
        report = run_scoring(run_dir, results, scorer_mode=scorer_mode, scorer_llm=scorer_llm, backend=backend,
                             user_messages=user_messages, tool_messages=tool_messages, scheduler=scheduler,
                             api_bases=api_base or None)
    except (*USER_ERRORS, FanOutFailed) as err:
        _fail(err)
    typer.echo(json.dumps(report.as_dict(), indent=2))
    _explain(report)


def _explain(report) -> None:
    """The scoring report's terms, said where the report is printed, then what the scoring cost."""
    for line in report.explain():
        typer.echo(f"  {line}", err=True)
    cost = report.cost.line()
    if cost:
        typer.echo(f"cost: {cost}", err=True)


@app.command()
def rescore(
    results: Path = typer.Argument(..., help=RESULTS_HELP + ", with or without log-probs"),
    out: Path = typer.Option(..., "--out", help="run directory for tokens.parquet and the manifest"),
    scorer_llm: str = config_option(ScoringConfig, "scorer_llm", "--scorer-llm", help="litellm model name"),
    scorer_mode: str = config_option(ScoringConfig, "scorer_mode", "--scorer-mode", help="agent_llm | auxiliary_llm"),
    backend: str = config_option(ScoringConfig, "backend", "--backend", help="teacher_forced | echo | chat_replay"),
    limit: Optional[int] = config_option(ScoringConfig, "limit", "--limit", min=1,
                                         help="score only the first N simulations (a first look at the cost)"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    api_base: Optional[list[str]] = typer.Option(None, "--api-base", help=API_BASE_HELP),
):
    """Teacher-forced token rows for every message of a results file → OUT/tokens.parquet (then aggregate, evaluate)."""
    from agentuq_nb.distributed import FanOutFailed
    from agentuq_nb.steps.rescore import rescore as run_rescore

    _out_folder(out, "rescore")
    if scheduler is None and (os.cpu_count() or 1) > 1:
        typer.secho(f"note: scoring in this one process; --scheduler local:{os.cpu_count()} scores on "
                    f"{os.cpu_count()} worker processes, each with its own copy of the scorer (the embedded model "
                    "scores one trajectory per core)", fg=typer.colors.YELLOW, err=True)
    try:
        with _step("rescore", out):
            report = run_rescore(results, out, scorer_llm=scorer_llm, scorer_mode=scorer_mode, backend=backend,
                                 limit=limit, scheduler=scheduler, api_bases=api_base or None)
    except FanOutFailed as err:
        _fail(err)
    typer.echo(json.dumps(report.as_dict(), indent=2))
    _explain(report)
    typer.echo(f"next: agentuq-nb aggregate {out}, then agentuq-nb compare-estimators {out}", err=True)


@app.command("sample-actions")
def sample_actions(
    run_dir: Path = typer.Argument(..., help="run directory (its manifest or results.json names the results)"),
    results: Optional[Path] = typer.Option(None, "--results", help="results file, if not the run's own"),
    k: int = config_option(ActionSamplingConfig, "k", "--k"),
    model: Optional[str] = typer.Option(None, "--model", help="sampler (default: the agent's own model; "
                                        "another model is an observer, labelled as such)"),
    temperature: float = config_option(ActionSamplingConfig, "temperature", "--temperature"),
    turns: str = config_option(ActionSamplingConfig, "turns", "--turns"),
    limit: Optional[int] = typer.Option(None, "--limit", help="only the first N simulations"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="per sample (default: the agent's, else 128)"),
    tools: Optional[Path] = typer.Option(None, "--tools", help="JSON file of the agent's tool schemas, where the "
                                         "results do not record them (else they are inferred from the calls)"),
    seed: int = config_option(ActionSamplingConfig, "seed", "--seed"),
    conceptual_partials: bool = config_option(ActionSamplingConfig, "conceptual_partials",
                                              "--conceptual-partials/--no-conceptual-partials"),
    scheduler: Optional[str] = typer.Option(None, "--scheduler", help=SCHEDULER_HELP),
    max_concurrency: int = config_option(ExecutionConfig, "max_concurrency", "--max-concurrency",
                                         help="trajectories in flight (remote samplers)"),
    api_base: Optional[list[str]] = typer.Option(None, "--api-base", help=API_BASE_HELP),
):
    """K alternative next actions at every agent decision point → RUN_DIR/action_samples.parquet, action_turns.parquet."""
    from agentuq_nb.distributed import FanOutFailed
    from agentuq_nb.steps.sample_actions import sample_actions as run_sampling

    try:
        with _step("sample-actions", run_dir):
            report = run_sampling(run_dir, results, k=k, model=model, temperature=temperature, turns=turns,
                                  limit=limit, max_tokens=max_tokens, tools=str(tools) if tools else None, seed=seed,
                                  conceptual_partials=conceptual_partials,
                                  scheduler=scheduler, max_concurrency=max_concurrency, api_bases=api_base or None)
    except FanOutFailed as err:
        _fail(err)
    typer.echo(json.dumps(report.as_dict(), indent=2))
    if report.sampler_kind == "observer":
        typer.echo(f"note: sampled by {report.sampler_model}, an observer (not the agent's model)", err=True)


@app.command()
def probe(
    prompt: str = typer.Argument(..., help="the prompt to probe"),
    n: int = config_option(ProbeConfig, "n", "--n"),
    model: Optional[str] = config_option(ProbeConfig, "model", "--model"),
    max_tokens: int = config_option(ProbeConfig, "max_tokens", "--max-tokens"),
    temperature: float = config_option(ProbeConfig, "temperature", "--temperature"),
    seed: int = config_option(ProbeConfig, "seed", "--seed"),
    plot: Optional[Path] = config_option(ProbeConfig, "plot", "--plot"),
    force: bool = config_option(ProbeConfig, "force", "--force"),
):
    """Structural and conceptual uncertainty of one prompt, with per-token sparklines."""
    from agentuq_nb.steps.probe import run as run_probe

    try:
        result = run_probe(ProbeConfig(prompt=prompt, n=n, model=model, temperature=temperature, seed=seed,
                                       max_tokens=max_tokens, plot=plot, force=force))
    except USER_ERRORS as err:
        _fail(err)
    typer.echo(result.summary())
    if plot is not None:
        typer.echo(f"figure → {plot}")


@app.command("serve-local")
def serve_local(
    port: int = typer.Option(8000, help="port on 127.0.0.1"),
    host: str = typer.Option("127.0.0.1", help="bind address (keep loopback unless you mean it)"),
    max_tokens_cap: int = typer.Option(1024, "--max-tokens-cap", min=1,
                                       help="a request's max_tokens above this is lowered to it"),
    fit_context: bool = typer.Option(False, "--fit-context/--exact-context",
                                     help="drop the oldest middle turns of a chat that overflows the 8,192-token "
                                          "window (counted in usage.context_dropped_messages) instead of a 400; "
                                          "a request's fit_context field overrides"),
    max_request_seconds: float = typer.Option(DEFAULT_MAX_REQUEST_SECONDS, "--max-request-seconds", min=1,
                                              help="the longest one request may hold the model (then a 504)"),
):
    """Serve the embedded model as an OpenAI-compatible API (chat + completions with logprobs)."""
    from agentuq_nb.llm.server import serve_local as run_server

    policy = "oldest middle turns dropped on overflow" if fit_context else "exact context (overflow is a 400)"
    if not 0 <= port <= 65535:
        _fail(ValueError(f"--port {port} is not a TCP port: give 1-65535 (0: any free port)"))
    typer.echo(f"serving local/smollm2-135m-instruct on http://{host}:{port}/v1, max_tokens ≤ {max_tokens_cap}, "
               f"{policy}, at most {max_request_seconds:g} s per request (Ctrl-C to stop)")
    try:
        run_server(host=host, port=port, max_tokens_cap=max_tokens_cap, fit_context=fit_context,
                   max_request_seconds=max_request_seconds)
    except (OSError, ValueError, ModuleNotFoundError) as err:  # the model is loaded before serving
        _fail(err)


@app.command()
def doctor(
    max_tokens: int = config_option(DoctorConfig, "max_tokens", "--max-tokens"),
    timeout: float = config_option(DoctorConfig, "timeout", "--timeout"),
):
    """What this installation runs: the CPU's flags, what llama.cpp was built with, whether the embedded model loads
    and decodes (in a subprocess), the embedding model, versions; exit 1 when the embedded model does not run."""
    from agentuq_nb.steps.doctor import run as run_doctor

    report = run_doctor(DoctorConfig(max_tokens=max_tokens, timeout=timeout))
    typer.echo(report.describe())
    if not report.ok:
        raise typer.Exit(1)


@app.command("verbalized-confidence")
def verbalized_confidence(
    run_dir: Path = typer.Argument(..., help="run directory (its manifest or results.json names the results)"),
    results: Optional[Path] = typer.Option(None, "--results", help="results file, if not the run's own"),
    mode: str = config_option(VerbalizedConfig, "mode", "--mode"),
    model: Optional[str] = config_option(VerbalizedConfig, "model", "--model"),
    limit: Optional[int] = config_option(VerbalizedConfig, "limit", "--limit"),
):
    """Ask the agent's model how likely its actions were correct → RUN_DIR/verbalized_confidence.csv."""
    from agentuq_nb.steps.verbalized import run as run_verbalized
    from agentuq_nb.uq.verbalized import missing_rate

    try:
        per_traj = run_verbalized(run_dir, VerbalizedConfig(results=results, model=model, mode=mode, limit=limit))
    except USER_ERRORS as err:
        _fail(err)
    typer.echo(f"{len(per_traj)} trajectories, {int(per_traj['num_asked'].sum())} questions, "
               f"{missing_rate(per_traj):.0%} unparsed → {run_dir / 'verbalized_confidence.csv'}")


#: field types a made command offers as options (others keep their config default)
PLAIN_TYPES = (str, int, float, bool, Path)


def _option_type(annotation):
    """The option type of a config field's annotation, or None when it is not a plain value."""
    if annotation in PLAIN_TYPES:
        return annotation
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is Literal:
        return str
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1 and args[0] in PLAIN_TYPES:
        return Optional[args[0]]
    return None


def step_command(module):
    """A command for a step module that has none written here (a new family's step): ``RUN_DIR`` and one option
    per plain field of its config (default and help from the field), running ``module.run(RUN_DIR, config)`` and
    printing what it returns (its ``describe(result)`` when the module has one). Why by hand: typer builds
    commands from signatures, so the signature is made from the config's fields."""
    from agentuq_nb.steps.base import step_config

    config_type = step_config(module)
    fields = {name: _option_type(field.annotation) for name, field in config_type.model_fields.items()}
    fields = {name: kind for name, kind in fields.items() if kind is not None}
    parameters = [inspect.Parameter("run_dir", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Path,
                                    default=typer.Argument(..., help="run directory"))]
    for name, kind in fields.items():
        flag = "--" + name.replace("_", "-")
        flags = (f"{flag}/--no-{name.replace('_', '-')}",) if kind is bool else (flag,)
        parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind,
                                            default=config_option(config_type, name, *flags)))

    def command(run_dir: Path, **options):
        with _step(module.STEP.name, run_dir):
            result = module.run(run_dir, config_type(**options))
        typer.echo(module.describe(result) if hasattr(module, "describe") else result)

    command.__signature__ = inspect.Signature(parameters)
    command.__doc__ = (module.__doc__ or module.STEP.command).strip().split("\n\n")[0]
    return command


def add_step_commands() -> None:
    """Every step with a command line of its own but no command written above gets one made from its config."""
    from agentuq_nb.steps import step_modules

    written = {info.name or info.callback.__name__.replace("_", "-") for info in app.registered_commands}
    for module in step_modules():
        if module.STEP.command_line and module.STEP.name not in written:
            app.command(module.STEP.name)(step_command(module))


add_step_commands()


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
