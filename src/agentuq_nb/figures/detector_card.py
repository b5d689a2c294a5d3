"""A detector's model card for a person (``card.md``), written from ``card.json``'s numbers and nothing else.

Sections: what it was trained on (runs, tasks and how a task is identified, features, model); every protocol's
pooled within-run AUROC against both baselines (the best length baseline and the task's failure rate in the other
runs), with the paired differences and their verdicts; the probabilities (calibration on held-out runs, label-shift
adaptation per run); and **what to trust**: three plain sentences chosen by the numbers (:func:`trust_sentences`).
Every number is printed with three decimals from the card, so a test can read them back.
:func:`write_detector_folder` writes a trained detector's folder with this text beside its ``card.json``.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentuq_nb.evaluation.defaults import DETECTOR_PROTOCOLS
from agentuq_nb.io.atomic import json_ready
from agentuq_nb.io.store.detector_dir import CARD_TEXT, write_detector_dir

if TYPE_CHECKING:
    from agentuq_nb.evaluation.detector_training import TrainedDetector

#: the protocol that says how the detector does on a new run of tasks it has seen, and on tasks it has not
SEEN_TASKS_PROTOCOL = "leave_one_run_out"
NEW_TASKS_PROTOCOLS = ("leave_run_and_task_out", "leave_one_domain_out")


def num(x: Any, digits: int = 3, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def span(lo: Any, hi: Any, signed: bool = False) -> str:
    return "" if lo is None or hi is None else f" [{num(lo, signed=signed)}, {num(hi, signed=signed)}]"


def protocol_lines(card: dict[str, Any]) -> list[str]:
    """The protocols' table (Markdown)."""
    lines = ["| protocol | n (failures) | detector AUROC | length baseline | detector − length | task prior AUROC "
             "(rows with a prior) | detector − task prior | ECE | Brier | its folds chose |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in card.get("protocols", {}).items():
        if "auroc" not in row:
            lines.append(f"| {name} | — | {row.get('note', '—')} | | | | | | | |")
            continue
        held = card.get("calibration", {}).get("held_out", {}).get(name, {})
        length = (f"{num(row.get('length_auroc'))} ({row.get('length_baseline')})" if "length_auroc" in row else "—")
        vs_length = (f"{num(row.get('diff_vs_length'), signed=True)}"
                     f"{span(row.get('diff_vs_length_lo'), row.get('diff_vs_length_hi'), True)} {row.get('vs_length')}"
                     if "diff_vs_length" in row else "—")
        prior = (f"{num(row.get('prior_auroc'))} ({row.get('prior_n')})" if "prior_auroc" in row
                 else f"no recurring task ({row.get('prior_n', 0)})")
        vs_prior = (f"{num(row.get('diff_vs_prior'), signed=True)}"
                    f"{span(row.get('diff_vs_prior_lo'), row.get('diff_vs_prior_hi'), True)} {row.get('vs_prior')}"
                    if "diff_vs_prior" in row else "—")
        lines.append(f"| {name} | {row.get('n')} ({row.get('n_failures')}) | {num(row['auroc'])}"
                     f"{span(row.get('auroc_lo'), row.get('auroc_hi'))} | {length} | {vs_length} | {prior} | "
                     f"{vs_prior} | {num(held.get('ece', row.get('calibration_ece')))} | "
                     f"{num(held.get('brier', row.get('calibration_brier')))} | {row.get('selected_folds', '—')} |")
    return lines


#: how far below its best baseline a protocol's detector may fall and still count as "not below it"
BASELINE_TOLERANCE = 0.01


def baseline_checks(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Per protocol: its detector against its best baseline - length, and where tasks recur between training and the
    scored rows (not the task-disjoint protocols) the task prior on the rows that have one - and whether it is at
    least that baseline - :data:`BASELINE_TOLERANCE` (``met``)."""
    from agentuq_nb.evaluation.detector_protocols import TASK_DISJOINT

    out = []
    for name, row in card.get("protocols", {}).items():
        if "auroc" not in row or row.get("length_auroc") is None:
            continue
        gaps = {f"length baseline {row.get('length_baseline')}": (row["auroc"], row["length_auroc"])}
        if name not in TASK_DISJOINT and row.get("prior_auroc") is not None:
            gaps["task prior"] = (row.get("auroc_on_prior_rows"), row["prior_auroc"])
        worst = min(gaps, key=lambda k: (gaps[k][0] or 0.0) - gaps[k][1])
        detector, baseline = gaps[worst]
        out.append({"protocol": name, "baseline": worst, "detector": detector, "baseline_auroc": baseline,
                    "gap": None if detector is None else detector - baseline,
                    "met": detector is not None and detector >= baseline - BASELINE_TOLERANCE})
    return out


def baseline_lines(card: dict[str, Any]) -> list[str]:
    """The baseline checks in plain words (:func:`baseline_checks`)."""
    lines = []
    for c in baseline_checks(card):
        verdict = ("at least its best baseline (within 0.01)" if c["met"] else
                   f"**below its best baseline** by {num(-c['gap'])}: on this protocol, use the {c['baseline']} "
                   "rather than the detector")
        lines.append(f"- {c['protocol']}: detector {num(c['detector'])} against the {c['baseline']} "
                     f"{num(c['baseline_auroc'])} — {verdict}.")
    return lines


def label_shift_lines(card: dict[str, Any]) -> list[str]:
    shift = (card.get("calibration") or {}).get("label_shift")
    if not shift or not shift.get("runs"):
        return ["No label-shift judgement: it needs two or more training runs."]
    lines = ["| held-out run | n | true failure rate | estimated rate [95% interval] | κ | training runs of its agent | "
             "plain EM's rate | Brier (adapted) | Brier, centred on the training rate | Brier of the training rate | "
             "Brier of the true base rate ȳ(1−ȳ) | Brier, true rate known | ECE (adapted) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in shift["runs"]:
        lines.append(f"| {r['run']} | {r['n']} | {num(r['true_rate'])} | {num(r['estimated_rate'])}"
                     f"{span(r.get('estimated_rate_lo'), r.get('estimated_rate_hi'))} | {strength(r.get('prior_strength'))} "
                     f"| {r.get('agent_runs', '—')} | {num(r.get('em_rate'))} | {num(r['brier_adapted'])} | "
                     f"{num(r.get('brier_training_rate_centred'))} | {num(r.get('brier_training_rate'))} | "
                     f"{num(r['brier_base_rate'])} | {num(r.get('brier_true_rate_centred'))} | {num(r['ece_adapted'])} |")
    s = shift["summary"]
    lines += ["", f"Adapted Brier ≤ the true base rate's on {s['runs_brier_adapted_le_base_rate']} of {s['n_runs']} runs "
                  f"(unadapted: {s['runs_brier_calibrated_le_base_rate']}; ≤ the constant training rate's on "
                  f"{s.get('runs_brier_adapted_le_training_rate', '—')}); mean Brier {num(s['mean_brier_adapted'])} "
                  f"against the training rate's {num(s.get('mean_brier_training_rate'))} and the true base rate's "
                  f"{num(s['mean_brier_base_rate'])} (which knows each run's rate; centred on that true rate the "
                  f"detector's probabilities would score {num(s.get('mean_brier_true_rate_centred'))}); failure-rate "
                  f"MAE {num(s['rate_mae'])} (the unadapted mean probability's: {num(s['rate_mae_unadapted'])}; soft "
                  f"BBSE's: {num(s['rate_mae_bbse'])}); the interval holds the true rate on "
                  f"{s['interval_covers_true_rate']} of {s['n_runs']} runs. "
                  + (f"The rate of {s['runs_agent_informed']} of {s['n_runs']} runs was moved by training runs of their "
                     f"agent model: mean Brier {num(s['mean_brier_adapted'])} against "
                     f"{num(s.get('mean_brier_training_rate_centred'))} centred on the training rate alone, worse "
                     f"beyond a run's own noise (bootstrap, 95 %) on {s.get('runs_brier_worse_beyond_noise', '—')}, "
                     f"better on {s.get('runs_brier_better_beyond_noise', '—')}. " if "runs_agent_informed" in s
                     else "")
                  + f"Method: {shift.get('method', 'EM')}. κ: "
                  f"pseudo-trajectories at the training rate (∞: the training rate, not estimated from the run); "
                  f"`predict` uses κ = {strength(shift.get('prior_strength'))}, chosen on all training runs."]
    return lines


def strength(k: Any) -> str:
    """A prior strength as the card prints it (None or infinite: ∞, not adapted)."""
    return "∞" if k is None or k == float("inf") else f"{k:g}"


def _ranking_sentence(row: dict[str, Any] | None) -> str:
    if not row or "auroc" not in row:
        return ("Whether it ranks a new run of the same tasks better than their history is untested (one training "
                "run, or no recurring task).")
    on_rows = (f"on the {row['prior_n']} trajectories whose task another run holds it reaches "
               f"{num(row['auroc_on_prior_rows'])} and " if "auroc_on_prior_rows" in row and "prior_n" in row else "")
    prior = {"beats": f"beats the task's own failure history (AUROC {num(row.get('prior_auroc'))}) by "
                      f"{num(row.get('diff_vs_prior'), signed=True)}, so its ranking adds to what the tasks' past runs say",
             "not distinguishable from": f"is not distinguishable from the task's own failure history (AUROC "
                                         f"{num(row.get('prior_auroc'))}, difference "
                                         f"{num(row.get('diff_vs_prior'), signed=True)}), so on tasks it has seen it "
                                         "adds little to what their past runs say",
             "below": f"falls below the task's own failure history (AUROC {num(row.get('prior_auroc'))}), so on tasks "
                      "it has seen, their past failure rate ranks better than the detector"}.get(
        row.get("vs_prior"), "has no task history to be compared with")
    return (f"On a new run of tasks it was trained on, it ranks failures at AUROC {num(row['auroc'])} "
            f"(length alone: {num(row.get('length_auroc'))}); {on_rows}{prior}.")


def _new_tasks_sentence(card: dict[str, Any]) -> str:
    protocols = card.get("protocols", {})
    name = next((p for p in NEW_TASKS_PROTOCOLS if "auroc" in protocols.get(p, {})), None)
    if name is None:
        return "How it does on tasks it has never seen is untested on these runs."
    row = protocols[name]
    where = "tasks it has never seen" if name == "leave_run_and_task_out" else "a domain it has never seen"
    verdict = {"beats": "trust its ranking there beyond length",
               "not distinguishable from": "there it is no better than counting messages, so rank such runs by "
                                           "length as readily as by the detector",
               "below": "there it is worse than counting messages: rank such runs by length instead"}.get(
        row.get("vs_length"), "its comparison with length is undefined")
    return (f"On {where} ({name}), its AUROC is {num(row['auroc'])} against {num(row.get('length_auroc'))} for "
            f"length: {verdict}.")


def _probability_sentence(card: dict[str, Any]) -> str:
    shift = (card.get("calibration") or {}).get("label_shift") or {}
    s = shift.get("summary") or {}
    if not s.get("n_runs"):
        return ("Its probabilities were calibrated within one run and cannot be checked on another: read them as a "
                "ranking only.")
    k, n = s["runs_brier_adapted_le_base_rate"], s["n_runs"]
    advice = ("they can be read as probabilities" if k == n else
              "read them as a ranking and the run's estimated failure rate, not as exact probabilities" if 2 * k >= n
              else "read them as a ranking only, and the run's failure rate with its interval")
    if strength(shift.get("prior_strength")) == "∞":
        return (f"Its scores do not tell a run's own failure rate (on held-out training runs, an estimated rate did not "
                f"beat the training rate, so predict centres each run's probabilities on the training rate, moved by "
                f"what the training runs of the run's agent model failed where there are any, with the interval of "
                f"the run's share of failures under the spread of the runs' rates); they were at least as good as the "
                f"run's true base rate (Brier) on {k} of {n} held-out runs and that rate missed the runs' rates by "
                f"{num(s['rate_mae'])} on average (the training rate alone: {num(s.get('rate_mae_training_rate'))}): "
                f"{advice}.")
    return (f"Its probabilities, moved to each held-out run's estimated failure rate, were at least as good as the "
            f"run's true base rate (Brier) on {k} of {n} runs, and the run's failure rate was estimated with a mean "
            f"absolute error of {num(s['rate_mae'])}: {advice}.")


def trust_sentences(card: dict[str, Any]) -> list[str]:
    """Three plain sentences: ranking on seen tasks against their history, on new tasks against length, and how far
    the probabilities and the run's rate hold (each chosen by the card's verdicts and counts)."""
    return [_ranking_sentence(card.get("protocols", {}).get(SEEN_TASKS_PROTOCOL)), _new_tasks_sentence(card),
            _probability_sentence(card)]


def card_markdown(card: dict[str, Any]) -> str:
    """``card.md`` of a detector card (module docstring)."""
    from agentuq_nb.evaluation.detector_selection import COMPLEX_MARGIN

    runs = card.get("training_runs", [])
    tasks = card.get("tasks") or {}
    lines = ["# Failure detector — model card", "",
             f"Made by `agentuq-nb {card.get('command', 'train-detector')}` at {card.get('created_at')}; features "
             f"{', '.join(card.get('feature_groups', []))} (extraction version {card.get('feature_version')}), model "
             f"{card.get('settings', {}).get('model')}, embedder {card.get('embedder', {}).get('name')}.", "",
             "## What to trust", "", *[f"{i}. {s}" for i, s in enumerate(trust_sentences(card), 1)], "",
             "## Trained on", "",
             f"{card.get('n')} labelled trajectories ({card.get('n_failures')} failures, failure = reward < "
             f"{card.get('failure_threshold')}) of {card.get('n_runs')} run(s), domains "
             f"{', '.join(card.get('domains', []))}.", ""]
    if tasks:
        lines += [f"{tasks.get('n_tasks')} distinct tasks: {tasks.get('by_content')} known by the content of their "
                  f"instructions, {tasks.get('by_id_only')} by (domain, id) only (their results hold no task "
                  "content). A task is identified by " + str(tasks.get("identity", "")) + ".", ""]
    lines += ["| run | domain | agent | trajectories | failures |", "|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.get('name')} | {r.get('domain')} | {(r.get('models') or {}).get('assistant', '—')} | "
                     f"{r.get('n_labelled')} | {r.get('n_failures')} |")
    lines += ["", "## Every protocol against both baselines", "",
              "Pooled within-run AUROC of held-out scores (failures ranked first; pairs within a run; tasks resampled "
              "within runs for the 95% intervals). Baselines: the best length baseline chosen on these data, and the "
              "task prior (the task's failure rate in the other runs). 'beats' = the paired interval lies above 0. Where "
              "several fold models score one run (within-run, run- and task-out), each model's scores are first "
              "standardized over that run's rows (its features only, no label), so that pairs scored by two fold "
              "models compare ranks within the run, not the models' scales. 'its folds chose': how many fold models "
              "were each candidate, chosen inside their training rows by inner folds of the protocol's own kind of "
              "split - length, the task prior (where tasks recur; there it is the reference: with length for tasks it "
              "never saw it is both baselines at once), their stack (baselines), the full model, or the full model "
              "stacked on them; any other candidate must beat the simpler ones by one standard error of the paired "
              f"difference and at least {COMPLEX_MARGIN}.",
              "", *protocol_lines(card), ""]
    for name in card.get("protocols", {}):
        lines.append(f"- **{name}**: {DETECTOR_PROTOCOLS.get(name, '')}")
    checks = baseline_lines(card)
    if checks:
        lines += ["", "Never below its own baselines? Each protocol against the baseline it trails most: length, and "
                      "where tasks recur between training and the scored run also the task prior (on the rows that "
                      "have one):", "", *checks]
    final = (card.get("selection") or {}).get("final") or {}
    if final.get("selected"):
        lines += ["", "## The model chosen", "",
                  f"The final model (what `predict` applies to a new run) is **{final['selected']}**, chosen inside "
                  f"the training runs by inner folds of whole runs: {final.get('why', '')}."]
        if final.get("fallback"):
            lines += ["", f"The task prior (alone, or with its ties broken by length) knows only the tasks it was "
                          f"trained on: on a task it never saw it would give "
                          f"every trajectory the same probability (the training base rate), so those trajectories are "
                          f"scored by **{final['fallback']}** instead; `predict` says how many it scored so."]
    lines += ["", "## Probabilities on runs it never saw", "",
              f"Calibrated on {(card.get('calibration') or {}).get('probabilities')}. `predict` then estimates the "
              "predicted run's own failure rate from its scores (label-shift EM) and moves every probability to it. "
              "Judged by leaving each training run out:", "", *label_shift_lines(card), ""]
    for note in card.get("notes", []):
        lines.append(f"Note: {note}")
    return "\n".join(lines).rstrip() + "\n"


def write_detector_folder(trained: TrainedDetector, out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (),
                          force: bool = False) -> TrainedDetector:
    """``trained`` written as the detector folder ``out`` (:func:`~agentuq_nb.io.store.detector_dir.write_detector_dir`:
    ``inputs`` and ``force`` as its checks take them) with its card as text (:func:`card_markdown`); returns it with
    its ``path`` and the card as written."""
    card = json_ready(trained.card)
    card = write_detector_dir(out, card, json_ready(trained.model), trained.arrays, trained.tables,
                              {CARD_TEXT: card_markdown(card)}, inputs=inputs, force=force)
    return replace(trained, path=Path(out), card=card)
