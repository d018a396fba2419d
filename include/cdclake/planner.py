"""The plan step of a table run: committed offsets (Iceberg) + watermarks (Kafka) -> next range."""

from __future__ import annotations

from dataclasses import dataclass

from cdclake.config import TableConfig
from cdclake.kafka_io import Watermarks, topic_watermarks
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


def plan_next(settings: Settings, cfg: TableConfig, *, bootstrap: str | None = None) -> Plan:
    """Plan the table's next run (see :func:`cdclake.offsets.plan_range`).

    Raises:
        LookupError: the topic does not exist.
        OffsetsOutOfRangeError: the committed offsets are outside the topic's watermarks.
    """
    watermarks = topic_watermarks(bootstrap or settings.kafka_bootstrap, cfg.topic)
    table = load_table_or_none(load_catalog(settings), cfg.identifier)
    committed = committed_offsets(table, cfg.topic) if table is not None else None
    offset_range = plan_range(
        cfg.topic, committed, watermarks.low, watermarks.high, cfg.max_events_per_run
    )
    return Plan(offset_range, committed, watermarks)
