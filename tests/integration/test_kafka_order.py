"""The Kafka offset as the order, on the real stack (Kafka broker, SparkSession with the Iceberg
runtime, JDBC catalog): ties at one binlog position (:func:`cdclake.model.position.supersedes`), and
tables of producers without binlog positions (table config ``ordering: kafka``).

Ties are written as Debezium writes a compressed transaction of MySQL with
``binlog_transaction_compression=ON``: every rows event of the transaction carries the position of
its payload and ``row`` starts again at 0, so two changes of one key have equal ``(file, pos,
row)``; their Kafka offsets are their order. Producers without positions are Flink CDC's output as
captured in tests/fixtures/debezium/seatunnel/debezium_data.txt (``file ""``, ``pos 0``) and events
built from it.
"""

from __future__ import annotations

import copy
import json
import logging

import pytest

from cdclake.errors import BadRecordError, CdcLakeError, PositionOrderError
from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events, read_event_file
from cdclake.io.kafka import ensure_topic
from cdclake.model.layout import QUARANTINE_SUFFIX, TOMBSTONES_SUFFIX, side_table
from tests.conftest import make_table
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}


def change(op: str, key: int, v: str, pos: int, *, file: str = "mysql-bin.000003") -> tuple[bytes, bytes]:
    """A payload-only Debezium MySQL event of table t(id int, v string) at ``file``/``pos``, row 0."""
    image = {"id": key, "v": v}
    source = {"connector": "mysql", "name": "t", "server_id": 1, "file": file, "pos": pos, "row": 0}
    value = {
        "before": image if op in ("u", "d") else None,
        "after": None if op == "d" else image,
        "op": op,
        "ts_ms": 1_700_000_000_000,
        "source": {**source, "snapshot": "false", "ts_ms": 1_700_000_000_000, "db": "d", "table": "t", "gtid": None},
    }
    return json.dumps({"id": key}).encode(), json.dumps(value).encode()


def rows(settings, cfg, column: str = "v") -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: r[column] for r in arrow.to_pylist()}


@pytest.fixture
def table(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def test_changes_of_one_compressed_transaction_apply_in_kafka_order_within_and_across_runs(
    spark, kafka, stack_settings, table, caplog
):
    # run 1: key 1 updated twice and key 3 deleted then inserted again in one compressed
    # transaction (payload at pos 500), all in this run; key 2 updated, and deleted in another
    # transaction (payload at pos 900) whose second half reaches only the next run
    produce_raw(
        kafka,
        table.topic,
        [
            change("c", 1, "a", 100),
            change("c", 3, "x", 120),
            change("u", 1, "b", 500),
            change("d", 3, "x", 500),
            change("u", 1, "c", 500),
            change("c", 3, "y", 500),
            change("u", 1, "d", 900),
            change("d", 2, "-", 900),
        ],
    )
    produce_raw(kafka, table.topic, [change("c", 2, "p", 130)], partition=1)
    with caplog.at_level(logging.WARNING, logger="cdclake.spark.reduce"):
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "d", 3: "y"}
    warnings = [r.getMessage() for r in caplog.records if "binlog_transaction_compression" in r.getMessage()]
    assert len(warnings) == 1 and "1 key(s)" in warnings[0]  # key 3's tie; key 1's latest is alone at 900

    # run 2: the rest of the transaction at 900 (key 1 again, key 2 inserted again), then a
    # re-emission of its last event at a later offset, which writes the same values again
    produce_raw(kafka, table.topic, [change("u", 1, "e", 900), change("c", 2, "q", 900), change("u", 1, "e", 900)])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "e", 2: "q", 3: "y"}
    tombstones = load_catalog(stack_settings).load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert [
        (r["id"], r["_cdc_kafka_partition"], r["_cdc_kafka_offset"]) for r in tombstones.scan().to_arrow().to_pylist()
    ] == [(2, 0, 7)]


