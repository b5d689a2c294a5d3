"""Structure signals: what a trajectory's messages say about how it went, with no log-probs (family
``structure``; not to be confused with the Watchful ``structural`` uncertainty of top-k entropies).

Each signal has a per-message value where one exists (so dynamics and early warning can follow it over
the turns) and one per trajectory; higher means "more likely a failure" for all of them:

====================  =====================  =================================================================
trajectory signal     per message            what it counts
====================  =====================  =================================================================
tool_errors           tool_error (tool)      tool results that report an error (the harness's flag or
                                             ``Error: …``): the agent called a tool wrongly or in a bad state
repeated_tool_calls   repeated_call (agent)  agent tool calls identical (canonical key,
                                             :func:`~agentuq_nb.records.actions.canonical_tool_call`) to an
                                             earlier call of the trajectory: looping (TRACER's tool repetition)
retried_tool_calls    retried_call (agent)   calls of a tool the agent called before with other arguments:
                                             trial and error
agent_hedging         hedging (agent)        hedges in the agent's text (:data:`HEDGING`)
agent_apology         apology (agent)        apologies and regrets (:data:`APOLOGY`)
agent_inability       inability (agent)      statements that it cannot do something (:data:`INABILITY`)
transfer_to_human     transfer (agent)       1 if the agent called a transfer tool or said it transfers to a
                                             human: the task left the agent's hands
user_repetition       user_repetition (user) the largest cosine similarity (embeddings) of a user message to an
                                             earlier one: the user saying the same thing again
user_frustration      user_frustration       negative cues in the user's text (:data:`FRUSTRATION`)
                      (user)
distinct_tools        -                      distinct tools the agent used: how wide its search was
longest_tool_streak   -                      the longest run of tool calls with no message to the user
turns_after_last_write -                     messages after the agent's last write call (NaN with no write):
                                             talk after the state change that the reward checks
====================  =====================  =================================================================

The lexicons are word lists, not a sentiment model: matched case-insensitively as whole words (``*`` ends a
stem: "frustrat*" is frustrated, frustrating…), each occurrence counted. Hedges follow Hyland's (1998) classes of epistemic hedges as they appear in support
dialogue; apology and inability markers are the phrases agents use when refusing or failing; frustration
cues are those of the customer-service literature (explicit annoyance, repetition claims, "that's not what
I asked"). They are listed here so that a reader can see, and change, what is counted.

Write tools: a tool the results' own definitions type as ``write`` (τ²-bench's ``ToolType.WRITE``) when
the file carries them; otherwise a tool whose name starts with a state-changing verb (:data:`WRITE_VERBS`),
which gives τ²-bench's own tags for every tool of its airline, retail, telecom, mock and banking_knowledge
domains (v0.2.0 and v1.0.1; tested).
"""
from __future__ import annotations

import re
from collections.abc import Collection

import numpy as np
import pandas as pd

from agentuq_nb.records.tokens import TRAJECTORY_KEYS
from agentuq_nb.uq.embeddings import stable_cosine

HEDGING = ("it seems", "it appears", "seems like", "seems to", "appears to", "might", "may be", "maybe", "perhaps",
           "possibly", "probably", "i think", "i believe", "i assume", "not sure", "not certain", "unsure", "unclear",
           "if i understand", "as far as i can tell")
APOLOGY = ("sorry", "apologi*", "unfortunately", "regret*")
INABILITY = ("i'm unable", "i am unable", "unable to", "i cannot", "i can't", "i can not", "i'm not able",
             "i am not able", "not able to", "not possible", "isn't possible", "is not possible", "not allowed",
             "not permitted", "cannot be", "can't be")
FRUSTRATION = ("frustrat*", "annoy*", "ridiculous", "unacceptable", "disappoint*", "upset", "angry", "terrible",
               "awful", "useless", "waste of time", "i already", "as i said", "i just said", "i told you",
               "i've told you", "once again", "still not", "still doesn't", "still don't", "that's not what",
               "that is not what", "not what i asked", "not what i wanted", "you're not listening", "confus*",
               "come on", "seriously")
TRANSFER_TEXT = r"\btransfer(?:ring|red)?\b[^.?!]{0,40}\b(?:human|live|representative|specialist|supervisor)"
TRANSFER_TOOL = re.compile(r"^transfer_to_human", re.IGNORECASE)
WRITE_VERBS = ("book", "cancel", "send", "update", "modify", "exchange", "return", "refund", "enable", "disable",
               "refuel", "resume", "suspend", "connect", "disconnect", "grant", "make", "reboot", "reseat", "reset",
               "set", "toggle", "create", "delete", "remove", "add", "change", "pay", "place", "submit", "apply",
               "assign", "approve", "issue", "upgrade", "downgrade", "activate", "deactivate", "register", "log",
               "dismiss", "request", "call")

