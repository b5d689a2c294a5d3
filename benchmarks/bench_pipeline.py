"""Benchmark sidecars → summaries → metrics: this project against AgentUQ's own scripts and DuckDB's bare parse.

For each size (token rows) it writes synthetic agentuq-style results with one sidecar JSONL per
trajectory (rows with every key agentuq writes), then times, each in a fresh subprocess so that
peak memory (max RSS) and imports are its own:

* ours: ``agentuq-nb analyze RESULTS --out RUN_DIR --n-boot 200 --no-blackbox`` (extract + aggregate + evaluate in one
  process: all metrics, with 200 bootstrap resamples for the CIs; without the black-box families and the estimator
  table, which AgentUQ's scripts do not compute); and ``extract`` alone
* AgentUQ: its ``analyze_uq_logprobs.py --input SIDECARS`` then ``evaluate_uq_estimates.py --mode csv``
  (deeplearning-wisc/agentuq, unedited, from ``--agentuq DIR``; skipped with a message if absent),
  two processes as its README runs them; peak memory is the larger of the two
* DuckDB bare parse: ``SELECT count(*) FROM read_ndjson(<the sidecars>, columns=<the columns extract
  reads>)`` — the yardstick for ``extract``, which has to parse the same bytes; and the same query with every
  column materialized as Arrow record batches (``SELECT *``), what DuckDB's path in ``extract`` needs first;
  and DuckDB converting the same sidecars to one Parquet file (``COPY (SELECT * ...) TO ... (FORMAT parquet)``,
  its defaults): the nearest DuckDB equivalent of extract's job, without the placing and the token metrics
* our compiled sidecar scanner alone (``io.ingest.sidecar_scan``, one thread, the files in extract's 32 MiB batches,
  every column built as Arrow), and ``extract`` with the scanner switched off (DuckDB parses every batch, as
  before the scanner): what the scanner changes, in the same run
* ``--one-core``: ours end to end and AgentUQ's two scripts again, each pinned to one core (``taskset -c 0``; OMP, which
  Arrow reads too, MKL, OpenBLAS and numexpr told 1 thread; DuckDB's threads share the one core), so that the
  ratio does not rest on a second core;
  ``--ratio-only`` leaves out the extract, scanner and DuckDB rows (the comparison with AgentUQ alone)
* ``--plain``: our own straw man (``plain_pipeline.py``: per-row Python, json.loads per line); not
  AgentUQ's code

AgentUQ's CSV-mode evaluation joins its trajectory CSV (keys read back as strings) to the results
(``trial``/``seed`` integers): on τ²-bench results it joins no row. So that it computes metrics, it
is given a copy of the results with ``trial`` and ``seed`` as strings (``results_agentuq.json``), and
``--failure-threshold 1.0`` (its default 0.0 labels no trajectory a failure). The run then checks
that its trajectory summaries and metrics agree with ours and prints the largest relative difference.

Memory against the number of sidecars: at ``--flat-at`` rows the same results are also written with
one sidecar per message instead of one per trajectory (~30x the files, same rows and simulations), and
our peak memory is printed for both.

Usage::

    python benchmarks/bench_pipeline.py --agentuq /path/to/agentuq-scripts          # 1e6, 1e7 rows
    python benchmarks/bench_pipeline.py --sizes 100000 --workdir /tmp/bench --plain
    python benchmarks/bench_pipeline.py --agentuq DIR --sizes 10000000 --one-core --ratio-only
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOKENS_PER_MESSAGE = 50
MESSAGES_PER_SIMULATION = 41  # 30 generated messages (assistant/user) per trajectory → 1,500 token rows
GENERATED_PER_SIMULATION = (MESSAGES_PER_SIMULATION - 1) * 3 // 4
PLAIN = Path(__file__).with_name("plain_pipeline.py")
AGENTUQ_SCRIPTS = ("analyze_uq_logprobs.py", "evaluate_uq_estimates.py")
SUMMARY_VALUES = ("total_tokens", "trajectory_nll", "avg_token_nll", "mean_topk_entropy", "min_chosen_prob")
#: AgentUQ's metric names → ours
METRIC_NAMES = {"auroc_failure_vs_uncertainty": "auroc", "auarc": "auarc", "pearson_uncertainty_negative_reward": "pearson",
                "spearman_uncertainty_negative_reward": "spearman", "kendall_uncertainty_negative_reward": "kendall"}

OURS = """
import sys
from agentuq_nb.cli import app
# standalone_mode=False returns the exit code of a refused input instead of exiting with it
code = app(["analyze", sys.argv[1], "--out", sys.argv[2], "--n-boot", "200", "--no-blackbox"], standalone_mode=False)
if code:
    sys.exit(code)
