"""Task integrity and failure forensics on real files of each shape: every reader checks that a simulation's task is
the one its harness checked, ``analyze`` says a mismatch once per run with its count, and the explorer shows the
harness's expected actions (never a mismatched task's), the call that counted, the unrequested writes, the first
divergence and which check decided the reward - in the data and, in Chromium, on the page.

The files: a shared τ²-bench v0 JSON run whose ``tasks`` list is rotated by one (each task id given the next task of
the same domain, as a leaderboard file's shipped list can be: another customer's instructions and actions); the
shared retail run written as a τ²-bench v1.0.1 results directory (``results.json`` + ``simulations/``, as v1.0.1's
``Results.save(format="dir")`` writes it) whose ``tasks`` are those τ²-bench v1.0.1 ships for retail (two of them
changed since the run: a real mismatch); an original τ-bench run (the task in each entry); and the bare list of
simulations of a leaderboard submission (no tasks: the harness's checks are all there is)."""
from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from test_explorer import chromium_session, open_explorer, screenshot

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
AIRLINE = SHARED / "data" / "tau2" / "gpt-4.1_airline_1trial.json"
RETAIL = SHARED / "data" / "real_runs" / "ft-gpt-4.1_retail_1trial.json"
LEADERBOARD_LIST = SHARED / "data" / "real_runs" / "claude-opus-4-6_airline_simulation-list.json"
RETAIL_TASKS_V101 = SHARED / "tau2-bench-1.0.1" / "data" / "tau2" / "domains" / "retail" / "tasks.json"
MISMATCH = ("the file's task does not match the harness's checks; expected actions taken from the harness's checks")


def _need(*paths: Path) -> None:
    for path in paths:
        if not path.exists():
            pytest.skip(f"{path} is absent (the shared runs and τ²-bench sit beside the checkout)")


def rotated_airline(tmp: Path) -> Path:
    """The shared GPT-4.1 airline run (20 simulations, 18 with action checks) with its tasks rotated by one."""
    _need(AIRLINE)
    data = json.loads(AIRLINE.read_text())
    ids = [t["id"] for t in data["tasks"]]
    data["tasks"] = [{**t, "id": ids[(i + 1) % len(ids)]} for i, t in enumerate(data["tasks"])]
    path = tmp / "gpt-4.1_airline_rotated_tasks.json"
    path.write_text(json.dumps(data))
    return path


def retail_v101_directory(tmp: Path) -> Path:
    """The shared retail run (40 simulations) as a τ²-bench v1.0.1 results directory carrying v1.0.1's retail
    tasks."""
    _need(RETAIL, RETAIL_TASKS_V101)
    data = json.loads(RETAIL.read_text())
    folder = tmp / "ft-gpt-4.1_retail_v101"
    (folder / "simulations").mkdir(parents=True)
    index = [{"id": s["id"], "task_id": s["task_id"], "trial": s["trial"], "reward": s["reward_info"]["reward"],
              "termination_reason": s["termination_reason"], "agent_cost": s.get("agent_cost"),
              "duration": s.get("duration")} for s in data["simulations"]]
    header = {"timestamp": data["timestamp"], "info": data["info"], "tasks": json.loads(RETAIL_TASKS_V101.read_text()),
              "simulation_index": index}
    (folder / "results.json").write_text(json.dumps(header, indent=2))
    for sim in data["simulations"]:
        (folder / "simulations" / f"{sim['id']}.json").write_text(json.dumps(sim, indent=2))
    return folder


def counted(path: Path) -> dict | None:
    from agentuq_nb.io.errors import InputWarnings
    from agentuq_nb.io.ingest.results import iter_simulations

    warnings = InputWarnings()
    n = sum(1 for _ in iter_simulations(path, warnings))
    assert n > 0
    return warnings.as_dict().get("tasks_not_the_simulated")


