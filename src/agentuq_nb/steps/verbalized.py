"""``verbalized-confidence``: ask the agent's model how likely its actions were correct (see
:mod:`agentuq_nb.uq.verbalized`) → ``verbalized_confidence_turns.csv`` and ``verbalized_confidence.csv``.
"""
from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from pydantic import Field

from agentuq_nb.io.ingest.results import ResultsFile
from agentuq_nb.io.store.artifacts import results_input, run_results
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records import Results
from agentuq_nb.records.config import EMBEDDED_MODEL
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import Command, FamilyHint, Reporter, Step, StepConfig
from agentuq_nb.uq.observation import agent_system_prompt, conversation
from agentuq_nb.uq.verbalized import QUESTION, parse_confidence

STEP = Step("verbalized-confidence", "agentuq-nb verbalized-confidence RUN_DIR",
            ("verbalized_confidence", "verbalized_confidence_turns"),
            adds=(FamilyHint("verbalized", "the agent model's stated confidence",
                             "agentuq-nb verbalized-confidence RUN_DIR"),))


class VerbalizedConfig(StepConfig):
    """Who is asked, when, and about how many trajectories."""

    results: Optional[Path] = Field(None, description="results file, if not the run's own")
    model: Optional[str] = Field(None, description="litellm model name (default: the embedded model)")
    mode: str = Field("per_turn", description="per_turn (after each agent turn) | final (once at the end)")
    max_tokens: int = Field(12, ge=1, description="tokens of each answer")
    progress: bool = Field(True, description="show a progress bar")
    limit: Optional[int] = Field(None, ge=1, description="ask about the first N simulations only")


def ask(history: list[dict], system: str, mode: str, model: str, max_tokens: int) -> tuple[str, float | None]:
    """The model's answer to the question of ``mode`` after ``history``, and the confidence parsed from it."""
    from agentuq_nb import llm

    prompt = [{"role": "system", "content": system}, *history, {"role": "user", "content": QUESTION[mode]}]
    answer = llm.generate(prompt, model=model, max_tokens=max_tokens, temperature=0.0).message.get("content") or ""
    return answer, parse_confidence(answer)


def run(run_dir: str | Path | RunDir, config: VerbalizedConfig = VerbalizedConfig()) -> pd.DataFrame:
    """Per-turn answers → ``RUN_DIR/verbalized_confidence_turns.csv``; per trajectory →
    ``RUN_DIR/verbalized_confidence.csv`` (mean over turns, counts of missing answers), one commit.

    ``limit`` asks about the first N simulations only (a quick look at a large run)."""
    if config.mode not in QUESTION:
        raise ValueError(f"mode must be one of {sorted(QUESTION)}")
    folder = RunDir.of(run_dir)
    model = config.model or EMBEDDED_MODEL
    from agentuq_nb import llm

    llm.check_model(model)
    with folder.lock(STEP.name):  # the results it reads cannot be republished meanwhile
        results_path, digest = run_results(folder, config.results)
        turn_table = ask_all(results_path, model, config.mode, config.max_tokens, config.progress, config.limit)
        per_traj = turn_table.groupby(TRAJECTORY_KEYS, dropna=False, sort=False).agg(
            verbalized_confidence=("confidence", "mean"), num_asked=("confidence", "size"),
            num_unparsed=("confidence", lambda s: int(s.isna().sum())), reward=("reward", "first"),
        ).reset_index()
        with folder.commit(STEP.name) as commit:
            based_on = results_input(folder, results_path, digest)  # the answers depend on the results, not the tokens
            commit.write_with("verbalized_confidence_turns", lambda p: turn_table.to_csv(p, index=False), based_on)
            commit.write_with("verbalized_confidence", lambda p: per_traj.to_csv(p, index=False), based_on)
    return per_traj


def ask_all(results_path: Path, model: str, mode: str, max_tokens: int, progress: bool,
             limit: int | None) -> pd.DataFrame:
    """One row per question asked: keys, message index, the answer and the confidence parsed from it."""
    file = ResultsFile.open(results_path, tell_version=False)  # its header and its simulations: one sniff
    info = file.header.get("info") or {}
    domain = Results.domain_of(info)
    system = agent_system_prompt(info)
    sims = islice(file.simulations(), limit)
    if progress:
        from tqdm.auto import tqdm

        sims = tqdm(sims, desc="verbalized confidence", unit="traj")
    turns = []
    for sim in sims:
        msgs = conversation(sim)
        asked = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and i > 0] if mode == "per_turn" else [len(msgs) - 1]
        for i in asked:
            answer, value = ask(msgs[: i + 1], system, mode, model, max_tokens)
            turns.append({"domain": domain, "task_id": str(sim.task_id), "trial": sim.trial, "seed": sim.seed,
                          "message_idx": i, "answer": answer, "confidence": value, "reward": sim.reward})
    if not turns:
        raise ValueError(f"{results_path}: no agent turn to ask about (mode {mode!r}, limit {limit})")
    return pd.DataFrame(turns)


def show(per_traj: pd.DataFrame, run_dir: Path, config: VerbalizedConfig, say: Reporter) -> None:
    """What the command prints: the trajectories and questions asked, the share unparsed, where."""
    from agentuq_nb.uq.verbalized import missing_rate

    say.say(f"{len(per_traj)} trajectories, {int(per_traj['num_asked'].sum())} questions, "
            f"{missing_rate(per_traj):.0%} unparsed → {run_dir / 'verbalized_confidence.csv'}")


COMMAND = Command(summary="Ask the agent's model how likely its actions were correct → "
                          "RUN_DIR/verbalized_confidence.csv.",
                  options=("results", "mode", "model", "limit"),
                  help={"run_dir": "run directory (its manifest or results.json names the results)"}, show=show)


def verbalized_confidence(run_dir: str | Path | RunDir, **options: Any) -> pd.DataFrame:
    """:func:`run` with the :class:`VerbalizedConfig` fields as keywords."""
    return run(run_dir, VerbalizedConfig(**options))
