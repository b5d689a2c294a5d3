"""Label-shift adaptation of the detector's probabilities, judged by leave-one-run-out on the ten shared runs.

Trains a detector on the ten shared runs (``--embedder``, default the static MiniLM table: cheap) and prints the
card's label-shift judgement: per held-out run its true failure rate, the rate estimated from its unlabelled
probabilities (MAP-EM with the prior strength κ chosen on the other runs; κ = ∞: the training rate, its interval the
spread of the other runs' rates), and the Brier score of the probabilities *before* (the Platt map's output, as
``predict`` wrote it until #48: the run's mean log-odds left where the within-run model put it) and *after* (centred
on the run's estimated rate by one log-odds shift), against the constant training rate's (what knowing nothing of the
run scores), the base rate's ȳ(1 - ȳ) (an oracle: it knows the run's true rate) and the probabilities centred on the
true rate (the oracle given the detector's ranking); then the summary and the pooled reliability diagram with
bootstrap bands and bin counts (``--figure``). Where κ = ∞ the rate is the training rate moved by what the other
training runs of the run's agent model failed (partially pooled, ``evaluation/run_rate.py``): per run its Brier beside
the one centred on the training rate alone, with the 95 % bootstrap interval of the change (the run's trajectories
resampled). Then what else is known about a run without its labels, each left out in turn: the training rate, the
agent model's rate, the agent's rate with the task prior (each trajectory's task's failure rate in the other runs)
on top. Last, whether a score fitted *pooled* across runs (no run intercepts; the structure signals and length, whose
level differs between runs) tells a held-out run's rate: its mean probability, EM and soft BBSE on it, against the
training rate.

``--cache PATH.pkl`` keeps the trained detector's leave-one-run-out log-odds, labels, runs and card (written when
absent, read when present: the judgement again without training again).

    python benchmarks/bench_label_shift.py [--embedder minilm-static] [--n-boot 1000] [--figure PATH.png] [--cache P]
"""
from __future__ import annotations

