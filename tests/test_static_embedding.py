"""The static MiniLM table the black-box signals embed with: distilled from the real bundled model, read back only when
it is the table it claims to be, and a text's vector the mean of its pieces' rows."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from safetensors.numpy import save_file

from agentuq_nb.io.embedding_cache import cache_path
from agentuq_nb.io.static_table import FORMAT, StaticTableWarning, read_table, table_path, write_table
from agentuq_nb.steps.blackbox import distillation_seconds
from agentuq_nb.uq import static_embedding
from agentuq_nb.uq.embeddings import bundled_model_path, embeddings_available, get_embedder
from agentuq_nb.uq.static_embedding import (
    DIMS,
    DISTILLATIONS,
    UNUSED,
    StaticEmbedder,
    distilled_pieces,
    load_table,
    piece_outputs,
    sif_weights,
    table_identity,
    vocabulary_size,
)

pytestmark = pytest.mark.skipif(not embeddings_available(), reason="the [embeddings] extra is not installed")


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    """The table as the tests' embedding cache folder keeps it (the copy of the user's that tests/conftest.py makes,
    else distilled by the first test that needs it)."""
    return load_table()


#: word pieces whose rows are checked against MiniLM's output computed afresh (a seeded sample of the 29,528 pieces
#: with a row: ~4 CPU-s of MiniLM, where distilling the whole vocabulary again took ~55)
SAMPLED_PIECES = 2048


@pytest.fixture(scope="module")
def fresh_sample() -> tuple[np.ndarray, np.ndarray]:
    """A seeded sample of the distilled pieces (their places among :func:`distilled_pieces`) and their outputs of
    the distillation's forward pass (:func:`piece_outputs`), computed in this process."""
    ids = distilled_pieces()
    at = np.sort(np.random.default_rng(0).choice(len(ids), SAMPLED_PIECES, replace=False))
    return at, piece_outputs(ids[at])


@pytest.fixture
def distillations(monkeypatch, table) -> list[int]:
    """``load_table`` distils through a stand-in that gives the kept table (the tests that use it are about which file
    ``load_table`` reads, writes or leaves; ``test_the_kept_table_equals_a_fresh_distillation`` is about the
    distillation): each call is counted."""
    calls = []

    def distill_again(progress=False):
        calls.append(progress)
        return table.copy()

    monkeypatch.setattr(static_embedding, "distill_table", distill_again)
    return calls


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bundled_model_path() / "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    return tok


def test_the_table_is_kept_in_the_cache_folder_and_read_back_equal(table):
    path = table_path(cache_path(None), table_identity())
    assert path is not None and path.is_file()
    assert table.shape == (vocabulary_size(), DIMS) and table.dtype == np.float32
    assert np.array_equal(read_table(path, table_identity(), table.shape), table)
    kept = len(DISTILLATIONS)
    assert np.array_equal(load_table(), table)  # the second load reads the file
    assert len(DISTILLATIONS) == kept  # and is no distillation (what compare-estimators says apart, issue 49)


def test_the_kept_table_equals_a_fresh_distillation(table, fresh_sample):
    """The distillation is MiniLM's output for every piece, reduced by PCA over all of them and weighted by SIF. Its
    forward pass is run afresh on a sample of pieces (the whole vocabulary's is what ``make setup`` pays once), and the
    kept table is what PCA and the weights make of those outputs: each sampled row is its piece's fresh output, the
    outputs' mean removed, under one orthonormal projection, times its SIF weight; and over every piece the table's
    columns are PCA's (centred, uncorrelated, in decreasing variance), spanning the outputs' principal subspace."""
    ids = distilled_pieces()
    assert table.shape == (vocabulary_size(), DIMS) and table.dtype == np.float32
    assert not np.delete(table, ids, axis=0).any()
    weights = sif_weights(len(ids))
    reduced = table[ids].astype(np.float64) / weights[:, None]  # PCA's output of each piece, the weighting undone
    assert np.abs(reduced.mean(axis=0)).max() < 1e-4
    cov = np.cov(reduced, rowvar=False)
    variances = np.diag(cov)
    assert np.abs(cov - np.diag(variances)).max() < 1e-5 and (np.diff(variances) <= 1e-6).all()

    at, outputs = fresh_sample
    fresh, kept = outputs.astype(np.float64), reduced[at]
    centred = fresh - fresh.mean(axis=0)
    # the projection that maps the outputs onto the rows (least squares; the outputs' few directions of no variance,
    # singular values below 1e-6 of the largest, left out): its columns orthonormal, and it maps them exactly
    components = np.linalg.lstsq(centred, kept - kept.mean(axis=0), rcond=1e-6)[0]
    np.testing.assert_allclose(components.T @ components, np.eye(DIMS), atol=1e-4)
    rows = (centred @ components + kept.mean(axis=0)) * weights[at, None]
    np.testing.assert_allclose(rows, table[ids[at]], atol=1e-4)  # float rounding of the batches
    # the projection keeps nearly what the sample's own principal subspace keeps of its variance (a subspace fitted
    # to these outputs alone keeps a little more; a random one of DIMS dimensions ~70 %)
    spread = np.cov(centred, rowvar=False)
    best = np.linalg.eigvalsh(spread)[::-1][:DIMS].sum()
    assert np.trace(components.T @ spread @ components) > 0.97 * best


