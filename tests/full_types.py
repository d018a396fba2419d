"""The all-types table of flink-cdc's ``column_type_test.sql`` (fixtures ``flink-cdc/``): the
Connect schema Debezium gives its columns, and the values its DML implies.

The ``schema`` parts of ``flink-cdc/debezium-data-schema-include.json`` are stale (fixture README:
48 fields against 59 in the payloads, ``id`` as int32, spatial columns as strings), so the schema
is built here from the DDL, with the Debezium MySQL connector's data type mappings and the modes
the payloads show: ``decimal.handling.mode=precise``, ``bigint.unsigned.handling.mode=precise``
(``"big_un_c":"AP//////////"``), ``time.precision.mode=adaptive_time_microseconds``
(``"time_c":64822000000``), ``binary.handling.mode=bytes``.
"""

from __future__ import annotations

import datetime
import json
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _f(name: str, ctype: str, *, optional: bool = True, semantic: str | None = None, **extra: Any) -> dict:
    field: dict[str, Any] = {"type": ctype, "optional": optional, "field": name}
    if semantic:
        field["name"] = semantic
        field["version"] = 1
    field.update(extra)
    return field


def _decimal(name: str, precision: int, scale: int, *, optional: bool = True) -> dict:
    return _f(
        name,
        "bytes",
        optional=optional,
        semantic=DECIMAL,
        parameters={"scale": str(scale), "connect.decimal.precision": str(precision)},
    )


def _geometry(name: str) -> dict:
    return _f(
        name,
        "struct",
        semantic="io.debezium.data.geometry.Geometry",
        fields=[
            {"type": "bytes", "optional": False, "field": "wkb"},
            {"type": "int32", "optional": True, "field": "srid"},
        ],
    )


FULL_TYPES_ROW_SCHEMA: dict[str, Any] = {
    "type": "struct",
    "optional": True,
    "name": "mysql_binlog_source.column_type_test.full_types.Value",
    "field": "after",
    "fields": [
        _decimal("id", 20, 0, optional=False),  # SERIAL = BIGINT UNSIGNED NOT NULL
        _f("tiny_c", "int16"),
        _f("tiny_un_c", "int16"),
        _f("tiny_un_z_c", "int16"),
        _f("small_c", "int16"),
        _f("small_un_c", "int32"),
        _f("small_un_z_c", "int32"),
        _f("medium_c", "int32"),
        _f("medium_un_c", "int32"),
        _f("medium_un_z_c", "int32"),
        _f("int_c", "int32"),
        _f("int_un_c", "int64"),
        _f("int_un_z_c", "int64"),
        _f("int11_c", "int32"),
        _f("big_c", "int64"),
        _decimal("big_un_c", 20, 0),
        _decimal("big_un_z_c", 20, 0),
        _f("varchar_c", "string"),
        _f("char_c", "string"),
        _f("real_c", "float"),  # Debezium docs: REAL -> FLOAT32
        _f("float_c", "double"),  # FLOAT -> FLOAT64 (Debezium 1.x)
        _f("float_un_c", "double"),
        _f("float_un_z_c", "double"),
        _f("double_c", "double"),
        _f("double_un_c", "double"),
        _f("double_un_z_c", "double"),
        _decimal("decimal_c", 8, 4),
        _decimal("decimal_un_c", 8, 4),
        _decimal("decimal_un_z_c", 8, 4),
        _decimal("numeric_c", 6, 0),
        _decimal("big_decimal_c", 65, 1),
        _f("bit1_c", "boolean"),
        _f("tiny1_c", "int16"),
        _f("boolean_c", "int16"),  # BOOLEAN is TINYINT(1): the payload holds 1, not true
        _f("date_c", "int32", semantic="io.debezium.time.Date"),
        _f("time_c", "int64", semantic="io.debezium.time.MicroTime"),
        _f("datetime3_c", "int64", semantic="io.debezium.time.Timestamp"),
        _f("datetime6_c", "int64", semantic="io.debezium.time.MicroTimestamp"),
        _f(
            "timestamp_c",
            "string",
            optional=False,
            semantic="io.debezium.time.ZonedTimestamp",
            default="1970-01-01T00:00:00Z",
        ),
        _f("file_uuid", "bytes"),
        _f("bit_c", "bytes", semantic="io.debezium.data.Bits", parameters={"length": "64"}),
        _f("text_c", "string"),
        _f("tiny_blob_c", "bytes"),
        _f("blob_c", "bytes"),
        _f("medium_blob_c", "bytes"),
        _f("long_blob_c", "bytes"),
        _f("year_c", "int32", semantic="io.debezium.time.Year"),
        _f("enum_c", "string", semantic="io.debezium.data.Enum", parameters={"allowed": "red,white"}, default="red"),
        _f("set_c", "string", semantic="io.debezium.data.EnumSet", parameters={"allowed": "a,b"}),
        _f("json_c", "string", semantic="io.debezium.data.Json"),
        _f(
            "point_c",
            "struct",
            semantic="io.debezium.data.geometry.Point",
            fields=[
                {"type": "double", "optional": False, "field": "x"},
                {"type": "double", "optional": False, "field": "y"},
                {"type": "bytes", "optional": True, "field": "wkb"},
                {"type": "int32", "optional": True, "field": "srid"},
            ],
        ),
        _geometry("geometry_c"),
        _geometry("linestring_c"),
        _geometry("polygon_c"),
        _geometry("multipoint_c"),
        _geometry("multiline_c"),
        _geometry("multipolygon_c"),
        _geometry("geometrycollection_c"),
        _f("varchar_len0_c", "string"),
    ],
}
"""The ``after``/``before`` struct schema of ``column_type_test.full_types``."""


