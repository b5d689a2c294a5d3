"""One page per run, and one per comparison of runs: standalone HTML that opens offline.

``analyze`` writes ``RUN_DIR/report.html`` (:func:`run_report`), ``compare-runs`` writes ``OUT/report.html``
(:func:`runs_report`). A page holds everything inline - its style, a few lines of script that sort a table by a
clicked column, and its figures as PNG data URIs - so it can be moved or mailed and needs no network (no CDN, no
font, nothing fetched).

What enters a page from a results file or a run folder (task ids, model and domain names, estimator names of
plugins, a detector's ``predictions.csv``) is text, never markup: every such value passes the project's secret
masking (:func:`agentuq_nb.common.redaction.redact`, as executed notebooks do) and is then HTML-escaped
(:func:`text`).

Hooks the other pages wire: a trajectory's link into the explorer is ``<explorer page>#trajectory=<key>``
(:func:`explorer_href`), the key being the explorer's own trajectory key, ``run|domain|task_id|trial|seed`` with
run 0 for the page of one run (:func:`trajectory_key`; an empty seed for runs without one; the page opens it from
``location.hash``), the page the explorer writes into the
run folder (:func:`agentuq_nb.figures.explorer.export_html` to ``RUN_DIR/explorer.html``) (the run folder's ``explorer`` artefact); a detector's ``predictions.csv`` in the run folder (its
``predictions`` artefact) is shown as it is (:func:`predictions_section`, its first :data:`MAX_PREDICTION_ROWS`
rows). The step that writes a page passes their paths (the run folder's layout is ``RunDir``'s).

The tables are made by :func:`estimator_view` and :func:`leaderboard_view`, which the command line prints too, so
the console and the page say the same.
"""
from __future__ import annotations

import base64
import html
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from agentuq_nb.common.redaction import redact
from agentuq_nb.figures.explorer import trajectory_key
from agentuq_nb.io.errors import remedy

#: rows of a detector's ``predictions.csv`` a page shows (the file holds them all)
MAX_PREDICTION_ROWS = 2000
#: how a row tuned on the labels it is evaluated on is marked in every table
IN_SAMPLE_MARK = "in-sample ✱"


# --------------------------------------------------------------------------- text and links
def text(value) -> str:
    """A value from a results file or a run folder as page text: secrets masked, then HTML-escaped."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return html.escape(redact(str(value)), quote=True)


def explorer_href(key: str, explorer: str) -> str:
    """The link that opens ``key``'s trajectory in the explorer page ``explorer`` (relative to the page); a key
    whose task id holds something shaped like a secret is masked here too, as the page's text is."""
    return f"{quote(explorer)}#trajectory={quote(redact(key), safe='')}"


def png(path: str | os.PathLike, alt: str, wide: bool = False) -> str:
    """An ``<img>`` holding the PNG at ``path`` inline (a data URI): the page keeps it when moved. ``wide``: as wide
    as the page (a heatmap of many runs), else at most a column's width."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    cls = ' class="wide"' if wide else ""
    return f'<img{cls} src="data:image/png;base64,{data}" alt="{text(alt)}">'


# --------------------------------------------------------------------------- numbers
def number(x, digits: int = 3) -> str:
    """A float with ``digits`` decimals, "—" when missing or not finite."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "—"
    return f"{x:.{digits}f}" if math.isfinite(x) else "—"


def interval(value, lo, hi, digits: int = 3, signed: bool = False) -> str:
    """``value [lo, hi]`` (``+``/``-`` signs with ``signed``); "—" when the value is missing."""
    if not _finite(value):
        return "—"
    fmt = f"{{:+.{digits}f}}" if signed else f"{{:.{digits}f}}"
    inside = f" [{fmt.format(float(lo))}, {fmt.format(float(hi))}]" if _finite(lo) and _finite(hi) else ""
    return fmt.format(float(value)) + inside


def _integral(column: pd.Series) -> bool:
    """Whether a numeric column holds counts: every finite value a whole number, and not a probability."""
    v = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size) and bool((v == np.round(v)).all()) and not str(column.name).startswith("P(")


def _whole(x) -> str:
    return str(int(float(x))) if _finite(x) else "—"


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _true(value) -> bool:
    return str(value) == "True"


