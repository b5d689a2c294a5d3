"""AUROC pooled over several runs, stratified by run, and the leaderboard statistics built on it (pure).

Input is one tidy frame, a row per trajectory of every run (:func:`pooled_leaderboard`): ``run``, ``task``,
``failure`` (bool, the positive class), ``length_stratum`` (the run's message-count stratum,
:func:`~agentuq_nb.evaluation.length_control.length_strata`; -1 = none) and one column per estimator holding its
*oriented* score (higher = more likely failure, :func:`~agentuq_nb.evaluation.calibration.oriented`); NaN = no
score. Reading run folders is :mod:`agentuq_nb.steps.compare_runs`'s job.

Definitions (failure = positive; ties count ½, as everywhere in :mod:`.metrics`):

* **stratified AUROC** over strata s: ``sum_s num_s / sum_s den_s`` where, within stratum s only,
  ``num_s = #{(failure i, success j): u_i > u_j} + ½ #{u_i = u_j}`` and ``den_s = n_fail,s · n_success,s``.
  It equals the average of the within-stratum AUROCs weighted by their numbers of (failure, success) pairs; a
  stratum with one class has no pair and drops out (the estimator table's ``auroc_stratified`` is this with the
  run's length strata).
* per run: ``auroc`` = the run's AUROC (sklearn's ``roc_auc_score``), ``auroc_lc`` = the length-controlled AUROC
  (strata = the run's message-count strata) - the estimator table's ``auroc`` and ``auroc_stratified``.
* **pooled** ``auroc``: strata = runs, i.e. only failures and successes *of the same run* are compared. Pairs
  across runs never count: pooling rows naively would let a run with many failures and uniformly high scores
  (another model, another domain) make an estimator look good because runs differ, not because it ranks
  trajectories. Pooled ``auroc_lc``: strata = run × length stratum.
* **bootstrap**: tasks are resampled with replacement within each run, runs held fixed (a resample of run r draws
  its G_r tasks and takes all their trajectories; run r's stream is ``SeedSequence(seed).spawn(R)[r]``). A
  resample becomes a row-count matrix ``W`` (B, n); the stratified AUROC of weighted rows is computed for all
  resamples at once from per-tie-block sums (:func:`stratum_pair_sums`), so scores are sorted once, not once per
  resample. Percentile 95% CIs; resamples where a value is undefined are skipped.
* **comparison with length**: for each estimator, the difference from the *best length baseline*, paired (the same
  resamples and the same trajectories - those both score - for both), for the pooled ``auroc_lc`` (``diff_lc``,
  the tested one) and the pooled ``auroc`` (``diff``, CI only). The best length baseline of a comparison is the one
  with the highest pooled value of the compared metric on these data; choosing it on the same data favours
  length, so the test is conservative for the estimators. p-value: two-sided, null-shifted paired bootstrap
  (:func:`~agentuq_nb.evaluation.bootstrap.shifted_pvalue`). Why the test is on the length-controlled AUROC:
  the leaderboard is ordered by it, and both sides of the difference are then computed over exactly the same
  length-matched (failure, success) pairs - the difference is how much more often the estimator ranks such a
  pair right than length does. The length baselines are the comparators, not candidates: they get no p-value.
  The length the strata are made of (``stratified_on``, the message count) has no length-controlled AUROC: its
  strata hold it fixed, so it would be ≈ 0.5 by construction; its ``auroc_lc`` is NaN (said in ``note``) and it is
  never the comparator of the length-controlled test.
* **in-sample** estimators (``in_sample``: tuned on the labels they are evaluated on, e.g. ``tracer.optimistic``)
  are reported but not tested: no p-value, left out of the Benjamini-Hochberg family, verdict
  :data:`IN_SAMPLE_VERDICT` - never a winner.
* **Benjamini-Hochberg** at ``q`` over the candidate estimators' p-values (statsmodels, :func:`.conformal.bh`):
  ``q_value`` (BH-adjusted p) and ``significant``; ``verdict`` says the direction.

Why by hand: no library computes a weighted, stratified Mann-Whitney AUROC for a batch of resample weights
(sklearn's ``roc_auc_score`` takes one sample weight vector and sorts per call).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.bootstrap import cluster_count_chunks, percentile_ci, shifted_pvalue
from agentuq_nb.evaluation.conformal import bh, bh_adjusted
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT

#: the name of the pooled rows of the long table and of the pooled columns of the leaderboard
POOLED = "pooled"
#: bootstrap weight matrices are processed about this many elements at a time (memory, cache)
CHUNK_ELEMENTS = 250_000
#: the columns of the input frame that are not estimators
FRAME_COLUMNS = ("run", "task", "failure", "length_stratum")
VERDICTS = {1: "beats length", -1: "below length", 0: "not distinguishable from length"}
#: the verdict of an estimator tuned on the labels it is evaluated on: not tested
IN_SAMPLE_VERDICT = "in-sample: not tested"
#: why the length the strata are made of has no length-controlled AUROC
SELF_STRATIFIED_NOTE = "the length strata are this estimator's own values: no length-controlled AUROC (≈ 0.5 by construction)"
#: the comparison with the length baselines, one row per estimator: the tested difference first
COMPARISON_COLUMNS = ("estimator", "length_baseline_lc", "diff_lc_vs_length", "diff_lc_vs_length_lo",
                      "diff_lc_vs_length_hi", "p_value", "q_value", "significant", "verdict", "length_baseline",
                      "diff_vs_length", "diff_vs_length_lo", "diff_vs_length_hi", "n_boot_valid")
BASELINE_VERDICT = "length baseline"


def run_names(paths: Sequence[Path]) -> list[str]:
    """A short distinct name per run folder: its folder name, with as many parent folders as it takes to tell
    runs apart (and never :data:`POOLED`, the name of the pooled rows): the ``run`` column of the leaderboard."""
    parts = [Path(p).resolve().parts for p in paths]
    depth = {i: 1 for i in range(len(parts))}
    while True:
        names = ["/".join(parts[i][-depth[i]:]) for i in range(len(parts))]
        clash = [i for i, name in enumerate(names)
                 if (names.count(name) > 1 or name == POOLED) and depth[i] < len(parts[i])]
        if not clash:
            return names
        for i in clash:
            depth[i] += 1


# --------------------------------------------------------------------------- the kernel
def stratum_pair_sums(u, failure, strata, weights=None, n_strata: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Weighted Mann-Whitney sums per stratum, for every row of ``weights`` at once.

    ``u`` (n,) finite scores, higher = more likely failure; ``failure`` (n,) bool; ``strata`` (n,) codes
    0..S-1; ``weights`` (B, n) non-negative row weights (bootstrap counts; None: one row of ones).
    Returns ``(num, den)``, each (B, S): ``num[b, s] = sum over failures i and successes j of stratum s of
    w_bi w_bj ([u_i > u_j] + ½[u_i = u_j])``, ``den[b, s] = (sum of failure weights)(sum of success weights)``.
    The AUROC of a set of strata is ``num.sum / den.sum`` over them (undefined when the den sum is 0).
    """
    u = np.asarray(u, dtype=float).ravel()
    f = np.asarray(failure, dtype=bool).ravel()
    s = np.asarray(strata, dtype=np.intp).ravel()
    if not (u.shape == f.shape == s.shape):
        raise ValueError(f"lengths differ: u {u.size}, failure {f.size}, strata {s.size}")
    if not np.isfinite(u).all():
        raise ValueError("scores must be finite: leave out the rows without a score first")
    if s.size and s.min() < 0:
        raise ValueError("stratum codes must be >= 0: leave out the rows without a stratum first")
    n_strata = int(s.max()) + 1 if n_strata is None and s.size else int(n_strata or 0)
    W = np.ones((1, u.size)) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    if W.shape[1] != u.size:
        raise ValueError(f"weights have {W.shape[1]} columns but there are {u.size} rows")
    num = np.zeros((W.shape[0], n_strata))
    den = np.zeros((W.shape[0], n_strata))
    if u.size == 0:
        return num, den
    order = np.lexsort((u, s))  # by stratum, then score: the same order for every resample
    us, fs, ss = u[order], f[order], s[order]
    starts = np.flatnonzero(np.r_[True, (us[1:] != us[:-1]) | (ss[1:] != ss[:-1])])  # tie blocks within strata
    Ws = W[:, order]
    pos = np.add.reduceat(np.where(fs, Ws, 0.0), starts, axis=1)  # (B, T) failure weight of each tie block
    neg = np.add.reduceat(np.where(fs, 0.0, Ws), starts, axis=1)  # (B, T) success weight of each tie block
    block_stratum = ss[starts]
    present, first = np.unique(block_stratum, return_index=True)
    before = np.cumsum(neg, axis=1) - neg  # success weight in earlier blocks (all strata) ...
    within = np.searchsorted(present, block_stratum)
    below = before - before[:, first][:, within]  # ... of the block's own stratum only
    num[:, present] = np.add.reduceat(pos * (below + 0.5 * neg), first, axis=1)
    den[:, present] = np.add.reduceat(pos, first, axis=1) * np.add.reduceat(neg, first, axis=1)
    return num, den


