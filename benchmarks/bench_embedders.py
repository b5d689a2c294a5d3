"""The black-box signals' embedders compared on the shared real runs: seconds of a first read, and AUROCs before/after.

For each results file (default: the ten shared real runs in ../shared/data/tau2 and ../shared/data/real_runs, none
with log-probs), in fresh processes, one after the other, ``agentuq-nb analyze FILE --embedder E`` for each embedder
(default ``minilm``, the transformer, and ``minilm-static``, its static distillation): each file with an empty
embedding cache of its own (a first read: no text of it embedded before), the static table already made (copied in:
it is made once per machine, by ``make setup``; its one-time cost is printed first). Per file and embedder: wall and
CPU seconds of the whole ``analyze``, and from its ``blackbox.json`` the black-box step's seconds (structure + TRACER:
reading the messages, embedding, the signals; the model's load included) and the embedding's.

Then the AUROCs: every estimator the runs share, pooled over the runs (failures and successes of the same run only,
:mod:`agentuq_nb.evaluation.pooled_auroc`) and length-controlled (run × length stratum), for each embedder, and the
difference of each embedder from the first, paired (the same task-resampled bootstrap draws, tasks resampled within
runs), with its 95 % interval. Estimators the embedder does not touch come out identical.

    python benchmarks/bench_embedders.py [FILE ...] [--embedders minilm minilm-static] [--n-boot 2000] [--workdir DIR]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_analyze import DEFAULT_FILES, SRC, analyze  # the same fresh-process analyze, timed the same way


def paired_table(folders: dict[str, list[Path]], n_boot: int, seed: int = 0):
    """Pooled AUROC / length-controlled AUROC of every shared estimator per embedder, and each embedder's paired
    difference from the first with its 95 % interval."""
    import numpy as np
    import pandas as pd

    from agentuq_nb.evaluation.pooled_auroc import auroc_statistics, design, within_run_task_counts
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.steps.compare_runs import read_run, shared_estimators

    names = list(folders)
    runs = {e: [RunDir.of(p) for p in paths] for e, paths in folders.items()}
    # per run, the estimators it holds under every embedder (structure.user_repetition: only runs with user messages)
    held = []
    for i in range(len(runs[names[0]])):
        found = None
        for e in names:
            candidates, baselines, _ = shared_estimators([runs[e][i]])
            mine = {x.name: x for x in candidates + baselines}
            found = mine if found is None else {k: v for k, v in found.items() if k in mine}
        held.append(found)
    estimators = list(dict.fromkeys(name for found in held for name in found))
    frames = {e: pd.concat([read_run(run, run.path.name, list(found.values()), 1.0)[0]
                            for run, found in zip(runs[e], held)], ignore_index=True) for e in names}
    base = frames[names[0]]
    for e in names[1:]:
        assert (frames[e][["run", "task", "failure", "length_stratum"]].to_numpy() ==
                base[["run", "task", "failure", "length_stratum"]].to_numpy()).all(), "the runs differ"
    d = design(base)
    rows = []
    for est in estimators:
        u = {e: frames[e][est].to_numpy(dtype=float) for e in names}
        both = np.logical_and.reduce([np.isfinite(v) for v in u.values()])
        point = {e: auroc_statistics(d, u[e], both) for e in names}
        diffs = {e: ([], []) for e in names[1:]}
        for _, W in within_run_task_counts(d.run_code, base["task"].to_numpy(), n_boot, seed):
            stats = {e: auroc_statistics(d, u[e], both, W) for e in names}
            for e in names[1:]:
                diffs[e][0].append(stats[e]["pooled_auroc"] - stats[names[0]]["pooled_auroc"])
                diffs[e][1].append(stats[e]["pooled_auroc_lc"] - stats[names[0]]["pooled_auroc_lc"])
        row = {"estimator": est, "runs": int(sum(est in found for found in held))}
        for e in names:
            row[f"auroc {e}"] = float(point[e]["pooled_auroc"][0])
            row[f"auroc_lc {e}"] = float(point[e]["pooled_auroc_lc"][0])
        for e in names[1:]:
            for key, values in zip(("auroc", "auroc_lc"), diffs[e]):
                v = np.concatenate(values)
                v = v[np.isfinite(v)]
                row[f"Δ{key} {e}"] = row[f"{key} {e}"] - row[f"{key} {names[0]}"]
                row[f"Δ{key} {e} ci"] = (np.percentile(v, [2.5, 97.5]).round(3).tolist() if v.size else None)
        rows.append(row)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=DEFAULT_FILES)
    parser.add_argument("--embedders", nargs="+", default=["minilm", "minilm-static"])
    parser.add_argument("--n-boot", type=int, default=2000)
    parser.add_argument("--workdir", type=Path, default=None, help="keep the run folders here (default: a temporary "
                        "folder, removed at the end)")
    parser.add_argument("--compare-only", action="store_true", help="only the AUROC table, of the run folders an "
                        "earlier run left in --workdir")
    args = parser.parse_args()
    if args.compare_only:
        if args.workdir is None:
            sys.exit("--compare-only reads the run folders of --workdir")
        sys.path.insert(0, str(SRC))
        print_table({e: [args.workdir / "runs" / e / f.stem for f in args.files] for e in args.embedders}, args)
        return
    sys.path.insert(0, str(SRC))
    from agentuq_nb.io.static_table import table_path
    from agentuq_nb.uq.static_embedding import load_table, table_identity

    with tempfile.TemporaryDirectory() as scratch:
        work = args.workdir or Path(scratch)
        start = time.perf_counter()
        table_cache = work / "table" / "embeddings.sqlite"
        load_table(table_cache)
        table_file = table_path(table_cache, table_identity())
        print(f"static table made once per machine: {time.perf_counter() - start:.1f} s (in this process, the "
              "transformer's load included)")
        print(f"{'file':<44} {'traj':>4} {'texts':>5}  " + "  ".join(f"{e + ' wall/CPU/signals/embed s':>38}"
                                                                     for e in args.embedders), flush=True)
        folders: dict[str, list[Path]] = {e: [] for e in args.embedders}
        for results in args.files:
            cells, traj, texts = [], "", ""
            for e in args.embedders:
                cache = work / "cache" / e / results.stem / "embeddings.sqlite"
                cache.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(table_file, table_path(cache, table_identity()))
                out = work / "runs" / e / results.stem
                row = analyze(results, out, cache, SRC, e)
                if row["code"]:
                    cells.append(f"{'failed: ' + row.get('error', '')[:30]:>38}")
                    continue
                folders[e].append(out)
                traj = json.loads((out / "blackbox.json").read_text())["trajectories"]
                texts = row.get("texts", "")
                cells.append(f"{row['wall']:>9.1f} /{row['cpu']:>6.1f} /{row['signals']:>6.2f} /{row['embed']:>6.2f}")
            print(f"{results.stem[:44]:<44} {traj:>4} {texts:>5}  " + "  ".join(cells), flush=True)
        if all(len(v) == len(args.files) for v in folders.values()) and len(args.embedders) > 1:
            print_table(folders, args)


def print_table(folders: dict[str, list[Path]], args) -> None:
    import pandas as pd

    table = paired_table(folders, args.n_boot)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    print(f"\npooled over the runs holding each estimator (runs); Δ = embedder − {args.embedders[0]}, paired, "
          f"{args.n_boot} task resamples within runs")
    print(table.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