#: per-message signal columns and the role they belong to
MESSAGE_SIGNALS = {"tool_error": "tool", "repeated_call": "assistant", "retried_call": "assistant",
                   "hedging": "assistant", "apology": "assistant", "inability": "assistant", "transfer": "assistant",
                   "write_call": "assistant", "user_repetition": "user", "user_frustration": "user"}
#: the per-trajectory signals (the ``structure.*`` estimators), in listing order
TRAJECTORY_SIGNALS = ("tool_errors", "repeated_tool_calls", "retried_tool_calls", "agent_hedging", "agent_apology",
                      "agent_inability", "transfer_to_human", "user_repetition", "user_frustration", "distinct_tools",
                      "longest_tool_streak", "turns_after_last_write")


def lexicon_pattern(phrases: Collection[str]) -> str:
    """A regex matching any of ``phrases`` as whole words (a phrase ending in ``*``, like "frustrat*", matches
    every word it begins: frustrated, frustrating)."""
    def one(phrase: str) -> str:
        stem = phrase.endswith("*")
        body = re.escape(phrase.rstrip("*")).replace(r"\ ", r"\s+")
        return body + (r"\w*" if stem else r"\b")

    alternatives = sorted((one(p) for p in phrases), key=len, reverse=True)
    return r"(?i)\b(?:" + "|".join(alternatives) + r")"


def count_matches(texts: pd.Series, phrases: Collection[str]) -> pd.Series:
    """Occurrences of the lexicon in each text (vectorized)."""
    return texts.str.replace("’", "'", regex=False).str.count(lexicon_pattern(phrases)).astype(float)


def is_write_tool(name: str, tool_types: dict[str, str] | None = None) -> bool:
    """Whether a tool changes state (see the module docstring)."""
    if tool_types and name in tool_types:
        return str(tool_types[name]).lower() == "write"
    if TRANSFER_TOOL.match(name):
        return False
    verb = re.split(r"[_\W]", name.strip().lower(), maxsplit=1)[0]
    return verb in WRITE_VERBS


def call_history_signals(keys: list[list[tuple]]) -> tuple[np.ndarray, np.ndarray]:
    """For one trajectory's agent messages (their calls' canonical keys, in order): per message, how many of
    its calls repeat an earlier call exactly, and how many call an earlier-called tool with other arguments."""
    seen_keys: set[tuple] = set()
    seen_names: set[str] = set()
    repeated = np.zeros(len(keys))
    retried = np.zeros(len(keys))
    for i, calls in enumerate(keys):
        for key in calls:
            if key in seen_keys:
                repeated[i] += 1
            elif key[0] in seen_names:
                retried[i] += 1
        seen_keys.update(calls)
        seen_names.update(k[0] for k in calls)
    return repeated, retried


def max_similarity_to_earlier(emb: np.ndarray) -> np.ndarray:
    """For unit vectors in order: each one's largest cosine similarity to an earlier one (NaN for the first), to
    :data:`~agentuq_nb.uq.embeddings.COSINE_DECIMALS` decimals."""
    n = len(emb)
    out = np.full(n, np.nan)
    if n > 1:
        sims = emb @ emb.T
        sims[np.triu_indices(n)] = -np.inf
        out[1:] = stable_cosine(sims[1:].max(axis=1))
    return out


