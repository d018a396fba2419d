"""Debezium (Kafka Connect) field schemas -> Iceberg column types, and how each value is encoded.

A column's *encoding* is the Connect semantic type name when there is one (``io.debezium.time.Date``)
and the Connect primitive type otherwise (``int32``); a decimal's encoding also carries its
precision and scale: ``org.apache.kafka.connect.data.Decimal(10,2)`` (for a schema without a
precision, the precision the column is given: see "Choices"). A BIGINT UNSIGNED column that
Debezium sends as a Connect ``int64`` (``bigint.unsigned.handling.mode=long``) is ``int64(unsigned)``
(:data:`UNSIGNED_INT64`) when the source type is known, so that a wrapped value is caught. The
encoding decides both the Iceberg type and how the Spark job decodes the
JSON value; it is stored with the table (property ``cdc.column-encodings``) so that events without
a schema (``value_format: json``) decode the same way. Values are decoded by their encoding, never
by their look.

Every MySQL/MariaDB type, as the Debezium MySQL/MariaDB connector emits it (Debezium docs, "Data
type mappings"; the modes are connector settings, defaults first), with Kafka's ``JsonConverter``:

============================  ============================  ===============================================  =================  ==============================================
MySQL type                    Debezium mode                 encoding (Connect type / semantic)               Iceberg type       JSON value -> Iceberg value
============================  ============================  ===============================================  =================  ==============================================
BOOLEAN, TINYINT(1)           --                            ``int16``                                        ``int``            number (MySQL BOOLEAN is TINYINT(1))
BIT(1)                        --                            ``boolean``                                      ``boolean``        true/false
BIT(n), n > 1                 --                            ``io.debezium.data.Bits`` (bytes)                ``binary``         base64 of the bits **little-endian** (Debezium
                                                                                                                                order), stored **big-endian** (MySQL order, as
                                                                                                                                ``HEX(col)`` shows them): ceil(n/8) bytes
TINYINT[ UNSIGNED], SMALLINT  --                            ``int16``                                        ``int``            number
SMALLINT UNSIGNED, INT        --                            ``int32``                                        ``int``            number
MEDIUMINT[ UNSIGNED]          --                            ``int32``                                        ``int``            number
INT UNSIGNED, BIGINT          --                            ``int64``                                        ``long``           number
BIGINT UNSIGNED, SERIAL       bigint.unsigned: ``long``     ``int64(unsigned)`` (Connect ``int64``)          ``long``           number; Debezium wraps values >= 2^63 to
                                                                                                                                negative: such a record is a bad record
                                                                                                                                (use ``precise``)
BIGINT UNSIGNED, SERIAL       bigint.unsigned: ``precise``  ``org.apache.kafka.connect.data.Decimal(20,0)``  ``decimal(20,0)``  as DECIMAL below; 18446744073709551615 exact
REAL, FLOAT(p<=23)            --                            ``float`` / ``float32``                          ``float``          number (Debezium narrows REAL, a MySQL DOUBLE,
                                                                                                                                to 32 bits)
FLOAT(p>23), DOUBLE           --                            ``double`` / ``float64``                         ``double``         number (Debezium 1.x: every FLOAT)
DECIMAL(p,s), p <= 38         decimal: ``precise``          ``org.apache.kafka.connect.data.Decimal(p,s)``   ``decimal(p,s)``   base64 of the big-endian two's-complement
                                                                                                                                unscaled value (JsonConverter
                                                                                                                                ``decimal.format=BASE64``), or a JSON number
                                                                                                                                (``decimal.format=NUMERIC``); exact
DECIMAL(p,s), p > 38          decimal: ``precise``          ``org.apache.kafka.connect.data.Decimal(p,s)``   ``string``         the same JSON, stored as the exact decimal
                                                                                                                                text with s fraction digits (``-1234.50``):
                                                                                                                                Iceberg decimals hold 38 digits, MySQL 65
DECIMAL                       decimal: ``double``           ``double``                                       ``double``         number (Debezium rounded it)
DECIMAL                       decimal: ``string``           ``string``                                       ``string``         the decimal text
(not MySQL)                   --                            ``io.debezium.data.VariableScaleDecimal``        ``string``         ``{scale, value: base64}`` -> exact decimal
                                                                                                                                text
DATE                          time: ``adaptive*``           ``io.debezium.time.Date`` (int32)                ``date``           days since 1970-01-01
DATE                          time: ``connect``             ``org.apache.kafka.connect.data.Date``           ``date``           days since 1970-01-01
TIME(0-3)                     time: ``adaptive``            ``io.debezium.time.Time`` (int32)                ``long``           ms of the duration -> **microseconds**, signed
TIME(4-6)                     time: ``adaptive``            ``io.debezium.time.MicroTime`` (int64)           ``long``           microseconds, signed
TIME                          time: default                 ``io.debezium.time.MicroTime`` (int64)           ``long``           microseconds, signed (-838:59:59 .. 838:59:59)
TIME                          time: ``connect``             ``org.apache.kafka.connect.data.Time`` (int32)   ``long``           ms -> microseconds
(not MySQL)                   --                            ``io.debezium.time.NanoTime`` (int64)            ``long``           ns -> microseconds (sub-microsecond digits:
                                                                                                                                bad record)
(not MySQL)                   --                            ``io.debezium.time.ZonedTime`` (string)          ``string``         the ISO-8601 text as sent
DATETIME(0-3)                 time: ``adaptive*``           ``io.debezium.time.Timestamp`` (int64)           ``timestamp``      epoch milliseconds (no time zone)
DATETIME(4-6)                 time: ``adaptive*``           ``io.debezium.time.MicroTimestamp`` (int64)      ``timestamp``      epoch microseconds (no time zone)
DATETIME                      time: ``connect``             ``org.apache.kafka.connect.data.Timestamp``      ``timestamp``      epoch milliseconds (no time zone)
(not MySQL)                   --                            ``io.debezium.time.NanoTimestamp`` (int64)       ``timestamp``      epoch ns -> us (sub-microsecond digits: bad
                                                                                                                                record)
TIMESTAMP                     --                            ``io.debezium.time.ZonedTimestamp`` (string)     ``timestamptz``    ISO-8601 string with offset
YEAR                          --                            ``io.debezium.time.Year`` (int32)                ``int``            number
CHAR, VARCHAR, TEXT           --                            ``string``                                       ``string``         string
ENUM                          --                            ``io.debezium.data.Enum``                        ``string``         string
SET                           --                            ``io.debezium.data.EnumSet``                     ``string``         comma-separated string
JSON                          --                            ``io.debezium.data.Json``                        ``string``         JSON text
(not MySQL)                   --                            ``io.debezium.data.Xml``                         ``string``         XML text
BINARY, VARBINARY, BLOB       binary: ``bytes``             ``bytes``                                        ``binary``         base64 string, decoded
BINARY, VARBINARY, BLOB       binary: ``base64``, ``hex``   ``string``                                       ``string``         the base64/hex text, as sent
GEOMETRY and subtypes         --                            ``io.debezium.data.geometry.Geometry``           ``struct`` (1)     ``{wkb: base64, srid}`` -> ``{wkb: bytes,
                                                                                                                                srid}``
POINT                         --                            ``io.debezium.data.geometry.Point``              ``struct`` (1)     ``{x, y, wkb, srid}`` -> ``{wkb, srid}`` (x
                                                                                                                                and y are the coordinates in the WKB)
(not MySQL)                   --                            ``io.debezium.data.geometry.Geography``          ``struct`` (1)     as Geometry
============================  ============================  ===============================================  =================  ==============================================

``adaptive*``: ``adaptive`` or ``adaptive_time_microseconds`` (the default, "time: default").
(1) ``struct<wkb: binary, srid: int>`` (:data:`SPATIAL_ICEBERG_TYPE`), both fields optional.

Choices, and why:

* **DECIMAL(p>38)** is a ``string`` holding the exact decimal text: no Iceberg type holds 65 digits,
  and a ``double`` would drop digits. The field's doc in the Iceberg schema states it.
* **JSON-number decimals** (``decimal.format=NUMERIC``) are exact up to 38 significant digits.
  Spark reads a number with more digits, or in exponent notation (``1.2E-7``, which Kafka's
  JsonConverter writes for values below 10^-6), only as a double; such a value (other than zero)
  is a bad record, never rounded. Keep the default ``BASE64`` format for such columns.
* **TIME** is ``long`` microseconds: MySQL TIME is a duration from -838:59:59 to 838:59:59, which
  Iceberg's ``time`` (time of day, 00:00 to 24:00) cannot hold, and Spark does not write Iceberg
  ``time``. The field's doc states the unit.
* **BIT(n)** bytes are turned from Debezium's little-endian into MySQL's big-endian order, so the
  stored bytes are those of ``SELECT bit_col`` and read as an unsigned big-endian integer they are
  the MySQL value.
* **Spatial** values are a struct ``{wkb: binary, srid: int}``: one column, nothing lost (the WKB
  is the OGC well-known binary of the value, a POINT's x and y are in it; the SRID as Debezium
  sends it). A struct merges like any column; splitting it into two columns would break the one
  source column, one Iceberg column rule of :class:`ColumnSpec`.
* **A Decimal without a precision** (no ``connect.decimal.precision``: Debezium 1.x sends BIGINT
  UNSIGNED so in ``precise`` mode) is a ``decimal``, never text: ``decimal(20,0)`` when the field
  says its source type is BIGINT UNSIGNED or SERIAL (``__debezium.source.column.type``, connector
  option ``column.propagate.source.type``), else ``decimal(38,S)``, the widest Iceberg decimal;
  a value of more than 38 digits is then a bad record. Only a scale above 38 leaves it exact text.
  (Tables created before this rule recorded ``Decimal(,S)`` for such columns and hold them as
  text; they keep decoding so.)
* **BIGINT UNSIGNED in ``long`` mode** wraps values above 2^63-1 to negative numbers; a negative
  value in a column known to be unsigned (schema sync's ``tableChanges``, or the field's
  ``__debezium.source.column.type``) is a bad record naming the column and the remedy, never a
  wrong number in the lake.
* A value that does not decode exactly (not base64, digits beyond the column's scale or
  precision, sub-microsecond nanoseconds, a spatial value without WKB, a ``ZonedTimestamp`` that
  is not an ISO-8601 timestamp with an offset, a wrapped BIGINT UNSIGNED) makes its record a bad
  record (quarantined, or failing the run with ``bad_records: fail``), naming the column and the
  value.
* **Time zones**: DATETIME values (``Timestamp``, ``MicroTimestamp``, ``NanoTimestamp``) are
  decoded to Iceberg ``timestamp`` without any time zone, and ``ZonedTimestamp`` text by its own
  offset, so no Spark session time zone changes a value.
* **Zero dates** (``0000-00-00``, ``0000-00-00 00:00:00``) are not representable; Debezium already
  emits ``null`` for a nullable column and the epoch (1970-01-01) for a NOT NULL one, and that is
  what lands.

Other semantic types (for example ``io.debezium.time.IsoDate`` of ``time.precision.mode=isostring``,
``io.debezium.data.FloatVector`` of MySQL 9 VECTOR) and Connect structs, arrays and maps raise
:class:`~cdclake.errors.SchemaError` naming the column and the type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from cdclake.errors import SchemaError

DECIMAL = "org.apache.kafka.connect.data.Decimal"
"""Connect's logical decimal (``parameters``: ``scale``, ``connect.decimal.precision``)."""
VARIABLE_SCALE_DECIMAL = "io.debezium.data.VariableScaleDecimal"
MAX_ICEBERG_DECIMAL_PRECISION = 38
"""Iceberg spec, "Primitive Types": ``decimal(P,S)`` with P <= 38."""
UNSIGNED_BIGINT_PRECISION = 20
"""Digits of the greatest BIGINT UNSIGNED, 18446744073709551615."""
UNSIGNED_INT64 = "int64(unsigned)"
"""The encoding of a BIGINT UNSIGNED column in ``bigint.unsigned.handling.mode=long``: a Connect
``int64`` whose values Debezium wraps past 2^63-1 to negative numbers (a negative one is a bad
record)."""
SOURCE_COLUMN_TYPE = "__debezium.source.column.type"
"""The Connect field parameter naming the source column's type (``BIGINT UNSIGNED``), present
when the connector runs with ``column.propagate.source.type`` (Debezium docs, "Connector
properties")."""