"""
OURS_EXTRACT = """
import sys
from agentuq_nb.steps.extract import extract
extract(sys.argv[1], sys.argv[2])
"""
# the same, with the scanner standing aside for every batch: DuckDB's JSON reader parses them all
OURS_EXTRACT_DUCKDB = """
import sys
import agentuq_nb.io.ingest.sidecars as sidecars
sidecars.scan_sidecars = lambda paths: None
from agentuq_nb.steps.extract import extract
extract(sys.argv[1], sys.argv[2])
"""
OURS_SCAN = """
import sys
from pathlib import Path
from agentuq_nb.io.ingest.sidecars import scan_sidecars
files, batch, size, n = sorted(Path(sys.argv[1]).glob("*.jsonl")), [], 0, 0
for i, path in enumerate(files):
    batch.append(path)
    size += path.stat().st_size
    if size >= 32 << 20 or i == len(files) - 1:
        table, rows, lines = scan_sidecars(batch)  # None would mean a file beyond its scope: not here
        n += table.num_rows
        batch, size = [], 0
print(n)
"""
# the sidecars and the columns extract reads, as DuckDB's JSON reader is given them; each script below adds its query
DUCKDB_SIDECARS = """
import sys, duckdb
from pathlib import Path
from agentuq_nb.io.ingest.sidecars import SIDECAR_SCHEMA
types = {"string": "VARCHAR", "int64": "BIGINT", "double": "DOUBLE", "list<item: string>": "VARCHAR[]",
         "list<item: double>": "DOUBLE[]"}
columns = {f.name: types[str(f.type)] for f in SIDECAR_SCHEMA}
files = sorted(str(p) for p in Path(sys.argv[1]).glob("*.jsonl"))
sidecars = "read_ndjson($files, columns=$columns)"
params = {"files": files, "columns": columns}
"""
# the bare parse: rows counted, no column materialized
DUCKDB_PARSE = DUCKDB_SIDECARS + """
print(duckdb.sql(f"SELECT count(*) FROM {sidecars}", params=params).fetchall()[0][0])
"""
# the same parse with every column materialized as Arrow (streamed in record batches, so memory stays small):
# what extract needs of the parse at the least, before it places, measures and writes the rows
DUCKDB_TO_ARROW = DUCKDB_SIDECARS + """
reader = duckdb.sql(f"SELECT * FROM {sidecars}", params=params).to_arrow_reader(65536)
print(sum(batch.num_rows for batch in reader))
"""
# DuckDB writing the parsed sidecars to Parquet (argv[2]): JSON in, Parquet out, as extract (which also places
# each row in its message and adds the token metrics)
DUCKDB_TO_PARQUET = DUCKDB_SIDECARS + """
target = sys.argv[2].replace("'", "''")  # COPY takes its target as a literal, not a parameter
duckdb.sql(f"COPY (SELECT * FROM {sidecars}) TO '{target}' (FORMAT parquet)", params=params)
print(duckdb.sql("SELECT count(*) FROM read_parquet($path)", params={"path": sys.argv[2]}).fetchall()[0][0])
"""
RUN_SCRIPT = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
# VmHWM: the process's own peak RSS (ru_maxrss would carry over this parent's RSS across fork + exec)
REPORT_PEAK = ("\nimport re, sys\nprint(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1), "
               "file=sys.stderr)\n")


def warm_page_cache(folder: Path) -> None:
    """Read every input file once, so that each timed run starts with its input in the page cache
    (otherwise whichever runs first pays the disk reads for the others); first flush what was written
    (inputs just made: their write-back would otherwise run during the timed run)."""
    os.sync()
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as fh:
                while fh.read(1 << 24):
                    pass


#: a process pinned to the first core with every thread pool at one thread (``--one-core``)
ONE_CORE_ENV = {name: "1" for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                       "NUMEXPR_NUM_THREADS")}


def run_measured(code: str, *args: str, one_core: bool = False) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of ``python -c code args`` in a fresh process (``one_core``: pinned to CPU 0
    with one thread per pool)."""
    command = [sys.executable, "-c", code + REPORT_PEAK, *args]
    env = {**os.environ, **ONE_CORE_ENV} if one_core else None
    start = time.perf_counter()
    done = subprocess.run((["taskset", "-c", "0"] if one_core else []) + command, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"benchmark step failed ({args}):\n{done.stderr[-3000:]}")
    return elapsed, int(done.stderr.strip().splitlines()[-1]) / 1024  # VmHWM is in KiB


