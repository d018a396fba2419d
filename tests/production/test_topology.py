"""The production topology, for real on one machine (``cdclake_dev.production``, the same code
as ``make demo-production``): PostgreSQL (Airflow's metadata DB, the catalog's database), the
Iceberg REST catalog, an S3 server (s3proxy) holding the warehouse, a Spark standalone master and
worker running the applies in client mode (the Connect server's sessions and a ``spark-submit``
table), Kafka with SASL/SCRAM for every pipeline client, MariaDB + Debezium, and Airflow as
scheduler, dag-processor, triggerer and api-server on the LocalExecutor. Runs are triggered and
awaited through the REST API and left to the DAGs' schedules; every table must equal its source;
no credential may appear in the DAG files, rendered fields, serialized DAGs, task logs, the
spark-submit command line or Spark's event logs."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdclake.settings import PROJECT_ROOT
from cdclake_dev import production, production_demo
from cdclake_dev.production import Ports, Topology

pytestmark = pytest.mark.production


@pytest.fixture(scope="module")
def topology() -> Iterator[Topology]:
    # PostgreSQL runs as the `postgres` user: its folder's parents must be searchable by it
    state = Path(tempfile.mkdtemp(prefix="cdclake-production-"))
    state.chmod(0o755)
    topo = Topology(state, Ports.free())
    try:
        yield topo
    finally:
        topo.stop()
        shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="module")
def demo(topology: Topology) -> production_demo.DemoResult:
    airflow = production_demo.bring_up(topology)
    return production_demo.run_workload(topology, airflow)


def test_every_table_equals_its_source_after_triggered_and_scheduled_runs(demo: production_demo.DemoResult):
    assert demo.differences and all(not d for d in demo.differences.values()), demo.differences
    # on S3, through the REST catalog
    assert (demo.reconcile_state, demo.maintenance_state) == ("success", "success"), demo.failure_logs
    assert not [(r["dag_id"], r["dag_run_id"]) for r in demo.runs if r["state"] == "failed"]
    table_runs = [r for r in demo.runs if r["dag_id"].startswith("cdc_prod_")]
    for dag_id in ("cdc_prod_customers", "cdc_prod_products", "cdc_prod_orders"):
        kinds = {(r["run_type"], r["state"]) for r in table_runs if r["dag_id"] == dag_id}
        assert ("manual", "success") in kinds, (dag_id, kinds)
        assert ("scheduled", "success") in kinds, (dag_id, kinds)
    assert demo.ok


def test_the_schema_registry_answers_on_loopback_through_its_connection(demo, topology: Topology):
    """The topology's schema registry (for ``value_format: avro`` tables; the topology's own tables
    are JSON, so no task reads it) serves its Confluent-compatible API on 127.0.0.1, and the
    ``schema_registry`` connection the tasks resolve points at it."""
    import json

    import httpx

    assert httpx.get(f"{topology.registry_url}/subjects", timeout=10).status_code == 200
    assert topology.registry_url.startswith("http://127.0.0.1:")
    connections = json.loads((topology.state_dir / "airflow" / "connections.json").read_text())
    assert connections["schema_registry"] == {"conn_type": "http", "host": topology.registry_url}


def test_the_applies_ran_on_the_spark_cluster_and_the_warehouse_is_on_s3(demo, topology: Topology):
    import requests

    from cdclake.io.catalog import load_catalog

    spark = topology._spark()
    apps = requests.get(f"{spark.webui_url}/json/", timeout=10).json()
    names = {a["name"] for a in apps.get("activeapps", []) + apps.get("completedapps", [])}
    assert "cdclake-engine" in names  # the Connect server, on the master
    assert "cdc-apply-prod_orders" in names  # the spark-submit table, on the same master
    catalog = load_catalog(topology.task_settings())
    for identifier in ("inventory.customers", "inventory.products", "inventory.orders"):
        table = catalog.load_table(identifier)
        assert table.location().startswith(production.WAREHOUSE), table.location()
    bucket = topology.state_dir / "s3" / "data" / production.BUCKET
    assert list(bucket.rglob("*.parquet")), "no data file in the S3 server's bucket"
    assert list(bucket.rglob("*.metadata.json"))


def _secret_values(topology: Topology) -> dict[str, str]:
    from cdclake_dev.engine import engine_token

    values = dict(topology.secrets)
    values["connect_token"] = engine_token(topology.settings)
    return values


def _hits(text: str, secrets: dict[str, str]) -> list[str]:
    return sorted(name for name, value in secrets.items() if value in text)


def test_no_credential_in_dags_rendered_fields_serialized_dags_logs_command_lines_or_event_logs(demo, topology):
    import psycopg2

    secrets = _secret_values(topology)
    found: dict[str, list[str]] = {}

    def scan(label: str, text: str) -> None:
        hits = _hits(text, secrets)
        if hits:
            found[label] = hits

    for folder in ("dags", "plugins", "include", "spark_jobs"):
        for path in (PROJECT_ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".yaml", ".json", ".conf"):
                scan(str(path), path.read_text(errors="replace"))
    logs = topology.state_dir / "airflow" / "logs"
    task_logs = [p for p in logs.rglob("*") if p.is_file()]
    assert task_logs, "no task logs"
    submit_lines = []
    for path in task_logs:
        text = path.read_text(errors="replace")
        scan(str(path), text)
        submit_lines += [line for line in text.splitlines() if "Spark-Submit cmd" in line]
    assert submit_lines, "the spark-submit table's command line was not logged"
    assert all("--connections-file" in line for line in submit_lines)
    events = [p for p in topology.event_log_dir.rglob("*") if p.is_file()]
    assert len(events) >= 2, events  # the Connect server's and the spark-submit jobs'
    for path in events:
        scan(str(path), path.read_text(errors="replace"))
    for path in (topology.state_dir / "spark").rglob("*"):  # master, worker, executors' logs
        if path.is_file() and (path.suffix in ("", ".log", ".out") or path.name in ("stdout", "stderr")):
            scan(str(path), path.read_text(errors="replace"))
    scan("engine log", (topology.settings.engine_dir / "server.log").read_text(errors="replace"))
    url = (topology.state_dir / "airflow" / "metadata-db.url").read_text().replace("+psycopg2", "")
    with psycopg2.connect(url) as conn, conn.cursor() as cur:
        cur.execute("SELECT dag_id, data::text, data_compressed FROM serialized_dag")
        rows = cur.fetchall()
        assert {r[0] for r in rows} >= {"cdc_prod_customers", "cdc_prod_orders"}
        for dag_id, data, compressed in rows:
            text = data or ""
            if compressed:
                import zlib

                text = zlib.decompress(bytes(compressed)).decode()
            scan(f"serialized DAG {dag_id}", text)
        cur.execute("SELECT dag_id, task_id, rendered_fields::text FROM rendered_task_instance_fields")
        rendered = cur.fetchall()
        assert rendered
        for dag_id, task_id, fields in rendered:
            scan(f"rendered fields {dag_id}.{task_id}", fields or "")
    assert not found, found
