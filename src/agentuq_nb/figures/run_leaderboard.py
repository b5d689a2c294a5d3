"""The estimator leaderboard across runs (``compare-runs``): a heatmap of estimators x runs."""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.patches import Rectangle

from agentuq_nb.estimators.base import reference_families
from agentuq_nb.evaluation.pooled_auroc import BASELINE_VERDICT, IN_SAMPLE_VERDICT, POOLED, SELF_STRATIFIED_NOTE
from agentuq_nb.figures.style import PALETTE, use_style
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD

#: a diverging map, white at 0.5 (chance), readable in greyscale and with colour-vision deficiency
CMAP = "PuOr_r"
MARKS = {"beats length": "▲", "below length": "▼"}
#: a cell whose length-controlled AUROC rests on fewer (failure, success) pairs of like length than this is hatched
#: and its numbers greyed: with so few pairs one pair moves the AUROC by several hundredths
FEW_PAIRS = 30
#: how a row tuned on the labels it is evaluated on is marked
IN_SAMPLE_MARK = "[in-sample]"


#: a run name longer than this is shortened in the middle (the CSV and the JSON carry it whole)
MAX_RUN_NAME = 34
#: the smallest text of the figure (points): report.html shows the figure at 100 px per inch, where this is
#: 7 / 72 * 100 ≈ 9.7 px (:data:`DISPLAY_DPI`; the PNG is saved at 200 dpi and scrolls at that size)
MIN_FONT_PT = 7.0
#: pixels per inch at which a page shows the figure (half the PNG's 200 dpi): its smallest text then ≥ 9 px
DISPLAY_DPI = 100


