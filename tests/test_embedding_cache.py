"""The persistent embedding cache (issue 38): where it lives, what it refuses (planted entries and files), its size
bound, two processes writing at once, vectors read back equal to fresh ones (real bundled MiniLM), the black-box
signals unchanged by it, and the progress bars of the steps a user waits for."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentuq_nb.io.embedding_cache import (
    CACHE_ENV,
    CACHE_NAME,
    EmbeddingCache,
    EmbeddingCacheWarning,
    cache_path,
    entry_key,
)
from agentuq_nb.uq.embeddings import Embedder, model_identity, model_shape, sentence_model

from conftest import ROOT, require_tau2

TEXTS = ["I would like to cancel my reservation.", "Sure, could you give me your user id?",
         '{"reservation_id": "4WQ150", "status": "cancelled"}', "Thanks, bye.", ""]
DIM = 384


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def fresh() -> np.ndarray:
    """TEXTS embedded by the bundled model with no cache at all: the reference."""
    return Embedder(max_tokens=128).embed(TEXTS)


def minilm_cache(path: Path) -> Embedder:
    return Embedder(max_tokens=128, cache=path)


# --------------------------------------------------------------------------- where
def test_the_cache_file_comes_from_the_setting_else_the_variable_else_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "env.sqlite"))
    assert cache_path() == tmp_path / "env.sqlite"
    assert cache_path(tmp_path / "given.sqlite") == tmp_path / "given.sqlite"
    assert cache_path("off") is None and cache_path("OFF") is None
    monkeypatch.setenv(CACHE_ENV, "off")
    assert cache_path() is None
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / "agentuq_nb" / CACHE_NAME


def test_the_tests_never_write_the_users_cache():
    assert Path(cache_path()).parent.name.startswith("agentuq-nb-embed-cache-")


# --------------------------------------------------------------------------- equal to fresh, model not loaded
def test_vectors_read_back_equal_the_computed_ones_and_equal_fresh_ones(tmp_path, fresh):
    path = tmp_path / "e.sqlite"
    first = minilm_cache(path)
    computed = first.embed(TEXTS + TEXTS[:2])
    assert first.misses == len(TEXTS) and first.hits == 2  # each distinct text computed once
    assert np.allclose(computed[:len(TEXTS)], fresh, atol=1e-6)
    again = minilm_cache(path)  # another embedder (as another process): everything from the file
    read = again.embed(TEXTS)
    assert again.misses == 0 and again.store.hits == len(TEXTS)
    assert np.array_equal(read, computed[:len(TEXTS)])
    assert read.dtype == np.float32 and np.allclose(np.linalg.norm(read, axis=1), 1.0, atol=1e-5)


def test_a_rerun_whose_texts_are_cached_never_loads_the_model(tmp_path):
    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS)
    code = (f"import sys, json; from agentuq_nb.uq.embeddings import Embedder; e = Embedder(max_tokens=128, "
            f"cache={str(path)!r}); v = e.embed({TEXTS!r}); print(json.dumps([e.misses, 'torch' in sys.modules, "
            f"'sentence_transformers' in sys.modules, v.shape[0]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, False, False, len(TEXTS)]


def test_another_truncation_length_is_another_entry(tmp_path):
    path = tmp_path / "e.sqlite"
    long_text = "word " * 300
    short, default = Embedder(max_tokens=16, cache=path), Embedder(max_tokens=None, cache=path)
    a, b = short.embed([long_text]), default.embed([long_text])
    assert short.misses == 1 and default.misses == 1
    assert not np.allclose(a, b)
    assert EmbeddingCache(path, model_identity(), 16, DIM).entries() == 2


# --------------------------------------------------------------------------- planted entries
def plant(path: Path, text: str, **change) -> None:
    """Overwrite the entry of ``text`` (at 128 word pieces) with ``change``d columns, as someone could."""
    with sqlite3.connect(path) as db:
        key = entry_key(model_identity(), 128, text)
        sets = ", ".join(f"{c} = ?" for c in change)
        assert db.execute(f"UPDATE embeddings SET {sets} WHERE key = ?", [*change.values(), key]).rowcount == 1


@pytest.mark.parametrize("change", [
    {"vector": np.ones(DIM - 1, "<f4").tobytes()},  # wrong shape
    {"dim": DIM - 1, "vector": (np.ones(DIM - 1, "<f4") / np.sqrt(DIM - 1)).tobytes()},  # another dimension
    {"vector": np.full(DIM, np.nan, "<f4").tobytes()},  # not finite
    {"vector": np.full(DIM, 1.0, "<f4").tobytes()},  # norm sqrt(384), not 1
    {"vector": np.zeros(DIM, "<f8").tobytes()},  # float64 bytes: twice the size
    {"checksum": bytes(32)},  # a checksum this installation did not make
    {"model": "another-model"},
    {"max_tokens": 256},
    {"vector": "not bytes at all"},
], ids=["shape", "dimension", "nan", "norm", "dtype", "checksum", "model", "length", "type"])
def test_a_planted_entry_is_refused_recomputed_and_replaced(tmp_path, fresh, change):
    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS)
    plant(path, TEXTS[0], **change)
    again = minilm_cache(path)
    with pytest.warns(EmbeddingCacheWarning, match="1 entries refused"):
        vectors = again.embed(TEXTS)
    assert again.store.refused == 1 and again.misses == 1  # the planted one recomputed, the others read
    assert np.allclose(vectors, fresh, atol=1e-6)
    third = minilm_cache(path)  # the entry was overwritten with the true vector
    third.embed(TEXTS)
    assert third.store.refused == 0 and third.misses == 0


def test_a_planted_huge_blob_is_refused_by_its_size_without_being_fetched(tmp_path, fresh):
    """An entry's size is checked in SQL before its blob is read: a planted 64 MB vector (800 MB in the issue) never
    reaches Python (its bytes would be traced), and is recomputed."""
    import tracemalloc

    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS)
    plant(path, TEXTS[0], vector=bytes(64 << 20))
    again = minilm_cache(path)
    tracemalloc.start()
    try:
        with pytest.warns(EmbeddingCacheWarning, match="1 entries refused"):
            found = again.store.lookup(TEXTS)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert TEXTS[0] not in found and len(found) == len(TEXTS) - 1
    assert peak < 16 << 20, peak  # the blob is 64 MB: it was not fetched


def test_a_vector_planted_under_the_right_key_for_another_text_is_refused(tmp_path, fresh):
    """A consistent-looking row (right key, right model, a valid row's checksum) holding another text's vector:
    refused (the checksum binds the entry's key to its vector)."""
    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS)
    with sqlite3.connect(path) as db:
        other = db.execute("SELECT vector, checksum FROM embeddings WHERE key = ?",
                           [entry_key(model_identity(), 128, TEXTS[1])]).fetchone()
    plant(path, TEXTS[0], vector=other[0], checksum=other[1])
    again = minilm_cache(path)
    with pytest.warns(EmbeddingCacheWarning, match="refused"):
        assert np.allclose(again.embed(TEXTS[:1]), fresh[:1], atol=1e-6) and again.store.refused == 1


def test_planted_unit_vectors_with_checksums_of_another_installation_are_refused(tmp_path, fresh):
    """Well-formed unit vectors (the issue's planted entries that moved TRACER by up to 0.67), with checksums made under
    another installation's key: every one refused, one warning, the true vectors computed."""
    from agentuq_nb.io.embedding_cache import entry_checksum

    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS)
    planted = unit(np.random.default_rng(3), len(TEXTS))
    for text, vector in zip(TEXTS, planted):
        blob = vector.astype("<f4").tobytes()
        plant(path, text, vector=blob, checksum=entry_checksum(b"k" * 32, entry_key(model_identity(), 128, text),
                                                               blob))
    again = minilm_cache(path)
    with pytest.warns(EmbeddingCacheWarning, match=f"{len(TEXTS)} entries refused.*keyed checksum"):
        vectors = again.embed(TEXTS)
    assert np.allclose(vectors, fresh, atol=1e-6) and again.misses == len(TEXTS)


