"""A persistent cache of sentence embeddings, shared by runs and processes: one SQLite file.

Real runs repeat their texts (greetings, refusals, identical tool results, the same simulated-user lines across
trials and agents), and the analyses that read them run again and again (``analyze`` after a change of threshold, a
detector trained across runs). The embedding of a text under one model and one truncation length is a fact worth
keeping: :class:`EmbeddingCache` keeps it, keyed by a hash of (model identity, word pieces read, text).

Where: :func:`cache_path` — a path given by the caller (a config field), else ``$AGENTUQ_NB_EMBED_CACHE``, else
``embeddings.sqlite`` in the user's cache folder (``platformdirs``: ``$XDG_CACHE_HOME/agentuq_nb`` on Linux);
``off`` (the variable or the field) disables it. Bounded: past ``max_mb`` the least recently used entries go.
SQLite (WAL journal, a busy timeout, writes in ``BEGIN IMMEDIATE`` transactions) lets several processes read and
write the same file at once without corrupting it.

The file is untrusted input, like a run folder someone sent: nothing in it is ever unpickled (a vector is raw
little-endian float32 bytes), and an entry is used only when its model and length are this embedder's, its size is
the model's dimension (checked in SQL before the blob is fetched), its values are finite and of unit norm, and its
keyed checksum holds: the HMAC-SHA256, under this installation's key (``installation.key`` beside the file,
:func:`~agentuq_nb.io.static_table.installation_key`, as the static table's), of the entry's key (model, length and
text) and its vector - so that a well-formed unit vector planted for a text (by hand, or by another installation)
is refused rather than steering the signals silently. A refused entry is recomputed and overwritten (one warning
says how many); a file that is not such a database (another file, a symlink, another user's file, foreign tables or
triggers) disables the cache for the process with one warning naming the file — it is never deleted or changed. A
cache of schema 1 (written before the checksums) has its entries dropped once and is used on. Only the texts'
hashes are stored, never the texts.
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

#: environment variable naming the cache file (``off``: no cache)
CACHE_ENV = "AGENTUQ_NB_EMBED_CACHE"
CACHE_NAME = "embeddings.sqlite"
OFF = ("off", "none", "0", "false", "no")
DEFAULT_MAX_MB = 512
#: bytes one entry takes in the file beside its vector (key, hashes, the index on ``used``, free space in SQLite's
#: pages): 384-float entries take ~2.1 KiB each, measured on the caches of the shared real runs
ENTRY_OVERHEAD_BYTES = 600
#: how far from 1 a cached vector's norm may be (float32 normalisation leaves ~1e-7)
NORM_TOLERANCE = 1e-3
SCHEMA_VERSION = "2"
#: the database objects this cache makes; a file holding any other (a trigger, a view) is refused
SCHEMA = {
    ("table", "meta"): "CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ("table", "embeddings"): "CREATE TABLE embeddings (key BLOB PRIMARY KEY, model TEXT NOT NULL, "
                             "max_tokens INTEGER NOT NULL, checksum BLOB NOT NULL, dim INTEGER NOT NULL, "
                             "vector BLOB NOT NULL, used REAL NOT NULL)",
    ("index", "embeddings_used"): "CREATE INDEX embeddings_used ON embeddings (used)",
}
#: the embeddings table of schema 1 (a hash of the text where schema 2 has the keyed checksum): its rows are dropped
SCHEMA_1_TABLE = SCHEMA[("table", "embeddings")].replace("checksum BLOB", "text_sha256 BLOB")
AUTOINDEXES = {"sqlite_autoindex_meta_1", "sqlite_autoindex_embeddings_1"}
CHUNK = 500  # keys per SELECT (below SQLite's bound on host parameters)


class EmbeddingCacheWarning(UserWarning):
    """The embedding cache could not be used (or refused some entries): the analysis goes on without them."""


def cache_path(setting: str | os.PathLike | None = None) -> Path | None:
    """The cache file: ``setting`` (a path, or ``off``), else ``$AGENTUQ_NB_EMBED_CACHE``, else ``embeddings.sqlite``
    in the user's cache folder. None: no cache."""
    value = os.fspath(setting) if setting is not None else os.environ.get(CACHE_ENV, "")
    if value.strip().lower() in OFF:
        return None
    if value.strip():
        return Path(value).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("agentuq_nb", appauthor=False)) / CACHE_NAME


def entry_key(model: str, max_tokens: int, text: str) -> bytes:
    """The key of ``text`` embedded by ``model`` reading ``max_tokens`` word pieces."""
    h = hashlib.blake2b(digest_size=16)
    for part in (model, str(max_tokens), text):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.digest()


