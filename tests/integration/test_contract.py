"""Each rule of the apply contract (docs/architecture.md, "The apply contract") in isolation, on the real stack:
Kafka broker, SparkSession with the Iceberg runtime, SQLite JDBC catalog."""

from __future__ import annotations

import json
import threading
import time

import pytest

from cdclake.errors import (
    ConcurrentRunError,
    ConfigError,
    PositionOrderError,
    QuarantinedBatchError,
    QuarantineToleranceError,
    TriggerParamError,
)
from cdclake.io.catalog import load_catalog, load_table_or_none
from cdclake.io.kafka import ensure_topic
from cdclake.io.maintenance import expire_tombstones, release_quarantined
from cdclake.io.refs import committed_offsets
from cdclake.model.changes import CHANGES_SUFFIX
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import (
    COLUMN_DEFAULTS_PROPERTY,
    QUARANTINE_SUFFIX,
    SCHEMA_CHANGE_POSITION_PROPERTY,
    TOMBSTONES_SUFFIX,
    SummaryKeys,
    side_table,
)
from cdclake.model.offsets import encode_offsets
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}


def ev(op, key, v, pos, *, file="mysql-bin.000007", row=0, snapshot="false", server_id=1):
    """A payload-only Debezium envelope of table t(id int, v string) at ``file``:``pos``:``row``."""
    image = None if key is None else {"id": key, "v": v}
    return json.dumps(
        {
            "before": image if op in ("u", "d") else None,
            "after": image if op in ("c", "u", "r") else None,
            "op": op,
            "ts_ms": 1_700_000_000_000,
            "source": {
                "connector": "mariadb",
                "name": "t",
                "server_id": server_id,
                "file": file,
                "pos": pos,
                "row": row,
                "snapshot": snapshot,
                "ts_ms": 1_700_000_000_000,
                "db": "d",
                "table": "t",
            },
        }
    ).encode()


def key(k) -> bytes:
    return json.dumps({"id": k}).encode()


def rows(settings, cfg) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: r["v"] for r in arrow.to_pylist()}


@pytest.fixture
def table(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def send(kafka, cfg, records, partition=0):
    produce_raw(kafka, cfg.topic, records, partition=partition)


def test_delete_tombstone_discards_a_replayed_older_upsert(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("d", 1, "a", 200))])
    run_once(spark, stack_settings, table)
    tomb = load_catalog(stack_settings).load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert [(r["id"], r["_cdc_binlog_pos"]) for r in tomb.scan().to_arrow().to_pylist()] == [(1, 200)]
    # the connector re-emits the create at a higher offset: it must not resurrect the row
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(1), ev("u", 1, "a2", 150))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {2: "b"}
    # a genuinely newer insert of the same key comes back
    send(kafka, table, [(key(1), ev("c", 1, "again", 300))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "again", 2: "b"}


def test_tombstones_older_than_retention_are_expired(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(1), ev("d", 1, "a", 200))])
    run_once(spark, stack_settings, table)
    catalog = load_catalog(stack_settings)
    assert expire_tombstones(catalog, table.identifier, table.tombstone_retention_hours) == 0
    later_ms = 10**13  # far beyond the retention
    assert expire_tombstones(catalog, table.identifier, table.tombstone_retention_hours, now_ms=later_ms) == 1
    tomb = catalog.load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert tomb.scan().to_arrow().num_rows == 0


def test_truncate_removes_older_rows_and_events_but_keeps_later_ones(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    # one batch: an update below the truncate, the truncate (no key, other partition), a create after
    send(kafka, table, [(key(1), ev("u", 1, "a2", 120)), (key(3), ev("c", 3, "c", 160))], partition=0)
    send(kafka, table, [(None, ev("t", None, None, 150))], partition=1)
    _, result = run_once(spark, stack_settings, table)
    assert result.ops["t"] == 1
    assert rows(stack_settings, table) == {3: "c"}
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.TRUNCATE_FLOOR] == "7:150:0:1"
    # a later batch re-emitting events from before the truncate cannot bring rows back
    send(kafka, table, [(key(2), ev("c", 2, "b", 110)), (key(4), ev("c", 4, "d", 170))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {3: "c", 4: "d"}
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.TRUNCATE_FLOOR] == "7:150:0:1"
    # without change_feed and history in its config, the table has neither
    for suffix in (CHANGES_SUFFIX, HISTORY_SUFFIX):
        assert load_table_or_none(load_catalog(stack_settings), side_table(table.identifier, suffix)) is None
    assert SummaryKeys.CHANGES_SNAPSHOT not in summary.additional_properties
    assert SummaryKeys.HISTORY_SNAPSHOT not in summary.additional_properties


def test_primary_key_change_in_different_partitions(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))], partition=0)
    run_once(spark, stack_settings, table)
    # UPDATE t SET id = 2 WHERE id = 1: Debezium emits d(1), a Kafka tombstone for key 1, and c(2),
    # all at the position of the one binlog row event; the new key hashes to another partition
    headers_old = [("__debezium.newkey", key(2))]
    producer = kafka.producer()
    producer.produce(
        table.topic, key=key(2), value=ev("c", 2, "a", 200), partition=1, headers=[("__debezium.oldkey", key(1))]
    )
    producer.produce(table.topic, key=key(1), value=ev("d", 1, "a", 200), partition=0, headers=headers_old)
    producer.produce(table.topic, key=key(1), value=None, partition=0)
    producer.flush(30)
    _, result = run_once(spark, stack_settings, table)
    assert result.tombstones == 1
    assert rows(stack_settings, table) == {2: "a"}


