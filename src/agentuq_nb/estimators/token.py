"""Token-level estimators: one per (scorer, role, statistic) of the trajectory summary.

Named ``{role}.{statistic}`` for the generating model's own rows (scorer ``self``), else
``{role}.{statistic}@{scorer}`` - e.g. ``assistant.avg_token_nll``, ``user.mean_topk_entropy``,
``observation_user.avg_token_nll@agent_llm``, ``total.trajectory_nll@agent_llm``. The statistics and
their orientation come from :data:`agentuq_nb.records.token_statistics.TOKEN_STATISTICS`
(``min_chosen_prob`` is a confidence). A statistic is listed for a run where some trajectory has a
finite value of it.

:func:`resolve_estimator` is the one rule that turns what a user names (a registered estimator, a token statistic
of a role, a raw trajectory-summary column: :class:`RawColumn`) into an estimator; ``evaluate`` resolves with it,
``analyze`` checks a name with it before any work (:func:`check_estimator_name`).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from agentuq_nb.estimators.base import (
    Estimator,
    EstimatorFamily,
    Family,
    UnknownEstimatorError,
    by_trajectory,
    declare_family,
    get,
    listing_hint,
    register,
)
from agentuq_nb.io.store.artifacts import read_trajectory_summary
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.records.token_statistics import STATISTICS_BY_NAME, TOKEN_STATISTICS, TokenStatistic

#: token statistics of the messages, from token log-probs (generated, or rescored teacher-forced)
TOKEN = declare_family(Family("token", rank=10, label="token log-probs", color="success", forest_order=0))

SELF = "self"
#: the order roles are listed in (others after, by name)
ROLE_ORDER = ("assistant", "user", "combined", "observation_user", "observation_tool", "observation_combined", "total")
_NAME = re.compile(r"^(?P<role>[^.@]+)\.(?P<statistic>[^.@]+)(?:@(?P<scorer>.+))?$")


def token_estimator_name(role: str, statistic: str, scorer: str = SELF) -> str:
    return f"{role}.{statistic}" if scorer == SELF else f"{role}.{statistic}@{scorer}"


def summary_rows(summary: pd.DataFrame, role: str, scorer: str) -> pd.DataFrame:
    return summary[(summary["scorer"] == scorer) & (summary["role"] == role)]


def summary_column(summary: pd.DataFrame, role: str, scorer: str, column: str) -> pd.Series:
    """One column of the trajectory-summary rows of ``role`` under ``scorer``, by trajectory, in row order;
    a clear error naming what the summary holds when it has no such rows."""
    rows = summary_rows(summary, role, scorer)
    if rows.empty:
        present = sorted({token_estimator_name(r, column, s)
                          for s, r in summary[["scorer", "role"]].drop_duplicates().itertuples(index=False)})
        raise ValueError(f"no rows for role '{role}' and scorer '{scorer}' in the trajectory summary; "
                         f"'{column}' exists as: {', '.join(present)}")
    return by_trajectory(rows, column)


def role_order(role: str) -> tuple[int, str]:
    return (ROLE_ORDER.index(role) if role in ROLE_ORDER else len(ROLE_ORDER), role)


class TokenEstimator(Estimator):
    """One statistic of one role under one scorer, read from the trajectory summary."""

    family = "token"
    requires = ("trajectory_summary",)

    def __init__(self, role: str, statistic: TokenStatistic, scorer: str = SELF):
        self.role, self.scorer, self.stat = role, scorer, statistic
        self.statistic = statistic.name
        self.name = token_estimator_name(role, statistic.name, scorer)
        self.higher_is_uncertain = statistic.higher_is_uncertain
        self.description = f"{statistic.description} of the {role} rows scored by {scorer}"

    @property
    def label(self) -> str:
        return f"{self.role} {self.statistic}" + ("" if self.scorer == SELF else f" ({self.scorer})")

    def rows(self, summary: pd.DataFrame) -> pd.DataFrame:
        return summary_rows(summary, self.role, self.scorer)

    def scores_from_summary(self, summary: pd.DataFrame) -> pd.Series:
        """The scores from (some rows of) a trajectory summary, in its row order."""
        return summary_column(summary, self.role, self.scorer, self.statistic).rename(self.name)

    def scores(self, run: RunDir) -> pd.Series:
        return self.scores_from_summary(read_trajectory_summary(run))

    def is_available(self, run: RunDir) -> bool:
        if not run.has("trajectory_summary"):
            return False
        rows = self.rows(read_trajectory_summary(run))
        return self.statistic in rows and bool(np.isfinite(rows[self.statistic].to_numpy(dtype=float)).any())


@register
class TokenEstimators(EstimatorFamily):
    family = "token"

    def pattern(self) -> str:
        return "{role}.{statistic}[@{scorer}] with statistic one of " + ", ".join(STATISTICS_BY_NAME)

    def near(self, name: str) -> list[str]:
        role, _, rest = name.partition(".")
        scorer = rest.partition("@")[2] or SELF
        return [token_estimator_name(role, stat, scorer) for stat in STATISTICS_BY_NAME] if rest else []

    def parse(self, name: str) -> TokenEstimator | None:
        match = _NAME.match(name)
        if match is None or match["statistic"] not in STATISTICS_BY_NAME:
            return None
        return TokenEstimator(match["role"], STATISTICS_BY_NAME[match["statistic"]], match["scorer"] or SELF)

    def discover(self, run: RunDir) -> list[Estimator]:
        if not run.has("trajectory_summary"):
            return []
        summary = read_trajectory_summary(run)
        out: list[Estimator] = []
        scorers = sorted(summary["scorer"].astype(str).unique(), key=lambda s: (s != SELF, s))
        for scorer in scorers:
            roles = summary.loc[summary["scorer"] == scorer, "role"].astype(str).unique()
            for role in sorted(roles, key=role_order):
                rows = summary[(summary["scorer"] == scorer) & (summary["role"] == role)]
                for stat in TOKEN_STATISTICS:
                    if stat.name in rows and np.isfinite(rows[stat.name].to_numpy(dtype=float)).any():
                        out.append(TokenEstimator(role, stat, scorer))
        return out


def default_scorer(summary: pd.DataFrame, role: str) -> str:
    """The generating model's own rows (``self``) when present, else the only scorer there is."""
    scorers = sorted(summary.loc[summary["role"] == role, "scorer"].dropna().unique())
    if SELF in scorers:
        return SELF
    if len(scorers) == 1:
        return scorers[0]
    if not scorers:
        raise ValueError(f"no trajectory has role '{role}'; roles present: {sorted(summary['role'].unique())}")
    raise ValueError(f"role '{role}' is scored by several scorers {scorers}; scorer must name one")


