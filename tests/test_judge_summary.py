"""τ²-bench's published judge summaries (``../shared/data/judges``) read as labelled runs, and per-trajectory scores from
elsewhere imported as the ``external`` family: the real files, small where a subset does."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.ingest import judge_summary
from agentuq_nb.io.ingest.results import detect_layout, iter_simulations, read_header
from agentuq_nb.io.ingest.score_files import read_score_file, verdict_score

ROOT = Path(__file__).resolve().parents[1]
JUDGES = ROOT.parent / "shared" / "data" / "judges"
RETAIL = JUDGES / "retail-multi-judge-full.json.summary_customer_outcome_v1.json"
RETAIL_TRIAGE = JUDGES / "retail-multi-judge-full.json.summary_quick_triage_v1.json"
TELECOM = JUDGES / "telecom-multi-judge-full.json.summary_customer_outcome_v1.json"


def require(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} not found (the published judge summaries live in ../shared/data/judges)")
    return path


def subset(path: Path, out: Path, n: int, change=None) -> Path:
    """The first ``n`` entries of a real summary written to ``out`` (``change(entries)`` edits them first)."""
    data = json.loads(require(path).read_text())
    data["entries"] = data["entries"][:n]
    if change is not None:
        change(data["entries"])
    out.write_text(json.dumps(data))
    return out


def test_the_retail_summary_reads_as_a_run_of_114_labelled_trajectories():
    path = require(RETAIL)
    assert detect_layout(path) == judge_summary.LAYOUT
    header = read_header(path)
    assert header["info"]["environment_info"]["domain_name"] == "retail"
    assert header["info"]["environment_info"]["policy"].startswith("# Retail agent policy")
    assert header["info"]["judge_summary"]["model"] == "azure/gpt-4o-2024-11-20"
    sims = list(iter_simulations(path))
    assert len(sims) == 114 and len({s.id for s in sims}) == 114
    rewards = [s.reward for s in sims]
    assert (rewards.count(1.0), rewards.count(0.0)) == (68, 46)
    roles = pd.Series([m.role for s in sims for m in s.messages]).value_counts()
    assert set(roles.index) == {"assistant", "user", "tool"}
    calls = [c for s in sims for m in s.messages for c in (m.tool_calls or [])]
    tools = [m for s in sims for m in s.messages if m.role == "tool"]
    assert len(calls) == len(tools) == 860  # the transcript's 860 TOOL CALL lines, each answered
    assert all(isinstance(c.arguments, dict) and "__malformed__" not in json.dumps(c.arguments) for c in calls)
    assert all(t.requestor == "assistant" for t in tools)
    first = sims[0]  # entry 0: task 4, a t-shirt modified; its transcript's lines 20-21 are the call and its result
    call_msg = next(m for m in first.messages if m.tool_calls and m.tool_calls[0].name == "modify_pending_order_items")
    assert call_msg.tool_calls[0].arguments["new_item_ids"] == ["9647292434"]
    answer = first.messages[call_msg.turn_idx + 1]
    assert answer.role == "tool" and answer.id == call_msg.tool_calls[0].id and answer.id.startswith("call_")
    assert first.messages[-1].role == "user" and first.termination_reason == "user_stop"
    # a message over several lines stays one message (its numbered list is no message of its own)
    multi = [m for s in sims for m in s.messages if m.role == "assistant" and m.content and "\n1. " in m.content]
    assert multi


def test_telecom_tool_results_of_the_users_own_calls_are_kept_as_the_users():
    sims = list(iter_simulations(require(TELECOM)))
    assert len(sims) == 114
    tools = [m for s in sims for m in s.messages if m.role == "tool"]
    by_user = [m for m in tools if m.requestor == "user"]
    assert by_user and all(getattr(m, "name", None) is None for m in by_user)
    # an assistant text line followed by its calls is one message with both (τ²-bench's shape)
    assert any(m.content and m.tool_calls for s in sims for m in s.messages if m.role == "assistant")
    for s in sims:  # every assistant call answered by the next results, ids shared
        for i, m in enumerate(s.messages):
            for k, call in enumerate(m.tool_calls or []):
                assert s.messages[i + 1 + k].id == call.id


def test_the_four_summaries_of_a_run_hold_the_same_trajectories(tmp_path):
    a = [(s.id, [m.content for m in s.messages]) for s in iter_simulations(subset(RETAIL, tmp_path / "a.json", 5))]
    b = [(s.id, [m.content for m in s.messages]) for s in
         iter_simulations(subset(RETAIL_TRIAGE, tmp_path / "b.json", 5))]
    assert a == b


@pytest.mark.parametrize("change, said", [
    (lambda e: e[1].update(judge_prompt=e[1]["judge_prompt"].replace("Conversation transcript:", "Transcript:")),
     "has 0 'Conversation transcript:' lines"),
    (lambda e: e[1].update(judge_prompt=e[1]["judge_prompt"].replace("Conversation transcript:\n1. ",
                                                                     "Conversation transcript:\nhello\n1. ")),
     "first line is not '1. Assistant"),
    (lambda e: e[1].update(tau2_reward="1.0"), "'tau2_reward' is '1.0'"),
    (lambda e: e[1].pop("simulation_id"), "'simulation_id' is null"),
])
def test_a_malformed_entry_is_one_line_naming_the_file_and_the_entry(tmp_path, change, said):
    path = subset(RETAIL, tmp_path / "bad.json", 3, change)
    with pytest.raises(InputError) as err:
        list(iter_simulations(path))
    text = str(err.value)
    assert "\n" not in text and str(path) in text and said in text and "entries[1]" in text


def test_extract_analyze_and_import_scores_reproduce_the_published_verdicts_auroc(tmp_path):
    from agentuq_nb.steps.compare_estimators import compare_estimators
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores

    path = require(RETAIL)
    run = tmp_path / "run"
    extract(path, run)
    imported = import_scores(run, path)
    assert imported.name == "customer_outcome_v1" and imported.counts["n_matched"] == 114
    assert set(imported.rows["verdict"]) == {"pass", "fail"} and imported.rows["justification"].notna().all()
    entries = json.loads(path.read_text())["entries"]
    failed = np.array([e["tau2_reward"] < 1 for e in entries])
    verdict = np.array([verdict_score(e["judge_verdict"]) for e in entries])
    expected = roc_auc_score(failed, verdict)
    table = compare_estimators(run, names=["external.customer_outcome_v1"], blackbox=False, n_boot=0, combine=False)
    row = table.set_index("estimator").loc["external.customer_outcome_v1"]
    assert row["family"] == "external" and row["n"] == 114
    assert row["auroc"] == pytest.approx(expected, abs=1e-12)
    assert np.isfinite(row["diff_vs_length"])  # the paired difference from the best length baseline


def test_analyze_on_a_judge_summary_ranks_its_own_published_verdicts_beside_length(tmp_path):
    """``agentuq-nb analyze SUMMARY`` is the file's run and, in its estimator table, the file's own verdicts
    (external.<its prompt>) beside length: nothing to import by hand."""
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    path = subset(RETAIL_TRIAGE, tmp_path / "triage.summary.json", 30)
    run = tmp_path / "run"
    made = CliRunner().invoke(app, ["analyze", str(path), "--out", str(run), "--n-boot", "0", "--embedder", "hash",
                                    "--no-figures", "--no-report"])
    assert made.exit_code == 0, made.output
    assert "external.quick_triage_v1: 30 of the run's 30 trajectories scored" in made.output
    table = pd.read_csv(run / "estimator_table.csv").set_index("estimator")
    entries = json.loads(path.read_text())["entries"]
    expected = roc_auc_score([e["tau2_reward"] < 1 for e in entries], [verdict_score(e["judge_verdict"]) for e in entries])
    assert table.loc["external.quick_triage_v1", "auroc"] == pytest.approx(expected)
    assert table.loc["external.quick_triage_v1", "family"] == "external" and "num_messages" in table.index


def test_a_score_file_whose_keys_match_too_few_trajectories_is_refused_with_the_counts(tmp_path):
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores

    run = tmp_path / "run"
    extract(subset(RETAIL, tmp_path / "retail.json", 20), run)
    sims = list(iter_simulations(tmp_path / "retail.json"))
    rows = [{"task_id": s.task_id, "trial": 0, "score": 0.1 * i} for i, s in enumerate(sims[:6])]
    rows += [{"task_id": f"other-{i}", "trial": 0, "score": 0.5} for i in range(10)]
    pd.DataFrame(rows).to_csv(tmp_path / "scores.csv", index=False)
    with pytest.raises(InputError) as err:
        import_scores(run, tmp_path / "scores.csv", name="vendor")
    text = str(err.value)
    assert "match 6 of the run's 20 trajectories (30%)" in text and "10 of its 16 rows" in text
    assert not (run / "external_scores.parquet").exists()
    # at a stated threshold it is taken, the safety score negated for ranking
    done = import_scores(run, tmp_path / "scores.csv", name="vendor", orientation="safety", min_match=0.25)
    assert done.counts["n_matched"] == 6 and (done.rows["risk"] == -done.rows["score"]).all()


@pytest.mark.parametrize("body, said", [
    ("simulation_id,score\na,0.5\nb,nan\n", "line 3"),
    ("simulation_id,score\na,0.5\na,0.7\n", "simulation_id a is scored more than once (line 2, line 3"),
    ("simulation_id,score\na,high\n", "score 'score' 'high' is not a number"),
    ('{"simulation_id": "a", "score": 1}\n{"simulation_id": "b", "score": Infinity}\n', "line 2"),
    ('{"simulation_id": "a", "score": 1}\n[1, 2]\n', "line is not a JSON object (at line 2)"),
    ("id,score\na,1\n", "no key columns"),
])
def test_a_bad_score_file_is_one_line_naming_the_file_and_the_row(tmp_path, body, said):
    path = tmp_path / "scores.txt"
    path.write_text(body)
    with pytest.raises(InputError) as err:
        read_score_file(path)
    assert str(path) in str(err.value) and said in str(err.value) and "\n" not in str(err.value)


def test_the_explorer_shows_each_monitors_verdict_and_justification_beside_the_trajectory(tmp_path):
    from agentuq_nb.figures.explorer import explorer_data
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores

    path = subset(RETAIL, tmp_path / "retail.json", 8)
    extract(path, tmp_path / "run")
    import_scores(tmp_path / "run", path, name="published")
    data = explorer_data(tmp_path / "run", max_trajectories=8)
    entries = {e["task_id"]: e for e in json.loads(path.read_text())["entries"]}
    assert any(e["name"] == "external.published" and e["family"] == "external" for e in data["estimators"])
    for t in data["trajectories"]:
        (monitor,) = t["monitors"]
        entry = entries[t["task_id"]]
        assert monitor["estimator"] == "external.published" and monitor["verdict"] == entry["judge_verdict"]
        assert monitor["justification"] == entry["judge_justification"]
        assert monitor["cost_usd"] == pytest.approx(entry["judge_cost_usd"], abs=1e-4)
        assert t["values"]["external.published"] == verdict_score(entry["judge_verdict"])


def test_two_summaries_of_one_run_are_refused_as_two_runs(tmp_path):
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.steps.compare_runs import compare_runs
    from agentuq_nb.steps.extract import extract

    outcome = subset(RETAIL, tmp_path / "outcome.json", 6)
    triage = subset(RETAIL_TRIAGE, tmp_path / "triage.json", 6)
    sources = resolve_sources([outcome, triage])  # two contents: told apart by the simulations they share
    with pytest.raises(InputError, match="holds 6 of the same simulations as .*outcome.json"):
        corpus_features(sources, ["length"], "none")
    assert len(corpus_features(sources[:1], ["length"], "none").index) == 6
    extract(outcome, tmp_path / "a")
    extract(triage, tmp_path / "b")
    with pytest.raises(InputError, match="holds 6 of the same simulations as"):
        compare_runs([tmp_path / "a", tmp_path / "b"], out=tmp_path / "cmp")
    assert not (tmp_path / "cmp").exists()


def test_the_monitors_are_a_feature_group_the_detector_may_use(tmp_path):
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores
    from agentuq_nb.steps.predict import predict
    from agentuq_nb.steps.train_detector import train_detector

    runs = []
    for name, path in (("retail", RETAIL), ("telecom", TELECOM)):
        small = subset(path, tmp_path / f"{name}.json", 30)
        extract(small, tmp_path / name)
        import_scores(tmp_path / name, small, name="published")
        runs.append(tmp_path / name)
    trained = train_detector(runs, tmp_path / "detector", groups=["length", "monitors"], embedder="none",
                             protocols=["within_run", "leave_one_run_out"], n_boot=0, n_splits=2)
    card = json.loads((tmp_path / "detector" / "card.json").read_text())
    assert card["feature_groups"] == ["length", "monitors"]
    assert trained.protocols["protocol"].tolist()[:2] == ["within_run", "leave_one_run_out"]
    assert "monitor.external.published" in (tmp_path / "detector" / "model.json").read_text()
    # a run without the monitor cannot be scored by it; one that holds it can
    extract(subset(RETAIL, tmp_path / "bare.json", 10), tmp_path / "bare")
    with pytest.raises(InputError, match="holds none"):
        predict(tmp_path / "detector", tmp_path / "bare")
    with pytest.raises(InputError, match="give the run folder"):
        train_detector([tmp_path / "retail.json", runs[1]], tmp_path / "d2", groups=["monitors"], embedder="none",
                       protocols=["within_run"], n_boot=0)


def test_import_scores_on_the_command_line_refuses_mismatched_keys_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app
    from agentuq_nb.steps.extract import extract

    small = subset(RETAIL, tmp_path / "retail.json", 12)
    extract(small, tmp_path / "run")
    other = subset(TELECOM, tmp_path / "telecom.json", 12)  # another run's verdicts: no key matches
    result = CliRunner().invoke(app, ["import-scores", str(tmp_path / "run"), str(other)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(other) in lines[0]
    assert "match 0 of the run's 12 trajectories (0%)" in lines[0] and "12 of its 12 rows" in lines[0]
    done = CliRunner().invoke(app, ["import-scores", str(tmp_path / "run"), str(small), "--name", "outcome"])
    assert done.exit_code == 0 and "external.outcome: 12 of the run's 12 trajectories scored" in done.output


def test_the_judges_notebook_sets_each_prompt_against_length_the_prior_and_a_detector(tmp_path):
    """Notebook 15 on the retail summaries of two prompts, three other real runs (the detector's training data and the
    task prior's history; hash embeddings) and the embedded model judging the first two retail trajectories (a smoke
    run of params/judges.yaml's study; a verdict took ~3 CPU-s of the embedded model, four were half the test): the
    table's numbers are sklearn's AUROC of the verdicts and of the detector's predictions on the judged run, the prior
    is the same task's by content, the figure, findings.json, the sentences."""
    import nbformat
    import yaml

    from agentuq_nb.pipeline import judges
    from agentuq_nb.pipeline.reproduce import run_study
    from agentuq_nb.records.config import EMBEDDED_MODEL

    shared = ROOT.parent / "shared" / "data"
    others = [str(require(shared / "real_runs" / "ft-gpt-4.1_retail_1trial.json")),
              str(require(shared / "tau2" / "gpt-4.1_airline_1trial.json")),
              str(require(shared / "tau2" / "ft-gpt-4.1_airline_1trial.json"))]
    files = [str(require(RETAIL)), str(require(RETAIL_TRIAGE)), str(tmp_path / "absent.json")]
    params = tmp_path / "judges_smoke.yaml"
    params.write_text(yaml.safe_dump({"parameters": {
        "summaries": files, "other_runs": others, "detector_embedder": "hash", "embedded_run": "retail",
        "embedded_limit": 2, "embedded_context_tokens": 512, "n_boot": 50}, "notebooks": ["15_judges"]}))
    run_dir = run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)
    figures_dir = tmp_path / "figures" / "judges_smoke"
    assert (figures_dir / "judges_auroc.png").stat().st_size > 1000
    executed = nbformat.read(run_dir / "notebooks" / "15_judges.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                   for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "**retail**: 114 trajectories, 46 failed, judged with 2 prompt(s)" in text and "skipped" in text
    assert "the best length baseline (num_tool_calls) reaches 0.63" in text
    assert "The task prior (the same task's failure rate in the other runs) covers 40 of the trajectories" in text
    assert "The detector trained on the other runs reaches" in text and "minus the detector" in text
    assert "The embedded model as a judge (a path demonstration, not a contender)" in text

    record = json.loads((figures_dir / "findings.json").read_text())
    monitors = {m["prompt"]: m for m in record["runs"][0]["monitors"]}
    entries = json.loads(RETAIL.read_text())["entries"]
    failed = np.array([e["tau2_reward"] < 1 for e in entries])
    outcome = monitors["customer_outcome_v1"]
    close = {"abs": 5e-5}  # the record holds 4 decimals
    assert outcome["auroc"] == pytest.approx(roc_auc_score(failed, [verdict_score(e["judge_verdict"]) for e in entries]),
                                             **close)
    assert outcome["n"] == 114 and outcome["prior_n"] == 40  # ft-gpt-4.1's 40 retail tasks, matched by content
    assert outcome["total_cost_usd"] == pytest.approx(sum(e["judge_cost_usd"] for e in entries), **close)
    # the detector: trained on the three other runs only, applied to the judged run's trajectories
    card = json.loads((run_dir / "detector" / "card.json").read_text())
    assert sorted(r["name"] for r in card["training_runs"]) == sorted(Path(p).stem for p in others)
    predictions = pd.read_csv(run_dir / "judged" / "retail" / "predictions.csv")
    by_id = dict(zip(predictions["simulation_id"].astype(str), predictions["log_odds"]))
    detector = monitors[judges.DETECTOR_NAME]
    assert detector["kind"] == judges.DETECTOR and detector["n"] == 114
    assert detector["auroc"] == pytest.approx(roc_auc_score(failed, [by_id[str(e["simulation_id"])] for e in entries]),
                                              **close)
    assert outcome["detector_auroc"] == pytest.approx(detector["auroc"]) and outcome["vs_detector"]
    # the embedded model's own verdicts on the first two trajectories, through agentuq-nb judge
    embedded = next(m for m in monitors.values() if m["kind"] == judges.EMBEDDED)
    verdicts = pd.read_parquet(run_dir / "judged" / "retail" / "judge_scores.parquet")
    assert set(verdicts["model"]) == {EMBEDDED_MODEL} and len(verdicts) + record["embedded_judge"]["unparsed"] == 2
    assert embedded["n"] == len(verdicts) and embedded["cost_per_trajectory_usd"] == 0
    assert set(verdicts["simulation_id"].astype(str)) <= {str(e["simulation_id"]) for e in entries[:2]}


def test_a_jsonl_trust_score_keyed_by_task_is_an_estimator_ranked_negated(tmp_path):
    from agentuq_nb.estimators import get
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores

    small = subset(RETAIL, tmp_path / "retail.json", 10)
    extract(small, tmp_path / "run")
    sims = list(iter_simulations(small))
    lines = [json.dumps({"task_id": s.task_id, "score": 0.9 if s.reward == 1 else 0.2, "verdict": "trusted"})
             for s in sims]
    (tmp_path / "trust.jsonl").write_text("\n".join(lines) + "\n")
    done = import_scores(tmp_path / "run", tmp_path / "trust.jsonl", name="vendor", orientation="safety")
    assert done.counts["keyed_by"] == "task_id" and done.counts["n_matched"] == 10
    estimator = get("external.vendor")
    assert estimator.family == "external" and estimator.is_available(RunDir(tmp_path / "run"))
    scores = estimator.scores(RunDir(tmp_path / "run"))
    failed = {s.task_id: s.reward < 1 for s in sims}
    assert all((value > -0.5) == failed[key[1]] for key, value in scores.items())  # failures riskiest
    # a second import of another name keeps the first; the same name again replaces it
    import_scores(tmp_path / "run", small, name="published")
    import_scores(tmp_path / "run", tmp_path / "trust.jsonl", name="vendor")
    table = pd.read_parquet(tmp_path / "run" / "external_scores.parquet")
    assert table.groupby("monitor").size().to_dict() == {"published": 10, "vendor": 10}
    assert table.loc[table["monitor"] == "vendor", "higher_is_uncertain"].all()


def test_monitors_imported_onto_trajectories_since_replaced_are_left_out_and_dropped(tmp_path):
    from agentuq_nb.estimators import available
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.steps.import_scores import import_scores

    first = subset(RETAIL, tmp_path / "first.json", 5)
    second = subset(RETAIL, tmp_path / "second.json", 10, change=lambda e: e.__delitem__(slice(0, 5)))
    extract(first, tmp_path / "run")
    import_scores(tmp_path / "run", first, name="old")
    extract(second, tmp_path / "run", force=True)  # other trajectories: the old monitor scores another run
    assert not any(n.startswith("external.") for n in available(tmp_path / "run"))
    done = import_scores(tmp_path / "run", second, name="new")
    assert done.dropped == ["old"] and done.counts["n_matched"] == 5
    assert [n for n in available(tmp_path / "run") if n.startswith("external.")] == ["external.new"]


def test_the_guide_s_judges_paragraph_is_the_committed_study_s_headline():
    """docs/guide/judges.md states the numbers of params/judges.yaml's run as committed (docs/findings/judges.json),
    made by the study's own headline function: the guide cannot say what the study did not find."""
    from agentuq_nb.pipeline.judges import COMMITTED_FINDINGS, DETECTOR, EMBEDDED, PUBLISHED, headline

    record = json.loads((ROOT / COMMITTED_FINDINGS).read_text())
    assert [r["run"] for r in record["runs"]] == ["retail", "telecom"]
    assert all({m["kind"] for m in r["monitors"]} >= {PUBLISHED, DETECTOR} for r in record["runs"])
    assert any(m["kind"] == EMBEDDED for m in record["runs"][0]["monitors"]) and record["embedded_judge"]["verdicts"]
    page = (ROOT / "docs" / "guide" / "judges.md").read_text()
    stated = page.split("<!-- judges-headline")[1].split("-->", 1)[1].split("<!-- /judges-headline -->")[0]
    assert " ".join(stated.split()) == " ".join(headline(record, "../findings/judges.json").split())
