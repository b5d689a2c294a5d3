"""Run folders and results from someone else (issue 30): tests that hunt, not only pin.

Hypothesis builds hostile run folders - symlinks in every folder the run owns, planted commit journals,
garbage, truncated and special files where artefacts belong - and hostile results (NaN, long strings, deep
nesting, truncation), runs the command line on them, and asserts what must hold whatever the input: nothing
outside the run folder changes (a checksum of a sibling tree), the command ends with exit 0 or 2, a refusal
is one line, and there is never a traceback. The streaming JSON reader is checked against Python's own
parser on arbitrary documents cut at arbitrary places. Special files (``/dev/zero``, FIFOs…) run in a child
process under ``resource.setrlimit`` and must end, refused, well within their limits.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import agentuq_nb
from agentuq_nb.cli import app
from agentuq_nb.io.ingest import json_stream
from agentuq_nb.io.ingest.json_stream import stream_items
from agentuq_nb.io.store.rundir import JOURNAL, OWNED_FOLDERS, STAGING
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results

SRC = Path(agentuq_nb.__file__).resolve().parents[1]
HUNT = settings(max_examples=25, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# --------------------------------------------------------------------------- the invariants

def tree_checksum(root: Path) -> str:
    """Every entry under ``root`` (not followed through links): its path, kind, mode, size, content or target."""
    digest = hashlib.sha256()
    for parent, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(parent) / name
            st_ = os.lstat(path)
            digest.update(f"{path.relative_to(root)}|{stat.S_IFMT(st_.st_mode)}|{stat.S_IMODE(st_.st_mode)}".encode())
            if stat.S_ISLNK(st_.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(st_.st_mode):
                digest.update(path.read_bytes())
    return digest.hexdigest()


@contextmanager
def time_limit(seconds: int):
    """A command that blocks (a FIFO read) fails the test instead of hanging it."""
    def expired(signum, frame):
        raise TimeoutError(f"the command did not end within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(*args) -> tuple[int, str, str]:
    with time_limit(60):
        result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def said(stderr: str) -> list[str]:
    """What a command said on stderr, progress bars left out."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith(("extract:", "\r"))
            and "%|" not in line]


def assert_ended_cleanly(code: int, stdout: str, stderr: str) -> None:
    assert code in (0, 2), (code, stdout[-1500:], stderr[-1500:])
    assert "Traceback" not in stdout + stderr, stderr[-3000:]
    if code == 2:
        errors = [line for line in said(stderr) if line.startswith("error: ")]
        assert len(errors) == 1, stderr
        assert said(stderr)[-1] == errors[0], stderr  # the refusal is the last thing said, in one line


# --------------------------------------------------------------------------- a run to attack

@pytest.fixture(scope="module")
def made_run(tmp_path_factory):
    """A small extracted and aggregated run, and its results (copied into each example's sandbox)."""
    root = tmp_path_factory.mktemp("made")
    results = write_synthetic_results(root / "src", num_simulations=4, messages_per_simulation=4,
                                      tokens_per_message=3, seed=5)
    run = root / "run"
    extract(results, run)
    aggregate(run)
    return results, run


@pytest.fixture
def sandbox(tmp_path):
    """A fresh folder per example: run/ (the attacked run) and sibling/ (what must never change)."""
    counter = iter(range(10**6))

    def make(made_run) -> tuple[Path, Path, Path]:
        box = tmp_path / f"box{next(counter)}"
        results, run = made_run
        shutil.copytree(run, box / "run", symlinks=True)
        sibling = box / "sibling"
        (sibling / "sub" / "deeper").mkdir(parents=True)
        (sibling / ".bashrc").write_text("export KEEP=1\n")
        (sibling / "sub" / "data.txt").write_text("keep me\n")
        (sibling / "sub" / "deeper" / ".x.tmp").write_text("a temp-looking file that is not ours\n")
        (sibling / ".tokens_by_task.x").mkdir()
        (sibling / "sub" / "deeper" / "PUBLISH.json").write_text("{}")
        return box, box / "run", sibling

    return make


