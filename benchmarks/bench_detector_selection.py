"""Each protocol's detector against its own best baseline on the ten shared runs (issue 48, point 2).

For each protocol of ``train-detector`` (:mod:`agentuq_nb.steps.train_detector`), every fold's model chosen inside its
training rows by that protocol's own kind of split (:func:`~agentuq_nb.evaluation.detector_selection.select_detector`),
its held-out scores compared by the pooled within-run AUROC with the protocol's best baseline - the best length
baseline (chosen on these data, which favours it) everywhere, and the task prior (the task's failure rate in the
other runs) where tasks recur between training and scored rows (leave-one-run-out; on the rows it scores) - with the
paired bootstrap interval of the difference (tasks resampled within runs). The target: every protocol's AUROC ≥ its
best baseline - 0.01.

The features (every group, ``--embedder``, the study's default the static MiniLM table) are extracted once and kept
in ``--keep`` (a pickle of this machine's own making, read back only from there), so the code before and after a
change is judged on the same features. Prints one line per protocol and writes ``--out`` (JSON) when asked.

    python benchmarks/bench_detector_selection.py [--keep DIR] [--protocols P ...] [--n-boot 200] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import time
import warnings
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))
TOLERANCE = 0.01


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def features_of(embedder: str, keep: Path | None):
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.uq.detector_features import GROUPS

    cache = None if keep is None else keep / f"features-{embedder}.pkl"
    if cache is not None and cache.exists():
        with cache.open("rb") as f:
            return pickle.load(f)
    features = corpus_features(resolve_sources(SHARED_FILES), GROUPS, embedder)
    if cache is not None:
        keep.mkdir(parents=True, exist_ok=True)
        with cache.open("wb") as f:
            pickle.dump(features, f)
    return features


def best_baseline(protocol: str, row: dict) -> tuple[str, float, float, float, float]:
    """``(name, baseline AUROC, difference, lo, hi)`` of the protocol's best baseline: length, or where tasks recur
    (not the task-disjoint protocols) the task prior on the rows it scores when it is higher."""
    from agentuq_nb.evaluation.detector_protocols import TASK_DISJOINT

    best = (f"length ({row['length_baseline']})", row["length_auroc"], row["diff_vs_length"],
            row["diff_vs_length_lo"], row["diff_vs_length_hi"])
    if protocol not in TASK_DISJOINT and row.get("prior_auroc") is not None and row["prior_auroc"] > row["length_auroc"]:
        best = (f"task prior ({row['prior_n']} rows)", row["prior_auroc"], row["diff_vs_prior"],
                row["diff_vs_prior_lo"], row["diff_vs_prior_hi"])
    return best


def main() -> None:
    from agentuq_nb.evaluation.defaults import DETECTOR_PROTOCOLS
    from agentuq_nb.evaluation.detector_training import (
        SelectionJobs,
        evaluate_protocol,
        folds_of,
        for_fitting,
        labelled_rows,
    )
    from agentuq_nb.steps.train_detector import TrainDetectorConfig

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, default=None, help="folder that keeps the extracted features")
    parser.add_argument("--embedder", default="minilm-static")
    parser.add_argument("--protocols", nargs="*", default=list(DETECTOR_PROTOCOLS))
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2, help="selection worker processes")
    parser.add_argument("--out", type=Path, default=None, help="JSON file of the protocols' rows")
    parser.add_argument("--final", action="store_true", help="also choose the final model (all runs, whole-run folds)")
    args = parser.parse_args()

    tick, cpu = time.perf_counter(), cpu_seconds()
    features = features_of(args.embedder, args.keep)
    print(f"features: {len(features)} trajectories, {time.perf_counter() - tick:.1f} s wall, "
          f"{cpu_seconds() - cpu:.1f} s CPU", flush=True)
    config = TrainDetectorConfig(inputs=SHARED_FILES, out=Path("unused"), embedder=args.embedder, n_boot=args.n_boot)
    at, failure = labelled_rows(features, config.failure_threshold)
    labelled = features.take(at)
    detector = config.training().detector
    rows = {}
    for protocol in args.protocols:
        tick, cpu = time.perf_counter(), cpu_seconds()
        with warnings.catch_warnings(), SelectionJobs(for_fitting(labelled), failure, detector, args.threads) as jobs:
            warnings.simplefilter("ignore", RuntimeWarning)
            folds = folds_of(protocol, labelled, failure, config.n_splits, config.seed)
            run = evaluate_protocol(protocol, labelled, failure, folds, detector, config.n_boot, config.seed, jobs=jobs)
        row = {k: (v.item() if hasattr(v, "item") else v) for k, v in run.row.items()}
        name, base, diff, lo, hi = best_baseline(protocol, row)
        row.update(best_baseline=name, best_baseline_auroc=base, diff_vs_best=diff, diff_vs_best_lo=lo,
                   diff_vs_best_hi=hi, target_met=bool(diff >= -TOLERANCE),
                   seconds=time.perf_counter() - tick, cpu_seconds=cpu_seconds() - cpu)
        rows[protocol] = row
        on = f" (on its rows the detector {row['auroc_on_prior_rows']:.3f})" if "prior" in name else ""
        print(f"{protocol}: {row['auroc']:.3f} [{row['auroc_lo']:.3f}, {row['auroc_hi']:.3f}] vs {name} {base:.3f}"
              f"{on}: {diff:+.3f} [{lo:+.3f}, {hi:+.3f}] -> {'met' if row['target_met'] else 'NOT met'}; "
              f"same-model {row.get('same_model_auroc', float('nan')):.3f} vs "
              f"{row.get('same_model_length_auroc', float('nan')):.3f}; folds chose {row.get('selected_folds')}; "
              f"{row['seconds']:.0f} s wall, {row['cpu_seconds']:.0f} s CPU, load {os.getloadavg()[0]:.1f}",
              flush=True)
    if args.final:  # the model predict applies: chosen on all the runs by inner folds of whole runs
        from agentuq_nb.evaluation.detector_selection import FINAL_KIND, select_detector

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            final = select_detector(labelled, failure, detector, FINAL_KIND)
        rows["final"] = {"selected": final.candidate, **final.selection}
        print(f"final model: {final.candidate} ({final.selection.get('why')})", flush=True)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
