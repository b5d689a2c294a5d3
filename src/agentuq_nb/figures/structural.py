"""Figures of the structural/conceptual probe: per-token sparklines and the two-axis picture."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from agentuq_nb.figures.style import PALETTE, legend_below, use_style


def probe_sparklines_figure(result):
    """Per choice: normalized top-k entropy and partial-response distance along the tokens."""
    use_style()
    n = len(result.choices)
    fig, axes = plt.subplots(n, 1, figsize=(6.5, 1.0 * n + 1.2), sharex=True, squeeze=False, layout="constrained")
    for ax, choice in zip(axes[:, 0], result.choices):
        x = np.arange(len(choice.token_entropy))
        ax.plot(x, choice.token_entropy, color=PALETTE["failure"], lw=1.2, label="normalized entropy")
        ax.plot(x, choice.token_distance, color=PALETTE["success"], lw=1.2, label="partial distance")
        ax.set_ylim(0, 1.05)
        ax.set_yticks([])
        ax.grid(False)
        text = choice.text.replace("\n", " ")
        ax.set_title(text if len(text) <= 90 else text[:89] + "…", fontsize=7, loc="left")
    legend_below(fig, ax=axes[0, 0], ncol=2)
    axes[-1, 0].set_xlabel("token")
    fig.suptitle(f"{result.prompt!r}: structural {result.structural:.2f}, conceptual {result.conceptual:.2f} "
                 f"({n} sampled responses)", fontsize=9)
    return fig


def two_axis_figure(results):
    """Each prompt as a point: structural (x) vs conceptual (y) uncertainty."""
    use_style()
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    for r in results:
        ax.scatter(r.structural, r.conceptual, s=40, color=PALETTE["accent"], zorder=3)
        ax.annotate(r.prompt if len(r.prompt) < 40 else r.prompt[:37] + "…", (r.structural, r.conceptual),
                    textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set(xlabel="structural uncertainty (form)", ylabel="conceptual uncertainty (meaning)",
           title="Structural vs conceptual uncertainty", xlim=(0, 1), ylim=(0, 1))
    return fig
