"""Extraction in batches: the same token rows whatever the batching, every sidecar layout agentuq
writes, paths DuckDB would glob, malformed sidecars; the vectorized token metrics against the
scalar reference; aggregation of rows that are not in turn order."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest.sidecars import SidecarReader
from agentuq_nb.io.ingest.token_sources import SidecarResolver
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.records.tokens import topk_statistics
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results
from agentuq_nb.uq.aggregation import trajectory_summary, turn_summary
from agentuq_nb.uq.token_metrics import topk_stats


def _tokens(run: Path) -> pd.DataFrame:
    return read_token_table(run)


def _restamp_users(results: Path) -> None:
    """agentuq's user simulator re-stamps a user message after its rows were written."""
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for m in sim["messages"]:
            if m["role"] == "user" and m.get("raw_data", {}) and "uq_logprobs" in (m["raw_data"] or {}):
                m["timestamp"] += "Z"
    results.write_text(json.dumps(data))


def test_batching_does_not_change_the_rows(tmp_path):
    """One simulation per batch and everything in one batch give the same table and warnings."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=9, messages_per_simulation=15, tokens_per_message=6)
    _restamp_users(results)  # the join-by-order fallback runs inside batches too
    one = extract(results, tmp_path / "one", batch_bytes=1)
    many = extract(results, tmp_path / "many", batch_bytes=1 << 30)
    pd.testing.assert_frame_equal(_tokens(tmp_path / "one"), _tokens(tmp_path / "many"))
    assert one.warnings.as_dict() == many.warnings.as_dict()
    assert many.warnings.counts["sidecar_rows_joined_by_order"] > 0
    tokens = _tokens(tmp_path / "many")
    # simulation order, then message and token order, within every trajectory
    order = tokens.assign(sim=tokens["task_id"].astype(int)).sort_values(["sim", "message_idx", "token_idx"], kind="stable")
    assert (order.index == tokens.index).all()


def test_timestamps_shared_between_simulations(tmp_path):
    """Rows are placed by their message's timestamp: the lookup by stamp (each stamp in one simulation) and
    the search by (simulation, stamp) (stamps that repeat across simulations) place them alike."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=3, messages_per_simulation=7,
                                      tokens_per_message=3, forms=("sidecar",))
    data = json.loads(results.read_text())
    first, second = data["simulations"][0], data["simulations"][1]
    renamed = {m["timestamp"]: f["timestamp"] for m, f in zip(second["messages"], first["messages"])}
    for message in second["messages"]:
        message["timestamp"] = renamed[message["timestamp"]]
    sidecars = {m["raw_data"]["uq_logprobs"]["path"] for m in second["messages"]
                if (m.get("raw_data") or {}).get("uq_logprobs")}
    for name in sidecars:
        path = results.parent / name
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "message_timestamp": renamed[r["message_timestamp"]]}) + "\n"
                                for r in rows))
    shared = tmp_path / "shared" / "results.json"
    shared.parent.mkdir()
    shared.write_text(json.dumps(data))
    shutil.copytree(results.parent / "sidecars", shared.parent / "sidecars")
    original = write_synthetic_results(tmp_path / "original", num_simulations=3, messages_per_simulation=7,
                                       tokens_per_message=3, forms=("sidecar",))
    extract(original, tmp_path / "run_original")
    columns = [c for c in _tokens(tmp_path / "run_original").columns if c != "message_timestamp"]
    for batch_bytes in (1, 1 << 30):  # a simulation per batch (stamps unique), all in one (stamps repeat)
        report = extract(shared, tmp_path / f"run_{batch_bytes}", batch_bytes=batch_bytes)
        assert not report.warnings.counts
        pd.testing.assert_frame_equal(_tokens(tmp_path / f"run_{batch_bytes}")[columns],
                                      _tokens(tmp_path / "run_original")[columns])


