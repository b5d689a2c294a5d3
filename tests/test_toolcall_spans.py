"""Tool-call spans of token rows, the statistics over name and value tokens, and their estimators."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from agentuq_nb.records.toolcall_spans import token_spans
from agentuq_nb.uq.aggregation import trajectory_summary, turn_summary
from agentuq_nb.uq.token_metrics import with_token_metrics

S, K, N, V = "syntax", "arg_key", "tool_name", "arg_value"
OPEN = ["<", "tool", "_", "call", ">", "\n"]
CLOSE = ["\n", "</", "tool", "_", "call", ">"]


def labelled(pairs: list[tuple[str, str | None]]) -> tuple[list[str], list[str | None]]:
    return [t for t, _ in pairs], [label for _, label in pairs]


# ----------------------------------------------------------------------------- hand-written token lists

CASES = {
    "nested arguments, numbers and literals": [
        *[(t, S) for t in OPEN], ('{"', S), ("name", S), ('":', S), (' "', S), ("book", N), ("_it", N), ('",', S),
        (' "', S), ("arguments", S), ('":', S), (' {"', S), ("who", K), ('":', S), (' {"', S), ("age", K), ('":', S),
        (" -", V), ("1.5e3", V), (',', S), (' "', S), ("ok", K), ('":', S), (" true", V), (", ", S), ('"x', K), ('":', S),
        (" [", S), ("null", V), (",", S), ("false", V), ("]}}}", S), *[(t, S) for t in CLOSE]],
    "strings with braces, quotes and escaped quotes": [
        *[(t, S) for t in OPEN], ('{"name": "', S), ("f", N), ('", "arguments": {"', S), ("q", K), ('": "', S),
        ("a}", V), ('\\"', V), ("{b", V), ("\\\\", V), ('"', S), (', "', S), ("r", K), ('": "', S), ("]", V), ('"}}', S),
        *[(t, S) for t in CLOSE]],
    "a token straddling key, colon and value": [
        *[(t, S) for t in OPEN], ('{"name":"', S), ("get", N), ('","arguments":{"', S), ("order", K), ('_id":"O', V),
        ("1", V), ('"}}', S), *[(t, S) for t in CLOSE]],
    "text before the call, then two calls": [
        ("Let", None), (" me", None), (" check", None), (".", None), ("\n<", S), ("tool_call>", S), ("\n", S),
        ('{"name": "', S), ("a", N), ('", "arguments": {}}', S), ("\n</tool_call>", S), ("\n", None),
        ("<tool_call>\n", S), ('{"name": "', S), ("b", N), ('", "arguments": {"', S), ("k", K), ('": ', S), ("7", V),
        ("}}\n", S), ("</tool_call>", S)],
    "truncated inside a value": [
        *[(t, S) for t in OPEN], ('{"', S), ("name", S), ('": "', S), ("cancel", N), ('", "arguments": {"', S),
        ("order", K), ('_id": "', K), ("O10", V)],
    "truncated inside the name": [*[(t, S) for t in OPEN], ('{"name": "', S), ("canc", N)],
    "cut short, then closed by the tag": [
        *[(t, S) for t in OPEN], ('{"name": "', S), ("f", N), ('", "arguments": {"', S), ("a", K), ('": ', S),
        ("12", V), *[(t, S) for t in CLOSE], (" Done", None)],
    "not JSON inside the tags": [*[(t, S) for t in OPEN], ("not", S), (" json", S), *[(t, S) for t in CLOSE],
                                 (" ok", None)],
    "arguments as a JSON string": [
        ("<tool_call>", S), ('{"name": "', S), ("f", N), ('", "arguments": "', S), ('{\\"a\\": 1}', V), ('"}', S),
        ("</tool_call>", S)],
    "a bare call (no tags), Llama style": [
        ("  ", None), ('{"name": "', S), ("lookup", N), ('", "parameters": {"', S), ("id", K), ('": ', S), ("3", V),
        ("}}", S)],
    "a JSON reply that is no call": [('{"', None), ("name", None), ('": "', None), ("Ann", None), ('", "age": 3}', None)],
    "plain text, empty and missing tokens": [("Hello", None), ("", None), (None, None), (" {x}", None)],
}


@pytest.mark.parametrize("case", list(CASES))
def test_span_labels_of_hand_written_tokens(case):
    tokens, expected = labelled(CASES[case])
    assert token_spans(tokens) == expected


def test_every_json_value_kind_after_json_dumps():
    """Calls serialized as the simulator and rescore do (json.dumps): the value tokens spell the values."""
    args = {"s": 'x "q" {y}', "n": -12.5, "b": False, "z": None, "l": [1, "two"], "o": {"deep": {"k": "v"}}}
    body = "<tool_call>\n" + json.dumps({"name": "do_it", "arguments": args}) + "\n</tool_call>"
    tokens = list(body)  # one token per character: every label is exact
    spans = token_spans(tokens)
    spelled = {label: "".join(t for t, s in zip(tokens, spans) if s == label) for label in (N, K, V)}
    assert spelled[N] == "do_it"
    assert spelled[K] == "snbzlodeepk"
    assert spelled[V] == 'x \\"q\\" {y}' + "-12.5falsenull1two" + "v"
    assert all(s == S for t, s in zip(tokens, spans) if s not in (N, K, V))


def test_any_text_is_labelled_without_raising():
    rng = random.Random(0)
    alphabet = list('{}[]":,\\ \nab1-etrufl') + ["<tool_call>", "</tool_call>", '"name"', '"arguments"']
    for _ in range(2000):
        tokens = [rng.choice(alphabet) for _ in range(rng.randint(0, 30))]
        spans = token_spans(tokens)
        assert len(spans) == len(tokens)
        assert set(spans) <= {None, S, K, N, V}


# ----------------------------------------------------------------------------- token tables and statistics

def raw_rows(messages: list[tuple[str, list[str]]], task_id: str = "1") -> pa.Table:
    """Raw token rows of one trajectory: (role, tokens) per message, seeded log-probs."""
    rng = np.random.default_rng(int(task_id))
    rows = []
    for idx, (role, tokens) in enumerate(messages):
        for i, token in enumerate(tokens):
            lp = float(-rng.exponential(0.7))
            rows.append(dict(domain="d", task_id=task_id, trial=0, seed=1, role=role, turn_idx=idx, message_idx=idx,
                             token_idx=i, token=token, chosen_logprob=lp, topk_tokens=[token, "x"],
                             topk_logprobs=[lp, lp - 1.0], model="m", scorer="self", source="generated"))
    return pa.Table.from_pylist(rows)


CALL = CASES["nested arguments, numbers and literals"]
TRAJECTORY = [
    ("user", ["Please", " check", " {it}", "<b>"]),
    ("assistant", labelled(CALL)[0]),
    ("tool", ['{"', "name", '": "', "x", '", "arguments": {"', "a", '": 1}}']),  # a result, not a call
    ("assistant", ["Done", "."]),
    ("assistant", labelled(CASES["text before the call, then two calls"])[0]),
]


@pytest.fixture
def span_tokens() -> pd.DataFrame:
    raw = pa.concat_tables([raw_rows(TRAJECTORY, "1"), raw_rows(TRAJECTORY[:2], "2"), raw_rows(TRAJECTORY[3:4], "3")])
    return with_token_metrics(raw).to_pandas()


def test_the_token_table_carries_each_messages_spans(span_tokens):
    one = span_tokens[span_tokens["task_id"] == "1"]
    for idx, (role, tokens) in enumerate(TRAJECTORY):
        rows = one[one["message_idx"] == idx]
        expected = token_spans(tokens) if role != "tool" else [None] * len(tokens)
        assert [None if pd.isna(s) else s for s in rows["toolcall_span"]] == expected, (idx, role)
    assert set(one.loc[one["message_idx"] == 1, "toolcall_span"]) == {S, N, K, V}


def independent(tokens: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The tool-call statistics by plain pandas: means and maxima over the rows of each span."""
    t = tokens.assign(nll=-tokens["chosen_logprob"])
    name, value = t[t["toolcall_span"] == N], t[t["toolcall_span"] == V]
    out = pd.DataFrame(index=t.groupby(keys).size().index)
    out["toolcall_name_nll"] = name.groupby(keys)["nll"].mean()
    out["toolcall_value_nll"] = value.groupby(keys)["nll"].mean()
    out["toolcall_value_max_nll"] = value.groupby(keys)["nll"].max()
    out["toolcall_name_tokens"] = name.groupby(keys).size().reindex(out.index, fill_value=0)
    out["toolcall_value_tokens"] = value.groupby(keys).size().reindex(out.index, fill_value=0)
    return out.reset_index()


