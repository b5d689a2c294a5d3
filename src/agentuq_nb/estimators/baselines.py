"""Length baselines: an uncertainty estimator that does not beat them has not shown it measures more
than how long the conversation was. From ``trajectories.parquet`` (else the trajectory summary)."""
from __future__ import annotations

import pandas as pd

from agentuq_nb.estimators.base import Estimator, Family, by_trajectory, declare_family, register
from agentuq_nb.io.store.artifacts import read_trajectory_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: the length baselines every uncertainty estimator is compared with (drawn last in the forest, as the reference)
BASELINE = declare_family(Family("baseline", rank=90, label="length baselines", color="neutral", reference=True))

BASELINES = ("num_messages", "num_tool_calls", "agent_chars")


def trajectory_table(run: RunDir) -> pd.DataFrame:
    """One row per trajectory: ``trajectories.parquet``, else (older runs) the summary's first row each."""
    if run.has("trajectories"):
        return key_dtypes(run.read_frame("trajectories"))
    return key_dtypes(read_trajectory_summary(run)).drop_duplicates(TRAJECTORY_KEYS)


class LengthBaseline(Estimator):
    family = BASELINE.name

    def scores(self, run: RunDir) -> pd.Series:
        return by_trajectory(trajectory_table(run).drop_duplicates(TRAJECTORY_KEYS), self.name).rename(self.name)

    def reads(self, run: RunDir) -> tuple[str, ...]:
        return ("trajectories",) if run.has("trajectories") else ("trajectory_summary",)

    def is_available(self, run: RunDir) -> bool:
        if not (run.has("trajectories") or run.has("trajectory_summary")):
            return False
        return self.name in trajectory_table(run)


for _name, _what in (("num_messages", "messages in the trajectory"),
                     ("num_tool_calls", "tool calls the agent made"),
                     ("agent_chars", "characters the agent wrote")):
    register(type(_name, (LengthBaseline,), {"name": _name, "description": _what, "__module__": __name__}))
