"""Which writer encodings a table column takes, and how their values are brought to its encoding.

One MariaDB/MySQL column does not always reach Kafka under one Connect schema. Debezium's
snapshot and its binlog reader can describe it differently (MariaDB's ``JSON`` is a ``LONGTEXT``
alias: the binlog's ``CREATE TABLE`` gives ``io.debezium.data.Json``, a snapshot's read of the
column plain ``string``), and so can two connector versions or two settings of
``time.precision.mode`` (``adaptive`` writes ``DATETIME(3)`` as ``io.debezium.time.Timestamp``
milliseconds, ``connect`` as Connect's ``Timestamp``; a ``DATETIME(6)`` is microseconds). Each
writer schema decodes its own records, and the table's column must end with the same Iceberg
value whichever schema described the column.

:func:`conversion` answers for a pair (writer encoding, table encoding) (encodings:
:mod:`cdclake.model.types`):

=================================================  ===============================================
family (the same Iceberg type, the same values)    the writer's value in the table's encoding
=================================================  ===============================================
text: ``string``, ``Json``, ``Enum``, ``EnumSet``,  unchanged (all are the column's text as MySQL
``Xml``                                            returns it)
days: ``io.debezium.time.Date``, Connect ``Date``  unchanged (days since 1970-01-01)
integers: ``int8``/``int16``/``int32``,            unchanged (a YEAR is its number); a wider
``io.debezium.time.Year``                          table integer holds a narrower one
DATETIME: ``Timestamp`` and Connect ``Timestamp``  times 1000 per step of unit (ms -> us -> ns),
(ms), ``MicroTimestamp`` (us), ``NanoTimestamp``   coarser writer into a finer table only
(ns)
TIME: ``Time`` and Connect ``Time`` (ms),          as DATETIME
``MicroTime`` (us), ``NanoTime`` (ns)
spatial: ``Geometry``, ``Geography``, ``Point``    unchanged (``{wkb, srid}``; a Point's x and y are
                                                   in its WKB)
=================================================  ===============================================

Not interchangeable, and why (a record of such a writer column stays a bad record naming both
encodings): ``Bits`` and ``bytes`` (Debezium sends BIT(n) bytes little-endian, the table stores
MySQL's big-endian order; a BINARY column's bytes are not reordered), a finer DATETIME or TIME
writer into a coarser table encoding (digits the table's encoding cannot hold), decimals of
another scale, a Connect ``Decimal`` and its ``decimal.handling.mode`` ``double`` or ``string``
forms (one is rounded, the other text), ``ZonedTimestamp`` and text, any two Iceberg types
Iceberg does not promote.

Source of the families: Debezium MySQL/MariaDB connector docs, "Data type mappings" (which
semantic type each MySQL type and mode gives), Kafka Connect's ``Date``/``Time``/``Timestamp``
logical types (days, ms of day, ms since epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.model.types import (
    SPATIAL_ENCODINGS,
    UNSIGNED_INT64,
    parse_decimal_encoding,
)

TEXT_ENCODINGS = frozenset(
    {
        "string",
        "io.debezium.data.Json",
        "io.debezium.data.Enum",
        "io.debezium.data.EnumSet",
        "io.debezium.data.Xml",
    }
)
"""Encodings whose JSON value is the column's text, as MySQL returns it."""

DAY_ENCODINGS = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})
"""Encodings of a DATE: days since 1970-01-01."""

_INTEGER_WIDTH = {"int8": 8, "int16": 16, "int32": 32, "io.debezium.time.Year": 32, "int64": 64, UNSIGNED_INT64: 64}
"""Integer encodings and the bits of the Connect integer that carries them (YEAR is an int32)."""

TIMESTAMP_UNITS = {
    "io.debezium.time.Timestamp": 3,
    "org.apache.kafka.connect.data.Timestamp": 3,
    "io.debezium.time.MicroTimestamp": 6,
    "io.debezium.time.NanoTimestamp": 9,
}
"""DATETIME encodings -> the decimal exponent of their unit (10^-3 s: milliseconds since the epoch)."""

TIME_UNITS = {
    "io.debezium.time.Time": 3,
    "org.apache.kafka.connect.data.Time": 3,
    "io.debezium.time.MicroTime": 6,
    "io.debezium.time.NanoTime": 9,
}
"""TIME encodings -> the decimal exponent of their unit (10^-3 s: milliseconds)."""


@dataclass(frozen=True)
class Conversion:
    """How a writer column's value becomes a value of the table column's encoding.

    Attributes:
        factor: the writer's number times ``factor`` is the table encoding's (1: unchanged; 1000:
            milliseconds into microseconds). Only temporal units have a factor other than 1.
    """

    factor: int = 1

    @property
    def is_identity(self) -> bool:
        return self.factor == 1


IDENTITY = Conversion()


def conversion(writer: str, table: str) -> Conversion | None:
    """How a table column of encoding ``table`` takes the values of a writer column of encoding
    ``writer``, or ``None`` when it cannot take them unchanged in meaning (see the module table).

    Besides the families: the same encoding; an integer into a no narrower one (int32 into
    int64, the same JSON numbers, Iceberg promotes int to long); ``float`` into ``double``; a
    decimal into one of the same scale and no fewer digits (or exact text).

    >>> conversion("string", "io.debezium.data.Json")
    Conversion(factor=1)
    >>> conversion("io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp")
    Conversion(factor=1000)
    >>> conversion("io.debezium.time.MicroTimestamp", "io.debezium.time.Timestamp") is None
    True
    """
    if writer == table:
        return IDENTITY
    w, t = parse_decimal_encoding(writer), parse_decimal_encoding(table)
    if w is not None or t is not None:
        if w is None or t is None:
            return None
        fits = w[1] == t[1] and (t[0] is None or (w[0] is not None and t[0] >= w[0]))
        return IDENTITY if fits else None
    for family in (TEXT_ENCODINGS, DAY_ENCODINGS, SPATIAL_ENCODINGS):
        if writer in family:
            return IDENTITY if table in family else None
    if writer in _INTEGER_WIDTH:
        if table not in _INTEGER_WIDTH:
            return None
        return IDENTITY if _INTEGER_WIDTH[table] >= _INTEGER_WIDTH[writer] else None
    if writer in ("float", "float32"):
        return IDENTITY if table in ("float", "float32", "double", "float64") else None
    if writer in ("double", "float64"):
        return IDENTITY if table in ("double", "float64") else None
    for units in (TIMESTAMP_UNITS, TIME_UNITS):
        if writer in units:
            if table not in units or units[table] < units[writer]:
                return None
            return Conversion(10 ** (units[table] - units[writer]))
    return None


def takes(writer: str, table: str) -> bool:
    """Whether a table column of encoding ``table`` takes a writer column of encoding ``writer``
    (:func:`conversion` is not ``None``)."""
    return conversion(writer, table) is not None
