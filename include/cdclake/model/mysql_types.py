"""MySQL/MariaDB column types, as Debezium's ``tableChanges`` names them -> the column's encoding.

Schema sync creates and evolves Iceberg columns from ``tableChanges`` (no events needed). The
column's encoding is the one the connector gives its values (Debezium MySQL docs, "Data type
mappings"), which depends on the connector's handling modes (:class:`ConnectorModes`); its Iceberg
type is the data path's (:func:`cdclake.model.types.iceberg_type_of_encoding`), so a column
created from ``tableChanges`` is the column the Connect schema of its events would create. The
full table of types is in :mod:`cdclake.model.types`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdclake.errors import SchemaError
from cdclake.model.config_blocks import ConnectorModes
from cdclake.model.types import (
    UNSIGNED_BIGINT_PRECISION,
    UNSIGNED_INT64,
    decimal_encoding,
    iceberg_type_of_encoding,
)


@dataclass(frozen=True)
class _Column:
    """What a rule reads of a ``tableChanges`` column."""

    unsigned: bool
    length: int | None
    scale: int | None


_Rule = Callable[[_Column, ConnectorModes], str]


def _const(encoding: str) -> _Rule:
    return lambda _c, _m: encoding


def _integer(signed: str, unsigned: str) -> _Rule:
    return lambda c, _m: unsigned if c.unsigned else signed


def _bigint(c: _Column, m: ConnectorModes) -> str:
    if not c.unsigned:
        return "int64"
    if m.bigint_unsigned_handling_mode == "precise":
        return decimal_encoding(UNSIGNED_BIGINT_PRECISION, 0)
    return UNSIGNED_INT64  # a wrapped (negative) value is then a bad record, never a wrong number


def _bit(c: _Column, _m: ConnectorModes) -> str:
    return "boolean" if (c.length or 1) == 1 else "io.debezium.data.Bits"


def _float(c: _Column, _m: ConnectorModes) -> str:
    # FLOAT(p): p <= 23 single, 24..53 double; FLOAT(M,D) double (Debezium MySQL docs)
    return "double" if c.scale is not None or (c.length or 0) > 23 else "float"


def _decimal(c: _Column, m: ConnectorModes) -> str:
    if m.decimal_handling_mode in ("double", "string"):
        return m.decimal_handling_mode
    return decimal_encoding(c.length or 10, c.scale or 0)


def _binary(_c: _Column, m: ConnectorModes) -> str:
    return "bytes" if m.binary_handling_mode == "bytes" else "string"


def _date(_c: _Column, m: ConnectorModes) -> str:
    return "org.apache.kafka.connect.data.Date" if m.time_precision_mode == "connect" else "io.debezium.time.Date"


def _time(c: _Column, m: ConnectorModes) -> str:
    if m.time_precision_mode == "connect":
        return "org.apache.kafka.connect.data.Time"
    if m.time_precision_mode == "adaptive" and (c.length or 0) <= 3:
        return "io.debezium.time.Time"
    return "io.debezium.time.MicroTime"


def _datetime(c: _Column, m: ConnectorModes) -> str:
    if m.time_precision_mode == "connect":
        return "org.apache.kafka.connect.data.Timestamp"
    return "io.debezium.time.MicroTimestamp" if (c.length or 0) > 3 else "io.debezium.time.Timestamp"


RULES: dict[str, _Rule] = {
    "BOOLEAN": _const("boolean"),
    "BOOL": _const("boolean"),
    "BIT": _bit,
    # base type: (signed, unsigned) Connect type; Debezium MySQL docs, "Basic types"
    "TINYINT": _integer("int16", "int16"),
    "SMALLINT": _integer("int16", "int32"),
    "MEDIUMINT": _integer("int32", "int32"),
    "INT": _integer("int32", "int64"),
    "INTEGER": _integer("int32", "int64"),
    "BIGINT": _bigint,
    "REAL": _const("float"),
    "FLOAT": _float,
    "DOUBLE": _const("double"),
    **dict.fromkeys(("DECIMAL", "NUMERIC", "DEC", "FIXED"), _decimal),
    **dict.fromkeys(
        (
            "CHAR",
            "VARCHAR",
            "TINYTEXT",
            "TEXT",
            "MEDIUMTEXT",
            "LONGTEXT",
            "NCHAR",
            "NVARCHAR",
            "NATIONAL",
            "CHARACTER",
            "LONG",
        ),
        _const("string"),
    ),
    **dict.fromkeys(("BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"), _binary),
    "ENUM": _const("io.debezium.data.Enum"),
    "SET": _const("io.debezium.data.EnumSet"),
    "JSON": _const("io.debezium.data.Json"),
    "YEAR": _const("io.debezium.time.Year"),
    "DATE": _date,
    "TIME": _time,
    "DATETIME": _datetime,
    "TIMESTAMP": _const("io.debezium.time.ZonedTimestamp"),
    "POINT": _const("io.debezium.data.geometry.Point"),
    **dict.fromkeys(
        (
            "GEOMETRY",
            "LINESTRING",
            "POLYGON",
            "MULTIPOINT",
            "MULTILINESTRING",
            "MULTIPOLYGON",
            "GEOMETRYCOLLECTION",
            "GEOMCOLLECTION",
        ),
        _const("io.debezium.data.geometry.Geometry"),
    ),
}
"""MySQL base type name (first word of ``typeName``) -> the rule giving its encoding."""


def column_type(column: dict[str, Any], modes: ConnectorModes) -> tuple[str, str]:
    """The Iceberg type and the encoding (:mod:`cdclake.model.types`) of a ``tableChanges``
    column, as the connector configured with ``modes`` encodes its values.

    Args:
        column: ``{"name", "typeName", "length", "scale", ...}`` of ``tableChanges[].table.columns``.

    Returns:
        ``(iceberg type, encoding)``, e.g. ``("decimal(10,2)", "org.apache.kafka.connect.data.Decimal(10,2)")``;
        a DECIMAL wider than Iceberg's 38 digits is a ``string``.

    Raises:
        SchemaError: a type this mapping does not know (names the column and the type).
    """
    name = column.get("name")
    words = str(column.get("typeName") or "").upper().split()
    if not words:
        raise SchemaError(f"column {name!r}: no typeName in {column}")
    base = words[0]
    unsigned = "UNSIGNED" in words or "ZEROFILL" in words
    if base == "SERIAL":  # BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE
        base, unsigned = "BIGINT", True
    rule = RULES.get(base)
    if rule is None:
        raise SchemaError(f"column {name!r}: MySQL type {column.get('typeName')!r} is not supported")
    encoding = rule(_Column(unsigned, column.get("length"), column.get("scale")), modes)
    return iceberg_type_of_encoding(encoding), encoding
