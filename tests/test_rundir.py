"""RunDir: commits published as a set (killed at every step), stamps that refuse mixed or stale files,
one writer per folder, and the leftovers of killed writers cleaned up."""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from agentuq_nb.io.errors import InputError, MixedRunError, StaleArtifactError
from agentuq_nb.io.store.run_lock import RunBusyError
from agentuq_nb.io.store.rundir import RunDir, parquet_commit
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results
from agentuq_nb.uq import read_trajectory_summary

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
BASE_TABLES = ("tokens", "turn_partials", "messages", "trajectories")

# a child that imports extract once, then for each line "results<TAB>out<TAB>n" of its input runs extract in a fork of
# itself that SIGKILLs itself at its n-th file rename (os.replace), or counts them (n = -1), and answers
# "<exit code> <renames>": each killed extract is a process of its own, without a Python that imports the package anew
# (~3.5 s of CPU each; the loop kills one at every rename)
KILL_AT_RENAME = """
import os, signal, sys, traceback
from agentuq_nb.steps.extract import extract


def extract_killed_at(n, results, out):
    real_replace, count = os.replace, [0]

    def replace(src, dst):
        if count[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)
        count[0] += 1
        real_replace(src, dst)

    os.replace = replace
    extract(results, out, force=True)
    return count[0]


for line in sys.stdin:
    results, out, n = line.rstrip("\\n").split("\\t")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(2, 1)  # the answers are this process's only output
        code = 1
        try:
            os.write(write, str(extract_killed_at(int(n), results, out)).encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        renames = pipe.read() or "-"
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), renames, flush=True)
"""


@pytest.fixture(scope="module")
def two_results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two")
    a = write_synthetic_results(tmp / "a", num_simulations=6, messages_per_simulation=8, tokens_per_message=5, seed=1)
    b = write_synthetic_results(tmp / "b", num_simulations=9, messages_per_simulation=8, tokens_per_message=5, seed=2)
    return a, b


@pytest.fixture
def run_a(tmp_path, two_results):
    run = tmp_path / "run"
    extract(two_results[0], run)
    aggregate(run)
    return run


def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file() and not p.name.startswith(".")}


def _base_state(run: Path) -> int:
    """The number of simulations of the run whose base tables the folder holds - checked to be one set."""
    rd = RunDir(run)
    manifest = rd.manifest()
    rd.verify(*(rd.file(name) for name in BASE_TABLES))
    commits = {parquet_commit(rd.file(name)) for name in BASE_TABLES}
    assert len(commits) == 1 and commits == {manifest.artifacts["tokens.parquet"].commit}, commits
    n = len(rd.read_frame("trajectories"))
    assert manifest.num_simulations == n
    assert pd.read_parquet(rd.file("tokens"), columns=["task_id"])["task_id"].nunique() == n
    assert not rd.pending()  # no half-published commit left (an unjournaled staging is removed by the next writer)
    return n


@contextmanager
def killed_extracts(tmp_path):
    """``run(results, out, n)`` → ``(exit code, renames)`` of an extract killed at its n-th rename (see
    ``KILL_AT_RENAME``)."""
    script, log = tmp_path / "kill_at_rename.py", tmp_path / "kill_at_rename.log"
    script.write_text(KILL_AT_RENAME)
    with open(log, "w") as err:
        child = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=err, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})

    def run(results, out, n) -> tuple[int, str]:
        child.stdin.write(f"{results}\t{out}\t{n}\n")
        child.stdin.flush()
        answered = select.select([child.stdout], [], [], 300)[0]
        answer = child.stdout.readline().split() if answered else []
        assert len(answer) == 2, (n, log.read_text()[-2000:])
        return int(answer[0]), answer[1]

    try:
        yield run
    finally:
        child.stdin.close()
        try:
            child.wait(60)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def test_extract_killed_at_every_rename_leaves_one_run_never_a_mix(run_a, two_results, tmp_path):
    results_b = two_results[1]
    outcomes = []
    with killed_extracts(tmp_path) as extract_killed_at:
        code, counted = extract_killed_at(results_b, tmp_path / "count_run", -1)
        assert code == 0, counted
        renames = int(counted)
        assert renames >= 6  # staged tables, journal, the published files
        for n in range(renames):
            run = tmp_path / f"killed_{n}"
            shutil.copytree(run_a, run)
            code, _ = extract_killed_at(results_b, run, n)
            assert code == -9, (n, (tmp_path / "kill_at_rename.log").read_text()[-2000:])
            state = _base_state(run)  # the first reader rolls a journaled commit forward
            assert state in (6, 9), state
            outcomes.append(state)
            if state == 6:  # the old run, whole: its summary still belongs to it
                assert len(read_trajectory_summary(run)) > 0
            else:  # the new run, whole: the old summary is refused as stale, not mixed in
                with pytest.raises(StaleArtifactError, match="aggregate"):
                    read_trajectory_summary(run)
                assert len(aggregate(run)[1]) > 0
    # killed before the journal: the old run; after it: the new one (rolled forward)
    assert outcomes[0] == 6 and outcomes[-1] == 9 and outcomes == sorted(outcomes)


def test_bad_input_publishes_nothing(run_a, tmp_path):
    before = _files(run_a)
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"timestamp": "t", "info": {}, "tasks": [], "simulations": []}))
    with pytest.raises(InputError, match="no simulations"):
        extract(empty, run_a, force=True)
    assert _files(run_a) == before and not (run_a / ".staging").exists()


def test_files_of_another_run_are_refused(run_a, two_results, tmp_path):
    other = tmp_path / "other"
    extract(two_results[1], other)
    shutil.copy(other / "trajectories.parquet", run_a / "trajectories.parquet")
    with pytest.raises(MixedRunError, match="trajectories.parquet does not belong"):
        aggregate(run_a)