class RawColumn(Estimator):
    """A trajectory-summary column that is not a registered estimator (``total_tokens``, ``num_turns`` …), of one
    role under one scorer; oriented by the caller (``invert``: the column is a confidence)."""

    family = "raw"
    requires = ("trajectory_summary",)

    def __init__(self, column: str, role: str, scorer: str, higher_is_uncertain: bool):
        self.name = self.statistic = column
        self.role, self.scorer = role, scorer
        self.higher_is_uncertain = higher_is_uncertain

    def scores_from_summary(self, summary: pd.DataFrame) -> pd.Series:
        return summary_column(summary, self.role, self.scorer, self.name)

    def scores(self, run: RunDir) -> pd.Series:
        return self.scores_from_summary(read_trajectory_summary(run))


def resolve_estimator(uncertainty: str, role: str = "assistant", scorer: str | None = None, invert: bool = False,
                      summary: pd.DataFrame | None = None) -> Estimator:
    """The one rule that turns an uncertainty name into an estimator: a registry name, else
    ``{role}.{uncertainty}[@{scorer}]`` for a token statistic, else a raw trajectory-summary column
    (:class:`RawColumn`, the only case ``invert`` applies to).

    ``summary``: the trajectory summary to resolve against (its scorers and columns); None, before any work: the
    roles of the token statistics and the columns a summary made by aggregate has, so that a name no run made by
    extract and aggregate could resolve is refused before anything runs. An unknown name raises
    :class:`~agentuq_nb.estimators.base.UnknownEstimatorError` (also a ValueError) with the close names;
    ``invert`` on a registered estimator a ValueError."""
    from agentuq_nb.records.run_tables import TRAJECTORY_META
    from agentuq_nb.uq.aggregation import TRAJECTORY_COLUMNS

    if uncertainty in STATISTICS_BY_NAME:
        if summary is None and role not in ROLE_ORDER and not role.startswith("observation_"):
            raise ValueError(f"role {role!r} is not a role of the token statistics ({', '.join(ROLE_ORDER)})")
        if scorer is None:
            scorer = default_scorer(summary, role) if summary is not None else SELF
        uncertainty = token_estimator_name(role, uncertainty, scorer)
    try:
        estimator = get(uncertainty)
    except UnknownEstimatorError as unknown:
        if summary is None:
            if uncertainty in TRAJECTORY_COLUMNS or uncertainty in TRAJECTORY_META:
                return RawColumn(uncertainty, role, scorer or SELF, higher_is_uncertain=not invert)
            raise UnknownEstimatorError(
                uncertainty, unknown.suggestions,
                f"unknown uncertainty '{uncertainty}': not a registered estimator ({listing_hint()}), a token "
                f"statistic ({', '.join(sorted(STATISTICS_BY_NAME))}) or a trajectory-summary column"
                f"{unknown.did_you_mean}; nothing was run") from None
        if uncertainty not in summary.columns:
            numeric = [c for c in summary.columns if pd.api.types.is_numeric_dtype(summary[c])]
            raise UnknownEstimatorError(
                uncertainty, unknown.suggestions,
                f"unknown uncertainty '{uncertainty}': not a registered estimator ({unknown.args[0]}) "
                f"and not a trajectory-summary column{f' (columns: {numeric})' if numeric else ''}") from None
        return RawColumn(uncertainty, role, scorer or default_scorer(summary, role), higher_is_uncertain=not invert)
    if invert:
        raise ValueError(f"'{estimator.name}' is a registered estimator with its own orientation "
                         f"({estimator.orientation}); invert is only for a raw summary column")
    return estimator


def check_estimator_name(uncertainty: str, role: str = "assistant", invert: bool = False) -> None:
    """Refuse, before any work, what :func:`resolve_estimator` could never resolve on a run made by extract and
    aggregate (it, without a summary)."""
    resolve_estimator(uncertainty, role, invert=invert)
