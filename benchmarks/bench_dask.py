"""Dask scale-out: throughput in-process vs 1 vs 2 worker processes, and per-task overhead.

Throughput: short bookshop simulations on the embedded model (``run_simulations``, agent and
user), then teacher-forced rescoring of those trajectories (``rescore``), each in-process and
on a LocalCluster of 1 and of 2 worker processes (1 thread each). Every mode starts from an
empty run directory, and the cluster is up with each worker's model loaded before the clock
starts, so the numbers compare steady-state work. The cluster runs are checked to produce
the in-process results (up to wall-clock fields).

Overhead: a no-op task through the client (``submit`` + ``result`` one at a time: the
round-trip latency; ``map`` + ``gather`` of many: the amortized cost; ``fan_out``: the helper
the package uses) against calling the function directly.

    python benchmarks/bench_dask.py [--tasks 4] [--max-steps 4] [--noops 500]
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from agentuq_nb.distributed import connect, fan_out
from agentuq_nb.sim import load_domain, run_simulations
from agentuq_nb.sim.runner import without_wall_clock
from agentuq_nb.steps.rescore import rescore


def noop(x):
    return x


def warm_model() -> bool:
    from agentuq_nb import llm

    llm.get_local_model()
    return True


def timed(fn, *args, **kwargs) -> float:
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def throughput(tmp: Path, mode: str, scheduler, sim_params: dict) -> dict:
    out = tmp / mode
    sim_seconds = timed(run_simulations, "bookshop", out / "sim", scheduler=scheduler, **sim_params)
    start = time.perf_counter()
    report = rescore(out / "sim" / "results.json", out / "rescore", progress=False, scheduler=scheduler)
    return {"mode": mode, "simulate": sim_seconds, "rescore": time.perf_counter() - start,
            "tokens": report.num_tokens, "results": out / "sim" / "results.json"}


def overhead(client, n: int) -> dict[str, float]:
    start = time.perf_counter()
    for i in range(n):
        noop(i)
    direct = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for i in range(n):
        client.submit(noop, i, pure=False).result()
    round_trip = (time.perf_counter() - start) / n
    start = time.perf_counter()
    client.gather(client.map(noop, range(n), pure=False))
    mapped = (time.perf_counter() - start) / n
    start = time.perf_counter()
    fan_out(client, noop, ((i, i) for i in range(n)), lambda key, value: None, label="noop")
    fanned = (time.perf_counter() - start) / n
    return {"direct": direct, "round_trip": round_trip, "map_gather": mapped, "fan_out": fanned}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=4, help="first N bookshop tasks")
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--noops", type=int, default=500, help="no-op tasks for the overhead measurement")
    args = parser.parse_args()
    task_ids = [str(t["id"]) for t in load_domain("bookshop").tasks[: args.tasks]]
    sim_params = dict(task_ids=task_ids, max_steps=args.max_steps, max_errors=3, agent_max_tokens=32,
                      user_max_tokens=24, progress=False)

    from distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        warm_model()
        rows = [throughput(tmp, "in-process", None, sim_params)]
        per_task = None
        for n_workers in (1, 2):
            with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                              dashboard_address=":0") as cluster, Client(cluster) as client:
                with connect(client):  # the worker setup first: it sets the model's thread count
                    client.run(warm_model)
                rows.append(throughput(tmp, f"dask {n_workers} worker{'s' * (n_workers > 1)}", client, sim_params))
                if n_workers == 2:
                    per_task = overhead(client, args.noops)
        reference = without_wall_clock(json.loads(rows[0]["results"].read_text()))
        same = all(without_wall_clock(json.loads(r["results"].read_text())) == reference for r in rows[1:])

    n = len(task_ids)
    print(f"{n} bookshop simulations (max_steps {args.max_steps}) and their rescoring, embedded model; "
          f"cluster results identical to in-process: {same}")
    print(f"{'mode':<16} {'simulate s':>10} {'sims/s':>7} {'x in-proc':>9} {'x 1 worker':>10} "
          f"{'rescore s':>10} {'tok/s':>7} {'x in-proc':>9} {'x 1 worker':>10}")
    for r in rows:
        print(f"{r['mode']:<16} {r['simulate']:10.1f} {n / r['simulate']:7.3f} {rows[0]['simulate'] / r['simulate']:8.2f}x "
              f"{rows[1]['simulate'] / r['simulate']:9.2f}x {r['rescore']:10.1f} {r['tokens'] / r['rescore']:7.1f} "
              f"{rows[0]['rescore'] / r['rescore']:8.2f}x {rows[1]['rescore'] / r['rescore']:9.2f}x")
    print(f"\nper-task overhead over {args.noops} no-op tasks on 2 workers (direct call {per_task['direct'] * 1e6:.2f} µs):")
    for name in ("round_trip", "map_gather", "fan_out"):
        print(f"  {name:<11} {per_task[name] * 1e3:8.2f} ms/task  ({per_task[name] / per_task['direct']:,.0f}x a direct call)")
    one_sim = rows[0]["simulate"] / n
    print(f"  one simulation here takes {one_sim:.1f} s in-process: fan_out adds {per_task['fan_out'] / one_sim:.3%} to it")


if __name__ == "__main__":
    main()
