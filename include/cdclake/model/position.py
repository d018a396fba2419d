"""The binlog position of a Debezium MySQL/MariaDB change event, and its total order.

An event's position is ``(binlog file sequence number, pos, row)`` taken from the envelope's
``source`` block (Debezium MySQL connector docs, "source metadata": ``file``, ``pos``, ``row``).
The file sequence number is the numeric suffix of the binlog file name, compared as an integer:
``mysql-bin.999999`` is followed by ``mysql-bin.1000000``, which a string comparison gets wrong.
At equal positions a snapshot read ranks below a change (``c``/``u``/``d``): every row of an initial
snapshot carries the snapshot's start position, and a change at that same position happened after
the read.

The Kafka offset is never part of the order: after a connector restart Debezium re-emits events
at higher offsets with their original (older) positions.

**GTID ordering** (table config ``ordering: gtid``): binlog coordinates are those of one server, so
after a failover to another server they are no longer comparable with the ones already applied.
A MariaDB GTID ``<domain>-<server>-<sequence>`` is: the sequence number keeps growing within its
domain on whichever server is the primary (MariaDB KB, "Global Transaction ID"). Under GTID
ordering the first component of the position is the GTID's sequence number instead of the binlog
file's; ``pos`` and ``row`` then order the events within one transaction (a transaction never
spans binlog files). An event without a GTID (Debezium leaves ``source.gtid`` null in the rows of
an initial snapshot) ranks at sequence :data:`NO_GTID`, below every GTID. MySQL GTIDs
(``<server uuid>:<n>``) number transactions per server, so they have no order across servers and
cannot be used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

BINLOG_FILE_PATTERN = r"^(.+)\.([0-9]+)$"
"""``<basename>.<sequence number>``; group 1 is the basename, group 2 the sequence number.
Shared with the Spark job (``regexp_extract``) so that both sides split names the same way."""

_BINLOG_FILE = re.compile(BINLOG_FILE_PATTERN)

ORDERINGS = ("binlog", "gtid")
"""How events are ordered: by binlog coordinates (the default) or by MariaDB GTID sequence."""

MARIADB_GTID_PATTERN = r"^([0-9]+)-([0-9]+)-([0-9]+)$"
"""A MariaDB GTID ``<domain>-<server>-<sequence>``: groups :data:`GTID_DOMAIN_GROUP`,
:data:`GTID_SERVER_GROUP` and :data:`GTID_SEQUENCE_GROUP`. Shared with the Spark codec
(:mod:`cdclake.spark.positions`)."""

GTID_DOMAIN_GROUP = 1
GTID_SERVER_GROUP = 2
GTID_SEQUENCE_GROUP = 3

MYSQL_GTID_SEPARATOR = ":"
"""Separates a MySQL GTID's source (the server UUID) from its transaction numbers."""

_MARIADB_GTID = re.compile(MARIADB_GTID_PATTERN)

NO_GTID = -1
"""GTID sequence of an event without a GTID under GTID ordering (the rows of an initial snapshot)."""

DEMOTED = -2
"""First position component of rows moved below every position of any history
(``accept_source_change``): below :data:`NO_GTID` too."""

SNAPSHOT_MARKERS = ("true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental")
"""Values of ``source.snapshot`` that mark an event as a snapshot read (Debezium 1.x emitted
initial-snapshot rows as ``op: c`` with ``snapshot: "true"``; 2.x uses ``op: r``)."""


def split_binlog_file(name: str) -> tuple[str, int]:
    """Split a binlog file name into ``(basename, sequence number)``.

    >>> split_binlog_file("mysql-bin.000003")
    ('mysql-bin', 3)

    Raises:
        ValueError: the name has no numeric suffix.
    """
    m = _BINLOG_FILE.match(name)
    if not m:
        raise ValueError(f"binlog file name {name!r} has no numeric suffix (<basename>.<number>)")
    return m.group(1), int(m.group(2))


