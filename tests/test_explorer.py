"""The trajectory explorer: its data from real run folders, and the view in a real browser (Debian's chromium driven
by Playwright): the exported HTML file, and the widget in a JupyterLab server the test starts.

Three kinds of run: a synthetic run with token log-probs (and τ²-bench reward checks, tasks and tool calls added to
its results), a real τ²-bench run without log-probs (``../shared/data/tau2``, after ``analyze``), and an original
τ-bench run (no seed; built in τ-bench's own shape by ``test_tau_bench_results``). Each browser test keeps its
screenshots in its tmp folder (and in ``$EXPLORER_SHOTS`` when that names a folder)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from conftest import free_port

CHROMIUM = Path("/usr/bin/chromium")
#: the flags the project runs Chromium with (no GPU, no network of its own, no first-run work)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
ESTIMATORS = ["assistant.avg_token_nll", "tracer.default", "action_semantic_entropy.mean", "num_messages"]
REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"
#: what a hostile tool result holds: markup that would end or re-open the page's script, a line separator, keys
KEYS = ("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "AKIAIOSFODNN7EXAMPLE")
HOSTILE = ("<!--<script> </script><script>document.title='pwned'</script> \u2028 and \u2029 after "
           + " ".join(KEYS))


def add_forensics(results: Path) -> Path:
    """Give a synthetic results file what real τ²-bench files hold: tasks with instructions and expected actions,
    a tool call before each tool result, and per simulation the harness's checks (the database and the expected
    call fail where the reward is 0; an NL assertion, outside the basis, fails everywhere)."""
    data = json.loads(results.read_text())
    for task in data["tasks"]:
        task.update({"description": {"purpose": f"Cancel order W{task['id']}."},
                     "user_scenario": {"instructions": {"domain": "synthetic", "reason_for_call": "Cancel an order.",
                                                        "known_info": f"Your order is W{task['id']}.",
                                                        "task_instructions": "Ask for a refund."}},
                     "evaluation_criteria": {
                         "actions": [{"action_id": f"{task['id']}_0", "name": "get_order",
                                      "arguments": {"order_id": f"W{task['id']}"}},
                                     {"action_id": f"{task['id']}_1", "name": "cancel_order",
                                      "arguments": {"order_id": f"W{task['id']}"}}],
                         "nl_assertions": ["Agent confirms before cancelling."], "reward_basis": ["DB"]}})
    for sim in data["simulations"]:
        ok = sim["reward_info"]["reward"] >= 1.0
        messages = sim["messages"]
        for i, m in enumerate(messages):
            if m["role"] == "tool":
                name = "cancel_order" if ok and i == 3 else "get_order"
                messages[i - 1]["tool_calls"] = [{"id": m["id"], "name": name, "requestor": "assistant",
                                                  "arguments": {"order_id": f"W{sim['task_id']}"}}]
        sim["reward_info"] = {
            "reward": sim["reward_info"]["reward"], "db_check": {"db_match": ok, "db_reward": float(ok)},
            "action_checks": [
                {"action": {"action_id": f"{sim['task_id']}_0", "name": "get_order",
                            "arguments": {"order_id": f"W{sim['task_id']}"}}, "action_match": True, "action_reward": 1.0},
                {"action": {"action_id": f"{sim['task_id']}_1", "name": "cancel_order",
                            "arguments": {"order_id": f"W{sim['task_id']}"}}, "action_match": ok,
                 "action_reward": float(ok)}],
            "nl_assertions": [{"nl_assertion": "Agent confirms before cancelling.", "met": False,
                               "justification": "It cancelled without asking."}],
            "reward_basis": ["DB"], "reward_breakdown": {"DB": float(ok)}}
    results.write_text(json.dumps(data))
    return results


def _synthetic_run(tmp: Path, num_simulations: int = 8, trials: int = 2, hostile: bool = False) -> Path:
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.blackbox import BlackBoxConfig, ensure_blackbox
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp / "src", num_simulations=num_simulations, messages_per_simulation=6,
                                      tokens_per_message=8, trials=trials)
    add_forensics(results)
    if hostile:
        data = json.loads(results.read_text())
        tool = next(m for m in data["simulations"][0]["messages"] if m["role"] == "tool")
        tool["content"] = HOSTILE
        data["tasks"][0]["user_scenario"]["instructions"]["task_instructions"] = HOSTILE
        results.write_text(json.dumps(data))
    run = tmp / "run"
    extract(results, run)
    aggregate(run)
    ensure_blackbox(run, BlackBoxConfig(embedder="hash"))
    return run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A synthetic run with token log-probs (8 trajectories: 4 tasks × 2 trials) through extract, aggregate, the
    black-box families (hash embeddings), with K = 3 resampled actions at two decision points of its first
    trajectory (clustered by the package's own code)."""
    from agentuq_nb.records.action_samples import ACTION_SAMPLE_SCHEMA
    from agentuq_nb.uq.action_uq import action_turn_table
    from agentuq_nb.uq.embeddings import get_embedder

    run = _synthetic_run(tmp_path_factory.mktemp("explorer"))
    messages = pd.read_parquet(run / "messages.parquet")
    first = messages.iloc[0]
    agent = messages[(messages["task_id"] == first["task_id"]) & (messages["trial"] == first["trial"])
                     & (messages["role"] == "assistant")].head(2)
    rows = []
    for d, m in enumerate(agent.itertuples(index=False)):
        for i, (content, calls) in enumerate([("", json.dumps([{"name": "get_order", "arguments": {"id": "W1"}}])),
                                              ("", json.dumps([{"name": "get_order", "arguments": {"id": "W1"}}])),
                                              ("Could you give me your order number?", "[]")]):
            rows.append({"domain": m.domain, "task_id": m.task_id, "trial": m.trial, "seed": m.seed, "decision_idx": d,
                         "message_idx": m.message_idx, "turn_idx": m.turn_idx, "sample_idx": i, "sampler_model": "test",
                         "sampler_kind": "agent", "temperature": 1.0, "sample_seed": i, "content": content,
                         "tool_calls": calls, "finish_reason": "stop", "malformed": False, "taken_content": "",
                         "taken_tool_calls": json.dumps([{"name": "get_order", "arguments": {"id": "W1"}}]),
                         "has_logprobs": False, "tokens": [], "token_logprobs": [], "topk_tokens": [],
                         "topk_logprobs": [], "sum_logprob": None, "num_tokens": 0})
    samples = pd.DataFrame(rows)
    samples = samples[[c for c in ACTION_SAMPLE_SCHEMA.names if c in samples.columns]]
    samples.to_parquet(run / "action_samples.parquet")  # tables the manifest does not list are read as they are
    action_turn_table(samples, get_embedder("hash")).to_parquet(run / "action_turns.parquet")
    return run


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real τ²-bench run without log-probs (20 GPT-4.1 airline trajectories) after ``analyze``."""
    from agentuq_nb.cli import app

    if not REAL.exists():
        pytest.skip(f"{REAL} is absent (the shared real runs sit beside the checkout)")
    run = tmp_path_factory.mktemp("real") / "gpt41"
    out = CliRunner().invoke(app, ["analyze", str(REAL), "--out", str(run), "--embedder", "hash", "--n-boot", "50",
                                   "--no-figures"])
    assert out.exit_code == 0, out.output
    return run


@pytest.fixture(scope="module")
def tau_bench_run(tmp_path_factory) -> Path:
    """An original τ-bench run (3 tasks × 4 trials, no seed) after ``analyze``."""
    from agentuq_nb.cli import app
    from test_tau_bench_results import REWARDS, tool_calling_entry, write_json

    tmp = tmp_path_factory.mktemp("tau_bench")
    results = write_json(tmp / "tool-calling-gpt-4o-retail.json",
                         [tool_calling_entry(task, trial, float(REWARDS[task][trial]))
                          for trial in range(4) for task in range(3)])
    out = CliRunner().invoke(app, ["analyze", str(results), "--out", str(tmp / "run"), "--embedder", "hash",
                                   "--n-boot", "50", "--no-figures"])
    assert out.exit_code == 0, out.output
    return tmp / "run"


def test_explorer_data_holds_tokens_with_alternatives_signals_decisions_and_outcomes(run_dir):
    from agentuq_nb.figures.explorer import explorer_data

    data = explorer_data(run_dir, estimators=ESTIMATORS)
    assert data["runs"][0]["scorer"] == "self" and data["runs"][0]["has_tokens"]
    assert [e["name"] for e in data["estimators"]] == ESTIMATORS
    rewards = pd.read_parquet(run_dir / "trajectories.parquet")
    assert len(data["trajectories"]) == len(rewards) == 8
    assert sorted(t["failed"] for t in data["trajectories"]) == sorted((rewards["reward"] < 1.0).tolist())
    tokens = pd.read_parquet(run_dir / "tokens.parquet")
    one = data["trajectories"][0]
    shown = [tok for m in one["messages"] if m["tokens"] for tok in m["tokens"]]
    mine = tokens[(tokens["task_id"] == one["task_id"]) & (tokens["trial"] == one["trial"])]
    assert len(shown) == len(mine)  # every token of the trajectory, in order
    text, nll, alternatives = shown[0]
    first = mine.sort_values(["message_idx", "token_idx"]).iloc[0]
    assert text == first["token"] and nll == pytest.approx(-first["chosen_logprob"], abs=1e-3)
    assert [a for a, _ in alternatives] == list(first["topk_tokens"])
    np.testing.assert_allclose([p for _, p in alternatives], np.exp(first["topk_logprobs"]), atol=1e-3)
    assert any("tracer_step_risk" in m["s"] for m in one["messages"])  # TRACER's step risk per message
    assert any("nll" in m["s"] for m in one["messages"] if m["role"] == "assistant")
    assert {s["field"] for s in data["signals"]} >= {"nll", "tracer_step_risk", "entropy"}
    decisions = one["decisions"]
    assert [d["decision"] for d in decisions] == [0, 1] and all(d["k"] == 3 for d in decisions)
    taken = [c for c in decisions[0]["clusters"] if c["taken"]][0]
    assert taken["size"] == 2 and len(taken["samples"]) == 2 and decisions[0]["agreement"] == pytest.approx(2 / 3, abs=1e-3)
    # each estimator's AUROC on the run, as sklearn computes it on the same scores
    failed = np.array([t["failed"] for t in data["trajectories"]])
    for e in data["estimators"]:
        values = np.array([np.nan if t["values"][e["name"]] is None else t["values"][e["name"]]
                           for t in data["trajectories"]])
        ok = np.isfinite(values)
        if e["auroc"][0] is not None:
            assert e["auroc"][0] == pytest.approx(roc_auc_score(failed[ok], values[ok]), abs=1e-3)
    assert json.dumps(data, allow_nan=False)  # NaN-free JSON


def test_failure_forensics_in_the_data(run_dir):
    """A failed trajectory carries the harness's checks (the failing ones counted or diagnostic), its task, and each
    expected call beside the call made: the one it did not make shown as missing, with the harness's verdict."""
    from agentuq_nb.figures.explorer import explorer_data

    data = explorer_data(run_dir, estimators=ESTIMATORS)
    failed = next(t for t in data["trajectories"] if t["failed"])
    checks = {(c["kind"], c["passed"], c["counted"]) for c in failed["checks"]}
    assert ("DB", False, True) in checks and ("NL_ASSERTION", False, False) in checks
    assert [(x["name"], x["matched"], x["verdict_by"]) for x in failed["expected"]] == [
        ("get_order", True, "harness"), ("cancel_order", False, "harness")]
    assert failed["expected"][0]["call"]["message"] == 2 and failed["expected"][1]["call"] is None
    task = data["tasks"][failed["task"]]
    assert task["purpose"] == f"Cancel order W{failed['task_id']}." and task["nl_assertions"]
    assert failed["breakdown"] == [["DB", 0.0]] and failed["basis"] == ["DB"]
    tool = next(m for m in failed["messages"] if m["role"] == "tool")
    assert tool["tool"] == "get_order" and tool["json"] and tool["text"].startswith("{\n")  # named, pretty-printed


