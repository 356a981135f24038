# One entry point for the two quick-start commands and the benchmarks.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-integration bench lint clean dist deb image talos-image fuzz sync-shared \
	catalogues

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
	$(BIN)/python -m nvfabric.cli.demo

# ruff, mypy --strict, and the layer contract ([tool.importlinter] in pyproject.toml: which
# package may import which; README "Layout").
RUFF := $(BIN)/ruff check src tests bench packaging
MYPY := $(BIN)/mypy --strict src
LAYERS := $(BIN)/lint-imports --no-cache
lint: $(STAMP)
	$(RUFF)
	$(MYPY)
	$(LAYERS)

# make test: the lint of make lint, then the tests in TEST_JOBS pytest-xdist workers: more
# than the two cores of the machines here, so that one worker's waits (a daemon's start, a
# bound) overlap the others' work; every test owns its temporary directories, simulated roots
# and ports. While mypy runs, one pytest collects the tests: it writes each test module with
# its assertions rewritten to __pycache__ (bytecode writing allowed for pytest; the machines
# here set PYTHONDONTWRITEBYTECODE), so the workers load them instead of each rewriting all of
# them again (~3.5 s CPU a worker). The tests' temporary directories go to tmpfs (a fresh
# directory in /dev/shm, when it has 2 GiB free): a run writes ~400 MB of small files and
# every atomic write fsyncs; on the disk of the machines here that was ~20 s of waiting and
# ~20 s of CPU. Removed after a passing run; after a failing one it is kept and named.
TEST_JOBS ?= 3
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/pytest --ignore=tests/integration
SHM_FREE_KB = $$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 {print $$4}')
test: pyc
	$(RUFF)
	$(LAYERS)
	$(PYTEST) --collect-only -q >/dev/null 2>&1 & $(MYPY); lint=$$?; wait $$!; exit $$lint
	base=; if [ "$(SHM_FREE_KB)" -gt 2097152 ] 2>/dev/null; then \
	  base=$$(mktemp -d /dev/shm/nvfabric-test.XXXXXX) || exit 2; fi; \
	$(PYTEST) -n $(TEST_JOBS) --dist worksteal $${base:+--basetemp=$$base}; rc=$$?; \
	if [ -n "$$base" ] && [ $$rc -eq 0 ]; then rm -rf "$$base"; \
	elif [ -n "$$base" ]; then echo "make test: the tests' files are kept in $$base" >&2; fi; \
	exit $$rc

# Tests against real system components (mmdebstrap, dpkg, podman, systemd, Slurm, Prometheus);
# .ci/run installs them first.
INTEGRATION_STAMP := $(VENV)/.installed-integration
$(INTEGRATION_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,integration]'
	touch $(INTEGRATION_STAMP)

test-integration: pyc $(INTEGRATION_STAMP)
	$(BIN)/pytest tests/integration

# The container image (deploy/container/Containerfile): a wheelhouse of this checkout as the
# build context, so the build installs offline. BASE: any glibc image with python3 >= 3.10
# whose minor version is the one of $(PY) (the wheels of compiled dependencies follow it).
# PODMAN and PODMAN_BUILD_FLAGS: how podman is run (the integration tests pass their private
# storage and this sandbox's runtime settings).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE ?= docker.io/library/python:3.11-slim-bookworm
IMAGE ?= localhost/nvfabric:$(VERSION)
PODMAN ?= podman
PODMAN_BUILD_FLAGS ?=
image: $(STAMP)
	rm -rf build/image && mkdir -p build/image
	$(BIN)/python -m pip wheel -q --wheel-dir build/image/wheels . pip
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) -f deploy/container/Containerfile --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$$(git rev-parse HEAD) \
	  --build-arg CREATED=$$(date -u +%Y-%m-%dT%H:%M:%SZ) -t $(IMAGE) build/image

# The Talos system extension (deploy/talos/Containerfile, FROM scratch): the single-file binary,
# deploy/talos/ and FABRIC_DIR (NVIDIA's fabric manager and NVLSM archives unpacked at their
# vendor paths; empty: nvfabric alone) as the build context. TALOS_BASE: the glibc image whose
# loader and libraries the binary runs on (the one it was built on).
TALOS_BASE ?= docker.io/library/debian:bookworm-slim
TALOS_IMAGE ?= localhost/nvfabric-talos:$(VERSION)
FABRIC_DIR ?=
talos-image: dist/nvfabric
	rm -rf build/talos && mkdir -p build/talos/dist build/talos/deploy build/talos/fabric
	cp dist/nvfabric build/talos/dist/ && cp -r deploy/talos build/talos/deploy/
	if [ -n "$(FABRIC_DIR)" ]; then cp -a "$(FABRIC_DIR)"/. build/talos/fabric/; fi
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) -f deploy/talos/Containerfile --build-arg BASE=$(TALOS_BASE) \
	  --build-arg VERSION=$(VERSION) --build-arg REVISION=$$(git rev-parse HEAD) \
	  -t $(TALOS_IMAGE) build/talos

