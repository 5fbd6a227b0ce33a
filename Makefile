# Two commands for a newcomer: `make demo` (the whole pipeline on a built-in graph) and `make test`.
# Both create .venv and install everything on first use (torch==2.13.0 first, as pinned).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.glisp-installed
AZURITE_VERSION := 3.35.0
AZURITE := .tools/node_modules/.bin/azurite-blob
# pytest with Python's bytecode cache on, even where the environment turns it off (PYTHONDONTWRITEBYTECODE):
# each of make test's five pytest processes would otherwise rewrite and compile every test module's assertions
# anew while collecting (about 5 CPU-s each); the caches go to __pycache__, which git ignores
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest
COV    := $(foreach p,glisp_app glisp_core glisp_spark glisp_sampling spark_jobs glisp_serving glisp_train glisp_infer glisp_testing,--cov=$(p))

.PHONY: demo test check-and-fast test-fast test-rest coverage check docs bench-partition bench-serialize bench-sampling clean java-check tools

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "GLISP needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,datasets]'
	touch $(STAMP)

# the Azure Blob emulator the store conformance suite runs against (the GCS one comes with the dev extra)
tools: $(AZURITE)

$(AZURITE):
	@command -v npm >/dev/null 2>&1 || { echo "npm not found: install Node.js 18 or newer (e.g. 'apt-get install nodejs npm'): the tests run Azurite, the Azure Storage emulator, from npm"; exit 1; }
	npm install --prefix .tools --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION)
	@touch $(AZURITE)

java-check:
	@java -version >/dev/null 2>&1 || { echo "Java not found: install Java 17 or newer (e.g. 'apt-get install openjdk-17-jre-headless') and re-run."; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "Java $$v found: Spark 4 needs Java 17 or newer; install openjdk-17 and re-run."; exit 1; }

demo: $(STAMP) java-check
	$(VENV)/bin/glisp pipeline --builtin cora --root data/demo --parts 4 --train

# The gate beside the fast lane (no JVM, no server subprocess): a broken change fails in about a minute, before
# the rest starts. Tiers come from the fixtures a test uses (tests/tiers.py); each run prints its time per tier.
test: $(STAMP) tools java-check check-and-fast test-rest

# The static gate is mostly mypy on one core (26 s with no cache, on a fresh clone; 5 s with it), and the fast
# lane's two workers leave a core idle about a third of its time: both at once, the gate's report after the
# lane's. The gate runs in its own session, so an interrupted make stops all of it. Beside them, the drivers'
# class archive the rest lane maps (docs/testing.md), where this virtualenv has none yet (a fresh clone): built
# here it lengthens the fast lane by about 17 s and spares the rest lane's start 32-34 s of waiting for it; a
# failed build only leaves the drivers without it, and a failed gate or lane stops the build, not waits for it.
check-and-fast: $(STAMP)
	@out=$$(mktemp); \
	setsid $(MAKE) --no-print-directory check >$$out 2>&1 & gate=$$!; \
	setsid $(PY) -m glisp_testing.jvm_opts >/dev/null 2>&1 & archive=$$!; \
	trap 'kill -TERM -- -$$gate -$$archive 2>/dev/null; rm -f $$out' EXIT; trap 'exit 130' INT TERM; \
	$(MAKE) --no-print-directory test-fast; fast=$$?; \
	wait $$gate; checked=$$?; \
	if [ $$checked -eq 0 ] && [ $$fast -eq 0 ]; then wait $$archive; fi; \
	echo "== beside it: the static gate (make check) =="; \
	cat $$out; \
	[ $$checked -eq 0 ] && [ $$fast -eq 0 ]

test-fast: $(STAMP)
	$(PYTEST) -q -m fast -n 2 tests

# Two runs at once (docs/testing.md): the tests that use the session's Spark JVM on two workers (each test group
# whole on one), and beside them, in one process with no session JVM, the tests that need none (the standalone
# cluster, CLI subprocesses, the object stores alone): it works while the workers wait. Its report follows theirs.
test-rest: $(STAMP) tools java-check
	@out=$$(mktemp); \
	$(PYTEST) -q -m "not fast and not spark" --durations=25 tests >$$out 2>&1 & beside=$$!; \
	trap 'kill $$beside 2>/dev/null; rm -f $$out' EXIT; trap 'exit 130' INT TERM; \
	$(PYTEST) -q -m "not fast and spark" -n 2 --dist loadgroup --durations=25 tests; spark=$$?; \
	wait $$beside; other=$$?; \
	echo "== beside it: the tests with no session JVM (pytest -q -m 'not fast and not spark') =="; \
	cat $$out; \
	[ $$spark -eq 0 ] && [ $$other -eq 0 ]

# line coverage of the library by the whole suite (both lanes, in-process code only)
coverage: $(STAMP) tools java-check
	$(PYTEST) -q -m fast -n 2 $(COV) --cov-report= tests
	$(PYTEST) -q -m "not fast" -n 2 --dist loadgroup $(COV) --cov-append --cov-report=term tests

# the static gate CI runs before the tests: lint, layout, import layers and circles, types, the generated
# reference pages current, the docs site built with warnings as errors (a broken link or anchor fails)
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/import_layers.py
	$(VENV)/bin/mypy
	$(PY) tools/gen_reference.py --check
	@site=$$(mktemp -d); trap 'rm -rf $$site' EXIT; set -x; $(VENV)/bin/mkdocs build --strict --quiet --site-dir $$site

# the docs site (guides, design, generated reference, results) into site/: open site/index.html
docs: $(STAMP)
	$(PY) tools/gen_reference.py
	$(VENV)/bin/mkdocs build --strict

bench-partition: $(STAMP)
	$(PY) bench/partition.py

bench-serialize: $(STAMP)
	$(PY) bench/serialize.py

bench-sampling: $(STAMP)
	$(PY) bench/sampling.py

clean:
	rm -rf data/demo .pytest_cache
