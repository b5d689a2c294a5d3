"""Label-shift adaptation of the detector's probabilities, judged by leave-one-run-out on the ten shared runs.

Trains a detector on the ten shared runs (``--embedder``, default the static MiniLM table: cheap) and prints the
card's label-shift judgement: per held-out run its true failure rate, the rate estimated from its unlabelled
probabilities (MAP-EM with the prior strength κ chosen on the other runs, with the 95 % interval, tasks resampled;
plain EM and soft BBSE beside it), and the Brier score of the
probabilities before and after adaptation against the base rate's ȳ(1 - ȳ) (what a constant equal to the run's true
rate scores) and against the training rate as a constant; then the summary (runs at or below the base rate's Brier,
mean absolute error of the rate) and the pooled reliability diagram with bootstrap bands and bin counts (``--figure``).

    python benchmarks/bench_label_shift.py [--embedder minilm-static] [--n-boot 1000] [--figure PATH.png]
"""
from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import pandas as pd

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SHARED_FILES = sorted((SHARED / "tau2").glob("*.json")) + sorted((SHARED / "real_runs").glob("*.json"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", default="minilm-static")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--figure", type=Path, default=None, help="where to draw the reliability diagram (PNG)")
    args = parser.parse_args()
    if len(SHARED_FILES) < 2:
        raise SystemExit(f"the shared runs are not in {SHARED}")
    from agentuq_nb.figures.calibration import reliability_diagram
    from agentuq_nb.steps.train_detector import train_detector

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trained = train_detector(SHARED_FILES, Path(tmp) / "det", embedder=args.embedder, n_boot=args.n_boot,
                                 protocols=["leave_one_run_out"])
        seconds = time.perf_counter() - start
    shift = trained.card["calibration"]["label_shift"]
    table = pd.DataFrame(shift["runs"])
    print(f"detector of {len(SHARED_FILES)} shared runs ({trained.card['n']} trajectories), embedder {args.embedder}, "
          f"{seconds:.0f} s; each run's probabilities from a model and a Platt map that never saw it")
    shown = table[["run", "n", "true_rate", "estimated_rate", "estimated_rate_lo", "estimated_rate_hi",
                   "prior_strength", "em_rate", "bbse_rate", "mean_calibrated", "brier_adapted", "brier_calibrated",
                   "brier_base_rate", "brier_training_rate", "ece_adapted", "ece_calibrated"]]
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    s = shift["summary"]
    print(f"prior strength predict uses (chosen on all ten runs): {shift['prior_strength']} pseudo-trajectories "
          "(None: not adapted)")
    print(f"adapted Brier <= the base rate's on {s['runs_brier_adapted_le_base_rate']} of {s['n_runs']} runs "
          f"(unadapted: {s['runs_brier_calibrated_le_base_rate']}); failure-rate MAE: MAP-EM {s['rate_mae']:.3f}, "
          f"plain EM {s['rate_mae_plain_em']:.3f}, soft BBSE {s['rate_mae_bbse']:.3f}, unadapted mean probability "
          f"{s['rate_mae_unadapted']:.3f}, "
          f"training rate {s['rate_mae_training_rate']:.3f}; interval covers the truth on "
          f"{s['interval_covers_true_rate']} of {s['n_runs']}; mean ECE {s['mean_ece_adapted']:.3f} adapted vs "
          f"{s['mean_ece_calibrated']:.3f}")
    if args.figure is not None:
        bins = {f"{name} (Platt on other runs{', then EM' if name == 'adapted' else ''})": pd.DataFrame(rows)
                for name, rows in shift["reliability"].items()}
        fig = reliability_diagram(bins, title="Detector probabilities on held-out runs (leave-one-run-out)")
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=150)
        print(f"reliability diagram (bootstrap bands, bin counts below) → {args.figure}")


if __name__ == "__main__":
    main()
