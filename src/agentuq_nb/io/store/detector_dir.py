"""A detector folder: a learned failure detector saved as JSON and plain arrays, never pickle, and read back as the
untrusted input it is.

Layout (every name fixed; nothing else is read):

* ``card.json`` - the model card (what the detector was trained on, how well it did under each protocol, its
  calibration, feature groups and extraction version, library versions) and ``files``: the SHA-256 of every other
  file; ``card_sha256`` is the hash of the card itself without that key (canonical JSON);
* ``model.json`` - the fitted state's description (the models' settings, feature names, calibrators' coefficients);
* ``arrays.npz`` - every array (``numpy.savez_compressed``), read with ``allow_pickle=False``: no object array can be
  in it, and no byte of the folder is ever executed;
* tables (:data:`TABLES`, CSV) - the protocols' results, out-of-fold predictions, calibration bins, early detection,
  top features, the label-shift judgement per run and its rows: what the card summarizes, for a study to draw;
* ``card.md`` (:data:`CARD_TEXT`) - the card for a person: what it was trained on, every protocol against both
  baselines, what to trust (made from ``card.json``'s numbers; hashed like the tables).

**Reading** (:func:`read_detector_dir`) checks, each failure one :class:`~agentuq_nb.io.errors.InputError` naming the
file: the folder is a directory; each file a regular file (a symlink is refused: nothing outside the folder is read)
within its size bound (:mod:`agentuq_nb.common.limits`); the card parses, its own hash holds, it was written in this
format and by the feature extraction the caller expects (another version's features would be misread); every file's
hash is the card's; the archive's members are plain ``.npy`` names, their inflated sizes bounded before any is read,
and each member's header is read first (no object dtype, a shape whose bytes are exactly the member's: numpy allocates
a header's shape before it reads). Every field and number is then checked where the models are rebuilt
(:func:`agentuq_nb.evaluation.detector_apply.load_detector`).
The hashes find a damaged or edited folder; they are not a signature (who can edit the folder can recompute them) -
what protects the reader is that it only ever parses JSON and numeric arrays.

**Writing** (:func:`write_detector_dir`) stages the folder beside its destination and renames it into place: a reader
never sees half a detector, and an earlier detector at that path is replaced whole. The destination follows the one
output rule (:func:`check_destination`, :func:`agentuq_nb.io.outputs.check_output_folder`): a path that holds
anything other than a detector folder's regular files (or an empty folder) is refused, a card or file that is not a
detector's own is replaced only with ``force``, and never a link, a run folder, the current folder or inside an input.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import shutil
import stat
import tempfile
import uuid
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentuq_nb.common.limits import MAX_DETECTOR_ARRAY_BYTES, MAX_DETECTOR_JSON_BYTES, MAX_DETECTOR_TABLE_BYTES
from agentuq_nb.io.atomic import atomic_write_json, atomic_write_with
from agentuq_nb.io.errors import InputError, remedy
from agentuq_nb.io.files import kind_of, read_limited, read_limited_json

CARD = "card.json"
MODEL = "model.json"
ARRAYS = "arrays.npz"
#: the tables a detector folder may hold beside its card, model and arrays
TABLES = ("protocols.csv", "oof_predictions.csv", "reliability.csv", "early_detection.csv", "top_features.csv",
          "label_shift.csv", "label_shift_rows.csv")
#: the model card as a person reads it (Markdown, made from card.json's numbers)
CARD_TEXT = "card.md"
FILES = (MODEL, ARRAYS, *TABLES, CARD_TEXT)
#: the folder's format: raised when the layout changes
FORMAT = "agentuq_nb detector 1"
HASH_KEY = "card_sha256"


@dataclass
class DetectorFolder:
    """A detector folder as read: its ``card`` and ``model`` (JSON) and its ``arrays``."""

    path: Path
    card: dict[str, Any]
    model: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(default_factory=dict)

    def table(self, name: str) -> pd.DataFrame | None:
        """One of :data:`TABLES` (checked against the card's hash), None when the folder has none."""
        if name not in TABLES:
            raise ValueError(f"{name!r} is not a table of a detector folder ({', '.join(TABLES)})")
        if name not in self.card.get("files", {}):
            return None
        data = checked_bytes(self.path, name, self.card["files"][name], MAX_DETECTOR_TABLE_BYTES)
        return pd.read_csv(io.BytesIO(data))


def canonical_hash(card: dict[str, Any]) -> str:
    """The SHA-256 of the card without its own hash (sorted keys, no spaces)."""
    body = {k: v for k, v in card.items() if k != HASH_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                     allow_nan=False).encode()).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# --------------------------------------------------------------------------- writing
