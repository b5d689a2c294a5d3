"""The context-overflow policy of the embedded model: drop the oldest middle turns.

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
