"""Virtualenvs for the real clients and servers the interoperability tests run (Inspect AI, llama-cpp-python's
server), built once into the cache folder and reused.

An *overlay* venv sees the packages of other environments (by default this one's) through a ``.pth`` file, after
its own, and gets only what those lack or pin otherwise: inspect-ai needs an older fsspec than
requirements.lock's, Inspect's OpenAI provider needs openai 3 where litellm needs openai 2. Nothing is installed
into this environment.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
COMPLETE = "agentuq_nb_complete"  # written last: a venv without it was interrupted while building
STALE_DAYS = 2  # a venv of a name unused this long is removed when another of that name is built


def cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentuq_nb"


def purelib(python: Path | str = sys.executable) -> str:
    if str(python) == sys.executable:
        return sysconfig.get_paths()["purelib"]
    return subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   text=True).strip()


def read_pins(lock: Path) -> list[str]:
    """The ``name==version`` lines of a lock file."""
    return [line.strip() for line in lock.read_text().splitlines() if line.strip() and not line.startswith("#")]


def installed(path: str) -> list[str]:
    """The ``name==version`` of every distribution in the site-packages folder ``path``, sorted."""
    return sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions(path=[path]))


def overlay_venv(name: str, requirements: list[str], over: list[str] | None = None,
                 then: list[list[str]] = ()) -> Path:
    """A venv named ``name-<key>`` with ``requirements`` installed (exact pins), seeing the site-packages ``over``
    (default: this environment's; ``[]``: none, a venv of its own) after its own; ``then``: further ``pip install``
    argument lists run after it. Built on first use and reused while its inputs stay the same.

    The key is what the venv holds (this Python, the requirements, the distributions it sees ``over``), not where
    those environments are: a fresh clone's ``.venv`` with the locked packages reuses the venv an earlier clone built
    (its ``.pth`` is pointed at the environments of the process asking). Venvs of the same name left unused for
    ``STALE_DAYS`` are removed when a new one is built, so the cache folder stays bounded."""
    over = list(over) if over is not None else [purelib()]
    seen = [installed(path) for path in over]
    key = hashlib.sha256(f"{sys.version}|{seen}|{sorted(requirements)}|{then}".encode()).hexdigest()[:12]
    venv = cache_dir() / f"{name}-{key}"
    cache_dir().mkdir(parents=True, exist_ok=True)
    with FileLock(f"{venv}.lock"):  # two processes (xdist workers, two clones) asking at once: one builds, one waits
        if (venv / COMPLETE).exists():
            point_at(venv, over)
            (venv / COMPLETE).touch()
            return venv
        remove_stale(name)
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        point_at(venv, over)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for args in [requirements, *then]:
            subprocess.run([*pip, *args], check=True)
        (venv / COMPLETE).write_text("\n".join(requirements) + "\n")
        return venv


def point_at(venv: Path, over: list[str]) -> None:
    """The venv's ``.pth`` naming the site-packages ``over`` (replaced in one step when they moved)."""
    pth = Path(purelib(venv / "bin" / "python")) / "agentuq_nb_env.pth"
    text = "".join(f"{p}\n" for p in over)
    if not over or (pth.exists() and pth.read_text() == text):
        return
    staged = pth.with_name(f".{pth.name}.{os.getpid()}")
    staged.write_text(text)
    os.replace(staged, pth)


def remove_stale(name: str) -> None:
    """Remove the venvs ``name-*`` last used (or, unfinished, last built into) more than ``STALE_DAYS`` ago: one
    another process is building now is left alone."""
    cutoff = time.time() - STALE_DAYS * 86400
    for old in cache_dir().glob(f"{name}-*"):
        if not old.is_dir():  # a build's lock file
            continue
        marker = old / COMPLETE
        if (marker if marker.exists() else old).stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)


def with_src_path(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with this interpreter's import path, so that a subprocess in another
    environment imports the same ``agentuq_nb`` (a work tree's ``src``, its built scanner)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and "site-packages" not in p)
    return env
