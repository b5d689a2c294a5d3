"""Label-shift adaptation (pure statistics): EM recovers a run's shifted failure rate from scores drawn through a
fitted calibration, its fixed point is the likelihood's maximum (scipy as the reference), the interval covers the
truth, the adapted probabilities are the Bayes-shifted ones, and the leave-one-run-out judgement reports what it
says. Task identity: a hash of the instructions, the id only as a fallback."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import minimize_scalar

from agentuq_nb.evaluation.calibration import fit_calibrator
from agentuq_nb.evaluation.label_shift import (
    adapt,
    adaptation_summary,
    bbse_failure_rate,
    center_probabilities,
    em_failure_rate,
    leave_one_run_out_adaptation,
    rate_log_likelihood,
    reliability_bands,
    shift_probabilities,
)
from agentuq_nb.records.task_identity import content_key, id_key, resolve_id_keys

from conftest import TAU2_DIR, require_tau2


def scores(rng, n: int, rate: float) -> tuple[np.ndarray, np.ndarray]:
    """Labels at failure rate ``rate`` and a score whose class-conditional law does not depend on it (label shift):
    failures N(1, 1), successes N(-1, 1)."""
    y = rng.random(n) < rate
    return rng.normal(np.where(y, 1.0, -1.0), 1.0), y


@pytest.fixture(scope="module")
def source():
    """A Platt calibration fitted on a source population whose failure rate is 0.3."""
    rng = np.random.default_rng(0)
    s, y = scores(rng, 4000, 0.3)
    calibrator = fit_calibrator(s, y, "platt")
    return calibrator, float(calibrator.predict(s).mean())


@pytest.mark.parametrize("rate", [0.08, 0.3, 0.7])
def test_em_recovers_a_shifted_failure_rate_from_the_calibrated_scores(source, rate):
    calibrator, source_rate = source
    rng = np.random.default_rng(int(rate * 100))
    s, y = scores(rng, 3000, rate)
    p = calibrator.predict(s)
    found = em_failure_rate(p, source_rate)
    assert found.converged and found.rate == pytest.approx(y.mean(), abs=0.03)
    # the unadapted mean stays pulled towards the source's 0.3 where the shift is large
    if abs(rate - 0.3) > 0.2:
        assert abs(found.rate - y.mean()) < abs(p.mean() - y.mean()) / 2
    # EM's fixed point is the maximum of the mixture likelihood (scipy's bounded search as the reference)
    best = minimize_scalar(lambda r: -rate_log_likelihood(r, p, source_rate), bounds=(1e-6, 1 - 1e-6),
                           method="bounded", options={"xatol": 1e-9})
    assert found.rate == pytest.approx(best.x, abs=1e-4)


def test_the_adapted_probabilities_are_bayes_shifted_and_better_than_unadapted(source):
    calibrator, source_rate = source
    rng = np.random.default_rng(5)
    s, y = scores(rng, 2000, 0.75)
    p = calibrator.predict(s)
    estimate, adapted = adapt(p, source_rate, n_boot=300, seed=1)
    odds = adapted / (1 - adapted) / (p / (1 - p))
    assert np.allclose(odds, (estimate.rate / (1 - estimate.rate)) / (source_rate / (1 - source_rate)))
    assert estimate.lo < y.mean() < estimate.hi and estimate.resampled == "trajectories"
    assert np.mean((adapted - y) ** 2) < np.mean((p - y) ** 2)
    assert np.allclose(shift_probabilities(p, source_rate, source_rate), p)  # no shift: the same probabilities
    # soft BBSE on the same data lands near the truth too
    ss, sy = scores(np.random.default_rng(9), 4000, 0.3)
    assert bbse_failure_rate(p, calibrator.predict(ss), sy) == pytest.approx(y.mean(), abs=0.05)


def test_the_interval_resamples_tasks_when_they_repeat_and_nan_rows_stay_nan(source):
    calibrator, source_rate = source
    rng = np.random.default_rng(3)
    s, _ = scores(rng, 120, 0.5)
    p = calibrator.predict(s)
    p[:3] = np.nan
    groups = np.repeat(np.arange(40), 3)
    estimate, adapted = adapt(p, source_rate, n_boot=200, seed=0, groups=groups)
    assert estimate.resampled == "tasks" and estimate.n == 117 and np.isnan(adapted[:3]).all()
    assert np.isfinite(adapted[3:]).all() and estimate.lo <= estimate.rate <= estimate.hi
    again, _ = adapt(p, source_rate, n_boot=200, seed=0, groups=groups)
    assert again == estimate  # seeded


def test_leave_one_run_out_adaptation_judges_each_run_against_its_base_rate():
    rng = np.random.default_rng(11)
    parts = [(f"run{i}", *scores(rng, 150, rate)) for i, rate in enumerate((0.1, 0.3, 0.5, 0.8))]
    runs = np.concatenate([[name] * len(s) for name, s, _ in parts])
    log_odds = np.concatenate([s for _, s, _ in parts])
    y = np.concatenate([y for _, _, y in parts])
    per_run, rows = leave_one_run_out_adaptation(log_odds, y, runs, n_boot=100, seed=0)
    assert list(per_run["run"]) == ["run0", "run1", "run2", "run3"] and len(rows) == 600
    t = per_run.set_index("run")
    for name, _, yy in parts:
        assert t.loc[name, "true_rate"] == pytest.approx(yy.mean())
        assert t.loc[name, "brier_base_rate"] == pytest.approx(yy.mean() * (1 - yy.mean()))
    # the extreme runs: the adapted rate is far closer than the calibrated mean, and beats the base rate's Brier
    for name in ("run0", "run3"):
        assert t.loc[name, "rate_error"] < t.loc[name, "rate_error_unadapted"]
        assert t.loc[name, "brier_adapted"] <= t.loc[name, "brier_base_rate"]
    summary = adaptation_summary(per_run)
    assert summary["n_runs"] == 4 and summary["runs_brier_adapted_le_base_rate"] == 4
    assert summary["rate_mae"] < summary["rate_mae_unadapted"]


def test_reliability_bands_hold_each_bins_rate_and_count():
    rng = np.random.default_rng(2)
    p = rng.random(500)
    y = rng.random(500) < p
    bins = reliability_bands(p, y, n_bins=5, n_boot=400)
    assert bins["count"].sum() == 500 and len(bins) == 5
    assert (bins["failure_rate_lo"] <= bins["failure_rate"]).all() and (bins["failure_rate"] <= bins["failure_rate_hi"]).all()
    assert (bins["failure_rate_hi"] - bins["failure_rate_lo"] > 0.05).all()
    assert reliability_bands(p, y, n_bins=5, n_boot=0)["failure_rate_lo"].isna().all()  # no resample, no band


def test_a_task_is_its_content_not_its_id():
    tau2 = {"id": "5", "user_scenario": {"persona": None, "instructions": {"reason_for_call": "Cancel EHGLP3."}},
            "evaluation_criteria": {"actions": [{"action_id": "a", "name": "cancel", "arguments": {"id": "EHGLP3"}}]}}
    tau_bench = {"user_id": "mia_li_3668", "instruction": "Cancel EHGLP3.", "actions": []}
    assert content_key(tau2) != content_key(tau_bench)
    # another id, another action id, a criterion that does not change what is expected: the same task
    same = {**tau2, "id": "other", "evaluation_criteria": {
        "actions": [{"action_id": "b", "name": "cancel", "arguments": {"id": "EHGLP3"}}], "reward_basis": ["DB"]}}
    assert content_key(tau2) == content_key(same)
    # the same instructions from another starting state, or expecting another action: another task
    assert content_key(tau2) != content_key({**tau2, "initial_state": {"initialization_actions": [{"name": "x"}]}})
    assert content_key(tau2) != content_key({**tau2, "evaluation_criteria": {
        "actions": [{"action_id": "a", "name": "cancel", "arguments": {"id": "OTHER"}}]}})
    assert content_key({"id": "5"}) is None and id_key(5) == "id:5"
    # a run without content is matched by (domain, id) where that names one content, else keeps its id key
    keys = resolve_id_keys(["airline", "airline", "retail"], ["5", "6", "5"], ["id:5", "id:6", "id:5"],
                           reference=[("airline", "5", content_key(tau2)), ("airline", "6", "content:a"),
                                      ("airline", "6", "content:b")])
    assert keys == [content_key(tau2), "id:6", "id:5"]
    assert pd.Series(keys).str.startswith("content:").sum() == 1


def test_map_em_keeps_uninformative_scores_at_the_training_rate_and_maximizes_the_posterior():
    """Probabilities that barely spread, their mean a little above the training rate: plain EM runs to the boundary
    (the likelihood is nearly flat), MAP-EM with κ pseudo-trajectories stays near the training rate, at the maximum of
    likelihood + Beta log-prior (scipy as the reference)."""
    rng = np.random.default_rng(4)
    p = 0.22 + 0.004 * rng.random(30)
    assert em_failure_rate(p, 0.2167).rate > 0.95
    found = em_failure_rate(p, 0.2167, strength=30)
    assert abs(found.rate - 0.2167) < 0.1

    def posterior(r):
        return rate_log_likelihood(r, p, 0.2167) + 30 * (0.2167 * np.log(r) + (1 - 0.2167) * np.log(1 - r))

    best = minimize_scalar(lambda r: -posterior(r), bounds=(1e-6, 1 - 1e-6), method="bounded", options={"xatol": 1e-9})
    assert found.rate == pytest.approx(best.x, abs=1e-4)
    none = em_failure_rate(p, 0.2167, strength=float("inf"))
    assert none.rate == pytest.approx(0.2167)
    estimate, adapted = adapt(p, 0.2167, n_boot=50, strength=float("inf"))
    assert estimate.resampled == "none" and np.isnan(estimate.lo)
    # not adapted: the probabilities are centred on the training rate, their order and log-odds spacing kept
    assert adapted.mean() == pytest.approx(0.2167, abs=1e-9) and adapted.mean() < p.mean()
    assert np.allclose(np.diff(np.log(adapted / (1 - adapted))), np.diff(np.log(p / (1 - p))))
    # with the training runs' counts, the interval is the run's share of failures under the spread of their rates
    estimate, _ = adapt(p, 0.2167, n_boot=50, strength=float("inf"), run_rates=([2, 10, 25, 40], [50, 50, 50, 50]))
    assert estimate.resampled == "runs" and estimate.lo < 0.2167 < estimate.hi


def test_the_prior_strength_is_chosen_by_held_out_runs():
    from agentuq_nb.evaluation.label_shift import choose_strength, held_out_calibration

    rng = np.random.default_rng(8)
    # label shift holds: the scores say each run's rate, so a weak prior (adapting) wins
    parts = [scores(rng, 200, rate) for rate in (0.1, 0.3, 0.6, 0.85)]
    runs = np.concatenate([[f"r{i}"] * 200 for i in range(4)])
    s, y = np.concatenate([a for a, _ in parts]), np.concatenate([b for _, b in parts])
    strength, table = choose_strength(held_out_calibration(s, y, runs))
    assert strength <= 10 and len(table) == 8
    # the scores carry nothing of the label and each run's scores are offset at random: adapting does not help
    offsets = rng.normal(0, 1.5, 4)
    noise = rng.normal(0, 0.3, 800) + np.repeat(offsets, 200)
    strength, _ = choose_strength(held_out_calibration(noise, y, runs))
    assert strength >= 100
    # nothing left to choose on (the other run of two is the held-out one): no adaptation
    assert choose_strength(held_out_calibration(s[:400], y[:400], runs[:400], leave_out=("r1",)))[0] == float("inf")


def test_telecom_tasks_that_share_instructions_are_told_apart_by_their_starting_state():
    """τ²-bench's telecom tasks share a user's instructions (40 tasks, 13 instructions): each is its own task."""
    import json

    path = require_tau2()[0].parents[1] / "real_runs" / "ft-gpt-4.1_telecom_1trial.json"
    if not path.is_file():
        pytest.skip(f"{path} not found (the shared real runs live in ../shared/data/real_runs)")
    tasks = json.loads(path.read_text())["tasks"]
    instructions = {json.dumps(t["user_scenario"], sort_keys=True) for t in tasks}
    assert len(tasks) == 40 and len(instructions) < 20
    assert len({content_key(t) for t in tasks}) == len(tasks)


def test_centring_moves_every_log_odds_by_one_shift_to_the_rate_and_is_bayes_at_the_em_fixed_point(source):
    calibrator, source_rate = source
    rng = np.random.default_rng(21)
    s, _ = scores(rng, 500, 0.6)
    p = calibrator.predict(s)
    p[3] = np.nan
    centred, shift = center_probabilities(p, 0.6)
    assert np.nanmean(centred) == pytest.approx(0.6, abs=1e-9) and np.isnan(centred[3])
    ok = np.isfinite(p)
    z_before, z_after = np.log(p[ok] / (1 - p[ok])), np.log(centred[ok] / (1 - centred[ok]))
    assert np.allclose(z_after - z_before, shift) and shift > 0  # the run fails more than the source: moved up
    # at EM's fixed point the centring is Bayes' move from the source rate to EM's rate
    found = em_failure_rate(p, source_rate)
    assert np.allclose(center_probabilities(p, found.rate)[0][ok], shift_probabilities(p[ok], source_rate, found.rate),
                       atol=1e-5)
    assert center_probabilities(p, float("nan"))[1] == 0.0


def test_on_the_shared_runs_the_run_rates_interval_and_a_pooled_score_are_judged_by_held_out_runs():
    """The ten shared runs' failure counts (2 %-82 % of a run fails): left out one at a time, the interval of the
    run's share of failures under the spread of the other runs' rates (no agent told) holds it on most of them; and a logistic model fitted pooled across the other
    runs on length does give a rate per run (its mean probability) - the benchmark judges it against the training rate."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.evaluation.label_shift import leave_one_run_out_pooled_rates, run_failure_counts
    from agentuq_nb.evaluation.run_rate import agent_rate

    require_tau2()
    shared = TAU2_DIR.parent
    files = sorted((shared / "tau2").glob("*.json")) + sorted((shared / "real_runs").glob("*.json"))
    features = corpus_features(resolve_sources(files), ["length"], "none")
    y = features.index["reward"].to_numpy(dtype=float) < 1
    runs = features.index["run"].to_numpy(dtype=object)
    assert len(set(runs)) == 10
    covered = 0
    for r in dict.fromkeys(runs):
        k, n = run_failure_counts(y, runs, leave_out=(r,))
        est = agent_rate(k, n, [None] * len(n), None, n_new=int((runs == r).sum()))
        lo, hi = est.lo, est.hi
        covered += lo <= y[runs == r].mean() <= hi
    assert covered >= 7
    table = leave_one_run_out_pooled_rates(features.dense, y, runs)
    assert len(table) == 10 and table["pooled_mean"].between(0, 1).all()
    truth = {r: y[runs == r].mean() for r in dict.fromkeys(runs)}
    assert np.allclose(table["true_rate"], [truth[r] for r in table["run"]])


