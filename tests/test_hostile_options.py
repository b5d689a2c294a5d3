"""Options and inputs that were taken silently or said badly (issue 41, points 3, 4 and 6): every option checked
against its bounds and against what the run holds before anything is replaced, nothing mixed or dropped without
a word, every refusal one line naming the file or the option."""
from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path

import pytest
from tests.test_hostile_folders import assert_ended_cleanly, run_cli

from agentuq_nb.io.errors import InputError, StaleArtifactError
from agentuq_nb.io.input_warnings import InputDataWarning
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """A run analyzed from synthetic results (black-box tables with the hash embedder), and the results."""
    root = tmp_path_factory.mktemp("options")
    results = write_synthetic_results(root / "src", num_simulations=6, messages_per_simulation=6, tokens_per_message=3,
                                      seed=3)
    code, stdout, stderr = run_cli("analyze", results, "--out", root / "run", "--n-boot", "0", "--embedder", "hash",
                                   "--no-figures")
    assert code == 0, stderr
    return results, root / "run"


@pytest.fixture
def run(analyzed, tmp_path):
    results, made = analyzed
    shutil.copytree(results.parent, tmp_path / "src")
    shutil.copytree(made, tmp_path / "run")
    return tmp_path / "src" / "results.json", tmp_path / "run"


def _files(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run.iterdir()) if p.is_file() and not p.name.startswith(".")}


def refused(*args) -> str:
    """The one error line of a command that must refuse."""
    code, stdout, stderr = run_cli(*args)
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2, (args, stdout[-500:], stderr[-500:])
    return stderr.strip().splitlines()[-1]


# --------------------------------------------------------------------------- early-warning (points 4 and 6)

@pytest.mark.parametrize("options, said", [
    (["--fraction", "-0.5"], "--fraction -0.5 is not a share of a trajectory: give values in (0, 1]"),
    (["--fraction", "nan"], "--fraction nan is not a share"),
    (["--fraction", "1.5"], "--fraction 1.5 is not a share"),
    (["--fraction", "0"], "--fraction 0 is not a share"),
    (["--fraction", "0.5", "--fraction", "0.5"], "--fraction repeats a value"),
    (["--role", "wizard"], "turn_summary.parquet: --role 'wizard': the table has no turns of that role (its roles: "
                           "assistant, user)"),
    (["--scorer", "nope"], "--scorer 'nope': the table has no assistant turns scored by it (its scorers of assistant "
                           "turns: self)"),
    (["--value", "task_id"], "--value 'task_id' identifies a turn rather than measuring it (the table's per-turn "
                             "values: num_tokens"),
    (["--value", "nope"], "--value 'nope' is not a column of the table"),  # was "error: nope"
    (["--n-boot", "100000000"], "Invalid value for '--n-boot'"),  # passed 3 GB in 7 s
    (["--table", "blackbox_turns", "--scorer", "self"], "blackbox_turns.parquet: --scorer 'self'"),
])
def test_early_warning_options_are_checked_against_the_run_before_anything_is_replaced(run, options, said):
    _, folder = run
    before = _files(folder)
    assert said in refused("early-warning", folder, "--n-boot", "0", *options)
    assert _files(folder) == before


def test_early_warning_still_follows_what_the_run_holds(run):
    _, folder = run
    code, stdout, stderr = run_cli("early-warning", folder, "--n-boot", "0", "--table", "blackbox_turns", "--scorer",
                                   "blackbox", "--value", "tracer_step_risk", "--fraction", "0.5", "--fraction", "1")
    assert code == 0, stderr
    assert "0.500" in stdout and "1.000" in stdout


# --------------------------------------------------------------------------- bounds of options (points 3 and 6)

@pytest.mark.parametrize("command", ["evaluate", "trials", "compare-estimators", "early-warning", "analyze",
                                     "compare-runs"])
def test_every_n_boot_is_bounded_and_every_seed_named(run, tmp_path, command):
    results, folder = run
    args = {"analyze": [command, results, "--out", folder], "compare-runs": [command, folder, "--out", tmp_path / "b"]
            }.get(command, [command, folder])
    started = time.monotonic()
    assert "Invalid value for '--n-boot'" in refused(*args, "--n-boot", "100000000")
    assert "Invalid value for '--seed'" in refused(*args, "--seed", "-1")  # was "Seed must be between 0 and 2**32 - 1"
    assert time.monotonic() - started < 60


def test_saup_offers_only_the_embedders_it_takes(run):
    _, folder = run
    code, stdout, _ = run_cli("saup", "--help")
    assert "minilm|hash" in stdout and "none" not in stdout.split("--embedder")[1].split("\n")[0]
    assert "--embedder" in refused("saup", folder, "--embedder", "none")


def test_a_control_character_in_an_option_is_shown_escaped(run):
    results, folder = run
    line = refused("extract", results, "--out", folder, "--score", "inc\x1b[31mRED\x01\u202e")
    assert "inc\\x1b[31mRED\\x01\\u202e" in line and "\x1b" not in line and "\x01" not in line


def test_explore_out_an_existing_folder_names_it_not_a_temporary_file(run):
    _, folder = run
    line = refused("explore", folder, "--out", folder.parent)
    assert f"{folder.parent}: is a directory" in line and ".tmp" not in line


# --------------------------------------------------------------------------- no silent mixing (point 4)

