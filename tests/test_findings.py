"""The sentences notebooks 10 and 11 write from their run's numbers (pipeline.findings)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from agentuq_nb.pipeline.findings import (
    action_findings,
    calibration_findings,
    diagram_estimators,
    study_findings,
    study_record,
)

KEYS = {"domain": "bookshop", "seed": 300}


def _turns(saturated: bool) -> pd.DataFrame:
    rows = []
    for t in range(10):
        clusters = 4 if saturated or t % 2 else 2
        rows.append({**KEYS, "task_id": str(t), "trial": 0, "decision_idx": 0, "k": 4, "action_clusters": clusters,
                     "action_agreement": 0.0 if clusters == 4 else 0.5, "taken_kind": "tool_call",
                     "sampler_model": "local/smollm2-135m-instruct", "sampler_kind": "agent"})
    return pd.DataFrame(rows)


def _rewards() -> pd.DataFrame:
    return pd.DataFrame([{**KEYS, "task_id": str(t), "trial": 0, "reward": float(t < 3)} for t in range(14)])


def _table() -> pd.DataFrame:
    rows = [("action_semantic_entropy.mean", "action", 0.70, 0.52, 0.94, 10), ("action_agreement.mean", "action",
            0.55, 0.30, 0.80, 10), ("assistant.avg_token_nll", "token", 0.46, 0.30, 0.67, 14),
            ("num_messages", "baseline", 0.51, 0.35, 0.68, 14), ("action_semantic_entropy.max", "action", 0.70, 0.52,
                                                                  0.94, 10)]
    t = pd.DataFrame(rows, columns=["estimator", "family", "auroc", "auroc_lo", "auroc_hi", "n"])
    t["same_scores_as"] = [None, None, None, None, "action_semantic_entropy.mean"]
    return t


def test_action_findings_count_what_was_sampled_and_say_whether_the_estimators_saturate():
    text = action_findings(_turns(True), _rewards(), _table(), k=4, temperature=1.0, limit=12)
    assert "**12 simulations sampled, 10 decision points in 10 trajectories of them** (7 failed, 3 succeeded; 2 " \
           "have no decision point" in text
    assert "At 10 of 10 decision points (100%) every sample fell in a cluster of its own" in text
    assert "**The action estimators saturate at K = 4 and temperature 1**" in text
    assert "`action_semantic_entropy.mean` 0.700 [0.52, 0.94] (n = 10)" in text
    assert "ranks 1 of the 5" in text and "`action_semantic_entropy.max`" in text  # its alias is named
    assert "1 of the 2 action intervals excludes chance" in text
    calm = action_findings(_turns(False), _rewards(), _table(), k=4, temperature=0.5)
    assert "do not saturate at K = 4 and temperature 0.5" in calm and "At 5 of 10 decision points (50%)" in calm


def test_calibration_findings_and_the_curves_worth_drawing():
    calibrated = pd.DataFrame([
        {"setting": "cross_fitted", "estimator": e, "family": f, "method": "platt", "brier": b, "resolution": r,
         "ece": ece, "ece_debiased": deb}
        for e, f, b, r, ece, deb in (("combined_predictor", "combined", 0.15, 0.02, 0.05, 0.08),
                                     ("num_messages", "baseline", 0.17, 0.0, 0.02, 0.0),
                                     ("agent_chars", "baseline", 0.16, 0.01, 0.04, 0.03),
                                     ("tracer.optimistic", "tracer", 0.10, 0.05, 0.01, 0.01))])
    # tracer.optimistic is tuned on the run's own labels: never the curve shown, however low its Brier score
    assert diagram_estimators(calibrated) == ["combined_predictor", "agent_chars"]
    report = {"n": 135, "n_failures": 108, "cross_fitting": "5-fold StratifiedGroupKFold by task (domain, task_id)"}
    text = calibration_findings(report, calibrated, n_bins=10)
    assert "**135 trajectories, 108 failures** (failure rate 0.80)" in text and "5-fold StratifiedGroupKFold" in text
    se = np.sqrt(0.8 * 0.2 / 13.5)
    assert f"sampling standard error of about {se:.2f}" in text
    assert "Best: `combined_predictor` (platt) Brier 0.150" in text and "`tracer.optimistic`, left out" in text
    assert "exceeds `ece` in 1 of 4 rows" in text


def test_a_study_record_counts_what_excludes_chance_once_per_score_and_marks_what_was_tuned_in_sample():
    table = _table()
    table["in_sample"] = False
    table.loc[len(table)] = ["tracer.optimistic", "tracer", 0.80, 0.60, 0.95, 14, None, True]
    table.loc[len(table)] = ["combined_predictor", "combined", 0.37, 0.20, 0.55, 14, None, False]
    table.loc[len(table)] = ["user.max_token_nll", "token", np.nan, np.nan, np.nan, 0, None, False]
    record = study_record("quickstart", _rewards(), table, _turns(True))
    assert record["n_trajectories"] == 14 and record["n_failures"] == 11 and record["n_successes"] == 3
    assert record["n_agent_scored"] == 14 and record["n_tasks"] == 14
    assert record["n_estimators"] == 7  # the undefined AUROC is not counted
    assert record["median_interval_width"] == 0.37  # widths .42 .5 .37 .33 .42 .35 .35
    # three intervals exclude chance: the .mean row with its alias .max (one score) and the in-sample row
    assert record["n_excluding_chance"] == 3 and record["expected_by_chance"] == 0.4
    assert [(r["estimator"], r["same_scores"], r["in_sample"]) for r in record["excluding_chance"]] == [
        ("action_semantic_entropy.mean", ["action_semantic_entropy.max"], False), ("tracer.optimistic", [], True)]
    assert record["combined"][0]["auroc"] == 0.37 and record["length"]["estimator"] == "num_messages"
    assert record["actions"] == {"k": 4, "points": 10, "all_distinct": 10, "no_agreement": 10}
    text = study_findings(record)
    assert "**3 intervals exclude chance, where about 0.4 of 7 would by chance**" in text
    assert "`action_semantic_entropy.mean` = `action_semantic_entropy.max` 0.700 [0.520, 0.940]" in text
    assert "`tracer.optimistic` 0.800 [0.600, 0.950] (n = 14) (tuned on this run's own labels)" in text
    assert "10 of 10 decision points have 4 clusters of 4" in text


def test_findings_json_records_the_version_the_settings_and_the_inputs_hashes(tmp_path):
    """issue 49: a study's findings.json says what made it - the package version, the notebook's settings and the
    SHA-256 of each results file it read - beside the numbers, which stay as the study wrote them."""
    import hashlib
    import json
    from pathlib import Path

    from agentuq_nb.pipeline.findings import write_findings
    from agentuq_nb.steps.provenance import package_version

    from conftest import require_tau2

    results = require_tau2()[:2]
    record = study_record("quickstart", _rewards(), _table())
    path = write_findings(record, tmp_path, {"n_boot": 1000, "seed": 0}, results)
    written = json.loads(path.read_text())
    assert {k: v for k, v in written.items() if k != "provenance"} == json.loads(json.dumps(record))
    made = written["provenance"]
    assert made["agentuq_nb"] == package_version() and made["settings"] == {"n_boot": 1000, "seed": 0}
    assert made["inputs"] == {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in results}
    known = json.loads(write_findings(record, tmp_path, inputs={"run.json": "ab" * 32}).read_text())
    assert known["provenance"]["inputs"] == {"run.json": "ab" * 32}


def test_counts_in_generated_prose_agree_with_their_number():
    from agentuq_nb.common.wording import agreeing, counted

    assert [counted(n, "trajectory", "trajectories") for n in (0, 1, 2)] == ["0 trajectories", "1 trajectory",
                                                                            "2 trajectories"]
    assert [agreeing(n, "falls", "fall") for n in (0, 1, 3)] == ["0 fall", "1 falls", "3 fall"]