def test_equal_positions_of_one_key_in_two_partitions_with_other_content_stop_the_run(
    spark, kafka, stack_settings, table
):
    produce_raw(kafka, table.topic, [change("c", 1, "a", 100), change("u", 1, "b", 500)])
    produce_raw(kafka, table.topic, [change("u", 1, "z", 500)], partition=1)
    with pytest.raises(PositionOrderError) as caught:
        run_once(spark, stack_settings, table)
    message = str(caught.value)
    assert repr(table.topic) in message and "partition 0 offset 1 and partition 1 offset 0" in message
    assert "binlog_transaction_compression" in message and "Nothing was committed" in message
    assert load_catalog(stack_settings).load_table(table.identifier).current_snapshot() is None


def flink_cdc(template: bytes, op: str, key: int, varchar: str | None) -> bytes:
    """An event of the captured Flink CDC table (``template``, a record of
    seatunnel/debezium_data.txt) as Flink CDC writes it (``source.file ""``, ``pos 0``): the
    template's row image with ``id`` ``key`` and, unless ``None``, ``f_varchar`` ``varchar``."""
    doc = copy.deepcopy(json.loads(template))
    payload = doc["payload"]
    image = {**payload["after"], "id": key, **({"f_varchar": varchar} if varchar is not None else {})}
    payload.update(op=op, before=image if op in ("u", "d") else None, after=None if op == "d" else image)
    assert (payload["source"]["file"], payload["source"]["pos"]) == ("", 0)
    return json.dumps(doc).encode()


def load_changes(path, template: bytes, changes: list[tuple[str, int, str | None]], cfg, kafka) -> None:
    """Produce :func:`flink_cdc` events ``(op, id, f_varchar)`` with Debezium's keys and
    partitioning (:func:`cdclake.io.events.load_events`)."""
    path.write_bytes(b"\n".join(flink_cdc(template, *change) for change in changes))
    load_events(path, cfg, kafka, partitions=2)


def test_a_producer_without_binlog_positions_is_applied_in_kafka_order(
    spark, kafka, stack_settings, fixtures_dir, tmp_path
):
    captured = fixtures_dir / "seatunnel" / "debezium_data.txt"
    template = read_event_file(captured)[0]
    cfg = make_table(ordering="kafka")
    load_events(captured, cfg, kafka, partitions=2)  # ids 1..3, op r
    load_changes(
        tmp_path / "first.json", template, [("u", 1, "one-1"), ("u", 1, "one-2"), ("c", 4, "four-1")], cfg, kafka
    )
    run_once(spark, stack_settings, cfg)
    original = "This is a varchar field"
    assert rows(stack_settings, cfg, "f_varchar") == {1: "one-2", 2: original, 3: original, 4: "four-1"}

    # a new snapshot read of key 1 (Flink CDC re-reading the table) replaces its change: under
    # ordering kafka a snapshot read does not rank below a change
    second = [("d", 2, None), ("u", 4, "four-2"), ("r", 1, "one-read"), ("u", 3, "three-1")]
    load_changes(tmp_path / "second.json", template, second, cfg, kafka)
    run_once(spark, stack_settings, cfg)
    assert rows(stack_settings, cfg, "f_varchar") == {1: "one-read", 3: "three-1", 4: "four-2"}


def test_events_without_binlog_positions_fail_the_default_ordering_naming_ordering_kafka(
    spark, kafka, stack_settings, fixtures_dir, table
):
    with pytest.raises(BadRecordError, match="ordering: kafka"):  # cdclake load
        load_events(fixtures_dir / "seatunnel" / "debezium_data.txt", make_table(), kafka)
    produce_raw(kafka, table.topic, [change("c", 1, "a", 0, file=""), change("u", 1, "b", 0, file="")])
    with pytest.raises(CdcLakeError, match="ordering: kafka"):
        run_once(spark, stack_settings, table)
    quarantine = load_catalog(stack_settings).load_table(side_table(table.identifier, QUARANTINE_SUFFIX))
    errors = [r["error"] for r in quarantine.scan().to_arrow().to_pylist()]
    assert len(errors) == 2 and all("source has no binlog position (file '', pos 0)" in e for e in errors)
    assert all("ordering: kafka" in e for e in errors)