TOOLCALL = ["toolcall_name_nll", "toolcall_value_nll", "toolcall_value_max_nll", "toolcall_name_tokens",
            "toolcall_value_tokens"]


def test_turn_and_trajectory_statistics_equal_an_independent_computation(span_tokens):
    keys = ["task_id", "role", "turn_idx"]
    turns = turn_summary(span_tokens).set_index(keys)[TOOLCALL]
    want = independent(span_tokens, keys).set_index(keys)[TOOLCALL]
    pd.testing.assert_frame_equal(turns.sort_index(), want.sort_index(), check_dtype=False, check_index_type=False)
    trajs = trajectory_summary(span_tokens)
    by_role = trajs[trajs["role"].isin(["assistant", "user", "tool"])].set_index(["task_id", "role"])[TOOLCALL]
    want = independent(span_tokens, ["task_id", "role"]).set_index(["task_id", "role"])[TOOLCALL]
    pd.testing.assert_frame_equal(by_role.sort_index(), want.sort_index(), check_dtype=False, check_index_type=False)
    # NaN, not 0, where a turn or trajectory has no such token; counts are 0 there
    user = trajs[trajs["role"] == "user"].iloc[0]
    assert np.isnan(user["toolcall_value_nll"]) and user["toolcall_value_tokens"] == 0
    assert np.isnan(trajs.loc[trajs["task_id"] == "3", "toolcall_name_nll"]).all()


