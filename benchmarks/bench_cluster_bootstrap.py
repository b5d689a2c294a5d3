"""The task-clustered bootstrap against the trajectory bootstrap and a per-resample loop.

Prints, for n tasks × trials (equal and unequal trial counts), the seconds of
``failure_metrics`` with ``groups`` (tasks resampled), without (trajectories resampled) and of a
plain loop over the same cluster resamples calling ``point_metrics`` on each, and the ratios.

    PYTHONPATH=src .venv/bin/python benchmarks/bench_cluster_bootstrap.py [--n-boot 1000]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from agentuq_nb.evaluation.bootstrap import cluster_codes, cluster_count_chunks
from agentuq_nb.evaluation.failure_report import failure_metrics
from agentuq_nb.evaluation.metrics import METRICS, point_metrics
from agentuq_nb.records.outcomes import Outcomes


def data(n_tasks: int, trials, seed: int = 0):
    rng = np.random.default_rng(seed)
    sizes = np.full(n_tasks, trials) if np.isscalar(trials) else rng.integers(trials[0], trials[1] + 1, n_tasks)
    tasks = np.repeat(np.arange(n_tasks), sizes)
    r = (rng.uniform(size=tasks.size) < rng.uniform(size=n_tasks)[tasks]).astype(float)
    u = rng.normal(size=tasks.size) + (r < 1)
    return u, r, tasks


def loop_reference(u, r, tasks, n_boot, seed):
    """One point_metrics call per resample on the explicitly expanded rows (what the batch replaces)."""
    codes = cluster_codes(tasks, len(u))
    for counts in cluster_count_chunks(codes, n_boot, seed):
        for row in counts:
            rows = np.repeat(np.arange(len(u)), row)
            point_metrics(u[rows], Outcomes.of(r[rows], 1.0), METRICS)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n-boot", type=int, default=1000)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; n_boot {args.n_boot}")
    print(f"{'tasks':>6} {'trials':>7} {'rows':>6} {'clustered s':>12} {'trajectory s':>13} {'loop s':>8} "
          f"{'clust/traj':>10} {'loop/clust':>10}")
    for n_tasks, trials in ((30, 3), (100, 3), (100, (2, 4)), (300, (1, 5))):
        u, r, tasks = data(n_tasks, trials)
        t_cluster = timed(lambda: failure_metrics(u, r, n_boot=args.n_boot, groups=tasks))
        t_traj = timed(lambda: failure_metrics(u, r, n_boot=args.n_boot))
        t_loop = timed(lambda: loop_reference(u, r, tasks, args.n_boot, 0))
        print(f"{n_tasks:>6} {str(trials):>7} {len(u):>6} {t_cluster:12.3f} {t_traj:13.3f} {t_loop:8.2f} "
              f"{t_cluster / t_traj:10.2f} {t_loop / t_cluster:10.1f}")


if __name__ == "__main__":
    main()
