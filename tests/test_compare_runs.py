"""compare-runs: the AUROC pooled over runs (stratified by run) against hand computations and sklearn, why pooling
must be stratified, the within-run task bootstrap, the paired test against length, BH against statsmodels, the
per-run numbers against each run's estimator table, the command end to end, and its refusals."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from statsmodels.stats.multitest import multipletests

from agentuq_nb.estimators import Estimator, by_trajectory, register, unregister
from agentuq_nb.evaluation.length_control import length_strata, stratified_auroc
from agentuq_nb.evaluation.pooled_auroc import (
    POOLED,
    leaderboard_table,
    pooled_leaderboard,
    run_names,
    stratified_auroc_batch,
    stratum_pair_sums,
    within_run_task_counts,
)
from agentuq_nb.io.errors import InputError
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.steps.compare_runs import (
    OUTPUTS,
    build_run_leaderboard,
    compare_runs,
    write_run_leaderboard,
)
from agentuq_nb.steps.extract import extract
from agentuq_nb.steps.provenance import package_version
from agentuq_nb.testing.synthetic import write_synthetic_results

from conftest import TAU2_FILES

matplotlib.use("Agg")

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]
BASELINES = ["num_messages", "num_tool_calls", "agent_chars"]


def _cli(*args):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=600)


# --------------------------------------------------------------------------- the kernel
def test_pooled_auroc_by_hand_and_against_sklearn_per_run():
    # run A: failures 3, 1 / successes 2, 1 -> (3>2) + (3>1) + (1<2) + ½(1=1) = 2.5 of 4 pairs
    # run B: failure 5 / successes 6, 4, 5 -> (5<6) + (5>4) + ½(5=5) = 1.5 of 3 pairs
    u = np.array([3, 1, 2, 1, 5, 6, 4, 5], dtype=float)
    failure = np.array([1, 1, 0, 0, 1, 0, 0, 0], dtype=bool)
    run = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    num, den = stratum_pair_sums(u, failure, run)
    assert num.tolist() == [[2.5, 1.5]] and den.tolist() == [[4.0, 3.0]]
    assert stratified_auroc_batch(u, failure, run)[0] == pytest.approx(4 / 7, abs=1e-15)
    for r in (0, 1):
        assert num[0, r] / den[0, r] == pytest.approx(roc_auc_score(failure[run == r], u[run == r]), abs=1e-15)
    # pooled = the pair-weighted mean of sklearn's per-run AUROCs, on data with ties
    rng = np.random.default_rng(3)
    u = np.round(rng.normal(size=600), 1)
    failure = rng.random(600) < 0.35
    run = rng.integers(0, 4, 600)
    weights = [failure[run == r].sum() * (~failure[run == r]).sum() for r in range(4)]
    per_run = [roc_auc_score(failure[run == r], u[run == r]) for r in range(4)]
    assert stratified_auroc_batch(u, failure, run)[0] == pytest.approx(np.average(per_run, weights=weights), abs=1e-12)


def test_weighted_rows_equal_the_expanded_sample_and_the_length_control_module():
    rng = np.random.default_rng(5)
    u = np.round(rng.normal(size=200), 1)
    failure = rng.random(200) < 0.4
    strata = rng.integers(0, 5, 200)
    counts = rng.integers(0, 3, size=(4, 200))
    got = stratified_auroc_batch(u, failure, strata, counts)
    for b in range(4):
        rows = np.repeat(np.arange(200), counts[b])
        assert got[b] == pytest.approx(stratified_auroc(u[rows], failure[rows], strata[rows])["auroc"], abs=1e-12)
    assert stratified_auroc_batch(u, failure, strata)[0] == pytest.approx(
        stratified_auroc(u, failure, strata)["auroc"], abs=1e-12)


def _runs_with_different_base_rates(seed=0):
    """Run A fails 90% and its scores sit high, run B fails 10% and its scores sit low; within a run the score
    says nothing about failure."""
    rng = np.random.default_rng(seed)
    frames = []
    for name, rate, level in (("A", 0.9, 5.0), ("B", 0.1, 0.0)):
        n = 200
        frames.append(pd.DataFrame({"run": name, "task": np.arange(n), "failure": rng.random(n) < rate,
                                    "length_stratum": 0, "score": level + rng.normal(size=n)}))
    return pd.concat(frames, ignore_index=True)


def test_pooling_is_stratified_by_run_naive_pooling_would_reward_the_difference_between_runs():
    frame = _runs_with_different_base_rates()
    naive = roc_auc_score(frame["failure"], frame["score"])
    assert naive > 0.85  # a noise score looks excellent when failures and successes of different runs are compared
    out = pooled_leaderboard(frame, ["score"], [], n_boot=200)
    long = out.long.set_index("run")
    per_run = {r: roc_auc_score(frame.loc[frame.run == r, "failure"], frame.loc[frame.run == r, "score"])
               for r in "AB"}
    pairs = {r: long.at[r, "n_pairs"] for r in "AB"}
    assert long.at["A", "auroc"] == pytest.approx(per_run["A"], abs=1e-12)
    expected = (per_run["A"] * pairs["A"] + per_run["B"] * pairs["B"]) / (pairs["A"] + pairs["B"])
    assert long.at[POOLED, "auroc"] == pytest.approx(expected, abs=1e-12)
    assert abs(long.at[POOLED, "auroc"] - 0.5) < 0.1 and long.at[POOLED, "auroc_lo"] < 0.5 < long.at[POOLED, "auroc_hi"]


# --------------------------------------------------------------------------- the bootstrap
def test_the_bootstrap_draws_whole_tasks_within_each_run_and_is_seeded():
    run = np.repeat([0, 1], [9, 6])
    task = np.array([0, 0, 0, 1, 1, 2, 3, 3, 4, 0, 0, 1, 1, 2, 2])  # run 1 reuses task labels 0..2: its own tasks
    draws = np.vstack([W for _, W in within_run_task_counts(run, task, 300, seed=4, chunk_elements=200)])
    assert draws.shape == (300, 15)
    for r, n_tasks in ((0, 5), (1, 3)):
        rows = np.flatnonzero(run == r)
        for t in np.unique(task[rows]):  # every trajectory of a drawn task comes with it
            members = rows[task[rows] == t]
            assert (draws[:, members] == draws[:, members[:1]]).all()
        first = [rows[task[rows] == t][0] for t in np.unique(task[rows])]
        assert (draws[:, first].sum(axis=1) == n_tasks).all()  # G tasks drawn with replacement, runs fixed
    again = np.vstack([W for _, W in within_run_task_counts(run, task, 300, seed=4)])
    assert np.array_equal(draws, again)  # the chunking does not change the draws
    other = np.vstack([W for _, W in within_run_task_counts(run, task, 300, seed=5)])
    assert not np.array_equal(draws, other)


def _length_frame(seed=0, n_runs=3, n=120):
    """Failure driven by length and by a cue length does not carry; ``cue`` sees the cue, ``length_noise`` is the
    message count plus a little noise."""
    rng = np.random.default_rng(seed)
    frames = []
    for r in range(n_runs):
        length = rng.integers(6, 60, n).astype(float)
        cue = rng.normal(size=n)
        failure = rng.random(n) < 1 / (1 + np.exp(-(1.5 * (np.log(length) - np.log(25)) + 1.5 * cue)))
        frames.append(pd.DataFrame({
            "run": f"run{r}", "task": np.arange(n) // 2, "failure": failure, "length_stratum": length_strata(length),
            "cue": cue + rng.normal(scale=0.5, size=n), "weak_cue": cue + rng.normal(scale=2.0, size=n),
            "noise": rng.normal(size=n), "length_noise": length + rng.normal(scale=0.5, size=n),
            "num_messages": length, "num_tool_calls": np.floor(length / 3) + rng.integers(0, 4, n),
            "agent_chars": 80 * length + rng.normal(scale=400, size=n)}))
    return pd.concat(frames, ignore_index=True)


def test_bootstrap_intervals_are_seeded_and_reproducible():
    frame = _length_frame()
    a = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=200, seed=7)
    b = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=200, seed=7)
    c = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=200, seed=8)
    pd.testing.assert_frame_equal(a.long, b.long)
    pd.testing.assert_frame_equal(a.comparison, b.comparison)
    assert not np.allclose(a.long["auroc_lo"], c.long["auroc_lo"])
    assert np.allclose(a.long["auroc"], c.long["auroc"])  # the point estimates do not depend on the seed
    lo, hi = a.long[["auroc_lc_lo", "auroc_lc_hi"]].to_numpy().T
    assert (lo <= a.long["auroc_lc"]).all() and (a.long["auroc_lc"] <= hi).all()


def test_the_paired_p_value_is_small_for_a_real_cue_and_large_for_length_plus_noise():
    frame = _length_frame()
    out = pooled_leaderboard(frame, ["cue", "length_noise"], BASELINES, n_boot=500, seed=0)
    comp = out.comparison.set_index("estimator")
    pooled = out.long[out.long["run"] == POOLED].set_index("estimator")
    best = max(BASELINES, key=lambda b: pooled.at[b, "auroc_lc"])
    assert out.baselines["auroc_lc"] == best
    assert out.baselines["auroc"] == max(BASELINES, key=lambda b: pooled.at[b, "auroc"])
    # every column scores every row: the paired difference is the difference of the pooled columns
    assert comp.at["cue", "diff_lc_vs_length"] == pytest.approx(pooled.at["cue", "auroc_lc"] - pooled.at[best, "auroc_lc"])
    assert comp.at["cue", "p_value"] < 0.01 and comp.at["cue", "verdict"] == "beats length"
    assert comp.at["cue", "diff_lc_vs_length_lo"] > 0
    assert comp.at["length_noise", "p_value"] > 0.3
    assert comp.at["length_noise", "verdict"] == "not distinguishable from length"
    assert comp.loc[BASELINES, "p_value"].isna().all()  # the comparators are not tested
    assert (comp.loc[BASELINES, "verdict"] == "length baseline").all()


def test_the_comparison_is_paired_a_copy_of_the_best_baseline_differs_by_zero_in_every_resample():
    frame = _length_frame()
    out = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=100)
    frame["copy"] = frame[out.baselines["auroc_lc"]] * 2.0 + 1.0  # the same ranking under another name
    comp = pooled_leaderboard(frame, ["copy"], BASELINES, n_boot=100).comparison.set_index("estimator")
    assert comp.loc["copy", ["diff_lc_vs_length", "diff_lc_vs_length_lo", "diff_lc_vs_length_hi"]].tolist() == [0, 0, 0]
    assert comp.at["copy", "p_value"] == 1.0 and comp.at["copy", "n_boot_valid"] == 100


def test_the_paired_comparison_uses_the_trajectories_both_score():
    frame = _length_frame()
    frame.loc[frame.index[::3], "cue"] = np.nan  # the estimator has no score for a third of the trajectories
    out = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=50)
    best = out.baselines["auroc_lc"]
    rows = frame[frame["cue"].notna()]
    strata = rows["run"].factorize()[0] * 10 + rows["length_stratum"].to_numpy()
    expected = (stratified_auroc(rows["cue"], rows["failure"], strata)["auroc"]
                - stratified_auroc(rows[best], rows["failure"], strata)["auroc"])
    assert out.comparison.set_index("estimator").at["cue", "diff_lc_vs_length"] == pytest.approx(expected, abs=1e-12)
    assert out.long.set_index(["estimator", "run"]).at[("cue", POOLED), "n"] == len(rows)


def test_benjamini_hochberg_equals_statsmodels():
    frame = _length_frame(seed=2)
    candidates = ["cue", "weak_cue", "noise", "length_noise"]
    out = pooled_leaderboard(frame, candidates, BASELINES, n_boot=400, q=0.1)
    comp = out.comparison.set_index("estimator").loc[candidates]
    reject, adjusted, _, _ = multipletests(comp["p_value"].to_numpy(), alpha=0.1, method="fdr_bh")
    assert np.allclose(comp["q_value"].to_numpy(), adjusted)
    assert comp["significant"].tolist() == reject.tolist()
    assert reject.any() and not reject.all()  # the test separates something


def test_the_leaderboard_is_ordered_by_the_pooled_length_controlled_auroc():
    frame = _length_frame()
    names = ["cue", "weak_cue", "noise"]
    out = pooled_leaderboard(frame, names, BASELINES, n_boot=50)
    meta = pd.DataFrame({"estimator": names + BASELINES, "family": ["test"] * 3 + ["baseline"] * 3})
    table = leaderboard_table(out, meta, ["run0", "run1", "run2"])
    assert table["rank"].tolist()[:3] == [1, 2, 3] and table["rank"].iloc[3:].isna().all()  # comparators unranked
    assert table["family"].tolist() == ["test"] * 3 + ["baseline"] * 3
    values = table[f"auroc_lc[{POOLED}]"].to_numpy()[:3]
    assert (np.diff(values) <= 0).all() and table["estimator"].iloc[0] == "cue"
    assert (np.diff(table[f"auroc[{POOLED}]"].to_numpy()[3:]) <= 0).all()  # the baselines by their AUROC
    assert {"auroc_lc[run1]", "auroc_lo[run2]", "n_failures[pooled]", "q_value", "significant"} <= set(table.columns)


def test_in_sample_estimators_are_reported_but_never_tested_ranked_or_counted_in_the_fdr_family():
    frame = _length_frame(seed=2)
    frame["tuned"] = frame["cue"] * 3.0  # as good as the cue: untested all the same
    candidates = ["cue", "weak_cue", "noise", "tuned"]
    out = pooled_leaderboard(frame, candidates, BASELINES, n_boot=300, q=0.1, in_sample=["tuned"])
    comp = out.comparison.set_index("estimator")
    assert np.isnan(comp.at["tuned", "p_value"]) and comp.at["tuned", "verdict"] == "in-sample: not tested"
    assert np.isfinite(comp.at["tuned", "diff_lc_vs_length"])  # its difference is still shown
    tested = comp.loc[["cue", "weak_cue", "noise"]]
    _, adjusted, _, _ = multipletests(tested["p_value"].to_numpy(), alpha=0.1, method="fdr_bh")
    assert np.allclose(tested["q_value"].to_numpy(), adjusted)  # BH over the three tested ones only
    meta = pd.DataFrame({"estimator": candidates + BASELINES, "family": ["test"] * 4 + ["baseline"] * 3})
    table = leaderboard_table(out, meta, ["run0", "run1", "run2"])
    assert table["estimator"].tolist()[3] == "tuned" and table["rank"].tolist()[:3] == [1, 2, 3]
    assert table["rank"].iloc[3:].isna().all()


def test_the_length_the_strata_hold_fixed_has_no_length_controlled_auroc_and_is_never_the_comparator():
    frame = _length_frame()
    out = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=50, stratified_on="num_messages")
    long = out.long.set_index(["estimator", "run"])
    rows = long.loc["num_messages"]
    assert rows["auroc_lc"].isna().all() and rows["auroc"].notna().all()
    assert rows["note"].str.contains("own values").all()
    assert out.baselines["auroc_lc"] != "num_messages"
    assert np.isnan(out.comparison.set_index("estimator").at["num_messages", "diff_lc_vs_length"])
    # without being told, the baseline's within-stratum AUROC is what stratifying on itself leaves: about chance
    plain = pooled_leaderboard(frame, ["cue"], BASELINES, n_boot=0).long.set_index(["estimator", "run"])
    assert abs(plain.at[("num_messages", POOLED), "auroc_lc"] - 0.5) < 0.1


def test_q_values_are_printed_to_two_significant_digits():
    from agentuq_nb.figures.run_leaderboard import q_text

    assert [q_text(q) for q in (0.1016, 0.0654, 1.0, 0.5, 0.000999)] == ["0.10", "0.065", "1.0", "0.50", "0.0010"]


# --------------------------------------------------------------------------- run folders
def _run_with_varied_lengths(tmp: Path, name: str, seed: int, signal: float = 0.4, failures_only=False) -> Path:
    """Synthetic results (log-probs in the messages) with trajectories cut to different lengths, extracted and
    aggregated in ``tmp/name``."""
    results = write_synthetic_results(tmp / f"{name}_src", num_simulations=24, messages_per_simulation=14,
                                      tokens_per_message=5, forms=("raw",), seed=seed, signal=signal, trials=2)
    data = json.loads(results.read_text())
    rng = np.random.default_rng(seed)
    for sim in data["simulations"]:
        sim["messages"] = sim["messages"][:int(rng.integers(5, 15))]
        if failures_only:
            sim["reward_info"]["reward"] = 0.0
    results.write_text(json.dumps(data))
    extract(results, tmp / name)
    aggregate(tmp / name)
    return tmp / name


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    return [_run_with_varied_lengths(tmp, "alpha", 1), _run_with_varied_lengths(tmp, "beta", 2, signal=0.8)]


def test_a_runs_numbers_equal_its_own_estimator_table(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tables")  # its own runs: the estimator table is written into them
    runs = [_run_with_varied_lengths(tmp, "alpha", 1), _run_with_varied_lengths(tmp, "beta", 2, signal=0.8)]
    tables = {run.name: compare_estimators(run, n_boot=20, combine=False).set_index("estimator") for run in runs}
    result = build_run_leaderboard(runs, n_boot=50)
    long = result.long.set_index(["estimator", "run"])
    checked = 0
    for run in runs:
        table = pd.read_csv(run / "estimator_table.csv").set_index("estimator")
        pd.testing.assert_frame_equal(table[["auroc", "auroc_stratified"]], tables[run.name][["auroc", "auroc_stratified"]],
                                      check_dtype=False)
        for name in result.leaderboard["estimator"]:
            row = long.loc[(name, run.name)]
            assert row["n"] == table.at[name, "n"] and row["n_failures"] == table.at[name, "n_failures"]
            assert row["auroc"] == pytest.approx(table.at[name, "auroc"], abs=1e-12, nan_ok=True)
            assert row["auroc_lc"] == pytest.approx(table.at[name, "auroc_stratified"], abs=1e-12, nan_ok=True)
            checked += 1
    assert checked >= 2 * 20
    # the lengths vary within a run: the length-controlled AUROC is not the raw one
    assert (long["auroc"] - long["auroc_lc"]).abs().max() > 0.01


def test_cli_end_to_end_reads_the_runs_only_and_writes_a_traceable_folder(two_runs, tmp_path):
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for run in two_runs for p in run.rglob("*")}
    out = tmp_path / "board"
    done = _cli("compare-runs", *two_runs, "--out", out, "--n-boot", 200, "--seed", 3, "--q", 0.2)
    assert done.returncode == 0, done.stderr
    after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for run in two_runs for p in run.rglob("*")}
    assert after == before  # nothing made, changed or locked in the run folders
    files = {p.name for p in out.iterdir()}
    assert files == {*OUTPUTS.values(), "run_leaderboard.png", "run_leaderboard.pdf"}
    page = (out / OUTPUTS["report"]).read_text()
    assert "https://" not in page and "data:image/png;base64," in page and "Leaderboard" in page
    board = pd.read_csv(out / OUTPUTS["leaderboard"])
    long = pd.read_csv(out / OUTPUTS["long"])
    assert set(long["run"]) == {"alpha", "beta", POOLED}
    assert len(long) == 3 * len(board) and len(board) > 10
    assert {"num_messages", "num_tool_calls", "agent_chars"} <= set(board["estimator"])
    assert board["estimator"].iloc[0] in done.stdout and "beats length" in done.stdout
    inputs = json.loads((out / OUTPUTS["inputs"]).read_text())
    assert (inputs["seed"], inputs["q"], inputs["n_boot"], inputs["failure_threshold"]) == (3, 0.2, 200, 1.0)
    assert inputs["agentuq_nb"] == package_version() and 'id="provenance"' in page  # issue 49: what made it
    for run, entry in zip(two_runs, inputs["runs"]):
        manifest = json.loads((run / "manifest.json").read_text())
        assert entry["path"] == str(run.resolve())
        assert entry["results_sha256"] == manifest["results_sha256"] and entry["results_sha256"] in page
        assert entry["tables"]["trajectories.parquet"] == manifest["artifacts"]["trajectories.parquet"]["commit"]
        assert entry["tables"]["trajectory_summary.parquet"] == \
            manifest["artifacts"]["trajectory_summary.parquet"]["commit"]
    import hashlib
    for name, digest in inputs["outputs"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    # the same seed gives the same leaderboard
    again = build_run_leaderboard(two_runs, n_boot=200, seed=3, q=0.2).leaderboard
    written = pd.read_csv(io.StringIO(again.to_csv(index=False)))  # as the CSV holds it (no protocol: empty)
    pd.testing.assert_frame_equal(board, written, check_dtype=False)
    # a refusal: one line, exit 2 (in this process: the command line's handling, not a second start-up)
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    refused = CliRunner().invoke(app, ["compare-runs", *map(str, two_runs), "--out", str(two_runs[0])])
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1 and "input run folder" in refused.stderr


def test_an_interrupted_write_leaves_no_json_so_a_stale_one_never_vouches_for_new_files(two_runs, tmp_path):
    out = tmp_path / "board"
    result = compare_runs(two_runs, out, n_boot=20)
    assert (out / OUTPUTS["inputs"]).exists()

    def broken_figure(result, folder):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_run_leaderboard(result, out, figure=broken_figure)
    assert not (out / OUTPUTS["inputs"]).exists() and (out / OUTPUTS["leaderboard"]).exists()


def test_one_run_works_and_says_the_pooled_columns_are_its_own(two_runs, tmp_path):
    result = compare_runs(two_runs[:1], tmp_path / "one", n_boot=50)
    long = result.long.set_index(["estimator", "run"])
    for name in result.leaderboard["estimator"]:
        for col in ("auroc", "auroc_lc", "n", "n_failures"):
            assert long.at[(name, "alpha"), col] == pytest.approx(long.at[(name, POOLED), col], nan_ok=True)
    assert any("one run" in note for note in result.notes)


def test_refusals_name_the_folder_and_write_nothing(two_runs, tmp_path):
    inside = two_runs[0] / "leaderboard"
    with pytest.raises(InputError, match="is the input run folder"):
        compare_runs(two_runs, two_runs[1], n_boot=10)
    with pytest.raises(InputError, match="is inside the input run folder"):
        compare_runs(two_runs, inside, n_boot=10)
    assert not inside.exists()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        compare_runs(two_runs, a_file, n_boot=10)
    with pytest.raises(InputError, match="cannot be made"):
        compare_runs(two_runs, a_file / "out", n_boot=10)
    other_run = tmp_path / "other_run"
    other_run.mkdir()
    (other_run / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="is a run folder"):
        compare_runs(two_runs, other_run, n_boot=10)
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(InputError, match="holds no trajectories") as err:
        compare_runs([two_runs[0], empty], tmp_path / "out1", n_boot=10)
    assert str(empty) in str(err.value)
    with pytest.raises(InputError, match="no such run folder"):
        compare_runs([two_runs[0], tmp_path / "missing"], tmp_path / "out2", n_boot=10)
    with pytest.raises(InputError, match="given twice"):
        compare_runs([two_runs[0], Path(os.path.relpath(two_runs[0]))], tmp_path / "out3", n_boot=10)
    with pytest.raises(KeyError, match="no estimator named"):
        compare_runs(two_runs, tmp_path / "out4", n_boot=10, names=["assistant.no_such_statistic"])
    with pytest.raises(ValueError, match="false discovery rate"):
        compare_runs(two_runs, tmp_path / "out5", n_boot=10, q=1.5)
    assert not any((tmp_path / f"out{i}").exists() for i in range(1, 6))


class _OnlyInAlpha(Estimator):
    name = "test.only_in_alpha"
    family = "test"
    requires = ("trajectories",)

    def scores(self, run):
        return by_trajectory(run.read_frame("trajectories"), "num_messages").rename(self.name)

    def is_available(self, run):
        return run.path.name == "alpha"


def test_estimators_some_run_lacks_are_left_out_and_named(two_runs, tmp_path):
    register(_OnlyInAlpha)
    try:
        result = build_run_leaderboard(two_runs, n_boot=10)
        assert "test.only_in_alpha" not in set(result.leaderboard["estimator"])
        assert result.inputs["left_out"]["test.only_in_alpha"] == ["beta"]
        assert any("not available in every run" in note for note in result.notes)
        with pytest.raises(InputError, match="holds no data for estimator 'test.only_in_alpha'"):
            build_run_leaderboard(two_runs, n_boot=10, names=["test.only_in_alpha"])
        chosen = build_run_leaderboard(two_runs, n_boot=10, names=["assistant.avg_token_nll"])
        assert set(chosen.leaderboard["estimator"]) == {"assistant.avg_token_nll", *BASELINES}
    finally:
        unregister("test.only_in_alpha")


def test_a_run_with_one_class_adds_nothing_to_the_pooled_auroc(two_runs, tmp_path):
    failed = _run_with_varied_lengths(tmp_path, "all_failed", 3, failures_only=True)
    result = build_run_leaderboard([*two_runs, failed], n_boot=20, names=["assistant.avg_token_nll"])
    long = result.long.set_index(["estimator", "run"])
    row = long.loc[("assistant.avg_token_nll", "all_failed")]
    assert np.isnan(row["auroc"]) and "one class only" in row["note"]
    without = build_run_leaderboard(two_runs, n_boot=20, names=["assistant.avg_token_nll"]).long
    pooled = without.set_index(["estimator", "run"]).at[("assistant.avg_token_nll", POOLED), "auroc"]
    assert long.at[("assistant.avg_token_nll", POOLED), "auroc"] == pytest.approx(pooled, abs=1e-12)
    assert any("all_failed holds one class only" in note for note in result.notes)


def test_the_leaderboard_does_not_depend_on_the_order_the_runs_are_given_in(two_runs):
    forward = build_run_leaderboard(two_runs, n_boot=30, names=["assistant.avg_token_nll"])
    backward = build_run_leaderboard(two_runs[::-1], n_boot=30, names=["assistant.avg_token_nll"])
    pd.testing.assert_frame_equal(forward.leaderboard, backward.leaderboard)
    pd.testing.assert_frame_equal(forward.long, backward.long)


def test_run_names_tell_runs_apart():
    assert run_names([Path("/a/x/run"), Path("/b/y/run"), Path("/c/other")]) == ["x/run", "y/run", "other"]
    assert run_names([Path("/a/pooled")]) == ["a/pooled"]


def test_real_tau2_runs_without_logprobs_rank_the_length_baselines(tmp_path):
    if not TAU2_FILES:
        pytest.skip("real τ²-bench files not found in ../shared/data/tau2")
    runs = []
    for path in TAU2_FILES:
        extract(path, tmp_path / path.stem)
        runs.append(tmp_path / path.stem)
    result = build_run_leaderboard(runs, n_boot=100)
    assert set(result.leaderboard["estimator"]) == set(BASELINES)  # no log-probs: only the length baselines
    assert result.leaderboard["verdict"].eq("length baseline").all()
    long = result.long.set_index(["estimator", "run"])
    for run in runs:  # each run's AUROC of the message count, against sklearn on the trajectories table
        t = pd.read_parquet(run / "trajectories.parquet")
        expected = roc_auc_score(t["reward"] < 1.0, t["num_messages"])
        assert long.at[("num_messages", run.name), "auroc"] == pytest.approx(expected, abs=1e-12)


def test_the_figure_has_a_row_per_estimator_a_column_per_run_and_the_marks(two_runs):
    import matplotlib.text

    from agentuq_nb.figures.run_leaderboard import DISPLAY_DPI, MIN_FONT_PT, column_head, run_leaderboard_figure

    result = build_run_leaderboard(two_runs, n_boot=100)
    fig = run_leaderboard_figure(result.leaderboard, result.long, result.runs, q=result.q)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == len(result.leaderboard)
    assert labels[0].startswith(result.leaderboard["estimator"].iloc[0])
    assert sum("[length baseline]" in label for label in labels) == 3
    heads = [t.get_text() for t in ax.get_xticklabels()]
    # the run's name, beneath it the model and the domain from the results' metadata (issue 49: two runs of one
    # model and domain are told apart by their names)
    assert heads[0].startswith("alpha\nsynthetic-llm · synthetic\nn = 24 / ") and heads[-1].startswith("pooled (2 runs)")
    assert column_head("run", None) == "run" and column_head("tau", "airline") == "tau\nairline"
    # no text smaller than MIN_FONT_PT: legible (≥ 9 px) where report.html shows the figure at DISPLAY_DPI
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip() and t.get_visible()]
    assert min(sizes) >= MIN_FONT_PT and MIN_FONT_PT / 72 * DISPLAY_DPI >= 9
    texts = [t.get_text() for t in ax.texts]
    assert "◆ reference" in texts and any(t.startswith("▲ q=") for t in texts)
    # every cell names the (failure, success) pairs of like length it rests on; the message count's is "self"
    long = result.long.set_index(["estimator", "run"])
    pairs = int(long.at[(result.leaderboard["estimator"].iloc[0], "alpha"), "n_pairs_lc"])
    assert any(t.endswith(f"· {pairs} pairs") for t in texts) and texts.count("self") == 3
    hatched = [p for p in ax.patches if p.get_hatch()]
    few = int((result.long["n_pairs_lc"].between(1, 29) & result.long["auroc_lc"].notna()).sum())
    assert len(hatched) == few
    assert fig.axes[1].get_ylabel().startswith("length-controlled AUROC")
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_the_comparison_page_at_1400_px_shows_the_heatmap_legibly_and_no_table_runs_off(two_runs, tmp_path):
    """issue 49: report.html shows the heatmap at its natural size (100 px an inch of a 200-dpi PNG: its smallest
    text, MIN_FONT_PT, ≥ 9 px as rendered), in a box that scrolls sideways when it is wider than the page, never
    shrunk to fit; the tables stay inside the page (their own boxes scroll)."""
    from agentuq_nb.figures.report import SAVED_DPI
    from agentuq_nb.figures.run_leaderboard import MIN_FONT_PT
    from agentuq_nb.steps.compare_runs import draw_run_leaderboard
    from test_explorer import CHROMIUM_FLAGS, chromium_session
    from test_report import LAYOUT_PROBLEMS

    result = build_run_leaderboard(two_runs, n_boot=50)
    write_run_leaderboard(result, tmp_path, draw_run_leaderboard, report=True)
    with chromium_session() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((tmp_path / OUTPUTS["report"]).as_uri())
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        shown, natural = page.locator("img.natural").evaluate("img => [img.getBoundingClientRect().width, "
                                                              "img.naturalWidth]")
        smallest_px = MIN_FONT_PT / 72 * SAVED_DPI * shown / natural  # points → PNG pixels → CSS pixels shown
        assert smallest_px >= 9, smallest_px
        # a window narrower than the figure: the figure keeps its size and its box scrolls
        page.set_viewport_size({"width": 600, "height": 900})
        assert page.locator("img.natural").evaluate("img => img.getBoundingClientRect().width") == pytest.approx(shown)
        assert page.locator(".figure-scroll").evaluate("b => b.scrollWidth > b.clientWidth")
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        # the runs table names each run first (pinned), its agent · domain beside it
        heads = page.locator("section:has(h2:has-text('Runs')) th").all_inner_texts()
        assert heads[:2] == ["run", "agent · domain"]
        browser.close()
