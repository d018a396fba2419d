"""Convergence rules (pure): an authoritative full snapshot, and the source's identity.

**A complete full snapshot is authoritative** (``docs/architecture.md``, "The apply contract").
Debezium's initial and blocking snapshots emit every row of a table as an ``op: r`` event at the
snapshot's single binlog position P, framed by ``source.snapshot`` markers (Debezium MySQL/MariaDB
connector docs, "Snapshots" and "source metadata"; the values are those of Debezium's
``SnapshotRecord``)::

    first | first_in_data_collection   the table's first record (first: of the whole snapshot)
    true                               a record in between
    last_in_data_collection | last     the table's last record (last: of the whole snapshot)
    incremental                        an incremental-snapshot chunk: never authoritative

(A table of one row gets only the end marker; Debezium 1.x wrote ``true`` everywhere except
``last`` on the very last record of the whole snapshot.) Once every record of a table's snapshot
at P has been applied, however many runs it spans, a row or a delete tombstone below P that the
snapshot did not rewrite no longer existed at P: it is deleted, in the commit that completes the
snapshot, and every later event below P is discarded (P becomes the table's *snapshot floor*).

"Every record applied": the end-marker record is applied and, for each other partition of the
topic, the table has applied everything Debezium produced before it. Debezium's producer sends
records in emission order, each stamped (Kafka ``CreateTime``) when sent, so a partition is done
when the table applied a record of it stamped after the end record, or applied the whole
partition as it stood at least :data:`SNAPSHOT_SETTLE_MS` after the end record was stamped (time
for the producer's in-flight batches to land). Until then the snapshot is *in progress*: state
kept in the table's snapshot summary (:class:`SnapshotProgress`), so a crash or a stop mid-snapshot
deletes nothing, and a newer snapshot (a restarted one) replaces an unfinished one.

Whether a snapshot is complete depends only on its end record and on what the table has applied,
never on the order in which runs meet snapshots: the partitions of a topic are applied at different
paces, so records of a newer snapshot (one that may never end: a connector that died in it) can be
applied before the end record of an older, complete one. An older snapshot whose end record is
applied therefore stays a candidate (:attr:`SnapshotProgress.ended`) until it completes or a
complete newer snapshot passes it; otherwise the rows it proves gone would stay in the lake for good.

**Source identity.** Binlog positions compare only within one binlog history: the server id of
the change events, the binlog basename and the GTID source (MariaDB ``domain-server``, MySQL
server UUID) are kept with the table (:class:`SourceIdentity`), and events of another identity, or
a full snapshot below the table's highest applied position whose record was produced before the
snapshot (``RESET MASTER``: positions start over), stop the table (:class:`~cdclake.errors.PositionOrderError`).

One change of identity is not a new history: when Debezium reads a replica, ``source.server_id``
and the GTID are those of the server that *originated* the event (MySQL replicates them into the
replica's binlog with ``log_slave_updates``; MySQL docs, "Replication and binary logging
options"; MariaDB KB, "Global Transaction ID"), so a failover upstream of the replica changes them
while the replica's binlog, whose coordinates the positions are, goes on. :func:`continue_history`
tells the two apart: the same basename, and the new identity's events all above the table's
highest applied position and above every event of the identities before it, is one binlog
history; the table records the new identity and keeps the ones before it
(:attr:`SourceIdentity.earlier`) with the position where each ended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cdclake.model.offsets import Offsets
from cdclake.model.position import BinlogPosition

FULL_SNAPSHOT_MARKERS = ("first", "first_in_data_collection", "true", "last_in_data_collection", "last")
"""``source.snapshot`` values of an initial or blocking snapshot's records."""
START_MARKERS = ("first", "first_in_data_collection")
END_MARKERS = ("last_in_data_collection", "last")
INCREMENTAL_MARKER = "incremental"

SNAPSHOT_SETTLE_MS = 60_000
"""How long after the snapshot's end record was stamped a partition without later records counts
as complete when the table has applied all of it (ms). Kafka Connect's producer lands a batch in
milliseconds; a minute leaves room for its retries. A barrier schema change settles by the same
rule (:func:`unsettled_partitions`, :mod:`cdclake.pipeline.schema_sync`)."""


@dataclass(frozen=True)
class SnapshotEnd:
    """Where the table's end-marker record of a snapshot sits in Kafka."""

    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True)
