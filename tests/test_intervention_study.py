"""The intervention study end to end on the embedded model (2 bookshop tasks: 8 runs of 2 simulations), then notebook 12 under real
papermill on the same study folder (it resumes: nothing is simulated twice).

What it checks beyond "it runs": the real ``defer`` run agrees with the curve computed exactly from the
baseline (the same trajectories escalated, the same rewards); the random baseline runs at the rate that
matches the threshold policy's expected flagged share; the certificate is recorded with its held-out
check; a second call resumes every run without simulating again.
"""
from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

from agentuq_nb.pipeline.intervention_study import BASELINE, CALIBRATION, InterventionStudyConfig, run_name, run_study
from agentuq_nb.pipeline.reproduce import run_study as run_params_study

ROOT = Path(__file__).resolve().parents[1]
TASKS = ["1", "2"]  # every run simulates them all (was 3 tasks: a third of the file's time for the same checks)
# agent messages of at most 32 tokens (the simulator's default is 64, which the agent's second message reaches): a
# quarter of the study's CPU time, and the confirm runs then ask for and get a confirmation (8 and 10 messages)
SMALL = dict(task_ids=TASKS, rates=[0.5], policies=["defer", "confirm"], k=2, n_boot=200, risk=0.9, agent_max_tokens=32)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("intervention") / "runs" / "small"
    return run_study(InterventionStudyConfig(**SMALL), folder)


def test_every_planned_run_is_simulated_and_summarized(study):
    names = {r["name"] for r in study.plan["runs"]}
    assert names == {run_name("defer", "rate", 0.5), run_name("random-defer", "rate", 0.5),
                     run_name("confirm", "rate", 0.5), run_name("random-confirm", "rate", 0.5),
                     run_name("defer", "risk", 0.9), run_name("confirm", "oracle")}
    for name in names | {CALIBRATION, BASELINE}:
        results = json.loads((study.folder / name / "results.json").read_text())
        assert len(results["simulations"]) == len(TASKS) and results["info"]["intervention_policy"]["signal"] == "turn_avg_nll"
        assert json.loads((study.folder / name / "run_config.json").read_text())["simulation"]["agent_max_tokens"] == 32
    assert set(study.outcomes["run"]) == names | {CALIBRATION, BASELINE}
    summary = study.summary.set_index("run")
    for name in names | {CALIBRATION, BASELINE}:
        for column in ("intervention_rate", "success_all", "success_non_escalated", "agent_tokens"):
            assert column in summary.columns and (pd.isna(summary.loc[name, column]) or
                                                  0 <= summary.loc[name, column] <= (1 if column != "agent_tokens" else 1e9))
    observe = summary.loc[BASELINE]
    assert observe["intervention_rate"] == 0 and observe["escalation_rate"] == 0
    on_disk = pd.read_csv(study.folder / "summary.csv")
    assert list(on_disk["run"]) == list(study.summary["run"])


def test_a_real_defer_run_agrees_with_the_curve_computed_from_the_baseline(study):
    summary = study.summary.set_index("run")
    real, exact = summary.loc[run_name("defer", "rate", 0.5)], summary.loc[run_name("defer", "rate", 0.5) + " (exact)"]
    for column in ("escalation_rate", "success_all", "success_non_escalated"):
        assert real[column] == pytest.approx(exact[column], nan_ok=True), column
    defer = study.outcomes[study.outcomes["run"] == run_name("defer", "rate", 0.5)].set_index("task_id")
    base = study.outcomes[study.outcomes["run"] == BASELINE].set_index("task_id")
    threshold = study.plan["thresholds"]["0.5"]
    assert (defer["escalated"] == (base["max_signal"] > threshold)).all()
    kept = ~defer["escalated"]
    assert (defer.loc[kept, "reward"] == base.loc[kept, "reward"]).all()  # not deferred: the baseline's run


def test_the_random_baseline_runs_at_the_matching_rate(study):
    from agentuq_nb.intervention.outcomes import random_rate_for

    base = study.outcomes[study.outcomes["run"] == BASELINE]
    p = study.plan["random_rates"]["0.5"]
    assert p == pytest.approx(random_rate_for(0.5, base["num_decisions"]))
    decisions = base["num_decisions"].to_numpy()
    assert (1 - (1 - p) ** decisions).mean() == pytest.approx(0.5, abs=1e-6)


def test_the_certificate_is_recorded_with_its_heldout_check(study):
    cert = json.loads((study.folder / "certificate.json").read_text())
    assert cert["risk"] == 0.9 and cert["alpha"] == 0.1 and cert["signal"] == "turn_avg_nll"
    heldout = cert["heldout"]
    assert heldout["n"] == len(TASKS) and 0 <= heldout["n_unflagged_failures"] <= heldout["n_unflagged"] <= len(TASKS)
    certified = json.loads((study.folder / run_name("defer", "risk", 0.9) / "results.json").read_text())
    policy = certified["info"]["intervention_policy"]
    assert policy["trigger"] == "certified" and policy["risk"] == 0.9


def test_a_second_call_resumes_every_run_without_simulating(study):
    stamps = {p: p.stat().st_mtime_ns for p in study.folder.glob("*/checkpoints/*.json")}
    again = run_study(InterventionStudyConfig(**SMALL), study.folder)
    assert {p: p.stat().st_mtime_ns for p in study.folder.glob("*/checkpoints/*.json")} == stamps
    pd.testing.assert_frame_equal(again.summary, study.summary)


def test_notebook_12_runs_under_papermill_on_the_study(study, tmp_path):
    # the params file points the notebook's study folder at the one simulated above: it resumes
    params = tmp_path / "small.yaml"
    params.write_text(yaml.safe_dump({"name": "small", "parameters": {**SMALL, "seed": 300},
                                      "notebooks": ["12_intervention"]}))
    output_root = study.folder.parents[1]
    run_dir = run_params_study(params, root=ROOT, output_root=output_root, log=lambda *_: None)
    assert run_dir == study.folder
    assert (output_root / "figures" / "small" / "intervention_curves.png").stat().st_size > 1000
    executed = nbformat.read(run_dir / "notebooks" / "12_intervention.ipynb", as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert f"8 runs, {8 * len(TASKS)} simulations" in text
