"""Benchmark extract → aggregate → evaluate against the plain per-row Python approach.

For each size (token rows) it writes synthetic agentuq-style results with one sidecar JSONL per
trajectory (rows with every key agentuq writes), then runs, each in a fresh subprocess so that
peak memory (max RSS) and imports are its own:

* ours:  ``uq.extract`` + ``uq.aggregate`` + ``evaluation.evaluate``
  (all seven metrics with 200 bootstrap resamples for the CIs)
* plain: ``plain_pipeline.py full`` — the same outputs (token table with per-token metrics, turn
  and trajectory summaries, AUROC) the way the reference scripts compute them: ``json.loads``
  per line, ``math`` per token, dict loops, ``json.dumps`` per token row
* plain, summaries only: ``plain_pipeline.py summaries`` — AgentUQ's analysis loop alone, no
  token table or summaries written: a lower bound on any per-row Python pipeline

and prints rows/s, peak memory and the ratios. Usage::

    python benchmarks/bench_pipeline.py                      # 1e5, 1e6, 1e7 rows
    python benchmarks/bench_pipeline.py --sizes 100000 --workdir /tmp/bench
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENS_PER_MESSAGE = 50
MESSAGES_PER_SIMULATION = 41  # 30 generated messages (assistant/user) per trajectory → 1,500 token rows
PLAIN = Path(__file__).with_name("plain_pipeline.py")

OURS = """
import sys
from agentuq_nb.uq.extraction import extract
from agentuq_nb.uq.aggregation import aggregate
from agentuq_nb.evaluation import evaluate
results, run_dir = sys.argv[1], sys.argv[2]
extract(results, run_dir)
aggregate(run_dir)
evaluate(run_dir, n_boot=200)
"""
PLAIN_RUN = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


REPORT_PEAK = "\nimport resource, sys\nprint(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"


def warm_page_cache(folder: Path) -> None:
    """Read every input file once, so that each timed run starts with its input in the page cache
    (otherwise whichever runs first pays the disk reads for the others)."""
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass


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
    parser.add_argument("--skip-plain-above", type=int, default=None, help="don't run the plain versions above this size")
    args = parser.parse_args()
    from agentuq_nb.io.synthetic import write_synthetic_results

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    rows_per_sim = (MESSAGES_PER_SIMULATION - 1) * 3 // 4 * TOKENS_PER_MESSAGE
    print(f"{'rows':>10} {'files':>6} | {'ours rows/s':>11} {'MiB':>5} | {'plain rows/s':>12} {'MiB':>5} {'ratio':>6} "
          f"| {'summaries-only rows/s':>21} {'MiB':>5} {'ratio':>6}")
    for size in sorted(args.sizes):
        n_sims = max(1, size // rows_per_sim)
        src = workdir / f"results_{size}"
        if not (src / "results.json").exists():
            write_synthetic_results(src, num_simulations=n_sims, messages_per_simulation=MESSAGES_PER_SIMULATION,
                                    tokens_per_message=TOKENS_PER_MESSAGE, forms=("sidecar",), seed=size)
        rows = n_sims * rows_per_sim
        run_dir, plain_dir = workdir / f"run_{size}", workdir / f"plain_{size}"
        shutil.rmtree(run_dir, ignore_errors=True)
        warm_page_cache(src)
        t_ours, m_ours = run_measured(OURS, str(src / "results.json"), str(run_dir))
        line = f"{rows:>10,} {n_sims:>6} | {rows / t_ours:>11,.0f} {m_ours:>5,.0f} |"
        if args.skip_plain_above is None or size <= args.skip_plain_above:
            for mode, width in (("full", 12), ("summaries", 21)):
                warm_page_cache(src)
                t_plain, m_plain = run_measured(PLAIN_RUN, str(PLAIN), mode, str(src / "results.json"), str(plain_dir))
                shutil.rmtree(plain_dir, ignore_errors=True)
                line += f" {rows / t_plain:>{width},.0f} {m_plain:>5,.0f} {t_plain / t_ours:>5.1f}x |"
        else:
            line += " skipped"
        print(line, flush=True)
    print(f"(data in {workdir})")


if __name__ == "__main__":
    main()
