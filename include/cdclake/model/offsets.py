"""The offset plan of one run: which Kafka records a run applies.

Pure functions over offsets; the I/O (Iceberg snapshot summary, Kafka watermarks) lives in
:mod:`cdclake.io.refs` and :mod:`cdclake.io.kafka`.

Offsets follow Kafka's convention: a committed offset is the *next* record to read, and a range
``[start, end)`` excludes ``end``.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from cdclake.errors import OffsetsOutOfRangeError

Offsets = dict[int, int]
"""Kafka partition -> offset."""


class OffsetRange(BaseModel):
    """The records ``[start[p], end[p])`` of each partition ``p`` of ``topic``.

    ``end`` lists every partition of the topic (the offsets the table is at after the run);
    ``start`` lists the same partitions.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    topic: str
    start: dict[int, Annotated[int, Field(ge=0)]]
    end: dict[int, Annotated[int, Field(ge=0)]]

    def model_post_init(self, _context: object) -> None:
        if set(self.start) != set(self.end):
            raise ValueError(f"start partitions {sorted(self.start)} != end partitions {sorted(self.end)}")
        bad = [p for p in self.start if self.start[p] > self.end[p]]
        if bad:
            raise ValueError(f"start offset after end offset in partition(s) {bad}")

    @property
    def event_count(self) -> int:
        """Number of Kafka records in the range."""
        return sum(self.end[p] - self.start[p] for p in self.end)

    @property
    def is_empty(self) -> bool:
        return self.event_count == 0

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> OffsetRange:
        return cls.model_validate_json(text)


def encode_offsets(offsets: Offsets) -> str:
    """Offsets as the JSON object stored in a snapshot summary: ``{"0": 16, "1": 4}``."""
    return json.dumps({str(p): o for p, o in sorted(offsets.items())}, separators=(",", ":"))


def decode_offsets(text: str) -> Offsets:
    """Inverse of :func:`encode_offsets`."""
    return {int(p): int(o) for p, o in json.loads(text).items()}


def plan_range(
    topic: str,
    committed: Offsets | None,
    low: Offsets,
    high: Offsets,
    max_events: int,
) -> OffsetRange:
    """The next range to apply, capped at ``max_events`` records over all partitions.

    Args:
        topic: the Kafka topic.
        committed: offsets recorded by the table's last data commit, or ``None`` for a table
            that has never committed (start at each partition's low watermark).
        low: low watermarks (first offset still in Kafka) per partition.
        high: high watermarks (next offset to be written) per partition.
        max_events: cap on the records of the range (> 0). The cap is shared out evenly between
            partitions with pending records; a partition's unused share goes to the others.

    Returns:
        The range; ``is_empty`` when there is nothing new.

    Raises:
        OffsetsOutOfRangeError: a committed offset is below the partition's low watermark
            (retention deleted events before they were applied), or above its high watermark
            (the topic was recreated).
    """
    if max_events <= 0:
        raise ValueError(f"max_events must be > 0, got {max_events}")
    start: Offsets = {}
    for p in sorted(high):
        if committed is None or p not in committed:
            start[p] = low[p]
            continue
        c = committed[p]
        if c < low[p]:
            raise OffsetsOutOfRangeError(
                f"topic {topic!r} partition {p}: the table committed offset {c} but the earliest "
                f"offset still in Kafka is {low[p]}; events {c}..{low[p] - 1} were deleted by "
                "retention before they were applied. Re-snapshot the table with the "
                "snapshot-bootstrap DAG, then replay from the snapshot's start."
            )
        if c > high[p]:
            raise OffsetsOutOfRangeError(
                f"topic {topic!r} partition {p}: the table committed offset {c} but the topic "
                f"ends at {high[p]}; was the topic deleted and recreated?"
            )
        start[p] = c
    missing = sorted(set(committed or {}) - set(high))
    if missing:
        raise OffsetsOutOfRangeError(
            f"topic {topic!r}: the table committed offsets for partition(s) {missing} that the topic no longer has"
        )
    pending = {p: high[p] - start[p] for p in start}
    take = {p: 0 for p in start}
    budget = max_events
    open_parts = [p for p in start if pending[p] > 0]
    while budget > 0 and open_parts:
        share = max(1, budget // len(open_parts))
        for p in list(open_parts):
            n = min(share, pending[p] - take[p], budget)
            take[p] += n
            budget -= n
            if take[p] == pending[p]:
                open_parts.remove(p)
            if budget == 0:
                break
    return OffsetRange(topic=topic, start=start, end={p: start[p] + take[p] for p in start})
