"""Notebooks: committed without outputs, and a study runs end to end under real papermill."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import nbformat
import pandas as pd
import papermill as pm
import pytest
import yaml

from agentuq_nb.io.errors import InputError
from agentuq_nb.pipeline.reproduce import load_study, run_study

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_numbered_notebooks():
    names = [nb.name for nb in NOTEBOOKS]
    assert {"02_extract.ipynb", "03_aggregate.ipynb", "04_evaluate.ipynb"} <= set(names)
    assert all(name[:2].isdigit() and name[2] == "_" for name in names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stripped_and_has_one_parameters_cell(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: committed with outputs"
            assert cell.execution_count is None, f"{path.name}: committed with execution counts"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: needs exactly one 'parameters' cell"
    assert nb.cells[0].cell_type == "markdown", f"{path.name}: should open by saying what it computes"
    # every name assigned in the parameters cell must be one papermill can see (it silently
    # drops lines it cannot parse, and such a parameter would never be injected)
    assigned = {t.id for node in ast.parse(tagged[0].source).body if isinstance(node, ast.Assign) for t in node.targets}
    assert assigned == set(pm.inspect_notebook(str(path))), f"{path.name}: papermill cannot parse some parameters"
    assert {"run_dir", "figures_dir"} <= assigned


@pytest.mark.parametrize("path", sorted((ROOT / "params").glob("*.yaml")), ids=lambda p: p.name)
def test_params_files_name_existing_notebooks(path):
    study = load_study(path)
    for nb, _ in study.notebooks:
        assert (ROOT / "notebooks" / f"{nb}.ipynb").exists(), f"{path.name}: unknown notebook {nb}"


def test_params_with_a_secret_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake-0123456789abcdef")
    p = tmp_path / "leaky.yaml"
    p.write_text(yaml.safe_dump({"notebooks": ["04_evaluate"], "parameters": {"note": "sk-fake-0123456789abcdef"}}))
    with pytest.raises(InputError, match="API key"):
        load_study(p)
    p.write_text(yaml.safe_dump({"notebooks": ["04_evaluate"], "parameters": {"openai_api_key": "x"}}))
    with pytest.raises(InputError, match="looks like a secret"):
        load_study(p)


#: the combined predictors' gradient boosting searched over one setting of its grid (the default grid's 4 settings
#: are 13 fits a fold instead of 4: three quarters of notebook 13's time, a third of notebook 11's); the search
#: itself, its grid and its choice are tested in tests/test_calibration.py
SMOKE_GBM_GRID = {"max_depth": [2], "learning_rate": [0.2]}


def run_results_study(tmp_path, name: str, results, notebooks: list[str], n_boot: int, **parameters) -> Path:
    """A study ``name`` of ``notebooks`` over ``results`` (and ``parameters``), run under papermill into ``tmp_path``."""
    params = tmp_path / f"{name}.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"results": str(results), "n_boot": n_boot, **parameters},
                                      "notebooks": notebooks}))
    return run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)


def test_analysis_study_runs_under_papermill(tmp_path, synthetic_results):
    run_dir = run_results_study(tmp_path, "synthetic_study", synthetic_results,
                                ["02_extract", "03_aggregate", "04_evaluate"], n_boot=200)
    figures_dir = tmp_path / "figures" / "synthetic_study"
    for name in ("roc", "accuracy_rejection", "uncertainty_by_outcome", "agent_turn_nll", "token_nll_by_role"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000
        assert (figures_dir / f"{name}.pdf").exists()
    assert (figures_dir / "token_view.html").stat().st_size > 1000
    metrics = json.loads((run_dir / "eval_metrics.json").read_text())
    assert metrics["n"] == 12 and 0.0 <= metrics["metrics"]["auroc"] <= 1.0
    executed = nbformat.read(run_dir / "notebooks" / "04_evaluate.ipynb", as_version=4)
    assert any(c.get("outputs") for c in executed.cells if c.cell_type == "code")


def test_a_failing_notebook_is_reported_by_study_notebook_and_cell_error(tmp_path):
    params = tmp_path / "no_data.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"results": str(tmp_path / "missing.json")},
                                      "notebooks": ["02_extract"]}))
    with pytest.raises(RuntimeError, match=r"\[no_data\] 02_extract.ipynb failed in cell \d+: InputError: .*missing.json") as err:
        run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)
    assert str(tmp_path / "runs" / "no_data" / "notebooks" / "02_extract.ipynb") in str(err.value)


def test_calibration_notebook_runs_on_a_multi_trial_run(tmp_path):
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=30, messages_per_simulation=8,
                                      tokens_per_message=5, trials=3, signal=1.0)
    run_dir = run_results_study(tmp_path, "calibration_study", results,
                                ["02_extract", "03_aggregate", "11_calibration"], n_boot=100,
                                gbm_grid=SMOKE_GBM_GRID)
    figures_dir = tmp_path / "figures" / "calibration_study"
    for name in ("reliability", "estimator_forest"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000
    report = json.loads((run_dir / "calibration.json").read_text())
    assert report["n"] == 30 and report["estimators"]
    executed = nbformat.read(run_dir / "notebooks" / "11_calibration.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "10 tasks, 3–3 trials each" in text and "label noise" in text
    # the prose's numbers are rendered from the run: the folds actually used, the bins' noise, the Brier order
    rendered = json.dumps([o.get("data", {}).get("text/markdown", "") for c in executed.cells
                           if c.cell_type == "code" for o in c.get("outputs", [])])
    assert "30 trajectories" in rendered and "5-fold StratifiedGroupKFold" in rendered and "Brier" in rendered


def test_real_runs_notebook_ranks_black_box_estimators_across_runs(tmp_path):
    """Notebook 13 on two real τ²-bench runs without log-probs (hash embeddings, few resamples: a smoke run of
    params/real_runs.yaml's study): the leaderboard, its sentences, and the four figures."""
    from conftest import require_tau2

    files = [str(p) for p in require_tau2()] + [str(tmp_path / "absent.json")]
    params = tmp_path / "real_runs_smoke.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"results": files, "n_boot": 50, "embedder": "hash",
                                                     "example_run": "gpt-4.1_airline_1trial",
                                                     "gbm_grid": SMOKE_GBM_GRID},
                                      "notebooks": ["13_real_runs"]}))
    run_dir = run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)
    figures_dir = tmp_path / "figures" / "real_runs_smoke"
    for name in ("real_runs_leaderboard", "tracer_readouts", "real_runs_trajectory", "real_runs_calibration"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000, name
    leaderboard = pd.read_csv(run_dir / "leaderboard" / "run_leaderboard.csv")
    assert {"tracer.nested", "tracer.optimistic", "structure.tool_errors", "blackbox_gbm"} <= set(leaderboard["estimator"])
    executed = nbformat.read(run_dir / "notebooks" / "13_real_runs.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                   for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "skipped absent" in text and "2 runs, 40 trajectories, 17 failures" in text
    assert "in-sample tuning adds" in text


def test_detector_notebook_trains_judges_and_writes_its_findings(tmp_path):
    """Notebook 14 on two real τ²-bench runs (hash embeddings, few resamples, no ablation: a smoke run of
    params/detector.yaml's study): the protocols, their sentences, the figures and the detector folder."""
    from conftest import require_tau2

    files = [str(p) for p in require_tau2()] + [str(tmp_path / "absent.json")]
    params = tmp_path / "detector_smoke.yaml"
    params.write_text(yaml.safe_dump({"parameters": {"results": files, "n_boot": 50, "embedder": "hash",
                                                     "early_turns": [1, 3], "early_fractions": [0.5],
                                                     "ablation": False},
                                      "notebooks": ["14_detector"]}))
    run_dir = run_study(params, root=ROOT, output_root=tmp_path, log=lambda *_: None)
    figures_dir = tmp_path / "figures" / "detector_smoke"
    for name in ("detector_protocols", "detector_early", "detector_calibration", "detector_label_shift",
                 "detector_top_features"):
        assert (figures_dir / f"{name}.png").stat().st_size > 1000, name
    card = json.loads((run_dir / "detector" / "card.json").read_text())
    assert card["n"] == 40 and set(card["protocols"]) == {"within_run", "leave_one_run_out", "leave_run_and_task_out",
                                                          "leave_one_domain_out"}
    executed = nbformat.read(run_dir / "notebooks" / "14_detector.ipynb", as_version=4)
    text = "".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                   for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "skipped absent" in text and "**2 runs, 40 labelled trajectories, 17 failures**" in text
    assert "Task leakage" in text and "A learned failure detector across 2 shared runs" in text
    # each held-out run's estimated rate beside its true one, its Brier against the training rate's and the base rate's
    assert "| held-out run | n | true failure rate | estimated rate [95% interval]" in text
    assert "Brier of the training rate" in text
    findings = json.loads((figures_dir / "findings.json").read_text())
    assert findings["n_trajectories"] == 40 and set(findings["protocols"]) >= {"within_run", "leave_run_and_task_out"}
