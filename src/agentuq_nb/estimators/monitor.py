"""Monitors from outside the run as estimators: one estimator per monitor of a family's monitor table.

A family of monitors (``judge``: LLM judges run by the judge step; ``external``: scores a user imports) keeps its
scores in ``<family>_scores.parquet`` (:mod:`agentuq_nb.records.monitor_scores`: one row per monitor and trajectory,
the score as given, its orientation and its risk, verdict, justification, cost). Each monitor there is an estimator
``<family>.<monitor>`` ranked by its ``risk`` (higher = more likely a failure; a higher-is-safer score is negated,
the description says so), so the estimator table, ``compare-runs``, the forest and the report take it as they take
every family.

A family is a subclass of :class:`MonitorFamily` naming itself, registered by its own module::

    JUDGE = declare_family(Family("judge", rank=80, label="LLM judge"))

    @register
    class JudgeMonitors(MonitorFamily):
        family = "judge"
        what = "an LLM judge's verdict"

The store reads the table back (:func:`agentuq_nb.io.store.artifacts.read_monitor_rows`: verdicts and justifications
beside each trajectory, for a view of the run such as the explorer).
"""
from __future__ import annotations

import importlib
from typing import ClassVar

import pandas as pd

from agentuq_nb.estimators.base import Estimator, EstimatorFamily, by_trajectory
from agentuq_nb.io.errors import StaleArtifactError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.monitor_scores import MONITOR_NAME, artifact_of, monitors_of
from agentuq_nb.records.tokens import TRAJECTORY_KEYS


class MonitorScore(Estimator):
    """One monitor of a family's table (its ``risk`` column: higher = more likely a failure)."""

    higher_is_uncertain = True

    def __init__(self, family: str, monitor: str, description: str = ""):
        self.family = family  # type: ignore[misc]  # per instance: the family this monitor belongs to
        self.monitor = monitor
        self.name = f"{family}.{monitor}"  # type: ignore[misc]
        self.requires = (artifact_of(family),)  # type: ignore[misc]
        self.description = description or f"monitor {monitor!r} of family {family} (higher = riskier)"  # type: ignore[misc]

    def scores(self, run: RunDir) -> pd.Series:
        table = run.read_frame(self.requires[0])
        rows = table[table["monitor"] == self.monitor]
        return by_trajectory(rows[[*TRAJECTORY_KEYS, "risk"]], "risk").rename(self.name)

    def is_available(self, run: RunDir) -> bool:
        return run.has(self.requires[0]) and self.monitor in set(run.read_frame(self.requires[0])["monitor"])


#: the families whose estimators are monitors (each :class:`MonitorFamily` subclass adds its own when it is defined):
#: where a view of the run looks for verdicts and justifications
MONITOR_FAMILIES: list[str] = []


class MonitorFamily(EstimatorFamily):
    """The monitors of one family's table as estimators (subclass it, naming ``family`` and ``what`` a monitor is)."""

    family: ClassVar[str] = "custom"
    #: what one monitor of the family is, for the descriptions ("an LLM judge's verdict")
    what: ClassVar[str] = "a monitor's score"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.family not in MONITOR_FAMILIES:
            MONITOR_FAMILIES.append(cls.family)

    def describe(self, table: pd.DataFrame, monitor: str) -> str:
        """A monitor's description, from its rows (orientation, source)."""
        rows = table[table["monitor"] == monitor]
        safer = not bool(rows["higher_is_uncertain"].iloc[0]) if len(rows) else False
        source = rows["source"].dropna().iloc[0] if len(rows) and rows["source"].notna().any() else None
        oriented = "a higher-is-safer score, negated" if safer else "higher = riskier"
        return f"{self.what} ({oriented}{'; from ' + str(source) if source else ''})"

    def discover(self, run: RunDir) -> list[Estimator]:
        artifact = artifact_of(self.family)
        if not run.has(artifact):
            return []
        try:
            table = run.read_frame(artifact)
        except StaleArtifactError:  # made for trajectories since replaced: import the scores again
            return []
        return [MonitorScore(self.family, m, self.describe(table, m)) for m in monitors_of(table)]

    def parse(self, name: str) -> Estimator | None:
        prefix = f"{self.family}."
        if name.startswith(prefix) and MONITOR_NAME.fullmatch(name[len(prefix):]):
            return MonitorScore(self.family, name[len(prefix):])
        return None

    def pattern(self) -> str:
        return f"{self.family}.<monitor>"


def monitor_families() -> list[str]:
    """The families of monitors (their estimator modules imported first)."""
    importlib.import_module("agentuq_nb.estimators")
    return list(MONITOR_FAMILIES)