def test_more_sidecars_than_the_resolver_remembers(tmp_path, monkeypatch):
    """One sidecar per message, more distinct files than the resolver keeps resolved: the same rows as one
    sidecar per trajectory (the bound once made the lookup of the path that crossed it fail)."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=4, messages_per_simulation=9,
                                      tokens_per_message=3, forms=("sidecar",))
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for i, message in enumerate(sim["messages"]):
            ref = (message.get("raw_data") or {}).get("uq_logprobs")
            if not ref:
                continue
            rows = [line for line in (results.parent / ref["path"]).read_text().splitlines()
                    if json.loads(line)["message_timestamp"] == message["timestamp"]]
            ref["path"] = ref["path"].removesuffix(".jsonl") + f"_message{i}.jsonl"
            (results.parent / ref["path"]).write_text("\n".join(rows) + "\n")
    split = tmp_path / "split" / "results.json"
    split.parent.mkdir()
    split.write_text(json.dumps(data))
    shutil.copytree(results.parent / "sidecars", split.parent / "sidecars")
    monkeypatch.setattr(SidecarResolver, "RESOLVED_PATHS_KEPT", 3)
    per_message = extract(split, tmp_path / "per_message")
    per_trajectory = extract(results, tmp_path / "per_trajectory")
    assert per_message.num_tokens == per_trajectory.num_tokens > 0
    columns = [c for c in _tokens(tmp_path / "per_trajectory").columns if c != "message_timestamp"]
    pd.testing.assert_frame_equal(_tokens(tmp_path / "per_message")[columns], _tokens(tmp_path / "per_trajectory")[columns])


@pytest.mark.parametrize("missing_keys", [False, True])
def test_single_partition_sidecar_is_split_by_trajectory(tmp_path, missing_keys):
    """agentuq's ``single`` partition mode: every trajectory's rows in one file. With
    ``missing_keys``, some rows lack a key and one simulation has no seed: a missing key
    matches any trajectory, and the timestamp decides."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=6, messages_per_simulation=10,
                                      tokens_per_message=5, forms=("sidecar",))
    data = json.loads(results.read_text())
    if missing_keys:
        data["simulations"][2]["seed"] = None
        results.write_text(json.dumps(data))
        for sidecar in (results.parent / "sidecars").iterdir():
            rows = [json.loads(line) for line in sidecar.read_text().splitlines()]
            for n, row in enumerate(rows):
                row.pop(("seed", "task_id", "trial", None)[n % 4], None)
            sidecar.write_text("".join(json.dumps(row) + "\n" for row in rows))
    per_task = _tokens(extract(results, tmp_path / "per_task").run_dir)
    single = tmp_path / "single"
    (single / "sidecars").mkdir(parents=True)
    with open(single / "sidecars" / "logprobs_20250101_000000_1.jsonl", "w") as out:
        for sim in data["simulations"]:
            paths = {m["raw_data"]["uq_logprobs"]["path"] for m in sim["messages"] if m.get("raw_data")}
            for rel in sorted(paths):
                out.write((results.parent / rel).read_text())
            for m in sim["messages"]:
                if m.get("raw_data"):
                    m["raw_data"]["uq_logprobs"]["path"] = "sidecars/logprobs_20250101_000000_1.jsonl"
    (single / "results.json").write_text(json.dumps(data))
    for batch_bytes in (1, 1 << 30):
        run = extract(single / "results.json", tmp_path / f"run_{batch_bytes}", batch_bytes=batch_bytes)
        # sim-2 has no seed, so other trajectories' rows without a task_id are its candidates too;
        # they match none of its timestamps and are counted, not joined
        warnings = run.warnings.as_dict()
        dropped = warnings.pop("sidecar_rows_unmatched_dropped", None)
        assert warnings == {}
        assert (dropped is None) if not missing_keys else ("simulation sim-2:" in dropped["example"])
        pd.testing.assert_frame_equal(_tokens(run.run_dir), per_task)


