"""Which estimator families a run lacks, and the command that would add each.

A run without token log-probs (most real runs) still has the black-box families and the length baselines;
the others need a model to score or resample the messages. ``analyze`` and ``compare-estimators`` say once
what was left out and how to get it, instead of failing. What a family needs and the command that adds it are
declared by the step that makes it (``Step.adds``, :class:`~agentuq_nb.steps.base.FamilyHint`); this module only
compares them with what the run holds.
"""
from __future__ import annotations

from dataclasses import dataclass

from agentuq_nb.estimators import estimators
from agentuq_nb.estimators.base import blackbox_families, family_rank
from agentuq_nb.io.store.rundir import RunDir
from agentuq_nb.steps.base import STEPS, FamilyHint

#: the token roles of the run's own messages (an observation role is another family's)
GENERATED_ROLES = frozenset({"assistant", "user", "combined"})


@dataclass(frozen=True)
class FamilyGap:
    family: str
    needs: str
    command: str | None
    cost: str | None = None  # what the command costs on this run and the model it runs (FamilyHint.cost)

    def __str__(self) -> str:
        return (f"{self.family} ({self.needs})" + (f": {self.command}" if self.command else "")
                + (f"\n      {self.cost}" if self.cost else ""))


def family_hints() -> list[FamilyHint]:
    """Every family a declared step adds, in the estimator table's family order."""
    import agentuq_nb.steps  # noqa: F401 - imports every step module, so each has declared its STEP

    hints = [hint for step in STEPS.values() for hint in step.adds]
    return sorted(hints, key=lambda h: (family_rank(h.family), h.family))


def missing_families(run: RunDir, blackbox_skipped: str | None = None) -> list[FamilyGap]:
    """The families ``run`` has no estimator of, each with what it needs and the command that adds it."""
    found = estimators(run)
    have = {e.family for e in found}
    roles = {str(e.role) for e in found if e.family == "token"}
    has_tokens = bool(roles & GENERATED_ROLES)
    present = {"token": has_tokens, "observation": any(r.startswith("observation") for r in roles)}
    try:
        results = str(run.results_path())
    except FileNotFoundError:
        results = "RESULTS"
    gaps = []
    for hint in family_hints():
        if present.get(hint.family, hint.family in have):
            continue
        needs = (hint.needs_without_tokens if not has_tokens and hint.needs_without_tokens else hint.needs)
        if hint.family in blackbox_families() and blackbox_skipped:  # the black-box step's reason is what they need
            needs = blackbox_skipped
        command = hint.command_without_tokens if not has_tokens and hint.command_without_tokens else hint.command
        cost = hint.cost(run) if hint.cost is not None else None
        gaps.append(FamilyGap(hint.family, needs, command.replace("RUN_DIR", str(run.path)).replace("RESULTS", results),
                              cost))
    return gaps
