"""The production parts' launchers (:mod:`cdclake_dev.parts`) for real: PostgreSQL, s3proxy and
Iceberg's REST catalog server over a JdbcCatalog in that PostgreSQL, written to through pyiceberg's
``RestCatalog`` with its files in s3proxy's folder; a Spark standalone master with one worker;
Apicurio Registry (the tests' ``schema_registry``). Every part is stopped at the end and its
processes are checked gone."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pytest

from cdclake_dev.parts.airflow import AirflowProcesses
from cdclake_dev.parts.postgres import Postgres
from cdclake_dev.parts.registry import SchemaRegistry
from cdclake_dev.parts.rest_catalog import RestCatalogServer, catalog_env
from cdclake_dev.parts.s3 import S3Proxy
from cdclake_dev.parts.spark_cluster import SparkStandalone
from cdclake_dev.process import free_port
from tests.integration.test_engine import AVRO_SCHEMA
from tests.processes import group_alive, pid_in

pytestmark = pytest.mark.integration

ACCESS_KEY = "cdclake-test"
BUCKET = "lake"
TRIVIAL_DAG = """
from datetime import datetime

from airflow.sdk import DAG, task

with DAG(dag_id="parts_trivial", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):

    @task
    def noop() -> None:
        return None

    noop()
"""
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


@dataclass
class Parts:
    postgres: Postgres
    s3: S3Proxy
    rest: RestCatalogServer
    secret_key: str
    jdbc_password: str
    start_s: dict[str, float]


def _rest_catalog(parts: Parts, secret_key: str | None = None):
    from pyiceberg.catalog.rest import RestCatalog

    return RestCatalog(
        "test",
        uri=parts.rest.uri,
        **{
            "s3.endpoint": parts.s3.endpoint,
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": secret_key or parts.secret_key,
            "s3.region": "us-east-1",
            "s3.force-virtual-addressing": "false",
        },
    )


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    """PostgreSQL, s3proxy with bucket ``lake`` and the REST catalog server (catalog database
    ``iceberg`` in that PostgreSQL, warehouse ``s3://lake/``); all stopped at the end, and their
    process groups checked gone."""
    # PostgreSQL runs as the postgres user when root: a folder it can reach (pytest's is 0700)
    pg_dir = Path(tempfile.mkdtemp(prefix="cdclake-test-pg-"))
    work = tmp_path_factory.mktemp("parts")
    secret_key = uuid.uuid4().hex
    postgres = Postgres(pg_dir, free_port())
    s3 = S3Proxy(work / "s3", free_port(), ACCESS_KEY, secret_key)
    start_s: dict[str, float] = {}
    rest: RestCatalogServer | None = None
    pgids: list[int] = []
    try:
        start_s["postgres"] = postgres.start()
        pgids.append(pid_in(postgres.data_dir / "postmaster.pid"))
        jdbc_password = uuid.uuid4().hex
        postgres.ensure_database("iceberg", "iceberg", jdbc_password)
        start_s["s3proxy"] = s3.start()
        pgids.append(pid_in(s3.dir / "s3proxy.pid"))
        s3.ensure_bucket(BUCKET)
        rest = RestCatalogServer(
            work / "rest",
            free_port(),
            jdbc_uri=postgres.jdbc_uri("iceberg"),
            jdbc_user="iceberg",
            jdbc_password=jdbc_password,
            warehouse=f"s3://{BUCKET}/",
            s3_endpoint=s3.endpoint,
            s3_access_key=ACCESS_KEY,
            s3_secret_key=secret_key,
        )
        start_s["rest_catalog"] = rest.start()
        pgids.append(pid_in(rest.dir / "server.pid"))
        print(f"start seconds: {start_s}")
        yield Parts(postgres, s3, rest, secret_key, jdbc_password, start_s)
    finally:
        if rest is not None:
            rest.stop()
        s3.stop()
        postgres.stop()
        shutil.rmtree(pg_dir, ignore_errors=True)
    assert not [g for g in pgids if group_alive(g)], "processes of the parts outlived stop()"


def test_start_again_returns_at_once_when_running(parts: Parts) -> None:
    t0 = time.monotonic()
    assert parts.postgres.start() < 1.0
    assert parts.s3.start() < 1.0
    assert parts.rest.start() < 1.0
    assert time.monotonic() - t0 < 2.0


def test_ensure_database_is_idempotent_and_authenticates(parts: Parts) -> None:
    import sqlalchemy

    url = parts.postgres.ensure_database("app_db", "app user", "p@ss word/1")
    assert parts.postgres.ensure_database("app_db", "app user", "p@ss word/1") == url
    engine = sqlalchemy.create_engine(url)
    with engine.connect() as conn:
        assert conn.execute(sqlalchemy.text("select current_user, current_database()")).one() == ("app user", "app_db")
    engine.dispose()
    wrong = sqlalchemy.create_engine(parts.postgres.url("app_db", "app user", "wrong"))
    with pytest.raises(sqlalchemy.exc.OperationalError, match="password authentication failed"):
        wrong.connect()


def test_rest_catalog_writes_through_s3proxy_into_its_folder(parts: Parts) -> None:
    catalog = _rest_catalog(parts)
    catalog.create_namespace_if_not_exists("parts")
    name = f"t_{uuid.uuid4().hex[:8]}"
    table = catalog.create_table(f"parts.{name}", SCHEMA)
    assert table.location() == f"s3://{BUCKET}/parts/{name}"
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", None]}, schema=SCHEMA))

    loaded = _rest_catalog(parts).load_table(f"parts.{name}")
    assert sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a"},
        {"id": 2, "v": "b"},
        {"id": 3, "v": None},
    ]
    folder = parts.s3.data_dir / BUCKET / "parts" / name
    data_files = sorted(folder.glob("data/*.parquet"))
    metadata_files = sorted(folder.glob("metadata/*.metadata.json"))
    assert len(data_files) == 1
    assert len(metadata_files) == 2  # create, append: written by the server's S3FileIO
    snapshot = loaded.current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary["added-records"] == "3"


def test_rest_catalog_backend_is_the_postgres_jdbc_catalog(parts: Parts) -> None:
    import sqlalchemy

    catalog = _rest_catalog(parts)
    catalog.create_namespace_if_not_exists("parts")
    name = f"t_{uuid.uuid4().hex[:8]}"
    catalog.create_table(f"parts.{name}", SCHEMA)
    # the catalog's rows, as the REST server's user reads them (pyiceberg SqlCatalog's layout, schema V1)
    engine = sqlalchemy.create_engine(parts.postgres.url("iceberg", "iceberg", parts.jdbc_password))
    with engine.connect() as conn:
        rows = conn.execute(
            sqlalchemy.text(
                "select catalog_name, table_namespace, iceberg_type from iceberg_tables where table_name = :name"
            ),
            {"name": name},
        ).all()
    engine.dispose()
    assert rows == [("rest_backend", "parts", "TABLE")]


def test_a_wrong_secret_key_cannot_write_data_files(parts: Parts) -> None:
    catalog = _rest_catalog(parts)
    catalog.create_namespace_if_not_exists("parts")
    name = f"t_{uuid.uuid4().hex[:8]}"
    catalog.create_table(f"parts.{name}", SCHEMA)

    table = _rest_catalog(parts, secret_key="not-the-secret").load_table(f"parts.{name}")
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH|ACCESS_DENIED"):
        table.append(pa.table({"id": [1], "v": ["x"]}, schema=SCHEMA))
    assert table.refresh().current_snapshot() is None
    assert not list((parts.s3.data_dir / BUCKET / "parts" / name).glob("data/*"))
    with pytest.raises(OSError):
        parts.s3.filesystem(secret_key="not-the-secret").get_file_info(f"{BUCKET}/parts/{name}")


def test_catalog_env_is_the_inverse_of_the_servers_mapping() -> None:
    assert catalog_env(
        {"io-impl": "x", "s3.access-key-id": "k", "jdbc.schema-version": "V1", "client.region": "r", "uri": "u"}
    ) == {
        "CATALOG_IO__IMPL": "x",
        "CATALOG_S3_ACCESS__KEY__ID": "k",
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_CLIENT_REGION": "r",
        "CATALOG_URI": "u",
    }
    for key in ("with_underscore", "Upper", "a.-b"):
        with pytest.raises(ValueError, match=key):
            catalog_env({key: "v"})


def test_airflow_processes_run_a_dag_on_postgres(parts: Parts, tmp_path: Path) -> None:
    url = parts.postgres.ensure_database("airflow", "airflow", uuid.uuid4().hex)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "parts_trivial.py").write_text(TRIVIAL_DAG)
    home = tmp_path / "airflow"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
    }
    airflow = AirflowProcesses(env, tmp_path / "logs", free_port())
    pgids: list[int] = []
    try:
        airflow.migrate({"parts_pool": (1, "a pool of the test")})
        print(f"Airflow start seconds: {airflow.start():.1f}")
        pgids = [proc.pid for proc in airflow.procs.values()]
        assert airflow.start() < 1.0
        airflow.wait_dags({"parts_trivial"}, timeout_s=120)
        airflow.trigger("parts_trivial", "parts-run-1")
        run = airflow.wait_run("parts_trivial", "parts-run-1", timeout_s=120)
        assert run["state"] == "success", airflow.task_log_tail("parts_trivial", "parts-run-1")
        assert "parts_pool" in {p["name"] for p in airflow.get_all("pools", "pools")}
    finally:
        airflow.stop()
    assert not [g for g in pgids if group_alive(g)], "Airflow processes outlived stop()"


def test_spark_standalone_worker_registers_alive(tmp_path: Path) -> None:
    import pyspark

    spark = SparkStandalone(tmp_path / "spark", free_port(), worker_cores=1, worker_memory="512m")
    package = Path(pyspark.__file__).parent
    package_dirs_before = {d: (package / d).exists() for d in ("work", "logs")}
    pgids: list[int] = []
    try:
        took = spark.start()
        print(f"Spark standalone start seconds: {took:.1f}")
        pgids = [pid_in(spark.dir / "master.pid"), pid_in(spark.dir / "worker.pid")]
        assert spark.master_url.startswith("spark://127.0.0.1:")
        workers = spark.alive_workers()
        assert [(w["host"], w["cores"], w["memory"]) for w in workers] == [("127.0.0.1", 1, 512)]
        assert spark.status()["status"] == "ALIVE"
        assert spark.start() < 1.0
        assert (spark.dir / "work").is_dir() and (spark.dir / "master.log").stat().st_size > 0
        assert {d: (package / d).exists() for d in package_dirs_before} == package_dirs_before
    finally:
        spark.stop()
    assert not [g for g in pgids if group_alive(g)], "Spark processes outlived stop()"
    assert not os.path.exists(spark.dir / "master.pid")


def test_schema_registry_serves_a_registered_avro_schema_by_id(schema_registry: str, stack_settings) -> None:
    """A schema registered through the Confluent-compatible API (``POST /subjects/<s>/versions``)
    comes back by its id (``GET /schemas/ids/<id>``) with Connect's attributes kept; a second
    launcher on the registry's folder finds it running."""
    import json

    import httpx

    subject = f"parts-{uuid.uuid4().hex[:8]}-value"
    registered = httpx.post(
        f"{schema_registry}/subjects/{subject}/versions",
        json={"schema": AVRO_SCHEMA},
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    assert registered.status_code == 200, registered.text
    schema_id = registered.json()["id"]
    served = httpx.get(f"{schema_registry}/schemas/ids/{schema_id}")
    assert served.status_code == 200, served.text
    assert json.loads(served.json()["schema"]) == json.loads(AVRO_SCHEMA)
    assert subject in httpx.get(f"{schema_registry}/subjects").json()
    assert httpx.get(f"{schema_registry}/schemas/ids/{schema_id + 1000}").status_code == 404
    again = SchemaRegistry(stack_settings.state_dir / "registry", urlsplit(schema_registry).port or 0)
    assert again.running() and again.start() < 1.0
