"""The learned-detector study (notebook ``14_detector``, ``params/detector.yaml``): a failure detector trained on several
labelled runs, judged by every protocol against length and the task prior, its feature groups ablated, its early
detection and calibration, and the sentences that say what it found (:func:`findings`), made from the numbers.

The features of every trajectory are extracted once (all groups; the prefixes once per prefix); each ablation row is a
detector of a subset of the groups trained and judged on them (no folder written); the full detector (every group) is
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
from agentuq_nb.records.config import validation_message
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.steps.detector_inputs import corpus_features, resolve_sources
from agentuq_nb.steps.train_detector import TrainDetectorConfig, TrainedDetector, prefix_reader, train_on_features
from agentuq_nb.uq.detector_features import GROUPS

#: the ablation's feature sets: each group alone, the three content groups together, and all of them with length
ABLATION = {"text": ("text",), "structure + TRACER": ("blackbox",), "embeddings": ("embeddings",),
            "text + structure + TRACER + embeddings": ("text", "blackbox", "embeddings"),
            "all four, + length": GROUPS}
FULL_SET = "all four, + length"


@dataclass
class DetectorStudy:
    """The full detector (its folder written), the ablation (one row per feature set × protocol), the runs and the
    files skipped."""

    detector: TrainedDetector
    ablation: pd.DataFrame
    runs: pd.DataFrame
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


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
              ablation: bool = True) -> DetectorStudy:
    """The study of the module docstring on the results files that exist among ``results``."""
    skipped = {Path(f).stem: f"{f} not found (the shared real runs live in ../shared beside the repository)"
               for f in results if not Path(f).exists()}
    present = [Path(f) for f in results if Path(f).exists()]
    seconds: dict[str, float] = {}
    groups = GROUPS if embedder != "none" else tuple(g for g in GROUPS if g != "embeddings")
    base = dict(inputs=present, out=Path(run_dir) / "detector", failure_threshold=failure_threshold, n_boot=n_boot,
                seed=seed, embedder=embedder, model=model, n_splits=n_splits)
    full_config = study_config(**base, groups=list(groups), early_turns=list(early_turns),
                               early_fractions=list(early_fractions))  # the parameters checked before the work
    start = time.perf_counter()
    sources = resolve_sources(present)
    features = corpus_features(sources, groups, embedder, progress=True)
    seconds["features"] = time.perf_counter() - start
    prefixes = prefix_reader(sources, full_config)
    detector = train_on_features(features, sources, full_config, prefixes=prefixes,
                                 seconds={"features": seconds["features"]})
    seconds["detector"] = time.perf_counter() - start - seconds["features"]
    rows = [detector.protocols.assign(feature_set=FULL_SET if groups == GROUPS else "all extracted")]
    if ablation:
        tick = time.perf_counter()
        for name, subset in ABLATION.items():
            wanted = [g for g in subset if g in groups]
            if name == FULL_SET or len(wanted) < len(subset):
                continue
            result = train_on_features(features, sources, study_config(**base, groups=wanted), write=False)
            rows.append(result.protocols.assign(feature_set=name))
        seconds["ablation"] = time.perf_counter() - tick
    order = {name: i for i, name in enumerate(ABLATION)}
    table = pd.concat(rows, ignore_index=True)
    table = table.sort_values("feature_set", key=lambda s: s.map(order).fillna(len(order)), kind="stable")
    runs = pd.DataFrame([{k: r[k] for k in ("name", "domain", "layout", "n", "n_labelled", "n_failures")}
                         | {"agent": r["models"].get("assistant")} for r in detector.card["training_runs"]])
    return DetectorStudy(detector, table.reset_index(drop=True), runs, skipped, seconds)


# --------------------------------------------------------------------------- the sentences
def _ci(row, key: str) -> str:
    return f"{row[key]:.3f} [{row[f'{key}_lo']:.3f}, {row[f'{key}_hi']:.3f}]"


def _diff(row, key: str) -> str:
    return f"{row[key]:+.3f} [{row[f'{key}_lo']:+.3f}, {row[f'{key}_hi']:+.3f}]"


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
                     f"gives {protocols.loc['leave_run_and_task_out', 'auroc']:.3f} ({gap:+.3f}): "
                     + ("part of what the detector learns across runs is which tasks are hard." if gap > 0.02 else
                        "the detector does not lean on having seen the tasks."))
    if {"leave_run_and_task_out", "leave_one_domain_out"} <= set(protocols.index) and \
            pd.notna(protocols.loc["leave_one_domain_out"].get("auroc")):
        shift = protocols.loc["leave_one_domain_out", "auroc"] - protocols.loc["leave_run_and_task_out", "auroc"]
        traps.append(f"**Domain shift**: trained on the other domains only, {protocols.loc['leave_one_domain_out', 'auroc']:.3f}"
                     f" ({shift:+.3f} against the same-domain, task-disjoint protocol).")
    lines += traps
    honest = "leave_run_and_task_out" if "leave_run_and_task_out" in protocols.index else protocols.index[0]
    ab = study.ablation[study.ablation["protocol"] == honest]
    if len(ab) > 1 and "auroc" in ab:
        ranked = ab[ab["auroc"].notna()].sort_values("auroc", ascending=False)
        best = ranked.iloc[0]
        lines.append(f"**Ablation** ({honest.replace('_', ' ')}): the best feature set is {best['feature_set']} "
                     f"({_ci(best, 'auroc')}, {best['vs_length']} length); then "
                     + "; ".join(f"{r.feature_set} {r.auroc:.3f}" for r in ranked.iloc[1:].itertuples()) + ".")
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


#: the committed copy of the study's findings, which the README's headline numbers are checked against
COMMITTED_FINDINGS = "docs/findings/detector.json"


def _three(x) -> str | None:
    return None if x is None or pd.isna(x) else f"{float(x):.3f}"


def _signed(x) -> str | None:
    return None if x is None or pd.isna(x) else f"{float(x):+.3f}"


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
        text += (f" With other agents' trajectories of the same tasks in training it reaches {ci(loro)} "
                 f"({loro['vs_length']} length): the gap is what having seen the tasks buys.")
    lodo = protocols.get("leave_one_domain_out", {})
    if lodo.get("auroc"):
        text += f" Trained on the other domains only: {ci(lodo)}."
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
