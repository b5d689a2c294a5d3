"""A trajectory explorer for JupyterLab, and the same view as one standalone HTML file.

``agentuq_nb.explore(run_dir)`` (or the command line's ``explore``, which writes :func:`export_html`'s page) shows every
trajectory of one or more run folders. The list: filtered by outcome, run, a text search (task ids, message text,
tool names) and an estimator's range, sorted by any estimator the runs hold in either direction, each estimator
offered with its AUROC on each run (marked when tuned on the run's own labels); the default sort is the estimator
with the highest AUROC among those *not* tuned on the run's labels (:func:`default_sort`). The chosen trajectory:

* **why it got its reward** (:mod:`agentuq_nb.records.reward_checks`): which check decided the reward (or that
  the harness computed none, or that τ-bench's outputs check replaced its database verdict); the harness's checks
  one by one (database, environment assertions, expected actions, what the agent had to communicate,
  natural-language assertions), the failing ones marked and those outside the reward basis said to be diagnostic;
  each expected tool call (as the harness checked them, else the task's) beside the call that *counted* (a matching
  call that did not error) or the closest one made, with an inline diff of the arguments that differ; the write
  calls no expected action asked for, marked on their message ("unrequested write": write tools from the results'
  tool definitions, else from the tool's name, :func:`~agentuq_nb.uq.structure_signals.is_write_tool`); the first
  message where the trajectory left the expected actions; the task's instructions and purpose — not shown when the
  file's task is not the one the harness checked (:class:`~agentuq_nb.records.reward_checks.TaskIntegrity`: the page
  says so once per run, with the count);
* the other trials of the same task, and the same task in the other runs given, to open **side by side**;
* per-message **sparklines** of the signals the run holds (the agent's mean token NLL; TRACER's step risk and its
  components; the user's repetition; the resampled actions' semantic entropy) and a strip of the structure events
  (tool errors, repeated calls, hedges…); hovering a message reads them out for that message;
* its messages: tokens coloured by NLL with the top-k alternatives on hover (where the run has token rows), tool
  calls and tool results pretty-printed with the tool's name (results collapsed), at each decision point the K
  resampled actions in their clusters.

**A learned detector.** A run folder holding a detector's ``predictions.csv`` (the predict step, :mod:`agentuq_nb.steps.predict`) shows its
failure probability as the ``detector`` estimator and, per trajectory, a panel of its reasons in percentage points of
that probability, interpretable ones first, an embedding block named by the message that moved it most
(:func:`run_detector_panels`); :func:`attach_detector` does the same for predictions made elsewhere. A link
``#trajectory=<key>`` (:func:`trajectory_key`; the run's report links every trajectory so) opens that trajectory.

**Monitors.** What each monitor of the run (an LLM judge, imported scores or published verdicts: the ``judge`` and
``external`` families) said of the trajectory - its verdict, its justification, its score and cost - stands beside the
trajectory's messages (:func:`run_monitor_panels`).

**The page is safe to share** (:func:`standalone_html`): every string from the run passes the secret masking of
executed notebooks (:func:`agentuq_nb.common.redaction.mask_secrets`; a key split across a message's tokens is found
on the message's text, :func:`~agentuq_nb.common.redaction.secret_spans`), and the JSON payload holds no ``<``,
``>`` or ``&`` (written ``\\u003c``…), so nothing in a message can end or re-open the script that carries it.

Built on **anywidget**: the view is one small JavaScript module (``explorer.js``, no build step, no server round
trip), which is what makes the standalone export the same view (ipywidgets' own export loads its widget manager
from a CDN, and a hover on a token has no ipywidgets event: both would have meant JavaScript anyway).
:func:`explorer_data` gathers the runs' tables and results into the JSON the view reads; it touches nothing in the
folders.
"""
from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.common.redaction import MASK, mask_secrets, secret_spans
from agentuq_nb.estimators import estimators as run_estimators
from agentuq_nb.estimators import get as get_estimator
from agentuq_nb.estimators.base import listing_hint
from agentuq_nb.estimators.detector import DetectorProbability
from agentuq_nb.estimators.monitor import monitor_families
from agentuq_nb.estimators.scores import score_table
from agentuq_nb.evaluation.metrics import UndefinedMetricError, auroc
from agentuq_nb.figures.blackbox import COMPONENTS, EVENTS
from agentuq_nb.io.atomic import atomic_write_text
from agentuq_nb.io.errors import InputError, remedy
from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.outputs import check_output_file
from agentuq_nb.io.store.artifacts import read_monitor_rows, read_predictions
from agentuq_nb.io.store.rundir import MANIFEST, RunDir
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.records import Results, Simulation
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.reward_checks import (
    TaskIntegrity,
    expected_beside_made,
    first_divergence,
    harness_actions,
    reward_checks,
    reward_notes,
    reward_verdict,
    task_brief,
    task_of,
    tasks_by_id,
    text_action,
    unrequested_writes,
)
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.blackbox_signals import tool_types
from agentuq_nb.uq.structure_signals import is_write_tool
from agentuq_nb.uq.transcript import reports_error