# the hostile changes a folder can carry; each is (kind, target-or-content)
OWNED = sorted(OWNED_FOLDERS) + ["checkpoints/action_samples", "checkpoints/observations_agent_llm"]
ARTEFACTS = ["tokens.parquet", "manifest.json", "trajectories.parquet", "trajectory_summary.parquet",
             "turn_summary.parquet", "turn_summary.csv", "turn_partials.parquet", "tokens.observations_x.parquet",
             ".lock", ".lock.holder", ".manifest.json.abc.tmp"]
JOURNAL_ENTRIES = ["../../sibling/.bashrc", "../sibling/sub/data.txt", "/etc/hostname", "..", ".", "", "sidecars",
                   "checkpoints", "tokens.parquet", "manifest.json", "sub/tokens.parquet", "tokens.x.parquet",
                   5, None, ["a"], {"a": 1}]


@st.composite
def hostile_changes(draw):
    changes = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["link_owned", "journal", "artefact"]))
        if kind == "link_owned":
            changes.append(("link_owned", draw(st.sampled_from(OWNED)),
                            draw(st.sampled_from(["sibling", "sibling/sub", "sibling/.bashrc", "/dev/zero", "."]))))
        elif kind == "journal":
            files = draw(st.lists(st.sampled_from(JOURNAL_ENTRIES), min_size=0, max_size=3))
            staged = draw(st.sampled_from(["regular", "link_out", "directory", "none"]))
            form = draw(st.sampled_from(["json", "truncated", "not_object", "link_out", "fifo", "directory"]))
            changes.append(("journal", json.dumps(files), staged + "|" + form))
        else:
            changes.append(("artefact", draw(st.sampled_from(ARTEFACTS)),
                            draw(st.sampled_from(["garbage", "truncated", "empty", "fifo", "dev_zero", "link_sibling",
                                                  "directory", "huge_json"]))))
    return changes