# --------------------------------------------------------------------------- the estimator table
def _protocols(table: pd.DataFrame) -> list[str]:
    """Each row's fitting protocol as shown: empty for an estimator that saw no label, :data:`IN_SAMPLE_MARK` for one
    tuned in-sample."""
    protocols = table.get("protocol", pd.Series([None] * len(table), index=table.index))
    in_sample = table.get("in_sample", pd.Series([None] * len(table), index=table.index))
    return [IN_SAMPLE_MARK if _true(s) else "" if p is None or pd.isna(p) else str(p)
            for p, s in zip(protocols, in_sample)]


def undefined_reason(table: pd.DataFrame) -> str | None:
    """Why no estimator of ``table`` has an AUROC (every scored trajectory has one outcome, or none has a label),
    in a sentence; None when some AUROC is defined."""
    if "auroc" in table and np.isfinite(pd.to_numeric(table["auroc"], errors="coerce")).any():
        return None
    n = int(pd.to_numeric(table.get("n", pd.Series(dtype=float)), errors="coerce").max()) if len(table) else 0
    if n == 0:
        return "no trajectory has a reward (an unlabelled run): failure prediction (AUROC and the rest) is undefined"
    failures = int(pd.to_numeric(table["n_failures"], errors="coerce").max())
    kind = "failed" if failures == n else "succeeded"
    return (f"all {n} scored trajectories {kind}: AUROC and every other ranking or calibration metric is undefined "
            "(one outcome only)")


def estimator_view(table: pd.DataFrame) -> pd.DataFrame:
    """The estimator table as the console and the report show it, one string per cell, in the table's order:
    estimator, family, protocol (of an estimator fitted to labels; in-sample marked), n, failures, AUROC [95% CI], length-controlled AUROC, the paired
    difference from the best length baseline [95% CI], whether it beats length, ECE, Brier, and - where the run
    has a token reference - the paired p-value against it."""
    base = table["length_baseline"].dropna().iloc[0] if "length_baseline" in table and \
        table["length_baseline"].notna().any() else None
    out = pd.DataFrame({
        "estimator": table["estimator"].astype(str),
        "family": table["family"].astype(str),
        "protocol": _protocols(table),
        "n": table["n"].map(lambda v: str(int(v)) if _finite(v) else "—"),
        "failures": table["n_failures"].map(lambda v: str(int(v)) if _finite(v) else "—"),
        "AUROC [95% CI]": [interval(a, lo, hi) for a, lo, hi in zip(table["auroc"], table["auroc_lo"], table["auroc_hi"])],
        "length-controlled": table["auroc_stratified"].map(number),
    })
    if base is not None:
        out[f"vs {base} [95% CI]"] = [
            interval(d, lo, hi, signed=True) for d, lo, hi in
            zip(table["diff_vs_length"], table["diff_vs_length_lo"], table["diff_vs_length_hi"])]
        out["beats length"] = ["yes" if _true(b) else "—" if fam == "baseline" or not _finite(d) else "no"
                               for b, fam, d in zip(table["beats_length_baseline"], table["family"],
                                                    table["diff_vs_length"])]
    out["ECE"] = table["ece"].map(number)
    out["Brier"] = table["brier"].map(number)
    if "reference" in table and table["reference"].notna().any():
        out[f"p vs {table['reference'].dropna().iloc[0]}"] = table["p_value_vs_reference"].map(number)
    return out


def estimator_notes(table: pd.DataFrame, sort_column: str = "auroc_stratified") -> list[str]:
    """What a reader needs to read :func:`estimator_view`: the sort column, what "vs length" compares, the
    in-sample mark, the length control the message count cannot have, the reference."""
    notes = [f"rows sorted by {sort_column} (the length-controlled AUROC: failures compared only with successes of "
             "similar message count), highest first"]
    if "length_baseline" in table and table["length_baseline"].notna().any():
        base = table["length_baseline"].dropna().iloc[0]
        value = float(table["length_baseline_auroc"].dropna().iloc[0])
        notes.append(f"vs {base}: AUROC minus that of {base} ({value:.3f}; the length baseline with the highest AUROC) "
                     "on the trajectories both score, with a paired 95% CI resampling tasks; beats length = that "
                     "interval lies above 0 (the forest fills the dot)")
    if "in_sample" in table and table["in_sample"].map(_true).any():
        names = ", ".join(table.loc[table["in_sample"].map(_true), "estimator"].astype(str))
        notes.append(f"{IN_SAMPLE_MARK}: {names} tuned on the very labels it is evaluated on - optimistic by "
                     "construction, never counted as beating length")
    if "undefined" in table and table["undefined"].astype(str).str.contains("auroc_stratified").any():
        notes.append("num_messages has no length-controlled AUROC: its strata hold it fixed (≈ 0.5 by construction)")
    if "reference" in table and table["reference"].notna().any():
        notes.append(f"p vs {table['reference'].dropna().iloc[0]}: paired bootstrap p-value of the AUROC difference "
                     "from that token estimator")
    return notes


