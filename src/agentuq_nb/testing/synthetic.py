"""Synthetic τ²-bench results with token log-probs, for tests and benchmarks.

Trajectories alternate assistant/user/tool messages; each generated message carries tokens
with top-k log-probs in one of the three forms the readers accept: ``sidecar`` (agentuq JSONL
via ``raw_data.uq_logprobs``), ``raw`` (OpenAI choice dict in ``raw_data``), ``message``
(message-level ``logprobs.content``). Failures are made more uncertain than successes by
``signal`` so that failure prediction has something to find.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from agentuq_nb.io.atomic import atomic_open, atomic_write_json
from agentuq_nb.io.ingest.sidecars import sidecar_name

FORMS = ("sidecar", "raw", "message")


def _token_logprobs(rng: np.random.Generator, n: int, k: int, shift: float):
    """Chosen and top-k log-probs; the chosen token is the top-1 most of the time."""
    logits = rng.normal(0.0, 2.0 - shift, size=(n, 50))
    logits[:, 0] += 3.0 - shift
    logz = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    lp = logits - logz[:, None]
    top = np.argsort(-lp, axis=1)[:, :k]
    top_lp = np.take_along_axis(lp, top, axis=1)
    chosen_rank = np.where(rng.random(n) < 0.85, 0, rng.integers(0, k, n))
    chosen_lp = top_lp[np.arange(n), chosen_rank]
    return chosen_lp, top, top_lp


def write_synthetic_results(
    out_dir: str | Path,
    num_simulations: int = 10,
    messages_per_simulation: int = 12,
    tokens_per_message: int = 20,
    top_k: int = 5,
    forms: tuple[str, ...] = FORMS,
    domain: str = "synthetic",
    seed: int = 0,
    signal: float = 0.25,
    trials: int = 1,
) -> Path:
    """Write ``out_dir/results.json`` (+ ``out_dir/sidecars/``); returns the results path.

    Simulation i stores its log-probs in form ``forms[i % len(forms)]``; with ``trials`` > 1 it is
    trial ``i % trials`` of task ``i // trials`` (verdicts drawn independently per trial).
    """
    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed)
    sims = []
    vocab = np.array([f"tok{i}" for i in range(50)])
    for s in range(num_simulations):
        form = forms[s % len(forms)]
        failed = bool(rng.random() < 0.5)
        reward = 0.0 if failed else 1.0
        task_id, trial, sim_seed = str(s // trials), s % trials, 1000 + s
        sidecar_rel = f"sidecars/{sidecar_name(domain, task_id, trial, sim_seed)}"
        sidecar_lines: list[str] = []
        messages = [{"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0,
                     "timestamp": f"2025-01-01T00:{s % 60:02d}:00.000000", "raw_data": None}]
        for m in range(1, messages_per_simulation):
            role = ("user", "assistant", "tool", "assistant")[(m - 1) % 4]
            ts = f"2025-01-01T{s // 60 % 24:02d}:{s % 60:02d}:{m:02d}.{m:06d}"
            msg = {"role": role, "content": None, "turn_idx": m, "timestamp": ts, "raw_data": None}
            if role == "tool":
                msg.update(id=f"call_{s}_{m}", content=json.dumps({"ok": True, "step": m}))
                messages.append(msg)
                continue
            shift = signal * (1.0 if failed and role == "assistant" else 0.0)
            chosen, top, top_lp = _token_logprobs(rng, tokens_per_message, top_k, shift)
            tokens = vocab[top[:, 0]]
            msg["content"] = " ".join(tokens)
            if form == "sidecar":
                # every key agentuq's build_token_logprob_rows writes, in its order
                p = np.exp(top_lp)
                mass = p.sum(1)
                entropy = -(p / mass[:, None] * np.log(p / mass[:, None])).sum(1)
                for t in range(tokens_per_message):
                    sidecar_lines.append(json.dumps({
                        "recorded_at": ts, "message_timestamp": ts, "model": "synthetic-llm", "role": role,
                        "turn_idx": None, "token_idx": t, "token": str(tokens[t]),
                        "chosen_logprob": float(chosen[t]), "chosen_prob": float(np.exp(chosen[t])),
                        "topk_tokens": vocab[top[t]].tolist(), "topk_logprobs": top_lp[t].tolist(),
                        "topk_entropy": float(entropy[t]), "topk_mass": float(mass[t]),
                        "domain": domain, "task_id": task_id, "trial": trial, "seed": sim_seed,
                        "request_params": {"temperature": 0.0, "logprobs": True, "top_logprobs": top_k},
                    }))
                msg["raw_data"] = {"uq_logprobs": {"enabled": True, "format": "jsonl", "path": sidecar_rel,
                                                   "num_tokens": tokens_per_message, "schema_version": "uq_logprobs_v1"}}
            else:
                content = [
                    {"token": str(tokens[t]), "logprob": float(chosen[t]),
                     "top_logprobs": [{"token": str(vocab[j]), "logprob": float(lp)} for j, lp in zip(top[t], top_lp[t])]}
                    for t in range(tokens_per_message)
                ]
                if form == "raw":
                    msg["raw_data"] = {"finish_reason": "stop", "index": 0, "logprobs": {"content": content}}
                else:
                    msg["logprobs"] = {"content": content}
            messages.append(msg)
        if sidecar_lines:
            with atomic_open(out_dir / sidecar_rel) as fh:
                fh.write("\n".join(sidecar_lines) + "\n")
        sims.append({
            "id": f"sim-{s}", "task_id": task_id, "trial": trial, "seed": sim_seed, "messages": messages,
            "reward_info": {"reward": reward, "reward_basis": ["DB"]}, "termination_reason": "user_stop",
            "reasoning": None, "errors": None,
        })
    results = {
        "timestamp": "2025-01-01T00:00:00",
        "info": {"environment_info": {"domain_name": domain, "policy": "synthetic"},
                 "agent_info": {"llm": "synthetic-llm"}, "user_info": {"llm": "synthetic-llm"}, "num_trials": trials},
        "tasks": [{"id": str(s)} for s in range(num_simulations)],
        "simulations": sims,
    }
    path = out_dir / "results.json"
    atomic_write_json(path, results, indent=None)
    return path
