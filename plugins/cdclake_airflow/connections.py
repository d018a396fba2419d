"""The DAGs' Airflow connections, resolved when a task runs (never at DAG-parse time), and the
clients built from them. The connection ids are :class:`cdclake.settings.ConnectionIds`.

Every credential a task uses comes from here: the Kafka client config (SASL/SSL included), the
Iceberg catalog's properties (JDBC password, S3 keys, REST token), the source database's login,
the Spark Connect token. Airflow masks the connections' passwords and sensitive extra keys in task
logs; this project never logs them nor passes them on a command line (see
:mod:`cdclake_airflow.spark_submit` for how a ``spark-submit`` job gets them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cdclake.settings import ConnectionIds, Settings

if TYPE_CHECKING:
    from cdclake.io.kafka import KafkaClients
    from cdclake.io.source_db import SourceDatabase

__all__ = ["ConnectionIds", "catalog_properties", "kafka_clients", "kafka_config", "source_database", "task_settings"]


def kafka_config(conn_id: str = ConnectionIds.KAFKA) -> dict[str, Any]:
    """The librdkafka client config of an Airflow Kafka connection: its whole ``extra``
    (security settings included), as the Apache Kafka provider defines the connection."""
    from airflow.sdk import BaseHook

    return dict(BaseHook.get_connection(conn_id).extra_dejson)


def kafka_clients(conn_id: str = ConnectionIds.KAFKA) -> KafkaClients:
    """Kafka clients from an Airflow Kafka connection (:func:`kafka_config`).

    Raises:
        ConfigError: the connection has no ``bootstrap.servers`` in its extra.
    """
    from cdclake.io.kafka import KafkaClients

    return KafkaClients(kafka_config(conn_id))


def catalog_properties(conn_id: str = ConnectionIds.ICEBERG_CATALOG) -> dict[str, Any] | None:
    """The Iceberg catalog properties of the connection ``conn_id`` (its ``extra``), or ``None``
    when no such connection is defined (the embedded default: the catalog is the environment's)."""
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    return dict(conn.extra_dejson)


def task_settings(conn_id: str = ConnectionIds.ICEBERG_CATALOG) -> Settings:
    """The settings a task runs with: ``CDCLAKE_*`` (:meth:`Settings.from_env`) with the catalog
    of the connection ``conn_id`` when it is defined (:meth:`Settings.with_catalog`).

    Raises:
        ValueError: an unknown ``CDCLAKE_*`` variable, or a malformed catalog property.
    """
    settings = Settings.from_env()
    props = catalog_properties(conn_id)
    return settings if props is None else settings.with_catalog(props)


def source_database(conn_id: str = ConnectionIds.SOURCE_DB) -> SourceDatabase:
    """The source database from an Airflow MySQL connection (host, port, login, password)."""
    from airflow.sdk import BaseHook

    from cdclake.io.source_db import SourceDatabase

    conn = BaseHook.get_connection(conn_id)
    return SourceDatabase(
        conn.host or "127.0.0.1", int(conn.port or 3306), conn.login or "root", conn.password or "", conn.schema or None
    )