def value_schema() -> dict[str, Any]:
    """The envelope's value schema around :data:`FULL_TYPES_ROW_SCHEMA` (the parts the apply job
    reads: before, after, source, op, ts_ms)."""
    before = dict(FULL_TYPES_ROW_SCHEMA, field="before")
    return {
        "type": "struct",
        "optional": False,
        "name": "mysql_binlog_source.column_type_test.full_types.Envelope",
        "fields": [
            before,
            FULL_TYPES_ROW_SCHEMA,
            {
                "type": "struct",
                "optional": False,
                "field": "source",
                "name": "io.debezium.connector.mysql.Source",
                "fields": [
                    {"type": "string", "optional": False, "field": "connector"},
                    {"type": "string", "optional": False, "field": "name"},
                    {"type": "int64", "optional": False, "field": "ts_ms"},
                    {"type": "string", "optional": True, "field": "snapshot"},
                    {"type": "string", "optional": False, "field": "db"},
                    {"type": "string", "optional": True, "field": "table"},
                    {"type": "int64", "optional": False, "field": "server_id"},
                    {"type": "string", "optional": True, "field": "gtid"},
                    {"type": "string", "optional": False, "field": "file"},
                    {"type": "int64", "optional": False, "field": "pos"},
                    {"type": "int32", "optional": False, "field": "row"},
                ],
            },
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def events_with_schema(fixtures_dir: Path, payload_file: str) -> list[bytes]:
    """The two events of ``flink-cdc/<payload_file>`` (``expected_snapshot``, ``expected_binlog``)
    as JsonConverter values with :func:`value_schema`.

    The NUMERIC-decimal file's payloads have no ``source`` and ``ts_ms`` (flink-cdc's test strips
    them); they are taken from the same event of ``debezium-data-schema-include.json``.
    """
    events = json.loads((fixtures_dir / "flink-cdc" / payload_file).read_text())
    with_source = json.loads((fixtures_dir / "flink-cdc" / "debezium-data-schema-include.json").read_text())
    out = []
    for name in ("expected_snapshot", "expected_binlog"):
        payload = events[name].get("payload", events[name])
        complete = with_source[name]["payload"]
        payload = dict(payload, source=complete["source"], ts_ms=complete["ts_ms"])
        out.append(json.dumps({"schema": value_schema(), "payload": payload}).encode())
    return out


# --- the values the DML implies --------------------------------------------------------------------


def _wkb(kind: int, body: bytes) -> bytes:
    return struct.pack("<BI", 1, kind) + body  # MySQL writes WKB little-endian (byte order 1)


def _points(*xy: tuple[float, float]) -> bytes:
    return struct.pack("<I", len(xy)) + b"".join(struct.pack("<dd", x, y) for x, y in xy)


def wkb_point(x: float, y: float) -> bytes:
    return _wkb(1, struct.pack("<dd", x, y))


def wkb_linestring(*xy: tuple[float, float]) -> bytes:
    return _wkb(2, _points(*xy))


def wkb_polygon(*rings: tuple[tuple[float, float], ...]) -> bytes:
    return _wkb(3, struct.pack("<I", len(rings)) + b"".join(_points(*r) for r in rings))


def _collection(kind: int, *members: bytes) -> bytes:
    return _wkb(kind, struct.pack("<I", len(members)) + b"".join(members))


_SQUARE = ((1, 1), (2, 1), (2, 2), (1, 2), (1, 1))

EXPECTED_ROW: dict[str, Any] = {
    "id": Decimal(1),
    "tiny_c": 127,
    "tiny_un_c": 255,
    "tiny_un_z_c": 255,
    "small_c": 32767,
    "small_un_c": 65535,
    "small_un_z_c": 65535,
    "medium_c": 8388607,
    "medium_un_c": 16777215,
    "medium_un_z_c": 16777215,
    "int_c": 2147483647,
    "int_un_c": 4294967295,
    "int_un_z_c": 4294967295,
    "int11_c": 2147483647,
    "big_c": 9223372036854775807,
    "big_un_c": Decimal(18446744073709551615),
    "big_un_z_c": Decimal(18446744073709551615),
    "varchar_c": "Hello World",
    "char_c": "abc",
    # REAL is a DOUBLE in MySQL, but Debezium declares it FLOAT32: the float nearest 123.102
    "real_c": struct.unpack("<f", struct.pack("<f", 123.102))[0],
    "float_c": 123.102,
    "float_un_c": 123.103,
    "float_un_z_c": 123.104,
    "double_c": 404.4443,
    "double_un_c": 404.4444,
    "double_un_z_c": 404.4445,
    "decimal_c": Decimal("123.4567"),
    "decimal_un_c": Decimal("123.4568"),
    "decimal_un_z_c": Decimal("123.4569"),
    "numeric_c": Decimal(346),  # 345.6 into NUMERIC(6,0): MySQL rounds
    "big_decimal_c": "34567892.1",
    "bit1_c": False,
    "tiny1_c": 1,
    "boolean_c": 1,
    "date_c": datetime.date(2020, 7, 17),
    "time_c": (18 * 3600 + 22) * 1_000_000,  # TIME '18:00:22' in microseconds
    "datetime3_c": datetime.datetime(2020, 7, 17, 18, 0, 22, 123000),
    "datetime6_c": datetime.datetime(2020, 7, 17, 18, 0, 22, 123456),
    "timestamp_c": datetime.datetime(2020, 7, 17, 18, 0, 22, tzinfo=datetime.timezone.utc),
    "file_uuid": bytes.fromhex("651aed08390f4893b2f136923e7b7400"),
    "bit_c": int("0000010000000100000001000000010000000100000001000000010000000100", 2).to_bytes(8, "big"),
    "text_c": "text",
    # UNHEX(HEX(16)): HEX(16) is '10'
    "tiny_blob_c": b"\x10",
    "blob_c": b"\x10",
    "medium_blob_c": b"\x10",
    "long_blob_c": b"\x10",
    "year_c": 2021,
    "enum_c": "red",
    "set_c": "a,b",  # 'a,b,a': a SET holds each member once
    "json_c": {"key1": "value1"},  # compared as JSON
    "point_c": {"wkb": wkb_point(1, 1), "srid": None},
    "geometry_c": {"wkb": wkb_polygon(_SQUARE), "srid": None},
    "linestring_c": {"wkb": wkb_linestring((3, 0), (3, 3), (3, 5)), "srid": None},
    "polygon_c": {"wkb": wkb_polygon(_SQUARE), "srid": None},
    "multipoint_c": {"wkb": _collection(4, wkb_point(1, 1), wkb_point(2, 2)), "srid": None},
    "multiline_c": {
        "wkb": _collection(5, wkb_linestring((1, 1), (2, 2), (3, 3)), wkb_linestring((4, 4), (5, 5))),
        "srid": None,
    },
    "multipolygon_c": {
        "wkb": _collection(
            6,
            wkb_polygon(((0, 0), (10, 0), (10, 10), (0, 10), (0, 0))),
            wkb_polygon(((5, 5), (7, 5), (7, 7), (5, 7), (5, 5))),
        ),
        "srid": None,
    },
    "geometrycollection_c": {
        "wkb": _collection(7, wkb_point(10, 10), wkb_point(30, 30), wkb_linestring((15, 15), (20, 20))),
        "srid": None,
    },
    "varchar_len0_c": "",
}
"""The row ``INSERT INTO full_types VALUES (...)`` of ``column_type_test.sql`` writes, as the
Iceberg table holds it (pyarrow values). flink-cdc's binlog event then sets ``timestamp_c`` to
``2020-07-17 18:33:22`` (:data:`BINLOG_TIMESTAMP`)."""

BINLOG_TIMESTAMP = datetime.datetime(2020, 7, 17, 18, 33, 22, tzinfo=datetime.timezone.utc)
