"""Dynamics: normalized turn index, binned curves, early warning; notebook 07 under papermill."""
from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb import evaluation
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.early_warning import early_warning
from agentuq_nb.uq import dynamics

from conftest import make_aggregated_run

ROOT = Path(__file__).resolve().parents[1]

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dyn")
    make_aggregated_run(tmp, num_simulations=16, messages_per_simulation=14,
                                      tokens_per_message=6, seed=5, signal=0.4)
    return tmp / "run"


def _turns(values: dict[str, list[float]], rewards: dict[str, float]) -> pd.DataFrame:
    rows = []
    for tid, vals in values.items():
        for k, v in enumerate(vals):
            rows.append({"domain": "d", "task_id": tid, "trial": 0, "seed": 0, "scorer": "self", "role": "assistant",
                         "turn_idx": 2 * k + 1, "message_idx": 2 * k + 1, "avg_token_nll": v})
        rows.append({"domain": "d", "task_id": tid, "trial": 0, "seed": 0, "scorer": "self", "role": "user",
                     "turn_idx": 0, "message_idx": 0, "avg_token_nll": 9.0})
    rw = pd.DataFrame([{"domain": "d", "task_id": t, "trial": 0, "seed": 0, "reward": r} for t, r in rewards.items()])
    return dynamics.agent_turns(pd.DataFrame(rows), rw)


def test_positions_run_from_zero_to_one():
    np.testing.assert_allclose(dynamics.normalized_positions(5), [0, 0.25, 0.5, 0.75, 1])
    np.testing.assert_allclose(dynamics.normalized_positions(1), [0])
    t = _turns({"a": [1.0, 2.0, 3.0], "b": [5.0]}, {"a": 1.0, "b": 0.0})
    assert (t["value"] != 9.0).all()  # only agent turns
    np.testing.assert_allclose(t.loc[t["task_id"] == "a", "position"], [0, 0.5, 1])
    np.testing.assert_allclose(t.loc[t["task_id"] == "b", "position"], [0])
    assert list(t["failed"]) == [False, False, False, True]


def test_early_warning_scores_are_prefix_means():
    vals = {"a": [1.0, 2.0, 3.0, 4.0, 5.0], "b": [2.0, 4.0], "c": [7.0]}
    t = _turns(vals, {"a": 1.0, "b": 0.0, "c": 0.0})
    s = dynamics.early_warning_scores(t, (0.25, 0.5, 0.75, 1.0)).set_index("task_id")
    for tid, v in vals.items():
        n = len(v)
        for f in (0.25, 0.5, 0.75, 1.0):
            seen = [x for k, x in enumerate(v) if (k / (n - 1) if n > 1 else 0.0) <= f]  # independent
            assert s.loc[tid, f"early_warning_f{f:g}"] == pytest.approx(np.mean(seen))


def test_dynamics_curve_mean_and_se_band():
    t = _turns({"a": [1.0, 3.0], "b": [2.0, 5.0], "c": [4.0, 4.0]}, {"a": 1.0, "b": 1.0, "c": 0.0})
    c = evaluation.dynamics_curve(t, n_bins=2).set_index(["outcome", "bin"])
    assert c.loc[("success", 0), "mean"] == pytest.approx(1.5)
    se = np.std([1.0, 2.0], ddof=1) / np.sqrt(2)
    assert c.loc[("success", 0), "lo"] == pytest.approx(1.5 - 1.96 * se)
    assert c.loc[("success", 1), "mean"] == pytest.approx(4.0)  # position 1 lands in the last bin
    assert c.loc[("failure", 1), "n_trajectories"] == 1
    b = evaluation.dynamics_curve(t, n_bins=2, band="bootstrap", n_boot=200)
    assert (b["lo"] <= b["mean"] + 1e-12).all() and (b["mean"] <= b["hi"] + 1e-12).all()


def test_early_warning_on_a_run_matches_sklearn(run_dir):
    table, scores = early_warning(run_dir, n_boot=100)
    assert RunDir(run_dir).file("early_warning_scores").exists()
    assert list(table["fraction"]) == [0.25, 0.5, 0.75, 1.0]
    turns = pd.read_parquet(run_dir / "turn_summary.parquet")
    a = turns[(turns["role"] == "assistant") & (turns["scorer"] == "self")]
    full = a.groupby("task_id")["avg_token_nll"].mean()  # mean of turn means = the f=1 score
    traj = pd.read_parquet(run_dir / "trajectories.parquet").set_index("task_id")
    expected = roc_auc_score(traj.loc[full.index, "reward"] < 1, full)
    assert table.iloc[-1]["auroc"] == pytest.approx(expected)
    assert (table["auroc_lo"] <= table["auroc"] + 1e-12).all() and (table["auroc"] <= table["auroc_hi"] + 1e-12).all()
    assert table["mean_turns_seen"].is_monotonic_increasing


def test_notebook_07_runs_under_papermill(run_dir, tmp_path):
    import papermill as pm

    out = tmp_path / "07.ipynb"
    figs = tmp_path / "figures"
    pm.execute_notebook(str(ROOT / "notebooks" / "07_dynamics_saup.ipynb"), str(out), kernel_name="python3",
                        parameters={"run_dir": str(run_dir), "figures_dir": str(figs), "embedder": "minilm",
                                    "n_boot": 50, "k_folds": 3}, progress_bar=False)
    for name in ("dynamics_agent_nll", "early_warning", "estimator_forest_saup", "saup_turn_view"):
        assert (figs / f"{name}.png").stat().st_size > 1000 and (figs / f"{name}.pdf").exists()
    table = pd.read_csv(run_dir / "estimator_table.csv")
    assert {"saup_rms", "saup_position", "saup_distance", "saup_hmm", "early_warning_f0.5"} <= set(table["estimator"])
    nb = nbformat.read(ROOT / "notebooks" / "07_dynamics_saup.ipynb", as_version=4)
    assert all(c.get("execution_count") is None and not c.get("outputs") for c in nb.cells if c.cell_type == "code")
