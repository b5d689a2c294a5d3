"""Notebook 08 (conformal) under real papermill on a small synthetic run, and its glue functions."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import nbformat
import numpy as np
import pandas as pd
import papermill as pm
import pytest

from agentuq_nb.pipeline import conformal as rc
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.testing.synthetic import write_synthetic_results

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "08_conformal.ipynb"
TAU2 = ROOT.parent / "shared" / "data" / "tau2"
TAU2_FILES = [TAU2 / "gpt-4.1_airline_1trial.json", TAU2 / "ft-gpt-4.1_airline_1trial.json"]
#: the figures of the small run (the only agent, a synthetic ACI stream); with the τ²-bench files as the only agents
#: the leaderboard figures are ``other_runs_…`` (figures of other data say so in their file names)
FIGURES = ["conformal_leaderboard", "conformal_success_rates", "conformal_risk_coverage",
           "synthetic_conformal_aci_stream", "synthetic_conformal_aci_coverage", "synthetic_split_coverage",
           "synthetic_interval_widths"]
OTHER_RUNS_FIGURES = ["other_runs_conformal_leaderboard", "other_runs_conformal_success_rates", *FIGURES[2:]]


def _tau2_or_skip():
    if not all(p.exists() for p in TAU2_FILES):
        pytest.skip(f"real τ²-bench files absent under {TAU2}: skipping the part that reads them")
    return [str(p) for p in TAU2_FILES]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("conformal") / "run"
    results = write_synthetic_results(run_dir, num_simulations=12, seed=3)
    extract(results, run_dir)
    aggregate(run_dir)
    return run_dir


# ---------------------------------------------------------------- glue

def test_per_task_rewards_of_a_run(small_run):
    df = rc.per_task_rewards([small_run / "results.json"], ["mine"])
    assert list(df.columns) == rc.REWARD_COLUMNS
    assert len(df) == 12 and set(df["agent"]) == {"mine"}
    assert set(df["domain"]) == {"synthetic"}
    assert (df["task"] == "synthetic/" + df["task_id"]).all()
    assert set(df["reward"]) <= {0.0, 1.0}
    with pytest.raises(ValueError, match="labels"):
        rc.per_task_rewards([small_run / "results.json"], ["a", "b"])


def test_leaderboard_runs_includes_run_only_when_it_shares_tasks(small_run, tmp_path):
    other = write_synthetic_results(tmp_path / "other", num_simulations=6, seed=9)
    df, note = rc.leaderboard_runs([other, tmp_path / "missing.json"], small_run, ["other"])
    assert set(df["agent"]) == {"other", "this run (run)"}   # same domain and task ids 0..5
    assert "skipped missing" in note and "included the run's own results" in note
    assert rc.leaderboard_subject(df)["about"] == "this run vs 1 other results file"
    alone, note = rc.leaderboard_runs([], small_run)
    assert alone["agent"].nunique() == 1 and len(alone) == 12
    assert rc.leaderboard_subject(alone) == {"prefix": "", "about": "this run", "trials": "1 trial per task"}


def test_leaderboard_runs_with_real_tau2_files_excludes_the_synthetic_run(small_run):
    files = _tau2_or_skip()
    df, note = rc.leaderboard_runs(files, small_run)
    assert df["agent"].nunique() == 2 and len(df) == 40
    assert set(df["domain"]) == {"airline"}
    assert "share no task" in note
    assert rc.leaderboard_subject(df) == {"prefix": "other_runs_", "about": "2 other results files, not this run",
                                          "trials": "1 trial per task"}
    per_agent = df.groupby("agent")["reward"].sum()
    assert per_agent["gpt-4.1_airline_1trial"] == 10 and per_agent["ft-gpt-4.1_airline_1trial"] == 13


def test_run_uncertainty_and_abstention_on_a_tiny_run(small_run):
    runs = rc.run_uncertainty(small_run, "assistant.avg_token_nll")
    assert list(runs.columns) == ["task_id", "trial", "reward", "uncertainty"] and len(runs) == 12
    report = rc.abstention(runs, alpha=0.1, delta=0.1)
    assert report["feasible"] is False and report["threshold"] is None   # 6 cal runs < 22 needed
    assert "no threshold certifiable" in report["reason"]
    summary = rc.abstention_summary(report)
    assert summary["held-out coverage (kept)"] == 0.0
    tiny = rc.abstention(runs.head(3))
    assert tiny["feasible"] is False and "need >= 4" in tiny["reason"]
    rc.abstention_summary(tiny)


def test_abstention_certifies_a_threshold_with_enough_informative_runs():
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 1, 400)
    runs = pd.DataFrame({"task_id": np.arange(400).astype(str), "trial": 0, "uncertainty": u,
                         "reward": (rng.uniform(0, 1, 400) > u ** 3).astype(float)})
    report = rc.abstention(runs, alpha=0.2, delta=0.1)
    assert report["feasible"] and report["threshold"] is not None
    assert 0 < report["heldout"]["coverage"] < 1
    from agentuq_nb.figures.conformal import risk_coverage_figure
    risk_coverage_figure(report)


def test_drift_stream_uses_the_run_when_large_enough_else_synthetic():
    runs = pd.DataFrame({"task_id": ["10", "2", "1", "b", "a"] * 10, "trial": np.repeat(np.arange(10), 5),
                         "reward": 1.0, "uncertainty": np.arange(50, dtype=float)})
    s = rc.drift_stream(runs, min_runs=40)
    assert (s["source"] == "run").all() and len(s) == 50
    assert list(s["task_id"][:10]) == ["1"] * 10 and list(pd.unique(s["task_id"])) == ["1", "2", "10", "a", "b"]
    syn = rc.drift_stream(runs.head(10), min_runs=40, n_synthetic=100, seed=1)
    assert (syn["source"] == "synthetic").all() and len(syn) == 100
    assert syn.equals(rc.drift_stream(runs.head(10), min_runs=40, n_synthetic=100, seed=1))


def test_aci_keeps_coverage_under_drift_where_a_fixed_interval_does_not():
    stream = rc.drift_stream(pd.DataFrame({"task_id": [], "trial": [], "uncertainty": []}),
                             n_synthetic=600, seed=0)
    table = rc.aci_coverage_table(stream, alphas=(0.1, 0.2), gamma=0.02, warmup=30)
    aci = table[table["method"].str.startswith("ACI")]
    fixed = table[table["method"].str.startswith("fixed")]
    assert (abs(aci["coverage"] - aci["nominal"]) < 0.05).all()
    assert (fixed["coverage"].to_numpy() < fixed["nominal"].to_numpy() - 0.1).all()


def test_synthetic_split_coverage_plain_vs_mondrian():
    t = rc.synthetic_split_coverage(alphas=(0.1,), n_reps=100, seed=0)
    cov = {(r.method, r.group): r.coverage for r in t.itertuples()}
    assert abs(cov[("split, exchangeable", "all")] - 0.9) < 0.02
    assert abs(cov[("Mondrian, grouped", "high noise")] - 0.9) < 0.02
    assert abs(cov[("Mondrian, grouped", "low noise")] - 0.9) < 0.02
    assert cov[("split (plain), grouped", "high noise")] < 0.85 < 0.95 < cov[("split (plain), grouped", "low noise")]


# ---------------------------------------------------------------- notebook

def test_notebook_is_stripped_and_thin():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert nb.cells[0].cell_type == "markdown"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert 'run_dir = "runs/example"' in tagged[0].source
    assert 'figures_dir = "figures/example"' in tagged[0].source
    params = pm.inspect_notebook(str(NOTEBOOK))
    assert {"leaderboard_results", "estimator", "alpha", "delta", "q"} <= set(params)  # estimators by registry name
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
            assert "def " not in cell.source and "class " not in cell.source


def _execute(run_dir, figures_dir, out, leaderboard_results, expected=FIGURES):
    pm.execute_notebook(str(NOTEBOOK), str(out), cwd=str(ROOT), kernel_name="python3", progress_bar=False,
                        parameters=dict(run_dir=str(run_dir), figures_dir=str(figures_dir),
                                        leaderboard_results=leaderboard_results))
    assert sorted(p.stem for p in figures_dir.glob("*.png")) == sorted(expected)
    for name in expected:
        for ext in ("png", "pdf"):
            path = figures_dir / f"{name}.{ext}"
            assert path.exists(), f"missing figure {path.name}"
            assert path.stat().st_size > 5000, f"{path.name} is suspiciously small"
    return nbformat.read(out, as_version=4)


def _outputs(nb) -> str:
    return json.dumps([c.get("outputs", []) for c in nb.cells])


def test_notebook_runs_on_a_small_synthetic_run_with_the_run_as_the_only_agent(small_run, tmp_path):
    nb = _execute(small_run, tmp_path / "figures", tmp_path / "out.ipynb", [])
    text = _outputs(nb)
    assert "1 agent(s), 12 runs" in text
    assert "no threshold certifiable" in text           # honest about n = 12
    assert "source = synthetic" in text                 # 12 < aci_min_runs


def test_notebook_runs_with_the_real_tau2_leaderboard(small_run, tmp_path):
    files = _tau2_or_skip()
    nb = _execute(small_run, tmp_path / "figures", tmp_path / "out.ipynb", files, OTHER_RUNS_FIGURES)
    text = _outputs(nb)
    assert "2 agent(s), 40 runs" in text
    assert "ft-gpt-4.1_airline_1trial" in text
