"""The environment of the local stack's Airflow (``airflow dags test``, the UI of ``cdclake ui``).

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

The UI (``cdclake ui start``, ``make airflow-ui``; :func:`ui_processes`) runs Airflow's four
processes (:class:`~cdclake_dev.parts.airflow.AirflowProcesses`) with :func:`ui_env`: the
api-server on ``127.0.0.1:8080`` only, no log server (they listen on every interface; the
api-server reads the log files), a login (user ``admin``, its password generated into
``<airflow home>/simple_auth_manager_passwords.json.generated``), DAGs paused at creation, and
Airflow's parallelism sized to the machine and the apply pool (:func:`airflow_parallelism`).
``cdclake ui stop`` (``make airflow-stop``) stops every process group it started.
"""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from cdclake.settings import PROJECT_ROOT, ConnectionIds, Settings
from cdclake_dev.engine import engine_token

if TYPE_CHECKING:
    from cdclake_dev.parts.airflow import AirflowProcesses

UI_PORT = 8080
"""The loopback port of the local UI's api-server."""


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


def airflow_parallelism(settings: Settings, cpus: int | None = None) -> int:
    """``[core] parallelism`` of the local UI: the apply pool's slots (each an apply on the shared
    engine, which does the heavy work) plus one task per core for the light ones (plan, freshness
    check, maintenance), instead of Airflow's default 32 task processes.

    Args:
        settings: its ``apply_pool_slots`` (``CDCLAKE_APPLY_POOL_SLOTS``).
        cpus: the machine's cores; default: ``os.cpu_count()``.
    """
    return settings.apply_pool_slots + max(1, cpus if cpus is not None else os.cpu_count() or 1)


def ui_env(settings: Settings, base: dict[str, str] | None = None) -> dict[str, str]:
    """:func:`airflow_env` plus the local UI's settings (module docstring): a login, paused DAGs,
    the parallelism of :func:`airflow_parallelism`, one api-server worker, DAG files parsed every
    30 s by one process."""
    env = airflow_env(settings, base)
    env.update(
        {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
            "AIRFLOW__CORE__PARALLELISM": str(airflow_parallelism(settings)),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        }
    )
    return env


def ui_processes(settings: Settings) -> AirflowProcesses:
    """The local UI's Airflow processes: :func:`ui_env`, the api-server on ``127.0.0.1:``
    :data:`UI_PORT`, no log servers; pid files and logs in ``<airflow home>/ui``."""
    from cdclake_dev.parts.airflow import AirflowProcesses

    return AirflowProcesses(ui_env(settings), settings.airflow_home / "ui", UI_PORT, cwd=PROJECT_ROOT, serve_logs=False)


def password_file(settings: Settings) -> str:
    """Where the api-server's simple auth manager writes the generated password of ``admin``."""
    return str(settings.airflow_home / "simple_auth_manager_passwords.json.generated")
