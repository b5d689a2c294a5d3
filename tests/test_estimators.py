"""compare_estimators: every estimator against an independent computation; table completeness."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb.estimators import BASELINES
from agentuq_nb.estimators.scores import score_table
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import token_statistics
from agentuq_nb.steps.compare_estimators import compare_estimators

from conftest import make_aggregated_run

ESTIMATOR_TABLE_FILE = RunDir.relative("estimator_table")
TOKEN_STATISTICS = [s.name for s in token_statistics.TOKEN_STATISTICS]

N_BOOT = 100


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("est")
    make_aggregated_run(tmp, num_simulations=24, messages_per_simulation=10,
                                      tokens_per_message=8, seed=3, signal=0.4)
    return tmp / "run"


def _independent(run_dir):
    """Per-trajectory statistics straight from the token rows (no aggregation code)."""
    tok = pd.read_parquet(run_dir / "tokens.parquet")
    traj = pd.read_parquet(run_dir / "trajectories.parquet")
    a = tok[tok["role"] == "assistant"].assign(nll=lambda d: -d["chosen_logprob"])
    g = a.groupby("task_id")
    ind = pd.DataFrame({"avg_token_nll": g["nll"].mean(), "trajectory_nll": g["nll"].sum(),
                        "min_chosen_prob": g["chosen_prob"].min(), "max_token_nll": g["nll"].max(),
                        "mean_topk_entropy": g["topk_entropy"].mean()})
    ind = ind.join(traj.set_index(traj["task_id"].astype(str))[["reward", "num_messages", "agent_chars"]])
    return ind


def test_every_token_estimator_is_listed_with_finite_auroc_and_ci(run_dir):
    table = compare_estimators(run_dir, n_boot=N_BOOT)
    assert (run_dir / ESTIMATOR_TABLE_FILE).exists()
    on_disk = pd.read_csv(run_dir / ESTIMATOR_TABLE_FILE)
    assert list(on_disk["estimator"]) == list(table["estimator"])
    summary = pd.read_parquet(run_dir / "trajectory_summary.parquet")
    expected = set()
    for (scorer, role), rows in summary.groupby(["scorer", "role"]):
        for stat in TOKEN_STATISTICS:
            if np.isfinite(rows[stat].to_numpy(dtype=float)).any():
                expected.add(f"{role}.{stat}" if scorer == "self" else f"{role}.{stat}@{scorer}")
    assert {"assistant.avg_token_nll", "user.avg_token_nll", "combined.avg_token_nll"} <= expected
    token = table[table["family"] == "token"].set_index("estimator")
    assert set(token.index) == expected
    for name, r in token.iterrows():
        assert np.isfinite(r["auroc"]), name
        assert r["auroc_lo"] <= r["auroc"] + 1e-12 and r["auroc"] <= r["auroc_hi"] + 1e-12, name
        for m in ("auarc", "aurc", "prr", "spearman"):
            assert np.isfinite(r[m]) and r[f"{m}_lo"] <= r[m] + 1e-12 <= r[f"{m}_hi"] + 2e-12, (name, m)
    assert set(BASELINES) <= set(table.loc[table["family"] == "baseline", "estimator"])
    ref = table.set_index("estimator").loc["assistant.avg_token_nll"]
    assert np.isnan(ref["p_value_vs_reference"])
    others = table[table["estimator"] != "assistant.avg_token_nll"]
    p = others.loc[np.isfinite(others["auroc"]), "p_value_vs_reference"]
    assert ((p > 0) & (p <= 1)).all()


def test_estimators_match_an_independent_computation(run_dir):
    table = compare_estimators(run_dir, n_boot=N_BOOT).set_index("estimator")
    ind = _independent(run_dir)
    failed = (ind["reward"] < 1.0).to_numpy()
    for stat, sign in (("avg_token_nll", 1), ("trajectory_nll", 1), ("max_token_nll", 1),
                       ("mean_topk_entropy", 1), ("min_chosen_prob", -1)):
        expected = roc_auc_score(failed, sign * ind[stat].to_numpy())
        assert table.loc[f"assistant.{stat}", "auroc"] == pytest.approx(expected, abs=1e-9), stat
    assert table.loc["assistant.min_chosen_prob", "invert"]
    assert "inverted" in table.loc["assistant.min_chosen_prob", "orientation"]
    for base in ("num_messages", "agent_chars"):
        expected = roc_auc_score(failed, ind[base].to_numpy()) if ind[base].nunique() > 1 else 0.5
        assert table.loc[base, "auroc"] == pytest.approx(expected, abs=1e-9)


def test_score_table_aligns_scores_with_rewards(run_dir):
    table, estimators = score_table(run_dir)
    assert len(table) == 24 and table[["task_id", "trial", "seed"]].duplicated().sum() == 0
    ind = _independent(run_dir)
    t = table.set_index(table["task_id"].astype(str))
    np.testing.assert_allclose(t.loc[ind.index, "assistant.avg_token_nll"], ind["avg_token_nll"], rtol=1e-9)
    np.testing.assert_array_equal(t.loc[ind.index, "reward"], ind["reward"])
    assert len({e.name for e in estimators}) == len(estimators)


def test_extra_score_files_and_verbalized_confidence_are_picked_up(run_dir, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    traj = pd.read_parquet(run / "trajectories.parquet")
    failed = (traj["reward"] < 1).to_numpy()
    keys = traj[["domain", "task_id", "trial", "seed"]]
    keys.assign(verbalized_confidence=np.where(failed, 0.2, 0.9)).to_csv(run / "verbalized_confidence.csv", index=False)
    keys.assign(saup_rms=failed.astype(float), saup_hmm_fold=0).to_parquet(run / "saup_scores.parquet")
    # an observation scorer's roles (as ``rescore`` writes them) become estimators of their own
    summary = pd.read_parquet(run / "trajectory_summary.parquet")
    obs = summary[summary["role"] == "user"].assign(scorer="agent_llm", role="observation_user")
    pd.concat([summary, obs], ignore_index=True).to_parquet(run / "trajectory_summary.parquet")
    RunDir(run).forget("trajectory_summary")  # replaced on purpose: take it as it is
    table = compare_estimators(run, n_boot=N_BOOT).set_index("estimator")
    assert np.isfinite(table.loc["observation_user.avg_token_nll@agent_llm", "auroc"])
    assert table.loc["observation_user.avg_token_nll@agent_llm", "scorer"] == "agent_llm"
    assert table.loc["verbalized_confidence", "invert"]
    assert table.loc["verbalized_confidence", "auroc"] == pytest.approx(1.0)  # inverted: low confidence = failure
    assert table.loc["saup_rms", "auroc"] == pytest.approx(1.0)
    assert "saup_hmm_fold" not in table.index
