"""The one compiled part of agentuq_nb: the sidecar scanner (src/agentuq_nb/io/ingest/sidecar_scan.c).

Everything else about the package is in pyproject.toml; setuptools reads both. The scanner needs POSIX
file calls: on Windows its build is optional and io.ingest.sidecars reads every sidecar with DuckDB instead."""
import os

from setuptools import Extension, setup

WINDOWS = os.name == "nt"
setup(ext_modules=[Extension(
    "agentuq_nb.io.ingest.sidecar_scan", ["src/agentuq_nb/io/ingest/sidecar_scan.c"], optional=WINDOWS,
    extra_compile_args=[] if WINDOWS else ["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
)])
