"""The architecture holds: the layers contract (import-linter), no private helper or file-name constant
crossing modules, package facades that load lazily, no command named below the steps."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "agentuq_nb"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _lint_imports(cwd: Path, **env) -> subprocess.CompletedProcess:
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(lint), "--no-cache", str(ROOT / "pyproject.toml")], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_the_layers_contract_is_kept():
    """The layers, distributed beside them, io's two rooms independent, nothing importing agentuq_nb.testing."""
    done = _lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in done.stdout


def test_the_contracts_catch_a_room_importing_the_other_and_the_toolkit_importing_testing(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "agentuq_nb", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    with open(tmp_path / "agentuq_nb" / "io" / "ingest" / "tau_bench.py", "a") as f:
        f.write("\nimport agentuq_nb.io.store.rundir  # noqa\n")
    with open(tmp_path / "agentuq_nb" / "uq" / "saup.py", "a") as f:
        f.write("\nimport agentuq_nb.testing.synthetic  # noqa\n")
    done = _lint_imports(tmp_path, PYTHONPATH=str(tmp_path))
    assert done.returncode != 0, done.stdout[-4000:]
    assert "Contracts: 2 kept, 2 broken." in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]
    assert "agentuq_nb.io.ingest is not allowed to import agentuq_nb.io.store" in done.stdout
    assert "agentuq_nb.uq is not allowed to import agentuq_nb.testing" in done.stdout


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentuq_nb"):
            for alias in node.names:
                yield node.module, alias.name


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_helper_or_file_constant_is_imported_from_another_module(path):
    for module, name in _imports(path):
        assert not name.startswith("_"), f"{path.name} imports the private {name} from {module}"
        assert not name.endswith("_FILE"), f"{path.name} imports the file-name constant {name}: ask RunDir"


def test_file_names_of_a_run_folder_live_in_rundir_only():
    for path in SOURCES:
        if path.name == "rundir.py":
            continue
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name):
                    assert not target.id.endswith("_FILE"), f"{path.relative_to(PACKAGE)} defines {target.id}"


def test_facades_load_their_modules_on_first_use():
    code = ("import sys, agentuq_nb.uq, agentuq_nb.evaluation, agentuq_nb.steps\n"
            "heavy = [m for m in ('sentence_transformers', 'torch', 'llama_cpp', 'litellm', 'statsmodels') if m in sys.modules]\n"
            "assert not heavy, heavy\n"
            "from agentuq_nb import uq, evaluation\n"
            "assert callable(uq.turn_summary) and callable(uq.read_trajectory_summary)\n"
            "assert callable(evaluation.evaluate_estimators)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


COMMITTING_CALLS = (".commit(", ".lock(", "update_manifest(")


@pytest.mark.parametrize("package", ["uq", "evaluation", "estimators", "figures"])
def test_calculators_and_statistics_commit_nothing(package):
    """Reading, locking and committing a run folder is a step's (``agentuq_nb.steps``): the layers below compute."""
    for path in sorted((PACKAGE / package).rglob("*.py")):
        text = path.read_text()
        found = [call for call in COMMITTING_CALLS if call in text]
        assert not found, f"{path.relative_to(PACKAGE)} calls {found}: a step's work (move it to agentuq_nb.steps)"


def test_every_step_module_declares_its_step_config_and_run():
    import importlib
    import inspect

    from agentuq_nb.steps import STEP_MODULES
    from agentuq_nb.steps.base import Step, StepConfig

    for name in STEP_MODULES:
        module = importlib.import_module(f"agentuq_nb.steps.{name}")
        assert isinstance(module.STEP, Step), name
        configs = [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, StepConfig)
                   and v is not StepConfig and v.__module__ == module.__name__]
        assert len(configs) == 1, f"steps.{name} defines {len(configs)} StepConfig classes, not one"
        assert callable(getattr(module, "run", None)), f"steps.{name} has no run()"
        parameters = inspect.signature(module.run).parameters
        expected = ["run_dir", "config"] if module.STEP.run_folder else ["config"]
        assert list(parameters)[:len(expected)] == expected, f"steps.{name}.run{inspect.signature(module.run)}"
        assert all(p.default is not p.empty for p in list(parameters.values())[len(expected):]), name


