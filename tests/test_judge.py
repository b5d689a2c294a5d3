"""The LLM judge (issue 50, point 1): its verdict read as a probability, the transcript fitted to its context, its
templates checked, its cache keyed by content and resumable after a kill, its panel, and its estimators in the
estimator table. The embedded model judges a few trajectories of a real τ²-bench run (a slice written to tmp) with a
small context and few answer tokens."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agentuq_nb.io.errors import InputError
from agentuq_nb.llm.context_fit import keep_ends
from agentuq_nb.records.config import EMBEDDED_MODEL
from agentuq_nb.uq.judge import check_template, judge_name, load_prompt, panel_scores, read_verdict, verdict_word

from conftest import require_tau2

ROOT = Path(__file__).resolve().parents[1]
#: the embedded judge's settings in these tests: a small context (long transcripts are shortened) and few tokens
FAST = ["--context-tokens", "512", "--max-tokens", "4"]
#: the simulations of the real airline run taken: two successes and a failure
PICKED = (0, 1, 4)


def real_slice(tmp_path: Path, name: str = "slice.json", edit=None) -> Path:
    """Three simulations of a real τ²-bench run (gpt-4.1, airline), as a results file of their own."""
    source = next(p for p in require_tau2() if p.name.startswith("gpt-4.1_airline"))
    data = json.loads(source.read_text())
    data["simulations"] = [data["simulations"][i] for i in PICKED]
    if edit is not None:
        edit(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def cli(*args: str):
    from agentuq_nb.cli import app

    return CliRunner().invoke(app, list(args))


def report_of(output: str) -> dict:
    """The report a judge command printed (its JSON object, among the progress bar's lines)."""
    return json.loads(output[output.index("{\n"):output.rindex("}") + 1])


def cached(run: Path) -> list[Path]:
    folder = run / "checkpoints" / "judge"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


# --------------------------------------------------------------------------- the verdict

def row(token: str, tops: dict[str, float]) -> dict:
    return {"token": token, "topk_tokens": list(tops), "topk_logprobs": [math.log(p) for p in tops.values()]}


def test_the_verdict_token_s_top_k_gives_p_fail_renormalized_over_the_verdict_words():
    tokens = [row("**", {"**": 0.9, "The": 0.1}),
              row("Fail", {"Fail": 0.5, " fail": 0.1, "Pass": 0.2, "The": 0.15, "pass": 0.05})]
    verdict = read_verdict(tokens, "**Fail** the agent cancelled the wrong flight")
    assert verdict.probability_source == "logprobs" and verdict.verdict == "fail" and verdict.position == 1
    assert verdict.p_fail == pytest.approx(0.6 / 0.85)
    assert verdict.p_fail + verdict.p_pass == pytest.approx(1.0)
    assert verdict.verdict_mass == pytest.approx(0.85)


def test_without_top_k_the_verdict_is_read_from_the_text_and_an_answer_without_one_is_unparsed():
    verbal = read_verdict([{"token": "Passed", "topk_tokens": [], "topk_logprobs": []}], "Passed: all done")
    assert (verbal.probability_source, verbal.verdict, verbal.p_fail) == ("verbalized", "pass", 0.0)
    assert read_verdict([], "Verdict: FAIL, wrong seat").p_fail == 1.0
    unparsed = read_verdict([row("The", {"The": 1.0})], "The agent was polite.")
    assert unparsed.probability_source == "unparsed" and math.isnan(unparsed.p_fail)


def test_a_verdict_word_late_in_the_answer_is_read_from_the_text_not_from_its_log_probs():
    tokens = [row(t, {t: 0.9, "x": 0.1}) for t in ("The", " agent", " did", " well", ":")] + [row(" fail", {" fail": 0.7, " pass": 0.3})]
    verdict = read_verdict(tokens, "The agent did well: fail")
    assert verdict.probability_source == "verbalized" and verdict.p_fail == 1.0


@pytest.mark.parametrize("token, word", [("pass", "pass"), (" PASS", "pass"), ("Pa", "pass"), ("**fail", "fail"),
                                         ("failed", "fail"), ("False", None), ("Final", None), (" ", None)])
def test_verdict_words_and_their_prefixes(token, word):
    assert verdict_word(token) == word


# --------------------------------------------------------------------------- the context rule

def test_a_long_transcript_keeps_its_opening_and_its_end_and_says_what_was_left_out():
    entries = [f"{i + 1}. message {i}" for i in range(20)]
    kept = keep_ends(entries, [10] * 20, budget=32 + 90)
    assert kept.entries[:3] == entries[:3] and kept.entries[-6:] == entries[-6:]
    assert kept.elided == 11 and kept.elided_tokens == 110
    assert kept.entries[3] == "[... 11 messages (110 tokens) left out here to fit the judge's context ...]"
    assert keep_ends(entries, [10] * 20, budget=200).entries == entries


# --------------------------------------------------------------------------- templates

@pytest.mark.parametrize("text, problem", [
    ("Judge {conversation}: pass or fail", "uses the placeholder {conversation}"),
    ("Judge this: pass or fail", "has no {transcript} placeholder"),
    ("Judge {transcript}, was it good?", "does not ask for a verdict"),
    ("Judge {transcript} as {json: pass or fail", "is not a judge template"),
    ("Judge {transcript!r}: pass or fail", "write it plain"),
])
def test_a_bad_template_is_refused_with_what_is_wrong(tmp_path, text, problem):
    with pytest.raises(InputError, match=problem.replace("{", r"\{").replace("}", r"\}")):
        check_template(text, tmp_path / "t.txt")


def test_a_template_file_of_one_s_own_is_a_prompt_named_by_the_file(tmp_path):
    path = tmp_path / "strict_rubric.txt"
    path.write_text("Policy: {policy}\nDomain {domain}, task {task_id}.\n{transcript}\nA JSON {{\"x\": 1}}: pass or fail?")
    prompt = load_prompt(path)
    assert prompt.name == "strict_rubric" and prompt.fields == {"policy", "domain", "task_id", "transcript"}
    assert prompt.fill(transcript="T", policy="P", domain="airline", task_id="7").endswith('T\nA JSON {"x": 1}: pass or fail?')
    assert load_prompt("outcome").source == "built-in"


def test_the_command_refuses_a_bad_template_in_one_line_before_anything_runs(tmp_path):
    bad = tmp_path / "mine.txt"
    bad.write_text("Rate {transcript} from 1 to 10")
    result = cli("judge", str(real_slice(tmp_path)), "--out", str(tmp_path / "run"), "--prompt", str(bad))
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "does not ask for a verdict" in lines[0], result.output
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------- the panel

def test_the_panel_combines_the_judges_per_trajectory_as_uqlm_does():
    rng = np.random.default_rng(0)
    keys = [{"domain": "airline", "task_id": str(t), "trial": 0, "seed": 1} for t in range(6)]
    risk = rng.uniform(size=(3, 6))
    risk[1, 2] = np.nan  # one judge gave no verdict on one trajectory
    table = pd.DataFrame([{**k, "monitor": f"j{j}", "risk": risk[j, i]} for j in range(3) for i, k in enumerate(keys)])
    for aggregate, reference in (("mean", np.nanmean), ("median", np.nanmedian), ("max", np.nanmax), ("min", np.nanmin)):
        got = panel_scores(table, aggregate)
        want = reference(risk, axis=0)
        np.testing.assert_allclose(got.loc[[tuple(k.values()) for k in keys]].to_numpy(), want)


def test_a_judge_s_name_is_a_monitor_name():
    assert judge_name("outcome", EMBEDDED_MODEL) == "outcome-local-smollm2-135m-instruct"
    long = judge_name("policy", "hosted_vllm/" + "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4-very-long-deployment-name")
    assert len(long) <= 64 and long.startswith("policy-hosted_vllm-qwen")


# --------------------------------------------------------------------------- the embedded model, end to end

@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """Three real trajectories judged by the embedded model with two prompts (a panel of two)."""
    tmp = tmp_path_factory.mktemp("judge")
    results = real_slice(tmp)
    run = tmp / "run"
    made = cli("judge", str(results), "--out", str(run), "--prompt", "outcome", "--prompt", "triage", *FAST)
    assert made.exit_code == 0, made.output
    return results, run, made.output


def test_the_embedded_model_judges_real_trajectories_with_a_probability_from_its_log_probs(judged):
    results, run, output = judged
    table = pd.read_parquet(run / "judge_scores.parquet")
    assert len(table) == 6 and set(table["monitor"]) == {judge_name(p, EMBEDDED_MODEL) for p in ("outcome", "triage")}
    assert (table["probability_source"] == "logprobs").all(), table[["probability_source", "justification"]]
    assert table["score"].between(0, 1).all() and table["risk"].equals(table["score"])
    assert np.allclose(table["score"] + table["p_pass"], 1.0)
    assert (table["cost_usd"] == 0).all() and (table["prompt_tokens"] > 0).all()
    assert (table["context_tokens"] == 512).all()
    assert (table["prompt_tokens"] + table["completion_tokens"] <= 512).all()
    assert (table["elided_entries"] > 0).any()  # a real transcript does not fit 512 tokens whole
    report = report_of(output)
    assert report["judged"] == 6 and report["cached"] == 0 and report["logprobs"] == 6 and report["cost_usd"] == 0


def test_the_judges_and_their_panel_are_estimators_of_the_table(judged):
    from agentuq_nb.estimators import available, get

    _, run, _ = judged
    names = available(run)
    one = f"judge.{judge_name('outcome', EMBEDDED_MODEL)}"
    assert {one, "judge.panel_mean", "judge.panel_max"} <= set(names)
    assert get(one).family == "judge" and get(one).higher_is_uncertain
    made = cli("compare-estimators", str(run), "--n-boot", "20", "--embedder", "hash")
    assert made.exit_code == 0, made.output
    table = pd.read_csv(run / "estimator_table.csv").set_index("estimator")
    assert table.loc[one, "family"] == "judge" and table.loc["judge.panel_median", "family"] == "judge"
    from agentuq_nb.estimators.judge import judge_totals

    totals = judge_totals(run).set_index("prompt")
    assert totals["trajectories"].to_dict() == {"outcome": 3, "triage": 3} and (totals["cost_usd"] == 0).all()
    assert (totals["logprobs"] == 3).all() and (totals["prompt_tokens"] > 0).all()


def test_without_log_probs_the_verdict_is_verbalized_or_counted_unparsed(judged, tmp_path):
    results, run, _ = judged
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    asked = cli("judge", str(results), "--out", str(copy), "--top-logprobs", "0", "--limit", "1", *FAST)
    assert asked.exit_code == 0, asked.output
    report = report_of(asked.output)
    assert report["judged"] == 1 and report["logprobs"] == 0 and report["verbalized"] + report["unparsed"] == 1
    rows = pd.read_parquet(copy / "judge_scores.parquet")
    outcome = rows[rows["prompt"] == "outcome"]  # asked now with other settings: its earlier rows are not kept
    assert len(outcome) == report["verbalized"] and set(outcome["probability_source"]) <= {"verbalized"}
    assert (rows["prompt"] == "triage").sum() == 3  # another judge: kept


def test_a_changed_trajectory_is_judged_anew_the_others_come_from_the_cache(judged, tmp_path):
    results, run, _ = judged
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)

    def edit(data):
        data["simulations"][1]["messages"][-1]["content"] = "Sorry, I could not do that. Goodbye."

    changed = real_slice(tmp_path, "changed.json", edit)
    refused = cli("extract", str(changed), "--out", str(copy))  # other results into a run: only when asked to
    assert refused.exit_code == 2 and "--force" in refused.output
    assert cli("extract", str(changed), "--out", str(copy), "--force").exit_code == 0
    from agentuq_nb.estimators import available

    assert not [n for n in available(copy) if n.startswith("judge.")]  # judged on the earlier results: stale
    again = cli("judge", str(changed), "--out", str(copy), "--prompt", "outcome", "--prompt", "triage", *FAST)
    assert again.exit_code == 0, again.output
    report = report_of(again.output)
    assert (report["judged"], report["cached"]) == (2, 4)
    changed_task = str(json.loads(changed.read_text())["simulations"][1]["task_id"])
    before = pd.read_parquet(run / "judge_scores.parquet").groupby("task_id")["content_sha256"].first()
    table = pd.read_parquet(copy / "judge_scores.parquet")
    assert len(table) + report["unparsed"] == 6  # an answer without a verdict is counted, not a row
    renewed = table["content_sha256"] != table["task_id"].map(before)
    assert set(table.loc[renewed, "task_id"]) == {changed_task}
    assert set(table.loc[~renewed, "task_id"]) == set(before.index) - {changed_task}


