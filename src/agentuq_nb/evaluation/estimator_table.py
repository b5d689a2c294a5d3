"""The estimator table: every registered estimator a run holds data for, on equal footing.

Per estimator (:mod:`agentuq_nb.estimators`, oriented by its own ``higher_is_uncertain``): AUROC,
AUARC (AgentUQ's, and ``auarc_tie_mean``, invariant to the order of ties), AURC, PRR and Spearman
with percentile bootstrap 95% CIs (:func:`failure_metrics`), and a
paired bootstrap p-value of the AUROC difference against the reference ``assistant.avg_token_nll``
(scorer ``self``; else the first assistant ``avg_token_nll`` of any scorer; a run without token log-probs has no
reference, and then ``reference`` is empty and ``p_value_vs_reference`` NaN in every row). When tasks repeat (several
trials), the bootstrap resamples tasks with all their trials (``groups``, :mod:`.bootstrap`). Beside them:

* calibration of the estimator's task-cross-fitted Platt probabilities (:mod:`.calibration`): ``ece``
  (equal-mass bins), ``ece_debiased`` (Kumar et al.'s debiased L2), ``brier``;
* length control (:mod:`.length_control`): ``auroc_stratified`` (within message-count strata),
  ``auroc_residual`` (after regressing on log message count) - both NaN for ``num_messages`` itself, whose strata
  are its own values (≈ 0.5 by construction, said in ``undefined``);
* the comparison with length, in raw AUROC throughout (the forest's dot, line and marker use the same numbers):
  ``length_baseline`` (the length baseline with the highest raw AUROC on the table's trajectories) and its
  ``length_baseline_auroc``; ``diff_vs_length`` = AUROC(estimator) - AUROC(that baseline) *on the trajectories both
  score* (``n_vs_length``), with a paired percentile 95% CI (``diff_vs_length_lo``, ``_hi``; the same resamples of
  tasks for both) and p-value ``p_value_vs_length`` (:func:`~agentuq_nb.evaluation.bootstrap.paired_bootstrap_pvalue`);
  ``beats_length_baseline`` (:func:`~agentuq_nb.evaluation.length_control.beats_length_baseline`): that interval
  lies above 0 and the estimator was not tuned on these labels;
* ``protocol`` (how an estimator fitted to the labels kept the scored trajectories out of its fit: empty for one that
  saw no label, ``cross-fitted by task``…, ``in-sample``; :attr:`~agentuq_nb.estimators.Estimator.protocol`) and
  ``in_sample``: an in-sample row
  (``tracer.optimistic``, tuned on the very labels it is evaluated on) is optimistic by construction and never
  beats length;
* ``same_scores_as``: the estimator whose oriented scores this one repeats exactly (one estimator under two names,
  :func:`same_scores_as`), else empty;
* rows of family ``combined`` (:mod:`.combined_predictor`, :data:`COMBINED`), each with and without the length
  baselines among its inputs (``…+length``), evaluated on their out-of-fold failure probabilities (their CIs
  hold the resampling, not the refitting): ``combined_predictor``, the cross-fitted logistic regression
  over a chosen set of estimators (default :data:`DEFAULT_COMBINED_INPUTS`); ``blackbox_logistic`` and
  ``blackbox_gbm``, logistic regression and gradient boosting over the black-box families (``structure``
  and ``tracer``, without TRACER's tuned readouts, which saw the labels).

Rows are ordered by ``auroc_stratified``, the length-controlled AUROC (descending, undefined last: :data:`SORT_COLUMN`).
Written to ``RUN_DIR/estimator_table.csv`` by the compare-estimators step (:mod:`agentuq_nb.steps.compare_estimators`),
which first brings the black-box families up to date (:func:`~agentuq_nb.steps.blackbox.run`).

Every trajectory of the run is a row (its reward from ``trajectories.parquet``); an estimator without
a score for a trajectory leaves it out of its own metrics (counted in ``n``).

A lighter view of a run, for a notebook comparing a few estimators: :func:`estimator_metrics` (AUROC with its CI and
AUARC of each, read through :func:`~agentuq_nb.estimators.scores.estimator_rows`).
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from agentuq_nb.common.progress import progress_bar
from agentuq_nb.estimators import BASELINES, Estimator, get
from agentuq_nb.estimators.base import IN_SAMPLE, blackbox_families, combination_families, reference_families
from agentuq_nb.estimators.combined import COMBINED, COMBINED_FAMILY
from agentuq_nb.estimators.scores import estimator_rows
from agentuq_nb.evaluation.bootstrap import paired_bootstrap_pvalue
from agentuq_nb.evaluation.calibration import calibration_report, cross_fitted_probabilities, oriented
from agentuq_nb.evaluation.combined_predictor import cross_fitted_combination
from agentuq_nb.evaluation.defaults import DEFAULT_FDR_Q, DEFAULT_N_BOOT
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.evaluation.length_control import beats_length_baseline, length_controlled
from agentuq_nb.evaluation.metrics import auroc
from agentuq_nb.evaluation.multi_trial import task_labels, tasks_repeat
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD, check_failure_threshold, row_failures
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

REPORTED_METRICS = ("auroc", "auarc", "auarc_tie_mean", "aurc", "prr", "spearman")
REFERENCE = "assistant.avg_token_nll"
#: the length every length-controlled AUROC holds fixed
LENGTH_COLUMN = "num_messages"
CALIBRATION_COLUMNS = ("ece", "ece_debiased", "brier")
#: the combined predictor's default inputs, one per kind of signal (those the run holds): the agent's token
#: NLL, entropy and worst token, the user's NLL, the tools' surprise, resampled actions, structural
#: uncertainty, SAUP. Not every estimator: ~90 collinear inputs on tens of trajectories only fit noise.
DEFAULT_COMBINED_INPUTS = ("assistant.avg_token_nll", "assistant.mean_topk_entropy", "assistant.min_chosen_prob",
                           "user.avg_token_nll", "observation_tool.avg_token_nll@agent_llm",
                           "action_semantic_entropy.mean", "structural.mean", "saup_rms")


def best_length_baseline(table: pd.DataFrame, failure: np.ndarray) -> tuple[str | None, float]:
    """``(name, AUROC)`` of the length baseline column of ``table`` with the highest raw AUROC (the first on ties;
    ``(None, NaN)`` when none is defined)."""
    best, value = None, float("nan")
    for name in BASELINES:
        if name in table.columns:
            u = table[name].to_numpy(dtype=float)
            ok = np.isfinite(u)
            if ok.sum() >= 2 and 0 < failure[ok].sum() < ok.sum():
                a = auroc(u[ok], failure[ok])
                if best is None or a > value:
                    best, value = name, a
    return best, value


def best_length_baseline_auroc(table: pd.DataFrame, failure: np.ndarray) -> float:
    """The highest raw AUROC of a length baseline column of ``table`` (NaN when none is defined)."""
    return best_length_baseline(table, failure)[1]


#: why the length-controlled AUROCs of the length the strata are made of are left out
SELF_STRATIFIED = (f"auroc_stratified, auroc_residual: the length control holds {LENGTH_COLUMN} fixed, this "
                   "estimator's own value (≈ 0.5 by construction)")


def _calibration_and_length(u: np.ndarray, failure: np.ndarray, groups: np.ndarray, length: np.ndarray | None,
                            n_bins: int, seed, is_probability: bool = False) -> dict:
    """ECE / debiased ECE / Brier of the task-cross-fitted Platt probabilities of the oriented score ``u`` (of
    ``u`` itself when it is already a cross-fitted probability), and its length-controlled AUROCs (the caller leaves
    them out for the length the strata are made of)."""
    row = dict.fromkeys(CALIBRATION_COLUMNS + ("auroc_stratified", "auroc_residual"), float("nan"))
    ok = np.isfinite(u)
    two_classes = 0 < failure[ok].sum() < ok.sum()
    if is_probability:
        prob = u
    elif two_classes and len(np.unique(groups[ok])) >= 2:
        prob = cross_fitted_probabilities(u, failure, groups, "platt", seed=seed).prob
    else:
        prob = None
    if prob is not None:
        rep = calibration_report(prob, failure, n_bins)
        row.update(ece=rep["ece"], ece_debiased=rep["ece_debiased"], brier=rep["brier"])
    if length is not None and two_classes:
        lc = length_controlled(u, failure, length)
        row.update(auroc_stratified=lc["auroc_stratified"], auroc_residual=lc["auroc_residual"])
    return row


def combined_inputs(table: pd.DataFrame, estimators: list[Estimator], with_length: bool,
                    names: list[str] | None = None, inputs: str = "chosen") -> pd.DataFrame:
    """The oriented input columns of a combined predictor, each with a finite score somewhere, plus (``with_length``)
    every length baseline column of ``table``. ``inputs="chosen"``: the estimators ``names`` (default: those of
    :data:`DEFAULT_COMBINED_INPUTS` among ``estimators``, else every one outside the baselines and the black-box
    families); ``inputs="blackbox"``: every estimator of the black-box families (``Family.blackbox``). Never an
    estimator fitted to the run's labels (``uses_labels``). No column when there is no such estimator, or when ``with_length`` and the table
    holds no length baseline (it would repeat the predictor without length)."""
    candidates = {e.name: e for e in estimators if e.family not in reference_families() and not e.uses_labels}
    if inputs == "blackbox":
        chosen = [e for e in candidates.values() if e.family in blackbox_families()]
    elif names is not None:
        unknown = [n for n in names if n not in candidates]
        if unknown:
            raise ValueError(f"combined predictor inputs {unknown} are not among this table's non-baseline "
                             f"estimators fitted without labels: {sorted(candidates)}")
        chosen = [candidates[n] for n in names]
    else:
        chosen = ([candidates[n] for n in DEFAULT_COMBINED_INPUTS if n in candidates]
                  or [e for e in candidates.values() if e.family not in blackbox_families()])
    cols = {e.name: oriented(table[e.name], e.invert) for e in chosen
            if np.isfinite(table[e.name].to_numpy(dtype=float)).any()}
    if with_length:
        lengths = {b: table[b].to_numpy(dtype=float) for b in BASELINES if b in table.columns}
        cols = {**cols, **lengths} if cols and lengths else {}
    return pd.DataFrame(cols, index=table.index)


def _reference(estimators: list[Estimator], reference: str) -> Estimator | None:
    ref = next((e for e in estimators if e.name == reference), None)
    if ref is None:  # no self-scored assistant: first assistant avg_token_nll of any scorer
        ref = next((e for e in estimators if e.role == "assistant" and e.statistic == "avg_token_nll"), None)
    return ref


def evaluate_estimators(table: pd.DataFrame, estimators: list[Estimator], failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                        n_boot: int = DEFAULT_N_BOOT, seed=0, reference: str = REFERENCE, n_bins: int = 10,
                        combine: bool = True, combined_input_names: list[str] | None = None,
                        progress: bool = False, gbm_grid: dict[str, list] | None = None) -> pd.DataFrame:
    """The estimator table from a score table (see the module docstring for the columns). The length control
    uses the table's ``num_messages`` column (see :func:`with_length_columns`); without it those columns
    are NaN. ``combine=False`` leaves out the combined predictor's rows; ``combined_input_names`` chooses its
    inputs (:func:`combined_inputs`) and ``gbm_grid`` the gradient boosting's tuning grid
    (:func:`~agentuq_nb.evaluation.combined_predictor.gbm_search_grid`); ``progress``: a bar on stderr counting the rows (each its bootstraps and
    cross-fitted calibration). Estimators that read the combinations' probabilities back (family
    ``combined``) are outputs of this table, not rows of it; :func:`evaluate_estimators_and_combinations`
    returns those probabilities too. A score table made with the run's outcomes (``score_table(run, names,
    run.outcomes(failure_threshold))``) carries their labels (``failed``), which are read, not made again."""
    return evaluate_estimators_and_combinations(table, estimators, failure_threshold, n_boot, seed, reference,
                                                n_bins, combine, combined_input_names, progress, gbm_grid)[0]


def evaluate_estimators_and_combinations(table: pd.DataFrame, estimators: list[Estimator],
                                         failure_threshold: float = DEFAULT_FAILURE_THRESHOLD, n_boot: int = DEFAULT_N_BOOT, seed=0,
                                         reference: str = REFERENCE, n_bins: int = 10, combine: bool = True,
                                         combined_input_names: list[str] | None = None, progress: bool = False,
                                         gbm_grid: dict[str, list] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`evaluate_estimators`, and the combinations' out-of-fold probabilities (trajectory keys + one
    column each). Returned apart, not in the table's ``attrs``: pandas compares attrs when it concatenates
    tables, and a frame there makes that comparison raise."""
    check_failure_threshold(failure_threshold)  # refused before any work
    estimators = [e for e in estimators if e.family not in combination_families()]
    table = table[np.isfinite(table["reward"].to_numpy(dtype=float))].reset_index(drop=True)
    reward = table["reward"].to_numpy(dtype=float)
    failure = row_failures(table, failure_threshold)  # the labels a table made with the run's outcomes carries
    groups = task_labels(table)  # the task: what cross-fitting holds out and the bootstrap resamples
    length = table[LENGTH_COLUMN].to_numpy(dtype=float) if LENGTH_COLUMN in table.columns else None
    ref = _reference(estimators, reference)
    baseline, baseline_auroc = best_length_baseline(table, failure)
    scored = [(est.name, est.family, est, table[est.name].to_numpy(dtype=float), est.invert, False)
              for est in estimators]
    combined_scores = table[TRAJECTORY_KEYS].copy()
    if combine:
        for name, spec in COMBINED.items():
            features = combined_inputs(table, estimators, spec.with_length, combined_input_names, spec.inputs)
            if features.shape[1] and 0 < failure.sum() < len(failure) and len(np.unique(groups)) >= 2:
                prob = cross_fitted_combination(features, failure, groups, seed=seed, model=spec.model,
                                                gbm_grid=gbm_grid).prob
                scored.append((name, COMBINED_FAMILY.name, None, prob, False, True))
                combined_scores[name] = prob
    rows = []
    bar = progress_bar(len(scored), "estimator table", "row", progress)
    for name, family, est, u, invert, is_probability in scored:
        rep = failure_metrics(u, reward, failure_threshold=failure_threshold, invert=invert,
                              n_boot=n_boot, seed=seed, groups=groups)
        row = {"estimator": name, "family": family, "scorer": getattr(est, "scorer", None),
               "role": getattr(est, "role", None), "statistic": getattr(est, "statistic", None), "invert": invert,
               "orientation": est.orientation if est is not None else "failure probability (cross-fitted)",
               "n": rep["n"], "n_failures": rep["n_failures"]}
        for m in REPORTED_METRICS:
            ci = rep["ci"].get(m)
            row[m] = rep["metrics"].get(m)
            row[f"{m}_lo"], row[f"{m}_hi"] = (ci[0], ci[1]) if ci else (None, None)
        row["reference"] = ref.name if ref is not None else None
        row["auroc_diff_vs_reference"] = None
        row["p_value_vs_reference"] = None
        if ref is not None and name != ref.name:
            p = paired_bootstrap_pvalue(u, table[ref.name].to_numpy(dtype=float), reward, metric="auroc",
                                        failure_threshold=failure_threshold, invert_a=invert,
                                        invert_b=ref.invert, n_boot=n_boot, seed=seed, groups=groups)
            row["auroc_diff_vs_reference"], row["p_value_vs_reference"] = p["diff"], p["p_value"]
        undefined = [f"{k}: {v}" for k, v in rep["undefined"].items()]
        row.update(_calibration_and_length(oriented(u, invert), failure, groups, length, n_bins, seed, is_probability))
        if name == LENGTH_COLUMN:
            row.update(auroc_stratified=float("nan"), auroc_residual=float("nan"))
            undefined.append(SELF_STRATIFIED)
        row["undefined"] = "; ".join(undefined) or None
        row.update(_versus_length(u, invert, name, family, est, baseline, table, reward, failure_threshold, n_boot, seed,
                                  groups))
        rows.append(row)
        bar.update()
    bar.close()
    out = pd.DataFrame(rows)
    for m in REPORTED_METRICS:
        for c in (m, f"{m}_lo", f"{m}_hi"):
            out[c] = out[c].astype(float)
    for c in ("auroc_diff_vs_reference", "p_value_vs_reference", *VERSUS_LENGTH[2:7]) + CALIBRATION_COLUMNS:
        out[c] = out[c].astype(float)
    out["same_scores_as"] = same_scores_as([(name, family, oriented(u, invert))
                                            for name, family, _, u, invert, _ in scored])
    out["length_baseline"] = baseline
    out["length_baseline_auroc"] = baseline_auroc
    out = out.sort_values(SORT_COLUMN, ascending=False, na_position="last", kind="stable").reset_index(drop=True)
    return out, combined_scores