def plant(run: Path, sibling: Path, changes) -> None:
    for kind, what, how in changes:
        if kind == "link_owned":
            path = run / what
            if os.path.lexists(path):
                _remove(path)
            path.parent.mkdir(parents=True, exist_ok=True) if not os.path.islink(path.parent) else None
            if os.path.isdir(path.parent) and not os.path.islink(path.parent):
                target = run if how == "." else (Path(how) if how.startswith("/") else sibling.parent / how)
                path.symlink_to(target)
        elif kind == "journal":
            staged, form = how.split("|")
            staging = run / STAGING
            if os.path.islink(staging) or (os.path.lexists(staging) and not os.path.isdir(staging)):
                continue
            commit = staging / hashlib.sha1(what.encode()).hexdigest()[:12]
            commit.mkdir(parents=True, exist_ok=True)
            for entry in json.loads(what):
                if isinstance(entry, str) and entry and "/" not in entry and entry not in (".", "..") \
                        and not os.path.lexists(commit / entry):
                    source = commit / entry
                    if staged == "regular":
                        source.write_text("staged by someone else")
                    elif staged == "link_out":
                        source.symlink_to(sibling / ".bashrc")
                    elif staged == "directory":
                        source.mkdir(exist_ok=True)
            journal = commit / JOURNAL
            body = json.dumps({"commit": commit.name, "step": "planted", "files": json.loads(what)})
            if form == "json":
                journal.write_text(body)
            elif form == "truncated":
                journal.write_text(body[: len(body) // 2])
            elif form == "not_object":
                journal.write_text("[1, 2]")
            elif form == "link_out":
                journal.symlink_to(sibling / ".bashrc")
            elif form == "fifo":
                os.mkfifo(journal)
            else:
                journal.mkdir()
        else:
            path = run / what
            old = path.read_bytes() if os.path.isfile(path) and not os.path.islink(path) else b"PAR1\x00\x00PAR1"
            if os.path.lexists(path):
                _remove(path)
            if how == "garbage":
                path.write_bytes(bytes(range(256)) * 3)
            elif how == "truncated":
                path.write_bytes(old[: len(old) // 2])
            elif how == "empty":
                path.write_bytes(b"")
            elif how == "fifo":
                os.mkfifo(path)
            elif how == "dev_zero":
                path.symlink_to("/dev/zero")
            elif how == "link_sibling":
                path.symlink_to(sibling / "sub" / "data.txt")
            elif how == "directory":
                path.mkdir()
            else:
                path.write_text('{"artifacts": {}, "x": "' + "y" * 200_000 + '"}')


def _remove(path: Path) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


COMMANDS = [("estimators", "{run}"), ("aggregate", "{run}"), ("evaluate", "{run}", "--n-boot", "0"),
            ("trials", "{run}", "--n-boot", "0"), ("extract", "{results}", "--out", "{run}")]


@HUNT
@given(changes=hostile_changes(), command=st.sampled_from(COMMANDS))
def test_a_hostile_run_folder_never_touches_outside_and_is_refused_in_one_line(made_run, sandbox, changes, command):
    box, run, sibling = sandbox(made_run)
    plant(run, sibling, changes)
    outside = tree_checksum(sibling)
    args = [a.format(run=run, results=made_run[0]) for a in command]
    code, stdout, stderr = run_cli(*args)
    assert_ended_cleanly(code, stdout, stderr)
    assert tree_checksum(sibling) == outside, (changes, args, stderr)
    # the run folder's own links still point where they did: nothing was moved through them
    for name in OWNED_FOLDERS:
        path = run / name
        if os.path.islink(path):
            assert os.path.lexists(path)


@pytest.mark.parametrize("owned", sorted(OWNED_FOLDERS) + ["checkpoints/action_samples"])
def test_a_symlinked_owned_folder_is_refused_by_name_and_its_target_kept(made_run, sandbox, owned):
    """The issue's cases: a .staging link made 'aggregate' delete every sub-folder of its target, a sidecars/ or
    checkpoints/ link lost the target's .*.tmp files."""
    box, run, sibling = sandbox(made_run)
    plant(run, sibling, [("link_owned", owned, "sibling/sub")])
    before = tree_checksum(sibling)
    code, _, stderr = run_cli("aggregate", run)
    if "/" in owned:  # checkpoints/<step>: recovery does not walk through it; the step that uses it refuses it
        assert code == 0, stderr
        from agentuq_nb.io.errors import InputError
        from agentuq_nb.io.store.rundir import RunDir

        with pytest.raises(InputError, match="is a symlink to .*not a folder of this run"):
            RunDir(run).checkpoint_dir(owned.split("/")[1])
    else:
        assert code == 2 and f"{run / owned}: is a symlink" in stderr, stderr
    assert tree_checksum(sibling) == before


def test_a_planted_journal_moves_nothing_even_for_a_read_only_command(made_run, sandbox):
    """The issue's case: a journal naming ../../.bashrc made 'estimators' move a file over one outside."""
    box, run, sibling = sandbox(made_run)
    commit = run / STAGING / "feed"
    (run / "sibling").mkdir()
    (run / "sibling" / ".bashrc").write_text("from the run folder")  # what the escape would have moved out
    commit.mkdir(parents=True)
    (commit / JOURNAL).write_text(json.dumps({"commit": "feed", "step": "x", "files": ["../../sibling/.bashrc"]}))
    before = tree_checksum(sibling)
    code, _, stderr = run_cli("estimators", run)
    assert code == 2 and "../../sibling/.bashrc" in stderr and "not a file of a run folder" in stderr, stderr
    assert tree_checksum(sibling) == before and (sibling / ".bashrc").read_text() == "export KEEP=1\n"
    assert (run / "sibling" / ".bashrc").exists()


def test_recovery_still_rolls_our_own_journal_forward(made_run, sandbox):
    """The checks refuse what is not ours, and keep doing what is: a journaled commit is finished."""
    box, run, sibling = sandbox(made_run)
    commit = run / STAGING / "cafe"
    commit.mkdir(parents=True)
    (commit / "eval_curves.csv").write_text("curve\nroc\n")
    (commit / JOURNAL).write_text(json.dumps({"commit": "cafe", "step": "evaluate", "files": ["eval_curves.csv"]}))
    (run / ".x.tmp").write_text("left by a killed writer")
    code, _, stderr = run_cli("aggregate", run)
    assert code == 0, stderr
    assert (run / "eval_curves.csv").read_text() == "curve\nroc\n"
    assert not (run / STAGING).exists() and not (run / ".x.tmp").exists()


# --------------------------------------------------------------------------- hostile results

@st.composite
def hostile_results(draw, results: Path):
    data = json.loads(results.read_text())
    sims = data["simulations"]
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(sims) - 1))
        change = draw(st.sampled_from(["nan_reward", "inf_elsewhere", "long_string", "deep", "wrong_type", "extra_key",
                                       "unicode"]))
        sim = sims[i]
        if change == "nan_reward":
            sim["reward_info"]["reward"] = float("nan")
        elif change == "inf_elsewhere":
            sim["reward_info"]["x"] = draw(st.sampled_from([float("inf"), float("-inf"), float("nan")]))
        elif change == "long_string":
            sim["messages"][0]["content"] = "é" * draw(st.integers(1, 3 << 19))  # up to 1.5 Mi characters
        elif change == "deep":
            sim["messages"][0]["raw_data"] = json.loads("[" * 300 + "]" * 300)
        elif change == "wrong_type":
            sim[draw(st.sampled_from(["messages", "reward_info", "trial"]))] = draw(st.sampled_from(["x", 5, None, {}]))
        elif change == "extra_key":
            sim["reasoning"] = draw(st.text(max_size=20))
        else:
            sim["messages"][0]["content"] = draw(st.text(max_size=30))
    text = json.dumps(data)
    cut = draw(st.sampled_from([None, None, "truncate", "garbage"]))
    if cut == "truncate":
        text = text[: draw(st.integers(0, len(text) - 1))]
    elif cut == "garbage":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["\x00", "}", "[[[", "NaN", '"', "\\"])) + text[at:]
    return text


