"""The schema-change index against a real broker and a real SQL catalog: recorded Debezium
schema-change records (tests/data/chain) and records shaped like them on a topic of each test's
own; what a table reads through the index must be what a full read of the topic gives."""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cdclake.errors import SchemaChangeError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic, read_topic, topic_exists
from cdclake.model.layout import SCHEMA_INDEX_OFFSETS_KEY
from cdclake.model.schema_changes import changes_from_record
from cdclake.pipeline.schema_index import (
    SCHEMA_CHANGE_INDEX_TABLE,
    catch_up,
    indexed_offsets,
    record_table_names,
)
from cdclake.pipeline.schema_sync import read_schema_changes
from tests.unit.test_schema_sync import columns_with, event

pytestmark = pytest.mark.integration

CHAIN = Path(__file__).resolve().parents[1] / "data" / "chain"
RECORDED = [json.loads(line) for line in (CHAIN / "schema-changes.jsonl").read_text().splitlines() if line]
ORDERS = '"inventory"."orders"'
ACCOUNTS = '"inventory"."accounts"'
RECORDED_IDS = sorted(
    {tc["id"] for r in RECORDED if r["value"] for tc in json.loads(r["value"])["payload"]["tableChanges"]}
)
TABLE_IDS = [*RECORDED_IDS, '"inventory"."customers"']
"""Every table of the recording, and one it never mentions."""
BASE = (max(json.loads(r["value"])["payload"]["source"]["pos"] for r in RECORDED if r["value"]) // 10000 + 1) * 10000
"""A binlog position after everything recorded (for the records the tests add)."""


def new_topic() -> str:
    return f"sci{uuid.uuid4().hex[:10]}"


def send(kafka, topic: str, values: list[bytes | str | None], partitions: int = 1) -> None:
    """Produce ``values`` to ``topic`` (created with ``partitions`` partitions), the i-th value to
    partition ``i % partitions``, in order."""
    ensure_topic(kafka, topic, partitions)
    producer = kafka.producer()
    for i, value in enumerate(values):
        data = value.encode() if isinstance(value, str) else value
        producer.produce(topic, key=b'{"databaseName":"inventory"}', value=data, partition=i % partitions)
    assert producer.flush(30) == 0


def recorded_values() -> list[str]:
    return [r["value"] for r in sorted(RECORDED, key=lambda r: (r["partition"], r["offset"]))]


def full_scan(kafka, topic: str, table_id: str, ordering: str = "binlog"):
    """What ``read_schema_changes`` returned before the index: every record of the topic read."""
    records = read_topic(kafka, topic, group_id="test-full-scan")
    if records is None:
        return None
    changes = []
    for msg in records:
        if msg.value() is not None:
            changes.extend(
                changes_from_record(msg.value(), table_id, msg.partition() or 0, msg.offset() or 0, ordering)
            )
    return sorted(changes, key=lambda c: (c.position, c.partition, c.offset))


def outcome(read, *args):
    """The changes ``read(*args)`` returns, or the type and message of what it raised."""
    try:
        return ("changes", read(*args))
    except Exception as e:
        return ("raised", type(e), str(e))


def index_rows(catalog, topic: str) -> list[dict]:
    from pyiceberg.expressions import EqualTo

    table = catalog.load_table(SCHEMA_CHANGE_INDEX_TABLE)
    return table.scan(row_filter=EqualTo("topic", topic)).to_arrow().to_pylist()


def expected_keys(values: list[bytes | str | None], partitions: int = 1) -> set[tuple[int, int, str | None]]:
    """``(partition, offset, table_name)`` of the rows the index must hold for ``values`` sent by
    :func:`send` to a new topic."""
    keys = set()
    for i, value in enumerate(values):
        if value is not None:
            for name in record_table_names(value):
                keys.add((i % partitions, i // partitions, name))
    return keys


def alter(ddl: str, pos: int, table_id: str = ORDERS, columns=None) -> str:
    return json.dumps(event(ddl, pos, columns_with() if columns is None else columns, table_id=table_id))


@pytest.mark.parametrize("ordering", ["binlog", "gtid"])
def test_a_tables_changes_through_the_index_are_those_of_a_full_read(kafka, stack_settings, ordering):
    assert any(json.loads(v)["payload"]["source"].get("gtid") for v in recorded_values()), "GTIDs were recorded"
    topic = new_topic()
    values = recorded_values()
    send(kafka, topic, values, partitions=3)
    catalog = load_catalog(stack_settings)

    for table_id in TABLE_IDS:
        through_index = read_schema_changes(catalog, kafka, topic, table_id, ordering)
        assert through_index == full_scan(kafka, topic, table_id, ordering), table_id
    assert {c.kind for c in read_schema_changes(catalog, kafka, topic, ORDERS, ordering)} == {"DROP", "CREATE"}
    assert read_schema_changes(catalog, kafka, topic, '"inventory"."customers"', ordering) == []
    rows = index_rows(catalog, topic)
    assert {(r["partition"], r["offset"], r["table_name"]) for r in rows} == expected_keys(values, 3)
    assert len(rows) == len(expected_keys(values, 3))
    assert {r["table_name"] for r in rows} == {"debezium_signal", "accounts", "orders"}

    # a missing topic: nothing indexed, the same contract as before
    missing = new_topic()
    assert catch_up(catalog, kafka, missing) is None
    assert read_schema_changes(catalog, kafka, missing, ORDERS, ordering) is None


def test_catch_up_reads_only_the_records_not_indexed_yet(kafka, stack_settings, caplog):
    topic = new_topic()
    values: list[bytes | str | None] = [*recorded_values(), None]  # a Kafka tombstone too
    send(kafka, topic, values, partitions=2)
    catalog = load_catalog(stack_settings)
    rows = len(expected_keys(values, 2))

    first = catch_up(catalog, kafka, topic)
    assert first is not None
    assert (first.records_read, first.rows_added, first.rebuilt) == (len(values), rows, False)
    assert first.offsets == {0: 7, 1: 6}
    table = catalog.load_table(SCHEMA_CHANGE_INDEX_TABLE)
    assert indexed_offsets(table)[topic] == first.offsets
    summary = table.current_snapshot().summary.additional_properties
    assert json.loads(summary[SCHEMA_INDEX_OFFSETS_KEY])[topic] == {"0": 7, "1": 6}
    snapshot = table.current_snapshot().snapshot_id

    # nothing new: nothing read from Kafka, nothing committed, one INFO line saying so (the first
    # catch-up's line is captured too when an earlier test left INFO on for the logger)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.schema_index"):
        second = catch_up(catalog, kafka, topic)
    assert second is not None and (second.records_read, second.rows_added) == (0, 0)
    assert catalog.load_table(SCHEMA_CHANGE_INDEX_TABLE).current_snapshot().snapshot_id == snapshot
    lines = [r.getMessage() for r in caplog.records if r.name == "cdclake.pipeline.schema_index"]
    assert len(lines) == 1 and "read 0 records" in lines[0] and topic in lines[0]

    # two new ALTERs (after the tombstone, on partitions 1 and 0): only they are read
    later = [
        alter("ALTER TABLE orders ADD COLUMN a INT", BASE),
        alter("ALTER TABLE orders ADD COLUMN b INT", BASE + 100),
    ]
    producer = kafka.producer()
    producer.produce(topic, value=later[0].encode(), partition=1)
    producer.produce(topic, value=later[1].encode(), partition=0)
    assert producer.flush(30) == 0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.schema_index"):
        third = catch_up(catalog, kafka, topic)
    assert third is not None and (third.records_read, third.rows_added) == (2, 2)
    assert third.offsets == {0: 8, 1: 7}
    lines = [r.getMessage() for r in caplog.records if r.name == "cdclake.pipeline.schema_index"]
    assert len(lines) == 1 and "read 2 record(s)" in lines[0] and '{"0": 7, "1": 6}' in lines[0]
    assert len(index_rows(catalog, topic)) == rows + 2

    changes = read_schema_changes(catalog, kafka, topic, ORDERS)
    assert changes == full_scan(kafka, topic, ORDERS)
    assert [c.ddl for c in changes[-2:]] == [
        "ALTER TABLE orders ADD COLUMN a INT",
        "ALTER TABLE orders ADD COLUMN b INT",
    ]


def test_racing_catch_ups_index_each_record_exactly_once(kafka, stack_settings):
    topic = new_topic()
    values = recorded_values() * 3
    send(kafka, topic, values, partitions=2)
    threads = 4
    catalogs = [load_catalog(stack_settings) for _ in range(threads)]  # one per task
    start = threading.Barrier(threads, timeout=60)

    def run(catalog):
        start.wait()
        return catch_up(catalog, kafka, topic)

    with ThreadPoolExecutor(threads) as pool:
        results = [f.result() for f in [pool.submit(run, c) for c in catalogs]]

    assert sum(r.records_read for r in results) == len(values)
    assert [r.offsets for r in results] == [{0: 18, 1: 18}] * threads
    catalog = load_catalog(stack_settings)
    keys = [(r["partition"], r["offset"], r["table_name"]) for r in index_rows(catalog, topic)]
    assert len(keys) == len(set(keys))
    assert set(keys) == expected_keys(values, 2)
    # exactly one commit moved this topic's offsets
    from pyiceberg.table.snapshots import ancestors_of

    table = catalog.load_table(SCHEMA_CHANGE_INDEX_TABLE)
    seen = [
        json.loads(s.summary.additional_properties[SCHEMA_INDEX_OFFSETS_KEY]).get(topic)
        for s in ancestors_of(table.current_snapshot(), table.metadata)
    ]
    assert sum(1 for newer, older in itertools.pairwise([*seen, None]) if newer != older) == 1
    for table_id in TABLE_IDS:
        assert read_schema_changes(catalog, kafka, topic, table_id) == full_scan(kafka, topic, table_id)


def test_renames_are_found_by_both_names_and_unreadable_records_reach_every_table(kafka, stack_settings):
    topic = new_topic()
    renames = [
        alter("ALTER TABLE orders RENAME TO orders_old", BASE, table_id='"inventory"."orders_old"'),
        alter("RENAME TABLE accounts TO accounts_new", BASE + 100, table_id='"inventory"."accounts_new"'),
    ]
    values = recorded_values() + renames
    send(kafka, topic, values)
    catalog = load_catalog(stack_settings)
    ids = [*TABLE_IDS, '"inventory"."orders_old"', '"inventory"."accounts_new"']

    for table_id in ids:
        assert read_schema_changes(catalog, kafka, topic, table_id) == full_scan(kafka, topic, table_id), table_id
    rows = {r["offset"]: set() for r in index_rows(catalog, topic)}
    for r in index_rows(catalog, topic):
        rows[r["offset"]].add(r["table_name"])
    n = len(RECORDED)
    assert rows[n] == {"orders", "orders_old"} and rows[n + 1] == {"accounts", "accounts_new"}
    assert read_schema_changes(catalog, kafka, topic, ORDERS)[-1].kind == "RENAME"
    assert read_schema_changes(catalog, kafka, topic, ACCOUNTS)[-1].kind == "RENAME"
    new_name = read_schema_changes(catalog, kafka, topic, '"inventory"."accounts_new"')
    assert [(c.kind, c.ddl) for c in new_name] == [("ALTER", "RENAME TABLE accounts TO accounts_new")]

    # an ALTER whose DDL cannot be parsed nor read word by word: a NULL row, read by every table,
    # as a full read does; it stops only the tables whose names its words hold (a rename of them
    # cannot be ruled out), here none but orders, whose change it is
    unreadable = alter("ALTER TABLE orders CHANGE a", BASE + 200)
    send(kafka, topic, [unreadable])
    result = catch_up(catalog, kafka, topic)
    assert result is not None and (result.records_read, result.rows_added) == (1, 1)
    assert {r["table_name"] for r in index_rows(catalog, topic) if r["offset"] == n + 2} == {None}
    for table_id in ids:
        assert outcome(read_schema_changes, catalog, kafka, topic, table_id) == outcome(
            full_scan, kafka, topic, table_id
        ), table_id
    assert read_schema_changes(catalog, kafka, topic, ORDERS)[-1].ddl == "ALTER TABLE orders CHANGE a"
    assert read_schema_changes(catalog, kafka, topic, ACCOUNTS)[-1].kind == "RENAME"  # not stopped by it

    # a record that is no schema-change event at all: every table's read fails on it, as before
    send(kafka, topic, [b"not json", json.dumps({"ddl": "ALTER TABLE orders ADD c INT"})])
    for table_id in ids:
        got = outcome(read_schema_changes, catalog, kafka, topic, table_id)
        assert got[0] == "raised" and got == outcome(full_scan, kafka, topic, table_id), table_id


def test_a_recreated_topic_is_reindexed_from_scratch(kafka, stack_settings, caplog):
    topic = new_topic()
    send(kafka, topic, recorded_values())
    catalog = load_catalog(stack_settings)
    first = catch_up(catalog, kafka, topic)
    assert first is not None and first.offsets == {0: len(RECORDED)}

    admin = kafka.admin()
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 60
    while topic_exists(kafka, topic):
        assert time.monotonic() < deadline, "the topic was not deleted"
        time.sleep(0.5)
    again = [alter("ALTER TABLE orders ADD COLUMN a INT", BASE), recorded_values()[7]]  # orders, then accounts
    while True:
        try:
            send(kafka, topic, again)
            break
        except Exception:  # the broker may still be finishing the deletion
            assert time.monotonic() < deadline, "the topic could not be recreated"
            time.sleep(0.5)

    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.schema_index"):
        rebuilt = catch_up(catalog, kafka, topic)
    assert rebuilt is not None and rebuilt.rebuilt
    assert (rebuilt.records_read, rebuilt.rows_added, rebuilt.offsets) == (2, 2, {0: 2})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "recreated" in warnings[0] and topic in warnings[0]
    assert {(r["offset"], r["table_name"]) for r in index_rows(catalog, topic)} == {(0, "orders"), (1, "accounts")}
    for table_id in TABLE_IDS:
        assert read_schema_changes(catalog, kafka, topic, table_id) == full_scan(kafka, topic, table_id), table_id
    assert [c.ddl for c in read_schema_changes(catalog, kafka, topic, ORDERS)] == [
        "ALTER TABLE orders ADD COLUMN a INT"
    ]
    again_after = catch_up(catalog, kafka, topic)
    assert again_after is not None and (again_after.records_read, again_after.rebuilt) == (0, False)


def test_a_schema_change_topic_grown_to_more_partitions_is_indexed_from_their_low_watermarks(kafka, stack_settings):
    """Partitions added to the schema-change topic (docs/operations.md, "A topic gets more
    partitions"): the index has offsets for the old ones only; the new ones are read from their
    low watermark, nothing is reindexed and nothing is skipped."""
    from confluent_kafka.admin import NewPartitions

    topic = new_topic()
    send(kafka, topic, recorded_values())
    catalog = load_catalog(stack_settings)
    first = catch_up(catalog, kafka, topic)
    assert first is not None and first.offsets == {0: len(RECORDED)}
    admin = kafka.admin()  # kept: a client destroyed before its future resolves fails it
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    producer = kafka.producer()
    producer.produce(topic, value=alter("ALTER TABLE orders ADD COLUMN a INT", BASE).encode(), partition=2)
    producer.produce(topic, value=alter("ALTER TABLE orders ADD COLUMN b INT", BASE + 100).encode(), partition=0)
    assert producer.flush(30) == 0

    grown = catch_up(catalog, kafka, topic)
    assert grown is not None and not grown.rebuilt
    assert (grown.records_read, grown.offsets) == (2, {0: len(RECORDED) + 1, 1: 0, 2: 1})
    changes = read_schema_changes(catalog, kafka, topic, ORDERS)
    assert changes == full_scan(kafka, topic, ORDERS)
    assert [c.ddl for c in changes[-2:]] == [
        "ALTER TABLE orders ADD COLUMN a INT",
        "ALTER TABLE orders ADD COLUMN b INT",
    ]


def test_schema_changes_lost_to_retention_stop_the_existing_tables_until_accepted(kafka, stack_settings, caplog):
    """Records retention deletes before the index read them are not skipped in silence: the index
    marks the gap, and every existing table of the topic stops naming it until an operator accepts
    it; a table not created yet is not stopped (no schema of it can be stale)."""
    from confluent_kafka import TopicPartition

    from cdclake.model.layout import SCHEMA_GAPS_ACCEPTED_PROPERTY
    from tests.conftest import make_table

    topic = new_topic()
    values = recorded_values()
    send(kafka, topic, values[:4])
    catalog = load_catalog(stack_settings)
    assert catch_up(catalog, kafka, topic) is not None
    send(kafka, topic, [alter("ALTER TABLE orders ADD COLUMN lost INT", BASE), *values[4:6]])
    admin = kafka.admin()  # kept: the futures complete on its thread
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(30)  # offsets 4 and 5 deleted before any catch-up read them
    with caplog.at_level(logging.WARNING, logger="cdclake.pipeline.schema_index"):
        assert catch_up(catalog, kafka, topic) is not None
    assert any("offsets 4 to 5 were deleted by retention" in r.getMessage() for r in caplog.records)

    cfg = make_table()
    catalog.create_namespace_if_not_exists(cfg.namespace)
    table = catalog.create_table(cfg.identifier, schema=_one_column_schema())
    with pytest.raises(SchemaChangeError, match=r"partition 0 offsets 4 to 5 were deleted by retention") as raised:
        read_schema_changes(catalog, kafka, topic, ORDERS, table=table)
    assert f"'{SCHEMA_GAPS_ACCEPTED_PROPERTY}'='{topic}:0:4-6'" in str(raised.value)
    # a table not created yet reads the changes the topic still holds
    assert read_schema_changes(catalog, kafka, topic, ORDERS) == full_scan(kafka, topic, ORDERS)
    with table.transaction() as txn:
        txn.set_properties({SCHEMA_GAPS_ACCEPTED_PROPERTY: f"{topic}:0:4-6"})
    assert read_schema_changes(catalog, kafka, topic, ORDERS, table=table) == full_scan(kafka, topic, ORDERS)


def _one_column_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField

    return Schema(NestedField(1, "id", IntegerType(), required=False))
