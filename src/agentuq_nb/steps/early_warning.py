"""``early-warning``: how early failure shows - the mean per-turn uncertainty of the first f of each trajectory vs
failure (:func:`agentuq_nb.evaluation.dynamics.early_warning_table`) → ``RUN_DIR/early_warning_scores.parquet``
(family ``early_warning``)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field, field_validator

from agentuq_nb.common.limits import MAX_GRID_OPTION
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.store.artifacts import read_turn_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.steps.base import (
    Command,
    FailureThresholdField,
    FamilyHint,
    NBootField,
    Reporter,
    SeedField,
    Step,
    StepConfig,
)
from agentuq_nb.uq.dynamics import FRACTIONS

STEP = Step("early-warning", "agentuq-nb early-warning RUN_DIR", ("early_warning_scores",),
            adds=(FamilyHint("early_warning", "how early failure shows in the per-turn values",
                             "agentuq-nb early-warning RUN_DIR", command_without_tokens="agentuq-nb early-warning "
                             "RUN_DIR --table blackbox_turns --scorer blackbox --value tracer_step_risk"),))


#: columns of a per-turn table that identify a turn rather than measure it (never a --value)
TURN_KEY_COLUMNS = frozenset(TRAJECTORY_KEYS + ["role", "scorer", "turn_idx", "message_idx", "model", "source"])


class EarlyWarningConfig(StepConfig):
    """Which per-turn values are followed, at which fractions, and the bootstrap of the AUROCs."""

    fractions: tuple[float, ...] = Field(FRACTIONS, min_length=1, max_length=MAX_GRID_OPTION,
                                         description="shares of the trajectory seen, each in (0, 1]")
    role: str = Field("assistant", description="whose turns are followed")
    scorer: str = Field("self", description="scorer of the per-turn values (blackbox for --table blackbox_turns)")
    value: str = Field("avg_token_nll", description="the per-turn value, a column of --table")
    table: Literal["turn_summary", "blackbox_turns"] = Field(
        "turn_summary", description="turn_summary (token statistics) | blackbox_turns (per-message black-box "
        "signals, e.g. --value tracer_step_risk --scorer blackbox)")
    failure_threshold: FailureThresholdField
    n_boot: NBootField
    seed: SeedField

    @field_validator("fractions")
    @classmethod
    def _shares(cls, fractions: tuple[float, ...]) -> tuple[float, ...]:
        for f in fractions:
            if not (math.isfinite(f) and 0 < f <= 1):
                raise ValueError(f"fractions {f:g} is not a share of a trajectory: give values in (0, 1] "
                                 "(0.25: its first quarter, 1: all of it)")
        if len(set(fractions)) < len(fractions):
            raise ValueError(f"fractions repeats a value ({', '.join(f'{f:g}' for f in fractions)})")
        return fractions


def check_turn_selection(turns: pd.DataFrame, config: EarlyWarningConfig, path: Path) -> None:
    """Refuse a ``--role``, ``--scorer`` or ``--value`` the per-turn table ``turns`` (read from ``path``) does not
    hold, naming the option and what the table has: without this check an unknown name gave an empty table, and
    a key column (``--value task_id``) a nonsense one, both published."""
    roles = sorted(map(str, turns["role"].dropna().unique())) if "role" in turns else []
    if config.role not in roles:
        raise InputError(path, f"role {config.role!r}: the table has no turns of that role (its roles: "
                               f"{', '.join(roles) or 'none'})")
    mine = turns[turns["role"] == config.role]
    scorers = sorted(map(str, mine["scorer"].dropna().unique())) if "scorer" in mine else []
    if config.scorer not in scorers:
        raise InputError(path, f"scorer {config.scorer!r}: the table has no {config.role} turns scored by it (its "
                               f"scorers of {config.role} turns: {', '.join(scorers) or 'none'})")
    values = [c for c in turns.columns if c not in TURN_KEY_COLUMNS and pd.api.types.is_numeric_dtype(turns[c])
              and not pd.api.types.is_bool_dtype(turns[c])]
    if config.value not in values:
        what = ("identifies a turn rather than measuring it" if config.value in TURN_KEY_COLUMNS else
                "is not numeric" if config.value in turns.columns else "is not a column of the table")
        shown = ", ".join(values[:12]) + (f", … ({len(values)} in all)" if len(values) > 12 else "")
        raise InputError(path, f"value {config.value!r} {what} (the table's per-turn values: {shown})")


def run(run_dir: str | Path | RunDir, config: EarlyWarningConfig = EarlyWarningConfig()
        ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AUROC per fraction with CI, per-trajectory scores); publishes the scores."""
    from agentuq_nb.evaluation.dynamics import early_warning_table

    folder = RunDir.of(run_dir)
    with folder.lock(STEP.name):  # the inputs cannot change before the commit
        turns = read_turn_summary(folder) if config.table == "turn_summary" else folder.read_frame(config.table)
        check_turn_selection(turns, config, folder.file(config.table))
        aurocs, scores = early_warning_table(folder, **config.model_dump())
        with folder.commit(STEP.name) as commit:
            commit.write_parquet("early_warning_scores", scores, based_on=folder.based_on(config.table, "trajectories"))
    return aurocs, scores


def show(result: tuple[pd.DataFrame, pd.DataFrame], run_dir: Path, config: EarlyWarningConfig, say: Reporter) -> None:
    """What the command prints: the AUROC per fraction with its interval, where the scores are."""
    cols = ["fraction", "auroc", "auroc_lo", "auroc_hi", "n", "n_failures", "mean_turns_seen"]
    say.say(result[0][cols].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    say.say(f"→ {RunDir(run_dir).file('early_warning_scores')}")


COMMAND = Command(summary="How early failure shows: the mean per-turn uncertainty of the first f of each trajectory "
                          "vs failure, per fraction → RUN_DIR/early_warning_scores.parquet (family early_warning in "
                          "compare-estimators).",
                  options=("fractions", "role", "scorer", "value", "table", "failure_threshold", "n_boot", "seed"),
                  flags={"fractions": "--fraction"},
                  help={"run_dir": "run directory (after aggregate, or after blackbox for --table blackbox_turns)",
                        "fractions": "share of the trajectory seen (repeat; default 0.25 0.5 0.75 1)"}, show=show)


def early_warning(run_dir: str | Path | RunDir, **options: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`run` with the :class:`EarlyWarningConfig` fields as keywords."""
    return run(run_dir, EarlyWarningConfig(**options))