class SnapshotProgress:
    """A full snapshot of the table that has not completed yet (kept in the snapshot summary).

    Attributes:
        position: the snapshot's binlog position P (every record of it carries P).
        records: its records applied so far (all runs).
        started: its start-marker record was applied (informational: a one-row table has none).
        end: its end-marker record, once applied.
        ended: older full snapshots (below ``position``, above the snapshot floor; oldest first)
            whose end record is applied but that were not found complete yet: each completes once
            its partitions are done (:func:`pending_partitions`), though no longer in progress. A
            newer snapshot started before they completed, or its records were applied before their
            end record (partitions applied at different paces). Their own ``ended`` is empty.
    """

    position: BinlogPosition
    records: int
    started: bool
    end: SnapshotEnd | None = None
    ended: tuple[SnapshotProgress, ...] = ()

    def _doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"position": self.position.to_text(), "records": self.records, "started": self.started}
        if self.end is not None:
            doc["end"] = {
                "partition": self.end.partition,
                "offset": self.end.offset,
                "timestamp": self.end.timestamp_ms,
            }
        if self.ended:
            doc["ended"] = [e._doc() for e in self.ended]
        return doc

    def to_json(self) -> str:
        return json.dumps(self._doc(), sort_keys=True)

    @classmethod
    def _from_doc(cls, doc: Mapping[str, Any]) -> SnapshotProgress:
        end = doc.get("end")
        return cls(
            BinlogPosition.from_text(doc["position"]),
            int(doc["records"]),
            bool(doc["started"]),
            SnapshotEnd(int(end["partition"]), int(end["offset"]), int(end["timestamp"])) if end else None,
            tuple(cls._from_doc(e) for e in doc.get("ended") or ()),
        )

    @classmethod
    def from_json(cls, text: str) -> SnapshotProgress:
        return cls._from_doc(json.loads(text))

    def describe(self) -> str:
        end = f", end record at partition {self.end.partition} offset {self.end.offset}" if self.end else ""
        return f"full snapshot at {self.position.to_event_text()} ({self.records} record(s) applied{end})"


@dataclass(frozen=True)
class BatchSnapshot:
    """The records of one full snapshot (one position) in a run's batch.

    Attributes:
        position: the snapshot's position P.
        records: how many.
        started: a start-marker record is among them.
        end: the end-marker record among them, if any.
        first_offsets: per partition, the lowest offset of these records.
        unseen: some of these records sit at offsets the table never committed before (not a
            re-read after a replay).
        first_timestamp_ms: the earliest Kafka timestamp of these records.
    """

    position: BinlogPosition
    records: int
    started: bool
    end: SnapshotEnd | None
    first_offsets: Mapping[int, int]
    unseen: bool = True
    first_timestamp_ms: int = 0


@dataclass(frozen=True)
class SnapshotStep:
    """What a batch does to the table's snapshot in progress (:func:`advance_snapshot`).

    Attributes:
        progress: the snapshot in progress after the batch (``None``: none).
        notes: what happened, for the run log (abandoned and ignored snapshots).
        ended: older snapshots whose end record is applied (in the batch or in an earlier run) but
            that are not the one in progress (oldest first; ``progress.ended``): complete if their
            partitions are (:func:`pending_partitions`), though no longer in progress.
    """

    progress: SnapshotProgress | None
    notes: tuple[str, ...]
    ended: tuple[SnapshotProgress, ...] = ()


def advance_snapshot(
    progress: SnapshotProgress | None, batch: Sequence[BatchSnapshot], floor: BinlogPosition | None
) -> SnapshotStep:
    """Fold a batch's full-snapshot records into the snapshot in progress.

    A snapshot at a greater position than the one in progress replaces it (the connector restarted
    its snapshot: an older one that never reaches its end deletes nothing). A replaced snapshot
    whose end record is applied stays a candidate (``ended``), and so does an older snapshot whose
    end record is applied after a newer one started (its partition was applied later): whether it
    is complete depends on its end record alone, not on the order in which runs meet the
    snapshots. Other records of older snapshots, and records at or below the snapshot floor (a
    completed snapshot read again by a replay), are applied as ordinary upserts and do not count.
    Candidates at or below ``floor`` are dropped.
    """
    notes: list[str] = []
    ended: dict[BinlogPosition, SnapshotProgress] = {}
    if progress is not None:
        ended = {e.position: e for e in progress.ended if floor is None or e.position > floor}
        progress = replace(progress, ended=())
    for b in sorted(batch, key=lambda b: b.position):
        if floor is not None and b.position <= floor:
            notes.append(
                f"{b.records} record(s) of the completed full snapshot at {b.position.to_event_text()}: upserts"
            )
            continue
        if progress is None or b.position > progress.position:
            if progress is not None and progress.end is not None:
                ended[progress.position] = progress
            elif progress is not None:
                notes.append(
                    f"{progress.describe()} was replaced by a newer snapshot at {b.position.to_event_text()} "
                    "before it ended: it deletes nothing"
                )
            progress = SnapshotProgress(b.position, b.records, b.started, b.end)
        elif b.position == progress.position:
            progress = _fold(progress, b)
        elif b.position in ended:
            ended[b.position] = _fold(ended[b.position], b)
        elif b.end is not None:
            ended[b.position] = SnapshotProgress(b.position, b.records, b.started, b.end)
            notes.append(
                f"the end record of an older full snapshot at {b.position.to_event_text()} is applied after "
                f"records of the snapshot at {progress.position.to_event_text()}: it completes once its "
                "partitions are done"
            )
        else:
            notes.append(
                f"{b.records} record(s) of an older full snapshot at {b.position.to_event_text()} "
                f"(in progress: {progress.position.to_event_text()}): upserts"
            )
    older = tuple(ended[p] for p in sorted(ended))
    if progress is not None:
        progress = replace(progress, ended=older)
    return SnapshotStep(progress, tuple(notes), older)


