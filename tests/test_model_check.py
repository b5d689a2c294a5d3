"""The set-up's self-check and ``agentuq-nb doctor``: the embedded model loaded and decoding in a subprocess, a crash
named in one line with the command that rebuilds, and the llama.cpp build made without AMX, each instruction set
named (issue 38)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentuq_nb.llm import llama_build
from agentuq_nb.llm.model_check import (
    SIGNAL_CAUSES,
    check_local_model,
    compiled_features,
    exit_cause,
    rebuild_for,
    run_check,
)

CLI = [str(Path(sys.executable).with_name("agentuq-nb"))] if Path(sys.executable).with_name("agentuq-nb").exists() \
    else [sys.executable, "-m", "agentuq_nb.cli"]

#: the flags of the machine of issue 38: a Xeon whose hypervisor reports AMX and traps tileloadd
AMX_XEON = frozenset("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi1 bmi2 avx2 avx512f avx512dq avx512cd avx512bw "
                     "avx512vl avx512vbmi avx512_vnni avx512_bf16 avx_vnni amx_tile amx_int8 amx_bf16".split())
SYSTEM_INFO_AMX = ("CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | AVX512 = 1 | "
                   "AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | ")

#: a child that says what a build was compiled with, then executes ud2 (an undefined instruction): the kernel kills
#: it with SIGILL, as the AMX machine killed every process that ran the model
ILLEGAL_INSTRUCTION = f"""
import ctypes, json, mmap
print(json.dumps({{"system_info": {SYSTEM_INFO_AMX!r}}}), flush=True)
code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(b"\\x0f\\x0b")  # ud2
ctypes.CFUNCTYPE(None)(ctypes.addressof(ctypes.c_char.from_buffer(code)))()
"""


def test_the_embedded_model_loads_and_decodes_in_a_subprocess():
    check = check_local_model(max_tokens=4)
    assert check.ok, check.summary() + "\n" + check.stderr_tail
    assert check.returncode == 0 and 1 <= check.said["tokens"] <= 4 and check.said["text"]
    assert check.summary().startswith("runs: loaded in")
    # what llama.cpp says it was compiled with is read before the model loads
    assert "AVX2" in check.compiled_features or "NEON" in check.compiled_features


def test_the_installed_llama_cpp_is_make_setups_build_without_amx():
    """``make setup`` installs llama-cpp-python from llama_build's wheel: not native, each instruction set named,
    AMX off, and the same flags as this machine's build (a wheel built with other flags is never reused)."""
    record = llama_build.installed_build()
    assert record is not None, ("llama-cpp-python was not built by agentuq_nb's build step (pip's own build uses "
                                f"-march=native): {llama_build.install_command()}")
    assert "-DGGML_NATIVE=OFF" in record["args"] and "-DGGML_AMX_INT8=OFF" in record["args"]
    here = llama_build.plan_build(record["version"], record["level"])
    assert record["key"] == here.key and llama_build.installed_wheel() == here.wheel()
    check = check_local_model(max_tokens=2)
    assert check.ok and not set(check.compiled_features) & set(llama_build.WITHHELD)


#: AMX instructions and one AVX-512 VNNI instruction beside them (not AMX), as an assembler writes them
AMX_ASSEMBLY = """\t.text
f:
\tldtilecfg (%rax)
\ttileloadd (%rax,%rbx,1), %tmm0
\ttdpbssd %tmm2, %tmm1, %tmm0
\ttilestored %tmm0, (%rax,%rbx,1)
\ttilerelease
\tvpdpbusd %zmm1, %zmm2, %zmm3
\tret
"""


def test_amx_instructions_are_counted_in_machine_code(tmp_path):
    (tmp_path / "amx.s").write_text(AMX_ASSEMBLY)
    subprocess.run(["cc", "-c", str(tmp_path / "amx.s"), "-o", str(tmp_path / "amx.o")], check=True)
    assert llama_build.amx_instructions(tmp_path / "amx.o") == 5
    (tmp_path / "plain.s").write_text(AMX_ASSEMBLY.split("\tldtilecfg")[0] + "\tvpdpbusd %zmm1, %zmm2, %zmm3\n")
    subprocess.run(["cc", "-c", str(tmp_path / "plain.s"), "-o", str(tmp_path / "plain.o")], check=True)
    assert llama_build.amx_instructions(tmp_path / "plain.o") == 0
    with pytest.raises(OSError, match="objdump could not read it"):
        llama_build.amx_instructions(tmp_path / "amx.s")


def test_the_installed_llama_cpp_holds_no_amx_instruction():
    """What a machine that reports AMX and traps it needs (issue 38), checked on the machine code itself: none of
    the installed llama.cpp's libraries holds an AMX instruction (this machine need not report AMX: the build
    leaves AMX out whatever the CPU says)."""
    libraries = llama_build.installed_libraries()
    assert any(path.name.startswith("libggml-cpu") for path in libraries), libraries
    assert {path.name: llama_build.amx_instructions(path) for path in libraries} == {path.name: 0 for path in libraries}