def test_where_the_scores_carry_no_rate_each_held_out_run_is_centred_on_the_training_rate_with_the_runs_spread():
    """Scores that rank within each run but whose level is offset at random per run (as a model fitted within runs
    gives), not adapted (κ = ∞ the only strength offered): each run's probabilities are centred on the training rate
    (their mean is it, their order kept), which beats leaving them where the offset put them, and the interval is the
    other runs' spread."""
    rng = np.random.default_rng(17)
    rates = (0.05, 0.2, 0.35, 0.5, 0.8)
    parts = []
    for i, rate in enumerate(rates):
        y = rng.random(120) < rate
        parts.append((f"r{i}", rng.normal(np.where(y, 0.8, -0.8), 1.0) + rng.normal(0, 2.0), y))
    runs = np.concatenate([[name] * len(s) for name, s, _ in parts])
    log_odds = np.concatenate([s for _, s, _ in parts])
    y = np.concatenate([yy for _, _, yy in parts])
    per_run, rows = leave_one_run_out_adaptation(log_odds, y, runs, n_boot=50, seed=0, strengths=(float("inf"),))
    t = per_run.set_index("run")
    assert (t["prior_strength"] == float("inf")).all() and (t["interval"] == "runs").all()
    means = rows.groupby("run")["adapted"].mean()
    for name in t.index:
        assert means[name] == pytest.approx(t.loc[name, "training_rate"], abs=1e-9)
        assert t.loc[name, "estimated_rate_lo"] < t.loc[name, "estimated_rate"] < t.loc[name, "estimated_rate_hi"]
        mine = rows[rows["run"] == name]
        a, c = mine["adapted"].to_numpy(), mine["calibrated"].to_numpy()
        moved = np.log(a / (1 - a)) - np.log(c / (1 - c))
        assert np.ptp(moved) < 1e-6  # one log-odds shift: the run's order and spacing kept
    summary = adaptation_summary(per_run)
    assert summary["mean_brier_adapted"] < summary["mean_brier_calibrated"]
    assert summary["mean_brier_true_rate_centred"] < summary["mean_brier_base_rate"]  # the ranking adds to the rate