def reference(text: str):
    """What Python's own parser makes of the text (None: it refuses it)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(data=st.data())
def test_hostile_results_are_read_as_python_reads_them_or_refused_in_one_line(made_run, sandbox, data):
    box, run, sibling = sandbox(made_run)
    text = data.draw(hostile_results(made_run[0]))
    results = made_run[0].parent / f"hostile_{hashlib.sha1(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}.json"
    results.write_text(text, encoding="utf-8", errors="surrogatepass")
    outside = tree_checksum(sibling)
    before = tree_checksum(run)
    code, stdout, stderr = run_cli("extract", results, "--out", run, "--force")  # (another run: replaced)
    assert_ended_cleanly(code, stdout, stderr)
    assert tree_checksum(sibling) == outside
    expected = reference(text)
    if code == 2:
        assert tree_checksum(run) == before  # a refused input publishes nothing
        return
    assert isinstance(expected, dict), "extract took what Python's parser refuses"
    rewards = pd.read_parquet(run / "trajectories.parquet")["reward"].tolist()
    want = [float("nan") if (s.get("reward_info") or {}).get("reward") is None else s["reward_info"]["reward"]
            for s in expected["simulations"]]
    assert len(rewards) == len(want)
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(rewards, want))


# --------------------------------------------------------------------------- the streaming reader == json.loads

JSON_LEAVES = (st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=True)
               | st.text(max_size=40))
JSON_DOCS = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=4)
                         | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=25)


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and a == b)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.dictionaries(st.sampled_from(["timestamp", "info", "tasks"]), JSON_DOCS, max_size=3),
       sims=st.lists(JSON_DOCS, max_size=5), switch=st.integers(1, 64), read=st.integers(1, 64),
       indent=st.sampled_from([None, 0, 2]), cut=st.one_of(st.none(), st.integers(0, 10**6)))
def test_the_streaming_reader_reads_what_json_loads_reads(tmp_path_factory, monkeypatch, header, sims, switch, read,
                                                          indent, cut):
    """Any document, cut anywhere, with the hand-over to the scanner and its reads at any byte: the items
    are json.loads' items, or the document is refused (an InputError, never another exception)."""
    from agentuq_nb.io.errors import InputError

    monkeypatch.setattr(json_stream, "LONG_TOKEN_SWITCH", switch)
    monkeypatch.setattr(json_stream, "SCANNER_READ", read)
    text = json.dumps({**header, "simulations": sims}, indent=indent)
    if cut is not None:
        text = text[: cut % (len(text) + 1)]
    path = tmp_path_factory.mktemp("doc") / "r.json"
    path.write_text(text)
    expected = reference(text)
    try:
        got = list(stream_items(path, "simulations.item"))
    except InputError:
        assert expected is None or not isinstance(expected.get("simulations"), list) or cut is not None
        return
    if expected is not None:
        assert same(got, expected["simulations"])
    else:  # a cut document: what was read before the cut is a prefix of the whole
        assert same(got, sims[: len(got)])


