"""Figures that describe a run before any estimator: how its simulations ended, its token NLL by role, and the
agent's NLL turn by turn."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from agentuq_nb.figures.style import PALETTE, counted, legend_below, use_style
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

ROLE_COLORS = {"assistant": PALETTE["success"], "user": PALETTE["secondary"], "tool": PALETTE["neutral"]}
ROLE_LABELS = {"assistant": "agent", "user": "user simulator", "tool": "tool"}


def _task_order(task_ids) -> list:
    return sorted(pd.unique(task_ids), key=lambda s: (0, int(s), "") if str(s).lstrip("-").isdigit() else (1, 0, str(s)))


def simulation_outcomes_figure(outcomes: pd.DataFrame, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD):
    """Left: per task, how many of its simulations (trials) succeeded and failed (stacked bars; tick labels thinned
    to stay legible). Right: how the simulations ended (termination reason). ``outcomes``: one row per simulation
    with ``task_id``, ``reward`` and ``termination``."""
    use_style()
    tasks = _task_order(outcomes["task_id"].astype(str))
    ok = outcomes["reward"].astype(float) >= failure_threshold
    per_task = (pd.DataFrame({"task_id": outcomes["task_id"].astype(str), "success": ok, "failure": ~ok})
                .groupby("task_id")[["success", "failure"]].sum().reindex(tasks))
    trials = per_task.sum(axis=1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(8.0, 3.6), gridspec_kw={"width_ratios": [3, 1.3]},
                                   layout="constrained")
    x = np.arange(len(tasks))
    ax1.bar(x, per_task["success"], color=PALETTE["success"], label="succeeded")
    ax1.bar(x, per_task["failure"], bottom=per_task["success"], color=PALETTE["failure"], label="failed")
    step = max(1, int(np.ceil(len(tasks) / 30)))  # at most ~30 tick labels
    ax1.set_xticks(x[::step], [tasks[i] for i in range(0, len(tasks), step)], rotation=90, fontsize=7)
    ax1.set(xlabel="task", ylabel="simulations (trials)", xlim=(-0.7, len(tasks) - 0.3))
    ax1.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax1.grid(axis="x", alpha=0)
    t_min, t_max = (int(trials.min()), int(trials.max())) if len(trials) else (0, 0)
    each = f"{t_min} trial{'s' if t_max != 1 else ''} each" if t_min == t_max else f"{t_min}–{t_max} trials each"
    ax1.set_title(f"Outcome per task: {counted(len(outcomes), 'simulation')} of {counted(len(tasks), 'task')} "
                  f"({each}), {int(ok.sum())} succeeded", fontsize=9)
    ends = outcomes["termination"].astype(str).value_counts().sort_values()
    ax2.barh(np.arange(len(ends)), ends.to_numpy(), color=PALETTE["neutral"])
    ax2.set_yticks(np.arange(len(ends)), list(ends.index), fontsize=7)
    ax2.set(xlabel="simulations")
    ax2.set_title("How they ended", fontsize=9)
    ax2.grid(axis="y", alpha=0)
    legend_below(fig, ax=ax1, ncol=2)
    return fig


def token_nll_by_role_figure(tokens: pd.DataFrame, bins: int = 60):
    """Density of token NLL (nats, log scale) per role of the run's own tokens (scorer ``self``); the legend gives
    each role's token count."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.6, 3.8), layout="constrained")
    own = tokens[tokens["scorer"] == "self"] if "scorer" in tokens else tokens
    for role, group in own.groupby("role"):
        nll = -group["chosen_logprob"].dropna().to_numpy(dtype=float)
        if len(nll):
            ax.hist(nll, bins=bins, histtype="step", lw=1.5, density=True, color=ROLE_COLORS.get(role),
                    label=f"{ROLE_LABELS.get(role, role)} ({len(nll):,} tokens)")
    ax.set(xlabel="token NLL (nats)", ylabel="density (log scale)", yscale="log")
    ax.set_title("Token NLL by role (generation log-probs)", fontsize=9)
    legend_below(fig, ax=ax, ncol=2)
    return fig


def agent_turn_nll_figure(turns: pd.DataFrame, rewards: pd.DataFrame, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD):
    """The agent's mean token NLL turn by turn, one line per trajectory (its own turns, scorer ``self``), coloured by
    outcome. ``turns``: the turn summary; ``rewards``: keys + ``reward`` per trajectory."""
    use_style()
    agent = turns[(turns["role"] == "assistant") & (turns["scorer"] == "self")]
    agent = agent.merge(rewards[[*TRAJECTORY_KEYS, "reward"]], on=TRAJECTORY_KEYS, how="left")
    fig, ax = plt.subplots(figsize=(5.0, 3.9), layout="constrained")
    counts = {"success": 0, "failure": 0}
    for _, group in agent.sort_values("turn_idx").groupby(TRAJECTORY_KEYS, dropna=False):
        outcome = "failure" if float(group["reward"].iloc[0]) < failure_threshold else "success"
        counts[outcome] += 1
        ax.plot(group["turn_idx"], group["avg_token_nll"], marker=".", lw=1, alpha=0.5, color=PALETTE[outcome])
    for outcome, n in counts.items():
        ax.plot([], [], color=PALETTE[outcome], lw=1.5, label=f"{outcome} ({counted(n, 'trajectory', 'trajectories')})")
    ax.set(xlabel="turn index (message position in the conversation)", ylabel="agent turn: mean token NLL (nats)")
    ax.set_title("The agent's uncertainty turn by turn\none line per trajectory with an agent turn", fontsize=9)
    legend_below(fig, ax=ax, ncol=2)
    return fig