def _fold(progress: SnapshotProgress, b: BatchSnapshot) -> SnapshotProgress:
    """``progress`` with the batch's records of the same snapshot added (the first end record applied wins)."""
    return replace(
        progress,
        records=progress.records + b.records,
        started=progress.started or b.started,
        end=progress.end or b.end,
    )


def progress_after_completion(progress: SnapshotProgress | None, completed: BinlogPosition) -> SnapshotProgress | None:
    """The snapshot progress to record in the commit that completes the snapshot at ``completed``:
    none when that is the snapshot in progress, else the one in progress without the ended
    snapshots at or below ``completed`` (they can delete nothing any more)."""
    if progress is None or progress.position <= completed:
        return None
    return replace(progress, ended=tuple(e for e in progress.ended if e.position > completed))


def still_in_progress(progress: SnapshotProgress, high_position: BinlogPosition | None) -> bool:
    """Whether the full snapshot of ``progress`` is still in progress, given the greatest position
    the table has applied: yes while its end record is applied (it completes once its partitions
    are done) or no event above its position is applied yet.

    Debezium emits every record of an initial or blocking snapshot at its position P before it
    streams a binlog event from P on (Debezium MySQL connector docs, "Snapshots": streaming
    resumes from the snapshot's position once the snapshot completed), and every binlog event from
    P on ranks above P (:mod:`cdclake.model.position`: at equal positions a change ranks above a
    snapshot read). So an applied event above P proves that the snapshot's reads ended; if its end
    record was never applied (a connector that died mid-snapshot, a capture cut short), it is not
    in progress: it deletes nothing until that end record is applied, and it is still kept with
    the table in case it is (a partition applied later).
    """
    return progress.end is not None or high_position is None or not high_position > progress.position


def pending_partitions(
    end: SnapshotEnd,
    applied_end: Offsets,
    after_end: Mapping[int, int | None],
    high: Offsets,
    now_ms: int,
    settle_ms: int = SNAPSHOT_SETTLE_MS,
) -> list[int]:
    """The partitions that may still hold unapplied records of a snapshot whose end record the
    table has applied (see the module docstring); empty when the snapshot is complete.

    Args:
        end: the end-marker record.
        applied_end: per partition, the table's next offset to apply once this run commits.
        after_end: per partition, the first offset of a record stamped after ``end`` (``None``:
            no such record yet).
        high: per partition, the high watermark read at ``now_ms``.
        now_ms: when ``high`` was read (epoch ms).
        settle_ms: :data:`SNAPSHOT_SETTLE_MS`.
    """
    return [
        p
        for p in unsettled_partitions(end.timestamp_ms, applied_end, after_end, high, now_ms, settle_ms)
        if not (p == end.partition and applied_end[p] > end.offset)
    ]


def unsettled_partitions(
    timestamp_ms: int,
    reach: Offsets,
    after: Mapping[int, int | None],
    high: Offsets,
    now_ms: int,
    settle_ms: int = SNAPSHOT_SETTLE_MS,
) -> list[int]:
    """The partitions of a topic that may still hold, beyond ``reach``, a record Debezium sent at or
    before ``timestamp_ms`` (the settle rule of the module docstring, for a snapshot's end record
    or a schema change's record): a partition has settled once ``reach`` passed a record stamped
    after that time (Kafka ``CreateTime``: records land in a partition in the order they were
    sent), or, with no such record yet, once it is read to its high watermark at least
    ``settle_ms`` after that time.

    Args:
        timestamp_ms: when the record was stamped (epoch ms).
        reach: per partition, the next offset the table applies once this run commits.
        after: per partition, the first offset of a record stamped after ``timestamp_ms``
            (``None``: no such record yet).
        high: per partition, the high watermark read at ``now_ms``.
        now_ms: when ``high`` was read (epoch ms).
        settle_ms: :data:`SNAPSHOT_SETTLE_MS`.
    """
    unsettled = []
    for p, applied in sorted(reach.items()):
        first_after = after.get(p)
        if first_after is not None and applied > first_after:
            continue
        if first_after is None and applied >= high.get(p, 0) and now_ms - timestamp_ms >= settle_ms:
            continue
        unsettled.append(p)
    return unsettled


