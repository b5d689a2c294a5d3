"""Action-resampling estimators: the per-decision-point statistics of ``action_turns.parquet``
(``uq.action_uq``) aggregated per trajectory.

Named ``{statistic}.{aggregate}[@{sampler}]``:

* ``statistic`` - one of :data:`ACTION_TURN_STATISTICS` (``action_agreement``, ``action_clusters``,
  ``action_semantic_entropy``, ``action_semantic_entropy_weighted``, ``tool_name_entropy``,
  ``structural``, ``conceptual``) or ``conceptual_pairwise`` (the black-box half of ``conceptual``,
  given also where the samples carry no top-k tokens);
* ``aggregate`` - ``mean`` over the trajectory's decision points; the worst one, ``max`` for an
  uncertainty and ``min`` for ``action_agreement`` (a confidence: lower = more uncertain); ``first{N}``
  the mean over its first N sampled decision points (``first3``, ``first5`` …; listed: ``first3``);
* ``@{sampler}`` - the sampling model, needed only when the run holds samples of several.

The aggregates never match a token statistic, so ``structural.mean`` is not read as the token estimator
of a role "structural". A statistic that no decision point of the run has a value of is not listed;
:func:`skipped_action_statistics` says which and why (e.g. the weighted semantic entropy without log-probs).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from agentuq_nb.estimators.base import Estimator, EstimatorFamily, Family, by_trajectory, declare_family, register
from agentuq_nb.io.store.artifacts import read_action_turns
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.action_samples import ACTION_TURN_STATISTICS
from agentuq_nb.records.tokens import TRAJECTORY_KEYS

#: statistics of the K next actions resampled at each agent decision point
ACTION = declare_family(Family("action", rank=15, label="resampled actions", color="failure", forest_order=3))

#: the statistics offered: the contract's, then the black-box half of conceptual uncertainty
STATISTICS: dict[str, tuple[bool, str]] = {
    **ACTION_TURN_STATISTICS,
    "conceptual_pairwise": (True, "mean pairwise cosine distance of the samples' embeddings (the black-box "
                                  "half of conceptual uncertainty)"),
}
LISTED_FIRST = 3
_NAME = re.compile(r"^(?P<statistic>[a-z_]+)\.(?P<aggregate>mean|max|min|first(?P<n>[1-9]\d*))(?:@(?P<sampler>.+))?$")
#: why a statistic has no value anywhere in a run
SKIP_REASONS = {
    "action_semantic_entropy_weighted": "the samples carry no log-probs (the likelihood weights need them)",
    "structural": "the samples carry no top-k log-probs",
    "conceptual": "the samples carry no top-k tokens (its partial half needs them; conceptual_pairwise is given)",
}


def worst_aggregate(statistic: str) -> str:
    return "max" if STATISTICS[statistic][0] else "min"


def action_estimator_name(statistic: str, aggregate: str, sampler: str | None = None) -> str:
    return f"{statistic}.{aggregate}" + (f"@{sampler}" if sampler else "")


def samplers(turns: pd.DataFrame) -> list[tuple[str, str]]:
    """(sampler_model, sampler_kind) of the run's samples, the agent's own model first."""
    pairs = turns[["sampler_model", "sampler_kind"]].drop_duplicates().astype(str).itertuples(index=False)
    return sorted((tuple(p) for p in pairs), key=lambda p: (p[1] != "self", p[0]))


def sampler_rows(turns: pd.DataFrame, sampler: str | None, where: str = "action_turns") -> pd.DataFrame:
    """The rows of one sampler (``None``: the only one there is; an error naming them when there are several)."""
    if sampler is None:
        models = sorted(turns["sampler_model"].astype(str).unique())
        if len(models) > 1:
            raise ValueError(f"{where} holds samples of several models ({', '.join(models)}); name one with "
                             f"'@model' (e.g. action_agreement.mean@{models[0]})")
        return turns
    rows = turns[turns["sampler_model"].astype(str) == sampler]
    if rows.empty:
        raise ValueError(f"{where} holds no samples of '{sampler}'; samplers present: "
                         f"{', '.join(sorted(turns['sampler_model'].astype(str).unique()))}")
    return rows


def aggregate_turns(rows: pd.DataFrame, statistic: str, aggregate: str) -> pd.Series:
    """One value per trajectory: the aggregate of ``statistic`` over its decision points (NaNs skipped)."""
    rows = rows.sort_values([*TRAJECTORY_KEYS, "decision_idx"], kind="stable")
    if aggregate.startswith("first"):
        rows = rows.groupby(TRAJECTORY_KEYS, dropna=False, sort=False).head(int(aggregate[len("first"):]))
        aggregate = "mean"
    values = rows[[*TRAJECTORY_KEYS, statistic]].astype({statistic: float})
    return values.groupby(TRAJECTORY_KEYS, dropna=False)[statistic].agg(aggregate)


class ActionEstimator(Estimator):
    """One statistic of the resampled actions, aggregated over a trajectory's decision points."""

    family = "action"
    requires = ("action_turns",)

    def __init__(self, statistic: str, aggregate: str, sampler: str | None = None, model: str | None = None,
                 kind: str | None = None):
        """``sampler``: the model named in the name (None: the run's only one); ``model`` and ``kind``: the
        sampling model and whether it is the agent's own (``self``) or an ``observer``, for the label."""
        self.statistic, self.aggregate, self.sampler = statistic, aggregate, sampler
        self.model, self.kind = model or sampler, kind
        self.scorer = sampler
        self.name = action_estimator_name(statistic, aggregate, sampler)
        self.higher_is_uncertain = STATISTICS[statistic][0]
        over = {"mean": "mean over the decision points", "max": "worst (highest) decision point",
                "min": "worst (lowest) decision point"}.get(aggregate, f"mean over the first {aggregate[5:]} decision points")
        self.description = f"{STATISTICS[statistic][1]}; {over}"
        if kind == "observer":
            self.description += f"; sampled by observer {self.model}"
        elif kind is not None:
            self.description += f"; sampled by the agent's own model {self.model}"

    @property
    def label(self) -> str:
        text = f"{self.statistic} {self.aggregate}"
        if self.kind == "observer":
            return f"{text} (observer {self.model})"
        return text if self.sampler is None else f"{text} ({self.sampler})"

    def scores(self, run: RunDir) -> pd.Series:
        run = RunDir.of(run)
        rows = sampler_rows(read_action_turns(run), self.sampler, str(run.file("action_turns")))
        if self.statistic not in rows:
            raise ValueError(f"{run.file('action_turns')} has no column '{self.statistic}'")
        return by_trajectory(aggregate_turns(rows, self.statistic, self.aggregate).rename(self.name))

    def is_available(self, run: RunDir) -> bool:
        if not run.has("action_turns"):
            return False
        turns = read_action_turns(run)
        try:
            rows = sampler_rows(turns, self.sampler)
        except ValueError:
            return False
        return self.statistic in rows and bool(np.isfinite(rows[self.statistic].to_numpy(dtype=float)).any())