def prepare(src: Path, n_sims: int, tokens_per_message: int, seed: int) -> None:
    """Synthetic results + sidecars in ``src`` (kept between runs), and AgentUQ's joinable copy."""
    from agentuq_nb.testing.synthetic import write_synthetic_results

    if not (src / "results.json").exists():
        write_synthetic_results(src, num_simulations=n_sims, messages_per_simulation=MESSAGES_PER_SIMULATION,
                                tokens_per_message=tokens_per_message, forms=("sidecar",), seed=seed)
    joinable = src / "agentuq" / "results_agentuq.json"
    if not joinable.exists():
        results = json.loads((src / "results.json").read_text())
        for sim in results["simulations"]:  # what its CSV keys read back as
            sim["trial"], sim["seed"] = str(sim["trial"]), str(sim["seed"])
        joinable.parent.mkdir(parents=True, exist_ok=True)
        joinable.write_text(json.dumps(results))


def split_per_message(src: Path, dst: Path) -> None:
    """``src``'s results with each message's sidecar rows in a file of their own (same rows, same
    simulations, ~30x the files): what changes is only the number of sidecars."""
    if (dst / "results.json").exists():
        return
    results = json.loads((src / "results.json").read_text())
    (dst / "sidecars").mkdir(parents=True, exist_ok=True)
    for sim in results["simulations"]:
        refs = [m for m in sim["messages"] if (m.get("raw_data") or {}).get("uq_logprobs")]
        if not refs:
            continue
        lines = (src / refs[0]["raw_data"]["uq_logprobs"]["path"]).read_text().splitlines()
        by_stamp: dict[str, list[str]] = {}
        for line in lines:
            by_stamp.setdefault(json.loads(line)["message_timestamp"], []).append(line)
        trajectory_file = refs[0]["raw_data"]["uq_logprobs"]["path"]
        for i, message in enumerate(refs):
            name = trajectory_file.removesuffix(".jsonl") + f"_m{i}.jsonl"
            (dst / name).write_text("\n".join(by_stamp[message["timestamp"]]) + "\n")
            message["raw_data"]["uq_logprobs"]["path"] = name
    (dst / "results.json").write_text(json.dumps(results))


def run_agentuq(agentuq: Path, src: Path, out: Path, one_core: bool = False) -> tuple[float, float, float, float]:
    """Seconds and peak MiB of AgentUQ's analysis, then of its evaluation (two processes)."""
    shutil.rmtree(out, ignore_errors=True)
    t_an, m_an = run_measured(RUN_SCRIPT, str(agentuq / AGENTUQ_SCRIPTS[0]), "--input", str(src / "sidecars"),
                              "--output-dir", str(out / "analysis"), one_core=one_core)
    t_ev, m_ev = run_measured(RUN_SCRIPT, str(agentuq / AGENTUQ_SCRIPTS[1]), "--mode", "csv",
                              "--uq-trajectory-csv", str(out / "analysis" / "uq_trajectory_summary.csv"),
                              "--results", str(src / "agentuq" / "results_agentuq.json"),
                              "--output-dir", str(out / "eval"), "--failure-threshold", "1.0", one_core=one_core)
    return t_an, m_an, t_ev, m_ev


def check_run(run_dir: Path, rows: int, metrics: bool = True) -> None:
    """A timed run counts only if it extracted every row (and wrote its metrics, when it computes them)."""
    extracted = json.loads((run_dir / "manifest.json").read_text()).get("num_tokens")
    written = (run_dir / "eval_metrics.json").is_file()
    if extracted != rows or (metrics and not written):
        raise AssertionError(f"{run_dir}: {extracted} token rows extracted of {rows}, "
                             f"metrics {'written' if written else 'missing'}")


def relative_difference(a: float, b: float) -> float:
    return 0.0 if a == b else abs(a - b) / max(abs(a), abs(b))


