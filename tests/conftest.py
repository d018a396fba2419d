"""Shared fixtures. Integration and e2e tests run on a real stack of their own: a KRaft broker on
a test port, a SQLite Iceberg catalog and warehouse, a local SparkSession and an Airflow home, all
under one temporary folder per test session."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from cdclake.model.config import TableConfig
from cdclake.settings import Settings
from cdclake_dev.process import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "debezium"
"""The demo's captured Debezium files (``examples/debezium/README.md``)."""
FIXTURES = ROOT / "tests" / "fixtures" / "debezium"
"""The other captured Debezium files the tests read (``tests/fixtures/debezium/README.md``)."""


class DebeziumFiles:
    """The captured Debezium files of the repository, by their path below ``examples/debezium``
    or ``tests/fixtures/debezium`` (``files / "flink/debezium-data-schema-include.txt"``)."""

    roots = (EXAMPLES, FIXTURES)

    def __truediv__(self, relative: str | Path) -> Path:
        for root in self.roots:
            if (root / relative).exists():
                return root / relative
        raise FileNotFoundError(f"{relative} is in none of {[str(r) for r in self.roots]}")


@pytest.fixture(scope="session")
def fixtures_dir() -> DebeziumFiles:
    return DebeziumFiles()


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory: pytest.TempPathFactory):
    """The tests' stack settings; the Spark Connect server that DAG runs start on demand
    (:func:`cdclake_dev.cli.run_table_dag`) is stopped at the end of the session."""
    from cdclake_dev import engine

    state = tmp_path_factory.mktemp("stack")
    settings = Settings.from_env(
        {
            "CDCLAKE_STATE_DIR": str(state),
            # ports of their own, so that test sessions never share (or stop) each other's servers
            "CDCLAKE_KAFKA_BOOTSTRAP": "127.0.0.1:" + os.environ.get("CDCLAKE_TEST_KAFKA_PORT", str(free_port(2))),
            "CDCLAKE_TABLES_CONFIG": str(state / "tables.yaml"),
            "CDCLAKE_MARIADB_PORT": str(free_port()),
            "CDCLAKE_CONNECT_PORT": str(free_port()),
            "CDCLAKE_TOPIC_PREFIX": "chain",
            "CDCLAKE_SPARK_CONNECT_PORT": str(free_port()),
            "CDCLAKE_ENGINE_MEMORY": "2g",
        }
    )
    yield settings
    engine.stop_engine(settings)


@pytest.fixture(scope="session")
def kafka(stack_settings: Settings):
    """A running KRaft broker; yields the :class:`~cdclake.io.kafka.KafkaClients` of it."""
    from cdclake.io.kafka import KafkaClients
    from cdclake_dev import stack

    report = stack.start_broker(stack_settings)
    assert "started" in report, f"the tests need a broker of their own: {report}"
    yield KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    stack.stop_broker(stack_settings)


@pytest.fixture(scope="session")
def mariadb(stack_settings: Settings):
    """The real source database alone: the local MariaDB (no Kafka Connect)."""
    from cdclake_dev import chain as source_chain

    source_chain.start_mariadb(stack_settings)
    yield stack_settings
    source_chain.stop_mariadb(stack_settings)


@pytest.fixture(scope="session")
def chain(stack_settings: Settings, kafka, mariadb):
    """The real source chain: MariaDB and Kafka Connect with the Debezium MariaDB connector
    (JsonConverter with schemas), streaming into the tests' broker under topic prefix ``chain``."""
    from cdclake_dev import chain as source_chain

    source_chain.start_connect(stack_settings)
    yield stack_settings
    source_chain.stop_connect(stack_settings)


