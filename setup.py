"""The one compiled part of agentuq_nb: the sidecar scanner (src/agentuq_nb/io/sidecar_scan.c).

Everything else about the package is in pyproject.toml; setuptools reads both."""
from setuptools import Extension, setup

setup(ext_modules=[Extension("agentuq_nb.io.sidecar_scan", ["src/agentuq_nb/io/sidecar_scan.c"],
                             extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"])])
