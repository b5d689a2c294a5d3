"""The ``agentuq-nb`` command line: one command per step module, made from its config (the options: flag, default,
help, choices, bounds) and its ``COMMAND`` (arguments, what is printed). Heavy modules load only when a step runs."""
from __future__ import annotations

import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Optional, Union, get_args, get_origin

import typer
from pydantic import BaseModel, ValidationError
from typer.core import TyperGroup

from agentuq_nb.io.errors import InputError, MixedRunError, StaleArtifactError, one_line
from agentuq_nb.io.input_warnings import InputDataWarning
from agentuq_nb.io.store.run_lock import RunBusyError
from agentuq_nb.records.config import field_at
from agentuq_nb.steps.base import SCHEDULER_HELP, Reporter, after_interrupt, manifest_bytes

TRACEBACK_ENV = "AGENTUQ_NB_TRACEBACK"  # 1: an unexpected error's (a bug's) traceback, not its one line
USER_ERRORS = (InputError, FileNotFoundError, ValueError, KeyError, ConnectionError, RunBusyError, MixedRunError,
               StaleArtifactError, ModuleNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)  # exit 2


class OneLineErrors(TyperGroup):
    """Every refusal is one line on stderr: a usage error as ``error: …`` with exit 2, an unexpected exception (a
    bug, not the user's input) as ``error: internal error …`` with exit 1, its traceback only with
    ``AGENTUQ_NB_TRACEBACK=1`` (a command's own errors are said by ``fail``, exit 2)."""

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


def show_version(value: bool) -> None:  # agentuq-nb --version: the installed package's version, then exit
    if value:
        from agentuq_nb.steps.provenance import package_version
        typer.echo(f"agentuq-nb {package_version()}")
        raise typer.Exit(0)


@app.callback()
def options(version: bool = typer.Option(False, "--version", callback=show_version, is_eager=True,
                                         help="show the installed version and exit")) -> None: ...


def in_flags(text: str, flags: dict[str, str]) -> str:
    """A message worded in the running command's config field names, in its ``flags`` (by field name): a name with an
    underscore wherever it stands (``n_bins must be`` → ``--n-bins must be``), a one-word name heading a clause."""
    for name, flag in sorted(flags.items(), key=lambda item: -len(item[0])):
        before = r"(?<![\w.'/-])" if "_" in name or "." in name else r"(?:^|(?<=: )|(?<=; ))"
        text = re.sub(rf"{before}{re.escape(name)}(?![\w-]|[./\\]\w)", flag.split("/")[0], text)  # not a path's start
    return text


