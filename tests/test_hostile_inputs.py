"""Hostile inputs to extract / aggregate / evaluate (issue 15): nothing lost without a word, nothing
published from a bad input, errors that name the file and the right line, a Ctrl-C that says what it left."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pandas as pd
import pytest

import agentuq_nb
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.input_warnings import InputDataWarning
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.evaluate import evaluate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results

SRC = Path(agentuq_nb.__file__).resolve().parents[1]  # the children run the code under test
TOKENS_PER_MESSAGE = 4


@pytest.fixture
def sidecar_run(tmp_path):
    """Synthetic results whose log-probs are all in sidecars: (results path, the sidecar files)."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=3, messages_per_simulation=6,
                                      tokens_per_message=TOKENS_PER_MESSAGE, forms=("sidecar",), seed=3)
    return results, sorted((results.parent / "sidecars").glob("*.jsonl"))


def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file() and not p.name.startswith(".")}


def _extract_warned(results: Path, run: Path):
    """extract, with the InputDataWarnings it issued by kind."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = extract(results, run)
    issued = {w.message.kind: w.message for w in caught if isinstance(w.message, InputDataWarning)}
    assert set(issued) == set(report.warnings.counts)  # every counted kind is said, once
    assert all(issued[k].count == report.warnings.counts[k] for k in issued)
    return report, issued


def _rewrite(sidecar: Path, lines: list[str]) -> None:
    sidecar.write_text("".join(line + "\n" for line in lines))


# --------------------------------------------------------------------------- silent token loss (point 2)

def test_an_empty_sidecar_is_counted_with_its_messages(sidecar_run, tmp_path):
    results, sidecars = sidecar_run
    sidecars[1].write_text("")
    report, issued = _extract_warned(results, tmp_path / "run")
    assert issued["sidecar_files_empty"].count == 1 and str(sidecars[1]) in str(issued["sidecar_files_empty"])
    # each of the file's generated messages (2 user, 2 assistant, 4 tokens each) lost its rows
    assert issued["sidecar_row_count_differs"].count == 4
    assert "0 rows" in issued["sidecar_row_count_differs"].example and "num_tokens 4" in issued["sidecar_row_count_differs"].example


@pytest.mark.parametrize("blank", ["", "   ", "\t", "\r"])
def test_blank_lines_are_counted_with_the_first_ones_line(sidecar_run, tmp_path, blank):
    results, sidecars = sidecar_run
    lines = sidecars[0].read_text().splitlines()
    _rewrite(sidecars[0], lines[:2] + [blank] + lines[2:5] + [blank, blank] + lines[5:] + [blank])
    report, issued = _extract_warned(results, tmp_path / "run")
    assert issued["sidecar_blank_lines"].count == 4
    assert issued["sidecar_blank_lines"].example == f"{sidecars[0]} line 3"
    assert report.num_tokens == 3 * 4 * TOKENS_PER_MESSAGE  # no row lost


@pytest.mark.parametrize("column", ["role", "token"])
def test_rows_without_role_or_token_are_counted_and_never_make_a_nan_role(sidecar_run, tmp_path, column):
    results, sidecars = sidecar_run
    lines = sidecars[2].read_text().splitlines()
    at = [1, 5, 6]  # 0-based rows; a blank line before them shifts their line numbers by one
    rows = [json.loads(line) for line in lines]
    for i in at:
        rows[i].pop(column)
    _rewrite(sidecars[2], [""] + [json.dumps(r) for r in rows])
    report, issued = _extract_warned(results, tmp_path / "run")
    kind = f"sidecar_rows_without_{column}"
    assert issued[kind].count == 3 and issued[kind].example == f"{sidecars[2]} line 3"
    assert report.num_tokens == 3 * 4 * TOKENS_PER_MESSAGE
    tokens = read_token_table(tmp_path / "run")
    assert tokens["role"].notna().all() and set(tokens["role"]) == {"assistant", "user"}
    _, trajs = aggregate(tmp_path / "run")
    assert set(trajs["role"]) == {"assistant", "user", "combined"}


@pytest.mark.parametrize("role, kind", [("", "sidecar_rows_without_role"), ("  ", "sidecar_rows_without_role"),
                                        ("banana", "sidecar_rows_role_differs"), ("tool", "sidecar_rows_role_differs")])
def test_a_rows_role_is_its_messages(sidecar_run, tmp_path, role, kind):
    results, sidecars = sidecar_run
    rows = [json.loads(line) for line in sidecars[0].read_text().splitlines()]
    rows[5]["role"] = role
    _rewrite(sidecars[0], [json.dumps(r) for r in rows])
    _, issued = _extract_warned(results, tmp_path / "run")
    assert issued[kind].count == 1
    _, trajs = aggregate(tmp_path / "run")
    assert set(trajs["role"]) == {"assistant", "user", "combined"}


@pytest.mark.parametrize("path", [5, ["a.jsonl"], {"p": 1}])
def test_a_sidecar_reference_that_is_not_a_path(sidecar_run, tmp_path, path):
    results, _ = sidecar_run
    data = json.loads(results.read_text())
    data["simulations"][2]["messages"][4]["raw_data"]["uq_logprobs"]["path"] = path
    bad = results.parent / "bad.json"  # beside the sidecars
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"uq_logprobs.path is .*, not a file path.*simulation sim-2 message 4"):
        extract(bad, tmp_path / "run")


@pytest.mark.parametrize("change", ["drop_last", "drop_middle", "repeat_one"])
def test_a_message_whose_rows_differ_from_num_tokens_is_counted(sidecar_run, tmp_path, change):
    results, sidecars = sidecar_run
    lines = sidecars[0].read_text().splitlines()
    lines = {"drop_last": lines[:-1], "drop_middle": lines[:5] + lines[6:], "repeat_one": lines[:2] + lines[1:]}[change]
    _rewrite(sidecars[0], lines)
    _, issued = _extract_warned(results, tmp_path / "run")
    warning = issued["sidecar_row_count_differs"]
    assert warning.count == 1 and "simulation sim-0" in warning.example and str(sidecars[0]) in warning.example


def test_clean_sidecars_give_no_warning(sidecar_run, tmp_path):
    results, _ = sidecar_run
    _, issued = _extract_warned(results, tmp_path / "run")
    assert issued == {}


def _row(sidecar: Path, i: int) -> dict:
    return json.loads(sidecar.read_text().splitlines()[i])


BAD_ROWS = {
    "truncated": lambda row: json.dumps(row)[:20],
    "not_json": lambda row: "{bad",
    "array": lambda row: "[1, 2]",
    "number": lambda row: "5",
    "string_index": lambda row: json.dumps({**row, "token_idx": "zz"}),
    "string_logprob": lambda row: json.dumps({**row, "chosen_logprob": "high"}),
    "scalar_topk": lambda row: json.dumps({**row, "topk_logprobs": "zz"}),
    "duplicate_key": lambda row: json.dumps(row)[:-1] + ', "token": "x"}',
    "null": lambda row: "null",
    "empty_object": lambda row: "{}",
    # issue 30: a RecursionError while locating the line, and refusals without a line number
    "deep_value": lambda row: json.dumps(row)[:-1] + ', "token": ' + "[" * 3000 + "]" * 3000 + "}",
    "lone_surrogate": lambda row: json.dumps({**row, "token": "X"}).replace('"X"', '"\\ud800"'),
    "index_past_int64": lambda row: json.dumps({**row, "token_idx": 10**20}),
}


@pytest.mark.parametrize("blanks_before", [0, 2])
@pytest.mark.parametrize("position", [0, 6, "last"])
@pytest.mark.parametrize("bad", sorted(BAD_ROWS))
def test_a_bad_sidecar_line_is_named_by_its_line_number(sidecar_run, tmp_path, bad, position, blanks_before):
    results, sidecars = sidecar_run
    before = None
    run = tmp_path / "run"
    extract(results, run)
    before = _files(run)
    lines = sidecars[1].read_text().splitlines()
    at = len(lines) - 1 if position == "last" else position
    lines[at] = BAD_ROWS[bad](_row(sidecars[1], at))
    lines = lines[:1] + [""] * blanks_before + lines[1:] if at > 0 else [""] * blanks_before + lines
    _rewrite(sidecars[1], lines)
    expected_line = at + 1 + blanks_before
    with pytest.raises(InputError) as err:
        extract(results, run)
    assert str(err.value).startswith(f"{sidecars[1]}: sidecar"), err.value
    assert str(err.value).endswith(f"(at line {expected_line})"), err.value
    assert _files(run) == before  # the old run is left as it was


def test_a_sidecar_path_that_is_a_directory_is_said_to_be_one(sidecar_run, tmp_path):
    results, sidecars = sidecar_run
    sidecars[0].unlink()
    sidecars[0].mkdir()
    with pytest.raises(InputError, match=rf"{sidecars[0].name}.* is a directory, not a JSONL file.*sim-0 message 1"):
        extract(results, tmp_path / "run")


def test_sidecar_dir_that_is_not_a_directory(sidecar_run, tmp_path):
    results, sidecars = sidecar_run
    with pytest.raises(InputError, match="sidecar_dir is not a directory"):
        extract(results, tmp_path / "run", sidecar_dir=sidecars[0])
    with pytest.raises(InputError, match="sidecar_dir does not exist"):
        extract(results, tmp_path / "run", sidecar_dir=tmp_path / "nowhere")


# --------------------------------------------------------------------------- bad results into a run (point 1)

@pytest.mark.parametrize("simulations, kind", [({"a": 1}, "an object"), ("abc", "a string"), (None, "null"),
                                               (5, "a number"), (True, "a boolean")])
@pytest.mark.parametrize("nan_elsewhere", [False, True])  # Python's NaN literal: the non-streaming parse
def test_simulations_of_the_wrong_type_are_named_and_publish_nothing(sidecar_run, tmp_path, simulations, kind,
                                                                     nan_elsewhere):
    results, _ = sidecar_run
    run = tmp_path / "run"
    extract(results, run)
    before = _files(run)
    bad = tmp_path / "bad.json"
    header = {"timestamp": "t", "info": {"x": float("nan")} if nan_elsewhere else {}, "tasks": []}
    bad.write_text(json.dumps({**header, "simulations": simulations}))
    with pytest.raises(InputError, match=f"'simulations' has the wrong type: it is {kind}, expected a list"):
        extract(bad, run, force=True)
    assert _files(run) == before and not (run / ".staging").exists()


def test_an_empty_simulations_list_publishes_nothing_and_says_so(sidecar_run, tmp_path):
    results, _ = sidecar_run
    run = tmp_path / "run"
    extract(results, run)
    before = _files(run)
    empty = tmp_path / "aborted.json"
    empty.write_text(json.dumps({"timestamp": "t", "info": {}, "tasks": [{"id": "0"}], "simulations": []}))
    with pytest.raises(InputError, match="no simulations.*aborted"):
        extract(empty, run, force=True)
    assert _files(run) == before


# --------------------------------------------------------------------------- repeated keys (point 3)

def _with_repeat(results: Path, out: Path) -> Path:
    data = json.loads(results.read_text())
    twin = json.loads(json.dumps(data["simulations"][1]))
    twin["id"] = "sim-twin"
    twin["reward_info"]["reward"] = 1.0 - data["simulations"][1]["reward_info"]["reward"]  # contradicting
    data["simulations"].append(twin)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    return out


def test_a_repeated_trajectory_key_is_refused_at_extract(sidecar_run, tmp_path):
    results, _ = sidecar_run
    run = tmp_path / "run"
    extract(results, run)
    before = _files(run)
    doubled = _with_repeat(results, results.parent / "doubled.json")  # beside the sidecars
    with pytest.raises(InputError, match=r"\('1', 0, 1001\) repeats: simulations sim-1 and sim-twin"):
        extract(doubled, run, force=True)
    assert _files(run) == before


def test_a_table_that_still_holds_a_repeated_key_is_refused_by_aggregate_and_evaluate(sidecar_run, tmp_path):
    results, _ = sidecar_run
    run = tmp_path / "run"
    extract(results, run)
    aggregate(run)
    rd = RunDir(run)
    trajectories = pd.read_parquet(rd.file("trajectories"))
    twin = trajectories.iloc[[1]].assign(reward=1.0 - trajectories["reward"].iloc[1])
    pd.concat([trajectories, twin]).to_parquet(rd.file("trajectories"))  # as an older extract left it
    rd.forget("trajectories")
    with pytest.raises(InputError, match=r"trajectories.parquet.*'1', 0, 1001\) repeats"):
        evaluate(run, n_boot=10)
    with pytest.raises(InputError, match=r"trajectories.parquet.*'1', 0, 1001\) repeats"):
        aggregate(run)


# --------------------------------------------------------------------------- Ctrl-C (point 1)

# a child that runs the command line and interrupts itself (SIGINT, as Ctrl-C does) at a chosen point
INTERRUPT = """
import os, signal, sys
from agentuq_nb.io.store import rundir
from agentuq_nb.uq import base_tables

