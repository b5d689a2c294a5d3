"""One report per run (``analyze`` → report.html) and what ``analyze`` says about a run: the page in Chromium (offline,
sortable, links into the explorer, results text escaped and masked, a detector's predictions.csv shown), runs whose
trajectories all have one outcome or none has a label, a multi-trial run's trials line, and the console's table."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pytest

from test_explorer import CHROMIUM_FLAGS, _browser

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]
#: a key shape the secret masking knows, and markup that must stay text
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0"
HOSTILE_TASK = f"<script>window.hit=1</script>{KEY}"
HOSTILE_MODEL = "<img src=x onerror=\"window.hit=2\">"


def analyze(results: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    done = subprocess.run([*CLI, "analyze", str(results), "--out", str(out), "--embedder", "hash", "--n-boot", "50",
                           *extra], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def _without_logprobs(results: Path, edit=None) -> Path:
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for msg in sim["messages"]:
            msg["raw_data"], msg["logprobs"] = None, None
        if edit is not None:
            edit(sim)
    results.write_text(json.dumps(data))
    return results


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """16 trajectories without log-probs, two trials of each of 8 tasks; one task id carries markup and an API key,
    the agent's model name markup."""
    from agentuq_nb.testing.synthetic import write_synthetic_results

    tmp = tmp_path_factory.mktemp("report")
    results = write_synthetic_results(tmp / "src", num_simulations=16, messages_per_simulation=10, tokens_per_message=4,
                                      forms=("raw",), trials=2, seed=4)
    data = json.loads(_without_logprobs(results).read_text())
    for sim in data["simulations"]:
        if sim["task_id"] == "3":
            sim["task_id"] = HOSTILE_TASK
    data["info"]["agent_info"]["llm"] = HOSTILE_MODEL
    results.write_text(json.dumps(data))
    return tmp / "run", analyze(results, tmp / "run")


def test_analyze_says_the_trials_and_what_the_table_means_without_warning_about_log_probs(hostile_run):
    run, done = hostile_run
    assert "carry no log-probs" not in done.stderr  # the normal case of a run without them
    assert "2 trials per task (16 trajectories, 8 tasks): pass^1" in done.stdout
    assert f"agentuq-nb trials {run}" in done.stdout
    header = next(line for line in done.stdout.splitlines() if line.strip().startswith("estimator"))
    assert "failures" in header and " n " in header and "AUROC [95% CI]" in header and "beats length" in header
    assert "rows sorted by auroc_stratified" in done.stdout
    assert "tracer.optimistic" in done.stdout and "in-sample ✱" in done.stdout
    optimistic = next(line for line in done.stdout.splitlines() if line.strip().startswith("tracer.optimistic"))
    assert " yes " not in optimistic  # never beats length
    assert "--k 4 --turns first:5 --max-tokens 32" in done.stderr and "-nll" in done.stderr  # the README's next steps
    assert "not the run's agent" in done.stderr and "min for its" in done.stderr  # the model they run and the cost