def test_every_reader_checks_the_task_against_the_harness(tmp_path):
    """v0 JSON, a v1.0.1 directory, τ-bench's list, a bare list of simulations: the mismatches counted among the
    simulations compared (those whose harness recorded action checks), the first named."""
    rotated = counted(rotated_airline(tmp_path))
    # all 20 compared: 18 with action checks, 2 whose harness noted that their task has no actions
    assert (rotated["count"], rotated["of"]) == (20, 20) and "task" in rotated["example"]
    directory = counted(retail_v101_directory(tmp_path))
    # tasks 12 and 18 changed in v1.0.1 (18: the exchange's new item, 8069050545 in the run, 1071497737 in v1.0.1)
    assert (directory["count"], directory["of"]) == (2, 40) and directory["example"].endswith(", task 18")
    # the same as one v1 JSON file (v1.0.1's single-file results: the simulations inline, its format named)
    single = json.loads((directory_path := tmp_path / "ft-gpt-4.1_retail_v101" / "results.json").read_text())
    single["simulations"] = [json.loads(f.read_text()) for f in sorted(directory_path.parent.glob("simulations/*"))]
    (tmp_path / "v1.json").write_text(json.dumps({**single, "format_version": "1.0"}))
    assert {k: v for k, v in counted(tmp_path / "v1.json").items() if k != "example"} == {"count": 2, "of": 40}
    assert counted(AIRLINE) is None and counted(RETAIL) is None  # the shared files carry their own tasks
    _need(LEADERBOARD_LIST)
    assert counted(LEADERBOARD_LIST) is None  # no tasks: nothing to disagree with

    from test_tau_bench_results import REWARDS, tool_calling_entry, write_json

    entries = [tool_calling_entry(task, trial, float(REWARDS[task][trial])) for trial in range(4) for task in range(3)]
    assert counted(write_json(tmp_path / "tool-calling-retail.json", entries)) is None
    entries = json.loads(json.dumps(entries))  # the entry's task and its reward_info's actions: two lists now
    entries[0]["info"]["task"]["actions"][0]["kwargs"]["order_id"] = "#W9"  # info.task is not what τ-bench checked
    assert counted(write_json(tmp_path / "tool-calling-retail.json", entries)) == {
        "count": 1, "of": 11, "example": f"{tmp_path / 'tool-calling-retail.json'} simulation 0-0, task 0"}


@pytest.fixture(scope="module")
def retail_run(tmp_path_factory) -> Path:
    """``analyze`` of the v1.0.1 retail directory (its output kept as ``said.txt`` in the run folder's parent)."""
    from agentuq_nb.cli import app

    tmp = tmp_path_factory.mktemp("retail")
    results = retail_v101_directory(tmp)
    out = CliRunner().invoke(app, ["analyze", str(results), "--out", str(tmp / "run"), "--embedder", "hash",
                                   "--n-boot", "20", "--no-figures"])
    assert out.exit_code == 0, out.output
    (tmp / "said.txt").write_text(out.stderr)
    return tmp / "run"


def test_analyze_says_the_mismatch_once_and_the_explorer_shows_the_harness_actions(retail_run):
    from agentuq_nb.figures.explorer import explorer_data
    from agentuq_nb.io.store.rundir import RunDir

    said = [line for line in (retail_run.parent / "said.txt").read_text().splitlines() if MISMATCH in line]
    assert len(said) == 1 and said[0].startswith(f"warning: 2 of 40 trajectories: {MISMATCH} (first: "), said
    assert RunDir(retail_run).manifest().warnings["tasks_not_the_simulated"]["of"] == 40
    assert f"2 of 40 trajectories: {MISMATCH}" in html.unescape((retail_run / "report.html").read_text())

    data = explorer_data(retail_run)
    assert data["runs"][0]["task_mismatch"] == {"n": 2, "of": 40, "text": f"2 of 40 trajectories: {MISMATCH}"}
    by_task = {t["task_id"]: t for t in data["trajectories"]}
    assert sorted(k for k, t in by_task.items() if t["task_mismatch"]) == ["12", "18"]
    raw = {json.loads(p.read_text())["task_id"]: json.loads(p.read_text())
           for p in (retail_run.parent / "ft-gpt-4.1_retail_v101" / "simulations").glob("*.json")}
    for task_id, t in by_task.items():
        checks = raw[task_id]["reward_info"]["action_checks"]
        assert [x["name"] for x in t["expected"]] == [c["action"]["name"] for c in checks]
        assert t["expected_from"] == "harness" and [x["matched"] for x in t["expected"]] == [
            c["action_match"] for c in checks]
    eighteen = by_task["18"]
    assert eighteen["task"] is None  # another version's task: its instructions are not shown as this one's
    exchange = next(x for x in eighteen["expected"] if x["name"] == "exchange_delivered_order_items")
    assert '"new_item_ids": ["8069050545"]' in exchange["arguments"]  # the harness's, not v1.0.1's 1071497737
    assert by_task["27"]["task"] is not None and data["tasks"][by_task["27"]["task"]]["instructions"]

    # the forensics of task 27 (checked by hand against its JSON in test_reward_checks)
    t = by_task["27"]
    assert t["divergence"]["message"] == 20 and "return_delivered_order_items" in t["divergence"]["what"]
    assert [m["name"] for m in t["made"] if m["ci"] in t["unrequested"]] == ["return_delivered_order_items"]
    assert t["verdict"]["decided_by"] == ["DB"] and t["verdict"]["text"].startswith("decided by the database check")
    assert data["runs"][0]["write_tools_from"].startswith("the tool's name")  # this file defines no tool types


