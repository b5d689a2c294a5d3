"""Online signals and intervention policies (``agentuq_nb.intervention.signals`` / ``.policies``).

Verdict logic on decision points built directly (exact token rows and calls), then real runs of the
simulator on the embedded model (tasks 1 and 2 of the bookshop): observe, defer, resample_vote,
certified and calibrated thresholds, and an interrupted intervention run resumed.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from agentuq_nb import estimators
from agentuq_nb.intervention.certify import certify_threshold, fit_signal_calibrator
from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.intervention.policies import InterventionPolicy, build_policy, coin, majority
from agentuq_nb.intervention.signals import (
    TURN_SIGNALS,
    ActionSamples,
    OnlineSignal,
    SignalValue,
    generation_key,
    online_signal,
    token_table,
)
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig, SimulationConfig
from agentuq_nb.sim import load_domain, run_simulations
from agentuq_nb.sim.decisions import TRANSFER_MESSAGE, DecisionPoint, canonical_calls, describe_message
from agentuq_nb.sim.runner import RunConfigMismatch, simulate, without_wall_clock
from agentuq_nb.steps.aggregate import aggregate
from agentuq_nb.steps.extract import extract
from agentuq_nb.uq import turn_summary

from conftest import run_cli

TASKS = ["1", "2"]
SHOP = load_domain("bookshop")
WRITE_TOOLS = frozenset(n for n, kind in SHOP.tool_types().items() if kind == "write")


# --------------------------------------------------------------------------- decision points built directly

@dataclass
class FakeGeneration:
    message: dict
    tokens: list = field(default_factory=list)
    usage: dict = field(default_factory=dict)
    cost: float | None = 0.0
    raw: dict = field(default_factory=dict)
    finish_reason: str = "stop"


def token_rows(logprobs, topk=None, role="assistant", message_idx=2, task_id="1", seed=7):
    topk = topk or [[lp, -3.0] for lp in logprobs]
    return [{"domain": "bookshop", "task_id": task_id, "trial": 0, "seed": seed, "role": role, "turn_idx": message_idx,
             "message_idx": message_idx, "token_idx": i, "token": f"t{i}", "chosen_logprob": lp,
             "topk_tokens": [f"t{i}", "x"][:len(tk)], "topk_logprobs": tk, "model": "m", "scorer": "self",
             "source": "generated", "message_timestamp": "2026-01-01T00:00:00"}
            for i, (lp, tk) in enumerate(zip(logprobs, topk))]


def point(calls=None, content=None, logprobs=(-0.5, -0.5), call_seed=11, confirmed=frozenset(), task_id="1",
          seed=7, rows_before=()):
    calls = [{"id": f"c{i}", "name": n, "arguments": a} for i, (n, a) in enumerate(calls or [])] or None
    proposal = {"role": "assistant", "content": content, "tool_calls": calls}
    rows = token_rows(list(logprobs), task_id=task_id, seed=seed)
    return DecisionPoint(
        domain="bookshop", task_id=task_id, trial=0, seed=seed, message_idx=2, decision_idx=0, call_seed=call_seed,
        messages=[], tools=[], tool_choice=None, agent_llm="m", agent_temperature=0.0, agent_max_tokens=8,
        top_logprobs=2, agent_llm_args={}, trajectory=[], proposal=proposal,
        generation=FakeGeneration({"role": "assistant", "content": content, "tool_calls": calls}, rows),
        proposal_rows=rows, rows=[*rows_before, *rows], write_tools=WRITE_TOOLS, confirmed_calls=frozenset(confirmed))


CANCEL = ("cancel_order", {"order_id": "O1007"})
LOOKUP = ("get_order", {"order_id": "O1007"})


def test_turn_signals_are_the_proposal_token_statistics():
    lps = [-0.1, -2.0, -0.7]
    topk = [[-0.1, -2.5, -4.0], [-0.9, -2.0], [-0.7, -0.8]]
    p = point(logprobs=lps)
    p.proposal_rows[:] = p.rows[:] = token_rows(lps, topk)
    config = PolicyConfig()
    assert online_signal("turn_avg_nll", config).value(p).value == pytest.approx(-np.mean(lps))
    assert online_signal("turn_max_nll", config).value(p).value == pytest.approx(2.0)
    # entropy of each renormalized top-k (scipy normalizes), averaged over the tokens
    expected = np.mean([stats.entropy(np.exp(t)) for t in topk])
    assert online_signal("turn_entropy", config).value(p).value == pytest.approx(expected)
    empty = point(logprobs=())
    assert math.isnan(online_signal("turn_avg_nll", config).value(empty).value)
    # = the turn summary of the offline pipeline, a token without a log-prob included (skipped by both)
    p.proposal_rows[1]["chosen_logprob"] = None
    turn = turn_summary(token_table(p.proposal_rows)).iloc[0]
    for name, column in TURN_SIGNALS.items():
        assert online_signal(name, config).value(p).value == pytest.approx(turn[column], abs=1e-12), name


def test_threshold_fires_strictly_above_and_nan_never_fires():
    def verdict(threshold, p):
        return build_policy(PolicyConfig(policy="defer", signal="turn_avg_nll", threshold=threshold)).decide(p)

    p = point(content="ok", logprobs=(-0.5, -0.5))  # mean NLL 0.5
    assert (verdict(0.4, p).action, verdict(0.4, p).flagged, verdict(0.4, p).signal) == ("defer", True, 0.5)
    assert (verdict(0.5, p).action, verdict(0.5, p).flagged) == ("proceed", False)
    no_tokens = verdict(-1e9, point(content="ok", logprobs=()))
    assert (no_tokens.action, no_tokens.flagged, no_tokens.signal) == ("proceed", False, None)
    observe = build_policy(PolicyConfig(signal="turn_avg_nll")).decide(p)
    assert (observe.action, observe.flagged, observe.signal) == ("proceed", False, 0.5)


def test_confirm_only_for_write_calls_not_yet_confirmed():
    policy = build_policy(PolicyConfig(policy="confirm", signal="turn_avg_nll", threshold=0.1))
    write = point(calls=[CANCEL])
    assert policy.decide(write).action == "confirm"
    again = point(calls=[CANCEL], confirmed={canonical_calls([{"name": CANCEL[0], "arguments": CANCEL[1]}])})
    read, text = point(calls=[LOOKUP]), point(content="Sure.")
    for p in (again, read, text):
        v = policy.decide(p)
        assert (v.action, v.flagged) == ("proceed", True) and "unconfirmed write" in v.details["confirm"]
    calm = build_policy(PolicyConfig(policy="confirm", signal="turn_avg_nll", threshold=5.0))
    assert calm.decide(write).action == "proceed"


def test_random_coin_is_reproducible_independent_of_the_signal_and_at_its_rate():
    config = PolicyConfig(policy="random", rate=0.3, random_action="defer", signal="turn_avg_nll", seed=4)
    policy = build_policy(config)
    points = [point(content="ok", call_seed=s) for s in range(1000)]
    fired = np.array([policy.decide(p).flagged for p in points])
    # a two-sided binomial test at the rate: not rejected at 0.1 % (seeded: the same draws every run)
    assert stats.binomtest(int(fired.sum()), fired.size, 0.3).pvalue > 1e-3
    assert fired.tolist() == [pickle.loads(pickle.dumps(policy)).decide(p).flagged for p in points]
    other = build_policy(config.model_copy(update={"seed": 5}))
    assert fired.tolist() != [other.decide(p).flagged for p in points]
    v = policy.decide(points[int(np.argmax(fired))])
    assert v.action == "defer" and v.signal == 0.5 and 0.0 <= v.details["coin"] < 0.3
    assert coin(4, 123) == coin(4, 123) != coin(4, 124)


def test_oracle_fires_on_the_failed_runs_only(tmp_path):
    sims = [{"id": f"s{i}", "task_id": t, "trial": 0, "seed": 7, "messages": [], "reward_info": {"reward": r}}
            for i, (t, r) in enumerate([("1", 0.0), ("2", 1.0), ("3", 0.5)])]
    (tmp_path / "results.json").write_text(json.dumps({"info": {}, "tasks": [], "simulations": sims}))
    policy = build_policy(PolicyConfig(policy="defer", oracle=str(tmp_path)))
    actions = {t: policy.decide(point(content="ok", task_id=t)).action for t in ("1", "2", "3", "4")}
    assert actions == {"1": "defer", "2": "proceed", "3": "defer", "4": "proceed"}
    assert policy.decide(point(content="ok", task_id="1", seed=8)).action == "proceed"  # another trial seed
    assert policy.describe()["trigger"] == "oracle" and policy.describe()["oracle_failed_runs"] == 2
    with pytest.raises(FileNotFoundError, match="oracle run"):
        build_policy(PolicyConfig(policy="defer", oracle=str(tmp_path / "missing")))


def test_an_oracle_run_of_other_tasks_is_refused_before_anything_runs(tmp_path):
    """Issue 30: --policy-oracle OTHER_RUN whose keys match none of the run's never intervened, silently."""
    sims = [{"id": f"s{i}", "task_id": t, "trial": 0, "seed": 7, "messages": [], "reward_info": {"reward": 0.0}}
            for i, t in enumerate(["1", "2", "3"])]
    (tmp_path / "results.json").write_text(json.dumps({"info": {}, "tasks": [], "simulations": sims}))
    policy = build_policy(PolicyConfig(policy="defer", oracle=str(tmp_path)))
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"none of its 3 simulations is one of this run's 1 .*never intervene"):
        run_simulations("bookshop", out, task_ids=["1"], seed=300, policy=policy, progress=False)
    assert not out.exists()
    policy.check_runs([("1", 0, 7), ("9", 0, 7)])  # one of them matches: accepted


