"""A model's static embedding table as a file: written once, read back as untrusted input.

The black-box signals embed texts with a static table distilled from all-MiniLM-L6-v2
(:mod:`agentuq_nb.uq.static_embedding`); distilling takes half a minute, so the table is kept in the user's cache
folder beside the embedding cache (:func:`~agentuq_nb.io.embedding_cache.cache_path`), named by a hash of what it was
made from (:func:`table_path`). Format: safetensors (raw little-endian float32 and a JSON header, never pickle), one
tensor ``table`` and the metadata ``format`` and ``identity`` (the model's identity and the distillation's settings).

The file is untrusted, like the embedding cache: a table is used only when the file is a regular file of this user
(not a symlink), no larger than the table it should hold, its metadata name this format and this identity, its
tensor is float32 of the expected shape with finite values, and its keyed checksum holds: the HMAC of the table under
this installation's key (:data:`KEY_NAME` beside it, 32 random bytes made on first use), so that a well-formed but
wrong table - zeros, one repeated row, shuffled rows - is refused rather than steering every signal. Anything else is refused with one warning naming the file
and what is wrong - and never deleted or changed: the caller distills the table afresh for the process.
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import warnings
from pathlib import Path

import numpy as np

FORMAT = "agentuq_nb static embedding table 2"
#: bytes a safetensors file holds beyond its tensor (the JSON header)
HEADER_SLACK = 64 * 1024
#: largest absolute value a table entry may hold (distilled entries are below ~10)
MAX_ABS_VALUE = 1e3


class StaticTableWarning(UserWarning):
    """A static table file was refused: the table is distilled again for this process."""


def table_path(cache_file: Path | None, identity: str) -> Path | None:
    """Where the table made as ``identity`` says is kept: beside the embedding cache file (None: no cache, none)."""
    if cache_file is None:
        return None
    digest = hashlib.blake2b(f"{FORMAT}|{identity}".encode("utf-8"), digest_size=8).hexdigest()
    return Path(cache_file).parent / f"static-table-{digest}.safetensors"


#: this installation's key of the tables' checksums, beside the table (32 random bytes, readable by the user only)
KEY_NAME = "installation.key"


def installation_key(folder: Path) -> bytes | None:
    """The key of ``folder``'s :data:`KEY_NAME`, made on first use (written whole, then linked into place: two
    processes agree on one); None when it is not a regular 32-byte file of this user or cannot be made."""
    import secrets

    path = Path(folder) / KEY_NAME
    if not os.path.lexists(path):
        try:
            fd, tmp = tempfile.mkstemp(prefix=".installation-", suffix=".tmp", dir=folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(secrets.token_bytes(32))
                os.link(tmp, path)
            except FileExistsError:
                pass
            finally:
                os.unlink(tmp)
        except OSError:
            return None
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode) or info.st_size != 32 or (
                hasattr(os, "getuid") and info.st_uid != os.getuid()):
            return None
        with open(path, "rb") as fh:
            return fh.read(32)
    except OSError:
        return None


def keyed_checksum(key: bytes, table: np.ndarray, identity: str) -> str:
    """The HMAC-SHA256 of ``identity`` and ``table``'s bytes under this installation's ``key``."""
    import hmac

    return hmac.new(key, identity.encode("utf-8") + b"\0" + np.ascontiguousarray(table, np.float32).tobytes(),
                    "sha256").hexdigest()


def refuse(path: Path, why: str) -> None:
    warnings.warn(f"{path}: {why}; the static embedding table is distilled again for this process (remove the file "
                  "to let it be rewritten)", StaticTableWarning, stacklevel=3)


def read_table(path: Path, identity: str, shape: tuple[int, int]) -> np.ndarray | None:
    """The table in ``path`` if it is the one ``identity`` names, of ``shape``; None if there is no file or it is
    refused (with a :class:`StaticTableWarning`)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        refuse(path, "is not a regular file (a symlink, a folder, a device)")
        return None
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        refuse(path, "belongs to another user")
        return None
    expected = shape[0] * shape[1] * 4
    if info.st_size > expected + HEADER_SLACK:
        refuse(path, f"holds {info.st_size:,} bytes where a {shape[0]}×{shape[1]} float32 table takes {expected:,}")
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="numpy") as f:
            meta = f.metadata() or {}
        if meta.get("format") != FORMAT or meta.get("identity") != identity:
            refuse(path, "was made from another model or with other settings")
            return None
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as err:
        refuse(path, f"is not a readable safetensors file ({err})")
        return None
    table = tensors.get("table")
    if set(tensors) != {"table"} or table is None:
        refuse(path, f"holds the tensors {sorted(tensors)}, not one named 'table'")
        return None
    if table.dtype != np.float32 or table.shape != tuple(shape):
        refuse(path, f"holds a {table.dtype} table of shape {table.shape}, not float32 {tuple(shape)}")
        return None
    if not np.isfinite(table).all() or np.abs(table).max(initial=0.0) > MAX_ABS_VALUE:
        refuse(path, "holds non-finite or out-of-range values")
        return None
    key = installation_key(path.parent)
    if key is None or meta.get("checksum") != keyed_checksum(key, table, identity):
        refuse(path, "was not written by this installation (its keyed checksum does not hold): a table edited or "
                     "planted - zeros, one repeated row, shuffled rows - would move every signal silently")
        return None
    return table


def write_table(path: Path, table: np.ndarray, identity: str) -> None:
    """Write ``table`` to ``path`` atomically (a temporary file beside it, then a rename): a reader sees the old file
    or the whole new one, and two processes distilling at once leave one of their (equal) tables."""
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    key = installation_key(path.parent)
    if key is None:
        raise OSError(f"{path.parent / KEY_NAME}: this installation's key cannot be made or read")
    fd, tmp = tempfile.mkstemp(prefix=".static-table-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file({"table": np.ascontiguousarray(table, dtype=np.float32)}, tmp,
                  metadata={"format": FORMAT, "identity": identity, "checksum": keyed_checksum(key, table, identity)})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