def test_a_process_killed_by_an_illegal_instruction_is_named_with_the_command_that_rebuilds():
    check = run_check([sys.executable, "-c", ILLEGAL_INSTRUCTION], timeout=60)
    assert not check.ok and check.returncode == -signal.SIGILL
    assert check.cause == SIGNAL_CAUSES[signal.SIGILL] == ("the llama.cpp build uses an instruction this CPU does not "
                                                            "execute (SIGILL)")
    # what it said before it died is kept: a build with AMX is rebuilt for this CPU, at the default level
    assert "AMX_INT8" in check.compiled_features
    assert check.rebuild == llama_build.install_command()
    line = check.summary()
    assert "\n" not in line and line == f"does not run: {check.cause}; rebuild: {check.rebuild}"


def test_a_shell_reports_the_same_signal_as_exit_132():
    done = subprocess.run(["sh", "-c", '"$0" -c "$1"', sys.executable, ILLEGAL_INSTRUCTION], capture_output=True)
    assert done.returncode == 128 + signal.SIGILL == 132
    assert exit_cause(132, "") == SIGNAL_CAUSES[signal.SIGILL]
    assert exit_cause(-signal.SIGSEGV, "") == "llama.cpp crashed with a memory fault (SIGSEGV)"
    assert exit_cause(1, "Traceback…\nValueError: bad model") == "it failed (exit 1): ValueError: bad model"


