"""Certification, outcome accounting and the figure of intervention runs (issue 18), on run folders
built by hand (results.json with intervention blocks, the shape sim.decisions.intervention_block writes)."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from scipy import stats
from sklearn.linear_model import LogisticRegression

from agentuq_nb.intervention.certify import (
    certify_arrays,
    certify_threshold,
    fit_signal_calibrator,
    heldout_risk,
    trajectory_signals,
    unflagged_risk,
)
from agentuq_nb.io.errors import InputError


def decision(j: int, signal, action: str = "proceed", flagged: bool | None = None, extra_tokens: int = 0) -> dict:
    return {"message_idx": 2 * j + 1, "decision_idx": j, "signal": signal,
            "flagged": action != "proceed" if flagged is None else flagged, "action": action,
            "proposed": "p", "executed": "p", "extra_tokens": extra_tokens, "extra_cost": 0.0, "details": {}}


def simulation(task_id, trial: int, seed: int, decisions: list[dict], env_reward: float, escalated: bool = False,
               policy: dict | None = None, agent_tokens: int = 100, escalation_cost: float = 1.0) -> dict:
    """One simulation in the simulator's shape: reward 0 when escalated, the environment's verdict in the block."""
    extra = sum(d["extra_tokens"] for d in decisions)
    block = {"policy": policy or {"name": "observe", "signal": "turn_nll"}, "decisions": decisions,
             "flagged_turns": [d["message_idx"] for d in decisions if d["flagged"]],
             "intervened_turns": [d["message_idx"] for d in decisions if d["action"] != "proceed"],
             "num_decisions": len(decisions), "num_flagged": sum(d["flagged"] for d in decisions),
             "num_interventions": sum(d["action"] != "proceed" for d in decisions), "escalated": escalated,
             "env_reward": env_reward, "agent_tokens": agent_tokens + extra, "extra_agent_tokens": extra,
             "extra_agent_cost": 0.0, "escalation_cost": escalation_cost if escalated else 0.0}
    return {"id": f"{task_id}-{trial}-{seed}", "task_id": str(task_id), "trial": trial, "seed": seed,
            "messages": [], "reward_info": {"reward": 0.0 if escalated else env_reward},
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
    exceed, coverage = 0, []
    for _ in range(reps):
        cal = np.zeros(pool_s.size, bool)
        cal[rng.choice(pool_s.size, n_cal, replace=False)] = True
        cert = certify_arrays(pool_s[cal], pool_f[cal], risk, alpha)
        held = unflagged_risk(pool_s[~cal], pool_f[~cal], cert["threshold"])
        exceed += held["risk"] is not None and held["risk"] > risk
        coverage.append(held["coverage"])
    assert exceed <= stats.binom.ppf(0.999, reps, alpha)
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
    signals = trajectory_signals(run, "turn_nll")
    assert len(signals) == 300 and signals["domain"].eq("bookshop").all()
    np.testing.assert_allclose(signals["max_signal"], maxima)
    assert (signals["failure"].to_numpy(bool) == failures).all()
    cert = certify_threshold(run, "turn_nll", risk=0.2, alpha=0.1)
    assert cert["feasible"] and cert == {**certify_arrays(maxima, failures, 0.2, 0.1), **{
        k: cert[k] for k in ("signal", "calibration", "n_no_reward", "n_never_signalled")}}
    json.dumps(cert)
    accepted = maxima <= cert["threshold"]
    assert cert["n_accepted"] == accepted.sum()
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
    calibrator = pickle.loads(pickle.dumps(fit_signal_calibrator(run, "turn_nll")))
    grid = np.linspace(-1.5, 1.5, 7)
    reference = LogisticRegression(C=1e6).fit(s[:, None], f).predict_proba(grid[:, None])[:, 1]
    np.testing.assert_allclose(calibrator(grid), reference, atol=0.01)  # Platt = logistic fit
    np.testing.assert_allclose(calibrator(grid), sigmoid(A * grid + B), atol=0.12)  # near the truth
    assert isinstance(calibrator(0.3), float) and np.isnan(calibrator(None))


def test_bad_runs_are_refused_naming_the_file(tmp_path):
    rng = np.random.default_rng(0)
    run, _, _ = observe_run_from(tmp_path / "cal", rng, 10)
    with pytest.raises(InputError, match=r"results.json.*recorded the signal 'turn_nll', not 'entropy'"):
        certify_threshold(run, "entropy", risk=0.2, alpha=0.1)
    plain = simulation(1, 0, 0, [], 1.0)
    del plain["intervention"]
    bare = write_run(tmp_path / "plain", [plain], policy={"name": "observe"})
    with pytest.raises(InputError, match=r"results.json.*no intervention block"):
        trajectory_signals(bare, "turn_nll")


def test_a_run_without_any_defined_signal_is_never_flagged(tmp_path):
    sims = [simulation(i, 0, i, [decision(0, None)], 0.0) for i in range(3)]
    sims += [simulation(10 + i, 0, i, [decision(0, 0.5)], 1.0) for i in range(3)]
    run = write_run(tmp_path / "run", sims)
    held = heldout_risk(run, 1.0)
    assert held["n_unflagged"] == 6 and held["n_unflagged_failures"] == 3
    assert certify_threshold(run, "turn_nll", 0.2, 0.1)["n_never_signalled"] == 3
