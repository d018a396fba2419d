"""Unit tests for :mod:`cdclake.types`: Connect field schemas and config columns -> Iceberg columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.envelope import KafkaCoordinates, parse_value
from cdclake.errors import SchemaError
from cdclake.kafka_io import read_event_file
from cdclake.types import ColumnSpec, column_from_connect, columns_from_config, columns_from_connect

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "debezium"


def field(ctype: str, name: str = "c", optional: bool = True, semantic: str | None = None) -> dict:
    f = {"type": ctype, "optional": optional, "field": name}
    if semantic:
        f["name"] = semantic
        f["version"] = 1
    return f


# --- column_from_connect: primitives -----------------------------------------------------------


@pytest.mark.parametrize(
    ("ctype", "iceberg"),
    [
        ("int8", "int"),
        ("int16", "int"),
        ("int32", "int"),
        ("int64", "long"),
        ("string", "string"),
        ("double", "double"),
        ("float", "float"),
        ("boolean", "boolean"),
        ("bytes", "binary"),
    ],
)
def test_column_from_connect_maps_primitive_type(ctype, iceberg):
    assert column_from_connect(field(ctype, "col")) == ColumnSpec("col", iceberg, False, ctype)


# --- column_from_connect: semantic types -------------------------------------------------------


@pytest.mark.parametrize(
    ("ctype", "semantic", "iceberg"),
    [
        ("int32", "io.debezium.time.Date", "date"),
        ("int64", "io.debezium.time.Timestamp", "timestamp"),
        ("int64", "io.debezium.time.MicroTimestamp", "timestamp"),
        ("string", "io.debezium.time.ZonedTimestamp", "timestamptz"),
        ("int32", "io.debezium.time.Year", "int"),
        ("string", "io.debezium.data.Enum", "string"),
        ("string", "io.debezium.data.EnumSet", "string"),
        ("string", "io.debezium.data.Json", "string"),
    ],
)
def test_column_from_connect_maps_semantic_type_and_encodes_by_it(ctype, semantic, iceberg):
    spec = column_from_connect(field(ctype, "col", semantic=semantic))
    assert spec == ColumnSpec("col", iceberg, False, semantic)


def test_optional_false_makes_column_required():
    assert column_from_connect(field("int32", "id", optional=False)).required is True
    assert column_from_connect(field("int32", "id", optional=True)).required is False


@pytest.mark.parametrize(
    ("ctype", "semantic"),
    [
        ("bytes", "org.apache.kafka.connect.data.Decimal"),
        ("int64", "io.debezium.time.MicroTime"),
        ("boolean", "io.debezium.data.Bits"),
        ("struct", "io.debezium.data.geometry.Point"),
    ],
)
def test_unsupported_semantic_type_raises_naming_column_and_type(ctype, semantic):
    f = field(ctype, "price", semantic=semantic)
    with pytest.raises(SchemaError) as excinfo:
        column_from_connect(f)
    msg = str(excinfo.value)
    assert "'price'" in msg
    assert semantic in msg


@pytest.mark.parametrize("ctype", ["struct", "array", "map", "int128"])
def test_unsupported_connect_type_raises_naming_column(ctype):
    with pytest.raises(SchemaError, match=rf"column 'tags': Connect type '{ctype}'"):
        column_from_connect(field(ctype, "tags"))


@pytest.mark.parametrize("broken", [{"type": "int32"}, {"field": "id"}, {"field": 1, "type": "int32"}])
def test_field_without_name_or_type_raises(broken):
    with pytest.raises(SchemaError, match="without 'field' or 'type'"):
        column_from_connect(broken)


# --- columns_from_connect on a captured schema --------------------------------------------------


def test_columns_from_connect_maps_flink_products_row_schema():
    value = read_event_file(FIXTURES / "flink" / "debezium-data-schema-include.txt")[0]
    event = parse_value(value, "json_with_schema", KafkaCoordinates("t", 0, 0))
    assert columns_from_connect(event.row_schema()) == [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("name", "string", True, "string"),
        ColumnSpec("description", "string", False, "string"),
        ColumnSpec("weight", "double", False, "double"),
    ]


def test_columns_from_connect_maps_risingwave_customers_row_schema():
    value = read_event_file(FIXTURES / "risingwave" / "debezium_log.1")[0]
    event = parse_value(value, "json_with_schema", KafkaCoordinates("t", 0, 0))
    specs = columns_from_connect(event.row_schema())
    assert [(s.name, s.iceberg_type, s.required) for s in specs] == [
        ("id", "int", True),
        ("first_name", "string", True),
        ("last_name", "string", True),
        ("email", "string", True),
    ]


# --- columns_from_config -------------------------------------------------------------------------


def test_columns_from_config_marks_primary_key_required_and_assumes_encodings():
    specs = columns_from_config(
        {
            "id": "long",
            "name": "string",
            "born": "date",
            "updated": "timestamp",
            "seen": "timestamptz",
            "photo": "binary",
            "score": "float",
            "ok": "boolean",
            "n": "int",
            "w": "double",
        },
        ("id",),
    )
    assert specs == [
        ColumnSpec("id", "long", True, "int64"),
        ColumnSpec("name", "string", False, "string"),
        ColumnSpec("born", "date", False, "io.debezium.time.Date"),
        ColumnSpec("updated", "timestamp", False, "io.debezium.time.MicroTimestamp"),
        ColumnSpec("seen", "timestamptz", False, "io.debezium.time.ZonedTimestamp"),
        ColumnSpec("photo", "binary", False, "bytes"),
        ColumnSpec("score", "float", False, "float"),
        ColumnSpec("ok", "boolean", False, "boolean"),
        ColumnSpec("n", "int", False, "int32"),
        ColumnSpec("w", "double", False, "double"),
    ]


def test_columns_from_config_composite_key_columns_are_all_required():
    specs = columns_from_config({"a": "int", "b": "string", "c": "string"}, ("b", "a"))
    assert [(s.name, s.required) for s in specs] == [("a", True), ("b", True), ("c", False)]


def test_columns_from_config_rejects_decimal_naming_the_column():
    with pytest.raises(SchemaError) as excinfo:
        columns_from_config({"id": "int", "price": "decimal(10,2)"}, ("id",))
    msg = str(excinfo.value)
    assert "'price'" in msg
    assert "'decimal(10,2)'" in msg
    assert "json_with_schema" in msg