def test_the_other_statistics_are_unchanged_and_old_tables_load(span_tokens):
    """Summaries of a table without the span column (written before it existed) equal those of the
    table with it, on every other column; its tool-call columns are NaN and 0."""
    old = span_tokens.drop(columns=["toolcall_span"])
    for summarize in (turn_summary, trajectory_summary):
        new, before = summarize(span_tokens), summarize(old)
        rest = [c for c in new.columns if c not in TOOLCALL]
        pd.testing.assert_frame_equal(new[rest], before[rest])
        assert before["toolcall_value_nll"].isna().all() and (before["toolcall_value_tokens"] == 0).all()
    trajs = trajectory_summary(span_tokens)
    a = trajs[trajs["role"] == "assistant"].set_index("task_id")["avg_token_nll"]
    t = span_tokens[span_tokens["role"] == "assistant"]
    pd.testing.assert_series_equal(a, (-t["chosen_logprob"]).groupby(t["task_id"]).mean(), check_names=False, check_index_type=False)


# ----------------------------------------------------------------------------- a real simulated run

@pytest.fixture(scope="module")
def simulated_run(tmp_path_factory) -> Path:
    from agentuq_nb.sim import run_simulations
    from agentuq_nb.steps.aggregate import aggregate
    from agentuq_nb.steps.extract import extract

    out = tmp_path_factory.mktemp("spans_sim")
    results = run_simulations("bookshop", out / "sim", task_ids=["1", "2", "10"], max_steps=6, max_errors=3,
                              progress=False)
    extract(results, out / "run")
    aggregate(out / "run")
    return out


