# make run   — set up and serve on the embedded default (SQLite under ./var)
# make test  — set up and run the whole suite (SQLite pass, then PostgreSQL
#              when DATABASE_URL is set; Redis tests when REDIS_URL is set)
# make bench — the eight benchmarks (see bench/README.md)
# make bench-peers — ours against `langgraph dev` (installs it into bench/.peers-venv on first use)

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
# Each pass on two workers: the server-starting tests stay on one (tests/conftest.py), the rest run beside them.
XDIST ?= -n 2 --dist loadgroup
BENCH_ARGS ?=
TEST_CONFIG ?= tests/config.yaml

.PHONY: setup setup-test key run test test-sqlite test-postgres lint typecheck format bench bench-peers clean

# `make run` installs the runtime only (~40 s); `make test` adds the test
# tools (pytest, Playwright's driver, schemathesis, …) on top. pip's own
# lines are the progress.
$(VENV)/.installed: pyproject.toml
	@echo "== Installing the runtime into $(VENV) (first run only)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --progress-bar on -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	@echo "== Installing the test tools into $(VENV) (first run only)"
	$(VENV)/bin/pip install --progress-bar on -e '.[test]'
	touch $@

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test

run: setup
	$(PY) manage.py migrate --noinput
	$(PY) manage.py bootstrap --url http://$(HOST):$(PORT)
	$(PY) manage.py serve --host $(HOST) --port $(PORT)

# make key NAME=alice — a user (created when missing) and a new API key, shown once.
key: setup
	@test -n "$(NAME)" || { echo "usage: make key NAME=username"; exit 2; }
	$(PY) manage.py create_api_key $(NAME)

# The two passes run side by side (each is mostly waiting on servers, runs and
# sockets); -O prints each pass's output whole when it ends.
test: setup-test
	@$(MAKE) --no-print-directory -j2 -O test-sqlite test-postgres

test-sqlite: setup-test
	env -u DATABASE_URL DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) -m pytest -m "not postgres_only" $(XDIST) $(PYTEST_ARGS)

test-postgres: setup-test
	@if [ -n "$$DATABASE_URL" ]; then \
		echo "== PostgreSQL pass on $$DATABASE_URL"; \
		DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) -m pytest -m "not sqlite_only and not backend_free" $(XDIST) $(PYTEST_ARGS); \
	else \
		echo "== DATABASE_URL is not set: the PostgreSQL pass only reports its skipped tests"; \
		DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) -m pytest -m "postgres_only" -rs $(PYTEST_ARGS); \
	fi

lint: setup-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) manage.py check
	DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) manage.py makemigrations --check --dry-run
	DEERFLOW_CONFIG=$(TEST_CONFIG) $(PY) manage.py spectacular --fail-on-warn --validate --file /dev/null
	@$(MAKE) --no-print-directory typecheck

# mypy with django-stubs and djangorestframework-stubs ([tool.mypy] in pyproject.toml)
# over every package of ours; the settings module needs the test config to load.
typecheck: setup-test
	DEERFLOW_CONFIG=$(TEST_CONFIG) $(VENV)/bin/mypy core checkpoints store threads runs console deerflow_site

format: setup-test
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# BENCH_ARGS=--quick gives a sanity run of each (about 4 minutes in all, 2 of them bench.load).
bench: setup
	$(PY) -m bench.checkpoints $(BENCH_ARGS)
	$(PY) -m bench.retention $(BENCH_ARGS)
	$(PY) -m bench.runs $(BENCH_ARGS)
	$(PY) -m bench.lineage $(BENCH_ARGS)
	$(PY) -m bench.reads $(BENCH_ARGS)
	$(PY) -m bench.run_costs $(BENCH_ARGS)
	$(PY) -m bench.oracle $(BENCH_ARGS)
	$(PY) -m bench.load $(BENCH_ARGS)

# Not part of `make bench`: it installs the reference server from the package index.
bench-peers: setup
	$(PY) -m bench.peers $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var
