"""Forest plot of the estimator table: the best few estimators of each family beside the length baselines, AUROC
with its bootstrap CI and n per row, sized for a paper's column (3.4 in).

One quantity throughout, the raw AUROC: a row's dot and line are its AUROC and 95% CI, the dotted line is the best
length baseline's AUROC, and a dot is filled only where the paired 95% interval of the AUROC difference from that
baseline (same trajectories, same task resamples) lies above 0 (the table's ``beats_length_baseline``). An
estimator tuned on the labels it is evaluated on (``in_sample``) is a hollow diamond marked ``[in-sample]``: never
drawn as a winner."""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from agentuq_nb.estimators.base import declared_families, family_of, reference_families
from agentuq_nb.figures.style import PALETTE, legend_below, use_style

#: a label longer than this wraps onto a second line at a separator
LABEL_CHARS = 30
#: figure width in inches: one column of a two-column paper
COLUMN_WIDTH = 3.4
#: aliases named on a row (the rest counted; the CSV's ``same_scores_as`` has them all)
MAX_ALIASES = 3


def family_color(family: str) -> str:
    """How the forest colours ``family`` (its declared ``Family.color``: a role of :data:`PALETTE` or a colour;
    undeclared: the neutral grey)."""
    color = family_of(family).color
    return PALETTE.get(color, color) if color else PALETTE["neutral"]


def family_label(family: str) -> str:
    """How the forest's legend names ``family`` (its declared ``Family.label``, else its name)."""
    return family_of(family).label or family


def forest_family_order() -> list[str]:
    """The families the forest places first, top to bottom (declared ``Family.forest_order``), length baselines
    left out: they are drawn last, as the reference."""
    placed = sorted((f for f in declared_families().values() if f.forest_order is not None),
                    key=lambda f: f.forest_order)
    return [f.name for f in placed if not f.reference]


def alias_groups(table: pd.DataFrame) -> dict[str, list[str]]:
    """{representative: [aliases]} from the table's ``same_scores_as`` column (estimators whose oriented scores are
    identical, e.g. ``.mean``/``.max``/``.first3`` of an action statistic with one decision point per trajectory)."""
    if "same_scores_as" not in table:
        return {}
    same = table.dropna(subset=["same_scores_as"])
    groups: dict[str, list[str]] = {}
    for alias, rep in zip(same["estimator"], same["same_scores_as"]):
        groups.setdefault(str(rep), []).append(str(alias))
    return groups


def short_alias(name: str, representative: str) -> str:
    """An alias as the part that differs from its representative (``.max`` for ``x.max`` beside ``x.mean``)."""
    stem = representative.rsplit(".", 1)[0]
    return name[len(stem):] if "." in representative and name.startswith(stem + ".") else name


def forest_rows(table: pd.DataFrame, metric: str = "auroc", per_family: int = 3,
                families: list[str] | None = None) -> pd.DataFrame:
    """The rows a forest draws: identical-score estimators collapsed into their representative (``aliases``), then
    the best ``per_family`` of each family by ``metric`` and every length baseline, families in
    :func:`forest_family_order` (others after them, baselines last), best first within a family. ``shown_of`` is how
    many estimators of the family had a defined ``metric`` (aliases counted). ``families``: only these (and the
    length baselines, always)."""
    t = table[np.isfinite(pd.to_numeric(table[metric], errors="coerce").to_numpy(dtype=float))].copy()
    t.attrs = {}  # compare_estimators' table carries the combined scores there: not rows of the forest
    if families is not None:
        t = t[t["family"].isin([*families, *reference_families()])]
    defined = t["family"].value_counts()
    groups = alias_groups(t)
    if "same_scores_as" in t:
        t = t[t["same_scores_as"].isna()]
    t["aliases"] = [groups.get(e, []) for e in t["estimator"]]
    order = forest_family_order()
    order += sorted(set(t["family"]) - set(order) - reference_families()) + sorted(reference_families())
    parts = []
    for family in order:
        f = t[t["family"] == family].sort_values(metric, ascending=False, kind="stable")
        if f.empty:
            continue
        kept = f if family in reference_families() else f.head(per_family)
        parts.append(kept.assign(shown_of=int(defined[family]), shown=len(kept) + int(kept["aliases"].map(len).sum())))
    return pd.concat(parts, ignore_index=True) if parts else t.assign(shown_of=0).iloc[:0]