def test_the_default_sort_is_the_best_honest_estimator_never_an_in_sample_one(real_run):
    from agentuq_nb.figures.explorer import default_sort, explorer_data

    data = explorer_data(real_run)
    by_name = {e["name"]: e for e in data["estimators"]}
    assert by_name["tracer.optimistic"]["in_sample"] and not by_name["tracer.nested"]["in_sample"]
    assert by_name["blackbox_gbm"]["protocol"].startswith("cross-fitted")  # the combined probabilities are offered
    honest = [e for e in data["estimators"] if not e["in_sample"] and e["auroc"][0] is not None]
    assert data["sort"]["estimator"] == max(honest, key=lambda e: e["auroc"][0])["name"]
    assert not by_name[data["sort"]["estimator"]]["in_sample"]
    # an in-sample readout that beats every other estimator is still not chosen
    rigged = [{**e, "auroc": [0.99]} if e["name"] == "tracer.optimistic" else e for e in data["estimators"]]
    assert default_sort(rigged)["estimator"] != "tracer.optimistic"
    assert default_sort([{**e, "auroc": [None]} for e in data["estimators"]])["why"].startswith("no AUROC")


def test_a_key_split_across_tokens_is_masked_and_the_payload_cannot_leave_its_script():
    from agentuq_nb.figures.explorer import masked_tokens, page_json

    key = KEYS[0]
    tokens = [["my key is ", 0.1, [["a", 0.5]]], [key[:7], 0.2, [["b", 0.5]]], [key[7:20], 0.3, []],
              [key[20:] + " ok", 0.4, [["c", 0.5]]], [" bye", 0.5, [["d", 0.5]]]]
    masked = masked_tokens(tokens)
    assert [t[0] for t in masked] == ["my key is ", "***", "", " ok", " bye"]
    assert masked[1][2] == [] and masked[4][2] == [["d", 0.5]]  # the secret's tokens lose their alternatives too
    text = page_json({"m": HOSTILE})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text)["m"] == HOSTILE


