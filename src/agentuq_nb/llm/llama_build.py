"""llama-cpp-python built for this CPU without the instructions a machine may advertise but not execute.

Why: llama-cpp-python compiles llama.cpp with ``GGML_NATIVE=ON`` (``-march=native``), which turns on every instruction
set the CPU reports, AMX included, whatever ``-DGGML_AMX_*=OFF`` says. A hypervisor that reports AMX (cpuid, XCR0) and
traps ``tileloadd`` kills every process that runs the model with SIGILL (issue 38). Here llama.cpp is built with
``GGML_NATIVE=OFF`` and each of ggml's x86 feature options named ON or OFF from the flags the kernel reports
(``/proc/cpuinfo``), AMX always OFF; a lower ``--cpu`` level caps the set further for a machine that traps more.

Why not ggml's portable build with runtime dispatch (``GGML_BACKEND_DL`` + ``GGML_CPU_ALL_VARIANTS``): it chooses the
CPU variant by cpuid, so on the machine above it would load the ``sapphirerapids`` variant (AMX) and die the same way;
and llama-cpp-python 0.3.36 never points ggml at its own ``lib`` folder (``llama_backend_init`` calls
``ggml_backend_load_all()``, which searches the Python executable's folder and the current directory), so its
backends would not even load without our own loader.

The wheel is built once per set of flags into the user's cache folder
(``~/.cache/agentuq_nb/llama-cpp-python/<key>/``, the key a hash of the version and the CMake arguments, its
``build.json`` saying how it was made), never through pip's wheel cache, which keeps the wheel of an sdist whatever
``CMAKE_ARGS`` were: a changed flag set builds again, an unchanged one installs the cached wheel in seconds.

Standard library only: ``make setup`` runs this file by path before the package's dependencies are installed::

    python src/agentuq_nb/llm/llama_build.py install [--cpu LEVEL] [--lock requirements.lock]
    python -m agentuq_nb.llm.llama_build plan          # the flags, key and wheel folder, building nothing
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PACKAGE = "llama-cpp-python"
DIST = "llama_cpp_python"

#: ggml's x86 feature options (``-DGGML_<name>=ON``) in ascending order, each with the /proc/cpuinfo flags it needs
#: (``GGML_AVX512`` compiles with -mavx512f/cd/vl/dq/bw)
FEATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SSE42", ("sse4_2",)),
    ("AVX", ("avx",)),
    ("F16C", ("f16c",)),
    ("FMA", ("fma",)),
    ("BMI2", ("bmi2",)),
    ("AVX2", ("avx2",)),
    ("AVX_VNNI", ("avx_vnni",)),
    ("AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("AVX512_VBMI", ("avx512vbmi",)),
    ("AVX512_VNNI", ("avx512_vnni",)),
    ("AVX512_BF16", ("avx512_bf16",)),
)
#: never compiled in, whatever the CPU reports: the instructions a hypervisor was seen to advertise and trap
WITHHELD: dict[str, tuple[str, ...]] = {"AMX_TILE": ("amx_tile",), "AMX_INT8": ("amx_int8",),
                                        "AMX_BF16": ("amx_bf16",)}
#: ``--cpu`` levels, highest first: the features each allows (``auto``: all the CPU reports, AMX excepted)
LEVELS: dict[str, tuple[str, ...]] = {
    "auto": tuple(name for name, _ in FEATURES),
    "avx2": ("SSE42", "AVX", "F16C", "FMA", "BMI2", "AVX2"),
    "avx": ("SSE42", "AVX"),
    "sse42": ("SSE42",),
    "x86-64": (),
}
#: the venv remembers a level given once, so that the next ``make setup`` keeps it (in ``sys.prefix``)
LEVEL_RECORD = "agentuq_nb-llama-cpu"
#: AMX's instructions as objdump names them (tile configuration, loads, stores, zeroing, the dot products)
AMX_MNEMONIC = re.compile(r"\t(ldtilecfg|sttilecfg|tileloadd|tileloaddt1|tilestored|tilerelease|tilezero|tdp\w+)\b")
KEEP_BUILDS = 4  # wheel folders kept in the cache (each ~25 MB); older ones are removed after a build
BUILD_RECORD = "build.json"


def cache_root() -> Path:
    """Where built wheels are kept: ``$XDG_CACHE_HOME/agentuq_nb/llama-cpp-python`` (default ``~/.cache``)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentuq_nb" / "llama-cpp-python"


