"""A trajectory explorer for JupyterLab, and the same view as one standalone HTML file.

``agentuq_nb.explore(run_dir)`` shows every trajectory of a run folder: pick one from a list filtered by outcome
or by an estimator's value (and sorted by it); its messages, with each token coloured by its NLL and, on hover, the
top-k alternatives the model weighed with their probabilities; per-message sparklines of a token, a black-box and
an action signal (the agent's mean token NLL, TRACER's step risk, the resampled actions' semantic entropy); at
each decision point the K resampled actions, grouped in their clusters, the agent's own marked; the outcome.

Built on **anywidget**: the view is one small JavaScript module (``explorer.js``, no build step, no server round
trip), which is what makes the standalone export the same view: :meth:`Explorer.export` writes the module and the
data into one HTML file that needs nothing but a browser (ipywidgets' own export loads its widget manager from a
CDN, and a hover on a token has no ipywidgets event: both would have meant JavaScript anyway).
:func:`explorer_data` gathers the run's tables into the JSON the view reads; it touches nothing in the folder.
"""
from __future__ import annotations

import json
import math
import os
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.estimators import estimators as run_estimators
from agentuq_nb.estimators.scores import score_table
from agentuq_nb.io.atomic import atomic_write_text
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.outputs import check_output_file
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.records import Results
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, failure_labels
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.transcript import transcript

#: the estimators offered first in the filter (those the run holds), then every other one it holds
FEATURED = ("assistant.avg_token_nll", "assistant.mean_topk_entropy", "tracer.default", "tracer.nested",
            "action_semantic_entropy.mean", "action_agreement.mean", "saup_rms", "structure.tool_errors",
            "combined_predictor", "num_messages")
#: characters of a message shown when it has no token rows (the whole text is kept in the run's results)
TEXT_CHARS = 4000
TOKEN_COLUMNS = [*TRAJECTORY_KEYS, "message_idx", "token_idx", "role", "token", "chosen_logprob", "topk_tokens",
                 "topk_logprobs", "scorer"]


def _asset(name: str) -> str:
    return resources.files("agentuq_nb.figures").joinpath(name).read_text(encoding="utf-8")


def _key(domain, task_id, trial, seed) -> str:
    seed = "" if seed is None or (isinstance(seed, float) and math.isnan(seed)) else int(seed)
    return f"{domain}|{task_id}|{int(trial)}|{seed}"


def _num(x, digits: int = 4):
    """A finite float rounded for the JSON, else None."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return round(x, digits) if math.isfinite(x) else None


def _keyed(frame: pd.DataFrame) -> pd.Series:
    return pd.Series([_key(*k) for k in frame[TRAJECTORY_KEYS].itertuples(index=False, name=None)], index=frame.index)


def _tokens(run: RunDir, scorer: str | None) -> tuple[pd.DataFrame, str | None]:
    """The run's token rows of one scorer (``self`` where the run has it, else the first), and that scorer."""
    if not run.token_tables():
        return pd.DataFrame(columns=TOKEN_COLUMNS), None
    scorers = read_token_table(run.path, columns=["scorer"])["scorer"].dropna().unique().tolist()
    if not scorers:
        return pd.DataFrame(columns=TOKEN_COLUMNS), None
    chosen = scorer if scorer in scorers else ("self" if "self" in scorers else sorted(scorers)[0])
    rows = read_token_table(run.path, columns=TOKEN_COLUMNS, filters=[("scorer", "=", chosen)])
    return key_dtypes(rows), chosen


def _alternatives(tokens, logprobs, k: int) -> list:
    if tokens is None or logprobs is None:
        return []
    return [[str(t), _num(math.exp(lp), 3)] for t, lp in list(zip(tokens, logprobs))[:k] if lp is not None]


