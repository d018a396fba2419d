"""docker-compose.yaml cannot start here (no Docker engine): check that it parses, that every
service the DAGs need is there, and that it runs the very connector config the local chain runs."""

from __future__ import annotations

import json
import re

import yaml

from cdclake.local.chain import CONNECTOR_CONFIG, connector_env
from cdclake.settings import PROJECT_ROOT, Settings

COMPOSE = PROJECT_ROOT / "docker-compose.yaml"


def services() -> dict:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def test_every_component_of_the_production_shape_is_a_service():
    assert {
        "mysql",
        "kafka",
        "connect",
        "postgres",
        "minio",
        "spark-master",
        "spark-worker",
        "spark-connect",
        "airflow-api-server",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
    } <= set(services())


def test_mysql_runs_with_the_binlog_settings_debezium_needs():
    command = " ".join(services()["mysql"]["command"])
    for setting in (
        "--server-id=",
        "--log-bin=",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-transaction-compression=OFF",
    ):
        assert setting in command


def test_connect_mounts_the_local_chains_connector_file_and_fills_every_placeholder():
    connect = services()["connect"]
    mounts = [v.split(":")[0] for v in connect["volumes"]]
    assert "./" + str(CONNECTOR_CONFIG.relative_to(PROJECT_ROOT)) in mounts
    placeholders = set(re.findall(r"\$\{env:([A-Z_]+)\}", CONNECTOR_CONFIG.read_text()))
    assert placeholders, "the connector config should take its endpoints from the environment"
    assert placeholders <= set(connect["environment"])
    assert placeholders <= set(connector_env(Settings.from_env({})))
    config = json.loads(CONNECTOR_CONFIG.read_text())["config"]
    assert config["skipped.operations"] == "none"
    assert config["include.schema.changes"] == "true"
    assert config["signal.data.collection"] == "inventory.debezium_signal"
    assert connect["environment"]["CDC_CONNECTOR_CLASS"] == "io.debezium.connector.mysql.MySqlConnector"


def test_airflow_services_define_the_dags_connections_and_valid_settings():
    for name in ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        env = services()[name]["environment"]
        assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"].startswith("spark://")
        assert "bootstrap.servers" in json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])["extra"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CDCLAKE_")})
        assert settings.jdbc_catalog_uri.startswith("jdbc:postgresql://")
        assert settings.warehouse.startswith("s3://")
        assert "/opt/cdclake" in " ".join(services()[name]["volumes"])


def test_the_apply_engine_is_the_connect_server_with_the_token_it_is_started_with():
    from cdclake.local.engine import SERVER_CLASS

    connect = services()["spark-connect"]
    assert SERVER_CLASS in connect["command"]
    airflow_env = services()["airflow-scheduler"]["environment"]
    conn = json.loads(airflow_env["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    assert conn["conn_type"] == "spark_connect" and conn["host"] == "spark-connect"
    assert f"spark.connect.grpc.binding.port={conn['port']}" in connect["command"]
    assert conn["password"] == connect["environment"]["SPARK_CONNECT_AUTHENTICATE_TOKEN"]
    assert (
        Settings.from_env({k: str(v) for k, v in airflow_env.items() if k.startswith("CDCLAKE_")}).engine == "connect"
    )