#: the estimators offered first (those the run holds), then every other one it holds
FEATURED = ("assistant.avg_token_nll", "assistant.mean_topk_entropy", "tracer.default", "tracer.nested",
            "action_semantic_entropy.mean", "action_agreement.mean", "saup_rms", "structure.tool_errors",
            "combined_predictor", "num_messages")
#: characters of a message's text put in the page (the whole text stays in the run's results file)
TEXT_CHARS = 20_000
#: a tool call's arguments up to this many characters are shown on one line, longer ones pretty-printed
ONE_LINE_ARGUMENTS = 100
TOKEN_COLUMNS = [*TRAJECTORY_KEYS, "message_idx", "token_idx", "role", "token", "chosen_logprob", "topk_tokens",
                 "topk_logprobs", "scorer"]
#: the per-message signals drawn as sparklines, where a run holds them: (field, label, the role it is about or None)
#: (``nll`` from the token rows, ``entropy`` from the resampled actions, the others from ``blackbox_turns``)
LINE_SIGNALS = (("nll", "agent turn: mean token NLL", "assistant"),
                ("tracer_step_risk", "TRACER step risk (agent and user steps)", None),
                *((field, f"TRACER {label}", None) for field, label, _, _ in COMPONENTS),
                ("user_repetition", "user repeating an earlier message (similarity)", "user"),
                ("entropy", "action semantic entropy (K resamples)", "assistant"))
#: the structure events of ``blackbox_turns`` marked per message: (field, label)
EVENT_SIGNALS = tuple((field, label) for field, label, _ in EVENTS)
#: the estimator of a learned detector's failure probability (the registered `detector` family; :func:`attach_detector`)
DETECTOR = DetectorProbability.name
#: the page the command line's ``explore`` writes into the run folder when no ``--out`` is given
PAGE_NAME = "explorer.html"
#: characters that must not appear raw in a JSON payload inside HTML (``</script>``, ``<!--``, entities)
HTML_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}


def _asset(name: str) -> str:
    return resources.files("agentuq_nb.figures").joinpath(name).read_text(encoding="utf-8")


def trajectory_key(domain, task_id, trial, seed, run: int = 0) -> str:
    """A trajectory as the page keys it: ``run|domain|task_id|trial|seed`` (``run``: its index among the page's runs,
    0 for the page of one run; a missing trial or seed - τ-bench runs record no seed - is empty). The report links
    into the page with it (``#trajectory=<key>``)."""
    def part(value) -> str:
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            return ""
        return str(int(value)) if isinstance(value, (int, float, np.integer, np.floating)) else str(value)
    return "|".join((str(run), str(domain), str(task_id), part(trial), part(seed)))


def _keyed(frame: pd.DataFrame, run: int) -> pd.Series:
    return pd.Series([trajectory_key(*k, run=run) for k in frame[TRAJECTORY_KEYS].itertuples(index=False, name=None)],
                     index=frame.index, dtype=object)


