"""Seconds per real results file for the black-box families (structure + TRACER) with the MiniLM transformer
(``embedder="minilm"``; the default static table: ``bench_embedders.py``), model load included.

For each file (default: every real τ²-bench run in ../shared/data/tau2 and ../shared/data/real_runs, none with
log-probs) the run is extracted once (not timed), then a fresh Python process times what ``analyze``
adds for the black-box families - importing the stack, loading MiniLM, reading the messages, embedding,
the structure signals, TRACER's components (``compute_signals``) and TRACER's grid tuning (``compute_tuning``:
32,000 settings, optimistic and nested) - and reports wall and CPU seconds, the share spent embedding, the
texts and word pieces embedded.

Each file is timed twice in the same run: MiniLM reading 128 word pieces of a text (the default: the length
the model was trained on) and 256 (sentence-transformers' default for it, what SAUP reads). Beside them, the
compute floor of the embedding: word pieces × ~21.3 MFLOP (the 6 layers' matrix products per piece) at this
machine's fp32 matrix-product rate, measured here with a 1024×1024 torch matmul on all cores.

    python benchmarks/bench_blackbox.py [FILE ...] [--max-tokens 128 256]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
DEFAULT_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))
#: multiply-adds per word piece of all-MiniLM-L6-v2's 6 layers (4·384² attention projections + 2·384·1536 MLP),
#: times 2 FLOP each; attention scores and the rest add a few per cent at 128 pieces
FLOP_PER_PIECE = 2 * 6 * (4 * 384 * 384 + 2 * 384 * 1536)


def worker(run: str, max_tokens: int) -> None:
    """Time the black-box step on an extracted run in this (fresh) process; print one JSON line."""
    import resource

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    wall0, cpu0 = time.perf_counter(), cpu()
    from agentuq_nb.steps.blackbox import BlackBoxConfig, compute_signals, compute_tuning

    config = BlackBoxConfig(embedder="minilm", embed_max_tokens=max_tokens)  # the transformer: what is timed here
    report = compute_signals(run, config)
    signals_wall, signals_cpu = time.perf_counter() - wall0, cpu() - cpu0
    tuning_start = time.perf_counter()
    compute_tuning(run, config)
    tuning_wall = time.perf_counter() - tuning_start
    total_wall = time.perf_counter() - wall0
    from agentuq_nb.uq.embeddings import sentence_model

    tokenizer = sentence_model().tokenizer
    texts = embedded_texts(run)
    pieces = sum(len(ids) for ids in tokenizer(texts, truncation=True, max_length=max_tokens)["input_ids"])
    print(json.dumps({"wall": total_wall, "signals_wall": signals_wall, "signals_cpu": signals_cpu,
                      "tuning_wall": tuning_wall, "embed_seconds": report["embed_seconds"],
                      "texts": report["texts_embedded"], "unique_texts": len(texts), "pieces": pieces,
                      "trajectories": report["trajectories"], "messages": report["messages"]}))


def embedded_texts(run: str) -> list[str]:
    """The distinct texts the step embeds for ``run`` (recomputed with a recording embedder)."""
    import numpy as np

    from agentuq_nb.io.ingest.results import iter_simulations
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.uq.tracer import tracer_components
    from agentuq_nb.uq.transcript import transcript

    seen: list[str] = []

    def record(texts):
        seen.extend(texts)
        return np.ones((len(texts), 1))

    t = transcript(iter_simulations(RunDir(run).results_path()), "x")
    record(t.loc[t["role"] == "user", "text"].tolist())
    tracer_components(t, record)
    return list(dict.fromkeys(seen))


def matmul_gflops() -> float:
    import torch

    a = torch.randn(1024, 1024)
    a @ a
    start, n = time.perf_counter(), 20
    for _ in range(n):
        a @ a
    return n * 2 * 1024 ** 3 / (time.perf_counter() - start) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--worker", nargs=2, metavar=("RUN", "MAX_TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker[0], int(args.worker[1]))
    if not args.files:
        sys.exit(f"no results files given and none found in {SHARED}")
    from agentuq_nb.steps.extract import extract

    gflops = matmul_gflops()
    print(f"load average {os.getloadavg()[0]:.2f}; fp32 matmul {gflops:.0f} GFLOP/s on {os.cpu_count()} cores "
          f"(floor = word pieces × {FLOP_PER_PIECE / 1e6:.1f} MFLOP at that rate)")
    header = (f"{'file':<42} {'traj':>4} {'max':>4} {'wall s':>7} {'CPU s':>6} {'embed':>6} {'share':>6} "
              f"{'texts':>6} {'pieces':>7} {'floor s':>7} {'tuning s':>8}")
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.files:
            run = Path(tmp) / path.stem
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                extract(path, run)
            for max_tokens in args.max_tokens:
                done = subprocess.run([sys.executable, __file__, "--worker", str(run), str(max_tokens)],
                                      capture_output=True, text=True, check=True)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                floor = r["pieces"] * FLOP_PER_PIECE / (gflops * 1e9)
                print(f"{path.name:<42} {r['trajectories']:>4} {max_tokens:>4} {r['wall']:>7.1f} "
                      f"{r['signals_cpu']:>6.1f} {r['embed_seconds']:>6.1f} {r['embed_seconds'] / r['signals_wall']:>6.0%} "
                      f"{r['unique_texts']:>6} {r['pieces']:>7} {floor:>7.1f} {r['tuning_wall']:>8.1f}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
