"""What importing the command line costs: every process a user or the suite starts (a command, `--help`, a papermill
kernel, a Dask worker unpickling a step's job, the LLM server) imports the package, and ``agentuq_nb.steps`` imports
every step module. scikit-learn, SciPy, statsmodels and matplotlib are imported inside the functions that use them
(about 2.5 CPU-s a process on the 2-core machine, benchmarks/RESULTS.md), so a command pays for them only when it
fits, tests or draws; the packages of the optional extras (the embedded model, the embeddings, Dask, litellm) only
when it simulates, embeds or distributes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: what importing the command line and printing its help must not import (a first-level package name each)
NOT_AT_IMPORT = ("sklearn", "scipy", "statsmodels", "matplotlib", "litellm", "torch", "sentence_transformers",
                 "llama_cpp", "distributed")

# imports the command line and prints its help with an import hook that notes, for each package of NOT_AT_IMPORT, the
# first line of this package on the way to it (the importer itself may be a third-party module)
PROBE = """
import builtins, json, sys

watched = set(sys.argv[1].split(","))
first = {}
plain_import = builtins.__import__


def noting_import(name, globals=None, locals=None, fromlist=(), level=0):
    top = name.split(".")[0]
    if level == 0 and top in watched and top not in sys.modules and top not in first:
        frame = sys._getframe(1)
        while frame is not None and not frame.f_globals.get("__name__", "").startswith("agentuq_nb"):
            frame = frame.f_back
        first[top] = f"{frame.f_globals['__name__']} line {frame.f_lineno}" if frame else "outside agentuq_nb"
    return plain_import(name, globals, locals, fromlist, level)


builtins.__import__ = noting_import
from agentuq_nb.cli import app

try:
    app(["--help"])
except SystemExit as exit:
    assert exit.code == 0, exit.code
loaded = sorted(top for top in watched if top in sys.modules)
# then a fit's thread limit: it holds for the pools sklearn and SciPy load, which are loaded by now (not at import)
from threadpoolctl import threadpool_info
from agentuq_nb.evaluation.calibration import one_thread

with one_thread():
    pools = [[pool["internal_api"], pool["filepath"], pool["num_threads"]] for pool in threadpool_info()]
print(json.dumps({"loaded": loaded, "by": {top: first.get(top, "?") for top in loaded}, "pools": pools}))
"""


@pytest.fixture(scope="module")
def probed() -> dict:
    """What PROBE found, in one fresh process for the tests below."""
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(NOT_AT_IMPORT)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Usage" in done.stdout  # the help was printed: the import was not cut short
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_command_line_imports_no_heavy_package(probed):
    report = probed
    assert not report["loaded"], (
        "importing agentuq_nb.cli (and `agentuq-nb --help`) imported "
        + "; ".join(f"{top} (first from {where})" for top, where in report["by"].items())
        + ": every process the package starts pays for it (about 1 s each). Import it inside the function that "
          "uses it (type hints: `if TYPE_CHECKING:`), as agentuq_nb.evaluation.calibration does with sklearn.")


def test_a_fits_one_thread_limit_holds_for_the_pools_imported_after_the_command_line(probed):
    """threadpoolctl limits the pools loaded when the limit is set; sklearn (its OpenMP runtime) and SciPy (its
    BLAS) are no longer loaded by the import, so ``one_thread`` loads them first."""
    pools = probed["pools"]
    assert {api for api, _, _ in pools} >= {"openmp", "openblas"}, pools
    assert all(threads == 1 for _, _, threads in pools), f"pools not limited to one thread inside one_thread: {pools}"