def test_duplicates_and_reemitted_suffix_leave_the_table_unchanged(spark, kafka, stack_settings, table):
    history = [
        (key(1), ev("c", 1, "a", 100)),
        (key(1), ev("u", 1, "b", 200)),
        (key(2), ev("c", 2, "x", 210)),
        (key(2), ev("d", 2, "x", 220)),
        (key(3), ev("c", 3, "y", 230)),
    ]
    send(kafka, table, history + [history[1]])  # a duplicate inside the batch
    run_once(spark, stack_settings, table)
    expected = {1: "b", 3: "y"}
    assert rows(stack_settings, table) == expected
    # connector restart: the suffix is emitted again at higher offsets, in a later run
    send(kafka, table, history[1:])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == expected


def test_changelog_mode_appends_every_event_and_upsert_without_key_is_refused(spark, kafka, stack_settings):
    refused = make_table(value_format="json", columns=COLUMNS, primary_key=[])
    ensure_topic(kafka, refused.topic, 1)
    with pytest.raises(ConfigError, match="write_mode: changelog"):
        plan_offsets(stack_settings, refused)

    log = make_table(value_format="json", columns=COLUMNS, primary_key=[], write_mode="changelog")
    ensure_topic(kafka, log.topic, 1)
    send(
        kafka,
        log,
        [
            (None, ev("c", 1, "a", 100)),
            (None, ev("c", 1, "a", 100)),
            (None, ev("u", 1, "b", 200)),
            (None, ev("d", 1, "b", 300)),
        ],
    )
    run_once(spark, stack_settings, log)
    arrow = load_catalog(stack_settings).load_table(log.identifier).scan().to_arrow()
    got = sorted((r["_cdc_binlog_pos"], r["_cdc_op"], r["v"]) for r in arrow.to_pylist())
    assert got == [(100, "c", "a"), (100, "c", "a"), (200, "u", "b"), (300, "d", "b")]


def test_bad_record_is_quarantined_and_its_key_held_back_until_released(spark, kafka, stack_settings, table):
    table = table.model_copy(update={"bad_records_tolerance": "all"})  # the quarantine, not its alert
    send(
        kafka,
        table,
        [
            (key(1), ev("c", 1, "a", 100)),  # offset 0
            (key(1), b'{"op": "u", "after": {"id": 1, "v": "lost"}'),  # offset 1: truncated JSON
            (key(1), ev("u", 1, "after-bad", 300)),  # offset 2: held back
            (key(2), ev("c", 2, "b", 400)),  # offset 3: applied
        ],
    )
    _, result = run_once(spark, stack_settings, table)
    assert result.quarantined == 2
    assert rows(stack_settings, table) == {1: "a", 2: "b"}
    table_now = load_catalog(stack_settings).load_table(table.identifier)
    assert committed_offsets(table_now, table.topic)[0] == 4  # offsets moved past quarantined records
    quarantine = load_catalog(stack_settings).load_table(side_table(table.identifier, QUARANTINE_SUFFIX))
    entries = sorted(quarantine.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["partition"], r["offset"], r["status"], r["held_back_behind"]) for r in entries] == [
        (0, 1, "open", None),
        (0, 2, "open", 1),
    ]
    assert entries[0]["error"] == "value is not JSON"
    assert entries[0]["value"] == b'{"op": "u", "after": {"id": 1, "v": "lost"}'
    assert entries[0]["key"] == key(1)

    # a later run: key 1 is still held back behind its open quarantine entry; the run applied
    # nothing, so it fails after committing the quarantine and the offsets
    send(kafka, table, [(key(1), ev("u", 1, "later", 500))])
    with pytest.raises(QuarantinedBatchError, match="0 bad, 1 held back.*offset 4: held back behind the quarantined"):
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table)[1] == "a"

    # the operator releases the bad record and replays from it: the held-back events apply in order
    assert release_quarantined(load_catalog(stack_settings), table.identifier, 0, 1) == 3
    # a replay start the topic does not have is refused before anything is read, naming what it has
    with pytest.raises(TriggerParamError, match=r"has no partition 5; allowed: partition: offset in \{0: 0\.\."):
        plan_offsets(stack_settings, table, replay_from_offsets={0: 1, 5: 0})
    with pytest.raises(TriggerParamError, match=r"offset\(s\) \{0: 1000000\} outside what Kafka keeps"):
        plan_offsets(stack_settings, table, replay_from_offsets={0: 1_000_000})
    planned = plan_offsets(stack_settings, table, replay_from_offsets={0: 1})
    result = apply_offsets(spark, stack_settings, table, planned.range, "replay", replay=True)
    assert result.status == "committed"
    assert rows(stack_settings, table) == {1: "later", 2: "b"}