def _decisions(run: RunDir) -> dict[str, list[dict]]:
    """Per trajectory key: its decision points with the K samples and their clusters (``action_turns`` and
    ``action_samples``), empty where the run has none."""
    if not run.has("action_turns"):
        return {}
    turns = key_dtypes(run.read_frame("action_turns")).copy()
    samples = key_dtypes(run.read_frame("action_samples")) if run.has("action_samples") else pd.DataFrame()
    texts: dict[tuple, list[str]] = {}
    if len(samples):
        from agentuq_nb.uq.action_uq import action_kind, action_label, parse_tool_calls, sample_action_key

        for row in samples.sort_values("sample_idx").itertuples(index=False):
            try:
                calls = parse_tool_calls(row.tool_calls, "sample")
                key = sample_action_key(calls, row.content or "", bool(row.malformed))
                label = action_label(calls, row.content or "", action_kind(key))
            except ValueError:
                label = f"malformed: {str(row.tool_calls)[:80]}"
            texts.setdefault((_key(row.domain, row.task_id, row.trial, row.seed), int(row.decision_idx)),
                             []).append(label)
    out: dict[str, list[dict]] = {}
    turns["key"] = _keyed(turns)
    for row in turns.sort_values(["key", "decision_idx"]).itertuples(index=False):
        labels = list(row.cluster_labels)
        sizes = [int(s) for s in row.cluster_sizes]
        members = list(row.sample_clusters)
        sample_texts = texts.get((row.key, int(row.decision_idx)), [])
        clusters = [{"label": labels[c], "size": sizes[c], "taken": c == int(row.taken_cluster),
                     "samples": [sample_texts[i] for i, m in enumerate(members) if m == c and i < len(sample_texts)]}
                    for c in range(len(sizes))]
        clusters.sort(key=lambda c: (not c["taken"], -c["size"]))
        out.setdefault(row.key, []).append({
            "decision": int(row.decision_idx), "message": int(row.message_idx), "k": int(row.k),
            "agreement": _num(row.action_agreement, 3), "clusters_n": int(row.action_clusters),
            "entropy": _num(row.action_semantic_entropy, 3), "taken": str(row.taken_action),
            "taken_kind": str(row.taken_kind), "sampler": str(row.sampler_model), "clusters": clusters})
    return out


def explorer_data(run_dir: str | os.PathLike | RunDir, estimators: list[str] | None = None, scorer: str | None = None,
                  failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, top_k: int = 5, max_trajectories: int | None = None) -> dict:
    """What the explorer shows, as one JSON-ready dict: per trajectory its keys, outcome, estimator values,
    messages (tokens with NLL and top-``top_k`` alternatives where the run has token rows of ``scorer``, else the
    text), per-message signals for the sparklines and its decision points. ``estimators``: those offered in the
    filter (default: every one the run holds, :data:`FEATURED` first). Reads the run folder, writes nothing."""
    run = RunDir.of(run_dir)
    run.require_folder("explore")
    held = [e.name for e in run_estimators(run)]
    names = estimators or [*[f for f in FEATURED if f in held], *[h for h in held if h not in FEATURED]]
    scores, chosen = score_table(run, names)
    scores = key_dtypes(scores)
    scores["key"] = _keyed(scores)
    meta = key_dtypes(run.read_frame("trajectories")) if run.has("trajectories") else scores[TRAJECTORY_KEYS]
    ended = dict(zip(_keyed(meta), meta.get("termination_reason", pd.Series(index=meta.index, dtype=object))))
    if max_trajectories is not None:
        scores = scores.head(max_trajectories)
    wanted = set(scores["key"])

    results = run.results_path()
    domain = Results.domain_of(read_header(results).get("info"))
    messages = transcript((s for s in iter_simulations(results)), domain)
    messages = key_dtypes(messages)
    messages["key"] = _keyed(messages)
    messages = messages[messages["key"].isin(wanted)]

    tokens, used_scorer = _tokens(run, scorer)
    tokens = tokens.assign(key=_keyed(tokens)) if len(tokens) else tokens.assign(key=pd.Series(dtype=object))
    tokens = tokens[tokens["key"].isin(wanted)].sort_values(["key", "message_idx", "token_idx"], kind="stable")
    by_message: dict[tuple, list] = {}
    for row in tokens.itertuples(index=False):
        nll = None if row.chosen_logprob is None or pd.isna(row.chosen_logprob) else _num(-row.chosen_logprob, 3)
        by_message.setdefault((row.key, int(row.message_idx)), []).append(
            [str(row.token), nll, _alternatives(row.topk_tokens, row.topk_logprobs, top_k)])

    risk: dict[tuple, float] = {}
    if run.has("blackbox_turns"):
        bb = key_dtypes(run.read_frame("blackbox_turns"))
        bb = bb.assign(key=_keyed(bb))
        risk = {(k, int(m)): _num(v, 3) for k, m, v in zip(bb["key"], bb["message_idx"], bb["tracer_step_risk"])}
    decisions = _decisions(run)

    failed = failure_labels(scores["reward"].to_numpy(dtype=float), failure_threshold)
    by_trajectory = {k: g.sort_values("message_idx") for k, g in messages.groupby("key", sort=False)}
    empty = messages.iloc[:0]
    trajectories = []
    for (_, row), fail in zip(scores.iterrows(), failed):
        key = row["key"]
        mine = by_trajectory.get(key, empty)
        dps = decisions.get(key, [])
        entropy_at = {d["message"]: d["entropy"] for d in dps}
        shown = []
        for m in mine.itertuples(index=False):
            toks = by_message.get((key, int(m.message_idx)))
            nlls = [t[1] for t in toks or [] if t[1] is not None]
            calls = [f"{name}({json.dumps(args, default=str)[:200]})" for name, args in (m.calls or [])]
            shown.append({
                "idx": int(m.message_idx), "turn": int(m.turn_idx), "role": str(m.role),
                "text": None if toks else (str(m.content)[:TEXT_CHARS] if m.content else ""),
                "calls": calls, "tokens": toks or None, "nll": _num(np.mean(nlls), 3) if nlls else None,
                "risk": risk.get((key, int(m.message_idx))), "entropy": entropy_at.get(int(m.message_idx)),
                "error": bool(m.is_error)})
        trajectories.append({
            "key": key, "domain": row["domain"], "task_id": str(row["task_id"]), "trial": int(row["trial"]),
            "seed": None if pd.isna(row["seed"]) else int(row["seed"]), "reward": _num(row["reward"], 3),
            "failed": bool(fail), "termination": None if pd.isna(ended.get(key)) else str(ended.get(key)),
            "values": {e.name: _num(row[e.name]) for e in chosen}, "messages": shown, "decisions": dps})
    return {"run": str(run.path), "scorer": used_scorer, "failure_threshold": failure_threshold,
            "estimators": [{"name": e.name, "family": e.family, "higher_is_uncertain": bool(e.higher_is_uncertain)}
                           for e in chosen],
            "trajectories": trajectories}


