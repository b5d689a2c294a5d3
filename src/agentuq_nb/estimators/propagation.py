"""Estimators over the turn sequence, read from the score files their calculators publish.

* SAUP (Zhao et al., ACL 2025; :mod:`agentuq_nb.uq.saup`, ``saup_scores.parquet``): the agent's
  ``saup_rms``, ``saup_position``, ``saup_distance``, the cross-fitted ``saup_hmm``, and the user's
  ``user_saup_*`` (SAUP's per-actor view).
* Early warning (:mod:`agentuq_nb.uq.dynamics`, ``early_warning_scores.parquet``): ``early_warning_f{f}``,
  the mean agent turn NLL over the first fraction f of the trajectory's agent turns, for every
  fraction the file holds.
"""
from __future__ import annotations

import re

from agentuq_nb.estimators.base import Estimator, EstimatorFamily, Family, ScoreColumn, declare_family, register
from agentuq_nb.io.store.rundir import RunDir

#: SAUP: each step's uncertainty weighted by its drift
SAUP = declare_family(Family("saup", rank=20, label="SAUP", color="accent", forest_order=4))
#: how early failure shows in the per-turn values
EARLY_WARNING = declare_family(Family("early_warning", rank=30, label="early warning",
                                      color="#8C7A00", forest_order=5))  # dark yellow: legible on white

EARLY_WARNING_PREFIX = "early_warning_f"
_FRACTION = re.compile(rf"^{EARLY_WARNING_PREFIX}(\d+(?:\.\d+)?|\.\d+)$")


def _saup(name: str, what: str) -> type[ScoreColumn]:
    # saup_hmm's state weights are failure rates of the other folds' trajectories (uq.saup): out of fold, but it saw
    # labels, so never an input of a combined predictor (whose folds differ from its own)
    fitted = {"uses_labels": True, "protocol": "cross-fitted by trajectory (folds of trajectories, not tasks)"} \
        if name == "saup_hmm" else {}
    return type(name, (ScoreColumn,), {"name": name, "family": "saup", "requires": ("saup_scores",),
                                       "description": what, "__module__": __name__, **fitted})


# registered in the order of their columns in saup_scores.parquet
for _name, _what in (
    ("saup_rms", "agent: sqrt(mean (U_i)^2), U_i = mean token NLL of agent step i"),
    ("saup_position", "agent: RMS of position-weighted step NLLs, W_i = 2i/(n+1)"),
    ("saup_distance", "agent: RMS of step NLLs weighted by inquiry drift + inference gap"),
    ("user_saup_rms", "user simulator: sqrt(mean (U_i)^2) over its steps"),
    ("user_saup_position", "user simulator: position-weighted RMS"),
    ("user_saup_distance", "user simulator: distance-weighted RMS"),
    ("saup_hmm", "agent: RMS weighted by a cross-fitted 3-state HMM over the distances"),
):
    register(_saup(_name, _what))


class EarlyWarning(ScoreColumn):
    family = "early_warning"
    requires = ("early_warning_scores",)

    def __init__(self, column: str):
        self.name = self.column = column
        self.description = f"mean agent turn NLL over the first {column[len(EARLY_WARNING_PREFIX):]} of its turns"


@register
class EarlyWarnings(EstimatorFamily):
    family = "early_warning"

    def pattern(self) -> str:
        return f"{EARLY_WARNING_PREFIX}{{fraction}}"

    def parse(self, name: str) -> EarlyWarning | None:
        return EarlyWarning(name) if _FRACTION.match(name) else None

    def discover(self, run: RunDir) -> list[Estimator]:
        if not run.has("early_warning_scores"):
            return []
        columns = run.read_frame("early_warning_scores").columns
        return [EarlyWarning(c) for c in columns if _FRACTION.match(c)]
