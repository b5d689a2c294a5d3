"""CPU seconds of starting the package: what every process a user or the test suite starts pays before it works.

Each entry point below runs in a fresh process, ``--repeat`` times (median CPU seconds, user + system, and wall),
and says which of the heavy packages (scikit-learn, SciPy, statsmodels, matplotlib, litellm, torch, Dask) it
imported. With ``--before SRC`` the same entry points also run from another checkout's sources (``PYTHONPATH=SRC``,
e.g. main before the imports were made lazy), interleaved with this one's, so both are measured under the same load;
the ratio is after / before. The machine is shared: the load average is printed.

The entry points: the command line (``import agentuq_nb.cli``, what ``python -m agentuq_nb.cli`` and a kernel or test
importing a step pay), ``agentuq-nb --help``, a command that reads a run folder without fitting anything (``agentuq-nb
estimators --help``), the simulator, the LLM server as ``agentuq-nb serve-local`` starts it (the command line, then
the server) and a Dask worker's plugin.

    python benchmarks/bench_import.py [--before SRC] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
HEAVY = ("sklearn", "scipy", "statsmodels", "matplotlib", "litellm", "torch", "distributed")
REPORT = ("import json, sys; print(json.dumps([m for m in " + repr(HEAVY) + " if m in sys.modules]), file=sys.stderr)")
ENTRY_POINTS = {
    "import agentuq_nb.cli": "import agentuq_nb.cli",
    "agentuq-nb --help": "from agentuq_nb.cli import app\ntry:\n    app(['--help'])\nexcept SystemExit:\n    pass",
    "agentuq-nb estimators --help": "from agentuq_nb.cli import app\ntry:\n    app(['estimators', '--help'])\n"
                                    "except SystemExit:\n    pass",
    "import agentuq_nb.sim.runner": "import agentuq_nb.sim.runner",
    "agentuq-nb serve-local (its imports)": "import agentuq_nb.cli, agentuq_nb.llm.server",
    "import agentuq_nb.distributed.plugin": "import agentuq_nb.distributed.plugin",
}


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(code: str, src: Path) -> tuple[float, float, list[str]]:
    """(CPU s, wall s, the heavy packages imported) of ``code`` in a fresh process with ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    cpu0, start = children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", f"{code}\n{REPORT}"], env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu0
    if done.returncode != 0:
        raise SystemExit(f"{code!r} failed from {src}:\n{done.stderr[-2000:]}")
    return cpu, wall, json.loads(done.stderr.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="another checkout's src/ to compare with")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sources = {"after": SRC, **({"before": args.before} if args.before else {})}
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}; "
          f"{args.repeat} fresh processes each; CPU = user + system seconds (median)")
    for name, code in ENTRY_POINTS.items():
        runs: dict[str, list[tuple[float, float, list[str]]]] = {label: [] for label in sources}
        for _ in range(args.repeat):
            for label, src in sources.items():
                runs[label].append(one(code, src))
        cells = []
        for label, rows in runs.items():
            cpu, wall = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
            cells.append(f"{label} {cpu:5.2f} CPU-s {wall:5.2f} s wall [{', '.join(rows[-1][2]) or '-'}]")
        if args.before:
            after = statistics.median(r[0] for r in runs["after"])
            before = statistics.median(r[0] for r in runs["before"])
            cells.append(f"after/before {after / before:.2f} ({before - after:+.2f} CPU-s saved)")
        print(f"{name:38s} " + "; ".join(cells))


if __name__ == "__main__":
    main()