def test_deep_nesting_hands_over_to_the_scanner_and_is_refused_past_what_python_nests(tmp_path):
    """100,000 levels did not end on ijson (its cost grows with the square of the depth); 600 are read, past
    Python's decoder's recursion limit they are refused in one line."""
    from agentuq_nb.io.errors import InputError

    path = tmp_path / "r.json"
    path.write_text('{"simulations": [{"id": "a", "raw": ' + "[" * 600 + "]" * 600 + '}, {"id": "b"}]}')
    assert [s["id"] for s in stream_items(path, "simulations.item")] == ["a", "b"]
    path.write_text('{"simulations": [{"id": "a"}, {"id": "b", "raw": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    started = time.monotonic()
    with pytest.raises(InputError, match="nested too deeply"):
        list(stream_items(path, "simulations.item"))
    assert time.monotonic() - started < 10


def test_a_long_string_is_read_in_linear_time_and_a_string_past_the_limit_refused(tmp_path, monkeypatch):
    from agentuq_nb.io.errors import InputError

    monkeypatch.setattr(json_stream, "MAX_JSON_TOKEN_BYTES", 3 << 20)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"simulations": [{"id": "a", "content": "x" * (2 << 20)}, {"id": "b"}]}))
    assert [len(s.get("content", "")) for s in stream_items(path, "simulations.item")] == [2 << 20, 0]
    path.write_text(json.dumps({"simulations": [{"id": "a"}, {"id": "b", "content": "y" * (4 << 20)}]}))
    with pytest.raises(InputError, match="string longer than 3,145,728 characters"):
        list(stream_items(path, "simulations.item"))


# --------------------------------------------------------------------------- special files, bounded

MEMORY_LIMIT = 1 << 30  # address space of the child: the toolkit's imports need ~600 MiB of it
CPU_SECONDS = 60
WALL_SECONDS = 90


# the child's own peak (VmHWM: the memory of this program, not of the test process it was forked from)
PEAK_REPORTER = """
import atexit, re, runpy, sys
peak_file = sys.argv.pop(1)
def report():
    with open("/proc/self/status") as status, open(peak_file, "w") as out:
        out.write(re.search(r"VmHWM:\\s+(\\d+)", status.read()).group(1))
atexit.register(report)
runpy.run_module("agentuq_nb.cli", run_name="__main__", alter_sys=True)
"""


