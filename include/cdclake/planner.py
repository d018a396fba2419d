"""The plan step of a table run: committed offsets (Iceberg) + watermarks (Kafka) -> next range."""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.config import TableConfig
from cdclake.kafka_io import Watermarks, offsets_for_time, topic_watermarks
from cdclake.lake import committed_offsets, load_catalog, load_table_or_none
from cdclake.offsets import OffsetRange, Offsets, plan_range
from cdclake.settings import Settings


@dataclass(frozen=True)
class Plan:
    """The next range of a table and what it was computed from."""

    offset_range: OffsetRange
    committed: Offsets | None
    watermarks: Watermarks

    def describe(self) -> str:
        return (
            f"topic {self.offset_range.topic!r}: committed {self.committed}, low watermarks "
            f"{self.watermarks.low}, high watermarks {self.watermarks.high}; planned "
            f"{self.offset_range.event_count} event(s) {self.offset_range.to_json()}"
        )


def plan_next(
    settings: Settings,
    cfg: TableConfig,
    *,
    bootstrap: str | None = None,
    replay_from_offsets: Offsets | None = None,
    replay_from_timestamp_ms: int | None = None,
) -> Plan:
    """Plan the table's next run (see :func:`cdclake.offsets.plan_range`).

    A manual replay starts at ``replay_from_offsets`` (partitions not named start at their low
    watermark) or at the first records at or after ``replay_from_timestamp_ms`` (Kafka's
    offsets-for-times), instead of the committed offsets; it still ends at the high watermarks,
    capped by ``max_events_per_run``. Replaying a range that ends at the current end converges to
    the same table, since an event never overwrites a row written at a greater position.

    Raises:
        LookupError: the topic does not exist.
        OffsetsOutOfRangeError: the start offsets are outside the topic's watermarks.
        ConfigError: the table cannot be applied as configured (no primary key, not changelog).
    """
    cfg.check_runnable()
    servers = bootstrap or settings.kafka_bootstrap
    watermarks = topic_watermarks(servers, cfg.topic)
    table = load_table_or_none(load_catalog(settings), cfg.identifier)
    committed = committed_offsets(table, cfg.topic) if table is not None else None
    start = committed
    if replay_from_offsets is not None and replay_from_timestamp_ms is not None:
        raise ValueError("give replay start offsets or a replay start timestamp, not both")
    if replay_from_offsets is not None:
        unknown = sorted(set(replay_from_offsets) - set(watermarks.high))
        if unknown:
            raise ValueError(f"topic {cfg.topic!r} has no partition(s) {unknown}")
        start = {p: replay_from_offsets.get(p, watermarks.low[p]) for p in watermarks.high}
    elif replay_from_timestamp_ms is not None:
        start = offsets_for_time(servers, cfg.topic, replay_from_timestamp_ms)
    offset_range = plan_range(cfg.topic, start, watermarks.low, watermarks.high, cfg.max_events_per_run)
    return Plan(offset_range, committed, watermarks)
