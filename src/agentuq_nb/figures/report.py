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
import json
import math
import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pandas as pd

from agentuq_nb.common.redaction import redact
from agentuq_nb.common.wording import agreeing
from agentuq_nb.estimators.base import reference_families
from agentuq_nb.figures.explorer import trajectory_key
from agentuq_nb.io.errors import remedy

#: rows of a detector's ``predictions.csv`` a page shows (the file holds them all)
MAX_PREDICTION_ROWS = 2000
#: how a row tuned on the labels it is evaluated on is marked in every table
IN_SAMPLE_MARK = "in-sample ✱"
#: how a strongly inverted signal is marked: its AUROC's whole 95% interval lies below 0.5 (it ranks failures below
#: successes; read the other way round it would predict failure)
INVERTED_MARK = "▼ inverted"
#: the dots per inch figures are saved at (figures.style's savefig.dpi): a page shows a figure "at natural size" at
#: the display dpi a figure asks for (:func:`png`'s ``dpi``)
SAVED_DPI = 200


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


def png(path: str | os.PathLike, alt: str, wide: bool = False, dpi: float | None = None) -> str:
    """An ``<img>`` holding the PNG at ``path`` inline (a data URI): the page keeps it when moved. ``wide``: as wide
    as the page, else at most a column's width. ``dpi``: shown at that many CSS pixels per inch of the figure (its
    PNG saved at :data:`SAVED_DPI`), never shrunk, in a box that scrolls sideways when it is wider than the page -
    a heatmap of many runs keeps legible text (``figures.run_leaderboard.DISPLAY_DPI``) instead of shrinking to
    fit."""
    raw = Path(path).read_bytes()
    data = base64.b64encode(raw).decode("ascii")
    if dpi is not None:
        width, height = png_size(raw)
        css = f"width:{width * dpi / SAVED_DPI:.0f}px;height:{height * dpi / SAVED_DPI:.0f}px"
        return (f'<div class="figure-scroll"><img class="natural" style="{css}" data-dpi="{dpi:g}" '
                f'src="data:image/png;base64,{data}" alt="{text(alt)}"></div>')
    cls = ' class="wide"' if wide else ""
    return f'<img{cls} src="data:image/png;base64,{data}" alt="{text(alt)}">'


