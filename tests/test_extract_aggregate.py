"""extract → aggregate against an independent plain-Python computation, and bad token input."""
from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.records.summary import uq_summary
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract


def independent_token_rows(results_path: Path) -> list[dict]:
    """Every generated token of every message, found by hand in all three forms."""
    data = json.loads(results_path.read_text())
    rows = []
    for sim in data["simulations"]:
        sidecar_cache = {}
        for idx, msg in enumerate(sim["messages"]):
            raw = msg.get("raw_data") or {}
            items = None
            if "uq_logprobs" in raw:
                path = results_path.parent / raw["uq_logprobs"]["path"]
                if path not in sidecar_cache:
                    sidecar_cache[path] = [json.loads(line) for line in path.read_text().splitlines() if line]
                items = [
                    {"logprob": r["chosen_logprob"], "top": r["topk_logprobs"]}
                    for r in sidecar_cache[path] if r["message_timestamp"] == msg["timestamp"]
                ]
            else:
                content = (raw.get("logprobs") or msg.get("logprobs") or {}).get("content")
                if content:
                    items = [{"logprob": c["logprob"], "top": [t["logprob"] for t in c["top_logprobs"]]} for c in content]
            for t, item in enumerate(items or []):
                ps = [math.exp(x) for x in item["top"]]
                mass = sum(ps)
                rows.append({
                    "task_id": sim["task_id"], "role": msg["role"], "turn_idx": msg["turn_idx"], "token_idx": t,
                    "chosen_logprob": item["logprob"], "chosen_prob": math.exp(item["logprob"]),
                    "topk_entropy": -sum(p / mass * math.log(p / mass) for p in ps),
                    "normalized_entropy": -sum(p * math.log(p) for p in ps) / math.log(len(ps)),
                })
    return rows


def test_summaries_match_independent_computation(tmp_path, synthetic_results):
    run = tmp_path / "run"
    report = extract(synthetic_results, run)
    turns, trajs = aggregate(run)
    expected = independent_token_rows(synthetic_results)
    assert report.num_tokens == len(expected)
    assert not report.warnings.counts  # clean input: nothing to warn about

    by_traj = defaultdict(list)
    by_turn = defaultdict(list)
    for r in expected:
        by_traj[(r["task_id"], r["role"])].append(r)
        by_traj[(r["task_id"], "combined")].append(r)
        by_turn[(r["task_id"], r["role"], r["turn_idx"])].append(r)

    trajs = trajs.set_index(["task_id", "role"])
    assert len(trajs) == len(by_traj)
    for key, rows in by_traj.items():
        got = trajs.loc[key]
        nll = [-r["chosen_logprob"] for r in rows]
        assert got["total_tokens"] == len(rows)
        assert got["trajectory_nll"] == pytest.approx(sum(nll), abs=1e-9)
        assert got["avg_token_nll"] == pytest.approx(sum(nll) / len(rows), abs=1e-9)
        assert got["mean_topk_entropy"] == pytest.approx(np.mean([r["topk_entropy"] for r in rows]), abs=1e-9)
        assert got["mean_normalized_entropy"] == pytest.approx(np.mean([r["normalized_entropy"] for r in rows]), abs=1e-9)
        assert got["min_chosen_prob"] == pytest.approx(min(r["chosen_prob"] for r in rows), abs=1e-12)
    turns = turns.set_index(["task_id", "role", "turn_idx"])
    assert len(turns) == len(by_turn)
    for key, rows in by_turn.items():
        assert turns.loc[key, "turn_nll"] == pytest.approx(sum(-r["chosen_logprob"] for r in rows), abs=1e-9)
    # agentuq's uq_summary (records.summary) agrees with the vectorized aggregation
    tokens = read_token_table(run)
    for task_id, group in tokens.groupby("task_id"):
        ref = uq_summary(group.to_dict("records"))
        for role, values in ref.items():
            assert trajs.loc[(task_id, role), "trajectory_nll"] == pytest.approx(values["trajectory_nll"], abs=1e-9)
            assert trajs.loc[(task_id, role), "mean_topk_entropy"] == pytest.approx(values["mean_topk_entropy"], abs=1e-9)
    assert RunDir(run).manifest().results == str(synthetic_results.resolve())