def chromium_session():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: 'make setup' installs Debian's chromium for the browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (a dev dependency) is not installed")
    return sync_api.sync_playwright()


def open_explorer(p, html: Path, errors: list, width: int = 1400, height: int = 900):
    browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
    page = browser.new_page(viewport={"width": width, "height": height})
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(html.as_uri())
    page.wait_for_selector(".agentuq-explorer .aq-item", timeout=30_000)
    return browser, page


def screenshot(page, tmp_path: Path, name: str, full_page: bool = False) -> None:
    """A screenshot in the test's tmp folder, and in $EXPLORER_SHOTS when that names a folder."""
    page.screenshot(path=str(tmp_path / name), full_page=full_page)
    if os.environ.get("EXPLORER_SHOTS"):
        shutil.copy(tmp_path / name, Path(os.environ["EXPLORER_SHOTS"]) / name)


def _hover_a_token_and_read_the_tip(page, timeout: float = 60_000) -> str:
    page.wait_for_selector(".agentuq-explorer .aq-tok", timeout=timeout)
    token = page.locator(".agentuq-explorer .aq-tok").nth(2)
    token.hover()
    tip = page.locator(".agentuq-explorer .aq-tip")
    tip.wait_for(state="visible", timeout=5_000)
    return tip.inner_text()


