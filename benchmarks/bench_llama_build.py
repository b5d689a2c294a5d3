"""What the build without -march=native costs: the embedded model's speed under two llama-cpp-python builds.

Each build is a Python environment (its interpreter given on the command line) holding the same llama-cpp-python
version compiled differently: by default pip's own build (``GGML_NATIVE=ON``: ``-march=native``) against
``make setup``'s (``GGML_NATIVE=OFF``, the CPU's instruction sets named one by one, AMX off;
``src/agentuq_nb/llm/llama_build.py``). Both run this repository's ``agentuq_nb`` (its ``src`` on the path), so only
llama.cpp differs. Per build and round, a fresh process loads the model and measures, with the prefix cache off:

1. generation: ``llm.generate`` of 128 greedy tokens with top-5 log-probs (tokens/s of generated tokens);
2. teacher-forced scoring: ``llm.score`` of the first 3,000 characters of τ²-bench's retail policy
   (``../shared/tau2-bench``, 731 tokens) as an assistant message, scored tokens/s.

llama.cpp runs on one thread (``AGENTUQ_NB_THREADS=1``; generation always does), so that the kernels are compared,
not how two threads share a busy machine. Each rate is given twice: per second of wall-clock time, and per
second of the process's CPU time, which other processes on the cores disturb far less. Rounds alternate between the
builds so that a change of the machine's load falls on both; each round's best of ``--repeats`` runs is kept, and
the medians over rounds are compared (ratio: second build / first). The load average is printed.

    python benchmarks/bench_llama_build.py NATIVE_PYTHON PORTABLE_PYTHON [--rounds 5] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPT = [{"role": "user", "content": "Write a long, detailed story about a robot who learns to paint, "
                                      "with many characters and places."}]
TARGET = ROOT.parent / "shared" / "tau2-bench" / "data" / "tau2" / "domains" / "retail" / "policy.md"
TARGET_CHARS = 3000
#: the rates measured: tokens per wall-clock second and per CPU second of the process
RATES = ("generated", "generated_cpu", "scored", "scored_cpu")


def measure(n_tokens: int, repeats: int) -> dict:
    """In the child: the build's features, and the best generation and scoring rates of ``repeats`` runs."""
    os.environ["AGENTUQ_NB_PREFIX_CACHE"] = "0"
    os.environ["AGENTUQ_NB_THREADS"] = "1"
    import llama_cpp

    from agentuq_nb import llm
    from agentuq_nb.llm import llama_build

    text = TARGET.read_text()[:TARGET_CHARS]
    llm.generate(PROMPT, max_tokens=8)  # load the model
    rates: dict[str, list[float]] = {what: [] for what in RATES}

    def timed(what: str, fn) -> int:
        wall, cpu = time.perf_counter(), time.process_time()
        n = len(fn())
        rates[what].append(n / (time.perf_counter() - wall))
        rates[what + "_cpu"].append(n / (time.process_time() - cpu))
        return n

    for _ in range(repeats):
        n_generated = timed("generated", lambda: llm.generate(PROMPT, max_tokens=n_tokens, top_logprobs=5).tokens)
        n_scored = timed("scored", lambda: llm.score(PROMPT, {"role": "assistant", "content": text}))
    record = llama_build.installed_build()
    return {"system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
            "built": f"make setup's (key {record['key']}, level {record['level']})" if record else "pip's own",
            **{what: max(values) for what, values in rates.items()}, "n_generated": n_generated, "n_scored": n_scored}


def run_child(python: str, n_tokens: int, repeats: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run([python, __file__, "--child", "--tokens", str(n_tokens), "--repeats", str(repeats)],
                          capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode:
        raise SystemExit(f"{python}: exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pythons", nargs="*", help="two interpreters: the reference build, then the compared one")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per build, alternating")
    parser.add_argument("--repeats", type=int, default=3, help="runs per process (its best is kept)")
    parser.add_argument("--tokens", type=int, default=128, help="generated tokens per run")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.tokens, args.repeats)))
        return
    if len(args.pythons) != 2:
        parser.error("give two interpreters")
    rounds: dict[str, list[dict]] = {p: [] for p in args.pythons}
    loads = []
    for i in range(args.rounds):
        for python in args.pythons:
            loads.append(os.getloadavg()[0])
            rounds[python].append(run_child(python, args.tokens, args.repeats))
            got = rounds[python][-1]
            print(f"round {i + 1} {python}: generation {got['generated']:6.1f} tok/s ({got['generated_cpu']:.1f} per "
                  f"CPU-s), scoring {got['scored']:6.1f} tok/s ({got['scored_cpu']:.1f} per CPU-s)", flush=True)
    print(f"\nload average during the runs: {min(loads):.2f}-{max(loads):.2f} (2 cores); {args.rounds} rounds × "
          f"best of {args.repeats}; {rounds[args.pythons[0]][0]['n_generated']} generated tokens, "
          f"{rounds[args.pythons[0]][0]['n_scored']} scored tokens per run; one llama.cpp thread")
    medians = {}
    for python, got in rounds.items():
        medians[python] = {what: statistics.median(r[what] for r in got) for what in RATES}
        lo_hi = {what: f"{min(r[what] for r in got):.1f}-{max(r[what] for r in got):.1f}" for what in RATES}
        m = medians[python]
        print(f"{python}\n  {got[0]['built']}: {got[0]['system_info']}\n"
              f"  generation {m['generated']:6.1f} tok/s (rounds {lo_hi['generated']}), {m['generated_cpu']:6.1f} per "
              f"CPU-s ({lo_hi['generated_cpu']})\n"
              f"  teacher-forced scoring {m['scored']:6.1f} tok/s (rounds {lo_hi['scored']}), {m['scored_cpu']:6.1f} "
              f"per CPU-s ({lo_hi['scored_cpu']})")
    first, second = (medians[p] for p in args.pythons)
    print("ratio second / first (medians): " + ", ".join(f"{what} {second[what] / first[what]:.3f}" for what in RATES))


if __name__ == "__main__":
    sys.exit(main())
