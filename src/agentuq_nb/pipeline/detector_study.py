"""The learned-detector study (notebook ``14_detector``, ``params/detector.yaml``): a failure detector trained on several
labelled runs, judged by every protocol against length and the task prior, its feature groups ablated, its early
detection and calibration, and the sentences that say what it found (:func:`findings`), made from the numbers.

The features of every trajectory are extracted once (all groups; the prefixes once per prefix); each ablation row is a
detector of a subset of the groups judged by the protocols alone (:func:`~agentuq_nb.evaluation.detector_training.
protocol_table`: no final model, label-shift judgement, early detection or folder, which the table does not read); the full detector (every group) is
written as a detector folder to ``<run_dir>/detector``. Files that are absent are skipped with a message.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
from agentuq_nb.evaluation.detector_training import (
    TrainedDetector,
    labelled_rows,
    prefix_reader,
    protocol_table,
    train_on_features,
)
from agentuq_nb.figures.detector_card import write_detector_folder
from agentuq_nb.records.config import validation_message
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.steps.train_detector import TrainDetectorConfig
from agentuq_nb.uq.detector_features import GROUPS, POLICY_GROUP

#: the ablation's feature sets: each group alone, the three content groups together, and all of them with length
ABLATION = {"text": ("text",), "structure + TRACER": ("blackbox",), "embeddings": ("embeddings",),
            "policy events": (POLICY_GROUP,),
            "text + structure + TRACER + embeddings": ("text", "blackbox", "embeddings"),
            "all four, + length": GROUPS, "all four + policy events": (*GROUPS, POLICY_GROUP)}
FULL_SET = "all four, + length"
#: the feature set of the research group meant to carry to new tasks (issue 48, point 7)
POLICY_SET = "all four + policy events"


@dataclass
class DetectorStudy:
    """The full detector (its folder written), the ablation (one row per feature set × protocol), the runs and the
    files skipped."""

    detector: TrainedDetector
    ablation: pd.DataFrame
    runs: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    #: leave-one-run-out split by whether the trajectory's task recurs in another run (:func:`seen_task_split`)
    seen_tasks: pd.DataFrame = field(default_factory=pd.DataFrame)


def study_config(**parameters: Any) -> TrainDetectorConfig:
    """The train-detector configuration of the notebook's parameters; a bad one is one line naming the parameter
    (pydantic's own text spans lines and links to its documentation)."""
    try:
        return TrainDetectorConfig(**parameters)
    except ValidationError as err:
        what, where = validation_message(err)
        raise ValueError(f"notebook parameter {where}: {what} (given {parameters.get(where.split('.')[0].split('[')[0])!r})"
                         ) from None


def run_study(results: list[str | os.PathLike], run_dir: str | os.PathLike,
              failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, n_boot: int = DEFAULT_N_BOOT, seed: int = 0,
              embedder: str = "minilm", model: str = "logistic", n_splits: int = 5,
              early_turns: tuple[int, ...] = (1, 2, 3, 4, 6, 8), early_fractions: tuple[float, ...] = (0.25, 0.5, 0.75),
              ablation: bool = True, ablation_sets: list[str] | None = None) -> DetectorStudy:
    """The study of the module docstring on the results files that exist among ``results``; ``ablation_sets``: the
    feature sets of :data:`ABLATION` trained beside the full detector (None: all of them)."""
    unknown = [name for name in ablation_sets or () if name not in ABLATION]
    if unknown:
        raise ValueError(f"notebook parameter ablation_sets: {unknown} are not feature sets of the ablation "
                         f"({', '.join(ABLATION)})")
    skipped = {Path(f).stem: f"{f} not found (the shared real runs live in ../shared beside the repository)"
               for f in results if not Path(f).exists()}
    present = [Path(f) for f in results if Path(f).exists()]
    seconds: dict[str, float] = {}
    groups = GROUPS if embedder != "none" else tuple(g for g in GROUPS if g != "embeddings")
    extracted = (*groups, POLICY_GROUP) if ablation else groups
    base = dict(inputs=present, out=Path(run_dir) / "detector", failure_threshold=failure_threshold, n_boot=n_boot,
                seed=seed, embedder=embedder, model=model, n_splits=n_splits)
    full_config = study_config(**base, groups=list(groups), early_turns=list(early_turns),
                               early_fractions=list(early_fractions))  # the parameters checked before the work
    start = time.perf_counter()
    sources = resolve_sources(present)
    features = corpus_features(sources, extracted, embedder, progress=True)
    seconds["features"] = time.perf_counter() - start
    settings = full_config.training()
    detector = train_on_features(features, sources, settings, prefixes=prefix_reader(sources, settings),
                                 seconds={"features": seconds["features"]})
    detector = write_detector_folder(detector, full_config.out, [*present, *(s.results for s in sources)])
    seconds["detector"] = time.perf_counter() - start - seconds["features"]
    rows = [detector.protocols.assign(feature_set=FULL_SET if groups == GROUPS else "all extracted")]
    if ablation:
        tick = time.perf_counter()
        for name, subset in ABLATION.items():
            wanted = [g for g in subset if g in extracted]
            if name == FULL_SET or len(wanted) < len(subset) or (ablation_sets is not None and
                                                                  name not in ablation_sets):
                continue
            table = protocol_table(features, sources, study_config(**base, groups=wanted).training())
            rows.append(table.assign(feature_set=name))
        seconds["ablation"] = time.perf_counter() - tick
    order = {name: i for i, name in enumerate(ABLATION)}
    table = pd.concat(rows, ignore_index=True)
    table = table.sort_values("feature_set", key=lambda s: s.map(order).fillna(len(order)), kind="stable")
    runs = pd.DataFrame([{k: r[k] for k in ("name", "domain", "layout", "n", "n_labelled", "n_failures")}
                         | {"agent": r["models"].get("assistant")} for r in detector.card["training_runs"]])
    return DetectorStudy(detector, table.reset_index(drop=True), runs, skipped, seconds,
                         seen_task_split(detector, features, failure_threshold, n_boot, seed))


def seen_task_split(detector: TrainedDetector, features, failure_threshold: float, n_boot: int, seed: int
                    ) -> pd.DataFrame:
    """The leave-one-run-out scores split by whether the trajectory's task recurs in another run (``seen``: the task
    prior exists) or not (``new``): on each part the detector against length, and on the seen part against the task
    prior - what having seen the tasks buys, and what the detector adds to the tasks' history."""
    from agentuq_nb.evaluation.detector_protocols import PRIOR, evaluation_frame, protocol_comparison
    from agentuq_nb.records.task_identity import TASK_KEY
    run = detector.runs.get("leave_one_run_out")
    if run is None or not run.folds:
        return pd.DataFrame()
    at, failure = labelled_rows(features, failure_threshold)
    index = features.take(at).index
    frame = evaluation_frame(*(index[c].to_numpy(dtype=object) for c in ("run", "domain", TASK_KEY)), failure, index)
    frame["detector"] = run.log_odds
    seen = frame[PRIOR].notna().to_numpy()
    rows = []
    for part, mask in (("seen", seen), ("new", ~seen)):
        row = protocol_comparison(frame[mask].reset_index(drop=True), "detector", n_boot, seed)
        rows.append({"tasks": part, **row})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- the sentences
def _ci(row, key: str) -> str:
    return f"{row[key]:.3f} [{row[f'{key}_lo']:.3f}, {row[f'{key}_hi']:.3f}]"


def _plus_minus(x: float) -> str:
    """A signed difference to three decimals; one that rounds to zero is written 0.000, not -0.000."""
    text = f"{float(x):+.3f}"
    return "0.000" if text in ("+0.000", "-0.000") else text


def _diff(row, key: str) -> str:
    return f"{_plus_minus(row[key])} [{_plus_minus(row[f'{key}_lo'])}, {_plus_minus(row[f'{key}_hi'])}]"


PROTOCOL_WORDS = {"within_run": "within each run (cross-fitted by task)",
                  "leave_one_run_out": "on each run left out (the other runs, same tasks allowed)",
                  "leave_run_and_task_out": "on each run left out with its tasks (run- and task-disjoint)",
                  "leave_one_domain_out": "on each domain left out"}


def protocol_sentence(row: pd.Series) -> str:
    """One protocol's result in a sentence: AUROC with interval, against length and the task prior."""
    text = (f"**{PROTOCOL_WORDS.get(row['protocol'], row['protocol'])}**: pooled AUROC {_ci(row, 'auroc')} against "
            f"{_ci(row, 'length_auroc')} for `{row['length_baseline']}`, a difference of {_diff(row, 'diff_vs_length')}"
            f" - {row['vs_length']} length")
    if pd.notna(row.get("same_model_auroc")):
        text += (f" (on the {int(row['same_model_n_pairs'])} pairs scored by one fold model only: "
                 f"{_ci(row, 'same_model_auroc')} against {row['same_model_length_auroc']:.3f}, "
                 f"{_diff(row, 'same_model_diff_vs_length')} - {row['same_model_vs_length']} length)")
    if pd.notna(row.get("prior_auroc")):
        text += (f"; on the {int(row['prior_n'])} trajectories whose task recurs in another run, the task prior "
                 f"reaches {_ci(row, 'prior_auroc')} and the detector {row['auroc_on_prior_rows']:.3f}, a difference "
                 f"of {_diff(row, 'diff_vs_prior')} - {row['vs_prior']} the prior")
    return text + "."


def findings(study: DetectorStudy) -> str:
    """What the study found, in sentences made from its numbers (so the text cannot go stale): the runs, each protocol
    against length and the prior, the traps (task leakage: the gap between leaving a run out and leaving its tasks out
    too; domain shift), the best feature set, calibration, and early detection."""
    card = study.detector.card
    protocols = study.detector.protocols.set_index("protocol")
    runs = study.runs
    lines = [f"**{len(runs)} runs, {card['n']} labelled trajectories, {card['n_failures']} failures** "
             f"({', '.join(card['domains'])}; agents {', '.join(sorted(set(runs['agent'].dropna())))}). Every number "
             "is a pooled within-run AUROC (failures and successes of the same run only) of scores the model made "
             "without seeing the trajectory; intervals resample tasks within runs; a detector *beats* a baseline only "
             "when the paired interval of the difference lies above 0."]
    for _, row in protocols.reset_index().iterrows():
        if pd.notna(row.get("auroc")):
            lines.append(protocol_sentence(row))
        else:
            lines.append(f"**{PROTOCOL_WORDS.get(row['protocol'], row['protocol'])}**: {row.get('note', 'undefined')}.")
    traps = []
    if {"leave_one_run_out", "leave_run_and_task_out"} <= set(protocols.index):
        gap = protocols.loc["leave_one_run_out", "auroc"] - protocols.loc["leave_run_and_task_out", "auroc"]
        traps.append(f"**Task leakage**: leaving a run out but keeping its tasks (other agents' trajectories of them) "
                     f"in training gives {protocols.loc['leave_one_run_out', 'auroc']:.3f}; holding the tasks out too "
                     f"gives {protocols.loc['leave_run_and_task_out', 'auroc']:.3f} ({_plus_minus(gap)}): "
                     + ("part of what the detector learns across runs is which tasks are hard." if gap > 0.02 else
                        "the detector does not lean on having seen the tasks."))
    if {"leave_run_and_task_out", "leave_one_domain_out"} <= set(protocols.index) and \
            pd.notna(protocols.loc["leave_one_domain_out"].get("auroc")):
        shift = protocols.loc["leave_one_domain_out", "auroc"] - protocols.loc["leave_run_and_task_out", "auroc"]
        traps.append(f"**Domain shift**: trained on the other domains only, {protocols.loc['leave_one_domain_out', 'auroc']:.3f}"
                     f" ({_plus_minus(shift)} against the same-domain, task-disjoint protocol).")
    lines += traps
    if len(study.seen_tasks):
        lines.append(seen_tasks_sentence(study.seen_tasks))
    honest = "leave_run_and_task_out" if "leave_run_and_task_out" in protocols.index else protocols.index[0]
    ab = study.ablation[study.ablation["protocol"] == honest]
    if len(ab) > 1 and "auroc" in ab:
        ranked = ab[ab["auroc"].notna()].sort_values("auroc", ascending=False)
        best = ranked.iloc[0]
        lines.append(f"**Ablation** ({honest.replace('_', ' ')}): the best feature set is {best['feature_set']} "
                     f"({_ci(best, 'auroc')}, {best['vs_length']} length); then "
                     + "; ".join(f"{r.feature_set} {r.auroc:.3f}" for r in ranked.iloc[1:].itertuples()) + ".")
    policy = policy_sentence(study.ablation)
    if policy:
        lines.append(policy)
    if "calibration_ece" in protocols:
        row = protocols.loc[honest]
        across = row.get("calibration_auroc_across_runs")
        lines.append(f"**Calibration** ({honest.replace('_', ' ')}, each run's probabilities from a Platt map of the "
                     f"other runs): ECE {row['calibration_ece']:.3f}, Brier {row['calibration_brier']:.3f} over "
                     f"{int(row['calibration_n'])} trajectories"
                     + (f"; ranked all together, across runs, their AUROC is {across:.3f}" if pd.notna(across) else "")
                     + ".")
    early = study.detector.early
    if len(early):
        turns = early[early["prefix"] == "turns"].sort_values("value")
        if len(turns):
            first = turns.iloc[0]
            ahead = turns[turns["diff_vs_length_lo"] > 0]
            lines.append(f"**Early detection** ({early['protocol'].iloc[0].replace('_', ' ')}): after "
                         f"{int(first['value'])} agent turn(s) the detector reaches {first['auroc']:.3f} against "
                         f"{first['length_auroc']:.3f} for the length so far; "
                         + (f"it beats the length so far from {int(ahead['value'].iloc[0])} agent turns on."
                            if len(ahead) else "at no prefix does it beat the length so far."))
    return "\n\n".join(lines)


def seen_tasks_sentence(split: pd.DataFrame) -> str:
    """The seen-task decomposition in a sentence (:func:`seen_task_split`)."""
    parts = split.set_index("tasks")
    text = "**Seen and new tasks** (each run left out):"
    if "seen" in parts.index and pd.notna(parts.loc["seen"].get("auroc")):
        s = parts.loc["seen"]
        text += (f" on the {int(s['n'])} trajectories whose task another run holds, the detector reaches "
                 f"{s['auroc']:.3f}, the task's failure rate in the other runs {s.get('prior_auroc', float('nan')):.3f}"
                 f" (the detector adds {s.get('diff_vs_prior', float('nan')):+.3f} over what the task's history alone "
                 f"gives: {s.get('vs_prior')} it) and length {s['length_auroc']:.3f}")
    if "new" in parts.index and pd.notna(parts.loc["new"].get("auroc")):
        n = parts.loc["new"]
        text += (f"; on the {int(n['n'])} whose task no other run holds, {n['auroc']:.3f} against "
                 f"{n['length_auroc']:.3f} for length ({n['vs_length']} it)")
    return text + "."


def policy_sentence(ablation: pd.DataFrame) -> str | None:
    """How the policy-grounded events fared (:data:`POLICY_SET` against :data:`FULL_SET`, and alone), per protocol."""
    if "feature_set" not in ablation or POLICY_SET not in set(ablation["feature_set"]):
        return None
    t = ablation.set_index(["feature_set", "protocol"])["auroc"]
    parts = []
    for protocol in dict.fromkeys(ablation["protocol"]):
        with_, without = t.get((POLICY_SET, protocol)), t.get((FULL_SET, protocol))
        alone = t.get(("policy events", protocol))
        if with_ is None or without is None or pd.isna(with_) or pd.isna(without):
            continue
        parts.append(f"{protocol.replace('_', ' ')} {without:.3f} → {with_:.3f} ({_plus_minus(with_ - without)}"
                     + (f"; alone {alone:.3f}" if alone is not None and pd.notna(alone) else "") + ")")
    if not parts:
        return None
    return ("**Policy-grounded events** (a write without the user's confirmation, a failed call repeated, a request "
            "for a human, the user restating the goal, …; meant to carry to new tasks), added to the four groups: "
            + "; ".join(parts) + ".")


#: the committed copy of the study's findings, which the README's headline numbers are checked against
COMMITTED_FINDINGS = "docs/findings/detector.json"


def _three(x) -> str | None:
    return None if x is None or pd.isna(x) else f"{float(x):.3f}"


def _signed(x) -> str | None:
    return None if x is None or pd.isna(x) else _plus_minus(x)


def findings_record(study: DetectorStudy) -> dict:
    """Every headline number of the study as the notebook and the README print them (AUROCs to three decimals,
    differences signed), with the runs they were measured on: what ``findings.json`` holds."""
    from agentuq_nb.common.naming import short_model_name

    card = study.detector.card
    runs = [{"run": r.name, "agent_and_domain": " · ".join(p for p in (short_model_name(r.agent) if r.agent else None,
                                                                         r.domain) if p),
             "trajectories": int(r.n_labelled), "failures": int(r.n_failures)} for r in study.runs.itertuples()]
    record: dict = {"study": "params/detector.yaml (notebook 14_detector)", "runs": runs, "n_runs": len(runs),
                    "n_trajectories": int(card["n"]), "n_failures": int(card["n_failures"]),
                    "domains": card["domains"], "feature_groups": card["feature_groups"],
                    "model": card["settings"]["model"],
                    "interval": "95 % percentile bootstrap, tasks resampled within runs; 'beats' = the paired interval "
                                "of the difference lies above 0", "protocols": {}}
    for row in study.detector.protocols.to_dict("records"):
        if pd.isna(row.get("auroc")):
            record["protocols"][row["protocol"]] = {"note": row.get("note")}
            continue
        entry = {"auroc": _three(row["auroc"]), "ci": [_three(row["auroc_lo"]), _three(row["auroc_hi"])],
                 "length_baseline": row["length_baseline"], "length_auroc": _three(row["length_auroc"]),
                 "length_ci": [_three(row["length_auroc_lo"]), _three(row["length_auroc_hi"])],
                 "diff_vs_length": _signed(row["diff_vs_length"]),
                 "diff_vs_length_ci": [_signed(row["diff_vs_length_lo"]), _signed(row["diff_vs_length_hi"])],
                 "vs_length": row["vs_length"], "ece": _three(row.get("calibration_ece")),
                 "auroc_across_runs": _three(row.get("calibration_auroc_across_runs"))}
        if pd.notna(row.get("prior_auroc")):
            entry.update(prior_n=int(row["prior_n"]), prior_auroc=_three(row["prior_auroc"]),
                         prior_ci=[_three(row["prior_auroc_lo"]), _three(row["prior_auroc_hi"])],
                         diff_vs_prior=_signed(row["diff_vs_prior"]),
                         diff_vs_prior_ci=[_signed(row["diff_vs_prior_lo"]), _signed(row["diff_vs_prior_hi"])],
                         vs_prior=row["vs_prior"])
        if pd.notna(row.get("same_model_auroc")):
            entry["same_model"] = {"auroc": _three(row["same_model_auroc"]),
                                   "ci": [_three(row["same_model_auroc_lo"]), _three(row["same_model_auroc_hi"])],
                                   "length_auroc": _three(row["same_model_length_auroc"]),
                                   "diff_vs_length": _signed(row["same_model_diff_vs_length"]),
                                   "diff_vs_length_ci": [_signed(row["same_model_diff_vs_length_lo"]),
                                                         _signed(row["same_model_diff_vs_length_hi"])],
                                   "vs_length": row["same_model_vs_length"]}
        record["protocols"][row["protocol"]] = entry
    if len(study.seen_tasks):
        record["seen_tasks"] = {r["tasks"]: {k: (_three(r.get(k)) if "diff" not in k else _signed(r.get(k)))
                                             for k in ("auroc", "length_auroc", "prior_auroc", "diff_vs_length",
                                                       "diff_vs_prior") if r.get(k) is not None and pd.notna(r.get(k))}
                                | {"n": int(r["n"]), **{k: r[k] for k in ("vs_length", "vs_prior")
                                                        if isinstance(r.get(k), str)}}
                                for r in study.seen_tasks.to_dict("records") if pd.notna(r.get("auroc"))}
    card = study.detector.card
    record["selection"] = {name: {"selected": row.get("selected"), "selected_folds": row.get("selected_folds")}
                           for name, row in card["protocols"].items()}
    record["selection"]["final"] = {"selected": card["final_model"]["selected"],
                                    "fallback": card["final_model"].get("fallback")}
    shift = (card.get("calibration") or {}).get("label_shift") or {}
    if shift.get("summary"):
        s = shift["summary"]
        record["probabilities"] = {
            "runs_brier_le_base_rate": f"{s['runs_brier_adapted_le_base_rate']} of {s['n_runs']}",
            "rate_mae": _three(s["rate_mae"]), "mean_brier": _three(s["mean_brier_adapted"]),
            "mean_brier_base_rate": _three(s["mean_brier_base_rate"]), "mean_ece": _three(s["mean_ece_adapted"]),
            "mean_brier_training_rate": _three(s.get("mean_brier_training_rate")),
            "mean_brier_true_rate_centred": _three(s.get("mean_brier_true_rate_centred")),
            "mean_brier_training_rate_centred": _three(s.get("mean_brier_training_rate_centred")),
            "rate_mae_training_rate": _three(s.get("rate_mae_training_rate")),
            "runs_rate_moved_by_agent": s.get("runs_agent_informed"),
            "interval_covers_true_rate": f"{s['interval_covers_true_rate']} of {s['n_runs']}",
            "prior_strength": shift.get("prior_strength"),
            "runs": [{"run": r["run"], "true_rate": _three(r["true_rate"]), "estimated_rate": _three(r["estimated_rate"]),
                      "estimated_rate_interval": [_three(r.get("estimated_rate_lo")), _three(r.get("estimated_rate_hi"))],
                      "brier": _three(r["brier_adapted"]), "brier_base_rate": _three(r["brier_base_rate"]),
                      "brier_training_rate": _three(r.get("brier_training_rate")),
                      "agent_runs": r.get("agent_runs"),
                      "brier_training_rate_centred": _three(r.get("brier_training_rate_centred")),
                      "ece": _three(r["ece_adapted"])} for r in shift["runs"]]}
    ablation = study.ablation[study.ablation["auroc"].notna()] if "auroc" in study.ablation else study.ablation
    record["ablation"] = {f"{r.feature_set} | {r.protocol}": _three(r.auroc) for r in ablation.itertuples()}
    early = study.detector.early
    if len(early):
        record["early_detection"] = [{"prefix": r.prefix, "value": None if pd.isna(r.value) else float(r.value),
                                      "auroc": _three(r.auroc), "length_auroc": _three(r.length_auroc),
                                      "vs_length": r.vs_length} for r in early.itertuples()]
    return record


def headline(record: dict, protocol: str = "leave_run_and_task_out") -> str:
    """The README's paragraph, from :func:`findings_record`: the runs, the run- and task-disjoint protocol's AUROC
    against length and the task prior, and the traps (task leakage, domain shift)."""
    protocols = record["protocols"]
    row = protocols[protocol]

    def ci(entry, key="auroc", interval="ci"):
        return f"{entry[key]} [{entry[interval][0]}, {entry[interval][1]}]"

    text = (f"**A learned failure detector across {record['n_runs']} shared runs** (`params/detector.yaml`, notebook "
            f"14: {record['n_trajectories']} trajectories, {record['n_failures']} failures; "
            f"{', '.join(record['domains'])}; each run and every number here: [{COMMITTED_FINDINGS}]"
            f"({COMMITTED_FINDINGS})), judged on each run left out *with its tasks*: pooled AUROC {ci(row)} against "
            f"{ci(row, 'length_auroc', 'length_ci')} for `{row['length_baseline']}` ({row['diff_vs_length']} "
            f"[{row['diff_vs_length_ci'][0]}, {row['diff_vs_length_ci'][1]}]: {row['vs_length']} length)")
    if row.get("prior_auroc"):
        text += f" and {ci(row, 'prior_auroc', 'prior_ci')} for the task's failure rate in the other runs " \
                f"({row['vs_prior']} it)"
    text += "."
    loro = protocols.get("leave_one_run_out", {})
    if loro.get("auroc"):
        bought = ("the gap is what having seen the tasks buys" if loro["auroc"] > row["auroc"] else
                  "having seen the tasks buys it nothing here")
        text += (f" With other agents' trajectories of the same tasks in training it reaches {ci(loro)} "
                 f"({loro['vs_length']} length): {bought}.")
    seen = record.get("seen_tasks", {})
    if seen.get("seen", {}).get("prior_auroc"):
        s = seen["seen"]
        text += (f" On the {s['n']} trajectories whose task another run holds, it reaches {s['auroc']} against "
                 f"{s['prior_auroc']} for the task's history alone ({s['diff_vs_prior']}: {s['vs_prior']} it)"
                 + (f"; on the {seen['new']['n']} of new tasks, {seen['new']['auroc']} against "
                    f"{seen['new']['length_auroc']} for length" if seen.get("new", {}).get("auroc") else "") + ".")
    lodo = protocols.get("leave_one_domain_out", {})
    if lodo.get("auroc"):
        text += f" Trained on the other domains only: {ci(lodo)} ({lodo['vs_length']} length)."
    ablation = record.get("ablation", {})
    policy = ablation.get(f"{POLICY_SET} | {protocol}")
    if policy and ablation.get(f"{FULL_SET} | {protocol}"):
        text += (f" Policy-grounded events (a write without the user's confirmation, a failed call repeated, …) "
                 f"added to the features: {ablation[f'{FULL_SET} | {protocol}']} → {policy} on new runs and tasks.")
    if row.get("auroc_across_runs"):
        text += (f" Ranked all at once, across runs, its held-out probabilities reach an AUROC of "
                 f"{row['auroc_across_runs']}: a mixed batch of agents is not sorted by how often each fails.")
    return text


def ablation_table(study: DetectorStudy) -> pd.DataFrame:
    """The ablation as a compact table: feature set × protocol → AUROC [CI] and the verdicts."""
    t = study.ablation
    out = t[["feature_set", "protocol", "auroc", "auroc_lo", "auroc_hi", "length_auroc", "diff_vs_length",
             "vs_length", "prior_auroc", "vs_prior"]].copy()
    return out.round(3)
