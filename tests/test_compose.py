"""docker-compose.yaml cannot start here (no Docker engine): check that it describes the topology
the tests run (``cdclake_dev.production``, tests/production/test_topology.py): the same services
and ports, the same ``CDCLAKE_*`` and Airflow variables, the same mounted config files, the same
connections, and no credential in the file."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from cdclake.settings import PROJECT_ROOT, Settings
from cdclake_dev import production
from cdclake_dev.chain import CONNECTOR_CONFIG, connector_env

COMPOSE = PROJECT_ROOT / "docker-compose.yaml"
AIRFLOW_SERVICES = ("airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def services() -> dict:
    return compose()["services"]


def container_ports(service: dict) -> set[int]:
    return {int(str(p).split(":")[-1]) for p in service.get("ports", [])}


def mounts(service: dict) -> dict[str, str]:
    """host path (relative to the project) -> container path."""
    out = {}
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        out[host] = container
    return out


def topology() -> production.Topology:
    return production.Topology(Path("/nonexistent-state"), production.Ports.with_offset())


def test_every_service_of_the_topology_is_in_compose_on_its_port():
    svc = services()
    for service in production.SERVICES:
        assert service.name in svc, service.name
        assert service.port in container_ports(svc[service.name]), service
    ports = production.Ports.with_offset()
    assert ports.postgres == 5432 + production.PORT_OFFSET and ports.kafka_sasl == 9094 + production.PORT_OFFSET
    for name in ("spark-worker", *AIRFLOW_SERVICES):
        assert name in svc


def test_the_airflow_services_have_the_topologys_variables_and_mounted_files():
    topo = topology()
    local = topo.airflow_environ()
    local_cdclake = {k for k in topo.environ()}
    for name in AIRFLOW_SERVICES:
        env = services()[name]["environment"]
        assert {k for k in env if k.startswith("CDCLAKE_")} == local_cdclake, name
        settings = Settings.from_env({k: str(v) for k, v in env.items() if k.startswith("CDCLAKE_")})
        assert (settings.catalog_type, settings.warehouse, settings.engine) == ("rest", production.WAREHOUSE, "connect")
        for key in (
            "AIRFLOW__CORE__EXECUTOR",
            "AIRFLOW__SECRETS__BACKEND",
            "AIRFLOW__CORE__PARALLELISM",
        ):
            assert env[key] == local[key], key
        assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD" in env and "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env
        assert not [k for k in env if k.startswith("AIRFLOW_CONN_")]  # connections: the secrets backend
        files = mounts(services()[name])
        tables = "./" + str(production.TABLES_CONFIG.relative_to(PROJECT_ROOT))
        assert files[tables] == env["CDCLAKE_TABLES_CONFIG"]
        assert env["SPARK_CONF_DIR"].endswith(str(production.SPARK_DEFAULTS.parent.relative_to(PROJECT_ROOT)))
        assert {"airflow-connections", "airflow-metadata-db-url"} <= set(services()[name]["secrets"])


def test_the_connections_compose_documents_are_the_topologys():
    documented = compose()["x-cdclake-connections"]
    made = topology().connections()
    assert documented == {conn_id: conn["conn_type"] for conn_id, conn in made.items()}


def test_connect_mounts_the_local_chains_connector_file_and_fills_every_placeholder():
    connect = services()["connect"]
    assert mounts(connect)["./" + str(CONNECTOR_CONFIG.relative_to(PROJECT_ROOT))].endswith(".json")
    placeholders = set(re.findall(r"\$\{env:([A-Z_]+)\}", CONNECTOR_CONFIG.read_text()))
    assert placeholders, "the connector config should take its endpoints from the environment"
    assert placeholders <= set(connect["environment"])
    local = connector_env(Settings.from_env({}))
    assert placeholders <= set(local)
    assert connect["environment"]["CDC_CONNECTOR_CLASS"] == local["CDC_CONNECTOR_CLASS"]
    assert connect["environment"]["CDC_TOPIC_PREFIX"] == Settings.from_env(topology().environ()).topic_prefix
    config = json.loads(CONNECTOR_CONFIG.read_text())["config"]
    assert config["skipped.operations"] == "none"
    assert config["include.schema.changes"] == "true"


def test_mariadb_runs_with_the_binlog_settings_debezium_needs():
    command = " ".join(services()["mariadb"]["command"])
    for setting in ("--server-id=", "--log-bin=", "--binlog-format=ROW", "--binlog-row-image=FULL"):
        assert setting in command


def test_kafka_serves_scram_for_the_pipeline_and_plaintext_inside():
    env = services()["kafka"]["environment"]
    assert "SASL_PLAINTEXT://:9094" in env["KAFKA_LISTENERS"] and "PLAINTEXT://:9092" in env["KAFKA_LISTENERS"]
    assert env["KAFKA_SASL_ENABLED_MECHANISMS"] == production.SASL_MECHANISM
    assert production.KAFKA_USER in " ".join(services()["kafka-users"]["command"])


def test_the_engine_is_the_connect_server_on_the_master_without_a_catalog():
    from cdclake_dev.engine import CLEANER_SETTINGS, SERVER_CLASS, SESSION_LIMITS, STATUS_STORE_LIMITS

    command = " ".join(services()["spark-connect"]["command"])
    assert SERVER_CLASS in command
    assert "--master spark://spark-master:7077" in command
    assert "spark.sql.catalog." not in command  # each session sets its catalog (cdclake.spark.session.set_catalog)
    assert "spark.connect.grpc.binding.port=15002" in command
    # the status store's and the sessions' limits of the local engine (a shared server's live heap stays flat)
    for key, value in {**STATUS_STORE_LIMITS, **SESSION_LIMITS, **CLEANER_SETTINGS}.items():
        assert f"--conf {key}={value}" in command


def test_the_rest_catalog_and_s3_settings_match_the_local_servers():
    from cdclake_dev.parts.rest_catalog import catalog_env

    rest = services()["iceberg-rest"]["environment"]
    local = catalog_env(
        {
            "uri": "jdbc:postgresql://postgres:5432/iceberg",
            "jdbc.user": "iceberg",
            "jdbc.password": "x",
            "jdbc.schema-version": "V1",
            "warehouse": production.WAREHOUSE,
            "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "s3.endpoint": "http://s3:9000",
            "s3.path-style-access": "true",
            "s3.access-key-id": "x",
            "s3.secret-access-key": "x",
            "client.region": production.REGION,
        }
    )
    assert set(local) <= set(rest), sorted(set(local) - set(rest))


def test_no_credential_is_written_in_compose():
    text = COMPOSE.read_text()
    keys = re.findall(r"(?m)^\s*([A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN|CREDENTIAL|IDENTITY)[A-Z0-9_]*):\s*(\S+)", text)
    assert len(keys) >= 8, keys
    for key, value in keys:
        if key.startswith("AIRFLOW__SECRETS__"):  # which secrets backend, not a secret
            continue
        assert value.startswith("${") or value.startswith('"$$'), (key, value)  # from .env, never a literal


def test_the_images_that_drive_spark_hold_java_and_the_jars():
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    stages = dict(re.findall(r"(?m)^FROM \S+ AS (\w+)\n(.*?)(?=^FROM |\Z)", dockerfile, re.S))
    for name, service in services().items():
        build = service.get("build")
        if build:
            assert build["target"] in stages, (name, build)
    airflow = stages[services()["airflow-scheduler"]["build"]["target"]]
    assert "openjdk-17" in airflow  # spark-submit (the submit engine) runs where the task runs
    assert "requirements.txt" in airflow and "/opt/cdclake/.jars" in airflow
    assert "/opt/cdclake/.jars/spark" in stages[services()["spark-connect"]["build"]["target"]]
    assert "-P spark" in stages["jars"]  # the same Maven manifest as `make setup`


def test_the_schema_registry_is_the_version_the_local_topology_runs():
    registry = services()["schema-registry"]
    pom = (PROJECT_ROOT / "include" / "jars" / "pom.xml").read_text()
    [version] = re.findall(r"<apicurio.version>([^<]+)</apicurio.version>", pom)
    assert registry["image"] == f"apicurio/apicurio-registry-sql:{version}"
    assert registry["environment"]["QUARKUS_HTTP_PORT"] == str(production.Ports.with_offset(0).schema_registry)
