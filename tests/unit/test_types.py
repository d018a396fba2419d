"""Unit tests for :mod:`cdclake.model.types`: Connect field schemas and config columns -> Iceberg columns."""

from __future__ import annotations

import pytest

from cdclake.errors import SchemaError
from cdclake.io.events import read_event_file
from cdclake.model.envelope import KafkaCoordinates, parse_value
from cdclake.model.types import (
    ColumnSpec,
    column_doc,
    column_from_connect,
    columns_from_config,
    columns_from_connect,
    decimal_encoding,
    iceberg_type_of_encoding,
    parse_decimal_encoding,
)
from tests.conftest import DebeziumFiles

FIXTURES = DebeziumFiles()


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
    ("ctype", "semantic", "iceberg"),
    [
        # time.precision.mode=adaptive (TIME(0-3)), adaptive_time_microseconds, connect; all us
        ("int32", "io.debezium.time.Time", "long"),
        ("int64", "io.debezium.time.MicroTime", "long"),
        ("int64", "io.debezium.time.NanoTime", "long"),
        ("int32", "org.apache.kafka.connect.data.Time", "long"),
        ("string", "io.debezium.time.ZonedTime", "string"),
        ("int64", "io.debezium.time.NanoTimestamp", "timestamp"),
        ("int64", "org.apache.kafka.connect.data.Timestamp", "timestamp"),
        ("int32", "org.apache.kafka.connect.data.Date", "date"),
        ("bytes", "io.debezium.data.Bits", "binary"),
        ("struct", "io.debezium.data.VariableScaleDecimal", "string"),
        ("struct", "io.debezium.data.geometry.Geometry", "struct<wkb:binary,srid:int>"),
        ("struct", "io.debezium.data.geometry.Point", "struct<wkb:binary,srid:int>"),
        ("struct", "io.debezium.data.geometry.Geography", "struct<wkb:binary,srid:int>"),
    ],
)
def test_column_from_connect_maps_time_bits_spatial_and_variable_decimal(ctype, semantic, iceberg):
    spec = column_from_connect(field(ctype, "col", semantic=semantic))
    assert spec == ColumnSpec("col", iceberg, False, semantic)
    assert iceberg_type_of_encoding(spec.encoding) == iceberg


def decimal_field(precision: str | None, scale: str | None, name: str = "price", optional: bool = True) -> dict:
    f = field("bytes", name, optional, "org.apache.kafka.connect.data.Decimal")
    f["parameters"] = {k: v for k, v in (("scale", scale), ("connect.decimal.precision", precision)) if v is not None}
    return f


@pytest.mark.parametrize(
    ("precision", "scale", "iceberg", "encoding"),
    [
        ("8", "4", "decimal(8,4)", "org.apache.kafka.connect.data.Decimal(8,4)"),
        ("6", "0", "decimal(6,0)", "org.apache.kafka.connect.data.Decimal(6,0)"),
        # bigint.unsigned.handling.mode=precise: BIGINT UNSIGNED and SERIAL
        ("20", "0", "decimal(20,0)", "org.apache.kafka.connect.data.Decimal(20,0)"),
        ("38", "10", "decimal(38,10)", "org.apache.kafka.connect.data.Decimal(38,10)"),
        # wider than any Iceberg decimal: exact decimal text
        ("39", "0", "string", "org.apache.kafka.connect.data.Decimal(39,0)"),
        ("65", "1", "string", "org.apache.kafka.connect.data.Decimal(65,1)"),
        ("65", "30", "string", "org.apache.kafka.connect.data.Decimal(65,30)"),
    ],
)
def test_decimal_maps_by_precision_and_encoding_carries_precision_and_scale(precision, scale, iceberg, encoding):
    spec = column_from_connect(decimal_field(precision, scale))
    assert spec == ColumnSpec("price", iceberg, False, encoding)
    assert iceberg_type_of_encoding(encoding) == iceberg
    assert parse_decimal_encoding(encoding) == (int(precision), int(scale))


