"""Seconds of ``agentuq-nb analyze`` per real results file, cold and warm, beside the embedding floor of its model.

What the persistent embedding cache does for the transformer (``--embedder minilm``, given to every ``analyze`` here;
the default embedder, MiniLM's static table, needs no cache: ``bench_embedders.py`` compares the two).

For each file (default: the shared real runs in ../shared/data/tau2 and ../shared/data/real_runs, none with log-probs;
a file the reader refuses is said and skipped), each in a fresh process, one after the other:

* ``before`` (with ``--before SRC``): the same command run from another checkout's sources (``PYTHONPATH=SRC``, e.g.
  main before the embedding cache), so that the speed-up is measured in the same run, under the same load;
* ``cold``: ``agentuq-nb analyze FILE --out DIR`` with an empty persistent embedding cache (a new file);
* ``warm``: the same command again into another folder: its texts are in the cache now (what a rerun, another
  threshold, or a detector reading the run again costs).

For each: wall seconds, CPU seconds (user + system) and, from the run's ``blackbox.json``, the black-box signals'
seconds (structure + TRACER, the model's load included when it is loaded) and the texts the model computed. Then the
estimator tables are compared: the largest difference of any estimator's AUROC (and of its length-stratified AUROC)
between ``before`` and ``cold`` and between ``cold`` and ``warm`` — what the cache and the batching change in the
results.

Beside them, the **floor** of the chosen model on the same input: the distinct texts the black-box step embeds,
embedded by the bare model as sentence-transformers runs it (``SentenceTransformer.encode``, its default batch of 32,
128 word pieces: what one would write without this toolkit), in this process with the model loaded once; and by our
``Embedder`` without a cache (longest first, batches of 64 by word pieces). Texts per second each, and the model's
load time. The machine is shared: the load average is printed before each file, and CPU seconds beside wall ones.

    python benchmarks/bench_analyze.py [FILE ...] [--before SRC] [--no-floor] [--workdir DIR]
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1] / "shared" / "data"
DEFAULT_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))
SRC = HERE.parent / "src"


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def analyze(results: Path, out: Path, cache: Path, src: Path, embedder: str = "minilm") -> dict:
    """One ``analyze --embedder EMBEDDER`` in a fresh process: wall and CPU seconds, exit code, and its
    blackbox.json."""
    env = {**os.environ, "PYTHONPATH": str(src), "AGENTUQ_NB_EMBED_CACHE": str(cache)}
    code = "import sys; from agentuq_nb.cli import app; app(sys.argv[1:])"
    cpu0, start = children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, "analyze", str(results), "--out", str(out), "--embedder",
                           embedder], env=env,
                          capture_output=True, text=True)
    row = {"wall": time.perf_counter() - start, "cpu": children_cpu() - cpu0, "code": done.returncode,
           "error": done.stderr.strip().splitlines()[-1] if done.returncode and done.stderr.strip() else ""}
    report = out / "blackbox.json"
    if report.is_file():
        r = json.loads(report.read_text())
        row.update(signals=r["seconds"], embed=r["embed_seconds"], texts=r["texts_embedded"],
                   computed=r.get("texts_computed", r["texts_embedded"]))
    return row


def auroc_differences(a: Path, b: Path) -> tuple[int, float, float]:
    """(estimators in both tables, largest |Δ AUROC|, largest |Δ length-stratified AUROC|) of two runs' tables."""
    import pandas as pd

    cols = ["estimator", "auroc", "auroc_stratified"]
    both = pd.read_csv(a / "estimator_table.csv")[cols].merge(pd.read_csv(b / "estimator_table.csv")[cols],
                                                              on="estimator", suffixes=("_a", "_b"))
    worst = [float((both[f"{c}_a"] - both[f"{c}_b"]).abs().max()) for c in ("auroc", "auroc_stratified")]
    return len(both), worst[0], worst[1]


def embedded_texts(results: Path) -> list[str]:
    """The distinct texts the black-box step embeds for ``results`` (recorded from TRACER's one batched call, which
    holds the users' texts too)."""
    import numpy as np

    from agentuq_nb.io.ingest.results import iter_simulations
    from agentuq_nb.uq.tracer import tracer_components
    from agentuq_nb.uq.transcript import transcript

    seen: list[str] = []

    def record(texts):
        seen.extend(texts)
        return np.ones((len(texts), 1))

    t = transcript(iter_simulations(results), "x")
    record(t.loc[t["role"] == "user", "text"].tolist())
    tracer_components(t, record)
    return list(dict.fromkeys(seen))


