"""Outputs the user names are created, never clobbered: the one rule for every writer whose path comes from the
user (``explore --out``, ``probe --plot``, ``compare-runs --out``, ``TokenView.save``, a detector folder …).

A named output is written when it does not exist yet. One that exists is replaced only when it is a regular file
this command made before (it carries the command's mark, or its record says so) or the user passed ``--force``; it
is never replaced when it is

* a directory, a FIFO, a device or a socket (``--out /dev/null`` would replace the system's ``/dev/null`` with a
  regular file: a rename replaces whatever entry has the name);
* a symlink (whatever it points to);
* one of a run folder's own entries - its manifest, a table, anything under its folders (``sidecars/``,
  ``checkpoints/``, ``notebooks/`` …), its lock or staging (:func:`~agentuq_nb.io.store.rundir.run_folder_entry`):
  a page written *beside* the tables (``RUN/explorer.html``) or into ``RUN/figures/`` is fine;
* an input of the command (the results a run was made from, a run folder it reads).

``--force`` lifts only the first condition (a regular file someone else made). Every refusal is one
:class:`~agentuq_nb.io.errors.InputError` naming the path, the option and what is wrong, raised before any work. The
option is named as the user set it in the library - its config field (``out``, ``force``) heading a clause -, which
the command line says as its flag (``--out``, ``--force``: :func:`agentuq_nb.cli.in_flags`); no flag is named here.

Writers call :func:`check_output_file` (or :func:`check_output_folder` for a folder of outputs) once before their
work, to fail fast, and again right before they publish (the work may take a while; what is at the path may have
changed), then write atomically (:mod:`agentuq_nb.io.atomic`).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from agentuq_nb.io.errors import InputError
from agentuq_nb.io.files import kind_of, open_regular
from agentuq_nb.io.store.rundir import is_run_folder, run_folder_entry

#: bytes read from each end of an existing file to find a writer's mark (a page's generator tag near its start, a
#: PDF's ``/Creator`` in its trailing info dictionary)
MARK_WINDOW = 64 * 1024

#: how a writer recognises a file it made before: its mark (bytes found near the file's start or end; several: the
#: marks of its earlier versions too), or a test of the path
MadeBefore = bytes | tuple[bytes, ...] | Callable[[Path], bool] | None


def has_mark(path: Path, marks: bytes | tuple[bytes, ...]) -> bool:
    """Whether the regular file ``path`` holds one of ``marks`` within its first or last :data:`MARK_WINDOW` bytes."""
    marks = (marks,) if isinstance(marks, bytes) else marks
    with open_regular(path, "a file to replace") as fh:  # never blocks on a FIFO swapped in since the check
        head = fh.read(MARK_WINDOW)
        size = os.fstat(fh.fileno()).st_size
        fh.seek(max(0, size - MARK_WINDOW))
        tail = fh.read(MARK_WINDOW) if size > MARK_WINDOW else b""
    return any(mark in head or mark in tail for mark in marks)


def _lstat(path: Path, option: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        raise InputError(path, f"{option} names a path that cannot be made: {blocking} is a file, not a folder") from None
    except (OSError, ValueError) as err:  # a name too long, a NUL byte, no permission
        raise InputError(path, f"{option} names a path that cannot be written: {getattr(err, 'strerror', None) or err}"
                         ) from None


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return Path(os.path.abspath(a)) == Path(os.path.abspath(b))


def _check_common(path: Path, st: os.stat_result | None, *, command: str, option: str, what: str,
                  inputs: Iterable[str | os.PathLike]) -> None:
    """The refusals ``--force`` never lifts: a link, a run folder's own entry, an input of the command, a path a
    file is in the way of."""
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise InputError(path, f"is a symlink (to {os.readlink(path)}): {option} names the {what} itself; '{command}' "
                               "never writes through a link - remove it or name another path")
    if st is None:
        blocking = next((p for p in path.parents if os.path.lexists(p) and not p.is_dir()), None)
        if blocking is not None:
            raise InputError(path, f"{option} names a path that cannot be made: {blocking} is a file, not a folder")
    entry = run_folder_entry(path)
    if entry is not None:
        folder, rel = entry
        raise InputError(path, f"is {rel} of the run folder {folder}: {option} names a run's own file, which "
                               f"'{command}' never writes over; name a new {what} (one beside the run's tables is fine)")
    for given in inputs:
        given = Path(given)
        if st is not None and os.path.lexists(given) and _same(path, given):
            raise InputError(path, f"is an input of '{command}' ({given}): {option} must name another {what}")


def check_output_file(path: str | os.PathLike, *, command: str, option: str = "out", what: str = "file",
                      made_before: MadeBefore = None, inputs: Iterable[str | os.PathLike] = (),
                      force: bool = False, example: str = "out") -> Path:
    """``path`` when the command may write the file there (see the module docstring), else an :class:`InputError`.

    ``command`` and ``option`` name what the user set (``"explore"``, ``"out"``: a config field, which the command line
    says as its flag; a step may hand in its flag); ``what`` is what the file is
    (``"HTML page"``); ``made_before``: the mark (bytes) this command's files carry, or a test of a path, that
    tells a file it made before (None: none is recognised, only ``force`` replaces an existing file); ``inputs``:
    the paths the command reads, never written over; ``force``: replace a regular file someone else made;
    ``example``: a file name suggested when ``path`` is a folder."""
    path = Path(path)
    st = _lstat(path, option)
    if st is not None and not stat.S_ISLNK(st.st_mode) and not stat.S_ISREG(st.st_mode):
        hint = f" (e.g. {path / example})" if stat.S_ISDIR(st.st_mode) else ""
        raise InputError(path, f"is {kind_of(st.st_mode)}: {option} names the {what} to write{hint}; '{command}' "
                               "replaces only a regular file it made before")
    _check_common(path, st, command=command, option=option, what=what, inputs=inputs)
    if st is None or force:
        return path
    made = made_before is not None and (made_before(path) if callable(made_before) else has_mark(path, made_before))
    if not made:
        raise InputError(path, f"exists and was not made by '{command}': {option} does not replace another file; "
                               "name a new file; force: replace it")
    return path


def check_output_folder(path: str | os.PathLike, *, command: str, files: Iterable[str], option: str = "out",
                        made_before: MadeBefore = None, inputs: Iterable[str | os.PathLike] = (),
                        force: bool = False) -> Path:
    """``path`` when the command may write its ``files`` (plain names) into that folder, else an
    :class:`InputError`: the folder is new, or a real directory (not a link, not a run folder or inside one's own
    folders, not an input or inside one), and each of ``files`` there passes :func:`check_output_file` (with
    ``made_before`` and ``force``). Other files in the folder are left alone. For a command that writes a folder of
    its own outputs (``compare-runs --out``, a detector folder)."""
    path = Path(path)
    st = _lstat(path, option)
    if st is not None and not stat.S_ISLNK(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        kind = "a file" if stat.S_ISREG(st.st_mode) else kind_of(st.st_mode)
        raise InputError(path, f"is {kind}, not a folder: {option} names the folder '{command}' writes its files to")
    _check_common(path, st, command=command, option=option, what="folder", inputs=inputs)
    if st is not None and is_run_folder(path):
        raise InputError(path, f"is a run folder: {option} names the folder '{command}' writes its own files to; name "
                               "another")
    resolved = Path(os.path.abspath(path)).resolve()
    for given in inputs:
        given = Path(given).resolve()
        if given.is_dir() and resolved.is_relative_to(given):
            raise InputError(path, f"is inside {given}, an input of '{command}': {option} must be a folder of its own")
    for name in files:
        check_output_file(path / name, command=command, option=f"{option} {path}", what=f"file {name}",
                          made_before=made_before, force=force)
    return path


def check_run_destination(out: str | os.PathLike, results: str | os.PathLike, *, command: str,
                          option: str = "out", inputs: Iterable[str | os.PathLike] = (),
                          force: bool | None = None) -> Path:
    """``out`` when ``command`` may extract ``results`` into it as a run folder, else an :class:`InputError` before any
    work: it is not inside the results (a results directory: its content, and so every run made from it, would
    change) nor inside or equal to another input (``inputs``: a detector folder), and it holds no run made from other
    results (by content, :func:`~agentuq_nb.io.files.content_digest`: a copy of the same results is the same run) -
    their tables would be replaced and mixed with what was made from them. ``force``: the command's ``--force`` (True:
    a run of other results is replaced whole - ``extract``'s contract: the run's earlier artefacts are then found
    stale; False: not given, the refusal says it; None: the command has none)."""
    from agentuq_nb.io.files import content_digest
    from agentuq_nb.io.store.rundir import RunDir

    out = Path(out)
    if os.path.islink(out):
        raise InputError(out, f"is a symlink (to {os.readlink(out)}): {option} names the run folder itself; "
                              f"'{command}' never writes through a link - give the folder's own path")
    resolved = Path(os.path.abspath(out)).resolve()
    for given in (results, *inputs):
        given = Path(given)
        if given.is_dir() and resolved.is_relative_to(given.resolve()):
            raise InputError(out, f"is {'' if resolved == given.resolve() else 'inside '}{given}, an input of "
                                  f"'{command}': {option} names a run folder of its own")
    if force or not out.is_dir() or not is_run_folder(out):
        return out
    run = RunDir(out)
    manifest = run.manifest(check=False)
    made_from = manifest.results or (str(run.results_json) if run.results_json.is_file() else None)
    if manifest.results_sha256 is not None:
        same = content_digest(results) == manifest.results_sha256
    elif made_from is not None and Path(made_from).is_file():
        same = Path(made_from).resolve() == Path(results).resolve() or \
            content_digest(made_from) == content_digest(results)
    else:
        same = made_from is not None and Path(made_from).resolve() == Path(results).resolve()
    if not same:
        raise InputError(out, f"holds another run (made from {made_from or 'results it does not name'}): '{command}' "
                              f"writes the run of {results} into a folder of its own - its tables would replace that "
                              f"run's and be mixed with what was made from them; {option}: a new folder; "
                              + ("force: replace that run whole" if force is not None else "or remove this one"))
    return out
