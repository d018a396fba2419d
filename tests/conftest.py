"""Shared fixtures. Integration and e2e tests run on a real stack of their own: a KRaft broker on
a test port, a SQLite Iceberg catalog and warehouse, a local SparkSession and an Airflow home, all
under one temporary folder per test session."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from cdclake.config import TableConfig
from cdclake.settings import Settings

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "debezium"
TEST_KAFKA_PORT = int(os.environ.get("CDCLAKE_TEST_KAFKA_PORT", "19192"))
"""The tests' own broker; another port lets two test sessions run side by side."""


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    assert FIXTURES.is_dir(), f"Debezium fixtures not found at {FIXTURES}"
    return FIXTURES


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    state = tmp_path_factory.mktemp("stack")
    return Settings.from_env(
        {
            "CDCLAKE_STATE_DIR": str(state),
            "CDCLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{TEST_KAFKA_PORT}",
            "CDCLAKE_TABLES_CONFIG": str(state / "tables.yaml"),
            "CDCLAKE_MARIADB_PORT": "13316",
            "CDCLAKE_CONNECT_PORT": "18093",
            "CDCLAKE_TOPIC_PREFIX": "chain",
        }
    )


@pytest.fixture(scope="session")
def kafka(stack_settings: Settings):
    """A running KRaft broker; yields its bootstrap servers."""
    from cdclake import stack

    stack.start_broker(stack_settings)
    yield stack_settings.kafka_bootstrap
    stack.stop_broker(stack_settings)


@pytest.fixture(scope="session")
def chain(stack_settings: Settings, kafka):
    """The real source chain: MariaDB and Kafka Connect with the Debezium MariaDB connector
    (JsonConverter with schemas), streaming into the tests' broker under topic prefix ``chain``."""
    from cdclake import source_chain

    source_chain.start_mariadb(stack_settings)
    source_chain.start_connect(stack_settings)
    yield stack_settings
    source_chain.stop_connect(stack_settings)
    source_chain.stop_mariadb(stack_settings)


@pytest.fixture(scope="session")
def spark(stack_settings: Settings):
    from cdclake.spark_apply import build_session

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