import argparse
import pickle
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
    parser.add_argument("--cache", type=Path, default=None, help="the leave-one-run-out log-odds kept here (pickle)")
    args = parser.parse_args()
    if len(SHARED_FILES) < 2:
        raise SystemExit(f"the shared runs are not in {SHARED}")
    from agentuq_nb.evaluation.detector_training import judge_label_shift
    from agentuq_nb.figures.calibration import reliability_diagram

    warnings.simplefilter("ignore")
    card, oof, seconds = trained_detector(args)
    agents = {r["name"]: (r.get("models") or {}).get("assistant") for r in card["training_runs"]}
    tasks = (oof["domain"].astype(str) + "\x1f" + oof["task_id"].astype(str)).to_numpy(dtype=object)
    start = time.perf_counter()
    shift, rows = judge_label_shift(oof["log_odds[leave_one_run_out]"].to_numpy(dtype=float),
                                 oof["failure"].to_numpy(dtype=bool), oof["run"].to_numpy(dtype=object), tasks,
                                 args.n_boot, card["seed"], agents)
    judged = time.perf_counter() - start
    table = pd.DataFrame(shift["runs"])
    print(f"detector of {len(SHARED_FILES)} shared runs ({card['n']} trajectories), embedder {args.embedder}, "
          f"trained in {seconds:.0f} s (cached: 0), judged in {judged:.1f} s; each run's probabilities from a model "
          "and a Platt map that never saw it")
    shown = table[["run", "n", "true_rate", "estimated_rate", "estimated_rate_lo", "estimated_rate_hi",
                   "prior_strength", "agent_runs", "em_rate", "bbse_rate", "mean_calibrated", "brier_calibrated",
                   "brier_training_rate_centred", "brier_adapted", "brier_change_lo", "brier_change_hi",
                   "brier_training_rate", "brier_base_rate", "brier_true_rate_centred", "ece_calibrated",
                   "ece_adapted"]].rename(columns={"brier_calibrated": "brier_before", "brier_adapted": "brier_after",
                                                   "brier_training_rate_centred": "brier_train_centred",
                                                   "ece_calibrated": "ece_before", "ece_adapted": "ece_after",
                                                   "brier_true_rate_centred": "brier_oracle_centred"})
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    s = shift["summary"]
    print(f"prior strength predict uses (chosen on all ten runs): {shift['prior_strength']} pseudo-trajectories "
          "(None: ∞, the training rate)")
    print(f"Brier <= the base rate's (oracle) on {s['runs_brier_adapted_le_base_rate']} of {s['n_runs']} runs after, "
          f"{s['runs_brier_calibrated_le_base_rate']} before; <= the constant training rate's on "
          f"{s['runs_brier_adapted_le_training_rate']} after; mean Brier after {s['mean_brier_adapted']:.3f}, before "
          f"{s['mean_brier_calibrated']:.3f}, constant training rate {s['mean_brier_training_rate']:.3f}, base rate "
          f"(oracle) {s['mean_brier_base_rate']:.3f}, centred on the true rate (oracle) "
          f"{s['mean_brier_true_rate_centred']:.3f}")
    print(f"failure-rate MAE: estimate {s['rate_mae']:.3f}, plain EM {s['rate_mae_plain_em']:.3f}, soft BBSE "
          f"{s['rate_mae_bbse']:.3f}, the probabilities' mean before {s['rate_mae_unadapted']:.3f}, training rate "
          f"{s['rate_mae_training_rate']:.3f}; interval holds the truth on {s['interval_covers_true_rate']} of "
          f"{s['n_runs']}; mean ECE after {s['mean_ece_adapted']:.3f}, before {s['mean_ece_calibrated']:.3f}")
    print(f"the agent model moved the rate of {s['runs_agent_informed']} of {s['n_runs']} runs: mean Brier "
          f"{s['mean_brier_adapted']:.4f} against {s['mean_brier_training_rate_centred']:.4f} centred on the training "
          f"rate alone; worse beyond the run's own noise (95 % bootstrap of the change) on "
          f"{s['runs_brier_worse_beyond_noise']}, better on {s['runs_brier_better_beyond_noise']}")
    names = {"calibrated": "before (Platt, other runs)", "adapted": "after (centred on its rate)"}
    bins = {names.get(name, name): pd.DataFrame(rows) for name, rows in shift["reliability"].items()}
    for name, table in bins.items():
        print(f"\npooled reliability bins, {name}: equal-mass bins, 95 % bootstrap band of each bin's failure rate")
        print(table[["count", "mean_prob", "failure_rate", "failure_rate_lo", "failure_rate_hi"]].to_string(
            index=False, float_format=lambda x: f"{x:.3f}"))
    if args.figure is not None:
        # counts in the legend (range) and above: written beside ten bins of two series they overlap
        fig = reliability_diagram(bins, title="Detector probabilities on held-out runs (leave-one-run-out)",
                                  annotate_counts=False)
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=150)
        print(f"reliability diagram (bootstrap bands, bin counts in the legend) → {args.figure}")
    oracle_windows(rows, pd.DataFrame(shift["runs"]))
    known_rates(card, oof)
    pooled_rates()


def oracle_windows(rows: pd.DataFrame, table: pd.DataFrame) -> None:
    """Per run: the rates on which centring its held-out probabilities scores a Brier at most the base rate's
    ȳ(1 - ȳ) (a grid of 0.005-0.995 by 0.001) - how close to the truth a rate estimated without labels must come."""
    import numpy as np

    from agentuq_nb.evaluation.label_shift import center_probabilities

    grid = np.linspace(0.005, 0.995, 991)
    out = []
    for run, part in rows.groupby("run", sort=False):
        p, y = part["calibrated"].to_numpy(dtype=float), part["failure"].to_numpy(dtype=float)
        reach = [c for c in grid if np.mean((center_probabilities(p, c)[0] - y) ** 2) <= y.mean() * (1 - y.mean())]
        row = table.set_index("run").loc[run]
        out.append({"run": run, "true_rate": y.mean(), "lowest": min(reach) if reach else np.nan,
                    "highest": max(reach) if reach else np.nan, "estimated_rate": row["estimated_rate"],
                    "training_rate": row["training_rate"]})
    print("\nthe rates whose centring reaches the base rate's Brier (oracle), per run (NaN: none does):")
    print(pd.DataFrame(out).to_string(index=False, float_format=lambda x: f"{x:.3f}"))


