"""Unit tests for :mod:`cdclake.model.defaults`: the value an added column takes in the rows that
existed before the ``ADD COLUMN``, as Spark SQL typed to the column's Iceberg type."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from cdclake.model.config_blocks import ConnectorModes
from cdclake.model.defaults import (
    ColumnDefault,
    added_column_default,
    spark_string_literal,
    spark_type,
)
from cdclake.model.event_defaults import connect_default, connect_defaults
from cdclake.model.mysql_types import column_type
from cdclake.model.types import ColumnSpec

DEFAULT_MODES = ConnectorModes()
CHAIN = Path(__file__).resolve().parents[1] / "data" / "chain"


def col(
    type_name: str,
    default: str | None = None,
    *,
    optional: bool = True,
    has_default: bool | None = None,
    length: int | None = None,
    scale: int | None = None,
    enum: list[str] | None = None,
    auto: bool = False,
    generated: bool = False,
) -> dict[str, Any]:
    """A ``tableChanges`` column as Debezium writes it."""
    c: dict[str, Any] = {
        "name": "c",
        "jdbcType": 0,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": None,
        "length": length,
        "scale": scale,
        "position": 5,
        "optional": optional,
        "autoIncremented": auto,
        "generated": generated,
        "comment": None,
        "defaultValueExpression": default,
        "enumValues": enum,
    }
    if has_default is not None:
        c["hasDefaultValue"] = has_default
    return c


def spec_of(column: dict[str, Any], modes: ConnectorModes = DEFAULT_MODES) -> ColumnSpec:
    iceberg, encoding = column_type(column, modes)
    return ColumnSpec(column["name"], iceberg, not column["optional"], encoding)


NOT_CHECKED = object()
"""A case whose value Spark is not asked for (``sql`` is None)."""


@dataclass(frozen=True)
class Case:
    id: str
    column: dict[str, Any]
    sql: str | None
    exact: bool
    value: Any = NOT_CHECKED
    """What Spark reads of ``sql`` (``datetime`` in UTC for ``timestamptz``)."""
    modes: ConnectorModes = field(default=DEFAULT_MODES)


STRING = ConnectorModes(decimal_handling_mode="string")
DOUBLE = ConnectorModes(decimal_handling_mode="double")
CONNECT = ConnectorModes(time_precision_mode="connect")
ADAPTIVE = ConnectorModes(time_precision_mode="adaptive")
BASE64 = ConnectorModes(binary_handling_mode="base64")
UTC = dt.timezone.utc

LITERALS = [
    # strings: Debezium writes them unquoted; a quoted form is unquoted with MySQL's escapes
    Case("char", col("CHAR", "abc", length=3), "CAST('abc' AS STRING)", True, "abc"),
    Case("varchar-quote", col("VARCHAR", "it's", length=9), "CAST('it\\'s' AS STRING)", True, "it's"),
    Case("varchar-sql-quoted", col("VARCHAR", "'it''s'", length=9), "CAST('it\\'s' AS STRING)", True, "it's"),
    Case("varchar-double-quoted", col("VARCHAR", '"a\\"b"', length=9), "CAST('a\"b' AS STRING)", True, 'a"b'),
    Case("varchar-backslash", col("VARCHAR", "a\\b", length=9), "CAST('a\\\\b' AS STRING)", True, "a\\b"),
    Case("varchar-introducer", col("VARCHAR", "_utf8mb4'x'", length=9), "CAST('x' AS STRING)", True, "x"),
    Case("varchar-unicode", col("VARCHAR", "Zürich €", length=9), "CAST('Zürich €' AS STRING)", True, "Zürich €"),
    Case("varchar-empty", col("VARCHAR", "", length=9), "CAST('' AS STRING)", True, ""),
    Case("char-trailing-spaces", col("CHAR", "ab  ", length=4), "CAST('ab' AS STRING)", True, "ab"),
    Case("text", col("TEXT", "t"), "CAST('t' AS STRING)", True, "t"),
    Case("varchar-NULL-text", col("VARCHAR", "NULL", length=9), "CAST('NULL' AS STRING)", False, "NULL"),
    Case("json", col("JSON", '{"a": [1]}'), "CAST('{\"a\": [1]}' AS STRING)", True, '{"a": [1]}'),
    # integers
    Case("int", col("INT", "-3"), "CAST('-3' AS INT)", True, -3),
    Case("int-quoted", col("INT", "'42'"), "CAST('42' AS INT)", True, 42),
    Case("int-rounded-half-up", col("INT", "1.5"), "CAST('2' AS INT)", True, 2),
    Case("int-rounded-negative", col("INT", "-2.5"), "CAST('-3' AS INT)", True, -3),
    Case("int-exponent", col("INT", "1e3"), "CAST('1000' AS INT)", True, 1000),
    Case("int-true", col("TINYINT", "TRUE"), "CAST('1' AS INT)", True, 1),
    Case("int-hex", col("INT", "0x41"), "CAST('65' AS INT)", True, 65),
    Case("int-min", col("INT", "-2147483648"), "CAST('-2147483648' AS INT)", True, -(2**31)),
    Case("int-unsigned", col("INT UNSIGNED", "4294967295"), "CAST('4294967295' AS BIGINT)", True, 2**32 - 1),
    Case("bigint-min", col("BIGINT", "-9223372036854775808"), "CAST('-9223372036854775808' AS BIGINT)", True, -(2**63)),
    Case(
        "bigint-unsigned-precise",
        col("BIGINT UNSIGNED", "18446744073709551615"),
        "CAST('18446744073709551615' AS DECIMAL(20,0))",
        True,
        Decimal(2**64 - 1),
    ),
    Case("int-not-a-number", col("INT", "abc"), None, False),
    # booleans: BIT(1) and BOOLEAN (Debezium's parser: encoding boolean)
    Case("boolean-true", col("BOOLEAN", "TRUE", optional=False), "TRUE", True, True),
    Case("boolean-false", col("BOOLEAN", "false"), "FALSE", True, False),
    Case("boolean-zero", col("BOOLEAN", "0"), "FALSE", True, False),
    Case("bit1-one", col("BIT", "1", length=1), "TRUE", True, True),
    Case("bit1-b", col("BIT", "b'0'", length=1), "FALSE", True, False),
    # floating point
    Case("float", col("FLOAT", "1.5"), "CAST('1.5' AS FLOAT)", True, 1.5),
    Case("double-exponent", col("DOUBLE", "1e3"), "CAST('1000.0' AS DOUBLE)", True, 1000.0),
    Case("double-negative", col("DOUBLE", "-0.25"), "CAST('-0.25' AS DOUBLE)", True, -0.25),
    Case("float-m-d", col("FLOAT", "1.234", length=7, scale=2), "CAST('1.23' AS DOUBLE)", True, 1.23),
    Case("float-out-of-range", col("FLOAT", "1e39"), None, False),
    # decimals: rounded half away from zero to the scale, formatted with the scale's digits
    Case("decimal", col("DECIMAL", "1.50", length=5, scale=2), "CAST('1.50' AS DECIMAL(5,2))", True, Decimal("1.50")),
    Case(
        "decimal-quoted",
        col("DECIMAL", "'1.5'", length=5, scale=2),
        "CAST('1.50' AS DECIMAL(5,2))",
        True,
        Decimal("1.5"),
    ),
    Case(
        "decimal-rounded",
        col("DECIMAL", "1.555", length=5, scale=2),
        "CAST('1.56' AS DECIMAL(5,2))",
        True,
        Decimal("1.56"),
    ),
    Case(
        "decimal-negative",
        col("DECIMAL", "-3", length=5, scale=2),
        "CAST('-3.00' AS DECIMAL(5,2))",
        True,
        Decimal("-3"),
    ),
    Case(
        "decimal-negative-zero",
        col("DECIMAL", "-0.001", length=5, scale=2),
        "CAST('0.00' AS DECIMAL(5,2))",
        True,
        Decimal("0"),
    ),
    Case("decimal-too-wide", col("DECIMAL", "1000", length=5, scale=2), None, False),
    Case(
        "decimal-scale-0", col("DECIMAL", "7.5", length=10, scale=0), "CAST('8' AS DECIMAL(10,0))", True, Decimal("8")
    ),
    Case(
        "decimal-wide-as-string",
        col("DECIMAL", "-12.5", length=65, scale=4),
        "CAST('-12.5000' AS STRING)",
        True,
        "-12.5000",
    ),
    Case(
        "decimal-mode-string",
        col("DECIMAL", "1.5", length=5, scale=2),
        "CAST('1.50' AS STRING)",
        True,
        "1.50",
        STRING,
    ),
    Case(
        "decimal-mode-double",
        col("DECIMAL", "1.555", length=5, scale=2),
        "CAST('1.56' AS DOUBLE)",
        True,
        1.56,
        DOUBLE,
    ),
    # dates and times
    Case("date", col("DATE", "2020-01-02"), "CAST('2020-01-02' AS DATE)", True, dt.date(2020, 1, 2)),
    Case("date-quoted", col("DATE", "'2020-01-02'"), "CAST('2020-01-02' AS DATE)", True, dt.date(2020, 1, 2)),
    Case("date-digits", col("DATE", "20200102"), "CAST('2020-01-02' AS DATE)", True, dt.date(2020, 1, 2)),
    Case("date-connect", col("DATE", "2020-01-02"), "CAST('2020-01-02' AS DATE)", True, dt.date(2020, 1, 2), CONNECT),
    Case("date-invalid", col("DATE", "2020-13-01"), None, False),
    Case("date-not-a-date", col("DATE", "tomorrow"), None, False),
    Case("date-zero-not-null", col("DATE", "0000-00-00", optional=False), "CAST('1970-01-01' AS DATE)", False),
    Case("date-zero-nullable", col("DATE", "0000-00-00"), None, False),
    Case(
        "datetime-fsp0-rounds",
        col("DATETIME", "2020-01-02 10:11:12.5"),
        "CAST('2020-01-02 10:11:13' AS TIMESTAMP_NTZ)",
        True,
        dt.datetime(2020, 1, 2, 10, 11, 13),
    ),
    Case(
        "datetime6",
        col("DATETIME", "2020-01-02 10:11:12.5", length=6),
        "CAST('2020-01-02 10:11:12.500000' AS TIMESTAMP_NTZ)",
        True,
        dt.datetime(2020, 1, 2, 10, 11, 12, 500000),
    ),
    Case(
        "datetime3-rounds",
        col("DATETIME", "2020-01-02 10:11:12.3456", length=3),
        "CAST('2020-01-02 10:11:12.346000' AS TIMESTAMP_NTZ)",
        True,
        dt.datetime(2020, 1, 2, 10, 11, 12, 346000),
    ),
    Case(
        "datetime6-connect-millis",
        col("DATETIME", "2020-01-02 10:11:12.123456", length=6),
        "CAST('2020-01-02 10:11:12.123000' AS TIMESTAMP_NTZ)",
        True,
        dt.datetime(2020, 1, 2, 10, 11, 12, 123000),
        CONNECT,
    ),
    Case(
        "datetime-date-only",
        col("DATETIME", "2020-01-02"),
        "CAST('2020-01-02 00:00:00' AS TIMESTAMP_NTZ)",
        True,
        dt.datetime(2020, 1, 2),
    ),
    Case(
        "datetime-zero-not-null",
        col("DATETIME", "0000-00-00 00:00:00", optional=False),
        "CAST('1970-01-01 00:00:00' AS TIMESTAMP_NTZ)",
        False,
    ),
    Case(
        "timestamp-zone-unknown",
        col("TIMESTAMP", "2020-01-02 10:11:12"),
        "CAST('2020-01-02 10:11:12+00:00' AS TIMESTAMP)",
        False,
        dt.datetime(2020, 1, 2, 10, 11, 12, tzinfo=UTC),
    ),
    Case("time", col("TIME", "10:11:12"), "CAST('36672000000' AS BIGINT)", True, 36672000000),
    Case("time-digits", col("TIME", "101112"), "CAST('36672000000' AS BIGINT)", True, 36672000000),
    Case("time-negative", col("TIME", "-01:00:00.5", length=6), "CAST('-3600500000' AS BIGINT)", True, -3600500000),
    Case("time-days", col("TIME", "1 02:00"), "CAST('93600000000' AS BIGINT)", True, 93600000000),
    Case("time-max", col("TIME", "838:59:59"), "CAST('3020399000000' AS BIGINT)", True, 3020399000000),
    Case("time-fsp0-rounds", col("TIME", "00:00:01.5"), "CAST('2000000' AS BIGINT)", True, 2000000),
    Case(
        "time3-adaptive-millis",
        col("TIME", "00:00:01.2345", length=3),
        "CAST('1235000' AS BIGINT)",
        True,
        1235000,
        ADAPTIVE,
    ),
    Case("time-out-of-range", col("TIME", "839:00:00"), None, False),
    Case("time-bad-minutes", col("TIME", "10:61:00"), None, False),
    Case("year", col("YEAR", "2024"), "CAST('2024' AS INT)", True, 2024),
    Case("year-2-digits", col("YEAR", "24"), "CAST('2024' AS INT)", True, 2024),
    Case("year-2-digits-1900s", col("YEAR", "99"), "CAST('1999' AS INT)", True, 1999),
    Case("year-zero", col("YEAR", "0"), None, False),
    # ENUM and SET: enumValues quoted or not; the value as the enumeration spells it
    Case("enum-quoted-values", col("ENUM", "y", enum=["'x'", "'y'"]), "CAST('y' AS STRING)", True, "y"),
    Case("enum-plain-values", col("ENUM", "Y", enum=["x", "y"]), "CAST('y' AS STRING)", True, "y"),
    Case("enum-quote-in-value", col("ENUM", "it's", enum=["'it''s'", "'b'"]), "CAST('it\\'s' AS STRING)", True, "it's"),
    Case("enum-no-values", col("ENUM", "x"), "CAST('x' AS STRING)", True, "x"),
    Case("enum-unknown-value", col("ENUM", "z", enum=["x", "y"]), None, False),
    Case("set-ordered", col("SET", "c,a", enum=["'a'", "'b'", "'c'"]), "CAST('a,c' AS STRING)", True, "a,c"),
    Case("set-empty", col("SET", "", enum=["a"]), "CAST('' AS STRING)", True, ""),
    Case("set-unknown-member", col("SET", "a,z", enum=["a"]), None, False),
    # bits and bytes
    Case("bits-debezium-digits", col("BIT", "101", length=3), "X'05'", True, b"\x05"),
    Case("bits-b-literal", col("BIT", "b'1000000001'", length=10), "X'0201'", True, b"\x02\x01"),
    Case("bits-hex", col("BIT", "0x05", length=16), "X'0005'", True, b"\x00\x05"),
    Case("bits-too-wide", col("BIT", "1000", length=3), None, False),
    Case("binary-padded", col("BINARY", "ab", length=4), "X'61620000'", True, b"ab\x00\x00"),
    Case("varbinary-hex", col("VARBINARY", "0x41", length=4), "X'41'", True, b"A"),
    Case("blob-x-literal", col("BLOB", "x'4142'"), "X'4142'", True, b"AB"),
    Case("varbinary-base64-mode", col("VARBINARY", "abc", length=4), None, False, NOT_CHECKED, BASE64),
    Case("varbinary-base64-mode-empty", col("VARBINARY", "", length=4), "CAST('' AS STRING)", True, "", BASE64),
    # NULL
    Case("int-null", col("INT", "NULL"), None, True),
    Case("date-null", col("DATE", "null"), None, True),
    # spatial
    Case("geometry-literal", col("GEOMETRY", "POINT(1 1)"), None, False),
]

CURRENT_TIME = [
    Case(f"{type_name}-{text}", col(type_name, text, length=6), None, False)
    for type_name in ("DATETIME", "TIMESTAMP")
    for text in (
        "CURRENT_TIMESTAMP",
        "current_timestamp()",
        "CURRENT_TIMESTAMP(6)",
        "NOW()",
        "now(3)",
        "LOCALTIMESTAMP",
        "localtime()",
        "1970-01-01 00:00:00",  # what Debezium's parser writes for CURRENT_TIMESTAMP and NOW()
    )
] + [
    Case("date-curdate", col("DATE", "curdate()"), None, False),
    Case("int-expression", col("INT", "(1 + 2)"), None, False),
    Case("expression-without-text", col("INT", None, has_default=True), None, False),
    Case("varchar-expression-without-text", col("VARCHAR", None, has_default=True, optional=False), None, False),
    Case("auto-increment", col("INT", None, optional=False, auto=True), None, False),
    Case("generated", col("INT", None, generated=True), None, False),
]

NO_DEFAULT = [
    # nullable: NULL
    Case("nullable-int", col("INT"), None, True),
    Case("nullable-varchar", col("VARCHAR", length=3), None, True),
    Case("nullable-datetime", col("DATETIME"), None, True),
    Case("nullable-enum", col("ENUM", enum=["x"]), None, True),
    Case("nullable-geometry", col("GEOMETRY"), None, True),
    Case("nullable-has-default-false", col("INT", has_default=False), None, True),
    # NOT NULL: the implicit default
    Case("int", col("INT", optional=False), "CAST('0' AS INT)", True, 0),
    Case("bigint", col("BIGINT", optional=False), "CAST('0' AS BIGINT)", True, 0),
    Case("tinyint", col("TINYINT", optional=False), "CAST('0' AS INT)", True, 0),
    Case("bigint-unsigned", col("BIGINT UNSIGNED", optional=False), "CAST('0' AS DECIMAL(20,0))", True, Decimal(0)),
    Case(
        "decimal", col("DECIMAL", optional=False, length=5, scale=2), "CAST('0.00' AS DECIMAL(5,2))", True, Decimal(0)
    ),
    Case("decimal-wide", col("DECIMAL", optional=False, length=65, scale=3), "CAST('0.000' AS STRING)", True, "0.000"),
    Case(
        "decimal-mode-string",
        col("DECIMAL", optional=False, length=5, scale=2),
        "CAST('0.00' AS STRING)",
        True,
        "0.00",
        STRING,
    ),
    Case("float", col("FLOAT", optional=False), "CAST('0.0' AS FLOAT)", True, 0.0),
    Case("double", col("DOUBLE", optional=False), "CAST('0.0' AS DOUBLE)", True, 0.0),
    Case("varchar", col("VARCHAR", optional=False, length=3), "CAST('' AS STRING)", True, ""),
    Case("char", col("CHAR", optional=False, length=3), "CAST('' AS STRING)", True, ""),
    Case("text", col("TEXT", optional=False), "CAST('' AS STRING)", True, ""),
    Case("enum-first", col("ENUM", optional=False, enum=["'x'", "'y'"]), "CAST('x' AS STRING)", True, "x"),
    Case("enum-without-values", col("ENUM", optional=False), None, False),
    Case("set", col("SET", optional=False, enum=["a", "b"]), "CAST('' AS STRING)", True, ""),
    Case("boolean", col("BOOLEAN", optional=False), "FALSE", True, False),
    Case("bit1", col("BIT", optional=False, length=1), "FALSE", True, False),
    Case("bit10", col("BIT", optional=False, length=10), "X'0000'", True, b"\x00\x00"),
    Case("binary3", col("BINARY", optional=False, length=3), "X'000000'", True, b"\x00\x00\x00"),
    Case("varbinary", col("VARBINARY", optional=False, length=3), "X''", True, b""),
    Case("blob", col("BLOB", optional=False), "X''", True, b""),
    Case("binary3-base64-mode", col("BINARY", optional=False, length=3), None, False, NOT_CHECKED, BASE64),
    Case("blob-base64-mode", col("BLOB", optional=False), "CAST('' AS STRING)", True, "", BASE64),
    Case("time", col("TIME", optional=False), "CAST('0' AS BIGINT)", True, 0),
    Case("date-zero", col("DATE", optional=False), "CAST('1970-01-01' AS DATE)", False),
    Case("datetime-zero", col("DATETIME", optional=False), "CAST('1970-01-01 00:00:00' AS TIMESTAMP_NTZ)", False),
    Case("timestamp-zero", col("TIMESTAMP", optional=False), "CAST('1970-01-01 00:00:00+00:00' AS TIMESTAMP)", False),
    Case("year", col("YEAR", optional=False), None, False),
    Case("json", col("JSON", optional=False), None, False),
    Case("geometry", col("GEOMETRY", optional=False), None, False),
]

ALL = LITERALS + CURRENT_TIME + NO_DEFAULT


def run(case: Case) -> ColumnDefault:
    return added_column_default(case.column, spec_of(case.column, case.modes))


@pytest.mark.parametrize("case", LITERALS, ids=[c.id for c in LITERALS])
def test_literal_defaults(case: Case) -> None:
    got = run(case)
    assert (got.sql, got.exact) == (case.sql, case.exact), got.reason
    assert got.column == "c"


@pytest.mark.parametrize("case", CURRENT_TIME, ids=[c.id for c in CURRENT_TIME])
def test_values_filled_by_the_source_are_not_known(case: Case) -> None:
    got = run(case)
    assert (got.sql, got.exact) == (case.sql, case.exact), got.reason
    assert "not known" in got.reason


@pytest.mark.parametrize("case", NO_DEFAULT, ids=[c.id for c in NO_DEFAULT])
def test_no_default(case: Case) -> None:
    got = run(case)
    assert (got.sql, got.exact) == (case.sql, case.exact), got.reason


def test_reasons_name_the_source_of_the_value() -> None:
    assert run(LITERALS[0]).reason == "DEFAULT 'abc'"
    assert added_column_default(
        col("DECIMAL", "1.50", length=5, scale=2), spec_of(col("DECIMAL", length=5, scale=2))
    ).reason == ("DEFAULT 1.50")
    int_not_null = col("INT", optional=False)
    assert added_column_default(int_not_null, spec_of(int_not_null)).reason == (
        "implicit default of a NOT NULL INT column: 0"
    )
    ts = col("TIMESTAMP", "CURRENT_TIMESTAMP")
    assert added_column_default(ts, spec_of(ts)).reason == (
        "DEFAULT CURRENT_TIMESTAMP: filled by the source at ALTER time; not known to the lake"
    )
    epoch = col("DATETIME", "1970-01-01 00:00:00")
    assert "Debezium" in added_column_default(epoch, spec_of(epoch)).reason
    zero = col("DATE", optional=False)
    assert "zero date" in added_column_default(zero, spec_of(zero)).reason


def test_optional_falls_back_to_the_spec() -> None:
    column = col("INT")
    del column["optional"]
    assert added_column_default(column, ColumnSpec("c", "int", True, "int32")).sql == "CAST('0' AS INT)"
    assert added_column_default(column, ColumnSpec("c", "int", False, "int32")).sql is None


def test_a_promoted_column_is_cast_to_its_iceberg_type() -> None:
    # INT promoted to long, DECIMAL(5,2) to decimal(10,2) by an earlier schema change
    assert added_column_default(col("INT", "7"), ColumnSpec("c", "long", False, "int32")).sql == "CAST('7' AS BIGINT)"
    spec = ColumnSpec("c", "decimal(10,2)", False, "org.apache.kafka.connect.data.Decimal(5,2)")
    assert added_column_default(col("DECIMAL", "1.5"), spec).sql == "CAST('1.50' AS DECIMAL(10,2))"


def test_an_unknown_encoding_is_not_exact() -> None:
    got = added_column_default(col("VECTOR", "x"), ColumnSpec("c", "string", False, "io.debezium.data.FloatVector"))
    assert (got.sql, got.exact) == (None, False)


def test_the_recorded_boolean_default() -> None:
    # `active BOOLEAN NOT NULL DEFAULT TRUE` as the real Debezium MariaDB connector recorded it
    records = [json.loads(line) for line in (CHAIN / "schema-changes.jsonl").read_text().splitlines() if line]
    columns = [
        c
        for r in records
        for change in json.loads(r["value"])["payload"].get("tableChanges") or []
        for c in (change.get("table") or {}).get("columns") or []
    ]
    active = next(c for c in columns if c["name"] == "active")
    assert added_column_default(active, spec_of(active)) == ColumnDefault("active", "TRUE", True, "DEFAULT TRUE")
    note = next(c for c in columns if c["name"] == "note")  # VARCHAR(100) NULL
    assert added_column_default(note, spec_of(note)).sql is None


@pytest.mark.parametrize(
    ("text", "literal"),
    [("abc", "'abc'"), ("it's", "'it\\'s'"), ("a\\b", "'a\\\\b'"), ("\\'", "'\\\\\\''"), ("", "''")],
)
def test_spark_string_literal(text: str, literal: str) -> None:
    assert spark_string_literal(text) == literal


def test_spark_type() -> None:
    assert spark_type("decimal(10, 2)") == "DECIMAL(10,2)"
    assert spark_type("timestamp") == "TIMESTAMP_NTZ"
    assert spark_type("timestamptz") == "TIMESTAMP"
    with pytest.raises(ValueError, match="struct"):
        spark_type("struct<wkb:binary,srid:int>")


@pytest.mark.integration
def test_every_expression_is_valid_spark_sql_of_the_column_type(spark) -> None:
    """Every ``sql`` above, evaluated by the tests' Spark session (UTC; a bare session of its own
    would start the JVM without the Iceberg runtime for the integration tests after it): its type is
    the column's, its value the expected."""
    cases = [(c, run(c), spec_of(c.column, c.modes)) for c in ALL]
    cases = [(c, got, spec) for c, got, spec in cases if got.sql is not None]
    session = spark
    frame = session.sql(
        "SELECT *, "
        + ", ".join(f"CAST(c{i} AS STRING) AS s{i}" for i in range(len(cases)))
        + f" FROM (SELECT {', '.join(f'{got.sql} AS c{i}' for i, (_c, got, _s) in enumerate(cases))})"
    )
    row = frame.collect()[0]
    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    problems = []
    for i, (case, got, spec) in enumerate(cases):
        if types[f"c{i}"] != spark_type(spec.iceberg_type).lower():
            problems.append(f"{case.id}: {got.sql} is {types[f'c{i}']}, not {spec.iceberg_type}")
        value = row[f"c{i}"]
        if spec.iceberg_type == "timestamptz":  # Spark hands a naive local time: read its UTC text
            value = dt.datetime.fromisoformat(row[f"s{i}"]).replace(tzinfo=UTC)
        elif isinstance(value, bytearray):
            value = bytes(value)
        if case.value is not NOT_CHECKED and value != case.value:
            problems.append(f"{case.id}: {got.sql} reads {value!r}, expected {case.value!r}")
    assert not problems, "\n".join(problems)
    escapes = session.sql("SELECT '\\\\ \\'' AS a, CAST('it\\'s' AS STRING) AS b").collect()[0]
    assert (escapes["a"], escapes["b"]) == ("\\ '", "it's")


