"""The context-overflow policy of the embedded model: drop the oldest middle turns; and a judge's: keep both ends.

SmolLM2's window is 8,192 tokens; τ²-bench's retail policy and tool list alone fill
most of it, so a long conversation stops fitting after a few turns. Two behaviours:

* **exact (the default)**: a prompt that does not fit raises ``ContextWindowError``
  (litellm's ``ContextWindowExceededError``; HTTP 400 ``context_length_exceeded`` from
  ``serve-local``). Scoring and studies keep this: the model must see what the
  trajectory says it saw.
* **fit** (``fit_context=True`` on a request or ``litellm.completion`` call, or
  the ``serve-local`` command's ``--fit-context`` for every request): the leading system
  message(s) and the latest turn are kept, and the oldest turns between them are
  dropped, one turn at a time, until the prompt plus the requested ``max_tokens``
  fits. An assistant message that calls tools and the tool results that answer it
  are one turn (dropped together, never split); so is the latest turn. If the system
  prompt and the latest turn alone do not fit, ``ContextWindowError`` is raised as
  in the exact mode.

What was dropped is reported, never silent: ``LocalCompletion.dropped_messages`` and
``dropped_tokens``, the response's ``usage.context_dropped_messages`` /
``usage.context_dropped_tokens``, and serve-local's ``X-AgentUQ-Context-Dropped-Messages``
header. A message's log-probs were then computed from the shortened prompt: a
study that re-scores such a trajectory teacher-forced on the full history gets
other numbers (``extract``/``rescore`` see the counts in the raw OpenAI choice).

A judge (``uq.judge``) reads a transcript as text in one message, for any model: :func:`keep_ends` keeps its
opening messages (up to a third of the room) and as many closing ones as fit, and one marker line names how many
messages (and tokens) were left out in the middle.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FittedMessages:
    messages: list[dict]
    dropped_messages: int


def turns(messages: list[dict]) -> list[list[dict]]:
    """Messages grouped into turns: an assistant message with tool calls takes the tool results after it."""
    grouped: list[list[dict]] = []
    for message in messages:
        joins_call = (message.get("role") == "tool" and grouped and grouped[-1][0].get("role") == "assistant"
                      and grouped[-1][0].get("tool_calls"))
        if joins_call:
            grouped[-1].append(message)
        else:
            grouped.append([message])
    return grouped


def drop_oldest_turns(messages: list[dict], fits: Callable[[list[dict]], bool]) -> FittedMessages:
    """The fewest oldest middle turns dropped so that ``fits(kept)``; the messages unchanged if they fit.

    ``messages`` are normalized (``chat_format.normalize_message``). The leading system
    messages and the last turn are always kept; when even they do not fit, they are
    returned as they are (the caller's window check then raises).
    """
    if fits(messages):
        return FittedMessages(messages, 0)
    n_head = 0
    while n_head < len(messages) and messages[n_head].get("role") == "system":
        n_head += 1
    head, body = messages[:n_head], turns(messages[n_head:])
    if len(body) <= 1:
        return FittedMessages(messages, 0)
    middle, last = body[:-1], body[-1]
    # linear from the oldest: prompts hold tens of turns, and each check is one tokenization
    for n_drop in range(1, len(middle) + 1):
        kept = head + [m for turn in middle[n_drop:] for m in turn] + last
        if fits(kept) or n_drop == len(middle):
            return FittedMessages(kept, len(messages) - len(kept))
    raise AssertionError("unreachable")


#: the line that stands for the entries :func:`keep_ends` left out (``{n}`` of them, ``{tokens}`` tokens)
ELISION_MARKER = "[... {n} messages ({tokens} tokens) left out here to fit the judge's context ...]"
#: tokens kept free for the marker line itself
MARKER_TOKENS = 32


@dataclass(frozen=True)
class KeptEnds:
    """What :func:`keep_ends` kept: the entries (with the marker line where the middle was left out), how many were
    left out and their tokens."""

    entries: list[str]
    elided: int
    elided_tokens: int


def keep_ends(entries: list[str], counts: list[int], budget: int, head_share: float = 1 / 3) -> KeptEnds:
    """The entries of a text (a transcript's messages, each with its token count) fitted to ``budget`` tokens: all
    of them if they fit; else the opening entries up to ``head_share`` of the budget, then as many of the closing
    entries as fit in the rest, the middle replaced by one :data:`ELISION_MARKER` line naming what was left out.

    A judge reads a conversation, not a chat it continues, so the turn structure of :func:`drop_oldest_turns` does
    not apply: the request that opens the conversation and the end that shows how it went are what it needs most."""
    if len(entries) != len(counts):
        raise ValueError("one token count per entry")
    if sum(counts) <= budget:
        return KeptEnds(list(entries), 0, 0)
    room = max(0, budget - MARKER_TOKENS)
    head, used = 0, 0
    while head < len(entries) and used + counts[head] <= room * head_share:
        used += counts[head]
        head += 1
    tail = len(entries)
    while tail > head and used + counts[tail - 1] <= room:
        tail -= 1
        used += counts[tail]
    left_out = counts[head:tail]
    marker = ELISION_MARKER.format(n=len(left_out), tokens=sum(left_out))
    return KeptEnds(list(entries[:head]) + [marker] + list(entries[tail:]), len(left_out), sum(left_out))