def test_a_cache_of_schema_1_has_its_entries_dropped_once_and_is_used_on(tmp_path, fresh):
    from agentuq_nb.io.embedding_cache import SCHEMA, SCHEMA_1_TABLE

    path = tmp_path / "e.sqlite"
    with sqlite3.connect(path) as db:
        db.execute(SCHEMA[("table", "meta")])
        db.execute(SCHEMA_1_TABLE)
        db.execute(SCHEMA[("index", "embeddings_used")])
        db.execute("INSERT INTO meta VALUES ('schema', '1')")
        db.execute("INSERT INTO embeddings VALUES (?, 'm', 128, ?, 384, ?, 0)", [b"k" * 16, b"h" * 32, bytes(1536)])
    embedder = minilm_cache(path)
    assert np.allclose(embedder.embed(TEXTS), fresh, atol=1e-6) and not embedder.store.disabled
    assert EmbeddingCache(path, model_identity(), 128, DIM).entries() == len(set(TEXTS))
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT value FROM meta").fetchone() == ("2",)


# --------------------------------------------------------------------------- planted files
def refused_file(path: Path, fresh: np.ndarray, why: str) -> None:
    embedder = minilm_cache(path)
    with pytest.warns(EmbeddingCacheWarning, match=why):
        vectors = embedder.embed(TEXTS)
    assert np.allclose(vectors, fresh, atol=1e-6) and embedder.store.disabled