def test_defaults_of_alters_recorded_on_the_real_chain():
    """``tests/data/chain/alter-defaults.jsonl``: the schema-change records Debezium's MariaDB
    connector 3.5 emitted for these ALTERs on a populated table; ``expected`` is what ``SELECT``
    returned for the rows from before each ALTER (None: a value the lake cannot know)."""
    import json as _json
    from pathlib import Path

    from cdclake.model.config_blocks import ConnectorModes
    from cdclake.model.mysql_types import column_type
    from cdclake.model.schema_changes import changes_from_record
    from cdclake.model.types import ColumnSpec

    expected = {
        "tag": "CAST('abc' AS STRING)",
        "n": "CAST('0' AS INT)",
        "s": "CAST('' AS STRING)",
        "d": "CAST('1.50' AS DECIMAL(5,2))",
        "e": "CAST('x' AS STRING)",
        "dt": None,  # 0000-00-00 00:00:00
        "ts": None,  # CURRENT_TIMESTAMP at the ALTER
        "bo": "TRUE",
        "dd": "CAST('2020-01-02' AS DATE)",
        "f": "CAST('2.5' AS DOUBLE)",
        "bi": "X'05'",
    }
    path = Path(__file__).resolve().parents[1] / "data" / "chain" / "alter-defaults.jsonl"
    got = {}
    for line in path.read_text().splitlines():
        change = changes_from_record(_json.loads(line), '"inventory"."a"')[0]
        column = change.columns[-1]
        iceberg_type, encoding = column_type(column, ConnectorModes())
        default = added_column_default(column, ColumnSpec(column["name"], iceberg_type, False, encoding))
        got[column["name"]] = default.sql if default.exact else None
    assert got == expected