def test_the_cause_is_pointed_at_in_chromium(retail_run, tmp_path):
    """On the page: the run's mismatch said once; task 27's unrequested return marked on its call and as the first
    divergence, the errored exchange the harness credited said to have changed nothing, what decided the reward;
    task 64's argument diff (only new_item_ids); task 18's expected actions the harness's, with the mismatch said."""
    from agentuq_nb.cli import app

    page_path = tmp_path / "retail.html"
    out = CliRunner().invoke(app, ["explore", str(retail_run), "--out", str(page_path)])
    assert out.exit_code == 0, out.output
    errors: list = []
    with chromium_session() as p:
        browser, page = open_explorer(p, page_path, errors)
        assert page.locator(".aq-runs .aq-task-mismatch").inner_text() == f"2 of 40 trajectories: {MISMATCH}"

        def open_task(task_id: str):
            page.fill(".aq-search", f"task {task_id}\n")
            page.locator(".aq-list .aq-item", has_text=f"task {task_id}").first.click()
            return page.locator(".aq-pane >> nth=0")

        pane = open_task("27")
        forensics = pane.locator(".aq-forensics")
        assert forensics.get_attribute("open") is not None
        assert "decided by the database check (database 0); communicate passed" in \
            forensics.locator(".aq-reward-verdict").inner_text()
        assert "[20] return_delivered_order_items: a write no expected action asked for" in \
            forensics.locator(".aq-divergence").inner_text()
        marked = pane.locator('.aq-msg[data-idx="20"]')
        assert "aq-diverged" in marked.get_attribute("class")
        assert marked.locator(".aq-call .aq-unrequested").inner_text() == "unrequested write"
        assert pane.locator(".aq-unrequested").count() == 1  # the reads and the expected exchange are not marked
        exchange = forensics.locator('tr[data-expected="27_5"]')
        assert "errored: credited, but changed nothing" in exchange.inner_text() and "[22]" in exchange.inner_text()
        assert pane.locator('.aq-msg[data-idx="22"] .aq-call .aq-evchip').first.inner_text() == (
            "expected call 27_5 ✓ (credited, but it errored: changed nothing)")
        screenshot(page, tmp_path, "retail_27_unrequested_write.png")
        forensics.locator(".aq-divergence .aq-goto").click()  # the link goes to the message
        assert marked.is_visible()

        pane = open_task("64")
        diff = pane.locator('.aq-forensics tr[data-expected="64_7"] .aq-argdiff')
        assert diff.locator("tr").count() == 2  # its header and new_item_ids: the other arguments are equal
        assert diff.locator("tr").nth(1).inner_text().split("\t") == ["new_item_ids", '["6700049080"]', '["6117189161"]']
        assert "[28]" in pane.locator('.aq-forensics tr[data-expected="64_7"]').inner_text()
        screenshot(page, tmp_path, "retail_64_argument_diff.png")

        pane = open_task("18")
        note = pane.locator(".aq-forensics > .aq-task-mismatch").inner_text()
        assert note.startswith("The file's task 18 does not match the harness's checks")
        assert pane.locator(".aq-task").count() == 0  # the v1.0.1 task's instructions are not shown
        assert "as the harness checked them" in pane.locator(".aq-expected .aq-section-head").inner_text()
        shown = pane.locator(".aq-expected").inner_text()
        assert shown.count('"8069050545"') == 2 and "1071497737" not in shown  # the harness's item, both times
        screenshot(page, tmp_path, "retail_18_task_mismatch.png")
        browser.close()
    assert errors == []


