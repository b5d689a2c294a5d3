"""The learned failure detector's speed: training on the shared runs, predicting a 200-trajectory file, and feature
extraction streamed at scale (serial and on Dask), each printed beside the target or the approach it is compared with.

1. **Training** on the ten shared runs (400 trajectories; every feature group, the default embedder - the static
   MiniLM table - and every protocol with its model selection, the final and leave-one-run-out models, calibration,
   the bootstrap intervals), as ``agentuq-nb train-detector`` runs it: in a fresh process (imports, the table's
   load, every text embedded: **cold**) and again in that process with the embeddings cached (**warm**), against
   the 60 s target of issue 48.
2. **Prediction** of a 200-trajectory airline file (the shared airline runs' simulations, the first ten twice; each
   its own trial) with that detector, in a fresh process (**cold**: imports, the table's load, extraction into a run
   folder) and again in the same process (**warm**), against the 15 s target.
3. **Scale**: the synthetic generator (``agentuq_nb.testing``) writes N trajectories (default 100,000; 12 messages,
   no log-probs beyond one token each); their features (text, structure + TRACER with hash embeddings, length) are
   extracted in a fresh process each: the whole file as one batch (the plain approach: every simulation in memory at
   once), streamed in batches of 2,000 on the job executor, and the same on ``local:2`` Dask workers - trajectories
   per second and the peak memory of the extracting process (Dask workers' own apart).

**Cold** means a fresh Python process and no run-level state: nothing imported, the static table read from its file
(the per-machine file in ``~/.cache/agentuq_nb``, distilled once per machine by ``make setup``: kept), every text
embedded, every feature extracted, every model fitted; **warm** repeats the same call in that process (imports done,
the table in memory; nothing else is cached between the two calls). Prediction runs with ``predict``'s defaults
(``--predict-n-boot``, 1000 resamples for the run's rate and the estimator-table row, as the command does).

The training's cold CPU seconds are printed beside those of the code before issue 48 point 5's speed-ups
(:data:`BEFORE`, measured with the same command on the same machine: the CPU seconds, not the wall time, compare
across loads).

On a shared machine the wall-clock seconds depend on the other processes: each timing is printed with the process's
CPU seconds (user + system, all its threads, and its worker processes': train-detector fits the model selections on
two by default) and the load average beside it; the CPU seconds are what compares across loads. ``--before-src``
runs parts 1 and 2 with another copy of the package first (the code before a change), back to back.

    python benchmarks/bench_detector.py [--n 100000] [--skip-shared] [--skip-scale] [--n-boot 1000]
                                        [--predict-n-boot 1000] [--keep DIR] [--before-src DIR [--side-by-side]]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))
AIRLINE = [SHARED / "tau2" / "gpt-4.1_airline_1trial.json", SHARED / "tau2" / "ft-gpt-4.1_airline_1trial.json",
           *(SHARED / "real_runs" / f"{m}_airline_1trial.json" for m in ("claude-opus-4-6", "claude-sonnet-4.5",
                                                                           "qwen2.5-7b"))]
TRAIN_TARGET, PREDICT_TARGET = 60.0, 15.0
PREDICTED_N = 200
#: train-detector on the ten shared runs at commit 6819602 (before issue 48 point 5's speed-ups), cold, as the README
#: runs it: 343 s wall at load 13, CPU (user + system) below; the detector it wrote is bitwise the one written now
BEFORE = {"train_cold_cpu": 121.1}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds() -> float:
    """The CPU seconds (user + system) of this process and of its children that ended (train-detector's selection
    workers: their pool is shut down before the command returns)."""
    return sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def airline_file(out: Path, n: int = PREDICTED_N) -> Path:
    """A τ²-bench v0 airline results file of ``n`` simulations from the shared airline runs (the first ones again
    when they hold fewer), each its own trial."""
    first = json.loads(AIRLINE[0].read_text())
    sims = [s for path in AIRLINE for s in json.loads(path.read_text())["simulations"]]
    picked = []
    for i in range(n):
        sim = dict(sims[i % len(sims)])
        sim.update(id=f"bench-{i}", trial=i)  # the runs share tasks and seeds: each its own trial
        picked.append(sim)
    tasks = {str(s["task_id"]) for s in picked}
    out.write_text(json.dumps({**first, "tasks": [t for t in first.get("tasks", []) if str(t.get("id")) in tasks]
                               or [{"id": t} for t in sorted(tasks)], "simulations": picked}))
    return out


def train_worker(out: str, n_boot: str, warm: str = "1") -> None:
    """In a fresh process: train-detector on the ten shared runs twice (cold, then with the embeddings cached; only
    cold when ``warm`` is "0"); one JSON line."""
    start, cpu = time.perf_counter(), cpu_seconds()
    from agentuq_nb.steps.train_detector import train_detector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = train_detector(SHARED_FILES, Path(out) / "cold", n_boot=int(n_boot))
        cold, cold_cpu, cold_load = time.perf_counter() - start, cpu_seconds() - cpu, load()
        start, cpu = time.perf_counter(), cpu_seconds()
        if warm != "0":
            train_detector(SHARED_FILES, Path(out) / "warm", n_boot=int(n_boot))
    print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "warm": time.perf_counter() - start if warm != "0" else None,
                      "warm_cpu": cpu_seconds() - cpu if warm != "0" else None, "n": first.card["n"],
                      "embedder": first.card["embedder"]["name"], "seconds": first.card["seconds"],
                      "load": cold_load if warm == "0" else load()}))


def predict_worker(detector: str, results: str, out: str, n_boot: str = "0") -> None:
    """In a fresh process: predict twice (cold, then warm: imports done, the table in memory); one JSON line."""
    start, cpu = time.perf_counter(), cpu_seconds()
    from agentuq_nb.steps.predict import predict

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict(detector, results, Path(out) / "first", n_boot=int(n_boot))
        cold, cold_cpu = time.perf_counter() - start, cpu_seconds() - cpu
        start, cpu = time.perf_counter(), cpu_seconds()
        done = predict(detector, results, Path(out) / "second", n_boot=int(n_boot))
    print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "cached": time.perf_counter() - start,
                      "cached_cpu": cpu_seconds() - cpu, "n": len(done.predictions),
                      "in_training": int(done.predictions["in_training"].sum()), "load": load()}))


def scale_worker(results: str, scheduler: str, batch_size: str) -> None:
    """In a fresh process: extract the features of ``results`` (serially or on ``scheduler``); one JSON line."""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources

    sources = resolve_sources([results])
    start = time.perf_counter()
    features = corpus_features(sources, ("text", "blackbox", "length"), "hash",
                               scheduler=None if scheduler == "serial" else scheduler, batch_size=int(batch_size))
    seconds = time.perf_counter() - start
    print(json.dumps({"scheduler": scheduler, "trajectories": len(features), "seconds": seconds,
                      "terms": len(features.vocabulary), "peak_mib": peak_mib()}))


def start_worker(args: list[str], src: str | None = None) -> subprocess.Popen:
    """Start this script's worker ``args`` in a fresh process (``src``: that package source first on the path)."""
    env = dict(os.environ)
    if src:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(src).resolve()), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def finish_worker(process: subprocess.Popen) -> dict:
    """The JSON line of a worker :func:`start_worker` started."""
    out, err = process.communicate()
    if process.returncode:
        sys.exit(f"the worker {' '.join(process.args[2:])} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def worker(args: list[str], src: str | None = None) -> dict:
    """Run this script's worker ``args`` in a fresh process (``src``: that package source first on the path); its
    JSON line."""
    return finish_worker(start_worker(args, src))


def train_line(t: dict, label: str) -> str:
    warm = "" if t["warm"] is None else f", warm {t['warm']:.1f} s ({t['warm_cpu']:.1f} s CPU)"
    return (f"  [{label}] {t['n']} trajectories, embedder {t['embedder']}: cold {t['cold']:.1f} s ({t['cold_cpu']:.1f} s "
            f"CPU; {t['cold'] / TRAIN_TARGET:.2f}× the {TRAIN_TARGET:.0f} s target){warm}; cold parts: "
            + ", ".join(f"{k} {v:.1f} s" for k, v in t["seconds"].items()) + f"; {t['load']}")


def side_by_side(tmp: Path, n_boot: int, before_src: str) -> tuple[dict, dict]:
    """Part 1 cold, the code at ``before_src`` and this one started at the same time (one load for both)."""
    for label in ("before", "now"):
        (tmp / label).mkdir(parents=True, exist_ok=True)
    running = {label: start_worker(["--train-worker", str(tmp / label / "detector"), str(n_boot), "0"], src)
               for label, src in (("before", before_src), ("now", None))}
    done = {label: finish_worker(process) for label, process in running.items()}
    for label, t in done.items():
        print(train_line(t, label), flush=True)
    return done["before"], done["now"]


def shared(tmp: Path, n_boot: int, predict_n_boot: int, src: str | None, label: str) -> tuple[dict, dict]:
    """Parts 1 and 2 with the package at ``src`` (None: this one), printed; their JSON lines."""
    out = tmp / label
    out.mkdir(parents=True, exist_ok=True)
    t = worker(["--train-worker", str(out / "detector"), str(n_boot)], src)
    print(train_line(t, label), flush=True)
    results = airline_file(tmp / "airline_200.json")
    p = worker(["--worker", str(out / "detector" / "cold"), str(results), str(out / "predict"), str(predict_n_boot)],
               src)
    print(f"  [{label}] predict {p['n']} trajectories ({p['in_training']} met in training), {predict_n_boot} "
          f"resamples: cold {p['cold']:.1f} s ({p['cold_cpu']:.1f} s CPU; imports, the table's load, extraction into "
          f"a run folder; {p['cold'] / PREDICT_TARGET:.2f}× the {PREDICT_TARGET:.0f} s target), warm {p['cached']:.1f} s "
          f"({p['cached_cpu']:.1f} s CPU); {p['load']}", flush=True)
    return t, p


def scale(n: int, folder: Path) -> list[dict]:
    start = time.perf_counter()
    results = folder / "synthetic" / "results.json"
    code = ("from agentuq_nb.testing.synthetic import write_synthetic_results as w; "
            f"w({str(folder / 'synthetic')!r}, num_simulations={n}, messages_per_simulation=12, tokens_per_message=1, "
            "top_k=1, forms=('message',), seed=1)")
    subprocess.run([sys.executable, "-c", code], check=True)
    print(f"  wrote {n:,} synthetic trajectories ({results.stat().st_size / 2**20:.0f} MiB) in "
          f"{time.perf_counter() - start:.0f} s (another process)", flush=True)
    rows = []
    for scheduler, batch, label in (("serial", n, "one batch (plain)"), ("serial", 2000, "streamed"),
                                    ("local:2", 2000, "streamed, Dask local:2")):
        done = subprocess.run([sys.executable, __file__, "--scale-worker", str(results), scheduler, str(batch)],
                              capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"  {label:>22}: {r['trajectories']:,} trajectories in {r['seconds']:.1f} s "
              f"({r['trajectories'] / r['seconds']:,.0f}/s), {r['terms']:,} terms, peak {r['peak_mib']:,.0f} MiB "
              "(the extracting process; Dask workers' own memory apart)", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="synthetic trajectories for the scale part")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--predict-n-boot", type=int, default=1000, help="predict's resamples (its default: 1000)")
    parser.add_argument("--keep", help="a folder to write the detectors and predictions to and keep (default: a "
                        "temporary one)")
    parser.add_argument("--before-src", help="also run parts 1 and 2 with the package at this src/ folder first (the "
                        "code before a change, e.g. a `git archive` of main), back to back with this one")
    parser.add_argument("--side-by-side", action="store_true", help="with --before-src: only the cold training, the "
                        "two codes started at the same time (one load for both: on a busy shared machine back-to-back "
                        "runs meet different loads)")
    parser.add_argument("--skip-shared", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--train-worker", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--scale-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side_by_side and not args.before_src:
        parser.error("--side-by-side compares with --before-src DIR")
    if args.worker:
        predict_worker(*args.worker)
        return
    if args.train_worker:
        train_worker(*args.train_worker)
        return
    if args.scale_worker:
        scale_worker(*args.scale_worker)
        return
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(args.keep or scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        if not args.skip_shared:
            if len(SHARED_FILES) < 10:
                sys.exit(f"the ten shared runs are not in {SHARED}")
            print("1. train-detector on the ten shared runs (defaults: every feature group, the static MiniLM table), "
                  + ("cold, in fresh processes: the code before and this one at the same time" if args.side_by_side else
                     f"in a fresh process; 2. predict on a {PREDICTED_N}-trajectory airline file with that detector, in "
                     "a fresh process"), flush=True)
            if args.before_src and args.side_by_side:
                b, t = side_by_side(tmp, args.n_boot, args.before_src)
            elif args.before_src:
                b, _ = shared(tmp, args.n_boot, args.predict_n_boot, args.before_src, "before")
            if not args.side_by_side:
                t, _ = shared(tmp, args.n_boot, args.predict_n_boot, None, "now")
            print(f"  train-detector cold CPU: {BEFORE['train_cold_cpu']:.1f} s before (commit 6819602), "
                  f"{t['cold_cpu']:.1f} s now: {BEFORE['train_cold_cpu'] / t['cold_cpu']:.2f}× less", flush=True)
            if args.before_src:
                print(f"  {'side by side' if args.side_by_side else 'back to back'}, cold: {b['cold']:.1f} s wall / {b['cold_cpu']:.1f} s CPU with {args.before_src}, "
                      f"{t['cold']:.1f} s / {t['cold_cpu']:.1f} s CPU now: {b['cold'] / t['cold']:.2f}× the wall, "
                      f"{b['cold_cpu'] / t['cold_cpu']:.2f}× the CPU", flush=True)
        if not args.skip_scale:
            print(f"3. feature extraction of {args.n:,} synthetic trajectories (text, structure + TRACER with hash "
                  "embeddings, length), streamed in batches of 2,000", flush=True)
            plain, streamed, dask = scale(args.n, tmp)
            print(f"  streamed vs the whole file as one batch: {plain['seconds'] / streamed['seconds']:.2f}× the speed, "
                  f"{streamed['peak_mib'] / plain['peak_mib']:.2f}× the peak memory; Dask local:2 vs streamed serially: "
                  f"{streamed['seconds'] / dask['seconds']:.2f}× the speed")


if __name__ == "__main__":
    main()