@dataclass(frozen=True)
class SourceIdentity:
    """The binlog history the table's positions belong to.

    Attributes:
        server_id: ``source.server_id`` of the change events (snapshot reads carry 0).
        basename: the binlog file basename (``mysql-bin``).
        gtid_source: the GTID's source: MariaDB ``<domain>-<server>``, MySQL the server UUID
            (:func:`cdclake.model.position.gtid_source`).
        gtid_domain: under GTID ordering, the MariaDB GTID domain; then the other fields are not
            kept (a failover changes them, and the GTID sequence orders across it).
        earlier: the identities the same binlog carried before this one (an upstream failover of
            the replica Debezium reads, :func:`continue_history`), oldest first.
    """

    server_id: int | None = None
    basename: str | None = None
    gtid_source: str | None = None
    gtid_domain: int | None = None
    earlier: tuple[EarlierIdentity, ...] = ()

    def _doc(self) -> dict[str, object]:
        doc: dict[str, object] = {
            "server_id": self.server_id,
            "basename": self.basename,
            "gtid_source": self.gtid_source,
        }
        if self.gtid_domain is not None:
            doc["gtid_domain"] = self.gtid_domain
        if self.earlier:
            doc["earlier"] = [{**e.identity._doc(), "until": e.until.to_text()} for e in self.earlier]
        return doc

    def to_json(self) -> str:
        return json.dumps(self._doc(), sort_keys=True)

    @classmethod
    def _from_doc(cls, doc: Mapping[str, Any]) -> SourceIdentity:
        return cls(
            doc.get("server_id"),
            doc.get("basename"),
            doc.get("gtid_source"),
            doc.get("gtid_domain"),
            tuple(
                EarlierIdentity(cls._from_doc(e), BinlogPosition.from_text(e["until"])) for e in doc.get("earlier", ())
            ),
        )

    @classmethod
    def from_json(cls, text: str) -> SourceIdentity:
        return cls._from_doc(json.loads(text))

    def merged(self, other: SourceIdentity) -> SourceIdentity:
        """This identity with the fields ``other`` knows and this one does not."""
        return replace(
            self,
            server_id=self.server_id if self.server_id is not None else other.server_id,
            basename=self.basename if self.basename is not None else other.basename,
            gtid_source=self.gtid_source if self.gtid_source is not None else other.gtid_source,
            gtid_domain=self.gtid_domain if self.gtid_domain is not None else other.gtid_domain,
        )

    def agrees_with(self, other: SourceIdentity) -> bool:
        """Whether every field both identities know is equal (``earlier`` aside)."""
        return all(
            a is None or b is None or a == b
            for a, b in (
                (self.server_id, other.server_id),
                (self.basename, other.basename),
                (self.gtid_source, other.gtid_source),
                (self.gtid_domain, other.gtid_domain),
            )
        )

    def describe(self) -> str:
        return f"server id {self.server_id}, GTID source {self.gtid_source}"


@dataclass(frozen=True)
class EarlierIdentity:
    """An identity a table's binlog carried before a later one (:attr:`SourceIdentity.earlier`).

    Attributes:
        identity: the identity (its own ``earlier`` is empty).
        until: the lowest position of the identity that followed it: its events are below.
    """

    identity: SourceIdentity
    until: BinlogPosition


@dataclass(frozen=True)
class IdentitySpan:
    """The applied events of one source identity in a batch: the lowest and greatest position."""

    identity: SourceIdentity
    first: BinlogPosition
    last: BinlogPosition


@dataclass(frozen=True)
class Continuation:
    """What :func:`continue_history` found.

    Attributes:
        identity: the table's identity after the batch; ``None``: the batch's positions are not
            comparable with the table's (``note`` says why).
        note: how the identity changed (``None``: it did not), or why the positions are not comparable.
        since: the lowest position of the first new identity, when the identity changed.
    """

    identity: SourceIdentity | None
    note: str | None = None
    since: BinlogPosition | None = None


