"""Observation scoring and rescore on real τ²-bench trajectories, with the embedded model."""
from __future__ import annotations

import json
import math
import re
import shutil

import pytest

from agentuq_nb import llm
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.records import Simulation
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.evaluate import evaluate
from agentuq_nb.steps.rescore import rescore
from agentuq_nb.steps.score_observations import score_observations
from agentuq_nb.uq.observation import agent_system_prompt, conversation

pytestmark = pytest.mark.slow
POLICY_CHARS = 600
MESSAGES = 6


@pytest.fixture(scope="module")
def small_real_results(tmp_path_factory):
    """Two real trajectories (a success and a failure: of each, the shortest whose first 6 messages hold a user message
    and a tool result), each cut to those 6 messages, and the domain policy in the file's header cut to its first 600
    characters: every scorer's system prompt holds it, and every scoring pass of this module decodes the prompt once
    and both trajectories' messages (the agent's pass: 1,333 tokens, where 1,500 characters of policy and the first
    two such trajectories of 7 messages took 1,870)."""
    from conftest import require_tau2

    tmp_path = tmp_path_factory.mktemp("observation")
    data = json.loads(require_tau2()[0].read_text())
    by_reward = {}
    for sim in data["simulations"]:
        sim["messages"] = sim["messages"][:MESSAGES]
        roles = [m["role"] for m in sim["messages"]]
        if "tool" in roles and "user" in roles:
            by_reward.setdefault(sim["reward_info"]["reward"], []).append(sim)
    shortest = [min(by_reward[reward], key=lambda sim: len(json.dumps(sim["messages"]))) for reward in (1.0, 0.0)]
    data["simulations"] = shortest
    policy = data["info"]["environment_info"]["policy"]
    assert len(policy) > POLICY_CHARS
    data["info"]["environment_info"]["policy"] = policy[:POLICY_CHARS]
    path = tmp_path / "real_small.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def agent_scored(small_real_results, tmp_path_factory):
    """The two trajectories' observations scored by the embedded model as the agent saw them (once for the module:
    the tests below read the run, or copy it before they add to it)."""
    run_dir = tmp_path_factory.mktemp("agent_scored") / "run"
    report = score_observations(run_dir, results=small_real_results, scorer_mode="agent_llm", progress=False)
    return run_dir, report


@pytest.fixture(scope="module")
def rescored(small_real_results, tmp_path_factory):
    """The two trajectories rescored (every message) by the embedded model, once for the module: the tests below copy
    the run before they add to it."""
    run_dir = tmp_path_factory.mktemp("rescored") / "run"
    report = rescore(small_real_results, run_dir, progress=False)
    return run_dir, report


def test_observation_rows_for_every_user_and_tool_message(agent_scored, small_real_results):
    run_dir, report = agent_scored
    assert report.scored == 2 and report.num_tokens > 0
    tokens = read_token_table(run_dir)
    data = json.loads(small_real_results.read_text())
    for sim in data["simulations"]:
        mine = tokens[tokens["task_id"] == sim["task_id"]]
        observed = {i for i, m in enumerate(sim["messages"]) if m["role"] in ("user", "tool") and m["content"]}
        assert set(mine["message_idx"]) == observed
        assert set(mine["scorer"]) == {"agent_llm"} and set(mine["source"]) == {"teacher_forced"}
        assert set(mine["role"]) == {"user", "tool"}
    # resumable: nothing is scored twice
    again = score_observations(run_dir, results=small_real_results, scorer_mode="agent_llm", progress=False)
    assert again.scored == 0 and again.skipped == 2
    assert len(read_token_table(run_dir)) == len(tokens)


def test_teacher_forced_nll_equals_llm_score_of_the_message(agent_scored, small_real_results):
    tokens = read_token_table(agent_scored[0])
    raw = json.loads(small_real_results.read_text())
    sim = Simulation.model_validate(raw["simulations"][0])
    msgs = conversation(sim)
    system = agent_system_prompt(raw["info"])
    checked = 0
    for idx, m in enumerate(msgs):
        if m["role"] not in ("user", "tool"):
            continue
        alone = llm.score(msgs[:idx], m, system=system)
        mine = tokens[(tokens["task_id"] == sim.task_id) & (tokens["message_idx"] == idx)]
        assert len(mine) == len(alone)
        assert mine["chosen_logprob"].sum() == pytest.approx(sum(r["chosen_logprob"] for r in alone), abs=1e-3)
        checked += 1
    assert checked >= 2


def test_auxiliary_observer_scores_differ_from_the_agents_view(tmp_path, agent_scored, small_real_results):
    run_dir = shutil.copytree(agent_scored[0], tmp_path / "run", symlinks=True)
    score_observations(run_dir, results=small_real_results, scorer_mode="auxiliary_llm", progress=False)
    tokens = read_token_table(run_dir)
    nll = tokens.groupby("scorer")["chosen_logprob"].sum()
    assert set(nll.index) == {"agent_llm", "auxiliary_llm"}
    assert not math.isclose(nll["agent_llm"], nll["auxiliary_llm"], rel_tol=1e-6)  # different prompts, different surprise


def test_rescore_then_aggregate_and_evaluate(tmp_path, rescored, small_real_results):
    run_dir, report = shutil.copytree(rescored[0], tmp_path / "rescored", symlinks=True), rescored[1]
    tokens = read_token_table(run_dir)
    data = json.loads(small_real_results.read_text())
    for sim in data["simulations"]:
        mine = tokens[tokens["task_id"] == sim["task_id"]]
        nonempty = {i for i, m in enumerate(sim["messages"]) if m["content"] or m["tool_calls"]}
        assert set(mine["message_idx"]) == nonempty  # every message, tool calls included
    _, trajs = aggregate(run_dir)
    roles = set(trajs["role"])
    assert {"assistant", "observation_user", "observation_tool", "observation_combined", "total"} <= roles
    result = evaluate(run_dir, role="total", n_boot=100)
    assert result["n"] == 2 and result["metrics"]["auroc"] in (0.0, 1.0)
    assert report.as_dict()["scored"] == 2


def test_observation_notebook_on_a_rescored_real_file(tmp_path, rescored, small_real_results):
    """The notebook's rescore resumes the run rescored above (in this process: a kernel would load the model and
    decode the airline prompts once more to score the same messages), then it aggregates, evaluates and draws."""
    from pathlib import Path

    import nbformat
    import papermill as pm

    root = Path(__file__).resolve().parents[1]
    run_dir, figures_dir = shutil.copytree(rescored[0], tmp_path / "run", symlinks=True), tmp_path / "figures"
    pm.execute_notebook(str(root / "notebooks" / "05_observation_uq.ipynb"), str(tmp_path / "05.ipynb"),
                        parameters={"run_dir": str(run_dir), "figures_dir": str(figures_dir),
                                    "rescore_results": str(small_real_results), "n_boot": 100},
                        cwd=str(root), progress_bar=False)
    for name in ("observation_user_nll_density", "observation_tool_surprise", "observation_auroc_by_part"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000, name
    executed = nbformat.read(tmp_path / "05.ipynb", as_version=4)
    shown = "".join(str(o.get("data", {}).get("text/plain", "")) for c in executed.cells if c.cell_type == "code"
                    for o in c.get("outputs", []))
    # the kernel's rescore resumed both simulations (its report is the cell's value, pretty-printed)
    assert re.search(r"'scored': 0,\s*'skipped_already_scored': 2,", shown), shown[:500]