def test_a_file_that_is_not_a_database_is_left_alone(tmp_path, fresh):
    path = tmp_path / "e.sqlite"
    path.write_bytes(b"not a database, but someone's notes\n" * 100)
    before = path.read_bytes()
    refused_file(path, fresh, "not a usable SQLite database")
    assert path.read_bytes() == before


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path, fresh):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / "e.sqlite").symlink_to(target)
    refused_file(tmp_path / "e.sqlite", fresh, "symbolic link")
    assert target.read_text() == "keep me"


def test_a_database_of_another_shape_is_refused(tmp_path, fresh):
    path = tmp_path / "e.sqlite"
    minilm_cache(path).embed(TEXTS[:1])
    with sqlite3.connect(path) as db:  # a trigger that would run on our writes
        db.execute("CREATE TABLE log (x)")
        db.execute("CREATE TRIGGER spy AFTER INSERT ON embeddings BEGIN INSERT INTO log VALUES (new.key); END")
    refused_file(path, fresh, "another shape")
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM log").fetchone() == (0,)


def test_a_folder_in_place_of_the_file_is_refused(tmp_path, fresh):
    (tmp_path / "e.sqlite").mkdir()
    refused_file(tmp_path / "e.sqlite", fresh, "is not a file")


# --------------------------------------------------------------------------- bounded, concurrent
def test_the_cache_is_bounded_least_recently_used_going_first(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "e.sqlite"
    cache = EmbeddingCache(path, "m", 128, DIM, max_mb=0.2)  # ~120 entries
    bound = cache.max_entries
    texts = [f"text {i}" for i in range(3 * bound)]
    cache.store(texts[:10], unit(rng, 10))
    for start in range(10, len(texts), 20):
        cache.store(texts[start:start + 20], unit(rng, len(texts[start:start + 20])))
        cache.lookup(texts[:10])  # kept in use: never evicted
        assert cache.entries() <= bound
    assert len(cache.lookup(texts[:10])) == 10
    assert len(cache.lookup(texts[10:2 * bound])) == 0  # the oldest unused ones went
    assert path.stat().st_size < 3 * 0.2 * 2**20  # the file stays near the bound (SQLite reuses freed pages)


WRITER = """
import sys, numpy as np
from agentuq_nb.io.embedding_cache import EmbeddingCache
path, who = sys.argv[1], int(sys.argv[2])
cache = EmbeddingCache(path, "m", 128, 384)
rng = np.random.default_rng(who)
for start in range(0, 1500, 25):
    texts = [f"{who}-{i}" for i in range(start, start + 25)] + [f"shared-{i}" for i in range(start, start + 25)]
    v = rng.normal(size=(50, 384)).astype(np.float32)
    cache.store(texts, v / np.linalg.norm(v, axis=1, keepdims=True))
    cache.lookup(texts[:10])
assert cache.disabled is None, cache.disabled
print(cache.stored)
"""


def test_two_processes_writing_at_once_leave_a_sound_cache(tmp_path):
    path = tmp_path / "e.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(who)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for who in (1, 2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-500:] for o in outs]
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cache = EmbeddingCache(path, "m", 128, DIM)
    texts = [f"{who}-{i}" for who in (1, 2) for i in range(1500)] + [f"shared-{i}" for i in range(1500)]
    assert len(cache.lookup(texts)) == 4500 and cache.refused == 0


# --------------------------------------------------------------------------- the black-box signals, unchanged
def test_the_tracer_and_structure_values_are_those_of_the_bare_model(tmp_path):
    """The signals from the embedder (token-length batches, then the cache) equal those from sentence-transformers'
    own ``encode`` as the step called it before the cache (batches of 64): on two real trajectories."""
    from agentuq_nb.io.ingest.results import iter_simulations
    from agentuq_nb.uq.tracer import COMPONENTS, tracer_components
    from agentuq_nb.uq.transcript import transcript

    path = next(f for f in require_tau2() if f.name.startswith("gpt-4.1_airline"))
    sims = [s for _, s in zip(range(2), iter_simulations(path))]
    t = transcript(sims, "airline")
    model = sentence_model()

    def bare(texts):
        model.max_seq_length = 128
        try:
            return model.encode(list(texts), batch_size=64, normalize_embeddings=True)
        finally:
            model.max_seq_length = model_shape()[1]

    cold, warm = minilm_cache(tmp_path / "e.sqlite"), minilm_cache(tmp_path / "e.sqlite")
    reference = tracer_components(t, bare)
    for embedder in (cold, warm):
        got = tracer_components(t, embedder.embed)
        for c in COMPONENTS[1:]:
            assert np.allclose(got[c], reference[c], atol=1e-5, equal_nan=True), c
    assert cold.misses > 0 and warm.misses == 0


# --------------------------------------------------------------------------- progress
def test_progress_goes_to_stderr_only_when_asked(tmp_path, capsys):
    embedder = Embedder(max_tokens=128)
    embedder.embed(TEXTS[:2])
    assert capsys.readouterr().err == ""
    Embedder(max_tokens=128).embed(TEXTS[:2], progress=True)
    captured = capsys.readouterr()
    assert "embedding" in captured.err and "2/2" in captured.err and captured.out == ""


def test_the_estimator_table_and_calibration_count_their_rows_on_stderr(tmp_path, capsys):
    from agentuq_nb.steps.calibrate import calibrate
    from agentuq_nb.steps.compare_estimators import compare_estimators

    from conftest import make_aggregated_run

    run = make_aggregated_run(tmp_path, num_simulations=12, messages_per_simulation=6, tokens_per_message=4)
    capsys.readouterr()
    quiet = compare_estimators(run, n_boot=20, blackbox=False)
    assert capsys.readouterr().err == ""
    loud = compare_estimators(run, n_boot=20, blackbox=False, progress=True)
    err = capsys.readouterr().err
    assert "estimator table: 100%" in err and f"{len(loud)}/{len(loud)}" in err
    assert quiet.equals(loud)  # a bar changes nothing computed
    calibrate(run, progress=True)
    assert "calibration: 100%" in capsys.readouterr().err