SPATIAL_ICEBERG_TYPE = "struct<wkb:binary,srid:int>"
"""The Iceberg type of every spatial column: the value's WKB and SRID."""
SPATIAL_ENCODINGS = frozenset(
    {
        "io.debezium.data.geometry.Geometry",
        "io.debezium.data.geometry.Point",
        "io.debezium.data.geometry.Geography",
    }
)

CONNECT_PRIMITIVES = {
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
"""Connect primitive type -> the Iceberg type of a column it carries without a semantic type."""

_SEMANTIC: dict[str, tuple[frozenset[str], str]] = {
    # semantic type -> (Connect types it may carry, Iceberg type)
    "io.debezium.time.Date": (frozenset({"int32"}), "date"),
    "org.apache.kafka.connect.data.Date": (frozenset({"int32"}), "date"),
    "io.debezium.time.Time": (frozenset({"int32"}), "long"),
    "io.debezium.time.MicroTime": (frozenset({"int64"}), "long"),
    "io.debezium.time.NanoTime": (frozenset({"int64"}), "long"),
    "org.apache.kafka.connect.data.Time": (frozenset({"int32"}), "long"),
    "io.debezium.time.ZonedTime": (frozenset({"string"}), "string"),
    "io.debezium.time.Timestamp": (frozenset({"int64"}), "timestamp"),
    "io.debezium.time.MicroTimestamp": (frozenset({"int64"}), "timestamp"),
    "io.debezium.time.NanoTimestamp": (frozenset({"int64"}), "timestamp"),
    "org.apache.kafka.connect.data.Timestamp": (frozenset({"int64"}), "timestamp"),
    "io.debezium.time.ZonedTimestamp": (frozenset({"string"}), "timestamptz"),
    "io.debezium.time.Year": (frozenset({"int32"}), "int"),
    "io.debezium.data.Enum": (frozenset({"string"}), "string"),
    "io.debezium.data.EnumSet": (frozenset({"string"}), "string"),
    "io.debezium.data.Json": (frozenset({"string"}), "string"),
    "io.debezium.data.Xml": (frozenset({"string"}), "string"),
    "io.debezium.data.Bits": (frozenset({"bytes"}), "binary"),
    VARIABLE_SCALE_DECIMAL: (frozenset({"struct"}), "string"),
    **{name: (frozenset({"struct"}), SPATIAL_ICEBERG_TYPE) for name in SPATIAL_ENCODINGS},
}

TIME_ENCODINGS = frozenset(
    {
        "io.debezium.time.Time",
        "io.debezium.time.MicroTime",
        "io.debezium.time.NanoTime",
        "org.apache.kafka.connect.data.Time",
    }
)
"""Encodings of MySQL TIME, all stored as ``long`` microseconds (see the module docstring)."""

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
carry no schema: the connector defaults (``time.precision.mode=adaptive_time_microseconds``).
``decimal(P,S)`` is assumed to be ``org.apache.kafka.connect.data.Decimal(P,S)``."""

_DECIMAL_ENCODING = re.compile(rf"^{re.escape(DECIMAL)}\((\d*),(-?\d+)\)$")
_DECIMAL_TYPE = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


@dataclass(frozen=True)
class ColumnSpec:
    """One source column as the Iceberg table holds it.

    Attributes:
        name: column name.
        iceberg_type: Iceberg type (``int``, ``long``, ``decimal(10,2)``, ``timestamptz``,
            ``struct<wkb:binary,srid:int>``, ...).
        required: the source column is NOT NULL.
        encoding: how Debezium encodes its values in JSON (see the module table).
    """

    name: str
    iceberg_type: str
    required: bool
    encoding: str


def decimal_encoding(precision: int | None, scale: int) -> str:
    """The encoding of a Connect decimal: ``org.apache.kafka.connect.data.Decimal(P,S)``
    (``(,S)`` without one: a Connect decimal without a precision and of a scale above 38, or a
    column recorded so by an earlier version)."""
    return f"{DECIMAL}({'' if precision is None else precision},{scale})"


def parse_decimal_encoding(encoding: str) -> tuple[int | None, int] | None:
    """``(precision or None, scale)`` of a decimal encoding; ``None`` for any other encoding."""
    m = _DECIMAL_ENCODING.match(encoding)
    if m is None:
        return None
    return (int(m.group(1)) if m.group(1) else None), int(m.group(2))


def parse_decimal_type(iceberg_type: str) -> tuple[int, int] | None:
    """``(precision, scale)`` of an Iceberg type name ``decimal(P,S)`` (a space after the comma
    is accepted, as pyiceberg prints it); ``None`` for any other type."""
    m = _DECIMAL_TYPE.match(iceberg_type)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _decimal_iceberg_type(precision: int | None, scale: int) -> str:
    if precision is not None and 0 <= scale <= precision <= MAX_ICEBERG_DECIMAL_PRECISION:
        return f"decimal({precision},{scale})"
    return "string"  # exact decimal text: more digits than an Iceberg decimal holds


def _is_unsigned_bigint(field: dict[str, Any]) -> bool:
    """The field's source column is BIGINT UNSIGNED or SERIAL, by its :data:`SOURCE_COLUMN_TYPE`."""
    words = str((field.get("parameters") or {}).get(SOURCE_COLUMN_TYPE, "")).upper().split()
    return words[:1] == ["SERIAL"] or (words[:1] == ["BIGINT"] and "UNSIGNED" in words)


def _decimal_from_connect(name: str, field: dict[str, Any]) -> tuple[str, str]:
    params = field.get("parameters") or {}
    try:
        scale = int(params["scale"])
        raw_precision = params.get("connect.decimal.precision")
        precision = None if raw_precision is None else int(raw_precision)
    except (KeyError, TypeError, ValueError) as e:
        raise SchemaError(
            f"column {name!r}: {DECIMAL} needs an integer 'scale' parameter "
            f"(and an optional 'connect.decimal.precision'), got {params}"
        ) from e
    if field.get("type") != "bytes":
        raise SchemaError(f"column {name!r}: {DECIMAL} on Connect type {field.get('type')!r} (expected bytes)")
    if precision is None and 0 <= scale <= MAX_ICEBERG_DECIMAL_PRECISION:
        # Debezium 1.x BIGINT UNSIGNED (precise): no precision; the widest decimal the source
        # type needs (module docstring, "A Decimal without a precision")
        precision = (
            UNSIGNED_BIGINT_PRECISION if scale == 0 and _is_unsigned_bigint(field) else MAX_ICEBERG_DECIMAL_PRECISION
        )
    return _decimal_iceberg_type(precision, scale), decimal_encoding(precision, scale)


def iceberg_type_of_encoding(encoding: str) -> str:
    """The Iceberg type a column of ``encoding`` is created with.

    Raises:
        SchemaError: an encoding this version does not know.
    """
    dec = parse_decimal_encoding(encoding)
    if dec is not None:
        return _decimal_iceberg_type(*dec)
    if encoding in _SEMANTIC:
        return _SEMANTIC[encoding][1]
    if encoding in CONNECT_PRIMITIVES:
        return CONNECT_PRIMITIVES[encoding]
    if encoding == UNSIGNED_INT64:
        return "long"
    raise SchemaError(f"unknown column encoding {encoding!r}")


def column_doc(encoding: str) -> str | None:
    """The Iceberg field doc of a column whose value is not what its Iceberg type suggests (the
    unit of a TIME, the text of a wide decimal, the byte order of a BIT), else ``None``."""
    if encoding in TIME_ENCODINGS:
        return f"MySQL TIME as signed microseconds (-838:59:59 .. 838:59:59); Debezium {encoding}"
    if encoding == "io.debezium.data.Bits":
        return "MySQL BIT(n): ceil(n/8) bytes, big-endian (MySQL order); Debezium io.debezium.data.Bits"
    if encoding == VARIABLE_SCALE_DECIMAL:
        return f"exact decimal text; Debezium {VARIABLE_SCALE_DECIMAL}"
    if encoding in SPATIAL_ENCODINGS:
        return f"spatial value: OGC WKB and SRID; Debezium {encoding}"
    dec = parse_decimal_encoding(encoding)
    if dec is not None and _decimal_iceberg_type(*dec) == "string":
        precision, scale = dec
        kind = f"DECIMAL({precision},{scale})" if precision is not None else f"decimal of scale {scale}"
        return f"{kind} as exact decimal text with {scale} fraction digits; Debezium {DECIMAL}"
    return None


def column_from_connect(field: dict[str, Any]) -> ColumnSpec:
    """Map one field of a Connect struct schema.

    Args:
        field: ``{"type": ..., "optional": ..., "field": ..., "name"?: ..., "parameters"?: ...}``.

    Raises:
        SchemaError: a type this version cannot map, or a semantic type on a Connect type it is
            not defined for (names the column and the type).
    """
    name = field.get("field")
    ctype = field.get("type")
    semantic = field.get("name")
    if not isinstance(name, str) or not isinstance(ctype, str):
        raise SchemaError(f"Connect field without 'field' or 'type': {field}")
    if semantic == DECIMAL:
        iceberg, encoding = _decimal_from_connect(name, field)
    elif semantic:
        known = _SEMANTIC.get(semantic)
        if known is None:
            raise SchemaError(
                f"column {name!r}: Debezium semantic type {semantic!r} (Connect {ctype}) is not supported yet"
            )
        ctypes, iceberg = known
        if ctype not in ctypes:
            raise SchemaError(
                f"column {name!r}: semantic type {semantic!r} on Connect type {ctype!r} "
                f"(expected {' or '.join(sorted(ctypes))})"
            )
        encoding = semantic
    else:
        primitive = CONNECT_PRIMITIVES.get(ctype)
        if primitive is None:
            raise SchemaError(f"column {name!r}: Connect type {ctype!r} is not supported")
        iceberg, encoding = primitive, ctype
        if ctype == "int64" and _is_unsigned_bigint(field):
            encoding = UNSIGNED_INT64
    return ColumnSpec(name, iceberg, not field.get("optional", True), encoding)


def columns_from_connect(row_schema: dict[str, Any]) -> list[ColumnSpec]:
    """Map the row struct (the ``after``/``before`` field schema) of a Debezium value schema."""
    return [column_from_connect(f) for f in row_schema.get("fields", ())]


def columns_from_config(columns: dict[str, str], primary_key: tuple[str, ...]) -> list[ColumnSpec]:
    """Columns declared in the table config; primary-key columns are required.

    ``decimal(P,S)`` is decoded as a Connect decimal of that precision and scale.

    Raises:
        SchemaError: a type with no assumed encoding.
    """
    specs = []
    for name, typ in columns.items():
        encoding = ENCODING_FOR_ICEBERG_TYPE.get(typ)
        dec = parse_decimal_type(typ)
        if dec is not None:
            precision, scale = dec
            encoding = decimal_encoding(precision, scale)
            typ = _decimal_iceberg_type(precision, scale)
        if encoding is None:
            raise SchemaError(
                f"column {name!r}: type {typ!r} needs the events' Connect schema "
                "(value_format json_with_schema) to be decoded"
            )
        specs.append(ColumnSpec(name, typ, name in primary_key, encoding))
    return specs
