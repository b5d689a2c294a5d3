"""A user's own results file, from the README's first screen: analyze → the estimator table and figures → explore;
steps that need an earlier one run it or name it; counts say what they count; report terms are explained where
printed; a params file may live outside the project."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from test_cli import run

ROOT = Path(__file__).resolve().parents[1]


def _without_log_probs(tmp_path: Path) -> Path:
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=8, forms=("raw",))
    data = json.loads(results.read_text())
    for sim in data["simulations"]:
        for msg in sim["messages"]:
            msg["raw_data"] = None
    results.write_text(json.dumps(data))
    return results


def test_a_results_file_without_log_probs_to_table_figures_and_explorer_in_three_commands(tmp_path):
    results = _without_log_probs(tmp_path)
    out = tmp_path / "mine"
    done = run("analyze", results, "--out", out, "--embedder", "hash", "--n-boot", "20")
    assert "figures →" in done.stdout and f"agentuq-nb explore {out}" in done.stdout
    assert (out / "estimator_table.csv").exists()
    assert (out / "figures" / "estimator_forest.png").stat().st_size > 10_000
    assert (out / "figures" / "estimator_forest.pdf").exists()
    assert not (out / "figures" / "roc.png").exists()  # no token statistic was evaluated
    done = run("explore", out, "--out", tmp_path / "view.html")
    assert done.stdout.startswith("8 trajectories →")
    html = (tmp_path / "view.html").read_text()
    assert "agentuq-explorer-data" in html and '"tracer.default"' in html


def test_analyze_with_log_probs_draws_the_roc_and_accuracy_rejection_curves(tmp_path, synthetic_results):
    done = run("analyze", synthetic_results, "--out", tmp_path / "run", "--embedder", "hash", "--n-boot", "20")
    figures = {p.stem for p in (tmp_path / "run" / "figures").glob("*.png")}
    # the reliability diagram: the best combination's cross-fitted probabilities beside length's (issue 40)
    assert figures == {"estimator_forest", "roc", "accuracy_rejection", "reliability"}
    # the counts say what they count: 12 trajectories, one trajectory row per role
    assert "12 trajectories: " in done.stdout and "trajectory rows (12 trajectories × 3 role rows" in done.stdout


def test_compare_estimators_on_token_rows_without_summaries_aggregates_first(tmp_path, synthetic_results):
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)  # what rescore leaves too: token rows, no summaries
    done = run("compare-estimators", run_dir, "--embedder", "hash", "--n-boot", "20")
    assert f"running 'agentuq-nb aggregate {run_dir}' first" in done.stderr
    table = pd.read_csv(run_dir / "estimator_table.csv")
    assert "assistant.avg_token_nll" in set(table["estimator"])  # not only the length baselines
    again = run("compare-estimators", run_dir, "--embedder", "hash", "--n-boot", "20")
    assert "aggregate" not in again.stderr


def test_aggregate_counts_trajectories_and_rows_by_what_they_are(tmp_path, synthetic_results):
    run_dir = tmp_path / "run"
    run("extract", synthetic_results, "--out", run_dir)
    done = run("aggregate", run_dir)
    turns = pd.read_parquet(run_dir / "turn_summary.parquet")
    assert done.stdout.startswith(f"12 trajectories: {len(turns)} turn rows (one per scored message, role and scorer), "
                                  "36 trajectory rows (12 trajectories × 3 role rows (assistant, combined, user)")


def test_simulate_takes_task_ids_separated_by_commas(tmp_path):
    done = run("simulate", "--domain", "bookshop", "--out", tmp_path / "sim", "--task-ids", "1,nope", check=False)
    assert done.returncode == 2 and "'nope'" in done.stderr and "'1,nope'" not in done.stderr


def test_the_scoring_report_explains_its_terms():
    from agentuq_nb.uq.observation import REPORT_TERMS, ScoringReport

    report = ScoringReport(Path("run"), scored=20, truncations=2, truncated_trajectories=1)
    lines = report.explain()
    assert any(line.startswith("sliding_window_truncations: 2: times a conversation longer than the scorer's context")
               for line in lines)
    assert any(line.startswith("truncated_trajectories: 1:") for line in lines)
    assert not any(line.startswith("skipped_already_scored") for line in lines)  # 0: nothing to explain
    assert set(REPORT_TERMS) <= set(report.as_dict())


def test_a_params_file_outside_the_project_finds_the_project_and_resolves_its_paths(tmp_path):
    from agentuq_nb.pipeline.reproduce import load_study, project_root, resolve_against_file

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "results.json").write_text("{}")
    params = tmp_path / "my_study.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"results": "data/results.json", "estimator": "num_messages",
                                                     "leaderboard_results": ["data/results.json"]},
                                      "notebooks": ["02_extract"]}))
    root = project_root(params.parent)  # no checkout above /tmp: found from the installed package
    assert (root / "notebooks").is_dir() and root == ROOT
    study = load_study(params)
    resolved = resolve_against_file(study.notebooks[0][1], params, root)
    assert resolved["results"] == str(tmp_path / "data" / "results.json")
    assert resolved["leaderboard_results"] == [str(tmp_path / "data" / "results.json")]
    assert resolved["estimator"] == "num_messages"  # not a path beside the file: unchanged
    inside = ROOT / "params" / "smoke.yaml"
    assert resolve_against_file({"results": "params"}, inside, ROOT) == {"results": "params"}  # inside: unchanged
