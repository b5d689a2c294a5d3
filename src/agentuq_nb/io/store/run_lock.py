"""One writer per run folder: an exclusive lock that the kernel drops when its holder dies.

``fcntl.flock`` directly (not the ``filelock`` package): the lock must vanish with a process killed
by ``kill -9`` - filelock falls back to lock *files* on filesystems without flock, which a killed
process leaves behind - and the lock is re-entrant within one process, so a command that calls
another step on the same folder (``rescore`` then ``aggregate``) does not refuse itself. Who holds
it (pid, command, since when) is written beside it for the refusal message. POSIX only.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

LOCK_NAME = ".lock"
HOLDER_NAME = ".lock.holder"


#: the holder's note is a line of JSON; more is not ours
HOLDER_BYTES = 4096


class RunBusyError(RuntimeError):
    """Another process is writing the run folder."""


class RunLockError(RunBusyError):
    """The run folder's lock file cannot be used (something else is in its place)."""


@dataclass
class _Held:
    fd: int
    count: int
    command: str


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


def holder(folder: Path) -> dict:
    """Who holds (or last held) the lock of ``folder``: pid, command, host, since (``{}`` when unknown: the note
    is missing, is not a small regular file, or is not ours)."""
    path = Path(folder) / HOLDER_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        info = json.loads(os.read(fd, HOLDER_BYTES))
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError, RecursionError):
        return {}
    finally:
        os.close(fd)


def _open_lock_file(folder: Path) -> int:
    """The lock file's descriptor, opened without following a symlink (a planted link cannot make the lock
    create or hold a file outside the folder); anything but a regular file there is refused."""
    path = folder / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        raise RunLockError(f"{path}: the run folder's lock file cannot be opened ({err.strerror or err}): a "
                           "symlink or a folder is in its place; remove it and run the command again") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunLockError(f"{path}: the run folder's lock file is not a regular file; remove it and run the "
                           "command again")
    return fd


def _write_holder(folder: Path, info: dict) -> None:
    """The holder's note, written beside the lock: a new file renamed into place (never through a link)."""
    tmp = folder / f"{HOLDER_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, json.dumps(info).encode())
    finally:
        os.close(fd)
    os.replace(tmp, folder / HOLDER_NAME)


def is_locked(folder: Path) -> bool:
    """Whether some process (this one included) holds the lock of ``folder`` now."""
    key = os.path.realpath(folder)
    with _GUARD:
        if key in _HELD:
            return True
    if not os.path.lexists(folder / LOCK_NAME):
        return False
    try:
        fd = _open_lock_file(folder)
    except RunLockError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken just now
    return False


def _take(fd: int, wait: float) -> bool:
    """Try for ``wait`` seconds (a reader may probe the lock for a moment, see :func:`is_locked`)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


@contextmanager
def run_lock(folder: str | os.PathLike, command: str, on_acquire=None, wait: float = 1.0) -> Iterator[bool]:
    """Hold ``folder``'s lock for the block; yields True where this call took it (False: re-entered).

    Re-entrant within the process (threads included): the lock is released when the last block that
    holds it ends. A second process gets :class:`RunBusyError` after ``wait`` seconds, naming the
    holder. ``on_acquire`` runs right after the lock is taken (not on re-entry): the place to clean
    up after a killed writer.
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is None:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _open_lock_file(folder)
        if not _take(fd, wait):
            os.close(fd)
            info = holder(folder)
            who = (f"process {info.get('pid')} ('{info.get('command')}' on {info.get('host')}, since {info.get('since')})"
                   if info else "another process")
            raise RunBusyError(f"{folder}: {who} is writing this run folder; wait for it to finish, "
                               f"or write to another folder")
        info = {"pid": os.getpid(), "command": command, "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        try:
            _write_holder(folder, info)
        except BaseException:
            os.close(fd)
            raise
        held = _Held(fd, 1, command)
        with _GUARD:
            _HELD[key] = held
        try:
            if on_acquire is not None:
                on_acquire()
        except BaseException:
            _release(folder, key, held)
            raise
        took = True
    else:
        took = False
    try:
        yield took
    finally:
        _release(folder, key, held)


def _release(folder: Path, key: str, held: _Held) -> None:
    with _GUARD:
        held.count -= 1
        if held.count > 0:
            return
        _HELD.pop(key, None)
        (folder / HOLDER_NAME).unlink(missing_ok=True)  # before the release: a next holder's note is its own
        os.close(held.fd)  # releases the lock; the lock file stays (deleting it would race a waiting process)