def test_a_step_run_reads_its_config_where_it_uses_it_and_names_no_local_run():
    """No ``c = config`` or ``(a, b) = (config.a, config.b)`` at the top of ``run``, no local ``run`` hiding it."""
    import ast

    from agentuq_nb.steps import STEP_MODULES

    found = []
    for name in STEP_MODULES:
        tree = ast.parse((PACKAGE / "steps" / f"{name}.py").read_text())
        body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run")
        for node in ast.walk(body):
            if isinstance(node, ast.Name) and node.id == "run" and isinstance(node.ctx, ast.Store):
                found.append(f"steps.{name}.run names a local run (line {node.lineno})")
            if isinstance(node, ast.Assign) and any("config" in {n.id for n in ast.walk(node.value)
                                                                 if isinstance(n, ast.Name)} and
                                                    isinstance(t, (ast.Tuple, ast.Name)) and
                                                    (isinstance(node.value, ast.Name) or isinstance(t, ast.Tuple))
                                                    for t in node.targets) and \
                    all(isinstance(v, ast.Attribute) or isinstance(v, ast.Name) for v in
                        (node.value.elts if isinstance(node.value, ast.Tuple) else [node.value])):
                found.append(f"steps.{name}.run unpacks or rebinds its config (line {node.lineno})")
    assert not found, found



def import_cycle(imports: dict[str, set[str]]) -> list[str]:
    """One cycle of a module → imported modules graph (``[a, b, a]``: a imports b imports a), ``[]`` when none."""
    from graphlib import CycleError, TopologicalSorter

    try:
        TopologicalSorter(imports).prepare()
    except CycleError as err:
        return list(err.args[1])
    return []


def test_no_module_of_the_package_imports_itself_through_others():
    """Every import counts, those inside functions too (grimp, import-linter's graph): a cycle hidden behind a lazy
    import still ties two modules into one that cannot be read, tested or moved apart."""
    import grimp

    graph = grimp.build_graph("agentuq_nb", cache_dir=None)
    imports = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert sum(map(len, imports.values())) > 500  # the whole package was read
    assert import_cycle(imports) == [], " imports ".join(import_cycle(imports))