@pytest.mark.parametrize(
    ("scale", "source_type", "iceberg", "precision"),
    [
        # Debezium 1.x, bigint.unsigned.handling.mode=precise: BIGINT UNSIGNED without a precision
        ("0", None, "decimal(38,0)", 38),
        ("0", "BIGINT UNSIGNED", "decimal(20,0)", 20),
        ("0", "BIGINT UNSIGNED ZEROFILL", "decimal(20,0)", 20),
        ("0", "SERIAL", "decimal(20,0)", 20),
        ("0", "DECIMAL", "decimal(38,0)", 38),
        ("2", None, "decimal(38,2)", 38),
        ("38", None, "decimal(38,38)", 38),
        ("39", None, "string", None),  # no Iceberg decimal has that scale: exact text
    ],
)
def test_decimal_without_precision_is_a_decimal_wide_enough_for_its_source_type(scale, source_type, iceberg, precision):
    f = decimal_field(None, scale)
    if source_type is not None:
        f["parameters"]["__debezium.source.column.type"] = source_type  # column.propagate.source.type
    spec = column_from_connect(f)
    assert spec == ColumnSpec("price", iceberg, False, decimal_encoding(precision, int(scale)))
    assert iceberg_type_of_encoding(spec.encoding) == iceberg


def test_bigint_unsigned_as_int64_is_recorded_unsigned_when_the_source_type_says_so():
    f = field("int64", "n")
    assert column_from_connect(f) == ColumnSpec("n", "long", False, "int64")
    f["parameters"] = {"__debezium.source.column.type": "BIGINT UNSIGNED"}
    assert column_from_connect(f) == ColumnSpec("n", "long", False, "int64(unsigned)")
    assert iceberg_type_of_encoding("int64(unsigned)") == "long"


def test_decimal_encoding_round_trips_and_other_encodings_are_not_decimals():
    assert decimal_encoding(65, 30) == "org.apache.kafka.connect.data.Decimal(65,30)"
    assert parse_decimal_encoding(decimal_encoding(None, 3)) == (None, 3)
    for other in ("string", "bytes", "org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal"):
        assert parse_decimal_encoding(other) is None


@pytest.mark.parametrize(
    ("encoding", "iceberg"),
    [
        ("int16", "int"),
        ("int64", "long"),
        ("bytes", "binary"),
        ("io.debezium.time.Date", "date"),
        ("io.debezium.time.MicroTimestamp", "timestamp"),
        ("io.debezium.time.ZonedTimestamp", "timestamptz"),
        ("io.debezium.data.Json", "string"),
        # a Decimal without a precision, before such columns became decimals: exact text
        ("org.apache.kafka.connect.data.Decimal(,0)", "string"),
    ],
)
def test_encodings_stored_by_earlier_versions_still_map(encoding, iceberg):
    assert iceberg_type_of_encoding(encoding) == iceberg


@pytest.mark.parametrize(
    "parameters",
    [None, {}, {"connect.decimal.precision": "10"}, {"scale": "two"}, {"scale": "2", "connect.decimal.precision": "x"}],
)
def test_decimal_without_integer_scale_raises_naming_column(parameters):
    f = field("bytes", "price", semantic="org.apache.kafka.connect.data.Decimal")
    if parameters is not None:
        f["parameters"] = parameters
    with pytest.raises(SchemaError, match="column 'price': org.apache.kafka.connect.data.Decimal needs"):
        column_from_connect(f)


@pytest.mark.parametrize(
    ("ctype", "semantic"),
    [
        ("string", "org.apache.kafka.connect.data.Decimal"),
        ("string", "io.debezium.time.MicroTime"),
        ("boolean", "io.debezium.data.Bits"),
        ("string", "io.debezium.data.geometry.Point"),
        ("int64", "io.debezium.time.Date"),
    ],
)
def test_semantic_type_on_wrong_connect_type_raises_naming_column_and_both_types(ctype, semantic):
    f = field(ctype, "price", semantic=semantic)
    if semantic.endswith("Decimal"):
        f["parameters"] = {"scale": "2"}
    with pytest.raises(SchemaError) as excinfo:
        column_from_connect(f)
    msg = str(excinfo.value)
    assert "'price'" in msg and semantic in msg and repr(ctype) in msg


@pytest.mark.parametrize(
    ("ctype", "semantic"),
    [
        ("string", "io.debezium.time.IsoDate"),
        ("array", "io.debezium.data.FloatVector"),
        ("string", "io.debezium.data.Uuid"),
        ("string", "com.example.Custom"),
    ],
)
def test_unsupported_semantic_type_raises_naming_column_and_type(ctype, semantic):
    f = field(ctype, "price", semantic=semantic)
    with pytest.raises(SchemaError) as excinfo:
        column_from_connect(f)
    msg = str(excinfo.value)
    assert "'price'" in msg
    assert semantic in msg