#: the tag that marks a page ``explore`` wrote: a later ``explore --out`` replaces such a page, and no other file
PAGE_MARK = "<meta name='generator' content='agentuq_nb explore'>"
#: how the page began before it carried the mark
OLD_PAGE_START = "<html lang='en'><head><meta charset='utf-8'><title>agentuq_nb explorer"


def standalone_html(data: dict, title: str = "agentuq_nb explorer") -> str:
    """One HTML file holding the explorer's module, its style and ``data``: opens in any browser, offline."""
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    script = _asset("explorer.js")
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>" + PAGE_MARK +
            f"<title>{title}</title><style>{_asset('explorer.css')}</style></head><body>"
            f"<div id='agentuq-explorer-root'></div>"
            f"<script type='application/json' id='agentuq-explorer-data'>{payload}</script>"
            "<script type='module'>\n" + script + "\n"
            "const data = document.getElementById('agentuq-explorer-data').textContent;\n"
            "render({model: {get: () => data, on: () => {}}, el: document.getElementById('agentuq-explorer-root')});\n"
            "</script></body></html>\n")


def export_html(data: dict, path: str | os.PathLike, force: bool = False) -> Path:
    """Write :func:`standalone_html` of ``data`` to ``path`` (atomically); returns the path. An existing file there
    is replaced only when it is a page ``explore`` wrote (or with ``force``), never a run's own file, the run's
    results or anything but a regular file (:func:`check_page_path`)."""
    page = standalone_html(data, f"agentuq_nb explorer: {Path(data['run']).name}")
    path = check_page_path(path, data["run"], force)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, page)
    return path


def check_page_path(path: str | os.PathLike, run_dir: str | os.PathLike, force: bool = False) -> Path:
    """``path`` when the explorer page of ``run_dir`` may be written there (the rule of :mod:`agentuq_nb.io.outputs`:
    the results the run was made from are an input), else an InputError naming it."""
    try:
        inputs = [RunDir(run_dir).results_path()]
    except (FileNotFoundError, InputError):
        inputs = []
    return check_output_file(path, command="explore", what="HTML page", inputs=inputs, force=force,
                             made_before=(PAGE_MARK.encode(), OLD_PAGE_START.encode()), example="explorer.html")


def explorer_widget(data: dict):
    """The anywidget showing ``data`` in JupyterLab (``pip install anywidget``; it comes with the project)."""
    try:
        import anywidget
        import traitlets
    except ImportError as err:  # pragma: no cover - anywidget is a dependency
        raise ModuleNotFoundError("the explorer needs anywidget: pip install anywidget (or export the view with "
                                  "explore(run_dir).export('view.html'), which needs none)") from err

    class Explorer(anywidget.AnyWidget):
        _esm = _asset("explorer.js") + "\nexport default { render };\n"
        _css = _asset("explorer.css")
        data = traitlets.Unicode("{}").tag(sync=True)

        def export(self, path: str | os.PathLike, force: bool = False) -> Path:
            """The same view as one standalone HTML file (an existing file replaced only when it is such a page,
            or with ``force``)."""
            return export_html(json.loads(self.data), path, force)

    return Explorer(data=json.dumps(data, separators=(",", ":"), allow_nan=False))
