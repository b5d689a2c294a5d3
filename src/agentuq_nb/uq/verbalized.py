"""Verbalized confidence: ask the agent's model how likely its response/action is correct.

After each agent turn (``mode="per_turn"``) or once at the end of the conversation
(``mode="final"``), the conversation so far is shown to the agent's model, followed by a
question asking for the probability that its last response or action (or, at the end, the way
it handled the whole request) was correct. The answer is parsed robustly: a number in [0, 1],
a percentage ("85%"), or a number in (1, 100] read as a percentage; anything else is recorded
as missing and counted. The trajectory score is the mean over turns. ``verbalized_confidence``
is a *confidence* (higher = more likely success), so failure prediction inverts it.
"""
from __future__ import annotations

import re
from itertools import islice
from pathlib import Path

import pandas as pd

from agentuq_nb.io.ingest.results import iter_simulations, read_header
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Results
from agentuq_nb.records.config import EMBEDDED_MODEL
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.extraction import results_input
from agentuq_nb.uq.observation import agent_system_prompt, conversation

QUESTION = {
    "per_turn": "Stop the conversation for a moment. How likely is it that your last response or action above "
                "was correct and followed the policy? Answer with a probability between 0 and 1 only.",
    "final": "The conversation is over. How likely is it that you handled the customer's request correctly "
             "and followed the policy? Answer with a probability between 0 and 1 only.",
}
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%|percent)?", re.IGNORECASE)


def parse_confidence(text: str | None) -> float | None:
    """The first probability in ``text``: 0.8, .8, 80%, 80 percent, or 80 (read as a percentage)."""
    for match in _NUMBER.finditer(text or ""):
        value = float(match.group(1))
        if match.group(2) or 1.0 < value <= 100.0:
            value /= 100.0
        if 0.0 <= value <= 1.0:
            return value
    return None


def _ask(history: list[dict], system: str, mode: str, model: str, max_tokens: int) -> tuple[str, float | None]:
    from agentuq_nb import llm

    prompt = [{"role": "system", "content": system}, *history, {"role": "user", "content": QUESTION[mode]}]
    answer = llm.generate(prompt, model=model, max_tokens=max_tokens, temperature=0.0).message.get("content") or ""
    return answer, parse_confidence(answer)


def verbalized_confidence(run_dir: str | Path | RunDir, results: str | Path | None = None, model: str | None = None,
                          mode: str = "per_turn", max_tokens: int = 12, progress: bool = True,
                          limit: int | None = None) -> pd.DataFrame:
    """Per-turn answers → ``RUN_DIR/verbalized_confidence_turns.csv``; per trajectory →
    ``RUN_DIR/verbalized_confidence.csv`` (mean over turns, counts of missing answers), one commit.

    ``limit`` asks about the first N simulations only (a quick look at a large run)."""
    if mode not in QUESTION:
        raise ValueError(f"mode must be one of {sorted(QUESTION)}")
    run = RunDir.of(run_dir)
    model = model or EMBEDDED_MODEL
    from agentuq_nb import llm

    llm.check_model(model)
    with run.lock("verbalized-confidence"):  # the results it reads cannot be republished meanwhile
        results_path = Path(results) if results else run.results_path()
        turn_table = _ask_all(results_path, model, mode, max_tokens, progress, limit)
        per_traj = turn_table.groupby(TRAJECTORY_KEYS, dropna=False, sort=False).agg(
            verbalized_confidence=("confidence", "mean"), num_asked=("confidence", "size"),
            num_unparsed=("confidence", lambda s: int(s.isna().sum())), reward=("reward", "first"),
        ).reset_index()
        with run.commit("verbalized-confidence") as commit:
            based_on = results_input(run, results_path)  # the answers depend on the results, not on the token tables
            commit.write_with("verbalized_confidence_turns", lambda p: turn_table.to_csv(p, index=False), based_on)
            commit.write_with("verbalized_confidence", lambda p: per_traj.to_csv(p, index=False), based_on)
    return per_traj


def _ask_all(results_path: Path, model: str, mode: str, max_tokens: int, progress: bool,
             limit: int | None) -> pd.DataFrame:
    """One row per question asked: keys, message index, the answer and the confidence parsed from it."""
    info = read_header(results_path).get("info") or {}
    domain = Results.domain_of(info)
    system = agent_system_prompt(info)
    sims = islice(iter_simulations(results_path), limit)
    if progress:
        from tqdm.auto import tqdm

        sims = tqdm(sims, desc="verbalized confidence", unit="traj")
    turns = []
    for sim in sims:
        msgs = conversation(sim)
        asked = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0] if mode == "per_turn" else [len(msgs) - 1]
        for i in asked:
            answer, value = _ask(msgs[: i + 1], system, mode, model, max_tokens)
            turns.append({"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
                          "message_idx": i, "answer": answer, "confidence": value, "reward": sim.reward})
    if not turns:
        raise ValueError(f"{results_path}: no agent turn to ask about (mode {mode!r}, limit {limit})")
    return pd.DataFrame(turns)


def missing_rate(per_traj: pd.DataFrame) -> float:
    return float(per_traj["num_unparsed"].sum() / max(1, per_traj["num_asked"].sum()))
