"""Streaming a large JSON file item by item, in bounded time and memory, whatever it holds.

The fast path is ijson (yajl, C). Two kinds of input take it off that path, and are then read by
:class:`JsonScanner`, Python's own C JSON decoder (``raw_decode``) over a buffer that grows as an item
needs - never the whole file:

* **Python's NaN / Infinity literals**, which ``json.dump`` writes and yajl refuses. (Before, the whole
  file was parsed at once: 1.5 GB for a 189 MB file.)
* **A very long string.** yajl re-reads a token that spans its read buffer from the token's start at
  every new buffer, so one string costs time quadratic in its length (40 MB: 6.5 s, 80 MB: 28 s,
  200 MB: over 5 min). The reader given to ijson counts the bytes since the last ``"``; past
  :data:`LONG_TOKEN_SWITCH` it hands over to the scanner, whose decoding is linear.

Nesting past :data:`~agentuq_nb.common.limits.MAX_JSON_DEPTH` hands over too (ijson's cost grows with
the square of the depth). The scanner refuses a string longer than
:data:`~agentuq_nb.common.limits.MAX_JSON_TOKEN_BYTES` and a value nested deeper than Python's decoder
takes (its recursion limit, ~1,000 levels), each with one line naming the file and the place. Items already yielded by the fast path are skipped
by the scanner (parsed again, not yielded twice).
"""
from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ijson
import numpy as np

from agentuq_nb.common.limits import MAX_JSON_DEPTH, MAX_JSON_TOKEN_BYTES, MiB
from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import open_regular

#: bytes without a ``"`` after which the fast path hands over to the scanner (a long string or number)
LONG_TOKEN_SWITCH = 1 * MiB
#: what the scanner reads at a time (at least; an item that needs more doubles it)
SCANNER_READ = 1 * MiB
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_NUMBER_CHARS = frozenset("0123456789.eE+-")


class LongToken(Exception):
    """The fast path met a token longer than :data:`LONG_TOKEN_SWITCH`, or nesting deeper than
    :data:`~agentuq_nb.common.limits.MAX_JSON_DEPTH` (internal: the scanner takes over)."""


_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


class GuardedReader:
    """A binary file for ijson that raises :class:`LongToken` when a run of bytes without a ``"`` grows
    past ``switch`` (a string, or a number, that yajl would re-read quadratically), or when brackets nest
    past ``MAX_JSON_DEPTH`` (ijson's event prefixes grow with the depth: 16,000 levels took 2 s, 100,000
    did not end). Brackets are counted without telling strings apart (a bound, cheap: four counts per
    read); brackets inside strings can only make the scanner take over early, never let a deep value by."""

    def __init__(self, fh: BinaryIO, switch: int | None = None):
        self.fh, self.switch, self.run, self.depth = fh, LONG_TOKEN_SWITCH if switch is None else switch, 0, 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        last = data.rfind(b'"')
        self.run = self.run + len(data) if last < 0 else len(data) - last - 1
        if self.run > self.switch:
            raise LongToken()
        brackets = data.translate(None, _NOT_BRACKETS)  # one pass; what is left is small
        opened = brackets.count(b"[") + brackets.count(b"{")
        if self.depth + opened > MAX_JSON_DEPTH:  # the deepest point of this read, counted exactly
            steps = np.frombuffer(brackets, np.uint8)
            running = self.depth + np.cumsum(np.where((steps == 91) | (steps == 123), 1, -1))
            if int(running.max()) > MAX_JSON_DEPTH:
                raise LongToken()
        self.depth = max(0, self.depth + 2 * opened - len(brackets))
        return data


def depth_error(path: Path, where: str | None = None) -> InputError:
    return InputError(path, "a value is nested too deeply (arrays in arrays, objects in objects, more levels than "
                            f"Python's JSON decoder takes: about {sys.getrecursionlimit():,}); no results file does "
                            "that", where)


