"""The plain approach that ``bench_pipeline.py`` measures ours against: per-row Python, dict loops.

Written the way the AgentUQ reference scripts work (``json.loads`` per sidecar line, ``math``
per token, dicts keyed by tuples, ``json.dumps`` per token row, ``csv`` for the summaries), with
nothing from this package. Two variants:

* ``full``: the same outputs as ``extract`` + ``aggregate`` + ``evaluate`` — a token table with
  the per-token metrics (JSONL, as agentuq's extraction writes it), turn and trajectory
  summaries with a ``combined`` role (CSV), and AUROC. One pass: each sidecar row is parsed once.
* ``summaries``: AgentUQ's analysis loop alone (sidecars → summaries in memory → AUROC); it
  writes no token table and no summaries, so it does less than ours does.

Usage: ``python benchmarks/plain_pipeline.py full|summaries RESULTS.json OUT_DIR``
"""
from __future__ import annotations

import csv
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

from sklearn.metrics import roc_auc_score


def new_accumulator() -> dict:
    return {"n": 0, "nll": 0.0, "ent": 0.0, "nent": 0.0, "min_p": None}


def update(acc: dict, nll: float, ent: float, nent: float, p: float) -> None:
    acc["n"] += 1
    acc["nll"] += nll
    acc["ent"] += ent
    acc["nent"] += nent
    if acc["min_p"] is None or p < acc["min_p"]:
        acc["min_p"] = p


def token_metrics(row: dict) -> tuple[float, float, float, float]:
    """chosen_prob, renormalized top-k entropy, top-k mass, normalized entropy (agentuq's formulas)."""
    ps = [math.exp(lp) for lp in row["topk_logprobs"]]
    mass = sum(ps)
    entropy = -sum(p / mass * math.log(max(p / mass, 1e-12)) for p in ps)
    normalized = -sum(p * math.log(p) for p in ps) / math.log(len(ps))
    return math.exp(row["chosen_logprob"]), entropy, mass, normalized


def write_summary(path: Path, keys: list[str], table: dict) -> None:
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(keys + ["num_tokens", "nll", "avg_token_nll", "mean_topk_entropy", "mean_normalized_entropy",
                             "min_chosen_prob"])
        for key, acc in sorted(table.items()):
            n = acc["n"]
            out.writerow(list(key) + [n, acc["nll"], acc["nll"] / n, acc["ent"] / n, acc["nent"] / n, acc["min_p"]])


def run(mode: str, results_path: Path, out: Path) -> float:
    out.mkdir(parents=True, exist_ok=True)
    data = json.loads(results_path.read_text())
    turn, traj = defaultdict(new_accumulator), defaultdict(new_accumulator)
    rewards = {}
    token_table = open(out / "tokens.jsonl", "w") if mode == "full" else None
    for sim in data["simulations"]:
        key = (sim["task_id"], sim["trial"], sim["seed"])
        rewards[key] = sim["reward_info"]["reward"]
        where = {m["timestamp"]: (i, m.get("turn_idx", i)) for i, m in enumerate(sim["messages"])}
        paths = {m["raw_data"]["uq_logprobs"]["path"] for m in sim["messages"]
                 if (m.get("raw_data") or {}).get("uq_logprobs")}
        for rel in sorted(paths):
            with open(results_path.parent / rel) as fh:
                for line in fh:
                    row = json.loads(line)
                    p, entropy, mass, normalized = token_metrics(row)
                    message_idx, turn_idx = where[row["message_timestamp"]]
                    nll = -row["chosen_logprob"]
                    if token_table is not None:
                        row.update(turn_idx=turn_idx, message_idx=message_idx, chosen_prob=p, topk_entropy=entropy,
                                   topk_mass=mass, normalized_entropy=normalized)
                        token_table.write(json.dumps(row) + "\n")
                    update(turn[key + (row["role"], turn_idx)], nll, entropy, normalized, p)
                    update(traj[key + (row["role"],)], nll, entropy, normalized, p)
    if token_table is not None:
        token_table.close()
        by_trajectory = defaultdict(list)
        for k, acc in list(traj.items()):
            by_trajectory[k[:3]].append(acc)
        for k, accs in by_trajectory.items():
            if len(accs) > 1:  # agentuq's "combined" role
                combined = new_accumulator()
                for acc in accs:
                    for field in ("n", "nll", "ent", "nent"):
                        combined[field] += acc[field]
                    combined["min_p"] = acc["min_p"] if combined["min_p"] is None else min(combined["min_p"], acc["min_p"])
                traj[k + ("combined",)] = combined
        write_summary(out / "turn_summary.csv", ["task_id", "trial", "seed", "role", "turn_idx"], turn)
        write_summary(out / "trajectory_summary.csv", ["task_id", "trial", "seed", "role"], traj)
    keys = sorted(rewards)
    uncertainty = [traj[k + ("assistant",)]["nll"] / traj[k + ("assistant",)]["n"] for k in keys]
    return roc_auc_score([rewards[k] < 1.0 for k in keys], uncertainty)


if __name__ == "__main__":
    print(run(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
