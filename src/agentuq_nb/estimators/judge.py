"""The ``judge`` family: an LLM judge's probability that a trajectory failed, per judge and per panel.

The judge step (:mod:`agentuq_nb.steps.judge`) asks one or more judges (a model with a prompt, :mod:`agentuq_nb.uq.judge`)
about every trajectory and commits ``judge_scores.parquet``, a monitor table (:mod:`agentuq_nb.records.monitor_scores`):
one row per trajectory and judge, ``score`` = P(fail) (from the verdict token's log-probs where the judge returned
them, else the verbalized verdict as 1 or 0: ``probability_source`` says which), the verdict, the answer as its
justification, tokens and cost. Read here as estimators, oriented "higher = more likely a failure":

* ``judge.<prompt>-<model>`` - one judge (``judge.outcome-local-smollm2-135m-instruct``;
  :func:`~agentuq_nb.uq.judge.judge_name`), through :class:`~agentuq_nb.estimators.monitor.MonitorFamily`;
* ``judge.panel_{mean|median|max|min}`` - the judges combined per trajectory as UQLM's ``LLMPanel`` combines its
  judges (:func:`agentuq_nb.uq.judge.panel_scores`), listed where the run holds two judges or more.

:func:`judge_totals` sums the table's tokens and cost per judge.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pandas as pd

from agentuq_nb.estimators.base import Estimator, Family, by_trajectory, declare_family, register
from agentuq_nb.estimators.monitor import MonitorFamily
from agentuq_nb.io.errors import StaleArtifactError
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.monitor_scores import artifact_of, monitors_of
from agentuq_nb.uq.judge import PANEL_AGGREGATES, PROBABILITY_SOURCES, panel_scores

#: an LLM judge's failure probability (a monitor from outside the agent: its cost is recorded beside it)
JUDGE = declare_family(Family("judge", rank=70, label="LLM judge", color="#882255", forest_order=6.5))
ARTIFACT = artifact_of("judge")
_PANEL = re.compile(r"^judge\.panel_(?P<aggregate>[a-z]+)$")


def judge_totals(run_dir: str | os.PathLike | RunDir) -> pd.DataFrame:
    """Per judge (``monitor``, its ``model`` and ``prompt``): the trajectories with a verdict, how many
    probabilities came from the verdict token's log-probs and how many from the text, the tokens and the cost (USD;
    NaN where litellm has no price for the model)."""
    table = RunDir.of(run_dir).read_frame(ARTIFACT)
    counts = pd.crosstab(table["monitor"], table["probability_source"]).reindex(
        columns=[s for s in PROBABILITY_SOURCES if s != "unparsed"], fill_value=0)
    sums = table.groupby("monitor", sort=False).agg(
        model=("model", "first"), prompt=("prompt", "first"), trajectories=("score", "size"),
        prompt_tokens=("prompt_tokens", "sum"), completion_tokens=("completion_tokens", "sum"),
        cost_usd=("cost_usd", lambda s: float(s.sum()) if s.notna().all() else np.nan))
    return sums.join(counts).reset_index()


class PanelEstimator(Estimator):
    """The run's judges combined per trajectory (UQLM's panel aggregation, in P(fail))."""

    family = "judge"
    requires = (ARTIFACT,)

    def __init__(self, aggregate: str):
        self.aggregate = aggregate
        self.name = f"judge.panel_{aggregate}"
        self.description = f"{PANEL_AGGREGATES[aggregate]}, over every judge of the run"

    @property
    def label(self) -> str:
        return f"judge panel ({self.aggregate})"

    def scores(self, run: RunDir) -> pd.Series:
        return by_trajectory(panel_scores(RunDir.of(run).read_frame(ARTIFACT), self.aggregate).rename(self.name))

    def is_available(self, run: RunDir) -> bool:
        run = RunDir.of(run)
        try:
            return run.has(ARTIFACT) and len(monitors_of(run.read_frame(ARTIFACT))) >= 2
        except StaleArtifactError:
            return False


@register
class JudgeMonitors(MonitorFamily):
    """Every judge of a run (``judge.<prompt>-<model>``) and, with two judges or more, their panel."""

    family = "judge"
    what = "an LLM judge's P(fail)"

    def describe(self, table: pd.DataFrame, monitor: str) -> str:
        rows = table[table["monitor"] == monitor]
        sources = rows["probability_source"].value_counts()
        read = ", ".join(f"{n} from {s}" for s, n in sources.items())
        return (f"P(fail) of the judge {rows['model'].iloc[0]} asked with the prompt '{rows['prompt'].iloc[0]}' "
                f"({read})")

    def discover(self, run: RunDir) -> list[Estimator]:
        try:
            found = super().discover(run)
        except StaleArtifactError:  # judged on other results than the run's: listed once judged again
            return []
        if len(found) >= 2:
            found += [PanelEstimator(aggregate) for aggregate in PANEL_AGGREGATES]
        return found

    def parse(self, name: str) -> Estimator | None:
        panel = _PANEL.match(name)
        if panel is not None:
            return PanelEstimator(panel["aggregate"]) if panel["aggregate"] in PANEL_AGGREGATES else None
        return super().parse(name)

    def near(self, name: str) -> list[str]:
        return [f"judge.panel_{a}" for a in PANEL_AGGREGATES] if name.startswith("judge.panel") else []

    def pattern(self) -> str:
        return "judge.<prompt>-<model> (one judge) or judge.panel_{" + "|".join(PANEL_AGGREGATES) + "} (combined)"