def test_turn_idx_is_numeric_and_trajectory_has_rewards(tmp_path, synthetic_results):
    run = tmp_path / "run"
    extract(synthetic_results, run)
    turns, trajs = aggregate(run)
    one = turns[(turns["task_id"] == "0") & (turns["role"] == "assistant")]
    assert list(one["turn_idx"]) == sorted(one["turn_idx"])  # 2 before 10, unlike a string sort
    assert one["turn_idx"].max() >= 10
    assert set(trajs["reward"].unique()) <= {0.0, 1.0}
    assert (run / "trajectory_summary.csv").exists() and (run / "turn_summary.parquet").exists()


def test_real_tau2_file_without_logprobs_is_counted_not_crashed(tmp_path, tau2_files):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = extract(tau2_files[0], tmp_path / "run")
    assert report.num_simulations == 20 and report.num_tokens == 0
    assert report.warnings.counts["assistant_messages_without_logprobs"] > 0  # counted (the manifest keeps it) ...
    assert not [w for w in caught if "carry no log-probs" in str(w.message)]  # ... not said: most real runs have none
    with pytest.raises(ValueError, match="token table is empty"):
        aggregate(tmp_path / "run")


def test_messages_without_logprobs_beside_ones_with_them_are_said(tmp_path, synthetic_results):
    from agentuq_nb.io.input_warnings import InputDataWarning

    data = json.loads(synthetic_results.read_text())
    data["simulations"][1]["messages"][1].update(raw_data=None, logprobs=None)  # one user message lost its log-probs
    synthetic_results.write_text(json.dumps(data))
    with pytest.warns(InputDataWarning, match="1 user message"):
        extract(synthetic_results, tmp_path / "run")


def test_missing_sidecar_names_file_and_message(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    data["simulations"][0]["messages"][1]["raw_data"]["uq_logprobs"]["path"] = "sidecars/missing.jsonl"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"missing\.jsonl.*does not exist.*simulation sim-0 message 1"):
        extract(bad, tmp_path / "run")
    assert not (tmp_path / "run" / "tokens.parquet").exists()  # nothing half-written