def key_with_schema(k) -> bytes:
    """``key(k)`` as JsonConverter writes it with ``schemas.enable=true`` (other bytes, so another
    partition, for the same row)."""
    schema = {"type": "struct", "name": "t.Key", "optional": False, "fields": [{"type": "int64", "field": "id"}]}
    return json.dumps({"schema": schema, "payload": {"id": k}}).encode()


def test_a_key_written_in_other_bytes_is_held_back_behind_its_bad_record_across_partitions(
    spark, kafka, stack_settings, table
):
    """Held-back records are matched on the row's key, not the key's bytes (issue 52, 11): the same
    key written with its schema lands in another partition, and its later change still waits behind
    the bad record of the key; releasing the bad record releases it too."""
    table = table.model_copy(update={"bad_records_tolerance": "all"})
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(1), b'{"op": "u"')])  # partition 0, offsets 0, 1
    send(kafka, table, [(key(2), ev("c", 2, "b", 50)), (key_with_schema(1), ev("u", 1, "later", 300))], partition=1)
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a", 2: "b"}
    quarantine = load_catalog(stack_settings).load_table(side_table(table.identifier, QUARANTINE_SUFFIX))
    entries = sorted(quarantine.scan().to_arrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert [(r["partition"], r["offset"], r["held_back_behind"], r["held_back_partition"]) for r in entries] == [
        (0, 1, None, None),
        (1, 1, 1, 0),
    ]
    assert entries[1]["error"] == "held back behind the quarantined record at offset 1 of partition 0 of the same key"
    # a later run: the open entry still holds the key back in either partition
    send(kafka, table, [(key_with_schema(1), ev("u", 1, "latest", 400))], partition=1)
    with pytest.raises(QuarantinedBatchError, match="0 bad, 1 held back"):
        run_once(spark, stack_settings, table)
    assert release_quarantined(load_catalog(stack_settings), table.identifier, 0, 1) == 3
    planned = plan_offsets(stack_settings, table, replay_from_offsets={0: 1, 1: 1})
    assert apply_offsets(spark, stack_settings, table, planned.range, "replay", replay=True).status == "committed"
    assert rows(stack_settings, table) == {1: "latest", 2: "b"}


def test_the_logical_key_is_the_rows_identity_whatever_the_key_bytes(spark):
    from cdclake.spark.quarantine import logical_key

    def keys(fmt, values):
        df = spark.createDataFrame([(v,) for v in values], "key binary")
        return [r[0] for r in df.select(logical_key(fmt)).collect()]

    same = keys("json", [key(1), key_with_schema(1), b'{ "id" : 1 }', b'{"schema": null, "payload": {"id": 1}}'])
    assert len(set(same)) == 1 and same[0] is not None
    assert keys("json", [key(2)])[0] != same[0]
    assert keys("json", [b"not json"]) == [b"not json".hex().upper()]
    body = bytes([2])  # Avro's zigzag varint of 1, as int or long
    assert len(set(keys("avro", [b"\x00\x00\x00\x00\x07" + body, b"\x00\x00\x00\x00\x09" + body]))) == 1


def test_a_run_whose_every_record_is_quarantined_fails_and_the_next_run_proceeds(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), b"not json"), (key(2), b'{"op": "c"}')])
    with pytest.raises(QuarantinedBatchError) as failed:
        run_once(spark, stack_settings, table)
    first_line, remedy = str(failed.value).split("\n")
    assert first_line == (
        f"topic {table.topic!r} (partition 0 offsets [0, 2)): all 2 record(s) of this run were quarantined "
        f"(2 bad, 0 held back behind a quarantined record of their key), none applied to Iceberg table "
        f"{table.identifier}; the first: partition 0 offset 0: value is not JSON"
    )
    assert f"cdclake quarantine list {table.name}" in remedy and "committed offsets moved past them" in remedy
    # nothing is lost: the quarantine holds both records, and the offsets moved past them
    quarantine = load_catalog(stack_settings).load_table(side_table(table.identifier, QUARANTINE_SUFFIX))
    entries = quarantine.scan().to_arrow().to_pylist()
    assert sorted((r["partition"], r["offset"], r["status"]) for r in entries) == [(0, 0, "open"), (0, 1, "open")]
    table_now = load_catalog(stack_settings).load_table(table.identifier)
    assert committed_offsets(table_now, table.topic) == {0: 2, 1: 0}
    # the table is not stuck on the poison range: the next run applies the good record after it
    send(kafka, table, [(key(3), ev("c", 3, "c", 100))])
    _, result = run_once(spark, stack_settings, table)
    assert (result.status, result.quarantined) == ("committed", 0)
    assert rows(stack_settings, table) == {3: "c"}