def test_the_cycle_finder_finds_a_lazy_circle():
    assert sorted(set(import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == ["a", "b", "c"]
    assert import_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []



#: the layers below the steps (and distributed beside them): they name no command of the command line
BELOW_STEPS = ("common", "records", "io", "llm", "sim", "uq", "estimators", "evaluation", "intervention", "figures",
               "distributed")
COMMAND_NAME = re.compile(r"agentuq-nb\s+[a-z]")


@pytest.mark.parametrize("package", BELOW_STEPS)
def test_no_layer_below_the_steps_names_a_command(package):
    """A lower layer raises a typed error naming what is missing (``io.errors.MissingArtifactError``, an artefact's
    name); the steps say which command makes it (``Step.produces``, ``steps.hints``): a command name here would be
    wrong for a library user, and goes stale when the command line changes."""
    found = [f"{path.relative_to(PACKAGE)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0)!r}"
             for path in sorted((PACKAGE / package).rglob("*.py")) for text in [path.read_text()]
             for m in COMMAND_NAME.finditer(text)]
    assert not found, "command names below the steps (say the artefact; steps.hints says the command):\n" + \
        "\n".join(found)


def test_the_grep_for_command_names_catches_one():
    assert COMMAND_NAME.search("run 'agentuq-nb\n  aggregate RUN_DIR' first")
    assert not COMMAND_NAME.search("agentuq-nb: serving") and not COMMAND_NAME.search("agentuq-nb-worker-setup")


#: string literals below the steps that hold a ``--word`` which is no flag of this toolkit's command line, each with why
NOT_OUR_FLAGS = {
    "llm/llama_build.py": "a command of its own (python -m agentuq_nb.llm.llama_build: its argparse flags), and "
                          "pip's and objdump's arguments",
    "figures/explorer.py": "--aq-height, a CSS custom property of the page",
    "figures/intervention.py": "'--o', a matplotlib line format",
}
FLAG_WORD = re.compile(r"(?<![\w-])--[a-z]")


def flag_words(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal of ``source`` with a ``--word`` in it, docstrings left out (they document
    the command line for the reader of the code; a message reaches a library user)."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and FLAG_WORD.search(node.value)]


@pytest.mark.parametrize("package", BELOW_STEPS)
def test_no_message_below_the_steps_names_a_flag(package):
    """A lower layer names the option by its config field (``failure_threshold``, ``policy.oracle``, a one-word field
    heading a clause: ``score 'x': ...``); the command line says it as its flag (``cli.in_flags``), a library user
    reads the name they set. A flag here is wrong for that user and goes stale when the command line changes."""
    found = [f"{path.relative_to(PACKAGE)}:{line}: {text[:80]!r}"
             for path in sorted((PACKAGE / package).rglob("*.py"))
             if str(path.relative_to(PACKAGE)) not in NOT_OUR_FLAGS
             for line, text in flag_words(path.read_text())]
    assert not found, "flags below the steps (name the config field; the command line says its flag):\n" + \
        "\n".join(found)


def test_the_scan_for_flag_words_catches_one_in_a_message_not_in_a_docstring():
    source = ('def f(x):\n    """Set by --threshold."""\n'
              '    raise ValueError(f"threshold {x} is not a number; "\n                     "e.g. --threshold 0.5")\n')
    assert [line for line, _ in flag_words(source)] == [3]
    assert flag_words('X = "a-b--c, 1 -- 2, --5"\n') == []
    assert all((PACKAGE / path).exists() for path in NOT_OUR_FLAGS)  # no stale exemption


MISSING_ARTIFACT = ("import sys, tempfile\n"
                    "{imports}\n"
                    "from agentuq_nb.io.store.rundir import RunDir\n"
                    "from agentuq_nb.io.errors import MissingArtifactError\n"
                    "with tempfile.TemporaryDirectory() as folder:\n"
                    "    run = RunDir(folder)\n"
                    "    try:\n"
                    "        run.require('trajectory_summary')\n"
                    "    except MissingArtifactError as err:\n"
                    "        assert err.artifact == 'trajectory_summary' and err.file == 'trajectory_summary.parquet'\n"
                    "        print(str(err).replace(str(run.path), 'RUN'))\n"
                    "print(any(m.startswith('agentuq_nb.steps') for m in sys.modules))\n")


def test_a_missing_artefact_says_the_same_command_whatever_was_imported_before():
    """The store names the artefact; the command that makes it is said by the steps' declarations, which the message
    loads itself (``io.errors.load_command_layer``, named by the package's root): a notebook importing only the
    estimators reads the command line's text, as one that imported the steps does. Only where no layer with commands
    is named does the store say the artefact in its own terms."""
    def said(imports: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", MISSING_ARTIFACT.format(imports=imports)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    command = "RUN: no trajectory_summary.parquet; run 'agentuq-nb aggregate RUN' first"
    assert said("import agentuq_nb.estimators") == [command, "True"]
    assert said("import agentuq_nb.steps") == [command, "True"]
    alone = said("import agentuq_nb.estimators\nfrom agentuq_nb.io.errors import COMMAND_LAYER\nCOMMAND_LAYER.clear()")
    assert alone == ["RUN: no trajectory_summary.parquet; run the step of agentuq_nb.steps that makes the artefact "
                     "'trajectory_summary' (trajectory_summary.parquet) first", "False"]


DOTTED = re.compile(r"(?<![\w.\"'])agentuq_nb((?:\.[A-Za-z_]\w*)+)")
RELATIVE_MODULE = re.compile(r":mod:`~?\.(\w+(?:\.\w+)*)`")


def _module_file(parts: list[str]) -> Path | None:
    path = PACKAGE.joinpath(*parts)
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    compiled = list(path.parent.glob(f"{path.name}.c")) if parts else []
    return compiled[0] if compiled else None


def _defines(module: Path, name: str) -> bool:
    text = module.read_text()
    return bool(re.search(rf"^\s*(?:def|class|async def)\s+{name}\b|^\s*{name}\s*[:=]|\bimport\b[^\n]*\b{name}\b"
                          rf"|\b{name}\s+as\b|[\"']{name}[\"']", text, flags=re.M))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_module_a_docstring_or_comment_names_exists(path):
    """``agentuq_nb.a.b[.name]`` and ``:mod:`.sibling``` name a module of the package (and a name it defines)."""
    text = path.read_text()
    for match in DOTTED.finditer(text):
        parts = match.group(1).lstrip(".").split(".")
        k = next((k for k in range(len(parts), 0, -1) if _module_file(parts[:k]) is not None), 0)
        assert k or parts[0] in ("explore", "commit", "action_sampling"), \
            f"{path.relative_to(PACKAGE)} names agentuq_nb{match.group(1)}: no such module"
        if 0 < k < len(parts):
            module = _module_file(parts[:k])
            assert _defines(module, parts[k]), \
                f"{path.relative_to(PACKAGE)} names agentuq_nb{match.group(1)}: {module.relative_to(PACKAGE)} " \
                f"defines no {parts[k]}"
    for match in RELATIVE_MODULE.finditer(text):
        parts = list(path.relative_to(PACKAGE).parent.parts) + match.group(1).split(".")
        assert _module_file(parts) is not None, f"{path.relative_to(PACKAGE)} names :mod:`.{match.group(1)}`: no such module"


# --------------------------------------------------------------------------- what a step offers other code
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def step_module_offers() -> dict[str, set[str]]:
    """Each step module (one that declares a ``STEP``) by name → what other code may import from it: its ``run``,
    ``show`` (what the command prints), ``STEP``, its config class, the class ``run`` returns (a report a composite
    command holds) and its keyword form (the library call named as the module or its command, which does what
    ``run`` does). Modules of ``steps/`` without a ``STEP`` (``base``,
    ``hints``, ``scoring_jobs`` …) are the steps' shared pieces: anything they define is for the steps."""
    import importlib
    import inspect

    from agentuq_nb.steps import STEP_MODULES
    from agentuq_nb.steps.base import step_config

    offers = {}
    for name in STEP_MODULES:
        module = importlib.import_module(f"agentuq_nb.steps.{name}")
        returned = {word for word in re.findall(r"\w+", str(inspect.signature(module.run).return_annotation))
                    if inspect.isclass(vars(module).get(word)) and vars(module)[word].__module__ == module.__name__}
        offers[name] = {"run", "show", "STEP", step_config(module).__name__, name,
                        module.STEP.name.replace("-", "_")} | returned
    return offers


def step_names_imported(source: str) -> list[tuple[int, str, str]]:
    """(line, step module, name) of every ``from agentuq_nb.steps.<module> import name`` in ``source``, those inside
    functions too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentuq_nb.steps."):
            module = node.module.split(".")[2]
            found.extend((node.lineno, module, alias.name) for alias in node.names)
    return found


def notebook_code(path: Path) -> str:
    """The code cells of a notebook as one Python source (IPython's ``%`` and ``!`` lines left out)."""
    import json

    cells = json.loads(path.read_text())["cells"]
    return "\n".join(line for cell in cells if cell["cell_type"] == "code"
                     for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))


#: step internals still imported (file, step module) → why: each a piece left to move, said here so that it is not
#: copied (the scan fails when one is gone: drop it here then); none is left
STEP_INTERNALS_LEFT: dict[tuple[str, str], str] = {}


def step_internals_imported(left: dict | None = None) -> list[str]:
    """Every name a step module, a study of ``pipeline/`` or a notebook imports from a step module other than what
    that step offers (:func:`step_module_offers`); a step module imports no other step's keyword form (it calls
    ``run`` with the config). ``left``: imports known and said why (:data:`STEP_INTERNALS_LEFT`), reported only when
    they are gone."""
    offers = step_module_offers()
    left = {} if left is None else left
    found, still_left = [], set()
    for path in sorted((PACKAGE / "steps").glob("*.py")) + sorted((PACKAGE / "pipeline").glob("*.py")) + NOTEBOOKS:
        in_steps = path.parent.name == "steps"
        source = notebook_code(path) if path.suffix == ".ipynb" else path.read_text()
        for line, module, name in step_names_imported(source):
            if module == path.stem or module not in offers:
                continue
            allowed = offers[module] - ({module, module.replace("_", "-")} if in_steps else set())
            allowed = {a for a in allowed if not in_steps or a in ("run", "show", "STEP") or a[0].isupper()}
            if name not in allowed and (str(path.relative_to(ROOT)), module) not in left:
                found.append(f"{path.relative_to(ROOT)}:{line}: {name} from steps.{module}")
            elif name not in allowed:
                still_left.add((str(path.relative_to(ROOT)), module))
    found.extend(f"{path}: imports nothing of steps.{module} any more: drop it from STEP_INTERNALS_LEFT"
                 for path, module in sorted(set(left) - still_left))
    return found


def test_no_step_pipeline_or_notebook_imports_a_steps_internals():
    """Issue 52: a step imports no other step's internals (a composite command such as ``analyze`` calls the others'
    ``run`` with their config and prints what they print, ``show``); the studies (``pipeline/``) and the notebooks
    call the library (a step's keyword form, ``run``); readers of a run folder's artefacts live in the store
    (``io.store.artifacts``), what several steps share in a module of the steps without a ``STEP`` or below."""
    found = step_internals_imported(STEP_INTERNALS_LEFT)
    assert not found, "step internals imported (move the piece to the layer it belongs to):\n" + "\n".join(found)


def test_the_scan_for_step_internals_reads_imports_inside_functions_and_notebooks(tmp_path):
    source = "def f():\n    from agentuq_nb.steps.extract import run_results, run\n"
    assert step_names_imported(source) == [(2, "extract", "run_results"), (2, "extract", "run")]
    offers = step_module_offers()
    assert {"run", "show", "STEP", "ExtractConfig", "extract"} <= offers["extract"]
    assert "base" not in offers and "hints" not in offers
    notebook = tmp_path / "n.ipynb"
    notebook.write_text('{"cells": [{"cell_type": "code", "source": ["%matplotlib inline\\n", '
                        '"from agentuq_nb.steps.evaluate import estimator_rows"]}]}')
    assert step_names_imported(notebook_code(notebook)) == [(1, "evaluate", "estimator_rows")]
