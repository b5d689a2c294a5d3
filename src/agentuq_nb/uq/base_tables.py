"""The run's base tables - tokens, per-turn partials, messages, trajectories - staged in one commit.

``extract`` and ``rescore`` both make them, through this one writer, so each has one schema
(``TOKEN_SCHEMA``, ``PARTIALS_SCHEMA``, ``MESSAGE_SCHEMA``, ``TRAJECTORY_SCHEMA``) and every file
carries the commit's stamp. Token rows and simulations stream in; memory holds one row group per
table and one small record per trajectory.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import pyarrow as pa

from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.store.rundir import Commit
from agentuq_nb.io.store.token_table import TokenTableWriter
from agentuq_nb.records import Simulation
from agentuq_nb.records.run_tables import (
    MESSAGE_SCHEMA,
    MessageColumns,
    message_table,
    trajectory_record,
    trajectory_table,
)
from agentuq_nb.uq.turn_partials import PARTIALS_SCHEMA, token_partials_table

#: token rows per Parquet row group: a row group of ~32k token rows (~10 MiB in Arrow with top-5 lists) is
#: buffered, concatenated and encoded while the next fills, so this bounds extract's peak memory
#: (262k-row groups with 96 MiB sidecar batches peaked ~210 MiB higher at 10⁶ rows, no faster within the noise;
#: 32k-row groups peak ~30 MiB lower than 65k-row ones at 10⁶ rows, in the same CPU time within the noise)
TOKEN_ROW_GROUP_ROWS = 32_768


class BaseTables:
    """Writers of the four base tables into ``commit``; :meth:`close` finishes them (``with`` does)."""

    def __init__(self, commit: Commit, based_on: dict[str, str] | None = None, background: bool = True):
        self.commit = commit
        self.based_on = dict(based_on or {})
        self.tokens = TokenTableWriter(commit.stage("tokens", self.based_on), row_group_rows=TOKEN_ROW_GROUP_ROWS,
                                       background=background, metadata=commit.metadata)
        # messages and turn partials stream to disk like tokens (lists would grow with the number of simulations)
        self.partials = TokenTableWriter(commit.stage("turn_partials", self.based_on), row_group_rows=65_536,
                                         schema=PARTIALS_SCHEMA, metadata=commit.metadata)
        self.messages = TokenTableWriter(commit.stage("messages", self.based_on), row_group_rows=65_536,
                                         schema=MESSAGE_SCHEMA, metadata=commit.metadata)
        self.trajectories: list[dict] = []
        self._first_of_key: dict[tuple, str] = {}  # (task_id, trial, seed) → the simulation that had it first

    @property
    def num_tokens(self) -> int:
        return self.tokens.num_rows

    def add_tokens(self, tokens: pa.Table) -> None:
        """Token rows (``TOKEN_SCHEMA``) and their per-turn sums: the summaries need no second pass."""
        self.tokens.write(tokens)
        self.partials.write(token_partials_table(tokens))

    def add_simulations(self, sims: Iterable[Simulation], domain: str, where: str,
                        warnings: InputWarnings, messages: MessageColumns | None = None) -> int:
        """The simulations' trajectory records and message rows (``messages``: their values, if gathered)."""
        sims = list(sims)
        for sim in sims:
            key, known = (str(sim.task_id), sim.trial, sim.seed), len(self._first_of_key)
            first = self._first_of_key.setdefault(key, str(sim.id))
            if len(self._first_of_key) == known:  # the key was there already
                raise duplicate_key_error(where, key, first, str(sim.id))
            self.trajectories.append(trajectory_record(sim, domain))
        self.messages.write(message_table(sims, domain, messages))
        for sim in sims:
            if sim.reward is None:
                warnings.add("simulations_without_reward", f"{where} simulation {sim.id}")
            elif not math.isfinite(sim.reward):  # NaN or ±inf: no outcome to predict (metrics leave it out)
                warnings.add("simulations_reward_not_finite", f"{where} simulation {sim.id}: reward {sim.reward}")
        return len(sims)

    def close(self, where: str, warnings: InputWarnings) -> None:
        for writer in (self.tokens, self.partials, self.messages):
            writer.close()
        self.commit.write_parquet("trajectories", trajectory_table(self.trajectories), self.based_on)

    def abort(self) -> None:
        for writer in (self.tokens, self.partials, self.messages):
            writer.abort()

    def __enter__(self) -> "BaseTables":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()


def duplicate_key_error(where: str, key: tuple, first: str, second: str) -> InputError:
    """Two trajectories with one (task_id, trial, seed): their tokens would merge and both rewards count.

    Refused rather than de-duplicated: which copy is right (they may disagree on the reward) is not
    ours to guess; the fix is in the input (drop one, or give the trials distinct trial/seed)."""
    task_id, trial, seed = key
    return InputError(where, f"(task_id, trial, seed) = ({task_id!r}, {trial}, {seed}) repeats: simulations "
                      f"{first} and {second} share it, and the run's tables key trajectories by it. Remove one "
                      "of them from the results, or give them distinct trial/seed values")
