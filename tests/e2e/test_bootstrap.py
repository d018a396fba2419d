"""Snapshot bootstrap end to end, under a real Airflow (scheduler, triggerer, dag-processor and
API server of ``airflow standalone``): rows that were never streamed (written with
``sql_log_bin=0``) reach Iceberg through ``cdc_snapshot_bootstrap`` -> Debezium incremental
snapshot -> the table's DAG, while the source keeps changing; the table then equals the source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake_dev import chain as source_chain
from cdclake_dev.airflow_env import airflow_env
from cdclake_dev.cli import ensure_airflow_db
from cdclake_dev.process import free_port

pytestmark = pytest.mark.e2e

ACCOUNTS_DDL = """
CREATE TABLE accounts (
  id INT NOT NULL PRIMARY KEY,
  owner VARCHAR(40) NOT NULL,
  balance BIGINT NOT NULL,
  note VARCHAR(100) NULL
)"""
ROWS = 2500


class Airflow:
    """``airflow standalone`` on the test stack's Airflow home, driven through the CLI."""

    def __init__(self, settings, log_path) -> None:
        self.env = airflow_env(settings)
        port = free_port()
        self.env.update(
            {
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            }
        )
        self.log_path = log_path
        self.port = port
        self.proc: subprocess.Popen | None = None

    def cli(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args], env=self.env, capture_output=True, text=True, timeout=300
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc.stdout

    def start(self) -> None:
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", "standalone"],
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        """Wait until the api-server answers ``GET /api/v2/monitor/health`` and reports the
        scheduler healthy: a task started before it is refused by its execution API (on a loaded
        machine the api-server took two minutes to start, and the three tries of the bootstrap's
        first task were all refused)."""
        import requests

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"airflow standalone exited; log {self.log_path}"
            try:
                reply = requests.get(f"http://127.0.0.1:{self.port}/api/v2/monitor/health", timeout=5)
                if reply.status_code == 200 and reply.json()["scheduler"]["status"] == "healthy":
                    return
            except (OSError, ValueError, KeyError, TypeError):
                pass
            time.sleep(2)
        raise AssertionError(f"airflow standalone not ready within {timeout_s} s; log {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        self.log.close()

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        state = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"airflow standalone exited; log {self.log_path}"
            try:
                out = self.cli("dags", "list-runs", dag_id, "-o", "json")
            except AssertionError:  # the CLI beside standalone's processes on one SQLite file: asked again
                time.sleep(5)
                continue
            # the CLI logs warnings on stdout too; the JSON is the last line that is a list
            runs = json.loads(next((ln for ln in reversed(out.splitlines()) if ln.startswith("[")), "[]"))
            state = next((r["state"] for r in runs if r["run_id"] == run_id), None)
            if state in ("success", "failed"):
                return state
            time.sleep(5)
        raise AssertionError(f"{dag_id} run {run_id} still {state} after {timeout_s}s; log {self.log_path}")

    def task_log_tail(self, dag_id: str) -> str:
        base = self.env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"]
        out = []
        for root, _dirs, files in os.walk(base):
            if f"dag_id={dag_id}" in root:
                for f in files:
                    out.append(f"--- {root}/{f}\n" + open(os.path.join(root, f), errors="replace").read()[-2500:])
        return "\n".join(out)[-15000:]


def _wait_topic_record(settings, topic: str, predicate, timeout_s: float = 120.0) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"wait-{time.time()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error() and msg.value() and predicate(json.loads(msg.value())):
                return
        raise AssertionError(f"no matching record on {topic} within {timeout_s}s")
    finally:
        consumer.close()


def source_rows(db) -> list[tuple]:
    with db.cursor() as cur:
        cur.execute("SELECT id, owner, balance, note FROM accounts ORDER BY id")
        return list(cur.fetchall())


def iceberg_rows(settings) -> list[tuple]:
    rows = load_catalog(settings).load_table("boot.accounts").scan().to_arrow().to_pylist()
    return sorted((r["id"], r["owner"], r["balance"], r["note"]) for r in rows)


def test_bootstrap_fills_rows_that_were_never_streamed(chain, stack_settings, tmp_path):
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    topic = f"{settings.topic_prefix}.inventory.accounts"
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 1, "retry_delay_s": 5},
                "tables": [
                    {
                        "name": "boot_accounts",
                        "topic": topic,
                        "namespace": "boot",
                        "table": "accounts",
                        "primary_key": ["id"],
                    }
                ],
            }
        )
    )
    ensure_airflow_db(settings)
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS accounts")
        cur.execute(ACCOUNTS_DDL)  # the DDL is streamed: the connector knows the table
        cur.execute("SET SESSION sql_log_bin = 0")  # the rows are not: only a snapshot can bring them
        cur.executemany(
            "INSERT INTO accounts VALUES (%s, %s, %s, %s)",
            [(i, f"owner{i % 7}", i * 100, None) for i in range(1, ROWS + 1)],
        )
        cur.execute("SET SESSION sql_log_bin = 1")
        cur.execute("INSERT INTO accounts VALUES (%s, 'streamed', 1, 'streamed')", (ROWS + 1,))
    _wait_topic_record(
        settings, topic, lambda v: ((v.get("payload") or {}).get("after") or {}).get("note") == "streamed"
    )

    airflow = Airflow(settings, tmp_path / "standalone.log")
    airflow.cli("dags", "reserialize")
    airflow.cli("dags", "unpause", "cdc_snapshot_bootstrap")
    airflow.cli("dags", "unpause", "cdc_boot_accounts")
    airflow.start()
    try:
        airflow.wait_ready()
        run_id = "bootstrap_accounts_1"
        conf = {
            "tables": ["boot_accounts"],
            "snapshot_type": "incremental",
            "additional_conditions": {},
            "action": "execute",
        }
        airflow.cli("dags", "trigger", "cdc_snapshot_bootstrap", "--run-id", run_id, "--conf", json.dumps(conf))
        # the source keeps changing while the snapshot reads it
        with db.cursor() as cur:
            for i in range(1, 40):
                cur.execute("UPDATE accounts SET balance = balance + 1, note = 'during' WHERE id = %s", (i * 50,))
            cur.execute("DELETE FROM accounts WHERE id BETWEEN 100 AND 110")
            cur.execute("INSERT INTO accounts VALUES (%s, 'late', 7, 'during')", (ROWS + 2,))
        state = airflow.wait_run("cdc_snapshot_bootstrap", run_id, timeout_s=900)
        assert state == "success", airflow.task_log_tail("cdc_snapshot_bootstrap")[-12000:]
        bootstrapped = iceberg_rows(settings)
        ids = {r[0] for r in bootstrapped}
        assert {1, 2, ROWS // 2, ROWS, ROWS + 1} <= ids, "never-streamed rows are missing after the bootstrap"

        # catch up with whatever the source did after the snapshot's end, then compare exactly
        with db.cursor() as cur:
            cur.execute("UPDATE accounts SET note = 'barrier' WHERE id = 1")
        _wait_topic_record(
            settings, topic, lambda v: ((v.get("payload") or {}).get("after") or {}).get("note") == "barrier"
        )
        airflow.cli("dags", "trigger", "cdc_boot_accounts", "--run-id", "catch_up_1")
        assert airflow.wait_run("cdc_boot_accounts", "catch_up_1", timeout_s=600) == "success", airflow.task_log_tail(
            "cdc_boot_accounts"
        )[-12000:]
    finally:
        airflow.stop()
    assert iceberg_rows(settings) == source_rows(db)
    assert len(source_rows(db)) == ROWS + 2 - 11

    if os.environ.get("CDCLAKE_TEST_RECORD_EVENTS"):
        from tests.e2e.test_chain import RECORD_DIR, dump_topic

        dump_topic(settings.kafka_bootstrap, topic, RECORD_DIR / "accounts.jsonl")
        (RECORD_DIR / "accounts.expected.json").write_text(json.dumps([list(r) for r in source_rows(db)]))
