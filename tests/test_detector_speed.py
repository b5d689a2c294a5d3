"""train-detector's speed-ups (issue 48 point 5) change no result: the vocabulary counted with bincounts is the one the
sparse comparisons, sums and products chose (terms and IDF to the last bit), and a nested ``one_thread`` keeps the
limit its enclosing one set and leaves it as it was."""
from __future__ import annotations

import numpy as np
import pandas as pd
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfTransformer
from threadpoolctl import threadpool_info

from agentuq_nb.evaluation.calibration import one_thread
from agentuq_nb.evaluation.detector_model import DetectorSettings, fit_text


def fit_text_by_sparse_operations(counts, vocabulary, settings_, tasks):
    """The vocabulary as it was chosen before (scipy's sparse comparison, sums and product): the reference."""
    present = (counts > 0).astype(np.int32)
    df = np.asarray(present.sum(axis=0)).ravel()
    total = np.asarray(counts.sum(axis=0)).ravel()
    wanted = df >= settings_.min_df
    if tasks is not None and settings_.min_tasks > 1:
        codes, _ = pd.factorize(np.asarray(tasks, dtype=object))
        by_task = sp.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))),
                                shape=(codes.max() + 1, len(codes)))
        wanted &= np.asarray(((by_task @ present) > 0).sum(axis=0)).ravel() >= settings_.min_tasks
    keep = np.flatnonzero(wanted)
    order = np.lexsort((np.array(vocabulary, dtype=object)[keep], -total[keep]))
    chosen = np.sort(keep[order[:settings_.max_terms]])
    terms = [vocabulary[i] for i in chosen]
    if not terms:
        return [], np.zeros(0)
    return terms, TfidfTransformer(sublinear_tf=True).fit(counts[:, chosen]).idf_


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_vocabulary_counted_with_bincounts_is_the_sparse_operations_one(data):
    n, k = data.draw(st.integers(1, 25)), data.draw(st.integers(1, 12))
    dense = np.array(data.draw(st.lists(st.lists(st.integers(0, 3), min_size=k, max_size=k), min_size=n, max_size=n)))
    counts = sp.csr_matrix(dense.astype(np.int32))
    if counts.nnz and data.draw(st.booleans()):  # an explicit zero stored
        counts.data[0] = 0
    if counts.nnz and data.draw(st.booleans()):  # a repeated entry (the matrix not canonical)
        coo = counts.tocoo()
        counts = sp.csr_matrix((np.r_[coo.data, coo.data[:1]], (np.r_[coo.row, coo.row[:1]],
                                                                np.r_[coo.col, coo.col[:1]])), shape=counts.shape)
    words = data.draw(st.lists(st.sampled_from(["a", "b", "c", "agent:x", "user:y", "Z"]), min_size=k, max_size=k))
    tasks = np.array(data.draw(st.lists(st.sampled_from(["t1", "t2", "t3", "t4"]), min_size=n, max_size=n)),
                     dtype=object)
    settings_ = DetectorSettings(min_df=data.draw(st.integers(1, 3)), min_tasks=data.draw(st.integers(1, 3)),
                                 max_terms=data.draw(st.integers(1, 12)))
    expected = fit_text_by_sparse_operations(counts, list(words), settings_, tasks)
    got = fit_text(counts, list(words), settings_, tasks)
    assert got[0] == expected[0]
    assert np.array_equal(got[1], expected[1])


def blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_a_nested_one_thread_keeps_the_limit_and_the_outer_one_restores_it():
    before = blas_threads()
    with one_thread():
        assert set(blas_threads()) == {1}
        with one_thread():
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {1}  # the inner one did not lift it
    assert blas_threads() == before
    with one_thread():  # and a later one sets it again
        assert set(blas_threads()) == {1}
    assert blas_threads() == before


def test_the_logistic_path_is_scikit_learns_warm_started_fits_bit_for_bit():
    from sklearn.linear_model import LogisticRegression

    from agentuq_nb.evaluation.detector_model import logistic_path, run_indicators, with_runs

    rng = np.random.default_rng(5)
    n, k = 120, 300
    text = sp.random(n, k, density=0.05, format="csr", random_state=rng)
    dense = rng.normal(size=(n, 8))
    runs = rng.choice(["a", "b", "c"], size=n)
    y = (dense[:, 0] + rng.normal(size=n) + (runs == "a")) > 0.5
    designs = {"sparse, with run indicators": with_runs(sp.hstack([text, sp.csr_matrix(dense)], format="csr"),
                                                        run_indicators(runs)),
               "dense": dense}
    for name, X in designs.items():
        Cs = (0.01, 0.1, 1.0)
        model = LogisticRegression(C=Cs[0], max_iter=2000, warm_start=True)
        expected = []
        for C in Cs:
            model.set_params(C=C).fit(X, y)
            expected.append((model.coef_.copy(), model.intercept_.copy()))
        got = list(logistic_path(X, y, Cs, max_iter=2000))
        assert len(got) == len(Cs), name
        for (coef, intercept), (coef_sk, intercept_sk) in zip(got, expected):
            assert coef.shape == coef_sk.shape, name
            assert np.array_equal(coef, coef_sk) and np.array_equal(intercept, intercept_sk), name
        assert not np.array_equal(got[0][0], got[-1][0])  # the path moved: each C its own fit