def fail(err: Exception, flags: dict | None = None) -> None:
    """Say ``err`` in one line (a pydantic error: its first problem, named by the field's flag) and exit 2."""
    if isinstance(err, ValidationError):  # pydantic's own text spans lines and links to its docs
        from agentuq_nb.records.config import validation_message

        what, where = validation_message(err)
        flag = (flags or {}).get(where, (flags or {}).get(where.rsplit(".")[-1], where))
        message = what if where == "(top level)" or what.startswith(where.rsplit(".")[-1]) else f"{flag}: {what}"
    else:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
    typer.secho(f"error: {in_flags(one_line(str(message)), flags or {})}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


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
def _reported(after_interrupt: Callable[[], str], errors: tuple[str, ...] = (), flags: dict | None = None) -> Iterator:
    """Input warnings said once per kind, bad-input errors (and those of a class named in ``errors``) in one line,
    in the command's ``flags`` (exit 2), and a Ctrl-C answered with ``after_interrupt()`` (exit 130)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InputDataWarning)
        try:
            yield
        except Exception as err:
            if not isinstance(err, USER_ERRORS) and not {c.__name__ for c in type(err).__mro__} & set(errors):
                raise
            _say_warnings(caught)
            fail(err, flags)
        except KeyboardInterrupt:
            typer.secho(after_interrupt(), fg=typer.colors.RED, err=True)
            raise typer.Exit(code=130) from None
    _say_warnings(caught)


@contextmanager
def _step(step: str, run_dir: Path, errors: tuple[str, ...] = (), flags: dict | None = None) -> Iterator[None]:
    """Run a step that writes ``run_dir``: its input warnings said once per kind, its bad-input errors in one
    line (exit 2), and a Ctrl-C answered with the state it left the folder in (exit 130)."""
    manifest_before = manifest_bytes(run_dir)
    with _reported(lambda: after_interrupt(step, run_dir, manifest_before), errors, flags):
        yield


def _load_plugins(plugins: Optional[list[str]]) -> None:
    from agentuq_nb.estimators import load_plugin
    for spec in plugins or []:
        try:
            load_plugin(spec)
        except (ImportError, FileNotFoundError, SyntaxError) as err:
            fail(ValueError(f"--plugin {spec}: {type(err).__name__}: {err}"))


class CommandLine(Reporter):
    """How a step talks here: stdout, notes on stderr, each inner step wrapped by :func:`_step` (errors in ``flags``)."""
    def __init__(self, flags: dict | None = None):
        self.flags = flags

    def say(self, text: str, warn: bool = False) -> None:
        typer.secho(text, fg=typer.colors.YELLOW, err=True) if warn else typer.echo(text)

    def stage(self, step: str, run_dir: Path):
        if step == "check":
            return _reported(lambda: "interrupted: nothing was run", flags=self.flags)
        if step in ("figures", "report"):
            return _reported(lambda: f"interrupted while making the {step}; {run_dir} holds its tables, complete",
                             flags=self.flags)
        return _step(step, run_dir, flags=self.flags)


def option_type(annotation) -> tuple[Any, bool]:
    """The typer type of a field's annotation (a ``Literal`` as a choice) and whether it takes several values."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) in (Union, UnionType) and len(args) == 1:
        return option_type(args[0])
    if get_origin(annotation) is Literal:
        return Enum("Choice", {str(v): str(v) for v in args}, type=str), False
    if get_origin(annotation) in (list, tuple) and args:
        return option_type(args[0])[0], True
    return (annotation if annotation in (str, int, float, bool, Path) else str), False


def parameter(config: type[BaseModel], spec, path: str, argument: bool) -> tuple[inspect.Parameter, str]:
    """The typer parameter of the field at ``path`` (an argument, or an option named by ``spec.flags`` or the
    field) and its flag; default, help, choices and bounds are the field's."""
    if path in spec.extras:
        annotation, default, help = spec.extras[path]
        flag = spec.flags.get(path, "--" + path.replace("_", "-"))
        made = typer.Argument(default, help=help) if argument else typer.Option(default, flag, help=help)
        name = flag.removeprefix("--").replace("-", "_")
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=made, annotation=annotation), flag
    info, leaf = field_at(config, path), path.rsplit(".", 1)[-1]
    kind, several = option_type(spec.kinds.get(path, info.annotation))
    flag = spec.flags.get(path, "--" + leaf.replace("_", "-"))
    name = flag.split("/")[0].removeprefix("--").replace("-", "_")
    default = ... if info.is_required() else info.get_default(call_default_factory=True)
    default = None if several and default is not ... else default
    default = kind(default) if isinstance(kind, type) and issubclass(kind, Enum) and default is not None else default
    extra = {"help": spec.help.get(path, info.description)} | {  # bounds: typer refuses a value outside them
        key: getattr(b, attr) for b in info.metadata for key, attr in (("min", "ge"), ("max", "le"))
        if getattr(b, attr, None) is not None and not several}
    if argument:
        made = typer.Argument(default, **extra)
    else:
        flags = [f"{flag}/--no-{flag[2:]}" if kind is bool and default is True and "/" not in flag else flag]
        made = typer.Option(default, *flags, **extra)
    annotation = Optional[list[kind]] if several else (kind if default is ... else Optional[kind])
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=made, annotation=annotation), flag