def _no_empty_sparkline(page) -> None:
    """Every sparkline drawn has a point: a signal with no value in the trajectory is not drawn at all."""
    sparks = page.locator(".aq-pane >> nth=0 >> .aq-spark")
    for i in range(sparks.count()):
        assert sparks.nth(i).locator(".aq-dot").count() > 0, sparks.nth(i).inner_text()


def _hover_message_and_read_signals(page, role: str) -> str:
    message = page.locator(f".aq-pane >> nth=0 >> .aq-msg.aq-{role}").nth(1)
    message.scroll_into_view_if_needed()
    message.hover()
    return page.locator(".aq-pane >> nth=0 >> .aq-readout").inner_text()


def test_the_exported_view_works_in_chromium(run_dir, tmp_path):
    import agentuq_nb

    page_errors = []
    html = tmp_path / "explorer.html"
    agentuq_nb.explore(run_dir, estimators=ESTIMATORS, export=html)
    assert html.stat().st_size > 10_000 and "https://" not in html.read_text()  # standalone: nothing fetched
    n_failed = int((pd.read_parquet(run_dir / "trajectories.parquet")["reward"] < 1.0).sum())
    with chromium_session() as p:
        browser, page = open_explorer(p, html, page_errors, 1280, 900)
        text = _hover_a_token_and_read_the_tip(page)
        assert "top-k alternative" in text and "NLL" in text
        assert len(text.splitlines()) >= 3  # the alternatives, one per line with its probability
        screenshot(page, tmp_path, "explorer_hover.png")
        # the layout fills the window: the list and the pane reach its bottom
        box = page.locator(".agentuq-explorer").bounding_box()
        assert box["height"] >= 880
        # every estimator offered with its AUROC on the run; the default sort says why it is the default
        options = page.locator(".aq-estimator option")
        assert options.count() == len(ESTIMATORS) and all("AUROC" in options.nth(i).inner_text()
                                                          for i in range(options.count()))
        assert "default sort" in page.inner_text(".aq-est-info")
        # filter by outcome: only failures listed; sort by an estimator in both directions; a range
        page.select_option(".aq-outcome", "failure")
        items = page.locator(".aq-list .aq-item")
        assert items.count() == n_failed
        assert all("aq-failed" in (items.nth(i).get_attribute("class") or "") for i in range(items.count()))
        page.select_option(".aq-outcome", "all")
        page.select_option(".aq-estimator", "num_messages")
        values = [float(v) for v in page.locator(".aq-list .aq-value").all_inner_texts()]
        assert values == sorted(values, reverse=True)
        page.click(".aq-dir")
        values = [float(v) for v in page.locator(".aq-list .aq-value").all_inner_texts()]
        assert values == sorted(values) and "least uncertain first" in page.inner_text(".aq-dir")
        page.fill(".aq-min", "1e9")  # a range nothing reaches: an empty list, said
        assert page.locator(".aq-list .aq-item").count() == 0 and "0 of 8" in page.inner_text(".aq-count")
        page.fill(".aq-min", "")
        # search: a tool's name, and a task id
        page.fill(".aq-search", "cancel_order")
        assert page.locator(".aq-list .aq-item").count() == 8 - n_failed  # only successes called it
        page.fill(".aq-search", "")
        page.locator(".aq-list .aq-item").first.click()
        signals = {page.locator(".aq-pane .aq-spark").nth(i).get_attribute("data-signal")
                   for i in range(page.locator(".aq-pane .aq-spark").count())}
        assert {"nll", "tracer_step_risk"} <= signals
        _no_empty_sparkline(page)
        readout = _hover_message_and_read_signals(page, "assistant")
        assert "mean token NLL" in readout and "TRACER step risk" in readout
        # a failed trajectory: why, the missing call, and the same task's success beside it
        rewards = pd.read_parquet(run_dir / "trajectories.parquet")
        mixed = rewards.groupby("task_id")["reward"].agg(lambda r: (r < 1).any() and (r >= 1).any())
        page.fill(".aq-search", f"task {mixed[mixed].index[0]}")  # a task with a failure and a success
        page.select_option(".aq-outcome", "failure")
        page.locator(".aq-list .aq-item").first.click()
        forensics = page.inner_text(".aq-pane >> nth=0 >> .aq-forensics")
        assert "database" in forensics and "counted" in forensics and "diagnostic only" in forensics
        assert "no call of cancel_order" in forensics
        assert page.locator(".aq-pane >> nth=0 >> .aq-check-failed").count() >= 2
        tool = page.locator(".aq-pane >> nth=0 >> .aq-toolres").first
        assert tool.get_attribute("open") is None and "get_order →" in tool.inner_text()  # collapsed, named
        tool.locator("summary").click()
        assert '"ok": true' in tool.locator(".aq-json").inner_text()  # pretty-printed when opened
        page.click(".aq-opposite")  # the task's other trial succeeded
        assert page.locator(".aq-pane").count() == 2
        assert "succeeded" in page.inner_text(".aq-pane >> nth=1 >> .aq-outcome-badge")
        screenshot(page, tmp_path, "explorer_side_by_side.png")
        beside_key = page.get_attribute(".aq-pane >> nth=1", "data-key")
        page.select_option(".aq-outcome", "all")
        page.click(f'.aq-list .aq-item[data-key="{beside_key}"]')  # the same one in the first pane: shown once
        assert page.locator(".aq-pane").count() == 1
        page.fill(".aq-search", "")
        # one trajectory has two decision points with K = 3 samples each: its view shows them with their clusters
        page.select_option(".aq-outcome", "all")
        with_decisions = 0
        for i in range(page.locator(".aq-list .aq-item").count()):
            page.locator(".aq-list .aq-item").nth(i).click()
            decisions = page.locator(".aq-pane >> nth=0 >> .aq-decision")
            with_decisions += decisions.count() > 0
            if decisions.count():
                assert decisions.count() == 2
                assert "K = 3" in decisions.nth(0).inner_text() and "taken ▸" in decisions.nth(0).inner_text()
                screenshot(page, tmp_path, "explorer_decisions.png", full_page=True)
        assert with_decisions == 1
        browser.close()
    assert page_errors == []
    print(f"screenshots: {tmp_path}")