def test_a_run_that_quarantines_more_bad_records_than_tolerated_commits_then_fails_once_naming_the_causes(
    spark, kafka, stack_settings
):
    """``bad_records_tolerance`` (default 0): the run commits its good rows, the quarantine and the
    offsets, then fails with the causes grouped (one line each, not one per record); a retry of the
    run (same run id: Airflow's retry, a cleared task) applies nothing and succeeds; a replay does
    not count what an earlier run quarantined; with the tolerance raised the same batch succeeds."""
    from cdclake.runner import run_once as run_table
    from tests.integration.test_runner import LentSessions

    not_an_int = [
        json.dumps(json.loads(ev("c", 8, "x", 150)) | {"after": {"id": v, "v": "x"}}).encode() for v in ("8x", "9x")
    ]
    batch = [
        (key(1), ev("c", 1, "a", 100)),  # offset 0: applied
        (key(3), b"not json"),  # offset 1: bad
        (key(3), b"not json either"),  # offset 2: bad
        (key(3), ev("c", 3, "c", 120)),  # offset 3: held back behind offset 1
        (key(4), b"{not json"),  # offset 4: bad
        (key(8), not_an_int[0]),  # offset 5: bad, column id
        (key(9), not_an_int[1]),  # offset 6: bad, column id
        (key(2), ev("c", 2, "b", 200)),  # offset 7: applied
    ]
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, batch)
    sessions = LentSessions(spark)

    def run(run_id, config=cfg, **replay):
        catalog = load_catalog(stack_settings)
        return run_table(
            config, run_id, settings=stack_settings, catalog=catalog, kafka=kafka, open_session=sessions, **replay
        )

    with pytest.raises(QuarantineToleranceError) as failed:
        run("scheduled__1")
    message = str(failed.value)
    assert message.startswith(
        f"table {cfg.identifier}: this run quarantined 5 bad record(s) of topic {cfg.topic!r} (partition 0 offsets "
        "[0, 8)), more than bad_records_tolerance 0, and held back 1 record(s) of their keys; by cause:\n"
        "  3 bad record(s): value is not JSON (first: partition 0 offset 1)\n"
        "    remedy: the topic holds values that are not value_format 'json'"
    )
    assert (
        "  2 bad record(s) (column 'id'): column 'id' (after image): value ... (JSON string in the event) does not fit "
        "the table's int (encoding int32) (first: partition 0 offset 5)\n    remedy: the values of column 'id' do not "
        "fit the table's type"
    ) in message
    assert "  1 held back record(s): held back behind the quarantined record at offset ... of the same key" in message
    assert message.count("\n  ") - message.count("\n    ") == 3  # one line per cause, not one per record
    assert "cdclake quarantine list" in message and "bad_records_tolerance" in message
    # committed before it failed: the good rows, the quarantine, the offsets
    assert rows(stack_settings, cfg) == {1: "a", 2: "b"}
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == {0: 8}
    snapshots = len(table.snapshots())
    quarantine = load_catalog(stack_settings).load_table(side_table(cfg.identifier, QUARANTINE_SUFFIX))
    entries = quarantine.scan().to_arrow().to_pylist()
    assert sorted((r["offset"], r["held_back_behind"], r["run_id"]) for r in entries) == [
        (1, None, "scheduled__1"),
        (2, None, "scheduled__1"),
        (3, 1, "scheduled__1"),
        (4, None, "scheduled__1"),
        (5, None, "scheduled__1"),
        (6, None, "scheduled__1"),
    ]

    # the retry of that run finds its commit: nothing applied again, no second failure
    retry = run("scheduled__1")
    assert (retry.result.status, retry.result.quarantined, retry.result.applied_end) == ("already_applied", 6, {0: 8})
    # the next run finds nothing new
    assert run("scheduled__2").result is None
    table = table.refresh()
    assert (len(table.snapshots()), committed_offsets(table, cfg.topic)) == (snapshots, {0: 8})
    # a replay over the range quarantines nothing new (the records are in the quarantine already)
    replayed = run("manual__replay", replay_from_offsets={0: 0})
    assert (replayed.result.status, replayed.result.quarantined) == ("committed", 6)
    assert rows(stack_settings, cfg) == {1: "a", 2: "b"}
    assert (
        len(load_catalog(stack_settings).load_table(side_table(cfg.identifier, QUARANTINE_SUFFIX)).scan().to_arrow())
        == 6
    )

    # tolerated: the same batch, on a table that tolerates 5 bad records a run, succeeds
    tolerant = make_table(value_format="json", columns=COLUMNS, bad_records_tolerance=5)
    ensure_topic(kafka, tolerant.topic, 1)
    send(kafka, tolerant, batch)
    done = run("scheduled__1", tolerant)
    assert (done.result.status, done.result.quarantined) == ("committed", 6)
    assert rows(stack_settings, tolerant) == {1: "a", 2: "b"}
    assert sessions.opened == sessions.closed


