"""Shared fixtures: where the real τ²-bench files are, and small synthetic runs."""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

# Under pytest-xdist (make test: 2 workers on 2 cores) each worker's embedded model decodes its large batches on one
# llama.cpp thread (the commands and kernels the tests start inherit it): two workers of two threads each fight over
# two cores, and llama.cpp's threads wait by spinning. Measured: three bookshop simulations took 48.2 s of CPU on two
# threads, 39.2 s on one (user+sys, same machine, back to back). The numbers do not depend on the thread count (the
# model switches between 1 and N threads per batch already). A run in one process (TEST_WORKERS=0) keeps the default.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("AGENTUQ_NB_THREADS", "1")

import agentuq_nb  # noqa: E402,F401  -- sets the offline defaults before any test module imports litellm
from agentuq_nb.common.jsonschema_import import import_jsonschema  # noqa: E402

import_jsonschema()  # before the test modules import nbformat and papermill: without the IRI grammar (1.5 s a worker)
from agentuq_nb.io.embedding_cache import CACHE_ENV


def seed_static_table(cache_file: str) -> None:
    """Copy the static MiniLM table ``make setup`` distilled into the user's cache folder beside ``cache_file`` (when
    there is one), so that this process and every command and kernel the tests start read it instead of distilling it
    again (~25 s of both cores a process). The copy is read as any table file is (checked, refused if it is not the
    table of this model and settings); tests/test_static_embedding.py checks it against MiniLM run afresh."""
    try:
        from agentuq_nb.io.embedding_cache import cache_path
        from agentuq_nb.io.static_table import KEY_NAME, table_path
        from agentuq_nb.uq.static_embedding import table_identity

        identity = table_identity()
    except (ImportError, RuntimeError):  # the [embeddings] extra is not installed: no table to read
        return
    users, ours = table_path(cache_path(None), identity), table_path(Path(cache_file), identity)
    if users is not None and users.is_file() and not users.is_symlink():
        key = users.parent / KEY_NAME  # the table's keyed checksum holds under the key it was written with
        if key.is_file() and not key.is_symlink():
            shutil.copyfile(key, ours.parent / KEY_NAME)
            shutil.copyfile(users, ours)


EMBED_CACHE_PREFIX = "agentuq-nb-embed-cache-"


def make_embed_cache() -> str:
    """The persistent embedding cache of every test (and of the commands and kernels they start): a temporary file,
    never the user's, set before any embedder is made (the user's static table is copied in, read only). An xdist
    worker takes the folder of the pytest process that started it (made, seeded and removed at its exit by that
    process; the cache is safe to share between processes): a worker ends without running its exit handlers, so a
    folder of its own was left in the temporary directory after every run (31 MB each with the table's copy)."""
    inherited = Path(os.environ.get(CACHE_ENV) or ".")
    if os.environ.get("PYTEST_XDIST_WORKER") and inherited.parent.name.startswith(EMBED_CACHE_PREFIX) \
            and inherited.parent.is_dir():
        return str(inherited)
    cache = os.path.join(tempfile.mkdtemp(prefix=EMBED_CACHE_PREFIX), "embeddings.sqlite")
    atexit.register(shutil.rmtree, os.path.dirname(cache), ignore_errors=True)
    seed_static_table(cache)
    return cache


EMBED_CACHE = make_embed_cache()
os.environ[CACHE_ENV] = EMBED_CACHE

ROOT = Path(__file__).resolve().parents[1]
TAU2_DIR = ROOT.parent / "shared" / "data" / "tau2"
TAU2_FILES = sorted(TAU2_DIR.glob("*.json")) if TAU2_DIR.is_dir() else []


def require_tau2() -> list[Path]:
    if not TAU2_FILES:
        pytest.skip(f"real τ²-bench files not found in {TAU2_DIR} (they live in ../shared/data/tau2 beside the checkout)")
    return TAU2_FILES


@pytest.fixture
def tau2_files() -> list[Path]:
    return require_tau2()


