"""Does the embedded model run here? Load it and decode a few tokens in a subprocess, so that a crash (an
instruction the CPU does not execute kills the process with SIGILL) is reported instead of killing the caller.

``check_local_model()`` returns a :class:`ModelCheck`: whether it ran, what llama.cpp was compiled with
(``llama_print_system_info``, said before the model loads), the tokens decoded, and when it failed, the cause in
one line and the command that rebuilds llama-cpp-python (:mod:`.llama_build`). ``make setup`` ends with it::

    python -m agentuq_nb.llm.model_check      # one line; exit 1 when the model does not run
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from agentuq_nb.llm import llama_build

#: the child: prints one JSON object a line (flushed, so what it said before a crash is kept); its argument is the
#: number of tokens to decode. Through the toolkit's own path (LocalModel, chat_completion: a prompt batch, then
#: one step per token), as every command runs the model.
CHILD = """
import faulthandler, json, sys, time
faulthandler.enable()
def say(**kv):
    print(json.dumps(kv), flush=True)
import llama_cpp
say(llama_cpp=llama_cpp.__version__, system_info=llama_cpp.llama_print_system_info().decode(errors="replace"))
from agentuq_nb.llm.local_model import LocalModel, locate_model_file
from agentuq_nb.llm.local_provider import chat_completion
from agentuq_nb.llm.request import GenerationRequest
start = time.perf_counter()
model = LocalModel(n_ctx=512)
say(model=str(locate_model_file()), load_seconds=time.perf_counter() - start)
start = time.perf_counter()
out = chat_completion([{"role": "user", "content": "Say hello."}],
                      GenerationRequest(max_tokens=int(sys.argv[1]), temperature=0.0), model=model)
say(text=out.content, tokens=out.completion_tokens, decode_seconds=time.perf_counter() - start)
"""

SIGNAL_CAUSES = {
    signal.SIGILL: "the llama.cpp build uses an instruction this CPU does not execute (SIGILL)",
    signal.SIGSEGV: "llama.cpp crashed with a memory fault (SIGSEGV)",
    signal.SIGBUS: "llama.cpp crashed with a bus error (SIGBUS)",
    signal.SIGFPE: "llama.cpp crashed with an arithmetic fault (SIGFPE)",
    signal.SIGABRT: "llama.cpp aborted (SIGABRT)",
    signal.SIGKILL: "the process was killed (SIGKILL: out of memory?)",
}


@dataclass
class ModelCheck:
    """What the check saw: ``ok`` when the model loaded and decoded; ``cause`` (one line) and ``rebuild`` (a
    command) when not; the child's own words (``said``) and the tail of its stderr."""

    ok: bool
    returncode: int | None
    said: dict = field(default_factory=dict)
    cause: str | None = None
    rebuild: str | None = None
    stderr_tail: str = ""
    seconds: float = 0.0

    @property
    def system_info(self) -> str | None:
        return self.said.get("system_info")

    @property
    def compiled_features(self) -> list[str] | None:
        """What llama.cpp's CPU backend was compiled with (``AVX2``, ``AVX512``, ``AMX_INT8``, …), if it said."""
        return None if self.system_info is None else compiled_features(self.system_info)

    def summary(self) -> str:
        """One line: what ran, or the cause and the command that rebuilds."""
        if self.ok:
            rate = self.said["tokens"] / max(self.said["decode_seconds"], 1e-9)
            return (f"runs: loaded in {self.said['load_seconds']:.1f} s, decoded "
                    f"{self.said['tokens']} tokens at {rate:.0f} tok/s ({self.said['text']!r})")
        return f"does not run: {self.cause}; rebuild: {self.rebuild}"


def compiled_features(system_info: str) -> list[str]:
    """The features llama_print_system_info says are on (``CPU : SSE3 = 1 | AVX = 1 | …``)."""
    names = []
    for part in system_info.split("|"):
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name and value.strip() not in ("", "0"):
            names.append(name)
    return names


def exit_signal(returncode: int | None) -> signal.Signals | None:
    """The signal that ended a child: ``-n`` from ``subprocess``, ``128 + n`` from a shell; None for an exit."""
    if returncode is None:
        return None
    number = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 160 else None
    try:
        return signal.Signals(number) if number is not None else None
    except ValueError:
        return None


def exit_cause(returncode: int, stderr: str) -> str:
    """Why a child ended with ``returncode`` and ``stderr``, in words."""
    sig = exit_signal(returncode)
    if sig is not None:
        return SIGNAL_CAUSES.get(sig, f"the process was killed by {sig.name}")
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    if "No module named 'llama_cpp'" in last:
        return "llama-cpp-python is not installed (the [local] extra)"
    return f"it failed (exit {returncode}): {last[:300]}" if last else f"it failed (exit {returncode})"


def rebuild_for(illegal_instruction: bool, compiled: list[str] | None, advertised: list[str],
                built_here: dict | None) -> str:
    """The command that rebuilds llama-cpp-python after a failure. For an illegal instruction: a build for this CPU
    when the installed one was not made by :mod:`.llama_build` (``built_here``: its build record), has AMX, or has a
    feature this CPU does not report (built elsewhere); else one level lower (a feature this CPU reports but does
    not execute). For anything else, the build for this CPU."""
    if not illegal_instruction:
        return llama_build.install_command()
    if compiled is None and built_here is not None:
        compiled = [name for name, on in built_here.get("options", {}).items() if on]
    known = {name for name, _ in llama_build.FEATURES} | set(llama_build.WITHHELD)
    features = {name for name in (compiled or []) if name in known}
    if built_here is None or features & set(llama_build.WITHHELD) or features - set(advertised):
        return llama_build.install_command()
    lower = llama_build.lower_level(sorted(features))
    if lower is None:
        return f"{llama_build.install_command('x86-64')} (already the x86-64 baseline: this CPU is not one it knows)"
    return llama_build.install_command(lower)


def run_check(command: list[str], timeout: float = 300.0) -> ModelCheck:
    """Run ``command`` (a child that prints JSON lines, as :data:`CHILD` does) and read what it said and how it
    ended."""
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode(errors="replace") if isinstance(err.stdout, bytes) else (err.stdout or "")
        return ModelCheck(False, None, parse_said(out), cause=f"the model did not answer within {timeout:.0f} s",
                          rebuild=llama_build.install_command(), seconds=time.monotonic() - start)
    said = parse_said(done.stdout)
    check = ModelCheck(done.returncode == 0 and "tokens" in said, done.returncode, said,
                       stderr_tail="\n".join(done.stderr.splitlines()[-20:]), seconds=time.monotonic() - start)
    if not check.ok:
        check.cause = (exit_cause(done.returncode, done.stderr) if done.returncode
                       else "it ended without decoding anything")
        check.rebuild = rebuild_for(exit_signal(done.returncode) == signal.SIGILL, check.compiled_features,
                                    llama_build.advertised_features(llama_build.cpu_flags()),
                                    llama_build.installed_build())
    return check


def parse_said(stdout: str) -> dict:
    said: dict = {}
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            said.update(value)
    return said


def check_local_model(max_tokens: int = 8, timeout: float = 300.0, python: str = sys.executable) -> ModelCheck:
    """Load the embedded model in a subprocess of ``python`` and decode ``max_tokens`` greedy tokens."""
    return run_check([python, "-c", CHILD, str(max_tokens)], timeout=timeout)


def main() -> int:
    check = check_local_model()
    print(f"self-check{'' if check.ok else ' FAILED'}: the embedded model {check.summary()}", flush=True)
    return 0 if check.ok else 1


if __name__ == "__main__":
    sys.exit(main())
