"""Opening untrusted files: only regular files are read, and small files are read within a bound.

A path handed to the toolkit may be ``/dev/zero`` (endless bytes), ``/dev/urandom``, a FIFO (a read
that never returns), a socket or a directory, directly or through a symlink. :func:`open_regular`
opens without blocking (``O_NONBLOCK``: a FIFO with no writer opens at once) and checks the file it
actually opened (``fstat``, so a swap between a check and the open cannot fool it), and refuses
anything but a regular file with one line naming the path and what it is. :func:`check_regular` is
the same check for libraries that open a path themselves (pyarrow, DuckDB).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from agentuq_nb.io.errors import InputError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of ``st_mode`` is, in words (``a regular file``, ``a FIFO (named pipe)`` …)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path: Path, mode: int, what: str) -> InputError:
    via = " (through a symlink)" if path.is_symlink() else ""
    return InputError(path, f"is {kind_of(mode)}{via}, not a regular file (expected {what} in a regular file)")


def open_regular(path: str | os.PathLike, what: str = "input") -> BinaryIO:
    """``path`` opened for binary reading, refused (:class:`InputError`) unless it is a regular file."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(path, f"does not exist ({what})") from None
    except IsADirectoryError:
        raise InputError(path, f"is a directory, not a regular file (expected {what} in a regular file)") from None
    except OSError as err:
        raise InputError(path, f"cannot be opened ({what}): {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(path, mode, what)
        os.set_blocking(fd, True)
        return io.open(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def regular_stat(path: str | os.PathLike, what: str = "input") -> os.stat_result:
    """The ``os.stat`` of ``path`` when it is a regular file (a symlink to one counts), else :class:`InputError`: the
    check and the stat in one call, for a reader that keys what it read by the file's size and time."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, f"does not exist ({what})") from None
    except OSError as err:
        raise InputError(path, f"cannot be read ({what}): {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what)
    return st


def check_regular(path: str | os.PathLike, what: str = "input") -> Path:
    """``path`` when it is a regular file (a symlink to one counts), else :class:`InputError`; for readers
    that open the path themselves."""
    regular_stat(path, what)
    return Path(path)


def read_limited(path: str | os.PathLike, limit: int, what: str = "input") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (refused past it, before reading it)."""
    path = Path(path)
    with open_regular(path, what) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size > limit:
            raise InputError(path, f"is {size:,} bytes, more than the {limit:,} a {what} may have")
        data = fh.read(size + 1)  # not read(limit + 1): that allocates the whole limit (1 GiB) for a small file
        if len(data) > size:  # grew since fstat: read on, up to the limit
            data += fh.read(limit + 1 - len(data))
    if len(data) > limit:  # grew while read
        raise InputError(path, f"is more than the {limit:,} bytes a {what} may have")
    return data


def read_limited_text(path: str | os.PathLike, limit: int, what: str = "input") -> str:
    data = read_limited(path, limit, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(path, f"is not UTF-8 text ({what}): {err.reason} at byte {err.start}") from None


def read_limited_json(path: str | os.PathLike, limit: int, what: str = "input") -> Any:
    """A small JSON file, parsed; every way it can be wrong is one :class:`InputError` naming it."""
    text = read_limited_text(path, limit, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(path, f"is not valid JSON ({what}): {err.msg} at line {err.lineno} column {err.colno}") \
            from None
    except RecursionError:
        raise InputError(path, f"is nested too deeply to be a {what}") from None


#: bytes hashed at a time
DIGEST_CHUNK = 1 << 20


def content_digest(path: str | os.PathLike, what: str = "results") -> str:
    """SHA-256 of what ``path`` holds: a regular file's bytes, or a results directory's regular files (their names
    relative to it and their digests, in name order; links to regular files are left out). What an artefact made
    from results is stamped with, so that it is found stale when other results are extracted into its run folder,
    wherever they were read from. A special file in a results directory - a FIFO, a device, a socket, or a link to
    one (``/dev/zero``) - is refused (:class:`InputError` naming it), never left out: a reader of the directory
    would block on it or read it without end, so every command that hashes its results refuses it first."""
    path = Path(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for parent, dirs, files in os.walk(path):  # os.walk does not descend into symlinked folders
            dirs.sort()
            for name in sorted(files):
                member = Path(parent) / name
                mode = os.lstat(member).st_mode
                if stat.S_ISLNK(mode):
                    try:
                        mode = os.stat(member).st_mode
                    except OSError:  # a dangling link: nothing to read
                        continue
                    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                        continue
                if not stat.S_ISREG(mode):
                    raise _not_regular(member, mode, what)
                digest.update(f"{member.relative_to(path)}\0{content_digest(member, what)}\n".encode())
        return digest.hexdigest()
    digest = hashlib.sha256()
    with open_regular(path, what) as fh:
        for chunk in iter(lambda: fh.read(DIGEST_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()
