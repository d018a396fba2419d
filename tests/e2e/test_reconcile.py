"""Reconcile and repair on the real chain (MariaDB -> Debezium -> Kafka -> the apply -> Iceberg):
drift injected into the lake (a row deleted, one added, a value changed, a column set to NULL) and
into the source behind Debezium's back (``SET sql_log_bin=0``) is reported key by key, and nothing
else, while a workload keeps changing other rows; repair mends exactly those keys and a second
reconcile is clean (include/cdclake/pipeline/reconcile.py)."""

from __future__ import annotations

import json
import random
import threading
import time

import pyarrow as pa
import pytest
import yaml

from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.kafka import KafkaClients, topic_watermarks
from cdclake.io.refs import committed_offsets
from cdclake.model.config import load_tables
from cdclake.model.snapshot import caught_up
from cdclake.pipeline.reconcile import RECONCILE_TABLE, ReconcileParams, reconcile_table
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_airflow
from tests.conftest import apply_offsets, plan_offsets
from tests.e2e.test_chain import wait_for_note

pytestmark = pytest.mark.e2e

DDL = """CREATE TABLE recon (
  id INT NOT NULL PRIMARY KEY,
  v VARCHAR(40) NOT NULL,
  n INT NOT NULL,
  amount DECIMAL(10,2) NOT NULL,
  ts TIMESTAMP(6) NULL,
  note VARCHAR(40) NULL
)"""
ROWS = 3000
BUSY = range(1000, 2000)  # the workload's keys: never drifted


