"""Sampling K next actions at one agent decision point with the embedded model: batched vs sequential.

Prints, in one run on one prompt (the agent's context at an early assistant turn of a
real τ²-bench trajectory, rebuilt with ``uq.observation.agent_system_prompt`` /
``conversation``; the file records no tool schemas, so the bookshop domain's tools
stand in for the airline ones), the median wall time over ``--repeats`` of:

1. one sample: ``llm.generate(temperature=T, seed=s)``;
2. K samples batched: ``llm.sample(k=K, seed=s)`` (decoded together, ``local_sampling``);
3. K samples sequential: K ``generate`` calls with seeds ``s + i``;

and the ratios batched / one and sequential / batched. The model is loaded and the
prompt decoded once before the timings (as at successive decision points of one
trajectory, where the prefix cache holds the context), so the figures compare the
sampling itself; the cold prompt decode is printed separately. Target: K=5 batched
<= 2x one sample. Wall-clock figures depend on the other processes on the machine: the
load average is printed alongside.

    python benchmarks/bench_actions.py [--k 5] [--max-tokens 64] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from agentuq_nb import llm
from agentuq_nb.io.ingest.results import iter_simulations
from agentuq_nb.llm.local_model import get_local_model
from agentuq_nb.sim.domain import load_domain
from agentuq_nb.uq.observation import agent_system_prompt, conversation

TAU2_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"


def decision_point(path: Path) -> list[dict]:
    """The agent's context before its second assistant message in the file's first simulation."""
    info = json.loads(path.read_text())["info"]
    sim = next(iter_simulations(path))
    messages = conversation(sim)
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    upto = turns[1] if len(turns) > 1 else turns[0]
    return [{"role": "system", "content": agent_system_prompt(info)}, *messages[:upto]]


def timed(fn) -> tuple[float, object]:
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=TAU2_FILE)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not args.file.is_file():
        raise SystemExit(f"{args.file} not found (the shared τ²-bench files live in ../shared/data/tau2)")
    context = decision_point(args.file)
    tools = load_domain("bookshop").tool_schemas()
    common = dict(tools=tools, temperature=args.temperature, max_tokens=args.max_tokens)
    model = get_local_model()
    model.clear_cache()
    cold, _ = timed(lambda: llm.generate(context, **{**common, "max_tokens": 1}, seed=0))
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()} (before)")
    print(f"decision point: {len(context)} messages; prompt decoded cold in {cold:.1f} s "
          f"(then cached for every timing below); K={args.k}, max_tokens={args.max_tokens}, T={args.temperature}")
    rows: dict[str, list[float]] = {"one": [], "batched": [], "sequential": []}
    tokens: dict[str, list[int]] = {"one": [], "batched": [], "sequential": []}
    for rep in range(args.repeats):
        seed = 1000 * rep
        t, one = timed(lambda: llm.generate(context, seed=seed, **common))
        rows["one"].append(t)
        tokens["one"].append(len(one.tokens))
        t, batch = timed(lambda: llm.sample(context, k=args.k, seed=seed, **common))
        rows["batched"].append(t)
        tokens["batched"].append(sum(len(g.tokens) for g in batch))
        t, seq = timed(lambda: [llm.generate(context, seed=seed + i, **common) for i in range(args.k)])
        rows["sequential"].append(t)
        tokens["sequential"].append(sum(len(g.tokens) for g in seq))
        assert [g.message for g in batch] == [g.message for g in seq], "batched and sequential samples differ"
    med = {name: statistics.median(ts) for name, ts in rows.items()}
    for name, label in (("one", "1 sample"), ("batched", f"K={args.k} batched"),
                        ("sequential", f"K={args.k} sequential")):
        print(f"{label:>16}: median {med[name]:6.2f} s  (runs {', '.join(f'{t:.2f}' for t in rows[name])}; "
              f"tokens {tokens[name]})")
    print(f"batched / 1 sample:   {med['batched'] / med['one']:.2f}  (target <= 2)")
    print(f"sequential / batched: {med['sequential'] / med['batched']:.2f}")
    print(f"load average {os.getloadavg()} (after)")


if __name__ == "__main__":
    main()
