"""Outputs unchanged: proof that a change of code (a restructuring, a speed-up) changed no result.

    python benchmarks/outputs_unchanged.py [--base REV] [--head REV|worktree] [--checks table,detector,figures]
                                           [--keep DIR] [--rtol 0 --atol 0]

Each side — the base revision (default: the merge-base of HEAD and main) and the head (default: this work tree as
it is, uncommitted changes included) — is materialised in turn at one and the same path (a ``git worktree add`` of
the revision; the work tree's tracked and untracked, not ignored, files copied), runs on the same virtualenv (the
one of the Python running this script) with ``PYTHONPATH`` at that tree's ``src/`` and an embedding cache of its
own, empty (a cached vector would hide a change of how it is computed), and produces:

``table``
    ``agentuq-nb analyze`` of a held-out real run (``--held-out``; default
    ``../shared/data/real_runs/gpt-4.1_telecom-no-user_1trial.json``, used by no test or study): its
    ``estimator_table.csv`` compared cell by cell, exactly unless ``--rtol``/``--atol`` say otherwise.
``detector``
    ``agentuq-nb train-detector`` on the shared runs, as the README shows it (``../shared/data/tau2/*.json``
    ``../shared/data/real_runs/*.json``): ``card.json`` compared number by number (every protocol's AUROC, the
    baselines', the candidates chosen, calibration, label shift) but for its clock (``created_at``, ``seconds``)
    and the hashes of its files, which are compared themselves: the tables as tables, ``model.json`` as JSON,
    ``arrays.npz`` array by array, ``card.md`` line by line (but for the time it was made).
``figures``
    the smoke study (``agentuq-nb reproduce params/smoke.yaml``, the tree's own params file): every file of
    ``figures/smoke/`` byte-identical.

It prints one PASS or DIFF line per check (DIFF naming the cells, keys or files that differ) and exits 0 when every
check passed, 1 on a difference, 2 when a side could not produce its outputs. The two sides run one after the
other at the same paths, so a path written into an output is the same on both. With ``--keep DIR`` the outputs
stay in ``DIR/<side>/`` (each command's log beside them), and a revision's outputs already there (a stamp records
the commit, the inputs and the environment's packages) are reused, not produced again: the base of several
comparisons is made once.
``--base HEAD --head HEAD`` runs the same code twice: what differs then is not deterministic.

Costs on the 2-core machine: the table ~1 min, the detector several minutes (it trains and bootstraps every
protocol), the smoke study several minutes (the embedded model simulates three tasks), per side.
"""
from __future__ import annotations

import argparse
import csv
import fnmatch
import functools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CHECKS = ("table", "detector", "figures")
WORKTREE = "worktree"
#: keys of card.json that are the clock or follow the bytes of files compared on their own
CARD_VOLATILE = ("created_at", "seconds", "seconds.*", "files", "files.*", "card_sha256")
#: a time written into a text output (card.md's "made at")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?")
#: at most this many differences are printed per check (the count of the rest follows)
SHOWN = 25
#: the compiled sidecar scanner: git ignores it, so a worktree of a revision lacks it
SCANNER_DIR = Path("src/agentuq_nb/io/ingest")
SCANNER_SOURCE = SCANNER_DIR / "sidecar_scan.c"


# ----------------------------------------------------------------------------------------------------------------
# Comparison: pure functions over two files or folders; each returns the differences, one line each (none: equal).
# ----------------------------------------------------------------------------------------------------------------

@dataclass
class Tolerance:
    """Numbers differing by at most ``atol + rtol * |base|`` count as equal (default: exactly equal)."""
    rtol: float = 0.0
    atol: float = 0.0

    @property
    def exact(self) -> bool:
        return self.rtol == 0.0 and self.atol == 0.0

    def close(self, a: float, b: float) -> bool:
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= self.atol + self.rtol * abs(a)

    def __str__(self) -> str:
        return "exactly" if self.exact else f"within rtol={self.rtol:g}, atol={self.atol:g}"


EXACT = Tolerance()


def as_number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def cells_equal(a: str, b: str, tol: Tolerance) -> bool:
    """Two CSV cells: the same text, or (with a tolerance) two numbers close enough."""
    if a == b:
        return True
    if tol.exact:
        return False
    x, y = as_number(a), as_number(b)
    return x is not None and y is not None and tol.close(x, y)