def _num(x, digits: int = 4):
    """A finite float rounded for the JSON, else None."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return round(x, digits) if math.isfinite(x) else None


def _int(x):
    return None if x is None or pd.isna(x) else int(x)


def require_run_folder(run: RunDir) -> None:
    """A run folder, or one clear line: a results file (or a τ²-bench results directory) is named with the command
    that makes its run folder."""
    path = run.path
    results = path.is_file() or (path.is_dir() and not (path / MANIFEST).exists()
                                 and ((path / "results.json").is_file() or (path / "simulations").is_dir()))
    if results:
        stem = path.stem if path.is_file() else path.name
        made = remedy("run_folder_of_results", "make its run folder with the analyze step (agentuq_nb.steps.analyze) "
                      "into runs/{stem}, then explore that folder", results=path, stem=stem)
        raise InputError(path, f"is a results file, not a run folder: {made}")
    run.require_folder("explore")


# --------------------------------------------------------------------------- tokens, signals, decisions
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


def _tokens_by_message(run: RunDir, index: int, scorer: str | None, wanted: set[str], top_k: int):
    tokens, used = _tokens(run, scorer)
    if not len(tokens):
        return {}, used
    tokens = tokens.assign(key=_keyed(tokens, index))
    tokens = tokens[tokens["key"].isin(wanted)].sort_values(["key", "message_idx", "token_idx"], kind="stable")
    by_message: dict[tuple, list] = {}
    for row in tokens.itertuples(index=False):
        nll = None if row.chosen_logprob is None or pd.isna(row.chosen_logprob) else _num(-row.chosen_logprob, 3)
        by_message.setdefault((row.key, int(row.message_idx)), []).append(
            [str(row.token), nll, _alternatives(row.topk_tokens, row.topk_logprobs, top_k)])
    return by_message, used


def _message_signals(run: RunDir, index: int, wanted: set[str]) -> dict[tuple, tuple[dict, list]]:
    """Per (key, message_idx): the line signals of ``blackbox_turns`` with a value, and the events that fired."""
    if not run.has("blackbox_turns"):
        return {}
    bb = key_dtypes(run.read_frame("blackbox_turns"))
    bb = bb.assign(key=_keyed(bb, index))
    bb = bb[bb["key"].isin(wanted)]
    lines = [f for f, _, _ in LINE_SIGNALS if f in bb.columns]
    events = [f for f, _ in EVENT_SIGNALS if f in bb.columns]
    out = {}
    for row in bb[["key", "message_idx", *lines, *events]].to_dict("records"):
        values = {f: _num(row[f], 3) for f in lines if _num(row[f], 3) is not None}
        fired = [f for f in events if (_num(row[f]) or 0) > 0]
        out[(row["key"], int(row["message_idx"]))] = (values, fired)
    return out


def _decisions(run: RunDir, index: int) -> dict[str, list[dict]]:
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
            texts.setdefault((trajectory_key(row.domain, row.task_id, row.trial, row.seed, index), int(row.decision_idx)),
                             []).append(label)
    out: dict[str, list[dict]] = {}
    turns["key"] = _keyed(turns, index)
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


# --------------------------------------------------------------------------- messages of one simulation
def _shown_text(content: str, role: str) -> tuple[str, bool]:
    """A message's text for the page and whether it is pretty-printed JSON (a tool result that parses)."""
    stripped = content.strip()
    if role == "tool" and stripped[:1] in ("{", "["):
        try:
            return json.dumps(json.loads(stripped), indent=2, ensure_ascii=False), True
        except (json.JSONDecodeError, RecursionError):
            pass
    return content, False


def _cut(text: str) -> tuple[str, int]:
    return (text, 0) if len(text) <= TEXT_CHARS else (text[:TEXT_CHARS], len(text) - TEXT_CHARS)


def _arguments_text(arguments) -> str:
    one_line = json.dumps(arguments, ensure_ascii=False, default=str)
    return one_line if len(one_line) <= ONE_LINE_ARGUMENTS else json.dumps(arguments, indent=2, ensure_ascii=False,
                                                                           default=str)


def masked_tokens(tokens: list) -> list:
    """A message's tokens with every secret found on their joined text masked: the secret's characters are dropped
    from the tokens that hold them, the token where it starts shows :data:`~agentuq_nb.common.redaction.MASK`, and
    none of them keeps its alternatives."""
    spans = secret_spans("".join(t[0] for t in tokens))
    if not spans:
        return tokens
    out, start = [], 0
    for text, nll, alternatives in tokens:
        end = start + len(text)
        inside = [(a, b) for a, b in spans if a < end and b > start]
        if not inside:
            out.append([text, nll, alternatives])
        else:
            kept, pos = [], start
            for a, b in inside:
                kept.append(text[pos - start:max(a, pos) - start])
                if a >= start:
                    kept.append(MASK)
                pos = max(pos, min(b, end))
            kept.append(text[pos - start:])
            out.append(["".join(kept), nll, []])
        start = end
    return out