def test_a_real_run_without_log_probs_in_chromium(real_run, tmp_path):
    """No promise of token colours, no empty sparkline; the black-box signals per message; why a failed trajectory
    failed (the database check, the expected calls beside those made, the task)."""
    from agentuq_nb.cli import app

    html = tmp_path / "real.html"
    out = CliRunner().invoke(app, ["explore", str(real_run), "--out", str(html)])
    assert out.exit_code == 0, out.output
    page_errors = []
    with chromium_session() as p:
        browser, page = open_explorer(p, html, page_errors)
        assert "no token log-probs" in page.inner_text(".aq-runs")
        assert page.locator(".aq-tok").count() == 0 and page.locator(".aq-legend").count() == 0
        assert page.locator('.aq-spark[data-signal="nll"]').count() == 0
        selected = page.eval_on_selector(".aq-estimator", "s => s.value")
        assert selected != "tracer.optimistic" and "AUROC" in page.inner_text(".aq-est-info")
        assert "IN-SAMPLE" in page.inner_text('.aq-estimator option[value="tracer.optimistic"]')
        page.select_option(".aq-outcome", "failure")
        page.locator(".aq-list .aq-item").first.click()
        _no_empty_sparkline(page)
        assert page.locator('.aq-pane >> nth=0 >> .aq-spark[data-signal="tracer_step_risk"]').count() == 1
        forensics = page.locator(".aq-pane >> nth=0 >> .aq-forensics")
        assert forensics.get_attribute("open") is not None  # open on a failure
        assert "✗" in forensics.inner_text() and "database" in forensics.inner_text()
        assert forensics.locator(".aq-reward-verdict").inner_text().startswith("What decided the reward: decided by the")
        screenshot(page, tmp_path, "real_failed.png")
        readout = _hover_message_and_read_signals(page, "user")
        assert "TRACER step risk" in readout
        screenshot(page, tmp_path, "real_hover_message.png")
        page.locator(".aq-pane >> nth=0 >> .aq-task > summary").click()
        assert "reason for call" in page.inner_text(".aq-pane >> nth=0 >> .aq-task")
        page.select_option(".aq-estimator", "blackbox_gbm")  # the cross-fitted probabilities are selectable
        assert "cross-fitted" in page.inner_text(".aq-est-info")
        browser.close()
    assert page_errors == []