def test_an_environment_without_llama_cpp_is_said_to_lack_it(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    check = check_local_model(python=str(tmp_path / "bare" / "bin" / "python"), timeout=60)
    assert not check.ok and check.cause == "llama-cpp-python is not installed (the [local] extra)"
    assert check.compiled_features is None and check.rebuild == llama_build.install_command()


@pytest.mark.parametrize("compiled, built_here, level", [
    # pip's own build (native): rebuilt for this CPU without AMX
    (["AVX2", "AVX512"], None, None),
    # a build with AMX compiled in
    (["AVX2", "AVX512", "AMX_INT8"], {"options": {}}, None),
    # a feature this CPU does not report: built on another machine
    (["AVX2", "AVX512", "AVX512_BF16"], {"options": {}}, None),
    # ours, every feature reported, yet one traps: one level lower
    (["SSE42", "AVX", "AVX2", "AVX512"], {"options": {}}, "avx2"),
    (["SSE42", "AVX", "F16C", "FMA", "BMI2", "AVX2"], {"options": {}}, "avx"),
])
def test_after_an_illegal_instruction_the_rebuild_steps_down_only_when_the_build_was_right(compiled, built_here, level):
    advertised = ["SSE42", "AVX", "F16C", "FMA", "BMI2", "AVX2", "AVX512"]
    assert rebuild_for(True, compiled, advertised, built_here) == llama_build.install_command(level)
    assert rebuild_for(False, compiled, advertised, built_here) == llama_build.install_command()


def test_the_baseline_build_has_no_lower_level():
    assert "already the x86-64 baseline" in rebuild_for(True, [], ["SSE42"], {"options": {}})


def test_compiled_features_reads_llama_print_system_info():
    assert compiled_features(SYSTEM_INFO_AMX) == ["SSE3", "SSSE3", "AVX", "AVX2", "F16C", "FMA", "BMI2", "AVX512",
                                                  "AMX_INT8", "LLAMAFILE", "OPENMP", "REPACK"]
    assert compiled_features("CPU : AVX = 1 | AVX2 = 0 | ") == ["AVX"]


@pytest.mark.skipif(not llama_build.is_x86(), reason="ggml's x86 options")
def test_a_cpu_reporting_amx_gets_every_feature_but_amx_each_named():
    options = llama_build.feature_options(AMX_XEON)
    assert not any(options[name] for name in llama_build.WITHHELD)
    assert options["AVX512"] and options["AVX512_BF16"] and options["AVX_VNNI"]
    args = llama_build.cmake_args(options)
    assert args[0] == "-DGGML_NATIVE=OFF"  # -march=native would turn AMX back on
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF", "-DGGML_AVX512=ON"} <= set(args)
    assert llama_build.advertised_features(AMX_XEON)[-3:] == ["AMX_TILE", "AMX_INT8", "AMX_BF16"]
    # a level caps the set; what the CPU lacks is named OFF (with GGML_NATIVE=OFF ggml's defaults turn AVX2 on)
    assert not llama_build.feature_options(AMX_XEON, "avx2")["AVX512"]
    older = llama_build.feature_options(frozenset({"sse4_2", "avx"}))
    assert "-DGGML_AVX2=OFF" in llama_build.cmake_args(older) and "-DGGML_AVX=ON" in llama_build.cmake_args(older)
    with pytest.raises(ValueError, match="unknown CPU level"):
        llama_build.feature_options(AMX_XEON, "avx9")


def test_a_changed_flag_set_gets_a_wheel_folder_of_its_own_and_a_half_built_one_is_never_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    full = llama_build.plan_build("0.3.36", "auto", AMX_XEON)
    assert full.folder.parent == tmp_path / "agentuq_nb" / "llama-cpp-python"
    assert llama_build.plan_build("0.3.36", "auto", AMX_XEON).key == full.key
    monkeypatch.setenv("CMAKE_ARGS", "-DGGML_BLAS=ON")  # the user's own flags come after ours, in the key too
    with_blas = llama_build.plan_build("0.3.36", "auto", AMX_XEON)
    assert with_blas.args[-1] == "-DGGML_BLAS=ON"
    monkeypatch.delenv("CMAKE_ARGS")
    assert len({full.key, with_blas.key, llama_build.plan_build("0.3.36", "avx2", AMX_XEON).key,
                llama_build.plan_build("0.3.37", "auto", AMX_XEON).key}) == 4
    full.folder.mkdir(parents=True)
    wheel = full.folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    wheel.write_bytes(b"")
    assert full.wheel() is None  # no build record: an interrupted build
    (full.folder / llama_build.BUILD_RECORD).write_text(json.dumps({"key": full.key}))
    assert full.wheel() == wheel


def test_the_version_built_is_the_locks():
    root = Path(__file__).resolve().parents[1]
    assert llama_build.locked_version(root / "requirements.lock") == llama_build.installed_version()


def test_doctor_prints_the_build_and_the_model_and_exits_0():
    done = subprocess.run([*CLI, "doctor", "--max-tokens", "2"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {key.strip(): text for key, text in (line.split("  ", 1) for line in done.stdout.splitlines())}
    assert {"machine", "CPU reports", "llama.cpp has", "built by", "AMX in its code", "embedded model",
            "embedding model", "versions"} <= set(lines)
    assert lines["AMX in its code"].startswith("none: ") and "no AMX instruction" in lines["AMX in its code"]
    text = done.stdout
    assert "runs: loaded in" in text and f"llama-cpp-python {llama_build.installed_version()}" in text
    assert "AVX2" in lines["llama.cpp has"] or "NEON" in lines["llama.cpp has"]


def test_doctor_exits_1_with_the_cause_when_the_model_cannot_run(tmp_path):
    # llama_cpp made unimportable in the doctor and in the subprocess it starts (sitecustomize runs in both)
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'llama_cpp':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, Blocked())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([*CLI, "doctor"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "does not run: llama-cpp-python is not installed (the [local] extra); rebuild: " in done.stdout
    assert "unknown (the check ended before llama.cpp said)" in done.stdout
    assert "AMX in its code  not checked: " in done.stdout


def test_a_build_made_under_another_cache_folder_is_still_ours(tmp_path, monkeypatch):
    """issue 49: the build record is read beside the wheel the package was installed from, wherever the cache was
    (a non-default XDG_CACHE_HOME at build time, or now): doctor never calls that build pip's, nor proposes a rebuild."""
    plan = llama_build.plan_build("0.3.36", "avx2", flags=AMX_XEON)
    folder = tmp_path / "built-elsewhere" / "agentuq_nb" / "llama-cpp-python" / plan.key
    folder.mkdir(parents=True)
    wheel = folder / "llama_cpp_python-0.3.36-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"")
    (folder / llama_build.BUILD_RECORD).write_text(json.dumps({"key": plan.key, "level": "avx2",
                                                               "options": plan.options, "args": plan.args}))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "another-cache"))
    assert llama_build.cache_root() != folder.parent
    assert llama_build.build_record(wheel)["key"] == plan.key
    # a build.json that does not describe its folder (another key) is not taken for ours
    (folder / llama_build.BUILD_RECORD).write_text(json.dumps({"key": "other", "options": {}}))
    assert llama_build.build_record(wheel) is None


def test_doctor_names_our_build_under_a_non_default_cache_folder(tmp_path, monkeypatch):
    """The installed llama-cpp-python (make setup's build) seen by doctor with XDG_CACHE_HOME pointing elsewhere."""
    from agentuq_nb.steps.doctor import build_origin

    if llama_build.installed_build() is None:
        pytest.skip("llama-cpp-python here is not make setup's build")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    origin = build_origin()
    assert origin.startswith("agentuq_nb's build step") and "built by pip" not in origin
    assert f"outside the present cache {tmp_path}" in origin


def test_an_objdump_that_never_ends_is_stopped_and_doctor_says_so(tmp_path, monkeypatch):
    """doctor's disassembly is bounded: an objdump that never exits (here one that sleeps) is killed after the
    timeout and named, never waited on forever."""
    fake = tmp_path / "bin" / "objdump"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(OSError, match=r"objdump did not finish within 0\.5 s \(stopped\)"):
        llama_build.amx_instructions(tmp_path / "any.so", timeout=0.5)
    fake.write_text("#!/bin/sh\nsleep 600\n")  # a wrapper whose child holds the pipe open: the group is stopped
    with pytest.raises(OSError, match=r"objdump did not finish within 0\.5 s \(stopped\)"):
        llama_build.amx_instructions(tmp_path / "any.so", timeout=0.5)
    monkeypatch.setattr(llama_build, "OBJDUMP_SECONDS", 0.5)
    monkeypatch.setattr(llama_build, "installed_libraries", lambda: [tmp_path / "libggml-cpu.so"])
    from agentuq_nb.steps.doctor import amx_status

    assert amx_status().startswith("not checked: ") and "did not finish" in amx_status()