def floor(texts: list[str]) -> tuple[float, float, int]:
    """(texts/s of the bare sentence-transformers encode, texts/s of our Embedder without a cache, word pieces)."""
    from agentuq_nb.uq.embeddings import Embedder, sentence_model

    model = sentence_model()
    default = model.max_seq_length
    model.max_seq_length = 128
    try:
        pieces = sum(len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=128,
                                                         verbose=False)["input_ids"])
        start = time.perf_counter()
        model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
        bare = len(texts) / (time.perf_counter() - start)
    finally:
        model.max_seq_length = default
    start = time.perf_counter()
    Embedder(max_tokens=128).embed(texts)
    ours = len(texts) / (time.perf_counter() - start)
    return bare, ours, pieces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--before", type=Path, default=None, help="sources (a src/ folder) of the version to compare")
    parser.add_argument("--no-floor", action="store_true", help="leave out the bare model's texts/s")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the run folders here (default: a temporary "
                        "folder, removed at the end)")
    args = parser.parse_args()
    if not args.files:
        sys.exit(f"no results files given and none found in {SHARED}")
    sys.path.insert(0, str(SRC))
    os.environ["AGENTUQ_NB_EMBED_CACHE"] = "off"  # the floor: nothing cached in this process
    if not args.no_floor:
        from agentuq_nb.uq.embeddings import sentence_model

        start = time.perf_counter()
        sentence_model()
        print(f"model load (torch + sentence-transformers + all-MiniLM-L6-v2): {time.perf_counter() - start:.1f} s")
    kinds = (["before"] if args.before else []) + ["cold", "warm"]
    print(f"{'file':<44} {'traj':>4} {'uniq':>5} {'pieces':>7} {'bare/s':>6} {'ours/s':>6}  "
          + "  ".join(f"{k + ' wall/CPU/signals s':>26}" for k in kinds) + "  load")
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.workdir or scratch
        for path in args.files:
            load = os.getloadavg()[0]
            rows = {}
            cache = Path(tmp) / f"{path.stem}.sqlite"
            for kind in kinds:
                src = args.before if kind == "before" else SRC
                rows[kind] = analyze(path, Path(tmp) / f"{path.stem}-{kind}", cache, src)
            if rows["cold"]["code"]:
                print(f"{path.name:<44} refused: {rows['cold']['error'][:100]}")
                continue
            texts = embedded_texts(path)
            bare, ours, pieces = (float("nan"),) * 2 + (0,) if args.no_floor else floor(texts)
            n_traj = json.loads((Path(tmp) / f"{path.stem}-cold" / "blackbox.json").read_text())["trajectories"]
            cells = "  ".join(f"{r['wall']:>8.1f} {r['cpu']:>7.1f} {r.get('signals', float('nan')):>7.1f} "
                              f"({r.get('computed', 0):>4})" for r in rows.values())
            print(f"{path.name:<44} {n_traj:>4} {len(texts):>5} {pieces:>7} {bare:>6.0f} {ours:>6.0f}  {cells}  "
                  f"{load:.1f}", flush=True)
            pairs = ([("before", "cold")] if args.before else []) + [("cold", "warm")]
            for a, b in pairs:
                n, d_auroc, d_strat = auroc_differences(Path(tmp) / f"{path.stem}-{a}", Path(tmp) / f"{path.stem}-{b}")
                print(f"{'':<44} estimator table {a} vs {b}: {n} estimators, largest |Δ AUROC| {d_auroc:.2g}, "
                      f"|Δ stratified AUROC| {d_strat:.2g}")
            if args.before:
                print(f"{'':<44} analyze before / cold: {rows['before']['wall'] / rows['cold']['wall']:.2f}x, "
                      f"before / warm: {rows['before']['wall'] / rows['warm']['wall']:.2f}x; signals before / cold: "
                      f"{rows['before']['signals'] / rows['cold']['signals']:.2f}x, before / warm: "
                      f"{rows['before']['signals'] / rows['warm']['signals']:.1f}x", flush=True)
    print(f"(texts computed by the model in parentheses; load average at the end {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
