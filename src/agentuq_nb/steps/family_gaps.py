"""Which estimator families a run lacks, and the command that would add each.

A run without token log-probs (most real runs) still has the black-box families and the length baselines;
the others need a model to score or resample the messages. ``analyze`` and ``compare-estimators`` say once
what was left out and how to get it, instead of failing.
"""
from __future__ import annotations

from dataclasses import dataclass

from agentuq_nb.estimators import estimators
from agentuq_nb.io.store.rundir import RunDir


@dataclass(frozen=True)
class FamilyGap:
    family: str
    needs: str
    command: str | None

    def __str__(self) -> str:
        return f"{self.family} ({self.needs})" + (f": {self.command}" if self.command else "")


def missing_families(run: RunDir, blackbox_skipped: str | None = None) -> list[FamilyGap]:
    """The families ``run`` has no estimator of, each with what it needs and the command that adds it."""
    found = estimators(run)
    have = {e.family for e in found}
    roles = {e.role for e in found if e.family == "token"}
    try:
        results = str(run.results_path())
    except FileNotFoundError:
        results = "RESULTS"
    gaps = []
    if not roles & {"assistant", "user", "combined"}:
        gaps.append(FamilyGap("token", "the run has no token log-probs; score its messages teacher-forced under a "
                              "model of your choosing", f"agentuq-nb rescore {results} --out {run.path}"))
    if not any(str(r).startswith("observation") for r in roles):
        gaps.append(FamilyGap("observation", "how surprising user and tool messages are under an observer model",
                              f"agentuq-nb score-observations {run.path} --scorer-mode auxiliary_llm"))
    if "action" not in have:
        gaps.append(FamilyGap("action", "K resampled next actions at each agent decision point",
                              f"agentuq-nb sample-actions {run.path} --k 5"))
    if "verbalized" not in have:
        gaps.append(FamilyGap("verbalized", "the agent model's stated confidence",
                              f"agentuq-nb verbalized-confidence {run.path}"))
    has_tokens = bool(roles & {"assistant", "user", "combined"})
    if "saup" not in have:
        gaps.append(FamilyGap("saup", "agent and user token rows (rescore first)" if not has_tokens else
                              "each step's uncertainty weighted by its drift", f"agentuq-nb saup {run.path}"))
    if "early_warning" not in have:
        gaps.append(FamilyGap("early_warning", "how early failure shows in the per-turn values",
                              f"agentuq-nb early-warning {run.path}" + ("" if has_tokens else
                                                                         " --table blackbox_turns --scorer blackbox "
                                                                         "--value tracer_step_risk")))
    for family in ("structure", "tracer"):
        if family not in have:
            gaps.append(FamilyGap(family, blackbox_skipped or "the run's messages",
                                  f"agentuq-nb blackbox {run.path} --results RESULTS"))
    return gaps
