"""A run's failure rate from what is known about it without its labels: the training runs' rates, partially pooled by
agent model (pure statistics).

A detector's scores do not tell a new run's failure rate (:mod:`.label_shift`: EM and BBSE estimate it worse than the
training rate on the shared runs), but the results file names the agent model, and runs of one agent fail at similar
rates (the fine-tuned gpt-4.1: 0.15-0.35 on four runs) while agents differ widely (0.02-0.82). So a run's rate is
estimated by a two-level model on the log-odds scale of the training runs' rates::

    logit(rate_r) = mu + a_agent(r) + e_r,   a ~ N(0, tau_agent^2),   e ~ N(0, tau_run^2)

observed through each run's empirical log-odds with its binomial sampling variance ``1/(k + 1/2) + 1/(n - k + 1/2)``;
``mu`` is the pooled training rate's log-odds (what a run of an unknown agent falls back to), the two variances are
fitted by maximum likelihood (:func:`fit_variances`), and the run's agent effect is its best linear unbiased
prediction from the training runs of the same agent (:func:`agent_rate`): with no such run it is 0 (the training
rate), with several runs that agree it approaches their rate. Written here with ``scipy.optimize`` because
statsmodels' ``MixedLM`` cannot take a known sampling variance per observation (here, per run) and its binomial mixed
GLM is variational; the model is ten lines of linear algebra on a handful of runs.

The interval is for the share of the run's ``n`` trajectories that failed (what a user counts): the log-odds drawn from
the model's predictive normal, the count drawn binomially given each draw, the central 95 %.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

#: draws of the predictive interval (log-odds, then the run's count)
N_DRAWS = 20000


@dataclass(frozen=True)
class RunRatePrior:
    """A run's failure rate from the training runs and its agent model: ``rate`` (the training rate moved by the
    agent's effect on the log-odds scale, ``agent_shift``), its interval ``lo``-``hi`` (NaN without one),
    ``training_rate`` (the rate it falls back to), ``agent`` (the run's agent model, None when its results name none),
    ``agent_runs`` (training runs of the same agent), ``tau_agent`` and ``tau_run`` (the fitted standard deviations of
    the agents' and of one agent's runs' log-odds)."""

    rate: float
    lo: float
    hi: float
    training_rate: float
    agent: Optional[str]
    agent_runs: int
    agent_shift: float
    tau_agent: float
    tau_run: float

    def as_dict(self) -> dict:
        return {"rate": self.rate, "lo": self.lo, "hi": self.hi, "training_rate": self.training_rate,
                "agent": self.agent, "agent_runs": self.agent_runs, "agent_shift": self.agent_shift,
                "tau_agent": self.tau_agent, "tau_run": self.tau_run}


def _logit(p):
    p = np.asarray(p, dtype=float)
    return np.log(p) - np.log1p(-p)


def _labels(agents) -> np.ndarray:
    """Each run's agent as a group label; a run whose agent is unknown is a group of its own."""
    return np.array([f"\0unknown {i}" if not a else str(a) for i, a in enumerate(agents)], dtype=object)


def fit_variances(failures, n, agents, mu: float) -> tuple[float, float]:
    """``(tau_agent^2, tau_run^2)``: the maximum-likelihood variances of the module docstring's model given the
    training runs' ``failures`` of ``n`` and their ``agents`` (None: unknown, a group of its own), ``mu`` known."""
    from scipy.optimize import minimize

    k, m = np.asarray(failures, dtype=float), np.asarray(n, dtype=float)
    y = _logit((k + 0.5) / (m + 1.0)) - mu
    v = 1.0 / (k + 0.5) + 1.0 / (m - k + 0.5)
    labels = _labels(agents)
    same = (labels[:, None] == labels[None, :]).astype(float)

    def nll(theta: np.ndarray) -> float:
        c = np.diag(v + np.exp(theta[1])) + np.exp(theta[0]) * same
        _, logdet = np.linalg.slogdet(c)
        return 0.5 * (logdet + float(y @ np.linalg.solve(c, y)))

    fits = [minimize(nll, np.log([a, r]), method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-8})
            for a, r in ((1.0, 0.1), (0.1, 1.0))]
    best = min(fits, key=lambda f: f.fun)
    return tuple(float(t) for t in np.exp(np.clip(best.x, -20, 5)))


def agent_rate(failures, n, agents, agent: Optional[str], training_rate: Optional[float] = None,
               n_new: Optional[int] = None, ci: float = 0.95, seed=0, draws: int = N_DRAWS) -> RunRatePrior:
    """A run's failure rate (module docstring) from the training runs' ``failures`` of ``n`` and their ``agents``
    (None where a run's results name none), for a run of agent ``agent`` (None: unknown, the training rate); the
    training rate is ``training_rate`` when given (the rate the run's probabilities were calibrated at), else the
    pooled ``sum(failures) / sum(n)``. ``n_new``: the run's trajectories, for the interval of the share of them that
    failed (``draws`` draws; no interval without it or with fewer than two training runs)."""
    k, m = np.asarray(failures, dtype=float), np.asarray(n, dtype=float)
    pooled = float(k.sum() / m.sum()) if len(m) and m.sum() > 0 else float("nan")
    base = pooled if training_rate is None else float(training_rate)
    nan = float("nan")
    if len(k) < 2 or not (0 < pooled < 1) or not (0 < base < 1):
        return RunRatePrior(base, nan, nan, base, agent, 0, 0.0, nan, nan)
    mu = float(_logit(pooled))
    tau_a, tau_r = fit_variances(k, m, agents, mu)
    labels = _labels(agents)
    mine = (labels == agent) if agent else np.zeros(len(k), dtype=bool)
    y = _logit((k + 0.5) / (m + 1.0)) - mu
    v = 1.0 / (k + 0.5) + 1.0 / (m - k + 0.5)
    c_train = np.diag(v + tau_r) + tau_a * (labels[:, None] == labels[None, :])
    c_new = tau_a * mine.astype(float)  # covariance of the new run's log-odds with each training run's
    weights = np.linalg.solve(c_train, c_new)
    shift = float(weights @ y)
    var = max(tau_a + tau_r - float(c_new @ weights), 0.0)
    centre = float(_logit(base)) + shift
    rate = float(1.0 / (1.0 + np.exp(-centre)))
    lo = hi = nan
    if n_new:
        rng = np.random.default_rng(seed)
        p = 1.0 / (1.0 + np.exp(-rng.normal(centre, np.sqrt(var), draws)))
        share = rng.binomial(int(n_new), p) / int(n_new)
        lo, hi = (float(q) for q in np.quantile(share, [(1 - ci) / 2, (1 + ci) / 2]))
    return RunRatePrior(rate, lo, hi, base, agent, int(mine.sum()), shift, float(np.sqrt(tau_a)),
                        float(np.sqrt(tau_r)))
