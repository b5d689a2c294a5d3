# Two commands do everything on a fresh machine:
#   make reproduce   set up .venv and run the quickstart study (figures → figures/quickstart/)
#   make test        set up .venv and run the test suite (ruff, the documentation site, pytest)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PARAMS ?= params/quickstart.yaml
# the instruction sets llama.cpp is compiled with (src/agentuq_nb/llm/llama_build.py): empty = the level this .venv was
# last built with, else auto (all the CPU reports except AMX); avx2, avx, sse42 or x86-64 for a machine that traps more
# (the self-check at the end of `make setup` names the one to try)
LLAMA_CPU ?=

.PHONY: setup llama reproduce test test-fast lint docs lab strip clean-runs browser

# Debian's chromium for the explorer's browser tests (Playwright drives it through /usr/bin/chromium; its own
# browser download is not used). Installed with apt-get when missing (as root, or with sudo where it is set up).
CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# torch first, pinned: the CPU build on this machine's disk, not a multi-GB CUDA build (a stamp of its own, so that
# a .venv made by `make docs`, which needs no torch, still gets it before the rest)
TORCH := $(VENV)/.torch
$(TORCH): | $(BIN)/python
	$(BIN)/pip install --quiet torch==2.13.0
	touch $(TORCH)

# llama-cpp-python for this CPU without AMX (GGML_NATIVE=OFF, each instruction set named), from a wheel kept per flag
# set in ~/.cache/agentuq_nb/llama-cpp-python/<key>/: compiled the first time (about 6-11 min on 2 cores), installed in
# seconds after; never from pip's wheel cache, which would hand back a wheel built with other flags. Before the rest,
# so that pip finds it installed and builds nothing.
llama: $(TORCH)
	$(BIN)/python src/agentuq_nb/llm/llama_build.py install --lock requirements.lock $(if $(LLAMA_CPU),--cpu $(LLAMA_CPU))

# setup.py and the C source: the sidecar scanner is compiled by the install (a few seconds)
# uv installs the locked packages: the same versions as pip (requirements.lock), in seconds from its cache where pip
# takes about 80 s to resolve and unpack them; torch and llama-cpp-python are in place by then (uv does not look at
# this machine's torch file, and the lock's torch==2.13.0+cpu is on no index, so uv cannot swap in a CUDA build)
UV := $(BIN)/uv
$(UV): | $(BIN)/python
	$(BIN)/pip install --quiet -c requirements.lock uv
# --compile-bytecode as pip does: without it every process compiles what it imports anew wherever bytecode is not
# written (PYTHONDONTWRITEBYTECODE, as on this machine: importing litellm, pandas, scikit-learn, sentence-transformers,
# papermill, dask and the command line took 23-27 s a process instead of 14-15 s)
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode --python $(BIN)/python -c requirements.lock

$(STAMP): pyproject.toml requirements.lock setup.py src/agentuq_nb/io/ingest/sidecar_scan.c | llama $(UV)
	# everything (embedded model, embeddings, Dask, test tools, the documentation site) at the locked versions
	$(UV_INSTALL) -e ".[all,dev]"
	touch $(STAMP) $(DOCS_STAMP)

# ends with the self-check: the embedded model loaded and a few tokens decoded in a subprocess; when it cannot run,
# one line says why and which command rebuilds llama.cpp (agentuq-nb doctor says more)
# then the static MiniLM table the black-box signals embed with is distilled (~20 s, once per machine; kept beside
# the embedding cache in the user's cache folder)
# the package's own modules compiled to bytecode (a few seconds; only what changed): Python reads bytecode even where
# it writes none (PYTHONDONTWRITEBYTECODE), and each of the many processes the tests and studies start then skips
# compiling the package (about 0.5 s a process that imports the command line and the detector)
setup: llama $(STAMP) browser
	$(BIN)/python -m compileall -q src
	$(BIN)/python -m agentuq_nb.llm.model_check
	$(BIN)/python -m agentuq_nb.uq.static_embedding

browser:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

reproduce: setup
	$(BIN)/agentuq-nb reproduce $(PARAMS)

# the tests on TEST_WORKERS processes (pytest-xdist; 0: in this process alone), a test file's tests in one of them (its
# module fixtures made once), the slowest files first (tests/conftest.py SLOWEST_FILES; --no-loadscope-reorder keeps
# that order); test-report.xml is their JUnit report, and the 20 slowest tests and files are listed after
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --junitxml=test-report.xml

test: setup lint docs
	$(PYTEST)
	$(BIN)/python benchmarks/slowest_tests.py test-report.xml --top 20 --files 20

test-fast: setup lint docs
	$(PYTEST) -m "not slow"

# pyflakes and import order (ruff); the layers contract is checked by the tests (tests/test_layers.py)
lint: setup
	$(BIN)/ruff check src tests benchmarks

# the documentation site (mkdocs.yml, docs/, the API reference from the docstrings) into site/, git-ignored;
# --strict: a broken link or anchor, a page left out of the navigation or an unreadable docstring fails it.
# It needs the core install and the [docs] extra only: no llama.cpp build, no torch (the command line page's
# synopsis imports the command line, which the core install runs; the API reference is read from the source)
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): pyproject.toml requirements.lock setup.py | $(UV)
	$(UV_INSTALL) -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

lab: setup
	$(BIN)/python -m ipykernel install --user --name agentuq-nb --display-name "agentuq_nb (.venv)"
	$(BIN)/jupyter lab notebooks/

strip:
	$(BIN)/nbstripout notebooks/*.ipynb

clean-runs:
	rm -rf runs/
