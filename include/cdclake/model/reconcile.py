"""Reconcile: does an Iceberg table equal its source table? The pure rules (docs/operations.md,
"Reconcile and repair").

1. **Chunks.** The source table's primary-key order is cut every ``chunk_rows`` keys (keyset
   pagination on the primary key's index). A chunk is ``(lower, upper]``; the first has no lower
   bound and the last no upper one. String key columns are ordered by their bytes (``BINARY``) on
   the source, which is Python's order of ``str``, so both sides cut at the same keys.
2. **Digests.** A row's *canonical text* is the same on both sides: per compared column, in
   table order, ``<length>:<text>`` or ``-`` for NULL, joined by ``,``; the text of a value is
   fixed per :class:`Kind` (:func:`canonical_sql` in MariaDB, :func:`canonical_text` for the
   value the apply wrote into Iceberg: decimals exactly, temporal values in UTC with
   microseconds, TIME as signed microseconds, binary as upper-case hex). A row's hash is the
   first 64 bits of the MD5 of its canonical text; a chunk's digest is ``(row count, XOR of the
   row hashes)``. Only chunks whose digests differ are compared row by row.
3. **Rows.** Inside a differing chunk each key is compared column by column; floating-point
   columns also compare equal within a relative ``1e-6`` (the digest rounds them to 4 decimals).
4. **Settling.** The source is read at a position P (its consistent-snapshot binlog position);
   the lake is compared only after it has applied every event before P. A difference counts when
   the lake's version of the key (its row, or the tombstone of its delete) was written by an event
   before P: then the lake had every change the source had. A key whose lake version is newer
   than P is *unsettled*: it is read again in the next round, and after the last one reported as
   unsettled, never as a difference.
"""

from __future__ import annotations

import bisect
import datetime as dt
import hashlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, localcontext
from enum import Enum
from typing import Any

from cdclake.errors import ConfigError
from cdclake.model.position import BinlogPosition
from cdclake.model.types import ColumnSpec

FLOAT_DIGEST_PLACES = 4
"""Decimal places floating-point values are rounded to in the digest (both sides)."""

FLOAT_REL_TOLERANCE = 1e-6
"""Relative difference under which two floating-point values compare equal row by row: Debezium
narrows ``REAL`` to 32 bits (:mod:`cdclake.model.types`)."""


class Kind(str, Enum):
    """How a column's values are written as canonical text."""

    INT = "int"
    BOOL = "bool"
    BITS = "bits"
    DECIMAL = "decimal"
    FLOAT = "float"
    DATE = "date"
    DATETIME = "datetime"
    TIMESTAMP = "timestamp"
    TIME = "time"
    STRING = "string"
    BYTES = "bytes"
    SPATIAL = "spatial"


@dataclass(frozen=True)
class SourceColumn:
    """A source column as ``information_schema.COLUMNS`` describes it.

    Attributes:
        name: ``COLUMN_NAME``.
        data_type: ``DATA_TYPE``, lower case (``int``, ``varchar``, ``bit``, ...).
        column_type: ``COLUMN_TYPE`` (``bit(10)``, ``int(10) unsigned``).
    """

    name: str
    data_type: str
    column_type: str = ""


@dataclass(frozen=True)
class CompareColumn:
    """A column compared by reconcile: its name and :class:`Kind`."""

    name: str
    kind: Kind


_SPATIAL = {
    "geometry",
    "point",
    "linestring",
    "polygon",
    "multipoint",
    "multilinestring",
    "multipolygon",
    "geometrycollection",
}


