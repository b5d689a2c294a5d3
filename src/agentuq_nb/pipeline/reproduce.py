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
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentuq_nb.io.errors import InputError

SECRET_ENV = re.compile(r"(API_KEY|_TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


@dataclass
class Study:
    name: str
    params_path: Path
    notebooks: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


def project_root(start: Path | None = None) -> Path:
    """The checkout holding ``notebooks/`` (searching upwards from ``start`` or the cwd)."""
    here = (start or Path.cwd()).resolve()
    for cand in [here, *here.parents]:
        if (cand / "notebooks").is_dir() and (cand / "params").is_dir():
            return cand
    raise FileNotFoundError(f"no project root (a folder with notebooks/ and params/) above {here}")


def _check_no_secrets(params: dict[str, Any], path: Path) -> None:
    secrets = {v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 8}
    def walk(obj, where):
        if isinstance(obj, dict):
            for k, v in obj.items():
                if SECRET_ENV.search(str(k)):
                    raise InputError(path, f"parameter '{k}' looks like a secret; keep keys in the environment or .env, never in params", where)
                walk(v, f"{where}.{k}")
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                walk(v, f"{where}[{i}]")
        elif isinstance(obj, str) and obj in secrets:
            raise InputError(path, "a parameter value equals an API key from the environment; it would be written into executed notebooks", where)
    walk(params, "parameters")


def load_study(params_path: str | Path) -> Study:
    params_path = Path(params_path)
    if not params_path.is_file():
        raise InputError(params_path, "params file does not exist")
    try:
        spec = yaml.safe_load(params_path.read_text()) or {}
    except yaml.YAMLError as err:
        raise InputError(params_path, f"not valid YAML: {err}") from err
    if not isinstance(spec, dict) or not spec.get("notebooks"):
        raise InputError(params_path, "expected a mapping with a non-empty 'notebooks' list")
    name = str(spec.get("name") or params_path.stem)
    common = spec.get("parameters") or {}
    study = Study(name=name, params_path=params_path)
    for i, entry in enumerate(spec["notebooks"]):
        if isinstance(entry, str):
            nb, extra = entry, {}
        elif isinstance(entry, dict) and "name" in entry:
            nb, extra = str(entry["name"]), entry.get("parameters") or {}
        else:
            raise InputError(params_path, "each notebook is a name or {name, parameters}", f"notebooks[{i}]")
        merged = {**common, **extra}
        _check_no_secrets(merged, params_path)
        study.notebooks.append((nb, merged))
    return study


def run_study(
    params_path: str | Path,
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

    study = load_study(params_path)
    root = root or project_root(Path(params_path).resolve().parent)
    output_root = Path(output_root or root)
    run_dir = output_root / "runs" / study.name
    figures_dir = output_root / "figures" / study.name
    out_dir = run_dir / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = [root / "notebooks" / (nb if nb.endswith(".ipynb") else f"{nb}.ipynb") for nb, _ in study.notebooks]
    for source in sources:
        if not source.exists():
            raise InputError(study.params_path, f"notebook '{source.stem}' not found in {root / 'notebooks'}")
    declared = [set(pm.inspect_notebook(str(s))) for s in sources]
    # a parameter no notebook declares is almost always a typo: say so before running anything
    unused = sorted({k for _, params in study.notebooks for k in params} - set().union(*declared))
    if unused:
        raise InputError(study.params_path, f"parameter(s) {unused} are declared by none of the study's notebooks")
    for (nb, params), source, names in zip(study.notebooks, sources, declared):
        given = {"run_dir": str(run_dir), "figures_dir": str(figures_dir), **params}
        parameters = {k: v for k, v in given.items() if k in names}
        started = time.perf_counter()
        log(f"[{study.name}] {source.name} …")
        pm.execute_notebook(
            str(source), str(out_dir / source.name), parameters=parameters, cwd=str(root),
            kernel_name=kernel_name, progress_bar=False, log_output=False,
        )
        log(f"[{study.name}] {source.name} done in {time.perf_counter() - started:.1f}s")
    return run_dir
