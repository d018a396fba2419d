"""The value a column added by ``ALTER TABLE ... ADD COLUMN`` takes in the rows that existed before (pure).

MariaDB and MySQL fill the rows a table already holds with the new column's default, and write no
row event for them: the lake learns of the column from the schema-change topic only. This module
turns the column's ``tableChanges`` entry (:mod:`cdclake.model.schema_changes`) into a Spark SQL
expression of that value, typed to the column's Iceberg type, so that the apply job can backfill
those rows.

A table that evolves from its events' own schemas (``schema_changes.source: events``, or no
schema-change topic) learns of the column from the first event whose schema shows it: the default
is then the ``default`` of the column's field in that schema, a Connect-encoded value decoded as
the apply decodes the column's values (:func:`connect_default`; :func:`connect_defaults` reads them
from a row schema). No default, or a null one, is NULL; the implicit default of a NOT NULL column
is not in the events.

Sources of the rules: MySQL 8.0 Reference Manual, "Data Type Default Values" (explicit and
implicit defaults), "Date and Time Literals", "The TIME Type", "The YEAR Type", "Bit-Value
Literals", "Fractional Seconds in Time Values" (rounding), "The ENUM Type", "The SET Type", "The
BINARY and VARBINARY Types" (0x00 padding), "The CHAR and VARCHAR Types" (trailing spaces);
MariaDB Knowledge Base, "ALTER TABLE" (``ADD COLUMN``), "CREATE TABLE" (``DEFAULT``, including
``DEFAULT (expression)`` since 10.2) and "explicit_defaults_for_timestamp". What Debezium writes in
``defaultValueExpression`` is its DDL parser's (``DefaultValueParserListener`` of the MySQL and
MariaDB connectors): string literals unquoted, ``b'101'`` as ``101``, ``TRUE``/``FALSE`` as written,
``DEFAULT NULL`` as no default, ``DEFAULT CURRENT_TIMESTAMP`` / ``NOW()`` as
``1970-01-01 00:00:00``, ``LOCALTIMESTAMP`` and the like as written, and ``DEFAULT (expression)``
as ``hasDefaultValue: true`` with no expression (older versions send no ``hasDefaultValue``: such
a default then reads as no default).

The Spark type of each Iceberg type: ``int`` INT, ``long`` BIGINT, ``float`` FLOAT, ``double``
DOUBLE, ``decimal(P,S)`` DECIMAL(P,S), ``string`` STRING, ``boolean`` BOOLEAN, ``date`` DATE,
``timestamp`` TIMESTAMP_NTZ, ``timestamptz`` TIMESTAMP, ``binary`` BINARY.

================================================  ==================================================  =====
the added column                                  value of the existing rows (``sql``)                exact
================================================  ==================================================  =====
no default, nullable                              NULL (``None``)                                     yes
``DEFAULT NULL``                                  NULL (``None``)                                     yes
``DEFAULT`` literal                               the literal, converted as the source stores it in   yes
                                                  the column (below)
``DEFAULT`` literal of a TIMESTAMP column         the literal read as UTC: the source read it in the  no
                                                  time zone of the ALTER's session
``DEFAULT CURRENT_TIMESTAMP``, ``NOW()``,         ``None``: the time of the ALTER                     no
``LOCALTIMESTAMP``, ``CURDATE()``, ... (any
precision), and Debezium's
``1970-01-01 00:00:00`` which stands for them
``DEFAULT (expression)``, a literal this          ``None``                                            no
version does not convert
AUTO_INCREMENT, generated (``AS (...)``)          ``None``: numbered / computed by the source         no
no default, NOT NULL: numbers                     ``0`` (decimal: ``0`` with the scale)               yes
no default, NOT NULL: CHAR, VARCHAR, TEXT, SET    ``''``                                              yes
no default, NOT NULL: ENUM                        the first value of the enumeration                  yes
no default, NOT NULL: BIT(1) (``boolean``)        FALSE                                               yes
no default, NOT NULL: BIT(n)                      ceil(n/8) zero bytes                                yes
no default, NOT NULL: BINARY(n); VARBINARY, BLOB  n zero bytes; empty                                 yes
no default, NOT NULL: TIME                        ``0`` (``00:00:00`` in microseconds)                yes
no default, NOT NULL: DATE, DATETIME, TIMESTAMP   the zero date, which Debezium cannot represent:     no
                                                  the epoch, as Debezium emits it in a NOT NULL
                                                  column (:mod:`cdclake.model.types`); a first
                                                  TIMESTAMP column with
                                                  ``explicit_defaults_for_timestamp=OFF`` gets the
                                                  ALTER time instead
no default, NOT NULL: YEAR                        ``None``: the zero year ``0000``                    no
no default, NOT NULL: JSON, spatial               ``None``                                            no
================================================  ==================================================  =====

Literals, by the column's encoding (:mod:`cdclake.model.types`); surrounding quotes (``'..'``,
``".."``) are removed first, with MySQL's escapes (``''``, ``\\'``, ``\\\\``, ``\\n``, ...):

* integers (``int``, ``long``, YEAR): decimal text rounded half away from zero, ``TRUE`` 1,
  ``FALSE`` 0, ``0x41`` / ``X'41'`` / ``b'101'`` as unsigned numbers; YEAR ``1``-``99`` as
  2001-2069 / 1970-1999, ``0`` and ``00`` (zero year or 2000: not known) are not exact.
* ``float``, ``double``: the number (FLOAT(M,D), DOUBLE(M,D) and a DECIMAL read as double rounded
  to D digits first).
* decimals: rounded half away from zero to the scale; ``decimal(P,S)`` ``CAST('1.50' AS
  DECIMAL(P,S))``; a decimal stored as ``string`` (wider than 38 digits, or
  ``decimal.handling.mode=string``) the exact text with S fraction digits.
* ``boolean`` (BIT(1)): ``1``/``0``, ``TRUE``/``FALSE``, ``b'1'``.
* strings: the text (CHAR without its trailing spaces, as MySQL reads it back); ENUM the value as
  the enumeration spells it; SET the members in the enumeration's order; JSON the text.
* DATE ``YYYY-MM-DD`` (a time part is dropped); DATETIME ``YYYY-MM-DD[ HH:MM:SS[.f]]`` rounded to
  the column's fractional digits (``length``), then truncated to milliseconds for the
  millisecond encodings; TIME ``[-][D ]HH:MM[:SS[.f]]`` or ``HHMMSS[.f]`` -> microseconds.
* TIMESTAMP (``timestamptz``): the source reads the literal in the time zone of the session that
  ran the ALTER, which the lake does not know: ``sql`` reads it as UTC, not exact.
* zero dates (``0000-00-00``): the epoch in a NOT NULL column, NULL in a nullable one (what
  Debezium emits for them), not exact.
* BIT(n): Debezium's digits are binary (``b'101'`` arrives as ``101``), or ``0x..``; big-endian
  ceil(n/8) bytes. BINARY, VARBINARY, BLOB: ``0x..``, ``X'..'``, ``b'..'`` or the text's UTF-8
  bytes, BINARY(n) padded with zero bytes to n. Binary columns stored as ``string``
  (``binary.handling.mode`` base64 or hex) are not exact unless the value is empty.
* ``NULL`` in a string column is the four letters (Debezium writes ``DEFAULT NULL`` as no
  default, so it can only be ``DEFAULT 'NULL'``): not exact; in any other column it is NULL.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdclake.model.mysql_literals import (
    LiteralError,
    ZeroDate,
    binary_value,
    bit_value,
    date_value,
    datetime_value,
    ddl_text,
    decimal_text,
    enum_value,
    number,
    plain,
    round_half_up,
    set_value,
    time_us,
    unquote,
    year,
)
from cdclake.model.types import (
    DECIMAL,
    SPATIAL_ENCODINGS,
    TIME_ENCODINGS,
    UNSIGNED_INT64,
    ColumnSpec,
    parse_decimal_encoding,
    parse_decimal_type,
)


@dataclass(frozen=True)
class ColumnDefault:
    """What the rows that existed before an ``ADD COLUMN`` read in the added column.

    Attributes:
        column: the column name.
        sql: Spark SQL expression of the value, typed to the column's Iceberg type
            (``CAST('abc' AS STRING)``, ``CAST('1.50' AS DECIMAL(5,2))``, ``TRUE``, ``X'05'``);
            ``None`` is SQL NULL. When ``exact`` is false it is the lake's best reading of the
            value (stated in ``reason``), or ``None`` when there is none.
        exact: the value is the one the source filled in; false when the lake cannot know it
            (``CURRENT_TIMESTAMP``, expressions, zero dates, the time zone of a TIMESTAMP
            literal, values this version does not convert).
        reason: where the value comes from, for logs and operators (``DEFAULT 'abc'``,
            ``implicit default of a NOT NULL INT column: 0``).
    """

    column: str
    sql: str | None
    exact: bool
    reason: str


class Inexact(Exception):
    """The value is not known exactly: ``sql`` is the best reading (or ``None``)."""

    def __init__(self, why: str, sql: str | None = None) -> None:
        super().__init__(why)
        self.why = why
        self.sql = sql


_SPARK_TYPES = {
    "int": "INT",
    "long": "BIGINT",
    "float": "FLOAT",
    "double": "DOUBLE",
    "string": "STRING",
    "boolean": "BOOLEAN",
    "date": "DATE",
    "timestamp": "TIMESTAMP_NTZ",
    "timestamptz": "TIMESTAMP",
    "binary": "BINARY",
}
_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
FLOAT_MAX = 3.4028234663852886e38

DATE_ENCODINGS = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})
_TIMESTAMP_ENCODINGS = frozenset(
    {
        "io.debezium.time.Timestamp",
        "io.debezium.time.MicroTimestamp",
        "io.debezium.time.NanoTimestamp",
        "org.apache.kafka.connect.data.Timestamp",
    }
)
_MILLIS_ENCODINGS = frozenset(
    {
        "io.debezium.time.Time",
        "org.apache.kafka.connect.data.Time",
        "io.debezium.time.Timestamp",
        "org.apache.kafka.connect.data.Timestamp",
    }
)
"""Encodings that carry milliseconds: the source value is truncated to them."""
ZONED_TIMESTAMP_ENCODING = "io.debezium.time.ZonedTimestamp"
YEAR_ENCODING = "io.debezium.time.Year"
ENUM_ENCODING = "io.debezium.data.Enum"
ENUM_SET_ENCODING = "io.debezium.data.EnumSet"
JSON_ENCODING = "io.debezium.data.Json"
BITS_ENCODING = "io.debezium.data.Bits"
INTEGER_ENCODINGS = frozenset({"int8", "int16", "int32", "int64", UNSIGNED_INT64})
FLOAT_ENCODINGS = frozenset({"float", "float32", "double", "float64"})
_BINARY_TYPES = frozenset({"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"})
_DECIMAL_TYPES = frozenset({"DECIMAL", "NUMERIC", "DEC", "FIXED"})

_CURRENT_TIME = re.compile(
    r"^(current_timestamp|current_date|current_time|localtimestamp|localtime|now|curdate|curtime|sysdate"
    r"|utc_timestamp|utc_date|utc_time|unix_timestamp)\s*(\(\s*\d*\s*\))?$",
    re.IGNORECASE,
)
_DEBEZIUM_CURRENT_TIMESTAMP = "1970-01-01 00:00:00"
"""What Debezium's DDL parser writes for ``DEFAULT CURRENT_TIMESTAMP`` and ``DEFAULT NOW()``."""