#: the columns of the comparison with the best length baseline (:func:`_versus_length`)
VERSUS_LENGTH = ("protocol", "in_sample", "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi",
                 "p_value_vs_length", "n_vs_length", "beats_length_baseline")
#: the column the table is ordered by (descending, undefined last)
SORT_COLUMN = "auroc_stratified"


def _versus_length(u: np.ndarray, invert: bool, name: str, family: str, est: Estimator | None, baseline: str | None,
                   table: pd.DataFrame, reward: np.ndarray, failure_threshold: float, n_boot: int, seed,
                   groups: np.ndarray) -> dict:
    """A row's fitting protocol and its paired comparison with the best length baseline (see the module docstring):
    the AUROC difference on the trajectories both score, its paired task-resampled 95% CI and p-value, and
    whether it beats length. Length baselines are the comparators: no comparison."""
    protocol = (est or get(name)).protocol  # a combination's row: its registered estimator says how it was fitted
    row = dict.fromkeys(VERSUS_LENGTH, None)
    row.update(protocol=protocol, in_sample=protocol == IN_SAMPLE)
    if family in reference_families() or baseline is None:
        return row
    p = paired_bootstrap_pvalue(u, table[baseline].to_numpy(dtype=float), reward, metric="auroc",
                                failure_threshold=failure_threshold, invert_a=invert, n_boot=n_boot, seed=seed,
                                groups=groups)
    lo, hi = p["ci"] or (None, None)
    row.update(diff_vs_length=p["diff"], diff_vs_length_lo=lo, diff_vs_length_hi=hi, p_value_vs_length=p["p_value"],
               n_vs_length=p["n"], beats_length_baseline=beats_length_baseline(lo, row["in_sample"]))
    return row