def read_csv(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows:
        return [], []
    return rows[0], rows[1:]


def row_keys(header: list[str], rows: list[list[str]]) -> list[str]:
    """How a row is named in a difference: the first column's value when it is unique (``estimator`` in the
    estimator table), else ``#<row number>``."""
    first = [r[0] if r else "" for r in rows]
    if header and len(set(first)) == len(first):
        return [f"{header[0]}={v}" for v in first]
    return [f"#{i + 1}" for i in range(len(rows))]


def compare_tables(base: Path, head: Path, tol: Tolerance = EXACT, name: str | None = None) -> list[str]:
    """Two CSV tables, cell by cell: columns and rows present on one side only, rows or columns in another order, and
    each differing cell as ``name: row <key>, column <col>: <base> → <head>``."""
    name = name or head.name
    bh, brows = read_csv(base)
    hh, hrows = read_csv(head)
    out: list[str] = []
    if bh != hh:
        only_base = [c for c in bh if c not in hh]
        only_head = [c for c in hh if c not in bh]
        if only_base:
            out.append(f"{name}: column(s) only in base: {', '.join(only_base)}")
        if only_head:
            out.append(f"{name}: column(s) only in head: {', '.join(only_head)}")
        if not only_base and not only_head:
            out.append(f"{name}: the same columns in another order")
    bkeys, hkeys = row_keys(bh, brows), row_keys(hh, hrows)
    by_key = bkeys[:1] and bkeys[0][:1] != "#" and hkeys[:1] and hkeys[0][:1] != "#"
    if not by_key:  # rows named by number: the first column repeats; compare row i with row i
        bkeys, hkeys = [f"#{i + 1}" for i in range(len(brows))], [f"#{i + 1}" for i in range(len(hrows))]
    bmap, hmap = dict(zip(bkeys, brows)), dict(zip(hkeys, hrows))
    only_base = [k for k in bkeys if k not in hmap]
    only_head = [k for k in hkeys if k not in bmap]
    if only_base:
        out.append(f"{name}: {len(only_base)} row(s) only in base: {', '.join(only_base[:10])}"
                   + (" …" if len(only_base) > 10 else ""))
    if only_head:
        out.append(f"{name}: {len(only_head)} row(s) only in head: {', '.join(only_head[:10])}"
                   + (" …" if len(only_head) > 10 else ""))
    common = [k for k in bkeys if k in hmap]
    if common != [k for k in hkeys if k in bmap]:
        out.append(f"{name}: the same rows in another order")
    columns = [c for c in bh if c in hh]
    bidx, hidx = {c: i for i, c in enumerate(bh)}, {c: i for i, c in enumerate(hh)}
    for key in common:
        brow, hrow = bmap[key], hmap[key]
        for col in columns:
            a = brow[bidx[col]] if bidx[col] < len(brow) else ""
            b = hrow[hidx[col]] if hidx[col] < len(hrow) else ""
            if not cells_equal(a, b, tol):
                out.append(f"{name}: row {key}, column {col}: {a!r} → {b!r}")
    return out


def compare_json(base, head, tol: Tolerance = EXACT, ignore: Sequence[str] = (), path: str = "") -> list[str]:
    """Two parsed JSON values, leaf by leaf; a difference names its dotted path (``protocols.within_run.auroc``).
    Paths matching a pattern of ``ignore`` (fnmatch, e.g. ``seconds.*``) are left out."""
    if path and any(fnmatch.fnmatchcase(path, pattern) for pattern in ignore):
        return []
    where = path or "(top)"
    if isinstance(base, dict) and isinstance(head, dict):
        out = []
        for key in [*base, *(k for k in head if k not in base)]:
            sub = f"{path}.{key}" if path else str(key)
            if any(fnmatch.fnmatchcase(sub, pattern) for pattern in ignore):
                continue
            if key not in head:
                out.append(f"{sub}: only in base")
            elif key not in base:
                out.append(f"{sub}: only in head")
            else:
                out.extend(compare_json(base[key], head[key], tol, ignore, sub))
        return out
    if isinstance(base, list) and isinstance(head, list):
        out = [f"{where}: {len(base)} items → {len(head)}"] if len(base) != len(head) else []
        for i, (a, b) in enumerate(zip(base, head)):
            out.extend(compare_json(a, b, tol, ignore, f"{path}[{i}]"))
        return out
    numbers = (int, float)
    if (isinstance(base, numbers) and isinstance(head, numbers) and not isinstance(base, bool)
            and not isinstance(head, bool)):
        same = base == head or (not tol.exact and tol.close(float(base), float(head)))
        return [] if same else [f"{where}: {base!r} → {head!r}"]
    return [] if base == head and type(base) is type(head) else [f"{where}: {base!r} → {head!r}"]


def compare_arrays(base: Path, head: Path, tol: Tolerance = EXACT, name: str | None = None) -> list[str]:
    """Two ``.npz`` files array by array (names, dtypes, shapes, values; NaN equals NaN)."""
    name = name or head.name
    out = []
    with np.load(base, allow_pickle=False) as b, np.load(head, allow_pickle=False) as h:
        for key in sorted(set(b.files) | set(h.files)):
            if key not in h.files or key not in b.files:
                out.append(f"{name}: array {key} only in {'base' if key in b.files else 'head'}")
                continue
            x, y = b[key], h[key]
            if x.dtype != y.dtype or x.shape != y.shape:
                out.append(f"{name}: array {key}: {x.dtype}{list(x.shape)} → {y.dtype}{list(y.shape)}")
            elif x.dtype.kind in "fc":
                same = (np.array_equal(x, y, equal_nan=True) if tol.exact
                        else np.allclose(y, x, rtol=tol.rtol, atol=tol.atol, equal_nan=True))
                if not same:
                    diff = np.abs(np.nan_to_num(x) - np.nan_to_num(y))
                    out.append(f"{name}: array {key}: {int((diff > 0).sum())} of {x.size} values differ "
                               f"(largest {float(diff.max()):.3g})")
            elif not np.array_equal(x, y):
                out.append(f"{name}: array {key}: {int((x != y).sum())} of {x.size} values differ")
    return out


def compare_text(base: Path, head: Path, name: str | None = None, clock: bool = False) -> list[str]:
    """Two text files line by line: the first differing line. ``clock``: the times written in them (ISO 8601, as the
    detector card's "made at") are left out."""
    name = name or head.name
    a = base.read_text(encoding="utf-8", errors="replace").splitlines()
    b = head.read_text(encoding="utf-8", errors="replace").splitlines()
    if clock:
        a, b = [TIMESTAMP.sub("<time>", line) for line in a], [TIMESTAMP.sub("<time>", line) for line in b]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return [f"{name}: line {i + 1}: {x[:120]!r} → {y[:120]!r}"]
    return [f"{name}: {len(a)} lines → {len(b)}"] if len(a) != len(b) else []


def first_differing_byte(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    view = np.frombuffer(a[:n], np.uint8) != np.frombuffer(b[:n], np.uint8)
    return int(np.argmax(view)) if view.any() else n


def compare_bytes(base: Path, head: Path, name: str | None = None) -> list[str]:
    """Two files byte for byte: the sizes and the offset of the first differing byte."""
    name = name or head.name
    a, b = base.read_bytes(), head.read_bytes()
    if a == b:
        return []
    return [f"{name}: bytes differ ({len(a):,} → {len(b):,} bytes, first at offset {first_differing_byte(a, b):,})"]


def files_under(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def compare_folders(base: Path, head: Path, compare_file: Callable[[Path, Path, str], list[str]]) -> list[str]:
    """Every file of two folders by ``compare_file(base_file, head_file, relative_name)``, and the files present on
    one side only."""
    bfiles, hfiles = files_under(base), files_under(head)
    out = [f"{f}: only in base" for f in bfiles if f not in hfiles]
    out += [f"{f}: only in head" for f in hfiles if f not in bfiles]
    for f in bfiles:
        if f in hfiles:
            out.extend(compare_file(base / f, head / f, f))
    return out


def compare_detector_file(base: Path, head: Path, name: str, tol: Tolerance = EXACT) -> list[str]:
    """One file of a detector folder: card.json without its clock, tables as tables, JSON as JSON, arrays as
    arrays, Markdown line by line (the time the card was made left out), anything else byte for byte."""
    suffix = head.suffix.lower()
    if suffix == ".csv":
        return compare_tables(base, head, tol, name)
    if suffix == ".json":
        ignore = CARD_VOLATILE if head.name == "card.json" else ()
        found = compare_json(json.loads(base.read_text(encoding="utf-8")), json.loads(head.read_text(encoding="utf-8")),
                             tol, ignore)
        return [f"{name}: {line}" for line in found]
    if suffix == ".npz":
        return compare_arrays(base, head, tol, name)
    if suffix == ".md":
        return compare_text(base, head, name, clock=True)
    return compare_bytes(base, head, name)


# ----------------------------------------------------------------------------------------------------------------
# Production: each side's tree materialised at one path, its commands run with its own src/ and a fresh cache.
# ----------------------------------------------------------------------------------------------------------------

class ProductionFailed(RuntimeError):
    pass


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    if rev == WORKTREE:
        return WORKTREE
    try:
        return git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"{rev}: not a revision of {repo} ({err.stderr.strip()})") from None


def default_base(repo: Path) -> str:
    try:
        return git(repo, "merge-base", "HEAD", "main")
    except subprocess.CalledProcessError:
        raise SystemExit("no merge-base of HEAD and main: name the base revision with --base") from None


def scanner_binary(repo: Path) -> Path | None:
    """The compiled sidecar scanner of this checkout (or, failing that, of the checkout the venv was installed
    from)."""
    for folder in (repo / SCANNER_DIR, Path(sys.prefix).parent / SCANNER_DIR):
        found = sorted(folder.glob("sidecar_scan*.so")) + sorted(folder.glob("sidecar_scan*.pyd"))
        if found:
            return found[0]
    return None


def add_scanner(tree: Path, repo: Path, env: dict[str, str], log: Path) -> None:
    """The compiled sidecar scanner into ``tree``: copied from this checkout when the tree's C source is the one it
    was built from (the same bytes as this checkout's), else compiled from the tree's source (a few seconds)."""
    binary = scanner_binary(repo)
    source_here = repo / SCANNER_SOURCE
    if (binary is not None and source_here.is_file() and (tree / SCANNER_SOURCE).is_file()
            and source_here.read_bytes() == (tree / SCANNER_SOURCE).read_bytes()):
        shutil.copy2(binary, tree / SCANNER_DIR / binary.name)
        return
    run_logged([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], tree, env, log)


def materialise(repo: Path, rev: str, tree: Path) -> None:
    """``rev``'s files at ``tree``: a detached ``git worktree add``, or for the work tree a copy of its tracked and
    untracked (not ignored) files as they are now."""
    if rev == WORKTREE:
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                check=True, capture_output=True).stdout.decode().split("\0")
        for rel in filter(None, listed):
            src = repo / rel
            if src.is_file():  # a tracked file deleted in the work tree is not copied
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, tree / rel)
        return
    git(repo, "worktree", "add", "--detach", "--force", str(tree), rev)