def _messages(sim: Simulation, key: str, tokens: dict, signals: dict, entropy_at: dict) -> tuple[list, list]:
    """The page's messages of a simulation, and the calls it made (``[{message_idx, name, arguments, requestor,
    errored}]``: ``errored`` when the call's result reports an error; each message's call names its position ``ci``
    in that list)."""
    names: dict[str, str] = {}
    made, shown = [], []
    call_ids: list[str | None] = []
    errors: dict[str, bool] = {}
    for idx, m in enumerate(sim.messages):
        role = str(m.role)
        content = m.content if isinstance(m.content, str) else ("" if m.content is None else str(m.content))
        calls = []
        for call in m.tool_calls or []:
            names[str(call.id)] = call.name
            calls.append({"name": call.name, "args": _arguments_text(call.arguments), "requestor": call.requestor,
                          "ci": len(made)})
            made.append({"message_idx": idx, "name": call.name, "arguments": call.arguments,
                         "requestor": str(call.requestor or "assistant")})
            call_ids.append(str(call.id))
        action_ci = None
        if role == "assistant" and not calls and (acted := text_action(content)):
            action_ci = len(made)
            made.append({"message_idx": idx, **acted, "requestor": "assistant"})
            call_ids.append(None)
        if role == "tool" and m.id is not None:
            errors[str(m.id)] = reports_error(m.error, content)
        toks = tokens.get((key, idx))
        values, fired = signals.get((key, idx), ({}, []))
        values = dict(values)
        nlls = [t[1] for t in toks or [] if t[1] is not None]
        if nlls and role == "assistant":
            values["nll"] = _num(np.mean(nlls), 3)
        if entropy_at.get(idx) is not None:
            values["entropy"] = entropy_at[idx]
        text, is_json = _shown_text(content, role) if not toks else ("", False)
        text, cut = _cut(text)
        tool = (m.model_extra or {}).get("name") or names.get(str(m.id)) if role == "tool" else None
        shown.append({
            "idx": idx, "turn": int(m.turn_idx) if m.turn_idx is not None else idx, "role": role,
            "text": None if toks else text, "json": is_json, "cut": cut, "calls": calls, "action_ci": action_ci,
            "tool": str(tool) if tool else None, "tokens": masked_tokens(toks) if toks else None,
            "nll": _num(np.mean(nlls), 3) if nlls else None, "s": values, "ev": fired,
            "error": reports_error(m.error, content) if role == "tool" else bool(m.error)})
    for call, call_id in zip(made, call_ids):
        if call_id is not None:
            call["errored"] = errors.get(call_id)
        else:  # a ReAct agent's text action: its result is the next message (τ-bench's "API output: …")
            after = call["message_idx"] + 1
            call["errored"] = shown[after]["error"] if after < len(shown) else None
    return shown, made


def _forensics(sim: Simulation, task: dict | None, made: list, is_write, shown: list) -> dict:
    """The reward's checks and verdict, the expected calls (the harness's where it recorded them, else the task's)
    beside those made, the unrequested writes and the first divergence (:mod:`agentuq_nb.records.reward_checks`)."""
    reward_info = sim.reward_info.model_dump() if sim.reward_info is not None else {}
    brief = task_brief(task)
    basis = brief["reward_basis"] if brief else None
    checked = harness_actions(reward_info)
    actions = checked if checked is not None else (brief["actions"] if brief else [])
    rows = expected_beside_made(actions, made, reward_info.get("action_checks"))
    unrequested = unrequested_writes(rows, made, is_write)
    divergence = first_divergence(rows, made, unrequested, shown[-1]["idx"] if shown else None)
    expected = []
    for row in rows:
        call = row.pop("call")
        j = row.pop("call_index")
        expected.append({**row, "arguments": json.dumps(row["arguments"], ensure_ascii=False, default=str),
                         "call": None if call is None else {"message": call["message_idx"], "name": call["name"],
                                                            "args": _arguments_text(call["arguments"]), "ci": j,
                                                            "errored": call.get("errored")}})
    if divergence is not None:
        at = divergence["message_idx"]
        divergence = {"message": at, "ci": divergence["call_index"], "what": divergence["what"],
                      "turn": next((m["turn"] for m in shown if m["idx"] == at), at)}
    breakdown = reward_info.get("reward_breakdown") or {}
    return {"checks": reward_checks(reward_info, basis), "notes": reward_notes(reward_info),
            "basis": [str(b) for b in (reward_info.get("reward_basis") or basis or [])] or None,
            "breakdown": [[str(k), _num(v, 3)] for k, v in breakdown.items()] or None,
            "verdict": reward_verdict(reward_info if sim.reward_info is not None else None, basis),
            "expected": expected, "expected_from": ("harness" if checked is not None else "task") if expected else None,
            "made": [{"ci": j, "message": c["message_idx"], "name": c["name"], "errored": c.get("errored"),
                      "write": bool(is_write(str(c["name"])))} for j, c in enumerate(made)],
            "unrequested": unrequested, "divergence": divergence}


# --------------------------------------------------------------------------- one run
def _auroc(values: np.ndarray, failed: np.ndarray, labelled: np.ndarray, higher_is_uncertain: bool):
    ok = np.isfinite(values) & labelled
    u = values[ok] if higher_is_uncertain else -values[ok]
    try:
        return _num(auroc(u, failed[ok]), 3), int(ok.sum())
    except UndefinedMetricError:
        return None, int(ok.sum())


def _run_label(run: RunDir) -> dict:
    manifest = run.manifest()
    agent = manifest.models.get("assistant") or manifest.models.get("agent")
    return {"name": run.path.name, "model": agent, "domain": manifest.domain}


