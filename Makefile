# Two commands for a newcomer: `make demo` (the whole pipeline on a built-in graph) and `make test`.
# Both create .venv and install everything on first use (torch==2.13.0 first, as pinned).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.glisp-installed

.PHONY: demo test check bench-partition bench-serialize bench-sampling clean java-check

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "GLISP needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,datasets]'
	touch $(STAMP)

java-check:
	@java -version >/dev/null 2>&1 || { echo "Java not found: install Java 17 or newer (e.g. 'apt-get install openjdk-17-jre-headless') and re-run."; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "Java $$v found: Spark 4 needs Java 17 or newer; install openjdk-17 and re-run."; exit 1; }

demo: $(STAMP) java-check
	$(VENV)/bin/glisp pipeline --builtin cora --root data/demo --parts 4 --train

test: $(STAMP) java-check check
	$(PY) -m pytest -q --durations=40 tests

# the static gate CI runs before the tests: lint, layout, import layers and circles, types
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) tools/import_layers.py
	$(VENV)/bin/mypy

bench-partition: $(STAMP)
	$(PY) bench/partition.py

bench-serialize: $(STAMP)
	$(PY) bench/serialize.py

bench-sampling: $(STAMP)
	$(PY) bench/sampling.py

clean:
	rm -rf data/demo .pytest_cache