def test_the_policy_options_are_refused_in_one_line_without_policy_or_with_a_nan_threshold(tmp_path):
    for extra, said in ((["--policy-threshold", "0.5"], "--policy-threshold is used only with --policy"),
                        (["--policy", "defer", "--policy-threshold", "nan"], "--policy-threshold is NaN"),
                        (["--policy", "defer", "--risk", "2"], "--risk: Input should be less than 1"),
                        (["--policy", "defer"], "--policy 'defer' needs exactly one trigger")):
        done = run_cli("simulate", "--domain", "bookshop", "--out", tmp_path / "run", *extra)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and lines == [f"error: {lines[0][7:]}"] and said in lines[0], done.stderr
        assert not (tmp_path / "run").exists()  # no checkpoints/ or sidecars/ left behind


def test_majority_ties_go_to_the_proposal_then_to_the_first_seen():
    a, b, c = ("a",), ("b",), ("c",)
    assert majority([a, b, b]) == (b, 1)
    assert majority([a, b, a, b]) == (a, 0)
    assert majority([a, b, c, c, b]) == (b, 1)
    assert majority([a, a, b]) == (a, 0)


class StubVotes(OnlineSignal):
    """A signal whose resamples are given (the vote's input), to check the vote exactly."""

    name = "stub"

    def __init__(self, samples):
        self.samples = samples

    def value(self, p):
        keys = [generation_key(p.generation)] + [generation_key(s) for s in self.samples]
        return SignalValue(1.0, samples=ActionSamples(self.samples, keys, 7, 0.0), extra_tokens=7)


