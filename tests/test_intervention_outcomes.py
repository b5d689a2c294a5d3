"""Certification, outcome accounting and the figure of intervention runs (issue 18), on run folders
built by hand (results.json with intervention blocks, the shape sim.decisions.intervention_block writes)."""
from __future__ import annotations

import json
import pickle

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.linear_model import LogisticRegression

from agentuq_nb.figures.intervention import intervention_curve_figure
from agentuq_nb.intervention.certify import (
    certify_arrays,
    certify_threshold,
    fit_signal_calibrator,
    heldout_risk,
    trajectory_signals,
    unflagged_risk,
)
from agentuq_nb.intervention.outcomes import (
    defer_curve_from_observe,
    oracle_defer_summary,
    outcome_table,
    policy_summary,
    random_rate_for,
    threshold_grid,
)
from agentuq_nb.io.errors import InputError

matplotlib.use("Agg")


def decision(j: int, signal, action: str = "proceed", flagged: bool | None = None, extra_tokens: int = 0) -> dict:
    return {"message_idx": 2 * j + 1, "decision_idx": j, "signal": signal,
            "flagged": action != "proceed" if flagged is None else flagged, "action": action,
            "proposed": "p", "executed": "p", "extra_tokens": extra_tokens, "extra_cost": 0.0, "details": {}}


def simulation(task_id, trial: int, seed: int, decisions: list[dict], env_reward: float, escalated: bool = False,
               policy: dict | None = None, agent_tokens: int = 100, escalation_cost: float = 1.0,
               tokens: list[int] | None = None) -> dict:
    """One simulation in the simulator's shape: reward 0 when escalated, the environment's verdict in the
    block. ``tokens``: the agent's messages get these usages (greeting at 0, then user/agent pairs: the
    agent message of decision j at index 2j + 2) and ``agent_tokens`` is their sum."""
    messages = []
    if tokens is not None:
        messages = [{"role": "assistant", "content": "hi", "usage": None}]
        for j, (d, n) in enumerate(zip(decisions, tokens)):
            d["message_idx"] = 2 * j + 2
            messages += [{"role": "user", "content": "u"},
                         {"role": "assistant", "content": "a", "usage": {"completion_tokens": n}}]
        agent_tokens = sum(tokens)
    extra = sum(d["extra_tokens"] for d in decisions)
    block = {"policy": policy or {"name": "observe", "signal": "turn_avg_nll"}, "decisions": decisions,
             "flagged_turns": [d["message_idx"] for d in decisions if d["flagged"]],
             "intervened_turns": [d["message_idx"] for d in decisions if d["action"] != "proceed"],
             "num_decisions": len(decisions), "num_flagged": sum(d["flagged"] for d in decisions),
             "num_interventions": sum(d["action"] != "proceed" for d in decisions), "escalated": escalated,
             "env_reward": env_reward, "agent_tokens": agent_tokens + extra, "extra_agent_tokens": extra,
             "extra_agent_cost": 0.0, "escalation_cost": escalation_cost if escalated else 0.0}
    return {"id": f"{task_id}-{trial}-{seed}", "task_id": str(task_id), "trial": trial, "seed": seed,
            "messages": messages, "reward_info": {"reward": 0.0 if escalated else env_reward},
            "termination_reason": "agent_stop", "intervention": block}


def write_run(folder, simulations: list[dict], policy: dict | None = None, domain: str = "bookshop"):
    """A run folder holding results.json (τ²-bench shape, intervention blocks) - what `simulate --policy` writes."""
    folder.mkdir(parents=True, exist_ok=True)
    policy = policy or simulations[0]["intervention"]["policy"]
    info = {"environment_info": {"domain_name": domain}, "intervention_policy": policy}
    (folder / "results.json").write_text(json.dumps({"timestamp": "t", "info": info, "tasks": [],
                                                     "simulations": simulations}))
    return folder


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


A, B = 2.5, -1.0  # the known relation: P(failure | max signal s) = sigmoid(A s + B)


def draw(rng, n: int):
    s = rng.normal(size=n)
    return s, rng.random(n) < sigmoid(A * s + B)


