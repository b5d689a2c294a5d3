"""The harness end to end on the embedded model (no mocks of the LLM): results shape, token rows,
uq_summary, determinism, resume, kill-and-restart, interrupts, secrets."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentuq_nb.records import Results
from agentuq_nb.records.summary import uq_summary
from agentuq_nb.records.tokens import DERIVED_FROM_MESSAGE, TOKEN_COLUMNS
from agentuq_nb.sim import RunConfigMismatch, UnknownDomainError, UnknownTaskError, run_simulations
from agentuq_nb.sim.runner import (
    CHECKPOINT_DIR,
    checkpoint_name,
    legacy_checkpoint_name,
    trial_seeds,
    without_wall_clock,
)

pytestmark = pytest.mark.slow

SRC = str(Path(__file__).resolve().parents[1] / "src")
TASKS = ["2", "10"]  # a refusal and a book lookup: short conversations
# four steps (the user's request, the agent's call, the tool's answer, the agent's reply) of short turns: each
# generated token is ~25 ms of CPU and a simulation's prompts ~1.5k tokens more to decode
PARAMS = dict(task_ids=TASKS, max_steps=4, max_errors=3, agent_max_tokens=32, user_max_tokens=24, progress=False)
SEED0 = trial_seeds(300, 1)[0]  # trial 0's seed under the default seed
def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def sidecar_rows(run_dir: Path) -> dict[str, list[dict]]:
    return {p.name: read_rows(p) for p in sorted((run_dir / "sidecars").glob("*.jsonl"))}


_CHILD = """
import sys
from agentuq_nb.sim import run_simulations
run_simulations("bookshop", sys.argv[1], **{params!r})
"""
FAKE_KEY = "sk-fake-key-must-never-be-written-0123456789"


@dataclass
class KilledRun:
    """What the killed runner left: its first checkpoint's bytes, whether results.json existed, its output."""

    first_checkpoint: bytes
    results_before_restart: bool
    child_output: str


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory) -> tuple[Path, KilledRun]:
    """The module's run, made as a user whose runner is killed makes it: the runner, a process of its own, is
    SIGKILLed right after its first checkpoint, and the same run is started again in this process (its model loaded
    once for the file), both with a fake API key set. The tests below read it as any run; test_same_seed_... compares
    it with an uninterrupted run, so the restart is proven complete and equal, not only well formed."""
    out = tmp_path_factory.mktemp("sim_a")
    env = dict(os.environ, PYTHONPATH=SRC, OPENAI_API_KEY=FAKE_KEY)
    child = subprocess.Popen([sys.executable, "-c", _CHILD.format(params=PARAMS), str(out)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first = out / CHECKPOINT_DIR / checkpoint_name("bookshop", TASKS[0], 0, SEED0)
    deadline = time.time() + 900
    while not first.exists() and child.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGKILL)
    child.wait()
    output = child.stdout.read().decode()[-2000:]
    assert first.exists(), output
    killed = KilledRun(first.read_bytes(), (out / "results.json").exists(), output)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_API_KEY", FAKE_KEY)
        assert run_simulations("bookshop", out, **PARAMS) == out / "results.json"
    return out, killed


@pytest.fixture(scope="module")
def run_dir(killed_run) -> Path:
    return killed_run[0]


def test_killed_run_restarts_and_completes_without_duplicates(killed_run):
    """SIGKILL the runner right after its first checkpoint, start it again: the rest is done once (see killed_run;
    the first test, so that the run is as the restart left it)."""
    run_dir, killed = killed_run
    assert not killed.results_before_restart
    first = run_dir / CHECKPOINT_DIR / checkpoint_name("bookshop", TASKS[0], 0, SEED0)
    assert first.read_bytes() == killed.first_checkpoint  # not redone
    results = json.loads((run_dir / "results.json").read_text())
    ids = [s["id"] for s in results["simulations"]]
    assert [s["task_id"] for s in results["simulations"]] == TASKS and len(set(ids)) == len(ids)
    assert sorted(p.name for p in (run_dir / CHECKPOINT_DIR).iterdir()) == sorted(
        checkpoint_name("bookshop", task, 0, SEED0) for task in TASKS)
    assert sorted(sidecar_rows(run_dir)) == sorted(f"logprobs_bookshop_{task}_trial0_seed{SEED0}.jsonl"
                                                   for task in TASKS)
    # the fake key in the environment reached no file
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert b"sk-fake-key-must-never-be-written" not in path.read_bytes(), path


def test_results_load_with_tau2_shape(run_dir):
    raw = json.loads((run_dir / "results.json").read_text())
    assert list(raw) == ["timestamp", "info", "tasks", "simulations"]
    results = Results.model_validate(raw)
    assert results.domain == "bookshop"
    info = raw["info"]
    assert info["environment_info"]["policy"].startswith("# Pageturn Books policy")
    assert info["agent_info"]["llm"] == info["user_info"]["llm"] == "local/smollm2-135m-instruct"
    assert info["seed"] == 300 and info["num_trials"] == 1 and info["max_steps"] == PARAMS["max_steps"]
    assert [t["id"] for t in raw["tasks"]] == TASKS
    assert [s.task_id for s in results.simulations] == TASKS
    for sim in results.simulations:
        assert sim.seed == trial_seeds(300, 1)[0] and sim.trial == 0
        assert sim.termination_reason in {"user_stop", "agent_stop", "max_steps", "too_many_errors"}
        assert sim.reward_info is not None and sim.reward_info.reward in (0.0, 1.0)
        first = sim.messages[0]
        assert first.role == "assistant" and first.content == "Hi! How can I help you today?"
        assert [m.turn_idx for m in sim.messages] == list(range(len(sim.messages)))
        for m in sim.messages:
            assert m.timestamp
            if m.role == "tool":
                assert m.error in (True, False) and m.requestor == "assistant"
        # tool messages answer the call before them
        for i, m in enumerate(sim.messages):
            if m.tool_calls:
                ids = [c.id for c in m.tool_calls]
                assert [x.id for x in sim.messages[i + 1:i + 1 + len(ids)]] == ids


def test_every_generated_message_has_its_token_rows(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    for sim in results["simulations"]:
        generated = [m for m in sim["messages"] if m["role"] in ("assistant", "user") and m.get("raw_data")]
        assert any(m["role"] == "user" for m in generated) and any(m["role"] == "assistant" for m in generated)
        paths = {m["raw_data"]["uq_logprobs"]["path"] for m in generated}
        assert len(paths) == 1
        rel = paths.pop()
        assert rel == f"sidecars/logprobs_bookshop_{sim['task_id']}_trial0_seed{sim['seed']}.jsonl"
        rows = read_rows(run_dir / rel)
        for m in generated:
            uq = m["raw_data"]["uq_logprobs"]
            assert uq["enabled"] is True and uq["format"] == "jsonl" and uq["schema_version"] == "uq_logprobs_v1"
            mine = [r for r in rows if r["message_idx"] == m["turn_idx"]]
            assert len(mine) == uq["num_tokens"] > 0
            assert [r["token_idx"] for r in mine] == list(range(len(mine)))
            for r in mine:
                assert r["role"] == m["role"] and r["turn_idx"] == m["turn_idx"]
                assert r["message_timestamp"] == m["timestamp"]
                assert (r["domain"], r["task_id"], r["trial"], r["seed"]) == ("bookshop", sim["task_id"], 0, sim["seed"])
                assert r["scorer"] == "self" and r["source"] == "generated"
                assert r["model"] == "local/smollm2-135m-instruct"
            if m["content"] and not m.get("tool_calls"):
                assert "".join(r["token"] for r in mine).strip() == m["content"].strip()
        assert sum(m["raw_data"]["uq_logprobs"]["num_tokens"] for m in generated) == len(rows)
        assert set(rows[0]) >= set(TOKEN_COLUMNS) - set(DERIVED_FROM_MESSAGE)  # the span is derived at extraction
        # non-generated messages carry no rows
        assert not [r for r in rows if r["message_idx"] not in {m["turn_idx"] for m in generated}]


def test_uq_summary_matches_sidecar_rows(run_dir):
    results = json.loads((run_dir / "results.json").read_text())
    for sim in results["simulations"]:
        rows = read_rows(run_dir / f"sidecars/logprobs_bookshop_{sim['task_id']}_trial0_seed{sim['seed']}.jsonl")
        expected = uq_summary(rows)
        assert set(expected) == set(sim["uq_summary"]) == {"assistant", "user", "combined"}
        for role, summary in expected.items():
            assert sim["uq_summary"][role] == pytest.approx(summary)
        # and an independent aggregation of the same rows
        for role in ("assistant", "user", "combined"):
            mine = [r for r in rows if role == "combined" or r["role"] == role]
            nll = [-r["chosen_logprob"] for r in mine]
            got = sim["uq_summary"][role]
            assert got["total_tokens"] == len(mine)
            assert got["trajectory_nll"] == pytest.approx(sum(nll))
            assert got["avg_token_nll"] == pytest.approx(sum(nll) / len(mine))
            assert got["mean_topk_entropy"] == pytest.approx(sum(r["topk_entropy"] for r in mine) / len(mine))
            assert got["min_chosen_prob"] == pytest.approx(min(r["chosen_prob"] for r in mine))


def test_same_seed_gives_identical_results_and_token_tables(run_dir, tmp_path):
    """An uninterrupted run, on two worker threads, equals the module's (killed and restarted) run: same content, same
    order."""
    run_simulations("bookshop", tmp_path, **PARAMS, max_concurrency=2)
    a = json.loads((run_dir / "results.json").read_text())
    b = json.loads((tmp_path / "results.json").read_text())
    assert without_wall_clock(a) == without_wall_clock(b)
    rows_a, rows_b = sidecar_rows(run_dir), sidecar_rows(tmp_path)
    assert list(rows_a) == list(rows_b)
    assert without_wall_clock(rows_a) == without_wall_clock(rows_b)


def test_rerun_resumes_without_calling_the_model(run_dir, monkeypatch):
    import agentuq_nb.llm as llm

    def no_calls(*args, **kwargs):
        raise AssertionError("a finished simulation was run again")

    before = {p.name: p.read_bytes() for p in (run_dir / CHECKPOINT_DIR).iterdir()}
    monkeypatch.setattr(llm, "generate", no_calls)
    run_simulations("bookshop", run_dir, **PARAMS)
    assert {p.name: p.read_bytes() for p in (run_dir / CHECKPOINT_DIR).iterdir()} == before
    assert len(json.loads((run_dir / "results.json").read_text())["simulations"]) == len(TASKS)
    # a subset of the same run is assembled from the same checkpoints
    sub = run_simulations("bookshop", run_dir, **{**PARAMS, "task_ids": ["10"]})
    assert [s["task_id"] for s in json.loads(sub.read_text())["simulations"]] == ["10"]
    run_simulations("bookshop", run_dir, **PARAMS)  # put the full results back for the other tests


def test_other_parameters_in_the_same_directory_are_refused(run_dir):
    with pytest.raises(RunConfigMismatch, match="max_steps"):
        run_simulations("bookshop", run_dir, **{**PARAMS, "max_steps": 7})


def test_bad_domain_and_task_ids_fail_clearly(tmp_path):
    with pytest.raises(UnknownDomainError, match="Valid domains: bookshop"):
        run_simulations("retail", tmp_path, progress=False)
    with pytest.raises(UnknownTaskError, match="Valid task ids"):
        run_simulations("bookshop", tmp_path, task_ids=["2", "x42"], progress=False)


def test_keyboard_interrupt_keeps_checkpoints_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    from agentuq_nb.sim import orchestrator

    real_run = orchestrator.Orchestrator.run
    calls = []

    def run_then_interrupt(self):
        calls.append(self.task["id"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(self)

    monkeypatch.setattr(orchestrator.Orchestrator, "run", run_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_simulations("bookshop", tmp_path, **PARAMS)
    err = capsys.readouterr().err
    assert "Interrupted: 1 of 2 simulations are checkpointed" in err and "Run the same command again" in err
    assert [p.name for p in (tmp_path / CHECKPOINT_DIR).iterdir()] == [f"bookshop_2_trial0_seed{SEED0}.json"]
    assert not (tmp_path / "results.json").exists()


def test_a_checkpoint_of_an_older_version_resumes_without_redoing(tmp_path, run_dir):
    """Checkpoints named without the seed (before it was in the name) still count for the same run."""
    import shutil

    out = tmp_path / "old"
    shutil.copytree(run_dir, out)
    (out / "results.json").unlink()
    (out / "manifest.json").unlink(missing_ok=True)
    for task in TASKS:
        new = out / CHECKPOINT_DIR / checkpoint_name("bookshop", task, 0, SEED0)
        new.rename(out / CHECKPOINT_DIR / legacy_checkpoint_name(task, 0))
    sidecars = sidecar_rows(out)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a checkpointed simulation was simulated again")

    from agentuq_nb.sim import orchestrator
    real = orchestrator.Orchestrator.run
    orchestrator.Orchestrator.run = refuse
    try:
        run_simulations("bookshop", out, **PARAMS)
    finally:
        orchestrator.Orchestrator.run = real
    assert sidecar_rows(out) == sidecars
    assert without_wall_clock(json.loads((out / "results.json").read_text())["simulations"]) == without_wall_clock(
        json.loads((run_dir / "results.json").read_text())["simulations"])


_SEEDED_CHILD = """
import sys
from agentuq_nb.sim import run_simulations
run_simulations("bookshop", sys.argv[1], task_ids=["2"], max_steps=4, agent_max_tokens=16, user_max_tokens=12,
                seed=int(sys.argv[2]), progress=False)
"""


def test_two_runs_with_different_seeds_on_one_new_folder_never_both_succeed(tmp_path):
    """Started together on one new folder, one run in a process of its own and one in this process (its model is
    loaded already: a second new process would load it and decode the long prompts again), one run finishes and the
    other is refused with a reason (the folder is busy, or it holds a run with another seed); the winner's results
    are complete."""
    from agentuq_nb.io.store.run_lock import RunBusyError

    env = dict(os.environ, PYTHONPATH=SRC)
    out = tmp_path / "shared"
    child = subprocess.Popen([sys.executable, "-c", _SEEDED_CHILD, str(out), "301"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finished = {}
    try:
        run_simulations("bookshop", out, task_ids=["2"], max_steps=4, agent_max_tokens=16, user_max_tokens=12,
                        seed=300, progress=False)
        finished[300] = (0, "")
    except (RunBusyError, RunConfigMismatch) as error:
        finished[300] = (1, f"{type(error).__name__}: {error}")
    _, err = child.communicate(timeout=900)
    finished[301] = (child.returncode, err)
    winners = [seed for seed, (code, _) in finished.items() if code == 0]
    assert len(winners) == 1, finished
    (loser_code, loser_err), = [v for seed, v in finished.items() if seed not in winners]
    assert loser_code != 0 and ("RunBusyError" in loser_err or "RunConfigMismatch" in loser_err), loser_err[-1500:]
    results = json.loads((out / "results.json").read_text())
    seed = trial_seeds(winners[0], 1)[0]
    assert [(s["task_id"], s["seed"]) for s in results["simulations"]] == [("2", seed)]
    assert [p.name for p in (out / CHECKPOINT_DIR).iterdir()] == [checkpoint_name("bookshop", "2", 0, seed)]
    # a later run with the other seed is refused too, and the winner's run is untouched
    before = (out / "results.json").read_bytes()
    with pytest.raises(RunConfigMismatch, match="seed"):
        run_simulations("bookshop", out, task_ids=["2"], max_steps=4, agent_max_tokens=16, user_max_tokens=12,
                        seed=[s for s in (300, 301) if s not in winners][0], progress=False)
    assert (out / "results.json").read_bytes() == before


def test_task_ids_that_slug_alike_keep_their_own_checkpoints_and_sidecars(tmp_path):
    """``a|b`` and ``a:b`` (telecom-style ids have such characters) both slug to ``a_b``: their files
    must still be two, and each simulation must come back as itself."""
    import copy
    import dataclasses

    from agentuq_nb.sim import load_domain

    bookshop = load_domain("bookshop")
    twins = [dict(copy.deepcopy(bookshop.get_task("2")), id=task_id) for task_id in ("a|b", "a:b")]
    domain = dataclasses.replace(bookshop, tasks=twins)
    run_simulations(domain, tmp_path, max_steps=2, agent_max_tokens=8, user_max_tokens=8, progress=False)
    results = json.loads((tmp_path / "results.json").read_text())
    assert [s["task_id"] for s in results["simulations"]] == ["a|b", "a:b"]
    assert len(list((tmp_path / CHECKPOINT_DIR).iterdir())) == 2
    sidecars = {m["raw_data"]["uq_logprobs"]["path"] for s in results["simulations"] for m in s["messages"]
                if (m.get("raw_data") or {}).get("uq_logprobs")}
    assert len(sidecars) == 2 and len(list((tmp_path / "sidecars").glob("*.jsonl"))) == 2
    for sim in results["simulations"]:
        path = next(m["raw_data"]["uq_logprobs"]["path"] for m in sim["messages"]
                    if (m.get("raw_data") or {}).get("uq_logprobs"))
        assert {row["task_id"] for row in read_rows(tmp_path / path)} == {sim["task_id"]}