# a process started in the background by a shell without job control inherits SIGINT ignored, and Python
# then installs no KeyboardInterrupt handler: Ctrl-C is what this child plays, so it takes the default
signal.signal(signal.SIGINT, signal.default_int_handler)

where, args = sys.argv[1], sys.argv[2:]
if where == "while_writing":
    real_add = base_tables.BaseTables.add_tokens
    def add_tokens(self, tokens):
        os.kill(os.getpid(), signal.SIGINT)
        real_add(self, tokens)
    base_tables.BaseTables.add_tokens = add_tokens
else:  # after the commit point: the journal is written, the files are not all in place
    real_move, done = rundir.move_staged, []
    def move_staged(folder, staging, files):
        if not done:
            done.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        real_move(folder, staging, files)
    rundir.move_staged = move_staged
from agentuq_nb.cli import app
app(args)
"""


@pytest.mark.parametrize("where, old_run", [("while_writing", True), ("while_writing", False),
                                            ("after_commit_point", True)])
def test_ctrl_c_exits_130_saying_what_the_run_folder_holds(sidecar_run, tmp_path, where, old_run):
    results, _ = sidecar_run
    run = tmp_path / "run"
    other = write_synthetic_results(tmp_path / "other", num_simulations=5, messages_per_simulation=6,
                                    tokens_per_message=3, seed=9)
    if old_run:
        extract(other, run, force=True)
        aggregate(run)
    before = _files(run) if old_run else {}
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, str(script), where, "extract", str(results), "--out", str(run), "--force"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 130, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and message.startswith("interrupted"), done.stderr[-2000:]
    assert str(run) in message
    leftovers = [p.name for p in run.iterdir() if p.name.startswith(".") and p.name != ".lock"]
    assert leftovers == []  # no staging, no temp files
    if where == "while_writing":
        assert "published nothing" in message
        assert ("previous files, unchanged" if old_run else "holds no run") in message
        assert _files(run) == before
    else:
        assert "committed" in message and "complete" in message
        assert RunDir(run).manifest().num_simulations == 3
        assert len(RunDir(run).read_frame("trajectories")) == 3


@pytest.mark.parametrize("step", ["aggregate", "evaluate"])
def test_a_run_folder_that_is_a_file_or_missing_is_named_and_not_created(tmp_path, step):
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.evaluate import evaluate

    call = aggregate if step == "aggregate" else evaluate
    missing = tmp_path / "nowhere" / "run"
    with pytest.raises(InputError, match="no such run folder.*agentuq-nb extract RESULTS"):
        call(missing)
    assert not missing.parent.exists()
    a_file = tmp_path / "results.json"
    a_file.write_text("{}")
    with pytest.raises(InputError, match=f"is a file, not a run folder.*agentuq-nb extract {a_file}"):
        call(a_file)


@pytest.mark.parametrize("threshold", [float("nan"), float("inf"), "x"])
def test_every_failure_split_refuses_a_threshold_that_is_not_a_number(tmp_path, threshold):
    """The check lives where failures are labelled, so compare-estimators, SAUP and notebooks get it too."""
    from agentuq_nb.records.outcomes import failure_labels
    from agentuq_nb.steps.compare_estimators import compare_estimators

    from conftest import make_aggregated_run

    with pytest.raises(ValueError, match="failure threshold .* is not a finite number"):
        failure_labels([0.0, 1.0], threshold)
    run = make_aggregated_run(tmp_path, num_simulations=6, messages_per_simulation=4, tokens_per_message=3)
    with pytest.raises(ValueError, match="failure threshold .* is not a finite number"):
        compare_estimators(run, failure_threshold=threshold, n_boot=10)


@pytest.mark.parametrize("batch_bytes", [1, 10**9])  # one simulation per batch, and all in one
def test_sidecar_rows_of_no_simulation_in_the_results_are_counted(sidecar_run, tmp_path, batch_bytes):
    """A sidecar whose rows carry another trajectory's keys (and no num_tokens to compare with): the
    rows are not this simulation's, so they are dropped - but counted, never silently."""
    results, sidecars = sidecar_run
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for m in sim["messages"]:
            ((m.get("raw_data") or {}).get("uq_logprobs") or {}).pop("num_tokens", None)
    results.write_text(json.dumps(data))
    rows = [json.loads(line) for line in sidecars[0].read_text().splitlines()]
    _rewrite(sidecars[0], [json.dumps({**r, "seed": 999_999}) for r in rows])
    report, issued = _extract_warned_batches(results, tmp_path / "run", batch_bytes)
    lost = issued["sidecar_rows_of_no_simulation"]
    assert lost.count == len(rows) and str(sidecars[0]) in lost.example
    # a file shared by every simulation (agentuq's single partition mode) is no loss at all
    shared = tmp_path / "shared"
    shared_results = write_synthetic_results(shared, num_simulations=3, messages_per_simulation=6,
                                             tokens_per_message=TOKENS_PER_MESSAGE, forms=("sidecar",), seed=3)
    files = sorted((shared / "sidecars").glob("*.jsonl"))
    (shared / "sidecars" / "all.jsonl").write_text("".join(f.read_text() for f in files))
    data = json.loads(shared_results.read_text())
    for sim in data["simulations"]:
        for m in sim["messages"]:
            if (m.get("raw_data") or {}).get("uq_logprobs"):
                m["raw_data"]["uq_logprobs"]["path"] = "sidecars/all.jsonl"
    shared_results.write_text(json.dumps(data))
    report, issued = _extract_warned_batches(shared_results, tmp_path / "shared_run", batch_bytes)
    total = len((shared / "sidecars" / "all.jsonl").read_text().splitlines())
    assert "sidecar_rows_of_no_simulation" not in issued and report.num_tokens == total