def agreement(run_dir: Path, agentuq_out: Path) -> tuple[int, float, float]:
    """(trajectory rows compared, largest relative difference of summary values, of metrics)."""
    import pandas as pd

    ours = pd.read_parquet(run_dir / "trajectory_summary.parquet")
    ours = ours.assign(trial=ours["trial"].astype(str), seed=ours["seed"].astype(str))
    theirs = pd.read_csv(agentuq_out / "analysis" / "uq_trajectory_summary.csv", dtype=str)
    keys = ["domain", "task_id", "trial", "seed", "scorer", "role"]
    both = theirs.merge(ours, on=keys, suffixes=("_agentuq", ""), validate="one_to_one")
    if len(both) != len(theirs):
        raise AssertionError(f"{len(theirs) - len(both)} of AgentUQ's trajectory rows have no match in ours")
    worst_value = 0.0
    for col in SUMMARY_VALUES:
        theirs_col = both[f"{col}_agentuq"].astype(float).to_numpy()
        for a, b in zip(theirs_col, both[col].astype(float).to_numpy()):
            worst_value = max(worst_value, relative_difference(a, b))
    theirs_metrics = json.loads((agentuq_out / "eval" / "uq_eval_metrics.json").read_text())
    if theirs_metrics["num_examples_total"] == 0:
        raise AssertionError("AgentUQ's evaluation joined no rows")
    ours_metrics = json.loads((run_dir / "eval_metrics.json").read_text())["metrics"]
    worst_metric = max(relative_difference(theirs_metrics["metrics"][k], ours_metrics[v]) for k, v in METRIC_NAMES.items())
    return len(both), worst_value, worst_metric


def extract_rows(src: Path, workdir: Path, tag: str, rows: int) -> None:
    """Print ``extract`` alone (scanner on and off), the scanner alone and DuckDB's parses of the same sidecars."""
    extract_dir = workdir / f"extract_{tag}"
    shutil.rmtree(extract_dir, ignore_errors=True)
    t_ext, m_ext = run_measured(OURS_EXTRACT, str(src / "results.json"), str(extract_dir))
    check_run(extract_dir, rows, metrics=False)
    shutil.rmtree(extract_dir, ignore_errors=True)
    t_ext_duck, m_ext_duck = run_measured(OURS_EXTRACT_DUCKDB, str(src / "results.json"), str(extract_dir))
    check_run(extract_dir, rows, metrics=False)
    shutil.rmtree(extract_dir, ignore_errors=True)
    t_scan, m_scan = run_measured(OURS_SCAN, str(src / "sidecars"))
    t_duck, m_duck = run_measured(DUCKDB_PARSE, str(src / "sidecars"))
    t_arrow, m_arrow = run_measured(DUCKDB_TO_ARROW, str(src / "sidecars"))
    duck_parquet = workdir / f"duckdb_{tag}.parquet"
    t_copy, m_copy = run_measured(DUCKDB_TO_PARQUET, str(src / "sidecars"), str(duck_parquet))
    duck_parquet.unlink()
    print(f"ours extract alone              {t_ext:7.2f} s  {m_ext:6.0f} MiB")
    print(f"ours extract, scanner off       {t_ext_duck:7.2f} s  {m_ext_duck:6.0f} MiB  (DuckDB parses every batch)")
    print(f"our sidecar scanner alone       {t_scan:7.2f} s  {m_scan:6.0f} MiB  (one thread, every column as Arrow)")
    print(f"DuckDB bare parse (count rows)  {t_duck:7.2f} s  {m_duck:6.0f} MiB")
    print(f"DuckDB parse to Arrow           {t_arrow:7.2f} s  {m_arrow:6.0f} MiB  (every column extract reads)")
    print(f"DuckDB sidecars to Parquet      {t_copy:7.2f} s  {m_copy:6.0f} MiB  (COPY, its defaults; no placing, no metrics)")
    print(f"  → our extract / DuckDB bare parse: {t_ext / t_duck:.2f}x;  / DuckDB parse to Arrow: {t_ext / t_arrow:.2f}x;"
          f"  / DuckDB sidecars to Parquet: {t_ext / t_copy:.2f}x;"
          f"  scanner off / on: {t_ext_duck / t_ext:.2f}x;  our scanner / DuckDB bare parse: {t_scan / t_duck:.2f}x")