def identity_changes(known: SourceIdentity | None, seen: Iterable[SourceIdentity]) -> list[str]:
    """What differs between the table's identity and the identities of a batch's events.

    Returns human-readable differences (empty: one identity throughout). Fields a side does not
    know (``None``) are not compared.
    """
    idents = list(seen) + ([known] if known is not None else [])
    changes = []
    labels = (
        ("server_id", "server id"),
        ("basename", "binlog basename"),
        ("gtid_source", "GTID source"),
        ("gtid_domain", "GTID domain"),
    )
    for field, label in labels:
        values = sorted({str(getattr(i, field)) for i in idents if getattr(i, field) is not None})
        if len(values) > 1:
            was = getattr(known, field) if known is not None else None
            changes.append(f"{label}: {values}" + (f" (the table's: {was})" if was is not None else ""))
    return changes


def merge_identities(known: SourceIdentity | None, seen: Iterable[SourceIdentity]) -> SourceIdentity | None:
    """The table's identity after a batch whose identities agree with it."""
    out = known
    for i in seen:
        out = i if out is None else out.merged(i)
    return out


def continue_history(
    known: SourceIdentity | None, high: BinlogPosition | None, spans: Sequence[IdentitySpan]
) -> Continuation:
    """Whether a batch whose events carry other identities than the table's goes on in the same
    binlog (module docstring, "Source identity"): a change of server id or GTID source upstream of
    the replica Debezium reads.

    The positions stay comparable when the binlog basename is one and the identities the table did
    not know follow each other in the binlog: each one's events lie above the table's highest
    applied position ``high``, above every event of the table's identity, and above every event of
    the new identity before it. Events of an identity the table moved past
    (:attr:`SourceIdentity.earlier`) below the position where it ended are events of that history
    arriving late through another partition. Spans of snapshot reads (no server id, no GTID) agree
    with any identity. GTID domains are never compared this way: their sequences do not order
    across domains.

    Args:
        known: the table's identity (``None``: the table has applied no event yet).
        high: the table's highest applied position.
        spans: the batch's applied events per identity (binlog ordering).

    Returns:
        The identity after the batch (with the identities it followed in ``earlier``), or
        ``identity=None`` and the reason the positions are not comparable.
    """
    idents = [s.identity for s in spans] + ([known] if known is not None else [])
    basenames = sorted({i.basename for i in idents if i.basename is not None})
    if len(basenames) > 1:
        return Continuation(None, f"the binlog basename changed ({basenames}): another server's binlog")
    if any(i.gtid_domain is not None for i in idents):
        return Continuation(None, "GTID sequences of different domains have no order")
    new: list[IdentitySpan] = []
    current: list[IdentitySpan] = []
    for span in spans:
        i = span.identity
        if i.server_id is None and i.gtid_source is None:
            continue  # snapshot reads: they name no server
        if known is not None and i.agrees_with(known):
            current.append(span)
        elif not any(i.agrees_with(e.identity) and span.last < e.until for e in (known.earlier if known else ())):
            new.append(span)
    kept = merge_identities(known, [s.identity for s in current])
    if not new:
        return Continuation(kept)
    new.sort(key=lambda s: s.first)
    floor = max([s.last for s in current] + ([high] if high is not None else []), default=None)
    if floor is not None and new[0].first <= floor:
        return Continuation(
            None,
            f"the events of {new[0].identity.describe()} start at {new[0].first.to_event_text()}, not above "
            f"{floor.to_event_text()} (the table's highest position, or its identity's events): the positions "
            "went backwards",
        )
    for a, b in zip(new, new[1:], strict=False):
        if b.first <= a.last:
            return Continuation(
                None,
                f"the events of {a.identity.describe()} ({a.first.to_event_text()} to {a.last.to_event_text()}) and "
                f"{b.identity.describe()} ({b.first.to_event_text()} to {b.last.to_event_text()}) interleave",
            )
    basename = basenames[0] if basenames else None
    chain = [] if kept is None else [replace(kept, basename=kept.basename or basename, earlier=())]
    chain += [replace(s.identity, basename=s.identity.basename or basename) for s in new]
    ends = [s.first for s in (new if kept is not None else new[1:])]
    earlier = (*(kept.earlier if kept is not None else ()), *map(EarlierIdentity, chain, ends))
    after = replace(chain[-1], earlier=earlier)
    if len(chain) == 1:
        return Continuation(after)
    return Continuation(
        after,
        f"the events' source changed from {chain[0].describe()} to {after.describe()} at "
        f"{new[0].first.to_event_text()} in the same binlog ({basename}, positions forward)",
        new[0].first,
    )
