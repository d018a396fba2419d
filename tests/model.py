"""A pure-Python reference model of the apply contract (``docs/architecture.md``, "The apply contract").

It is written from the contract, not from the Spark job, and shares no code with it (it does not
import ``cdclake``): a property test runs the same Kafka records through both and compares.

Input: Kafka records ``(partition, offset, key, envelope)`` where ``envelope`` is the parsed
Debezium envelope (payload only) or ``None`` for a Kafka tombstone, delivered in *runs*. A run is,
for each partition, a contiguous offset range; runs cover the log in order (a manual replay may
deliver records again).

State after each run:

* ``rows``: ``{id: (v, position)}``, the table and the position of the event that wrote each row;
* ``tombstones``: ``{id: position}``, the newest applied delete of each key;
* ``floor``: the newest truncate position, or ``None``;
* ``snapshot_floor``: the position of the newest complete full snapshot, or ``None``.

A position is ``(binlog file sequence number as an int, pos, row, rank)``, rank 0 for a snapshot
read (``op`` ``r``) and 1 for a change (``c``/``u``/``d``/``t``).

Rules of one run:

1. Kafka tombstones are skipped.
2. Truncates (``op`` ``t``) at T: the floor becomes ``max(floor, T)``; every row below the floor is
   removed; every event of the run below the floor is discarded (events above it still apply),
   and so is every event below it in later runs.
3. Reduce: per key, only the event at the greatest position counts; among events at one position
   (MySQL's ``binlog_transaction_compression=ON`` gives every rows event of a compressed
   transaction one position), the one at the greatest Kafka offset of its partition.
4. An event is *newer* than a row or tombstone when its position is strictly greater, or equal with
   the same Kafka partition and a greater offset than the event that wrote the row or tombstone.
   An upsert (``c``/``u``/``r``) writes the row if it is newer than the row and newer than the
   key's tombstone. A delete removes the row if it is newer than the row, and replaces the
   tombstone if it is newer than it.
5. A full snapshot (``r`` events marked ``first``/``first_in_data_collection``/``true``/
   ``last_in_data_collection``/``last``, all at one position P) is in progress from its first
   applied record; a newer P replaces an unfinished one. It is complete in the run after which its
   end-marker record is applied and, in every other partition, a record produced after it (a
   greater Kafka timestamp) is applied, or the partition has no such record and is applied to its
   end. Completeness depends on the end record alone: a snapshot whose end-marker record is
   applied stays a candidate when a newer snapshot starts, also when the newer one's records are
   applied first (its partition ran ahead). When several are complete, the greatest P counts.
   From that run on, every event below P is discarded; in that run every row and tombstone
   below P is removed (after the run's own events below P are discarded).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Position = tuple[int, int, int, int]
"""``(file sequence number, pos, row, rank)``; tuple comparison is the event order."""

Place = tuple[int, int]
"""``(Kafka partition, offset)`` of an event: the order among events at one position (rule 4)."""


def newer(position: Position, place: Place, than: Position, than_place: Place) -> bool:
    """Rule 4: an event at ``position``/``place`` is newer than the one at ``than``/``than_place``."""
    if position != than:
        return position > than
    return place[0] == than_place[0] and place[1] > than_place[1]


_FILE_SEQ = re.compile(r"^.+\.([0-9]+)$")
_SNAPSHOT_MARKERS = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental"}
)
UPSERT_OPS = frozenset({"c", "u", "r"})
_FULL_MARKERS = frozenset({"first", "first_in_data_collection", "true", "last_in_data_collection", "last"})
_END_MARKERS = frozenset({"last_in_data_collection", "last"})


@dataclass(frozen=True)
class Record:
    """One Kafka record as the model sees it."""

    partition: int
    offset: int
    key: bytes | None
    envelope: dict[str, Any] | None
    """The parsed Debezium envelope (payload only); ``None`` for a Kafka tombstone."""
    timestamp: int = 0
    """Kafka timestamp (production order)."""


def position_of(envelope: dict[str, Any]) -> Position:
    """The contract's position of an envelope: ``(file seq, pos, row, rank)``."""
    source = envelope["source"]
    m = _FILE_SEQ.match(source["file"])
    if m is None:
        raise ValueError(f"binlog file {source['file']!r} has no numeric suffix")
    snapshot = source.get("snapshot")
    is_read = envelope["op"] == "r" or snapshot is True or snapshot in _SNAPSHOT_MARKERS
    return (int(m.group(1)), int(source["pos"]), int(source.get("row") or 0), 0 if is_read else 1)


def key_of(envelope: dict[str, Any], primary_key: str = "id") -> Any:
    """The primary-key value of a row event: from ``before`` for a delete, else ``after``."""
    image = envelope["before"] if envelope["op"] == "d" else envelope["after"]
    return image[primary_key]