def test_a_judge_added_later_joins_the_table_and_the_earlier_ones_are_kept(judged, tmp_path):
    results, run, _ = judged
    copy = tmp_path / "run"
    subprocess.run(["cp", "-r", str(run), str(copy)], check=True)
    template = tmp_path / "short.txt"
    template.write_text("{transcript}\nDid the agent do its job? Answer pass or fail.")
    added = cli("judge", str(results), "--out", str(copy), "--prompt", str(template), "--limit", "1", *FAST)
    assert added.exit_code == 0, added.output
    table = pd.read_parquet(copy / "judge_scores.parquet")
    sizes = table.groupby("monitor").size().to_dict()
    assert sizes == {judge_name("outcome", EMBEDDED_MODEL): 3, judge_name("triage", EMBEDDED_MODEL): 3,
                     judge_name("short", EMBEDDED_MODEL): 1}
    assert (table.loc[table["prompt"] == "short", "prompt_source"] == str(template)).all()


def test_a_judge_run_killed_after_its_first_verdict_resumes_and_asks_only_the_rest(tmp_path):
    results = real_slice(tmp_path)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, "-m", "agentuq_nb.cli", "judge", str(results), "--out", str(run), "--limit", "2", *FAST]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not cached(run) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cached(run), "the judge cached no verdict"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = len(cached(run))
    assert 1 <= before <= 2
    assert before == 2 or not (run / "judge_scores.parquet").exists()  # nothing published before the last verdict
    resumed = cli("judge", str(results), "--out", str(run), "--limit", "2", *FAST)
    assert resumed.exit_code == 0, resumed.output
    report = report_of(resumed.output)
    assert (report["judged"], report["cached"]) == (2 - before, before)
    assert len(cached(run)) == 2 and len(pd.read_parquet(run / "judge_scores.parquet")) + report["unparsed"] == 2
