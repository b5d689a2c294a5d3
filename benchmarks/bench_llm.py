"""Throughput of the LLM layer on the embedded model, against the straightforward way.

Prints, all measured in this run on this machine:

1. generated tokens/s with top-5 log-probs: ``agentuq_nb.llm.generate`` (through
   litellm, numpy log-prob math) vs llama-cpp-python's built-in
   ``create_completion(logprobs=5)`` on the same rendered prompt;
2. teacher-forced scoring tokens/s (``score`` of a long assistant message);
3. ``score_trajectory`` in one pass vs ``score`` message by message on a
   20-message conversation (the plain way: every request from an empty cache);
4. the KV prefix cache on a multi-turn exchange shaped like a simulation (agent
   and user prompts alternating, each growing by a turn): cache on vs off.

Measurements 1-3 run with the prefix cache off, so that each request pays its
whole prompt as the built-in path does.

Targets on the 2-core reference machine: >= 50 generated tok/s (>= 4x built-in),
>= 150 scored tok/s. Timings are wall-clock and sensitive to other processes on
the machine; the load average is printed alongside.

    python benchmarks/bench_llm.py [--tokens 128] [--repeats 3]
"""
from __future__ import annotations

import argparse
import os
import resource
import time
from contextlib import contextmanager

import llama_cpp

from agentuq_nb import llm
from agentuq_nb.llm.chat_format import SMOLLM2_CHAT, segments_text
from agentuq_nb.llm.local_model import locate_model_file
from agentuq_nb.llm.local_provider import chat_completion
from agentuq_nb.llm.request import GenerationRequest

PROMPT = [{"role": "user", "content": "Write a long, detailed story about a robot who learns to paint, "
                                      "with many characters and places."}]


def best_of(repeats: int, fn) -> tuple[float, object]:
    """Fastest wall time of ``repeats`` runs (least disturbed by other processes) and its result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def bench_generation(n_tokens: int, repeats: int) -> None:
    ours_s, ours = best_of(repeats, lambda: llm.generate(PROMPT, max_tokens=n_tokens, top_logprobs=5))
    ours_n = len(ours.tokens)

    builtin_model = llama_cpp.Llama(model_path=str(locate_model_file()), n_ctx=2048, logits_all=True,
                                    n_threads=1, n_threads_batch=os.cpu_count(), verbose=False)
    prompt = segments_text(SMOLLM2_CHAT.render(PROMPT, next_role="assistant"))

    def builtin():
        builtin_model.reset()
        return builtin_model.create_completion(prompt, max_tokens=n_tokens, temperature=0.0, logprobs=5)

    base_s, base = best_of(repeats, builtin)
    base_n = base["usage"]["completion_tokens"]
    builtin_model.close()
    ours_rate, base_rate = ours_n / ours_s, base_n / base_s
    print(f"generation, top-5 logprobs   ours {ours_rate:7.1f} tok/s ({ours_n} tok)   "
          f"llama-cpp-python logprobs= {base_rate:7.1f} tok/s ({base_n} tok)   ratio {ours_rate / base_rate:5.2f}x", flush=True)


def bench_scoring(repeats: int) -> None:
    story = llm.generate(PROMPT, max_tokens=400).message
    elapsed, rows = best_of(repeats, lambda: llm.score(PROMPT, story))
    print(f"teacher-forced scoring       {len(rows) / elapsed:7.1f} scored tok/s ({len(rows)} tok in {elapsed:.2f} s)", flush=True)


def conversation(n_messages: int) -> list[dict]:
    msgs: list[dict] = [{"role": "system", "content": "You are a patient tutor who explains painting."}]
    for i in range(n_messages // 2):
        msgs.append({"role": "user", "content": f"Question {i}: how should I mix colour number {i} "
                                                f"for the sky in the painting?"})
        msgs.append({"role": "assistant", "content": f"For colour {i}, start with white, add a little blue, "
                                                     f"and test it on a scrap of paper before the canvas."})
    return msgs


@contextmanager
def prefix_cache(enabled: bool):
    """Run the embedded model with its KV prefix cache on or off (off: every request starts empty)."""
    model = llm.get_local_model()
    before = model.prefix_cache
    model.prefix_cache = enabled
    model.clear_cache()
    try:
        yield
    finally:
        model.prefix_cache = before


def multi_turn(turns: int = 4) -> None:
    """Agent and user prompts alternating and growing, as in a simulation (greedy, fixed lengths)."""
    agent = [{"role": "system", "content": "You are a bookshop agent. Follow the policy. " * 30}]
    user = [{"role": "system", "content": "You are a customer who wants to buy a book. " * 30}]
    for turn in range(turns):
        said = chat_completion(agent + [{"role": "user", "content": f"Message {turn} from the customer."}],
                               GenerationRequest(max_tokens=24, temperature=0.0))
        agent += [{"role": "user", "content": f"Message {turn} from the customer."},
                  {"role": "assistant", "content": said.content or ""}]
        reply = chat_completion(user + [{"role": "user", "content": said.content or "…"}],
                                GenerationRequest(max_tokens=16, temperature=0.0))
        user += [{"role": "user", "content": said.content or "…"}, {"role": "assistant", "content": reply.content or ""}]


def bench_prefix_cache(repeats: int) -> None:
    with prefix_cache(False):
        off_s, _ = best_of(repeats, multi_turn)
    with prefix_cache(True):
        on_s, _ = best_of(repeats, multi_turn)
    print(f"multi-turn agent/user, 8 calls   prefix cache off {off_s:6.2f} s   on {on_s:6.2f} s   "
          f"ratio {off_s / on_s:5.2f}x", flush=True)


def bench_trajectory(repeats: int) -> None:
    msgs = conversation(20)
    one_s, rows = best_of(repeats, lambda: llm.score_trajectory(msgs))
    per_s, _ = best_of(repeats, lambda: [llm.score(msgs[:i], msgs[i]) for i in range(1, len(msgs))])
    print(f"score_trajectory, 20 msgs    one pass {one_s:6.2f} s   per message {per_s:6.2f} s   "
          f"ratio {per_s / one_s:5.2f}x   ({len(rows)} scored tok, {len(rows) / one_s:.1f} tok/s one-pass)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=128, help="tokens to generate per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (fastest is kept)")
    args = parser.parse_args()
    llm.generate(PROMPT, max_tokens=4)  # load the model outside the timings
    print(f"cpus {os.cpu_count()}   load average {os.getloadavg()[0]:.2f} (before)", flush=True)
    with prefix_cache(False):
        bench_generation(args.tokens, args.repeats)
        bench_scoring(args.repeats)
        bench_trajectory(args.repeats)
    bench_prefix_cache(args.repeats)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak_mb:.0f} MB   load average {os.getloadavg()[0]:.2f} (after)")


if __name__ == "__main__":
    main()
