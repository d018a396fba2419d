# The project's commands. `make demo` and `make test` each set everything up first (idempotent).
SHELL := /bin/bash
CDCLAKE := .venv/bin/cdclake
PYTEST_ARGS ?=
BENCH_ARGS ?=
CONFORMANCE_ARGS ?=

.PHONY: demo demo-avro demo-production test test-long lint bench bench-reconcile bench-engine bench-maintenance soak soak-short conformance setup stack-start stack-stop stack-status engine-start engine-stop engine-status status chain-start chain-stop airflow-ui airflow-stop lock clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

demo: setup  ## set up, load the real Debezium fixtures, run both table DAGs, show the Iceberg tables
	$(CDCLAKE) demo --quiet

demo-avro: setup  ## the real chain with Avro: MariaDB, Debezium writing Avro through a schema registry (Apicurio), writes to a demo table, its DAG, the Iceberg table
	$(CDCLAKE) demo --avro --quiet

demo-production: setup  ## the production topology on this machine (PostgreSQL, REST catalog, S3, Spark cluster, SASL Kafka, MariaDB + Debezium, Airflow's processes): a workload through the scheduled DAGs; fails unless every table equals its source
	$(CDCLAKE) production demo

test: setup lint  ## lint, then the test suite: unit, integration (Kafka, Spark, Iceberg) beside e2e (Airflow); `make test-long` has the rest; PYTEST_ARGS="tests/unit -k x" runs a selection
	include/scripts/test-suite.sh $(PYTEST_ARGS)

test-long: setup  ## the long layer, not in `make test` (its budget): the production topology, the benchmarks' smoke runs, the every-type Avro scenario on the real chain
	include/scripts/test-suite.sh --long

lint: setup  ## ruff (lint and format check), mypy (strict on the pure model), import-linter (the layers)
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy
	.venv/bin/lint-imports --no-cache

bench: setup  ## the apply path's benchmark (not a test; long): results in bench/results/; BENCH_ARGS="--size medium"
	.venv/bin/python bench/run.py $(BENCH_ARGS)

bench-reconcile: setup  ## reconcile's benchmark: 1M rows, 10 differing, vs a full export; BENCH_ARGS="--rows 20000"
	.venv/bin/python bench/reconcile_bench.py $(BENCH_ARGS)

bench-engine: setup  ## the shared engine under the real scheduler (100 tables, Connect vs submit, memory, 1,000 discovered tables in a shared DAG); BENCH_ARGS="--tables 5 --events-per-table 20 --big-events 20000 --fleet-tables 20"
	.venv/bin/python bench/engine_bench.py $(BENCH_ARGS)

bench-maintenance: setup  ## files, metadata, count(*) and lookup times after 200 runs x 1,000 changes, before/after maintenance; BENCH_ARGS="--base-rows 20000 --runs 10 --changes-per-run 200"
	.venv/bin/python bench/maintenance_bench.py $(BENCH_ARGS)

.PHONY: bench-read-cost
bench-read-cost: setup  ## read cost of format v2 (position deletes) vs v3 (deletion vectors), Spark and DuckDB, 1M rows after 200 runs x 1,000 changes, before/after maintenance (issue 54); BENCH_ARGS="--size tiny"
	.venv/bin/python bench/read_cost_bench.py $(BENCH_ARGS)

soak: setup  ## the production topology under load and seeded faults (not a test; SOAK_MINUTES=60 SOAK_TABLES=20 SOAK_SEED=1); fails when a row is lost, stale, duplicated or wrong, a run is not recovered by its retries or a failed try's error is not in the runbook; results in bench/results/
	.venv/bin/python bench/soak.py $(BENCH_ARGS)

# eight faults within 108 s: a run's four tries (three retries, 10 s doubling) can each meet one;
# with five retries the fifth try starts at least 150 s after the first, after the last fault
SOAK_SHORT_KINDS = kill_engine,kill_broker,kill_apply_task,s3_outage,resnapshot,binlog_storm,kill_scheduler,restart_postgres
soak-short: setup  ## the soak for 2 minutes: 3 tables (composite key, keyless, 40 columns), eight faults of eight kinds, seed 31; same verdict as `make soak`
	.venv/bin/python bench/soak.py --minutes 2 --tables 3 --seed 31 --kinds $(SOAK_SHORT_KINDS) --faults 8 \
	  --initial-rows 50 --ddl-interval 30 --retries 5 $(BENCH_ARGS)

conformance: setup  ## one seeded history on the real chain across option cells (JSON, Avro, schema source, whole transactions, group, history): prints the matrix phase x cell, results in bench/results/; fails unless every cell is equal; CONFORMANCE_ARGS="--seed 7 --cells json/topic,avro/topic"
	$(CDCLAKE) conformance $(CONFORMANCE_ARGS)

setup:  ## install the virtual environment, the jars and the Airflow DB (quick when done)
	@bash include/scripts/setup.sh

stack-start: setup  ## start the local stack: Kafka broker (KRaft) and the Spark Connect engine
	$(CDCLAKE) stack start

stack-stop:  ## stop the Airflow UI, the local Kafka broker and the Spark Connect engine
	$(CDCLAKE) stack stop

stack-status:  ## are the local Kafka broker and the Spark Connect engine running?
	$(CDCLAKE) stack status

engine-start: setup  ## start the shared Spark Connect server (the apply engine) on 127.0.0.1:15002
	$(CDCLAKE) engine start

engine-stop:  ## stop the shared Spark Connect server
	$(CDCLAKE) engine stop

engine-status:  ## is the shared Spark Connect server running?
	$(CDCLAKE) engine status

status:  ## per table: lag (events, time), last commit, events in 24 h, open quarantine, schema, last reconcile
	$(CDCLAKE) status

chain-start: setup  ## start the real source chain: Kafka, MariaDB, Kafka Connect + Debezium MariaDB connector, the schema registry
	$(CDCLAKE) chain start --registry

chain-stop:  ## stop the real source chain (and the schema registry)
	$(CDCLAKE) chain stop

airflow-ui: stack-start  ## Airflow UI on http://127.0.0.1:8080 (loopback only; user admin): Airflow's processes in the background
	$(CDCLAKE) ui start

airflow-stop:  ## stop the Airflow UI's processes (make stack-stop and make clean stop them too)
	$(CDCLAKE) ui stop

lock:  ## re-pin requirements.txt from requirements.in
	.venv/bin/uv pip compile requirements.in -p 3.11 -q --no-header -o requirements.txt

clean:  ## stop everything and delete the local stack's data (keeps .venv and .jars)
	-$(CDCLAKE) ui stop
	-$(CDCLAKE) chain stop
	-$(CDCLAKE) engine stop
	rm -rf .stack