def column_kind(source: SourceColumn, lake: ColumnSpec) -> Kind | None:
    """The :class:`Kind` a column is compared as, from its source type and its Iceberg column;
    ``None`` when the two have no common canonical text (a binary column the connector sends as
    base64 or hex text: ``binary.handling.mode``)."""
    st, it = source.data_type.lower(), lake.iceberg_type
    if st in _SPATIAL:
        return Kind.SPATIAL if it.startswith("struct<") else None
    if it == "boolean" and st in ("bit", "tinyint", "boolean", "bool"):
        return Kind.BOOL  # BIT(1), and BOOLEAN (TINYINT(1)) as the connector maps it
    if st == "bit":
        return Kind.BITS if it == "binary" else None
    if st == "time":
        return Kind.TIME if it == "long" else None
    if it in ("int", "long"):
        return Kind.INT
    if it.startswith("decimal(") or (st == "decimal" and it == "string"):
        return Kind.DECIMAL
    if it in ("float", "double"):
        return Kind.FLOAT
    if it == "date":
        return Kind.DATE
    if it == "timestamp":
        return Kind.DATETIME
    if it == "timestamptz":
        return Kind.TIMESTAMP
    if it == "binary":
        return Kind.BYTES
    if it == "string" and not any(b in st for b in ("binary", "blob")):
        return Kind.STRING
    return None


def compare_columns(
    source: Sequence[SourceColumn], lake: Sequence[ColumnSpec], ignored: Iterable[str] = ()
) -> tuple[list[CompareColumn], dict[str, str]]:
    """The columns to compare, in source order, and ``{column: why not}`` for the others.

    A column is compared when both sides have it and it is not ``ignored``; a column the lake
    keeps after the source dropped it (``dropped_columns: keep``) is not. ``_cdc_*`` columns are
    never source columns, so never compared.
    """
    ignored = set(ignored)
    by_name = {c.name: c for c in lake}
    out: list[CompareColumn] = []
    skipped: dict[str, str] = {}
    for col in source:
        if col.name in ignored:
            skipped[col.name] = "ignored by configuration"
        elif col.name not in by_name:
            skipped[col.name] = "not in the Iceberg table"
        else:
            kind = column_kind(col, by_name[col.name])
            if kind is None:
                skipped[col.name] = (
                    f"source {col.data_type} and Iceberg {by_name[col.name].iceberg_type} have no common text"
                )
            else:
                out.append(CompareColumn(col.name, kind))
    names = {c.name for c in source}
    for spec in lake:
        if spec.name not in names and spec.name not in ignored:
            skipped[spec.name] = "not in the source table (dropped there)"
    return out, skipped


def quote(name: str) -> str:
    """A MariaDB identifier in backticks."""
    return "`" + name.replace("`", "``") + "`"


def pyformat(sql: str) -> str:
    """``sql`` inside a query with ``%s`` parameters (PyMySQL's paramstyle): a literal ``%`` (in a
    name, or ``DATE_FORMAT``'s) doubled."""
    return sql.replace("%", "%%")


def canonical_sql(column: CompareColumn) -> str:
    """MariaDB SQL of the column's canonical text (NULL for NULL). The session's ``time_zone``
    must be ``+00:00`` (TIMESTAMP values in UTC)."""
    c = quote(column.name)
    return {
        Kind.INT: f"CAST({c} AS CHAR)",
        Kind.BOOL: f"CAST(({c} + 0 <> 0) AS CHAR)",
        Kind.BITS: f"HEX({c} + 0)",
        Kind.DECIMAL: f"CAST({c} AS CHAR)",
        Kind.FLOAT: f"CAST(CAST({c} AS DECIMAL(65,{FLOAT_DIGEST_PLACES})) AS CHAR)",
        Kind.DATE: f"CAST({c} AS CHAR)",
        Kind.DATETIME: f"DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
        Kind.TIMESTAMP: f"DATE_FORMAT({c}, '%Y-%m-%d %H:%i:%s.%f')",
        Kind.TIME: f"CAST(TIME_TO_SEC({c}) * 1000000 AS SIGNED)",
        Kind.STRING: f"CONVERT({c} USING utf8mb4)",
        Kind.BYTES: f"HEX({c})",
        Kind.SPATIAL: f"CONCAT(HEX(ST_AsBinary({c})), '@', ST_SRID({c}))",
    }[column.kind]


