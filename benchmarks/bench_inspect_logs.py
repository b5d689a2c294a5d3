"""Reading an Inspect AI ``.eval`` log: the toolkit's one pass vs inspect-ai's own sample reader, by number of samples.

Prints, for logs of N samples (2 epochs each; written by inspect-ai's ``write_eval_log``), the wall time and peak
memory of

1. ``agentuq_nb.io.ingest.results.iter_simulations`` - the archive's directory read once, each sample validated by
   inspect-ai's model and converted to a trajectory (what ``extract`` reads);
2. ``inspect_ai.log.read_eval_log_samples(..., resolve_attachments=True)`` - inspect-ai's own generator, which opens
   the archive and reads its directory again for every sample (what the toolkit called before issue 41: the
   comparison against the peer's code on the same file);

and their ratio. Each runs in a child process of its own (peak RSS is the child's), in the Inspect reader venv
(``tests/overlay_venv.py``; built on first use). Quadratic growth shows as the ratio growing with N. The load
average is printed beside each figure: the machine has 2 cores and other processes share them.

    python benchmarks/bench_inspect_logs.py [--samples 500 1000 2000 4000]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.overlay_venv import with_src_path  # noqa: E402
from tests.test_inspect_logs import MAKE_LOG, reader_venv  # noqa: E402

READ = """
import json, resource, sys, time
from pathlib import Path
way, path = sys.argv[1], sys.argv[2]
import inspect_ai.log
from agentuq_nb.io.ingest.results import iter_simulations
started = time.perf_counter()
if way == "ours":
    n = sum(1 for _ in iter_simulations(Path(path)))
else:
    n = sum(1 for _ in inspect_ai.log.read_eval_log_samples(path, all_samples_required=False, resolve_attachments=True))
print(json.dumps({"n": n, "seconds": time.perf_counter() - started,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(python: str, code: str, *args: str) -> dict:
    done = subprocess.run([python, "-c", code, *args], env=with_src_path(), capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    args = parser.parse_args()
    python = str(reader_venv() / "bin" / "python")
    print(f"{'samples':>8}  {'ours s':>8}  {'inspect-ai s':>12}  {'ratio':>6}  {'ours MiB':>8}  {'theirs MiB':>10}  load")
    with tempfile.TemporaryDirectory() as folder:
        for n in args.samples:
            log = str(Path(folder) / f"n{n}.eval")
            subprocess.run([python, "-c", MAKE_LOG, log, str(n // 2), "2"], env=with_src_path(), check=True)
            ours = run(python, READ, "ours", log)
            theirs = run(python, READ, "inspect", log)
            assert ours["n"] == theirs["n"] == n // 2 * 2
            print(f"{n:>8}  {ours['seconds']:8.2f}  {theirs['seconds']:12.2f}  "
                  f"{theirs['seconds'] / ours['seconds']:5.1f}x  {ours['peak_mib']:8.0f}  {theirs['peak_mib']:10.0f}  "
                  f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