def _wrap(name: str, limit: int = LABEL_CHARS) -> str:
    if len(name) <= limit:
        return name
    for sep in ("@", ".", "_"):
        cut = name.rfind(sep, 0, limit)
        if cut > 0:
            return name[:cut] + "\n" + _wrap(name[cut:], limit)
    return "\n".join(textwrap.wrap(name, limit))


#: how a row tuned on the labels it is evaluated on is marked (label suffix; hollow diamond)
IN_SAMPLE_MARK = "[in-sample]"


def _is_true(value) -> bool:
    """A table cell holding True (a bool, or "True" as a CSV gives it back)."""
    return str(value) == "True"


def _label(row) -> str:
    name = str(row["estimator"]) + (" (inv.)" if bool(row.get("invert", False)) else "")
    label = _wrap(name)
    if _is_true(row.get("in_sample")):
        label += " " + IN_SAMPLE_MARK if len(label.rsplit("\n", 1)[-1]) + len(IN_SAMPLE_MARK) < LABEL_CHARS \
            else "\n" + IN_SAMPLE_MARK
    aliases = [short_alias(a, str(row["estimator"])) for a in row["aliases"]]
    if aliases:
        more = len(aliases) - MAX_ALIASES
        label += "\n" + _wrap("= " + ", ".join(aliases[:MAX_ALIASES]) + (f" +{more} more" if more > 0 else ""))
    return label


def has_forest(table: pd.DataFrame, metric: str = "auroc") -> bool:
    """Whether some estimator of ``table`` has a defined ``metric`` (a run where every trajectory has one outcome,
    or none has a label, has none: no forest)."""
    return metric in table and bool(np.isfinite(pd.to_numeric(table[metric], errors="coerce")).any())