def test_the_explorer_of_a_v0_file_with_other_tasks_a_file_without_tasks_and_tau_bench(tmp_path):
    """The rotated airline run (v0 JSON): every trajectory's expected calls are the harness's and no task is shown;
    the leaderboard's bare list (no tasks): the expected calls are the harness's; τ-bench: which check decided the
    reward, and a trajectory τ-bench never scored said to have none computed."""
    from agentuq_nb.figures.explorer import explorer_data
    from agentuq_nb.io.input_warnings import InputDataWarning
    from agentuq_nb.steps.extract import extract

    results = rotated_airline(tmp_path)
    edited = json.loads(results.read_text())
    edited["simulations"][0]["reward_info"] = None  # one the harness did not score: nothing to compare its task with
    results.write_text(json.dumps(edited))
    raw = {s["task_id"]: s for s in edited["simulations"]}
    with pytest.warns(InputDataWarning, match=f"19 of 19 trajectories: {MISMATCH}"):
        extract(results, tmp_path / "rotated")
    data = explorer_data(tmp_path / "rotated")
    assert data["runs"][0]["task_mismatch"]["text"] == f"19 of 19 trajectories: {MISMATCH}"
    assert data["tasks"] == {}  # no task of this file is shown
    for t in data["trajectories"]:
        assert t["task"] is None
        if raw[t["task_id"]]["reward_info"] is None:  # not compared, but its run's tasks are not the simulated ones
            assert t["task_unverified"] and not t["task_mismatch"] and t["expected"] == []
            assert not t["verdict"]["computed"] and "reward_info is null" in t["verdict"]["text"]
            continue
        checks = raw[t["task_id"]]["reward_info"]["action_checks"] or []
        assert t["task_mismatch"] and [(x["name"], x["matched"]) for x in t["expected"]] == [
            (c["action"]["name"], c["action_match"]) for c in checks]

    _need(LEADERBOARD_LIST)
    extract(LEADERBOARD_LIST, tmp_path / "list")
    data = explorer_data(tmp_path / "list")
    assert data["runs"][0]["task_mismatch"] is None
    raw = {s["task_id"]: s for s in json.loads(LEADERBOARD_LIST.read_text())}
    failed = next(t for t in data["trajectories"] if t["failed"])
    assert failed["expected_from"] == "harness" and len(failed["expected"]) == len(
        raw[failed["task_id"]]["reward_info"]["action_checks"])
    assert failed["verdict"]["decided_by"] == ["COMMUNICATE"]  # its one failure: every expected call made

    from test_tau_bench_results import REWARDS, tool_calling_entry, write_json

    entries = [tool_calling_entry(task, trial, float(REWARDS[task][trial])) for trial in range(4) for task in range(3)]
    extract(write_json(tmp_path / "tool-calling-retail.json", entries), tmp_path / "tau")
    by_key = {(t["task_id"], t["trial"]): t for t in explorer_data(tmp_path / "tau")["trajectories"]}
    assert by_key[("1", 1)]["verdict"]["text"].startswith("decided by τ-bench's database check (the hash after the "
                                                         "run differs")
    unscored = by_key[("2", 1)]  # out of steps: τ-bench wrote reward 0 and no check
    assert not unscored["verdict"]["computed"] and unscored["verdict"]["text"].startswith("no check was computed")
    assert by_key[("0", 0)]["expected_from"] == "harness" and by_key[("0", 0)]["task"] is not None
