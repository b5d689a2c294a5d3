"""The estimator registry: names, orientation, plugins from outside the package (a file, an entry point),
and the estimator table of a held-out run equal to the one the code computed before the registry."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb import estimators
from agentuq_nb.estimators import Estimator, register
from agentuq_nb.io.store.artifacts import read_estimator_table
from agentuq_nb.records.token_statistics import TOKEN_STATISTICS
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.steps.early_warning import early_warning
from agentuq_nb.steps.evaluate import evaluate
from agentuq_nb.steps.extract import extract
from agentuq_nb.steps.saup import saup as run_saup
from agentuq_nb.testing.synthetic import write_synthetic_results

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "golden_synthetic"
CLI = str(Path(sys.executable).with_name("agentuq-nb"))

# written as a user would, outside the package: one small class, registered
PLUGIN = '''
from agentuq_nb.estimators import Estimator, by_trajectory, register
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq import read_turn_summary


@register
class SteadiestTurn(Estimator):
    """The agent's most confident turn: the highest minimum token probability of any of its turns."""
    name = "assistant.steadiest_turn"
    family = "plugin"
    higher_is_uncertain = False  # a confidence: high = sure of itself
    requires = ("turn_summary",)

    def scores(self, run):
        t = read_turn_summary(run)
        t = t[(t["role"] == "assistant") & (t["scorer"] == "self")]
        return by_trajectory(t.groupby(TRAJECTORY_KEYS, dropna=False)["min_chosen_prob"].max())
