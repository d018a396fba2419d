"""The apply job on a real Kafka broker, a real SparkSession with the Iceberg runtime and a real
SQLite-backed JDBC catalog, fed with real Debezium captures."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import BadBatchError, ConcurrentRunError
from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events, read_event_file
from cdclake.io.kafka import ensure_topic
from cdclake.io.refs import committed_offsets
from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import OffsetRange
from tests.conftest import apply_offsets, make_table, plan_offsets

pytestmark = pytest.mark.integration

PRODUCTS_FINAL = {
    101: ("scooter", "Small 2-wheel scooter", 3.140000104904175),
    102: ("car battery", "12V car battery", 8.100000381469727),
    103: ("12-pack drill bits", "12-pack of drill bits with sizes ranging from #40 to #3", 0.800000011920929),
    104: ("hammer", "12oz carpenter's hammer", 0.75),
    105: ("hammer", "14oz carpenter's hammer", 0.875),
    106: ("hammer", "18oz carpenter hammer", 1.0),
    107: ("rocks", "box of assorted rocks", 5.099999904632568),
    108: ("jacket", "water resistent black wind breaker", 0.10000000149011612),
    109: ("spare tire", "24 inch spare tire", 22.200000762939453),
    110: ("jacket", "new water resistent white wind breaker", 0.5),
}
"""inventory.products after the 16 events of flink/debezium-data-schema-include.txt: 106, 107 and
110 updated, 111 created, updated and deleted."""

CUSTOMERS_FINAL = {
    1001: ("Sally", "Thomas", "sally.thomas@acme.com"),
    1002: ("George", "Bailey", "gbailey@foobar.com"),
    1003: ("Edward", "Walker", "ed@walker.com"),
    1004: ("Anne1", "Kretchmar", "annek@noanswer.org"),
    1005: ("add", "add2", "add"),
}
"""inventory.customers after risingwave/debezium_log.1: 1004 and 1005 updated (1005 and 1006 by
one two-row UPDATE), 1006 created and deleted."""

PRODUCT_COLUMNS = {"id": "int", "name": "string", "description": "string", "weight": "double"}
CUSTOMER_COLUMNS = {"id": "int", "first_name": "string", "last_name": "string", "email": "string"}


def run_once(spark, settings, cfg, run_id="test-run"):
    planned = plan_offsets(settings, cfg)
    return planned.range, apply_offsets(spark, settings, cfg, planned.range, run_id)


def table_rows(settings, cfg, columns) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    rows = arrow.to_pylist()
    return {r["id"]: tuple(r[c] for c in columns if c != "id") for r in rows}


def produce_raw(kafka, topic: str, records: list[tuple[bytes | None, bytes | None]], partition: int = 0) -> None:
    producer = kafka.producer()
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
    producer.flush(30)


@pytest.mark.parametrize(
    "fixture, value_format",
    [
        ("flink/debezium-data-schema-include.txt", "json_with_schema"),
        ("flink/debezium-data-schema-exclude.txt", "json"),
    ],
)
def test_products_fixture_reaches_final_state(spark, kafka, stack_settings, fixtures_dir, fixture, value_format):
    cfg = make_table(value_format=value_format, columns=PRODUCT_COLUMNS if value_format == "json" else None)
    load_events(fixtures_dir / fixture, cfg, kafka, partitions=3)
    offset_range, result = run_once(spark, stack_settings, cfg)
    assert result.status == "committed"
    assert result.events == 16
    assert result.ops == {"c": 11, "u": 4, "d": 1}
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert [table.schema().find_field(i).name for i in table.schema().identifier_field_ids] == ["id"]
    summary = table.current_snapshot().summary
    assert json.loads(summary[SummaryKeys.END_OFFSETS]) == {str(p): o for p, o in offset_range.end.items()}
    assert summary[SummaryKeys.RUN_ID] == "test-run"
    assert summary[SummaryKeys.LAST_POSITION] == "3:2443:0"


@pytest.mark.parametrize(
    "fixture, value_format",
    [
        ("risingwave/debezium_log.1", "json_with_schema"),
        ("risingwave/debezium_log_no_schema_field.1", "json"),
    ],
)
def test_customers_fixture_two_rows_of_one_binlog_event(
    spark, kafka, stack_settings, fixtures_dir, fixture, value_format
):
    cfg = make_table(value_format=value_format, columns=CUSTOMER_COLUMNS if value_format == "json" else None)
    load_events(fixtures_dir / fixture, cfg, kafka, partitions=3)
    _, result = run_once(spark, stack_settings, cfg)
    assert result.status == "committed"
    assert table_rows(stack_settings, cfg, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL
    rows = load_catalog(stack_settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
    r1005 = next(r for r in rows if r["id"] == 1005)
    assert (r1005["_cdc_binlog_file_seq"], r1005["_cdc_binlog_pos"], r1005["_cdc_binlog_row"]) == (3, 1442, 0)
    assert r1005["_cdc_op"] == "u" and r1005["_cdc_snapshot"] is False


def test_second_run_resumes_from_committed_offsets(spark, kafka, stack_settings, fixtures_dir, tmp_path):
    cfg = make_table()
    values = read_event_file(fixtures_dir / "flink/debezium-data-schema-include.txt")
    first, rest = tmp_path / "first.jsonl", tmp_path / "rest.jsonl"
    first.write_bytes(b"\n".join(values[:10]))
    rest.write_bytes(b"\n".join(values[10:]))
    load_events(first, cfg, kafka, partitions=3)
    range1, result1 = run_once(spark, stack_settings, cfg, "run-1")
    assert result1.events == 10
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    snapshots_after_first = len(table.snapshots())

    # nothing new: the plan is empty and applying it commits nothing
    range_empty, result_empty = run_once(spark, stack_settings, cfg, "run-empty")
    assert range_empty.is_empty and result_empty.status == "empty"
    assert len(table.refresh().snapshots()) == snapshots_after_first

    load_events(rest, cfg, kafka, partitions=3)
    range2, result2 = run_once(spark, stack_settings, cfg, "run-2")
    assert range2.start == range1.end
    assert result2.events == 6
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL
    summary = table.refresh().current_snapshot().summary
    assert summary[SummaryKeys.RUN_ID] == "run-2"
    assert json.loads(summary[SummaryKeys.START_OFFSETS]) == {str(p): o for p, o in range1.end.items()}


def test_retry_of_committed_range_is_a_no_op_and_stale_start_is_refused(spark, kafka, stack_settings, fixtures_dir):
    cfg = make_table()
    load_events(fixtures_dir / "risingwave/debezium_log.1", cfg, kafka, partitions=1)
    offset_range, result = run_once(spark, stack_settings, cfg)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    n = len(table.snapshots())
    # an Airflow retry of the apply task after its commit: same range again
    again = apply_offsets(spark, stack_settings, cfg, offset_range, "retry")
    assert again.status == "already_applied"
    assert len(table.refresh().snapshots()) == n
    # a run that planned from older offsets than the table holds (another run committed)
    load_events(fixtures_dir / "risingwave/debezium_log.1", cfg, kafka, partitions=1)
    stale = OffsetRange(topic=cfg.topic, start={0: 3}, end={0: 20})
    with pytest.raises(ConcurrentRunError, match="another run committed"):
        apply_offsets(spark, stack_settings, cfg, stale, "stale")


@pytest.mark.parametrize(
    "bad_value, reason",
    [
        (b"this is not json", "value is not JSON"),
        (
            b'{"schema":{},"payload":{"before":null,"after":{"id":7},"source":{"file":"mysql-bin.000001","pos":4,"row":0}}}',
            "envelope has no 'op'",
        ),
        (
            b'{"schema":{},"payload":{"before":null,"after":{"id":7},"op":"x","source":{"file":"mysql-bin.000001","pos":4}}}',
            "unknown op 'x'",
        ),
        (
            b'{"schema":{},"payload":{"before":null,"after":{"id":"seven"},"op":"c","source":{"file":"mysql-bin.000001","pos":4}}}',
            "column 'id' (after image): value \"seven\" (the event's Connect schema has no such field) does not "
            "fit the table's int (encoding int32)",
        ),
    ],
)
def test_bad_record_fails_the_run_in_strict_mode_naming_topic_partition_offset(
    spark, kafka, stack_settings, fixtures_dir, bad_value, reason
):
    cfg = make_table(bad_records="fail")
    load_events(fixtures_dir / "risingwave/debezium_log.1", cfg, kafka, partitions=1)
    _, first = run_once(spark, stack_settings, cfg)
    assert first.status == "committed"
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    before = (len(table.snapshots()), committed_offsets(table, cfg.topic))

    produce_raw(kafka, cfg.topic, [(b'{"id":7}', bad_value)])
    with pytest.raises(BadBatchError) as err:
        run_once(spark, stack_settings, cfg)
    message = str(err.value)
    assert f"topic {cfg.topic!r} partition 0 offset 10" in message
    assert reason in message
    table = table.refresh()
    assert (len(table.snapshots()), committed_offsets(table, cfg.topic)) == before


def test_kafka_tombstones_are_skipped_and_counted(spark, kafka, stack_settings, fixtures_dir):
    cfg = make_table()
    load_events(fixtures_dir / "risingwave/debezium_log.1", cfg, kafka, partitions=1)
    run_once(spark, stack_settings, cfg)
    produce_raw(kafka, cfg.topic, [(b'{"id":1006}', None)])
    offset_range, result = run_once(spark, stack_settings, cfg)
    # a batch of only tombstones still records its end offsets
    assert result.status == "committed" and result.tombstones == 1
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == offset_range.end
    assert table_rows(stack_settings, cfg, CUSTOMER_COLUMNS) == CUSTOMERS_FINAL


def _envelope(op, row, file, pos, row_index=0, snapshot="false"):
    before = row if op == "d" else None
    after = None if op == "d" else row
    return json.dumps(
        {
            "before": before,
            "after": after,
            "op": op,
            "ts_ms": 1,
            "source": {
                "connector": "mariadb",
                "name": "t",
                "server_id": 1,
                "file": file,
                "pos": pos,
                "row": row_index,
                "snapshot": snapshot,
                "ts_ms": 1000,
                "db": "d",
                "table": "t",
            },
        }
    ).encode()


def test_order_is_binlog_position_not_kafka_offset_across_file_rollover(spark, kafka, stack_settings):
    cfg = make_table(value_format="json", columns={"id": "int", "v": "string"})
    ensure_topic(kafka, cfg.topic, 1)
    produce_raw(
        kafka,
        cfg.topic,
        [
            # newest first in Kafka: the .1000000 event follows .999999 in the binlog
            (b'{"id":1}', _envelope("u", {"id": 1, "v": "newest"}, "mysql-bin.1000000", 4)),
            (b'{"id":1}', _envelope("u", {"id": 1, "v": "older"}, "mysql-bin.999999", 900)),
            (b'{"id":2}', _envelope("c", {"id": 2, "v": "row1"}, "mysql-bin.999999", 500, row_index=1)),
            (b'{"id":2}', _envelope("c", {"id": 2, "v": "row0"}, "mysql-bin.999999", 500, row_index=0)),
            # a snapshot read at the same position as a change ranks below it
            (b'{"id":3}', _envelope("u", {"id": 3, "v": "change"}, "mysql-bin.999999", 100)),
            (b'{"id":3}', _envelope("r", {"id": 3, "v": "read"}, "mysql-bin.999999", 100, snapshot="true")),
        ],
    )
    run_once(spark, stack_settings, cfg)
    assert table_rows(stack_settings, cfg, ["id", "v"]) == {1: ("newest",), 2: ("row1",), 3: ("change",)}
    # a later batch re-emitting an older event (connector restart) does not regress the row
    produce_raw(kafka, cfg.topic, [(b'{"id":1}', _envelope("u", {"id": 1, "v": "older"}, "mysql-bin.999999", 900))])
    run_once(spark, stack_settings, cfg)
    assert table_rows(stack_settings, cfg, ["id", "v"])[1] == ("newest",)


def test_the_tombstone_table_is_made_by_the_first_delete_and_then_supersedes_an_older_upsert(
    spark, kafka, stack_settings
):
    """A table that has seen no delete has no tombstone table (its merge source is the reduction,
    nothing joined); its first delete creates it, and a later batch without deletes still reads it:
    an older upsert re-emitted after the delete (a connector restart) does not bring the row back."""
    from cdclake.model.layout import TOMBSTONES_SUFFIX, side_table

    cfg = make_table(value_format="json", columns={"id": "int", "v": "string"})
    catalog = load_catalog(stack_settings)
    tombstones = side_table(cfg.identifier, TOMBSTONES_SUFFIX)
    ensure_topic(kafka, cfg.topic, 1)
    binlog = "mysql-bin.000001"
    produce_raw(
        kafka,
        cfg.topic,
        [
            (b'{"id":1}', _envelope("c", {"id": 1, "v": "a"}, binlog, 100)),
            (b'{"id":2}', _envelope("c", {"id": 2, "v": "b"}, binlog, 110)),
        ],
    )
    _, first = run_once(spark, stack_settings, cfg, "run-1")
    assert first.keys_changed == 2
    assert table_rows(stack_settings, cfg, ["id", "v"]) == {1: ("a",), 2: ("b",)}
    assert not catalog.table_exists(tombstones)

    produce_raw(kafka, cfg.topic, [(b'{"id":1}', _envelope("d", {"id": 1, "v": "a"}, binlog, 200))])
    run_once(spark, stack_settings, cfg, "run-2")
    assert table_rows(stack_settings, cfg, ["id", "v"]) == {2: ("b",)}
    assert catalog.table_exists(tombstones)

    produce_raw(
        kafka,
        cfg.topic,
        [
            (b'{"id":1}', _envelope("u", {"id": 1, "v": "stale"}, binlog, 150)),  # before the delete
            (b'{"id":3}', _envelope("c", {"id": 3, "v": "c"}, binlog, 300)),
        ],
    )
    _, third = run_once(spark, stack_settings, cfg, "run-3")
    assert third.keys_changed == 1
    assert table_rows(stack_settings, cfg, ["id", "v"]) == {2: ("b",), 3: ("c",)}


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_merge_records_snapshot_properties_in_both_write_modes(spark, kafka, stack_settings, mode):
    """Iceberg 1.11 (Spark 4.x modules) copies spark.sql.iceberg.snapshot-property.* into a
    MERGE commit; proven here for both write modes before the apply job relies on it."""
    name = f"{stack_settings.catalog_name}.tests.props_{mode.replace('-', '_')}"
    spark.sql(f"DROP TABLE IF EXISTS {name}")
    spark.sql(
        f"CREATE TABLE {name} (id int, v string) USING iceberg TBLPROPERTIES ("
        f"'format-version'='2', 'write.merge.mode'='{mode}', 'write.update.mode'='{mode}', "
        f"'write.delete.mode'='{mode}')"
    )
    spark.sql(f"INSERT INTO {name} VALUES (1, 'a'), (2, 'b')")
    spark.createDataFrame([(1, "z"), (3, "c")], "id int, v string").createOrReplaceTempView("props_src")
    spark.conf.set("spark.sql.iceberg.snapshot-property.cdc.probe", mode)
    try:
        spark.sql(
            f"MERGE INTO {name} t USING props_src s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
    finally:
        spark.conf.unset("spark.sql.iceberg.snapshot-property.cdc.probe")
    summary = spark.sql(f"SELECT summary FROM {name}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()[0][0]
    assert summary["cdc.probe"] == mode
    assert sorted(tuple(r) for r in spark.sql(f"SELECT * FROM {name}").collect()) == [(1, "z"), (2, "b"), (3, "c")]


def test_a_range_split_into_many_spark_partitions_applies_the_same(
    spark, kafka, stack_settings, fixtures_dir, monkeypatch
):
    """Large ranges are read in Spark partitions of RECORDS_PER_SPARK_PARTITION records; the
    result must not depend on it (order comes from binlog positions). Here: 2 records each."""
    from cdclake.spark import read

    monkeypatch.setattr(read, "RECORDS_PER_SPARK_PARTITION", 2)
    monkeypatch.setattr(read, "LOCAL_READ_RECORDS", 0)  # Spark's Kafka source, not the Kafka client
    cfg = make_table()
    load_events(fixtures_dir / "flink/debezium-data-schema-include.txt", cfg, kafka, partitions=3)
    from cdclake.io.kafka import topic_watermarks
    from cdclake.model.offsets import OffsetRange

    marks = topic_watermarks(kafka, cfg.topic)
    offset_range = OffsetRange(topic=cfg.topic, start=marks.low, end=marks.high)
    assert read.read_range(spark, kafka, offset_range).rdd.getNumPartitions() >= 8
    result = apply_offsets(spark, stack_settings, cfg, offset_range, "split-run")
    assert result.status == "committed" and result.events == 16
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL


def test_a_small_range_read_with_the_kafka_client_equals_what_sparks_kafka_source_reads(spark, kafka, monkeypatch):
    """A range of at most LOCAL_READ_RECORDS records is read in the task with the Kafka client and
    handed to Spark as a local relation: the same columns, types and rows as Spark's Kafka source
    gives for it (committed records only; headers, a null key, a tombstone, two partitions)."""
    import uuid

    from cdclake.io.kafka import topic_watermarks
    from cdclake.spark import read

    topic = f"cdclake-read-{uuid.uuid4().hex[:8]}"
    ensure_topic(kafka, topic, 2)
    producer = kafka.producer(**{"transactional.id": f"cdclake-test-{topic}"})
    producer.init_transactions(30)
    records = [
        (b'{"id": 1}', b'{"v": 1}', 0, [("trace", b"t1"), ("trace", b"t2")]),
        (None, b'{"v": 2}', 1, None),
        (b'{"id": 1}', None, 0, None),  # a tombstone
        (b'{"id": 3}', b'{"v": 3}', 1, [("empty", b"")]),
    ]
    for i, (key, value, partition, headers) in enumerate(records):
        producer.begin_transaction()
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        producer.flush(30)
        (producer.abort_transaction if i == 2 else producer.commit_transaction)(30)  # the tombstone: aborted
        producer.begin_transaction()
        producer.produce(topic, key=key, value=value, partition=partition, headers=headers)
        producer.flush(30)
        producer.commit_transaction(30)
    marks = topic_watermarks(kafka, topic)
    offset_range = OffsetRange(topic=topic, start=marks.low, end=marks.high)

    def read_all():
        df = read.read_range(spark, kafka, offset_range)
        types = [(f.name, f.dataType.simpleString()) for f in df.schema.fields]
        return types, [tuple(r) for r in df.orderBy("partition", "offset").collect()]

    local = read_all()
    monkeypatch.setattr(read, "LOCAL_READ_RECORDS", 0)
    source = read_all()
    assert local[0] == source[0]
    assert len(local[1]) == 7  # 4 committed twice, the aborted tombstone once
    assert local[1] == source[1]


def test_kafka_transactions_apply_committed_records_only_and_stop_before_an_open_one(spark, kafka, stack_settings):
    """Kafka Connect's exactly-once source support writes each batch of records in a Kafka
    transaction: a run applies the committed ones only (``isolation.level=read_committed`` in Spark's
    Kafka source as in every librdkafka consumer), skips the transaction markers, and plans up to the
    last stable offset, so an open transaction after them neither hangs the run nor is applied."""
    from cdclake.io.kafka import read_partition

    cfg = make_table(value_format="json", columns={"id": "int", "v": "string"})
    ensure_topic(kafka, cfg.topic, 1)
    producer = kafka.producer(**{"transactional.id": f"cdclake-test-{cfg.name}"})
    producer.init_transactions(30)

    def transaction(k: int, v: str) -> None:
        producer.begin_transaction()
        value = _envelope("c", {"id": k, "v": v}, "mysql-bin.000001", 100 * k)
        producer.produce(cfg.topic, key=json.dumps({"id": k}).encode(), value=value, partition=0)
        producer.flush(30)  # in the log before the transaction ends (an abort drops unsent records)

    # offsets: 0 record, 1 commit marker, 2 aborted record, 3 abort marker, 4 record, 5 commit marker
    for k, v, commit in ((1, "committed", True), (2, "aborted", False), (3, "committed", True)):
        transaction(k, v)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    transaction(4, "open")  # offset 6: open until after the first run
    try:
        offset_range, result = run_once(spark, stack_settings, cfg)
        assert offset_range.end == {0: 6}  # the last stable offset: the open transaction's first record
        assert result.status == "committed" and result.events == 2
        assert table_rows(stack_settings, cfg, ["id", "v"]) == {1: ("committed",), 3: ("committed",)}
        # the librdkafka reader of the same range (schema sync, snapshots) ends at its commit marker
        records = read_partition(kafka, cfg.topic, 0, 0, 6, timeout_s=10)
        assert [json.loads(m.key())["id"] for m in records] == [1, 3]
        producer.commit_transaction(30)
    except BaseException:
        producer.abort_transaction(30)
        raise
    offset_range, result = run_once(spark, stack_settings, cfg)
    assert offset_range.start == {0: 6} and offset_range.end == {0: 8}
    assert table_rows(stack_settings, cfg, ["id", "v"]) == {1: ("committed",), 3: ("committed",), 4: ("open",)}