def agentuq_dir(path: Path | None) -> Path | None:
    if path is None:
        print("AgentUQ: skipped (give --agentuq DIR holding its unedited "
              f"{' and '.join(AGENTUQ_SCRIPTS)} from deeplearning-wisc/agentuq src/tau2/scripts)")
        return None
    missing = [s for s in AGENTUQ_SCRIPTS if not (path / s).is_file()]
    if missing:
        print(f"AgentUQ: skipped ({path} lacks {', '.join(missing)})")
        return None
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--agentuq", type=Path, default=None, help="folder with AgentUQ's two scripts, unedited")
    parser.add_argument("--flat-at", type=int, default=None, help="size at which memory vs number of sidecars is "
                        "measured (default: the smallest size; 0: not measured)")
    parser.add_argument("--plain", action="store_true", help="also time our own straw man (plain_pipeline.py)")
    parser.add_argument("--one-core", action="store_true", help="also time ours and AgentUQ's scripts pinned to one "
                        "core with one thread per pool")
    parser.add_argument("--ratio-only", action="store_true", help="leave out the extract, scanner and DuckDB rows")
    parser.add_argument("--data-seed", type=int, default=0, help="seed of the synthetic inputs (another value: inputs "
                        "not seen while tuning, in folders of their own)")
    args = parser.parse_args()
    agentuq = agentuq_dir(args.agentuq)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_pipeline_"))
    rows_per_sim = GENERATED_PER_SIMULATION * TOKENS_PER_MESSAGE
    flat_at = min(args.sizes) if args.flat_at is None else args.flat_at
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    for size in sorted(args.sizes):
        n_sims = max(1, size // rows_per_sim)
        rows = n_sims * rows_per_sim
        tag = f"{size}" if args.data_seed == 0 else f"{size}_seed{args.data_seed}"
        src = workdir / f"results_{tag}"
        prepare(src, n_sims, TOKENS_PER_MESSAGE, seed=size + args.data_seed)
        run_dir = workdir / f"run_{tag}"
        print(f"\n== {rows:,} token rows in {n_sims:,} sidecars ({sum(p.stat().st_size for p in (src / 'sidecars').iterdir()) / 2**20:,.0f} MiB)")
        shutil.rmtree(run_dir, ignore_errors=True)
        warm_page_cache(src)
        t_ours, m_ours = run_measured(OURS, str(src / "results.json"), str(run_dir))
        check_run(run_dir, rows)
        print(f"ours end to end (one process)   {t_ours:7.2f} s  {m_ours:6.0f} MiB  {rows / t_ours:12,.0f} rows/s")
        if not args.ratio_only:
            extract_rows(src, workdir, tag, rows)
        if agentuq is not None:
            agentuq_out = workdir / f"agentuq_{tag}"
            warm_page_cache(src)
            t_an, m_an, t_ev, m_ev = run_agentuq(agentuq, src, agentuq_out)
            t_aq, m_aq = t_an + t_ev, max(m_an, m_ev)
            print(f"AgentUQ analysis                {t_an:7.2f} s  {m_an:6.0f} MiB")
            print(f"AgentUQ evaluation (csv mode)   {t_ev:7.2f} s  {m_ev:6.0f} MiB")
            print(f"  → end to end, AgentUQ's time / ours: {t_aq / t_ours:.2f}x;  "
                  f"peak memory ours / AgentUQ: {m_ours / m_aq:.2f}")
            if args.one_core:
                shutil.rmtree(run_dir, ignore_errors=True)
                warm_page_cache(src)
                t_ours1, _ = run_measured(OURS, str(src / "results.json"), str(run_dir), one_core=True)
                check_run(run_dir, rows)
                t_an1, _, t_ev1, _ = run_agentuq(agentuq, src, agentuq_out, one_core=True)
                print(f"one core (taskset -c 0, 1 thread per pool): ours {t_ours1:.2f} s, AgentUQ {t_an1:.2f} + "
                      f"{t_ev1:.2f} s  → AgentUQ's time / ours: {(t_an1 + t_ev1) / t_ours1:.2f}x")
            n, worst_value, worst_metric = agreement(run_dir, agentuq_out)
            print(f"  agreement on {n:,} trajectory rows: summary values ≤ {worst_value:.1e} relative, "
                  f"metrics ≤ {worst_metric:.1e} relative")
        if args.plain:
            plain_dir = workdir / f"plain_{tag}"
            warm_page_cache(src)
            t_plain, m_plain = run_measured(RUN_SCRIPT, str(PLAIN), "full", str(src / "results.json"), str(plain_dir))
            shutil.rmtree(plain_dir, ignore_errors=True)
            print(f"our straw man (plain_pipeline)  {t_plain:7.2f} s  {m_plain:6.0f} MiB  → {t_plain / t_ours:.1f}x ours "
                  "(our own per-row Python baseline, not AgentUQ's code)")
        if size == flat_at:
            split = workdir / f"results_{tag}_per_message"
            split_per_message(src, split)
            split_run = workdir / f"run_{tag}_per_message"
            shutil.rmtree(split_run, ignore_errors=True)
            warm_page_cache(split)
            t_split, m_split = run_measured(OURS, str(split / "results.json"), str(split_run))
            check_run(split_run, rows)
            n_split = sum(1 for _ in (split / "sidecars").iterdir())
            print(f"same rows, one sidecar per message ({n_split:,} files): ours {t_split:.2f} s, {m_split:.0f} MiB "
                  f"(peak memory {m_split / m_ours:.2f}x that with {n_sims:,} files)")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    print(f"(data in {workdir})")


if __name__ == "__main__":
    main()