def estimator_forest_figure(table: pd.DataFrame, metric: str = "auroc", per_family: int = 3,
                            mark_length: bool = True, title: str = "Failure prediction by estimator family",
                            width: float = COLUMN_WIDTH, families: list[str] | None = None):
    """A forest of the estimator table (the compare-estimators step's output, ``estimator_table.csv``): the best ``per_family``
    estimators of each family by ``metric`` and every length baseline, coloured by family (legend below), each
    with its 95% bootstrap CI and, on the right, n (trajectories scored) and failures. Estimators whose scores are
    identical are one row naming its aliases. With ``mark_length`` (AUROC only) and a ``beats_length_baseline``
    column, a dot is filled only where the estimator beats the best length baseline (the paired interval of the
    AUROC difference above 0; the module docstring), hollow otherwise; an ``in_sample`` row is a hollow diamond
    marked :data:`IN_SAMPLE_MARK`. The full table stays in ``estimator_table.csv``; the title says how many
    estimators it holds. ``families``: draw only these (and the length baselines). Refuses a table where no
    estimator has a defined ``metric`` (:func:`has_forest`)."""
    if not has_forest(table, metric):
        raise ValueError(f"no estimator has a defined {metric}: every scored trajectory has the same outcome, or "
                         "none has a label (nothing to draw)")
    use_style()
    rows = forest_rows(table, metric, per_family, families)
    labels = [_label(r) for _, r in rows.iterrows()]
    heights = np.array([1.0 + 0.55 * label.count("\n") for label in labels])
    gap = 0.6  # between families
    new_family = rows["family"].ne(rows["family"].shift()).to_numpy()
    y = np.cumsum(heights / 2 + np.r_[0, heights[:-1] / 2] + np.where(new_family, gap, 0))
    total = float(y[-1] + heights[-1] / 2)
    fig, ax = plt.subplots(figsize=(width, 0.17 * total + 2.1), layout="constrained")
    marks = mark_length and metric == "auroc" and "beats_length_baseline" in rows
    baseline = rows["family"].isin(reference_families()).to_numpy()
    in_sample = rows["in_sample"].map(_is_true).to_numpy() if "in_sample" in rows else np.zeros(len(rows), bool)
    filled = baseline | (rows["beats_length_baseline"].map(_is_true).to_numpy() if marks else ~in_sample)
    filled &= ~in_sample
    for yi, (_, r), full, tuned in zip(y, rows.iterrows(), filled, in_sample):
        color = family_color(r["family"])
        lo, hi = r.get(f"{metric}_lo"), r.get(f"{metric}_hi")
        if pd.notna(lo) and pd.notna(hi):
            ax.plot([lo, hi], [yi, yi], color=color, lw=1.4, alpha=1.0 if full else 0.55, solid_capstyle="butt",
                    ls=(0, (2, 1.2)) if tuned else "-")
        marker = "s" if r["family"] in reference_families() else "D" if tuned else "o"
        ax.plot(r[metric], yi, marker=marker, ms=4.0 if tuned else 4.5, color=color, mfc=color if full else "white",
                mew=1.2)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_ylim(total + 0.3, -0.3)
    if metric == "auroc":
        ax.axvline(0.5, ls="--", color=PALETTE["neutral"], lw=0.8)
        ax.set_xlim(0, 1)
        ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0", ".25", ".5", ".75", "1"])
    base = rows[baseline]
    if len(base):
        ax.axvline(base[metric].max(), ls=":", color=PALETTE["neutral"], lw=1)
    ax.tick_params(axis="x", labelsize=7)
    ax.grid(axis="y", alpha=0)
    # n per row on the right, outside the data
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(y, [f"{int(n)} ({int(f)})" if pd.notna(n) and pd.notna(f) else "" for n, f in
                         zip(rows.get("n", [np.nan] * len(rows)), rows.get("n_failures", [np.nan] * len(rows)))],
                     fontsize=6.5)
    right.tick_params(axis="y", length=0, pad=2)
    right.grid(False)
    right.spines["right"].set_visible(False)
    right.set_ylabel("n scored (failures)", fontsize=7)
    ax.set_xlabel(f"{metric.upper()}, 95% bootstrap CI", fontsize=8)
    n_total = int(np.isfinite(pd.to_numeric(table[metric], errors="coerce").to_numpy(dtype=float)).sum())
    ax.set_title(f"{title}\nbest {per_family} per family of {n_total} estimators (all: estimator_table.csv)",
                 fontsize=8)
    handles = [Line2D([], [], ls="", marker="s" if f in reference_families() else "o", ms=4.5, color=family_color(f),
               label=f"{family_label(f)} ({shown} of {n})")
               for f, n, shown in rows.drop_duplicates("family")[["family", "shown_of", "shown"]].itertuples(index=False)]
    if len(base):
        handles.append(Line2D([], [], ls=":", color=PALETTE["neutral"], label="best length baseline's AUROC"))
    if marks:
        handles.append(Line2D([], [], ls="", marker="o", ms=4.5, color=PALETTE["neutral"], label="filled: beats it "
                              "(paired 95% CI of\nthe AUROC difference > 0)"))
        handles.append(Line2D([], [], ls="", marker="o", ms=4.5, color=PALETTE["neutral"], mfc="white",
                              label="hollow: not shown to beat it"))
    if in_sample.any():
        handles.append(Line2D([], [], ls="", marker="D", ms=4.0, color=PALETTE["neutral"], mfc="white",
                              label=f"{IN_SAMPLE_MARK}: tuned on these\nlabels (optimistic)"))
    legend_below(fig, handles=handles, ncol=2, fontsize=6.5, columnspacing=0.8, handletextpad=0.3)
    return fig