def test_invalid_logprobs_are_nulled_and_counted(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    content = data["simulations"][1]["messages"][1]["raw_data"]["logprobs"]["content"]  # simulation 1 uses form (b)
    content[0]["logprob"] = float("nan")
    content[1]["logprob"] = 0.7
    content[2]["logprob"] = 1e-9  # rounding noise: clipped to 0
    content[3]["top_logprobs"][1]["logprob"] = float("-inf")
    bad = synthetic_results.parent / "bad.json"  # beside the sidecars; Python's json writes NaN/-Infinity
    bad.write_text(json.dumps(data))
    report = extract(bad, tmp_path / "run")
    w = report.warnings.counts
    assert w["chosen_logprob_positive_set_null"] == 1
    assert w["tokens_without_chosen_logprob"] == 2
    assert w["topk_logprob_nonfinite_dropped"] == 1
    tokens = read_token_table(tmp_path / "run")
    msg = tokens[(tokens["task_id"] == "1") & (tokens["message_idx"] == 1)].sort_values("token_idx")
    assert msg["chosen_logprob"].isna().sum() == 2
    assert msg["chosen_logprob"].iloc[2] == 0.0
    assert np.isfinite(msg["topk_entropy"].iloc[3])
    _, trajs = aggregate(tmp_path / "run")
    assert np.isfinite(trajs["avg_token_nll"]).all()


def test_sidecar_rows_joined_by_order_when_timestamps_differ(tmp_path, synthetic_results):
    data = json.loads(synthetic_results.read_text())
    sim = data["simulations"][0]  # form (a)
    for m in sim["messages"]:
        if m["role"] == "user":  # agentuq's user simulator re-stamps user messages after logging their rows
            m["timestamp"] = (m["timestamp"] or "") + "Z"
    bad = tmp_path / "shifted" / "results.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps(data))
    report = extract(bad, tmp_path / "run", sidecar_dir=synthetic_results.parent / "sidecars")
    assert report.warnings.counts["sidecar_rows_joined_by_order"] > 0
    tokens = read_token_table(tmp_path / "run")
    ref = read_token_table(extract(synthetic_results, tmp_path / "ref").run_dir)
    key = ["task_id", "message_idx", "token_idx"]
    a = tokens[tokens.task_id == "0"].sort_values(key).reset_index(drop=True)
    b = ref[ref.task_id == "0"].sort_values(key).reset_index(drop=True)
    pd.testing.assert_series_equal(a["chosen_logprob"], b["chosen_logprob"])
    assert (a["message_idx"] == b["message_idx"]).all()


def _rows(task, scorer, role, turn, lps):
    return [{"domain": "d", "task_id": task, "trial": 0, "seed": 1, "scorer": scorer, "role": role, "turn_idx": turn,
             "message_idx": turn, "source": "generated" if scorer == "self" else "teacher_forced", "token_idx": i,
             "chosen_logprob": lp, "chosen_prob": math.exp(lp), "topk_entropy": 0.1, "normalized_entropy": 0.2,
             "full_entropy": None} for i, lp in enumerate(lps)]


def test_observation_roles_and_total_follow_the_chain_rule():
    from agentuq_nb.uq.aggregation import trajectory_summary

    rows = (
        _rows("a", "self", "assistant", 0, [-0.1, -0.2]) + _rows("a", "self", "user", 1, [-1.0])
        + _rows("a", "agent_llm", "user", 1, [-2.0, -3.0]) + _rows("a", "agent_llm", "tool", 3, [-0.5])
        + _rows("a", "self", "assistant", 2, [-0.3])
        # trajectory b was rescored: its assistant rows come from the scorer itself
        + _rows("b", "agent_llm", "assistant", 0, [-0.4]) + _rows("b", "agent_llm", "user", 1, [-1.5])
    )
    s = trajectory_summary(pd.DataFrame(rows)).set_index(["task_id", "scorer", "role"])
    assert s.loc[("a", "agent_llm", "observation_user"), "trajectory_nll"] == pytest.approx(5.0)
    assert s.loc[("a", "agent_llm", "observation_combined"), "trajectory_nll"] == pytest.approx(5.5)
    assert s.loc[("a", "self", "combined"), "trajectory_nll"] == pytest.approx(1.6)  # self rows only
    # total = the agent's own actions (self) + observations under the agent's model
    assert s.loc[("a", "agent_llm", "total"), "trajectory_nll"] == pytest.approx(0.6 + 5.5)
    assert s.loc[("a", "agent_llm", "total"), "total_tokens"] == 3 + 3
    assert s.loc[("b", "agent_llm", "total"), "trajectory_nll"] == pytest.approx(0.4 + 1.5)
    assert ("b", "agent_llm", "observation_combined") not in s.index  # one observation role only


def test_message_table_rows_and_no_simulations(synthetic_results):
    """One row per message, numbered within its simulation; a batch of no simulations gives an empty table."""
    from agentuq_nb.io.ingest.results import iter_simulations
    from agentuq_nb.records.run_tables import MESSAGE_SCHEMA, MessageColumns, message_table

    sims = list(iter_simulations(synthetic_results))[:3]
    table = message_table(sims, "synthetic", MessageColumns.of(sims))
    assert table.column("message_idx").to_pylist() == [i for s in sims for i in range(len(s.messages))]
    assert table.column("task_id").to_pylist() == [str(s.task_id) for s in sims for _ in s.messages]
    assert table.column("role").to_pylist() == [m.role for s in sims for m in s.messages]
    empty = message_table([], "synthetic")
    assert empty.num_rows == 0 and empty.schema == MESSAGE_SCHEMA
