"""A run's failure rate from the training runs' rates and its agent model (pure statistics): the fitted variances are
the likelihood's maximum, a run of an unknown agent gets the training rate, runs of one agent move it by as much as
their number and agreement allow, the interval of the run's share of failures covers new runs, and on the ten
shared runs, left out one at a time, it misses the runs' rates by less than the training rate does."""
from __future__ import annotations

import numpy as np
import pytest

from agentuq_nb.evaluation.run_rate import agent_rate, fit_variances

from conftest import TAU2_DIR, require_tau2


def simulated_runs(rng, n_agents: int, runs_per_agent: int, n: int, tau_agent: float, tau_run: float, mu: float = -0.8):
    effects = rng.normal(0, tau_agent, n_agents)
    agents = np.repeat([f"a{i}" for i in range(n_agents)], runs_per_agent)
    logit = mu + np.repeat(effects, runs_per_agent) + rng.normal(0, tau_run, len(agents))
    k = rng.binomial(n, 1 / (1 + np.exp(-logit)))
    return k.astype(float), np.full(len(agents), float(n)), list(agents)


def test_the_variances_are_the_likelihoods_maximum_and_recover_the_simulated_ones():
    from scipy.stats import multivariate_normal

    rng = np.random.default_rng(4)
    k, n, agents = simulated_runs(rng, 30, 3, 200, tau_agent=1.0, tau_run=0.3)
    mu = float(np.log(k.sum() / (n.sum() - k.sum())))
    tau_a, tau_r = fit_variances(k, n, agents, mu)
    assert np.sqrt(tau_a) == pytest.approx(1.0, abs=0.3) and np.sqrt(tau_r) == pytest.approx(0.3, abs=0.15)
    y = np.log((k + 0.5) / (n - k + 0.5)) - mu
    v = 1 / (k + 0.5) + 1 / (n - k + 0.5)
    same = np.equal.outer(np.array(agents), np.array(agents)).astype(float)

    def loglik(a, r):
        return multivariate_normal(np.zeros(len(y)), np.diag(v + r) + a * same).logpdf(y)

    best = loglik(tau_a, tau_r)
    for a, r in [(tau_a * 1.3, tau_r), (tau_a * 0.7, tau_r), (tau_a, tau_r * 2 + 0.01), (tau_a, tau_r * 0.5)]:
        assert best >= loglik(a, r) - 1e-6


def test_an_unknown_agent_gets_the_training_rate_and_an_agents_runs_move_it_by_their_weight():
    k = np.array([5, 10, 30, 40, 8, 45], dtype=float)
    n = np.full(6, 50.0)
    agents = ["x", "x", "y", "y", None, "z"]
    for agent in (None, "never seen", "z" + "z"):
        est = agent_rate(k, n, agents, agent, n_new=50)
        assert est.rate == pytest.approx(k.sum() / n.sum()) and est.agent_runs == 0 and est.agent_shift == 0
        assert 0 <= est.lo < est.rate < est.hi <= 1
    # the calibration's own training rate is the rate moved, when given
    assert agent_rate(k, n, agents, None, training_rate=0.3).rate == pytest.approx(0.3)
    low, high = agent_rate(k, n, agents, "x", n_new=50), agent_rate(k, n, agents, "y", n_new=50)
    pooled = k.sum() / n.sum()
    assert low.agent_runs == 2 and high.agent_runs == 2
    assert 0.15 < low.rate < pooled < high.rate < 0.85  # towards each agent's 0.15 and 0.70, not all the way
    assert low.hi - low.lo < agent_rate(k, n, agents, None, n_new=50).hi - agent_rate(k, n, agents, None, n_new=50).lo
    # a unknown-agent run (None) is no agent's: two such runs do not pool
    assert agent_rate(k, n, [None] * 6, None).agent_runs == 0
    # one run of the agent moves the rate less than three runs that agree
    one = agent_rate([5, 30, 40, 8, 45], np.full(5, 50.0), ["x", "y", "y", None, "z"], "x")
    three = agent_rate([5, 5, 5, 30, 40, 8, 45], np.full(7, 50.0), ["x", "x", "x", "y", "y", None, "z"], "x")
    assert three.rate < one.rate
    # fewer than two training runs: the training rate, no interval
    alone = agent_rate([5], [50], ["x"], "x", n_new=40)
    assert alone.rate == pytest.approx(0.1) and np.isnan(alone.lo)


def test_the_interval_of_a_new_runs_share_of_failures_covers_about_95_percent():
    rng = np.random.default_rng(11)
    covered = total = 0
    for _ in range(12):
        k, n, agents = simulated_runs(rng, 6, 3, 40, tau_agent=1.0, tau_run=0.3)
        for i in (0, 7, 14):  # one run of an agent left out, its two other runs in training
            keep = np.arange(len(k)) != i
            est = agent_rate(k[keep], n[keep], [a for j, a in enumerate(agents) if keep[j]], agents[i], n_new=40,
                             seed=i, draws=4000)
            covered += est.lo <= k[i] / 40 <= est.hi
            total += 1
    assert 0.8 <= covered / total <= 1.0


def test_on_the_shared_runs_the_agent_model_tells_a_held_out_runs_rate_better_than_the_training_rate():
    """The ten shared runs (five agent models; the fine-tuned gpt-4.1 in four runs, gpt-4.1 and claude-opus-4-6 in
    two), each left out in turn: the training runs of its agent move its rate (the fine-tuned gpt-4.1's down, gpt-4.1's
    up), the rest keep the training rate, and the mean absolute error falls below the training rate's."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    require_tau2()
    shared = TAU2_DIR.parent
    files = sorted((shared / "tau2").glob("*.json")) + sorted((shared / "real_runs").glob("*.json"))
    sources = resolve_sources(files)
    features = corpus_features(sources, ["length"], "none")
    failed = features.index["reward"].to_numpy(dtype=float) < 1
    runs = features.index["run"].to_numpy(dtype=object)
    names = [s.name for s in sources]
    k = np.array([failed[runs == r].sum() for r in names], dtype=float)
    n = np.array([(runs == r).sum() for r in names], dtype=float)
    agents = [s.models.get("assistant") for s in sources]
    assert len(names) == 10 and sum(a is not None and a.startswith("ft:gpt-4.1") for a in agents) == 4
    errors, baseline = [], []
    for i, name in enumerate(names):
        keep = np.arange(10) != i
        est = agent_rate(k[keep], n[keep], [a for j, a in enumerate(agents) if keep[j]], agents[i], n_new=int(n[i]))
        training = k[keep].sum() / n[keep].sum()
        errors.append(abs(est.rate - k[i] / n[i]))
        baseline.append(abs(training - k[i] / n[i]))
        if agents[i].startswith("ft:gpt-4.1"):
            assert est.agent_runs == 3 and est.rate < training
        elif agents[i] == "gpt-4.1":
            assert est.agent_runs == 1 and est.rate > training
        elif name.startswith(("qwen", "claude-sonnet")):
            assert est.agent_runs == 0 and est.rate == pytest.approx(training)
    assert np.mean(errors) < np.mean(baseline) - 0.02