def test_analyze_into_a_folder_holding_another_run_is_refused_before_anything_changes(run, tmp_path):
    results, folder = run
    other = write_synthetic_results(tmp_path / "other", num_simulations=4, messages_per_simulation=6, seed=9)
    before = _files(folder)
    line = refused("analyze", other, "--out", folder, "--n-boot", "0", "--embedder", "hash")
    assert f"{folder}: holds another run (made from " in line and f"the run of {other}" in line and "new folder" in line
    assert line.endswith("; --out: a new folder; or remove this one")  # the store says out, the command line its flag
    assert _files(folder) == before
    shutil.copytree(results.parent, tmp_path / "copy")  # the same results elsewhere: the same run, analyzed again
    copy = tmp_path / "copy" / results.name
    code, _, stderr = run_cli("analyze", copy, "--out", folder, "--n-boot", "0", "--embedder", "hash", "--no-figures")
    assert code == 0, stderr


def test_tables_made_from_results_are_stamped_by_their_content_not_their_path(run, tmp_path):
    """The issue's mix: action samples made from the folder's own results were never stale, so another run's
    extraction kept them in the new estimator table (n = 2, no warning)."""
    from tests.test_action_uq import write_action_samples

    from agentuq_nb.io.store.artifacts import results_input

    results, folder = run
    samples = write_action_samples(folder)
    rundir = RunDir(folder)
    with rundir.commit("sample-actions") as commit:  # as the step commits them: based_on the results' content
        commit.write_parquet("action_samples", samples, results_input(rundir, results))
    rundir.verify("action_samples")
    data = json.loads(results.read_text())
    data["simulations"][0]["messages"][1]["content"] = "edited since"  # the same path, other content
    results.write_text(json.dumps(data))
    extract(results, folder, force=True)  # other content: another run, replaced only with --force
    with pytest.raises(StaleArtifactError, match="action_samples.parquet was made from other results than the run's"):
        RunDir(folder).verify("action_samples")


def test_blackbox_results_are_honoured_or_refused(run, tmp_path):
    """``blackbox RUN --results FILE`` ignored FILE (even /dev/zero) while the tables were up to date: now FILE is
    read when it holds the run's results (a copy elsewhere), and refused when its content is other."""
    results, folder = run
    assert "/dev/zero: is a character device" in refused("blackbox", folder, "--embedder", "hash", "--results",
                                                         "/dev/zero")
    edited = tmp_path / "edited.json"
    data = json.loads(results.read_text())
    data["simulations"][0]["messages"][1]["content"] = "I am sorry, I cannot help with that."
    edited.write_text(json.dumps(data))
    line = refused("blackbox", folder, "--embedder", "hash", "--results", edited)
    assert f"{edited}: --results: not the results {folder} was made from" in line
    moved = tmp_path / "moved.json"
    shutil.copy(results, moved)
    code, stdout, stderr = run_cli("blackbox", folder, "--embedder", "hash", "--results", moved, "--force")
    assert code == 0, stderr
    assert json.loads((folder / "blackbox.json").read_text())["results"] == str(moved)
    line = refused("sample-actions", folder, "--k", "2", "--results", edited)  # before any model is loaded
    assert "--results: not the results" in line


# --------------------------------------------------------------------------- odd inputs (points 4 and 6)

@pytest.mark.parametrize("field, value, said", [
    ("trial", -1, "Input should be greater than or equal to 0 at 'trial' (it is -1)"),
    ("trial", True, "must be a whole number, not a boolean at 'trial' (it is True)"),
    ("trial", 10**30, "at 'trial' (it is 1000000000000000000000000000000)"),  # was an internal OverflowError
    ("seed", 10**30, "at 'seed'"),
    ("turn_idx", 10**30, "at 'messages.1.turn_idx'"),  # an internal OverflowError too
])
def test_odd_trials_and_seeds_are_refused_naming_the_simulation(tmp_path, field, value, said):
    results = write_synthetic_results(tmp_path / "src", num_simulations=3, messages_per_simulation=4, seed=2)
    data = json.loads(results.read_text())
    if field == "turn_idx":
        data["simulations"][1]["messages"][1][field] = value
    else:
        data["simulations"][1][field] = value
    results.write_text(json.dumps(data))
    line = refused("extract", results, "--out", tmp_path / "run")
    assert str(results) in line and said in line and "(at simulations[1])" in line


def test_a_tau_bench_reward_info_given_as_a_string_is_reported_not_taken_for_max_steps(tmp_path):
    from agentuq_nb.io.ingest.results import iter_simulations

    entries = [{"task_id": 0, "reward": 1.0, "trial": 0, "info": {"reward_info": "RewardResult(reward=1.0)"},
                "traj": [{"role": "system", "content": "# Retail agent policy"},
                         {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(entries))
    from agentuq_nb.io.errors import InputWarnings

    counted = InputWarnings()
    (sim,) = iter_simulations(path, counted)
    assert sim.termination_reason is None and sim.reward == 1.0
    assert counted.counts["tau_bench_reward_info_not_an_object"] == 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        extract(path, tmp_path / "run")
    said = [w.message for w in caught if isinstance(w.message, InputDataWarning)]
    assert any(m.kind == "tau_bench_reward_info_not_an_object" for m in said)


def test_a_transfer_run_that_holds_no_trajectories_is_refused(run, tmp_path):
    _, folder = run
    (tmp_path / "empty").mkdir()
    assert "--transfer-to: not a run folder" in refused("calibrate", folder, "--transfer-to", tmp_path / "empty")


def test_refusals_in_code_are_input_errors_naming_the_file(tmp_path):
    """The same checks reached from Python (a notebook), not only from the command line: worded in the config's
    field names (the command line says them in its flags: --role 'wizard')."""
    from agentuq_nb.steps.early_warning import early_warning

    results = write_synthetic_results(tmp_path / "src", num_simulations=4, messages_per_simulation=4, seed=4)
    extract(results, tmp_path / "run")
    aggregate(tmp_path / "run")
    with pytest.raises(InputError, match=": role 'wizard': the table has no turns of that role"):
        early_warning(tmp_path / "run", role="wizard", n_boot=0)
