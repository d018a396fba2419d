"""The state a CDC table carries from run to run, and the statistics of one batch (pure: no Spark,
no Kafka, no catalog).

:class:`CommittedState` is what the snapshot summary of a table's newest CDC commit records:
:meth:`CommittedState.from_summary` decodes it and :meth:`CommittedState.to_summary` encodes it, so
its carry-forward rules live here and nowhere else (keys: :class:`~cdclake.model.layout.SummaryKeys`).
:class:`BatchStats` is what one statistics pass over a batch found
(:func:`cdclake.spark.stats.batch_stats`). :mod:`cdclake.model.decision` decides a run from both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from cdclake.model.convergence import (
    SnapshotProgress,
    SourceIdentity,
)
from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import Offsets, decode_offsets, encode_offsets
from cdclake.model.position import BinlogPosition

APPLIED_OPS = ("c", "u", "d", "r", "t")
"""The Debezium ops an apply counts one by one (create, update, delete, read, truncate)."""


@dataclass(frozen=True)
class CommittedState:
    """What the newest CDC commit of a table recorded (see :class:`~cdclake.model.layout.SummaryKeys`).

    Attributes:
        snapshot_id: the table's current snapshot (the base a new run must commit on top of),
            ``None`` for a table without snapshots.
        offsets: the end offsets of the newest CDC commit, ``None`` when it never committed.
        truncate_floor: the newest truncate applied; events at or below it are discarded.
        snapshot_floor: the newest complete full snapshot; events below it are discarded.
        snapshot: the full snapshot in progress, if any.
        identity: the source identity of the events applied so far.
        high_position: the greatest position applied so far.
        defaults_position: the newest ADD COLUMN whose default was filled in.
        max_offsets: the greatest end offsets ever committed, per partition.
        high_position_ts: the Kafka timestamp (epoch ms) of the record that carried ``high_position``.
    """

    snapshot_id: int | None
    offsets: Offsets | None = None
    truncate_floor: BinlogPosition | None = None
    snapshot_floor: BinlogPosition | None = None
    snapshot: SnapshotProgress | None = None
    identity: SourceIdentity | None = None
    high_position: BinlogPosition | None = None
    defaults_position: BinlogPosition | None = None
    max_offsets: Offsets | None = None
    high_position_ts: int | None = None

    @classmethod
    def from_summary(cls, snapshot_id: int | None, summary: Mapping[str, str]) -> CommittedState:
        """Decode the state a CDC commit's snapshot summary carries (inverse of :meth:`to_summary`).

        Raises:
            ValueError: a position, offsets or JSON value that does not parse.
        """
        identity = summary.get(SummaryKeys.SOURCE_IDENTITY)
        snapshot = summary.get(SummaryKeys.SNAPSHOT_IN_PROGRESS)
        end = summary.get(SummaryKeys.END_OFFSETS)
        high_ts = summary.get(SummaryKeys.HIGH_POSITION_TIMESTAMP)
        most = summary.get(SummaryKeys.MAX_OFFSETS)
        return cls(
            snapshot_id,
            decode_offsets(end) if end is not None else None,
            _position(summary, SummaryKeys.TRUNCATE_FLOOR),
            _position(summary, SummaryKeys.SNAPSHOT_FLOOR),
            SnapshotProgress.from_json(snapshot) if snapshot else None,
            SourceIdentity.from_json(identity) if identity else None,
            _position(summary, SummaryKeys.HIGH_POSITION),
            _position(summary, SummaryKeys.DEFAULTS_POSITION),
            decode_offsets(most) if most is not None else None,
            int(high_ts) if high_ts is not None else None,
        )

    def to_summary(self) -> dict[str, str]:
        """The snapshot-summary properties that carry this state forward (``snapshot_id`` is the
        commit's own, not a property). Absent facts are left out."""
        out: dict[str, str] = {}
        if self.offsets is not None:
            out[SummaryKeys.END_OFFSETS] = encode_offsets(self.offsets)
        if self.truncate_floor is not None:
            out[SummaryKeys.TRUNCATE_FLOOR] = self.truncate_floor.to_text()
        if self.identity is not None:
            out[SummaryKeys.SOURCE_IDENTITY] = self.identity.to_json()
            if self.identity.basename is not None:  # the basename alone (docs/architecture.md)
                out[SummaryKeys.BINLOG_BASENAME] = self.identity.basename
        if self.high_position is not None:
            out[SummaryKeys.HIGH_POSITION] = self.high_position.to_text()
        if self.high_position_ts is not None:
            out[SummaryKeys.HIGH_POSITION_TIMESTAMP] = str(self.high_position_ts)
        if self.snapshot_floor is not None:
            out[SummaryKeys.SNAPSHOT_FLOOR] = self.snapshot_floor.to_text()
        if self.snapshot is not None:
            out[SummaryKeys.SNAPSHOT_IN_PROGRESS] = self.snapshot.to_json()
        if self.max_offsets is not None:
            out[SummaryKeys.MAX_OFFSETS] = encode_offsets(self.max_offsets)
        if self.defaults_position is not None:
            out[SummaryKeys.DEFAULTS_POSITION] = self.defaults_position.to_text()
        return out

    def accepting_new_history(self) -> CommittedState:
        """The state a run that accepts a new binlog history starts from (``accept_source_change``):
        the offsets and base snapshot, and nothing of the old history (identity, positions, floors)."""
        return CommittedState(self.snapshot_id, self.offsets)


def committed_state_of(
    current_snapshot_id: int | None, ancestry: Iterable[Mapping[str, str] | None], topic: str
) -> CommittedState:
    """The state recorded by the newest CDC commit of ``topic``.

    Args:
        current_snapshot_id: the table's current snapshot.
        ancestry: the snapshot summaries (``None`` for a snapshot without one) from the current
            snapshot back through its ancestors, newest first (maintenance snapshots carry none).
        topic: the table's Kafka topic; commits of another topic are walked past.
    """
    if current_snapshot_id is None:
        return CommittedState(None)
    for summary in ancestry:
        if summary is None:
            continue
        if SummaryKeys.END_OFFSETS in summary and summary.get(SummaryKeys.TOPIC) == topic:
            return CommittedState.from_summary(current_snapshot_id, summary)
    return CommittedState(current_snapshot_id)


def run_commit_of(
    history: Iterable[tuple[int, int, Mapping[str, str] | None]], topic: str, run_id: str
) -> tuple[int, Mapping[str, str]] | None:
    """``(snapshot id, summary properties)`` of the newest CDC commit of ``topic`` by run ``run_id``
    (:attr:`~cdclake.model.layout.SummaryKeys.RUN_ID`, the Airflow run id) in ``history``, or ``None``.

    Args:
        history: ``(snapshot id, timestamp ms, summary or None)`` from the head of the table's write
            ref back through its ancestors, newest first (:func:`cdclake.io.refs.ancestry`).
    """
    for snapshot_id, _, summary in history:
        if (
            summary is not None
            and summary.get(SummaryKeys.RUN_ID) == run_id
            and summary.get(SummaryKeys.TOPIC) == topic
            and SummaryKeys.END_OFFSETS in summary
        ):
            return snapshot_id, summary
    return None


def lost_commits(ancestry: Iterable[Mapping[str, str] | None]) -> bool:
    """Whether a table's ``ancestry`` (summaries, newest first, as :func:`committed_state_of`)
    shows rows but no CDC commit of any topic: its current snapshot holds records
    (``total-records`` above 0, Iceberg's snapshot summary) and not one snapshot records
    committed offsets. Every CDC commit records them, and cdclake's expiry keeps the newest
    (:mod:`cdclake.model.maintenance`): such a table lost its commits (snapshots expired by
    another engine or a managed catalog, ``CREATE OR REPLACE TABLE``), or was loaded outside
    cdclake (the planner tells them apart by :data:`~cdclake.model.layout.COMMITTED_PROPERTY`)."""
    first = True
    holds_rows = False
    for summary in ancestry:
        if first:
            holds_rows = summary is not None and summary.get("total-records", "0") not in ("0", "")
            first = False
        if summary is not None and SummaryKeys.END_OFFSETS in summary:
            return False
    return holds_rows


def _position(summary: Mapping[str, str], key: str) -> BinlogPosition | None:
    text = summary.get(key)
    return BinlogPosition.from_text(text) if text else None


@dataclass(frozen=True)
class UnknownColumn:
    """The first event of a batch whose row image has a column the table lacks."""

    partition: int
    offset: int
    column: str


@dataclass(frozen=True)
class GtidMissing:
    """Under GTID ordering, the first change event of a batch without a MariaDB GTID."""

    partition: int
    offset: int
    op: str | None
    gtid: str | None


@dataclass(frozen=True)
class QuarantinedRecord:
    """A record a run quarantined, with the reason written to the quarantine table (its error, or
    ``held back behind the quarantined record at offset N of the same key``)."""

    partition: int
    offset: int
    reason: str


@dataclass(frozen=True)
class BatchStats:
    """What one statistics pass over a parsed batch found (:func:`cdclake.spark.stats.batch_stats`).

    Positions are those of the records the run applies (not Kafka tombstones, not bad, not held back).

    Attributes:
        events: Kafka records in the range, tombstones included.
        tombstones: Kafka tombstones (null values).
        bad: records that cannot be applied.
        held: records held back behind a bad record of their key.
        ops: applicable events per Debezium op, zero counts left out.
        first: the lowest position.
        last: the greatest position.
        high: the greatest position, and ``high_timestamp_ms``, the earliest Kafka timestamp
            (epoch ms) of a record that carried it (under ``ordering: kafka``, where every position is
            equal, the latest record's).
        truncate: the greatest truncate (``op: t``) position.
        last_source_ts_ms: the greatest ``source.ts_ms`` (epoch ms).
        identities: the source identities the events carry (server id, basename, GTID source; under
            GTID ordering the GTID domains).
        full_snapshot_reads: ``r`` events of initial or blocking snapshots.
        unknown_column: the first event with a column the table lacks, at or above the last
            applied schema change.
        gtid_missing: under GTID ordering, the first change event without a MariaDB GTID.
        schema_samples: ``(partition, offset)`` of the batch's first and last record with a value
            (lowest and highest partition, then offset), whose Connect schemas the apply checks
            against the table (:mod:`cdclake.model.connector_check`).
        connector_contradictions: what that check found, one line per column (set by the apply).
    """

    events: int
    tombstones: int = 0
    bad: int = 0
    held: int = 0
    ops: Mapping[str, int] = field(default_factory=dict)
    first: BinlogPosition | None = None
    last: BinlogPosition | None = None
    high: BinlogPosition | None = None
    high_timestamp_ms: int | None = None
    truncate: BinlogPosition | None = None
    last_source_ts_ms: int | None = None
    identities: tuple[SourceIdentity, ...] = ()
    full_snapshot_reads: int = 0
    unknown_column: UnknownColumn | None = None
    gtid_missing: GtidMissing | None = None
    schema_samples: tuple[tuple[int, int], ...] = ()
    connector_contradictions: tuple[str, ...] = ()

    @property
    def quarantined(self) -> int:
        """Records the run writes to the quarantine table (bad and held back)."""
        return self.bad + self.held

    @property
    def nothing_applied(self) -> bool:
        """Every record of the batch that is not a Kafka tombstone was quarantined: the run
        applies nothing, so it fails (:class:`~cdclake.errors.QuarantinedBatchError`) after
        writing the quarantine and committing the offsets. A batch with some records applied
        succeeds and counts the quarantined ones (docs/operations.md, "A run that applies
        nothing")."""
        return applies_nothing(self.quarantined, self.ops)


def applies_nothing(quarantined: int, ops: Mapping[str, int]) -> bool:
    """Whether a batch (or the commit that recorded it: ``cdc.records-quarantined``, ``cdc.ops``)
    quarantined records and applied none: :attr:`BatchStats.nothing_applied`."""
    return quarantined > 0 and not any(ops.values())


class ColumnDefault(NamedTuple):
    """A column added with a default the lake knows exactly (``cdc.column-defaults``)."""

    position: BinlogPosition
    """Position of the ``ALTER TABLE ... ADD COLUMN``."""
    sql: str
    """Spark SQL of the default value."""