@dataclass
class ContractModel:
    """The table state the contract prescribes, run after run."""

    primary_key: str = "id"
    value_column: str = "v"
    rows: dict[Any, tuple[Any, Position]] = field(default_factory=dict)
    tombstones: dict[Any, Position] = field(default_factory=dict)
    places: dict[tuple[str, Any], Place] = field(default_factory=dict)
    """``("row" | "tombstone", key)`` -> the place of the event that wrote it."""
    floor: Position | None = None
    snapshot_floor: Position | None = None
    snapshot: Position | None = None
    snapshot_end: Record | None = None
    snapshot_ended: dict[Position, Record] = field(default_factory=dict)
    """Snapshots below ``snapshot`` whose end-marker record is applied, not complete yet."""

    def _full_snapshot_records(self, records: Iterable[Record]) -> list[tuple[Position, Record]]:
        out = []
        for r in records:
            e = r.envelope
            if e is not None and e["op"] == "r" and e["source"].get("snapshot") in _FULL_MARKERS:
                out.append((position_of(e), r))
        return out

    def _track_snapshot(
        self, records: list[Record], applied_end: dict[int, int], log: dict[int, Sequence[Record]]
    ) -> Position | None:
        """Rule 5: the snapshot completed by this run, if any (the newest complete one, whichever
        snapshot is in progress)."""
        floor = self.snapshot_floor
        ended = {p: end for p, end in self.snapshot_ended.items() if floor is None or p > floor}
        for pos, rec in sorted(self._full_snapshot_records(records), key=lambda x: x[0]):
            if floor is not None and pos <= floor:
                continue
            if self.snapshot is None or pos > self.snapshot:
                if self.snapshot is not None and self.snapshot_end is not None:
                    ended[self.snapshot] = self.snapshot_end
                self.snapshot, self.snapshot_end = pos, None
            if rec.envelope is None or rec.envelope["source"]["snapshot"] not in _END_MARKERS:
                continue
            if pos == self.snapshot:
                self.snapshot_end = rec
            else:  # an older snapshot's end, applied after records of a newer one
                ended[pos] = rec
        self.snapshot_ended = ended
        candidates = sorted(ended.items()) + (
            [(self.snapshot, self.snapshot_end)] if self.snapshot is not None and self.snapshot_end is not None else []
        )
        for position, end in reversed(candidates):
            if self._complete(end, applied_end, log):
                if position == self.snapshot:
                    self.snapshot, self.snapshot_end = None, None
                self.snapshot_ended = {p: e for p, e in ended.items() if p > position}
                return position
        return None

    @staticmethod
    def _complete(end: Record, applied_end: dict[int, int], log: dict[int, Sequence[Record]]) -> bool:
        for p, applied in applied_end.items():
            if p == end.partition and applied > end.offset:
                continue
            later = [r.offset for r in log[p] if r.timestamp > end.timestamp]
            if later and applied > later[0]:
                continue
            if not later and applied >= len(log[p]):
                continue
            return False
        return True

    def apply_run(
        self,
        records: Iterable[Record],
        applied_end: dict[int, int] | None = None,
        log: dict[int, Sequence[Record]] | None = None,
    ) -> None:
        """Apply one run (its records in any order: the order is the positions'). ``applied_end``
        (the run's end offsets) and ``log`` (the whole topic) are needed for rule 5."""
        records = list(records)
        completed = (
            self._track_snapshot(records, applied_end, log) if log is not None and applied_end is not None else None
        )
        if completed is not None:
            self.snapshot_floor = completed
        events = [(r.envelope, (r.partition, r.offset)) for r in records if r.envelope is not None]
        if self.snapshot_floor is not None:
            events = [(e, at) for e, at in events if e["op"] == "t" or position_of(e) >= self.snapshot_floor]
        truncates = [position_of(e) for e, _ in events if e["op"] == "t"]
        if truncates and (self.floor is None or max(truncates) > self.floor):
            self.floor = max(truncates)
        if self.floor is not None:
            self.rows = {k: row for k, row in self.rows.items() if row[1] >= self.floor}

        latest: dict[Any, tuple[Position, Place, dict[str, Any]]] = {}
        for e, at in events:
            if e["op"] == "t":
                continue
            pos = position_of(e)
            if self.floor is not None and pos < self.floor:
                continue
            k = key_of(e, self.primary_key)
            if k not in latest or (pos, at) > latest[k][:2]:
                latest[k] = (pos, at, e)

        for k, (pos, at, e) in latest.items():
            row = self.rows.get(k)
            newer_than_row = row is None or newer(pos, at, row[1], self.places[("row", k)])
            newer_than_tombstone = k not in self.tombstones or newer(
                pos, at, self.tombstones[k], self.places[("tombstone", k)]
            )
            if e["op"] == "d":
                if row is not None and newer_than_row:
                    del self.rows[k]
                if newer_than_tombstone:
                    self.tombstones[k] = pos
                    self.places[("tombstone", k)] = at
            elif e["op"] in UPSERT_OPS:
                if newer_than_row and newer_than_tombstone:
                    self.rows[k] = (e["after"][self.value_column], pos)
                    self.places[("row", k)] = at
            else:
                raise ValueError(f"unknown op {e['op']!r}")
        if completed is not None:
            self.rows = {k: row for k, row in self.rows.items() if row[1] >= completed}
            self.tombstones = {k: t for k, t in self.tombstones.items() if t >= completed}

    def table(self) -> dict[Any, Any]:
        """``{id: v}``."""
        return {k: v for k, (v, _) in self.rows.items()}

    def state(self) -> tuple[dict[Any, tuple[Any, Position]], dict[Any, Position], Position | None]:
        """A copy of ``(rows, tombstones, floor)``."""
        return dict(self.rows), dict(self.tombstones), self.floor


Bounds = dict[int, int]
"""Partition -> offset."""


def run_records(log: dict[int, Sequence[Record]], start: Bounds, end: Bounds) -> list[Record]:
    """The records ``[start[p], end[p])`` of each partition of ``log`` (``log[p][i].offset == i``)."""
    out: list[Record] = []
    for p in sorted(log):
        out.extend(log[p][start.get(p, 0) : end.get(p, 0)])
    return out


def apply_runs(
    log: dict[int, Sequence[Record]], runs: Sequence[tuple[Bounds, Bounds]], model: ContractModel | None = None
) -> list[tuple[dict, dict, Position | None]]:
    """Apply each ``(start, end)`` run of ``log`` in turn; returns the model state after each."""
    model = model if model is not None else ContractModel()
    states = []
    for start, end in runs:
        model.apply_run(run_records(log, start, end), end, log)
        states.append(model.state())
    return states
