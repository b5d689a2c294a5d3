"""Estimators that need no log-probs: the ``structure`` and ``tracer`` families.

They read the tables of the black-box step (:mod:`agentuq_nb.steps.blackbox`,
run by ``analyze`` and ``compare-estimators`` too): ``blackbox_scores.parquet`` for the structure signals
(:mod:`agentuq_nb.uq.structure_signals`) and TRACER's default score and components
(:mod:`agentuq_nb.uq.tracer`), ``tracer_tuned.parquet`` for TRACER's two tuned readouts. All are oriented
"higher = more likely a failure"; per-message values of the same signals are in ``blackbox_turns.parquet``.
"""
from __future__ import annotations

import numpy as np

from agentuq_nb.estimators.base import IN_SAMPLE, Family, ScoreColumn, declare_family, register
from agentuq_nb.io.errors import StaleArtifactError
from agentuq_nb.io.store.rundir import RunDir

#: the structure signals of the conversation (tool errors, retries, hedging…), from the messages alone
STRUCTURE = declare_family(Family("structure", rank=60, label="structure (black-box)", color="#56B4E9", forest_order=1,
                                  blackbox=True))
#: TRACER's components and scores, from the messages alone (its content NLL where the run has log-probs)
TRACER = declare_family(Family("tracer", rank=65, label="TRACER (black-box)", color="secondary", forest_order=2,
                               blackbox=True))


class BlackBoxColumn(ScoreColumn):
    """A column of a black-box table, listed where some trajectory has a finite value of it and the table is up to
    date (a stale one that could not be recomputed - its results gone, or no embeddings for TRACER - is left out;
    ``analyze`` and ``compare-estimators`` say why)."""

    def is_available(self, run: RunDir) -> bool:
        if not run.has(self.requires[0]):
            return False
        try:
            run.verify(self.requires[0])
        except StaleArtifactError:
            return False
        frame = run.read_frame(self.requires[0])
        column = self.column or self.name
        return column in frame.columns and bool(np.isfinite(frame[column].to_numpy(dtype=float)).any())


STRUCTURE = (
    ("tool_errors", "tool results that report an error: the agent called a tool wrongly or in a bad state"),
    ("repeated_tool_calls", "tool calls identical to an earlier one (canonical key): looping, as TRACER's tool "
                            "repetition (Tayebati et al., ICML 2026)"),
    ("retried_tool_calls", "calls of an already-called tool with changed arguments: trial and error"),
    ("agent_hedging", "hedges in the agent's text ('it seems', 'might', 'I believe'...; Hyland 1998)"),
    ("agent_apology", "apologies in the agent's text ('sorry', 'unfortunately'...)"),
    ("agent_inability", "the agent saying it cannot do something ('I'm unable', 'not possible'...)"),
    ("transfer_to_human", "1 if the agent transferred to a human (tool or words): the task left its hands"),
    ("user_repetition", "largest embedding similarity of a user message to an earlier one: the user repeating "
                        "themselves"),
    ("user_frustration", "negative cues in the user's text ('frustrating', 'I already told you'...)"),
    ("distinct_tools", "distinct tools the agent used: how wide it had to search"),
    ("longest_tool_streak", "most tool calls in a row without a word to the user"),
    ("turns_after_last_write", "messages after the agent's last state-changing call (NaN without one)"),
)
for _column, _why in STRUCTURE:
    register(type(f"structure_{_column}", (BlackBoxColumn,), {
        "name": f"structure.{_column}", "column": _column, "family": "structure", "requires": ("blackbox_scores",),
        "description": _why, "__module__": __name__}))

#: (name, column, table, protocol of its tuning on the run's labels or None, description)
TRACER = (
    ("tracer.default", "tracer_default", "blackbox_scores", None,
     "TRACER's trajectory risk at its default parameters (a=b=g=1, top 10%, w=0.1); without log-probs its U "
     "term is absent"),
    ("tracer.nested", "tracer_nested", "tracer_tuned", "nested cross-fitting by task",
     "TRACER with its 5 parameters tuned on other tasks only (nested cross-fitting by task): an honest "
     "estimate of tuned TRACER"),
    ("tracer.optimistic", "tracer_optimistic", "tracer_tuned", IN_SAMPLE,
     "TRACER tuned on the evaluated run itself, as its code does: IN-SAMPLE, optimistic by construction"),
    ("tracer.repetition", "tracer_repetition", "blackbox_scores", None,
     "TRACER's D_a: the agent's largest repetition of its last 3 texts or last 5 tool calls"),
    ("tracer.action_gap", "tracer_action_gap", "blackbox_scores", None,
     "TRACER's D_o,agent: mean 1 - cos between the agent's tool calls and their observations"),
    ("tracer.user_gap", "tracer_user_gap", "blackbox_scores", None,
     "TRACER's D_o,user: mean 1 - cos between the agent's message and the user's reply"),
    ("tracer.content_nll", "tracer_content_nll", "blackbox_scores", None,
     "TRACER's U: mean content-token NLL of the agent and user messages (needs log-probs)"),
)
for _name, _column, _table, _protocol, _why in TRACER:
    register(type(_name.replace(".", "_"), (BlackBoxColumn,), {
        "name": _name, "column": _column, "family": "tracer", "requires": (_table,), "uses_labels": _protocol is not None,
        "protocol": _protocol,
        "description": _why, "__module__": __name__}))
