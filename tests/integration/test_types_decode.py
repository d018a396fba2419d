"""Every MySQL type lands exactly: the real all-types events of flink-cdc through the apply job
(real broker, Spark, Iceberg), and the decoders of decimals, bits, times and spatial values
against Python's own arithmetic on many values."""

from __future__ import annotations

import base64
import datetime
import json
import random
from decimal import Context, Decimal

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events
from cdclake.model.types import ColumnSpec, decimal_encoding
from cdclake.spark.parse import parse_records
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.full_types import BINLOG_TIMESTAMP, EXPECTED_ROW, events_with_schema

pytestmark = pytest.mark.integration


def _apply(spark, settings, cfg):
    planned = plan_offsets(settings, cfg)
    return apply_offsets(spark, settings, cfg, planned.range, "types-run")


def _only_row(settings, cfg) -> dict:
    rows = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow().to_pylist()
    assert len(rows) == 1
    return rows[0]


def _assert_row(row: dict, expected: dict) -> None:
    mismatches = {}
    for name, want in expected.items():
        got = row[name]
        if name == "json_c":
            got = json.loads(got)
        if got != want or type(got) is not type(want):
            mismatches[name] = (got, want)
    assert mismatches == {}


@pytest.mark.parametrize(
    "payload_file",
    [
        "debezium-data-schema-include.json",  # decimals as base64 (JsonConverter decimal.format=BASE64)
        "debezium-data-schema-exclude-with-numeric-decimal.json",  # decimal.format=NUMERIC
    ],
)
def test_flink_cdc_full_types_land_exactly(spark, kafka, stack_settings, fixtures_dir, tmp_path, payload_file):
    cfg = make_table(bad_records="fail")
    snapshot_event, binlog_event = events_with_schema(fixtures_dir, payload_file)

    (tmp_path / "snapshot.json").write_bytes(snapshot_event)
    load_events(tmp_path / "snapshot.json", cfg, kafka)
    result = _apply(spark, stack_settings, cfg)
    assert (result.status, result.ops, result.quarantined) == ("committed", {"r": 1}, 0)
    _assert_row(_only_row(stack_settings, cfg), EXPECTED_ROW)

    (tmp_path / "binlog.json").write_bytes(binlog_event)
    load_events(tmp_path / "binlog.json", cfg, kafka)
    result = _apply(spark, stack_settings, cfg)
    assert (result.status, result.ops, result.quarantined) == ("committed", {"u": 1}, 0)
    _assert_row(_only_row(stack_settings, cfg), dict(EXPECTED_ROW, timestamp_c=BINLOG_TIMESTAMP))

    schema = load_catalog(stack_settings).load_table(cfg.identifier).schema()
    types = {f.name: str(f.field_type) for f in schema.fields}
    assert (types["id"], types["big_un_c"], types["decimal_c"]) == ("decimal(20, 0)", "decimal(20, 0)", "decimal(8, 4)")
    assert (types["big_decimal_c"], types["time_c"], types["bit_c"]) == ("string", "long", "binary")
    assert [f.name for f in schema.find_field("point_c").field_type.fields] == ["wkb", "srid"]
    assert [schema.find_field(i).name for i in schema.identifier_field_ids] == ["id"]
    assert "microseconds" in schema.find_field("time_c").doc
    assert "DECIMAL(65,1) as exact decimal text" in schema.find_field("big_decimal_c").doc


# --- the decoders on many values ------------------------------------------------------------------


def _b64_int(value: int, length: int | None = None) -> str:
    """Connect Decimal bytes: big-endian two's complement (BigInteger.toByteArray: minimal)."""
    length = length or (value.bit_length() + 8) // 8
    return base64.b64encode(value.to_bytes(length, "big", signed=True)).decode()


_EXACT = Context(prec=200)  # the default context rounds to 28 digits


def _decimal(unscaled: int, scale: int) -> Decimal:
    return Decimal(unscaled).scaleb(-scale, context=_EXACT)


def _decimal_text(unscaled: int, scale: int) -> str:
    return f"{_decimal(unscaled, scale):f}"


