"""What a few labelled trajectories of a new run would buy the detector's probabilities (issue 48, point 1).

Reads a trained detector folder (``agentuq-nb train-detector`` or the detector study's ``figures/detector/detector``),
whose leave-one-run-out judgement kept, per held-out run, each trajectory's probability calibrated on the *other*
runs (``label_shift_rows.csv``: ``calibrated``) and the rate estimated without the run's labels
(``label_shift.csv``: ``estimated_rate``). For each run and each ``k``, ``--draws`` times: ``k`` of its trajectories
drawn at random are labelled; the run's rate is estimated from them - alone (``m = 0``), or as the posterior mean of
a beta prior of ``m`` pseudo-trajectories at the unlabelled estimate - the probabilities are centred on that rate
(one log-odds shift, as ``predict`` centres them) and the Brier score on the *other* ``n - k`` trajectories is set
against their base rate's ȳ(1 - ȳ) (the oracle constant: it knows their true rate). Printed per ``k`` and ``m``: on
how many runs the mean Brier over draws is ≤ that oracle, the share of draws in which it is, and the rate's mean
absolute error; then the ceiling: centred on each run's true rate (``k = n``).

A run's Brier ≤ ȳ(1 - ȳ) needs what the ranking adds (resolution) to exceed the rate's squared error plus the
miscalibration of the slope: a constant at rate c scores ȳ(1 - ȳ) + (c - ȳ)², never below.

    python benchmarks/bench_labelled_rate.py DETECTOR_DIR [--k 5 10 20] [--m 0 10] [--draws 500]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from agentuq_nb.evaluation.label_shift import center_probabilities


def labelled_sample_table(rows: pd.DataFrame, unlabelled_rate: dict, ks, ms, draws: int, seed: int = 0
                          ) -> pd.DataFrame:
    """Per (run, k, m): mean Brier on the unlabelled rest, mean oracle, share of draws at or below the oracle, mean
    |estimated - true rate|."""
    rng = np.random.default_rng(seed)
    out = []
    for run, frame in rows.groupby("run", sort=True):
        p = frame["calibrated"].to_numpy(dtype=float)
        y = frame["failure"].to_numpy(dtype=bool)
        n = len(y)
        for k in ks:
            if k >= n:
                continue
            picks = [rng.choice(n, size=k, replace=False) for _ in range(draws)]
            for m in ms:
                briers, oracles, errors = [], [], []
                for pick in picks:
                    rest = np.ones(n, dtype=bool)
                    rest[pick] = False
                    rate = (y[pick].sum() + m * unlabelled_rate[run]) / (k + m)
                    centred = center_probabilities(p, rate)[0]
                    truth = y[rest].mean()
                    briers.append(np.mean((centred[rest] - y[rest]) ** 2))
                    oracles.append(truth * (1 - truth))
                    errors.append(abs(rate - y.mean()))
                briers, oracles = np.asarray(briers), np.asarray(oracles)
                out.append({"run": run, "n": n, "k": k, "m": m, "brier": briers.mean(), "oracle": oracles.mean(),
                            "share_at_or_below": float(np.mean(briers <= oracles + 1e-12)),
                            "rate_error": float(np.mean(errors))})
        truth = y.mean()
        centred = center_probabilities(p, truth)[0]
        out.append({"run": run, "n": n, "k": n, "m": 0, "brier": float(np.mean((centred - y) ** 2)),
                    "oracle": truth * (1 - truth),
                    "share_at_or_below": float(np.mean((centred - y) ** 2) <= truth * (1 - truth) + 1e-12),
                    "rate_error": 0.0})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("detector_dir", type=Path)
    parser.add_argument("--k", type=int, nargs="+", default=[5, 10, 20])
    parser.add_argument("--m", type=float, nargs="+", default=[0.0, 10.0])
    parser.add_argument("--draws", type=int, default=500)
    args = parser.parse_args()
    rows = pd.read_csv(args.detector_dir / "label_shift_rows.csv")
    per_run = pd.read_csv(args.detector_dir / "label_shift.csv")
    unlabelled = dict(zip(per_run["run"], per_run["estimated_rate"]))
    table = labelled_sample_table(rows, unlabelled, args.k, args.m, args.draws)
    n_runs = table["run"].nunique()
    print(f"{n_runs} held-out runs, {args.draws} draws each; Brier on the unlabelled rest vs its base rate ȳ(1 - ȳ)")
    print(f"{'k labelled':>10} {'m':>5} {'runs ≤ oracle (mean Brier)':>27} {'draws ≤ oracle':>15} {'rate MAE':>9}")
    for (k, m), g in table[table["k"] < table["n"]].groupby(["k", "m"]):
        print(f"{k:>10} {m:>5g} {int((g['brier'] <= g['oracle'] + 1e-12).sum()):>20} of {len(g):<4}"
              f" {g['share_at_or_below'].mean():>15.2f} {g['rate_error'].mean():>9.3f}")
    ceiling = table[table["k"] == table["n"]]
    print(f"{'all (true rate)':>16} {int((ceiling['brier'] <= ceiling['oracle'] + 1e-12).sum()):>20} of {len(ceiling)}")
    unl = per_run.assign(ok=per_run["brier_adapted"] <= per_run["brier_base_rate"] + 1e-12)
    print(f"{'none (unlabelled)':>16} {int(unl['ok'].sum()):>20} of {len(unl)}"
          f"   rate MAE {float((unl['estimated_rate'] - unl['true_rate']).abs().mean()):.3f}")
    print("\nper run (k = 10, m = 0 and the ceiling):")
    show = table[((table["k"] == 10) & (table["m"] == 0)) | (table["k"] == table["n"])]
    print(show.pivot_table(index="run", columns="k", values=["brier", "oracle", "share_at_or_below"])
          .round(3).to_string())


if __name__ == "__main__":
    main()
