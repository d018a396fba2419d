"""Unit tests for :mod:`cdclake.model.keys`: Kafka keys in Debezium's JsonConverter key format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.io.events import read_event_file
from cdclake.model.envelope import ChangeEvent, KafkaCoordinates, parse_value
from cdclake.model.keys import build_key
from tests.conftest import DebeziumFiles

FIXTURES = DebeziumFiles()
FLINK_WITH_SCHEMA = FIXTURES / "flink/debezium-data-schema-include.txt"
FLINK_PAYLOAD_ONLY = FIXTURES / "flink/debezium-data-schema-exclude.txt"
RW_WITH_SCHEMA = FIXTURES / "risingwave/debezium_log.1"
RW_PAYLOAD_ONLY = FIXTURES / "risingwave/debezium_log_no_schema_field.1"

WHERE = KafkaCoordinates("test", 0, 0)


def events(path: Path, value_format: str) -> list[ChangeEvent]:
    return [parse_value(v, value_format, WHERE) for v in read_event_file(path)]


def synthetic(op: str = "c", row: dict | None = None, schema: dict | None = None) -> ChangeEvent:
    """An event of ``db1.orders`` on server ``srv``, with an optional Connect value schema."""
    row = row if row is not None else {"order_id": 7, "line_no": 2, "sku": "A-1", "qty": 3}
    payload = {
        "before": row if op in ("u", "d") else None,
        "after": None if op in ("d", "t") else row,
        "source": {"name": "srv", "db": "db1", "table": "orders", "file": "mysql-bin.000001", "pos": 4},
        "op": op,
    }
    if schema is None:
        return parse_value(json.dumps(payload), "json", WHERE)
    return parse_value(json.dumps({"schema": schema, "payload": payload}), "json_with_schema", WHERE)


ORDERS_SCHEMA = {
    "type": "struct",
    "name": "srv.db1.orders.Envelope",
    "optional": False,
    "fields": [
        {
            "type": "struct",
            "field": "before",
            "optional": True,
            "fields": [
                {"type": "int64", "optional": False, "field": "order_id"},
                {"type": "int16", "optional": False, "field": "line_no"},
                {"type": "string", "optional": True, "field": "sku"},
                {"type": "int32", "optional": True, "field": "qty"},
            ],
        },
    ],
}


# --- captured events ---------------------------------------------------------------------------


def test_flink_with_schema_key_is_debezium_key_exactly():
    event = events(FLINK_WITH_SCHEMA, "json_with_schema")[0]
    assert build_key(event, ("id",), "json_with_schema") == (
        b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],'
        b'"optional":false,"name":"dbserver1.inventory.products.Key"},"payload":{"id":101}}'
    )


def test_flink_payload_only_key_is_bare_payload():
    event = events(FLINK_PAYLOAD_ONLY, "json")[0]
    assert build_key(event, ("id",), "json") == b'{"id":101}'


def test_flink_keys_follow_the_row_of_each_event():
    keys = [build_key(e, ("id",), "json") for e in events(FLINK_PAYLOAD_ONLY, "json")]
    ids = [json.loads(k)["id"] for k in keys]
    assert ids == [101, 102, 103, 104, 105, 106, 107, 108, 109, 106, 107, 110, 111, 110, 111, 111]


def test_delete_key_comes_from_before_image():
    delete = events(FLINK_WITH_SCHEMA, "json_with_schema")[-1]
    assert delete.op == "d" and delete.after is None
    assert json.loads(build_key(delete, ("id",), "json_with_schema"))["payload"] == {"id": 111}
    assert build_key(events(RW_PAYLOAD_ONLY, "json")[-1], ("id",), "json") == b'{"id":1006}'


def test_risingwave_delete_key_with_schema_names_customers_key():
    delete = events(RW_WITH_SCHEMA, "json_with_schema")[-1]
    assert build_key(delete, ("id",), "json_with_schema") == (
        b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],'
        b'"optional":false,"name":"dbserver1.inventory.customers.Key"},"payload":{"id":1006}}'
    )


def test_with_schema_and_payload_only_keys_share_the_payload():
    a = events(RW_WITH_SCHEMA, "json_with_schema")
    b = events(RW_PAYLOAD_ONLY, "json")
    for x, y in zip(a, b, strict=False):
        assert json.loads(build_key(x, ("id",), "json_with_schema"))["payload"] == json.loads(
            build_key(y, ("id",), "json")
        )


# --- composite and synthetic keys --------------------------------------------------------------


def test_composite_key_keeps_primary_key_order_payload_only():
    event = synthetic()
    assert build_key(event, ("line_no", "order_id"), "json") == b'{"line_no":2,"order_id":7}'
    assert build_key(event, ("order_id", "line_no"), "json") == b'{"order_id":7,"line_no":2}'


def test_composite_key_with_schema_takes_field_types_from_row_schema_in_key_order():
    event = synthetic(op="u", schema=ORDERS_SCHEMA)
    assert build_key(event, ("line_no", "order_id"), "json_with_schema") == (
        b'{"schema":{"type":"struct","fields":['
        b'{"type":"int16","optional":false,"field":"line_no"},'
        b'{"type":"int64","optional":false,"field":"order_id"}],'
        b'"optional":false,"name":"srv.db1.orders.Key"},'
        b'"payload":{"line_no":2,"order_id":7}}'
    )


def test_key_field_is_required_even_if_row_schema_marks_it_optional():
    event = synthetic(schema=ORDERS_SCHEMA)
    doc = json.loads(build_key(event, ("sku",), "json_with_schema"))
    assert doc["schema"]["fields"] == [{"type": "string", "optional": False, "field": "sku"}]


def test_a_row_gets_the_same_key_whatever_its_events_schemas_hold():
    with_extras = json.loads(json.dumps(ORDERS_SCHEMA))
    (before,) = with_extras["fields"]
    before["fields"][0].update(
        {"default": 0, "doc": "the order", "parameters": {"__debezium.source.column.length": "20"}}
    )
    plain, extra = synthetic(schema=ORDERS_SCHEMA), synthetic(schema=with_extras)
    assert build_key(plain, ("order_id",), "json_with_schema") == build_key(extra, ("order_id",), "json_with_schema")
    logical = json.loads(json.dumps(ORDERS_SCHEMA))
    logical["fields"][0]["fields"][2].update({"name": "io.debezium.data.Enum", "version": 1, "parameters": {"x": "y"}})
    doc = json.loads(build_key(synthetic(schema=logical), ("sku",), "json_with_schema"))
    assert doc["schema"]["fields"] == [
        {"type": "string", "optional": False, "name": "io.debezium.data.Enum", "version": 1, "field": "sku"}
    ]


def test_key_without_value_schema_infers_connect_types():
    row = {"i": 5, "s": "x", "b": True, "f": 1.5}
    source = {"name": "srv", "db": "db1", "table": "t", "file": "mysql-bin.000001", "pos": 4}
    payload = {"before": None, "after": row, "op": "c", "source": source}
    event = parse_value(json.dumps({"payload": payload}), "json_with_schema", WHERE)
    assert event.value_schema is None
    doc = json.loads(build_key(event, ("i", "s", "b", "f"), "json_with_schema"))
    assert [(f["field"], f["type"]) for f in doc["schema"]["fields"]] == [
        ("i", "int64"),
        ("s", "string"),
        ("b", "boolean"),
        ("f", "double"),
    ]
    assert doc["schema"]["name"] == "srv.db1.t.Key"
    assert doc["payload"] == row


def test_an_event_without_a_schema_gets_the_key_bytes_of_its_neighbours():
    """``cdclake load`` of a file whose one event has ``"schema": null``: its key takes the key
    columns' types from the file's other events (``key_fields``), so the row keeps one key and one
    partition (issue 56: the id became int64 beside int32 keys, and the row landed in two)."""
    from cdclake.model.keys import key_fields

    with_schema = synthetic(schema=ORDERS_SCHEMA)
    row = {"order_id": 7, "line_no": 2, "sku": "A-1", "qty": 3}
    source = {"name": "srv", "db": "db1", "table": "orders", "file": "mysql-bin.000001", "pos": 4}
    payload = {"before": None, "after": row, "source": source, "op": "c"}
    without = parse_value(json.dumps({"schema": None, "payload": payload}), "json_with_schema", WHERE)
    assert without.value_schema is None
    known = key_fields(with_schema)
    key = ("order_id", "line_no")
    assert build_key(without, key, "json_with_schema", known) == build_key(with_schema, key, "json_with_schema")
    assert build_key(without, key, "json_with_schema") != build_key(with_schema, key, "json_with_schema")


def test_non_ascii_key_is_utf8_not_escaped():
    event = synthetic(row={"name": "café"})
    assert build_key(event, ("name",), "json") == '{"name":"café"}'.encode()


def test_truncate_event_has_no_key():
    event = synthetic(op="t")
    assert event.op == "t"
    with pytest.raises(ValueError, match="truncate"):
        build_key(event, ("order_id",), "json")


def test_missing_primary_key_column_raises_naming_it():
    event = events(FLINK_PAYLOAD_ONLY, "json")[0]
    with pytest.raises(ValueError, match=r"\['sku'\]"):
        build_key(event, ("id", "sku"), "json")