def parse_mariadb_gtid(gtid: str) -> tuple[int, int, int] | None:
    """``(domain, server, sequence)`` of a MariaDB GTID (white space around it ignored), ``None``
    for anything else (a MySQL GTID).

    >>> parse_mariadb_gtid("0-223344-164")
    (0, 223344, 164)
    """
    m = _MARIADB_GTID.match(gtid.strip())
    if m is None:
        return None
    return int(m.group(GTID_DOMAIN_GROUP)), int(m.group(GTID_SERVER_GROUP)), int(m.group(GTID_SEQUENCE_GROUP))


def gtid_source(gtid: str | None) -> str | None:
    """The source part of a GTID, which names the binlog history it belongs to
    (:class:`~cdclake.model.convergence.SourceIdentity`): a MySQL GTID ``<uuid>:<n>`` (or an
    interval set) -> the server UUID, spaces around it stripped; a MariaDB GTID ``0-1-123`` (as
    written, without spaces around it) -> ``<domain>-<server>`` ``0-1``; anything else (``None``,
    empty, malformed) -> ``None``. The Spark column of the same rule is
    :func:`cdclake.spark.positions.gtid_source`.

    >>> gtid_source("0-184054-1234")
    '0-184054'
    """
    if not gtid:
        return None
    if MYSQL_GTID_SEPARATOR in gtid:
        return gtid.split(MYSQL_GTID_SEPARATOR, 1)[0].strip(" ")  # as Spark's trim: spaces only
    m = _MARIADB_GTID.match(gtid)
    return None if m is None else f"{m.group(GTID_DOMAIN_GROUP)}-{m.group(GTID_SERVER_GROUP)}"


def is_snapshot_read(op: str, snapshot: Any) -> bool:
    """Whether an event is a snapshot read: ``op`` ``r``, or a 1.x ``c`` flagged ``snapshot``."""
    if op == "r":
        return True
    if isinstance(snapshot, bool):  # hand-written pre-1.0 examples use a JSON boolean
        return snapshot
    return snapshot in SNAPSHOT_MARKERS


@dataclass(frozen=True, order=True)
class BinlogPosition:
    """A comparable event position. Field order is the sort order.

    Attributes:
        file_seq: binlog file sequence number (``mysql-bin.000003`` -> 3); under GTID ordering the
            GTID's sequence number (:data:`NO_GTID` without one).
        pos: byte offset of the event in the binlog file (``source.pos``).
        row: index of the row within a multi-row binlog event (``source.row``).
        change_rank: 0 for a snapshot read, 1 for a change (``c``/``u``/``d``/``t``).
    """

    file_seq: int
    pos: int
    row: int
    change_rank: int

    @classmethod
    def from_source(cls, source: dict[str, Any], op: str, ordering: str = "binlog") -> BinlogPosition:
        """Build the position from an envelope's ``source`` block and ``op``.

        Raises:
            ValueError: ``file`` or ``pos`` is missing or malformed; under GTID ordering, a
                ``gtid`` that is not a MariaDB GTID.
        """
        file = source.get("file")
        pos = source.get("pos")
        if not isinstance(file, str) or not isinstance(pos, int):
            raise ValueError(f"source has no binlog position (file={file!r}, pos={pos!r})")
        _, seq = split_binlog_file(file)
        if ordering == "gtid":
            gtid = source.get("gtid")
            parsed = parse_mariadb_gtid(gtid) if isinstance(gtid, str) else None
            if gtid and parsed is None:
                raise ValueError(f"source.gtid {gtid!r} is not a MariaDB GTID <domain>-<server>-<sequence>")
            seq = parsed[2] if parsed else NO_GTID
        row = source.get("row") or 0
        rank = SNAPSHOT_RANK if is_snapshot_read(op, source.get("snapshot")) else CHANGE_RANK
        return cls(seq, pos, int(row), rank)

    def to_text(self) -> str:
        """``<file seq>:<pos>:<row>:<rank>``: how a position is stored in table properties and
        snapshot summaries (``cdc.truncate-floor``, ``cdc.schema-change-position``)."""
        return f"{self.file_seq}:{self.pos}:{self.row}:{self.change_rank}"

    @classmethod
    def from_text(cls, text: str) -> BinlogPosition:
        """Inverse of :meth:`to_text`.

        Raises:
            ValueError: not four integers separated by ``:``.
        """
        parts = text.split(":")
        if len(parts) != 4:
            raise ValueError(f"position {text!r} is not <file seq>:<pos>:<row>:<rank>")
        f, p, r, k = (int(x) for x in parts)
        return cls(f, p, r, k)

    def to_event_text(self) -> str:
        """``<file seq>:<pos>:<row>``: the event part of the position, without the rank
        (``cdc.first-position``, ``cdc.last-position``)."""
        return f"{self.file_seq}:{self.pos}:{self.row}"

    @classmethod
    def from_row(cls, row: Mapping[str, Any], ordering: str, *, change: bool = False) -> BinlogPosition:
        """The position of the event that wrote a lake row (or a tombstone, ``change=True``),
        read from its metadata columns by :func:`position_parts` (a missing column reads as NULL).

        Raises:
            ValueError: an unknown ``ordering``.
        """
        return cls(*(part.read(row) for part in position_parts(ordering, change=change)))


