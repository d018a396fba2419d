"""Debezium (Kafka Connect) field schemas -> Iceberg column types, and how each value is encoded.

A column's *encoding* is the Connect semantic type name when there is one (``io.debezium.time.Date``)
and the Connect primitive type otherwise (``int32``). It decides both the Iceberg type and how the
Spark job decodes the JSON value; it is stored with the table (property ``cdc.column-encodings``)
so that events without a schema (``value_format: json``) decode the same way.

=====================================  ===============  =========================================
encoding (Connect type / semantic)     Iceberg type     JSON value -> Iceberg value
=====================================  ===============  =========================================
``int8``, ``int16``, ``int32``         ``int``          number
``int64``                              ``long``         number
``float``                              ``float``        number
``double``                             ``double``       number
``boolean``                            ``boolean``      true/false
``string``                             ``string``       string
``bytes``                              ``binary``       base64 string, decoded
``io.debezium.time.Date``              ``date``         days since 1970-01-01
``io.debezium.time.Timestamp``         ``timestamp``    epoch milliseconds (no time zone)
``io.debezium.time.MicroTimestamp``    ``timestamp``    epoch microseconds (no time zone)
``io.debezium.time.ZonedTimestamp``    ``timestamptz``  ISO-8601 string with offset
``io.debezium.time.Year``              ``int``          number
``io.debezium.data.Enum``              ``string``       string
``io.debezium.data.EnumSet``           ``string``       comma-separated string
``io.debezium.data.Json``              ``string``       JSON text
=====================================  ===============  =========================================

Source: Debezium MySQL connector docs, "Data type mappings". Other semantic types (decimals,
TIME, bits, spatial) raise :class:`cdclake.errors.SchemaError` naming the column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cdclake.errors import SchemaError

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "binary",
}

_SEMANTIC = {
    "io.debezium.time.Date": "date",
    "io.debezium.time.Timestamp": "timestamp",
    "io.debezium.time.MicroTimestamp": "timestamp",
    "io.debezium.time.ZonedTimestamp": "timestamptz",
    "io.debezium.time.Year": "int",
    "io.debezium.data.Enum": "string",
    "io.debezium.data.EnumSet": "string",
    "io.debezium.data.Json": "string",
}

ENCODING_FOR_ICEBERG_TYPE = {
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "binary": "bytes",
    "date": "io.debezium.time.Date",
    "timestamp": "io.debezium.time.MicroTimestamp",
    "timestamptz": "io.debezium.time.ZonedTimestamp",
}
"""Encoding assumed for a column declared in the table config (``columns``), where the events
carry no schema: the connector defaults (``time.precision.mode=adaptive_time_microseconds``)."""


@dataclass(frozen=True)
class ColumnSpec:
    """One source column as the Iceberg table holds it.

    Attributes:
        name: column name.
        iceberg_type: Iceberg primitive type (``int``, ``long``, ``string``, ``timestamptz``, ...).
        required: the source column is NOT NULL.
        encoding: how Debezium encodes its values in JSON (see the module table).
    """

    name: str
    iceberg_type: str
    required: bool
    encoding: str


def column_from_connect(field: dict[str, Any]) -> ColumnSpec:
    """Map one field of a Connect struct schema.

    Args:
        field: ``{"type": ..., "optional": ..., "field": ..., "name"?: ..., "parameters"?: ...}``.

    Raises:
        SchemaError: a type this version cannot map (names the column and the type).
    """
    name = field.get("field")
    ctype = field.get("type")
    semantic = field.get("name")
    if not isinstance(name, str) or not isinstance(ctype, str):
        raise SchemaError(f"Connect field without 'field' or 'type': {field}")
    if semantic:
        iceberg = _SEMANTIC.get(semantic)
        if iceberg is None:
            raise SchemaError(
                f"column {name!r}: Debezium semantic type {semantic!r} (Connect {ctype}) "
                "is not supported yet"
            )
        encoding = semantic
    else:
        iceberg = _PRIMITIVES.get(ctype)
        if iceberg is None:
            raise SchemaError(f"column {name!r}: Connect type {ctype!r} is not supported")
        encoding = ctype
    return ColumnSpec(name, iceberg, not field.get("optional", True), encoding)


def columns_from_connect(row_schema: dict[str, Any]) -> list[ColumnSpec]:
    """Map the row struct (the ``after``/``before`` field schema) of a Debezium value schema."""
    return [column_from_connect(f) for f in row_schema.get("fields", ())]


def columns_from_config(columns: dict[str, str], primary_key: tuple[str, ...]) -> list[ColumnSpec]:
    """Columns declared in the table config; primary-key columns are required.

    Raises:
        SchemaError: a type with no assumed encoding (decimal without events' schema).
    """
    specs = []
    for name, typ in columns.items():
        encoding = ENCODING_FOR_ICEBERG_TYPE.get(typ)
        if encoding is None:
            raise SchemaError(
                f"column {name!r}: type {typ!r} needs the events' Connect schema "
                "(value_format json_with_schema) to be decoded"
            )
        specs.append(ColumnSpec(name, typ, name in primary_key, encoding))
    return specs
