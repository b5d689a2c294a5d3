"""Verbalized confidence: robust parsing, and asking the embedded model about a real run."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from agentuq_nb.steps.verbalized import verbalized_confidence
from agentuq_nb.uq.verbalized import parse_confidence


@pytest.mark.parametrize("text, value", [
    ("0.85", 0.85), ("I'd say .7", 0.7), ("85%", 0.85), ("about 90 percent sure", 0.9), ("Confidence: 1", 1.0),
    ("60", 0.6), ("0", 0.0), ("Probability: 0.4 (out of 1)", 0.4), ("", None), ("I am not sure.", None), ("150", None),
])
def test_parse_confidence(text, value):
    got = parse_confidence(text)
    assert got == (pytest.approx(value) if value is not None else None)


@pytest.mark.slow
def test_per_turn_and_final_modes_on_a_real_trajectory(tmp_path, tau2_files):
    data = json.loads(tau2_files[0].read_text())
    data["simulations"] = data["simulations"][:1]
    for sim in data["simulations"]:
        sim["messages"] = sim["messages"][:3]  # greeting, user, agent: one question per mode
    path = tmp_path / "small.json"
    path.write_text(json.dumps(data))
    per_turn = verbalized_confidence(tmp_path, results=path, mode="per_turn", progress=False)
    turns = pd.read_csv(tmp_path / "verbalized_confidence_turns.csv")
    n_assistant = sum(1 for s in data["simulations"] for i, m in enumerate(s["messages"]) if m["role"] == "assistant" and i > 0)
    assert len(turns) == n_assistant
    assert per_turn["num_asked"].sum() == n_assistant == 1
    parsed = turns["confidence"].dropna()
    assert ((parsed >= 0) & (parsed <= 1)).all()
    assert (per_turn["num_unparsed"] == turns.groupby("task_id")["confidence"].apply(lambda s: s.isna().sum()).values).all()
    final = verbalized_confidence(tmp_path, results=path, mode="final", progress=False)
    assert (final["num_asked"] == 1).all()


def test_cli_command_writes_scores_that_compare_estimators_lists(tmp_path):
    from typer.testing import CliRunner

    from agentuq_nb.cli import app

    from conftest import make_aggregated_run

    run = make_aggregated_run(tmp_path, num_simulations=4, messages_per_simulation=4, tokens_per_message=3)
    runner = CliRunner()
    result = runner.invoke(app, ["verbalized-confidence", str(run), "--mode", "final", "--limit", "2"])
    assert result.exit_code == 0, result.output
    per_traj = pd.read_csv(run / "verbalized_confidence.csv", dtype={"task_id": str})
    assert len(per_traj) == 2 and (per_traj["num_asked"] == 1).all()
    turns = pd.read_csv(run / "verbalized_confidence_turns.csv")
    assert turns["answer"].notna().all()  # the embedded model really answered
    assert per_traj["verbalized_confidence"].dropna().between(0, 1).all()

    result = runner.invoke(app, ["compare-estimators", str(run), "--n-boot", "20"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(run / "estimator_table.csv")
    row = table[table["estimator"] == "verbalized_confidence"]
    assert len(row) == 1 and bool(row["invert"].iloc[0])
    assert row["n"].iloc[0] == per_traj["verbalized_confidence"].notna().sum()

    bad = runner.invoke(app, ["verbalized-confidence", str(run), "--mode", "sometimes"])
    assert bad.exit_code == 2 and "mode must be one of" in bad.output