# --- defaults from the events' own schemas (connect_default) --------------------------------------

DEC = "org.apache.kafka.connect.data.Decimal"

CONNECT_DEFAULTS = [
    # (id, encoding, Iceberg type, the field's Connect default, the expected sql; None: not exact)
    ("string", "string", "string", "abc", "CAST('abc' AS STRING)"),
    ("quote", "string", "string", "it's", "CAST('it\\'s' AS STRING)"),
    ("enum", "io.debezium.data.Enum", "string", "x", "CAST('x' AS STRING)"),
    ("set", "io.debezium.data.EnumSet", "string", "a,b", "CAST('a,b' AS STRING)"),
    ("int16", "int16", "int", 7, "CAST('7' AS INT)"),
    ("int32-promoted", "int32", "long", 7, "CAST('7' AS BIGINT)"),
    ("int64", "int64", "long", -(2**63), f"CAST('{-(2**63)}' AS BIGINT)"),
    ("unsigned", "int64(unsigned)", "long", 5, "CAST('5' AS BIGINT)"),
    ("unsigned-wrapped", "int64(unsigned)", "long", -1, None),
    ("year", "io.debezium.time.Year", "int", 2024, "CAST('2024' AS INT)"),
    ("float", "float", "float", 2.5, "CAST('2.5' AS FLOAT)"),
    ("double", "double", "double", 0.1, "CAST('0.1' AS DOUBLE)"),
    ("double-int", "double", "double", 2, "CAST('2.0' AS DOUBLE)"),
    ("bit1", "boolean", "boolean", True, "TRUE"),
    ("bit1-false", "boolean", "boolean", False, "FALSE"),
    ("decimal", f"{DEC}(5,2)", "decimal(5,2)", "AJY=", "CAST('1.50' AS DECIMAL(5,2))"),
    ("decimal-negative", f"{DEC}(5,2)", "decimal(5,2)", "/w==", "CAST('-0.01' AS DECIMAL(5,2))"),
    ("decimal-numeric", f"{DEC}(5,2)", "decimal(5,2)", 1.5, "CAST('1.50' AS DECIMAL(5,2))"),
    ("decimal-beyond-scale", f"{DEC}(5,2)", "decimal(5,2)", 1.505, None),
    ("decimal-wide", f"{DEC}(65,1)", "string", "AQ==", "CAST('0.1' AS STRING)"),
    ("decimal-not-base64", f"{DEC}(5,2)", "decimal(5,2)", "%%", None),
    (
        "variable-scale",
        "io.debezium.data.VariableScaleDecimal",
        "string",
        {"scale": 3, "value": "BNI="},
        "CAST('1.234' AS STRING)",
    ),
    ("date", "io.debezium.time.Date", "date", 18263, "CAST('2020-01-02' AS DATE)"),
    ("date-before-epoch", "io.debezium.time.Date", "date", -1, "CAST('1969-12-31' AS DATE)"),
    ("date-epoch", "io.debezium.time.Date", "date", 0, None),  # a zero date, or an expression
    (
        "datetime-ms",
        "io.debezium.time.Timestamp",
        "timestamp",
        1577934245123,
        "CAST('2020-01-02 03:04:05.123000' AS TIMESTAMP_NTZ)",
    ),
    (
        "datetime-us",
        "io.debezium.time.MicroTimestamp",
        "timestamp",
        1577934245123456,
        "CAST('2020-01-02 03:04:05.123456' AS TIMESTAMP_NTZ)",
    ),
    ("datetime-epoch", "io.debezium.time.Timestamp", "timestamp", 0, None),  # DEFAULT CURRENT_TIMESTAMP
    ("datetime-ns-sub-us", "io.debezium.time.NanoTimestamp", "timestamp", 1001, None),
    (
        "timestamp",
        "io.debezium.time.ZonedTimestamp",
        "timestamptz",
        "2020-01-02T03:04:05.5Z",
        "CAST('2020-01-02T03:04:05.5Z' AS TIMESTAMP)",
    ),
    ("timestamp-epoch", "io.debezium.time.ZonedTimestamp", "timestamptz", "1970-01-01T00:00:00Z", None),
    ("timestamp-no-offset", "io.debezium.time.ZonedTimestamp", "timestamptz", "2020-01-02 03:04:05", None),
    ("time-us", "io.debezium.time.MicroTime", "long", -1500000, "CAST('-1500000' AS BIGINT)"),
    ("time-ms", "io.debezium.time.Time", "long", 1500, "CAST('1500000' AS BIGINT)"),
    ("bytes", "bytes", "binary", "AAEC", "X'000102'"),
    ("bits", "io.debezium.data.Bits", "binary", "AQI=", "X'0201'"),  # Debezium's little-endian order
    ("json", "io.debezium.data.Json", "string", '{"a": 1}', "CAST('{\"a\": 1}' AS STRING)"),
    ("text-for-int", "int32", "int", "7", None),
    (
        "spatial",
        "io.debezium.data.geometry.Point",
        "struct<wkb:binary,srid:int>",
        {"x": 1.0, "y": 2.0, "wkb": "AA==", "srid": None},
        None,
    ),
]