def structure_messages(transcript: pd.DataFrame, user_embeddings: np.ndarray | None = None,
                       tool_types: dict[str, str] | None = None) -> pd.DataFrame:
    """Per-message signals (:data:`MESSAGE_SIGNALS`, NaN where a signal does not apply) beside the transcript's
    keys, ``message_idx``, ``turn_idx`` and ``role``.

    ``user_embeddings``: unit embeddings of the user rows' content, in transcript order (``user_repetition``
    stays NaN without them)."""
    t = transcript
    out = t[TRAJECTORY_KEYS + ["message_idx", "turn_idx", "role"]].copy()
    role = t["role"].to_numpy()
    agent, user, tool = role == "assistant", role == "user", role == "tool"
    for name in MESSAGE_SIGNALS:
        out[name] = np.nan
    out.loc[tool, "tool_error"] = t.loc[tool, "is_error"].astype(float)
    agent_text = t.loc[agent, "content"]
    for name, lexicon in (("hedging", HEDGING), ("apology", APOLOGY), ("inability", INABILITY)):
        out.loc[agent, name] = count_matches(agent_text, lexicon)
    said_transfer = agent_text.str.contains(TRANSFER_TEXT, case=False, regex=True)
    called_transfer = t.loc[agent, "calls"].map(lambda calls: any(TRANSFER_TOOL.match(n) for n, _ in calls))
    out.loc[agent, "transfer"] = (said_transfer | called_transfer).astype(float)
    out.loc[agent, "write_call"] = t.loc[agent, "calls"].map(
        lambda calls: float(any(is_write_tool(n, tool_types) for n, _ in calls)))
    out.loc[user, "user_frustration"] = count_matches(t.loc[user, "content"], FRUSTRATION)
    groups = trajectory_positions(t)
    agent_rows = np.flatnonzero(agent)
    keys = t["call_keys"].to_numpy()
    repeated = np.full(len(t), np.nan)
    retried = np.full(len(t), np.nan)
    for rows in split_by_trajectory(agent_rows, groups):
        repeated[rows], retried[rows] = call_history_signals([keys[r] for r in rows])
    out["repeated_call"], out["retried_call"] = repeated, retried
    if user_embeddings is not None:
        user_rows = np.flatnonzero(user)
        if len(user_embeddings) != len(user_rows):
            raise ValueError(f"{len(user_embeddings)} user embeddings for {len(user_rows)} user messages")
        similarity = np.full(len(t), np.nan)
        position = np.arange(len(user_rows))
        for rows in split_by_trajectory(position, groups[user_rows]):
            similarity[user_rows[rows]] = max_similarity_to_earlier(user_embeddings[rows])
        out["user_repetition"] = similarity
    return out


def trajectory_positions(frame: pd.DataFrame) -> np.ndarray:
    """An integer per row naming its trajectory (rows of one trajectory are contiguous in a transcript)."""
    keys = frame[TRAJECTORY_KEYS]
    return keys.ne(keys.shift()).any(axis=1).cumsum().to_numpy() - 1


def split_by_trajectory(rows: np.ndarray, groups: np.ndarray) -> list[np.ndarray]:
    """``rows`` (ascending positions) split where their trajectory number (``groups`` of those rows) changes."""
    if len(rows) == 0:
        return []
    g = groups if len(groups) == len(rows) else groups[rows]
    return np.split(rows, np.flatnonzero(np.diff(g)) + 1)


def longest_streak(is_call: np.ndarray, calls: np.ndarray) -> float:
    """The most tool calls in a row of agent messages that call tools (a message to the user ends a run)."""
    best = run = 0.0
    for call, n in zip(is_call, calls):
        run = run + n if call else 0.0
        best = max(best, run)
    return best


def structure_trajectories(transcript: pd.DataFrame, messages: pd.DataFrame) -> pd.DataFrame:
    """Per trajectory (keys + :data:`TRAJECTORY_SIGNALS`), in transcript order, from the transcript and its
    per-message signals (:func:`structure_messages`, row for row)."""
    t = transcript
    groups = trajectory_positions(t)
    by = messages.assign(trajectory=groups).groupby("trajectory", sort=True)
    out = by.agg(tool_errors=("tool_error", "sum"), repeated_tool_calls=("repeated_call", "sum"),
                 retried_tool_calls=("retried_call", "sum"), agent_hedging=("hedging", "sum"),
                 agent_apology=("apology", "sum"), agent_inability=("inability", "sum"),
                 transfer_to_human=("transfer", "max"), user_repetition=("user_repetition", "max"),
                 user_frustration=("user_frustration", "sum"))
    out["transfer_to_human"] = out["transfer_to_human"].fillna(0.0)
    role = t["role"].to_numpy()
    calls = t["calls"].to_numpy()
    n_calls = np.fromiter((len(c) for c in calls), dtype=float, count=len(t))
    write = messages["write_call"].to_numpy() == 1.0
    distinct, streak, after_write = [], [], []
    for rows in split_by_trajectory(np.arange(len(t)), groups):
        agent = rows[role[rows] == "assistant"]
        distinct.append(float(len({name for r in agent for name, _ in calls[r]})))
        talk = rows[np.isin(role[rows], ("assistant", "user"))]  # tool results neither start nor end a run
        streak.append(longest_streak((role[talk] == "assistant") & (n_calls[talk] > 0), n_calls[talk]))
        writes = rows[write[rows]]
        after_write.append(float(rows[-1] - writes[-1]) if len(writes) else np.nan)
    out["distinct_tools"], out["longest_tool_streak"], out["turns_after_last_write"] = distinct, streak, after_write
    keys = t[TRAJECTORY_KEYS].groupby(groups, sort=True).first()
    return pd.concat([keys.reset_index(drop=True), out.reset_index(drop=True)], axis=1)[
        TRAJECTORY_KEYS + list(TRAJECTORY_SIGNALS)]
