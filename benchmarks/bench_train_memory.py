"""Peak memory and wall time of ``agentuq-nb train-detector`` on N tiny trajectories (issue 51 point 6), beside the
figures measured before the memory cuts (:data:`BEFORE`, main at dc359e2).

Tiny trajectories: four messages each (the user's request, a tool call, its result, the agent's answer), 50 tasks,
no log-probs, one results file (retail); every third order is lost (reward 0) and the answer says so. ``train-detector`` runs with its
defaults (text, black-box, embeddings, length; the static MiniLM table; every protocol; 1000 bootstrap resamples) in a
fresh process, under ``/usr/bin/time -v`` when it exists (its "Maximum resident set size": the process's peak RSS),
else the process's own VmHWM.

    python benchmarks/bench_train_memory.py [--n 10000] [--n 100000 ...] [--keep DIR] [--nice 10]

On a shared machine the wall times depend on the load (printed beside them); the peak RSS does not.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

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


def measure(results: Path, out: Path, nice: int) -> tuple[float, float]:
    """(peak RSS in GB, wall seconds) of ``agentuq-nb train-detector results --out out`` in a fresh process."""
    command = [shutil.which("agentuq-nb") or "agentuq-nb", "train-detector", str(results), "--out", str(out)]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    prefix = (["nice", "-n", str(nice)] if nice else []) + ([timer, "-v"] if timer else [])
    start = time.perf_counter()
    done = subprocess.run(prefix + command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"train-detector failed:\n{done.stderr[-3000:]}")
    found = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if found is None:
        raise RuntimeError("no peak RSS in /usr/bin/time's report")
    return int(found.group(1)) / 1e6, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, action="append", help="tiny trajectories (repeat; default 10000)")
    parser.add_argument("--keep", type=Path, help="write the results files and detectors here (kept)")
    parser.add_argument("--nice", type=int, default=10, help="niceness of the measured process (default 10)")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench_train_memory_"))
    print(f"{'trajectories':>12}  {'peak RSS':>9}  {'before':>8}  {'ratio':>6}  {'wall':>8}  {'before':>8}  load")
    for n in args.n or [10_000]:
        results = folder / f"tiny_{n}" / "results.json"
        if not results.exists():
            tiny_results(results, n)
        out = folder / f"detector_{n}"
        if out.exists():
            shutil.rmtree(out)
        peak, wall = measure(results, out, args.nice)
        before = BEFORE.get(n)
        ratio = f"{peak / before[0]:.2f}×" if before else "—"
        print(f"{n:>12,}  {peak:>7.2f} GB  {f'{before[0]:.2f} GB' if before else '—':>8}  {ratio:>6}  "
              f"{wall:>7.0f} s  {f'{before[1]:.0f} s' if before else '—':>8}  {os.getloadavg()[0]:.1f}", flush=True)
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