@pytest.fixture(scope="session")
def schema_registry(stack_settings: Settings):
    """A running Apicurio Registry (in-memory, :class:`cdclake_dev.parts.registry.SchemaRegistry`)
    on a port of its own, started by the first test that asks for it; yields its
    Confluent-compatible API URL (``http://127.0.0.1:<port>/apis/ccompat/v7``), what the
    pipeline's registry config and :func:`cdclake_dev.chain.add_avro_connector` take."""
    from cdclake_dev.parts.registry import SchemaRegistry

    registry = SchemaRegistry(stack_settings.state_dir / "registry", free_port())
    registry.start()
    yield registry.ccompat_url
    registry.stop()


@pytest.fixture(scope="session", autouse=True)
def _warm_airflow(tmp_path_factory: pytest.TempPathFactory):
    """``airflow dags test`` runs of the session's tests fork from a warm server that imported
    Airflow and built its in-process Execution API once (:mod:`cdclake_dev.warm_airflow`: 16 of
    each run's 25 CPU seconds); the servers stop at the end of the session.
    ``CDCLAKE_TEST_COLD_AIRFLOW=1`` keeps the ``airflow`` script."""
    from cdclake_dev import warm_airflow

    if os.environ.get("CDCLAKE_TEST_COLD_AIRFLOW") == "1":
        yield None
        return
    folder = tmp_path_factory.mktemp("warm")
    warm_airflow.use(folder)
    try:
        yield folder
    finally:
        warm_airflow.use(None)
        warm_airflow.stop_all(folder)


@pytest.fixture(scope="session")
def engine(stack_settings: Settings) -> str:
    """The shared Spark Connect server of the tests' stack (stopped with ``stack_settings``);
    yields its URL with the token, for :func:`cdclake.spark.session.connect_session`."""
    from cdclake_dev import engine as local_engine

    local_engine.start_engine(stack_settings)
    return f"{local_engine.engine_url(stack_settings)}/;token={local_engine.engine_token(stack_settings)}"


@pytest.fixture(scope="session")
def spark(stack_settings: Settings):
    from cdclake.spark.session import build_session

    session = build_session(stack_settings, "cdclake-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def make_table(**overrides) -> TableConfig:
    """A table config with a unique topic and Iceberg table, so tests never share state."""
    suffix = uuid.uuid4().hex[:8]
    fields = {
        "name": f"t_{suffix}",
        "topic": f"test.{suffix}.events",
        "namespace": "tests",
        "table": f"t_{suffix}",
        "primary_key": ["id"],
        "value_format": "json_with_schema",
    }
    fields.update(overrides)
    return TableConfig.model_validate(fields)


def plan_offsets(settings: Settings, cfg: TableConfig, run_id: str = "test-run", **replay):
    """The table's next :class:`~cdclake.model.plan.RunPlan`, as the ``plan`` task makes it
    (``replay``: ``replay_from_offsets`` or ``replay_from_timestamp_ms``)."""
    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients
    from cdclake.pipeline.planner import plan_next

    return plan_next(
        load_catalog(settings), KafkaClients.from_bootstrap(settings.kafka_bootstrap), cfg, run_id, **replay
    )


def apply_offsets(
    spark,
    settings: Settings,
    cfg: TableConfig,
    offset_range,
    run_id: str,
    *,
    replay: bool = False,
    accept_source_change: bool = False,
):
    """Apply ``offset_range`` of ``cfg``'s topic in one run (the plan the ``apply`` task gets)."""
    from cdclake.model.plan import RunPlan
    from cdclake.spark.apply import apply_range

    plan = RunPlan(
        table=cfg, run_id=run_id, range=offset_range, replay=replay, accept_source_change=accept_source_change
    )
    return apply_range(spark, settings, plan)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``runs_last`` (they change the shared chain for good) run after all others."""
    items.sort(key=lambda item: item.get_closest_marker("runs_last") is not None)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """py4j's gateway connections close in finalizers after pytest has closed the streams its
    capture handed to logging handlers; their INFO line "Closing down clientserver connection"
    would end the run's output with a ``--- Logging error ---`` traceback. Only WARNING and above
    from py4j are logged once the session is over."""
    import logging

    logging.getLogger("py4j").setLevel(logging.WARNING)