def trained_detector(args) -> tuple[dict, pd.DataFrame, float]:
    """The card and out-of-fold table of a detector of the shared runs (``--cache``: read, or trained and kept)."""
    if args.cache is not None and args.cache.exists():
        kept = pickle.loads(args.cache.read_bytes())
        if kept["embedder"] == args.embedder and kept["files"] == [str(p) for p in SHARED_FILES]:
            return kept["card"], kept["oof"], 0.0
    from agentuq_nb.steps.train_detector import train_detector

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        trained = train_detector(SHARED_FILES, Path(tmp) / "det", embedder=args.embedder, n_boot=args.n_boot,
                                 protocols=["leave_one_run_out"])
        seconds = time.perf_counter() - start
    if args.cache is not None:
        args.cache.write_bytes(pickle.dumps({"embedder": args.embedder, "files": [str(p) for p in SHARED_FILES],
                                             "card": trained.card, "oof": trained.oof}))
    return trained.card, trained.oof, seconds


def known_rates(card: dict, oof: pd.DataFrame) -> None:
    """Each run left out: its rate from what is known about it without its labels - the training rate, the agent
    model's (evaluation/run_rate.py), and the agent's with each trajectory's task prior (its task's failure rate in the
    other runs, 2 pseudo-trajectories at the training rate; the training rate for a task they lack) on top."""
    import numpy as np

    from agentuq_nb.evaluation.run_rate import agent_rate

    agents = {r["name"]: (r.get("models") or {}).get("assistant") for r in card["training_runs"]}
    frame = oof.assign(task=oof["domain"].astype(str) + "/" + oof["task_id"].astype(str),
                       y=oof["failure"].astype(float))
    out = []
    for run in dict.fromkeys(frame["run"]):
        mine, other = frame[frame["run"] == run], frame[frame["run"] != run]
        counts = other.groupby("run", sort=False)["y"].agg(["sum", "size"])
        training = float(other["y"].mean())
        est = agent_rate(counts["sum"], counts["size"], [agents.get(r) for r in counts.index], agents.get(run))
        tasks = other.groupby("task")["y"].agg(["sum", "size"])
        prior = ((tasks["sum"] + 2 * training) / (tasks["size"] + 2)).reindex(mine["task"]).fillna(training)
        logit = np.log(prior.to_numpy()) - np.log1p(-prior.to_numpy())
        out.append({"run": run, "agent": agents.get(run), "agent_runs": est.agent_runs, "true_rate": mine["y"].mean(),
                    "training_rate": training, "agent_rate": est.rate,
                    "task_prior_mean": float(prior.mean()),
                    "agent_and_task_prior": float(np.mean(1 / (1 + np.exp(-(logit + est.agent_shift)))))})
    table = pd.DataFrame(out)
    print("\nwhat is known about a held-out run without its labels - the rate each gives it:")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("failure-rate MAE: " + ", ".join(f"{c} {(table[c] - table['true_rate']).abs().mean():.3f}" for c in
                                           ("training_rate", "agent_rate", "task_prior_mean", "agent_and_task_prior")))


def pooled_rates() -> None:
    """A score fitted pooled across the other runs (no run intercepts) on the structure signals and length: does its
    level tell a held-out run's failure rate better than the training rate?"""
    from agentuq_nb.evaluation.detector_inputs import corpus_features, resolve_sources
    from agentuq_nb.evaluation.label_shift import leave_one_run_out_pooled_rates

    features = corpus_features(resolve_sources(SHARED_FILES), ["blackbox", "length"], "none")
    y = features.index["reward"].to_numpy(dtype=float) < 1
    table = leave_one_run_out_pooled_rates(features.dense, y, features.index["run"].to_numpy(dtype=object))
    print("\na pooled logistic model (structure signals + length, C = 0.1, fitted on the other nine runs) - the rate "
          "it gives each held-out run:")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    mae = {name: float((table[name] - table["true_rate"]).abs().mean())
           for name in ("training_rate", "pooled_mean", "pooled_em", "pooled_bbse")}
    print("failure-rate MAE: " + ", ".join(f"{k} {v:.3f}" for k, v in mae.items()))


if __name__ == "__main__":
    main()