def own_card(folder: Path) -> dict[str, Any] | None:
    """The detector card of ``folder`` when it is one this format writes (a regular file whose own hash holds), else
    None."""
    try:
        card = read_limited_json(file_in(folder, CARD, MAX_DETECTOR_JSON_BYTES), MAX_DETECTOR_JSON_BYTES,
                                 "detector card")
        return card if isinstance(card, dict) and card.get("format") == FORMAT and \
            card.get(HASH_KEY) == canonical_hash(card) else None
    except (InputError, ValueError, TypeError):
        return None


def made_by_train_detector(path: Path) -> bool:
    """Whether ``path`` (an entry of a detector folder's names) is a detector's own: the folder's card is one of this
    format, and the file is the card or a file the card lists with its hash."""
    card = own_card(path.parent)
    if card is None:
        return False
    if path.name == CARD:
        return True
    expected = (card.get("files") or {}).get(path.name) if isinstance(card.get("files"), dict) else None
    limit = MAX_DETECTOR_ARRAY_BYTES if path.name == ARRAYS else MAX_DETECTOR_TABLE_BYTES
    try:
        return isinstance(expected, str) and bool(checked_bytes(path.parent, path.name, expected, limit))
    except InputError:
        return False


def check_destination(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = (), force: bool = False) -> Path:
    """Refuse a destination that is not new, an empty folder or a detector folder (before any work), by the one output
    rule (:func:`agentuq_nb.io.outputs.check_output_folder`): not a link, a run folder, an input or inside one; each
    entry of a detector's names a regular file a detector wrote (``force``: or someone else's regular file). The
    folder is replaced whole, so it may hold nothing else."""
    from agentuq_nb.io.outputs import check_output_folder

    out = Path(out)
    if out.name in ("", ".", "..") or Path(os.path.abspath(out)) == Path.cwd():
        raise InputError(out, "is the current folder or its parent: out names the detector's own folder, which is "
                              "replaced whole (e.g. a new folder detector)")
    if os.path.islink(out):
        raise InputError(out, "is a symlink: give the detector folder's own path (new, or a detector folder to replace)")
    if out.exists() and out.is_dir():
        entries = {e.name for e in os.scandir(out)}
        if entries and CARD not in entries:
            raise InputError(out, "holds other files and no detector card: choose a new folder for the detector")
        if entries - {CARD, *FILES}:
            raise InputError(out, f"holds files a detector folder does not ({', '.join(sorted(entries - {CARD, *FILES}))}"
                                  "): choose a new folder for the detector")
        for name in sorted(entries):  # a directory named card.json is not a card: the folder would be deleted whole
            mode = os.lstat(out / name).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(out / name, f"is {kind_of(mode)}, not a detector folder's file: out replaces only a "
                                             "detector folder (its regular files); choose a new folder")
    check_output_folder(out, command="train-detector", files=(CARD, *FILES), made_before=made_by_train_detector,
                        inputs=inputs, force=force)
    return out