def png_size(data: bytes) -> tuple[int, int]:
    """A PNG's width and height in pixels, from its IHDR chunk (the first after the signature)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    return struct.unpack(">II", data[16:24])


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
        "AUROC [95% CI]": [interval(a, lo, hi) + (f" {INVERTED_MARK}" if inv else "") for a, lo, hi, inv in
                           zip(table["auroc"], table["auroc_lo"], table["auroc_hi"], inverted(table))],
        "length-controlled": table["auroc_stratified"].map(number),
    })
    if base is not None:
        out[f"vs {base} [95% CI]"] = [
            interval(d, lo, hi, signed=True) for d, lo, hi in
            zip(table["diff_vs_length"], table["diff_vs_length_lo"], table["diff_vs_length_hi"])]
        out[BEATS_COLUMN] = beats_length_cells(table)
    out["ECE"] = table["ece"].map(number)
    out["Brier"] = table["brier"].map(number)
    if "reference" in table and table["reference"].notna().any():
        out[f"p vs {table['reference'].dropna().iloc[0]}"] = table["p_value_vs_reference"].map(number)
    return out


#: the estimator table's column that says whether a row beats the best length baseline, its tests corrected for
#: their number (:func:`beats_length_cells`)
BEATS_COLUMN = "beats length (BH)"
#: what a verdict of :func:`~agentuq_nb.evaluation.estimator_table.length_verdicts` reads as in a cell
VERDICT_CELLS = {"beats length": "yes", "below length": "below", "not distinguishable": "no"}


def inverted(table: pd.DataFrame, lo: str = "auroc_lo", hi: str = "auroc_hi") -> list[bool]:
    """Per row, whether its AUROC's whole 95% interval (columns ``lo``, ``hi``) lies below 0.5: a signal that ranks
    failures below successes (marked :data:`INVERTED_MARK`)."""
    if lo not in table or hi not in table:
        return [False] * len(table)
    up = pd.to_numeric(table[hi], errors="coerce").to_numpy(dtype=float)
    return [bool(np.isfinite(u) and u < 0.5) for u in up]


def beats_length_cells(table: pd.DataFrame, q: float | None = None) -> list[str]:
    """Per row, whether it beats the best length baseline once the run's tests are corrected for their number
    (Benjamini-Hochberg across the run's tested rows, :func:`~agentuq_nb.evaluation.estimator_table.length_verdicts`):
    ``yes``/``below``/``no`` with the q-value, "—" for a row not tested (a length baseline, an in-sample row)."""
    from agentuq_nb.evaluation.defaults import DEFAULT_FDR_Q
    from agentuq_nb.evaluation.estimator_table import length_verdicts
    from agentuq_nb.figures.run_leaderboard import q_text

    verdicts = length_verdicts(table, DEFAULT_FDR_Q if q is None else q)
    return [f"{VERDICT_CELLS[v]} · q {q_text(qv)}" if v in VERDICT_CELLS else "—"
            for v, qv in zip(verdicts["verdict"], verdicts["q_value_vs_length"])]


def length_tests_note(table: pd.DataFrame, q: float | None = None) -> str | None:
    """The sentence that says how :data:`BEATS_COLUMN` was decided on this run: the number of tests, the correction,
    the level and how many rows beat length; None without a length baseline."""
    from agentuq_nb.evaluation.defaults import DEFAULT_FDR_Q
    from agentuq_nb.evaluation.estimator_table import length_verdicts

    if "p_value_vs_length" not in table or not ("length_baseline" in table and table["length_baseline"].notna().any()):
        return None
    q = DEFAULT_FDR_Q if q is None else q
    verdicts = length_verdicts(table, q)["verdict"]
    tested = int(verdicts.notna().sum())
    beats, below = int((verdicts == "beats length").sum()), int((verdicts == "below length").sum())
    return (f"{BEATS_COLUMN}: the paired test of each estimator against the best length baseline (two-sided, tasks "
            f"resampled), Benjamini-Hochberg adjusted across this run's {tested} tests (statsmodels; length baselines "
            f"and in-sample rows are not tested); yes/below = q ≤ {q:g} with the difference above/below 0, no = "
            f"not distinguishable at that level. {agreeing(beats, 'beats', 'beat')} length, "
            f"{agreeing(below, 'falls', 'fall')} below it.")


def estimator_notes(table: pd.DataFrame, sort_column: str = "auroc_stratified") -> list[str]:
    """What a reader needs to read :func:`estimator_view`: the sort column, what "vs length" compares, the
    in-sample mark, the length control the message count cannot have, the reference."""
    notes = [f"rows sorted by {sort_column} (the length-controlled AUROC: failures compared only with successes of "
             "similar message count), highest first"]
    if "length_baseline" in table and table["length_baseline"].notna().any():
        base = table["length_baseline"].dropna().iloc[0]
        value = float(table["length_baseline_auroc"].dropna().iloc[0])
        notes.append(f"vs {base}: AUROC minus that of {base} ({value:.3f}; the length baseline with the highest AUROC) "
                     "on the trajectories both score, with a paired 95% CI resampling tasks (the forest fills the "
                     "dot where that interval lies above 0, uncorrected for the number of tests)")
        tests = length_tests_note(table)
        if tests is not None:
            notes.append(tests)
    if any(inverted(table)):
        names = ", ".join(table.loc[inverted(table), "estimator"].astype(str))
        notes.append(f"{INVERTED_MARK}: {names} - the AUROC's whole 95% interval lies below 0.5: the signal ranks "
                     "failures below successes (a strong signal read the wrong way round, or one that says success)")
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
        "pooled AUROC [95% CI]": [interval(a, lo, hi) + (f" {INVERTED_MARK}" if inv else "") for a, lo, hi, inv in
                                  zip(t[f"auroc[{POOLED}]"], t[f"auroc_lo[{POOLED}]"], t[f"auroc_hi[{POOLED}]"],
                                      inverted(t, f"auroc_lo[{POOLED}]", f"auroc_hi[{POOLED}]"))],
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
main{max-width:1440px;margin:0 auto;padding:18px 22px 60px}
main p,main h1,main h2,.counts{max-width:1180px}
h1{font-size:21px;margin:8px 0 2px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.sub{color:#555;margin:0 0 10px}.note{color:#555;font-size:13px;margin:4px 0}
.warn{background:#fff6e0;border-left:4px solid #e69f00;padding:6px 10px;margin:10px 0}
.counts{display:flex;gap:14px;flex-wrap:wrap;margin:10px 0}
.count{border:1px solid #ddd;border-radius:6px;padding:6px 12px}.count b{font-size:19px;display:block}
table{border-collapse:separate;border-spacing:0;font-size:12.5px;margin:6px 0}
th,td{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;vertical-align:top;white-space:nowrap}
th{background:#f5f5f5;position:sticky;top:0;z-index:2;cursor:pointer;user-select:none;white-space:normal;
max-width:11em;vertical-align:bottom}
th[aria-sort=ascending]::after{content:" ▲"}th[aria-sort=descending]::after{content:" ▼"}
tr{background:#fff}tr.in-sample{background:#fffbea}tr.in-sample td{color:#8a6d00}
tr.baseline td{color:#555;font-style:italic}tr.inverted td{color:#7a2e00}
tr.failed td:first-child{border-left:3px solid #d55e00}tr.succeeded td:first-child{border-left:3px solid #0072b2}
table.pinned td:first-child{position:sticky;left:0;z-index:1;background:inherit;box-shadow:1px 0 0 #ddd}
table.pinned th:first-child{left:0;z-index:3;box-shadow:1px 0 0 #ddd}
td.link,th.link{position:sticky;right:0;background:inherit;box-shadow:-1px 0 0 #ddd}th.link{z-index:3;background:#f5f5f5}
.scroll{max-height:560px;max-width:100%;overflow:auto;border:1px solid #eee}
.figure-scroll{max-width:100%;overflow-x:auto;border:1px solid #eee;margin:6px 0}
img{max-width:min(100%,720px);height:auto;border:1px solid #eee;margin:6px 0}img.wide{max-width:100%}
img.natural{max-width:none;border:0;margin:0;display:block}
.left-out td{white-space:normal;min-width:7em}.provenance td{white-space:normal;word-break:break-all}.provenance td:first-child{white-space:nowrap;word-break:normal}
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


#: a column name longer than this may wrap inside a word (:func:`breakable`)
LONG_NAME = 16


def breakable(name) -> str:
    """A column name as page text (:func:`text`); one longer than :data:`LONG_NAME` may wrap after ``_``, ``.`` and
    ``+`` too: a long estimator name in a header (``P(failure) blackbox_gbm+length``) wraps instead of running over
    the next column."""
    shown = text(name)
    if len(str(name)) <= LONG_NAME:
        return shown
    return shown.replace("_", "_<wbr>").replace(".", ".<wbr>").replace("+", "+<wbr>")


def html_table(view: pd.DataFrame, row_classes: Sequence[str] | None = None, links: Sequence[str | None] | None = None,
               link_text: str = "explore ▸", scroll: bool = True, pin_first: bool = True) -> str:
    """A sortable table of ``view``'s cells (each passed through :func:`text`), a class per row, and a last column
    of links (``links``: one relative URL per row, or None). ``scroll``: in a box that scrolls both ways, so that a
    table wider than the page never runs off its edge; ``pin_first``: its first column (what names a row) stays in
    view while it scrolls sideways, as does the column of links on the right."""
    head = "".join(f"<th>{breakable(c)}</th>" for c in view.columns) + ('<th class="link"></th>' if links is not None
                                                                          else "")
    rows = []
    for i, values in enumerate(view.itertuples(index=False, name=None)):
        cls = f' class="{text(row_classes[i])}"' if row_classes is not None and row_classes[i] else ""
        cells = "".join(f"<td>{text(v)}</td>" for v in values)
        if links is not None:
            cells += (f'<td class="link"><a href="{text(links[i])}">{text(link_text)}</a></td>' if links[i]
                      else '<td class="link"></td>')
        rows.append(f"<tr{cls}>{cells}</tr>")
    cls = "sortable pinned" if pin_first else "sortable"
    table = f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    return f'<div class="scroll">{table}</div>' if scroll else table


def page(title: str, subtitle: str, sections: Iterable[tuple[str, str]], provenance: dict | None = None) -> str:
    """A whole standalone page: ``title``, ``subtitle`` (both text, escaped here) and ``(heading, html)``
    sections (their HTML made by this module's functions); ``provenance`` (:func:`provenance_html`) closes it."""
    sections = list(sections)
    if provenance:
        sections.append(("Provenance", provenance_html(provenance)))
    body = "".join(f"<section><h2>{text(h)}</h2>{content}</section>" if h else content for h, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{text(title)}</title><style>{STYLE}</style></head><body><main>"
            f"<h1>{text(title)}</h1><p class=\"sub\">{text(subtitle)}</p>{body}</main>"
            f"<script>{SORT_SCRIPT}</script></body></html>\n")


def provenance_html(record: dict) -> str:
    """What made the page, as a table and as JSON a script can read (``<script type="application/json"
    id="provenance">``): the package version, the settings and the inputs' content hashes (``record``'s keys, each
    value masked and escaped as every text of the page)."""
    def flat(prefix: str, value) -> list[tuple[str, str]]:
        if isinstance(value, dict):
            return [row for k, v in value.items() for row in flat(f"{prefix}.{k}" if prefix else str(k), v)]
        if isinstance(value, (list, tuple)):
            return [(prefix, ", ".join(map(str, value)))]
        return [(prefix, "" if value is None else str(value))]

    rows = "".join(f"<tr><td>{text(k)}</td><td>{text(v)}</td></tr>" for k, v in flat("", record))
    data = json.dumps(_masked(record), sort_keys=True, default=str).replace("<", "\\u003c")
    return (paragraph("What made this page: the agentuq_nb version, the settings, the inputs' SHA-256 (the same "
                      "record as JSON in this page's script#provenance).")
            + f'<table class="provenance"><tbody>{rows}</tbody></table>'
            + f'<script type="application/json" id="provenance">{data}</script>')


def _masked(value):
    if isinstance(value, dict):
        return {str(k): _masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_masked(v) for v in value]
    return redact(value) if isinstance(value, str) else value


def families_left_out(gaps: Sequence) -> str:
    """The estimator families the run lacks (``steps.family_gaps.FamilyGap``: family, what it needs, the command that
    adds it, what that costs on this run and the model it runs), as a table: what ``analyze`` says on stderr, kept
    on the page."""
    view = pd.DataFrame({"family": [g.family for g in gaps], "needs": [g.needs for g in gaps],
                         "command": [g.command or "" for g in gaps],
                         "cost and model": [g.cost or "" for g in gaps]})
    rows = "".join(f"<tr><td>{text(f)}</td><td>{text(n)}</td><td><code>{text(c)}</code></td><td>{text(m)}</td></tr>"
                   for f, n, c, m in view.itertuples(index=False, name=None))
    return (paragraph("Families not computed for this run: what each needs, the command that adds it, what that "
                      "costs here and the model it runs.")
            + '<div class="scroll"><table class="left-out pinned"><thead><tr><th>family</th><th>needs</th>'
              f'<th>command</th><th>cost and model</th></tr></thead><tbody>{rows}</tbody></table></div>')


def paragraph(sentence: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{text(sentence)}</p>'


def counts_html(items: Sequence[tuple[str, object]]) -> str:
    """Big numbers with their labels (the outcome counts)."""
    return '<div class="counts">' + "".join(
        f'<div class="count"><b>{text(v)}</b>{text(k)}</div>' for k, v in items) + "</div>"


def predictions_section(path: str | os.PathLike, note: str | None = None) -> str | None:
    """A detector's ``predictions.csv`` at ``path`` as a table (its first :data:`MAX_PREDICTION_ROWS` rows, every
    value escaped), or None when there is none; ``note``: said above it as a warning (e.g. that its probabilities
    score worse than the base rate here). A file that is not a readable CSV is said, not raised."""
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
    return (paragraph(f"{path.name}: a detector's failure probability per trajectory, as the file has it{reasons}"
                      f"{more}.") + (paragraph(note, "warn") if note else "") + html_table(shown, scroll=True))


def run_report(title: str, subtitle: str, counts: Sequence[tuple[str, object]], warning: str | None,
               notes: Sequence[str], table: pd.DataFrame, figures: Sequence[tuple[str, str | os.PathLike]],
               trajectories: pd.DataFrame, trajectory_note: str, explorer: str | os.PathLike,
               predictions: str | os.PathLike | None = None, trials: Sequence[str] = (), left_out: Sequence = (),
               provenance: dict | None = None, predictions_note: str | None = None) -> str:
    """The page of one run (see the module docstring). ``counts``: the outcome counts; ``warning``: what limits the
    whole page, said once at its top (an undefined AUROC); ``notes``: what holds for the whole run; ``table``: the
    estimator table;
    ``figures``: ``(caption, PNG path)``; ``trajectories``: one row per trajectory with ``domain, task_id, trial,
    seed`` and ``outcome`` then the columns to show (failure probabilities, signals), in the order to show;
    ``explorer``: the run's explorer page (linked beside the report, made or not); ``predictions``: a detector's
    predictions.csv (shown where it exists), with ``predictions_note`` above it; ``trials``: the multi-trial lines,
    if tasks repeat; ``left_out``: the families the run lacks (:func:`families_left_out`); ``provenance``: what made
    the page (:func:`provenance_html`)."""
    sections = [("", counts_html(counts) + (paragraph(warning, "warn") if warning else "")
                 + "".join(paragraph(n) for n in notes))]
    if trials:
        sections.append(("Trials per task", "".join(paragraph(line) for line in trials)))
    if len(table) and undefined_reason(table) is None:
        classes = ["in-sample" if _true(s) else "baseline" if f in reference_families() else "inverted" if inv else ""
                   for s, f, inv in zip(table.get("in_sample", [None] * len(table)), table["family"], inverted(table))]
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
    shown_predictions = predictions_section(predictions, predictions_note) if predictions is not None else None
    if shown_predictions is not None:
        sections.append(("Detector predictions", shown_predictions))
    if left_out:
        sections.append(("Families left out", families_left_out(left_out)))
    return page(title, subtitle, sections, provenance)


def runs_report(title: str, subtitle: str, runs: pd.DataFrame, notes: Sequence[str], leaderboard: pd.DataFrame,
                q: float, figures: Sequence[tuple[str, str | os.PathLike]], out: str | os.PathLike,
                provenance: dict | None = None) -> str:
    """The page of a comparison of runs: the runs (model and domain, n, failures, links to each run's report and
    explorer - ``runs``' ``report`` and ``explorer`` paths - relative to ``out``), the notes, the figure (at its
    natural size, ``figures.run_leaderboard.DISPLAY_DPI``, scrolling sideways when wider than the page), the
    leaderboard (:func:`leaderboard_view`), what made the page (``provenance``)."""
    from agentuq_nb.evaluation.pooled_auroc import POOLED
    from agentuq_nb.figures.run_leaderboard import DISPLAY_DPI

    rows = []
    for r in runs.itertuples(index=False):
        links = [f'<a href="{text(quote(os.path.relpath(page, Path(out).resolve())))}">{kind}</a>'
                 for kind, page in (("report", Path(r.report)), ("explorer", Path(r.explorer))) if page.is_file()]
        rows.append(f"<tr><td>{text(r.run)}</td><td>{text(getattr(r, 'title', r.run))}</td><td>{int(r.n_trajectories)}"
                    f"</td><td>{int(r.n_failures)}</td><td>{int(r.n_tasks)}</td>"
                    f"<td class=\"link\">{' '.join(x for x in links if x)}</td></tr>")
    table = ('<div class="scroll"><table class="pinned"><thead><tr><th>run</th><th>agent · domain</th>'
             '<th>trajectories</th><th>failures</th><th>tasks</th>'
             f'<th class="link"></th></tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
    sections = [("Runs", table + "".join(paragraph(n) for n in notes))]
    for caption, path in figures:
        sections.append((caption, paragraph("At its natural size: scroll sideways for every run.")
                         + png(path, caption, dpi=DISPLAY_DPI)))
    flipped = inverted(leaderboard, f"auroc_lo[{POOLED}]", f"auroc_hi[{POOLED}]")
    classes = ["in-sample" if _true(s) else "baseline" if f in reference_families() else "inverted" if inv else ""
               for s, f, inv in zip(leaderboard.get("in_sample", [None] * len(leaderboard)), leaderboard["family"],
                                    flipped)]
    sections.append(("Leaderboard", paragraph(
        "Candidates ranked by the pooled length-controlled AUROC (failures compared with successes of the same run and "
        "similar message count only), then, unranked, the in-sample ones and the length baselines (the comparators). vs length: paired difference from "
        "the best length baseline's length-controlled AUROC, tasks resampled within runs; q: Benjamini-Hochberg "
        f"adjusted, to two significant digits. {IN_SAMPLE_MARK}: tuned on the labels it is evaluated on, never "
        f"tested. {INVERTED_MARK}: the pooled AUROC's whole 95% interval lies below 0.5.")
        + html_table(leaderboard_view(leaderboard, q), classes, scroll=True)))
    return page(title, subtitle, sections, provenance)
