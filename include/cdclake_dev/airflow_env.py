"""The environment of the local stack's Airflow (``airflow dags test``, ``airflow standalone``).

Airflow is configured entirely by environment variables derived from :class:`Settings`: its home
and SQLite metadata DB under the state dir, the project's ``dags/`` and ``plugins/`` folders, and
the two connections the table DAGs use:

* ``spark_connect_default`` (type ``spark_connect``): the local Spark Connect server of the
  ``connect`` engine (:mod:`cdclake_dev.engine`), its token as the password.
* ``spark_default`` (type ``spark``): the Spark master of the ``submit`` engine. Without it the
  Spark provider falls back to ``--master yarn``; the local stack sets ``local[2]``
  (``CDCLAKE_SPARK_MASTER``).
* ``kafka_default`` (type ``kafka``): ``extra.bootstrap.servers`` of the broker holding the
  Debezium topics (the Apache Kafka provider's connection shape).
* ``kafka_notifications`` (type ``kafka``): the same broker, for the bootstrap DAG's deferrable
  wait on Debezium's notification topic (a consumer group that never commits).
* ``cdc_source_db`` (type ``mysql``): the source database, where the bootstrap DAG inserts
  snapshot signals.
* ``schema_registry`` (type ``http``), when ``CDCLAKE_SCHEMA_REGISTRY_URL`` is set: the schema
  registry of ``value_format: avro`` topics (the local chain's Apicurio Registry,
  :mod:`cdclake_dev.parts.registry`), its Confluent-compatible API URL as the host.
"""

from __future__ import annotations

import json
import os
import sys

from cdclake.settings import PROJECT_ROOT, ConnectionIds, Settings
from cdclake_dev.engine import engine_token


def airflow_env(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) plus the local stack's Airflow settings."""
    env = dict(os.environ if base is None else base)
    home = settings.airflow_home
    venv_bin = os.path.dirname(sys.executable)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            f"AIRFLOW_CONN_{ConnectionIds.SPARK.upper()}": json.dumps(
                {"conn_type": "spark", "host": settings.spark_master}
            ),
            # the Connect server's token reaches the task as the connection's password only
            f"AIRFLOW_CONN_{ConnectionIds.SPARK_CONNECT.upper()}": json.dumps(
                {
                    "conn_type": "spark_connect",
                    "host": "localhost",
                    "port": settings.spark_connect_port,
                    "password": engine_token(settings),
                }
            ),
            f"AIRFLOW_CONN_{ConnectionIds.KAFKA.upper()}": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": settings.kafka_bootstrap}}
            ),
            # the bootstrap DAG's deferrable wait reads Debezium's notification topic from the start
            # (it never commits offsets, so every wait sees the whole topic)
            f"AIRFLOW_CONN_{ConnectionIds.KAFKA_NOTIFICATIONS.upper()}": json.dumps(
                {
                    "conn_type": "kafka",
                    "extra": {
                        "bootstrap.servers": settings.kafka_bootstrap,
                        "group.id": "cdclake-bootstrap",
                        "auto.offset.reset": "earliest",
                        "enable.auto.commit": False,
                    },
                }
            ),
            # the source database, for the bootstrap DAG's signals (the connector's own user has
            # INSERT on the signal table)
            f"AIRFLOW_CONN_{ConnectionIds.SOURCE_DB.upper()}": json.dumps(
                {
                    "conn_type": "mysql",
                    "host": "127.0.0.1",
                    "port": settings.mariadb_port,
                    "login": "debezium",
                    "password": "dbz",
                }
            ),
            # the registry as production passes it (a connection); none without a URL
            **(
                {
                    f"AIRFLOW_CONN_{ConnectionIds.SCHEMA_REGISTRY.upper()}": json.dumps(
                        {"conn_type": "http", "host": settings.schema_registry_url}
                    )
                }
                if settings.schema_registry_url
                else {}
            ),
            # the CDCLAKE_* settings the tasks read, pinned to what this process resolved
            **settings.to_env(),
            # spark-submit of the pip package finds its Spark home through python3 on PATH
            "PATH": venv_bin + os.pathsep + env.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(
                [str(PROJECT_ROOT / "plugins")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
            ),
        }
    )
    return env
