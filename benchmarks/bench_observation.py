"""Scored tokens/s: one-pass ``llm.score_trajectory`` vs scoring each message separately.

On a real τ²-bench trajectory (../shared/data/tau2), under the agent_llm scorer prompt
(instructions + the airline policy), with the embedded model. Both ways give the same rows
(checked here to 1e-3 nats); one pass evaluates the conversation once instead of once per message.
Per-message scoring is timed twice: from an empty cache for every request (the plain way), and
with the embedded model's KV prefix cache (each request then re-decodes only its new message).

``--trajectories N``: seconds per whole trajectory for the first N trajectories of the file (8 by
default covers the gpt-4.1 airline file's one trajectory longer than the 8192-token window),
one-pass scoring as ``rescore`` runs it, BEFORE (our former sliding window, copied below as
``former_score_segments``: every window of W = n_ctx - system tokens decoded afresh) and AFTER
(``llm.local_scoring``: context shift, every token decoded once), in one process, each over the
same trajectories in the same order from an empty cache. Rows must be identical where a
trajectory fits the window; for longer ones the benchmark reports how the log-probs moved.
The machine's load average (``os.getloadavg``) is printed with the figures.

    python benchmarks/bench_observation.py [--messages 12] [--simulation 0] [--trajectories [N]]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from agentuq_nb import llm
from agentuq_nb.llm.chat_format import SMOLLM2_CHAT, Segment, normalize_message
from agentuq_nb.llm.local_model import LocalModel, Session, TokenStats
from agentuq_nb.llm.local_provider import TokenLogprob, stats_to_logprobs
from agentuq_nb.llm.local_scoring import ScoredConversation, score_segments
from agentuq_nb.records import Simulation
from agentuq_nb.uq.observation import agent_system_prompt, conversation

TAU2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau2" / "gpt-4.1_airline_1trial.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=TAU2)
    parser.add_argument("--simulation", type=int, default=0)
    parser.add_argument("--messages", type=int, default=12, help="first N messages of the trajectory")
    parser.add_argument("--trajectories", type=int, nargs="?", const=8, default=None,
                        help="also time whole trajectories, before/after (first N, default 8)")
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    print(f"load average at start: {load()}")
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


    if args.trajectories:
        print()
        per_trajectory(data, system, args.trajectories)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def per_trajectory(data: dict, system: str, n: int) -> None:
    """Seconds per trajectory (one-pass scoring), the former sliding window vs the current one."""
    model = llm.get_local_model()
    model.prefix_cache = True  # as rescore runs: the system prompt stays cached between trajectories
    sims = [Simulation.model_validate(s) for s in data["simulations"][:n]]
    segments = [SMOLLM2_CHAT.render([normalize_message(m) for m in conversation(sim)], system=system)
                for sim in sims]
    runs = {}
    for label, score in (("before", former_score_segments), ("after", score_segments)):
        model.clear_cache()
        runs[label] = []
        for segs in segments:
            start = time.perf_counter()
            scored = score(segs, model=model)
            runs[label].append((time.perf_counter() - start, scored))
        print(f"{label} done, load average {load()}", flush=True)
    print(f"{'sim':>4} {'tokens':>7} {'cuts b/a':>8} {'before s':>9} {'after s':>8} {'ratio':>6}  rows")
    moved = []
    for sim, (t_b, old), (t_a, new) in zip(sims, runs["before"], runs["after"]):
        a = np.array([t.logprob for i in sorted(old.tokens) for t in old.tokens[i]])
        b = np.array([t.logprob for i in sorted(new.tokens) for t in new.tokens[i]])
        assert a.shape == b.shape, "both policies score every token once"
        if old.truncations == 0:
            assert np.array_equal(a, b), f"simulation {sim.id}: fits the window, rows must be identical"
            rows = "identical"
        else:
            diff = np.abs(a - b)
            moved.append(diff)
            changed = diff > 0
            rows = (f"{changed.sum()} of {len(diff)} moved: mean |diff| {diff.mean():.4f} nats "
                    f"(over moved {diff[changed].mean():.4f}), max {diff.max():.3f}")
        print(f"{sim.id if len(str(sim.id)) < 5 else str(sim.id)[:4]:>4} {old.n_tokens:>7} "
              f"{old.truncations:>3}/{new.truncations:<4} {t_b:9.1f} {t_a:8.1f} {t_b / t_a:6.2f}  {rows}")
    med_b = statistics.median(t for t, _ in runs["before"])
    med_a = statistics.median(t for t, _ in runs["after"])
    tot_b, tot_a = (sum(t for t, _ in runs[k]) for k in ("before", "after"))
    print(f"median s/trajectory: before {med_b:.1f}, after {med_a:.1f} (ratio {med_b / med_a:.2f}); "
          f"total {tot_b:.0f} s vs {tot_a:.0f} s (ratio {tot_b / tot_a:.2f}); load average {load()}")


# ---- our own former code (agentuq_nb.llm.local_scoring before issue 16), kept as the baseline

def former_score_segments(segments: list[Segment], top_logprobs: int = 5, model: LocalModel | None = None,
                          score_messages: set[int] | None = None) -> ScoredConversation:
    model = model or llm.get_local_model()
    ids: list[int] = []
    owner: list[int] = []
    n_pinned = 0
    for seg in segments:
        seg_ids = model.tokenize(seg.text, special=seg.special)
        ids.extend(seg_ids)
        scored = seg.message_idx is not None and (score_messages is None or seg.message_idx in score_messages)
        owner.extend([seg.message_idx if scored else -1] * len(seg_ids))
        if seg.pinned:
            n_pinned = len(ids)
    owner_arr = np.asarray(owner, dtype=np.int64)
    targets = np.flatnonzero(owner_arr >= 0)
    with model.session() as session:
        stats, truncations = former_score_windows(session, ids, targets, n_pinned, top_logprobs)
    per_message: dict[int, list[TokenLogprob]] = {}
    for pos, lp in zip(targets, stats_to_logprobs(model, [ids[t] for t in targets], stats)):
        per_message.setdefault(int(owner_arr[pos]), []).append(lp)
    return ScoredConversation(per_message, truncations, len(ids))


def former_score_windows(session: Session, ids: list[int], targets: np.ndarray, n_pinned: int,
                         k: int) -> tuple[TokenStats, int]:
    """Windows of W = n_ctx - n_pinned body tokens after the pinned system prompt, advancing by W/2,
    each decoded afresh."""
    n_ctx = session.model.n_ctx
    if len(ids) <= n_ctx:
        return session.score(ids, targets, k), 0
    width = n_ctx - n_pinned
    body = ids[n_pinned:]
    body_targets = targets - n_pinned
    if n_pinned:
        session.feed(ids[:n_pinned])
    parts, lo, hi, windows = [], 0, min(width, len(body)), 0
    while True:
        start = max(0, hi - width)
        window_targets = body_targets[(body_targets >= lo) & (body_targets < hi)] - start
        session.truncate(n_pinned)
        parts.append(session.score(body[start:hi], window_targets, k))
        windows += 1
        if hi == len(body):
            return TokenStats.concat(parts, k), windows - 1
        lo, hi = hi, min(hi + width // 2, len(body))


if __name__ == "__main__":
    main()