def _one_run(run: RunDir, index: int, estimators: Sequence[str] | None, scorer: str | None, failure_threshold: float,
             top_k: int, max_trajectories: int | None) -> dict:
    require_run_folder(run)
    held = [e.name for e in run_estimators(run)]
    if estimators:
        names = [n for n in estimators if get_estimator(n).is_available(run)]
    else:
        names = [*[f for f in FEATURED if f in held], *[h for h in held if h not in FEATURED]]
    scores, chosen = score_table(run, names, run.outcomes(failure_threshold))  # the run's labels, made once
    scores = key_dtypes(scores)
    scores["key"] = _keyed(scores, index)
    meta = key_dtypes(run.read_frame("trajectories")) if run.has("trajectories") else scores[TRAJECTORY_KEYS]
    ended = dict(zip(_keyed(meta, index), meta.get("termination_reason", pd.Series(index=meta.index, dtype=object))))
    if max_trajectories is not None:
        scores = scores.head(max_trajectories)
    wanted = set(scores["key"])

    reward = scores["reward"].to_numpy(dtype=float)
    labelled = np.isfinite(reward)
    failed = scores["failed"].to_numpy(dtype=bool)
    quality = {e.name: _auroc(scores[e.name].to_numpy(dtype=float), failed, labelled, e.higher_is_uncertain)
               for e in chosen}

    tokens, used_scorer = _tokens_by_message(run, index, scorer, wanted, top_k)
    signals = _message_signals(run, index, wanted)
    decisions = _decisions(run, index)
    results = run.results_path()
    if not os.path.lexists(results):
        raise InputError(results, f"the results file run folder {run.path} was made from is gone: the explorer reads "
                                  "the messages from it (move it back, or analyze the results again)")
    file = ResultsFile.open(results, tell_version=False)  # its header and its simulations: one sniff
    header = file.header
    domain = run.manifest().domain or Results.domain_of(header.get("info"))
    integrity = TaskIntegrity(tasks_by_id(header))
    kinds = tool_types(header)  # the results' own read/write tags, else the name rule (is_write_tool)
    is_write = lambda name: is_write_tool(name, kinds)  # noqa: E731
    views, task_briefs, unverified, task_keys = {}, {}, {}, {}
    for sim in file.simulations():
        key = trajectory_key(domain, sim.task_id, sim.trial, sim.seed, index)
        if key not in wanted or key in views:
            continue
        entropy_at = {d["message"]: d["entropy"] for d in decisions.get(key, [])}
        messages, made = _messages(sim, key, tokens, signals, entropy_at)
        reward_info = sim.reward_info.model_dump() if sim.reward_info is not None else None
        agrees = integrity.add(sim.id, sim.task_id, sim.model_extra, reward_info)
        task = None if agrees is False else task_of(sim.task_id, sim.model_extra, integrity.tasks)
        if agrees is None and task is not None:  # nothing to check it against: trusted unless others of the run fail
            unverified[key] = (sim, made, messages)
        task_keys[key] = f"{index}|{domain}|{sim.task_id}"
        views[key] = {"messages": messages, "task": task, "task_mismatch": agrees is False, "task_unverified": False,
                      **_forensics(sim, task, made, is_write, messages)}
    for key, (sim, made, messages) in unverified.items():
        if integrity.mismatched:  # the file's tasks are not the simulated ones elsewhere: this one is not shown either
            views[key].update(task=None, task_unverified=True, **_forensics(sim, None, made, is_write, messages))
    for key, view in views.items():
        task = view["task"]
        view["task"] = None if task is None else task_keys[key]
        if task is not None and view["task"] not in task_briefs:  # its expected actions are each trajectory's
            task_briefs[view["task"]] = {k: v for k, v in task_brief(task).items() if k != "actions"}

    panels = run_detector_panels(run, index)
    monitors = run_monitor_panels(run, index)
    trajectories = []
    for (_, row), fail, has_label in zip(scores.iterrows(), failed, labelled):
        key = row["key"]
        view = views.get(key, {"messages": [], "task": None, "task_mismatch": False, "task_unverified": False,
                               "checks": [], "notes": [],
                               "basis": None, "breakdown": None, "verdict": reward_verdict(None), "expected": [],
                               "expected_from": None, "made": [], "unrequested": [], "divergence": None})
        trajectories.append({
            "key": key, "run": index, "domain": str(row["domain"]), "task_id": str(row["task_id"]),
            "trial": _int(row["trial"]), "seed": _int(row["seed"]), "reward": _num(row["reward"], 3),
            "failed": bool(fail) if has_label else None,
            "termination": None if pd.isna(ended.get(key)) else str(ended.get(key)),
            "values": {e.name: _num(row[e.name]) for e in chosen}, "detector": panels.get(key),
            "monitors": monitors.get(key, []), "decisions": decisions.get(key, []), **view})
    return {"run": {**_run_label(run), "scorer": used_scorer, "has_tokens": bool(tokens),
                    "n": len(trajectories), "failures": int((failed & labelled).sum()),
                    "unlabelled": int((~labelled).sum()),
                    "task_mismatch": {"n": integrity.mismatched, "of": integrity.checked, "text": integrity.message()}
                    if integrity.mismatched else None,
                    "write_tools_from": "the results' tool definitions" if kinds else "the tool's name (a state-"
                                        "changing verb: book, cancel, modify, return…)"},
            "estimators": chosen, "quality": quality, "trajectories": trajectories, "tasks": task_briefs}