@register
class ActionEstimators(EstimatorFamily):
    family = "action"

    def pattern(self) -> str:
        return ("{statistic}.{mean|max|min|firstN}[@{sampler}] with statistic one of " + ", ".join(STATISTICS)
                + " (max for uncertainties, min for action_agreement)")

    def near(self, name: str) -> list[str]:
        statistic = name.partition(".")[0]
        if statistic not in STATISTICS:
            return []
        return [action_estimator_name(statistic, a) for a in ("mean", worst_aggregate(statistic), f"first{LISTED_FIRST}")]

    def parse(self, name: str) -> ActionEstimator | None:
        match = _NAME.match(name)
        if match is None or match["statistic"] not in STATISTICS:
            return None
        aggregate = match["aggregate"]
        if aggregate in ("max", "min") and aggregate != worst_aggregate(match["statistic"]):
            return None  # the best turn of an uncertainty is not offered: near() names the worst
        return ActionEstimator(match["statistic"], aggregate, match["sampler"])

    def discover(self, run: RunDir) -> list[Estimator]:
        if not run.has("action_turns"):
            return []
        turns = read_action_turns(run)
        found = samplers(turns)
        out: list[Estimator] = []
        for model, kind in found:
            rows = turns[turns["sampler_model"].astype(str) == model]
            suffix = model if len(found) > 1 else None
            for statistic in STATISTICS:
                if statistic in rows and np.isfinite(rows[statistic].to_numpy(dtype=float)).any():
                    for aggregate in ("mean", worst_aggregate(statistic), f"first{LISTED_FIRST}"):
                        out.append(ActionEstimator(statistic, aggregate, suffix, model, kind))
        return out


def skipped_action_statistics(run: RunDir | str) -> dict[str, str]:
    """The action statistics a run's ``action_turns`` has no value of, each with the reason (its
    estimators are not listed); keyed ``statistic`` (``statistic@sampler`` when there are several)."""
    run = RunDir.of(run)
    if not run.has("action_turns"):
        return {}
    turns = read_action_turns(run)
    found = samplers(turns)
    skipped = {}
    for model, kind in found:
        rows = turns[turns["sampler_model"].astype(str) == model]
        for statistic in STATISTICS:
            if statistic not in rows or not np.isfinite(rows[statistic].to_numpy(dtype=float)).any():
                reason = SKIP_REASONS.get(statistic, "no decision point has a value")
                skipped[statistic + (f"@{model}" if len(found) > 1 else "")] = f"{reason} ({kind} sampler {model})"
    return skipped
