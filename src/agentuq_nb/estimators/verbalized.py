"""``verbalized_confidence``: the agent's model asked how likely it was right (a confidence: inverted).

Read from ``verbalized_confidence.csv`` (written by the verbalized-confidence step, :mod:`agentuq_nb.steps.verbalized`), else
``verbalized_confidence.parquet``, else a ``verbalized_confidence`` column of ``trajectories.parquet``
or of the trajectory summary (its assistant rows); several values per trajectory are averaged.
"""
from __future__ import annotations

import pandas as pd

from agentuq_nb.estimators.base import Estimator, Family, by_trajectory, declare_family, register
from agentuq_nb.io.store.artifacts import read_trajectory_summary, read_verbalized_confidence
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.keys import key_dtypes
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: the agent model's stated confidence (a confidence: lower = more uncertain)
VERBALIZED = declare_family(Family("verbalized", rank=40, label="verbalized confidence", color="highlight",
                                   forest_order=6))

COLUMN = "verbalized_confidence"


def _source(run: RunDir) -> pd.DataFrame | None:
    if run.has("verbalized_confidence"):
        return read_verbalized_confidence(run)
    if run.has("verbalized_confidence_parquet"):
        return key_dtypes(run.read_frame("verbalized_confidence_parquet"))
    if run.has("trajectories") and COLUMN in run.read_frame("trajectories"):
        return run.read_frame("trajectories")
    if run.has("trajectory_summary"):
        summary = read_trajectory_summary(run)
        if COLUMN in summary:
            return summary[summary["role"] == "assistant"] if "role" in summary else summary
    return None


@register
class VerbalizedConfidence(Estimator):
    name = COLUMN
    family = "verbalized"
    higher_is_uncertain = False
    requires = ()
    description = "the agent model's stated probability that it handled the request correctly"

    def scores(self, run: RunDir) -> pd.Series:
        src = _source(run)
        if src is None or COLUMN not in src:
            raise ValueError(f"{run.path}: no verbalized confidence; {run.fix('verbalized_confidence', '')}")
        return by_trajectory(src.groupby(TRAJECTORY_KEYS, dropna=False)[COLUMN].mean()).rename(self.name)

    def is_available(self, run: RunDir) -> bool:
        src = _source(run)
        return src is not None and COLUMN in src

    def reads(self, run: RunDir) -> tuple[str, ...]:
        sources = ("verbalized_confidence", "verbalized_confidence_parquet", "trajectories", "trajectory_summary")
        return tuple(name for name in sources if run.has(name))[:1]
