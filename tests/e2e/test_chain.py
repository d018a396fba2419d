"""Real MariaDB -> real Debezium MariaDB connector (Kafka Connect) -> real Kafka -> the table DAG
(Airflow, spark-submit) -> Iceberg; the Iceberg table must equal ``SELECT *`` of the source."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_table_dag

pytestmark = pytest.mark.e2e

RECORD_DIR = Path(__file__).resolve().parents[1] / "data" / "chain"
"""Where ``CDCLAKE_TEST_RECORD_EVENTS=1`` writes the real events of this test, for replay tests."""

ORDERS_DDL = """
CREATE TABLE orders (
  id INT NOT NULL PRIMARY KEY,
  customer VARCHAR(40) NOT NULL,
  qty INT NOT NULL,
  price DOUBLE NULL,
  note VARCHAR(100) NULL,
  placed DATETIME(6) NULL,
  active BOOLEAN NOT NULL DEFAULT TRUE
)"""


def wait_for_note(settings, topic: str, note: str, timeout_s: float = 120.0, registry_url: str | None = None) -> None:
    """Wait until Debezium has published an event whose after image carries ``note``; with
    ``registry_url`` (a Confluent-compatible API) the values are Avro in the Confluent wire format."""
    from confluent_kafka import Consumer

    from cdclake.io.kafka import KafkaClients, settled_watermarks
    from cdclake.io.registry import SchemaRegistry
    from cdclake.model.avro import read_value

    lookup = SchemaRegistry({"url": registry_url}).writer_schema if registry_url else None

    consumer = Consumer(
        {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": f"wait-{note}-{time.time()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error() or msg.value() is None:
                continue
            value = read_value(msg.value(), lookup)[2] if lookup else json.loads(msg.value()).get("payload")
            payload = value or {}
            if (payload.get("after") or {}).get("note") == note:
                # the events before the note may reach the topic's other partitions after it
                settled_watermarks(KafkaClients.from_bootstrap(settings.kafka_bootstrap), topic, most_s=20.0)
                return
        raise AssertionError(f"no event with note {note!r} on {topic} within {timeout_s}s")
    finally:
        consumer.close()


def dump_topic(bootstrap: str, topic: str, path: Path) -> int:
    """Write every record of ``topic`` as JSON lines {partition, offset, key, value, headers}."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dump", "enable.auto.commit": False})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    lines = []
    for p in sorted(meta.partitions):
        lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        consumer.assign([TopicPartition(topic, p, lo)])
        while lo < hi:
            msg = consumer.poll(5)
            if msg is None:
                break
            lines.append(
                json.dumps(
                    {
                        "partition": msg.partition(),
                        "offset": msg.offset(),
                        "key": msg.key().decode() if msg.key() else None,
                        "value": msg.value().decode() if msg.value() else None,
                        "headers": [[k, v.decode() if v else None] for k, v in (msg.headers() or [])],
                    }
                )
            )
            lo = msg.offset() + 1
    consumer.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def _topic_values(settings, topic: str) -> list[dict]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "dump.jsonl"
        dump_topic(settings.kafka_bootstrap, topic, path)
        return [
            json.loads(json.loads(line)["value"])
            for line in path.read_text().splitlines()
            if line.strip() and json.loads(line)["value"]
        ]


def count_events(settings, topic: str) -> int:
    return len(_topic_values(settings, topic))


def duplicated_positions(settings, topic: str) -> set[tuple]:
    """Binlog positions (file, pos, row) carried by more than one change event of ``topic``."""
    seen, twice = set(), set()
    for value in _topic_values(settings, topic):
        src = value["payload"]["source"]
        if value["payload"]["op"] == "r":
            continue
        key = (src["file"], src["pos"], src["row"], value["payload"]["op"])
        (twice if key in seen else seen).add(key)
    return twice


def source_rows(db) -> list[tuple]:
    with db.cursor() as cur:
        cur.execute("SELECT id, customer, qty, price, note, placed, active FROM orders ORDER BY id")
        return [(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6])) for r in cur.fetchall()]


def iceberg_rows(settings, identifier) -> list[tuple]:
    arrow = load_catalog(settings).load_table(identifier).scan().to_arrow()
    rows = sorted(arrow.to_pylist(), key=lambda r: r["id"])
    return [(r["id"], r["customer"], r["qty"], r["price"], r["note"], r["placed"], r["active"]) for r in rows]


