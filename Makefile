# Two commands set everything up: `make demo` and `make test`. Both create the virtualenv.
# PYTHON overrides the interpreter (default: the first python3 >= 3.11 on PATH); VENV the venv folder.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3 python3.13 python3.12 python3.11; do \
	if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; \
	then echo $$p; break; fi; done)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# make test runs the suite on TEST_WORKERS pytest-xdist workers, each with a test database of its own
# (docs/development.md#how-long-the-suite-takes); TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder)

.PHONY: help venv test test-fast lint typecheck demo bench chaos clean db-stop docs docs-hosted docs-serve dist wheel-smoke matrix

help:
	@echo "make demo       run the example flows on the embedded PostgreSQL (no set-up needed)"
	@echo "make test       run the whole test suite (embedded PostgreSQL, or DATABASE_URL when set)"
	@echo "make bench      measure throughput and latency against raw PGMQ"
	@echo "make lint       ruff + mypy"
	@echo "make docs       build the documentation site in strict mode (site/)"
	@echo "make docs-hosted  build it as Read the Docs does: a clean venv from .readthedocs.yaml's install lines"
	@echo "make dist       build the sdist and wheel (dist/) and check them with twine"
	@echo "make wheel-smoke  install the built wheel in a clean venv: startproject, migrate, one flow run, manage.py test"
	@echo "make matrix     the unit + SQL suites on the other supported Python x Django (nox --list)"

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON)" ]; then echo "error: no python3 >= 3.11 found on PATH; install one or set PYTHON=..." >&2; exit 2; fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade 'pip>=25.1'
	$(BIN)/python -m pip install --quiet -e '.[binary]' --group dev
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check pgflow_django tests testproject bench noxfile.py docs_hooks.py .ci
	DATABASE_URL=$${DATABASE_URL:-postgresql://localhost/unused} $(BIN)/mypy pgflow_django

typecheck: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-postgresql://localhost/unused} $(BIN)/mypy pgflow_django

demo: $(STAMP)
	$(BIN)/python testproject/manage.py pgflow_demo

bench: $(STAMP)
	$(BIN)/python -m bench.run

chaos: $(STAMP)
	PGFLOW_CHAOS=full $(BIN)/python -m pytest tests/acceptance -m slow $(PYTEST_ARGS)

db-stop: $(STAMP)
	$(BIN)/python -c "from testproject.embedded import stop; stop('.pgdata')"

docs: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-postgresql://localhost/unused} $(BIN)/mkdocs build --strict

# The site as the hosting builds it (.readthedocs.yaml): a clean venv with only its install lines, then
# its build command (CI runs this one; make docs is the quick build in the development venv).
docs-hosted: $(STAMP)
	$(BIN)/python -m nox -s readthedocs

docs-serve: $(STAMP)
	DATABASE_URL=$${DATABASE_URL:-postgresql://localhost/unused} $(BIN)/mkdocs serve

dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

wheel-smoke: dist
	$(BIN)/python -m nox -s wheel_smoke

# Two lanes side by side: the PostgreSQL 15 sessions, and the embedded PostgreSQL 18 ones (a little
# faster) followed by the floors session (PostgreSQL 15 too, on test databases of its own name); each
# lane's log is printed when both have ended.
matrix: $(STAMP)
	@logs=$$(mktemp -d); \
	$(BIN)/python -m nox -t matrix -k 'pg15 and not floors' >$$logs/pg15.log 2>&1 & lane15=$$!; \
	$(BIN)/python -m nox -t matrix -k 'pg18 or floors' >$$logs/pg18.log 2>&1; status18=$$?; \
	wait $$lane15; status15=$$?; \
	cat $$logs/pg15.log $$logs/pg18.log; rm -rf $$logs; \
	test $$status15 -eq 0 -a $$status18 -eq 0

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .nox site dist