def test_an_original_tau_bench_run_without_seeds_in_chromium(tau_bench_run, tmp_path):
    from agentuq_nb.cli import app

    html = tmp_path / "tau_bench.html"
    out = CliRunner().invoke(app, ["explore", str(tau_bench_run), "--out", str(html)])
    assert out.exit_code == 0, out.output
    assert "12 trajectories" in out.stdout
    page_errors = []
    with chromium_session() as p:
        browser, page = open_explorer(p, html, page_errors)
        page.select_option(".aq-outcome", "failure")
        page.locator(".aq-list .aq-item").first.click()
        forensics = page.inner_text(".aq-pane >> nth=0 >> .aq-forensics")
        assert "database (hash)" in forensics and "cancel_pending_order" in forensics
        assert "What decided the reward: decided by τ-bench's database check" in forensics
        page.locator(".aq-pane >> nth=0 >> .aq-task > summary").click()
        assert "want to cancel order" in page.inner_text(".aq-pane >> nth=0 >> .aq-task")
        page.locator(".aq-opposite").click()  # every task with a failure has a success among its 4 trials
        assert "succeeded" in page.inner_text(".aq-pane >> nth=1 >> .aq-outcome-badge")
        screenshot(page, tmp_path, "tau_bench_side_by_side.png")
        # the report's link to one trajectory (a seedless key) opens it, not the first of the list
        from agentuq_nb.figures.report import explorer_href

        last = page.locator(".aq-list .aq-item").last.get_attribute("data-key")
        first = page.locator(".aq-list .aq-item").first.get_attribute("data-key")
        assert last != first and last.endswith("|")
        page.goto(f"{html.parent.as_uri()}/{explorer_href(last, html.name)}")
        page.wait_for_selector(".agentuq-explorer .aq-item.aq-current", timeout=30_000)
        assert page.locator(".aq-item.aq-current").get_attribute("data-key") == last
        task = last.split("|")[2]
        assert page.inner_text(".aq-pane >> nth=0 >> h3").startswith(f"task {task}")
        browser.close()
    assert page_errors == []