# --------------------------------------------------------------------------- the leaderboard across runs
def leaderboard_view(leaderboard: pd.DataFrame, q: float) -> pd.DataFrame:
    """``compare-runs``' leaderboard as the report shows it: rank (candidates only), estimator, family, protocol,
    pooled n / failures, pooled AUROC and length-controlled AUROC with their CIs, the paired difference from the
    best length baseline's length-controlled AUROC [95% CI], q (two significant digits) and the verdict."""
    from agentuq_nb.evaluation.pooled_auroc import POOLED
    from agentuq_nb.figures.run_leaderboard import q_text

    t = leaderboard
    return pd.DataFrame({
        "rank": t["rank"].map(lambda v: "" if pd.isna(v) else str(int(v))),
        "estimator": t["estimator"].astype(str),
        "family": t["family"].astype(str),
        "protocol": _protocols(t),
        "n (failures)": [f"{int(n)} ({int(f)})" if _finite(n) else "—"
                         for n, f in zip(t[f"n[{POOLED}]"], t[f"n_failures[{POOLED}]"])],
        "pooled AUROC [95% CI]": [interval(a, lo, hi) for a, lo, hi in
                                  zip(t[f"auroc[{POOLED}]"], t[f"auroc_lo[{POOLED}]"], t[f"auroc_hi[{POOLED}]"])],
        "length-controlled [95% CI]": [interval(a, lo, hi) for a, lo, hi in
                                       zip(t[f"auroc_lc[{POOLED}]"], t[f"auroc_lc_lo[{POOLED}]"],
                                           t[f"auroc_lc_hi[{POOLED}]"])],
        "vs length, length-controlled [95% CI]": [
            interval(d, lo, hi, signed=True) for d, lo, hi in
            zip(t["diff_lc_vs_length"], t["diff_lc_vs_length_lo"], t["diff_lc_vs_length_hi"])],
        f"q (BH ≤ {q:g})": t["q_value"].map(lambda v: q_text(float(v)) if _finite(v) else "—"),
        "verdict": t["verdict"].astype(str),
    })


