"""Policy-grounded events of a trajectory: what an airline/retail/telecom policy forbids or what a failed conversation
tends to hold, counted from the messages alone (calculators only; the detector's ``policy`` feature group,
:mod:`agentuq_nb.uq.detector_features`).

Meant to carry to tasks a detector never saw: none of them names a task, a user, a product or a domain's vocabulary,
only what the agent and the user *did* (τ²-bench's policies ask the agent to get the user's explicit confirmation
before any action that changes the booking or the account, to transfer when a request is outside its scope, and
never to make things up). Per trajectory:

=============================  ======================================================================================
``policy.unconfirmed_writes``  write calls (:func:`~agentuq_nb.uq.structure_signals.is_write_tool`) whose preceding
                               user message holds no confirmation (:data:`CONFIRMATION`: "yes", "go ahead",
                               "confirm", …): a state change the user did not approve in the turn before it
``policy.confirmed_writes``    write calls whose preceding user message confirms (the policy's way)
``policy.failed_call_repeats`` calls that repeat, with the same arguments (canonical keys), a call whose result
                               was an error: the agent trying again what already failed
``policy.writes_after_error``  write calls made after a tool error with no user message in between: acting on a
                               failure without telling the user
``policy.user_asks_human``     user messages asking for a human (:data:`HUMAN_REQUEST`)
``policy.agent_transfers``     1 if the agent transferred to a human (a ``transfer_to_human…`` call)
``policy.user_restates_goal``  user messages after the first that repeat at least :data:`RESTATE_OVERLAP` of the
                               first user message's content words: the user saying again what they want
``policy.same_tool_rewrites``  write calls of a tool already written with *other* arguments: a state change
                               redone
``policy.no_write``            1 if the trajectory holds no write call at all
=============================  ======================================================================================

Counts, as they are (the model standardizes its columns). The lexicons are listed here so a reader can see, and
change, what is counted; they match case-insensitively as whole words (``*`` ends a stem), as the structure
signals' lexicons do (:func:`~agentuq_nb.uq.structure_signals.lexicon_pattern`).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.structure_signals import TRANSFER_TOOL, is_write_tool, lexicon_pattern

#: the columns, in order
POLICY_COLUMNS = ("policy.unconfirmed_writes", "policy.confirmed_writes", "policy.failed_call_repeats",
                  "policy.writes_after_error", "policy.user_asks_human", "policy.agent_transfers",
                  "policy.user_restates_goal", "policy.same_tool_rewrites", "policy.no_write")
#: what a user says to approve an action
CONFIRMATION = ("yes", "yeah", "yep", "yup", "confirm*", "go ahead", "proceed", "please do", "do it", "sure",
                "correct", "that's right", "that is right", "sounds good", "ok", "okay", "approve*", "agreed",
                "i agree", "please go ahead", "let's do it", "absolutely", "definitely")
#: what a user says to ask for a person
HUMAN_REQUEST = ("human", "real person", "live agent", "representative", "supervisor", "manager", "speak to someone",
                 "talk to someone", "transfer me")
#: the share of the first user message's content words a later user message must hold to restate the goal
RESTATE_OVERLAP = 0.5
#: words too common to say what a user wants
STOP_WORDS = frozenset("""a an the and or but if of to in on at for with from by about as is are was were be been am i
me my we our you your it its this that these those do does did have has had can could would should will shall may
might please hi hello thanks thank so just also not no yes ok okay there here what which who when where how want need
like would get""".split())
WORD = re.compile(r"[a-z]+")
_CONFIRM = re.compile(lexicon_pattern(CONFIRMATION))
_HUMAN = re.compile(lexicon_pattern(HUMAN_REQUEST))


def content_words(text: str) -> set[str]:
    return {w for w in WORD.findall(text.lower()) if len(w) > 2 and w not in STOP_WORDS}


def trajectory_events(roles, contents, calls, call_keys, errors, tool_kinds: dict[str, str]) -> list[float]:
    """The :data:`POLICY_COLUMNS` of one trajectory's messages (in order)."""
    unconfirmed = confirmed = failed_repeats = after_error = asks_human = restates = rewrites = 0
    transfers = 0.0
    writes = 0
    last_user = ""
    error_since_user = False
    failed: set = set()
    written: dict[str, set] = {}
    goal: set[str] | None = None
    pending: list = []  # the keys of the last agent message's calls, to learn which failed
    for role, content, msg_calls, keys, error in zip(roles, contents, calls, call_keys, errors):
        content = content.replace("’", "'")
        if role == "user":
            last_user = content
            error_since_user = False
            if _HUMAN.search(content):
                asks_human += 1
            words = content_words(content)
            if goal is None:
                goal = words
            elif goal and len(goal & words) >= RESTATE_OVERLAP * len(goal):
                restates += 1
        elif role == "tool":
            key = pending.pop(0) if pending else None
            if error:
                error_since_user = True
                if key is not None:
                    failed.add(key)
        elif role == "assistant":
            pending = list(keys)
            for (name, _), key in zip(msg_calls, keys):
                if key in failed:
                    failed_repeats += 1
                if TRANSFER_TOOL.match(str(name)):
                    transfers = 1.0
                if not is_write_tool(str(name), tool_kinds):
                    continue
                writes += 1
                if _CONFIRM.search(last_user):
                    confirmed += 1
                else:
                    unconfirmed += 1
                if error_since_user:
                    after_error += 1
                before = written.setdefault(str(name), set())
                if before and key not in before:
                    rewrites += 1
                before.add(key)
    return [unconfirmed, confirmed, failed_repeats, after_error, asks_human, transfers, restates, rewrites,
            float(writes == 0)]


def policy_events(transcript_frame: pd.DataFrame, n: int, tool_kinds: dict[str, str] | None = None) -> np.ndarray:
    """(n, len(:data:`POLICY_COLUMNS`)): the events of each of the ``n`` trajectories of a transcript
    (:mod:`agentuq_nb.uq.transcript`, trajectories in order); ``tool_kinds``: tool name → read/write where the results
    define them (else the name rule)."""
    out = np.zeros((n, len(POLICY_COLUMNS)))
    t = transcript_frame
    if t.empty:
        out[:, POLICY_COLUMNS.index("policy.no_write")] = 1.0
        return out
    groups = t[TRAJECTORY_KEYS].ne(t[TRAJECTORY_KEYS].shift()).any(axis=1).cumsum().to_numpy() - 1
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    ends = np.r_[starts[1:], len(groups)]
    columns = [t[c].tolist() for c in ("role", "content", "calls", "call_keys", "is_error")]
    for g, (a, b) in zip(groups[starts], zip(starts, ends)):
        out[g] = trajectory_events(*(col[a:b] for col in columns), tool_kinds or {})
    return out