SNAPSHOT_RANK = 0
"""Change rank of a snapshot read: below a change at the same position."""

CHANGE_RANK = 1
"""Change rank of a change (``c``/``u``/``d``/``t``)."""


@dataclass(frozen=True)
class PositionPart:
    """One component of a row's position, read from one of its metadata columns
    (:data:`cdclake.model.layout.METADATA_COLUMNS`, :data:`~cdclake.model.layout.TOMBSTONE_COLUMNS`).

    Every engine's codec is generated from these parts: the Python reading (:meth:`read`,
    :meth:`BinlogPosition.from_row`), Spark columns and SQL (:mod:`cdclake.spark.positions`) and
    pyiceberg row filters (:mod:`cdclake.io.positions`).

    Attributes:
        field: the :class:`BinlogPosition` attribute (also the field name of Spark's struct).
        column: the metadata column read; ``None``: none, the part is always ``if_null``.
        if_null: the value of a NULL column; for a boolean column (``when_true``), of false too.
        bits: the width of the value: 64 (Iceberg ``long``, Spark ``bigint``) or 32 (``int``).
        when_true: for a boolean column, the value when it is true; ``None`` for an integer column.
    """

    field: str
    column: str | None
    if_null: int
    bits: int
    when_true: int | None = None

    def read(self, row: Mapping[str, Any]) -> int:
        """This part's value in ``row`` (column name -> value; ``None`` or absent: NULL)."""
        value = row.get(self.column) if self.column is not None else None
        if self.when_true is not None:
            return self.when_true if value is True else self.if_null
        return self.if_null if value is None else int(value)


def position_parts(ordering: str, *, change: bool = False) -> tuple[PositionPart, ...]:
    """The order of rows by the position of the event that wrote them: the parts of
    :class:`BinlogPosition`, in sort order, over a row's metadata columns.

    The first part is the binlog file's sequence number (``_cdc_binlog_file_seq``), or under
    ``ordering`` ``gtid`` the GTID's (``_cdc_gtid_seq``); a row without one reads
    :data:`NO_GTID`. ``pos`` and ``row`` read -1 when NULL. The change rank is
    :data:`SNAPSHOT_RANK` when ``_cdc_snapshot`` is true, else :data:`CHANGE_RANK`; with
    ``change=True`` always :data:`CHANGE_RANK` (a tombstone records a delete, which is a change,
    and its table has no ``_cdc_snapshot``).

    Raises:
        ValueError: an ``ordering`` not in :data:`ORDERINGS`.
    """
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering {ordering!r} is not one of {ORDERINGS}")
    return (
        PositionPart("file_seq", "_cdc_gtid_seq" if ordering == "gtid" else "_cdc_binlog_file_seq", NO_GTID, 64),
        PositionPart("pos", "_cdc_binlog_pos", -1, 64),
        PositionPart("row", "_cdc_binlog_row", -1, 32),
        PositionPart("change_rank", None if change else "_cdc_snapshot", CHANGE_RANK, 32, when_true=SNAPSHOT_RANK),
    )
