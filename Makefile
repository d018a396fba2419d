# The project's commands. `make demo` and `make test` each set everything up first (idempotent).
SHELL := /bin/bash
CDCLAKE := .venv/bin/cdclake
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: demo test lint bench bench-reconcile setup stack-start stack-stop stack-status chain-start chain-stop airflow-ui lock clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

demo: setup  ## set up, load the real Debezium fixtures, run both table DAGs, show the Iceberg tables
	$(CDCLAKE) demo --quiet

test: setup lint  ## lint, then the whole test suite: unit, integration (Kafka, Spark, Iceberg), e2e (Airflow)
	@set +e; .venv/bin/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

lint: setup  ## ruff (lint and format check), mypy (strict on the pure model), import-linter (the layers)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache

bench: setup  ## the apply path's benchmark (not a test; long): results in bench/results/; BENCH_ARGS="--size medium"
	.venv/bin/python bench/run.py $(BENCH_ARGS)

bench-reconcile: setup  ## reconcile's benchmark: 1M rows, 10 differing, vs a full export; BENCH_ARGS="--rows 20000"
	.venv/bin/python bench/reconcile_bench.py $(BENCH_ARGS)

setup:  ## install the virtual environment, the jars and the Airflow DB (quick when done)
	@bash include/scripts/setup.sh

stack-start: setup  ## start the local Kafka broker (KRaft)
	$(CDCLAKE) stack start

stack-stop:  ## stop the local Kafka broker
	$(CDCLAKE) stack stop

stack-status:  ## is the local Kafka broker running?
	$(CDCLAKE) stack status

chain-start: setup  ## start the real source chain: Kafka, MariaDB, Kafka Connect + Debezium MariaDB connector
	$(CDCLAKE) chain start

chain-stop:  ## stop the real source chain
	$(CDCLAKE) chain stop

airflow-ui: stack-start  ## Airflow UI on http://127.0.0.1:8080 (airflow standalone on SQLite)
	$(CDCLAKE) airflow standalone

lock:  ## re-pin requirements.txt from requirements.in
	.venv/bin/uv pip compile requirements.in -p 3.11 -q --no-header -o requirements.txt

clean:  ## stop everything and delete the local stack's data (keeps .venv and .jars)
	-$(CDCLAKE) chain stop
	rm -rf .stack
