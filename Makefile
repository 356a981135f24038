# One entry point for the two quick-start commands and the benchmarks.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-integration bench lint clean dist deb

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
	$(BIN)/ruff check src tests bench packaging
	$(BIN)/mypy --strict src

test: lint pyc
	$(BIN)/pytest --ignore=tests/integration

# Tests against real system components (mmdebstrap, dpkg, podman, systemd, Slurm, Prometheus);
# .ci/run installs them first.
test-integration: pyc
	$(BIN)/pytest tests/integration

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
	$(shell find src/nvfabric -name '*.py' -o -name '*.yaml' -o -name py.typed)

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
