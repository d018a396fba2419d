"""One MariaDB column, several writer schemas: every pair of encodings the table takes
(:func:`cdclake.model.interchange.conversion`, generated from the type map) decodes to the Iceberg
value of the table's own encoding, in Avro and in JSON with schema; a pair it does not take is a
bad record naming both encodings.

The case that failed on the real chain: MariaDB's JSON column is ``io.debezium.data.Json`` in the
writer schemas of the binlog and plain ``string`` in those of a snapshot, and every record of the
other schema was quarantined."""

from __future__ import annotations

import base64
import datetime
import itertools
import json
from typing import Any

import pytest

from cdclake.model.interchange import DAY_ENCODINGS, TEXT_ENCODINGS, TIME_UNITS, TIMESTAMP_UNITS, conversion
from cdclake.model.types import SPATIAL_ENCODINGS, UNSIGNED_INT64, columns_from_connect, decimal_encoding
from cdclake.spark.parse import parse_records
from cdclake.spark.parse_avro import parse_avro_records
from tests.avro_events import avro_event
from tests.full_types import wkb_point

pytestmark = pytest.mark.integration

DECIMAL = "org.apache.kafka.connect.data.Decimal"
_WKB = base64.b64encode(wkb_point(1.5, -2.5)).decode()
_MS = 1700000000123  # 2023-11-14 22:13:20.123, the DATETIME's value in milliseconds
_TIME_MS = 45296789  # 12:34:56.789


def _field(name: str, encoding: str) -> dict[str, Any]:
    """The Connect field Debezium writes for a column of ``encoding``."""
    field: dict[str, Any] = {"field": name, "optional": True}
    if encoding.startswith(DECIMAL):
        precision, scale = encoding[len(DECIMAL) + 1 : -1].split(",")
        return {
            **field,
            "type": "bytes",
            "name": DECIMAL,
            "version": 1,
            "parameters": {"scale": scale, "connect.decimal.precision": precision},
        }
    if encoding == UNSIGNED_INT64:
        return {**field, "type": "int64", "parameters": {"__debezium.source.column.type": "BIGINT UNSIGNED"}}
    if encoding in SPATIAL_ENCODINGS:
        xy = (
            [{"field": c, "type": "double", "optional": False} for c in ("x", "y")]
            if encoding.endswith("Point")
            else []
        )
        parts = [
            *xy,
            {"field": "wkb", "type": "bytes", "optional": True},
            {"field": "srid", "type": "int32", "optional": True},
        ]
        return {**field, "type": "struct", "name": encoding, "version": 1, "fields": parts}
    connect_type = {
        **{e: "string" for e in TEXT_ENCODINGS},
        **{e: "int32" for e in DAY_ENCODINGS},
        **{e: "int64" for e in TIMESTAMP_UNITS},
        **{e: "int64" for e in TIME_UNITS},
        "io.debezium.time.Time": "int32",
        "org.apache.kafka.connect.data.Time": "int32",
        "io.debezium.time.Year": "int32",
        "io.debezium.data.Bits": "bytes",
    }.get(encoding, encoding)
    field["type"] = connect_type
    if connect_type != encoding:
        field.update(name=encoding, version=1)
        if encoding in ("io.debezium.data.Enum", "io.debezium.data.EnumSet"):
            field["parameters"] = {"allowed": "a,b,c"}
    return field


def _value(encoding: str) -> Any:
    """The JSON value of one MariaDB value under ``encoding`` (the same value for every encoding of
    a family, in that encoding's unit)."""
    if encoding.startswith(DECIMAL):
        return base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode()  # 123.45
    if encoding in TEXT_ENCODINGS:
        return '{"k": [1, "ünï"]}'
    if encoding in DAY_ENCODINGS:
        return 19675
    if encoding in TIMESTAMP_UNITS:
        return _MS * 10 ** (TIMESTAMP_UNITS[encoding] - 3)
    if encoding in TIME_UNITS:
        return _TIME_MS * 10 ** (TIME_UNITS[encoding] - 3)
    if encoding in SPATIAL_ENCODINGS:
        xy = {"x": 1.5, "y": -2.5} if encoding.endswith("Point") else {}
        return {**xy, "wkb": _WKB, "srid": 4326}
    if encoding in ("bytes", "io.debezium.data.Bits"):
        return base64.b64encode(b"\x01\x02").decode()
    if encoding in ("float", "float32", "double", "float64"):
        return 1.5
    return 99  # integers and YEAR


FAMILIES = [
    TEXT_ENCODINGS,
    DAY_ENCODINGS,
    SPATIAL_ENCODINGS,
    frozenset(TIMESTAMP_UNITS),
    frozenset(TIME_UNITS),
    frozenset({"int8", "int16", "int32", "io.debezium.time.Year", "int64", UNSIGNED_INT64}),
    frozenset({"float", "double"}),
    frozenset({decimal_encoding(10, 2), decimal_encoding(12, 2)}),
]
PAIRS = [
    (writer, table)
    for family in FAMILIES
    for writer, table in itertools.permutations(sorted(family), 2)
    if conversion(writer, table) is not None
]
"""Every (writer encoding, table encoding) pair of one family that the table takes."""
REFUSED = [
    ("io.debezium.data.Bits", "bytes"),
    ("io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp"),
    ("double", decimal_encoding(10, 2)),
]


