"""Every MySQL type lands exactly: the real all-types events of flink-cdc through the apply job
(real broker, Spark, Iceberg), and the decoders of decimals, bits, times and spatial values
against Python's own arithmetic on many values."""

from __future__ import annotations

import base64
import datetime
import json
import random
import re
import uuid
from decimal import Context, Decimal

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events
from cdclake.model.types import ColumnSpec, decimal_encoding
from cdclake.spark.parse import describe_mismatches, parse_records
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


def _parse_values(spark, columns: list[ColumnSpec], values: list[bytes], value_format: str = "json_with_schema"):
    """Decoded images and errors of ``values``, the type mismatches described as for the quarantine."""
    raw = spark.createDataFrame(
        [("t", 0, i, datetime.datetime(2024, 1, 1), b"k", v) for i, v in enumerate(values)],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    parsed = describe_mismatches(parse_records(raw, value_format, columns, ("id",)), columns, value_format)
    rows = parsed.orderBy("offset").select("image", "error").collect()
    return [(r["image"].asDict(), r["error"]) for r in rows]


def _parse(spark, columns: list[ColumnSpec], rows: list[dict | str]) -> list[tuple[dict, str | None]]:
    """:func:`_parse_values` of payload-only ``c`` events whose ``after`` image is each of ``rows``
    (a dict, or JSON text for numbers Python's json would not write)."""
    values = []
    for i, row in enumerate(rows):
        after = row if isinstance(row, str) else json.dumps(row)
        values.append(
            f'{{"before": null, "after": {after}, "op": "c", '
            f'"source": {{"file": "mysql-bin.000001", "pos": {4 + i}, "row": 0}}}}'.encode()
        )
    return _parse_values(spark, columns, values, "json")


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


def test_decimal_from_raw_bytes_is_the_decimal_of_its_base64_text(spark):
    """An Avro decimal's unscaled bytes (``decimal_of_bytes_sql``, no lambda function) decode to
    what the same bytes' base64 text decodes to (JSON), value by value: every length and sign,
    bytes sign-extended beyond the shortest, values past the column's precision and past 38
    digits (null: a bad record)."""
    from pyspark.sql import functions as F

    from cdclake.spark.decode import decode

    rng = random.Random(11)
    unscaled = _interesting_unscaled(rng, 45)
    encoded = [v.to_bytes((v.bit_length() + 8) // 8, "big", signed=True) for v in unscaled]
    encoded += [v.to_bytes(n, "big", signed=True) for v in (0, 1, -1, 10**20, -(10**37)) for n in (17, 20, 32)]
    encoded += [
        b"\x00" * 3 + (10**37).to_bytes(16, "big"),  # sign-extended by three bytes
        b"\x00\xff" + (5).to_bytes(16, "big"),  # 18 bytes that are no sign extension: past 38 digits
    ]
    encoded += [b"\x01" + bytes(16)]  # 2^128: 17 bytes, past 38 digits
    frame = spark.createDataFrame([(b,) for b in encoded], "b binary").withColumn(
        "v", F.expr("parse_json(concat('\"', base64(b), '\"'))")
    )
    columns = [(decimal_encoding(38, 10), "decimal(38,10)"), (decimal_encoding(20, 0), "decimal(20,0)")]
    columns += [(decimal_encoding(10, 2), "decimal(10,2)"), (decimal_encoding(18, 18), "decimal(18,18)")]
    picked = [
        part
        for k, (encoding, _) in enumerate(columns)
        for part in (decode("b", encoding, "binary").alias(f"b{k}"), decode("v", encoding).alias(f"j{k}"))
    ]
    rows = frame.select("b", *picked).collect()
    assert len(rows) == len(encoded)
    for row in rows:
        value = int.from_bytes(row["b"], "big", signed=True)
        for k, (encoding, iceberg) in enumerate(columns):
            precision, scale = (int(x) for x in iceberg[len("decimal(") : -1].split(","))
            want = _decimal(value, scale) if abs(value) < 10**precision else None
            if len(row["b"]) > 16 and row["b"][:-16] not in (bytes(len(row["b"]) - 16), b"\xff" * (len(row["b"]) - 16)):
                want = None  # not a sign extension: the base64 decoding reads the whole value, which is past 38 digits
            assert (row[f"b{k}"], row[f"j{k}"]) == (want, want), (row["b"].hex(), encoding)


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
        f"column {c!r}: value {v} does not fit {t} (encoding org.apache.kafka.connect.data.Decimal({e}))"
        for c, v, t, e in [
            ("d", "1.23456", "decimal(10,4)", "10,4"),
            ("d", "1234567", "decimal(10,4)", "10,4"),  # as the JSON variant holds it
            ("w", "1.2E-7", "string", "65,8"),
            ("w", "1.2345678901234568E41", "string", "65,8"),
        ]
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
        "column 't_ns': value 1500 does not fit long (encoding io.debezium.time.NanoTime)",
        "column 'ts_ns': value 1595008822123456789 does not fit timestamp (encoding io.debezium.time.NanoTimestamp)",
        "column 'bits': value 'not base64!' does not fit binary (encoding io.debezium.data.Bits)",
        'column \'pt\': value {"x":1.0,"y":1.0} does not fit struct<wkb:binary,srid:int> '
        "(encoding io.debezium.data.geometry.Point)",
    ]


def test_seatunnel_numeric_decimals_and_bits_decode_with_their_own_schema(spark, fixtures_dir):
    """seatunnel/debezium_data.txt: a real schema (Debezium 1.9.8) with JSON-number decimals, one
    of them (BIGINT UNSIGNED) without a precision. Its events carry ``file: ""`` (Flink CDC's own
    snapshot), so under binlog ordering they cannot be applied; their images are decoded all the same."""
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
    assert [r["error"].split(":")[0] for r in rows] == ["source has no binlog position (file '', pos 0)"] * 3
    image = rows[0]["image"].asDict()
    assert {c.name: c.iceberg_type for c in columns if c.name in ("f_bigint_unsigned", "f_numeric")} == {
        "f_bigint_unsigned": "decimal(38,0)",  # a Decimal without a precision
        "f_numeric": "decimal(10,0)",
    }
    assert (image["f_bigint_unsigned"], image["f_numeric"], image["f_decimal"]) == (
        Decimal(987654321),
        Decimal(123),
        Decimal(789),
    )
    assert image["f_time"] == (14 * 3600 + 30 * 60) * 1_000_000  # TIME '14:30:00'
    assert image["f_bit64"] == bytes([0x55] * 8)
    assert image["f_date"] == datetime.date(2022, 4, 27)
    assert image["f_datetime"] == datetime.datetime(2022, 4, 27, 14, 30)


# --- settings the decoding does not control; values of another type; connector modes ---------------


def _envelope(fields: dict[str, dict], after: dict, pos: int, *, before: dict | None = None, op: str = "c") -> bytes:
    """A ``json_with_schema`` change event whose row schema has ``fields`` (name -> Connect field)."""
    row = [{"field": name, "optional": name != "id", **f} for name, f in fields.items()]
    source = [
        {"type": t, "optional": True, "field": n} for n, t in (("file", "string"), ("pos", "int64"), ("row", "int32"))
    ]
    schema = {
        "type": "struct",
        "fields": [
            {"type": "struct", "optional": True, "field": "before", "fields": row},
            {"type": "struct", "optional": True, "field": "after", "fields": row},
            {"type": "struct", "optional": False, "field": "source", "fields": source},
            {"type": "string", "optional": False, "field": "op"},
        ],
    }
    payload = {"before": before, "after": after, "op": op, "source": {"file": "mysql-bin.000003", "pos": pos, "row": 0}}
    return json.dumps({"schema": schema, "payload": payload}).encode()


def _load(kafka, cfg, tmp_path, values: list[bytes]) -> None:
    path = tmp_path / f"events-{uuid.uuid4().hex[:6]}.json"
    path.write_bytes(b"\n".join(values))
    load_events(path, cfg, kafka)


def test_datetimes_decode_the_same_whatever_the_session_time_zone(spark, stack_settings):
    """A Spark session in another time zone (a Connect server started without cdclake's settings)
    changes no DATETIME or TIMESTAMP value; a session the package builds is in UTC."""
    from cdclake.spark.session import build_session

    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("dt_ms", "timestamp", False, "io.debezium.time.Timestamp"),
        ColumnSpec("dt_us", "timestamp", False, "io.debezium.time.MicroTimestamp"),
        ColumnSpec("dt_ns", "timestamp", False, "io.debezium.time.NanoTimestamp"),
        ColumnSpec("dt_connect", "timestamp", False, "org.apache.kafka.connect.data.Timestamp"),
        ColumnSpec("ts", "timestamptz", False, "io.debezium.time.ZonedTimestamp"),
    ]
    after = {
        "id": 1,
        "dt_ms": 1595008822123,
        "dt_us": 1595008822123456,
        "dt_ns": 1595008822123456000,
        "dt_connect": -86400000,
        "ts": "2020-07-17T18:00:22.123456+02:00",
    }
    wall = datetime.datetime(2020, 7, 17, 18, 0, 22)
    expected = {
        "id": 1,
        "dt_ms": wall.replace(microsecond=123000),
        "dt_us": wall.replace(microsecond=123456),
        "dt_ns": wall.replace(microsecond=123456),
        "dt_connect": datetime.datetime(1969, 12, 31),
        "ts": 1595001622123456,  # the instant 2020-07-17T16:00:22.123456Z, as epoch microseconds
    }
    raw = spark.createDataFrame(
        [("t", 0, 0, datetime.datetime(2024, 1, 1), b"k", _envelope({}, after, 4))],
        "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
    )
    zone = "spark.sql.session.timeZone"
    spark.conf.set(zone, "America/Los_Angeles")
    try:
        parsed = parse_records(raw, "json_with_schema", columns, ("id",))
        [row] = parsed.selectExpr("image", "unix_micros(image.ts) AS ts_us", "error").collect()
        assert (dict(row["image"].asDict(), ts=row["ts_us"]), row["error"]) == (expected, None)
        assert build_session(stack_settings) is spark  # getOrCreate: the session the tests share
        assert spark.conf.get(zone) == "UTC"
    finally:
        spark.conf.set(zone, "UTC")


def test_a_malformed_zoned_timestamp_is_a_bad_record_not_a_failed_batch(spark):
    """Under ANSI mode (Spark 4's default) a malformed ``ZonedTimestamp`` failed the whole batch."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("ts", "timestamptz", False, "io.debezium.time.ZonedTimestamp"),
    ]
    texts = ["2020-07-17T18:00:22Z", "2020-13-45T10:00:00Z", "2020-07-17T18:00:22", "not a time"]
    decoded = _parse_values(spark, columns, [_envelope({}, {"id": i, "ts": t}, 4 + i) for i, t in enumerate(texts)])
    (first, error) = decoded[0]
    assert (first["ts"].timestamp(), error) == (1595008822, None)
    # no offset: only a session time zone would place it, so it is not a ZonedTimestamp either
    assert [e for _, e in decoded[1:]] == [
        f"column 'ts': value '{t}' does not fit timestamptz (encoding io.debezium.time.ZonedTimestamp)"
        for t in texts[1:]
    ]


def test_a_bigint_unsigned_wrapped_by_long_mode_is_a_bad_record_naming_the_setting(spark):
    """``bigint.unsigned.handling.mode=long`` sends BIGINT UNSIGNED values above 2^63-1 as negative
    numbers; schema sync records such a column ``int64(unsigned)`` (its ``tableChanges`` say
    UNSIGNED), and a negative value in it is a bad record, not a wrong number in the lake."""
    columns = [ColumnSpec("id", "int", True, "int32"), ColumnSpec("u", "long", False, "int64(unsigned)")]
    values = [2**63 - 1, 0, -1, -(2**63)]
    decoded = _parse_values(spark, columns, [_envelope({}, {"id": i, "u": v}, 4 + i) for i, v in enumerate(values)])
    assert decoded[:2] == [({"id": 0, "u": 2**63 - 1}, None), ({"id": 1, "u": 0}, None)]
    for (_, error), source_value in zip(decoded[2:], (2**64 - 1, 2**63), strict=True):
        assert error.startswith(
            f"column 'u': value {source_value - 2**64} is BIGINT UNSIGNED {source_value} wrapped past 2^63-1 by the "
            "connector's bigint.unsigned.handling.mode=long; a long column cannot hold it. Set "
            "bigint.unsigned.handling.mode=precise on the connector"
        )


def test_a_value_of_another_type_names_the_column_its_type_in_the_event_and_the_tables_type(spark):
    columns = [
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("n", "int", False, "int32"),
        ColumnSpec("price", "decimal(10,2)", False, decimal_encoding(10, 2)),
    ]
    string_n = {"id": {"type": "int32"}, "n": {"type": "string"}}
    values = [
        _envelope(string_n, {"id": 1, "n": "abc", "price": None}, 4),
        _envelope({}, {"id": 2, "n": 5, "price": None}, 5, before={"id": 2, "n": 2.5, "price": None}, op="u"),
        b'{"schema": {}, "payload": {"before": null, "after": {"id": 3}, "op": "c", '
        b'"source": {"file": "mysql-bin.000003", "pos": "x", "row": 0}}}',
    ]
    errors = [e for _, e in _parse_values(spark, columns, values)]
    assert errors == [
        "column 'n' (after image): value \"abc\" (Connect string in the event's schema) does not fit the table's "
        "int (encoding int32)",
        "column 'n' (before image): value 2.5 (the event's Connect schema has no such field) does not fit the "
        "table's int (encoding int32)",
        "a value of the envelope (source, op, ts_ms) does not fit Debezium's types, or the value is malformed",
    ]
    no_schema = b'{"before": null, "after": {"id": 4, "n": true}, "op": "c", "source": {"file": "b.000001", "pos": 4}}'
    [(_, error)] = _parse_values(spark, columns, [no_schema], "json")
    assert (
        error
        == "column 'n' (after image): value true (JSON boolean in the event) does not fit the table's int (encoding int32)"
    )


_PRECISIONLESS = {"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "0"}}
"""Debezium 1.x, ``bigint.unsigned.handling.mode=precise``: BIGINT UNSIGNED as a Decimal without a precision."""


def test_decimals_without_precision_land_as_decimals(spark, kafka, stack_settings, tmp_path):
    cfg = make_table(bad_records="fail")
    fields = {
        "id": {"type": "int32"},
        "u": _PRECISIONLESS,
        "s": {**_PRECISIONLESS, "parameters": {"scale": "0", "__debezium.source.column.type": "BIGINT UNSIGNED"}},
    }
    top = base64.b64encode((2**64 - 1).to_bytes(9, "big")).decode()  # "AP//////////"
    _load(kafka, cfg, tmp_path, [_envelope(fields, {"id": 1, "u": top, "s": top}, 4)])
    result = _apply(spark, stack_settings, cfg)
    assert (result.status, result.quarantined) == ("committed", 0)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    types = {f.name: str(f.field_type) for f in table.schema().fields}
    assert (types["u"], types["s"]) == ("decimal(38, 0)", "decimal(20, 0)")
    row = _only_row(stack_settings, cfg)
    assert (row["u"], row["s"]) == (Decimal(2**64 - 1), Decimal(2**64 - 1))


def test_events_in_another_connector_mode_are_said_once_in_the_log_result_and_summary(
    spark, kafka, stack_settings, tmp_path, caplog
):
    """The table was made for ``decimal.handling.mode=precise``; the connector now sends doubles
    (and one record an id the table's column cannot read: quarantined, naming the column). The
    doubles are no schema change for a table that evolves from its events."""
    from cdclake.model.layout import SummaryKeys

    cfg = make_table(bad_records_tolerance="all")  # its bad record is quarantined, the run succeeds
    precise = {
        "id": {"type": "int32"},
        "price": {**_PRECISIONLESS, "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    }
    _load(kafka, cfg, tmp_path, [_envelope(precise, {"id": 1, "price": "AJg="}, 4)])  # 1.52
    assert _apply(spark, stack_settings, cfg).connector_contradictions == ()
    doubles = {"id": {"type": "int32"}, "price": {"type": "double"}}
    seven = _envelope(doubles, {"id": "seven", "price": 1.0}, 9)  # a value its own schema does not type so
    _load(kafka, cfg, tmp_path, [*(_envelope(doubles, {"id": i, "price": 2.5}, 5 + i) for i in range(2, 5)), seven])
    result = _apply(spark, stack_settings, cfg)
    line = (
        "column 'price': the events are double (decimal.handling.mode=double) but the table's column is "
        "org.apache.kafka.connect.data.Decimal(10,2) (table config connector: decimal_handling_mode: precise): "
        "values rounded to a double"
    )
    assert (result.status, result.ops, len(result.connector_contradictions)) == ("committed", {"c": 3}, 1)
    # the line names the sampled record that shows it (the batch's first or last record with a value)
    assert re.fullmatch(
        rf"topic {cfg.topic!r} partition \d+ offset \d+: {re.escape(line)}", result.connector_contradictions[0]
    )
    quarantine = load_catalog(stack_settings).load_table(cfg.identifier + "__cdc_quarantine")
    assert quarantine.scan(selected_fields=("error",)).to_arrow().column("error").to_pylist() == [
        "column 'id' (after image): value \"seven\" (Connect int32 in the event's schema) does not fit the "
        "table's int (encoding int32)"
    ]
    summary = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot().summary
    assert json.loads(summary[SummaryKeys.CONNECTOR_CONTRADICTIONS]) == list(result.connector_contradictions)
    assert [r.getMessage().count(line) for r in caplog.records if "CONTRADICT" in r.getMessage()] == [1]