def length_verdicts(table: pd.DataFrame, q: float = DEFAULT_FDR_Q) -> pd.DataFrame:
    """The run's tests against the best length baseline, corrected for their number: the ``p_value_vs_length`` of
    every row that is tested (not a length baseline, not tuned in-sample, a finite p-value) Benjamini-Hochberg
    adjusted across those rows (statsmodels, :func:`~agentuq_nb.evaluation.conformal.bh_adjusted`), aligned with
    ``table``: ``q_value_vs_length`` (NaN where untested) and ``verdict`` - ``beats length`` / ``below length``
    (q ≤ ``q``, the difference's sign) / ``not distinguishable`` / None (untested). The row-wise
    ``beats_length_baseline`` (its own 95% interval above 0) is uncorrected: with 24 tests a run, about one
    crosses by chance."""
    from agentuq_nb.evaluation.conformal import bh_adjusted

    if "p_value_vs_length" not in table:
        return pd.DataFrame({"q_value_vs_length": np.nan, "verdict": None}, index=table.index)
    p = pd.to_numeric(table["p_value_vs_length"], errors="coerce").to_numpy(dtype=float)
    in_sample = table.get("in_sample", pd.Series(False, index=table.index)).astype(str).eq("True").to_numpy()
    tested = np.isfinite(p) & ~table["family"].isin(reference_families()).to_numpy() & ~in_sample
    qv = np.full(len(table), np.nan)
    if tested.any():
        qv[tested] = bh_adjusted(p[tested])
    diff = pd.to_numeric(table.get("diff_vs_length"), errors="coerce").to_numpy(dtype=float)
    verdict = np.where(~tested, None, np.where(qv > q, "not distinguishable",
                                                np.where(diff > 0, "beats length", "below length")))
    return pd.DataFrame({"q_value_vs_length": qv, "verdict": verdict}, index=table.index)