def _parse(spark, columns: list[ColumnSpec], rows: list[dict | str]) -> list[tuple[dict, str | None]]:
    """``parse_records`` on payload-only ``c`` events whose ``after`` image is each of ``rows``
    (a dict, or JSON text for numbers Python's json would not write): decoded images and errors."""
    records = []
    for i, row in enumerate(rows):
        after = row if isinstance(row, str) else json.dumps(row)
        value = (
            f'{{"before": null, "after": {after}, "op": "c", '
            f'"source": {{"file": "mysql-bin.000001", "pos": {4 + i}, "row": 0}}}}'
        )
        records.append(("t", 0, i, datetime.datetime(2024, 1, 1), b"k", value.encode()))
    raw = spark.createDataFrame(
        records, "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
    )
    out = parse_records(raw, "json", columns, ("id",)).orderBy("offset").select("image", "error").collect()
    return [(r["image"].asDict(), r["error"]) for r in out]


def _interesting_unscaled(rng: random.Random, max_digits: int) -> list[int]:
    values = {0, 1, -1, 10**max_digits - 1, -(10**max_digits - 1)}
    for n_bytes in range(1, 29):
        for edge in (2 ** (8 * n_bytes - 1), 2 ** (8 * n_bytes - 1) - 1, 2**32, 2**32 - 1, 10**9, 10**9 - 1):
            values.update({edge, -edge})
        values.add(rng.randrange(-(2 ** (8 * n_bytes - 1)), 2 ** (8 * n_bytes - 1)))
    return sorted(v for v in values if abs(v) < 10**max_digits)


def test_decimal_decoding_is_exact_for_every_length_and_sign(spark):
    rng = random.Random(5)
    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("d38", "decimal(38,10)", False, decimal_encoding(38, 10)),
        ColumnSpec("d20", "decimal(20,0)", False, decimal_encoding(20, 0)),
        ColumnSpec("d65", "string", False, decimal_encoding(65, 30)),
        ColumnSpec("d65s0", "string", False, decimal_encoding(65, 0)),
        ColumnSpec("vsd", "string", False, "io.debezium.data.VariableScaleDecimal"),
    ]
    unscaled = _interesting_unscaled(rng, 65)
    rows, expected = [], []
    for i, v in enumerate(unscaled):
        fits38 = abs(v) < 10**38
        fits20 = abs(v) < 10**20
        scale = i % 7
        rows.append(
            {
                "id": i,
                "d38": _b64_int(v) if fits38 else None,
                "d20": _b64_int(v) if fits20 else None,
                "d65": _b64_int(v),
                "d65s0": _b64_int(v, 32),  # sign-extended beyond the minimal length
                "vsd": {"scale": scale, "value": _b64_int(v)},
            }
        )
        expected.append(
            {
                "id": i,
                "d38": _decimal(v, 10) if fits38 else None,
                "d20": Decimal(v) if fits20 else None,
                "d65": _decimal_text(v, 30),
                "d65s0": str(v),
                "vsd": _decimal_text(v, scale),
            }
        )
    decoded = _parse(spark, columns, rows)
    assert [e for _, e in decoded] == [None] * len(rows)
    assert [img for img, _ in decoded] == expected