def test_a_runs_new_quarantine_entries_are_grouped_by_schema_id_column_and_cause_in_one_aggregate(spark):
    """:func:`~cdclake.spark.quarantine.new_quarantine` over quarantine entries: this run's only, by
    schema id (the Avro value's header), column and error without its values; bad ones first."""
    from types import SimpleNamespace

    from cdclake.model.bad_records import HELD_BACK
    from cdclake.spark.quarantine import new_quarantine

    def avro(schema_id: int) -> bytes:
        return b"\x00" + schema_id.to_bytes(4, "big") + b"\x02datum"

    misfit = "schema id {}: column 'qty' is string in the writer schema, which the table's column (int, encoding int32) cannot take"
    entries = [
        (0, 3, avro(7), misfit.format(7), None, "run-2"),
        (0, 4, avro(7), misfit.format(7), None, "run-2"),
        (1, 2, avro(7), misfit.format(7), None, "run-2"),
        (1, 5, avro(8), misfit.format(8), None, "run-2"),
        (
            0,
            6,
            avro(9),
            "value does not decode with the writer schema of schema id 9 (corrupt Avro bytes)",
            None,
            "run-2",
        ),
        (0, 7, avro(7), "held back behind the quarantined record at offset 3 of the same key", 3, "run-2"),
        (0, 1, avro(7), misfit.format(7), None, "run-1"),  # an earlier run's: not counted
    ]
    view = "quarantine_entries_" + make_table().name
    spark.createDataFrame(
        entries, "partition int, offset long, value binary, error string, held_back_behind long, run_id string"
    ).createOrReplaceTempView(view)
    ctx = SimpleNamespace(
        spark=spark,
        cfg=SimpleNamespace(value_format="avro"),
        plan=SimpleNamespace(run_id="run-2"),
        side_table=lambda suffix: object(),
        spark_name=lambda suffix: view,
    )
    found = new_quarantine(ctx)
    assert (found.bad, found.held) == (5, 1)
    assert [(c.records, c.schema_id, c.column, c.held_back, c.partition, c.offset) for c in found.causes] == [
        (3, 7, "qty", False, 0, 3),
        (1, 9, None, False, 0, 6),  # of equal counts, the first record's first
        (1, 8, "qty", False, 1, 5),
        (1, 7, None, True, 0, 7),
    ]
    assert found.causes[0].cause == misfit.format(7) and found.causes[3].cause == HELD_BACK


def test_strict_mode_fails_without_quarantining(spark, kafka, stack_settings):
    from cdclake.errors import BadBatchError

    cfg = make_table(value_format="json", columns=COLUMNS, bad_records="fail")
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(1), ev("c", 1, "a", 100)), (key(1), b'{"op": "c"}')])
    with pytest.raises(BadBatchError, match="partition 0 offset 1: envelope has no 'source' block"):
        run_once(spark, stack_settings, cfg)
    assert load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot() is None


def test_binlog_basename_change_stops_the_table(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("u", 1, "b", 4, file="other-host-bin.000001", server_id=2))])
    with pytest.raises(PositionOrderError, match="other-host-bin"):
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a"}


