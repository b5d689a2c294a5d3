"""Verbalized confidence: ask the agent's model how likely its response/action is correct.

After each agent turn (``mode="per_turn"``) or once at the end of the conversation
(``mode="final"``), the conversation so far is shown to the agent's model, followed by a
question asking for the probability that its last response or action (or, at the end, the way
it handled the whole request) was correct. The answer is parsed robustly: a number in [0, 1],
a percentage ("85%"), or a number in (1, 100] read as a percentage; anything else is recorded
as missing and counted. The trajectory score is the mean over turns. ``verbalized_confidence``
is a *confidence* (higher = more likely success), so failure prediction inverts it.
"""
from __future__ import annotations

import re

import pandas as pd

QUESTION = {
    "per_turn": "Stop the conversation for a moment. How likely is it that your last response or action above "
                "was correct and followed the policy? Answer with a probability between 0 and 1 only.",
    "final": "The conversation is over. How likely is it that you handled the customer's request correctly "
             "and followed the policy? Answer with a probability between 0 and 1 only.",
}
_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?|\.\d+)\s*(%|percent)?", re.IGNORECASE)


def parse_confidence(text: str | None) -> float | None:
    """The first probability in ``text``: 0.8, .8, 80%, 80 percent, or 80 (read as a percentage)."""
    for match in _NUMBER.finditer(text or ""):
        value = float(match.group(1))
        if match.group(2) or 1.0 < value <= 100.0:
            value /= 100.0
        if 0.0 <= value <= 1.0:
            return value
    return None


def missing_rate(per_traj: pd.DataFrame) -> float:
    """The share of questions whose answer held no confidence."""
    return float(per_traj["num_unparsed"].sum() / max(1, per_traj["num_asked"].sum()))