def test_unknown_stored_encoding_raises():
    with pytest.raises(SchemaError, match="unknown column encoding 'io.debezium.time.IsoDate'"):
        iceberg_type_of_encoding("io.debezium.time.IsoDate")


@pytest.mark.parametrize(
    ("encoding", "needle"),
    [
        ("io.debezium.time.MicroTime", "microseconds"),
        ("io.debezium.time.Time", "microseconds"),
        ("org.apache.kafka.connect.data.Time", "microseconds"),
        ("io.debezium.data.Bits", "big-endian"),
        ("org.apache.kafka.connect.data.Decimal(65,1)", "DECIMAL(65,1) as exact decimal text with 1 fraction digits"),
        ("io.debezium.data.VariableScaleDecimal", "exact decimal text"),
        ("io.debezium.data.geometry.Point", "WKB and SRID"),
    ],
)
def test_column_doc_states_unit_or_form_where_the_type_does_not(encoding, needle):
    assert needle in column_doc(encoding)


@pytest.mark.parametrize("encoding", ["int32", "org.apache.kafka.connect.data.Decimal(10,2)", "io.debezium.time.Date"])
def test_column_doc_is_none_where_the_iceberg_type_says_it_all(encoding):
    assert column_doc(encoding) is None


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
    value = read_event_file(FIXTURES / "flink/debezium-data-schema-include.txt")[0]
    event = parse_value(value, "json_with_schema", KafkaCoordinates("t", 0, 0))
    assert columns_from_connect(event.row_schema()) == [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("name", "string", True, "string"),
        ColumnSpec("description", "string", False, "string"),
        ColumnSpec("weight", "double", False, "double"),
    ]


def test_columns_from_connect_maps_risingwave_customers_row_schema():
    value = read_event_file(FIXTURES / "risingwave/debezium_log.1")[0]
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


def test_columns_from_config_decimal_is_a_connect_decimal_of_that_precision_and_scale():
    specs = columns_from_config({"id": "int", "price": "decimal(10, 2)", "huge": "decimal(65,30)"}, ("id",))
    assert specs[1:] == [
        ColumnSpec("price", "decimal(10,2)", False, "org.apache.kafka.connect.data.Decimal(10,2)"),
        ColumnSpec("huge", "string", False, "org.apache.kafka.connect.data.Decimal(65,30)"),
    ]


def test_columns_from_config_rejects_type_without_encoding_naming_the_column():
    with pytest.raises(SchemaError) as excinfo:
        columns_from_config({"id": "int", "at": "time"}, ("id",))
    msg = str(excinfo.value)
    assert "'at'" in msg
    assert "'time'" in msg
    assert "json_with_schema" in msg


# --- the flink-cdc all-types capture --------------------------------------------------------------


def test_columns_from_connect_maps_flink_cdc_full_types_schema():
    """The all-types table of flink-cdc's column_type_test.sql, with the Connect schema Debezium
    gives it (tests/full_types.py: the fixture's own schema is stale)."""
    from tests.full_types import FULL_TYPES_ROW_SCHEMA

    specs = {s.name: s for s in columns_from_connect(FULL_TYPES_ROW_SCHEMA)}
    assert specs["id"] == ColumnSpec("id", "decimal(20,0)", True, "org.apache.kafka.connect.data.Decimal(20,0)")
    assert specs["big_un_c"].iceberg_type == "decimal(20,0)"
    assert specs["decimal_c"].iceberg_type == "decimal(8,4)"
    assert specs["big_decimal_c"] == ColumnSpec(
        "big_decimal_c", "string", False, "org.apache.kafka.connect.data.Decimal(65,1)"
    )
    assert specs["time_c"] == ColumnSpec("time_c", "long", False, "io.debezium.time.MicroTime")
    assert specs["bit_c"] == ColumnSpec("bit_c", "binary", False, "io.debezium.data.Bits")
    assert specs["bit1_c"].iceberg_type == "boolean"
    assert {specs[c].iceberg_type for c in ("point_c", "geometry_c", "geometrycollection_c")} == {
        "struct<wkb:binary,srid:int>"
    }
    assert len(specs) == 59