def test_resample_vote_executes_the_majority_sample_or_proceeds():
    def gen(calls=None, content=None):
        calls = [{"name": n, "arguments": a} for n, a in (calls or [])] or None
        return FakeGeneration({"role": "assistant", "content": content, "tool_calls": calls})

    config = PolicyConfig(policy="resample_vote", signal="turn_avg_nll", threshold=0.0, k=3)
    other = [gen(calls=[LOOKUP]), gen(calls=[("get_order", {"order_id": " o1007 "})]), gen(content="Hi")]
    p = point(calls=[CANCEL])
    v = InterventionPolicy(config, StubVotes(other), threshold=0.0).decide(p)
    # get_order(O1007) twice (argument case and spaces do not count): the first of them is executed
    assert v.action == "replace" and v.replacement is other[0] and v.details["executed_sample"] == 0
    assert sorted(x["votes"] for x in v.details["vote"]) == [1, 1, 2] and v.extra_tokens == 7
    kept = [gen(calls=[CANCEL]), gen(calls=[LOOKUP]), gen(content="Hi")]
    v = InterventionPolicy(config, StubVotes(kept), threshold=0.0).decide(p)
    assert v.action == "proceed" and v.replacement is None and "vote" in v.details


def test_unknown_and_offline_only_signals_fail_clearly():
    with pytest.raises(ValueError, match="unknown online signal 'nope'.*turn_avg_nll.*action_disagreement"):
        online_signal("nope", PolicyConfig())
    with pytest.raises(ValueError, match="cannot be computed online.*scoring after the run"):
        online_signal("observation_user.avg_token_nll@agent_llm", PolicyConfig())
    with pytest.raises(ValueError, match="'num_messages'.*cannot be computed online"):
        online_signal("num_messages", PolicyConfig())
    with pytest.raises(ValueError, match="needs calibration"):
        online_signal("calibrated:turn_avg_nll", PolicyConfig())


