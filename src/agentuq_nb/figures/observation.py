"""Observation-uncertainty figures: user-message NLL densities, tool-result surprise, AUROC by part."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import gaussian_kde

from agentuq_nb.figures.style import PALETTE, legend_below, use_style


def _density(ax, values: pd.Series, colour: str, label: str) -> None:
    values = values.dropna().to_numpy(dtype=float)
    if len(values) >= 3 and np.ptp(values) > 0:
        grid = np.linspace(max(0.0, values.min() - 0.5), values.max() + 0.5, 200)
        ax.plot(grid, gaussian_kde(values)(grid), color=colour, lw=2, label=f"{label} (n={len(values)})")
        ax.fill_between(grid, gaussian_kde(values)(grid), color=colour, alpha=0.15)
    elif len(values):
        ax.hist(values, bins=10, density=True, color=colour, alpha=0.5, label=f"{label} (n={len(values)})")


def user_nll_density_figure(turns: pd.DataFrame, observation_scorer: str = "agent_llm"):
    """Per-message user NLL: the simulator's own generation log-probs vs teacher-forced under the agent's model.

    One panel per domain (the AgentUQ paper's observation figure)."""
    use_style()
    domains = sorted(turns["domain"].dropna().unique())
    fig, axes = plt.subplots(1, max(len(domains), 1), figsize=(4.2 * max(len(domains), 1), 3.8), squeeze=False,
                             layout="constrained")
    for ax, domain in zip(axes[0], domains):
        d = turns[turns["domain"] == domain]
        own = d[(d["role"] == "user") & (d["scorer"] == "self")]["avg_token_nll"]
        agent = d[(d["role"] == "observation_user") & (d["scorer"] == observation_scorer)]["avg_token_nll"]
        _density(ax, own, PALETTE["success"], "user sim. ground truth")
        _density(ax, agent, PALETTE["failure"], f"under the agent's model ({observation_scorer})")
        ax.set(xlabel="mean token NLL of a user message (nats)", ylabel="density")
        ax.set_title(f"{domain}: user messages (n = messages)", fontsize=9)
        ax.legend(loc="upper left", bbox_to_anchor=(0.0, -0.22), fontsize=7, borderaxespad=0)
    return fig


def tool_surprise_figure(turns: pd.DataFrame, failed_keys: set, observation_scorer: str = "agent_llm"):
    """Tool-result surprise per message, successes vs failures."""
    use_style()
    tools = turns[(turns["role"] == "observation_tool") & (turns["scorer"] == observation_scorer)]
    fig, ax = plt.subplots(figsize=(4.4, 3.8), layout="constrained")
    key = list(zip(tools["task_id"], tools["trial"], tools["seed"]))
    failed = pd.Series([k in failed_keys for k in key], index=tools.index)
    for name, mask in (("success", ~failed), ("failure", failed)):
        _density(ax, tools.loc[mask, "avg_token_nll"], PALETTE[name], f"tool results, {name}")
    n_traj = len(set(key))
    ax.set(xlabel="mean token NLL of a tool result (nats)", ylabel="density")
    ax.set_title(f"Tool-result surprise under {observation_scorer}\nn = tool results, from {n_traj} trajectories",
                 fontsize=9)
    legend_below(fig, ax=ax)
    return fig


def auroc_by_part_figure(table: pd.DataFrame):
    """AUROC with 95% CI for action, observation and total uncertainty (rows of ``table``)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.8, 0.45 * len(table) + 1.4), layout="constrained")
    y = np.arange(len(table))[::-1]
    point = table["auroc"].astype(float).to_numpy()
    lo, hi = table["auroc_lo"].astype(float).to_numpy(), table["auroc_hi"].astype(float).to_numpy()
    ax.errorbar(point, y, xerr=[point - lo, hi - point], fmt="o", color=PALETTE["accent"], capsize=3)
    ax.axvline(0.5, ls="--", color=PALETTE["neutral"], lw=1)
    labels = [f"{p} (n = {int(n)})" if "n" in table and pd.notna(n) else str(p)
              for p, n in zip(table["part"], table["n"] if "n" in table else [None] * len(table))]
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_ylim(-0.6, len(table) - 0.4)
    ax.set(xlabel="AUROC (failure = positive), 95% bootstrap CI", xlim=(0, 1))
    ax.set_title("Failure prediction by part of the trajectory\nn = trajectories with that part", fontsize=9)
    return fig