# --------------------------------------------------------------------------- the page's data
def default_sort(estimators: list[dict]) -> dict:
    """The estimator the list is sorted by at first: the highest mean AUROC over the runs among those *not* tuned on
    the runs' own labels (never an in-sample readout such as ``tracer.optimistic``), with the reason in words; the
    first estimator when no AUROC is defined (one outcome only, or no labels)."""
    honest = [e for e in estimators if not e["in_sample"] and any(a is not None for a in e["auroc"])]
    if not honest:
        first = estimators[0]["name"] if estimators else ""
        return {"estimator": first, "why": "no AUROC is defined on these runs (one outcome only, or no labels): "
                                           "sorted by the first estimator"}
    best = max(honest, key=lambda e: np.mean([a for a in e["auroc"] if a is not None]))
    mean = np.mean([a for a in best["auroc"] if a is not None])
    return {"estimator": best["name"],
            "why": f"the highest AUROC ({mean:.2f}) among the {len(honest)} estimators not tuned on these runs' labels; "
                   "chosen on these same trajectories, so it flatters it: compare it with length"}


def explorer_data(run_dir: str | os.PathLike | RunDir | Iterable, estimators: list[str] | None = None,
                  scorer: str | None = None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, top_k: int = 5,
                  max_trajectories: int | None = None) -> dict:
    """What the explorer shows, as one JSON-ready dict (see the module docstring): the runs, the estimators with
    their AUROC on each run, the default sort, the signals the runs hold, the tasks, and per trajectory its keys,
    outcome, estimator values, reward checks, expected calls, messages and decision points. ``run_dir``: one run
    folder or several (the same task across them can be compared side by side); ``estimators``: those offered
    (default: every one a run holds, :data:`FEATURED` first). Reads the run folders, writes nothing; every string
    from them is masked for secrets."""
    paths = [run_dir] if isinstance(run_dir, (str, os.PathLike, RunDir)) else list(run_dir)
    if not paths:
        raise ValueError("explorer_data needs at least one run folder")
    parts = [_one_run(RunDir.of(p), i, estimators, scorer, failure_threshold, top_k, max_trajectories)
             for i, p in enumerate(paths)]
    chosen: dict[str, object] = {}
    for part in parts:
        for e in part["estimators"]:
            chosen.setdefault(e.name, e)
    if estimators:
        missing = [n for n in estimators if n not in chosen]
        if missing:
            raise InputError(paths[0], f"no run given holds the estimator(s) {', '.join(missing)} "
                                       f"({listing_hint()})")
    listed = []
    for name, e in chosen.items():
        quality = [part["quality"].get(name, (None, 0)) for part in parts]
        listed.append({"name": name, "family": e.family, "higher_is_uncertain": bool(e.higher_is_uncertain),
                       "description": e.description or "", "protocol": e.protocol, "in_sample": bool(e.in_sample),
                       "auroc": [q[0] for q in quality], "n": [q[1] for q in quality]})
    present = {f for part in parts for t in part["trajectories"] for m in t["messages"] for f in m["s"]}
    fired = {f for part in parts for t in part["trajectories"] for m in t["messages"] for f in m["ev"]}
    data = {
        "schema": 2, "runs": [part["run"] for part in parts], "failure_threshold": failure_threshold,
        "estimators": listed, "sort": default_sort(listed),
        "signals": [{"field": f, "label": label, "role": role} for f, label, role in LINE_SIGNALS if f in present],
        "events": [{"field": f, "label": label} for f, label in EVENT_SIGNALS if f in fired],
        "tasks": {k: v for part in parts for k, v in part["tasks"].items()},
        "trajectories": [t for part in parts for t in part["trajectories"]],
    }
    return masked_page_data(data)


