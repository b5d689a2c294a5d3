"""``reproduce PARAMS.yaml``: run a study's notebooks through papermill, in order.

A params file names the notebooks and their parameters::

    name: quickstart            # optional; defaults to the file name
    parameters:                 # given to every notebook
      domain: bookshop
    notebooks:
      - 01_simulate
      - name: 04_evaluate       # per-notebook overrides
        parameters: {role: assistant}

Each notebook gets ``run_dir = runs/<name>`` and ``figures_dir = figures/<name>`` (relative
to the project root) on top of those parameters; executed copies go to
``runs/<name>/notebooks/``. Relative paths in parameters are relative to the project root,
where the notebooks run.

A study stays inside the project: notebooks are named by file name and come from the project's
``notebooks/`` folder only, and the study ``name`` is a plain name, so nothing is run from or
written outside ``notebooks/``, ``runs/`` and ``figures/`` (a path or ``..`` is refused). A
parameter that looks like an API key is refused before anything runs, and every executed copy
is checked once more and has any secret its outputs picked up masked. While a notebook runs, its
progress bars (the simulation's, extract's) are relayed to the terminal.

Sweeps. A ``grid`` maps parameter names to lists of values; every combination (in the
order written, last key fastest) is its own study, named ``<name>__<key>=<value>__…`` with
its own ``runs/<that name>/`` and ``figures/<that name>/``::

    name: seeds
    parameters: {domain: bookshop, task_ids: ["1", "2"]}
    grid:
      seed: [300, 301]
      num_trials: [1, 2]      # → seeds__seed=300__num_trials=1, …, seeds__seed=301__num_trials=2

A grid value overrides ``parameters``; a grid key may not also be set in a notebook's own
parameters (that notebook would silently not be swept). :func:`run_studies` runs several
params files and grids: one after the other in-process, or with ``scheduler`` as parallel
papermill jobs on a Dask cluster (each job writes its own folders, so workers need the
checkout at the same path, e.g. on a shared filesystem).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentuq_nb.common.naming import plain_name, slug
from agentuq_nb.common.redaction import find_secret, redact
from agentuq_nb.distributed import FanOutFailed, JobRunner
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.rundir import RunDir
from agentuq_nb.pipeline.notebook_run import ProgressRelay, mask_notebook_secrets
from agentuq_nb.records.config import StudySpec, validation_message


@dataclass
class Study:
    name: str
    params_path: Path
    notebooks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def project_root(start: Path | None = None) -> Path:
    """The checkout holding ``notebooks/``: searched upwards from ``start`` (a params file's folder), then from the
    working directory, then from where this package is installed from (an editable install of a checkout)."""
    here = (start or Path.cwd()).resolve()
    starts = [here, Path.cwd().resolve(), Path(__file__).resolve().parent]
    for origin in starts:
        for cand in [origin, *origin.parents]:
            if (cand / "notebooks").is_dir() and (cand / "params").is_dir():
                return cand
    raise FileNotFoundError(f"no project root (a folder with notebooks/ and params/) above {here}, the working "
                            "directory or the installed package: the notebooks a study runs live in a checkout of "
                            "agentuq_nb; run 'agentuq-nb reproduce' from inside one (cd /path/to/agentuq_nb), or "
                            "analyse a results file without a study: agentuq-nb analyze RESULTS --out RUN_DIR")


def resolve_against_file(params: dict[str, Any], params_path: Path, root: Path) -> dict[str, Any]:
    """A params file outside the project: its relative paths (string values, also in lists, that name an existing
    file or folder beside the file) made absolute, so they mean what they meant where the file was written. Inside
    the project, relative paths stay relative to its root, as before."""
    folder = params_path.resolve().parent
    if folder.is_relative_to(root.resolve()):
        return params

    def resolved(value: Any) -> Any:
        if isinstance(value, list):
            return [resolved(v) for v in value]
        if isinstance(value, str) and value and not Path(value).is_absolute() and (folder / value).exists():
            return str((folder / value).resolve())
        return value

    return {k: resolved(v) for k, v in params.items()}


def _check_no_secrets(params: dict[str, Any], path: Path, where: str = "parameters") -> None:
    found = find_secret(params, where)
    if found is not None:
        where, reason = found
        raise InputError(path, f"a parameter looks like a secret ({reason}); keep API keys in the environment or "
                               ".env, never in params: they would be written into executed notebooks", where)


def _point_name(name: str, point: dict[str, Any]) -> str:
    def text(value: Any) -> str:
        return slug(",".join(map(str, value)) if isinstance(value, list) else value, keep=",+")

    return "__".join([name] + [f"{k}={text(v)}" for k, v in point.items()])


def read_spec(params_path: Path) -> StudySpec:
    """A params file as a :class:`~agentuq_nb.records.config.StudySpec`; errors name the file and the field."""
    if not params_path.is_file():
        raise InputError(params_path, "params file does not exist")
    try:
        raw = yaml.safe_load(params_path.read_text()) or {}
    except yaml.YAMLError as err:
        raise InputError(params_path, f"not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise InputError(params_path, "expected a mapping with a non-empty 'notebooks' list")
    try:
        return StudySpec.model_validate(raw)
    except ValidationError as err:
        what, where = validation_message(err)
        raise InputError(params_path, what, where) from None


def load_studies(params_path: str | Path) -> list[Study]:
    """The study of a params file, or one study per point of its ``grid``."""
    params_path = Path(params_path)
    spec = read_spec(params_path)
    _check_no_secrets(spec.model_dump(), params_path, "")  # names, grid keys and values, nested keys too
    try:
        name = spec.name or plain_name(params_path.stem, "study name (the params file's name)")
    except ValueError as err:
        raise InputError(params_path, str(err), "name") from None
    points = [dict(zip(spec.grid, combo)) for combo in itertools.product(*spec.grid.values())] if spec.grid else [{}]
    studies = []
    for point in points:
        study = Study(name=_point_name(name, point) if spec.grid else name, params_path=params_path)
        for i, entry in enumerate(spec.notebooks):
            swept = sorted(set(point) & set(entry.parameters))
            if swept:
                raise InputError(params_path, f"{swept} are swept by 'grid' and also set for notebook '{entry.name}'",
                                 f"notebooks[{i}]")
            merged = {**spec.parameters, **point, **entry.parameters}
            _check_no_secrets(merged, params_path)
            study.notebooks.append((entry.name, merged))
        studies.append(study)
    return studies


def load_study(params_path: str | Path) -> Study:
    """The one study of a params file without a ``grid`` (use :func:`load_studies` for grids)."""
    studies = load_studies(params_path)
    if len(studies) > 1:
        raise InputError(params_path, f"has a grid of {len(studies)} studies; run them with run_studies / "
                                      "'agentuq-nb reproduce'", "grid")
    return studies[0]


def run_study(
    params_path: str | Path | Study,
    root: Path | None = None,
    output_root: Path | None = None,
    kernel_name: str | None = None,
    log=print,
) -> Path:
    """Execute every notebook of the study; returns ``runs/<name>``. Stops at the first failure.

    ``root`` holds ``notebooks/`` (default: found above the params file); ``output_root`` gets
    ``runs/`` and ``figures/`` (default: ``root``).
    """
    import papermill as pm

    study = params_path if isinstance(params_path, Study) else load_study(params_path)
    root = root or project_root(study.params_path.resolve().parent)
    output_root = Path(output_root or root)
    run_dir = output_root / "runs" / study.name
    figures_dir = output_root / "figures" / study.name
    inside(run_dir, output_root / "runs", study)
    inside(figures_dir, output_root / "figures", study)
    study.notebooks = [(nb, resolve_against_file(params, study.params_path, root)) for nb, params in study.notebooks]
    sources = [root / "notebooks" / (nb if nb.endswith(".ipynb") else f"{nb}.ipynb") for nb, _ in study.notebooks]
    for source in sources:
        inside(source, root / "notebooks", study)
        if not source.is_file():
            raise InputError(study.params_path, f"notebook '{source.stem}' not found in {root / 'notebooks'}")
    declared = [set(pm.inspect_notebook(str(s))) for s in sources]
    # a parameter no notebook declares is almost always a typo: say so before running anything
    unused = sorted({k for _, params in study.notebooks for k in params} - set().union(*declared))
    if unused:
        raise InputError(study.params_path, f"parameter(s) {unused} are declared by none of the study's notebooks")
    out_dir = RunDir(run_dir).file("notebooks")
    out_dir.mkdir(parents=True, exist_ok=True)
    for (nb, params), source, names in zip(study.notebooks, sources, declared):
        given = {"run_dir": str(run_dir), "figures_dir": str(figures_dir), **params}
        parameters = {k: v for k, v in given.items() if k in names}
        started = time.perf_counter()
        log(f"[{study.name}] {source.name} …")
        relay = ProgressRelay(f"[{study.name}] {source.stem}:", log)
        executed = out_dir / source.name
        try:
            pm.execute_notebook(
                str(source), str(executed), parameters=parameters, cwd=str(root),
                kernel_name=kernel_name, progress_bar=False, log_output=False, stderr_file=relay,
            )
        except pm.PapermillExecutionError as err:
            # the cell's own error, not papermill's traceback (and no key it may quote); the notebook keeps the rest
            raise RuntimeError(redact(f"[{study.name}] {source.name} failed in cell {err.exec_count}: {err.ename}: "
                                      f"{err.evalue} (executed notebook: {executed})")) from None
        finally:
            relay.close()
            masked = mask_notebook_secrets(executed)
            if masked:
                log(f"[{study.name}] {source.name}: masked {masked} output(s) holding an API key in {executed}")
        log(f"[{study.name}] {source.name} done in {time.perf_counter() - started:.1f}s")
    return run_dir


def inside(path: Path, folder: Path, study: Study) -> Path:
    """``path`` when it resolves inside ``folder``, else an error naming the params file."""
    if not path.resolve().is_relative_to(folder.resolve()):
        raise InputError(study.params_path, f"{path} is outside {folder}: a study reads notebooks from notebooks/ "
                                            "and writes only under runs/ and figures/")
    return path


def _run_study_job(job: tuple[Study, Path, Path | None, str | None]) -> Path:
    study, root, output_root, kernel_name = job
    return run_study(study, root=root, output_root=output_root, kernel_name=kernel_name)


def run_studies(
    params_paths: list[str | Path],
    scheduler: Any = None,
    root: Path | None = None,
    output_root: Path | None = None,
    kernel_name: str | None = None,
    log=print,
) -> list[Path]:
    """Every study of every params file (grids expanded); returns their ``runs/<name>`` folders.

    Without ``scheduler`` they run one after the other and the first failure stops the rest;
    with it, each study is one papermill job on the cluster, all run, and a failure is raised
    at the end naming every study that failed.
    """
    studies = [study for path in params_paths for study in load_studies(path)]
    seen: dict[str, Path] = {}
    for study in studies:
        if study.name in seen:
            raise InputError(study.params_path, f"study name '{study.name}' is also used by {seen[study.name]}; "
                                                f"both would write runs/{study.name}/")
        seen[study.name] = study.params_path
    jobs = [(study.name, (study, root or project_root(study.params_path.resolve().parent), output_root, kernel_name))
            for study in studies]
    done: dict[str, Path] = {}

    def finished(name: str, run_dir: Path) -> None:
        done[name] = run_dir
        if scheduler is not None:
            log(f"[{name}] done: {run_dir}")

    # serial: the first failure stops the rest; on Dask every study runs and the failures are listed at the end
    runner = JobRunner(label="reproduce", unit="study", noun="studies", scheduler=scheduler, retries=0,
                       progress=False, kept_as="done")
    try:
        runner.run(_run_study_job, jobs, finished, total=len(jobs))
    except FanOutFailed as err:
        # a papermill error is the whole cell traceback: its last line says what went wrong
        reasons = "; ".join(f"{name}: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1]}"
                            for name, exc in err.failures)
        raise RuntimeError(f"{len(err.failures)} of {len(jobs)} studies failed ({reasons}); "
                           f"executed notebooks are in runs/<name>/notebooks/") from None
    return [done[study.name] for study in studies]
