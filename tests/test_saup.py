"""SAUP: weights and propagation against hand computations; cross-fitting of saup_hmm."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.saup import saup as run_saup
from agentuq_nb.uq import saup
from agentuq_nb.uq.embeddings import HashEmbedder

from conftest import make_aggregated_run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("saup")
    make_aggregated_run(tmp, num_simulations=15, messages_per_simulation=10,
                                      tokens_per_message=6, seed=7, signal=0.4)
    scores, steps = run_saup(tmp / "run", embedder="minilm", k_folds=3)
    return tmp / "run", scores, steps


def test_score_and_weight_definitions():
    u = np.array([1.0, 2.0, 4.0])
    assert saup.saup_score(u) == pytest.approx(np.sqrt((1 + 4 + 16) / 3))
    w = saup.position_weights(3)
    np.testing.assert_allclose(w, [0.5, 1.0, 1.5])
    assert saup.position_weights(1)[0] == 1.0 and saup.position_weights(7).mean() == pytest.approx(1.0)
    assert saup.saup_score(u, w) == pytest.approx(np.sqrt(((0.5 * 1) ** 2 + 2 ** 2 + (1.5 * 4) ** 2) / 3))
    np.testing.assert_allclose(saup.distance_weights([0.1, 0.2], [0.3, 0.0]), [0.4, 0.2])
    assert np.isnan(saup.saup_score([]))


def test_message_distances_match_a_direct_computation():
    texts = ["book a flight to paris", "hello what is your booking", "search_flights({})", "flights found paris",
             "i want paris tomorrow"]
    roles = ["assistant", "user", "assistant", "tool", "user"]
    emb = HashEmbedder()
    d = saup.message_distances(texts, roles, emb)
    E = emb.embed(texts)
    request = E[1]  # first user message
    for m in range(len(texts)):
        so_far = E[: m + 1].mean(axis=0)
        so_far /= np.linalg.norm(so_far)
        assert d.loc[m, "d_a"] == pytest.approx(max(0.0, 1 - so_far @ request), abs=1e-9)
    # assistant 0 → observation = user 1 (next assistant at 2)
    assert d.loc[0, "d_o"] == pytest.approx(1 - E[0] @ E[1], abs=1e-9)
    # assistant 2 → observation = mean of tool 3 and user 4
    obs = (E[3] + E[4]) / np.linalg.norm(E[3] + E[4])
    assert d.loc[2, "d_o"] == pytest.approx(1 - E[2] @ obs, abs=1e-9)
    assert d.loc[4, "d_o"] == 0.0  # nothing follows


def test_run_scores_match_the_step_table(run):
    run_dir, scores, steps = run
    assert RunDir(run_dir).file("saup_scores").exists()
    turns = pd.read_parquet(run_dir / "turn_summary.parquet")
    for _, row in scores.iterrows():
        key = (turns["task_id"] == row["task_id"]) & (turns["scorer"] == "self")
        u = turns.loc[key & (turns["role"] == "assistant")].sort_values("turn_idx")["avg_token_nll"].to_numpy()
        assert row["saup_rms"] == pytest.approx(np.sqrt(np.mean(u ** 2)))
        n = len(u)
        w = np.array([2 * (i + 1) / (n + 1) for i in range(n)])
        assert row["saup_position"] == pytest.approx(np.sqrt(np.mean((w * u) ** 2)))
        s = steps[(steps["task_id"] == row["task_id"]) & (steps["actor"] == "assistant")]
        wd = (s["d_a"] + s["d_o"]).to_numpy()
        assert row["saup_distance"] == pytest.approx(np.sqrt(np.mean((wd * s["u"].to_numpy()) ** 2)))
        uu = turns.loc[key & (turns["role"] == "user")]["avg_token_nll"].to_numpy()
        assert row["user_saup_rms"] == pytest.approx(np.sqrt(np.mean(uu ** 2)))
    assert np.isfinite(scores["saup_hmm"]).all()
    assert (steps[["d_a", "d_o"]] >= 0).all().all()
    b = saup.actor_breakdown(scores)
    assert set(b["actor"]) == {"assistant", "user"} and len(b) == 6 * len(scores)
    tt = saup.turn_table(steps)
    assert tt["task_id"].nunique() == 1 and {"w_position", "w_distance", "running_saup_uniform"} <= set(tt.columns)
    last = tt[tt["actor"] == "assistant"].iloc[-1]
    first = scores[scores["task_id"] == last["task_id"]].iloc[0]
    assert last["running_saup_uniform"] == pytest.approx(first["saup_rms"])
    assert last["running_saup_distance"] == pytest.approx(first["saup_distance"])


def _hmm_inputs(n=18, seed=0):
    rng = np.random.default_rng(seed)
    seqs, us = [], []
    failed = np.arange(n) % 3 == 0
    for i in range(n):
        L = 3 + i % 4
        seqs.append(rng.normal(0.5 if failed[i] else 0.2, 0.05, size=(L, 2)).clip(0))
        us.append(rng.uniform(0.5, 2.0, size=L))
    return seqs, us, failed


def test_saup_hmm_is_cross_fitted():
    seqs, us, failed = _hmm_inputs()
    scores, folds, log = saup.saup_hmm_scores(seqs, us, failed, k_folds=3, seed=0)
    assert np.isfinite(scores).all()
    tested = []
    for f, entry in log.items():
        assert not set(entry["train"]) & set(entry["test"])  # never scored by a model that saw it
        assert set(entry["test"]) == set(np.flatnonzero(folds == f))
        assert entry["weights"] is not None and len(entry["weights"]) == saup.N_STATES
        assert all(0.0 <= w <= 1.0 for w in entry["weights"])
        tested += entry["test"]
    assert sorted(tested) == list(range(len(seqs)))


def test_a_trajectory_label_never_reaches_its_own_score():
    # without stratification the folds do not depend on labels, so flipping trajectory j's outcome
    # may change every other score but never j's own (j is only ever in the training set of others)
    seqs, us, failed = _hmm_inputs()
    base, folds, _ = saup.saup_hmm_scores(seqs, us, failed, k_folds=3, seed=0, stratify=False)
    for j in (0, 5):
        flipped = failed.copy()
        flipped[j] = ~flipped[j]
        s, folds2, _ = saup.saup_hmm_scores(seqs, us, flipped, k_folds=3, seed=0, stratify=False)
        np.testing.assert_array_equal(folds, folds2)
        assert s[j] == pytest.approx(base[j], abs=1e-12)
        assert not np.allclose(np.delete(s, j), np.delete(base, j))  # the label did reach the others


def test_hmm_weights_are_posterior_failure_rates():
    from hmmlearn.hmm import GaussianHMM

    seqs, us, failed = _hmm_inputs()
    model, w = saup.fit_hmm(seqs, failed.astype(float), seed=0)
    assert isinstance(model, GaussianHMM) and model.n_components == 3
    mass = np.stack([model.predict_proba(s).sum(axis=0) for s in seqs])
    den = mass.sum(axis=0)
    expected = np.where(den > 1e-6, (mass * failed[:, None]).sum(axis=0) / den, failed.mean())
    np.testing.assert_allclose(w, expected)


def test_turn_view_figure_draws_the_turn_table(run):
    import matplotlib.pyplot as plt

    from agentuq_nb.figures.saup import saup_turn_figure

    _, _, steps = run
    table = saup.turn_table(steps)
    fig = saup_turn_figure(table)
    ax_u, ax_d, ax_w, ax_s = fig.axes
    np.testing.assert_allclose([p.get_height() for p in ax_u.patches], table["u"])
    lines = {line.get_label(): line for ax in (ax_d, ax_w, ax_s) for line in ax.get_lines()}
    np.testing.assert_allclose(lines["D_a inquiry drift"].get_ydata(), table["d_a"])
    np.testing.assert_allclose(lines["position"].get_ydata(), table["w_position"])
    agent = table["actor"] == "assistant"
    np.testing.assert_allclose(lines["agent, distance"].get_ydata(), table.loc[agent, "running_saup_distance"])
    np.testing.assert_allclose(lines["user, uniform"].get_ydata(), table.loc[~agent, "running_saup_uniform"])
    assert len(ax_s.get_xticklabels()) == len(table)
    plt.close(fig)