def run_bounded(args: list[str], cwd: Path) -> tuple[int, str, float, int]:
    """Run the command line in a child under setrlimit (address space, CPU); (exit code, stderr, seconds, peak
    RSS in MiB). A child that reads endlessly is killed by its limits (exit != 2), never left running."""
    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
        resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))

    env = {**os.environ, "PYTHONPATH": str(SRC)}
    peak_file = cwd / f"peak-{time.monotonic_ns()}"
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", PEAK_REPORTER, str(peak_file), *args], cwd=cwd, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=limits)
    deadline = started + WALL_SECONDS
    while True:
        pid, status = os.waitpid(child.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            child.kill()
            pid, status = os.waitpid(child.pid, 0)
            break
        time.sleep(0.05)
    child.returncode = os.waitstatus_to_exitcode(status)
    stderr = child.stderr.read().decode(errors="replace")
    peak = int(peak_file.read_text()) // 1024 if peak_file.exists() else -1
    return child.returncode, stderr, time.monotonic() - started, peak


@pytest.fixture(scope="module")
def special_files(tmp_path_factory, made_run):
    root = tmp_path_factory.mktemp("special")
    os.mkfifo(root / "fifo.json")
    (root / "zero.json").symlink_to("/dev/zero")
    (root / "urandom.json").symlink_to("/dev/urandom")
    (root / "fifo_link.json").symlink_to(root / "fifo.json")
    os.mkfifo(root / "params.yaml")
    run = root / "run"
    shutil.copytree(made_run[1], run)
    return root, run


SPECIAL_CASES = {
    "extract /dev/zero": ["extract", "/dev/zero", "--out", "{root}/out"],
    "extract /dev/urandom via a link": ["extract", "{root}/urandom.json", "--out", "{root}/out"],
    "extract a link to /dev/zero": ["extract", "{root}/zero.json", "--out", "{root}/out"],
    "extract a FIFO": ["extract", "{root}/fifo.json", "--out", "{root}/out"],
    "extract a link to a FIFO": ["extract", "{root}/fifo_link.json", "--out", "{root}/out"],
    "reproduce a FIFO params file": ["reproduce", "{root}/params.yaml"],
    "aggregate: tokens.parquet is a FIFO": ["aggregate", "{run}"],
    "evaluate: manifest.json is /dev/zero": ["evaluate", "{run}", "--n-boot", "0"],
}


@pytest.mark.parametrize("case", sorted(SPECIAL_CASES))
def test_special_files_are_refused_within_bounded_resources(special_files, case):
    root, run = special_files
    if "tokens.parquet" in case:
        _remove(run / "tokens.parquet")
        os.mkfifo(run / "tokens.parquet")
    if "manifest.json" in case:
        _remove(run / "manifest.json")
        (run / "manifest.json").symlink_to("/dev/zero")
    args = [a.format(root=root, run=run) for a in SPECIAL_CASES[case]]
    code, stderr, seconds, peak_mib = run_bounded(args, root)
    assert code == 2, (case, code, stderr[-2000:])  # refused - not killed by a limit, not hanging
    errors = [line for line in said(stderr) if line.startswith("error: ")]
    assert len(errors) == 1 and "not a regular file" in errors[0], stderr
    assert seconds < WALL_SECONDS and 0 < peak_mib < 600, (seconds, peak_mib)
    print(f"{case}: exit 2 in {seconds:.1f} s, peak RSS {peak_mib} MiB")


# --------------------------------------------------------------------------- params files and names

def _bomb(levels: int = 9) -> str:
    text = 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for i in range(1, levels + 1):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text + f"notebooks: [01_simulate]\nparameters: {{x: *a{levels}}}\n"


HOSTILE_PARAMS = {
    "alias bomb (9 levels)": (_bomb(), r"expand to more than 100,000 values"),
    "nested 50,000 deep": ("notebooks: [x]\nparameters: {a: " + "[" * 50_000 + "]" * 50_000 + "}\n",
                           r"nested more than 64 levels deep"),
    "a grid of 9 keys x 10 values": ("notebooks: [01_simulate]\ngrid:\n" + "".join(
        f"  k{i}: [{', '.join(map(str, range(10)))}]\n" for i in range(9)), r"grid expands to 1,000,000,000 studies"),
    "an alias inside itself": ("notebooks: [x]\nparameters: &p {a: *p}\n", r"refers to a value that contains it"),
    "broken YAML": ("notebooks: [x\nparameters: {a: 1\n", r"not valid YAML: .* at line \d+, column \d+$"),
    "too large": ("notebooks: [x]\n# " + "x" * (1 << 20) + "\n", r"more than the 1,048,576 a params file"),
    "a name longer than a file name": ("name: " + "n" * 300 + "\nnotebooks: [x]\n", r"characters long"),
    # issue 41: the last of two keys won without a word; a 5,000-digit integer named no file; params sent the
    # study's tables and figures anywhere while reproduce printed runs/<name>
    "a key twice": ("notebooks: [x]\nparameters:\n  seed: 1\n  n_boot: 5\n  seed: 2\n",
                    r"key 'seed' appears twice in one mapping \(lines 3 and 5\).*\(at line 5\)$"),
    "a top-level key twice": ("notebooks: [x]\nnotebooks: [y]\n", r"key 'notebooks' appears twice"),
    "an integer of 5,000 digits": ("notebooks: [x]\nparameters: {seed: " + "9" * 5000 + "}\n",
                                   r"an integer of 5,000 digits, more than the 4,300 .*\(at line 2\)$"),
    "run_dir redirected": ("notebooks: [x]\nparameters: {run_dir: /abs/elsewhere, figures_dir: /abs/elsewhere}\n",
                           r"parameters sets 'run_dir', which reproduce sets from the project's layout"),
    "figures_dir for one notebook": ("notebooks: [{name: x, parameters: {figures_dir: /abs/elsewhere}}]\n",
                                     r"sets 'figures_dir'.*\(at notebooks\[0\]\.parameters\)$"),
    "run_dir swept by a grid": ("notebooks: [x]\ngrid: {run_dir: [a, b]}\n", r"grid sets 'run_dir'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PARAMS))
def test_hostile_params_files_are_refused_in_one_line_within_the_limits(tmp_path, case):
    from agentuq_nb.io.errors import InputError
    from agentuq_nb.pipeline.reproduce import load_studies

    text, message = HOSTILE_PARAMS[case]
    path = tmp_path / "study.yaml"
    path.write_text(text)
    started = time.monotonic()
    with pytest.raises(InputError, match=message) as refused:
        load_studies(path)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(str(path))
    assert time.monotonic() - started < 10  # the bomb passed 3 GB in 28 s before


def test_a_long_grid_point_name_stays_one_valid_file_name(tmp_path):
    from agentuq_nb.common.limits import MAX_STUDY_NAME_CHARS
    from agentuq_nb.pipeline.reproduce import load_studies

    path = tmp_path / "sweep.yaml"
    path.write_text("notebooks: [01_simulate]\ngrid:\n  task_ids: [['" + "a" * 200 + "'], ['" + "b" * 200 + "']]\n")
    names = [s.name for s in load_studies(path)]
    assert len(set(names)) == 2 and all(len(n) <= MAX_STUDY_NAME_CHARS for n in names)


TOKENS = {  # the shapes (none of them a real key), and the ones recognised before
    "GitHub": "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8",
    "GitHub fine-grained": "github_pat_11ABCDEFG0" + "123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123",
    "Slack bot": "xoxb-123456789012-1234567890123-" + "abcdefghijABCDEFGHIJklmn",
    "Slack user": "xoxp-123456789012-1234567890123-" + "abcdefghij",
    "Google": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "GitLab": "glpat-" + "abcdefghij0123456789",
    "OpenAI": "sk-proj-" + "abcdefghijklmnopqrstuvwxyz123456",
    "Hugging Face": "hf_" + "abcdefghijklmnopqrstuvwxyz12345",
}
NOT_SECRETS = ["local/smollm2-135m-instruct", "openai/gpt-4.1", "http://127.0.0.1:8000/v1", "bookshop", "300",
               "The order #W1234567 was placed", "runs/quickstart/figures", "max_tokens: 64"]


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_secret_shapes_are_refused_in_params_and_masked_in_notebooks(tmp_path, kind):
    from agentuq_nb.common.redaction import find_secret, mask_secrets
    from agentuq_nb.io.errors import InputError
    from agentuq_nb.pipeline.reproduce import load_studies

    token = TOKENS[kind]
    path = tmp_path / "study.yaml"
    path.write_text(f"notebooks: [01_simulate]\nparameters: {{model_arg: 'use {token} here'}}\n")
    with pytest.raises(InputError, match="looks like a secret.*shape of an API key"):
        load_studies(path)
    notebook = {"cells": [{"outputs": [{"text": f"calling with {token}\n"}]}]}
    masked, count = mask_secrets(notebook, secrets=set())
    assert count == 1 and token not in json.dumps(masked) and "***" in json.dumps(masked)
    assert find_secret({"x": f"prefix {token} suffix"}, secrets=set()) is not None


def test_ordinary_values_are_not_taken_for_secrets():
    from agentuq_nb.common.redaction import find_secret, redact

    for value in NOT_SECRETS:
        assert find_secret({"value": value}, secrets=set()) is None, value
        assert redact(value, secrets=set()) == value


@settings(max_examples=300, deadline=None, derandomize=True)
@given(a=st.text(max_size=400), b=st.text(max_size=400))
@example(a=".", b="..")  # a folder's own names: once kept as they were
@example(a=".x", b="x")
def test_file_keys_are_bounded_safe_and_keep_values_apart(a, b):
    from agentuq_nb.common.limits import MAX_FILE_KEY_CHARS
    from agentuq_nb.common.naming import PLAIN_NAME, file_key

    for value in (a, b):
        key = file_key(value)
        assert 0 < len(key.encode()) <= MAX_FILE_KEY_CHARS + 9
        assert "\x00" not in key and "/" not in key and key not in (".", "..")
        if PLAIN_NAME.fullmatch(value) and len(value) <= MAX_FILE_KEY_CHARS:
            assert key == value  # the names of existing runs stay what they were
    assume(a != b)
    assert file_key(a) != file_key(b)


# --------------------------------------------------------------------------- refused before the work

def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file() and not p.name.startswith(".")}


@pytest.mark.parametrize("manifest", ['{"artifacts": {"x": 5}', '{"artifacts": {"x": 5}}', "[]", ""])
def test_a_corrupt_manifest_is_refused_before_the_work_with_a_hint_and_no_staging_left(made_run, sandbox, manifest):
    box, run, sibling = sandbox(made_run)
    (run / "manifest.json").write_text(manifest)
    before = _files(run)
    for command in (["extract", made_run[0], "--out", run], ["analyze", made_run[0], "--out", run, "--n-boot", "0"]):
        code, stdout, stderr = run_cli(*command)
        assert_ended_cleanly(code, stdout, stderr)
        assert code == 2 and "manifest.json" in stderr and "move it away" in stderr, stderr
        assert "simulations" not in stdout  # refused before extracting anything
        assert _files(run) == before and not (run / STAGING).exists()


def test_analyze_checks_the_estimator_name_before_replacing_any_table(made_run, sandbox):
    box, run, sibling = sandbox(made_run)
    before = _files(run)
    for option, value, said in (("--uncertainty", "nope", "unknown uncertainty 'nope'"),
                                ("--role", "wizard", "--role 'wizard' is not a role"),
                                ("--failure-threshold", "nan", "not a finite number")):
        code, stdout, stderr = run_cli("analyze", made_run[0], "--out", run, option, value, "--n-boot", "0")
        assert_ended_cleanly(code, stdout, stderr)
        assert code == 2 and said in stderr, stderr
        assert _files(run) == before