def observe_run_from(folder, rng, n: int, n_tasks: int = 20):
    """An observe run whose trajectories have 1-4 decision points; the failure follows their max signal."""
    sims, maxima, failures = [], [], []
    for i in range(n):
        signals = rng.normal(size=rng.integers(1, 5))
        fail = rng.random() < sigmoid(A * signals.max() + B)
        sims.append(simulation(i % n_tasks, i // n_tasks, i, [decision(j, float(v)) for j, v in enumerate(signals)],
                               0.0 if fail else 1.0))
        maxima.append(signals.max())
        failures.append(fail)
    return write_run(folder, sims), np.array(maxima), np.array(failures)


# ----------------------------------------------------------------------------------------- certification

def test_certified_threshold_keeps_the_unflagged_failure_rate_below_risk_over_repeated_splits():
    """δ = 0.15, α = 0.1: over 300 random calibration (n = 300) / test splits of a large pool, the test
    failure rate among unflagged runs exceeds δ in at most α of the splits (+ a binomial tolerance)."""
    rng = np.random.default_rng(7)
    risk, alpha, n_cal, reps = 0.15, 0.1, 300, 300
    pool_s, pool_f = draw(rng, 100_000)
    exceed, naive_exceed, coverage = 0, 0, []
    for _ in range(reps):
        cal = np.zeros(pool_s.size, bool)
        cal[rng.choice(pool_s.size, n_cal, replace=False)] = True
        cert = certify_arrays(pool_s[cal], pool_f[cal], risk, alpha)
        held = unflagged_risk(pool_s[~cal], pool_f[~cal], cert["threshold"])
        exceed += held["risk"] is not None and held["risk"] > risk
        coverage.append(held["coverage"])
        # the plug-in threshold (largest with calibration risk <= δ, no test) for contrast
        order = np.argsort(pool_s[cal])
        plug_in = np.cumsum(pool_f[cal][order]) / np.arange(1, n_cal + 1) <= risk
        naive = pool_s[cal][order][np.flatnonzero(plug_in).max()]
        naive_exceed += unflagged_risk(pool_s[~cal], pool_f[~cal], naive)["risk"] > risk
    assert exceed <= stats.binom.ppf(0.999, reps, alpha)
    assert naive_exceed > 2 * stats.binom.ppf(0.999, reps, alpha)  # the check can fail: an uncertified one does
    # not vacuous: the base failure rate is ~0.33 > δ, yet a good share of runs is left unflagged
    assert pool_f.mean() > 2 * risk
    assert np.mean(coverage) > 0.25


def test_an_uninformative_signal_certifies_nothing():
    rng = np.random.default_rng(1)
    s = rng.normal(size=300)
    cert = certify_arrays(s, rng.random(300) < 0.4, risk=0.1, alpha=0.1)
    assert cert["threshold"] is None and not cert["feasible"] and cert["n_accepted"] == 0
    held = unflagged_risk(s, np.zeros(300, bool), None)
    assert held["n_unflagged"] == 0 and held["risk"] is None


def test_certification_through_a_run_folder_matches_the_arrays(tmp_path):
    rng = np.random.default_rng(3)
    run, maxima, failures = observe_run_from(tmp_path / "cal", rng, 300)
    signals = trajectory_signals(run, "turn_avg_nll")
    assert len(signals) == 300 and signals["domain"].eq("bookshop").all()
    np.testing.assert_allclose(signals["max_signal"], maxima)
    assert (signals["failure"].to_numpy(bool) == failures).all()
    cert = certify_threshold(run, "turn_avg_nll", risk=0.2, alpha=0.1)
    assert cert["feasible"] and cert == {**certify_arrays(maxima, failures, 0.2, 0.1), **{
        k: cert[k] for k in ("signal", "calibration", "n_no_reward", "n_never_signalled")}}
    json.dumps(cert)
    accepted = maxima <= cert["threshold"]
    assert cert["n_accepted"] == accepted.sum() and cert["risk"] == 0.2 and cert["alpha"] == 0.1
    # δ is the risk level and α the error probability: the binomial p-value at δ is below α
    assert cert["p_value"] == pytest.approx(stats.binom.cdf(failures[accepted].sum(), accepted.sum(), 0.2))
    assert cert["p_value"] <= 0.1 and cert["empirical_risk"] <= 0.2
    # held out: a second run; the rate and count against a direct count, the Wilson interval around it
    held_run, h_max, h_fail = observe_run_from(tmp_path / "held", rng, 200)
    held = heldout_risk(held_run, cert["threshold"])
    keep = h_max <= cert["threshold"]
    assert held["n_unflagged"] == keep.sum() and held["risk"] == pytest.approx(h_fail[keep].mean())
    assert held["risk_lo"] <= held["risk"] <= held["risk_hi"]