def test_estimator_signals_orientation_and_undefined_roles():
    user_rows = token_rows([-1.0, -0.2], role="user", message_idx=1)
    p = point(content="ok", logprobs=(-0.5, -0.1), rows_before=user_rows)
    confidence = online_signal("assistant.min_chosen_prob", PolicyConfig()).value(p)
    assert confidence.value == pytest.approx(-math.exp(-0.5)) and confidence.details["negated"] is True
    combined = pickle.loads(pickle.dumps(online_signal("combined.avg_token_nll", PolicyConfig())))
    assert combined.value(p).value == pytest.approx(0.45)
    assert math.isnan(online_signal("user.avg_token_nll", PolicyConfig()).value(point(content="ok")).value)


# --------------------------------------------------------------------------- real runs on the embedded model

ESTIMATOR = "assistant.avg_token_nll"


def run_with(out: Path, policy, **options) -> dict:
    simulate(SimulationConfig(domain="bookshop", task_ids=TASKS, **options), out, ExecutionConfig(progress=False),
             policy=policy)
    return json.loads((out / "results.json").read_text())


def sidecars(out: Path) -> dict[str, list[dict]]:
    return {p.name: [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            for p in sorted((out / "sidecars").glob("*.jsonl"))}


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plain")
    run_simulations("bookshop", out, task_ids=TASKS, progress=False)
    return out


@pytest.fixture(scope="module")
def observed(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("observe")
    run_with(out, build_policy(PolicyConfig(policy="observe", signal=ESTIMATOR)))
    return out


def test_observe_records_the_signal_and_changes_nothing_else(plain, observed):
    a, b = (json.loads((d / "results.json").read_text()) for d in (plain, observed))
    assert b["info"]["intervention_policy"]["policy"] == "observe"
    blocks = [s.pop("intervention") for s in b["simulations"]]
    assert without_wall_clock(a["simulations"]) == without_wall_clock(b["simulations"])
    assert without_wall_clock(sidecars(plain)) == without_wall_clock(sidecars(observed))
    for block, sim in zip(blocks, a["simulations"]):
        generated = [i for i, m in enumerate(sim["messages"]) if m["role"] == "assistant" and m["raw_data"]]
        assert [d["message_idx"] for d in block["decisions"]] == generated
        assert all(d["action"] == "proceed" and not d["flagged"] and d["signal"] > 0 for d in block["decisions"])
        assert not block["escalated"] and block["env_reward"] == sim["reward_info"]["reward"]


def test_online_estimators_equal_the_offline_pipeline(observed, tmp_path):
    extract(observed / "results.json", tmp_path / "run")
    _, summary = aggregate(tmp_path / "run")
    results = json.loads((observed / "results.json").read_text())
    keys = [("bookshop", s["task_id"], s["trial"], s["seed"]) for s in results["simulations"]]
    # the signal recorded at the last decision point = the offline estimator on the finished trajectory
    offline = estimators.get(ESTIMATOR).scores_from_summary(summary)
    last = [s["intervention"]["decisions"][-1]["signal"] for s in results["simulations"]]
    assert np.allclose(offline.loc[keys].to_numpy(), last, rtol=0, atol=1e-12)
    # any online estimator, given a finished trajectory's rows, = the offline estimator (confidences negated)
    rows = sidecars(observed)
    for name in ("user.mean_normalized_entropy", "combined.max_token_nll", "assistant.min_chosen_prob"):
        signal, estimator = online_signal(name, PolicyConfig()), estimators.get(name)
        offline = estimator.scores_from_summary(summary).loc[keys].to_numpy()
        online = []
        for sim in results["simulations"]:
            p = point()
            p.rows = next(r for n, r in rows.items() if f"_{sim['task_id']}_trial" in n)
            online.append(signal.value(p).value)
        sign = -1.0 if estimator.invert else 1.0
        assert np.isfinite(offline).all() and np.allclose(sign * offline, online, rtol=0, atol=1e-12), name


def test_certified_and_calibrated_thresholds_come_from_the_calibration_run(observed):
    cal = str(observed)
    certificate = certify_threshold(cal, ESTIMATOR, 0.2, 0.1)  # 2 runs: too few to certify anything
    policy = build_policy(PolicyConfig(policy="defer", signal=ESTIMATOR, calibration=cal, risk=0.2))
    d = policy.describe()
    assert certificate["threshold"] is None and policy.threshold == -math.inf and d["threshold"] is None
    assert d["trigger"] == "certified" and d["certification"]["n"] == 2 and "every decision point" in d["certification"]["note"]
    assert policy.decide(point(content="ok")).action == "defer"  # infeasible: intervene everywhere
    assert policy.decide(point(content="ok", logprobs=())).action == "proceed"  # but no signal, no trigger
    # calibrated: the Platt map fitted on the run (both runs succeeded: a constant failure probability)
    calibrated = online_signal(f"calibrated:{ESTIMATOR}", PolicyConfig(calibration=cal))
    value = calibrated.value(point(content="ok"))
    assert value.value == fit_signal_calibrator(cal, ESTIMATOR)(value.details["base_signal"]) == 0.0
    assert pickle.loads(pickle.dumps(calibrated)).value(point(content="ok")).value == value.value


def calibration_run(folder: Path, increasing: bool = True, n: int = 200) -> str:
    """An observe run of turn_avg_nll written by hand (the shape sim.decisions.intervention_block writes): each
    simulation's max signal u ~ U(0, 2), failure with probability u / 2 (or, decreasing, 0.2 (1 - u / 2):
    rare enough to certify at 0.3), seeded."""
    rng = np.random.default_rng(3)
    policy = {"policy": "observe", "signal": "turn_avg_nll"}
    sims = []
    for i, u in enumerate(rng.uniform(0.0, 2.0, n)):
        fail = rng.random() < (u / 2 if increasing else 0.2 * (1 - u / 2))
        block = {"policy": policy, "decisions": [{"message_idx": 2, "decision_idx": 0, "signal": float(u) / 2,
                                                  "flagged": False, "action": "proceed"},
                                                 {"message_idx": 4, "decision_idx": 1, "signal": float(u),
                                                  "flagged": False, "action": "proceed"}],
                 "num_decisions": 2, "escalated": False, "env_reward": 0.0 if fail else 1.0}
        sims.append({"id": f"s{i}", "task_id": str(i), "trial": 0, "seed": 7, "messages": [],
                     "reward_info": {"reward": block["env_reward"]}, "intervention": block})
    folder.mkdir()
    info = {"environment_info": {"domain_name": "bookshop"}, "intervention_policy": policy}
    (folder / "results.json").write_text(json.dumps({"info": info, "tasks": [], "simulations": sims}))
    return str(folder)


def test_a_feasible_certificate_sets_the_threshold_and_carries_over_to_the_calibrated_signal(tmp_path):
    cal = calibration_run(tmp_path / "cal")
    certificate = certify_threshold(cal, "turn_avg_nll", 0.3, 0.1)
    assert certificate["feasible"]
    policy = build_policy(PolicyConfig(policy="defer", signal="turn_avg_nll", calibration=cal, risk=0.3))
    d = policy.describe()
    assert policy.threshold == d["threshold"] == certificate["threshold"]
    assert d["certification"] == {k: certificate[k] for k in ("signal", "feasible", "n", "n_accepted", "coverage",
                                                              "empirical_risk")}
    t = certificate["threshold"]
    above, below = point(content="ok", logprobs=(-(t + 1e-6),)), point(content="ok", logprobs=(-t,))
    assert policy.decide(above).action == "defer" and policy.decide(below).action == "proceed"
    # the calibrated signal flags exactly the same points: the threshold mapped through the increasing map
    calibrated = build_policy(PolicyConfig(policy="defer", signal="calibrated:turn_avg_nll", calibration=cal, risk=0.3))
    assert calibrated.threshold == pytest.approx(fit_signal_calibrator(cal, "turn_avg_nll")(t))
    assert calibrated.describe()["certification"]["signal"] == "turn_avg_nll" and calibrated.describe()["threshold"] < 1
    assert [calibrated.decide(p).action for p in (above, below)] == ["defer", "proceed"]
    assert 0.0 < calibrated.decide(above).signal < 1.0
    with pytest.raises(ValueError, match="does not increase"):
        build_policy(PolicyConfig(policy="defer", signal="calibrated:turn_avg_nll",
                                  calibration=calibration_run(tmp_path / "down", increasing=False), risk=0.3))


DEFER = PolicyConfig(policy="defer", signal="turn_avg_nll", threshold=0.0, escalation_cost=2.5)


@pytest.fixture(scope="module")
def deferred(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("defer")
    run_with(out, build_policy(DEFER))
    return out


def test_defer_escalates_with_reward_zero_and_keeps_the_environment_verdict(deferred, plain):
    results = json.loads((deferred / "results.json").read_text())
    before = {s["task_id"]: s for s in json.loads((plain / "results.json").read_text())["simulations"]}
    for sim in results["simulations"]:
        block = sim["intervention"]
        assert block["escalated"] and block["escalation_cost"] == 2.5 and block["num_interventions"] == 1
        assert sim["reward_info"]["reward"] == 0.0 and block["env_reward"] in (0.0, 1.0)
        assert sim["messages"][-1]["content"] == TRANSFER_MESSAGE and sim["termination_reason"] == "agent_stop"
        first = block["decisions"][0]
        assert first["action"] == "defer" and first["flagged"] and first["executed"] == TRANSFER_MESSAGE
        # up to the deferred proposal the run is the run without policy (same seeds per message)
        plain_msgs = before[sim["task_id"]]["messages"]
        idx = first["message_idx"]
        assert without_wall_clock(sim["messages"][:idx]) == without_wall_clock(plain_msgs[:idx])
        assert first["proposed"] == describe_message(plain_msgs[idx])


def test_resample_vote_executes_a_resampled_action_with_its_token_rows(tmp_path):
    """The agent samples at temperature 1 (one decision point per task: max_steps 3) and the vote draws
    at 0.1: where the proposal is an unlucky draw, the near-greedy resamples outvote it."""
    sampled = dict(temperature=1.0, max_steps=3)
    config = PolicyConfig(policy="resample_vote", signal="action_disagreement", threshold=0.0, k=3,
                          sample_temperature=0.1)
    policy = pickle.loads(pickle.dumps(build_policy(config)))  # a Dask worker gets it pickled
    results = run_with(tmp_path / "vote", policy, **sampled)
    observe = run_with(tmp_path / "observe", build_policy(PolicyConfig(signal="turn_avg_nll")), **sampled)
    rows, observe_rows = sidecars(tmp_path / "vote"), sidecars(tmp_path / "observe")
    replaced = 0
    for sim, seen in zip(results["simulations"], observe["simulations"]):
        block = sim["intervention"]
        assert block["extra_agent_tokens"] == sum(d["extra_tokens"] for d in block["decisions"]) > 0
        for d in block["decisions"]:
            assert 0.0 <= d["signal"] <= 1.0 - 1.0 / (config.k + 1) and d["flagged"] == (d["signal"] > 0.0)
            assert d["intervened"] == d["flagged"]  # a held vote is an intervention, whichever action it executes
            idx = d["message_idx"]
            # the proposal is the observe run's message at this index (same seeds up to it)
            assert d["proposed"] == describe_message(seen["messages"][idx])
            if d["action"] != "replace":
                assert d["executed"] == d["proposed"]
                continue
            replaced += 1
            message = sim["messages"][idx]
            assert d["executed"] == describe_message(message) != d["proposed"]
            votes = {v["action"]: v["votes"] for v in d["details"]["vote"]}
            assert sum(votes.values()) == config.k + 1 and max(votes.values()) > 1
            name = next(n for n in rows if f"_{sim['task_id']}_trial" in n)
            mine = [r["token"] for r in rows[name] if r["message_idx"] == idx]
            assert len(mine) == message["raw_data"]["uq_logprobs"]["num_tokens"] > 0
            assert mine != [r["token"] for r in observe_rows[name] if r["message_idx"] == idx]
    assert replaced >= 1


def test_a_context_that_does_not_fit_leaves_the_action_signal_undefined_and_the_vote_skipped():
    p = point(calls=[CANCEL])
    p.agent_llm, p.messages = EMBEDDED_MODEL, [{"role": "system", "content": "word " * 20000},
                                                 {"role": "user", "content": "hi"}]
    value = online_signal("action_entropy", PolicyConfig(k=2)).value(p)
    assert math.isnan(value.value) and value.samples is None and "does not fit" in value.details["reason"]
    v = build_policy(PolicyConfig(policy="random", rate=1.0, random_action="resample_vote", k=2)).decide(p)
    assert (v.action, v.flagged, v.extra_tokens) == ("proceed", True, 0) and "skipped" in v.details["vote"]


_CHILD = """
import sys
from agentuq_nb.intervention.policies import build_policy
from agentuq_nb.records.config import EMBEDDED_MODEL, ExecutionConfig, SimulationConfig
from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.sim.runner import simulate
simulate(SimulationConfig(domain="bookshop", task_ids={tasks!r}), sys.argv[1], ExecutionConfig(progress=False),
         policy=build_policy(PolicyConfig.model_validate_json(sys.argv[2])))
"""


def test_a_killed_intervention_run_resumes_to_the_same_results(tmp_path, deferred):
    """SIGKILL the run right after its first checkpoint; run it again: the same results as uninterrupted."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    child = subprocess.Popen([sys.executable, "-c", _CHILD.format(tasks=TASKS), str(tmp_path), DEFER.model_dump_json()],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    checkpoints = tmp_path / "checkpoints"
    deadline = time.time() + 300
    while not (checkpoints.is_dir() and any(checkpoints.glob("*.json"))) and child.poll() is None \
            and time.time() < deadline:
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert len(list(checkpoints.glob("*.json"))) == 1, child.stdout.read().decode()[-2000:]
    assert not (tmp_path / "results.json").exists()
    with pytest.raises(RunConfigMismatch, match="intervention_policy"):  # another policy is not mixed in
        run_with(tmp_path, build_policy(DEFER.model_copy(update={"threshold": 0.5})))
    resumed = run_with(tmp_path, build_policy(DEFER))
    uninterrupted = json.loads((deferred / "results.json").read_text())
    assert without_wall_clock(resumed["simulations"]) == without_wall_clock(uninterrupted["simulations"])
    assert without_wall_clock(sidecars(tmp_path)) == without_wall_clock(sidecars(deferred))
