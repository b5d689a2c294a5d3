"""Sampling K next actions at one agent decision point with the embedded model: batched vs sequential, at real length.

Prints, in one run on one prompt — the agent's context at a decision point of a real τ²-bench
trajectory, as ``sample-actions`` rebuilds it (``uq.observation.agent_system_prompt``,
``conversation`` and ``sim.agent.agent_visible``, the tools inferred from the file's calls by ``uq.action_sampling.infer_tools``,
since τ²-bench records none), the decision point whose prompt is nearest ``--prompt-tokens``
(3,000–6,000 tokens: real length) — the wall time of:

1. one sample: ``llm.generate(temperature=T, seed=s)``;
2. K samples batched: ``llm.sample(k=K, seed=s)`` (the prompt decoded once, the K samples decoded
   together, ``local_sampling``);
3. K samples sequential: K ``generate`` calls with seeds ``s + i`` (the first decodes the prompt, the
   others take it from the prefix cache, as successive requests do);

each COLD (the cache cleared first: what a decision point costs when its prompt was not decoded
before) and CACHED (the prompt already in the cache, as at the next decision point of the same
trajectory; median over ``--repeats``), then the same cold figures at a short prompt (the second
decision point of the trajectory). Ratios: batched / one sample (target: K=5 <= 1.5x cold) and
sequential / batched. The batched samples must equal the sequential ones (same seeds). The load
average is printed beside each figure: the machine has 2 cores and other processes share them.

    python benchmarks/bench_actions.py [--k 5] [--max-tokens 64] [--prompt-tokens 4300] [--repeats 3]
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
from agentuq_nb.llm.chat_format import SMOLLM2_CHAT
from agentuq_nb.llm.local_model import get_local_model
from agentuq_nb.sim.agent import agent_visible
from agentuq_nb.uq.action_sampling import infer_tools
from agentuq_nb.uq.observation import agent_system_prompt, conversation

TAU2_FILE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"


def decision_points(path: Path, tools: list[dict]) -> list[tuple[int, list[dict]]]:
    """(prompt tokens, context) before every assistant message after the first of the file's first simulation."""
    info = json.loads(path.read_text())["info"]
    sim = next(iter_simulations(path))
    messages = [agent_visible(m) for m in conversation(sim)]  # as sample-actions builds the history
    system = {"role": "system", "content": agent_system_prompt(info)}
    model = get_local_model()
    out = []
    for i in [i for i, m in enumerate(messages) if m["role"] == "assistant"][1:]:
        context = [system, *messages[:i]]
        segments = SMOLLM2_CHAT.render(context, tools=tools, next_role="assistant")
        out.append((sum(len(model.tokenize(s.text, special=s.special)) for s in segments), context))
    return out


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(fn) -> tuple[float, object]:
    began = time.perf_counter()
    out = fn()
    return time.perf_counter() - began, out


def measure(context: list[dict], common: dict, k: int, seed: int, cold: bool) -> dict[str, tuple[float, int, str]]:
    """{one, batched, sequential}: (seconds, tokens generated, load average after)."""
    model = get_local_model()
    runs = {
        "one": lambda: [llm.generate(context, seed=seed, **common)],
        "batched": lambda: llm.sample(context, k=k, seed=seed, **common),
        "sequential": lambda: [llm.generate(context, seed=seed + i, **common) for i in range(k)],
    }
    out, messages = {}, {}
    for name, run in runs.items():
        if cold:
            model.clear_cache()
        else:
            llm.generate(context, **{**common, "max_tokens": 1}, seed=seed)  # the prompt is in the cache
        seconds, gens = timed(run)
        out[name] = (seconds, sum(len(g.tokens) for g in gens), load())
        messages[name] = [g.message for g in gens]
    assert messages["batched"] == messages["sequential"], "batched and sequential samples differ"
    assert messages["one"][0] == messages["batched"][0]
    return out


def report(label: str, figures: list[dict], k: int) -> None:
    med = {name: statistics.median(f[name][0] for f in figures) for name in figures[0]}
    print(f"{label}:")
    for name, text in (("one", "1 sample"), ("batched", f"K={k} batched"), ("sequential", f"K={k} sequential")):
        runs = ", ".join(f"{f[name][0]:.1f} s ({f[name][1]} tok, load {f[name][2]})" for f in figures)
        print(f"  {text:>16}: {med[name]:6.1f} s   [{runs}]")
    print(f"  batched / 1 sample {med['batched'] / med['one']:.2f}; sequential / batched "
          f"{med['sequential'] / med['batched']:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=TAU2_FILE)
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--prompt-tokens", type=int, default=4300, help="the decision point nearest this prompt length")
    parser.add_argument("--repeats", type=int, default=3, help="of the cached-prompt figures")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.file.is_file():
        raise SystemExit(f"{args.file} not found (the shared τ²-bench files live in ../shared/data/tau2)")
    tools = infer_tools(iter_simulations(args.file))
    points = decision_points(args.file, tools)
    n_long, long_context = min(points, key=lambda p: abs(p[0] - args.prompt_tokens))
    n_short, short_context = points[0]
    common = dict(tools=tools, temperature=args.temperature, max_tokens=args.max_tokens)
    print(f"machine: {os.cpu_count()} cores, load average {load()} (1/5/15 min) at start; {args.file.name}, "
          f"K={args.k}, max_tokens={args.max_tokens}, T={args.temperature}, {len(tools)} inferred tools")
    print(f"decision points: real length {n_long} prompt tokens ({len(long_context)} messages), "
          f"short {n_short} ({len(short_context)} messages)", flush=True)
    report(f"real length, {n_long} tokens, cold (cache cleared before each)",
           [measure(long_context, common, args.k, args.seed, cold=True)], args.k)
    report(f"real length, {n_long} tokens, prompt cached (median of {args.repeats})",
           [measure(long_context, common, args.k, args.seed + 1000 * r, cold=False) for r in range(args.repeats)],
           args.k)
    report(f"short, {n_short} tokens, cold", [measure(short_context, common, args.k, args.seed, cold=True)], args.k)
    print(f"load average {load()} at the end")


if __name__ == "__main__":
    main()