# --------------------------------------------------------------------------- HTML
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;background:#fff}
main{max-width:1180px;margin:0 auto;padding:18px 22px 60px}
h1{font-size:21px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#555;margin:0 0 10px}.note{color:#555;font-size:13px;margin:4px 0}
.warn{background:#fff6e0;border-left:4px solid #e69f00;padding:6px 10px;margin:10px 0}
.counts{display:flex;gap:14px;flex-wrap:wrap;margin:10px 0}
.count{border:1px solid #ddd;border-radius:6px;padding:6px 12px}.count b{font-size:19px;display:block}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f5f5f5;position:sticky;top:0;cursor:pointer;user-select:none}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
tr.in-sample td{color:#8a6d00;background:#fffbea}tr.baseline td{color:#555;font-style:italic}
tr.failed td:first-child{border-left:3px solid #d55e00}tr.succeeded td:first-child{border-left:3px solid #0072b2}
.scroll{max-height:560px;overflow:auto;border:1px solid #eee}
img{max-width:min(100%,720px);height:auto;border:1px solid #eee;margin:6px 0}img.wide{max-width:100%}
code{background:#f3f3f3;padding:1px 4px;border-radius:3px}a{color:#0064a8}
"""
#: sorts a table by the clicked column (numbers by value, "—" last); the only script of a page
SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    var down = th.getAttribute("aria-sort") !== "descending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", down ? "descending" : "ascending");
    var key = function (row) {
      var t = row.cells[col].textContent.trim(), v = parseFloat(t.replace("−", "-"));
      return isNaN(v) ? t : v;
    };
    Array.from(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b), xs = typeof x === "string", ys = typeof y === "string";
      if (xs !== ys) { return xs ? 1 : -1; }
      var c = x < y ? -1 : x > y ? 1 : 0;
      return down ? -c : c;
    }).forEach(function (row) { body.appendChild(row); });
  });
});
"""


def html_table(view: pd.DataFrame, row_classes: Sequence[str] | None = None, links: Sequence[str | None] | None = None,
               link_text: str = "explore ▸", scroll: bool = False) -> str:
    """A sortable table of ``view``'s cells (each passed through :func:`text`), a class per row, and a last column
    of links (``links``: one relative URL per row, or None)."""
    head = "".join(f"<th>{text(c)}</th>" for c in view.columns) + ("<th></th>" if links is not None else "")
    rows = []
    for i, values in enumerate(view.itertuples(index=False, name=None)):
        cls = f' class="{text(row_classes[i])}"' if row_classes is not None and row_classes[i] else ""
        cells = "".join(f"<td>{text(v)}</td>" for v in values)
        if links is not None:
            cells += f'<td><a href="{text(links[i])}">{text(link_text)}</a></td>' if links[i] else "<td></td>"
        rows.append(f"<tr{cls}>{cells}</tr>")
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="scroll">{table}</div>' if scroll else table


def page(title: str, subtitle: str, sections: Iterable[tuple[str, str]]) -> str:
    """A whole standalone page: ``title``, ``subtitle`` (both text, escaped here) and ``(heading, html)``
    sections (their HTML made by this module's functions)."""
    body = "".join(f"<section><h2>{text(h)}</h2>{content}</section>" if h else content for h, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{text(title)}</title><style>{STYLE}</style></head><body><main>"
            f"<h1>{text(title)}</h1><p class=\"sub\">{text(subtitle)}</p>{body}</main>"
            f"<script>{SORT_SCRIPT}</script></body></html>\n")


def paragraph(sentence: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{text(sentence)}</p>'


def counts_html(items: Sequence[tuple[str, object]]) -> str:
    """Big numbers with their labels (the outcome counts)."""
    return '<div class="counts">' + "".join(
        f'<div class="count"><b>{text(v)}</b>{text(k)}</div>' for k, v in items) + "</div>"


def predictions_section(path: str | os.PathLike) -> str | None:
    """A detector's ``predictions.csv`` at ``path`` as a table (its first :data:`MAX_PREDICTION_ROWS` rows, every
    value escaped), or None when there is none. A file that is not a readable CSV is said, not raised."""
    from agentuq_nb.io.errors import InputError
    from agentuq_nb.io.files import check_regular

    path = Path(path)
    if not os.path.lexists(path):
        return None
    try:
        check_regular(path, "a detector's predictions")
        frame = pd.read_csv(path, nrows=MAX_PREDICTION_ROWS, dtype=str, keep_default_na=False)
    except (InputError, OSError, ValueError, pd.errors.ParserError) as err:
        return paragraph(f"{path.name} is there but could not be read: {err}", "warn")
    more = f" (the first {MAX_PREDICTION_ROWS}; the file holds more)" if len(frame) == MAX_PREDICTION_ROWS else ""
    machine = [c for c in frame.columns if c in ("explanation", "contributions", "log_odds")
               or c.startswith("feature_")]  # the JSON and the feature names: in the file, not on the page
    shown = frame.drop(columns=machine)
    reasons = ("; reason_k in words (an embedding block named by the message that moved it most) and points_k in "
               "percentage points of the probability, which sum with base_probability to it"
               if "points_1" in frame.columns else "")
    return (paragraph(f"{path.name}: a detector's failure probability per trajectory{reasons}{more}.")
            + html_table(shown, scroll=True))


def run_report(title: str, subtitle: str, counts: Sequence[tuple[str, object]], warning: str | None,
               notes: Sequence[str], table: pd.DataFrame, figures: Sequence[tuple[str, str | os.PathLike]],
               trajectories: pd.DataFrame, trajectory_note: str, explorer: str | os.PathLike,
               predictions: str | os.PathLike | None = None, trials: Sequence[str] = ()) -> str:
    """The page of one run (see the module docstring). ``counts``: the outcome counts; ``warning``: what limits the
    whole page, said once at its top (an undefined AUROC); ``notes``: what holds for the whole run; ``table``: the
    estimator table;
    ``figures``: ``(caption, PNG path)``; ``trajectories``: one row per trajectory with ``domain, task_id, trial,
    seed`` and ``outcome`` then the columns to show (failure probabilities, signals), in the order to show;
    ``explorer``: the run's explorer page (linked beside the report, made or not); ``predictions``: a detector's
    predictions.csv (shown where it exists); ``trials``: the multi-trial lines, if tasks repeat."""
    sections = [("", counts_html(counts) + (paragraph(warning, "warn") if warning else "")
                 + "".join(paragraph(n) for n in notes))]
    if trials:
        sections.append(("Trials per task", "".join(paragraph(line) for line in trials)))
    if len(table) and undefined_reason(table) is None:
        classes = ["in-sample" if _true(s) else "baseline" if f == "baseline" else ""
                   for s, f in zip(table.get("in_sample", [None] * len(table)), table["family"])]
        sections.append(("Estimators", "".join(paragraph(n) for n in estimator_notes(table))
                         + html_table(estimator_view(table), classes, scroll=True)
                         + paragraph("All columns (AURC, PRR, Spearman, the residual length control …): "
                                     "estimator_table.csv beside this page.")))
    for caption, path in figures:
        sections.append((caption, png(path, caption)))
    explorer = Path(explorer)
    keys = trajectories[["domain", "task_id", "trial", "seed"]].itertuples(index=False, name=None)
    links = [explorer_href(trajectory_key(*k), explorer.name) for k in keys]
    explore = (f"Each row opens the trajectory in {explorer.name} beside this page"
               + ("." if explorer.is_file() else remedy(
                   "explorer_page", " once it is made: agentuq_nb.figures.explorer.export_html(explorer_data({run}), "
                   "'{page}').", run=explorer.parent, page=explorer)))
    shown = trajectories.drop(columns=["domain", "seed"])
    classes = ["failed" if o == "failed" else "succeeded" if o == "succeeded" else "" for o in shown["outcome"]]
    shown = shown.assign(**{c: shown[c].map(_whole if _integral(shown[c]) else number) for c in shown.columns
                            if c not in ("task_id", "trial", "outcome") and pd.api.types.is_numeric_dtype(shown[c])})
    sections.append(("Trajectories", paragraph(trajectory_note) + paragraph(explore)
                     + html_table(shown, classes, links, scroll=True)))
    shown_predictions = predictions_section(predictions) if predictions is not None else None
    if shown_predictions is not None:
        sections.append(("Detector predictions", shown_predictions))
    return page(title, subtitle, sections)


def runs_report(title: str, subtitle: str, runs: pd.DataFrame, notes: Sequence[str], leaderboard: pd.DataFrame,
                q: float, figures: Sequence[tuple[str, str | os.PathLike]], out: str | os.PathLike) -> str:
    """The page of a comparison of runs: the runs (model and domain, n, failures, links to each run's report and
    explorer - ``runs``' ``report`` and ``explorer`` paths - relative to ``out``), the notes, the figure, the
    leaderboard (:func:`leaderboard_view`)."""
    rows = []
    for r in runs.itertuples(index=False):
        links = [f'<a href="{text(quote(os.path.relpath(page, Path(out).resolve())))}">{kind}</a>'
                 for kind, page in (("report", Path(r.report)), ("explorer", Path(r.explorer))) if page.is_file()]
        rows.append(f"<tr><td>{text(getattr(r, 'title', r.run))}</td><td>{text(r.run)}</td><td>{int(r.n_trajectories)}"
                    f"</td><td>{int(r.n_failures)}</td><td>{int(r.n_tasks)}</td><td>{' '.join(x for x in links if x)}"
                    "</td></tr>")
    table = ("<table><thead><tr><th>agent · domain</th><th>run</th><th>trajectories</th><th>failures</th><th>tasks</th>"
             f"<th></th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    sections = [("Runs", table + "".join(paragraph(n) for n in notes))]
    for caption, path in figures:
        sections.append((caption, png(path, caption, wide=True)))
    classes = ["in-sample" if _true(s) else "baseline" if f == "baseline" else ""
               for s, f in zip(leaderboard.get("in_sample", [None] * len(leaderboard)), leaderboard["family"])]
    sections.append(("Leaderboard", paragraph(
        "Candidates ranked by the pooled length-controlled AUROC (failures compared with successes of the same run and "
        "similar message count only), then, unranked, the in-sample ones and the length baselines (the comparators). vs length: paired difference from "
        "the best length baseline's length-controlled AUROC, tasks resampled within runs; q: Benjamini-Hochberg "
        f"adjusted, to two significant digits. {IN_SAMPLE_MARK}: tuned on the labels it is evaluated on, never "
        "tested.") + html_table(leaderboard_view(leaderboard, q), classes, scroll=True)))
    return page(title, subtitle, sections)