def test_a_missing_table_is_distilled_once_and_written(tmp_path, distillations, table):
    cache = tmp_path / "embeddings.sqlite"
    first = load_table(cache)
    assert len(distillations) == 1 and np.array_equal(first, table)
    path = table_path(cache, table_identity())
    assert np.array_equal(read_table(path, table_identity(), table.shape), table)
    assert np.array_equal(load_table(cache), table) and len(distillations) == 1  # read back, not distilled


def test_placeholders_have_no_row_and_every_other_piece_has_one(table, tokenizer):
    vocab = tokenizer.get_vocab()
    unused = [i for piece, i in vocab.items() if UNUSED.fullmatch(piece)]
    assert len(unused) > 900
    assert not table[unused].any()
    used = np.setdiff1d(np.arange(len(table)), unused)
    assert (np.linalg.norm(table[used], axis=1) > 0).all()


def test_a_text_is_the_normalised_mean_of_its_pieces_rows(table, tokenizer):
    texts = ["I'd like to cancel reservation ZFA04Y, please.", "Tool: get_user_details(user_id=mia_li_3668)",
             "Observation: {\"flights\": [{\"flight_number\": \"HAT136\", \"price\": 1024}]}", "", "   "]
    vectors = StaticEmbedder(table).embed(texts)
    for text, vector in zip(texts, vectors):
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            assert not vector.any()  # an empty text is the zero vector, as TRACER's signals expect
            continue
        mean = table[ids].mean(axis=0)
        np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=1e-6)


def test_meaning_is_kept_where_it_matters_for_the_signals(table):
    embed = StaticEmbedder(table).embed
    a, b, c = embed(["I want to cancel my flight reservation.", "Please cancel the booking of my flight.",
                     "The product arrived broken and I need a refund for the laptop."])
    assert a @ b > a @ c + 0.2 and a @ b > b @ c + 0.2


def test_long_texts_are_read_up_to_the_bound_and_not_past_it(table):
    embed = StaticEmbedder(table, max_tokens=16).embed
    head = "flight " * 16
    same = embed([head, head + "refund laptop broken " * 50])
    np.testing.assert_allclose(same[0], same[1], atol=1e-6)


def test_get_embedder_names_it(table):
    embedder = get_embedder("minilm-static")
    assert isinstance(embedder, StaticEmbedder)
    assert embedder.embed(["hello"]).shape == (1, DIMS)


# --------------------------------------------------------------------------- a planted or damaged table file
def refused(path, identity=None, shape=None) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_table(path, identity or table_identity(), shape or (vocabulary_size(), DIMS)) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, StaticTableWarning)]
    assert len(messages) == 1 and str(path) in messages[0]
    return messages[0]


def test_a_missing_file_is_silently_none(tmp_path):
    assert read_table(tmp_path / "none.safetensors", table_identity(), (4, 2)) is None


