"""Observation-uncertainty figures: user-message NLL densities, tool-result surprise, AUROC by part."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import gaussian_kde

from agentuq_nb.figures.style import PALETTE, use_style


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
    fig, axes = plt.subplots(1, len(domains), figsize=(4.6 * len(domains), 3.4), squeeze=False)
    for ax, domain in zip(axes[0], domains):
        d = turns[turns["domain"] == domain]
        own = d[(d["role"] == "user") & (d["scorer"] == "self")]["avg_token_nll"]
        agent = d[(d["role"] == "observation_user") & (d["scorer"] == observation_scorer)]["avg_token_nll"]
        _density(ax, own, PALETTE["success"], "user sim. ground truth")
        _density(ax, agent, PALETTE["failure"], f"under the agent's model ({observation_scorer})")
        ax.set(xlabel="mean token NLL of a user message (nats)", ylabel="density", title=f"{domain}: user messages")
        ax.legend(fontsize=7)
    return fig


def tool_surprise_figure(turns: pd.DataFrame, failed_keys: set, observation_scorer: str = "agent_llm"):
    """Tool-result surprise per message, successes vs failures."""
    use_style()
    tools = turns[(turns["role"] == "observation_tool") & (turns["scorer"] == observation_scorer)]
    fig, ax = plt.subplots(figsize=(4.8, 3.4))
    key = list(zip(tools["task_id"], tools["trial"], tools["seed"]))
    failed = pd.Series([k in failed_keys for k in key], index=tools.index)
    for name, mask in (("success", ~failed), ("failure", failed)):
        _density(ax, tools.loc[mask, "avg_token_nll"], PALETTE[name], f"tool results, {name}")
    ax.set(xlabel="mean token NLL of a tool result (nats)", ylabel="density", title="Tool-result surprise")
    ax.legend(fontsize=7)
    return fig


def auroc_by_part_figure(table: pd.DataFrame):
    """AUROC with 95% CI for action, observation and total uncertainty (rows of ``table``)."""
    use_style()
    fig, ax = plt.subplots(figsize=(4.8, 3.2))
    y = np.arange(len(table))
    point = table["auroc"].astype(float).to_numpy()
    lo, hi = table["auroc_lo"].astype(float).to_numpy(), table["auroc_hi"].astype(float).to_numpy()
    ax.errorbar(point, y, xerr=[point - lo, hi - point], fmt="o", color=PALETTE["accent"], capsize=3)
    ax.axvline(0.5, ls="--", color=PALETTE["neutral"], lw=1)
    ax.set_yticks(y, table["part"])
    ax.set(xlabel="AUROC (failure = positive)", xlim=(0, 1), title="Failure prediction by part")
    return fig