'''


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registry")
    results = write_synthetic_results(tmp / "src", num_simulations=20, messages_per_simulation=10,
                                      tokens_per_message=6, seed=4, signal=0.4)
    extract(results, tmp / "run")
    aggregate(tmp / "run")
    return tmp / "run"


def _cli(*args, env=None):
    return subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def _steadiest(run_dir) -> pd.Series:
    turns = pd.read_parquet(run_dir / "turn_summary.parquet")
    a = turns[(turns["role"] == "assistant") & (turns["scorer"] == "self")]
    return a.groupby("task_id")["min_chosen_prob"].max()


def test_every_estimator_states_its_orientation_and_is_found_by_name(run_dir):
    names = estimators.available(run_dir)
    assert names[0] == "assistant.avg_token_nll" and names[-3:] == ["num_messages", "num_tool_calls", "agent_chars"]
    for name in names:
        e = estimators.get(name)
        assert e.name == name and isinstance(e.higher_is_uncertain, bool) and e.family
    for stat in TOKEN_STATISTICS:
        assert estimators.get(f"assistant.{stat.name}").higher_is_uncertain is stat.higher_is_uncertain
    assert estimators.get("user.avg_token_nll@agent_llm").scorer == "agent_llm"
    assert estimators.get("early_warning_f0.3").family == "early_warning"
    with pytest.raises(KeyError, match="did you mean assistant.avg_token_nll"):
        estimators.get("assistant.avg_token_nl")
    scores = estimators.get("assistant.avg_token_nll").scores(run_dir)
    assert list(scores.index.names) == ["domain", "task_id", "trial", "seed"] and len(scores) == 20


def test_a_confidence_is_inverted_without_being_asked(run_dir):
    result = evaluate(run_dir, uncertainty="min_chosen_prob", n_boot=50)
    tok = pd.read_parquet(run_dir / "tokens.parquet")
    tok = tok[tok["role"] == "assistant"]
    traj = pd.read_parquet(run_dir / "trajectories.parquet").set_index("task_id")
    lowest = tok.groupby("task_id")["chosen_prob"].min()
    expected = roc_auc_score(traj.loc[lowest.index, "reward"] < 1, -lowest)  # low probability = uncertain
    assert result["invert"] and result["metrics"]["auroc"] == pytest.approx(expected)
    with pytest.raises(ValueError, match="own orientation"):
        evaluate(run_dir, uncertainty="min_chosen_prob", invert=True, n_boot=50)
    raw = evaluate(run_dir, uncertainty="total_tokens", invert=True, n_boot=50)  # not an estimator
    assert raw["invert"] and raw["uncertainty"] == "total_tokens"


def test_a_plugin_file_shows_up_in_both_commands_with_its_orientation(run_dir, tmp_path):
    plugin = tmp_path / "my_estimators.py"
    plugin.write_text(PLUGIN)
    done = _cli("compare-estimators", run_dir, "--plugin", plugin, "--n-boot", 50)
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(run_dir / "estimator_table.csv").set_index("estimator")
    row = table.loc["assistant.steadiest_turn"]
    assert row["family"] == "plugin" and row["invert"] and "inverted" in row["orientation"]
    assert set(table.index[table["family"] == "baseline"]) == {"num_messages", "num_tool_calls", "agent_chars"}
    controlled = table["auroc_stratified"].dropna().to_numpy()  # rows ordered by the length-controlled AUROC
    assert (np.diff(controlled) <= 1e-12).all()
    steadiest = _steadiest(run_dir)
    traj = pd.read_parquet(run_dir / "trajectories.parquet").set_index("task_id")
    expected = roc_auc_score(traj.loc[steadiest.index, "reward"] < 1, -steadiest)
    assert row["auroc"] == pytest.approx(expected)
    done = _cli("evaluate", run_dir, "--uncertainty", "assistant.steadiest_turn", "--plugin", plugin, "--n-boot", 50)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert metrics["invert"] and metrics["metrics"]["auroc"] == pytest.approx(expected)
    missing = _cli("evaluate", run_dir, "--uncertainty", "assistant.steadiest_turn")
    assert missing.returncode == 2 and "no estimator named 'assistant.steadiest_turn'" in missing.stderr


def test_a_plugins_inputs_are_stamped_and_a_stale_one_is_refused(run_dir, tmp_path):
    """The table's ``based_on`` is what its estimators read: the plugin's turn_summary is stamped although the
    only other estimator chosen (num_messages) reads the trajectories alone; replacing it makes the table stale."""
    import shutil

    from agentuq_nb.io.store.rundir import RunDir, StaleArtifactError

    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    plugin = tmp_path / "my_estimators.py"
    plugin.write_text(PLUGIN)
    done = _cli("compare-estimators", run, "--plugin", plugin, "--estimator", "num_messages",
                "--estimator", "assistant.steadiest_turn", "--no-blackbox", "--n-boot", 20)
    assert done.returncode == 0, done.stderr
    stamped = RunDir(run).manifest().artifacts["estimator_table.csv"].based_on
    assert set(stamped) == {"trajectories.parquet", "turn_summary.parquet"}
    table = read_estimator_table(run)
    assert set(table.loc[table["family"] != "combined", "estimator"]) == {"num_messages", "assistant.steadiest_turn"}
    aggregate(run)  # a new turn_summary: the plugin's scores no longer match the table
    with pytest.raises(StaleArtifactError, match="estimator_table.csv was computed from an earlier turn_summary"):
        read_estimator_table(run)


def test_a_plugin_package_registers_through_its_entry_point(run_dir, tmp_path):
    site = tmp_path / "site"
    (site / "steady_plugin").mkdir(parents=True)
    (site / "steady_plugin" / "__init__.py").write_text(PLUGIN)
    dist = site / "steady_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: steady-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[agentuq_nb.estimators]\nbroken = no_such_module:Nothing\n"
                                           "steadiest = steady_plugin:SteadiestTurn\n")
    done = _cli("estimators", run_dir, env={"PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("assistant.steadiest_turn"))
    assert "plugin" in line and "inverted" in line
    assert "'broken' (no_such_module:Nothing) failed to load" in done.stderr  # named, and the others still load
    # a module name works where a folder of that name is in the current directory (a plugin's own checkout)
    done = subprocess.run([CLI, "estimators", str(run_dir), "--plugin", "steady_plugin"], cwd=site,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(site)})
    assert done.returncode == 0 and "assistant.steadiest_turn" in done.stdout, done.stderr


def test_a_registered_class_in_this_process(run_dir):
    @register
    class LongestConversation(Estimator):
        name = "test.longest_conversation"
        higher_is_uncertain = True

        def scores(self, run):
            return estimators.get("num_messages").scores(run) * 2

    try:
        assert "test.longest_conversation" in estimators.available(run_dir)
        table = compare_estimators(run_dir, n_boot=20, names=["test.longest_conversation", "num_messages"])
        auroc = table.set_index("estimator")["auroc"]
        assert auroc["test.longest_conversation"] == pytest.approx(auroc["num_messages"])  # same ranking
    finally:
        estimators.unregister("test.longest_conversation")


def test_a_registered_name_overrides_a_family_member_everywhere(run_dir):
    @register
    class Override(Estimator):
        name = "assistant.avg_token_nll"
        family = "token"

        def scores(self, run):
            return estimators.get("num_messages").scores(run)

    try:
        assert type(estimators.get("assistant.avg_token_nll")).__name__ == "Override"
        listed = [e for e in estimators.estimators(run_dir) if e.name == "assistant.avg_token_nll"]
        assert len(listed) == 1 and type(listed[0]).__name__ == "Override"
    finally:
        assert type(estimators.unregister("assistant.avg_token_nll")).__name__ == "Override"
    assert type(estimators.get("assistant.avg_token_nll")).__name__ == "TokenEstimator"


def test_a_misspelled_role_or_scorer_says_what_exists(run_dir):
    with pytest.raises(ValueError, match=r"no rows for role 'asistant'.*assistant.avg_token_nll"):
        evaluate(run_dir, uncertainty="asistant.avg_token_nll", n_boot=10)
    with pytest.raises(ValueError, match="no rows for role 'assistant' and scorer 'agnet_llm'"):
        evaluate(run_dir, uncertainty="avg_token_nll", scorer="agnet_llm", n_boot=10)


def test_the_estimator_table_of_a_held_out_run_equals_the_pre_registry_one(tmp_path):
    """tests/data/golden_synthetic was written by the code before the registry (commit 3f48db7) on this run."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=30, messages_per_simulation=12,
                                      tokens_per_message=9, seed=11, signal=0.35)
    run = tmp_path / "run"
    extract(results, run)
    aggregate(run)
    run_saup(run, embedder="hash", k_folds=3, seed=0)
    early_warning(run, n_boot=200, seed=0)
    traj = pd.read_parquet(run / "trajectories.parquet")
    conf = np.clip(np.where(traj["reward"] < 1, 0.4, 0.7) + np.random.default_rng(7).normal(0, 0.2, len(traj)), 0, 1)
    traj[["domain", "task_id", "trial", "seed"]].assign(verbalized_confidence=conf).to_csv(
        run / "verbalized_confidence.csv", index=False)
    got = compare_estimators(run, n_boot=200, seed=0)
    golden = pd.read_csv(GOLDEN / "estimator_table.csv")
    # the table has since gained calibration and length-control columns, the combined predictor's rows and
    # an order by the length-controlled AUROC: the golden rows and columns are unchanged
    on_disk = pd.read_csv(run / "estimator_table.csv")
    single = on_disk[on_disk["family"] != "combined"].set_index("estimator").loc[golden["estimator"]].reset_index()
    # since issue 40 the length baseline the control stratifies on says why its controlled AUROCs are left out
    from agentuq_nb.evaluation.estimator_table import LENGTH_COLUMN, SELF_STRATIFIED

    noted = single["undefined"].fillna("").str.contains(SELF_STRATIFIED, regex=False)
    assert single.loc[noted, "estimator"].tolist() == [LENGTH_COLUMN]
    single["undefined"] = single["undefined"].str.replace(f"; {SELF_STRATIFIED}", "", regex=False).replace(
        SELF_STRATIFIED, np.nan)
    pd.testing.assert_frame_equal(single[list(golden.columns)], golden, check_exact=False, rtol=1e-9)
    assert len(golden) == 33
    # besides them: the black-box families (issue 28) and the six combined predictors
    added = got[~got["estimator"].isin(golden["estimator"])]
    assert set(added["family"]) == {"combined", "structure", "tracer"} and (added["family"] == "combined").sum() == 6
    for role, statistic in (("assistant", "avg_token_nll"), ("assistant", "min_chosen_prob"),
                            ("user", "mean_topk_entropy")):
        evaluate(run, role=role, uncertainty=statistic, n_boot=200, seed=0)
        _assert_close(_without(json.loads((run / "eval_metrics.json").read_text()), METRICS_ADDED_SINCE_GOLDEN),
                      json.loads((GOLDEN / f"eval_metrics.{role}.{statistic}.json").read_text()))
        pd.testing.assert_frame_equal(pd.read_csv(run / "eval_curves.csv"),
                                      pd.read_csv(GOLDEN / f"eval_curves.{role}.{statistic}.csv"))


METRICS_ADDED_SINCE_GOLDEN = {"auarc_tie_mean"}  # metrics the golden files predate (checked in test_evaluation_metrics)


def _without(value, keys: set[str]):
    """``value`` with every dict entry named in ``keys`` left out, at any depth."""
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    return [_without(v, keys) for v in value] if isinstance(value, list) else value


def _assert_close(got, want, where="") -> None:
    """Equal JSON, numbers to 1e-9 relative."""
    if isinstance(want, dict):
        assert list(got) == list(want), where
        for key in want:
            _assert_close(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_close(g, w, f"{where}[{i}]")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-9), where
    else:
        assert got == want, where


def test_notebooks_and_paper_code_select_estimators_by_name():
    """No notebook of 04/05/07/08/09 or the paper/conformal code reads a summary column to evaluate it."""
    for nb in ("04_evaluate", "05_observation_uq", "07_dynamics_saup", "08_conformal", "09_paper_figures"):
        text = (ROOT / "notebooks" / f"{nb}.ipynb").read_text()
        assert "select_estimator" not in text and "failure_metrics(" not in text, nb
    for module in ("pipeline/paper.py", "pipeline/conformal.py"):
        text = (ROOT / "src" / "agentuq_nb" / module).read_text()
        assert "failure_metrics(" not in text and "select_estimator" not in text, module


def test_help_lists_the_estimators_command():
    done = _cli("--help")
    assert "estimators" in done.stdout and "compare-estimators" in done.stdout


def test_plugin_spec_errors_are_clear(tmp_path, run_dir):
    done = _cli("compare-estimators", run_dir, "--plugin", tmp_path / "nope.py")
    assert done.returncode == 2 and "nope.py" in done.stderr and "Traceback" not in done.stderr
    broken = tmp_path / "broken.py"
    broken.write_text(textwrap.dedent("def oops(:\n"))
    done = _cli("compare-estimators", run_dir, "--plugin", broken)
    assert done.returncode == 2 and "SyntaxError" in done.stderr