def spark_string_literal(text: str) -> str:
    """``text`` as a Spark SQL string literal: in single quotes, with ``\\`` and ``'`` escaped by a
    backslash (Spark's default ``spark.sql.parser.escapedStringLiterals=false`` reads them)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def spark_type(iceberg_type: str) -> str:
    """The Spark SQL type name of an Iceberg primitive type (``decimal(10,2)`` -> ``DECIMAL(10,2)``).

    Raises:
        ValueError: a type that is not an Iceberg primitive.
    """
    dec = parse_decimal_type(iceberg_type)
    if dec is not None:
        return f"DECIMAL({dec[0]},{dec[1]})"
    if iceberg_type in _SPARK_TYPES:
        return _SPARK_TYPES[iceberg_type]
    raise ValueError(f"not an Iceberg primitive type: {iceberg_type!r}")


def cast_sql(text: str, iceberg_type: str) -> str:
    """``CAST('<text>' AS <Spark type>)`` of an Iceberg type name (``"long"``, ``"decimal(10,2)"``).

    Raises:
        Inexact: the type has no Spark SQL literal here (no value is written).
    """
    try:
        return f"CAST({spark_string_literal(text)} AS {spark_type(iceberg_type)})"
    except ValueError as e:
        raise Inexact(f"{e}: no value is written") from e


def hex_sql(data: bytes) -> str:
    """Spark SQL's binary literal ``X'<HEX>'`` of ``data``."""
    return f"X'{data.hex().upper()}'"


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _base_type(column: dict[str, Any]) -> str:
    words = str(column.get("typeName") or "").upper().split()
    return words[0] if words else ""