def test_calibrated_signal_recovers_the_known_failure_probability(tmp_path):
    rng = np.random.default_rng(5)
    sims = []
    s, f = draw(rng, 600)
    for i, (v, fail) in enumerate(zip(s, f)):
        sims.append(simulation(i % 30, i // 30, i, [decision(0, float(v))], 0.0 if fail else 1.0))
    run = write_run(tmp_path / "cal", sims)
    calibrator = pickle.loads(pickle.dumps(fit_signal_calibrator(run, "turn_avg_nll")))
    grid = np.linspace(-1.5, 1.5, 7)
    reference = LogisticRegression(C=1e6).fit(s[:, None], f).predict_proba(grid[:, None])[:, 1]
    np.testing.assert_allclose(calibrator(grid), reference, atol=0.01)  # Platt = logistic fit
    np.testing.assert_allclose(calibrator(grid), sigmoid(A * grid + B), atol=0.12)  # near the truth
    assert isinstance(calibrator(0.3), float) and np.isnan(calibrator(None))


def test_bad_runs_are_refused_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    run, _, _ = observe_run_from(tmp_path / "cal", rng, 10)
    with pytest.raises(InputError, match=r"results.json.*recorded the signal 'turn_avg_nll', not 'entropy'"):
        certify_threshold(run, "entropy", risk=0.2, alpha=0.1)
    acted = write_run(tmp_path / "defer", [simulation(1, 0, 0, [decision(0, 0.9, "defer")], 0.0, escalated=True,
                                                      policy=DEFER)])
    with pytest.raises(InputError, match=r"results.json: 1 of 1 simulations were intervened on"):
        certify_threshold(acted, "turn_avg_nll", risk=0.2, alpha=0.1)
    plain = simulation(1, 0, 0, [], 1.0)
    del plain["intervention"]
    bare = write_run(tmp_path / "plain", [plain], policy={"name": "observe"})
    with pytest.raises(InputError, match=r"results.json.*no intervention block"):
        trajectory_signals(bare, "turn_avg_nll")


def test_a_run_without_any_defined_signal_is_never_flagged(tmp_path):
    sims = [simulation(i, 0, i, [decision(0, None)], 0.0) for i in range(3)]
    sims += [simulation(10 + i, 0, i, [decision(0, 0.5)], 1.0) for i in range(3)]
    run = write_run(tmp_path / "run", sims)
    held = heldout_risk(run, 1.0)
    assert held["n_unflagged"] == 6 and held["n_unflagged_failures"] == 3
    assert certify_threshold(run, "turn_avg_nll", 0.2, 0.1)["n_never_signalled"] == 3


# ------------------------------------------------------------------------------------ outcome accounting

DEFER = {"name": "defer", "action": "defer", "signal": "turn_avg_nll", "trigger": "threshold", "threshold": 0.5}


def test_outcome_table_and_summary_of_a_hand_built_defer_run(tmp_path):
    sims = [
        simulation("a", 0, 1, [decision(0, 0.2), decision(1, 0.7, "defer")], 1.0, escalated=True, policy=DEFER,
                   escalation_cost=2.0),  # the environment would have passed it: still not solved
        simulation("a", 1, 2, [decision(0, 0.1), decision(1, 0.3)], 1.0, policy=DEFER),
        simulation("b", 0, 3, [decision(0, 0.9, "defer")], 0.0, escalated=True, policy=DEFER, escalation_cost=2.0),
        simulation("b", 1, 4, [decision(0, 0.4)], 0.0, policy=DEFER, agent_tokens=60),
    ]
    table = outcome_table(write_run(tmp_path / "defer", sims))
    assert list(table["reward"]) == [0.0, 1.0, 0.0, 0.0] and list(table["env_reward"]) == [1.0, 1.0, 0.0, 0.0]
    assert list(table["escalated"]) == list(table["intervened"]) == [True, False, True, False]
    np.testing.assert_allclose(table["max_signal"], [0.7, 0.3, 0.9, 0.4])
    assert list(table["num_decisions"]) == [2, 2, 1, 1] and list(table["success"]) == [False, True, False, False]
    assert (table["run"] == "defer").all() and (table["threshold"] == 0.5).all() and table["rate"].isna().all()
    row = policy_summary(table, n_boot=200, seed=0).iloc[0]
    assert row["n"] == 4 and row["n_tasks"] == 2 and row["n_escalated"] == 2
    assert row["intervention_rate"] == 0.5 and row["escalation_rate"] == 0.5
    assert row["success_all"] == 0.25 and row["success_non_escalated"] == 0.5  # 1 of 4; 1 of the 2 not escalated
    assert row["agent_tokens"] == 90.0 and row["total_cost"] == 91.0  # (3 * 100 + 60) / 4, + 2 * 2.0 / 4
    assert row["success_all_lo"] <= row["success_all"] <= row["success_all_hi"]


def correlated_run(folder, rng, n_tasks: int = 30, trials: int = 4):
    """Every task solved in all its trials or in none (task-level difficulty), at a 50% task rate."""
    solved = rng.random(n_tasks) < 0.5
    sims = [simulation(t, k, 100 * t + k, [decision(0, 0.1)], float(solved[t]), policy=DEFER)
            for t in range(n_tasks) for k in range(trials)]
    return write_run(folder, sims)


def test_the_task_clustered_interval_is_wider_when_trials_of_a_task_agree(tmp_path):
    table = outcome_table(correlated_run(tmp_path / "run", np.random.default_rng(2)))
    clustered = policy_summary(table, n_boot=2000, seed=1).iloc[0]
    flat = policy_summary(table, n_boot=2000, seed=1, clustered=False).iloc[0]
    assert clustered["success_all"] == flat["success_all"]
    width = lambda r: r["success_all_hi"] - r["success_all_lo"]  # noqa: E731
    # 30 independent tasks, not 120 independent trajectories: about sqrt(4) = 2 times wider
    assert width(clustered) > 1.6 * width(flat)


def test_the_oracle_escalates_exactly_the_failures(tmp_path):
    rng = np.random.default_rng(4)
    run, _, failures = observe_run_from(tmp_path / "observe", rng, 80)
    observe = outcome_table(run)
    row = oracle_defer_summary(observe, n_boot=200).iloc[0]
    assert row["policy"] == "oracle" and row["escalation_rate"] == pytest.approx(failures.mean())
    assert row["success_all"] == pytest.approx(observe["success"].mean()) and row["success_non_escalated"] == 1.0
    assert row["intervention_rate"] == row["escalation_rate"]


def test_the_oracle_cannot_defer_a_run_that_ended_before_the_agent_spoke(tmp_path):
    sims = [simulation(0, 0, 1, [decision(0, 0.5)], 0.0), simulation(1, 0, 2, [], 0.0),
            simulation(2, 0, 3, [decision(0, 0.1)], 1.0), simulation(3, 0, 4, [decision(0, 0.2)], 0.0)]
    row = oracle_defer_summary(outcome_table(write_run(tmp_path / "observe", sims)), n_boot=100).iloc[0]
    assert row["escalation_rate"] == 0.5  # the two failed runs with a decision point, not the one without
    assert row["success_non_escalated"] == 0.5 and row["success_all"] == 0.25


def test_random_rate_matches_a_simulated_coin():
    rng = np.random.default_rng(11)
    n = rng.integers(0, 9, size=150)  # some trajectories without a decision point
    p = random_rate_for(0.4, n)
    coins = rng.random((4000, n.sum())) < p  # 4000 replays of the random policy over the run
    ends = np.r_[0, np.cumsum(n)[:-1]]
    flagged = np.logical_or.reduceat(coins, ends, axis=1) & (n > 0)  # reduceat of an empty segment: its next coin
    assert flagged.mean() == pytest.approx(0.4, abs=0.005)
    assert random_rate_for(0.0, n) == 0.0 and random_rate_for((n > 0).mean(), n) == 1.0
    with pytest.raises(ValueError, match="target_rate"):
        random_rate_for(0.999, n)


def test_threshold_grid_flags_the_asked_shares():
    u = np.r_[np.arange(10.0), np.nan]  # one never-signalled run
    grid = threshold_grid(u, [0.0, 2 / 11, 5 / 11, 1.0])  # shares of all 11 runs
    assert list(grid["threshold"][:3]) == [9.0, 7.0, 4.0] and grid["threshold"][3] < 0
    np.testing.assert_allclose(grid["flagged_share"], [0, 2 / 11, 5 / 11, 10 / 11])


def test_the_exact_defer_curve_matches_a_hand_count(tmp_path):
    sims = [simulation("a", 0, 1, [decision(0, 0.2), decision(1, 0.8)], 1.0, tokens=[10, 20]),
            simulation("a", 1, 2, [decision(0, 0.6), decision(1, 0.1)], 1.0, tokens=[5, 7]),
            simulation("b", 0, 3, [decision(0, 0.3)], 0.0, tokens=[9]),
            simulation("c", 0, 4, [decision(0, None), decision(1, 0.4)], 1.0, tokens=[4, 4])]
    run = write_run(tmp_path / "observe", sims)
    curve = defer_curve_from_observe(run, [0.5, 0.25], escalation_cost=3.0, n_boot=100).set_index("threshold")
    # t = 0.5: runs 1 (at its 2nd decision: 30 tokens) and 2 (at its 1st: 5) escalated; 3 fails; 4 solved
    at = curve.loc[0.5]
    assert at["escalation_rate"] == 0.5 and at["success_all"] == 0.25 and at["success_non_escalated"] == 0.5
    assert at["agent_tokens"] == (30 + 5 + 9 + 8) / 4 and at["total_cost"] == at["agent_tokens"] + 2 * 3.0 / 4
    # t = 0.25: also run 3 (0.3) and run 4 (0.4, at 8 tokens); run 1 now at 30 (0.8 is its first above)
    at = curve.loc[0.25]
    assert at["escalation_rate"] == 1.0 and at["success_all"] == 0.0 and np.isnan(at["success_non_escalated"])
    assert at["agent_tokens"] == (30 + 5 + 9 + 8) / 4
    assert (curve["run"] == "observe (defer, exact)").all()


# ----------------------------------------------------------------------------------------------- figure

def test_the_curve_figure_draws_each_policy_the_random_baseline_and_the_oracle(tmp_path):
    rng = np.random.default_rng(6)
    run, _, _ = observe_run_from(tmp_path / "observe", rng, 60)
    observe = outcome_table(run)
    grid = threshold_grid(observe, [0.1, 0.3, 0.5])
    curve = defer_curve_from_observe(run, grid["threshold"], n_boot=100)
    rand = curve.assign(policy="random", action="defer", run="random")
    summary = pd.concat([policy_summary(observe, n_boot=100), curve, rand, oracle_defer_summary(observe, n_boot=100)],
                        ignore_index=True)
    fig = intervention_curve_figure(summary)
    left = fig.axes[0]
    labels = [t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    assert labels == ["observe (no intervention)", "defer", "random (defer), equal rate",
                      "oracle (defers exactly the failures)"]
    ys = [np.asarray(line.get_ydata(), float) for line in left.get_lines() if len(line.get_ydata()) == 3]  # the two curves
    np.testing.assert_allclose(ys[0], curve.sort_values("intervention_rate")["success_all"])
    fig.savefig(tmp_path / "curve.png")
    plt.close(fig)