def test_planted_tables_are_refused_with_one_line_naming_the_file(tmp_path, table):
    good = tmp_path / "good.safetensors"
    write_table(good, table, table_identity())
    assert read_table(good, table_identity(), table.shape) is not None

    other = tmp_path / "other.safetensors"
    write_table(other, table, table_identity() + ";another model")
    assert "another model or with other settings" in refused(other)

    small = tmp_path / "small.safetensors"
    write_table(small, table[:100], table_identity())
    assert "shape" in refused(small)

    bad = table.copy()
    bad[5, 3] = np.nan
    nan = tmp_path / "nan.safetensors"
    write_table(nan, bad, table_identity())
    assert "non-finite" in refused(nan)

    huge = table.copy()
    huge[7, 0] = 1e9
    out_of_range = tmp_path / "huge.safetensors"
    write_table(out_of_range, huge, table_identity())
    assert "out-of-range" in refused(out_of_range)

    as_f64 = tmp_path / "f64.safetensors"
    save_file({"table": table.astype(np.float64)}, str(as_f64), metadata={"format": FORMAT, "identity": table_identity()})
    assert "holds" in refused(as_f64)

    extra = tmp_path / "extra.safetensors"
    save_file({"table": table, "payload": np.zeros(3, np.float32)}, str(extra),
              metadata={"format": FORMAT, "identity": table_identity()})
    assert "'table'" in refused(extra)

    link = tmp_path / "link.safetensors"
    os.symlink(good, link)
    assert "regular file" in refused(link)

    pickled = tmp_path / "pickle.safetensors"
    import pickle

    pickled.write_bytes(pickle.dumps({"table": table[:10]}))
    assert "safetensors" in refused(pickled)

    padded = tmp_path / "padded.safetensors"
    padded.write_bytes(good.read_bytes() + b"\0" * (1 << 20))
    assert "bytes" in refused(padded)


def test_a_refused_file_is_left_as_it_is_and_the_table_distilled_for_the_process(tmp_path, distillations, table):
    cache = tmp_path / "embeddings.sqlite"
    path = table_path(cache, table_identity())
    path.write_bytes(b"planted")
    with pytest.warns(StaticTableWarning, match="planted|safetensors"):
        again = load_table(cache)
    assert path.read_bytes() == b"planted"
    assert len(distillations) == 1 and np.array_equal(again, table)


def test_with_the_cache_off_nothing_is_written(tmp_path, monkeypatch, distillations, table):
    monkeypatch.chdir(tmp_path)
    assert table_path(cache_path("off"), table_identity()) is None
    before = distillation_seconds()
    assert np.array_equal(load_table("off"), table) and len(distillations) == 1
    assert distillation_seconds() - before == pytest.approx(DISTILLATIONS[-1]) and DISTILLATIONS[-1] > 0
    assert not any(tmp_path.iterdir())


def test_a_cache_folder_that_cannot_be_made_keeps_the_table_in_memory(tmp_path, distillations, table):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.warns(StaticTableWarning, match="could not be kept"):
        again = load_table(blocker / "embeddings.sqlite")
    assert len(distillations) == 1 and np.array_equal(again, table)
    assert blocker.read_text() == "a file where the cache folder should be"


@pytest.mark.parametrize("wrong", ["zeros", "one repeated row", "shuffled rows", "the true table, copied in"])
def test_a_well_formed_but_wrong_table_is_refused_by_its_keyed_checksum(tmp_path, table, wrong):
    """A table that passes every structural check but was not written by this installation (no checksum under its
    key) is refused; one written here is read back."""
    planted = {"zeros": np.zeros_like(table), "one repeated row": np.repeat(table[1000:1001], len(table), axis=0),
               "shuffled rows": table[np.random.default_rng(0).permutation(len(table))], "the true table, copied in":
               table}[wrong]
    path = tmp_path / "planted.safetensors"
    save_file({"table": planted}, str(path), metadata={"format": FORMAT, "identity": table_identity()})
    assert "keyed checksum does not hold" in refused(path)
    forged = tmp_path / "forged.safetensors"  # a checksum made under another installation's key
    other = tmp_path / "elsewhere"
    other.mkdir()
    write_table(other / "t.safetensors", planted, table_identity())
    forged.write_bytes((other / "t.safetensors").read_bytes())
    assert "keyed checksum does not hold" in refused(forged)
    write_table(tmp_path / "ours.safetensors", table, table_identity())
    assert np.array_equal(read_table(tmp_path / "ours.safetensors", table_identity(), table.shape), table)