def test_decimal_json_numbers_decode_exactly_or_are_bad_records(spark):
    """``decimal.format=NUMERIC``: exact up to 38 digits; digits beyond the scale or a number
    Spark can only read as a double are bad records (named), never rounded."""
    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("d", "decimal(10,4)", False, decimal_encoding(10, 4)),
        ColumnSpec("u", "decimal(20,0)", False, decimal_encoding(20, 0)),
        ColumnSpec("w", "string", False, decimal_encoding(65, 8)),
    ]
    text_rows = [
        '{"id": 0, "d": 123.4567, "u": 18446744073709551615, "w": 34567892.1}',
        '{"id": 1, "d": -0.5, "u": 0, "w": -12345678901234567890123456789.12345678}',
        '{"id": 2, "d": 7, "u": null, "w": 0E-8}',  # Kafka writes a zero of scale 8 as 0E-8
        '{"id": 3, "d": 1.00000, "u": null, "w": null}',  # trailing zeros beyond the scale: exact
        '{"id": 4, "d": 1.23456, "u": null, "w": null}',  # a digit beyond the scale
        '{"id": 5, "d": 1234567.0, "u": null, "w": null}',  # more than the precision
        '{"id": 6, "d": null, "u": null, "w": 1.2E-7}',  # exponent notation: only a double
        '{"id": 7, "d": null, "u": null, "w": 123456789012345678901234567890123456789012.5}',
        '{"id": 8, "d": "AAE=", "u": "AP//////////", "w": null}',  # base64 in the same column
    ]
    decoded = _parse(spark, columns, text_rows)
    images = [img for img, _ in decoded]
    errors = [e for _, e in decoded]
    assert images[0] == {
        "id": 0,
        "d": Decimal("123.4567"),
        "u": Decimal(18446744073709551615),
        "w": "34567892.10000000",
    }
    assert images[1] == {
        "id": 1,
        "d": Decimal("-0.5000"),
        "u": Decimal(0),
        "w": "-12345678901234567890123456789.12345678",
    }
    assert images[2] == {"id": 2, "d": Decimal("7.0000"), "u": None, "w": "0.00000000"}
    assert images[3]["d"] == Decimal("1.0000")
    assert images[8] == {"id": 8, "d": Decimal("0.0001"), "u": Decimal(18446744073709551615), "w": None}
    assert errors[:4] + errors[8:] == [None] * 5
    assert errors[4:8] == [
        "column 'd': value does not fit decimal(10,4) (encoding org.apache.kafka.connect.data.Decimal(10,4))",
        "column 'd': value does not fit decimal(10,4) (encoding org.apache.kafka.connect.data.Decimal(10,4))",
        "column 'w': value does not fit string (encoding org.apache.kafka.connect.data.Decimal(65,8))",
        "column 'w': value does not fit string (encoding org.apache.kafka.connect.data.Decimal(65,8))",
    ]