def test_a_summary_of_replaced_tokens_is_stale(run_a, two_results):
    from agentuq_nb.steps.compare_estimators import compare_estimators
    from agentuq_nb.steps.evaluate import evaluate

    extract(two_results[1], run_a, force=True)
    for step in (lambda: evaluate(run_a, n_boot=10), lambda: compare_estimators(run_a, n_boot=10)):
        with pytest.raises(StaleArtifactError, match=r"earlier tokens.parquet .*aggregate"):
            step()
    aggregate(run_a)
    assert evaluate(run_a, n_boot=10)["n"] == 9


def test_an_evaluation_is_read_back_checked_and_a_stale_one_is_not_drawn(run_a):
    """evaluate's two files are read by the store's readers (checked against the manifest); analyze's figures take
    the run's evaluation from them and draw no ROC of one computed before the run's tables were replaced."""
    from agentuq_nb.io.store.artifacts import read_eval_curves, read_json_artifact
    from agentuq_nb.steps.analyze import evaluation_curves
    from agentuq_nb.steps.evaluate import evaluate

    result = evaluate(run_a, n_boot=10)
    metrics, curves = evaluation_curves(RunDir(run_a))
    assert metrics == read_json_artifact(run_a, "eval_metrics") and metrics["n"] == result["n"]
    pd.testing.assert_frame_equal(curves, pd.read_csv(run_a / "eval_curves.csv"))
    assert set(read_eval_curves(run_a)["curve"]) >= {"roc"}
    aggregate(run_a)  # a new trajectory summary: the evaluation was made from the one before
    with pytest.raises(StaleArtifactError, match="eval_curves.csv was computed from an earlier trajectory_summary"):
        read_eval_curves(run_a)
    assert evaluation_curves(RunDir(run_a)) is None


def test_a_token_table_added_after_aggregate_makes_the_summary_stale(run_a):
    rd = RunDir(run_a)
    with rd.commit("test") as commit:
        shutil.copy(rd.file("tokens"), commit.stage("tokens.observations_extra.parquet", rd.based_on("tokens")))
    with pytest.raises(StaleArtifactError, match="does not include tokens.observations_extra.parquet"):
        read_trajectory_summary(run_a)


def test_a_listed_table_replaced_by_hand_is_refused_until_forgotten(run_a):
    summary = pd.read_parquet(run_a / "trajectory_summary.parquet")
    summary.assign(extra=1.0).to_parquet(run_a / "trajectory_summary.parquet")  # no commit in its footer
    with pytest.raises(MixedRunError, match=r"carries no commit stamp.*forget\('trajectory_summary.parquet'\)"):
        read_trajectory_summary(run_a)
    RunDir(run_a).forget("trajectory_summary")
    assert "extra" in read_trajectory_summary(run_a)
    # a table the manifest never listed is taken as it is
    summary.to_parquet(run_a / "saup_scores.parquet")
    assert RunDir(run_a).read_frame("saup_scores").shape == summary.shape


def test_a_second_writer_is_refused_with_the_holder_named(run_a, two_results, tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from agentuq_nb.io.store.rundir import RunDir\n"
         "with RunDir(sys.argv[1]).lock('simulate'):\n    print('locked', flush=True); sys.stdin.read()", str(run_a)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunBusyError, match=rf"process {holder.pid} \('simulate'"):
            extract(two_results[1], run_a, force=True)
        refused = run_cli("aggregate", run_a)  # the command's one line, in this process (the holder is another)
        assert refused.returncode == 2 and "is writing this run folder" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        holder.communicate("", timeout=60)
    extract(two_results[1], run_a, force=True)  # the lock went with its holder
    assert _base_state(run_a) == 9


def test_a_killed_holder_leaves_no_lock_and_its_leftovers_are_removed(run_a, two_results):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from agentuq_nb.io.store.rundir import RunDir\n"
         "with RunDir(sys.argv[1]).lock('extract'):\n    print('locked', flush=True); time.sleep(600)", str(run_a)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert holder.stdout.readline().strip() == "locked"
    (run_a / ".tokens.parquet.x1y2.tmp").write_bytes(b"\0" * 1024)   # what a killed atomic write leaves
    (run_a / ".staging" / "abandoned").mkdir(parents=True)          # a commit killed before its journal
    (run_a / ".staging" / "abandoned" / "tokens.parquet").write_bytes(b"partial")
    holder.kill()
    holder.wait(timeout=60)
    extract(two_results[1], run_a, force=True)
    assert not list(run_a.glob(".*.tmp")) and not (run_a / ".staging").exists()
    assert _base_state(run_a) == 9


def test_the_lock_is_held_until_the_last_thread_inside_it_leaves(run_a):
    import threading

    rd = RunDir(run_a)
    inside, leave_b = threading.Event(), threading.Event()

    def thread_b():
        with rd.lock("b"):
            inside.set()
            leave_b.wait(60)

    probe = [sys.executable, "-c", "import sys; from agentuq_nb.io.store.rundir import RunDir\n"
             "with RunDir(sys.argv[1]).lock('probe'): pass", str(run_a)]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with rd.lock("a"):
        b = threading.Thread(target=thread_b)
        b.start()
        assert inside.wait(60)
    refused = subprocess.run(probe, capture_output=True, text=True, env=env, timeout=120)  # A left, B is inside
    assert refused.returncode != 0 and "is writing this run folder" in refused.stderr
    leave_b.set()
    b.join(60)
    assert subprocess.run(probe, capture_output=True, text=True, env=env, timeout=120).returncode == 0
