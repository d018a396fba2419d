"""The binlog position of a Debezium MySQL/MariaDB change event, and its total order.

An event's position is ``(binlog file sequence number, pos, row)`` taken from the envelope's
``source`` block (Debezium MySQL connector docs, "source metadata": ``file``, ``pos``, ``row``).
The file sequence number is the numeric suffix of the binlog file name, compared as an integer:
``mysql-bin.999999`` is followed by ``mysql-bin.1000000``, which a string comparison gets wrong.
At equal positions a snapshot read ranks below a change (``c``/``u``/``d``): every row of an initial
snapshot carries the snapshot's start position, and a change at that same position happened after
the read.

The Kafka offset is not part of the position: after a connector restart Debezium re-emits events
at higher offsets with their original (older) positions. It breaks ties among events at one position
only (:class:`EventPlace`, :func:`supersedes`): with MySQL's ``binlog_transaction_compression=ON``,
Debezium can give every rows event of a compressed transaction the position of the transaction's
payload, ``row`` restarting at 0 in each, so two changes of one key in that transaction share
``(file, pos, row)``. Debezium emits them in order and sends a key's events to one partition (it keys
records by primary key), so within a partition the greater offset is the later change. Equal
positions in different partitions have no order.

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

**Kafka ordering** (table config ``ordering: kafka``), for producers that write no binlog position
(Flink CDC's and Paimon's Debezium JSON, some TiCDC and Maxwell setups write ``source.file`` ``""``
and ``pos`` 0): every event has the same position (:func:`position_parts` reads no column), so
events are ordered by Kafka offset within a partition and nothing else; an event of another
partition replaces a row whatever its offset (:func:`unguarded_across_partitions`).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

BINLOG_FILE_PATTERN = r"^(.+)\.([0-9]+)$"
"""``<basename>.<sequence number>``; group 1 is the basename, group 2 the sequence number.
Shared with the Spark job (``regexp_extract``) so that both sides split names the same way."""

_BINLOG_FILE = re.compile(BINLOG_FILE_PATTERN)

ORDERINGS = ("binlog", "gtid", "kafka")
"""How events are ordered: by binlog coordinates (the default), by MariaDB GTID sequence, or by
Kafka offset alone (producers without binlog positions)."""

SOURCE_ORDERINGS = ("binlog", "gtid")
"""The orderings that read the source's position from each event; under the others every event has
the same position, and nothing that compares positions (floors, source identity, reconcile's
reads, schema changes' places among the events) applies."""

NO_POSITION_REMEDY = (
    "a producer that writes no binlog position (Flink CDC, Paimon, some TiCDC and Maxwell setups write "
    "source.file '' and pos 0) needs the table config ordering: kafka (order by Kafka offset within a "
    "partition; docs/table-config.md)"
)
"""What an error about an event without a binlog position tells the user to do."""

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

        Under an ordering outside :data:`SOURCE_ORDERINGS` nothing of ``source`` is read: every
        event has the position of a row with NULL metadata columns (:func:`position_parts`).

        Raises:
            ValueError: ``file`` or ``pos`` is missing or malformed (the message names
                :data:`NO_POSITION_REMEDY`); under GTID ordering, a ``gtid`` that is not a MariaDB
                GTID.
        """
        if ordering not in SOURCE_ORDERINGS:
            return cls.from_row({}, ordering)
        file = source.get("file")
        pos = source.get("pos")
        if not isinstance(file, str) or not isinstance(pos, int) or not file:
            raise ValueError(f"source has no binlog position (file={file!r}, pos={pos!r}): {NO_POSITION_REMEDY}")
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
    """One component of a row's position (or of its place, :data:`KAFKA_PARTS`), read from one of
    its metadata columns (:data:`cdclake.model.layout.METADATA_COLUMNS`,
    :data:`~cdclake.model.layout.TOMBSTONE_COLUMNS`).

    Every engine's codec is generated from these parts: the Python reading (:meth:`read`,
    :meth:`BinlogPosition.from_row`, :meth:`EventPlace.from_row`), Spark columns and SQL
    (:mod:`cdclake.spark.positions`) and pyiceberg row filters (:mod:`cdclake.io.positions`).

    Attributes:
        field: the :class:`BinlogPosition` (or :class:`EventPlace`) attribute (also the field name
            of Spark's struct).
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
    and its table has no ``_cdc_snapshot``). Under ``ordering`` ``kafka`` no part reads a column:
    every row has the position ``0:0:0:1`` (a snapshot read does not rank below a change either:
    a later snapshot read replaces a change), and only :data:`KAFKA_PARTS` order events.

    Raises:
        ValueError: an ``ordering`` not in :data:`ORDERINGS`.
    """
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering {ordering!r} is not one of {ORDERINGS}")
    if ordering not in SOURCE_ORDERINGS:
        return (
            PositionPart("file_seq", None, 0, 64),
            PositionPart("pos", None, 0, 64),
            PositionPart("row", None, 0, 32),
            PositionPart("change_rank", None, CHANGE_RANK, 32),
        )
    return (
        PositionPart("file_seq", "_cdc_gtid_seq" if ordering == "gtid" else "_cdc_binlog_file_seq", NO_GTID, 64),
        PositionPart("pos", "_cdc_binlog_pos", -1, 64),
        PositionPart("row", "_cdc_binlog_row", -1, 32),
        PositionPart("change_rank", None if change else "_cdc_snapshot", CHANGE_RANK, 32, when_true=SNAPSHOT_RANK),
    )


KAFKA_PARTS = (
    PositionPart("partition", "_cdc_kafka_partition", -1, 32),
    PositionPart("offset", "_cdc_kafka_offset", -1, 64),
)
"""The Kafka partition and offset of the event that wrote a row (or a tombstone), after its
position in :class:`EventPlace`; NULL (a tombstone recorded before they were) reads -1."""


@dataclass(frozen=True, order=True)
class EventPlace:
    """Where an event stands: its position, then its Kafka partition and offset, which break ties
    at one position (module docstring). Field order is the order in which a batch sorts the events
    of one key (:func:`batch_pick`); whether an event replaces a stored row or tombstone is
    :func:`supersedes`, which orders equal positions of different partitions by no partition.

    Attributes:
        position: the event's position in the table's ordering.
        partition: its Kafka partition (-1: unknown).
        offset: its Kafka offset (-1: unknown).
    """

    position: BinlogPosition
    partition: int
    offset: int

    @classmethod
    def from_row(cls, row: Mapping[str, Any], ordering: str, *, change: bool = False) -> EventPlace:
        """The place of the event that wrote a lake row (or a tombstone, ``change=True``), read
        from its metadata columns (:func:`position_parts`, :data:`KAFKA_PARTS`).

        Raises:
            ValueError: an unknown ``ordering``.
        """
        return cls(BinlogPosition.from_row(row, ordering, change=change), *(p.read(row) for p in KAFKA_PARTS))


def unguarded_across_partitions(ordering: str) -> bool:
    """Whether an event replaces a stored row (or tombstone) of equal position that another Kafka
    partition wrote. Under :data:`SOURCE_ORDERINGS` no: equal positions in two partitions are
    copies of one event (re-emitted after the topic gained partitions) or have no order, and the
    row stays. Under ``kafka`` ordering, where every position is equal, yes: across partitions
    nothing is guarded, and the later run wins."""
    return ordering not in SOURCE_ORDERINGS


def supersedes(event: EventPlace, stored: EventPlace, ordering: str) -> bool:
    """Whether an event at ``event`` replaces (or deletes) a row, or passes a tombstone, that the
    event at ``stored`` wrote in an earlier run: a greater position; at an equal position, a
    greater offset in the same partition (:data:`KAFKA_PARTS`: Debezium's emission order; a
    re-emission of the same event at a later offset writes the same values again), or any offset
    in another partition when :func:`unguarded_across_partitions`."""
    if event.position != stored.position:
        return event.position > stored.position
    if event.partition == stored.partition:
        return event.offset > stored.offset
    return unguarded_across_partitions(ordering)


@dataclass(frozen=True)
class BatchPick:
    """Which of one key's events a batch applies (:func:`batch_pick`).

    Attributes:
        latest: index of the event applied.
        tied: another event at its position has other content (op or row image), so the Kafka
            offset chose between them.
        unordered: index of an event at its position, the last of another partition there, with
            other content: the two have no order (``None``: there is none).
    """

    latest: int
    tied: bool
    unordered: int | None


def batch_pick(events: Sequence[tuple[EventPlace, Hashable]]) -> BatchPick:
    """The event a batch applies of one key's events ``(place, content)``: the greatest place
    (position, then partition, then offset), and whether ties at its position were broken by
    offset or cannot be ordered (:class:`BatchPick`). Contents are compared for equality only.

    Raises:
        ValueError: no event.
    """
    if not events:
        raise ValueError("a key of a batch has at least one event")
    latest = max(range(len(events)), key=lambda i: events[i][0])
    place, content = events[latest]
    at_top = [i for i, (p, _) in enumerate(events) if p.position == place.position]
    last_of_partition: dict[int, int] = {}
    for i in at_top:
        p = events[i][0].partition
        if p not in last_of_partition or events[i][0].offset > events[last_of_partition[p]][0].offset:
            last_of_partition[p] = i
    unordered = [
        i
        for p, i in sorted(last_of_partition.items(), reverse=True)
        if p != place.partition and events[i][1] != content
    ]
    return BatchPick(
        latest,
        tied=any(events[i][1] != content for i in at_top),
        unordered=unordered[0] if unordered else None,
    )


def unordered_message(topic: str, ordering: str, events: Sequence[EventPlace]) -> str:
    """The error of a batch whose ``events`` of one key, at one position in different partitions,
    differ (:attr:`BatchPick.unordered`): names the topic, the partitions and offsets, what has no
    order and the remedy."""
    where = " and ".join(f"partition {e.partition} offset {e.offset}" for e in events)
    if ordering in SOURCE_ORDERINGS:
        why = (
            f"share the position {events[0].position.to_event_text()} and differ. Events at one position are "
            "ordered by Kafka offset within a partition only: MySQL's binlog_transaction_compression=ON "
            "gives every rows event of a compressed transaction the same position, and a key's events "
            "reach two partitions only when the topic gained partitions or the producer does not key "
            "records by primary key"
        )
        fix = "Set binlog_transaction_compression=OFF at the source, or keep each key in one partition"
    else:
        why = (
            "differ. Under ordering: kafka events are ordered by Kafka offset within a partition only, so a "
            "key's events must stay in one partition (they leave it when the topic gains partitions, or "
            "when the producer does not key records by primary key)"
        )
        fix = "Keep each key in one partition"
    return (
        f"topic {topic!r}: two events of one key, at {where}, {why}. Nothing was committed. {fix}; to go on, "
        "replay from after the record that must not win (replay_from_offsets), then re-snapshot the table."
    )