def test_time_bits_nano_and_spatial_decoding(spark):
    rng = random.Random(7)
    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("t_ms", "long", False, "io.debezium.time.Time"),
        ColumnSpec("t_us", "long", False, "io.debezium.time.MicroTime"),
        ColumnSpec("t_ns", "long", False, "io.debezium.time.NanoTime"),
        ColumnSpec("t_connect", "long", False, "org.apache.kafka.connect.data.Time"),
        ColumnSpec("ts_ns", "timestamp", False, "io.debezium.time.NanoTimestamp"),
        ColumnSpec("ts_connect", "timestamp", False, "org.apache.kafka.connect.data.Timestamp"),
        ColumnSpec("d_connect", "date", False, "org.apache.kafka.connect.data.Date"),
        ColumnSpec("bits", "binary", False, "io.debezium.data.Bits"),
        ColumnSpec("geo", "struct<wkb:binary,srid:int>", False, "io.debezium.data.geometry.Geometry"),
        ColumnSpec("pt", "struct<wkb:binary,srid:int>", False, "io.debezium.data.geometry.Point"),
    ]
    max_time_us = (838 * 3600 + 59 * 60 + 59) * 1_000_000  # TIME '838:59:59'
    bit_values = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9))) for _ in range(20)]
    rows = [
        {
            "id": i,
            "t_ms": -596 * 3600 * 1000 if i == 0 else i * 1001,  # int32 ms: TIME(0-3) within +-596 h
            "t_us": -max_time_us if i == 0 else max_time_us - i,
            "t_ns": (max_time_us - i) * 1000,
            "t_connect": i * 1001,
            "ts_ns": 1595008822123456000 + i * 1000,
            "ts_connect": 1595008822123 + i,
            "d_connect": 18460 + i,
            # Debezium's little-endian order
            "bits": base64.b64encode(bits[::-1]).decode(),
            "geo": {"wkb": base64.b64encode(b"\x01\x02" + bits).decode(), "srid": 4326 if i % 2 else None},
            "pt": {"x": 1.5, "y": -2.0, "wkb": base64.b64encode(bits).decode(), "srid": 0},
        }
        for i, bits in enumerate(bit_values)
    ]
    decoded = _parse(spark, columns, rows)
    assert [e for _, e in decoded] == [None] * len(rows)
    epoch = datetime.datetime(1970, 1, 1)
    for (img, _), row, bits in zip(decoded, rows, bit_values, strict=False):
        assert img["t_ms"] == row["t_ms"] * 1000
        assert img["t_us"] == row["t_us"]
        assert img["t_ns"] == row["t_ns"] // 1000
        assert img["t_connect"] == row["t_connect"] * 1000
        assert img["ts_ns"] == epoch + datetime.timedelta(microseconds=row["ts_ns"] // 1000)
        assert img["ts_connect"] == epoch + datetime.timedelta(milliseconds=row["ts_connect"])
        assert img["d_connect"] == datetime.date(1970, 1, 1) + datetime.timedelta(days=row["d_connect"])
        assert img["bits"] == bits  # big-endian: MySQL's order
        assert img["geo"].asDict() == {"wkb": b"\x01\x02" + bits, "srid": row["geo"]["srid"]}
        assert img["pt"].asDict() == {"wkb": bits, "srid": 0}

    bad = _parse(
        spark,
        columns,
        [
            {"id": 0, "t_ns": 1500},  # sub-microsecond digits
            {"id": 1, "ts_ns": 1595008822123456789},
            {"id": 2, "bits": "not base64!"},
            {"id": 3, "pt": {"x": 1.0, "y": 1.0, "wkb": None, "srid": None}},  # no WKB to keep
        ],
    )
    assert [e for _, e in bad] == [
        "column 't_ns': value does not fit long (encoding io.debezium.time.NanoTime)",
        "column 'ts_ns': value does not fit timestamp (encoding io.debezium.time.NanoTimestamp)",
        "column 'bits': value does not fit binary (encoding io.debezium.data.Bits)",
        "column 'pt': value does not fit struct<wkb:binary,srid:int> (encoding io.debezium.data.geometry.Point)",
    ]


def test_seatunnel_numeric_decimals_and_bits_decode_with_their_own_schema(spark, fixtures_dir):
    """seatunnel/debezium_data.txt: a real schema (Debezium 1.9.8) with JSON-number decimals, one
    of them (BIGINT UNSIGNED) without a precision. Its events carry ``file: ""`` (Flink CDC's own
    snapshot), so they cannot be applied; their images are decoded all the same."""
    from cdclake.io.events import read_event_file
    from cdclake.model.types import columns_from_connect

    values = read_event_file(fixtures_dir / "seatunnel" / "debezium_data.txt")
    after = next(f for f in json.loads(values[0])["schema"]["fields"] if f["field"] == "after")
    columns = columns_from_connect(after)
    raw = spark.createDataFrame(
        [("t", 0, i, datetime.datetime(2024, 1, 1), b"k", v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    rows = parse_records(raw, "json_with_schema", columns, ("id",)).orderBy("offset").collect()
    assert [r["error"] for r in rows] == ["source.file has no numeric suffix"] * 3
    image = rows[0]["image"].asDict()
    assert {c.name: c.iceberg_type for c in columns if c.name in ("f_bigint_unsigned", "f_numeric")} == {
        "f_bigint_unsigned": "string",
        "f_numeric": "decimal(10,0)",
    }
    assert (image["f_bigint_unsigned"], image["f_numeric"], image["f_decimal"]) == (
        "987654321",
        Decimal(123),
        Decimal(789),
    )
    assert image["f_time"] == (14 * 3600 + 30 * 60) * 1_000_000  # TIME '14:30:00'
    assert image["f_bit64"] == bytes([0x55] * 8)
    assert image["f_date"] == datetime.date(2022, 4, 27)
    assert image["f_datetime"] == datetime.datetime(2022, 4, 27, 14, 30)
