"""Virtualenvs for the real clients and servers the interoperability tests run (Inspect AI, llama-cpp-python's
server), built once into the cache folder and reused.

An *overlay* venv sees the packages of other environments (by default this one's) through a ``.pth`` file, after
its own, and gets only what those lack or pin otherwise: inspect-ai needs an older fsspec than
requirements.lock's, Inspect's OpenAI provider needs openai 3 where litellm needs openai 2. Nothing is installed
into this environment.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPLETE = "agentuq_nb_complete"  # written last: a venv without it was interrupted while building


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


def overlay_venv(name: str, requirements: list[str], over: list[str] | None = None,
                 then: list[list[str]] = ()) -> Path:
    """A venv named ``name-<key>`` with ``requirements`` installed (exact pins), seeing the site-packages ``over``
    (default: this environment's; ``[]``: none, a venv of its own) after its own; ``then``: further ``pip install``
    argument lists run after it. Built on first use and reused while its inputs stay the same."""
    over = list(over) if over is not None else [purelib()]
    key = hashlib.sha256(f"{sys.version}|{over}|{sorted(requirements)}|{then}".encode()).hexdigest()[:12]
    venv = cache_dir() / f"{name}-{key}"
    if (venv / COMPLETE).exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if over:
        (Path(purelib(venv / "bin" / "python")) / "agentuq_nb_env.pth").write_text("".join(f"{p}\n" for p in over))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    for args in [requirements, *then]:
        subprocess.run([*pip, *args], check=True)
    (venv / COMPLETE).write_text("\n".join(requirements) + "\n")
    return venv


def with_src_path(env: dict | None = None) -> dict:
    """``env`` (default: this process's) with this interpreter's import path, so that a subprocess in another
    environment imports the same ``agentuq_nb`` (a work tree's ``src``, its built scanner)."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and "site-packages" not in p)
    return env
