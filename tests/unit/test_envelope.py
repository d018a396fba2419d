"""Unit tests for :mod:`cdclake.model.envelope`: parsing captured Debezium values and rejecting bad ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.errors import BadRecordError
from cdclake.io.events import read_event_file
from cdclake.model.envelope import ChangeEvent, KafkaCoordinates, parse_value
from cdclake.model.position import BinlogPosition
from tests.conftest import DebeziumFiles

FIXTURES = DebeziumFiles()
FLINK_WITH_SCHEMA = FIXTURES / "flink/debezium-data-schema-include.txt"
FLINK_PAYLOAD_ONLY = FIXTURES / "flink/debezium-data-schema-exclude.txt"
RW_WITH_SCHEMA = FIXTURES / "risingwave/debezium_log.1"
RW_PAYLOAD_ONLY = FIXTURES / "risingwave/debezium_log_no_schema_field.1"

WHERE = KafkaCoordinates("dbserver1.inventory.products", 2, 417)


def parse_file(path: Path, value_format: str) -> list[ChangeEvent]:
    events = []
    for i, value in enumerate(read_event_file(path)):
        event = parse_value(value, value_format, KafkaCoordinates(path.name, 0, i))
        assert event is not None
        events.append(event)
    return events


def summary(e: ChangeEvent) -> tuple:
    return (e.op, e.before, e.after, e.position)


def envelope(**overrides) -> dict:
    """A minimal valid payload-only envelope (an insert), with fields replaced by ``overrides``."""
    doc = {
        "before": None,
        "after": {"id": 1, "name": "x"},
        "source": {
            "name": "dbserver1",
            "db": "inventory",
            "table": "t",
            "file": "mysql-bin.000003",
            "pos": 362,
            "row": 0,
            "snapshot": "false",
        },
        "op": "c",
        "ts_ms": 1589361987936,
        "transaction": None,
    }
    doc.update(overrides)
    return doc


def bad(value, value_format: str = "json", where: KafkaCoordinates = WHERE) -> BadRecordError:
    with pytest.raises(BadRecordError) as excinfo:
        parse_value(value, value_format, where)
    return excinfo.value


# --- captured files ----------------------------------------------------------------------------


def test_flink_files_each_hold_16_events():
    assert len(read_event_file(FLINK_WITH_SCHEMA)) == 16
    assert len(read_event_file(FLINK_PAYLOAD_ONLY)) == 16


@pytest.mark.parametrize(
    ("path", "value_format"),
    [(FLINK_WITH_SCHEMA, "json_with_schema"), (FLINK_PAYLOAD_ONLY, "json")],
)
def test_every_flink_event_parses(path, value_format):
    events = parse_file(path, value_format)
    assert [e.op for e in events] == ["c"] * 9 + ["u", "u", "c", "c", "u", "u", "d"]
    assert [e.after["id"] for e in events[:9]] == list(range(101, 110))
    assert events[-1].after is None
    assert events[-1].before["id"] == 111


def test_flink_snapshot_rows_rank_as_reads_then_changes_follow_in_order():
    events = parse_file(FLINK_WITH_SCHEMA, "json_with_schema")
    positions = [e.position for e in events]
    assert positions[:9] == [BinlogPosition(3, 154, 0, 0)] * 9
    assert [p.pos for p in positions[9:]] == [362, 717, 1068, 1394, 1707, 2090, 2443]
    assert all(p.change_rank == 1 for p in positions[9:])
    assert positions == sorted(positions)


def test_flink_with_schema_and_payload_only_agree_event_by_event():
    with_schema = parse_file(FLINK_WITH_SCHEMA, "json_with_schema")
    payload_only = parse_file(FLINK_PAYLOAD_ONLY, "json")
    assert len(with_schema) == len(payload_only) == 16
    for i, (a, b) in enumerate(zip(with_schema, payload_only, strict=False)):
        assert summary(a) == summary(b), f"event {i}"


def test_with_schema_event_keeps_value_schema_and_row_schema():
    event = parse_file(FLINK_WITH_SCHEMA, "json_with_schema")[0]
    assert event.value_schema["name"] == "dbserver1.inventory.products.Envelope"
    row = event.row_schema()
    assert row is not None
    assert row["name"] == "dbserver1.inventory.products.Value"
    assert [f["field"] for f in row["fields"]] == ["id", "name", "description", "weight"]
    assert event.ts_ms == 1589355606100
    assert event.source["table"] == "products"


def test_payload_only_event_has_no_schema():
    event = parse_file(FLINK_PAYLOAD_ONLY, "json")[0]
    assert event.value_schema is None
    assert event.row_schema() is None


def test_row_image_is_before_for_delete_and_after_otherwise():
    events = parse_file(FLINK_PAYLOAD_ONLY, "json")
    update, delete = events[9], events[-1]
    assert update.row_image == update.after
    assert update.row_image["description"] == "18oz carpenter hammer"
    assert delete.row_image == delete.before
    assert delete.row_image["id"] == 111


@pytest.mark.parametrize(
    ("path", "value_format"),
    [(RW_WITH_SCHEMA, "json_with_schema"), (RW_PAYLOAD_ONLY, "json")],
)
def test_risingwave_ops_sequence(path, value_format):
    events = parse_file(path, value_format)
    assert [e.op for e in events] == ["r", "r", "r", "r", "c", "u", "c", "u", "u", "d"]


def test_risingwave_two_updates_at_pos_1442_differ_by_row():
    events = parse_file(RW_WITH_SCHEMA, "json_with_schema")
    first, second = events[7], events[8]
    assert first.position == BinlogPosition(3, 1442, 0, 1)
    assert second.position == BinlogPosition(3, 1442, 1, 1)
    assert first.position < second.position
    assert (first.after["id"], second.after["id"]) == (1005, 1006)


def test_risingwave_positions_are_in_file_order():
    positions = [e.position for e in parse_file(RW_WITH_SCHEMA, "json_with_schema")]
    assert positions == sorted(positions)
    assert [p.change_rank for p in positions] == [0] * 4 + [1] * 6


def test_risingwave_with_schema_and_payload_only_agree_event_by_event():
    a = [summary(e) for e in parse_file(RW_WITH_SCHEMA, "json_with_schema")]
    b = [summary(e) for e in parse_file(RW_PAYLOAD_ONLY, "json")]
    assert a == b


# --- synthetic values --------------------------------------------------------------------------


def test_tombstone_value_none_returns_none():
    assert parse_value(None, "json_with_schema", WHERE) is None
    assert parse_value(None, "json", WHERE) is None


def test_str_and_bytes_values_parse_the_same():
    text = json.dumps(envelope())
    assert parse_value(text, "json", WHERE) == parse_value(text.encode(), "json", WHERE)


def test_truncate_event_parses_without_row_images():
    event = parse_value(json.dumps(envelope(op="t", after=None)), "json", WHERE)
    assert event.op == "t"
    assert event.before is None and event.after is None
    assert event.position == BinlogPosition(3, 362, 0, 1)


def test_kafka_coordinates_str_names_topic_partition_offset():
    assert str(WHERE) == "topic 'dbserver1.inventory.products' partition 2 offset 417"


def test_not_json_raises_bad_record_error():
    err = bad(b"{not json")
    assert "value is not JSON" in str(err)


def test_invalid_utf8_raises_bad_record_error():
    err = bad(b'{"op": "\xff"}')
    assert "value is not JSON" in str(err)


def test_json_array_raises_bad_record_error():
    err = bad(json.dumps([envelope()]))
    assert "value is not a JSON object" in str(err)


def test_json_with_schema_format_without_payload_raises():
    err = bad(json.dumps(envelope()), "json_with_schema")
    assert "no 'payload'" in str(err)


def test_json_with_schema_format_with_non_object_payload_raises():
    err = bad(json.dumps({"schema": None, "payload": [1, 2]}), "json_with_schema")
    assert "payload is not a JSON object" in str(err)


def test_missing_op_raises():
    doc = envelope()
    del doc["op"]
    assert "envelope has no 'op'" in str(bad(json.dumps(doc)))


def test_unknown_op_raises_naming_it():
    err = bad(json.dumps(envelope(op="x")))
    assert "unknown op 'x'" in str(err)


def test_missing_source_block_raises():
    doc = envelope()
    del doc["source"]
    assert "no 'source' block" in str(bad(json.dumps(doc)))


@pytest.mark.parametrize("missing", ["file", "pos"])
def test_source_without_file_or_pos_raises(missing):
    doc = envelope()
    del doc["source"][missing]
    assert "no binlog position" in str(bad(json.dumps(doc)))


def test_source_with_malformed_file_name_raises():
    doc = envelope()
    doc["source"]["file"] = "mysql-bin"
    assert "no numeric suffix" in str(bad(json.dumps(doc)))


@pytest.mark.parametrize("op", ["c", "u", "r"])
def test_op_needing_after_without_after_raises(op):
    err = bad(json.dumps(envelope(op=op, before={"id": 1}, after=None)))
    assert f"op '{op}' without an 'after' image" in str(err)


def test_op_d_without_before_raises():
    err = bad(json.dumps(envelope(op="d", before=None, after=None)))
    assert "op 'd' without a 'before' image" in str(err)


def test_bad_record_error_names_topic_partition_and_offset():
    where = KafkaCoordinates("dbserver1.inventory.customers", 3, 12345)
    err = bad(json.dumps(envelope(op="x")), where=where)
    msg = str(err)
    assert "dbserver1.inventory.customers" in msg
    assert "partition 3" in msg
    assert "offset 12345" in msg
    assert err.where == where
    assert err.reason.startswith("unknown op")
