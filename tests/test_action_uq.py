"""Uncertainty from resampled actions (issue 16, points 2-3): canonical actions, clusters, the per-decision
statistics against independent computations, Watchful structural/conceptual equal to the probe's, and
the registered action estimators in a run (listed, skipped with a reason, in compare-estimators)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import entropy

from agentuq_nb import estimators
from agentuq_nb.estimators.actions import ActionEstimator, skipped_action_statistics
from agentuq_nb.records.action_samples import ACTION_SAMPLE_COLUMNS, ACTION_SAMPLE_SCHEMA, ACTION_TURN_STATISTICS
from agentuq_nb.records.actions import action_key
from agentuq_nb.steps.compare_estimators import compare_estimators
from agentuq_nb.uq.action_uq import (
    TEXT_SIMILARITY_THRESHOLD,
    action_turn_table,
    cluster_texts,
    compute_action_turns,
    turn_clusters,
)
from agentuq_nb.uq.embeddings import default_embedder

from conftest import make_aggregated_run

ASK_ID = "Could you please provide your user ID so I can look up your account?"
ASK_ID_AGAIN = "Could you please provide your user ID so I can look up your account?"
WEATHER = "The weather in Paris is sunny with a light breeze today."


def call(name, arguments):
    return {"name": name, "arguments": arguments}


def sample(sample_idx, content="", calls=(), taken_content="", taken_calls=(), **fields):
    """One row of action_samples (the contract's columns), no log-probs unless given."""
    row = {c: None for c in ACTION_SAMPLE_COLUMNS}
    row.update(domain="airline", task_id="t1", trial=0, seed=7, decision_idx=0, message_idx=3, turn_idx=3,
               sample_idx=sample_idx, sampler_model="local/smollm2", sampler_kind="self", temperature=1.0,
               sample_seed=sample_idx, content=content, tool_calls=json.dumps(list(calls)), finish_reason="stop",
               malformed=False, taken_content=taken_content, taken_tool_calls=json.dumps(list(taken_calls)),
               has_logprobs=False, tokens=[], token_logprobs=[], topk_tokens=[], topk_logprobs=[],
               sum_logprob=float("nan"), num_tokens=0, prompt_tokens=100, completion_tokens=10, cost=0.0,
               context_dropped_messages=0)
    row.update(fields)
    return row


# ----------------------------------------------------------------------------- canonical actions (held out)

@pytest.mark.parametrize("a, b", [
    (call("book", '{"passengers": [{"first_name": "Ann", "dob": "1990-01-01"}]}'),
     call("book", {"passengers": [{"dob": "1990-01-01 ", "first_name": "ANN"}]})),        # objects inside a list
    (call("search", {"city": "STRASSE"}), call("search", {"city": "straße"})),              # Unicode case folding
    (call("pay", '{"amount": 1.50}'), call("pay", {"amount": 1.5})),                        # trailing zero
    (call("pay", '{"amount": -0.0}'), call("pay", {"amount": 0})),                          # signed zero
    (call("find", '{"q": "caf\\u00e9"}'), call("find", {"q": "Café"})),                    # JSON escapes
    (call(" get_user ", {}), call("get_user", None)),                                        # name padding, no args
    (call("pay", '{"amount": NaN}'), call("pay", {"amount": float("nan")})),                 # NaN equals NaN here
    (call("pay", '{"amount": Infinity}'), call("pay", {"amount": float("inf")})),
])
def test_more_calls_with_the_same_effect_are_equal(a, b):
    assert action_key([a]) == action_key([b])


@pytest.mark.parametrize("a, b", [
    (call("Get_User", {}), call("get_user", {})),                        # tool names keep their case
    (call("pay", {"amount": "10"}), call("pay", {"amount": "10.0"})),    # strings are not parsed as numbers
    (call("book", {"p": [{"a": 1}]}), call("book", {"p": [{"a": 2}]})),  # a nested value
    (call("pay", {"amount": 0}), call("pay", {"amount": None})),         # zero is not null
    (call("pay", {"amount": 0}), call("pay", {"amount": False})),        # zero is not false
])
def test_more_calls_with_other_effects_differ(a, b):
    assert action_key([a]) != action_key([b])


# ----------------------------------------------------------------------------- clusters

def test_text_clusters_use_complete_linkage_at_the_threshold():
    # a chain: a~b and b~c above the threshold, a~c below it; complete linkage keeps a and c apart
    t = TEXT_SIMILARITY_THRESHOLD
    angle_ab = math.acos(t + 0.05)
    a = np.array([1.0, 0.0, 0.0])
    b = np.array([math.cos(angle_ab), math.sin(angle_ab), 0.0])
    c = np.array([math.cos(2 * angle_ab), math.sin(2 * angle_ab), 0.0])
    far = np.array([0.0, 0.0, 1.0])
    assert a @ b > t and b @ c > t and a @ c < t
    labels = cluster_texts(np.stack([a, b, c, far, a]))
    assert labels[0] == labels[4] and labels[0] != labels[2] and labels[3] not in labels[[0, 1, 2]]
    # every pair inside a cluster is at least t similar (checked with plain loops)
    emb = np.stack([a, b, c, far, a])
    for i in range(5):
        for j in range(5):
            if labels[i] == labels[j]:
                assert emb[i] @ emb[j] >= t - 1e-9


def test_paraphrases_share_a_cluster_and_other_meanings_do_not():
    emb = default_embedder()
    pairs_same = [("Your reservation has been cancelled and the refund will arrive in 5 to 7 business days.",
                   "I have cancelled your reservation; you will get the refund within 5-7 business days."),
                  ("Is there anything else I can help you with?", "Is there anything else I can help you with today?")]
    pairs_other = [("Your reservation has been cancelled.", "What is the weather like in Paris?"),
                   ("Please give me your order number.", "Thank you, have a wonderful day!")]
    for x, y in pairs_same:
        assert cluster_texts(emb.embed([x, y]))[0] == cluster_texts(emb.embed([x, y]))[1], (x, y)
    for x, y in pairs_other:
        labels = cluster_texts(emb.embed([x, y]))
        assert labels[0] != labels[1], (x, y)


# ----------------------------------------------------------------------------- statistics, by hand

def test_statistics_of_one_decision_point_match_a_hand_computation():
    taken = [call("get_order", {"order_id": "#W123"})]
    rows = [
        sample(0, calls=[call("get_order", '{"order_id": " #w123"}')], taken_calls=taken),        # = taken
        sample(1, calls=[call("get_order", {"order_id": "#W123"})], taken_calls=taken),           # = taken
        sample(2, calls=[call("get_order", {"order_id": "#W999"})], taken_calls=taken),           # other args
        sample(3, content=ASK_ID, taken_calls=taken),                                              # text
        sample(4, content=ASK_ID_AGAIN, taken_calls=taken),                                        # same meaning
        sample(5, content=WEATHER, taken_calls=taken),                                             # other meaning
        sample(6, calls=[call("get_order", '{"order_id": "#W1"')], malformed=True, taken_calls=taken),
        sample(7, calls=[call("cancel", {"id": 1}), call("get_order", {"order_id": "#W123"})], taken_calls=taken),
    ]
    turn = action_turn_table(pd.DataFrame(rows)).iloc[0]
    # clusters: {0,1} taken, {2}, {3,4}, {5}, {6} malformed, {7} two calls
    sizes = [2, 1, 2, 1, 1, 1]
    assert turn["k"] == 8 and turn["action_clusters"] == 6
    assert turn["action_agreement"] == pytest.approx(2 / 8)
    assert turn["action_semantic_entropy"] == pytest.approx(entropy(sizes))
    tools = ["get_order"] * 3 + ["no tool"] * 3 + ["malformed"] + ["cancel+get_order"]
    assert turn["tool_name_entropy"] == pytest.approx(entropy(pd.Series(tools).value_counts().to_numpy()))
    assert turn["num_malformed"] == 1
    assert math.isnan(turn["action_semantic_entropy_weighted"]) and math.isnan(turn["structural"])
    assert math.isnan(turn["conceptual"]) and 0 < turn["conceptual_pairwise"] < 1
    assert turn["taken_action"] == "get_order(order_id=#W123)" and turn["taken_kind"] == "tool_call"
    assert turn["sample_clusters"][:2] == [turn["taken_cluster"]] * 2
    assert sorted(turn["cluster_sizes"]) == sorted(sizes)
    long = turn_clusters(action_turn_table(pd.DataFrame(rows)))
    assert long["samples"].sum() == 8 and long.loc[long["taken"], "share"].item() == pytest.approx(0.25)
    assert long["label"].str.startswith("malformed: get_order").sum() == 1


def test_a_text_reply_taken_joins_the_samples_with_its_meaning_and_never_a_tool_call():
    rows = [sample(0, content=ASK_ID_AGAIN, taken_content=ASK_ID),
            sample(1, content=WEATHER, taken_content=ASK_ID),
            sample(2, calls=[call("get_user", {})], taken_content=ASK_ID)]
    turn = action_turn_table(pd.DataFrame(rows)).iloc[0]
    assert turn["action_agreement"] == pytest.approx(1 / 3) and turn["taken_kind"] == "text"
    assert turn["taken_action"].startswith('text: "Could you please')
    # the taken action's own cluster, when no sample joined it, is not counted among the samples'
    alone = action_turn_table(pd.DataFrame([sample(i, content=WEATHER, taken_calls=[call("x", {})]) for i in range(3)])).iloc[0]
    assert alone["action_agreement"] == 0 and alone["action_clusters"] == 1 and alone["action_semantic_entropy"] == 0
    assert alone["taken_cluster"] == 1 and alone["cluster_sizes"] == [3, 0]


def test_weighted_semantic_entropy_uses_length_normalized_likelihoods():
    taken = [call("a", {})]
    spec = [("a", -2.0, 4), ("a", -9.0, 3), ("b", -1.0, 2), ("c", -6.0, 6)]  # (tool, sum_logprob, num_tokens)
    rows = [sample(i, calls=[call(name, {})], taken_calls=taken, has_logprobs=True, sum_logprob=s, num_tokens=n,
                   tokens=["x"] * n, token_logprobs=[s / n] * n)
            for i, (name, s, n) in enumerate(spec)]
    turn = action_turn_table(pd.DataFrame(rows)).iloc[0]
    mass = {}
    for name, s, n in spec:  # plain loop: Σ exp(mean token log-prob) per cluster
        mass[name] = mass.get(name, 0.0) + math.exp(s / n)
    assert turn["action_semantic_entropy_weighted"] == pytest.approx(entropy(list(mass.values())))
    assert turn["action_semantic_entropy"] == pytest.approx(entropy([2, 1, 1]))


def test_bad_samples_are_refused_with_the_place_named():
    with pytest.raises(ValueError, match="at least 2"):
        action_turn_table(pd.DataFrame([sample(0, content="hi")]))
    with pytest.raises(ValueError, match="sample 1 of airline/t1 trial 0 decision 0: tool_calls is not JSON"):
        action_turn_table(pd.DataFrame([sample(0, content="hi"), {**sample(1), "tool_calls": "[{"}]))
    with pytest.raises(ValueError, match="missing column.*sum_logprob"):
        action_turn_table(pd.DataFrame([sample(0)]).drop(columns=["sum_logprob"]))
    with pytest.raises(ValueError, match="appears twice"):
        action_turn_table(pd.DataFrame([sample(0), sample(0)]))


# ----------------------------------------------------------------------------- the probe's values

def test_structural_and_conceptual_equal_the_probe_on_the_same_samples():
    from agentuq_nb import llm
    from agentuq_nb.uq.structural import probe

    prompt, n, seed, max_tokens = "Name a fruit and say why you like it.", 3, 11, 10
    expected = probe(prompt, n=n, seed=seed, max_tokens=max_tokens)
    rows = []
    for i in range(n):  # the probe's own draws (same model, temperature, seeds)
        g = llm.generate([{"role": "user", "content": prompt}], model=llm.LOCAL_MODEL, temperature=1.0, seed=seed + i,
                         max_tokens=max_tokens, top_logprobs=5)
        lps = [r["chosen_logprob"] for r in g.tokens]
        rows.append(sample(i, content=g.message.get("content") or "", taken_content="Apples.", has_logprobs=True,
                           tokens=[r["token"] for r in g.tokens], token_logprobs=lps,
                           topk_tokens=[list(r["topk_tokens"]) for r in g.tokens],
                           topk_logprobs=[list(r["topk_logprobs"]) for r in g.tokens],
                           sum_logprob=sum(lps), num_tokens=len(lps)))
    turn = action_turn_table(pd.DataFrame(rows)).iloc[0]
    assert turn["structural"] == pytest.approx(expected.structural, abs=1e-9)
    assert turn["conceptual"] == pytest.approx(expected.conceptual, abs=1e-6)
    assert turn["conceptual_pairwise"] == pytest.approx(expected.pairwise_distance, abs=1e-6)
    assert turn["conceptual_partial"] == pytest.approx(expected.partial_distance, abs=1e-6)
    assert np.isfinite(turn["action_semantic_entropy_weighted"])
    without = action_turn_table(pd.DataFrame(rows), conceptual_partials=False).iloc[0]
    assert math.isnan(without["conceptual"]) and without["structural"] == turn["structural"]


# ----------------------------------------------------------------------------- estimators in a run

TOOLS = [call("get_order", {"order_id": "#W1"}), call("get_order", {"order_id": "#W2"}), call("cancel", {"id": 1})]
TEXTS = [ASK_ID, WEATHER, "Thank you, have a wonderful day!"]


def write_action_samples(run, k=4, seed=0, sampler=("local/smollm2", "self")):
    """action_samples.parquet for every trajectory of ``run``: failures sample more varied actions."""
    rng = np.random.default_rng(seed)
    traj = pd.read_parquet(run / "trajectories.parquet")
    rows = []
    for t in traj.itertuples(index=False):
        spread = 0.2 if t.reward >= 1 else 0.7
        for d in range(int(rng.integers(2, 6))):
            taken = TOOLS[0]
            for s in range(k):
                draw = rng.random()
                if draw > spread:
                    calls, content = [taken], ""
                elif draw > spread / 2:
                    calls, content = [TOOLS[int(rng.integers(1, 3))]], ""
                else:
                    calls, content = [], TEXTS[int(rng.integers(0, 3))]
                rows.append(sample(s, content=content, calls=calls, taken_calls=[taken], domain=t.domain,
                                   task_id=t.task_id, trial=t.trial, seed=t.seed, decision_idx=d, message_idx=2 * d + 1,
                                   turn_idx=2 * d + 1, sampler_model=sampler[0], sampler_kind=sampler[1]))
    table = pa.Table.from_pylist(rows, schema=ACTION_SAMPLE_SCHEMA)
    pq.write_table(table, run / "action_samples.parquet")
    return table.to_pandas()


@pytest.fixture(scope="module")
def action_run(tmp_path_factory):
    run = make_aggregated_run(tmp_path_factory.mktemp("actions"), num_simulations=24, messages_per_simulation=6,
                              tokens_per_message=4, seed=5, signal=0.4)
    write_action_samples(run, sampler=("local/smollm2", "observer"))
    compute_action_turns(run).to_parquet(run / "action_turns.parquet")
    return run


def test_the_run_lists_the_action_estimators_and_says_which_are_skipped(action_run):
    names = estimators.available(action_run)
    for name in ("action_agreement.mean", "action_agreement.min", "action_agreement.first3", "action_clusters.max",
                 "action_semantic_entropy.mean", "tool_name_entropy.first3", "conceptual_pairwise.max"):
        assert name in names
    assert not any(n.startswith(("structural.", "conceptual.", "action_semantic_entropy_weighted.")) for n in names)
    skipped = skipped_action_statistics(action_run)
    assert set(skipped) == {"action_semantic_entropy_weighted", "structural", "conceptual"}
    assert "no log-probs" in skipped["action_semantic_entropy_weighted"] and "observer" in skipped["structural"]
    # the family comes after the token family and before the baselines
    assert names.index("assistant.avg_token_nll") < names.index("action_agreement.mean") < names.index("num_messages")
    agreement = next(e for e in estimators.estimators(action_run) if e.name == "action_agreement.mean")
    assert agreement.higher_is_uncertain is False and "observer local/smollm2" in agreement.description
    assert isinstance(estimators.get("structural.mean"), ActionEstimator)  # not a token role "structural"
    assert isinstance(estimators.get("tool_name_entropy.first5"), ActionEstimator)
    with pytest.raises(KeyError):
        estimators.get("action_agreement.max")  # the best turn of a confidence is not the worst


def test_aggregates_match_plain_loops(action_run):
    turns = pd.read_parquet(action_run / "action_turns.parquet")
    expected_mean, expected_min, expected_first = {}, {}, {}
    by_key: dict[tuple, list] = {}
    for r in turns.itertuples(index=False):
        by_key.setdefault((r.domain, r.task_id, r.trial, r.seed), []).append((r.decision_idx, r.action_agreement))
    for key, values in by_key.items():
        values.sort()
        expected_mean[key] = sum(v for _, v in values) / len(values)
        expected_min[key] = min(v for _, v in values)
        expected_first[key] = sum(v for _, v in values[:3]) / len(values[:3])
    for name, expected in (("action_agreement.mean", expected_mean), ("action_agreement.min", expected_min),
                           ("action_agreement.first3", expected_first)):
        scores = estimators.get(name).scores(action_run)
        assert len(scores) == len(expected)
        for key, value in scores.items():
            assert value == pytest.approx(expected[key]), name


def test_compare_estimators_shows_the_action_family_with_intervals(action_run):
    table = compare_estimators(action_run, n_boot=200)
    rows = table[table["family"] == "action"].set_index("estimator")
    assert {"action_agreement.mean", "action_semantic_entropy.max", "conceptual_pairwise.first3"} <= set(rows.index)
    assert bool(rows.loc["action_agreement.mean", "invert"]) is True
    finite = rows[["auroc", "auroc_lo", "auroc_hi"]].astype(float).dropna()
    assert len(finite) == len(rows) and (finite["auroc_lo"] <= finite["auroc"]).all() and (finite["auroc"] <= finite["auroc_hi"]).all()
    assert rows.loc["action_agreement.mean", "auroc"] > 0.5  # failures sample more varied actions here


def test_several_samplers_are_named_and_an_unnamed_one_is_refused(tmp_path):
    run = make_aggregated_run(tmp_path, num_simulations=6, messages_per_simulation=4, tokens_per_message=3, seed=2)
    own = write_action_samples(run, k=3, seed=1)
    other = write_action_samples(run, k=3, seed=2, sampler=("gpt-4.1-mini", "observer"))
    pq.write_table(pa.Table.from_pandas(pd.concat([own, other]), schema=ACTION_SAMPLE_SCHEMA, preserve_index=False),
                   run / "action_samples.parquet")
    compute_action_turns(run).to_parquet(run / "action_turns.parquet")
    names = estimators.available(run)
    assert "action_agreement.mean@local/smollm2" in names and "action_agreement.mean@gpt-4.1-mini" in names
    assert names.index("action_agreement.mean@local/smollm2") < names.index("action_agreement.mean@gpt-4.1-mini")
    assert estimators.get("action_agreement.mean@gpt-4.1-mini").scores(run).notna().all()
    with pytest.raises(ValueError, match="several models"):
        estimators.get("action_agreement.mean").scores(run)
    assert set(ACTION_TURN_STATISTICS) <= set(pd.read_parquet(run / "action_turns.parquet").columns)
