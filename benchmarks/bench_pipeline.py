"""Benchmark extract → aggregate → evaluate against a plain per-row Python implementation.

For each size (token rows) it writes synthetic agentuq-style results with one sidecar JSONL per
trajectory, then runs, each in a fresh subprocess so peak memory (max RSS) is its own:

* ours:  ``uq.extract.extract`` + ``uq.aggregation.aggregate`` + ``pipeline.evaluate_run.evaluate``
* plain: what the reference scripts do — ``json.loads`` every sidecar line, dict loops for the
  per-token entropy and the per-turn / per-trajectory sums, then AUROC.

and prints rows/s, peak memory and the ratio. Usage::

    python benchmarks/bench_pipeline.py                      # 1e5, 1e6, 1e7 rows
    python benchmarks/bench_pipeline.py --sizes 100000 --workdir /tmp/bench
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENS_PER_MESSAGE = 50
MESSAGES_PER_SIMULATION = 41  # 30 generated messages (assistant/user) per trajectory → 1,500 token rows

OURS = """
import sys
from agentuq_nb.uq.extract import extract
from agentuq_nb.uq.aggregation import aggregate
from agentuq_nb.pipeline.evaluate_run import evaluate
results, run_dir = sys.argv[1], sys.argv[2]
extract(results, run_dir)
aggregate(run_dir)
evaluate(run_dir, n_boot=200)
"""

PLAIN = """
import json, math, sys
from collections import defaultdict
from pathlib import Path
from sklearn.metrics import roc_auc_score
results_path = Path(sys.argv[1])
data = json.loads(results_path.read_text())
turn = defaultdict(lambda: {"n": 0, "nll": 0.0, "ent": 0.0, "min_p": 1.0})
traj = defaultdict(lambda: {"n": 0, "nll": 0.0, "ent": 0.0, "min_p": 1.0})
rewards = {}
for sim in data["simulations"]:
    key = (sim["task_id"], sim["trial"], sim["seed"])
    rewards[key] = sim["reward_info"]["reward"]
    turn_of = {m["timestamp"]: m.get("turn_idx", i) for i, m in enumerate(sim["messages"])}
    paths = {m["raw_data"]["uq_logprobs"]["path"] for m in sim["messages"] if (m.get("raw_data") or {}).get("uq_logprobs")}
    for rel in sorted(paths):
        with open(results_path.parent / rel) as fh:
            for line in fh:
                row = json.loads(line)
                ps = [math.exp(lp) for lp in row["topk_logprobs"]]
                mass = sum(ps)
                ent = -sum(p / mass * math.log(max(p / mass, 1e-12)) for p in ps)
                nll = -row["chosen_logprob"]
                for acc in (turn[key + (row["role"], turn_of[row["message_timestamp"]])], traj[key + (row["role"],)]):
                    acc["n"] += 1; acc["nll"] += nll; acc["ent"] += ent
                    acc["min_p"] = min(acc["min_p"], math.exp(row["chosen_logprob"]))
keys = sorted(rewards)
u = [traj[k + ("assistant",)]["nll"] / traj[k + ("assistant",)]["n"] for k in keys]
print(roc_auc_score([rewards[k] < 1.0 for k in keys], u))
"""


REPORT_PEAK = "\nimport resource, sys\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"


def run_measured(code: str, *args: str) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``python -c code args`` in a fresh process."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code + REPORT_PEAK, *args], check=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    return elapsed, int(done.stderr.strip().splitlines()[-1]) / 1024  # ru_maxrss is KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--skip-plain-above", type=int, default=None, help="don't run the plain version above this size")
    args = parser.parse_args()
    from agentuq_nb.io.synthetic import write_synthetic_results

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    rows_per_sim = (MESSAGES_PER_SIMULATION - 1) * 3 // 4 * TOKENS_PER_MESSAGE
    print(f"{'rows':>10} {'files':>6} | {'ours rows/s':>12} {'peak MiB':>9} | {'plain rows/s':>12} {'peak MiB':>9} | ratio")
    for size in sorted(args.sizes):
        n_sims = max(1, size // rows_per_sim)
        src = workdir / f"results_{size}"
        if not (src / "results.json").exists():
            write_synthetic_results(src, num_simulations=n_sims, messages_per_simulation=MESSAGES_PER_SIMULATION,
                                    tokens_per_message=TOKENS_PER_MESSAGE, forms=("sidecar",), seed=size)
        rows = n_sims * rows_per_sim
        run_dir = workdir / f"run_{size}"
        shutil.rmtree(run_dir, ignore_errors=True)
        t_ours, m_ours = run_measured(OURS, str(src / "results.json"), str(run_dir))
        line = f"{rows:>10,} {n_sims:>6} | {rows / t_ours:>12,.0f} {m_ours:>9,.0f} |"
        if args.skip_plain_above is None or size <= args.skip_plain_above:
            t_plain, m_plain = run_measured(PLAIN, str(src / "results.json"))
            line += f" {rows / t_plain:>12,.0f} {m_plain:>9,.0f} | {t_plain / t_ours:5.1f}x"
        else:
            line += f" {'skipped':>12} {'':>9} |"
        print(line, flush=True)
    print(f"(data in {workdir})")


if __name__ == "__main__":
    main()