def _type_label(column: dict[str, Any]) -> str:
    return str(column.get("typeExpression") or column.get("typeName") or "?").upper()


def _fsp(column: dict[str, Any]) -> int:
    """The column's fractional-second digits (``length`` of a DATETIME, TIMESTAMP or TIME; 0 without)."""
    length = _int_or_none(column.get("length"))
    return min(length, 6) if length is not None else 0


def _binary_bytes(text: str, column: dict[str, Any]) -> bytes:
    """A BINARY/VARBINARY/BLOB default -> the bytes the source stores (BINARY(n) padded)."""
    length = _int_or_none(column.get("length"))
    return binary_value(text, length if _base_type(column) == "BINARY" else None)


def _enum_values(column: dict[str, Any]) -> list[str] | None:
    values = column.get("enumValues")
    if not isinstance(values, list) or not values:
        return None
    return [unquote(str(v)) for v in values]


def _optional(column: dict[str, Any], spec: ColumnSpec) -> bool:
    optional = column.get("optional")
    return bool(optional) if optional is not None else not spec.required


# --- literal conversions, by encoding ------------------------------------------------------------


def integer_sql(value: Decimal, spec: ColumnSpec) -> str:
    """``value`` rounded half up (as MySQL stores a fractional default of an integer column) and cast
    to the column's Iceberg type.

    Raises:
        Inexact: the rounded value is outside the type's range.
    """
    n = int(round_half_up(value, 0))
    low, high = _INT_RANGES.get(spec.iceberg_type, _INT_RANGES["long"])
    if not low <= n <= high:
        raise Inexact(f"{n} is out of the range of an Iceberg {spec.iceberg_type}")
    return cast_sql(str(n), spec.iceberg_type)