def row_text_sql(columns: Sequence[CompareColumn]) -> str:
    """MariaDB SQL of a row's canonical text (module docstring, 2)."""
    parts = []
    for col in columns:
        x = canonical_sql(col)
        parts.append(f"IFNULL(CONCAT(CHAR_LENGTH({x}), ':', {x}), '-')")
    return "CONCAT_WS(',', " + ", ".join(parts) + ")" if parts else "''"


def row_hash_sql(columns: Sequence[CompareColumn]) -> str:
    """MariaDB SQL of a row's 64-bit hash (:func:`row_hash`)."""
    return f"CAST(CONV(LEFT(MD5({row_text_sql(columns)}), 16), 16, 10) AS UNSIGNED)"


def canonical_text(kind: Kind, value: Any) -> str | None:
    """The canonical text of a value as pyiceberg reads it from the table (``None`` for NULL).

    Raises:
        TypeError: the value does not fit ``kind``.
    """
    if value is None:
        return None
    if kind is Kind.INT:
        return str(int(value))
    if kind is Kind.BOOL:
        return "1" if value else "0"
    if kind is Kind.BITS:
        return format(int.from_bytes(bytes(value), "big"), "X")
    if kind is Kind.DECIMAL:
        return value if isinstance(value, str) else format(Decimal(value), "f")
    if kind is Kind.FLOAT:
        if not math.isfinite(float(value)):
            return str(value)
        # MariaDB casts the shortest text of the double to DECIMAL(65,4), rounding half up
        with localcontext() as ctx:
            ctx.prec = 400
            rounded = Decimal(repr(float(value))).quantize(Decimal(1).scaleb(-FLOAT_DIGEST_PLACES), ROUND_HALF_UP)
        return format(rounded, "f")
    if kind is Kind.DATE:
        return str(value.isoformat())
    if kind in (Kind.DATETIME, Kind.TIMESTAMP):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return str(value.isoformat(sep=" ", timespec="microseconds"))  # years below 1000 zero-padded
    if kind is Kind.TIME:
        return str(int(value))
    if kind is Kind.STRING:
        return str(value)
    if kind is Kind.BYTES:
        return bytes(value).hex().upper()
    if kind is Kind.SPATIAL:
        wkb, srid = value.get("wkb"), value.get("srid")
        return f"{bytes(wkb).hex().upper() if wkb is not None else ''}@{srid if srid is not None else 0}"
    raise TypeError(f"unknown kind {kind!r}")


def row_text(texts: Iterable[str | None]) -> str:
    """A row's canonical text from its columns' canonical texts."""
    return ",".join("-" if t is None else f"{len(t)}:{t}" for t in texts)


def row_hash(text: str) -> int:
    """The first 64 bits of the MD5 of ``text`` (UTF-8), as an unsigned integer."""
    return int(hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()[:16], 16)


def values_equal(kind: Kind, source_text: str | None, lake_value: Any, source_float: float | None = None) -> bool:
    """Row-level comparison of one column: canonical texts, and for floats a relative tolerance."""
    lake_text = canonical_text(kind, lake_value)
    if source_text == lake_text:
        return True
    if kind is Kind.FLOAT and source_float is not None and lake_value is not None:
        a, b = float(source_float), float(lake_value)
        return math.isclose(a, b, rel_tol=FLOAT_REL_TOLERANCE, abs_tol=1e-12)
    return False


# --- keys and chunks ------------------------------------------------------------------------------


KeyTuple = tuple[Any, ...]


def key_to_lake(kinds: Sequence[Kind], key: Sequence[Any]) -> KeyTuple:
    """A primary key as the source driver returns it -> as pyiceberg returns it (a TIMESTAMP key
    comes back naive in the session's UTC)."""
    out = []
    for kind, v in zip(kinds, key, strict=True):
        if kind is Kind.TIMESTAMP and isinstance(v, dt.datetime) and v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        elif kind is Kind.BOOL and v is not None and not isinstance(v, bool):
            v = bool(int.from_bytes(v, "big")) if isinstance(v, bytes) else bool(v)
        out.append(v)
    return tuple(out)