def test_the_page_holds_no_key_and_no_markup_that_changes_its_parse(tmp_path):
    """A tool result (and a task's instructions) holding ``<!--<script>``, ``</script>``, U+2028 and three keys: the
    page renders the text as text, runs nothing of it, and the file holds none of the keys."""
    from agentuq_nb.cli import app

    run = _synthetic_run(tmp_path, num_simulations=4, trials=1, hostile=True)
    html = tmp_path / "hostile.html"
    out = CliRunner().invoke(app, ["explore", str(run), "--out", str(html)])
    assert out.exit_code == 0, out.output
    written = html.read_text()
    assert not [key for key in KEYS if key in written]
    assert "<!--" not in written.split("<script type='application/json'", 1)[1].split("</script>", 1)[0]
    page_errors = []
    with chromium_session() as p:
        browser, page = open_explorer(p, html, page_errors)
        assert page.locator(".aq-list .aq-item").count() == 4 and page.title().startswith("agentuq_nb explorer")
        for i in range(4):  # the trajectory holding it
            page.locator(".aq-list .aq-item").nth(i).click()
            if "<!--<script>" in page.inner_text(".aq-pane"):
                break
        tool = page.locator(".aq-pane .aq-toolres", has_text="<!--<script>").first
        tool.locator("summary").click()
        text = tool.inner_text()
        assert "</script><script>document.title='pwned'</script>" in text and "***" in text
        assert not [key for key in KEYS if key in page.content()]
        screenshot(page, tmp_path, "hostile.png")
        browser.close()
    assert page_errors == []


def test_explore_on_a_results_file_names_the_command_that_makes_the_run_folder(tmp_path):
    from agentuq_nb.cli import app
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path, num_simulations=2)
    out = CliRunner().invoke(app, ["explore", str(results), "--out", str(tmp_path / "x.html")])
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert f"agentuq-nb analyze {results} --out runs/results" in out.stderr
    assert not (tmp_path / "x.html").exists()
    # issue 49: without --out too, "run analyze first" with the command, not a complaint about --out
    out = CliRunner().invoke(app, ["explore", str(results)])
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "run analyze first" in out.stderr and f"agentuq-nb analyze {results} --out runs/results" in out.stderr
    assert "--out" not in out.stderr.replace(f"{results} --out runs/results", "")


