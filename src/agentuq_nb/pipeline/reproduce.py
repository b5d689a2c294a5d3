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

Limits (:mod:`agentuq_nb.common.limits`, each refused with one line naming the file): the file is at most
``MAX_PARAMS_BYTES``, nested at most ``MAX_PARAMS_DEPTH`` levels, its aliases expand to at most
``MAX_PARAMS_NODES`` values (checked on the composed nodes, before anything is expanded), and a grid
expands to at most ``MAX_GRID_POINTS`` studies; a grid point's name longer than ``MAX_STUDY_NAME_CHARS``
is shortened with a hash of the whole.

A grid value overrides ``parameters``; a grid key may not also be set in a notebook's own
parameters (that notebook would silently not be swept). :func:`run_studies` runs several
params files and grids: one after the other in-process, or with ``scheduler`` as parallel
papermill jobs on a Dask cluster (each job writes its own folders, so workers need the
checkout at the same path, e.g. on a shared filesystem).
"""
from __future__ import annotations

import hashlib
import itertools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agentuq_nb.common.limits import (
    MAX_GRID_POINTS,
    MAX_PARAMS_BYTES,
    MAX_PARAMS_DEPTH,
    MAX_PARAMS_NODES,
    MAX_STUDY_NAME_CHARS,
)
from agentuq_nb.common.naming import plain_name, slug
from agentuq_nb.common.redaction import find_secret, redact
from agentuq_nb.distributed import FanOutFailed, JobRunner
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import read_limited_text
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.pipeline.notebook_run import ProgressRelay, mask_notebook_secrets
from agentuq_nb.pipeline.spec import StudySpec
from agentuq_nb.records.config import validation_message

INT_TAG = "tag:yaml.org,2002:int"
MERGE_TAG = "tag:yaml.org,2002:merge"


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
    """``<name>__<key>=<value>__…``; one longer than MAX_STUDY_NAME_CHARS keeps its start and a hash of the whole
    (``runs/<name>/`` is one path component, at most 255 bytes)."""
    def text(value: Any) -> str:
        return slug(",".join(map(str, value)) if isinstance(value, list) else value, keep=",+")

    full = "__".join([name] + [f"{k}={text(v)}" for k, v in point.items()])
    if len(full) <= MAX_STUDY_NAME_CHARS:
        return full
    digest = hashlib.sha1(repr((name, sorted(point.items(), key=lambda kv: kv[0]))).encode("utf-8", "replace"))
    return f"{full[:MAX_STUDY_NAME_CHARS - 17]}-{digest.hexdigest()[:16]}"


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: what is wrong and where (PyYAML's own text spans several, with a caret drawing)."""
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def _yaml_depth(path: Path, text: str) -> None:
    """Refuse YAML nested deeper than MAX_PARAMS_DEPTH, counted on the scanner's tokens (no recursion: PyYAML's
    composer recurses once per level, and a file nested 50,000 deep would end in a RecursionError)."""
    depth = 0
    opening = (yaml.BlockMappingStartToken, yaml.BlockSequenceStartToken, yaml.FlowMappingStartToken,
               yaml.FlowSequenceStartToken)
    closing = (yaml.BlockEndToken, yaml.FlowMappingEndToken, yaml.FlowSequenceEndToken)
    for token in yaml.scan(text, Loader=yaml.SafeLoader):
        if isinstance(token, opening):
            depth += 1
            if depth > MAX_PARAMS_DEPTH:
                raise InputError(path, f"params are nested more than {MAX_PARAMS_DEPTH} levels deep (a params file "
                                       "is a few levels of mappings and lists)", f"line {token.start_mark.line + 1}")
        elif isinstance(token, closing):
            depth -= 1


def _check_scalar(path: Path, node: yaml.ScalarNode) -> None:
    """Refuse an integer with more digits than Python converts (``sys.get_int_max_str_digits``)."""
    limit = sys.get_int_max_str_digits()
    if node.tag == INT_TAG and limit and len(node.value) > limit:
        raise InputError(path, f"an integer of {len(node.value):,} digits, more than the {limit:,} a value may have",
                         f"line {node.start_mark.line + 1}")


