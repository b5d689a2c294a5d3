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
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

LOCK_NAME = ".lock"
HOLDER_NAME = ".lock.holder"


class RunBusyError(RuntimeError):
    """Another process is writing the run folder."""


@dataclass
class _Held:
    fd: int
    count: int
    command: str


_HELD: dict[str, _Held] = {}
_GUARD = threading.Lock()


def holder(folder: Path) -> dict:
    """Who holds (or last held) the lock of ``folder``: pid, command, host, since."""
    try:
        return json.loads((folder / HOLDER_NAME).read_text())
    except (OSError, ValueError):
        return {}


def is_locked(folder: Path) -> bool:
    """Whether some process (this one included) holds the lock of ``folder`` now."""
    key = os.path.realpath(folder)
    with _GUARD:
        if key in _HELD:
            return True
    if not (folder / LOCK_NAME).exists():
        return False
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken just now
    return False


@contextmanager
def run_lock(folder: str | os.PathLike, command: str, on_acquire=None) -> Iterator[bool]:
    """Hold ``folder``'s lock for the block; yields True where this call took it (False: re-entered).

    A second process gets :class:`RunBusyError` at once, naming the holder. ``on_acquire`` runs
    right after the lock is taken (not on re-entry): the place to clean up after a killed writer.
    """
    folder = Path(folder)
    key = os.path.realpath(folder)
    with _GUARD:
        held = _HELD.get(key)
        if held is not None:
            held.count += 1
    if held is not None:
        try:
            yield False
        finally:
            with _GUARD:
                held.count -= 1
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        info = holder(folder)
        who = (f"process {info.get('pid')} ('{info.get('command')}' on {info.get('host')}, since {info.get('since')})"
               if info else "another process")
        raise RunBusyError(f"{folder}: {who} is writing this run folder; wait for it to finish, "
                           f"or write to another folder") from None
    info = {"pid": os.getpid(), "command": command, "host": socket.gethostname(),
            "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (folder / HOLDER_NAME).write_text(json.dumps(info))
    with _GUARD:
        _HELD[key] = _Held(fd, 1, command)
    try:
        if on_acquire is not None:
            on_acquire()
        yield True
    finally:
        with _GUARD:
            _HELD.pop(key, None)
        (folder / HOLDER_NAME).unlink(missing_ok=True)  # before the release: a next holder's note is its own
        os.close(fd)  # releases the lock; the lock file stays (deleting it would race a waiting process)