def _shorten(name: str) -> str:
    if len(name) <= MAX_RUN_NAME:
        return name
    keep = MAX_RUN_NAME - 1
    return name[:keep - keep // 2] + "…" + name[-(keep // 2):]


def _label(row) -> str:
    name = str(row["estimator"]) + (" (inv.)" if bool(row.get("invert", False)) else "")
    if row["family"] in reference_families():
        return f"{name}  [length baseline]"
    return f"{name}  {IN_SAMPLE_MARK}" if str(row.get("in_sample")) == "True" else name


def column_head(name: str, title) -> str:
    """A run's column head: its name (shortened in the middle past :data:`MAX_RUN_NAME`), and beneath it the agent's
    model and domain as the results record them (``runs["title"]``, the name it may carry in brackets dropped), or
    nothing more when they record neither."""
    title = str(title) if title is not None and not (isinstance(title, float) and np.isnan(title)) else ""
    title = title.removesuffix(f" ({name})")
    return _shorten(name) + (f"\n{_shorten(title)}" if title and title != name else "")


def q_text(q: float) -> str:
    """A q-value to two significant digits, trailing zeros kept (0.1016 → ``0.10``: never read as ≤ 0.1)."""
    return f"{q:#.2g}".rstrip(".")


def run_leaderboard_figure(leaderboard: pd.DataFrame, long: pd.DataFrame, runs: pd.DataFrame, q: float = 0.1,
                           failure_threshold: float = DEFAULT_FAILURE_THRESHOLD):
    """Estimators (rows: the candidates in the leaderboard's order - pooled length-controlled AUROC, highest first -,
    then, below a line, the in-sample ones and the length baselines) x runs and the pooled column. A cell's colour and large number: the length-controlled
    AUROC (centred at 0.5 = chance); below it the raw AUROC in brackets and the number of (failure, success) pairs of
    like length the length-controlled AUROC rests on; a cell resting on fewer than :data:`FEW_PAIRS` is hatched.
    Column heads (:func:`column_head`): the run's name (two runs of one model and domain stay apart), beneath it the
    agent's model and domain (``runs["title"]``), and n = trajectories / failures. No text is smaller than
    :data:`MIN_FONT_PT`: legible where a page shows the figure at :data:`DISPLAY_DPI`. Length baselines are grey italic rows (the message count, which the strata hold fixed, has no
    length-controlled value: "self"); in-sample rows are marked :data:`IN_SAMPLE_MARK` and never tested; the
    right column marks the estimators whose pooled length-controlled AUROC differs from the best length baseline's
    after Benjamini-Hochberg at ``q`` (▲ above, ▼ below) with their q-value to two significant digits.

    ``leaderboard``, ``long``, ``runs``: :class:`~agentuq_nb.steps.compare_runs.RunLeaderboard`'s tables.
    """
    use_style()
    names = list(runs["run"])
    cols = [*names, POOLED]
    rows = leaderboard.reset_index(drop=True)
    lc = long.pivot(index="estimator", columns="run", values="auroc_lc").reindex(index=rows["estimator"], columns=cols)
    raw = long.pivot(index="estimator", columns="run", values="auroc").reindex(index=rows["estimator"], columns=cols)
    pairs = long.pivot(index="estimator", columns="run", values="n_pairs_lc").reindex(index=rows["estimator"],
                                                                                       columns=cols)
    notes = long.pivot(index="estimator", columns="run", values="note").reindex(index=rows["estimator"], columns=cols)
    n_rows, n_runs = len(rows), len(names)
    gap, text_width, cell = 0.35, 1.9, 1.25
    # x edges: one unit per run, a gap, the pooled column, then the column of test marks (text only)
    edges = np.r_[np.arange(n_runs + 1), n_runs + gap, n_runs + gap + 1]
    centres = np.r_[np.arange(n_runs) + 0.5, n_runs + gap + 0.5]
    values = np.column_stack([lc.to_numpy(dtype=float)[:, :n_runs], np.full(n_rows, np.nan),
                              lc.to_numpy(dtype=float)[:, n_runs]])
    finite = values[np.isfinite(values)]
    half = max(0.1, np.ceil(np.abs(finite - 0.5).max() / 0.05) * 0.05) if finite.size else 0.5
    norm = Normalize(0.5 - half, 0.5 + half)

    label_chars = max([len(_label(r)) for _, r in rows.iterrows()] + [10])
    width = 0.075 * label_chars + cell * (n_runs + 1 + gap) + text_width * 0.75 + 1.4
    height = 0.5 * n_rows + 3.6
    fig, ax = plt.subplots(figsize=(width, height))
    mesh = ax.pcolormesh(edges, np.arange(n_rows + 1), np.ma.masked_invalid(values), cmap=CMAP, norm=norm,
                         edgecolors="white", linewidth=0.8)
    few_drawn = False
    for i in range(n_rows):
        for j, col in enumerate(cols):
            v, r, p = lc.iat[i, j], raw.iat[i, j], pairs.iat[i, j]
            x = centres[j]
            left = x - 0.5
            if not np.isfinite(v) and not np.isfinite(r):
                ax.text(x, i + 0.5, "n/a", ha="center", va="center", fontsize=MIN_FONT_PT, color=PALETTE["neutral"])
                continue
            few = np.isfinite(v) and np.isfinite(p) and p < FEW_PAIRS
            if few:  # washed out (its colour still there, faint) and hatched: the numbers stay legible in grey
                ax.add_patch(Rectangle((left, i), 1, 1, facecolor="white", alpha=0.6, lw=0))
                ax.add_patch(Rectangle((left, i), 1, 1, fill=False, hatch="////", edgecolor="#b0b0b0", lw=0))
                few_drawn = True
            dark = np.isfinite(v) and abs(v - 0.5) > 0.62 * half and not few
            color = "white" if dark else PALETTE["neutral"] if few else "black"
            self_stratified = notes.iat[i, j] == SELF_STRATIFIED_NOTE
            big = "self" if self_stratified else "n/a" if not np.isfinite(v) else f"{v:.2f}"
            ax.text(x, i + 0.32, big, ha="center", va="center", fontsize=8, color=color,
                    fontweight="bold" if col == POOLED else "normal",
                    fontstyle="italic" if self_stratified else "normal")
            small = ("" if not np.isfinite(r) else f"({r:.2f})") + (
                "" if self_stratified or not np.isfinite(p) else f" · {int(p)} pairs")
            ax.text(x, i + 0.74, small.strip(), ha="center", va="center", fontsize=MIN_FONT_PT, color=color)
    ranked = rows["rank"].notna().to_numpy() if "rank" in rows else np.ones(n_rows, bool)
    if ranked.any() and not ranked.all():  # the unranked rows (in-sample, length baselines) below the candidates
        ax.axhline(int(ranked.sum()), color=PALETTE["neutral"], lw=1.0)
    # the test against the best length baseline, one line per estimator right of the pooled column
    x_text = n_runs + gap + 1.15
    for i, (_, r) in enumerate(rows.iterrows()):
        verdict = r.get("verdict")
        if verdict == BASELINE_VERDICT:
            is_ref = r["estimator"] == r.get("length_baseline_lc")
            text, color = ("◆ reference" if is_ref else ""), PALETTE["neutral"]
        elif verdict == IN_SAMPLE_VERDICT:
            text, color = "in-sample: not tested", PALETTE["neutral"]
        elif pd.notna(r.get("q_value")):
            mark = MARKS.get(verdict, "")
            text = f"{mark} q={q_text(r['q_value'])}".strip()
            color = (PALETTE["accent"] if verdict == "beats length" else PALETTE["failure"] if verdict == "below length"
                     else PALETTE["neutral"])
        else:
            text, color = "not tested", PALETTE["neutral"]
        ax.text(x_text, i + 0.5, text, ha="left", va="center", fontsize=8, color=color)
    ax.set_xlim(0, n_runs + gap + 1 + text_width)
    ax.set_ylim(n_rows, 0)
    ax.grid(False)
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    ax.set_yticks(np.arange(n_rows) + 0.5, [_label(r) for _, r in rows.iterrows()], fontsize=8)
    for tick, (_, r) in zip(ax.get_yticklabels(), rows.iterrows()):
        if r["family"] in reference_families():
            tick.set_color(PALETTE["neutral"])
            tick.set_fontstyle("italic")
    by_run = runs.set_index("run")
    titles = by_run["title"] if "title" in by_run else pd.Series(names, index=names)
    heads = [column_head(n, titles.get(n)) + f"\nn = {by_run.at[n, 'n_trajectories']} / {by_run.at[n, 'n_failures']} "
             "failed" for n in names]
    total_n, total_f = int(runs["n_trajectories"].sum()), int(runs["n_failures"].sum())
    heads.append(f"pooled ({n_runs} run{'s' if n_runs != 1 else ''})\nn = {total_n} / {total_f} failed")
    ax.xaxis.tick_top()
    ax.set_xticks(centres, heads, fontsize=MIN_FONT_PT, rotation=40, ha="left", rotation_mode="anchor")
    ax.text(x_text, -0.25, f"vs length\n(BH q ≤ {q:g})", ha="left", va="bottom", fontsize=8)
    bar = fig.colorbar(mesh, ax=ax, fraction=0.04, pad=0.02, shrink=min(1.0, 8 / max(n_rows, 1)) if n_rows > 8 else 1.0)
    bar.set_label("length-controlled AUROC (0.5 = chance)", fontsize=8)
    bar.ax.tick_params(labelsize=MIN_FONT_PT)
    reference = rows["length_baseline_lc"].dropna().iloc[0] if rows["length_baseline_lc"].notna().any() else None
    ref_text = (f"▲/▼: pooled length-controlled AUROC above/below the best length baseline's ({reference}), "
                f"paired bootstrap over tasks, Benjamini-Hochberg at q = {q:g}; q to two significant digits."
                if reference is not None else "No length baseline in every run: nothing tested.")
    caption = ("Cell: length-controlled AUROC (failures against successes of like message count only), raw AUROC "
               "in brackets, and the (failure, success) pairs of like length it rests on"
               + (f"; hatched: fewer than {FEW_PAIRS} pairs" if few_drawn else "") + f". Failure = reward < "
               f"{failure_threshold:g}. Pooled: failures compared with successes of the same run (and length "
               f"stratum) only. {ref_text} \"self\": the message count has no length-controlled AUROC, its strata "
               f"hold it fixed. {IN_SAMPLE_MARK}: tuned on the labels it is evaluated on (optimistic), never tested. "
               "Column heads: the run's name, beneath it the agent's model and domain from the results' metadata "
               "(as recorded: a τ-bench run names no model); n = trajectories / failures.")
    ax.set_title(f"Estimators across {n_runs} run{'s' if n_runs != 1 else ''}: failure prediction beyond length",
                 fontsize=10, pad=12)
    fig.tight_layout()
    fig.text(0.01, 0.0, textwrap.fill(caption, int(width * 13)), ha="left", va="top", fontsize=MIN_FONT_PT,
             color=PALETTE["neutral"])
    return fig