def tool_call_messages(results: Path) -> list[tuple[str, int, list[dict]]]:
    raw = json.loads(results.read_text())
    return [(s["task_id"], i, m["tool_calls"]) for s in raw["simulations"] for i, m in enumerate(s["messages"])
            if m.get("tool_calls")]


def check_tool_call_rows(tokens: pd.DataFrame, results: Path) -> None:
    calls = tool_call_messages(results)
    assert calls, "the run made no tool call"
    for task_id, idx, message_calls in calls:
        rows = tokens[(tokens["task_id"] == task_id) & (tokens["message_idx"] == idx)]
        assert len(rows) and rows["toolcall_span"].notna().all(), (task_id, idx)
        name = "".join(rows.loc[rows["toolcall_span"] == N, "token"]).strip(' "')
        assert name == "".join(c["name"] for c in message_calls)
        values = "".join(rows.loc[rows["toolcall_span"] == V, "token"]).strip(' "')
        assert values == "".join(str(v) for c in message_calls for v in c["arguments"].values())
    with_calls = {(t, i) for t, i, _ in calls}
    others = tokens[[(t, i) not in with_calls for t, i in zip(tokens["task_id"], tokens["message_idx"])]]
    assert others["toolcall_span"].isna().all()


@pytest.mark.slow
def test_real_simulated_rows_are_labelled(simulated_run):
    tokens = pd.read_parquet(simulated_run / "run" / "tokens.parquet")
    check_tool_call_rows(tokens, simulated_run / "sim" / "results.json")


@pytest.mark.slow
def test_rescored_rows_are_labelled(simulated_run):
    from agentuq_nb.steps.rescore import rescore

    rescore(simulated_run / "sim" / "results.json", simulated_run / "rescored")
    tokens = pd.read_parquet(simulated_run / "rescored" / "tokens.parquet")
    assert set(tokens["source"]) == {"teacher_forced"}
    check_tool_call_rows(tokens[tokens["role"] != "tool"], simulated_run / "sim" / "results.json")
    assert tokens.loc[tokens["role"] == "tool", "toolcall_span"].isna().all()


@pytest.mark.slow
def test_estimators_are_listed_and_compared(simulated_run):
    from typer.testing import CliRunner

    import agentuq_nb.estimators as estimators
    from agentuq_nb.cli import app
    from agentuq_nb.estimators import get
    from agentuq_nb.io.store.artifacts import read_trajectory_summary

    run = simulated_run / "run"
    names = estimators.available(run)
    for name in ("assistant.toolcall_name_nll", "assistant.toolcall_value_nll", "assistant.toolcall_value_max_nll"):
        assert name in names
    summary = read_trajectory_summary(run)
    tokens = pd.read_parquet(run / "tokens.parquet")
    value = tokens[(tokens["role"] == "assistant") & (tokens["toolcall_span"] == V)]
    want = (-value["chosen_logprob"]).groupby(value["task_id"]).mean()
    got = get("assistant.toolcall_value_nll").scores(run)
    assert got.to_numpy() == pytest.approx(want.reindex(summary.loc[summary["role"] == "assistant", "task_id"]).to_numpy())
    assert get("assistant.toolcall_value_max_nll").higher_is_uncertain

    result = CliRunner().invoke(app, ["compare-estimators", str(run), "--n-boot", "20"])
    assert result.exit_code == 0, result.output
    table = pd.read_csv(run / "estimator_table.csv")
    listed = set(table[table.columns[0]].astype(str))
    assert {"assistant.toolcall_name_nll", "assistant.toolcall_value_nll"} <= listed


def test_spans_read_as_a_dictionary_give_the_same_partials(span_tokens):
    """``aggregate`` reads the span column dictionary-encoded (with nulls): same partials as plain strings."""
    from agentuq_nb.uq.turn_partials import token_partials

    as_category = span_tokens.assign(toolcall_span=span_tokens["toolcall_span"].astype("category"))
    pd.testing.assert_frame_equal(token_partials(as_category), token_partials(span_tokens))