def test_with_the_runs_agents_a_held_out_runs_rate_is_moved_by_its_agents_other_runs():
    """Runs of two agents (three runs each, failing at about 0.15 and 0.6) whose scores are offset at random per run
    (they carry no run's rate; κ = ∞ the only strength offered): with each run's agent, a held-out run's rate is the
    training rate moved towards its agent's other runs, which misses the true rates by less and lowers the mean Brier
    against centring on the training rate alone; a run of an agent no other run had keeps the training rate."""
    rng = np.random.default_rng(23)
    rates = {"r0": 0.15, "r1": 0.12, "r2": 0.18, "r3": 0.6, "r4": 0.55, "r5": 0.65, "r6": 0.35}
    agents = {"r0": "a", "r1": "a", "r2": "a", "r3": "b", "r4": "b", "r5": "b", "r6": None}
    parts = []
    for name, rate in rates.items():
        y = rng.random(150) < rate
        parts.append((name, rng.normal(np.where(y, 0.8, -0.8), 1.0) + rng.normal(0, 2.0), y))
    runs = np.concatenate([[name] * len(s) for name, s, _ in parts])
    log_odds = np.concatenate([s for _, s, _ in parts])
    y = np.concatenate([yy for _, _, yy in parts])
    plain, _ = leave_one_run_out_adaptation(log_odds, y, runs, n_boot=50, seed=0, strengths=(float("inf"),))
    moved, rows = leave_one_run_out_adaptation(log_odds, y, runs, n_boot=50, seed=0, strengths=(float("inf"),),
                                               agents=agents)
    t = moved.set_index("run")
    assert (t.loc[["r0", "r1", "r2"], "estimated_rate"] < t.loc[["r0", "r1", "r2"], "training_rate"]).all()
    assert (t.loc[["r3", "r4", "r5"], "estimated_rate"] > t.loc[["r3", "r4", "r5"], "training_rate"]).all()
    assert t.loc["r6", "agent_runs"] == 0 and t.loc["r6", "estimated_rate"] == pytest.approx(t.loc["r6", "training_rate"])
    assert (t.loc[["r0", "r3"], "agent_runs"] == 2).all()
    assert moved["rate_error"].mean() < plain["rate_error"].mean() - 0.1
    means = rows.groupby("run")["adapted"].mean()
    for name in t.index:  # centred on the moved rate; its Brier beside the one centred on the training rate alone
        assert means[name] == pytest.approx(t.loc[name, "estimated_rate"], abs=1e-9)
        assert t.loc[name, "brier_training_rate_centred"] == pytest.approx(
            plain.set_index("run").loc[name, "brier_adapted"])
        assert t.loc[name, "brier_change"] == pytest.approx(t.loc[name, "brier_adapted"] - t.loc[name,
                                                            "brier_training_rate_centred"])
        assert t.loc[name, "brier_change_lo"] <= t.loc[name, "brier_change"] <= t.loc[name, "brier_change_hi"]
    summary = adaptation_summary(moved)
    assert summary["mean_brier_adapted"] < summary["mean_brier_training_rate_centred"]
    assert summary["runs_agent_informed"] == 6 and summary["runs_brier_better_beyond_noise"] >= 1


def test_a_strong_prior_strength_does_not_shrink_the_interval_below_the_runs_spread():
    """MAP-EM with κ = 1000 pseudo-trajectories sits at the training rate, and a bootstrap over the run's own rows alone
    gives it an interval of nearly nothing (on the shared runs: [0.241, 0.244] around qwen's true 0.82). With the
    training runs' counts the interval also spans how far a run's rate sits from theirs."""
    rng = np.random.default_rng(5)
    p = 0.22 + 0.004 * rng.random(50)
    alone, _ = adapt(p, 0.2167, n_boot=100, strength=1000)
    assert alone.resampled == "trajectories" and alone.hi - alone.lo < 0.01
    runs = ([1, 10, 25, 41], [50, 50, 50, 50])  # rates 0.02-0.82, as the shared runs'
    widened, _ = adapt(p, 0.2167, n_boot=100, strength=1000, run_rates=runs)
    assert widened.rate == alone.rate and widened.resampled == "trajectories and runs"
    assert widened.lo <= alone.lo and widened.hi >= alone.hi and widened.hi - widened.lo > 0.3
    plain, _ = adapt(p, 0.2167, n_boot=100, strength=0.0, run_rates=runs)  # plain EM has no prior to widen
    assert plain.resampled == "trajectories"
