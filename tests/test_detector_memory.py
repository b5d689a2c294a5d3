"""train-detector's memory cuts (issue 51 point 6) change no float: the paired AUROC difference counted on sorted scores
is the matrix of pair signs' to the last bit, the logistic design built chunk by chunk is scipy's ``hstack`` entry for
entry (data, indices, order within a row), and the medians computed in place are ``np.median``'s."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import agentuq_nb.evaluation.detector_model as detector_model
from agentuq_nb.evaluation.detector_model import column_medians, csr_beside
from agentuq_nb.evaluation.detector_selection import paired_difference


def paired_difference_by_matrix(a, b, failure, runs) -> tuple[float, float]:
    """The paired difference as it was written before (the failure × success matrix of signs): the reference."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    y, runs = np.asarray(failure, dtype=bool), np.asarray(runs, dtype=object)
    ok = np.isfinite(a) & np.isfinite(b)
    total = weight = var = 0.0
    for r in pd.unique(runs[ok]):
        rows = ok & (runs == r)
        pos, neg = rows & y, rows & ~y
        n1, n0 = int(pos.sum()), int(neg.sum())
        if not (n1 and n0):
            continue
        d = (np.sign(a[pos][:, None] - a[neg][None, :]) - np.sign(b[pos][:, None] - b[neg][None, :])) / 2.0
        w = float(n1 * n0)
        total += d.mean() * w
        weight += w
        v1 = d.mean(axis=1).var(ddof=1) / n1 if n1 > 1 else 0.0
        v0 = d.mean(axis=0).var(ddof=1) / n0 if n0 > 1 else 0.0
        var += w * w * (v1 + v0)
    if not weight:
        return float("nan"), float("nan")
    return total / weight, float(np.sqrt(var)) / weight


scores = st.sampled_from([-1.0, 0.0, 0.5, 2.0, np.nan, np.inf]) | st.floats(-1e3, 1e3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(scores, scores, st.booleans(), st.sampled_from("abc")), max_size=80))
def test_the_paired_difference_on_sorted_scores_is_the_matrix_of_signs_to_the_last_bit(rows):
    a, b, y, runs = (np.array(col, dtype=dtype) for col, dtype in
                     zip(zip(*rows), (float, float, bool, object))) if rows else (np.zeros(0),) * 4
    got, expected = paired_difference(a, b, y, runs), paired_difference_by_matrix(a, b, y, runs)
    assert np.array_equal(np.array(got), np.array(expected), equal_nan=True)


def test_the_paired_difference_of_many_ties_and_rows_is_the_matrix_of_signs():
    rng = np.random.default_rng(5)
    n = 3000
    a, b = np.round(rng.normal(size=n), 1), rng.integers(0, 4, n).astype(float)
    y, runs = rng.random(n) < 0.3, rng.choice(["a", "b"], n)
    assert paired_difference(a, b, y, runs) == paired_difference_by_matrix(a, b, y, runs)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_design_built_chunk_by_chunk_is_scipys_hstack_entry_for_entry(data):
    n = data.draw(st.integers(0, 30))
    k_text, k_dense = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))
    values = st.sampled_from([0.0, -0.0, 1.0, -2.5]) | st.floats(-10, 10)
    dense = data.draw(arrays(np.float64, (n, k_dense), elements=values))
    text = sp.csr_matrix(data.draw(arrays(np.float64, (n, k_text), elements=values)))
    if text.nnz and data.draw(st.booleans()):  # an explicit zero, and a row's entries out of column order
        text.data[0] = 0.0
        lo, hi = text.indptr[-2], text.indptr[-1]
        text.indices[lo:hi], text.data[lo:hi] = text.indices[lo:hi][::-1].copy(), text.data[lo:hi][::-1].copy()
        text.has_sorted_indices = False
    chunk = data.draw(st.integers(1, 7))
    old, detector_model.CSR_CHUNK_ROWS = detector_model.CSR_CHUNK_ROWS, chunk
    try:
        got = csr_beside(text, lambda a, b: dense[a:b], k_dense)
    finally:
        detector_model.CSR_CHUNK_ROWS = old
    expected = sp.hstack([text, sp.csr_matrix(dense)], format="csr")
    assert got.shape == expected.shape
    for part in ("indptr", "indices", "data"):
        assert np.array_equal(getattr(got, part), getattr(expected, part)), part


@pytest.mark.parametrize("missing", [False, True])
def test_the_medians_computed_in_place_are_numpys(missing):
    rng = np.random.default_rng(2)
    values = rng.normal(size=(101, 7))
    if missing:
        values[rng.random(values.shape) < 0.2] = np.nan
        values[:, 0] = np.nan
        values[3, 0] = 1.5
    expected = [np.median(c[np.isfinite(c)]) for c in values.T]
    scratch = values.copy()
    assert np.array_equal(column_medians(scratch, overwrite=True), expected)
    assert np.array_equal(column_medians(values), expected)
