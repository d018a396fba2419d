"""``make demo-avro`` (``cdclake demo --avro``): the real chain writing Avro, end to end.

It starts the local chain (Kafka, MariaDB, Kafka Connect with the JSON connector) and the local
schema registry (:func:`cdclake_dev.chain.local_registry`), adds a Debezium connector writing the
demo table as Avro through the registry (:func:`cdclake_dev.chain.add_avro_connector`), writes
inserts, updates and deletes to ``inventory.avro_orders`` in MariaDB, runs the table's DAG
(``value_format: avro``, the table config :data:`TABLES_CONFIG`; the registry reaches the task as
the Airflow connection ``schema_registry``) and prints the Iceberg table, after checking that it
equals the source table.

Running it again gives the same table: each run first deletes the demo rows in MariaDB and writes
them again (their deletes and inserts are new events of the same topic); the registry keeps its
schemas in a file, so the records of earlier runs keep their schema ids.
"""

from __future__ import annotations

import datetime as dt
import time
import urllib.error
from collections.abc import Callable
from decimal import Decimal

from cdclake.settings import PROJECT_ROOT, Settings

TABLES_CONFIG = PROJECT_ROOT / "include" / "tables-avro.yaml"
"""The demo's table config: one table, ``value_format: avro``."""
TABLE = "inventory_avro_orders"
"""Its name in :data:`TABLES_CONFIG`."""
CONNECTOR = "demo-avro-connector"
"""The Avro connector's name on the local Connect worker."""

_DDL = """
CREATE TABLE IF NOT EXISTS {table} (
  id INT NOT NULL PRIMARY KEY,
  customer VARCHAR(40) NOT NULL,
  amount DECIMAL(10,2) NULL,
  placed DATETIME(6) NULL,
  shipped BOOLEAN NOT NULL DEFAULT FALSE
)"""
_PLACED = dt.datetime(2026, 11, 24, 9, 30, 0, 250000)
_ROWS = [(i, f"customer {i}", Decimal(i * 1234) / 100, _PLACED + dt.timedelta(hours=i), False) for i in range(1, 6)]


def _write(settings: Settings, table: str) -> int:
    """Delete the demo rows, write them again, update two and ship one, delete one; returns the
    change events this makes (a delete is an event and a tombstone)."""
    from cdclake_dev.chain import mariadb_connect

    with mariadb_connect(settings) as db, db.cursor() as cur:
        existing = cur.execute(f"DELETE FROM {table}")
        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)", _ROWS)
        cur.execute(f"UPDATE {table} SET amount = amount * 2 WHERE id IN (2, 3)")
        cur.execute(f"UPDATE {table} SET shipped = TRUE, placed = NULL WHERE id = 1")
        cur.execute(f"DELETE FROM {table} WHERE id = 4")
    return 2 * existing + len(_ROWS) + 2 + 1 + 2


def _events(settings: Settings, topic: str) -> int:
    from cdclake.io.kafka import KafkaClients, topic_watermarks

    try:
        return sum(topic_watermarks(KafkaClients.from_bootstrap(settings.kafka_bootstrap), topic).high.values())
    except LookupError:
        return 0


def _wait_events(settings: Settings, topic: str, count: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _events(settings, topic) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} holds {_events(settings, topic)} record(s), not {count}, after {timeout_s} s")
        time.sleep(0.5)


def _ensure_connector(settings: Settings, registry_url: str, source_table: str, prefix: str) -> str:
    """Add :data:`CONNECTOR` unless the worker runs it (a standalone worker forgets it when it
    stops; added again, it resumes from the offsets the worker saved)."""
    from cdclake_dev import chain

    try:
        status = chain.connector_status(settings, CONNECTOR)
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        return chain.add_avro_connector(settings, registry_url, [source_table], name=CONNECTOR, topic_prefix=prefix)
    states = [t["state"] for t in status.get("tasks") or []]
    if states != ["RUNNING"]:
        raise RuntimeError(f"connector {CONNECTOR!r} is not running: {status}")
    return f"connector {CONNECTOR!r} already streams {source_table} as Avro into {prefix}.*"


def _source_rows(settings: Settings, table: str) -> list[dict]:
    from cdclake_dev.chain import mariadb_connect

    with mariadb_connect(settings) as db, db.cursor() as cur:
        cur.execute(f"SELECT id, customer, amount, placed, shipped FROM {table} ORDER BY id")
        return [
            {"id": i, "customer": c, "amount": a, "placed": p, "shipped": bool(s)} for i, c, a, p, s in cur.fetchall()
        ]


def demo(settings: Settings, *, run_dag: Callable[[str, Settings], int], say: Callable[[str], None]) -> int:
    """Run the Avro demo on the local stack of ``settings`` (its ``tables_config`` and
    ``schema_registry_url`` are replaced by the demo's).

    Args:
        settings: the local stack's settings.
        run_dag: runs a table's DAG once (its name, the settings); returns 0 on success.
        say: prints one line of progress.

    Returns:
        0 when the DAG succeeded and the Iceberg table equals the source table, else 1.
    """
    from cdclake.io.catalog import load_catalog
    from cdclake.model.config import load_tables
    from cdclake_dev import chain, stack
    from cdclake_dev.views import show_table

    registry = chain.local_registry(settings)
    settings = settings.model_copy(update={"tables_config": TABLES_CONFIG, "schema_registry_url": registry.ccompat_url})
    cfg = load_tables(TABLES_CONFIG).get(TABLE)
    prefix, database, name = cfg.topic.rsplit(".", 2)
    source_table = f"{database}.{name}"
    say(stack.start_broker(settings))
    say(chain.start_mariadb(settings))
    say(chain.start_connect(settings))
    registry.start()
    say(f"Apicurio Registry on {registry.url} (Confluent-compatible API {registry.ccompat_url})")
    # the connector first: it then reads the table's columns from the binlog's CREATE TABLE (a
    # snapshot would read BOOLEAN back as TINYINT(1), an int16; the DDL parser gives a boolean)
    say(_ensure_connector(settings, registry.ccompat_url, source_table, prefix))
    with chain.mariadb_connect(settings) as db, db.cursor() as cur:
        cur.execute(_DDL.format(table=source_table))
    before = _events(settings, cfg.topic)
    written = _write(settings, source_table)
    _wait_events(settings, cfg.topic, before + written)
    say(f"wrote {written} change event(s) to {source_table}; {cfg.topic!r} holds {before + written} Avro record(s)")
    say(f"--- running DAG {cfg.dag_id} (airflow dags test) ---")
    rc = run_dag(TABLE, settings)
    if rc:
        return rc
    say(show_table(TABLE, limit=50, metadata_columns=False, settings=settings).rstrip("\n"))
    lake = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
    lake_rows = sorted(({k: r[k] for k in ("id", "customer", "amount", "placed", "shipped")} for r in lake), key=str)
    source = _source_rows(settings, source_table)
    if lake_rows != sorted(source, key=str):
        say(f"the Iceberg table differs from {source_table}: lake {lake_rows}, source {source}")
        return 1
    say(f"{settings.catalog_name}.{cfg.identifier} equals {source_table} ({len(source)} rows), read from Avro")
    return 0