def test_two_runs_side_by_side_and_a_detectors_slot(run_dir, tmp_path):
    """``explore RUN_A RUN_B``: a run filter, the same task of the other run beside; and a learned detector's
    probability and contributions (:func:`attach_detector`) shown as an estimator with its AUROC and a panel."""
    from agentuq_nb.figures.explorer import DETECTOR, attach_detector, explorer_data, export_html

    other = _synthetic_run(tmp_path / "b", num_simulations=8, trials=2)
    data = explorer_data([run_dir, other], estimators=ESTIMATORS)
    assert len(data["runs"]) == 2 and len(data["trajectories"]) == 16
    assert all(len(e["auroc"]) == 2 for e in data["estimators"])
    rewards = pd.read_parquet(run_dir / "trajectories.parquet")
    rng = np.random.default_rng(0)
    predictions = rewards[["domain", "task_id", "trial", "seed"]].assign(
        **{DETECTOR: np.clip((rewards["reward"] < 1).astype(float) * 0.5 + rng.random(len(rewards)) * 0.6, 0, 1)})
    predictions["base_probability"] = 0.3
    predictions["explanation"] = [json.dumps([
        {"feature": "structure.tool_errors", "reason": "tool errors: 2", "value": 2.0, "points": 8.25},
        {"feature": "embedding.agent_last", "reason": "the wording of the agent's last message, most of all message 7 "
         "(agent): “I cannot change it”", "value": None, "points": -3.0}])] * len(rewards)
    attach_detector(data, predictions, run=0)
    entry = data["estimators"][0]
    assert entry["name"] == DETECTOR and entry["auroc"][1] is None
    assert entry["auroc"][0] == pytest.approx(roc_auc_score(rewards["reward"] < 1, predictions[DETECTOR]), abs=1e-3)
    html = export_html(data, tmp_path / "two.html")
    page_errors = []
    with chromium_session() as p:
        browser, page = open_explorer(p, html, page_errors)
        assert page.locator(".aq-run option").count() == 3  # all runs, A, B
        page.select_option(".aq-run", "1")
        assert page.locator(".aq-list .aq-item").count() == 8
        page.select_option(".aq-run", "0")
        page.select_option(".aq-estimator", DETECTOR)
        page.locator(".aq-list .aq-item").first.click()
        detector = page.inner_text(".aq-pane >> nth=0 >> .aq-detector")
        assert "failure probability" in detector and "tool errors: 2" in detector and "+8.3" in detector
        assert "30.0 % for an average training trajectory" in detector and "“I cannot change it”" in detector
        options = [page.locator(".aq-pane >> nth=0 >> .aq-compare option").nth(i).inner_text()
                   for i in range(page.locator(".aq-pane >> nth=0 >> .aq-compare option").count())]
        other_run = next(i for i, o in enumerate(options) if o.startswith("B: "))
        page.select_option(".aq-pane >> nth=0 >> .aq-compare", index=other_run)
        assert page.locator(".aq-pane").count() == 2 and page.inner_text(".aq-pane >> nth=1 >> h3").startswith("B: ")
        screenshot(page, tmp_path, "two_runs_detector.png")
        browser.close()
    assert page_errors == []


def _wait_for_lab(port: int, proc, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status", timeout=2).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.poll() is not None and proc.stdout else ""
                raise AssertionError(f"JupyterLab did not come up on port {port}: {out[-2000:] or 'timeout'}")
            time.sleep(0.3)


def test_the_widget_works_in_jupyterlab(run_dir, tmp_path):
    if shutil.which("jupyter", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("jupyterlab (a dev dependency) is not installed beside this Python")
    browser_cm = chromium_session()
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell(
        f"import agentuq_nb\nagentuq_nb.explore({str(run_dir)!r}, estimators={ESTIMATORS!r})")]
    root = tmp_path / "lab"  # what the lab's file browser shows; its runtime and settings stay beside it
    root.mkdir()
    nbformat.write(notebook, root / "explore.ipynb")
    port = free_port()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         "--LabApp.extension_manager=readonly",
         "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
         "--ServerApp.disable_check_xsrf=True", "--LabApp.news_url=None", "--LabServerApp.check_for_updates_class="
         "jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for_lab(port, lab)
        with browser_cm as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"http://127.0.0.1:{port}/lab/tree/explore.ipynb")
            page.wait_for_selector(".jp-Notebook .jp-Cell .cm-content", timeout=60_000)
            page.get_by_text(re.compile(r"\| Idle")).first.wait_for(timeout=60_000)  # the kernel is up (status bar)
            page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
            page.keyboard.press("Shift+Enter")  # run the cell: the widget renders in its output
            try:
                text = _hover_a_token_and_read_the_tip(page, timeout=120_000)
            finally:
                screenshot(page, tmp_path, "jupyterlab_explorer_hover.png")
            assert "top-k alternative" in text and "NLL" in text
            browser.close()
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            lab.kill()
    print(f"screenshot: {tmp_path / 'jupyterlab_explorer_hover.png'}")