def same_scores_as(scores: list[tuple[str, str, np.ndarray]]) -> list[str | None]:
    """Per ``(name, family, oriented scores)``, in order: the name of the first earlier estimator of the same family
    whose oriented scores are identical on every trajectory (missing ones included), else None. Such estimators are
    one estimator under several names (e.g. ``action_agreement.mean``, ``.min`` and ``.first3`` when every
    trajectory has one decision point); the forest plot draws them as one row. An estimator without any finite
    score is no one's alias; across families nothing is (a length baseline stays a row of its own)."""
    first: dict[tuple[str, bytes], str] = {}
    out: list[str | None] = []
    for name, family, u in scores:
        v = np.asarray(u, dtype=float) + 0.0  # -0.0 == 0.0
        if not np.isfinite(v).any():  # no score at all: nothing to be the same as
            out.append(None)
            continue
        key = (family, np.where(np.isnan(v), np.nan, v).tobytes())  # one bit pattern for every NaN
        out.append(first.get(key))
        first.setdefault(key, name)
    return out


def estimator_metrics(run_dir: str | os.PathLike | RunDir, parts: dict[str, str], failure_threshold: float = DEFAULT_FAILURE_THRESHOLD,
                      n_boot: int = DEFAULT_N_BOOT, seed: int = 0, min_rows: int = 2) -> pd.DataFrame:
    """AUROC (with CI) and AUARC of several estimators, one row per ``{label: estimator name}``;
    an estimator the run has no data for, or fewer than ``min_rows`` trajectories, is left out.
    ``resampled`` says what the bootstrap drew: ``trajectories``, or ``tasks`` when a task repeats
    (the task-clustered bootstrap)."""
    check_failure_threshold(failure_threshold)
    run = RunDir.of(run_dir)
    out = []
    for label, name in parts.items():
        estimator = get(name)
        if not estimator.is_available(run):
            continue
        rows = estimator_rows(run, estimator)
        if len(rows) < min_rows:
            continue
        repeated = tasks_repeat(rows)
        m = failure_metrics(rows["uncertainty"].to_numpy(dtype=float), rows["reward"].to_numpy(float),
                            failure_threshold, invert=estimator.invert, n_boot=n_boot, seed=seed,
                            groups=task_labels(rows) if repeated else None)
        ci = m["ci"].get("auroc") or [None, None]
        out.append({"part": label, "estimator": name, "n": m["n"], "auroc": m["metrics"]["auroc"], "auroc_lo": ci[0],
                    "auroc_hi": ci[1], "auarc": m["metrics"]["auarc"], "undefined": m["undefined"].get("auroc"),
                    "resampled": "tasks" if repeated else "trajectories"})
    return pd.DataFrame(out, columns=["part", "estimator", "n", "auroc", "auroc_lo", "auroc_hi", "auarc", "undefined",
                                      "resampled"])