def parse_key_value(kind: Kind, value: Any) -> Any:
    """A primary-key value from JSON (a Param) -> as the source driver returns it.

    Raises:
        ValueError: the value does not fit the key column's kind.
    """
    if value is None:
        raise ValueError("a key value cannot be null")
    if kind is Kind.INT:
        return int(value)
    if kind is Kind.DECIMAL:
        return Decimal(str(value))
    if kind is Kind.DATE:
        return dt.date.fromisoformat(str(value))
    if kind is Kind.DATETIME:
        return dt.datetime.fromisoformat(str(value)).replace(tzinfo=None)
    if kind is Kind.TIMESTAMP:
        parsed = dt.datetime.fromisoformat(str(value))
        aware = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.timezone.utc)
        return aware.astimezone(dt.timezone.utc).replace(tzinfo=None)  # the session reads in UTC
    if kind is Kind.BYTES:
        return bytes.fromhex(str(value))
    return str(value)


KEY_KINDS = {Kind.INT, Kind.DECIMAL, Kind.DATE, Kind.DATETIME, Kind.TIMESTAMP, Kind.STRING, Kind.BYTES}
"""Kinds a primary-key column may have: ordered the same in MariaDB (``BINARY`` for strings) and
in Python."""


def check_key_kinds(table: str, key: Sequence[CompareColumn]) -> None:
    """Raises:
    ConfigError: a primary-key column of a kind reconcile cannot order on both sides alike."""
    bad = [c.name for c in key if c.kind not in KEY_KINDS]
    if bad:
        raise ConfigError(f"table {table}: reconcile cannot chunk by primary-key column(s) {bad} (their kinds)")


def key_order_sql(key: Sequence[CompareColumn]) -> list[str]:
    """SQL of each key column as the source orders it (for queries with parameters: ``%``
    escaped): strings by their UTF-8 bytes, which is Python's order of ``str`` whatever the
    column's character set."""
    return [
        f"BINARY CONVERT({pyformat(quote(c.name))} USING utf8mb4)" if c.kind is Kind.STRING else pyformat(quote(c.name))
        for c in key
    ]


def range_sql(key: Sequence[CompareColumn], lower: KeyTuple | None, upper: KeyTuple | None) -> tuple[str, list[Any]]:
    """``(WHERE clause, parameters)`` of the chunk ``(lower, upper]`` (``1=1`` unbounded)."""
    cols = "(" + ", ".join(key_order_sql(key)) + ")"
    marks = "(" + ", ".join("%s" for _ in key) + ")"
    clauses: list[str] = []
    params: list[Any] = []
    if lower is not None:
        clauses.append(f"{cols} > {marks}")
        params.extend(lower)
    if upper is not None:
        clauses.append(f"{cols} <= {marks}")
        params.extend(upper)
    return (" AND ".join(clauses) or "1=1"), params


@dataclass(frozen=True)
class Chunk:
    """``(lower, upper]`` in primary-key order (source representation); ``None``: unbounded."""

    index: int
    lower: KeyTuple | None
    upper: KeyTuple | None

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "lower": _jsonable(self.lower), "upper": _jsonable(self.upper)}


def _jsonable(key: KeyTuple | None) -> list[str] | None:
    return None if key is None else [str(v) for v in key]


def uppers(chunks: Sequence[Chunk], kinds: Sequence[Kind]) -> list[KeyTuple]:
    """The chunks' upper bounds in lake representation, for :func:`chunk_of` (the last chunk's,
    unbounded, left out)."""
    return [key_to_lake(kinds, c.upper) for c in chunks if c.upper is not None]


def chunk_of(bounds: Sequence[KeyTuple], key: KeyTuple) -> int:
    """Index of the chunk ``(lower, upper]`` holding ``key``, given :func:`uppers`."""
    return bisect.bisect_left(bounds, key)


