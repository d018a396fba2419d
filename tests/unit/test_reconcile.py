"""The pure rules of reconcile (cdclake.model.reconcile): canonical texts, digests, chunks, the
settling verdict and the repair filter. The MariaDB side of the same texts is checked against a
real MariaDB in tests/e2e/test_reconcile.py (every type of the all-types table)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cdclake.errors import ConfigError
from cdclake.model.position import BinlogPosition
from cdclake.model.reconcile import (
    Chunk,
    CompareColumn,
    Digest,
    Kind,
    SourceColumn,
    Verdict,
    canonical_text,
    check_key_kinds,
    chunk_of,
    column_kind,
    compare_columns,
    parse_key_value,
    range_sql,
    read_position,
    repair_condition,
    row_hash,
    row_text,
    sql_literal,
    uppers,
    values_equal,
    verdict,
)
from cdclake.model.types import ColumnSpec


def spec(name: str, iceberg_type: str) -> ColumnSpec:
    return ColumnSpec(name, iceberg_type, False, "")


@pytest.mark.parametrize(
    ("data_type", "iceberg_type", "kind"),
    [
        ("int", "int", Kind.INT),
        ("bigint", "decimal(20,0)", Kind.DECIMAL),
        ("tinyint", "int", Kind.INT),
        ("year", "int", Kind.INT),
        ("bit", "boolean", Kind.BOOL),
        ("tinyint", "boolean", Kind.BOOL),
        ("bit", "binary", Kind.BITS),
        ("decimal", "decimal(10,2)", Kind.DECIMAL),
        ("decimal", "string", Kind.DECIMAL),
        ("float", "float", Kind.FLOAT),
        ("double", "double", Kind.FLOAT),
        ("date", "date", Kind.DATE),
        ("datetime", "timestamp", Kind.DATETIME),
        ("timestamp", "timestamptz", Kind.TIMESTAMP),
        ("time", "long", Kind.TIME),
        ("varchar", "string", Kind.STRING),
        ("json", "string", Kind.STRING),
        ("enum", "string", Kind.STRING),
        ("blob", "binary", Kind.BYTES),
        ("point", "struct<wkb:binary,srid:int>", Kind.SPATIAL),
        ("blob", "string", None),
    ],
)
def test_column_kind(data_type, iceberg_type, kind):
    assert column_kind(SourceColumn("c", data_type), spec("c", iceberg_type)) is kind


def test_compare_columns_names_what_it_leaves_out():
    source = [
        SourceColumn("id", "int"),
        SourceColumn("v", "varchar"),
        SourceColumn("secret", "varchar"),
        SourceColumn("new", "int"),
    ]
    lake = [spec("id", "int"), spec("v", "string"), spec("secret", "string"), spec("old", "string")]
    columns, skipped = compare_columns(source, lake, ignored=["secret"])
    assert [c.name for c in columns] == ["id", "v"]
    assert skipped == {
        "secret": "ignored by configuration",
        "new": "not in the Iceberg table",
        "old": "not in the source table (dropped there)",
    }


@pytest.mark.parametrize(
    ("kind", "value", "text"),
    [
        (Kind.INT, 42, "42"),
        (Kind.BOOL, True, "1"),
        (Kind.BITS, b"\x00\x05", "5"),
        (Kind.DECIMAL, Decimal("-0.50"), "-0.50"),
        (Kind.DECIMAL, Decimal("12.00"), "12.00"),
        (
            Kind.DECIMAL,
            "123456789012345678901234567890123456789012.50",
            "123456789012345678901234567890123456789012.50",
        ),
        (Kind.FLOAT, 0.1, "0.1000"),
        (Kind.FLOAT, 3.3999999521443642e38, "339999995214436420000000000000000000000.0000"),
        (Kind.DATE, dt.date(2024, 1, 2), "2024-01-02"),
        (Kind.DATETIME, dt.datetime(2024, 1, 2, 3, 4, 5, 123456), "2024-01-02 03:04:05.123456"),
        (
            Kind.TIMESTAMP,
            dt.datetime(2024, 1, 2, 5, 4, 5, 500000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            "2024-01-02 03:04:05.500000",
        ),
        (Kind.DATETIME, dt.datetime(99, 1, 2), "0099-01-02 00:00:00.000000"),
        (Kind.TIME, -3723500000, "-3723500000"),
        (Kind.STRING, "héllo", "héllo"),
        (Kind.BYTES, b"xyz", "78797A"),
        (Kind.SPATIAL, {"wkb": b"\x01\x02", "srid": 4326}, "0102@4326"),
        (Kind.INT, None, None),
    ],
)
def test_canonical_text_matches_what_mariadb_writes(kind, value, text):
    """The texts MariaDB 10.11 gives for the same values (probed on the local chain's server:
    CAST(... AS CHAR), HEX(b+0), DATE_FORMAT(..., '%Y-%m-%d %H:%i:%s.%f') in time_zone +00:00,
    TIME_TO_SEC(t)*1000000, CAST(f AS DECIMAL(65,4)))."""
    assert canonical_text(kind, value) == text


def test_row_text_is_unambiguous():
    assert row_text(["a,b", None, ""]) == "3:a,b,-,0:"
    assert row_text(["a", "b"]) != row_text(["a,1:b"])
    assert row_hash(row_text(["1", "x"])) == row_hash("1:1,1:x")
    assert 0 <= row_hash("x") < 2**64


def test_digest_is_order_independent():
    a, b = Digest(), Digest()
    for h in (1, 2, 3):
        a.add(h)
    for h in (3, 1, 2):
        b.add(h)
    assert (a.rows, a.xor) == (b.rows, b.xor) == (3, 0)


def test_floats_compare_within_a_relative_tolerance():
    assert values_equal(Kind.FLOAT, "1.0001", 1.00005, source_float=1.0000500001)
    assert not values_equal(Kind.FLOAT, "1.0001", 1.5, source_float=1.0000500001)
    assert not values_equal(Kind.INT, "1", 2)


def test_chunks_in_key_order():
    chunks = [Chunk(0, None, (10,)), Chunk(1, (10,), (20,)), Chunk(2, (20,), None)]
    bounds = uppers(chunks, [Kind.INT])
    assert [chunk_of(bounds, (k,)) for k in (1, 10, 11, 20, 21, 10**9)] == [0, 0, 1, 1, 2, 2]
    key = [CompareColumn("a", Kind.INT), CompareColumn("b", Kind.STRING)]
    assert range_sql(key, (1, "x"), (2, "y")) == (
        "(`a`, BINARY CONVERT(`b` USING utf8mb4)) > (%s, %s) AND (`a`, BINARY CONVERT(`b` USING utf8mb4)) <= (%s, %s)",
        [1, "x", 2, "y"],
    )
    assert range_sql(key, None, None) == ("1=1", [])
    with pytest.raises(ConfigError, match=r"\['f'\]"):
        check_key_kinds("t", [CompareColumn("f", Kind.FLOAT)])


def test_verdict_counts_only_differences_the_lake_had_every_change_for():
    read = read_position("binlog", 3, 1000, None)
    before, after = BinlogPosition(3, 900, 0, 1), BinlogPosition(3, 1000, 0, 1)
    assert verdict(True, True, True, before, read) is Verdict.EQUAL
    assert verdict(True, True, False, before, read) is Verdict.DIFFERING
    assert verdict(True, True, False, after, read) is Verdict.UNSETTLED  # the lake is newer
    assert verdict(True, False, False, None, read) is Verdict.ONLY_IN_SOURCE
    assert verdict(True, False, False, after, read) is Verdict.UNSETTLED  # deleted after the read
    assert verdict(False, True, False, before, read) is Verdict.ONLY_IN_LAKE
    assert verdict(False, True, False, after, read) is Verdict.UNSETTLED  # created after the read
    gtid_read = read_position("gtid", 9, 5, 41)
    assert BinlogPosition(41, 10**9, 0, 1) < gtid_read < BinlogPosition(42, 0, 0, 0)


def test_repair_condition_selects_exactly_the_keys():
    key = [CompareColumn("id", Kind.INT), CompareColumn("name", Kind.STRING)]
    assert repair_condition(key, [(2, "b'x"), (1, "a")]) == "(`id`, `name`) IN ((1, 'a'), (2, 'b''x'))"
    assert repair_condition(key, []) == "1=0"
    # a TIMESTAMP key is an instant: compared in whatever time zone the snapshot's session reads
    assert sql_literal(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)) == "FROM_UNIXTIME(1704164645.000000)"
    assert sql_literal(dt.datetime(2024, 1, 2, 3, 4, 5)) == "'2024-01-02 03:04:05'"
    assert sql_literal(b"\x01") == "X'01'"


def test_key_range_values_are_parsed_by_the_key_kind():
    assert parse_key_value(Kind.INT, "12") == 12
    assert parse_key_value(Kind.DECIMAL, 1.5) == Decimal("1.5")
    assert parse_key_value(Kind.DATE, "2024-01-02") == dt.date(2024, 1, 2)
    assert parse_key_value(Kind.TIMESTAMP, "2024-01-02T05:00:00+02:00") == dt.datetime(2024, 1, 2, 3, 0)
    assert parse_key_value(Kind.BYTES, "0a0b") == b"\x0a\x0b"
    with pytest.raises(ValueError):
        parse_key_value(Kind.INT, "x")


def test_names_with_a_percent_sign_survive_pymysql_formatting():
    key = [CompareColumn("pct%", Kind.INT)]
    clause, params = range_sql(key, (1,), None)
    assert clause % tuple(params) == "(`pct%`) > (1)"


def test_a_table_that_does_not_catch_up_fails_the_wait_with_a_catch_up_timeout(tmp_path):
    """:func:`cdclake.pipeline.catch_up.poll_catch_up` on a SQLite catalog where the table's runs
    have committed nothing: the wait ends with :class:`CatchUpTimeoutError` (which the reconcile
    task does not retry), naming the table, the offsets and the DAG that must run."""
    from cdclake.errors import CatchUpTimeoutError
    from cdclake.io.catalog import load_catalog
    from cdclake.pipeline.catch_up import poll_catch_up
    from cdclake.settings import Settings
    from tests.conftest import make_table

    cfg = make_table()
    wait = poll_catch_up(load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)})), cfg, 0.0, 0.0)
    with pytest.raises(CatchUpTimeoutError, match=rf"{cfg.identifier}.*\{{0: 5\}}.*cdc_{cfg.name}"):
        wait({0: 5})
    wait({})  # nothing to reach: returns at once