def test_paths_with_glob_characters(tmp_path):
    """DuckDB expands ``*?[`` in file names; a results folder named like ``run[1]`` still reads."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=3, forms=("sidecar",))
    odd = tmp_path / "run[1] *?"
    shutil.copytree(results.parent, odd)
    got = _tokens(extract(odd / "results.json", tmp_path / "odd").run_dir)
    ref = _tokens(extract(results, tmp_path / "ref").run_dir)
    pd.testing.assert_frame_equal(got, ref)


def test_truncated_sidecar_names_file_and_line(tmp_path):
    results = write_synthetic_results(tmp_path / "src", num_simulations=4, forms=("sidecar",))
    sidecar = sorted((results.parent / "sidecars").glob("*.jsonl"))[2]
    text = sidecar.read_text()
    sidecar.write_text(text[: len(text) // 2])  # cut inside a row
    with pytest.raises(InputError, match=rf"{sidecar.name}: sidecar is not valid JSONL: .*line \d+"):
        extract(results, tmp_path / "run")
    assert not (tmp_path / "run" / "tokens.parquet").exists()  # nothing half-written


def test_reader_keeps_file_and_line_order_and_reads_python_json(tmp_path):
    """NaN/Infinity literals (Python's json), blank lines, unknown keys, missing keys, empty files."""
    a, b, empty = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "empty.jsonl"
    a.write_text('{"token_idx": 0, "chosen_logprob": NaN, "topk_logprobs": [-Infinity, -1.0], "extra": {"x": 1}}\n\n'
                 '{"token_idx": 1}\n')
    b.write_text('{"token_idx": 7, "chosen_logprob": -0.5}\n')
    empty.write_text("")
    reader = SidecarReader(threads=2)
    tables = reader.read([b, empty, a])
    reader.close()
    assert [t.num_rows for t in tables] == [1, 0, 2]
    assert tables[0].column("token_idx").to_pylist() == [7]
    assert tables[2].column("token_idx").to_pylist() == [0, 1]
    assert math.isnan(tables[2].column("chosen_logprob")[0].as_py())
    assert tables[2].column("topk_logprobs")[0].as_py() == [-math.inf, -1.0]
    assert tables[2].column("message_timestamp").null_count == 2


@pytest.mark.parametrize("blank_line", [False, True])
def test_reader_cuts_rows_by_file_with_or_without_blank_lines(tmp_path, blank_line):
    """Files parsed as one (no blank line) or file by file (a blank line): the same rows per file, also for
    a last line without a newline and an empty file; a file DuckDB refuses is named either way."""
    a, b, empty, c = (tmp_path / f"{name}.jsonl" for name in ("a", "b", "empty", "c"))
    row = '{{"token_idx": {}, "role": "{}", "token": "t", "chosen_logprob": -0.5}}'.format
    a.write_text(row(0, "user") + "\n" + ("\n" if blank_line else "") + row(1, "user"))  # no newline at the end
    b.write_text(row(7, "assistant") + "\n")
    empty.write_text("")
    c.write_text("".join(row(i, "assistant") + "\n" for i in range(3)))
    reader = SidecarReader(threads=2)
    found = InputWarnings()
    tables = reader.read([a, empty, b, c], found)
    assert [t.column("token_idx").to_pylist() for t in tables] == [[0, 1], [], [7], [0, 1, 2]]
    assert [t.column("role").to_pylist() for t in tables][0] == ["user", "user"]
    assert found.counts.get("sidecar_blank_lines", 0) == int(blank_line)
    assert found.counts["sidecar_files_empty"] == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(row(0, "user") + "\n" + '{"token_idx": \n')
    with pytest.raises(InputError, match=r"bad\.jsonl: sidecar is not valid JSONL: .*line 2"):
        reader.read([b, bad])
    reader.close()


topk_lists = st.one_of(
    st.none(),
    st.lists(st.one_of(st.floats(min_value=-50, max_value=0.0), st.floats(min_value=-1e4, max_value=1e-7),
                       st.sampled_from([math.nan, math.inf, -math.inf])), max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(topk_lists, min_size=1, max_size=20))
def test_vectorized_topk_statistics_equal_the_scalar_reference(rows):
    entropy, mass, normalized = topk_stats(pa.array(rows, pa.list_(pa.float64())), "test", InputWarnings())
    for i, row in enumerate(rows):
        for got, want in zip((entropy[i], mass[i], normalized[i]), topk_statistics(row)):
            if want is None:
                assert np.isnan(got)
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_aggregation_does_not_need_rows_in_turn_order(tmp_path):
    results = write_synthetic_results(tmp_path / "src", num_simulations=5, messages_per_simulation=12, tokens_per_message=4)
    extract(results, tmp_path / "run")
    turns, trajs = aggregate(tmp_path / "run")
    tokens = _tokens(tmp_path / "run")
    shuffled = tokens.sample(frac=1.0, random_state=0).reset_index(drop=True)
    pd.testing.assert_frame_equal(turn_summary(shuffled), turns, check_exact=False, rtol=1e-12)
    got = trajectory_summary(shuffled)
    pd.testing.assert_frame_equal(got, trajs[got.columns], check_exact=False, rtol=1e-12)


def test_stored_partials_equal_a_scan_and_go_stale_with_the_table(tmp_path):
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.io.store.token_table import write_token_table
    from agentuq_nb.uq.turn_partials import stored_partials

    PARTIALS_FILE = RunDir.relative("turn_partials")

    def read_stored_partials(table):
        return stored_partials(RunDir(table.parent), table)

    results = write_synthetic_results(tmp_path / "src", num_simulations=6, messages_per_simulation=12, tokens_per_message=5)
    run = extract(results, tmp_path / "run").run_dir
    assert read_stored_partials(run / "tokens.parquet") is not None
    turns, trajs = aggregate(run)
    (run / PARTIALS_FILE).rename(tmp_path / "kept.parquet")  # aggregate now reads the rows
    scan_turns, scan_trajs = aggregate(run)
    pd.testing.assert_frame_equal(turns, scan_turns, check_exact=False, rtol=1e-12)
    pd.testing.assert_frame_equal(trajs, scan_trajs, check_exact=False, rtol=1e-12)
    (tmp_path / "kept.parquet").rename(run / PARTIALS_FILE)
    # another table in its place: the stored partials no longer describe it and are not used
    tokens = pa.Table.from_pandas(read_token_table(run), preserve_index=False)
    write_token_table(run / "tokens.parquet", tokens.filter(pa.compute.equal(tokens.column("task_id"), "0")))
    RunDir(run).forget("tokens")  # replaced by hand on purpose: taken as it is
    assert read_stored_partials(run / "tokens.parquet") is None
    _, fewer = aggregate(run)
    assert set(fewer["task_id"]) == {"0"}