def _check_keys(path: Path, node: yaml.MappingNode) -> None:
    """Refuse a key written twice in one mapping (YAML readers disagree on which wins; PyYAML keeps the last, so
    the first would be dropped without a word)."""
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise InputError(path, f"key '{key.value}' appears twice in one mapping (lines {seen[key.value]} and "
                                   f"{line}): say it once", f"line {line}")
        seen[key.value] = line


def _yaml_expanded_nodes(path: Path, root: yaml.Node | None) -> None:
    """Refuse YAML whose aliases expand to more than MAX_PARAMS_NODES nodes (a "billion laughs" file: nine
    levels of aliases passed 3 GB in 28 s) or refer to themselves; counted without expanding anything. On the way,
    a key written twice in a mapping and an integer too long to convert are refused with their line."""
    if root is None:
        return
    size: dict[int, int] = {}
    state: dict[int, int] = {}  # 1: being counted, 2: counted
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(path, node)
            size[id(node)] = 1
            continue
        if isinstance(node, yaml.MappingNode) and not children_done:
            _check_keys(path, node)
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if children_done:
            size[id(node)] = 1 + sum(size[id(c)] for c in children)
            state[id(node)] = 2
            if size[id(node)] > MAX_PARAMS_NODES:
                raise InputError(path, f"the params expand to more than {MAX_PARAMS_NODES:,} values (YAML aliases "
                                       "repeating aliases): refused before expanding them",
                                 f"line {node.start_mark.line + 1}")
            continue
        if state.get(id(node)) == 2:
            continue
        if state.get(id(node)) == 1:
            raise InputError(path, "a YAML alias refers to a value that contains it (a structure without end)",
                             f"line {node.start_mark.line + 1}")
        state[id(node)] = 1
        stack.append((node, True))
        for child in children:
            if state.get(id(child)) == 1:
                raise InputError(path, "a YAML alias refers to a value that contains it (a structure without end)",
                                 f"line {child.start_mark.line + 1}")
            if state.get(id(child)) != 2 and not isinstance(child, yaml.ScalarNode):
                stack.append((child, False))
            elif isinstance(child, yaml.ScalarNode):
                _check_scalar(path, child)
                size[id(child)] = 1


def read_params_yaml(path: Path) -> Any:
    """A params file's YAML, checked against the documented limits before it is built: its size
    (MAX_PARAMS_BYTES), its nesting (MAX_PARAMS_DEPTH) and what its aliases expand to (MAX_PARAMS_NODES)."""
    text = read_limited_text(path, MAX_PARAMS_BYTES, "params file")
    try:
        _yaml_depth(path, text)
        _yaml_expanded_nodes(path, yaml.compose(text, Loader=yaml.SafeLoader))
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InputError(path, f"not valid YAML: {_yaml_problem(err)}") from None
    except RecursionError:  # not reached past the depth check; said, never a traceback
        raise InputError(path, f"params are nested too deeply (more than {MAX_PARAMS_DEPTH} levels)") from None


def read_spec(params_path: Path) -> StudySpec:
    """A params file as a :class:`~agentuq_nb.pipeline.spec.StudySpec`; errors name the file and the field."""
    if not params_path.exists():
        raise InputError(params_path, "params file does not exist")
    raw = read_params_yaml(params_path) or {}
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
    if spec.grid:
        size = math.prod(len(values) for values in spec.grid.values())
        if size > MAX_GRID_POINTS:
            shape = " x ".join(f"{len(v)} {k}" for k, v in spec.grid.items())
            raise InputError(params_path, f"the grid expands to {size:,} studies ({shape}), more than the "
                                          f"{MAX_GRID_POINTS:,} one params file may run; split it", "grid")
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
    from agentuq_nb.common.jsonschema_import import import_jsonschema

    import_jsonschema()  # papermill imports it through nbformat: without the IRI grammar (1.5 s of CPU a process)
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
    run_dir.mkdir(parents=True, exist_ok=True)
    out_dir = RunDir(run_dir).folder("notebooks", make=True)
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
