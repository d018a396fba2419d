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
* ``floor``: the newest truncate position, or ``None``.

A position is ``(binlog file sequence number as an int, pos, row, rank)``, rank 0 for a snapshot
read (``op`` ``r``) and 1 for a change (``c``/``u``/``d``/``t``).

Rules of one run:

1. Kafka tombstones are skipped.
2. Truncates (``op`` ``t``) at T: the floor becomes ``max(floor, T)``; every row below the floor is
   removed; every event of the run below the floor is discarded (events above it still apply),
   and so is every event below it in later runs.
3. Reduce: per key, only the event at the greatest position counts.
4. An upsert (``c``/``u``/``r``) writes the row if its position is strictly greater than the row's
   and strictly greater than the key's tombstone. A delete removes the row if its position is
   strictly greater than the row's, and raises the tombstone to ``max(tombstone, position)``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Position = tuple[int, int, int, int]
"""``(file sequence number, pos, row, rank)``; tuple comparison is the event order."""

_FILE_SEQ = re.compile(r"^.+\.([0-9]+)$")
_SNAPSHOT_MARKERS = frozenset(
    {"true", "first", "first_in_data_collection", "last_in_data_collection", "last", "incremental"}
)
UPSERT_OPS = frozenset({"c", "u", "r"})


@dataclass(frozen=True)
class Record:
    """One Kafka record as the model sees it."""

    partition: int
    offset: int
    key: bytes | None
    envelope: dict[str, Any] | None
    """The parsed Debezium envelope (payload only); ``None`` for a Kafka tombstone."""


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
    floor: Position | None = None

    def apply_run(self, records: Iterable[Record]) -> None:
        """Apply one run (its records in any order: the order is the positions')."""
        events = [r.envelope for r in records if r.envelope is not None]
        truncates = [position_of(e) for e in events if e["op"] == "t"]
        if truncates and (self.floor is None or max(truncates) > self.floor):
            self.floor = max(truncates)
        if self.floor is not None:
            self.rows = {k: row for k, row in self.rows.items() if row[1] >= self.floor}

        latest: dict[Any, tuple[Position, dict[str, Any]]] = {}
        for e in events:
            if e["op"] == "t":
                continue
            pos = position_of(e)
            if self.floor is not None and pos < self.floor:
                continue
            k = key_of(e, self.primary_key)
            if k not in latest or pos > latest[k][0]:
                latest[k] = (pos, e)

        for k, (pos, e) in latest.items():
            row = self.rows.get(k)
            if e["op"] == "d":
                if row is not None and pos > row[1]:
                    del self.rows[k]
                if k not in self.tombstones or pos > self.tombstones[k]:
                    self.tombstones[k] = pos
            elif e["op"] in UPSERT_OPS:
                newer_than_row = row is None or pos > row[1]
                newer_than_tombstone = k not in self.tombstones or pos > self.tombstones[k]
                if newer_than_row and newer_than_tombstone:
                    self.rows[k] = (e["after"][self.value_column], pos)
            else:
                raise ValueError(f"unknown op {e['op']!r}")

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
        model.apply_run(run_records(log, start, end))
        states.append(model.state())
    return states
