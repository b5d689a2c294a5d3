"""Peak memory and wall time of ``agentuq-nb train-detector`` on N tiny trajectories (issue 51 point 6), beside the
figures measured before the memory cuts (:data:`BEFORE`, main at dc359e2).

Tiny trajectories: four messages each (the user's request, a tool call, its result, the agent's answer), 50 tasks,
no log-probs, one results file (retail); every third order is lost (reward 0) and the answer says so. ``train-detector`` runs with its
defaults (text, black-box, embeddings, length; the static MiniLM table; every protocol; 1000 bootstrap resamples;
its selection workers) in a fresh process tree, its memory sampled every 0.1 s with psutil: the peak of the tree's
summed PSS (each page shared by the forked workers counted once: the machine's real use), and of its summed RSS (an
upper bound). :data:`BEFORE` was the one process's peak RSS (it had no worker processes then).

    python benchmarks/bench_train_memory.py [--n 10000] [--n 100000 ...] [--keep DIR] [--nice 10]

On a shared machine the wall times depend on the load (printed beside them); the peak RSS does not.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

#: train-detector with the default groups on these tiny files at main dc359e2 (before the memory cuts): trajectories →
#: (peak RSS in GB, wall seconds, under the load of eight engineers' tests); 10⁵ was not run (≈12 GB by extrapolation)
BEFORE = {10_000: (1.55, 162.0), 30_000: (3.82, 626.0)}
TASKS = 50


def tiny_results(path: Path, n: int) -> Path:
    """``path``: a τ²-bench results file of ``n`` tiny trajectories (module docstring), written one simulation at a
    time (the same file as the one :data:`BEFORE` was measured on)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fh.write('{"timestamp": "2026", "info": {"environment_info": {"domain_name": "retail"}}, "tasks": [], '
                 '"simulations": [')
        for i in range(n):
            lost = i % 3 == 0
            messages = [
                {"role": "user", "content": f"Hello, I need help with order {i}."},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": f"c{i}", "name": "get_order", "arguments": {"order_id": str(i)}}]},
                {"role": "tool", "id": f"c{i}",
                 "content": json.dumps({"order_id": str(i), "status": "lost" if lost else "shipped"})},
                {"role": "assistant", "content": "I am sorry, the order is lost." if lost else "Your order has shipped."}]
            sim = {"id": f"s{i}", "task_id": str(i % TASKS), "trial": i // TASKS, "seed": i, "messages": messages,
                   "reward_info": {"reward": float(not lost)}, "termination_reason": "user_stop"}
            fh.write((", " if i else "") + json.dumps(sim))
        fh.write("]}")
    return path


def tree_memory(process: psutil.Process) -> tuple[int, int]:
    """(Σ RSS, Σ PSS) in bytes of ``process`` and its descendants now (train-detector's selection workers are forked
    processes: the peak of any one process would leave the others out; RSS counts the pages they share once in each,
    PSS divides each shared page among its sharers - the machine's real use)."""
    rss = pss = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        rss, pss = rss + info.rss, pss + getattr(info, "pss", info.rss)
    return rss, pss


def measure(results: Path, out: Path, nice: int) -> tuple[float, float, float]:
    """(peak Σ PSS in GB, peak Σ RSS in GB, wall seconds) of ``agentuq-nb train-detector results --out out`` and its
    worker processes, sampled every 0.1 s in a fresh process tree. (psutil, not ``/usr/bin/time -v``: its maximum
    resident set size is that of the largest single process.)"""
    command = [shutil.which("agentuq-nb") or "agentuq-nb", "train-detector", str(results), "--out", str(out)]
    prefix = ["nice", "-n", str(nice)] if nice else []
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(prefix + command, stdout=subprocess.DEVNULL, stderr=err, text=True)
        process, peak_rss, peak_pss = psutil.Process(child.pid), 0, 0
        while child.poll() is None:
            rss, pss = tree_memory(process)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.1)
        wall = time.perf_counter() - start
        if child.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"train-detector failed:\n{err.read()[-3000:]}")
    return peak_pss / 1e9, peak_rss / 1e9, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, action="append", help="tiny trajectories (repeat; default 10000)")
    parser.add_argument("--keep", type=Path, help="write the results files and detectors here (kept)")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the measured process (default 10)")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_train_memory_"))
    print(f"{'trajectories':>12}  {'peak ΣPSS':>9}  {'(ΣRSS)':>9}  {'before':>8}  {'ratio':>6}  {'wall':>8}  "
          f"{'before':>8}  load")
    for n in args.n or [10_000]:
        results = folder / f"tiny_{n}" / "results.json"
        if not results.exists():
            tiny_results(results, n)
        out = folder / f"detector_{n}"
        if out.exists():
            shutil.rmtree(out)
        peak, peak_rss, wall = measure(results, out, args.nice)
        before = BEFORE.get(n)
        ratio = f"{peak / before[0]:.2f}×" if before else "—"
        print(f"{n:>12,}  {peak:>7.2f} GB  {peak_rss:>6.2f} GB  {f'{before[0]:.2f} GB' if before else '—':>8}  {ratio:>6}  "
              f"{wall:>7.0f} s  {f'{before[1]:.0f} s' if before else '—':>8}  {os.getloadavg()[0]:.1f}", flush=True)
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