def source_rows(db) -> list[tuple]:
    with db.cursor() as cur:
        cur.execute("SELECT id, v, n, amount, note FROM recon ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def lake_rows(settings) -> list[tuple]:
    arrow = load_catalog(settings).load_table("rec.recon").scan().to_arrow()
    return sorted((r["id"], r["v"], r["n"], r["amount"], r["note"]) for r in arrow.to_pylist())


def _edit_lake(settings, changes: dict[int, dict | None], added: dict | None = None) -> None:
    """Drift written into the lake behind the apply's back (pyiceberg): rows replaced with edited
    copies (their ``_cdc_*`` columns kept), deleted (``None``), or one added."""
    table = load_catalog(settings).load_table("rec.recon")
    ids = sorted(changes)
    old = {r["id"]: r for r in table.scan(row_filter=f"id IN ({', '.join(map(str, ids))})").to_arrow().to_pylist()}
    table.delete(f"id IN ({', '.join(map(str, ids))})")
    new = [{**old[i], **edit} for i, edit in changes.items() if edit is not None]
    if added is not None:
        new.append({**next(iter(old.values())), **added})
    if new:
        table.append(pa.Table.from_pylist(new, schema=table.schema().as_arrow()))


class Workload(threading.Thread):
    """Updates of random rows of :data:`BUSY` until stopped."""

    def __init__(self, settings) -> None:
        super().__init__(daemon=True)
        self.db = source_chain.mariadb_connect(settings, database="inventory")
        self.stop = threading.Event()
        self.changes = 0

    def run(self) -> None:
        rng = random.Random(7)
        while not self.stop.is_set():
            with self.db.cursor() as cur:
                cur.execute(
                    "UPDATE recon SET n = n + 1, v = %s WHERE id = %s", (f"busy{self.changes}", rng.choice(BUSY))
                )
            self.changes += 1
            time.sleep(0.05)


def test_reconcile_reports_exactly_the_drift_and_repair_mends_it(chain, stack_settings, tmp_path, spark):
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    topic = f"{settings.topic_prefix}.inventory.recon"
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0},
                "tables": [
                    {"name": "recon", "topic": topic, "namespace": "rec", "table": "recon", "primary_key": ["id"]}
                ],
            }
        )
    )
    ensure_airflow_db(settings)
    cfg = load_tables(settings.tables_config).get("recon")
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS recon")
        cur.execute(DDL)
        cur.executemany(
            "INSERT INTO recon VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (i, f"v{i}", i, f"{i}.25", f"2024-01-02 03:04:{i % 60:02d}.5", None if i % 3 else f"n{i}")
                for i in range(1, ROWS + 1)
            ],
        )
        cur.execute("UPDATE recon SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    catalog = load_catalog(settings)
    applies = []

    def catch_up(end):
        """The table's apply (the DAG's apply step, in this process's Spark) until committed >= end."""
        while not caught_up(committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic), end):
            planned = plan_offsets(settings, cfg)
            apply_offsets(spark, settings, cfg, planned.range, f"reconcile-catch-up-{len(applies)}")
            applies.append(planned.range)

    catch_up(topic_watermarks(KafkaClients.from_bootstrap(settings.kafka_bootstrap), topic).high)
    assert lake_rows(settings) == source_rows(db)

    # drift in the lake ...
    _edit_lake(settings, {10: None, 20: {"v": "tampered"}, 30: {"note": None}}, added={"id": 99_999, "v": "ghost"})
    table = catalog.load_table("rec.recon")  # and key 60 twice, as a broken merge would leave it
    table.append(table.scan(row_filter="id = 60").to_arrow())
    # ... and in the source, behind Debezium's back
    with db.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("UPDATE recon SET v = 'hidden' WHERE id = 40")
        cur.execute("DELETE FROM recon WHERE id = 50")
        cur.execute("INSERT INTO recon VALUES (5000, 'hidden-insert', 1, 1.00, NULL, NULL)")
        cur.execute("SET SESSION sql_log_bin = 1")
    assert 30 % 3 == 0  # row 30 had a note: the lake's NULL is drift

    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    source = source_chain.local_source(settings, database="inventory")  # as the cdc_source_db connection gives it
    workload = Workload(settings)
    workload.start()
    try:
        report = reconcile_table(settings, kafka, cfg, source, ReconcileParams(chunk_rows=500), catch_up)
    finally:
        workload.stop.set()
        workload.join()
    assert workload.changes > 20, "the workload should run during the reconcile"
    print(f"\n{report.summary()}; {workload.changes} concurrent change(s); {len(applies)} catch-up apply(s)")
    assert report.keys("only_in_source") == {(10,), (5000,)}
    assert report.keys("only_in_lake") == {(99_999,), (50,)}
    differing = {k: cols for o in report.outcomes for k, cols in o.differing.items()}
    assert differing == {(20,): ["v"], (30,): ["note"], (40,): ["v"], (60,): ["<duplicate rows>"]}
    assert report.chunks == 7 and report.source_rows == ROWS
    summary = [
        r
        for r in catalog.load_table(RECONCILE_TABLE).scan().to_arrow().to_pylist()
        if r["chunk"] == -1 and r["table_name"] == "recon"
    ]
    assert [(r["only_in_source"], r["only_in_lake"], r["differing"], r["mode"]) for r in summary] == [
        (2, 2, 4, "report")
    ]

    repair = ReconcileParams(mode="repair", chunk_rows=500)
    repaired = reconcile_table(settings, kafka, cfg, source, repair, catch_up)
    assert repaired.repaired and repaired.differences == 0, repaired.summary()
    again = reconcile_table(settings, kafka, cfg, source, ReconcileParams(chunk_rows=500), catch_up)
    assert again.differences == 0 and again.unsettled == 0, again.summary()
    catch_up({})
    assert lake_rows(settings) == source_rows(db)
    tombstones = catalog.load_table("rec.recon__cdc_tombstones").scan().to_arrow().to_pylist()
    assert {r["id"] for r in tombstones} >= {50, 99_999}
    table = catalog.load_table(cfg.identifier)
    repairs = [s for s in table.snapshots() if s.summary and "cdc.reconcile-repair" in s.summary.additional_properties]
    # the rows the source lacks, and the copies of key 60 (pyiceberg may write a delete as two snapshots)
    assert len(repairs) >= 2 and {s.summary["cdc.reconcile-repair"] for s in repairs} == {repair.run_id}
    print(json.dumps({"report": report.summary(), "after_repair": again.summary()}))

    # the same through the DAG (airflow dags test cdc_reconcile, connection cdc_source_db): one value
    # drifted in the lake fails the run with DriftError, and its result is in the reconcile table
    _edit_lake(settings, {7: {"v": "drift-again"}})
    conf = json.dumps({"tables": ["recon"], "chunk_rows": 500})
    proc = run_airflow(["dags", "test", "cdc_reconcile", "--conf", conf], settings, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert "DriftError" in out and "0 only in the source, 0 only in the lake, 1 differing" in out, out[-6000:]
    dag_rows = [
        r
        for r in catalog.load_table(RECONCILE_TABLE).scan().to_arrow().to_pylist()
        if r["run_id"].startswith("manual__") and r["chunk"] >= 0
    ]
    assert [(json.loads(r["differing_columns"]), r["differing"]) for r in dag_rows] == [({"v": [["7"]]}, 1)]