class JsonScanner:
    """A pull reader of one JSON document: whitespace, single characters and whole values (decoded by
    ``json.JSONDecoder.raw_decode``), reading more of the file only when a value needs it."""

    def __init__(self, fh: BinaryIO, path: Path):
        self.fh, self.path = fh, path
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.dropped, self.eof = "", 0, 0, False
        self.json = json.JSONDecoder()

    def where(self, pos: int | None = None) -> str:
        return f"character {self.dropped + (self.pos if pos is None else pos):,}"

    def _more(self, string_from: int | None = None) -> bool:
        """Read more of the file into the buffer: as much again as is pending (a long value costs linear time);
        while an unterminated string starting at ``string_from`` is read, not far past the string limit."""
        if self.eof:
            return False
        if self.pos > len(self.buf) // 2:  # drop what is consumed (copied once for every doubling, at most)
            self.dropped += self.pos
            if string_from is not None:
                string_from -= self.pos
            self.buf, self.pos = self.buf[self.pos:], 0
        size = max(SCANNER_READ, len(self.buf) - self.pos)
        if string_from is not None:
            size = min(size, max(SCANNER_READ, MAX_JSON_TOKEN_BYTES + SCANNER_READ - (len(self.buf) - string_from)))
        data = self.fh.read(size)
        try:
            self.buf += self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as err:
            raise InputError(self.path, f"is not UTF-8 text ({err.reason})", self.where(len(self.buf))) from None
        self.eof = not data
        return bool(data)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            self.pos = _WHITESPACE.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def expect(self, chars: str) -> str:
        found = self.peek()
        if not found or found not in chars:
            said = "the end of the file" if not found else repr(found)
            raise InputError(self.path, f"not valid JSON or truncated: expected one of {chars!r}, found {said}",
                             self.where())
        self.pos += 1
        return found

    def value(self) -> Any:
        """The next JSON value, decoded."""
        self.peek()
        while True:
            try:
                obj, end = self.json.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as err:
                if err.msg.startswith("Unterminated string") and len(self.buf) - err.pos > MAX_JSON_TOKEN_BYTES:
                    raise InputError(self.path, f"holds a string longer than {MAX_JSON_TOKEN_BYTES:,} characters (the "
                                     "limit of one string: no message or tool result is that long)",
                                     self.where(err.pos)) from None
                in_string = err.msg.startswith("Unterminated string")
                if (in_string or err.pos >= len(self.buf) - 8) and self._more(err.pos if in_string else None):
                    continue
                raise InputError(self.path, f"not valid JSON or truncated: {err.msg}", self.where(err.pos)) from None
            except RecursionError:
                raise depth_error(self.path, self.where()) from None
            number = isinstance(obj, (int, float)) and not isinstance(obj, bool)
            if number and (end == len(self.buf) or self.buf[end] in _NUMBER_CHARS) and self._more():
                continue  # a number may go on in what is not read yet ("1" of "1.5", "0." of "0.25")
            self.pos = end
            return obj

    def object_keys(self) -> Iterator[str]:
        """The keys of the object that starts here; the caller reads each key's value before the next."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise InputError(self.path, "not valid JSON: an object key is not a string", self.where())
            self.expect(":")
            yield key
            if self.expect(",}") == "}":
                return

    def array_items(self) -> Iterator[Any]:
        """The items of the array that starts here, one at a time."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield self.value()
            if self.expect(",]") == "]":
                return

    def skip_value(self) -> None:
        """Read past the next value; an array is read item by item, so a large one is never held whole."""
        if self.peek() == "[":
            for _ in self.array_items():
                pass
        else:
            self.value()


def scanned_items(fh: BinaryIO, path: Path, prefix: str, skip: int = 0) -> Iterator[Any]:
    """The items at ``prefix`` (``"item"``: of a top-level array; ``"simulations.item"``: of the top-level
    object's ``simulations`` array) of the open file ``fh`` (read from its start) read by the scanner, the first
    ``skip`` of them left out."""
    fh.seek(0)
    scanner = JsonScanner(fh, path)
    if prefix == "item":
        if scanner.peek() != "[":
            return
        items = scanner.array_items()
    else:
        key = prefix.removesuffix(".item")
        if scanner.peek() != "{":
            return
        items = None
        for name in scanner.object_keys():
            if name == key and scanner.peek() == "[":
                items = scanner.array_items()
                break
            scanner.skip_value()
        if items is None:
            return
    for i, item in enumerate(items):
        if i >= skip:
            yield item


def items_of(fh: BinaryIO, path: Path, prefix: str) -> Iterator[Any]:
    """The items at ``prefix`` (see :func:`scanned_items`) of the open file ``fh`` (``path``: its name, for the
    messages), streamed from its start: ijson, or the scanner from where ijson stopped (NaN/Infinity, a long
    string). An error that both readers meet is said by the scanner. A reader that sniffs a file reads it through
    one handle (seeking back to its start), never opening it again."""
    done = 0
    fh.seek(0)
    try:
        for item in ijson.items(GuardedReader(fh), prefix, use_float=True):
            yield item
            done += 1
        return
    except (ijson.JSONError, LongToken):
        pass
    yield from scanned_items(fh, path, prefix, skip=done)


def stream_items(path: str | Path, prefix: str) -> Iterator[Any]:
    """The items at ``prefix`` of the file at ``path`` (:func:`items_of`; a special file refused)."""
    path = Path(path)
    with open_regular(path, "JSON") as fh:
        yield from items_of(fh, path, prefix)


def read_json_document(path: str | Path) -> Any:
    """A whole JSON file of one value (a τ²-bench simulation file), read by the scanner: NaN/Infinity taken,
    a string past the limit or a value nested too deeply refused, special files refused."""
    path = Path(path)
    with open_regular(path, "JSON") as fh:
        scanner = JsonScanner(fh, path)
        if not scanner.peek():
            raise InputError(path, "file is empty (expected JSON)")
        value = scanner.value()
        if scanner.peek():
            raise InputError(path, "not valid JSON: more follows the value", scanner.where())
    return value