def _decimal_sql(text: str, encoding: str, spec: ColumnSpec) -> str:
    dec = parse_decimal_encoding(encoding)
    assert dec is not None
    precision, scale = dec
    target = parse_decimal_type(spec.iceberg_type)
    if target is not None:
        precision = target[0] if precision is None else min(precision, target[0])
    return cast_sql(decimal_text(number(text), precision, scale), spec.iceberg_type)


def _float_sql(text: str, column: dict[str, Any], spec: ColumnSpec) -> str:
    value = number(text)
    scale = _int_or_none(column.get("scale"))
    if scale is not None:  # FLOAT(M,D), DOUBLE(M,D), a DECIMAL read as double: rounded to D digits
        value = round_half_up(value, scale)
    as_float = float(value)
    limit = FLOAT_MAX if spec.iceberg_type == "float" else math.inf
    if not math.isfinite(as_float) or abs(as_float) > limit:
        raise Inexact(f"{value} is out of the range of an Iceberg {spec.iceberg_type}")
    return cast_sql(repr(as_float), spec.iceberg_type)


def _zero_date(spec: ColumnSpec, column: dict[str, Any], what: str) -> Inexact:
    if _optional(column, spec):
        return Inexact(f"{what} is a zero date, which Debezium emits as NULL in a nullable column", None)
    epoch = {"date": "1970-01-01", "timestamp": "1970-01-01 00:00:00", "timestamptz": "1970-01-01 00:00:00+00:00"}
    sql = cast_sql(epoch[spec.iceberg_type], spec.iceberg_type) if spec.iceberg_type in epoch else None
    return Inexact(f"{what} is a zero date, not representable; Debezium emits the epoch in a NOT NULL column", sql)