def _extract_warned_batches(results: Path, run: Path, batch_bytes: int):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = extract(results, run, batch_bytes=batch_bytes)
    return report, {w.message.kind: w.message for w in caught if isinstance(w.message, InputDataWarning)}


def test_topk_texts_and_logprobs_of_different_lengths_are_counted(sidecar_run, tmp_path):
    results, sidecars = sidecar_run
    rows = [json.loads(line) for line in sidecars[0].read_text().splitlines()]
    rows[2]["topk_tokens"] = rows[2]["topk_tokens"][:-1]
    _rewrite(sidecars[0], [json.dumps(r) for r in rows])
    report, issued = _extract_warned(results, tmp_path / "run")
    assert issued["topk_lengths_differ"].count == 1


def test_a_line_past_duckdbs_object_size_is_named_not_an_earlier_trailing_comma(sidecar_run, tmp_path):
    """Issue 30: a 70 MB line was blamed on a trailing comma (which DuckDB accepts) when DuckDB's 16 MiB
    maximum_object_size refused it."""
    from agentuq_nb.common.limits import MAX_SIDECAR_LINE_BYTES

    results, sidecars = sidecar_run
    rows = [json.loads(line) for line in sidecars[0].read_text().splitlines()]
    lines = [json.dumps(r) for r in rows]
    lines[1] = lines[1][:-1] + ",}"  # a trailing comma: beyond the compiled scanner, accepted by DuckDB
    lines[3] = json.dumps({**rows[3], "token": "z" * (70 << 20)})  # the 70 MB line
    _rewrite(sidecars[0], lines)
    with pytest.raises(InputError, match=rf"the line is [\d,]+ bytes, more than the {MAX_SIDECAR_LINE_BYTES:,}.*"
                                         r"\(at line 4\)$"):
        extract(results, tmp_path / "run")
