# The two commands of the README:  `make demo`  and  `make test`.
# Everything else here is what they need: a .venv with torch (CPU build) installed first,
# then aclarena and its pinned dependencies, then (tests only) Debian's chromium.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# `pip install torch==2.13.0` takes the CPU build on this kind of machine's disk; a bare
# `torch` requirement would pull a multi-GB CUDA build, so torch is named first, always.
TORCH  ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: demo test test-fast venv install install-dev browser lint clean docs-results

demo: install
	$(VENV)/bin/aclarena-diag demo

# lint first: ruff (bugbear, blind except, complexity) and mypy gate the tests, here and in CI (.ci/run)
test: install-dev browser lint
	$(PY) -m pytest $(PYTEST_ARGS)

# the quick loop while editing: unit and integration tests without the slow and browser ones, no lint
# (tiers and their measured times: docs/testing.md)
test-fast: install-dev
	$(PY) -m pytest -m "not slow and not browser" tests/unit tests/integration $(PYTEST_ARGS)

venv: $(VENV)/.torch-stamp

$(VENV)/.torch-stamp:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(TORCH)
	touch $@

install: $(VENV)/.install-stamp

$(VENV)/.install-stamp: $(VENV)/.torch-stamp pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt $(TORCH) -e .
	touch $@

install-dev: $(VENV)/.dev-stamp

$(VENV)/.dev-stamp: $(VENV)/.torch-stamp pyproject.toml constraints.txt
	$(PIP) install -q -c constraints.txt $(TORCH) -e '.[dev]'
	touch $(VENV)/.install-stamp $@

# Debian's chromium for the browser tests and figure export (kaleido finds it on PATH).
# Installed only when missing and only as root; otherwise the browser tests say what to install.
browser:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; \
	  else \
	    echo "chromium is missing: install Debian's chromium (apt-get install chromium) to run the browser tests"; \
	  fi; \
	fi

# README's and docs' result tables, regenerated from the committed files under docs/results/
docs-results: install
	$(PY) tools/docs_results.py

lint: install-dev
	$(VENV)/bin/ruff check aclarena tests benchmarks experiments tools examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