# The long fuzz run (tests/fuzz): 1,000,000+ inputs over every reader, a count per reader and the
# slowest input printed; failing or slow inputs are kept under build/fuzz. Budget and timing in
# CPU seconds (a loaded machine takes longer, with the same count): here 1,100,000 inputs in
# about 620 CPU seconds (11 minutes unloaded).
fuzz: pyc
	$(BIN)/python -m tests.fuzz --inputs 1100000 --seconds 1080 --min-inputs 1000000

# Refresh tests/data (the repository's copy of ../shared: cases, corpus, fuzz, bench starter)
# from ../shared, or from SHARED=DIR; make test fails while the two differ.
SHARED ?= ../shared
sync-shared: $(STAMP)
	NVFABRIC_SHARED=$(SHARED) $(BIN)/python -m tests.datasync

# Rewrite the JSON twins of the YAML catalogues (src/nvfabric/data/*.yaml -> *.json) that
# nvfabric reads at run time; make test fails while a twin differs from its YAML.
catalogues: $(STAMP)
	$(BIN)/python -m tests.catalogues

bench: pyc
	$(BIN)/python bench/run.py

# The single-file binary dist/nvfabric (PyInstaller one-file): the whole CLI, its data files
# and the fake daemons, for hosts and images without Python. Built in its own venv
# (build/dist-venv: PyInstaller and nvfabric's runtime dependencies, nothing of [dev]) from a
# fresh non-editable install of this checkout. See src/nvfabric/frozen.py.
# PyInstaller comes from its PyPI sdist with the bootloader (the ELF program the binary starts
# as) compiled here, hardened: the wheel's prebuilt bootloader is not PIE and not bind-now
# (lintian hardening-no-pie, hardening-no-bindnow). Needs gcc and zlib1g-dev: the bootloader
# links the system's libz (its own static copy would be lintian's embedded-library error).
DIST_VENV := build/dist-venv
DIST_STAMP := $(DIST_VENV)/.installed
PYINSTALLER_VERSION := 6.22.3
PYI_SRC := build/pyinstaller-src/pyinstaller-$(PYINSTALLER_VERSION)
BOOTLOADER_CFLAGS := -O2 -fstack-protector-strong -D_FORTIFY_SOURCE=2 -Wformat \
	-Werror=format-security
BOOTLOADER_LDFLAGS := -Wl,-z,relro -Wl,-z,now
DIST_SOURCES := pyproject.toml packaging/dist/nvfabric-entry.py \
	$(shell find src/nvfabric -name '*.py' -o -name '*.yaml' -o -name '*.json' -o -name py.typed)

$(DIST_STAMP): pyproject.toml
	test -x $(DIST_VENV)/bin/python || $(PY) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install -q --upgrade pip
	command -v gcc >/dev/null && test -f /usr/include/zlib.h || { echo "make dist: the" \
	  "bootloader build needs gcc and zlib1g-dev (apt-get install gcc zlib1g-dev)" >&2; exit 1; }
	rm -rf build/pyinstaller-src && mkdir -p build/pyinstaller-src
	$(DIST_VENV)/bin/python -m pip download -q --no-deps --no-binary :all: \
	  -d build/pyinstaller-src pyinstaller==$(PYINSTALLER_VERSION)
	tar -xzf $(PYI_SRC).tar.gz -C build/pyinstaller-src
	cd $(PYI_SRC)/bootloader && CC="gcc -fPIE -pie" CFLAGS="$(BOOTLOADER_CFLAGS)" \
	  LDFLAGS="$(BOOTLOADER_LDFLAGS)" $(CURDIR)/$(DIST_VENV)/bin/python \
	  ./waf all >/dev/null
	for run in $(PYI_SRC)/PyInstaller/bootloader/Linux-*/run*; do \
	  objcopy --remove-section=.comment $$run; done
	$(DIST_VENV)/bin/python -m pip install -q $(PYI_SRC) .
	touch $(DIST_STAMP)

dist/nvfabric: $(DIST_STAMP) $(DIST_SOURCES)
	$(DIST_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	rm -rf build/pyinstaller
	$(DIST_VENV)/bin/pyinstaller --log-level WARN --noconfirm --onefile --strip \
	  --name nvfabric --distpath dist --workpath build/pyinstaller --specpath build/pyinstaller \
	  --collect-submodules nvfabric --collect-data nvfabric --copy-metadata nvfabric \
	  packaging/dist/nvfabric-entry.py
	dist/nvfabric --version

dist: dist/nvfabric

# The Debian package dist/nvfabric_<version>_<arch>.deb: the binary as /usr/bin/nvfabric and
# the unit as /lib/systemd/system/nvfabric.service (packaging/debian/build_deb.py: computed
# Depends, maintainer scripts that never start the unit, root ownership, lintian overrides).
UNIT := packaging/systemd/nvfabric.service

deb: dist/nvfabric
	test -f $(UNIT) || { echo "make deb: $(UNIT) is missing" >&2; exit 1; }
	$(DIST_VENV)/bin/python packaging/debian/build_deb.py --binary dist/nvfabric \
	  --unit $(UNIT) --out dist

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