def test_the_report_is_one_offline_page_that_escapes_and_masks_what_the_results_hold(hostile_run, tmp_path):
    run, _ = hostile_run
    page = (run / "report.html").read_text()
    assert KEY not in page and "***" in page  # masked as executed notebooks are
    assert "<script>window.hit" not in page and "&lt;script&gt;window.hit=1&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror" in page
    assert "https://" not in page and "http://" not in page and "<link" not in page  # nothing fetched
    assert page.count("data:image/png;base64,") == 2  # the forest and the reliability diagram, inline
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["artifacts"]["report.html"]["step"] == "analyze"  # committed like every artefact of the run
    table = pd.read_csv(run / "estimator_table.csv")
    errors, requests = [], []
    with _browser() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page_ = browser.new_page(viewport={"width": 1280, "height": 900})
        page_.on("pageerror", lambda err: errors.append(str(err)))
        page_.on("request", lambda req: requests.append(req.url))
        page_.on("dialog", lambda dialog: errors.append(f"dialog {dialog.message}"))
        page_.goto((run / "report.html").as_uri())
        assert page_.evaluate("window.hit") is None  # no markup from the results ran
        assert page_.locator("h1").inner_text().startswith("<img src=x")  # shown as text
        counts = page_.locator(".count").all_inner_texts()
        assert any("16" in c and "trajectories" in c for c in counts)
        estimators = page_.locator("section:has(h2:has-text('Estimators')) tbody tr")
        assert estimators.count() == len(table)
        assert page_.locator("tr.in-sample").count() == 1  # tracer.optimistic, marked
        # sorting: a click on "n" orders the rows by it, a second click reverses them
        trajectories = page_.locator("section:has(h2:has-text('Trajectories')) table")
        reward_header = trajectories.locator("th", has_text="reward")
        reward_header.click()
        first = trajectories.locator("tbody tr").first.locator("td").nth(3).inner_text()
        reward_header.click()
        last = trajectories.locator("tbody tr").first.locator("td").nth(3).inner_text()
        assert float(first) >= float(last)
        links = trajectories.locator("a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        assert len(links) == 16 and all(link.startswith("explorer.html#trajectory=") for link in links)
        keys = {unquote(link.split("=", 1)[1]) for link in links}
        assert "0|synthetic|0|0|1000" in keys  # the explorer's run|domain|task_id|trial|seed, run 0 of its page
        page_.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        browser.close()
    assert errors == [] and all(url.startswith(("file:", "data:")) for url in requests), (errors, requests)
    print(f"screenshot: {tmp_path / 'report.png'}")


def test_a_detectors_predictions_are_shown_where_the_run_holds_them(hostile_run):
    from agentuq_nb.steps.analyze import write_report

    run, _ = hostile_run
    pd.DataFrame({"task_id": ["0", HOSTILE_TASK], "trial": [0, 1], "p_failure": [0.25, 0.75]}).to_csv(
        run / "predictions.csv", index=False)
    try:
        page = write_report(run).read_text()
    finally:
        (run / "predictions.csv").unlink()
    assert "Detector predictions" in page and "p_failure" in page and "0.75" in page
    assert KEY not in page and "<script>window.hit" not in page


@pytest.mark.parametrize("outcome", ["all succeeded", "no labels"])
def test_a_run_with_one_outcome_or_no_labels_goes_through_analyze(outcome, tmp_path):
    """A production day where every trajectory succeeded, or a run nobody scored, is normal (issue 41): analyze exits
    0, says once that the AUROC is undefined, draws no forest, and the page lists each trajectory's scores."""
    from agentuq_nb.testing.synthetic import write_synthetic_results

    def edit(sim):
        sim["reward_info"] = {"reward": 1.0} if outcome == "all succeeded" else None

    results = _without_logprobs(write_synthetic_results(tmp_path / "src", num_simulations=8, messages_per_simulation=8,
                                                        tokens_per_message=3, forms=("raw",)), edit)
    done = analyze(results, tmp_path / "run")
    said = "all 8 scored trajectories succeeded" if outcome == "all succeeded" else "no trajectory has a reward"
    assert (done.stdout + done.stderr).count(said) == 1
    assert not (tmp_path / "run" / "figures" / "estimator_forest.png").exists()
    page = (tmp_path / "run" / "report.html").read_text()
    assert said in page and page.count("explore ▸") == 8


def test_the_estimator_view_names_every_column_it_shows():
    from agentuq_nb.figures.report import estimator_notes, estimator_view, undefined_reason

    table = pd.DataFrame({
        "estimator": ["tracer.optimistic", "structure.tool_errors", "num_messages"],
        "family": ["tracer", "structure", "baseline"], "protocol": ["in-sample", None, None],
        "in_sample": [True, False, False], "n": [20, 20, 20], "n_failures": [10, 10, 10],
        "auroc": [0.8, 0.7, 0.65], "auroc_lo": [0.6, 0.5, 0.4], "auroc_hi": [0.95, 0.9, 0.85],
        "auroc_stratified": [0.75, 0.72, float("nan")], "length_baseline": ["num_messages"] * 3,
        "length_baseline_auroc": [0.65] * 3, "diff_vs_length": [0.15, 0.05, float("nan")],
        "diff_vs_length_lo": [0.01, -0.2, float("nan")], "diff_vs_length_hi": [0.3, 0.3, float("nan")],
        "beats_length_baseline": [False, False, None], "ece": [0.1, 0.2, 0.3], "brier": [0.2, 0.2, 0.2],
        "reference": [None] * 3, "p_value_vs_reference": [float("nan")] * 3,
        "undefined": [None, None, "auroc_stratified, auroc_residual: the length control holds num_messages fixed"]})
    view = estimator_view(table)
    assert list(view.columns) == ["estimator", "family", "protocol", "n", "failures", "AUROC [95% CI]",
                                  "length-controlled", "vs num_messages [95% CI]", "beats length", "ECE", "Brier"]
    assert view["beats length"].tolist() == ["no", "no", "—"]  # in-sample: no, whatever its interval says
    assert view.at[0, "protocol"] == "in-sample ✱" and view.at[0, "vs num_messages [95% CI]"] == "+0.150 [+0.010, +0.300]"
    notes = " ".join(estimator_notes(table))
    assert "sorted by auroc_stratified" in notes and "tracer.optimistic" in notes and "strata hold it fixed" in notes
    assert "p vs" not in " ".join(view.columns)  # no token reference: no such column
    assert undefined_reason(table) is None
    assert "no trajectory has a reward" in undefined_reason(table.assign(auroc=float("nan"), n=0, n_failures=0))
