"""Defaults of columns added from the events' own schemas (pure): the Connect ``default`` (JSON) or
Avro ``connect.default``/field ``default`` of a row field, decoded as the column's values are
(:mod:`cdclake.model.defaults` has the rule, the ``ColumnDefault`` it gives, and the defaults read
from DDL by schema sync)."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from decimal import Decimal
from typing import Any

from cdclake.model.defaults import (
    BITS_ENCODING,
    DATE_ENCODINGS,
    ENUM_ENCODING,
    ENUM_SET_ENCODING,
    FLOAT_ENCODINGS,
    FLOAT_MAX,
    INTEGER_ENCODINGS,
    JSON_ENCODING,
    YEAR_ENCODING,
    ZONED_TIMESTAMP_ENCODING,
    ColumnDefault,
    Inexact,
    cast_sql,
    hex_sql,
    integer_sql,
)
from cdclake.model.mysql_literals import LiteralError, round_half_up
from cdclake.model.types import (
    SPATIAL_ENCODINGS,
    UNSIGNED_INT64,
    VARIABLE_SCALE_DECIMAL,
    ColumnSpec,
    parse_decimal_encoding,
    parse_decimal_type,
)

_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH_NTZ = dt.datetime(1970, 1, 1)  # a DATETIME: no time zone
_ZONE_SUFFIX = re.compile(r"(Z|[+-][0-9]{2}(:?[0-9]{2}(:?[0-9]{2})?)?)$")
"""The offset a ``ZonedTimestamp`` ends with (the rule of :func:`cdclake.spark.decode.decode`)."""
_TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": 1000,
    "org.apache.kafka.connect.data.Timestamp": 1000,
    "io.debezium.time.MicroTimestamp": 1,
    "io.debezium.time.NanoTimestamp": None,  # nanoseconds: whole microseconds only
}
_TIME_MICROS = {
    "io.debezium.time.Time": 1000,
    "org.apache.kafka.connect.data.Time": 1000,
    "io.debezium.time.MicroTime": 1,
}
_TEXT_ENCODINGS = frozenset(
    {"string", ENUM_ENCODING, ENUM_SET_ENCODING, JSON_ENCODING, "io.debezium.data.Xml", "io.debezium.time.ZonedTime"}
)
_MAX_EXACT_FLOAT_DIGITS = 15
"""Significant digits a JSON number read as a double keeps exactly (a ``NUMERIC`` decimal's default)."""
MAX_REASON_VALUE_CHARS = 100
"""How much of a default a ``reason`` quotes."""


def connect_defaults(row_schema: dict[str, Any]) -> dict[str, Any]:
    """``{column: default}`` of the fields of a Connect row struct (an event's ``after`` schema, or
    an Avro writer schema read as one: :func:`cdclake.model.avro.connect_schema`) that carry a
    non-null ``default``: the Connect-encoded value, as an event's JSON carries a value."""
    return {
        f["field"]: f["default"]
        for f in row_schema.get("fields", ())
        if isinstance(f, dict) and isinstance(f.get("field"), str) and f.get("default") is not None
    }


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _unscaled(value: Any) -> int:
    """The unscaled integer of a Connect ``Decimal``'s base64 big-endian two's-complement bytes."""
    data = _base64_bytes(value)
    return int.from_bytes(data, "big", signed=True) if data else 0


def _scaled_text(unscaled: int, scale: int) -> str:
    """The exact decimal text of ``unscaled`` at ``scale`` as the apply writes it
    (:func:`cdclake.spark.decode.decode`: ``-1234.50``; a negative scale appends zeros)."""
    sign, digits = ("-" if unscaled < 0 else ""), str(abs(unscaled))
    if scale <= 0:
        return sign + digits + ("0" * -scale if digits != "0" else "")
    digits = digits.rjust(scale + 1, "0")
    return f"{sign}{digits[:-scale]}.{digits[-scale:]}"


def _connect_decimal_sql(value: Any, encoding: str, spec: ColumnSpec) -> str:
    dec = parse_decimal_encoding(encoding)
    assert dec is not None
    precision, scale = dec
    if _is_int(value) or isinstance(value, float):  # decimal.format=NUMERIC: a JSON number
        number_ = Decimal(value) if _is_int(value) else Decimal(repr(value))
        if isinstance(value, float) and len(number_.as_tuple().digits) > _MAX_EXACT_FLOAT_DIGITS:
            raise Inexact(f"{value!r}: a JSON number of more digits than a double keeps exactly")
        if round_half_up(number_, scale) != number_:
            raise Inexact(f"{value!r} has digits beyond the scale {scale}: no value of the column")
        text = _scaled_text(int(number_.scaleb(scale)), scale)
    else:
        text = _scaled_text(_unscaled(value), scale)
    target = parse_decimal_type(spec.iceberg_type)
    digits = len(text.lstrip("-").replace(".", "").lstrip("0"))
    limit = target[0] if target is not None else precision
    if limit is not None and digits > limit:
        raise Inexact(f"{text} has more digits than the column's {limit}")
    return cast_sql(text, spec.iceberg_type)


def _variable_scale_sql(value: Any, spec: ColumnSpec) -> str:
    if not isinstance(value, dict) or not _is_int(value.get("scale")):
        raise Inexact(f"{value!r} is not a {VARIABLE_SCALE_DECIMAL} value ({{scale, value}})")
    return cast_sql(_scaled_text(_unscaled(value.get("value")), value["scale"]), spec.iceberg_type)


def _epoch_stand_in(encoding: str) -> Inexact:
    return Inexact(
        f"the epoch in a {encoding} column: Debezium's value for DEFAULT CURRENT_TIMESTAMP / NOW() (the time of "
        "the ALTER), an expression, or a zero date; not known to the lake"
    )


def _connect_value_sql(value: Any, encoding: str, spec: ColumnSpec) -> str:
    """A Connect-encoded value (as ``JsonConverter`` writes it) -> Spark SQL of the Iceberg value
    :func:`cdclake.spark.decode.decode` gives it, typed to ``spec.iceberg_type``.

    Raises:
        Inexact: a value that does not decode (the apply would quarantine its record), or one
            that stands for something the lake cannot know (the epoch of a temporal column).
    """
    if encoding in SPATIAL_ENCODINGS or spec.iceberg_type.startswith("struct"):
        raise Inexact(f"a default of a spatial column ({encoding}) is not converted")
    if parse_decimal_encoding(encoding) is not None:
        return _connect_decimal_sql(value, encoding, spec)
    if encoding == VARIABLE_SCALE_DECIMAL:
        return _variable_scale_sql(value, spec)
    if encoding == "boolean":
        if not isinstance(value, bool):
            raise Inexact(f"{value!r} is not a boolean")
        return "TRUE" if value else "FALSE"
    if encoding in _TEXT_ENCODINGS:
        if not isinstance(value, str):
            raise Inexact(f"{value!r} is not text")
        return cast_sql(value, spec.iceberg_type)
    if encoding == ZONED_TIMESTAMP_ENCODING:
        if not isinstance(value, str) or not _ZONE_SUFFIX.search(value):
            raise Inexact(f"{value!r} is not an ISO-8601 timestamp with an offset")
        try:  # Python before 3.11 reads no "Z"
            moment = dt.datetime.fromisoformat(re.sub(r"Z$", "+00:00", value))
        except ValueError as e:
            raise Inexact(f"{value!r} is not an ISO-8601 timestamp") from e
        if moment.timestamp() == 0:
            raise _epoch_stand_in(encoding)
        return cast_sql(value, spec.iceberg_type)  # read by its own offset, as decode's cast does
    if encoding in ("bytes", BITS_ENCODING):
        data = _base64_bytes(value)
        return hex_sql(data[::-1] if encoding == BITS_ENCODING else data)  # Bits: little-endian -> MySQL order
    if not _is_int(value):
        if encoding in FLOAT_ENCODINGS and isinstance(value, float):
            limit = FLOAT_MAX if spec.iceberg_type == "float" else math.inf
            if not math.isfinite(value) or abs(value) > limit:
                raise Inexact(f"{value!r} is out of the range of an Iceberg {spec.iceberg_type}")
            return cast_sql(repr(value), spec.iceberg_type)
        raise Inexact(f"{value!r} is not a value of a column encoded {encoding}")
    if encoding in INTEGER_ENCODINGS or encoding == YEAR_ENCODING:
        if encoding == UNSIGNED_INT64 and value < 0:
            raise Inexact(f"{value} is a BIGINT UNSIGNED wrapped past 2^63-1 (bigint.unsigned.handling.mode=long)")
        return integer_sql(Decimal(value), spec)
    if encoding in FLOAT_ENCODINGS:
        return cast_sql(repr(float(value)), spec.iceberg_type)
    if encoding in DATE_ENCODINGS:
        if value == 0:
            raise _epoch_stand_in(encoding)
        try:
            return cast_sql((_EPOCH_DATE + dt.timedelta(days=value)).isoformat(), spec.iceberg_type)
        except OverflowError as e:
            raise Inexact(f"{value} days is out of the range of a date") from e
    if encoding in _TIMESTAMP_UNITS:
        unit = _TIMESTAMP_UNITS[encoding]
        if unit is None and value % 1000:
            raise Inexact(f"{value} ns has sub-microsecond digits, which an Iceberg timestamp cannot hold")
        if value == 0:
            raise _epoch_stand_in(encoding)
        micros = value // 1000 if unit is None else value * unit
        try:
            moment = _EPOCH_NTZ + dt.timedelta(microseconds=micros)
        except OverflowError as e:
            raise Inexact(f"{value} is out of the range of a timestamp") from e
        return cast_sql(moment.isoformat(sep=" "), spec.iceberg_type)
    if encoding in _TIME_MICROS:
        return cast_sql(str(value * _TIME_MICROS[encoding]), spec.iceberg_type)
    if encoding == "io.debezium.time.NanoTime":
        if value % 1000:
            raise Inexact(f"{value} ns has sub-microsecond digits, which the column's microseconds cannot hold")
        return cast_sql(str(value // 1000), spec.iceberg_type)
    raise Inexact(f"a default of a column encoded {encoding} is not converted by this version")


def _base64_bytes(value: Any) -> bytes:
    """The bytes of a Connect ``bytes`` value (its base64 text).

    Raises:
        Inexact: not base64 text.
    """
    if not isinstance(value, str):
        raise Inexact(f"{value!r} is not the base64 text of bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as e:
        raise Inexact(f"{value!r} is not base64") from e


def connect_default(value: Any, spec: ColumnSpec, *, encoding: str | None = None, shown_by: str) -> ColumnDefault:
    """What rows that existed before a column was added read in it, from the ``default`` the
    column's field carries in an event's own schema (tables that evolve from their events:
    ``schema_changes.source``; :func:`cdclake.model.schema_from_events.plan_from_events`).

    The rule (MySQL 8.0 Reference Manual, "Data Type Default Values"; MariaDB Knowledge Base,
    "ALTER TABLE"): ``ADD COLUMN ... DEFAULT v`` fills the rows a table holds with ``v`` and writes
    no row event for them. Debezium puts the column's default in its Connect schema
    (``SchemaBuilder.defaultValue``, converted by the column's value converter, so encoded exactly
    as a value of the column: an int, a decimal's base64 bytes, days for a DATE, an ISO-8601 string
    for a TIMESTAMP); ``JsonConverter`` writes it as the field's ``default``, an Avro converter as
    ``connect.default`` (:func:`cdclake.model.avro.connect_schema`). So the default is decoded here
    exactly as :func:`cdclake.spark.decode.decode` decodes that value in an event.

    Not exact (``sql`` ``None``, never filled): a value that would not decode (its event would be a
    bad record), a spatial default, and the epoch in a DATE, DATETIME or TIMESTAMP column, which is
    what Debezium writes for ``DEFAULT CURRENT_TIMESTAMP`` (the ALTER's time), and for a zero date.

    Args:
        value: the field's ``default``, as the event's JSON holds it (not ``None``).
        spec: the column as the Iceberg table holds it (the cast is to its type).
        encoding: the encoding of the schema that carries the default (default: ``spec``'s; a
            later schema may have promoted the column, whose values keep their JSON form).
        shown_by: the event (or writer schema) that shows it, for ``reason``.
    """
    encoding = encoding or spec.encoding
    shown = f"{json.dumps(value)[:MAX_REASON_VALUE_CHARS]} in the schema of {shown_by}"
    try:
        sql = _connect_value_sql(value, encoding, spec)
    except Inexact as e:
        return ColumnDefault(spec.name, None, False, f"DEFAULT {shown}: {e.why}")
    except (LiteralError, ValueError, OverflowError) as e:
        return ColumnDefault(spec.name, None, False, f"DEFAULT {shown}: {e}")
    return ColumnDefault(spec.name, sql, True, f"DEFAULT {shown}")