def masked_page_data(data: dict) -> dict:
    """``data`` with every string holding a secret masked as executed notebooks are (the token lists, masked per
    message when they were read, are stepped over: their strings are single tokens)."""
    held = [(m, m.pop("tokens", None)) for t in data["trajectories"] for m in t["messages"]]
    try:
        masked, _ = mask_secrets(data, by_key=False)  # its "key" fields are trajectory keys; arguments: masked in text
    finally:
        for m, tokens in held:
            m["tokens"] = tokens
    for t, original in zip(masked["trajectories"], data["trajectories"]):
        for m, source in zip(t["messages"], original["messages"]):
            m["tokens"] = source["tokens"]
    return masked


def detector_panels(predictions: pd.DataFrame, run: int) -> dict[str, dict]:
    """Each trajectory's detector panel of run ``run``, by its key: ``predictions`` holds the trajectory keys
    (``domain, task_id, trial, seed``), :data:`DETECTOR` (the failure probability) and optionally
    ``base_probability`` and ``explanation``: per trajectory a list of ``{feature, reason, value, points}`` (or its
    JSON text, as ``predictions.csv`` holds it; :mod:`agentuq_nb.evaluation.detector_explain`), shown in its order -
    interpretable reasons first - each in percentage points of the probability (base + all points = the
    probability). Predictions of an earlier version (``contributions``, on the log-odds scale) are shown as they
    are, their scale said."""
    missing = [c for c in [*TRAJECTORY_KEYS, DETECTOR] if c not in predictions.columns]
    if missing:
        raise ValueError(f"detector predictions lack the column(s) {', '.join(missing)}")
    frame = key_dtypes(predictions)
    column = "explanation" if "explanation" in frame.columns else "contributions"
    reasons = frame[column] if column in frame.columns else pd.Series(None, index=frame.index)
    base = frame["base_probability"] if "base_probability" in frame.columns else pd.Series(None, index=frame.index)
    panels = {}
    for key, p, b, given in zip(_keyed(frame, run), frame[DETECTOR], base, reasons):
        if isinstance(given, str):
            given = json.loads(given)
        items = given if isinstance(given, list) else []
        if column == "explanation":
            rows = [{"feature": str(c["feature"]), "reason": str(c.get("reason") or c["feature"]),
                     "value": _num(c.get("value")), "points": _num(c.get("points"))} for c in items]
        else:
            rows = sorted(({"feature": str(c["feature"]), "reason": str(c["feature"]), "value": _num(c.get("value")),
                            "log_odds": _num(c["contribution"])} for c in items),
                          key=lambda c: -abs(c["log_odds"] or 0))
        panels[key] = {"p_failure": _num(p), "base": _num(b), "scale": "points" if column == "explanation" else
                       "log-odds", "contributions": rows}
    return panels


def run_monitor_panels(run: RunDir, index: int) -> dict[str, list[dict]]:
    """Per trajectory of run ``index`` (by its key), what each monitor of the run said of it (families ``judge``,
    ``external``…: :mod:`agentuq_nb.estimators.monitor`): ``{estimator, score, risk, verdict, justification,
    cost_usd, source}``, the verdict and its justification where the monitor gave them."""
    panels: dict[str, list[dict]] = {}
    for family in monitor_families():
        rows = read_monitor_rows(run, family)
        if rows.empty:
            continue
        for key, row in zip(_keyed(rows, index), rows.itertuples(index=False)):
            panels.setdefault(key, []).append({
                "estimator": f"{family}.{row.monitor}", "score": _num(row.score), "risk": _num(row.risk),
                "verdict": None if pd.isna(row.verdict) else str(row.verdict),
                "justification": None if pd.isna(row.justification) else str(row.justification),
                "cost_usd": _num(row.cost_usd), "source": None if pd.isna(row.source) else str(row.source)})
    return panels


def run_detector_panels(run: RunDir, index: int) -> dict[str, dict]:
    """The detector panels of a run folder that the predict step wrote ``predictions.csv`` into (none else)."""
    if not run.has("predictions"):
        return {}
    predictions = read_predictions(run)
    return detector_panels(predictions.rename(columns={"failure_probability": DETECTOR}), index)