def test_workload_with_connector_crash_converges_to_source(chain, stack_settings, tmp_path):
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    topic = f"{settings.topic_prefix}.inventory.orders"
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0},
                "tables": [
                    {
                        "name": "chain_orders",
                        "topic": topic,
                        "namespace": "chain",
                        "table": "orders",
                        "primary_key": ["id"],
                    }
                ],
            }
        )
    )
    ensure_airflow_db(settings)
    # offsets flushed now (a clean stop flushes), and not again before the kill: the restart
    # emits again what the workload below made Debezium emit
    source_chain.stop_connect(settings)
    flushed = source_chain.connect_offsets_file(settings).read_bytes()
    source_chain.start_connect(settings, offset_flush_interval_ms=600_000)
    db = source_chain.mariadb_connect(settings, database="inventory")
    base = dt.datetime(2026, 11, 20, 8, 30, 15, 123456)
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS orders")
        cur.execute(ORDERS_DDL)
        for i in range(1, 21):
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (i, f"cust{i % 5}", i, i * 1.25, None, base + dt.timedelta(minutes=i), True),
            )
        cur.execute("UPDATE orders SET qty = qty + 100, note = 'bulk' WHERE id <= 8")  # multi-row UPDATE
        cur.execute("DELETE FROM orders WHERE id IN (3, 4)")
        cur.execute("UPDATE orders SET id = 105 WHERE id = 5")  # primary-key change
        db.begin()  # a transaction
        cur.execute("INSERT INTO orders VALUES (21, 'tx', 1, NULL, 'in-tx', NULL, FALSE)")
        cur.execute("UPDATE orders SET price = 99.5 WHERE id = 21")
        cur.execute("DELETE FROM orders WHERE id = 20")
        db.commit()
        cur.execute("UPDATE orders SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    # the connector dies hard (SIGKILL) right after emitting the events above, before its next
    # offset flush: on restart it re-emits them. Changes go on while it is down.
    source_chain.stop_connect(settings, hard=True)
    # the offsets flushed before the workload, as a kill before any flush leaves them (its source
    # task may also commit offsets on its own: once, 2026-11-28, a restart re-emitted nothing)
    source_chain.connect_offsets_file(settings).write_bytes(flushed)
    emitted_before_crash = count_events(settings, topic)
    with db.cursor() as cur:
        cur.execute("UPDATE orders SET qty = 7 WHERE id = 2")
        cur.execute("DELETE FROM orders WHERE id = 6")
        cur.execute("UPDATE orders SET note = 'after-restart' WHERE id = 7")
    source_chain.start_connect(settings)
    wait_for_note(settings, topic, "after-restart")
    reemitted = duplicated_positions(settings, topic)
    print(
        f"\nevents before the crash: {emitted_before_crash}; positions emitted twice after the restart: {len(reemitted)}"
    )
    assert reemitted, "the restarted connector re-emitted nothing (its offsets had flushed before the kill)"
    assert run_table_dag("chain_orders", settings) == 0
    assert iceberg_rows(settings, "chain.orders") == source_rows(db)
    assert [r[0] for r in source_rows(db)] == [1, 2, *range(7, 20), 21, 105]

    with db.cursor() as cur:
        cur.execute("TRUNCATE TABLE orders")
        for i in range(30, 36):
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (i, "after-truncate", i, None, None, base, i % 2 == 0),
            )
        cur.execute("UPDATE orders SET customer = 'changed', placed = %s WHERE id IN (31, 33)", (base,))
        cur.execute("DELETE FROM orders WHERE id = 34")
        cur.execute("UPDATE orders SET note = 'barrier-2' WHERE id = 30")
    last_write = time.monotonic()
    wait_for_note(settings, topic, "barrier-2")

    assert run_table_dag("chain_orders", settings) == 0
    visible_after_s = time.monotonic() - last_write
    print(f"\nlast source write -> visible in Iceberg (one DAG run): {visible_after_s:.1f} s")
    assert iceberg_rows(settings, "chain.orders") == source_rows(db)
    assert len(source_rows(db)) == 5

    if os.environ.get("CDCLAKE_TEST_RECORD_EVENTS"):
        for name, t in [
            ("orders", topic),
            ("schema-changes", settings.topic_prefix),
            ("notifications", f"{settings.topic_prefix}.notifications"),
        ]:
            dump_topic(settings.kafka_bootstrap, t, RECORD_DIR / f"{name}.jsonl")
        (RECORD_DIR / "orders.expected.json").write_text(
            json.dumps(
                [[v.isoformat() if isinstance(v, dt.datetime) else v for v in row] for row in source_rows(db)], indent=1
            )
        )


