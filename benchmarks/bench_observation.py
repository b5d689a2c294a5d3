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

``--shared-prefix N``: seconds per trajectory for the first N trajectories of each of ``--files`` (gpt-4.1
airline, fine-tuned gpt-4.1 telecom and retail by default), scored as ``rescore`` scores them, FROM SCRATCH
(a model whose cache is cleared at every request) and WITH THE SHARED PREFIX (a model that keeps its cache, so
that each trajectory takes the domain's system prompt out of the slot that holds it, ``llm.local_model``), two
models in one process, alternating trajectory by trajectory (and which goes first) so that both see the
same load. Per file: tokens
decoded and taken from the cache, their share, the shared prompt against the median trajectory of the file
(the share bounds the ratio: the rest of each trajectory is decoded either way), the ratio of the totals and
after the first trajectory (which pays for the prompt), and the largest |difference| of the log-probs (must be
<= 1e-4). It also counts the scored tokens a trajectory shares with an earlier one of the file beyond the system
prompt (identical openings): they are decoded again, because their rows need the logits there.

    python benchmarks/bench_observation.py [--messages 12] [--simulation 0] [--trajectories [N]]
    python benchmarks/bench_observation.py --shared-prefix 3 [--files A.json B.json]
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

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TAU2 = SHARED / "tau2" / "gpt-4.1_airline_1trial.json"
SHARED_PREFIX_FILES = [TAU2, SHARED / "real_runs" / "ft-gpt-4.1_telecom_1trial.json",
                       SHARED / "real_runs" / "ft-gpt-4.1_retail_1trial.json"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=TAU2)
    parser.add_argument("--simulation", type=int, default=0)
    parser.add_argument("--messages", type=int, default=12, help="first N messages of the trajectory")
    parser.add_argument("--trajectories", type=int, nargs="?", const=8, default=None,
                        help="also time whole trajectories, before/after (first N, default 8)")
    parser.add_argument("--shared-prefix", type=int, default=None, metavar="N",
                        help="only time the first N trajectories of each of --files from scratch vs with the shared prefix")
    parser.add_argument("--files", type=Path, nargs="+", default=SHARED_PREFIX_FILES)
    args = parser.parse_args()
    print(f"load average at start: {load()}")
    if args.shared_prefix:
        shared_prefix(args.files, args.shared_prefix)
        return
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


def shared_prefix(files: list[Path], n: int) -> None:
    """Per file: the first ``n`` trajectories from scratch and with the shared prefix, alternating (see the docstring)."""
    scratch, shared = LocalModel(prefix_cache=False), LocalModel(prefix_cache=True)
    warm_up = SMOLLM2_CHAT.render([{"role": "user", "content": "Where is my order? " * 40}], system="Be brief. " * 40)
    for model in (scratch, shared):  # each thread tuner measures both choices before the timings
        for _ in range(3):
            score_segments(warm_up, model=model)
    summary = []
    for path in files:
        data = json.loads(path.read_text())
        system = agent_system_prompt(data["info"])
        sims = [Simulation.model_validate(s) for s in data["simulations"]]
        rendered = [SMOLLM2_CHAT.render([normalize_message(m) for m in conversation(sim)], system=system)
                    for sim in sims]
        ids = [[t for seg in segs for t in shared.tokenize(seg.text, special=seg.special)] for segs in rendered]
        head = next(i for i, seg in enumerate(rendered[0]) if seg.message_idx is not None)
        prompt = sum(len(shared.tokenize(seg.text, special=seg.special)) for seg in rendered[0][:head])
        shared.clear_cache()
        print(f"\n{path.name}: {len(sims)} trajectories, median {statistics.median(map(len, ids)):.0f} tokens; "
              f"shared prompt {prompt} tokens (up to the first scored token); first {n} timed, load {load()}",
              flush=True)
        print(f"{'sim':>4} {'tokens':>7} {'scratch s':>10} {'shared s':>9} {'reused':>7} {'copied':>7} {'ratio':>6} "
              f"{'max |Δ|':>8}  scored tokens shared with an earlier trajectory", flush=True)
        # a trajectory past the window whose system prompt takes over half of it cannot be scored (rescore refuses
        # it: telecom's 5,910-token prompt); those are left out, and said so
        fits = [i for i in range(len(ids)) if len(ids[i]) <= shared.n_ctx or 2 * prompt <= shared.n_ctx][:n]
        if fits != list(range(len(fits))):
            print(f"  timed: trajectories {fits} (the others before them do not fit the window and have a system "
                  f"prompt over half of it)", flush=True)
        rendered, ids = [rendered[i] for i in fits], [ids[i] for i in fits]
        rows = []
        for i, segs in enumerate(rendered):
            timed = {}
            order = (("scratch", scratch), ("shared", shared))
            for label, model in order if i % 2 == 0 else order[::-1]:  # alternating, against a drifting load
                began = time.perf_counter()
                scored = score_segments(segs, model=model)
                timed[label] = (time.perf_counter() - began, scored)
            (t_s, a), (t_p, b) = timed["scratch"], timed["shared"]
            lp_a = np.array([t.logprob for j in sorted(a.tokens) for t in a.tokens[j]])
            lp_b = np.array([t.logprob for j in sorted(b.tokens) for t in b.tokens[j]])
            worst = float(np.max(np.abs(lp_a - lp_b))) if len(lp_a) else 0.0
            assert lp_a.shape == lp_b.shape and worst <= 1e-4, f"{path.name} trajectory {i}: log-probs moved {worst}"
            beyond = max((common_prefix_length(ids[i], ids[j]) for j in range(i)), default=prompt) - prompt
            rows.append((len(ids[i]), t_s, t_p, b.reuse, worst, len(lp_a)))
            print(f"{i:>4} {len(ids[i]):>7} {t_s:10.1f} {t_p:9.1f} {b.reuse.reused:>7} {b.reuse.copied:>7} "
                  f"{t_p / t_s:6.2f} {worst:8.1e}  {max(beyond, 0)}", flush=True)
        tokens = sum(r[0] for r in rows)
        reused = sum(r[3].reused for r in rows)
        t_scratch, t_shared = sum(r[1] for r in rows), sum(r[2] for r in rows)
        later = rows[1:] or rows
        ratio_later = sum(r[2] for r in later) / sum(r[1] for r in later)
        print(f"  s per trajectory: from scratch {t_scratch / len(rows):.1f}, shared prefix {t_shared / len(rows):.1f}; "
              f"ratio {t_shared / t_scratch:.2f} (after the first {ratio_later:.2f}); tokens {tokens:,}, reused "
              f"{reused:,} ({100 * reused / tokens:.1f} %); max |Δ| {max(r[4] for r in rows):.1e} over "
              f"{sum(r[5] for r in rows):,} scored tokens; load {load()}", flush=True)
        summary.append((path.name, t_scratch / len(rows), t_shared / len(rows), t_shared / t_scratch, ratio_later,
                        reused / tokens, prompt, statistics.median(map(len, ids))))
    print("\nfile | s/traj scratch | s/traj shared | ratio | after the first | share reused | prompt / median tokens")
    for name, a, b, r, r2, share, prompt, med in summary:
        print(f"{name} | {a:.1f} | {b:.1f} | {r:.2f} | {r2:.2f} | {100 * share:.1f} % | {prompt} / {med:.0f}")
    scratch.close()
    shared.close()


def common_prefix_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(differ[0]) if len(differ) else n


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
