"""The DAGs' Airflow connections, resolved when a task runs (never at DAG-parse time), and the
clients built from them. The connection ids are :class:`cdclake.settings.ConnectionIds`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.settings import ConnectionIds

if TYPE_CHECKING:
    from cdclake.io.kafka import KafkaClients
    from cdclake.io.source_db import SourceDatabase

__all__ = ["ConnectionIds", "kafka_clients", "source_database"]


def kafka_clients(conn_id: str = ConnectionIds.KAFKA) -> KafkaClients:
    """Kafka clients from an Airflow Kafka connection: its ``extra`` is the whole librdkafka
    client config (security settings included), as the Apache Kafka provider defines it.

    Raises:
        ConfigError: the connection has no ``bootstrap.servers`` in its extra.
    """
    from airflow.sdk import BaseHook

    from cdclake.io.kafka import KafkaClients

    return KafkaClients(BaseHook.get_connection(conn_id).extra_dejson)


def source_database(conn_id: str = ConnectionIds.SOURCE_DB) -> SourceDatabase:
    """The source database from an Airflow MySQL connection (host, port, login, password)."""
    from airflow.sdk import BaseHook

    from cdclake.io.source_db import SourceDatabase

    conn = BaseHook.get_connection(conn_id)
    return SourceDatabase(
        conn.host or "127.0.0.1", int(conn.port or 3306), conn.login or "root", conn.password or "", conn.schema or None
    )