def _zoned_timestamp_sql(text: str, column: dict[str, Any], spec: ColumnSpec, encoding: str) -> str:
    moment = datetime_value(text, _fsp(column), millis=encoding in _MILLIS_ENCODINGS)
    sql = cast_sql(moment.isoformat(sep=" ") + "+00:00", spec.iceberg_type)
    raise Inexact(
        f"TIMESTAMP {ddl_text(text)} is read in the time zone of the session that ran the ALTER, "
        "not known to the lake; sql reads it as UTC",
        sql,
    )


def _string_sql(text: str, column: dict[str, Any], spec: ColumnSpec) -> str:
    base = _base_type(column)
    if base in _DECIMAL_TYPES:  # decimal.handling.mode=string: the decimal text with the scale's digits
        scale = _int_or_none(column.get("scale")) or 0
        return cast_sql(decimal_text(number(text), _int_or_none(column.get("length")), scale), spec.iceberg_type)
    if base in _BINARY_TYPES:  # binary.handling.mode base64 or hex: its text form of the bytes
        if _binary_bytes(text, column):
            raise Inexact(
                f"{ddl_text(text)} of a {base} column stored as text (binary.handling.mode base64 or hex): "
                "the mode is not known here"
            )
        return cast_sql("", spec.iceberg_type)
    value = unquote(text)
    if base in ("CHAR", "NCHAR", "CHARACTER", "NATIONAL"):
        value = value.rstrip(" ")  # MySQL strips a CHAR's trailing spaces when it reads it
    return cast_sql(value, spec.iceberg_type)