def entry_checksum(secret: bytes, key: bytes, vector: bytes) -> bytes:
    """The keyed checksum of an entry: HMAC-SHA256 under this installation's ``secret`` of its ``key`` (which binds the
    model, the length and the text) and its ``vector``'s bytes."""
    import hmac

    return hmac.new(secret, key + vector, "sha256").digest()


def valid_vector(blob: bytes, dim: int) -> np.ndarray | None:
    """The float32 vector of ``blob`` when it has ``dim`` finite values of unit norm, else None."""
    if not isinstance(blob, bytes) or len(blob) != 4 * dim:
        return None
    v = np.frombuffer(blob, dtype="<f4")
    if not np.isfinite(v).all() or abs(float(np.linalg.norm(v.astype(np.float64))) - 1.0) > NORM_TOLERANCE:
        return None
    return v.astype(np.float32)


class EmbeddingCache:
    """The embeddings of one model at one truncation length in the cache file ``path`` (see the module docstring).

    :meth:`lookup` returns the valid cached vectors of some texts; :meth:`store` adds vectors. Any SQLite error
    disables the cache for this object (one warning): an analysis never fails for its cache."""

    def __init__(self, path: str | os.PathLike, model: str, max_tokens: int, dim: int,
                 max_mb: float = DEFAULT_MAX_MB):
        self.path = Path(path)
        self.model, self.max_tokens, self.dim = model, int(max_tokens), int(dim)
        self.model_hash = hashlib.blake2b(model.encode("utf-8"), digest_size=8).hexdigest()  # what a row records
        self.max_entries = max(1, int(max_mb * 2**20 // (4 * self.dim + ENTRY_OVERHEAD_BYTES)))
        self.hits = self.refused = self.stored = 0
        self.disabled: str | None = None
        self._secret: bytes | None = None  # this installation's key of the entries' checksums
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()  # one connection, used by one thread at a time

    # ------------------------------------------------------------------ opening
    def _refuse(self, why: str) -> None:
        if self.disabled is None:
            self.disabled = why
            warnings.warn(f"embedding cache {self.path}: {why}; embeddings are computed without it (set "
                          f"{CACHE_ENV} to another file, or to 'off')", EmbeddingCacheWarning, stacklevel=3)
        if self._db is not None:
            self._db.close()
            self._db = None

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None or self.disabled is not None:
            return self._db
        path = self.path
        try:
            if path.is_symlink():
                return self._refuse("is a symbolic link (refused: it could point anywhere)")
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if path.exists():
                st = path.stat()
                if not path.is_file():
                    return self._refuse("is not a file")
                if hasattr(os, "getuid") and st.st_uid != os.getuid():
                    return self._refuse("belongs to another user")
            from agentuq_nb.io.static_table import KEY_NAME, installation_key

            self._secret = installation_key(path.parent)
            if self._secret is None:
                return self._refuse(f"has no usable installation key beside it ({path.parent / KEY_NAME}: not a "
                                    "regular 32-byte file of this user, or it cannot be made)")
            db = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
            self._db = db
            db.execute("PRAGMA trusted_schema = OFF")
            found = {(t, n): sql for t, n, sql in db.execute("SELECT type, name, sql FROM sqlite_master")}
            if not found:
                self._create(db)
            else:
                extra = {k for k in found if k not in SCHEMA and k[1] not in AUTOINDEXES}
                if not extra and found.get(("table", "embeddings")) == SCHEMA_1_TABLE and all(
                        found.get(k) == sql for k, sql in SCHEMA.items() if k != ("table", "embeddings")):
                    self._upgrade(db)
                    found = {(t, n): sql for t, n, sql in db.execute("SELECT type, name, sql FROM sqlite_master")}
                if extra or any(found.get(k) != sql for k, sql in SCHEMA.items()):
                    return self._refuse("is a SQLite database of another shape (tables, triggers or views this "
                                        "cache does not make)")
                version = db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone()
                if version is None or version[0] != SCHEMA_VERSION:
                    return self._refuse(f"has cache schema {version and version[0]!r}, not {SCHEMA_VERSION!r}")
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.DatabaseError as err:
            return self._refuse(f"is not a usable SQLite database ({err})")
        except OSError as err:
            return self._refuse(f"cannot be opened ({err.strerror or err})")
        return self._db

    def _create(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")
        try:
            if not db.execute("SELECT 1 FROM sqlite_master").fetchone():  # another process may have made it
                for sql in SCHEMA.values():
                    db.execute(sql)
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _upgrade(self, db: sqlite3.Connection) -> None:
        """A cache of schema 1 (this cache's own shape before the keyed checksums): its entries dropped, schema 2."""
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT value FROM meta WHERE name = 'schema'").fetchone() == ("1",):
                db.execute("DROP TABLE embeddings")  # (and its index)
                db.execute(SCHEMA[("table", "embeddings")])
                db.execute(SCHEMA[("index", "embeddings_used")])
                db.execute("UPDATE meta SET value = ? WHERE name = 'schema'", (SCHEMA_VERSION,))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ reading and writing
    def keys(self, texts: Sequence[str]) -> list[bytes]:
        return [entry_key(self.model, self.max_tokens, t) for t in texts]

    def lookup(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The valid cached vectors of ``texts`` (text → unit float32 vector); refused entries are left out."""
        with self._lock:
            return self._lookup(texts)

    def _lookup(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        db = self._connect()
        if db is None or not texts:
            return {}
        wanted = dict(zip(self.keys(texts), texts))
        found: dict[str, np.ndarray] = {}
        refused = self.refused
        try:
            keys = list(wanted)
            for i in range(0, len(keys), CHUNK):
                part = keys[i:i + CHUNK]
                # the blob is fetched only when its size is a vector's (SQLite reads a blob's length from the record
                # header): a planted 800 MB entry is refused without being read
                rows = db.execute("SELECT key, model, max_tokens, checksum, dim, CASE WHEN typeof(vector) = 'blob' "
                                  "AND length(vector) = ? THEN vector END FROM embeddings WHERE key "
                                  f"IN ({','.join('?' * len(part))})", [4 * self.dim, *part]).fetchall()
                for key, model, max_tokens, checksum, dim, blob in rows:
                    text = wanted.get(key)
                    vector = valid_vector(blob, self.dim) if dim == self.dim else None
                    if (text is None or model != self.model_hash or max_tokens != self.max_tokens or vector is None
                            or checksum != entry_checksum(self._secret, key, blob)):
                        self.refused += 1
                        continue
                    found[text] = vector
            if found:
                self._touch([k for k, t in wanted.items() if t in found])
        except sqlite3.Error as err:
            self._refuse(f"cannot be read ({err})")
            return {}
        if self.refused > refused:
            warnings.warn(f"embedding cache {self.path}: {self.refused - refused} entries refused (another model or "
                          "length, vectors of the wrong size, not finite or not of unit norm, or a keyed checksum that "
                          "does not hold: not written by this installation, or edited): computed again and replaced",
                          EmbeddingCacheWarning, stacklevel=3)
        self.hits += len(found)
        return found

    def _touch(self, keys: list[bytes]) -> None:
        """Mark entries as used now (what eviction keeps); skipped when another process holds the write lock."""
        now = time.time()
        try:
            for i in range(0, len(keys), CHUNK):
                part = keys[i:i + CHUNK]
                self._db.execute(f"UPDATE embeddings SET used = ? WHERE key IN ({','.join('?' * len(part))})",
                                 [now, *part])
        except sqlite3.OperationalError:  # busy past the timeout: the recency of a few entries is not worth waiting
            pass

    def store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Add (or replace) the vectors of ``texts``; then evict the least recently used past the bound."""
        with self._lock:
            self._store(texts, vectors)

    def _store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        db = self._connect()
        if db is None or not len(texts):
            return
        vectors = np.asarray(vectors, dtype="<f4")
        if vectors.shape != (len(texts), self.dim):
            raise ValueError(f"{vectors.shape[0]}×{vectors.shape[1:]} vectors for {len(texts)} texts of dimension "
                             f"{self.dim}")
        now = time.time()
        rows = [(key, self.model_hash, self.max_tokens, entry_checksum(self._secret, key, v.tobytes()), self.dim,
                 v.tobytes(), now) for key, v in zip(self.keys(texts), vectors)]
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                (count,) = db.execute("SELECT count(*) FROM embeddings").fetchone()
                if count > self.max_entries:  # evict down to 90 % of the bound, least recently used first
                    db.execute("DELETE FROM embeddings WHERE key IN (SELECT key FROM embeddings ORDER BY used "
                               "LIMIT ?)", (count - int(0.9 * self.max_entries),))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error as err:
            self._refuse(f"cannot be written ({err})")
            return
        self.stored += len(rows)

    def entries(self) -> int:
        with self._lock:
            db = self._connect()
            return 0 if db is None else int(db.execute("SELECT count(*) FROM embeddings").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