def test_a_new_server_in_a_later_run_stops_the_table_until_the_operator_accepts_it(spark, kafka, stack_settings, table):
    """Source identity across runs: the server id recorded by an earlier commit is compared with a
    later batch's; accepting the new history demotes the old rows, and the next full snapshot of
    the new history deletes those it did not read."""
    send(kafka, table, [(key(1), ev("c", 1, "a", 900)), (key(2), ev("c", 2, "b", 910))])
    run_once(spark, stack_settings, table)
    # failover: the new primary's binlog positions are lower, its server id differs
    send(kafka, table, [(key(1), ev("u", 1, "new-a", 50, server_id=7))])
    with pytest.raises(PositionOrderError, match=r"server id: \['1', '7'\] \(the table's: 1\)") as err:
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a", 2: "b"}
    conf = json.loads(str(err.value).split("trigger this table's DAG with ", 1)[1].split(" (the first record", 1)[0])
    assert conf == {"accept_source_change": True, "replay_from_offsets": {"0": 2, "1": 0}}

    offsets = {int(p): o for p, o in conf["replay_from_offsets"].items()}
    # a default the old history recorded (an ALTER at its position 905) and its schema-change position
    old_default = '{"v": {"position": "7:905:0:1", "sql": "CAST(\'x\' AS STRING)", "exact": true, "reason": "DEFAULT"}}'
    with load_catalog(stack_settings).load_table(table.identifier).transaction() as txn:
        txn.set_properties({COLUMN_DEFAULTS_PROPERTY: old_default, SCHEMA_CHANGE_POSITION_PROPERTY: "7:905:0:1"})
    planned = plan_offsets(stack_settings, table, replay_from_offsets=offsets, accept_source_change=True)
    assert planned.accept_source_change
    apply_offsets(spark, stack_settings, table, planned.range, "accept", replay=True, accept_source_change=True)
    assert rows(stack_settings, table) == {1: "new-a", 2: "b"}  # the old rows stay readable
    # its Airflow retry after the commit forgets nothing and accepts nothing a second time
    history = cdc_commits(stack_settings, table)
    retry = apply_offsets(spark, stack_settings, table, planned.range, "accept", replay=True, accept_source_change=True)
    assert retry.status == "already_applied"
    assert cdc_commits(stack_settings, table) == history
    lake = load_catalog(stack_settings).load_table(table.identifier)
    summary = lake.current_snapshot().summary
    assert json.loads(summary[SummaryKeys.SOURCE_IDENTITY])["server_id"] == 7
    assert SummaryKeys.SOURCE_CHANGE_ACCEPTED in summary.additional_properties
    demoted = {r["id"]: r["_cdc_binlog_file_seq"] for r in lake.scan().to_arrow().to_pylist()}
    assert demoted == {1: 7, 2: -1}
    # the old history's defaults are gone (their positions would fill the new history's NULLs); the
    # schema-change position is kept (docs/architecture.md, "Accepting a new history ...")
    assert COLUMN_DEFAULTS_PROPERTY not in lake.properties
    assert lake.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == "7:905:0:1"

    # a full snapshot of the new server (key 2 is gone there) completes: key 2 is deleted. Its end
    # record was sent two minutes ago: partition 1, read to its end, cannot hold a record sent
    # before it that has not landed yet (SNAPSHOT_SETTLE_MS)
    producer = kafka.producer()
    producer.produce(
        table.topic,
        key=key(1),
        value=ev("r", 1, "new-a", 60, snapshot="last", server_id=0),
        partition=0,
        timestamp=int(time.time() * 1000) - 120_000,
    )
    producer.flush(30)
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "new-a"}


def race(spark, monkeypatch, runs) -> list[str]:
    """Run each of ``runs`` (a function of a Spark session returning an ``ApplyResult``) in a thread
    and a Spark session of its own (the commit's summary properties are session settings), all
    entering their commit together: each waits before ``spark.commit.commit`` for the others, so
    every one has passed its start check and written nothing yet. Returns each run's outcome: its
    status, ``refused: <message>`` for a ``ConcurrentRunError``, ``error: <error>`` for anything else."""
    from cdclake.spark import apply as apply_module

    barrier = threading.Barrier(len(runs), timeout=300)
    real_commit = apply_module.commit

    def gated(*args, **kwargs):
        barrier.wait()
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(apply_module, "commit", gated)
    outcomes = [""] * len(runs)

    def go(i: int) -> None:
        try:
            outcomes[i] = runs[i](spark.newSession()).status
        except ConcurrentRunError as e:
            outcomes[i] = f"refused: {e}"
        except Exception as e:  # noqa: BLE001 - recorded, and the assertions show it
            outcomes[i] = f"error: {e!r}"
        finally:
            barrier.abort()  # a run that never reaches its commit must not hold the others

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(runs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def cdc_commits(settings, cfg) -> list[dict]:
    """The summaries of the CDC snapshots in ``main``'s history, oldest first (a run's commit may
    be several snapshots: an ``accept_source_change`` run's demotion, then its merge)."""
    from cdclake.io.refs import ancestry

    table = load_catalog(settings).load_table(cfg.identifier)
    found = [dict(s) for _, _, s in ancestry(table) if s is not None and SummaryKeys.END_OFFSETS in s]
    return found[::-1]


def test_two_runs_from_the_same_start_cannot_both_commit(spark, kafka, stack_settings, table, monkeypatch):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("u", 1, "b", 200)), (key(2), ev("c", 2, "c", 210))])
    planned = plan_offsets(stack_settings, table)

    def run(name):
        return lambda session: apply_offsets(session, stack_settings, table, planned.range, name)

    outcomes = race(spark, monkeypatch, [run("race-0"), run("race-1")])
    assert sorted(o.split(":")[0] for o in outcomes) == ["committed", "refused"], outcomes
    commits = [s for s in cdc_commits(stack_settings, table) if s[SummaryKeys.RUN_ID].startswith("race-")]
    assert len({s[SummaryKeys.RUN_ID] for s in commits}) == 1, commits
    assert commits[0][SummaryKeys.START_OFFSETS] == encode_offsets(planned.range.start)
    assert commits[0][SummaryKeys.END_OFFSETS] == encode_offsets(planned.range.end)
    assert rows(stack_settings, table) == {1: "b", 2: "c"}
    target = f"{stack_settings.catalog_name}.{table.identifier}"
    assert {r["name"] for r in spark.sql(f"SELECT name FROM {target}.refs").collect()} == {"main"}