def _envelope(fields: list[dict[str, Any]], values: dict[str, Any]) -> dict[str, Any]:
    row = {"type": "struct", "optional": True, "name": "srv.db.tbl.Value", "fields": fields}
    source = {
        "type": "struct",
        "optional": False,
        "field": "source",
        "name": "io.debezium.connector.mariadb.Source",
        "fields": [
            {"field": "connector", "type": "string", "optional": False},
            {"field": "file", "type": "string", "optional": False},
            {"field": "pos", "type": "int64", "optional": False},
            {"field": "row", "type": "int32", "optional": False},
            {"field": "snapshot", "type": "string", "optional": True},
        ],
    }
    schema = {
        "type": "struct",
        "optional": False,
        "name": "srv.db.tbl.Envelope",
        "fields": [
            dict(row, field="before"),
            dict(row, field="after"),
            source,
            {"field": "op", "type": "string", "optional": False},
        ],
    }
    payload = {
        "before": None,
        "after": values,
        "source": {"connector": "mariadb", "file": "mysql-bin.000001", "pos": 100, "row": 0, "snapshot": "false"},
        "op": "c",
    }
    return {"schema": schema, "payload": payload}


def _raw(spark, values: list[bytes]):
    return spark.createDataFrame(
        [("t", 0, i, datetime.datetime(2026, 1, 1), b"k", v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )


@pytest.fixture(scope="module")
def cases():
    """The table (a column per pair, of the pair's table encoding), the event under the table's
    own encodings, and the event under the writers' encodings."""
    pairs = PAIRS + REFUSED
    names = [f"c{i}" for i in range(len(pairs))]
    id_field = {"field": "id", "type": "int32", "optional": False}
    table_fields = [id_field] + [_field(n, t) for n, (_, t) in zip(names, pairs, strict=True)]
    writer_fields = [id_field] + [_field(n, w) for n, (w, _) in zip(names, pairs, strict=True)]
    table_event = _envelope(table_fields, {"id": 1, **{n: _value(t) for n, (_, t) in zip(names, pairs, strict=True)}})
    writer_event = _envelope(writer_fields, {"id": 1, **{n: _value(w) for n, (w, _) in zip(names, pairs, strict=True)}})
    return names, pairs, columns_from_connect({"fields": table_fields}), table_event, writer_event


def test_every_pair_the_table_takes_decodes_to_the_table_encodings_value(spark, cases):
    names, pairs, columns, table_event, writer_event = cases
    refused = {n for n, p in zip(names, pairs, strict=True) if p in REFUSED}
    taken = [n for n in names if n not in refused]
    # the reference: the value written under the table's own encoding (JSON with schema)
    expected = parse_records(
        _raw(spark, [json.dumps(table_event).encode()]), "json_with_schema", columns, ("id",)
    ).collect()[0]
    assert expected["error"] is None
    # the writer's encodings in Avro: one schema id per record, the refused columns null in the first
    schema, value = avro_event(5, writer_event)
    only_taken = json.loads(json.dumps(writer_event))
    only_taken["payload"]["after"] = {k: v for k, v in only_taken["payload"]["after"].items() if k not in refused}
    _, value_taken = avro_event(5, only_taken)
    rows = (
        parse_avro_records(_raw(spark, [value_taken, value]), {5: schema}, columns, ("id",)).orderBy("offset").collect()
    )
    got, with_refused = rows
    assert got["error"] is None, got["error"]
    for n in taken:
        pair = pairs[names.index(n)]
        assert got["image"][n] == expected["image"][n], (pair, got["image"][n], expected["image"][n])
    assert all(expected["image"][n] is not None for n in names)
    # a column of a pair the table does not take: a bad record naming the column and both encodings
    first_refused = names[len(PAIRS)]
    assert with_refused["error"] == (
        f"schema id 5: column {first_refused!r} is io.debezium.data.Bits in the writer schema, which the table's "
        "column (binary, encoding bytes) cannot take"
    )


def test_json_with_schema_takes_the_text_family_either_way(spark, cases):
    """JSON values decode by the table's encoding: text written as ``string`` by a snapshot lands
    in a ``Json`` column unchanged, and the reverse."""
    names, pairs, columns, table_event, writer_event = cases
    text = [n for n, (w, t) in zip(names, pairs, strict=True) if w in TEXT_ENCODINGS and (w, t) in PAIRS]
    assert ("string", "io.debezium.data.Json") in [pairs[names.index(n)] for n in text]
    from pyspark.sql import functions as F

    rows = (
        parse_records(
            _raw(spark, [json.dumps(table_event).encode(), json.dumps(writer_event).encode()]),
            "json_with_schema",
            columns,
            ("id",),
        )
        .orderBy("offset")
        .select(*[F.col("image")[n].alias(n) for n in text])
        .collect()
    )
    assert rows[1].asDict() == rows[0].asDict() and None not in rows[0].asDict().values()