def attach_detector(data: dict, predictions: pd.DataFrame, run: int = 0,
                    protocol: str = DetectorProbability.protocol, description: str = DetectorProbability.description,
                    ) -> dict:
    """Show a learned detector's predictions of run ``run`` in ``data`` (:func:`explorer_data`'s, changed in place
    and returned) where its folder holds none (a notebook's own predictions; a run folder after the predict
    step shows them without this): ``predictions`` as :func:`detector_panels` reads them. The probability is
    the :data:`DETECTOR` estimator of that run (its AUROC on the run computed here; other runs keep theirs) and each
    trajectory's ``detector`` panel; the default sort is chosen again (:func:`default_sort`)."""
    panels = detector_panels(predictions, run)
    values, failed, labelled = [], [], []
    for t in data["trajectories"]:
        if t["run"] != run:
            continue
        t["detector"] = panels.get(t["key"])
        t["values"][DETECTOR] = t["detector"]["p_failure"] if t["detector"] else None
        values.append(np.nan if t["values"][DETECTOR] is None else t["values"][DETECTOR])
        failed.append(bool(t["failed"]))
        labelled.append(t["failed"] is not None)
    value, n = _auroc(np.asarray(values, dtype=float), np.asarray(failed), np.asarray(labelled), True)
    n_runs = len(data["runs"])
    entry = next((e for e in data["estimators"] if e["name"] == DETECTOR), None) or {
        "name": DETECTOR, "family": "detector", "higher_is_uncertain": True, "description": description,
        "protocol": protocol, "in_sample": False, "auroc": [None] * n_runs, "n": [0] * n_runs}
    entry["auroc"][run], entry["n"][run] = value, n
    data["estimators"] = [entry, *[e for e in data["estimators"] if e["name"] != DETECTOR]]
    data["sort"] = default_sort(data["estimators"])
    return masked_page_data(data)


# --------------------------------------------------------------------------- the page and the widget
def page_json(data: dict) -> str:
    """``data`` as JSON safe inside an HTML ``<script>``: no ``<``, ``>`` or ``&`` (escaped as ``\\u003c``…, which
    JSON reads back as the same characters), nothing outside ASCII (U+2028 and the like escaped), no NaN."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    for char, escaped in HTML_UNSAFE.items():
        text = text.replace(char, escaped)
    return text


#: the tag that marks a page ``explore`` wrote: a later ``explore --out`` replaces such a page, and no other file
PAGE_MARK = "<meta name='generator' content='agentuq_nb explore'>"
#: the title of the pages written before they carried the mark
OLD_PAGE_TITLE = "<title>agentuq_nb explorer"


def standalone_html(data: dict, title: str = "agentuq_nb explorer") -> str:
    """One HTML file holding the explorer's module, its style and ``data``: opens in any browser, offline."""
    script, style = _asset("explorer.js"), _asset("explorer.css")
    if "</script" in script.lower() or "</style" in style.lower():  # our own assets: a slip here would break the page
        raise ValueError("explorer.js or explorer.css holds a closing tag that would end its element early")
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>" + PAGE_MARK +
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{html.escape(title)}</title><style>{style}\n"
            "html, body { margin: 0; height: 100%; } body { --aq-height: 100vh; }</style></head><body>"
            "<div id='agentuq-explorer-root'></div>"
            f"<script type='application/json' id='agentuq-explorer-data'>{page_json(data)}</script>"
            "<script type='module'>\n" + script + "\n"
            "const data = document.getElementById('agentuq-explorer-data').textContent;\n"
            "render({model: {get: () => data, on: () => {}}, el: document.getElementById('agentuq-explorer-root')});\n"
            "</script></body></html>\n")


def default_page_path(run_dirs: Sequence[str | os.PathLike]) -> Path:
    """Where the page of one run goes without ``--out``: :data:`PAGE_NAME` in its folder (several runs: refused,
    there is no one folder to put it in)."""
    if len(run_dirs) != 1:
        raise InputError(Path(run_dirs[0]), f"{len(run_dirs)} run folders given; out: say where their page goes")
    return Path(run_dirs[0]) / PAGE_NAME


def page_title(data: dict) -> str:
    return "agentuq_nb explorer: " + ", ".join(r["name"] for r in data["runs"])


def export_html(data: dict, path: str | os.PathLike, force: bool = False,
                run_dirs: Sequence[str | os.PathLike] = ()) -> Path:
    """Write :func:`standalone_html` of ``data`` to ``path`` (atomically); returns the path. An existing file there
    is replaced only when it is a page ``explore`` wrote (or with ``force``), never a run's own file, the results
    ``run_dirs`` were made from, or anything but a regular file (:func:`check_page_path`)."""
    page = standalone_html(data, page_title(data))
    path = check_page_path(path, run_dirs, force)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, page)
    return path


def check_page_path(path: str | os.PathLike, run_dirs: Sequence[str | os.PathLike] = (), force: bool = False) -> Path:
    """``path`` when the explorer page of ``run_dirs`` may be written there (the rule of :mod:`agentuq_nb.io.outputs`:
    the results the runs were made from are inputs), else an InputError naming it."""
    inputs = []
    for run_dir in run_dirs:
        try:
            inputs.append(RunDir(run_dir).results_path())
        except (FileNotFoundError, InputError):
            pass
    return check_output_file(path, command="explore", what="HTML page", inputs=inputs, force=force,
                             made_before=(PAGE_MARK.encode(), OLD_PAGE_TITLE.encode()), example=PAGE_NAME)


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
