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

from test_explorer import CHROMIUM_FLAGS, chromium_session

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]
#: a key shape the secret masking knows, and markup that must stay text
KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8J9k0"
HOSTILE_TASK = f"<script>window.hit=1</script>{KEY}"
HOSTILE_MODEL = "<img src=x onerror=\"window.hit=2\">"


#: what overflows a page of width ``innerWidth``: the page itself scrolling sideways, or a table wider than the page's
#: column that is not inside a box that scrolls sideways within it (each problem one line)
LAYOUT_PROBLEMS = """() => {
  const problems = [], root = document.documentElement, main = document.querySelector("main").getBoundingClientRect();
  if (root.scrollWidth > root.clientWidth) { problems.push("the page scrolls sideways: " + root.scrollWidth); }
  const scroller = (el) => {
    for (let box = el.parentElement; box && box !== document.body; box = box.parentElement) {
      if (["auto", "scroll"].includes(getComputedStyle(box).overflowX)) { return box; }
    }
    return null;
  };
  for (const el of document.querySelectorAll("main table, main img")) {
    const box = scroller(el), right = (box || el).getBoundingClientRect().right;
    const name = el.tagName + " " + ((el.querySelector && el.querySelector("th")) ? el.querySelector("th").textContent : el.alt);
    if (right > main.right + 1) { problems.push(name + (box ? ": its scroll box" : "") + " ends at " + right); }
  }
  return problems;
}"""


def pinned_after_scroll(page, section: str) -> tuple[float, float]:
    """Scroll a section's table box to its right end: the left of its first column's first cell, and of the box."""
    box = page.locator(f"section:has(h2:has-text('{section}')) .scroll").first
    box.evaluate("b => { b.scrollLeft = b.scrollWidth; }")
    cell = box.locator("tbody tr").first.locator("td").first
    return cell.bounding_box()["x"], box.bounding_box()["x"]


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
    with chromium_session() as p:
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


def test_the_report_fits_1400_px_its_tables_scroll_with_the_key_column_pinned_and_says_what_made_it(hostile_run):
    """(Before the next test rewrites the page without analyze's settings.) Issue 49: at 1,400 px no table runs off the page (each scrolls sideways in its own box, the column that names a
    row pinned), the tests against length are corrected for their number and say so, the families left out (command,
    cost, model) are on the page, and the page records the version, settings and the results' SHA-256."""
    run, _ = hostile_run
    html = (run / "report.html").read_text()
    assert "Benjamini-Hochberg adjusted across this run" in html and "beats length (BH)" in html
    assert "Families left out" in html and "agentuq-nb rescore" in html and "min for its" in html
    manifest = json.loads((run / "manifest.json").read_text())
    with chromium_session() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto((run / "report.html").as_uri())
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        made = json.loads(page.locator("script#provenance").text_content())
        assert made["inputs"]["results_sha256"] == manifest["results_sha256"] and made["agentuq_nb"]
        assert made["settings"]["n_boot"] == 50 and made["settings"]["embedder"] == "hash"
        assert made["command"] == "agentuq-nb analyze"
        # a narrow window: the tables scroll inside their boxes, the first column stays where it was
        page.set_viewport_size({"width": 700, "height": 900})
        assert page.evaluate(LAYOUT_PROBLEMS) == []
        for section in ("Estimators", "Trajectories"):
            cell, box = pinned_after_scroll(page, section)
            assert abs(cell - box) <= 2, (section, cell, box)
        browser.close()


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


def test_predictions_replaced_by_hand_are_left_out_not_a_crash(hostile_run):
    """A predictions.csv the manifest lists but whose content was replaced (MixedRunError): the report ranks
    without it, as for one that is stale or unreadable (it raised before)."""
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.analyze import detector_predictions, write_report

    run, _ = hostile_run
    frame = pd.DataFrame({"domain": ["airline"], "task_id": ["0"], "trial": [0], "seed": [0],
                          "failure_probability": [0.25]})
    with RunDir(run).commit("predict") as commit:
        commit.write_with("predictions", lambda path: frame.to_csv(path, index=False))
    try:
        assert detector_predictions(RunDir(run)) is not None
        frame.assign(failure_probability=0.9).to_csv(run / "predictions.csv", index=False)
        assert detector_predictions(RunDir(run)) is None
        assert write_report(run).is_file()  # ranked without the detector (the file is still shown as it is)
    finally:
        RunDir(run).forget("predictions")
        (run / "predictions.csv").unlink()


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
    from statsmodels.stats.multitest import multipletests

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
        "p_value_vs_length": [0.01, 0.04, float("nan")],
        "reference": [None] * 3, "p_value_vs_reference": [float("nan")] * 3,
        "undefined": [None, None, "auroc_stratified, auroc_residual: the length control holds num_messages fixed"]})
    view = estimator_view(table)
    assert list(view.columns) == ["estimator", "family", "protocol", "n", "failures", "AUROC [95% CI]",
                                  "length-controlled", "vs num_messages [95% CI]", "beats length (BH)", "ECE", "Brier"]
    # in-sample and length baselines are not tested: "—", whatever their interval says
    assert view["beats length (BH)"].tolist() == ["—", "yes · q 0.040", "—"]
    assert view.at[0, "protocol"] == "in-sample ✱" and view.at[0, "vs num_messages [95% CI]"] == "+0.150 [+0.010, +0.300]"
    # issue 49: Benjamini-Hochberg across the run's tests (statsmodels), a strongly inverted signal marked
    more = pd.concat([table.iloc[[1]].assign(estimator=f"s{i}", p_value_vs_length=p, diff_vs_length=d)
                      for i, (p, d) in enumerate([(0.01, 0.2), (0.03, -0.2), (0.2, 0.1), (0.6, 0.05)])]
                     + [table.iloc[[2]]], ignore_index=True)
    more.loc[1, ["auroc", "auroc_lo", "auroc_hi"]] = [0.29, 0.18, 0.41]
    q = multipletests([0.01, 0.03, 0.2, 0.6], method="fdr_bh")[1]
    assert q[1] > 0.05 > 0.03  # p = 0.03 alone would pass at 0.05, not after the correction at that level
    cells = estimator_view(more)["beats length (BH)"].tolist()
    assert cells == [f"yes · q {q[0]:#.2g}", f"below · q {q[1]:#.2g}", f"no · q {q[2]:#.2g}", f"no · q {q[3]:#.2g}", "—"]
    assert estimator_view(more).at[1, "AUROC [95% CI]"] == "0.290 [0.180, 0.410] ▼ inverted"
    assert any("▼ inverted: s1" in n for n in estimator_notes(more))
    assert any("across this run's 4 tests" in n and "1 beats length, 1 falls below it" in n for n in estimator_notes(more))
    notes = " ".join(estimator_notes(table))
    assert "sorted by auroc_stratified" in notes and "tracer.optimistic" in notes and "strata hold it fixed" in notes
    assert "p vs" not in " ".join(view.columns)  # no token reference: no such column
    assert undefined_reason(table) is None
    assert "no trajectory has a reward" in undefined_reason(table.assign(auroc=float("nan"), n=0, n_failures=0))

