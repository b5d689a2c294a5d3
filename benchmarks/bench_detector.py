"""The learned failure detector's speed: training on the shared runs, predicting a 50-trajectory file, and feature
extraction streamed at scale (serial and on Dask), each printed beside the target or the approach it is compared with.

1. **Training** on the ten shared runs (400 trajectories; every feature group, MiniLM): the features extracted twice
   in one process - cold (MiniLM loaded, every text embedded) and again with the embeddings cached (the embedder's
   cache: the same texts are not embedded twice) - then ``train_on_features`` (every protocol, the final and
   leave-one-run-out models, calibration, the bootstrap intervals); ``train (cached embeddings)`` = the second
   extraction + training, against the 60 s target of issue 39.
2. **Prediction** of a 50-trajectory file (claude-sonnet-4.5 airline) with that detector, in a fresh process (imports
   and MiniLM's load included) and again in the same process (embeddings cached), against the 10 s target.
3. **Scale**: the synthetic generator (``agentuq_nb.testing``) writes N trajectories (default 100,000; 12 messages,
   no log-probs beyond one token each); their features (text, structure + TRACER with hash embeddings, length) are
   extracted in a fresh process each: the whole file as one batch (the plain approach: every simulation in memory at
   once), streamed in batches of 2,000 on the job executor, and the same on ``local:2`` Dask workers - trajectories
   per second and the peak memory of the extracting process (Dask workers' own apart). MiniLM at that scale is the
   embedder's cost (texts per second, printed by part 1), not the extraction's.

    python benchmarks/bench_detector.py [--n 100000] [--skip-shared] [--skip-scale] [--n-boot 1000]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))
PREDICTED = SHARED / "real_runs" / "claude-sonnet-4.5_airline_1trial.json"
TRAIN_TARGET, PREDICT_TARGET = 60.0, 10.0


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_shared(out: Path, n_boot: int) -> dict:
    from agentuq_nb.steps.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.steps.train_detector import TrainDetectorConfig, prefix_reader, train_on_features
    from agentuq_nb.uq.detector_features import GROUPS
    from agentuq_nb.uq.embeddings import default_embedder

    sources = resolve_sources(SHARED_FILES)
    start = time.perf_counter()
    corpus_features(sources, GROUPS, "minilm")
    cold = time.perf_counter() - start
    embedder = default_embedder(128)
    texts = embedder.misses
    start = time.perf_counter()
    features = corpus_features(sources, GROUPS, "minilm")
    warm = time.perf_counter() - start
    config = TrainDetectorConfig(inputs=SHARED_FILES, out=out, n_boot=n_boot)
    start = time.perf_counter()
    trained = train_on_features(features, sources, config, prefixes=prefix_reader(sources, config))
    train = time.perf_counter() - start
    return {"trajectories": trained.card["n"], "features_cold": cold, "texts_embedded": texts,
            "texts_per_second_cold": texts / cold, "features_cached": warm, "train": train,
            "train_cached_total": warm + train, "seconds": trained.seconds}


def predict_worker(detector: str, results: str, out: str) -> None:
    """In a fresh process: predict twice (cold, then with the embeddings cached); one JSON line."""
    start = time.perf_counter()
    from agentuq_nb.steps.predict import predict

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict(detector, results, Path(out) / "first", n_boot=0)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        done = predict(detector, results, Path(out) / "second", n_boot=0)
    print(json.dumps({"cold": cold, "cached": time.perf_counter() - start, "n": len(done.predictions)}))


def scale_worker(results: str, scheduler: str, batch_size: str) -> None:
    """In a fresh process: extract the features of ``results`` (serially or on ``scheduler``); one JSON line."""
    from agentuq_nb.steps.detector_inputs import corpus_features, resolve_sources

    sources = resolve_sources([results])
    start = time.perf_counter()
    features = corpus_features(sources, ("text", "blackbox", "length"), "hash",
                               scheduler=None if scheduler == "serial" else scheduler, batch_size=int(batch_size))
    seconds = time.perf_counter() - start
    print(json.dumps({"scheduler": scheduler, "trajectories": len(features), "seconds": seconds,
                      "terms": len(features.vocabulary), "peak_mib": peak_mib()}))


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
    parser.add_argument("--skip-shared", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--scale-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        predict_worker(*args.worker)
        return
    if args.scale_worker:
        scale_worker(*args.scale_worker)
        return
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.skip_shared:
            if len(SHARED_FILES) < 10:
                sys.exit(f"the ten shared runs are not in {SHARED}")
            print("1. training on the ten shared runs (every feature group, MiniLM)", flush=True)
            t = train_shared(tmp / "detector", args.n_boot)
            print(f"  {t['trajectories']} trajectories; features cold {t['features_cold']:.1f} s "
                  f"({t['texts_embedded']} texts embedded, {t['texts_per_second_cold']:.0f}/s), with the embeddings "
                  f"cached {t['features_cached']:.1f} s; training {t['train']:.1f} s "
                  f"(protocols {t['seconds'].get('protocols', 0):.1f} s, final {t['seconds'].get('final', 0):.1f} s)")
            print(f"  train with cached embeddings: {t['train_cached_total']:.1f} s "
                  f"({t['train_cached_total'] / TRAIN_TARGET:.2f}× the {TRAIN_TARGET:.0f} s target)", flush=True)
            print("2. predicting a 50-trajectory file in a fresh process", flush=True)
            done = subprocess.run([sys.executable, __file__, "--worker", str(tmp / "detector"), str(PREDICTED),
                                   str(tmp / "predict")], capture_output=True, text=True, check=True)
            p = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"  {p['n']} trajectories: {p['cold']:.1f} s cold (imports, MiniLM's load, extraction into a run "
                  f"folder), {p['cached']:.1f} s with the embeddings cached "
                  f"({p['cold'] / PREDICT_TARGET:.2f}× and {p['cached'] / PREDICT_TARGET:.2f}× the "
                  f"{PREDICT_TARGET:.0f} s target)", flush=True)
        if not args.skip_scale:
            print(f"3. feature extraction of {args.n:,} synthetic trajectories (text, structure + TRACER with hash "
                  "embeddings, length), streamed in batches of 2,000", flush=True)
            plain, streamed, dask = scale(args.n, tmp)
            print(f"  streamed vs the whole file as one batch: {plain['seconds'] / streamed['seconds']:.2f}× the speed, "
                  f"{streamed['peak_mib'] / plain['peak_mib']:.2f}× the peak memory; Dask local:2 vs streamed serially: "
                  f"{streamed['seconds'] / dask['seconds']:.2f}× the speed")


if __name__ == "__main__":
    main()