def test_two_first_runs_of_a_changelog_table_cannot_both_commit(spark, kafka, stack_settings, monkeypatch):
    """The first commit to a table without snapshots is guarded as every other commit is: two first
    runs racing (neither sees committed offsets) cannot both append the range."""
    log = make_table(value_format="json", columns=COLUMNS, primary_key=[], write_mode="changelog")
    ensure_topic(kafka, log.topic, 1)
    send(kafka, log, [(None, ev("c", 1, "a", 100)), (None, ev("u", 1, "b", 200))])
    planned = plan_offsets(stack_settings, log)

    def run(name):
        return lambda session: apply_offsets(session, stack_settings, log, planned.range, name)

    outcomes = race(spark, monkeypatch, [run("first-0"), run("first-1")])
    assert sorted(o.split(":")[0] for o in outcomes) == ["committed", "refused"], outcomes
    assert len({s[SummaryKeys.RUN_ID] for s in cdc_commits(stack_settings, log)}) == 1
    arrow = load_catalog(stack_settings).load_table(log.identifier).scan().to_arrow()
    assert sorted((r["_cdc_binlog_pos"], r["v"]) for r in arrow.to_pylist()) == [(100, "a"), (200, "b")]
    # the loser's retry finds the range applied
    assert apply_offsets(spark, stack_settings, log, planned.range, "first-retry").status == "already_applied"


def test_a_retried_replay_appends_nothing_twice(spark, kafka, stack_settings):
    """A replay skips the offsets' start check; its Airflow retry after the commit is recognised by
    its run id in the table's history, so a changelog table gets the range once per replay."""
    log = make_table(value_format="json", columns=COLUMNS, primary_key=[], write_mode="changelog")
    ensure_topic(kafka, log.topic, 1)
    send(kafka, log, [(None, ev("c", 1, "a", 100)), (None, ev("u", 1, "b", 200))])
    run_once(spark, stack_settings, log)
    planned = plan_offsets(stack_settings, log, "manual__replay", replay_from_offsets={0: 1})
    assert planned.replay and planned.range.start == {0: 1}
    first = apply_offsets(spark, stack_settings, log, planned.range, "manual__replay", replay=True)
    assert first.status == "committed"
    retry = apply_offsets(spark, stack_settings, log, planned.range, "manual__replay", replay=True)
    assert (retry.status, retry.snapshot_id, retry.events, retry.ops) == (
        "already_applied",
        first.snapshot_id,
        1,
        {"u": 1},
    )
    arrow = load_catalog(stack_settings).load_table(log.identifier).scan().to_arrow()
    assert sorted((r["_cdc_binlog_pos"], r["v"]) for r in arrow.to_pylist()) == [(100, "a"), (200, "b"), (200, "b")]
    # another replay (another run id) replays again: it is the operator's to ask for
    again = apply_offsets(spark, stack_settings, log, planned.range, "manual__replay-2", replay=True)
    assert again.status == "committed"


def test_a_topic_grown_to_more_partitions_goes_on_from_their_low_watermarks(spark, kafka, stack_settings, table):
    """Partitions added to a live data topic (a routine Kafka operation): the table's committed
    offsets name the old partitions only; the next run starts the new ones at their low watermark
    and the table converges."""
    from confluent_kafka.admin import NewPartitions

    from cdclake.io.kafka import topic_watermarks

    send(kafka, table, [(key(1), ev("c", 1, "a", 100))], partition=0)
    send(kafka, table, [(key(2), ev("c", 2, "b", 110))], partition=1)
    run_once(spark, stack_settings, table)
    admin = kafka.admin()  # kept: a client destroyed before its future resolves fails it
    admin.create_partitions([NewPartitions(table.topic, 4)])[table.topic].result(30)
    deadline = time.monotonic() + 30
    while len(topic_watermarks(kafka, table.topic).high) < 4:
        assert time.monotonic() < deadline, "the broker never showed the new partitions"
        time.sleep(0.2)
    send(kafka, table, [(key(3), ev("c", 3, "c", 120))], partition=2)
    send(kafka, table, [(key(1), ev("u", 1, "a2", 130)), (key(4), ev("c", 4, "d", 140))], partition=3)
    send(kafka, table, [(key(2), ev("d", 2, "b", 150))], partition=1)
    planned, result = run_once(spark, stack_settings, table)
    assert planned.start == {0: 1, 1: 1, 2: 0, 3: 0}
    assert result.status == "committed", result
    assert rows(stack_settings, table) == {1: "a2", 3: "c", 4: "d"}
    assert committed_offsets(load_catalog(stack_settings).load_table(table.identifier), table.topic) == {
        0: 1,
        1: 2,
        2: 1,
        3: 2,
    }
    # the Airflow retry of that run finds it applied; the next run goes on from every partition
    assert apply_offsets(spark, stack_settings, table, planned, "test-run").status == "already_applied"
    send(kafka, table, [(key(3), ev("u", 3, "c2", 160))], partition=2)
    _, result = run_once(spark, stack_settings, table)
    assert result.status == "committed"
    assert rows(stack_settings, table) == {1: "a2", 3: "c2", 4: "d"}


