# One entry point for the two quick-start commands and the benchmarks.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-integration bench lint clean fuzz sync-shared

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Byte-compile our sources: the machines here set PYTHONDONTWRITEBYTECODE, and without .pyc
# files every start-up recompiles nvfabric (tens of ms), which would distort the benchmarks.
.PHONY: pyc
pyc: $(STAMP)
	$(BIN)/python -m compileall -q src

demo: pyc
	$(BIN)/python -m nvfabric.demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict src

test: lint pyc
	$(BIN)/pytest --ignore=tests/integration

# Tests against real system components (mmdebstrap, dpkg, podman, systemd, Slurm, Prometheus);
# .ci/run installs them first.
test-integration: pyc
	$(BIN)/pytest tests/integration

# The long fuzz run (tests/fuzz): 1,000,000+ inputs over every reader, a count per reader and the
# slowest input printed; failing or slow inputs are kept under build/fuzz. About 18 minutes.
fuzz: pyc
	$(BIN)/python -m tests.fuzz --inputs 1100000 --seconds 1080 --min-inputs 1000000

# Refresh tests/data (the repository's copy of ../shared: cases, corpus, fuzz, bench starter)
# from ../shared, or from SHARED=DIR; make test fails while the two differ.
SHARED ?= ../shared
sync-shared: $(STAMP)
	NVFABRIC_SHARED=$(SHARED) $(BIN)/python -m tests.datasync

bench: pyc
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
