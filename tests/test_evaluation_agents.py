"""The distribution-free toolkit applied to agents: leaderboard, success intervals, abstention, ACI."""
import itertools

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from agentuq_nb.evaluation import (
    abstention_report,
    aci_stream,
    leaderboard,
    risk_control_threshold,
    success_rate_intervals,
)


def runs_frame(success_p, n_tasks=40, n_trials=3, seed=0, disjoint=()):
    """Tidy runs: a task has a difficulty shared by all agents, so pairing by task matters."""
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(size=n_tasks)
    rows = []
    for agent, p in success_p.items():
        logit = np.log(p / (1 - p))
        for t in range(n_tasks):
            prob = 1 / (1 + np.exp(-(logit - 1.5 * difficulty[t])))
            for k in range(n_trials):
                fail = rng.uniform() > prob
                rows.append({"agent": agent,
                             "task_id": f"{agent}-{t}" if agent in disjoint else f"task{t}",
                             "trial": k, "reward": 0.0 if fail else 1.0,
                             "uncertainty": rng.normal() + 1.2 * fail})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- leaderboard
def test_leaderboard_tables_match_hand_computation():
    df = runs_frame({"A": 0.75, "B": 0.74, "C": 0.3, "D": 0.7}, seed=1, disjoint=("D",))
    lb = leaderboard(df, q=0.1, n_boot=500, n_perm=2000, seed=0)
    agents = lb.agents.set_index("agent")
    per_task = df.groupby(["agent", "task_id"])["reward"].mean()
    for a in "ABCD":
        assert agents.loc[a, "mean_reward"] == pytest.approx(per_task.loc[a].mean())
        assert agents.loc[a, "n_tasks"] == 40 and agents.loc[a, "n_runs"] == 120
        assert agents.loc[a, "ci_lo"] <= agents.loc[a, "mean_reward"] <= agents.loc[a, "ci_hi"]
    assert list(lb.agents["rank"]) == sorted(lb.agents["rank"])
    pairs = lb.pairs
    assert len(pairs) == 6
    for _, row in pairs.iterrows():
        assert agents.loc[row.agent_a, "mean_reward"] >= agents.loc[row.agent_b, "mean_reward"]
        if "D" in (row.agent_a, row.agent_b):
            assert not row.paired and row.n_shared == 0
            assert row["diff"] == pytest.approx(agents.loc[row.agent_a, "mean_reward"]
                                                - agents.loc[row.agent_b, "mean_reward"])
        else:
            assert row.paired and row.n_shared == 40
            d = per_task.loc[row.agent_a] - per_task.loc[row.agent_b]
            assert row["diff"] == pytest.approx(d.mean())
    np.testing.assert_allclose(pairs["p_adjusted"],
                               multipletests(pairs["p_value"], method="fdr_bh")[1])
    assert (pairs["significant"] == (pairs["p_adjusted"] <= 0.1)).all()
    assert (pairs["indistinguishable"] == ~pairs["significant"]).all()
    key = {frozenset((r.agent_a, r.agent_b)): r for _, r in pairs.iterrows()}
    assert key[frozenset("AC")].significant and key[frozenset("BC")].significant
    assert key[frozenset("AB")].indistinguishable
    assert "B" in agents.loc["A", "indistinguishable_from"]


def test_paired_p_value_is_the_exact_sign_flip_test():
    rows = []
    ra = [1.0, 1.0, 0.5, 1.0, 0.0, 1.0, 1.0, 0.5]
    rb = [0.0, 1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0]
    for t, (a, b) in enumerate(zip(ra, rb)):
        rows += [{"agent": "a", "task_id": t, "reward": a}, {"agent": "b", "task_id": t, "reward": b}]
    lb = leaderboard(pd.DataFrame(rows), n_boot=200, n_perm=9999, seed=0)
    d = np.array(ra) - np.array(rb)
    obs = abs(d.mean())
    flips = [abs((np.array(s) * d).mean()) >= obs - 1e-12
             for s in itertools.product([-1, 1], repeat=len(d))]
    assert lb.pairs.loc[0, "p_value"] == pytest.approx(np.mean(flips))


def test_leaderboard_global_null_rarely_declares_differences():
    """Five identical agents: any 'significant' pair is a false discovery; FDR = FWER <= q."""
    any_sig = []
    for seed in range(60):
        df = runs_frame({a: 0.6 for a in "VWXYZ"}, n_tasks=25, n_trials=2, seed=100 + seed)
        lb = leaderboard(df, q=0.1, n_boot=100, n_perm=499, seed=seed)
        any_sig.append(lb.pairs["significant"].any())
    assert np.mean(any_sig) <= 0.1 + 2 * np.sqrt(0.1 * 0.9 / 60)


def test_leaderboard_requires_columns():
    with pytest.raises(ValueError, match="missing column"):
        leaderboard(pd.DataFrame({"agent": ["a"], "reward": [1.0]}))