def remove_tree(repo: Path, tree: Path) -> None:
    if not tree.exists():
        return
    if (tree / ".git").is_file():
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
    shutil.rmtree(tree, ignore_errors=True)
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


def side_environment(tree: Path, cache: Path) -> dict[str, str]:
    """The environment a side's commands run in: this venv first on PATH, the tree's src/ alone on PYTHONPATH, an
    embedding cache of its own."""
    env = dict(os.environ)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(tree / "src")
    env["AGENTUQ_NB_EMBED_CACHE"] = str(cache / "embeddings.sqlite")
    env.pop("PYTHONSTARTUP", None)
    return env


def run_logged(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> float:
    started = time.perf_counter()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        raise ProductionFailed(f"{' '.join(command[:2])} exited with {done.returncode} after {seconds:.0f} s "
                               f"({log}): " + " | ".join(tail))
    return seconds


@dataclass
class Inputs:
    held_out: Path
    detector_runs: list[Path]
    params: str
    tol: Tolerance = field(default_factory=Tolerance)


def produce(check: str, tree: Path, out: Path, env: dict[str, str], inputs: Inputs) -> tuple[list[str], float]:
    """Run ``check``'s command in ``tree`` with its outputs under ``out`` (a fresh folder); returns the command and
    its wall seconds. The outputs compared: ``out/estimator_table.csv``, ``out/detector/``, ``out/figures/``."""
    log = out / "command.log"
    exe = str(Path(sys.executable).parent / "agentuq-nb")
    if check == "table":
        command = [exe, "analyze", str(inputs.held_out), "--out", str(out / "run")]
        seconds = run_logged(command, tree, env, log)
        shutil.copy2(out / "run" / "estimator_table.csv", out / "estimator_table.csv")
    elif check == "detector":
        command = [exe, "train-detector", *map(str, inputs.detector_runs), "--out", str(out / "detector")]
        seconds = run_logged(command, tree, env, log)
    elif check == "figures":
        command = [exe, "reproduce", inputs.params]
        study = study_name(tree / inputs.params)
        for folder in ("runs", "figures"):
            shutil.rmtree(tree / folder / study, ignore_errors=True)
        seconds = run_logged(command, tree, env, log)
        shutil.move(str(tree / "figures" / study), str(out / "figures"))
        shutil.move(str(tree / "runs" / study), str(out / "run"))
    else:
        raise ValueError(check)
    return command, seconds


def study_name(params: Path) -> str:
    """The ``name:`` of a params file (else its file name), read without importing the package."""
    for line in params.read_text(encoding="utf-8").splitlines():
        if line.startswith("name:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    return params.stem


@dataclass
class Side:
    role: str  # base | head
    rev: str  # a commit or WORKTREE

    @property
    def label(self) -> str:
        return f"{self.role}-{self.rev[:12]}" if self.rev != WORKTREE else f"{self.role}-worktree"


@functools.lru_cache(maxsize=1)
def environment_identity() -> str:
    """The interpreter and every installed distribution's version (a hash): outputs made in another environment are
    not reused."""
    import hashlib
    from importlib.metadata import distributions

    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions())
    return hashlib.sha256("\n".join([sys.executable, sys.version, *installed]).encode()).hexdigest()[:16]


def stamp_of(side: Side, check: str, inputs: Inputs) -> dict:
    what = {"table": [str(inputs.held_out)], "detector": [str(p) for p in inputs.detector_runs],
            "figures": [inputs.params]}[check]
    return {"rev": side.rev, "check": check, "inputs": what, "environment": environment_identity()}


def produce_side(repo: Path, work: Path, side: Side, checks: Iterable[str], inputs: Inputs,
                 say: Callable[[str], None]) -> dict[str, str]:
    """Every check's outputs of one side under ``work/<label>/<check>/``; returns the checks that failed with why.
    A revision's outputs already there with the same stamp are reused (never the work tree's: it may have
    changed)."""
    tree, scratch, cache = work / "tree", work / "out", work / "cache"
    home = work / side.label
    todo = []
    for check in checks:
        stamp = home / check / "stamp.json"
        if (side.rev != WORKTREE and stamp.is_file()
                and json.loads(stamp.read_text(encoding="utf-8")) == stamp_of(side, check, inputs)):
            say(f"{side.label}: {check}: reusing {home / check}")
        else:
            todo.append(check)
    failed: dict[str, str] = {}
    if not todo:
        return failed
    remove_tree(repo, tree)
    for folder in (scratch, cache):
        shutil.rmtree(folder, ignore_errors=True)
    cache.mkdir(parents=True)
    try:
        say(f"{side.label}: materialising {'the work tree' if side.rev == WORKTREE else side.rev[:12]} at {tree}")
        materialise(repo, side.rev, tree)
        env = side_environment(tree, cache)
        scratch.mkdir(parents=True)
        add_scanner(tree, repo, env, scratch / "scanner.log")
        for check in todo:
            out = scratch / check
            out.mkdir(parents=True)
            try:
                command, seconds = produce(check, tree, out, env, inputs)
            except ProductionFailed as err:
                failed[check] = str(err)
                say(f"{side.label}: {check}: FAILED: {err}")
                shutil.rmtree(home / check, ignore_errors=True)
                shutil.move(str(out), str(home / check))
                continue
            say(f"{side.label}: {check}: agentuq-nb {command[1]} done in {seconds:.0f} s ({home / check / 'command.log'})")
            (out / "stamp.json").write_text(json.dumps(stamp_of(side, check, inputs), indent=1), encoding="utf-8")
            shutil.rmtree(home / check, ignore_errors=True)
            home.mkdir(parents=True, exist_ok=True)
            shutil.move(str(out), str(home / check))
    finally:
        remove_tree(repo, tree)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
    return failed


def compare_check(check: str, base: Path, head: Path, tol: Tolerance) -> list[str]:
    """The differences of one check's outputs (``work/<label>/<check>`` of each side)."""
    if check == "table":
        return compare_tables(base / "estimator_table.csv", head / "estimator_table.csv", tol)
    if check == "detector":
        return compare_folders(base / "detector", head / "detector",
                               lambda b, h, name: compare_detector_file(b, h, name, tol))
    if check == "figures":
        return compare_folders(base / "figures", head / "figures", compare_bytes)
    raise ValueError(check)


def what_was_compared(check: str, head: Path, tol: Tolerance) -> str:
    if check == "table":
        header, rows = read_csv(head / "estimator_table.csv")
        return f"estimator_table.csv, {len(rows)} rows × {len(header)} columns, equal {tol}"
    if check == "detector":
        n = len(files_under(head / "detector"))
        return f"detector folder, {n} files (card.json but for its clock, tables, model, arrays) equal {tol}"
    n = len(files_under(head / "figures"))
    return f"{n} figure files byte-identical"


def main(argv: Sequence[str] | None = None) -> int:
    repo_default = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=repo_default, help="the checkout (default: this script's)")
    parser.add_argument("--base", help="the revision before the change (default: the merge-base of HEAD and main)")
    parser.add_argument("--head", default=WORKTREE,
                        help=f"the revision after it, or '{WORKTREE}' (default): the work tree as it is")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    parser.add_argument("--shared", type=Path, default=None,
                        help="the shared data folder (default: ../shared/data beside the checkout)")
    parser.add_argument("--held-out", type=Path, default=None,
                        help="the real run analysed (default: SHARED/real_runs/gpt-4.1_telecom-no-user_1trial.json)")
    parser.add_argument("--params", default="params/smoke.yaml", help="the study whose figures are compared")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance of numbers (default 0: exact)")
    parser.add_argument("--atol", type=float, default=0.0, help="absolute tolerance of numbers (default 0: exact)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the outputs in KEEP/<side>/ (and reuse a revision's outputs already there)")
    parser.add_argument("--compare-only", action="store_true",
                        help="produce nothing: compare the outputs --keep already holds for the two sides")
    args = parser.parse_args(argv)
    if args.compare_only and not args.keep:
        parser.error("--compare-only needs --keep DIR (the folder holding both sides' outputs)")

    repo = args.repo.resolve()
    checks = [c.strip() for c in args.checks.split(",") if c.strip()]
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        parser.error(f"--checks: {', '.join(unknown) or '(none)'}: the checks are {', '.join(CHECKS)}")
    shared = (args.shared or repo.parent / "shared" / "data").resolve()
    held_out = (args.held_out or shared / "real_runs" / "gpt-4.1_telecom-no-user_1trial.json").resolve()
    detector_runs = sorted((shared / "tau2").glob("*.json")) + sorted((shared / "real_runs").glob("*.json"))
    if "table" in checks and not held_out.is_file() and not args.compare_only:
        parser.error(f"--held-out: {held_out} is not a file")
    if "detector" in checks and not detector_runs and not args.compare_only:
        parser.error(f"no runs in {shared}/tau2 or {shared}/real_runs (--shared)")
    inputs = Inputs(held_out, detector_runs, args.params, Tolerance(args.rtol, args.atol))
    base = Side("base", resolve(repo, args.base) if args.base else default_base(repo))
    head = Side("head", resolve(repo, args.head))

    def say(line: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)

    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="outputs-unchanged-"))
    work.mkdir(parents=True, exist_ok=True)
    say(f"base {base.rev[:12]} vs head {head.rev[:12]} ({', '.join(checks)}); outputs in {work}")
    try:
        if args.compare_only:
            failed = {side.role: {c: f"no outputs in {work / side.label / c}" for c in checks
                                  if not (work / side.label / c / "stamp.json").is_file()} for side in (base, head)}
        else:
            failed = {side.role: produce_side(repo, work, side, checks, inputs, say) for side in (base, head)}
        print()
        status = 0
        for check in checks:
            why = [f"{role}: {failed[role][check]}" for role in ("base", "head") if check in failed[role]]
            if why:
                print(f"ERROR {check}: " + "; ".join(why))
                status = max(status, 2)
                continue
            bdir, hdir = work / base.label / check, work / head.label / check
            diffs = compare_check(check, bdir, hdir, inputs.tol)
            if diffs:
                print(f"DIFF  {check}: {len(diffs)} difference(s) ({bdir} → {hdir})")
                for line in diffs[:SHOWN]:
                    print(f"      {line}")
                if len(diffs) > SHOWN:
                    print(f"      … and {len(diffs) - SHOWN} more")
                status = max(status, 1)
            else:
                print(f"PASS  {check}: {what_was_compared(check, hdir, inputs.tol)}")
        return status
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