@pytest.mark.parametrize(
    ("encoding", "iceberg", "value", "sql"), [c[1:] for c in CONNECT_DEFAULTS], ids=[c[0] for c in CONNECT_DEFAULTS]
)
def test_connect_defaults_decode_as_the_columns_values(
    encoding: str, iceberg: str, value: Any, sql: str | None
) -> None:
    got = connect_default(value, ColumnSpec("c", iceberg, False, encoding), shown_by="the event at p0 o1")
    assert (got.sql, got.exact) == (sql, sql is not None), got.reason
    assert got.reason.startswith(f"DEFAULT {json.dumps(value)}"[:40]) and "the event at p0 o1" in got.reason


def test_connect_defaults_of_a_row_schema() -> None:
    row = {
        "type": "struct",
        "fields": [
            {"field": "id", "type": "int32", "optional": False},
            {"field": "tag", "type": "string", "optional": False, "default": "abc"},
            {"field": "none", "type": "string", "optional": True, "default": None},
            {"field": "zero", "type": "int32", "optional": False, "default": 0},
        ],
    }
    assert connect_defaults(row) == {"tag": "abc", "zero": 0}


@pytest.mark.integration
def test_connect_defaults_are_the_values_the_apply_decodes(spark) -> None:
    """Each exact default above, as Spark SQL, equals what :func:`cdclake.spark.decode.decode` makes
    of the same Connect-encoded value in an event (read by ``from_json`` as its column's JSON read
    type): the rows filled with the default hold what an event would have written."""
    from pyspark.sql import functions as F

    from cdclake.spark.decode import decode, json_read_type

    cases = [c for c in CONNECT_DEFAULTS if c[4] is not None]
    ddl = ", ".join(f"v{i}: {json_read_type(c[1])}" for i, c in enumerate(cases))
    doc = json.dumps({f"v{i}": c[3] for i, c in enumerate(cases)})
    frame = spark.createDataFrame([(doc,)], "j string").select(F.from_json("j", f"struct<{ddl}>").alias("r"))
    checks = [
        F.struct(decode(f"r.v{i}", c[1]).alias("decoded"), F.expr(c[4]).alias("default")) for i, c in enumerate(cases)
    ]
    row = frame.select(*[check.alias(f"c{i}") for i, check in enumerate(checks)]).collect()[0]
    problems = [
        f"{c[0]}: decode gives {row[f'c{i}']['decoded']!r}, the default {row[f'c{i}']['default']!r}"
        for i, c in enumerate(cases)
        if row[f"c{i}"]["decoded"] is None or row[f"c{i}"]["decoded"] != row[f"c{i}"]["default"]
    ]
    assert not problems, "\n".join(problems)
