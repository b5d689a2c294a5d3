"""Hunting (hypothesis) the caches and the new output paths (issue 51 point 8).

* the embedding cache: any column of a row changed, or bytes of the file overwritten, and a lookup returns only the
  vectors this installation stored (or refuses, one warning) - never an error, never a planted vector;
* the static table: the tensor edited (rows shuffled, zeroed, repeated, a value moved) or its bytes overwritten, its
  metadata kept: the table read back is the one written, or it is refused (one warning) - never another table;
* ``--out`` of extract, predict and judge over folders of any content (new, empty, a file, a FIFO, a symlink, a run
  of the same or other results, a detector folder, a stranger's notes; judge: inside its results): each is written
  only where the one output rule lets it (:mod:`agentuq_nb.io.outputs`), refused otherwise in one line naming the
  path, and a refusal changes nothing there or in the results.

Fast and deterministic: small examples, ``derandomize=True``, no deadline."""
from __future__ import annotations

import os
import shutil
import sqlite3
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.test_hostile_folders import assert_ended_cleanly, run_cli, tree_checksum

from agentuq_nb.io.embedding_cache import EmbeddingCache, EmbeddingCacheWarning, entry_key
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.static_table import StaticTableWarning, read_table, write_table
from agentuq_nb.testing.synthetic import write_synthetic_results

HUNT = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DIM, TEXTS = 8, ["hello", "I will cancel it.", '{"status": "ok"}']


def units(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# --------------------------------------------------------------------------- the embedding cache
CELL = st.one_of(st.binary(max_size=80), st.integers(-2, 2**40), st.text(max_size=8), st.floats(allow_nan=True),
                 st.just(units(1, 9)[0].tobytes()))  # a planted unit vector of the right size


@HUNT
@given(column=st.sampled_from(["model", "max_tokens", "checksum", "dim", "vector", "key", "used"]), value=CELL,
       row=st.integers(0, len(TEXTS) - 1))
def test_hunting_a_changed_cache_row_is_refused_or_harmless(tmp_path_factory, column, value, row):
    path = tmp_path_factory.mktemp("cache") / "e.sqlite"
    stored = units(len(TEXTS), 1)
    cache = EmbeddingCache(path, "model-a", 16, DIM)
    cache.store(TEXTS, stored)
    cache.close()
    with sqlite3.connect(path) as db:
        try:
            db.execute(f"UPDATE embeddings SET {column} = ? WHERE key = ?",
                       [value, entry_key("model-a", 16, TEXTS[row])])
        except sqlite3.Error:  # a constraint of the table (NOT NULL, a key taken): nothing planted
            return
    again = EmbeddingCache(path, "model-a", 16, DIM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmbeddingCacheWarning)
        found = again.lookup(TEXTS)
    for text, vector in found.items():
        assert np.array_equal(vector, stored[TEXTS.index(text)]), (column, value)
    assert len(found) >= len(TEXTS) - 1 or again.disabled is not None


@HUNT
@given(edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=64)),
                      min_size=1, max_size=4))
def test_hunting_overwritten_bytes_of_the_cache_file_never_yield_another_vector(tmp_path_factory, edits):
    path = tmp_path_factory.mktemp("cache") / "e.sqlite"
    stored = units(len(TEXTS), 2)
    cache = EmbeddingCache(path, "model-a", 16, DIM)
    cache.store(TEXTS, stored)
    cache.close()
    for name in ("e.sqlite-wal", "e.sqlite-shm"):  # checkpointed on close: the data is in the file itself
        assert not (path.parent / name).exists() or (path.parent / name).stat().st_size >= 0
    data = bytearray(path.read_bytes())
    for where, patch in edits:
        at = int(where * len(data))
        data[at:at + len(patch)] = patch
    path.write_bytes(bytes(data[:max(len(data), 1)]))
    again = EmbeddingCache(path, "model-a", 16, DIM)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmbeddingCacheWarning)
        found = again.lookup(TEXTS)
        again.store(TEXTS[:1], stored[:1])  # writing to a damaged file disables the cache, never raises
    for text, vector in found.items():
        assert np.array_equal(vector, stored[TEXTS.index(text)])


# --------------------------------------------------------------------------- the static table
SHAPE, IDENTITY = (24, 6), "hunting table"
TABLE_EDITS = st.sampled_from(["shuffle", "zero_row", "repeat_row", "nudge", "scale", "zeros", "none"])


@HUNT
@given(edit=TABLE_EDITS, row=st.integers(0, SHAPE[0] - 1), seed=st.integers(0, 3))
def test_hunting_an_edited_static_table_with_its_metadata_kept_is_refused(tmp_path_factory, edit, row, seed):
    from safetensors import safe_open
    from safetensors.numpy import save_file

    folder = tmp_path_factory.mktemp("table")
    path = folder / "static-table.safetensors"
    table = np.random.default_rng(seed).normal(size=SHAPE).astype(np.float32)
    write_table(path, table, IDENTITY)
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    planted = table.copy()
    if edit == "shuffle":
        planted = planted[np.random.default_rng(seed + 1).permutation(SHAPE[0])]
    elif edit == "zero_row":
        planted[row] = 0
    elif edit == "repeat_row":
        planted[:] = planted[row]
    elif edit == "nudge":
        planted[row, 0] += 1e-3
    elif edit == "scale":
        planted *= 1.5
    elif edit == "zeros":
        planted[:] = 0
    save_file({"table": planted}, str(path), metadata=meta)  # the checksum of the table written, kept
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        read = read_table(path, IDENTITY, SHAPE)
    if np.array_equal(planted, table):
        assert read is not None and np.array_equal(read, table)
    else:
        assert read is None and any(issubclass(w.category, StaticTableWarning) for w in caught)
        assert any("keyed checksum" in str(w.message) for w in caught)