def step_command(module) -> Callable:
    """The command of a step module: its arguments and options made from its config and ``COMMAND``, running
    ``run(run_dir, config)`` (``run(config)`` for a step without a run folder) and showing what it returns."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.base import Command, step_config

    step, spec, config_type = module.STEP, getattr(module, "COMMAND", Command()), step_config(module)
    parameters, paths, flags = [], {}, {"out": "--out"} if spec.out else {}  # io.outputs names the run folder out
    own = {"run_dir": typer.Argument(..., help=spec.help.get("run_dir", "run directory")),
           "out": typer.Option(..., "--out", help=spec.out_help), "plugin": typer.Option(None, "--plugin", help=(
               "a module or .py file whose estimators register themselves (repeat the option)"))}
    special = {"run_dir"} | ({"out"} if spec.out else set()) | {"plugin"}  # the run folder, the plugins: no field
    options = spec.options if spec.options is not None else [n for n, i in config_type.model_fields.items() if n not in
        spec.arguments and (option_type(i.annotation)[0] is not str or str in (i.annotation, *get_args(i.annotation)))]
    for path in (*spec.arguments, *(["out"] if spec.out else []), *options, *(["plugin"] if spec.plugins else [])):
        if path in special:
            parameters.append(inspect.Parameter(path, inspect.Parameter.KEYWORD_ONLY, default=own[path],
                                                annotation=Optional[list[str]] if path == "plugin" else Path))
            continue
        made, flags[path] = parameter(config_type, spec, path, argument=path in spec.arguments)
        flags[path] = path.rsplit(".")[-1].upper() if path in spec.arguments else flags[path]  # a positional
        parameters.append(made)
        paths[made.name] = path
    said = {path.rsplit(".", 1)[-1]: flag for path, flag in flags.items()} | flags  # its errors are said in flags

    def command(**values):
        _load_plugins(values.pop("plugin", None))
        run_dir = values.pop("out") if spec.out else values.pop("run_dir") if "run_dir" in spec.arguments else None
        options: dict[str, Any] = {}
        for name, value in ((n, v) for n, v in values.items() if v is not None and v != []):  # else: the default
            *parents, leaf = paths[name].split(".")
            into = options if not parents else options.setdefault(parents[0], {})  # configs nest one level
            into[leaf] = value.value if isinstance(value, Enum) else value
        with _reported(lambda: "interrupted: nothing was run", spec.errors, said):
            if spec.out:  # an --out that is a file, or that a file is in the way of, is refused before any work
                RunDir(run_dir).require_folder(step.name, new=True)
            if spec.build:
                run_dir, config = spec.build(options, run_dir)
            else:
                config = config_type(**{**options, **spec.set})
            if "reporter" in config_type.model_fields:
                config.reporter = CommandLine(said)
            if spec.before:
                spec.before(run_dir, config, CommandLine(said))
        if step.run_folder:
            with _step(step.name, Path(run_dir), spec.errors, said):
                result = module.run(run_dir, config)
        else:
            with _reported(lambda: spec.interrupted.format(**dict(config)), spec.errors, said):
                result = module.run(config)
        if spec.show and spec.show(result, run_dir, config, CommandLine(said)):
            raise typer.Exit(1)  # the step's result says it failed (doctor: the model does not run)
        if not spec.show:  # a step without a printer: its describe(result), else the result
            typer.echo(module.describe(result) if hasattr(module, "describe") else result)

    command.__signature__ = inspect.Signature(parameters)
    command.__doc__ = spec.summary or (module.__doc__ or step.command).strip().split("\n\n")[0]
    return command


def add_step_commands() -> None:
    """Every step with a command line of its own gets its command."""
    from agentuq_nb.steps import step_modules

    for module in step_modules():
        if module.STEP.command_line:
            app.command(module.STEP.name)(step_command(module))


add_step_commands()


@app.command()
def reproduce(params: list[Path] = typer.Argument(..., help="params YAML file(s), e.g. params/quickstart.yaml"),
              scheduler: Optional[str] = typer.Option(None, help=SCHEDULER_HELP + "; studies run in parallel")):
    """Run every notebook of a study (or of each grid point) through papermill; figures → figures/<name>/."""
    from agentuq_nb.pipeline.reproduce import run_studies

    with _reported(lambda: "interrupted", ("RuntimeError",)):
        run_dirs = run_studies(params, scheduler=scheduler)
    for run_dir in run_dirs:
        typer.echo(f"done: {run_dir}")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
