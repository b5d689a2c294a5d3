"""The trajectory explorer: its data from a real run folder, and the view in a real browser (Debian's chromium driven
by Playwright): the exported HTML file, and the widget in a JupyterLab server the test starts. Each browser test
hovers a token, asserts the alternatives appear, and keeps a screenshot in its tmp folder."""
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

from conftest import free_port

CHROMIUM = Path("/usr/bin/chromium")
#: the flags the project runs Chromium with (no GPU, no network of its own, no first-run work)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
ESTIMATORS = ["assistant.avg_token_nll", "tracer.default", "action_semantic_entropy.mean", "num_messages"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A synthetic run (8 trajectories) through extract, aggregate, the black-box families (hash embeddings), with K = 3
    resampled actions at two decision points of its first trajectory (clustered by the package's own code)."""
    from agentuq_nb.records.action_samples import ACTION_SAMPLE_SCHEMA
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.blackbox import BlackBoxConfig, ensure_blackbox
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.testing.synthetic import write_synthetic_results
    from agentuq_nb.uq.action_uq import action_turn_table
    from agentuq_nb.uq.embeddings import get_embedder

    tmp = tmp_path_factory.mktemp("explorer")
    results = write_synthetic_results(tmp / "src", num_simulations=8, messages_per_simulation=6, tokens_per_message=8)
    run = tmp / "run"
    extract(results, run)
    aggregate(run)
    ensure_blackbox(run, BlackBoxConfig(embedder="hash"))
    messages = pd.read_parquet(run / "messages.parquet")
    first = messages.iloc[0]
    agent = messages[(messages["task_id"] == first["task_id"]) & (messages["role"] == "assistant")].head(2)
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


def test_explorer_data_holds_tokens_with_alternatives_signals_decisions_and_outcomes(run_dir):
    from agentuq_nb.figures.explorer import explorer_data

    data = explorer_data(run_dir, estimators=ESTIMATORS)
    assert data["scorer"] == "self" and [e["name"] for e in data["estimators"]] == ESTIMATORS
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
    assert any(m["risk"] is not None for m in one["messages"])  # TRACER's step risk per message
    decisions = one["decisions"]
    assert [d["decision"] for d in decisions] == [0, 1] and all(d["k"] == 3 for d in decisions)
    taken = [c for c in decisions[0]["clusters"] if c["taken"]][0]
    assert taken["size"] == 2 and len(taken["samples"]) == 2 and decisions[0]["agreement"] == pytest.approx(2 / 3, abs=1e-3)
    assert json.dumps(data, allow_nan=False)  # NaN-free JSON


def _browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is absent: 'make setup' installs Debian's chromium for the browser tests")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (a dev dependency) is not installed")
    return sync_api.sync_playwright()


def _hover_a_token_and_read_the_tip(page, timeout: float = 60_000) -> str:
    page.wait_for_selector(".agentuq-explorer .aq-tok", timeout=timeout)
    token = page.locator(".agentuq-explorer .aq-tok").nth(2)
    token.hover()
    tip = page.locator(".agentuq-explorer .aq-tip")
    tip.wait_for(state="visible", timeout=5_000)
    return tip.inner_text()


def test_the_exported_view_works_in_chromium(run_dir, tmp_path):
    import agentuq_nb

    page_errors = []
    html = tmp_path / "explorer.html"
    agentuq_nb.explore(run_dir, estimators=ESTIMATORS, export=html)
    assert html.stat().st_size > 10_000 and "https://" not in html.read_text()  # standalone: nothing fetched
    with _browser() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("pageerror", lambda err: page_errors.append(str(err)))
        page.goto(html.as_uri())
        text = _hover_a_token_and_read_the_tip(page)
        assert "top-k alternative" in text and "NLL" in text
        assert len(text.splitlines()) >= 3  # the alternatives, one per line with its probability
        page.screenshot(path=str(tmp_path / "explorer_hover.png"))
        # filter by outcome: only failures listed; sort by an estimator; pick another trajectory
        page.select_option(".aq-outcome", "failure")
        items = page.locator(".aq-list .aq-item")
        assert items.count() == sum(pd.read_parquet(run_dir / "trajectories.parquet")["reward"] < 1.0)
        assert all("aq-failed" in (items.nth(i).get_attribute("class") or "") for i in range(items.count()))
        page.select_option(".aq-outcome", "all")
        page.select_option(".aq-estimator", "num_messages")
        page.fill(".aq-min", "1e9")  # a range nothing reaches: an empty list, said
        assert page.locator(".aq-list .aq-item").count() == 0 and "0 of 8" in page.inner_text(".aq-count")
        page.fill(".aq-min", "")
        page.locator(".aq-list .aq-item").first.click()
        assert page.locator(".aq-sparks .aq-spark").count() == 3
        # one trajectory has two decision points with K = 3 samples each: its view shows them with their clusters
        with_decisions = 0
        for i in range(page.locator(".aq-list .aq-item").count()):
            page.locator(".aq-list .aq-item").nth(i).click()
            with_decisions += page.locator(".aq-decision").count() > 0
            if page.locator(".aq-decision").count():
                assert page.locator(".aq-decision").count() == 2
                assert "K = 3" in page.inner_text(".aq-decision >> nth=0")
                assert "taken ▸" in page.inner_text(".aq-decision >> nth=0")
                page.screenshot(path=str(tmp_path / "explorer_decisions.png"), full_page=True)
        assert with_decisions == 1
        browser.close()
    assert page_errors == []
    print(f"screenshots: {tmp_path}")


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
    browser_cm = _browser()
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
                page.screenshot(path=str(tmp_path / "jupyterlab_explorer_hover.png"))
            assert "top-k alternative" in text and "NLL" in text
            browser.close()
    finally:
        lab.terminate()
        try:
            lab.wait(timeout=20)
        except subprocess.TimeoutExpired:
            lab.kill()
    print(f"screenshot: {tmp_path / 'jupyterlab_explorer_hover.png'}")