def write_detector_dir(out: str | os.PathLike, card: dict[str, Any], model: dict[str, Any],
                       arrays: dict[str, np.ndarray], tables: dict[str, pd.DataFrame] | None = None,
                       texts: dict[str, str] | None = None, inputs: Iterable[str | os.PathLike] = (),
                       force: bool = False) -> dict[str, Any]:
    """Write a detector folder (see the module docstring); returns the card as written: ``card`` with ``format``,
    ``files`` and its own hash. ``texts``: ``{CARD_TEXT: markdown}``; ``inputs`` and ``force``: as
    :func:`check_destination`, checked again here."""
    out = check_destination(out, inputs, force)
    bad = [name for name, a in arrays.items() if np.asarray(a).dtype.hasobject or "/" in name]
    if bad:
        raise ValueError(f"arrays {bad} cannot be saved without pickle (object dtype) or have a path in their name")
    unknown = (set(tables or {}) - set(TABLES)) | (set(texts or {}) - {CARD_TEXT})
    if unknown:
        raise ValueError(f"{sorted(unknown)} are not tables of a detector folder ({', '.join(TABLES)})")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        atomic_write_json(staging / MODEL, model)
        atomic_write_with(staging / ARRAYS, lambda p: _save_arrays(p, arrays))
        for name, frame in (tables or {}).items():
            atomic_write_with(staging / name, lambda p, frame=frame: frame.to_csv(p, index=False))
        for name, text in (texts or {}).items():
            atomic_write_with(staging / name, lambda p, text=text: Path(p).write_text(text, encoding="utf-8"))
        written = [MODEL, ARRAYS, *(tables or {}), *(texts or {})]
        full = {**card, "format": FORMAT, "files": {name: sha256_file(staging / name) for name in written}}
        full[HASH_KEY] = canonical_hash(full)
        atomic_write_json(staging / CARD, full)
        os.chmod(staging, 0o755 & ~_umask())
        _publish(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return full


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _save_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with open(path, "wb") as fh:
        np.savez_compressed(fh, **{name: np.asarray(a) for name, a in arrays.items()})


def _publish(staging: Path, out: Path) -> None:
    """Rename the staged folder to ``out``; an earlier detector there is moved aside first and removed after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.old.tmp")
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except BaseException:
        if old is not None:
            os.replace(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- reading
def file_in(folder: Path, name: str, limit: int) -> Path:
    """``folder/name`` when it is a regular file (not a symlink) of at most ``limit`` bytes."""
    path = folder / name
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        raise InputError(path, "is missing: the detector folder is incomplete (train the detector again)") from None
    if stat.S_ISLNK(mode):
        raise InputError(path, "is a symlink: a detector folder's files must be its own (nothing outside it is read)")
    if not stat.S_ISREG(mode):
        raise InputError(path, f"is {kind_of(mode)}, not a regular file of a detector folder")
    size = os.lstat(path).st_size
    if size > limit:
        raise InputError(path, f"is {size:,} bytes, more than the {limit:,} a detector folder's file may have")
    return path


def checked_bytes(folder: Path, name: str, expected_sha256: str, limit: int) -> bytes:
    """A file's bytes, refused unless their SHA-256 is the card's."""
    path = file_in(folder, name, limit)
    data = read_limited(path, limit, "detector folder file")
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise InputError(path, "does not match the hash its card.json records: the file was changed or damaged "
                               "after the detector was written; train the detector again")
    return data


def read_detector_dir(path: str | os.PathLike, feature_version: str) -> DetectorFolder:
    """The detector folder at ``path``, checked (see the module docstring); ``feature_version``: the version of the
    feature extraction that will read it (a folder of another one is refused)."""
    folder = Path(path)
    if os.path.islink(folder) or not folder.is_dir():
        what = "a symlink" if os.path.islink(folder) else ("missing" if not folder.exists() else "not a folder")
        made = remedy("detector_folder", "(made by the train-detector step, agentuq_nb.steps.train_detector)")
        raise InputError(folder, f"is {what}: give a detector folder {made}")
    card_path = file_in(folder, CARD, MAX_DETECTOR_JSON_BYTES)
    card = read_limited_json(card_path, MAX_DETECTOR_JSON_BYTES, "detector card")
    if not isinstance(card, dict) or card.get("format") != FORMAT:
        found = card.get("format") if isinstance(card, dict) else None
        raise InputError(card_path, f"is not a detector card of this format (format {found!r}, expected {FORMAT!r})")
    if card.get(HASH_KEY) != canonical_hash(card):
        raise InputError(card_path, "does not match its own hash (card_sha256): the card was changed or damaged "
                                    "after the detector was written; train the detector again")
    found = card.get("feature_version")
    if found != feature_version:
        raise InputError(card_path, f"was made with feature extraction version {found!r}; this agentuq_nb extracts "
                                    f"version {feature_version!r}, whose features the detector would misread: train "
                                    "it again")
    files = card.get("files")
    if not isinstance(files, dict) or not {MODEL, ARRAYS} <= set(files) or set(files) - set(FILES):
        raise InputError(card_path, f"lists files {sorted(files) if isinstance(files, dict) else files!r}; a detector "
                                    f"folder holds {MODEL}, {ARRAYS} and tables among {', '.join(TABLES)}")
    if not all(isinstance(v, str) for v in files.values()):
        raise InputError(card_path, "lists a file hash that is not a string")
    model_bytes = checked_bytes(folder, MODEL, files[MODEL], MAX_DETECTOR_JSON_BYTES)
    try:
        model = json.loads(model_bytes)
    except (ValueError, RecursionError) as err:
        raise InputError(folder / MODEL, f"is not valid JSON: {err}") from None
    if not isinstance(model, dict):
        raise InputError(folder / MODEL, "is not a JSON object")
    arrays = read_arrays(folder / ARRAYS, checked_bytes(folder, ARRAYS, files[ARRAYS], MAX_DETECTOR_ARRAY_BYTES))
    return DetectorFolder(folder, card, model, arrays)


def read_arrays(path: Path, data: bytes) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` archive's bytes: members checked (plain ``.npy`` names, inflated sizes bounded, each
    member's ``.npy`` header read first: a plain dtype, never an object, and a shape whose bytes are exactly the
    member's - a header cannot claim more than the file holds) before numpy reads them without pickle."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as err:
        raise InputError(path, f"is not an array archive (.npz): {err}") from None
    total = 0
    for info in archive.infolist():
        name = info.filename
        if not name.endswith(".npy") or "/" in name or "\\" in name or name.startswith("."):
            raise InputError(path, f"holds the member {name!r}, which is not a plain array (.npy)")
        total += info.file_size
        if total > MAX_DETECTOR_ARRAY_BYTES:
            raise InputError(path, f"inflates to more than the {MAX_DETECTOR_ARRAY_BYTES:,} bytes a detector's arrays "
                                   "may have")
    for info in archive.infolist():
        check_member_header(path, archive, info)
    out = {}
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            for name in npz.files:
                out[name] = npz[name]
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise InputError(path, f"cannot be read as plain arrays (no pickle is loaded): {err}") from None
    return out


def check_member_header(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    """Refuse a member whose ``.npy`` header (read alone, before its data) names an object dtype or a shape whose
    bytes are not the member's: numpy allocates the header's shape before it reads, so a small member claiming a
    billion rows would take gigabytes."""
    from numpy.lib import format as npy

    member = info.filename
    try:
        with archive.open(info) as fh:
            version = npy.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = npy.read_array_header_1_0(fh)
            elif version == (2, 0):
                shape, _, dtype = npy.read_array_header_2_0(fh)
            else:
                raise ValueError(f"format version {version} (this reader takes 1.0 and 2.0)")
            data_bytes = info.file_size - fh.tell()
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, RuntimeError) as err:
        raise InputError(path, f"member {member}: is not a plain array (.npy): {err}") from None
    if dtype.hasobject:
        raise InputError(path, f"cannot be read as plain arrays (no pickle is loaded): member {member} holds objects "
                               f"(dtype {dtype}); a detector's arrays are numbers and text")
    if any(d < 0 for d in shape) or dtype.itemsize == 0:
        raise InputError(path, f"member {member}: has the shape {shape} of {dtype}, not an array's (a negative "
                               "length or an element of no bytes)")
    claimed = math.prod(shape) * dtype.itemsize
    if claimed != data_bytes:
        raise InputError(path, f"member {member}: its header claims shape {shape} of {dtype} ({claimed:,} bytes) but "
                               f"the member holds {data_bytes:,} bytes of data")