def auroc_from_sums(num, den) -> np.ndarray:
    """``num / den`` elementwise, NaN where ``den`` is 0 (no (failure, success) pair)."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def stratified_auroc_batch(u, failure, strata, weights=None) -> np.ndarray:
    """(B,) stratified AUROC of ``u`` for each weight row (see the module docstring); NaN without a pair.
    Rows with a non-finite score or a stratum < 0 are left out."""
    u = np.asarray(u, dtype=float).ravel()
    s = np.asarray(strata).ravel()
    keep = np.isfinite(u) & (s >= 0)
    W = None if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))[:, keep]
    codes = pd.factorize(s[keep], sort=True)[0]
    num, den = stratum_pair_sums(u[keep], np.asarray(failure, dtype=bool).ravel()[keep], codes, W)
    return auroc_from_sums(num.sum(axis=1), den.sum(axis=1))


# --------------------------------------------------------------------------- the bootstrap
def within_run_task_counts(run_codes, tasks, n_boot: int, seed=0,
                           chunk_elements: int = CHUNK_ELEMENTS) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(positions, W)``: ``W`` (b, n) row counts of the resamples numbered ``positions`` (n_boot in all).

    Each resample draws, independently in every run, the run's tasks with replacement (a row counts as often as
    its task was drawn); runs are held fixed. ``run_codes`` (0..R-1) and ``tasks`` are one per row (a task label
    is read within its run). Run r draws from ``SeedSequence(seed).spawn(R)[r]``.
    """
    run_codes = np.asarray(run_codes, dtype=np.intp).ravel()
    tasks = pd.Index(tasks)
    n = len(run_codes)
    if len(tasks) != n:
        raise ValueError(f"tasks has {len(tasks)} labels but there are {n} rows")
    if n_boot <= 0 or n == 0:
        return
    b = max(1, chunk_elements // n)
    members = [np.flatnonzero(run_codes == r) for r in range(int(run_codes.max()) + 1)]
    streams = []
    for rows, child in zip(members, np.random.SeedSequence(seed).spawn(len(members))):
        codes = pd.factorize(tasks[rows], sort=True)[0]
        if (codes < 0).any():
            raise ValueError("a row has no task label; every trajectory needs its task")
        streams.append(cluster_count_chunks(codes, n_boot, child, chunk_elements=b * rows.size))
    done = 0
    for chunks in zip(*streams):
        W = np.zeros((chunks[0].shape[0], n))
        for rows, counts in zip(members, chunks):
            W[:, rows] = counts
        yield np.arange(done, done + W.shape[0]), W
        done += W.shape[0]


# --------------------------------------------------------------------------- per-estimator statistics
class Design(NamedTuple):
    """The fixed part of a leaderboard frame: labels and strata codes of every row."""

    runs: list[str]
    run_code: np.ndarray          # (n,) 0..R-1
    failure: np.ndarray           # (n,) bool
    lc_code: np.ndarray           # (n,) run x length stratum code, -1 without a length stratum
    lc_run: np.ndarray            # (S,) the run of each run x length stratum


def design(frame: pd.DataFrame, runs: Sequence[str] | None = None) -> Design:
    """Codes of ``frame``'s runs (in ``runs`` order, else of first appearance) and run x length strata."""
    missing = [c for c in FRAME_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"the frame needs the column(s) {missing}; has {list(frame.columns)}")
    names = list(pd.unique(frame["run"])) if runs is None else list(runs)
    run_code = pd.Categorical(frame["run"], categories=names).codes.astype(np.intp)
    if (run_code < 0).any():
        raise ValueError(f"rows of runs not among {names}")
    empty = [name for r, name in enumerate(names) if not (run_code == r).any()]
    if empty:
        raise ValueError(f"no row of the run(s) {empty}")
    stratum = frame["length_stratum"].to_numpy(dtype=np.intp)
    k = int(stratum.max()) + 1 if stratum.size and stratum.max() >= 0 else 1
    combined = np.where(stratum >= 0, run_code * k + stratum, -1)
    ok = combined >= 0
    lc_code = np.full(len(frame), -1, dtype=np.intp)
    lc_code[ok], uniques = pd.factorize(combined[ok], sort=True)
    return Design(names, run_code, frame["failure"].to_numpy(dtype=bool), lc_code,
                  np.asarray(uniques, dtype=np.intp) // k)


def auroc_statistics(d: Design, u: np.ndarray, rows: np.ndarray, weights=None) -> dict[str, np.ndarray]:
    """Per-run and pooled AUROC and length-controlled AUROC of the oriented score ``u`` on the rows ``rows``
    (bool mask; rows without a finite score must be excluded) for each weight row: ``{"auroc", "auroc_lc"}``
    (B, R) and ``{"pooled_auroc", "pooled_auroc_lc"}`` (B,), plus the pair counts ``"pairs"``, ``"pairs_lc"``
    (B, R)."""
    R = len(d.runs)
    W = np.ones((1, d.failure.size)) if weights is None else weights
    num, den = stratum_pair_sums(u[rows], d.failure[rows], d.run_code[rows], W[:, rows], n_strata=R)
    lc_rows = rows & (d.lc_code >= 0)
    num_s, den_s = stratum_pair_sums(u[lc_rows], d.failure[lc_rows], d.lc_code[lc_rows], W[:, lc_rows],
                                     n_strata=d.lc_run.size)
    to_run = np.zeros((d.lc_run.size, R))
    to_run[np.arange(d.lc_run.size), d.lc_run] = 1.0
    num_lc, den_lc = num_s @ to_run, den_s @ to_run
    return {"auroc": auroc_from_sums(num, den), "auroc_lc": auroc_from_sums(num_lc, den_lc),
            "pooled_auroc": auroc_from_sums(num.sum(axis=1), den.sum(axis=1)),
            "pooled_auroc_lc": auroc_from_sums(num_lc.sum(axis=1), den_lc.sum(axis=1)),
            "pairs": den, "pairs_lc": den_lc}


class PooledLeaderboard(NamedTuple):
    """``long``: one row per estimator x run (and ``pooled``); ``comparison``: one row per estimator, its
    differences from the best length baselines with CIs, p, q, significant and verdict; ``baselines``: the
    chosen comparators ``{"auroc": name, "auroc_lc": name}`` (None without a length baseline)."""

    long: pd.DataFrame
    comparison: pd.DataFrame
    baselines: dict[str, str | None]


def _best(point: dict[str, dict], names: Sequence[str], key: str) -> str | None:
    """The name among ``names`` with the highest finite ``point[name][key]`` (the first on ties)."""
    best, value = None, -np.inf
    for name in names:
        v = float(point[name][key][0])
        if np.isfinite(v) and v > value:
            best, value = name, v
    return best


def pooled_leaderboard(frame: pd.DataFrame, estimators: Sequence[str], baselines: Sequence[str],
                       n_boot: int = DEFAULT_N_BOOT, seed=0, q: float = 0.1, ci: float = 0.95,
                       runs: Sequence[str] | None = None, in_sample: Sequence[str] = (),
                       stratified_on: str | None = None) -> PooledLeaderboard:
    """The statistics of the module docstring for the candidate ``estimators`` and the length ``baselines``
    (columns of ``frame`` with oriented scores). ``runs`` fixes the order of the runs (default: as they come);
    ``in_sample``: candidates tuned on these labels (not tested); ``stratified_on``: the baseline whose values the
    ``length_stratum`` column is made of (no length-controlled AUROC)."""
    check_fdr_level(q)
    names = list(dict.fromkeys([*estimators, *baselines]))
    absent = [c for c in names if c not in frame.columns]
    if absent:
        raise ValueError(f"no score column for {absent}")
    d = design(frame, runs)
    R = len(d.runs)
    scores = {c: frame[c].to_numpy(dtype=float) for c in names}
    finite = {c: np.isfinite(scores[c]) for c in names}
    point = {c: auroc_statistics(d, scores[c], finite[c]) for c in names}
    chosen = {"auroc": _best(point, list(baselines), "pooled_auroc"),
              "auroc_lc": _best(point, [b for b in baselines if b != stratified_on], "pooled_auroc_lc")}
    # paired comparisons: both on the rows both score; the other's statistics there
    pairs = {(c, metric): chosen[metric] for c in names for metric in chosen
             if chosen[metric] is not None and c != chosen[metric] and not (metric == "auroc_lc" and c == stratified_on)}

    def joint(c, other):
        return finite[c] & finite[other]

    observed = {}
    for (c, metric), other in pairs.items():
        rows = joint(c, other)
        a = point[c] if rows.sum() == finite[c].sum() else auroc_statistics(d, scores[c], rows)
        b = point[other] if rows.sum() == finite[other].sum() else auroc_statistics(d, scores[other], rows)
        observed[c, metric] = float(a[f"pooled_{metric}"][0] - b[f"pooled_{metric}"][0])

    keys = ("auroc", "auroc_lc", "pooled_auroc", "pooled_auroc_lc")
    boot = {c: {k: np.full((n_boot, R) if k in ("auroc", "auroc_lc") else n_boot, np.nan) for k in keys}
            for c in names}
    diffs = {key: np.full(n_boot, np.nan) for key in pairs}
    tasks = frame["task"].to_numpy()
    for positions, W in within_run_task_counts(d.run_code, tasks, n_boot, seed):
        stats = {c: auroc_statistics(d, scores[c], finite[c], W) for c in names}
        for c in names:
            for k in keys:
                boot[c][k][positions] = stats[c][k]
        cache: dict[tuple, dict] = {}
        for (c, metric), other in pairs.items():
            rows = joint(c, other)
            got = []
            for name in (c, other):
                if rows.sum() == finite[name].sum():
                    got.append(stats[name])
                else:
                    key = (name, rows.tobytes())
                    if key not in cache:
                        cache[key] = auroc_statistics(d, scores[name], rows, W)
                    got.append(cache[key])
            diffs[c, metric][positions] = got[0][f"pooled_{metric}"] - got[1][f"pooled_{metric}"]

    long_rows = []
    for c in names:
        for r, run in enumerate([*d.runs, POOLED]):
            in_run = finite[c] & ((d.run_code == r) if run != POOLED else True)
            f = d.failure[in_run]
            pooled = run == POOLED
            row = {"estimator": c, "run": run, "n": int(in_run.sum()), "n_failures": int(f.sum()),
                   "n_tasks": int(len(set(zip(d.run_code[in_run], tasks[in_run])))),
                   "n_pairs": int(point[c]["pairs"].sum() if pooled else point[c]["pairs"][0, r]),
                   "n_pairs_lc": int(point[c]["pairs_lc"].sum() if pooled else point[c]["pairs_lc"][0, r])}
            for metric in ("auroc", "auroc_lc"):
                value = point[c][f"pooled_{metric}"][0] if pooled else point[c][metric][0, r]
                if metric == "auroc_lc" and c == stratified_on:
                    value = np.nan
                samples = boot[c][f"pooled_{metric}"] if pooled else boot[c][metric][:, r]
                interval = percentile_ci(samples, ci) if np.isfinite(value) else None
                row[metric] = float(value)
                row[f"{metric}_lo"], row[f"{metric}_hi"] = interval or (np.nan, np.nan)
            row["note"] = SELF_STRATIFIED_NOTE if c == stratified_on and row["n_pairs"] else _note(row)
            long_rows.append(row)
    long = pd.DataFrame(long_rows)

    comp_rows = []
    for c in names:
        row = {"estimator": c, "length_baseline_lc": chosen["auroc_lc"], "length_baseline": chosen["auroc"]}
        for metric, prefix in (("auroc_lc", "diff_lc_vs_length"), ("auroc", "diff_vs_length")):
            value = observed.get((c, metric), np.nan)
            interval = percentile_ci(diffs[c, metric], ci) if (c, metric) in diffs and np.isfinite(value) else None
            row[prefix] = value
            row[f"{prefix}_lo"], row[f"{prefix}_hi"] = interval or (np.nan, np.nan)
        tested = c not in baselines and c not in in_sample and (c, "auroc_lc") in diffs and n_boot > 0
        p = shifted_pvalue(diffs[c, "auroc_lc"], row["diff_lc_vs_length"]) if tested else None
        row["p_value"] = np.nan if p is None else p
        row["n_boot_valid"] = int(np.isfinite(diffs[c, "auroc_lc"]).sum()) if (c, "auroc_lc") in diffs else 0
        comp_rows.append(row)
    comparison = pd.DataFrame(comp_rows)
    p = comparison["p_value"].to_numpy(dtype=float)
    comparison["q_value"] = bh_adjusted(p)
    comparison["significant"] = bh(p, q)
    direction = np.sign(comparison["diff_lc_vs_length"].to_numpy(dtype=float))
    comparison["verdict"] = [
        BASELINE_VERDICT if c in baselines else IN_SAMPLE_VERDICT if c in in_sample else "not tested"
        if not np.isfinite(pv) else VERDICTS[int(sig) * int(dirn)] for c, pv, sig, dirn in
        zip(comparison["estimator"], p, comparison["significant"], np.nan_to_num(direction))]
    return PooledLeaderboard(long, comparison[list(COMPARISON_COLUMNS)], chosen)


def check_fdr_level(q: float) -> None:
    """The false discovery rate of the Benjamini-Hochberg step is a level strictly between 0 and 1."""
    if not 0 < q < 1:
        raise ValueError(f"q (the false discovery rate) must be between 0 and 1, not {q}")


def _note(row: dict) -> str | None:
    """Why a row's AUROC or length-controlled AUROC is undefined (None when both are defined)."""
    if row["n"] == 0:
        return "no trajectory with a score"
    if row["n_pairs"] == 0:
        kind = "failures" if row["n_failures"] == row["n"] else "successes"
        return f"one class only: all {row['n']} scored trajectories are {kind}"
    if row["n_pairs_lc"] == 0:
        return "no message-count stratum holds both classes (or no message counts)"
    return None


# --------------------------------------------------------------------------- the wide table
def leaderboard_table(result: PooledLeaderboard, meta: pd.DataFrame, runs: Sequence[str]) -> pd.DataFrame:
    """One row per estimator: the candidates ordered by the pooled length-controlled AUROC (descending, undefined
    last) and ranked 1.., then - not ranked - the in-sample ones (never winners) and the length baselines (the
    comparators, by their pooled AUROC):
    ``rank``, ``meta``'s columns (``estimator`` first), per run and pooled ``{metric}[{run}]`` for n, n_failures,
    n_pairs_lc (the length-matched (failure, success) pairs the length-controlled AUROC rests on), auroc
    (+ _lo, _hi) and auroc_lc (+ _lo, _hi), then the comparison with the length baselines."""
    per_run = ("n", "n_failures", "n_pairs_lc", "auroc", "auroc_lo", "auroc_hi", "auroc_lc", "auroc_lc_lo",
               "auroc_lc_hi")
    long = result.long.set_index(["estimator", "run"])
    wide = pd.DataFrame(index=pd.Index(long.index.get_level_values(0).unique(), name="estimator"))
    for run in [*runs, POOLED]:
        part = long.xs(run, level="run")
        for col in per_run:
            wide[f"{col}[{run}]"] = part[col]
    wide = wide.reset_index()
    table = meta.merge(wide, on="estimator", how="right").merge(result.comparison, on="estimator", how="left")
    comparator, tuned = table["verdict"].eq(BASELINE_VERDICT), table["verdict"].eq(IN_SAMPLE_VERDICT)
    order = {"ascending": False, "na_position": "last", "kind": "stable"}
    candidates = table[~comparator & ~tuned].sort_values(f"auroc_lc[{POOLED}]", **order)
    in_sample = table[tuned].sort_values(f"auroc_lc[{POOLED}]", **order)
    baselines = table[comparator].sort_values(f"auroc[{POOLED}]", **order)
    table = pd.concat([candidates, in_sample, baselines], ignore_index=True)
    table.insert(0, "rank", pd.array([*range(1, len(candidates) + 1), *[None] * (len(in_sample) + len(baselines))],
                                     dtype="Int64"))
    return table