def _literal_sql(text: str, column: dict[str, Any], spec: ColumnSpec) -> str | None:
    """A literal default -> the Spark SQL of the value the source stores; ``None`` for NULL.

    Raises:
        Inexact: the value is not known exactly.
    """
    encoding = spec.encoding
    stripped = text.strip()
    if stripped.startswith("("):
        raise Inexact(f"DEFAULT {stripped}: an expression, computed by the source at ALTER time; not known to the lake")
    if _CURRENT_TIME.match(stripped) or stripped == _DEBEZIUM_CURRENT_TIMESTAMP:
        raise Inexact(
            f"DEFAULT {stripped}: Debezium's text of DEFAULT CURRENT_TIMESTAMP / NOW() (or a function of the "
            "current time): filled by the source at ALTER time; not known to the lake"
            if stripped == _DEBEZIUM_CURRENT_TIMESTAMP
            else f"DEFAULT {stripped}: filled by the source at ALTER time; not known to the lake"
        )
    stringy = spec.iceberg_type == "string"
    if stripped.upper() == "NULL":
        if not stringy:
            return None
        raise Inexact(
            "DEFAULT NULL arrives as no default from Debezium, so this is DEFAULT 'NULL' (the text), "
            "or NULL from another producer",
            cast_sql("NULL", spec.iceberg_type),
        )
    if encoding in SPATIAL_ENCODINGS or spec.iceberg_type.startswith("struct"):
        raise Inexact(f"DEFAULT {ddl_text(text)} of a spatial column is not converted")
    if encoding.startswith(DECIMAL + "("):
        return _decimal_sql(text, encoding, spec)
    if encoding == YEAR_ENCODING:
        return cast_sql(str(year(text)), spec.iceberg_type)
    if encoding in INTEGER_ENCODINGS:
        return integer_sql(number(text), spec)
    if encoding in FLOAT_ENCODINGS:
        return _float_sql(text, column, spec)
    if encoding == "boolean":
        return "TRUE" if number(text) != 0 else "FALSE"
    if encoding in DATE_ENCODINGS:
        return cast_sql(date_value(text).isoformat(), spec.iceberg_type)
    if encoding in _TIMESTAMP_ENCODINGS:
        moment = datetime_value(text, _fsp(column), millis=encoding in _MILLIS_ENCODINGS)
        return cast_sql(moment.isoformat(sep=" "), spec.iceberg_type)
    if encoding == ZONED_TIMESTAMP_ENCODING:
        return _zoned_timestamp_sql(text, column, spec, encoding)
    if encoding in TIME_ENCODINGS:
        return cast_sql(str(time_us(text, _fsp(column), millis=encoding in _MILLIS_ENCODINGS)), spec.iceberg_type)
    if encoding == ENUM_ENCODING:
        return cast_sql(enum_value(text, _enum_values(column)), spec.iceberg_type)
    if encoding == ENUM_SET_ENCODING:
        return cast_sql(set_value(text, _enum_values(column)), spec.iceberg_type)
    if encoding == JSON_ENCODING:
        return cast_sql(unquote(text), spec.iceberg_type)
    if encoding == BITS_ENCODING:
        return hex_sql(bit_value(text, _int_or_none(column.get("length"))))
    if encoding == "bytes":
        return hex_sql(_binary_bytes(text, column))
    if encoding == "string":
        return _string_sql(text, column, spec)
    raise Inexact(f"DEFAULT {ddl_text(text)} of a column encoded {encoding}: not converted by this version")


# --- implicit defaults ---------------------------------------------------------------------------