@dataclass
class Digest:
    """``(rows, XOR of row hashes)`` of a chunk."""

    rows: int = 0
    xor: int = 0

    def add(self, h: int) -> None:
        self.rows += 1
        self.xor ^= h


# --- settling -------------------------------------------------------------------------------------


def read_position(ordering: str, binlog_file_seq: int, binlog_pos: int, gtid_seq: int | None) -> BinlogPosition:
    """The position of a consistent source read, comparable with event positions in ``ordering``:
    an event is in the read when its position is below this one.

    Args:
        binlog_file_seq, binlog_pos: MariaDB's ``Binlog_snapshot_file`` / ``_position``.
        gtid_seq: under GTID ordering, the sequence of the last transaction in the read
            (``BINLOG_GTID_POS`` of those coordinates, the table's domain).
    """
    if ordering == "gtid":
        if gtid_seq is None:
            raise ValueError("GTID ordering needs the read's GTID position")
        return BinlogPosition(gtid_seq + 1, -2, -2, 0)
    return BinlogPosition(binlog_file_seq, binlog_pos, -1, 0)


class Verdict(str, Enum):
    EQUAL = "equal"
    ONLY_IN_SOURCE = "only_in_source"
    ONLY_IN_LAKE = "only_in_lake"
    DIFFERING = "differing"
    UNSETTLED = "unsettled"


def verdict(
    source_present: bool,
    lake_present: bool,
    equal: bool,
    lake_version: BinlogPosition | None,
    read: BinlogPosition,
) -> Verdict:
    """The settled outcome of one key (module docstring, 4).

    Args:
        lake_version: the position of the event that wrote the lake's row, or of the key's
            tombstone when the lake has no row (``None``: neither).
        read: the source read's position (:func:`read_position`).
    """
    if source_present and lake_present and equal:
        return Verdict.EQUAL
    if not source_present and not lake_present:
        return Verdict.EQUAL
    if lake_version is not None and not lake_version < read:
        return Verdict.UNSETTLED
    if source_present and not lake_present:
        return Verdict.ONLY_IN_SOURCE
    if lake_present and not source_present:
        return Verdict.ONLY_IN_LAKE
    return Verdict.DIFFERING


@dataclass
class ChunkOutcome:
    """What reconcile found in one chunk."""

    chunk: Chunk
    source_rows: int = 0
    lake_rows: int = 0
    only_in_source: list[KeyTuple] = field(default_factory=list)
    only_in_lake: list[KeyTuple] = field(default_factory=list)
    differing: dict[KeyTuple, list[str]] = field(default_factory=dict)
    unsettled: list[KeyTuple] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.only_in_source or self.only_in_lake or self.differing)


def repair_condition(key: Sequence[CompareColumn], keys: Iterable[KeyTuple]) -> str:
    """The ``additional-conditions`` filter (MariaDB SQL) that selects exactly ``keys``: an ``IN``
    list of literals (Debezium's filter is a SQL text, so values are quoted here).

    Raises:
        ValueError: a key value of a type that cannot be written as a literal.
    """
    cols = ", ".join(quote(c.name) for c in key)
    rows: list[str] = []
    for k in sorted(set(keys)):
        rows.append("(" + ", ".join(sql_literal(v) for v in k) + ")")
    if not rows:
        return "1=0"
    return f"({cols}) IN ({', '.join(rows)})"


def sql_literal(v: Any) -> str:
    """A MariaDB literal of a key value."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (int, Decimal)):
        return str(v)
    if isinstance(v, bytes):
        return "X'" + v.hex() + "'"
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        # a TIMESTAMP: an instant, compared in the reading session's time zone whatever it is
        return f"FROM_UNIXTIME({v.timestamp():.6f})"
    if isinstance(v, (dt.datetime, dt.date)):
        return "'" + v.isoformat(sep=" ") + "'" if isinstance(v, dt.datetime) else "'" + v.isoformat() + "'"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "''") + "'"
    raise ValueError(f"cannot write {v!r} as a SQL literal")
