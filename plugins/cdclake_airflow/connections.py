"""Reading the table DAGs' Airflow connections (defined in :mod:`cdclake.airflow_env`)."""

from __future__ import annotations

from cdclake.airflow_env import KAFKA_CONN_ID, SPARK_CONN_ID

__all__ = ["KAFKA_CONN_ID", "SPARK_CONN_ID", "kafka_bootstrap"]


def kafka_bootstrap(conn_id: str = KAFKA_CONN_ID) -> str:
    """``bootstrap.servers`` of an Airflow Kafka connection.

    Raises:
        ValueError: the connection has no ``bootstrap.servers`` extra.
    """
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(conn_id)
    servers = conn.extra_dejson.get("bootstrap.servers")
    if not servers:
        raise ValueError(f"Airflow connection {conn_id!r} has no extra 'bootstrap.servers'")
    return servers