def _implicit_sql(column: dict[str, Any], spec: ColumnSpec) -> tuple[str, str]:
    """The implicit default of a NOT NULL column without DEFAULT: ``(sql, the value as text)``.

    Raises:
        Inexact: the value is not known exactly.
    """
    encoding = spec.encoding
    base = _base_type(column)
    if encoding in SPATIAL_ENCODINGS or spec.iceberg_type.startswith("struct"):
        raise Inexact("a NOT NULL spatial column has no implicit default the lake can write")
    if encoding == JSON_ENCODING:
        raise Inexact("the implicit default of a NOT NULL JSON column differs between MySQL and MariaDB")
    if encoding == YEAR_ENCODING:
        raise Inexact("the implicit default of a NOT NULL YEAR column is the zero year 0000")
    if encoding in DATE_ENCODINGS | _TIMESTAMP_ENCODINGS | {ZONED_TIMESTAMP_ENCODING}:
        what = "the zero date '0000-00-00'"
        if encoding == ZONED_TIMESTAMP_ENCODING:
            what += " (or the ALTER time, for a first TIMESTAMP column with explicit_defaults_for_timestamp=OFF)"
        error = _zero_date(spec, column, what)
        raise Inexact(error.why, error.sql)
    if encoding.startswith(DECIMAL + "("):
        dec = parse_decimal_encoding(encoding)
        scale = dec[1] if dec is not None else 0
        zero = plain(round_half_up(Decimal(0), max(scale, 0)))
        return cast_sql(zero, spec.iceberg_type), zero
    if encoding in INTEGER_ENCODINGS or encoding in TIME_ENCODINGS:
        return cast_sql("0", spec.iceberg_type), "0" if encoding in INTEGER_ENCODINGS else "'00:00:00' (0 microseconds)"
    if encoding in FLOAT_ENCODINGS:
        return cast_sql("0.0", spec.iceberg_type), "0"
    if encoding == "boolean":
        return "FALSE", "FALSE (0)"
    if encoding == ENUM_ENCODING:
        members = _enum_values(column)
        if members is None:
            raise Inexact("the implicit default of a NOT NULL ENUM is its first value; enumValues is missing")
        return cast_sql(members[0], spec.iceberg_type), f"the first ENUM value {members[0]!r}"
    if encoding == ENUM_SET_ENCODING:
        return cast_sql("", spec.iceberg_type), "''"
    if encoding == BITS_ENCODING:
        width = _int_or_none(column.get("length"))
        if width is None:
            raise Inexact("the column's length (n of BIT(n)) is not known")
        return hex_sql(bytes((width + 7) // 8)), f"b'{'0' * width}'"
    if encoding == "bytes":
        data = _binary_bytes("", column)
        return hex_sql(data), f"{len(data)} zero bytes" if data else "empty"
    if encoding == "string":
        if base in _DECIMAL_TYPES:
            scale = _int_or_none(column.get("scale")) or 0
            zero = plain(round_half_up(Decimal(0), scale))
            return cast_sql(zero, spec.iceberg_type), zero
        if base in _BINARY_TYPES and _binary_bytes("", column):
            raise Inexact(
                f"the implicit default of a NOT NULL {base} column is zero bytes, stored as text "
                "(binary.handling.mode base64 or hex): the mode is not known here"
            )
        return cast_sql("", spec.iceberg_type), "''"
    raise Inexact(f"the implicit default of a column encoded {encoding} is not known to this version")


# --- the entry point -----------------------------------------------------------------------------


def added_column_default(column: dict[str, Any], spec: ColumnSpec) -> ColumnDefault:
    """What rows that existed before the ADD COLUMN read in ``column`` at the source.

    Args:
        column: the column's ``tableChanges[].table.columns`` entry: ``{"name", "typeName",
            "typeExpression", "length", "scale", "optional", "autoIncremented", "generated",
            "hasDefaultValue"?, "defaultValueExpression", "enumValues", ...}``.
        spec: the column as the Iceberg table holds it (:func:`cdclake.model.mysql_types.column_type`
            gives its type and encoding).

    Returns:
        The value as Spark SQL typed to ``spec.iceberg_type`` (``None``: NULL), whether it is
        exactly the source's, and why (see the module table). Never raises for a value it cannot
        convert: that is ``exact=False``.
    """
    name = spec.name
    label = _type_label(column)
    expression = column.get("defaultValueExpression")
    has_default = column.get("hasDefaultValue")
    if column.get("generated"):
        return ColumnDefault(
            name, None, False, f"generated {label} column: computed by the source; not known to the lake"
        )
    if column.get("autoIncremented"):
        return ColumnDefault(
            name, None, False, f"AUTO_INCREMENT {label} column: the source numbers the rows; not known to the lake"
        )
    try:
        if expression is not None:
            text = str(expression)
            sql = _literal_sql(text, column, spec)
            return ColumnDefault(name, sql, True, f"DEFAULT {ddl_text(text.strip())}")
        if has_default:
            raise Inexact(
                "DEFAULT (expression): Debezium sends no text for it; computed by the source at ALTER time; "
                "not known to the lake"
            )
        if _optional(column, spec):
            return ColumnDefault(name, None, True, f"no default, nullable {label} column: NULL")
        sql, value = _implicit_sql(column, spec)
        return ColumnDefault(name, sql, True, f"implicit default of a NOT NULL {label} column: {value}")
    except Inexact as e:
        return ColumnDefault(name, e.sql, False, e.why)
    except ZeroDate as e:
        zero = _zero_date(spec, column, e.what)
        return ColumnDefault(name, zero.sql, False, zero.why)
    except LiteralError as e:
        return ColumnDefault(name, None, False, str(e))