@pytest.fixture
def synthetic_results(tmp_path) -> Path:
    from agentuq_nb.testing.synthetic import write_synthetic_results

    return write_synthetic_results(tmp_path / "src", num_simulations=12, messages_per_simulation=14, tokens_per_message=7)


def make_aggregated_run(tmp: Path, **synthetic) -> Path:
    """Synthetic results → extract → aggregate in ``tmp/run`` (shared by the estimator tests)."""
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp / "src", **synthetic)
    extract(results, tmp / "run")
    aggregate(tmp / "run")
    return tmp / "run"


def run_cli(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``agentuq-nb ARGS`` in this process (typer's CliRunner over the same app, its one-line errors and exit codes):
    returncode, stdout and stderr as a subprocess of the installed script gives them, without a second Python that
    imports the package again (~1.3 s of CPU a call) and loads the embedded model again. Tests whose point is the
    installed script itself (help at a terminal width, --version, a run as a user starts it) keep a subprocess."""
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv, env=env, prog_name="agentuq-nb", catch_exceptions=False)
    return subprocess.CompletedProcess(["agentuq-nb", *argv], result.exit_code, result.stdout, result.stderr)


def free_port() -> int:
    """A TCP port nothing listens on now (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(port: int, proc, timeout: float = 60) -> None:
    """Wait until the server process ``proc`` answers ``GET /v1/models`` on ``port``; fail if it dies first."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the server on port {port} did not come up: "
                                     f"{proc.stderr.read() if proc.poll() is not None and proc.stderr else 'timeout'}")
            time.sleep(0.2)


@contextmanager
def serving_in_thread(**options):
    """serve-local in a thread of this process on a free port (``options``: more arguments of ``serve_local``, e.g.
    ``fit_context=True``); yields ``(base_url, port, thread)``."""
    import threading

    from agentuq_nb.llm import server

    port = free_port()
    ready = threading.Event()
    thread = threading.Thread(target=server.serve_local, kwargs=dict(port=port, ready_event=ready, **options),
                              daemon=True)
    thread.start()
    assert ready.wait(120)  # the model is loaded before the server says it is ready
    try:
        yield f"http://127.0.0.1:{port}/v1", port, thread
    finally:
        server.shutdown()
        thread.join(10)


# The test files that took longest in the last full run (minutes, from its JUnit report through
# benchmarks/slowest_tests.py --order: a fresh clone's make test after the branches s7det, s7emb and s7nb), slowest
# first.
# With `make test`'s --dist loadfile each file runs whole on one worker; the files are handed out in collection order
# (--no-loadscope-reorder: xdist's own order puts the files with the fewest tests last, and a file of one 2-minute
# test at the end leaves the other worker idle), so the longest go first and the many short files fill in at the end.
# A file missing here only runs later.
SLOWEST_FILES = {
    "test_end_to_end.py": 1.6, "test_pipeline_notebooks.py": 1.4, "test_detector.py": 1.4,
    "test_distributed.py": 1.4, "test_intervention_policies.py": 1.2, "test_llm_local.py": 1.0,
    "test_inspect_logs.py": 1.0, "test_intervention_study.py": 0.9, "test_sim_harness.py": 0.9,
    "test_explorer.py": 0.9, "test_action_sampling.py": 0.8, "test_shared_prefix.py": 0.7,
    "test_observation.py": 0.7, "test_llm_sampling.py": 0.7, "test_detector_seen_tasks.py": 0.7, "test_cli.py": 0.7,
}


def pytest_collection_modifyitems(config, items):
    """The slowest files' tests first (see ``SLOWEST_FILES``), each file's tests in their own order."""
    items.sort(key=lambda item: -SLOWEST_FILES.get(item.path.name, 0.0))  # a stable sort: the rest keep their order


def call(name, **arguments):
    """A tool call of a τ²-bench message, as the hand-written conversations of the tests write it."""
    return {"id": "c", "name": name, "arguments": arguments}
