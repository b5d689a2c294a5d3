"""Scored tokens/s: one-pass ``llm.score_trajectory`` vs scoring each message separately.

On a real τ²-bench trajectory (../shared/data/tau2), under the agent_llm scorer prompt
(instructions + the airline policy), with the embedded model. Both ways give the same rows
(checked here to 1e-3 nats); one pass evaluates the conversation once instead of once per message.
Per-message scoring is timed twice: from an empty cache for every request (the plain way), and
with the embedded model's KV prefix cache (each request then re-decodes only its new message).

    python benchmarks/bench_observation.py [--messages 12] [--simulation 0]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agentuq_nb import llm
from agentuq_nb.records import Simulation
from agentuq_nb.uq.observation import agent_system_prompt, conversation

TAU2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=TAU2)
    parser.add_argument("--simulation", type=int, default=0)
    parser.add_argument("--messages", type=int, default=12, help="first N messages of the trajectory")
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    sim = Simulation.model_validate(data["simulations"][args.simulation])
    msgs = conversation(sim)[: args.messages]
    system = agent_system_prompt(data["info"])
    llm.get_local_model()  # load once, outside the timings

    model = llm.get_local_model()
    model.prefix_cache = False
    start = time.perf_counter()
    one_pass = llm.score_trajectory(msgs, system=system)
    t_one = time.perf_counter() - start

    def per_message_scoring() -> tuple[float, list]:
        start, rows = time.perf_counter(), []
        for i, m in enumerate(msgs):
            rows.extend(llm.score(msgs[:i], m, system=system))
        return time.perf_counter() - start, rows

    t_each, per_message = per_message_scoring()
    model.prefix_cache = True
    model.clear_cache()  # start cold: the first request pays for the system prompt
    t_cached, cached_rows = per_message_scoring()
    assert [r["chosen_logprob"] for r in cached_rows] == [r["chosen_logprob"] for r in per_message]

    n = len(one_pass)
    worst = max(abs(a["chosen_logprob"] - b["chosen_logprob"]) for a, b in zip(one_pass, per_message))
    print(f"trajectory: {args.results.name} simulation {args.simulation}, {len(msgs)} messages, {n} scored tokens")
    print(f"one pass (score_trajectory): {t_one:7.2f} s  {n / t_one:8.1f} scored tok/s")
    print(f"per message (score × {len(msgs)}):  {t_each:7.2f} s  {n / t_each:8.1f} scored tok/s")
    print(f"per message, prefix cache:   {t_cached:7.2f} s  {n / t_cached:8.1f} scored tok/s (identical rows)")
    print(f"speed-up of one pass: {t_each / t_one:.1f}x vs per message, {t_cached / t_one:.1f}x vs cached per message;"
          f"   rows agree to {worst:.2e} nats (rows: {n} vs {len(per_message)})")


if __name__ == "__main__":
    main()