def is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The instruction-set flags the kernel reports for this CPU (empty where there is no ``/proc/cpuinfo``)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def cpu_name(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name as the kernel reports it (else the platform's processor string)."""
    try:
        match = re.search(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(errors="replace"), re.MULTILINE)
    except OSError:
        match = None
    return match.group(1).strip() if match else (platform.processor() or platform.machine())


def advertised_features(flags: frozenset[str]) -> list[str]:
    """ggml's names of the features (AMX included) whose flags the CPU reports, in ascending order."""
    known = [*FEATURES, *WITHHELD.items()]
    return [name for name, needs in known if all(flag in flags for flag in needs)]


def feature_options(flags: frozenset[str], level: str = "auto") -> dict[str, bool]:
    """Each ggml x86 feature option → on or off: on when the CPU reports it and ``level`` allows it; AMX off."""
    if level not in LEVELS:
        raise ValueError(f"unknown CPU level {level!r}: one of {', '.join(LEVELS)}")
    advertised = set(advertised_features(flags))
    options = {name: name in advertised and name in LEVELS[level] for name, _ in FEATURES}
    options.update({name: False for name in WITHHELD})
    return options


def cmake_args(options: dict[str, bool]) -> list[str]:
    """The CMake arguments of a build: not native, every feature option named (so no default decides), on x86;
    nothing on other machines (llama.cpp's own detection: the AMX trap is an x86 one)."""
    if not is_x86():
        return []
    return ["-DGGML_NATIVE=OFF", *(f"-DGGML_{name}={'ON' if on else 'OFF'}" for name, on in options.items())]


def build_key(version: str, args: list[str]) -> str:
    """What a cached wheel is valid for: the version, the CMake arguments and the machine type."""
    text = json.dumps({"version": version, "cmake_args": args, "machine": platform.machine()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class BuildPlan:
    """A build of llama-cpp-python: its version, CPU level, feature options, CMake arguments and wheel folder."""

    version: str
    level: str
    options: dict[str, bool]
    args: list[str]
    key: str
    folder: Path

    @property
    def enabled(self) -> list[str]:
        return [name for name, on in self.options.items() if on]

    def wheel(self) -> Path | None:
        """The cached wheel of this build, or None when it was never built (or its folder is incomplete)."""
        if not (self.folder / BUILD_RECORD).exists():
            return None
        found = sorted(self.folder.glob(f"{DIST}-{self.version}-*.whl"))
        return found[0] if found else None

    def describe(self) -> str:
        on = " ".join(self.enabled) or "none (x86-64 baseline)"
        if not self.args:
            return f"{PACKAGE} {self.version}, llama.cpp's own CPU detection (not x86), key {self.key}"
        return f"{PACKAGE} {self.version}, GGML_NATIVE=OFF, level {self.level}: {on}; AMX off; key {self.key}"


def plan_build(version: str, level: str = "auto", flags: frozenset[str] | None = None) -> BuildPlan:
    """The build this machine gets at ``level``; ``CMAKE_ARGS`` from the environment (a BLAS, say) come after ours,
    and are part of the key."""
    options = feature_options(cpu_flags() if flags is None else flags, level)
    args = cmake_args(options) + os.environ.get("CMAKE_ARGS", "").split()
    key = build_key(version, args)
    return BuildPlan(version, level, options, args, key, cache_root() / key)


def locked_version(lock: Path) -> str:
    """The version of llama-cpp-python pinned in a requirements lock file."""
    for line in lock.read_text().splitlines():
        match = re.match(r"\s*llama[-_.]cpp[-_.]python\s*==\s*([^\s;#]+)", line, re.IGNORECASE)
        if match:
            return match.group(1)
    raise ValueError(f"{lock}: no 'llama_cpp_python==VERSION' line")


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(DIST)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_wheel() -> Path | None:
    """The wheel file the installed llama-cpp-python came from, when pip installed it from a local wheel."""
    try:
        direct = importlib.metadata.distribution(DIST).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        url = json.loads(direct or "{}").get("url", "")
    except json.JSONDecodeError:
        return None
    return Path(url[len("file://"):]) if url.startswith("file://") else None


def installed_build() -> dict | None:
    """How the installed llama-cpp-python was built, when it came from this module's build (:func:`build_record` of
    the wheel it was installed from); None for any other build (pip's own: ``-march=native``, AMX wherever the CPU
    reports it)."""
    return build_record(installed_wheel())


def build_record(wheel: Path | None) -> dict | None:
    """The ``build.json`` :func:`build_wheel` left beside ``wheel``, read from the wheel's own folder - wherever the
    cache was when it was built: a build made under another ``XDG_CACHE_HOME`` than the present one is still this
    module's (issue 49) -, or None when there is none or it does not describe that folder (its key is the folder's
    name)."""
    if wheel is None:
        return None
    try:
        record = json.loads((wheel.parent / BUILD_RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    ours = isinstance(record, dict) and record.get("key") == wheel.parent.name and isinstance(record.get("options"), dict)
    return record if ours else None


def installed_libraries() -> list[Path]:
    """The shared libraries of the installed llama-cpp-python (``llama_cpp/lib``), each library once."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return []
    if spec is None or spec.origin is None:
        return []
    folder = Path(spec.origin).parent / "lib"
    # the wheel holds each library three times (libggml-cpu.so, .so.0, .so.0.25.3: copies, not links)
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.so*"), key=lambda path: len(path.name)):
        if path.is_file():
            found.setdefault(path.name.split(".so")[0], path)
    return sorted(found.values())


#: seconds objdump may take on one library before doctor stops it (llama.cpp's largest, libllama.so, took 3.6 s
#: on the 2-core machine under load; an objdump that never ends - a wrapper waiting on input, a hung file
#: system - must not hang doctor)
OBJDUMP_SECONDS = 120.0


def amx_instructions(library: Path, timeout: float | None = None) -> int | None:
    """How many AMX instructions the machine code of ``library`` holds (objdump's disassembly, read as it streams);
    None when objdump (binutils) is not installed. The proof that a build cannot trap on AMX, short of a machine
    that traps: ``GGML_NATIVE=OFF`` and the AMX options OFF leave none in. An objdump still running after ``timeout``
    seconds (default :data:`OBJDUMP_SECONDS`) is killed: an :class:`OSError` saying so."""
    import signal
    import threading

    timeout = OBJDUMP_SECONDS if timeout is None else timeout
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    command = [objdump, "-d", "--no-show-raw-insn", str(library)]
    stopped = threading.Event()

    def stop(dis: subprocess.Popen) -> None:
        stopped.set()
        try:  # the whole group: a wrapper's children (a shell script's sleep) hold the pipe open after it dies
            os.killpg(dis.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            dis.kill()

    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                          text=True, errors="replace", start_new_session=True) as dis:
        watchdog = threading.Timer(timeout, stop, args=(dis,))
        watchdog.daemon = True
        watchdog.start()
        try:
            count = sum(1 for line in dis.stdout if AMX_MNEMONIC.search(line))
        finally:
            watchdog.cancel()
    if stopped.is_set():
        raise OSError(f"{library}: objdump did not finish within {timeout:g} s (stopped)")
    if dis.returncode != 0:
        raise OSError(f"{library}: objdump could not read it (exit {dis.returncode})")
    return count


def remembered_level(prefix: Path | None = None) -> str | None:
    """The ``--cpu`` level this venv was last built with, when one was given."""
    try:
        level = (Path(prefix or sys.prefix) / LEVEL_RECORD).read_text().strip()
    except OSError:
        return None
    return level if level in LEVELS else None


def lower_level(enabled: list[str]) -> str | None:
    """The next level below a build with ``enabled`` features (what to try when one of them traps), or None."""
    names = list(LEVELS)
    current = next((level for level in reversed(names) if set(enabled) <= set(LEVELS[level])), "auto")
    index = names.index(current)
    return names[index + 1] if index + 1 < len(names) else None


def install_command(level: str | None = None) -> str:
    """The command that (re)builds and installs llama-cpp-python into this environment (at ``level``): ``make
    setup`` in a checkout whose ``.venv`` this is, else this module run by this interpreter."""
    root = Path(sys.prefix).parent
    if Path(sys.prefix).name == ".venv" and (root / "Makefile").exists() and (root / "requirements.lock").exists():
        where = "" if Path.cwd().resolve() == root.resolve() else f" -C {root}"
        return f"make{where} setup" + (f" LLAMA_CPU={level}" if level else "")
    return f"{sys.executable} -m agentuq_nb.llm.llama_build install" + (f" --cpu {level}" if level else "")


def build_wheel(plan: BuildPlan) -> Path:
    """Compile the wheel of ``plan`` (pip wheel, no pip cache, from the sdist) into its folder; returns the wheel."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"building-{plan.key}-", dir=root))
    env = {**os.environ, "CMAKE_ARGS": " ".join(plan.args)}
    command = [sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps", "--no-binary", PACKAGE,
               "--disable-pip-version-check", "--quiet", "-w", str(work), f"{PACKAGE}=={plan.version}"]
    print(f"building {plan.describe()} (llama.cpp compiles: about 6-11 min on 2 cores)", flush=True)
    start = time.monotonic()
    try:
        compile_with_progress(command, env, start)
        wheel = next(work.glob(f"{DIST}-{plan.version}-*.whl"))
        record = {**asdict(plan), "folder": str(plan.folder),
                  "cpu_flags_reported": advertised_features(cpu_flags()), "python": sys.version.split()[0],
                  "built_seconds": round(time.monotonic() - start, 1),
                  "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        (work / BUILD_RECORD).write_text(json.dumps(record, indent=1) + "\n")
        try:
            work.rename(plan.folder)  # whole or not at all: the folder appears complete, its record written
        except OSError:  # another set-up built the same key meanwhile: its wheel is the same build
            pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"built in {time.monotonic() - start:.0f} s → {plan.folder}", flush=True)
    prune(keep=plan.folder)
    return plan.folder / wheel.name


def compile_with_progress(command: list[str], env: dict, start: float, every: float = 60.0) -> None:
    """Run the build, saying every ``every`` seconds that it still runs (pip says nothing while llama.cpp compiles)."""
    process = subprocess.Popen(command, env=env)
    while True:
        try:
            process.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            print(f"  still compiling: {(time.monotonic() - start) / 60:.0f} min", flush=True)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)


def prune(keep: Path, limit: int = KEEP_BUILDS) -> None:
    """Remove the oldest wheel folders beyond ``limit`` (never ``keep``), and what a killed build left a day ago."""
    folders = sorted((p for p in cache_root().iterdir() if p.is_dir() and (p / BUILD_RECORD).exists()),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    stale = [p for p in cache_root().glob("building-*") if time.time() - p.stat().st_mtime > 86400]
    for old in [p for p in folders if p != keep][max(limit - 1, 0):] + stale:
        shutil.rmtree(old, ignore_errors=True)


def install(plan: BuildPlan) -> Path:
    """Build ``plan``'s wheel unless it is cached, and install it into this environment unless it is installed."""
    wheel = plan.wheel() or build_wheel(plan)
    if installed_wheel() == wheel and installed_version() == plan.version:
        print(f"{PACKAGE}: installed, {plan.describe()}")
        return wheel
    print(f"{PACKAGE}: installing {wheel.name} ({plan.describe()})", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--force-reinstall", "--quiet",
                    "--disable-pip-version-check", str(wheel)], check=True)
    os.utime(plan.folder)  # most recently used: the last to be pruned
    return wheel


def required_version() -> str | None:
    """The lowest llama-cpp-python agentuq_nb's installed metadata allows (its ``>=`` bound), if it says one."""
    try:
        requires = importlib.metadata.requires("agentuq_nb") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for line in requires:
        match = re.match(r"\s*llama[-_.]cpp[-_.]python\b[^;]*>=\s*([\w.]+)", line, re.IGNORECASE)
        if match:
            return match.group(1)
    return None


def default_version(lock: Path | None) -> str:
    """The version to build: the lock file's pin, else this checkout's ``requirements.lock``, else the one installed,
    else the lowest agentuq_nb allows."""
    checkout_lock = Path(__file__).resolve().parents[3] / "requirements.lock"
    for candidate in (lock, checkout_lock):
        if candidate is not None and candidate.exists():
            return locked_version(candidate)
    version = installed_version() or required_version()
    if version is None:
        raise SystemExit(f"error: which {PACKAGE} version? give --version or --lock requirements.lock")
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llama_build", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("install", "plan"), help="install: build if not cached, then install; "
                                                                    "plan: print the build, doing nothing")
    parser.add_argument("--cpu", choices=list(LEVELS), default=None,
                        help="the highest instruction sets compiled in (default: the level this environment was "
                             "built with, else auto: all the CPU reports except AMX); remembered by the environment")
    parser.add_argument("--lock", type=Path, default=None, help="requirements lock file pinning llama_cpp_python")
    parser.add_argument("--version", default=None, help=f"the {PACKAGE} version (default: the lock's pin)")
    args = parser.parse_args(argv)
    level = args.cpu or remembered_level() or "auto"
    plan = plan_build(args.version or default_version(args.lock), level)
    if args.action == "plan":
        print(plan.describe())
        print("CMAKE_ARGS=" + " ".join(plan.args))
        print(f"wheel folder: {plan.folder} ({'cached' if plan.wheel() else 'not built yet'})")
        return 0
    try:
        install(plan)
    except subprocess.CalledProcessError as err:
        print(f"error: {' '.join(err.cmd[2:4])} failed (exit {err.returncode}): building llama.cpp needs a C/C++ "
              "compiler and CMake (pip brings CMake when the system's is older than 3.21); pip's words are above",
              file=sys.stderr)
        return 1
    if args.cpu is not None:
        (Path(sys.prefix) / LEVEL_RECORD).write_text(args.cpu + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
