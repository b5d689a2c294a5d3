"""What a notebook's run found, in sentences made from its numbers when the notebook runs, so that its prose
cannot go stale (the notebooks show them with ``IPython.display.Markdown``): the action-resampling study
(notebook 10), the calibration study (notebook 11) and a study's record of what it found (:func:`study_record`,
written by notebook 11 as ``findings.json`` beside the figures; the quickstart's is committed as
``docs/findings/quickstart.json``, which the README's quickstart paragraph may only quote). Notebook 13's sentences
are :func:`agentuq_nb.pipeline.real_runs.findings`."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.common.wording import counted
from agentuq_nb.estimators.base import combination_families, reference_families
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.action_uq import saturation

#: above this share of decision points at the maximum spread the action estimators are called saturated (most points)
SATURATED_SHARE = 0.5


def _ci(row) -> str:
    lo, hi = row.get("auroc_lo"), row.get("auroc_hi")
    return f" [{lo:.2f}, {hi:.2f}]" if pd.notna(lo) and pd.notna(hi) else ""


def _auroc(table: pd.DataFrame, name: str) -> str:
    row = table[table["estimator"] == name]
    if row.empty or pd.isna(row["auroc"].iloc[0]):
        return f"`{name}`: undefined"
    r = row.iloc[0]
    return f"`{name}` {r['auroc']:.3f}{_ci(r)} (n = {int(r['n'])})"



def action_findings(turns: pd.DataFrame, rewards: pd.DataFrame, table: pd.DataFrame, k: int, temperature: float,
                    limit: int | None = None, failure_threshold: float = DEFAULT_FAILURE_THRESHOLD) -> str:
    """Notebook 10's findings from ``action_turns`` (``turns``), the run's rewards (keys + ``reward``) and the
    estimator table: what was sampled, whether the action estimators saturate at this ``k`` and ``temperature``,
    and how the action estimators (mean over decision points) rank against the token NLL and length."""
    if turns.empty:
        return "No decision point was sampled: there is nothing to report."
    considered = len(rewards) if limit is None else min(int(limit), len(rewards))
    keyed = turns.merge(rewards[[*TRAJECTORY_KEYS, "reward"]], on=TRAJECTORY_KEYS, how="left")
    keyed["failed"] = keyed["reward"].astype(float) < failure_threshold
    trajectories = keyed.drop_duplicates(TRAJECTORY_KEYS)
    n_traj, n_fail = len(trajectories), int(trajectories["failed"].sum())
    sampler = turns["sampler_model"].iloc[0]
    kind = turns["sampler_kind"].iloc[0]
    lines = [f"**{counted(considered, 'simulation')} sampled, {counted(len(turns), 'decision point')} in "
             f"{counted(n_traj, 'trajectory', 'trajectories')} of them** ({n_fail} failed, {n_traj - n_fail} "
             f"succeeded; {considered - n_traj} have no decision point: the conversation ended before the agent's "
             f"first reply). K = {k} samples per point at temperature {temperature:g} from `{sampler}` ({kind}), "
             f"{int(turns['k'].sum())} samples."]
    sat = saturation(turns)
    by = {o: saturation(keyed[keyed["failed"] == (o == "failure")]) for o in ("success", "failure")}
    verdict = (f"**The action estimators saturate at K = {k} and temperature {temperature:g}**: at most decision "
               "points the samples are spread as far as K allows, whatever the outcome, so they can tell little apart."
               if sat["share_all_distinct"] > SATURATED_SHARE else
               f"The action estimators do not saturate at K = {k} and temperature {temperature:g}: most decision points "
               "leave room for more or less spread.")
    lines.append(
        f"**Saturation.** At {sat['all_distinct']} of {sat['points']} decision points "
        f"({sat['share_all_distinct']:.0%}) every sample fell in a cluster of its own ({k} clusters of {k}); at "
        f"{sat['no_agreement']} ({sat['share_no_agreement']:.0%}) no sample agreed with the action the agent took "
        f"(agreement 0); {sat['taken_malformed']} taken actions are malformed calls. Median clusters: successes "
        f"{by['success']['median_clusters']:.1f}, failures {by['failure']['median_clusters']:.1f}; mean agreement: "
        f"successes {by['success']['mean_agreement']:.2f}, failures {by['failure']['mean_agreement']:.2f}. {verdict}")
    ranked = table[np.isfinite(table["auroc"].to_numpy(dtype=float))].sort_values("auroc", ascending=False)
    ranked = ranked.reset_index(drop=True)
    actions = ranked[(ranked["family"] == "action") & ranked["estimator"].str.endswith(".mean")]
    if len(actions):
        best = actions.iloc[0]
        rank = int(ranked.index[ranked["estimator"] == best["estimator"]][0]) + 1
        excl = actions[(actions["auroc_lo"] > 0.5) | (actions["auroc_hi"] < 0.5)]
        same = table.loc[table["same_scores_as"] == best["estimator"], "estimator"].tolist() \
            if "same_scores_as" in table else []
        alias = f" (its scores are those of {', '.join(f'`{a}`' for a in same)} too)" if same else ""
        base = ranked[ranked["family"].isin(reference_families())]
        lines.append(
            "**Failure prediction** (AUROC, 95% CI; intervals resample tasks when tasks repeat). Action estimators, "
            "mean over a trajectory's decision points: " + ", ".join(_auroc(table, e) for e in actions["estimator"])
            + f". The best, `{best['estimator']}`, ranks {rank} of the {len(ranked)} estimators with a defined "
            f"AUROC{alias}. Against: the agent's mean token NLL {_auroc(table, 'assistant.avg_token_nll')}"
            + (f"; the best length baseline {_auroc(table, base.iloc[0]['estimator'])}" if len(base) else "")
            + f". {len(excl)} of the {len(actions)} action intervals exclude{'s' if len(excl) == 1 else ''} chance (0.5)"
            + (": with this few scored trajectories a ranking to test on a larger sample, not evidence."
               if len(excl) == 0 or n_traj < 100 else "."))
    return "\n\n".join(lines)


def _tuned_in_sample(name: str) -> bool:
    """An estimator fitted on the labels of the run it scores (TRACER's in-sample readout), not out of fold
    (``tracer.nested`` and the combinations saw labels of other tasks only: they stay)."""
    from agentuq_nb.estimators import get

    try:
        return get(name).in_sample
    except KeyError:  # combined predictors are rows of the table, not all registered under their row's name
        return False


def diagram_estimators(calibrated: pd.DataFrame, method: str = "platt") -> list[str]:
    """The reliability curves worth drawing: the estimator with the lowest cross-fitted Brier score (the most
    useful failure probability; never one tuned on the run's own labels, such as ``tracer.optimistic``) and the
    length baseline with the lowest (what length alone gives)."""
    t = calibrated[(calibrated["setting"] == "cross_fitted") & calibrated["method"].isin([method, "logistic"])]
    t = t[~t["estimator"].map(_tuned_in_sample)]
    t = t.dropna(subset=["brier"]).sort_values("brier", kind="stable")
    chosen = []
    for part in (t[~t["family"].isin(reference_families())], t[t["family"].isin(reference_families())]):
        if len(part):
            chosen.append(part["estimator"].iloc[0])
    return chosen


def calibration_findings(report: dict, calibrated: pd.DataFrame, n_bins: int) -> str:
    """Notebook 11's findings from the calibration report and :func:`~agentuq_nb.evaluation.calibration.calibration_table`:
    the cross-fitting actually used, what a bin's sampling noise is at this size, the best and worst probabilities
    by Brier score, and where the debiased ECE exceeds the plain one (and why it may)."""
    n, fails = int(report["n"]), int(report["n_failures"])
    rate = fails / n if n else float("nan")
    per_bin = n / max(n_bins, 1)
    se = float(np.sqrt(rate * (1 - rate) / per_bin)) if per_bin > 0 and np.isfinite(rate) else float("nan")
    lines = [f"**{n} trajectories, {fails} failures** (failure rate {rate:.2f}). Cross-fitting: "
             f"{report['cross_fitting']}.",
             f"With {n_bins} equal-mass bins of about {per_bin:.0f} trajectories, a bin's observed failure rate has a "
             f"sampling standard error of about {se:.2f} at this failure rate: scatter of that size around the "
             "diagonal is noise, not miscalibration."]
    t = calibrated[calibrated["setting"] == "cross_fitted"].dropna(subset=["brier"])
    honest = t[~t["estimator"].map(_tuned_in_sample)]  # not tuned on this run's own labels
    if len(honest):
        best, worst = honest.sort_values("brier").iloc[0], honest.sort_values("brier").iloc[-1]
        lines.append(
            f"The table is ordered by the Brier score (lower is better), not by ECE: a predictor that always says "
            f"the base rate has an ECE near 0 and no resolution. Best: `{best['estimator']}` ({best['method']}) "
            f"Brier {best['brier']:.3f}, resolution {best['resolution']:.4f}; worst: `{worst['estimator']}` "
            f"({worst['method']}) Brier {worst['brier']:.3f}; the base rate alone scores {rate * (1 - rate):.3f}"
            + (" (estimators tuned on this run's own labels, such as `tracer.optimistic`, left out)."
               if len(honest) < len(t) else "."))
        above = t[t["ece_debiased"] > t["ece"]]
        lines.append(
            f"`ece_debiased` exceeds `ece` in {len(above)} of {len(t)} rows. They measure different things: `ece` is "
            "the mean absolute gap over bins (L1), `ece_debiased` the root mean squared gap (L2) with each bin's "
            "sampling variance taken out. A root mean square is at least the mean absolute value (equal only when "
            "every bin's gap is the same size), so where the gaps differ between bins and the sampling correction "
            "is small, the debiased L2 figure is the larger one.")
    return "\n\n".join(lines)


#: the quickstart's record, committed: the README's quickstart paragraph quotes only numbers it holds (a test checks)
COMMITTED_QUICKSTART = "docs/findings/quickstart.json"
#: the interval level of the estimator table's AUROCs: at this level, this share of intervals excludes chance by chance
CHANCE_SHARE = 0.05
#: the estimator that counts the trajectories the agent's estimators score (those with an agent turn)
AGENT_ESTIMATOR = "assistant.avg_token_nll"


def _row(r) -> dict:
    return {"estimator": r["estimator"], "auroc": round(float(r["auroc"]), 3), "lo": round(float(r["auroc_lo"]), 3),
            "hi": round(float(r["auroc_hi"]), 3), "n": int(r["n"])}


def study_record(name: str, rewards: pd.DataFrame, table: pd.DataFrame, action_turns: pd.DataFrame | None = None,
                 failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, domain: str | None = None,
                 models: dict[str, str] | None = None) -> dict:
    """What a study on one run found, as numbers: its size (simulations, tasks, trials, failures, and how many the
    agent's estimators score), the estimator table's spread (estimators with a defined AUROC, the median width of
    their intervals), which intervals exclude chance against how many would by chance, each with the estimators
    that repeat its scores and whether it was tuned on the run's own labels, the cross-fitted combinations, the best
    length baseline and (``action_turns``) whether the action estimators saturate. ``rewards``: keys + ``reward``;
    ``table``: ``compare-estimators``' table; ``domain`` and ``models`` (role -> model): what the run was, as its
    manifest says."""
    failed = rewards["reward"].astype(float) < failure_threshold
    trials = rewards.groupby("task_id").size()
    defined = table[np.isfinite(table["auroc"].to_numpy(dtype=float))]
    width = (defined["auroc_hi"] - defined["auroc_lo"]).dropna()
    same = defined["same_scores_as"].fillna("") if "same_scores_as" in defined else pd.Series("", defined.index)
    in_sample = defined["in_sample"].fillna(False).astype(bool) if "in_sample" in defined \
        else pd.Series(False, defined.index)
    excl = defined[(defined["auroc_lo"] > 0.5) | (defined["auroc_hi"] < 0.5)]
    excluded = []
    for i, r in excl.iterrows():
        if same[i] and same[i] in set(excl["estimator"]):
            continue  # one estimator under another name: listed with the row whose scores it repeats
        row = _row(r)
        row["same_scores"] = sorted(defined.loc[same == r["estimator"], "estimator"])
        row["in_sample"] = bool(in_sample[i])
        row["family"] = r["family"]
        excluded.append(row)
    agent = defined[defined["estimator"] == AGENT_ESTIMATOR]
    base = defined[defined["family"].isin(reference_families())].sort_values("auroc", ascending=False)
    record = {
        "study": name, "domain": domain, "models": dict(models or {}), "n_trajectories": len(rewards), "n_tasks": int(trials.size),
        "trials_per_task": {"min": int(trials.min()), "max": int(trials.max())} if trials.size else None,
        "n_failures": int(failed.sum()), "n_successes": int((~failed).sum()),
        "n_agent_scored": int(agent["n"].iloc[0]) if len(agent) else 0,
        "failure_threshold": failure_threshold,
        "n_estimators": len(defined), "median_interval_width": round(float(width.median()), 2) if len(width) else None,
        "interval_level": 1 - CHANCE_SHARE,
        "n_excluding_chance": len(excl), "expected_by_chance": round(CHANCE_SHARE * len(defined), 1),
        "excluding_chance": excluded,
        "combined": [_row(r) for _, r in defined[defined["family"].isin(combination_families())].iterrows()],
        "length": _row(base.iloc[0]) if len(base) else None,
    }
    if action_turns is not None and len(action_turns):
        sat = saturation(action_turns)
        record["actions"] = {"k": int(action_turns["k"].max()), "points": sat["points"],
                             "all_distinct": sat["all_distinct"], "no_agreement": sat["no_agreement"]}
    return record


def study_findings(record: dict) -> str:
    """A study record (:func:`study_record`) in sentences: what ran, how wide the intervals are, what excludes
    chance against what would by chance, and what each such row is (one estimator under several names, a row
    tuned on the run's own labels)."""
    lines = [f"**{record['n_trajectories']} trajectories** ({record['n_tasks']} tasks; {record['n_successes']} "
             f"successes, {record['n_failures']} failures), {record['n_agent_scored']} with an agent turn to score. "
             f"{record['n_estimators']} estimators have a defined AUROC; the median width of their "
             f"{record['interval_level']:.0%} intervals is {record['median_interval_width']}."]
    rows = []
    for r in record["excluding_chance"]:
        names = " = ".join(f"`{n}`" for n in [r["estimator"], *r["same_scores"]])
        note = " (tuned on this run's own labels)" if r["in_sample"] else ""
        rows.append(f"{names} {r['auroc']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}] (n = {r['n']}){note}")
    lines.append(f"**{record['n_excluding_chance']} intervals exclude chance, where about "
                 f"{record['expected_by_chance']:g} of {record['n_estimators']} would by chance**"
                 + (": " + "; ".join(rows) + "." if rows else "."))
    if record["combined"]:
        lines.append("Cross-fitted combinations: " + ", ".join(f"`{r['estimator']}` {r['auroc']:.3f} [{r['lo']:.3f}, "
                                                                 f"{r['hi']:.3f}]" for r in record["combined"])
                     + (f"; the best length baseline `{record['length']['estimator']}` {record['length']['auroc']:.3f}"
                        f" [{record['length']['lo']:.3f}, {record['length']['hi']:.3f}]." if record["length"] else "."))
    if "actions" in record:
        a = record["actions"]
        lines.append(f"Action resampling at K = {a['k']}: {a['all_distinct']} of {a['points']} decision points have "
                     f"{a['k']} clusters of {a['k']}; at {a['no_agreement']} no sample agrees with the agent's action.")
    return "\n\n".join(lines)


#: a study's record beside its figures
FINDINGS_NAME = "findings.json"


def write_findings(record: dict, folder: str | os.PathLike, settings: dict | None = None,
                   inputs: Sequence[str | os.PathLike] | dict | None = None) -> Path:
    """``folder/findings.json``: a study's record (:func:`study_record`, the real-runs and detector studies' own),
    beside its figures, with what made it under ``provenance`` (:func:`~agentuq_nb.steps.provenance.provenance`):
    the package version, the study's ``settings`` (its notebook's parameters) and its ``inputs`` - results files,
    each hashed here (SHA-256 of its content), or ``{name: sha256}`` already known (a run folder's recorded
    ``results_sha256``)."""
    from agentuq_nb.io.atomic import atomic_write_json
    from agentuq_nb.steps.provenance import file_digest, provenance

    if not isinstance(inputs, dict):
        inputs = {str(p): file_digest(p) for p in (inputs or ())}
    record = {**record, "provenance": provenance(f"study {record.get('study', '')}".strip(), settings or {}, inputs)}
    path = Path(folder) / FINDINGS_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, record)
    return path
