"""Which part of a tool call each token of a message is: ``tool_name``, ``arg_key``, ``arg_value`` or ``syntax``.

A message's token rows are aligned to the message text they spell (their strings concatenated),
the tool calls in that text are scanned, and each token gets the class of the characters it covers
(None for a token outside every tool call). Near-certain JSON syntax tokens would dilute a mean over
a call's tokens; the classes let the statistics read the name and the argument values alone.

Where calls are found:

* ``<tool_call>`` … ``</tool_call>`` - the embedded model's format (``llm.tool_format``) and what
  ``rescore`` teacher-forces for every tool-call message (``llm.chat_format.message_body``), also the
  Hermes/Qwen format a vLLM server returns; several calls per message; a call cut short (no closing
  tag, truncated JSON) is labelled as far as it goes;
* without tags, a message that *is* one JSON object (after leading whitespace) whose first key is
  ``"name"`` and which has an ``"arguments"`` or ``"parameters"`` key (Llama-3 style).

Inside a call (one JSON object ``{"name": ..., "arguments": {...}}``):

* ``tool_name``: the characters of the ``name`` string, between its quotes;
* ``arg_key``: the characters of every key inside ``arguments`` (at any depth), between the quotes;
* ``arg_value``: every scalar inside ``arguments`` (at any depth, array items too): a string's
  characters between its quotes (escapes included), a number, ``true``/``false``/``null``; an
  ``arguments`` given as a JSON string (OpenAI's wire form) is one value;
* ``syntax``: everything else in the call: the tags, braces, brackets, commas, colons, whitespace,
  *the quotes of every string*, the keys ``"name"``/``"arguments"`` and any other top-level key and
  its value. Quotes are syntax because they carry no choice of content: whether a value is a string
  is fixed by the schema, and a token that closes a string mid-value (``O1007",``) still counts as
  value through the priority rule below.

A token covering characters of several classes takes the highest of
``arg_value > tool_name > arg_key > syntax > None`` (a token that writes any character of a value is
a value token: its probability includes that choice). A token with no characters (empty or null
text) gets None.

Malformed or truncated JSON never raises: what the scanner recognized is labelled and the rest of
the call (up to its closing tag or the end of the text) is syntax.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TOOL_CALL_OPEN = "<tool_call>"  # the tags of the tool-call convention (llm.tool_format imports them)
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_NAME, ARG_KEY, ARG_VALUE, SYNTAX = "tool_name", "arg_key", "arg_value", "syntax"
#: the labels, in the order of their priority codes (1 = syntax … 4 = arg_value); code 0 is "no call"
SPAN_LABELS: tuple[str, ...] = (SYNTAX, ARG_KEY, TOOL_NAME, ARG_VALUE)
_CODE = {label: i + 1 for i, label in enumerate(SPAN_LABELS)}
_NONE, _SYNTAX, _KEY, _NAME, _VALUE = 0, _CODE[SYNTAX], _CODE[ARG_KEY], _CODE[TOOL_NAME], _CODE[ARG_VALUE]
ARGUMENT_KEYS = ("arguments", "parameters")
_WHITESPACE = " \t\r\n"
_SCALAR_END = _WHITESPACE + ",:]}[{\""

# container levels: the call object, inside the arguments (any depth), elsewhere in the call
_CALL, _ARGS, _OTHER = 0, 1, 2


def _string_end(text: str, start: int, stop: int) -> tuple[int, bool]:
    """(index after the string opening at ``start``, whether its closing quote was found before ``stop``)."""
    i = start + 1
    while i < stop:
        c = text[i]
        if c == "\\":
            i += 2
        elif c == '"':
            return i + 1, True
        else:
            i += 1
    return stop, False


def _scan_call(text: str, start: int, stop: int, codes: np.ndarray) -> tuple[int, bool, list[str]]:
    """Label the JSON object of one call at ``text[start:stop]`` (``text[start] == '{'``).

    Returns the index after the object (``stop`` when it never closes), whether it closed, and the
    call object's keys. No JSON library reports where in the text each value is, hence this small
    scanner: a pushdown automaton over lexemes (no recursion, so no depth limit), tolerant of anything.
    """
    # stack entries: [is_object, level, expecting_key, key_of_pending_value]
    stack: list[list] = []
    call_keys: list[str] = []
    i = start
    while i < stop:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        top = stack[-1] if stack else None
        if c in "{[":
            level = _CALL if top is None else _value_level(top)
            if top is not None:
                top[2] = False
            stack.append([c == "{", level, c == "{", None])
            i += 1
            continue
        if c in "}]":
            if stack:
                stack.pop()
            i += 1
            if not stack:
                return i, True, call_keys
            continue
        if top is None:  # not reached: the scan starts at the object's brace
            i += 1
            continue
        if c == ",":
            top[2] = top[0]  # in an object a key comes next
            top[3] = None
            i += 1
            continue
        if c == ":":
            top[2] = False
            i += 1
            continue
        if c == '"':
            end, closed = _string_end(text, i, stop)
            inner = slice(i + 1, end - 1 if closed else end)  # the characters between the quotes
            if top[0] and top[2]:  # a key
                key = text[inner]
                top[3] = key
                if top[1] == _CALL:
                    call_keys.append(key)
                elif top[1] == _ARGS:
                    codes[inner] = _KEY
            elif code := _scalar_code(top):
                codes[inner] = code
            i = end
            continue
        # a number or a literal (true/false/null), or junk: up to the next delimiter
        j = i + 1
        while j < stop and text[j] not in _SCALAR_END:
            j += 1
        if not (top[0] and top[2]) and (code := _scalar_code(top)):
            codes[i:j] = code
        i = j
    return stop, False, call_keys


def _value_level(container: list) -> int:
    """The level of a value in ``container`` (its pending key decides in the call object)."""
    if container[1] == _CALL:
        return _ARGS if container[0] and container[3] in ARGUMENT_KEYS else _OTHER
    return container[1]


def _scalar_code(container: list) -> int:
    level = container[1]
    if level == _ARGS:
        return _VALUE
    if level == _CALL and container[0]:
        if container[3] == "name":
            return _NAME
        if container[3] in ARGUMENT_KEYS:  # arguments as a JSON string: one value
            return _VALUE
    return _NONE


def _label_region(codes: np.ndarray, start: int, stop: int) -> None:
    """Mark ``[start, stop)`` as part of a call: characters not otherwise labelled become syntax."""
    region = codes[start:stop]
    region[region == _NONE] = _SYNTAX


def _call_end(text: str, end: int, limit: int) -> int:
    """Where a call whose object ends at ``end`` ends: after its closing tag when only whitespace comes
    before it, else after the whitespace that follows the object."""
    close = text.find(TOOL_CALL_CLOSE, end)
    if close >= 0 and not text[end:close].strip(_WHITESPACE):
        return close + len(TOOL_CALL_CLOSE)
    while end < limit and text[end] in _WHITESPACE:
        end += 1
    return end


def char_codes(text: str) -> np.ndarray:
    """One priority code per character of ``text`` (0: outside every call; see ``SPAN_LABELS``)."""
    n = len(text)
    codes = np.zeros(n, dtype=np.int8)
    at = text.find(TOOL_CALL_OPEN)
    if at < 0:  # a bare call: the whole message is {"name": ..., "arguments"/"parameters": ...}
        body = n - len(text.lstrip(_WHITESPACE))
        if body < n and text[body] == "{":
            end, _, keys = _scan_call(text, body, n, codes)
            if keys[:1] == ["name"] and any(k in ARGUMENT_KEYS for k in keys):
                _label_region(codes, body, _call_end(text, end, n))
            else:
                codes[:] = _NONE
        return codes
    while at >= 0:
        open_end = at + len(TOOL_CALL_OPEN)
        brace = open_end + len(text[open_end:]) - len(text[open_end:].lstrip(_WHITESPACE))
        if brace < n and text[brace] == "{":
            end, closed, _ = _scan_call(text, brace, n, codes)
            close = text.find(TOOL_CALL_CLOSE, brace)
            if not closed and close >= 0:  # cut short, then closed by the tag: the object ends there
                codes[brace:] = _NONE
                end = _scan_call(text, brace, close, codes)[0]
            call_end = _call_end(text, end, n)
        else:  # no JSON object after the tag: the call (syntax) runs to its closing tag or the end
            close = text.find(TOOL_CALL_CLOSE, open_end)
            call_end = close + len(TOOL_CALL_CLOSE) if close >= 0 else n
        _label_region(codes, at, call_end)
        at = text.find(TOOL_CALL_OPEN, call_end)
    return codes


def token_span_codes(tokens: Sequence[str | None]) -> np.ndarray:
    """One priority code per token (0: outside every call, or no characters)."""
    texts = ["" if t is None else str(t) for t in tokens]
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    codes = char_codes("".join(texts))
    out = np.zeros(len(texts), dtype=np.int8)
    nonempty = lengths > 0
    if nonempty.any():
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])[nonempty]
        out[nonempty] = np.maximum.reduceat(codes, starts)
    return out


def token_spans(tokens: Sequence[str | None]) -> list[str | None]:
    """One label per token of a message: ``tool_name``, ``arg_key``, ``arg_value``, ``syntax`` or None."""
    labels = (None,) + SPAN_LABELS
    return [labels[c] for c in token_span_codes(tokens)]