AVRO_DDL = """
CREATE TABLE {table} (
  id INT NOT NULL PRIMARY KEY,
  amount DECIMAL(10,2) NULL,
  big BIGINT UNSIGNED NULL,
  ratio DOUBLE NULL,
  flag BOOLEAN NOT NULL DEFAULT TRUE,
  note VARCHAR(40) NOT NULL DEFAULT 'none',
  day DATE NULL,
  placed DATETIME(6) NULL,
  stamp TIMESTAMP(3) NULL,
  raw VARBINARY(8) NULL
)"""


def _records(settings, topic: str, at_least: int, timeout_s: float = 60.0) -> list:
    """The records of ``topic`` once it holds at least ``at_least`` (raw bytes: key, value)."""
    from cdclake.io.kafka import KafkaClients, read_topic

    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    deadline = time.monotonic() + timeout_s
    while True:
        records = list(read_topic(kafka, topic) or ())
        if len(records) >= at_least or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def _after_columns(connect_schema: dict) -> list:
    from cdclake.model.types import columns_from_connect

    [after] = [f for f in connect_schema["fields"] if f["field"] == "after"]
    return columns_from_connect(after)


def test_an_avro_connector_beside_the_json_one_gives_the_same_columns(chain, stack_settings, schema_registry):
    """A second connector on the same MariaDB writing Avro through Apicurio's converter: its
    records are Confluent-framed (magic byte 0, a 4-byte id the registry serves, with Connect's
    ``connect.name`` attributes), and the writer schema read as a Connect schema gives the same
    ``after`` columns as the JSON connector's Connect schema of the same table (both streamed
    from the same binlog DDL: a snapshot reads ``BOOLEAN`` back as ``tinyint(1)``, an int16, where
    the DDL parser gives a boolean). Its schema-change topic is Avro too."""
    import uuid

    import httpx

    from cdclake.model.avro import connect_schema, split_wire

    settings = stack_settings
    table = f"avro_{uuid.uuid4().hex[:8]}"
    prefix = f"{settings.topic_prefix}_avro"
    print(source_chain.add_avro_connector(settings, schema_registry, [f"inventory.{table}"], topic_prefix=prefix))
    try:
        db = source_chain.mariadb_connect(settings, database="inventory")
        with db.cursor() as cur:
            cur.execute(AVRO_DDL.format(table=table))
            cur.execute(
                f"INSERT INTO {table} VALUES (1, 12.34, 18446744073709551615, 0.5, FALSE, 'a', '2026-11-24',"
                " '2026-11-24 08:30:15.123456', '2026-11-24 08:30:15.123', x'00ff')"
            )
            cur.execute(f"INSERT INTO {table} (id) VALUES (2)")
        json_records = _records(settings, f"{settings.topic_prefix}.inventory.{table}", 2)
        avro_records = _records(settings, f"{prefix}.inventory.{table}", 2)
        assert len(json_records) == len(avro_records) == 2
        ids = {split_wire(r.value())[0] for r in avro_records}
        assert all(split_wire(r.key())[0] for r in avro_records)  # keys are framed Avro too
        [schema_id] = ids
        served = httpx.get(f"{schema_registry}/schemas/ids/{schema_id}")
        assert served.status_code == 200, served.text
        writer = json.loads(served.json()["schema"])
        assert writer["connect.name"] == f"{prefix}.inventory.{table}.Envelope"
        json_schema = json.loads(json_records[0].value())["schema"]
        assert _after_columns(connect_schema(writer)) == _after_columns(json_schema)
        schema_changes = _records(settings, prefix, 1)
        assert schema_changes and all(split_wire(r.value())[0] for r in schema_changes)
    finally:
        print(source_chain.remove_connector(settings, "avro-connector"))