def test_commit_on_a_stale_base_snapshot_is_refused_by_iceberg(spark, kafka, stack_settings, table):
    """The optimistic check itself: a run that read snapshot S commits nothing once main moved."""
    from cdclake.io.refs import committed_state
    from cdclake.io.run_inputs import RunInputs
    from cdclake.io.schema_evolution import source_columns
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan
    from cdclake.spark.commit import commit
    from cdclake.spark.context import ApplyContext

    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    tbl = load_catalog(stack_settings).load_table(table.identifier)
    base = committed_state(tbl, table.topic).snapshot_id
    send(kafka, table, [(key(1), ev("u", 1, "b", 200))])
    run_once(spark, stack_settings, table)  # another run commits: main moves past base
    target = f"{stack_settings.catalog_name}.{table.identifier}"
    with pytest.raises(ConcurrentRunError, match=f"since this run read snapshot {base}"):
        commit(
            ApplyContext(
                spark,
                stack_settings,
                kafka,
                RunInputs(
                    RunPlan(table=table, run_id="probe", range=OffsetRange(topic=table.topic, start={}, end={})),
                    load_catalog(stack_settings),
                    tbl,
                    committed_state(tbl, table.topic),
                    source_columns(tbl),
                ),
            ),
            {"cdc.probe": "x"},
            lambda t: spark.sql(f"DELETE FROM {t} WHERE id = 1"),
        )
    assert rows(stack_settings, table) == {1: "b"}
    refs = {r["name"] for r in spark.sql(f"SELECT name FROM {target}.refs").collect()}
    assert refs == {"main"}


def test_replay_from_a_timestamp_resolves_offsets_for_times_and_converges(spark, kafka, stack_settings, table):
    import time as _time

    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    _time.sleep(1.0)
    cut_ms = int(_time.time() * 1000)
    _time.sleep(0.5)
    send(kafka, table, [(key(1), ev("u", 1, "a2", 120)), (key(2), ev("d", 2, "b", 130))])
    run_once(spark, stack_settings, table)
    before = rows(stack_settings, table)
    assert before == {1: "a2"}
    planned = plan_offsets(stack_settings, table, replay_from_timestamp_ms=cut_ms)
    # the replay starts at the first records written after the cut: offset 2 of partition 0
    assert planned.range.start == {0: 2, 1: 0}
    assert planned.range.end == {0: 4, 1: 0}
    result = apply_offsets(spark, stack_settings, table, planned.range, "replay-ts", replay=True)
    assert result.status == "committed"
    assert rows(stack_settings, table) == before
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.REPLAY] == "true"


def test_a_delete_that_log_compaction_removed_still_deletes_its_row(spark, kafka, stack_settings):
    """A log-compacted data topic (issue 52, 3): the broker's log cleaner removes a row's ``d``
    event and keeps only the tombstone after it; the run that reads the tombstone deletes the row.
    A row written again after its tombstone stays."""
    import time

    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic

    cfg = make_table(value_format="json", columns=COLUMNS)
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.001",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "86400000",  # tombstones stay a day
    }
    admin = kafka.admin()
    admin.create_topics([NewTopic(cfg.topic, num_partitions=1, replication_factor=1, config=compact)])[
        cfg.topic
    ].result(30)
    send(kafka, cfg, [(key(k), ev("c", k, f"a{k}", 100 + k)) for k in (1, 2, 3)])  # offsets 0-2
    run_once(spark, stack_settings, cfg, "run-1")
    assert rows(stack_settings, cfg) == {1: "a1", 2: "a2", 3: "a3"}
    # the source deletes 1 and 3, then writes 3 again (offsets 3-7); records after them roll segments
    send(
        kafka,
        cfg,
        [(key(1), ev("d", 1, "a1", 200)), (key(1), None), (key(3), ev("d", 3, "a3", 210)), (key(3), None)],
    )
    send(kafka, cfg, [(key(3), ev("c", 3, "b3", 220))])
    deadline = time.monotonic() + 240
    consumer = kafka.consumer("test-compaction")
    compacted = False
    while not compacted:
        assert time.monotonic() < deadline, "the log cleaner did not compact the topic"
        time.sleep(2)
        send(kafka, cfg, [(key(100), ev("c", 100, "roll", 300))])  # rolls the active segment
        consumer.assign([TopicPartition(cfg.topic, 0, 0)])
        seen = []
        while (msg := consumer.poll(2)) is not None:
            if msg.error() is None:
                seen.append((msg.offset(), msg.key(), msg.value()))
        # the d of key 1 (offset 3) is gone, its tombstone (offset 4) kept
        compacted = all(o != 3 for o, _, _ in seen) and any(o == 4 and v is None for o, _, v in seen)
    consumer.close()
    run_once(spark, stack_settings, cfg, "run-2")
    assert rows(stack_settings, cfg) == {2: "a2", 3: "b3", 100: "roll"}