@HUNT
@given(edits=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.binary(min_size=1, max_size=16)),
                      min_size=1, max_size=3))
def test_hunting_overwritten_bytes_of_the_static_table_never_yield_another_table(tmp_path_factory, edits):
    folder = tmp_path_factory.mktemp("table")
    path = folder / "static-table.safetensors"
    table = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)
    write_table(path, table, IDENTITY)
    data = bytearray(path.read_bytes())
    for where, patch in edits:
        at = int(where * len(data))
        data[at:at + len(patch)] = patch
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StaticTableWarning)
        read = read_table(path, IDENTITY, SHAPE)
    assert read is None or np.array_equal(read, table)


# --------------------------------------------------------------------------- --out of extract, predict, judge
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Two small results, a results directory, a run of the first, and a detector trained on both."""
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.train_detector import train_detector

    root = tmp_path_factory.mktemp("outs")
    a = write_synthetic_results(root / "a", num_simulations=6, messages_per_simulation=6, tokens_per_message=3, seed=1)
    b = write_synthetic_results(root / "b", num_simulations=6, messages_per_simulation=6, tokens_per_message=3, seed=2)
    run_a = root / "run_a"
    extract(a, run_a)
    detector = train_detector([a, b], root / "detector", embedder="hash", groups=["length"], n_boot=0,
                              protocols=["within_run"]).path
    return {"a": a, "b": b, "run_a": run_a, "detector": detector}


STATES = ["new", "empty", "notes", "file", "fifo", "symlink", "run_same", "run_copy", "run_other", "detector"]


def make_state(state: str, box: Path, sources: dict) -> Path:
    out = box / "out"
    if state == "empty":
        out.mkdir()
    elif state == "notes":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif state == "file":
        out.write_text("someone's file")
    elif state == "fifo":
        os.mkfifo(out)
    elif state == "symlink":
        out.symlink_to(sources["run_a"])
    elif state in ("run_same", "run_copy", "run_other"):
        shutil.copytree(sources["run_a"], out)
    elif state == "detector":
        shutil.copytree(sources["detector"], out)
    return out


@settings(HUNT, max_examples=24)
@given(state=st.sampled_from(STATES), command=st.sampled_from(["extract", "predict"]), force=st.booleans())
def test_hunting_out_of_extract_and_predict_is_written_only_where_the_rule_lets_it(sources, tmp_path_factory,
                                                                                 state, command, force):
    box = tmp_path_factory.mktemp("box")
    # the run was made from a's results; "run_copy": a byte-for-byte copy of them elsewhere is the same results
    results = sources["a"] if state != "run_other" else sources["b"]
    if state == "run_copy":
        results = box / "copy" / "results.json"
        shutil.copytree(sources["a"].parent, results.parent)
    out = make_state(state, box, sources)
    watched = [sources["a"].parent, sources["detector"], sources["run_a"]]
    before = [tree_checksum(p) for p in watched] + [tree_checksum(box)]
    args = ([command, results, "--out", out] if command == "extract" else
            [command, sources["detector"], results, "--out", out, "--n-boot", "0"])
    if force and command == "extract":
        args.append("--force")
    code, stdout, stderr = run_cli(*args)
    assert_ended_cleanly(code, stdout, stderr)
    allowed = {"new", "empty", "notes", "run_same", "run_copy"} | ({"run_other"} if force and command == "extract"
                                                                   else set())
    if code == 0:
        assert state in allowed, (state, stderr)
        assert [tree_checksum(p) for p in watched] == before[:-1]  # the results, the detector, the other run
    else:
        assert state not in allowed, (state, stderr)
        assert [tree_checksum(p) for p in watched] + [tree_checksum(box)] == before  # a refusal changes nothing
        assert str(out) in stderr or str(results) in stderr


def test_judge_out_is_never_inside_its_results_nor_another_run(sources, tmp_path):
    """judge extracts the results into --out first: the one output rule applies before any model is asked."""
    directory = tmp_path / "results_dir"
    shutil.copytree(sources["a"].parent, directory)
    before = tree_checksum(directory)
    code, stdout, stderr = run_cli("judge", directory, "--out", directory / "run", "--model", "local", "--limit", "1")
    assert code == 2 and "is inside" in stderr and "an input of 'judge'" in stderr, stderr
    assert tree_checksum(directory) == before
    other = tmp_path / "other_run"
    shutil.copytree(sources["run_a"], other)
    code, stdout, stderr = run_cli("judge", sources["b"], "--out", other, "--model", "local", "--limit", "1")
    assert code == 2 and "holds another run" in stderr, stderr
    with pytest.raises(InputError, match="holds another run") as refused:
        from agentuq_nb.io.outputs import check_run_destination

        check_run_destination(other, sources["b"], command="judge")
    assert "--" not in str(refused.value) and str(refused.value).endswith("; out: a new folder; or remove this one")
    with pytest.raises(InputError, match="; out: a new folder; force: replace that run whole$"):
        check_run_destination(other, sources["b"], command="extract", force=False)  # a library user reads the fields