# --------------------------------------------------------------------------- success rates
@pytest.mark.parametrize("method", ["wilson", "beta"])
def test_success_rate_intervals(method):
    df = runs_frame({"A": 0.7, "B": 0.4}, n_tasks=15, n_trials=4, seed=2)
    df.loc[0, "reward"] = 0.5                                 # partial credit counts as failure
    out = success_rate_intervals(df, method=method).set_index("agent")
    for a in "AB":
        sub = df[df.agent == a]
        k, n = int((sub.reward >= 1.0).sum()), len(sub)
        lo, hi = proportion_confint(k, n, alpha=0.05, method=method)
        assert out.loc[a, "n_success"] == k and out.loc[a, "n_runs"] == n
        assert out.loc[a, "success_rate"] == pytest.approx(k / n)
        assert (out.loc[a, "ci_lo"], out.loc[a, "ci_hi"]) == pytest.approx((lo, hi))
    per_task = success_rate_intervals(df, by=["agent", "task_id"], method=method)
    assert len(per_task) == 30 and (per_task["n_runs"] == 4).all()


# --------------------------------------------------------------------------- abstention
def test_abstention_report_splits_by_task_and_uses_risk_control():
    df = runs_frame({"A": 0.6}, n_tasks=300, n_trials=3, seed=3)
    rep = abstention_report(df, alpha=0.2, delta=0.1, seed=0)
    cal, held = df.loc[rep["cal_index"]], df.loc[rep["heldout_index"]]
    assert set(cal.task_id).isdisjoint(held.task_id)
    assert len(cal) + len(held) == len(df)
    expected = risk_control_threshold(cal.uncertainty, cal.reward < 1, 0.2, 0.1)
    assert rep["threshold"] == expected["threshold"] and rep["feasible"]
    kept = held.uncertainty <= rep["threshold"]
    h = rep["heldout"]
    assert h["n"] == len(held) and h["n_kept"] == kept.sum()
    assert h["coverage"] == pytest.approx(kept.mean())
    assert h["realized_failure_rate"] == pytest.approx((held.reward[kept] < 1).mean())
    assert h["baseline_failure_rate"] == pytest.approx((held.reward < 1).mean())
    assert h["realized_failure_rate"] < h["baseline_failure_rate"]
    curve = rep["heldout_curves"]
    assert len(curve) == len(held) and curve["y"].iloc[-1] == pytest.approx(h["baseline_failure_rate"])


def test_abstention_realized_failure_rate_is_controlled_across_repetitions():
    """Population risk of the kept set <= alpha in >= 1 - delta of repetitions (large held-out)."""
    alpha, delta = 0.15, 0.1
    rng = np.random.default_rng(4)
    ok = []
    for rep_seed in range(100):
        n = 1500
        u = rng.uniform(size=n)
        fail = rng.uniform(size=n) < 1.35 * u ** 2        # P(fail | u <= lam) = 0.45 lam^2
        df = pd.DataFrame({"uncertainty": u, "reward": np.where(fail, 0.0, 1.0)})
        rep = abstention_report(df, alpha, delta, cal_fraction=0.5, seed=rep_seed, group_col=None)
        lam = rep["threshold"]
        ok.append(lam is None or 0.45 * lam ** 2 <= alpha)
    assert np.mean(ok) >= 1 - delta


def test_abstention_invert_and_errors():
    df = runs_frame({"A": 0.6}, n_tasks=200, n_trials=2, seed=5)
    a = abstention_report(df, 0.2, 0.1, seed=1)
    b = abstention_report(df.assign(uncertainty=-df.uncertainty), 0.2, 0.1, seed=1, invert=True)
    assert a["heldout"] == b["heldout"]
    with pytest.raises(ValueError, match="at least 4"):
        abstention_report(df.head(3))


# --------------------------------------------------------------------------- ACI stream
def test_aci_stream_tracks_drifting_difficulty():
    rng = np.random.default_rng(6)
    T = 4000
    difficulty = np.r_[np.zeros(T // 2), np.linspace(0, 3, T // 2)]   # tasks get harder
    reward = np.clip(0.8 - 0.2 * difficulty + 0.2 * rng.normal(size=T), 0, 1)
    df = pd.DataFrame({"run": rng.permutation(T), "reward": 0.0})
    df = df.sort_values("run").assign(reward=reward).sample(frac=1, random_state=0)
    out = aci_stream(df, alpha=0.1, gamma=0.01, warmup=50, order_col="run")
    assert list(out["t"]) == list(range(T))
    np.testing.assert_allclose(out["true"], reward)
    assert out["covered"].iloc[:50].isna().all() and out["covered"].iloc[50:].notna().all()
    # running-mean prediction uses only the past
    assert out["pred"].iloc[10] == pytest.approx(reward[:10].mean())
    assert abs(out["cum_miscoverage"].iloc[-1] - 0.1) <= 0.02
    # widths grow as the stream drifts away from the running mean
    assert out["width"].iloc[-200:].mean() > out["width"].iloc[100:T // 2].mean()
    with_pred = aci_stream(df.assign(p=0.5), pred_col="p", order_col="run")
    assert (with_pred["pred"] == 0.5).all()
