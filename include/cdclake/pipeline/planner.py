"""The plan step of a table run: committed offsets (Iceberg) + watermarks (Kafka) -> the run's
:class:`~cdclake.model.plan.RunPlan`."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake.io.catalog import committed_offsets, load_table_or_none
from cdclake.io.kafka import KafkaClients, offsets_for_time, topic_watermarks
from cdclake.model.config import TableConfig
from cdclake.model.offsets import Offsets, plan_range
from cdclake.model.plan import RunPlan

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

log = logging.getLogger(__name__)


def plan_next(
    catalog: Catalog,
    kafka: KafkaClients,
    cfg: TableConfig,
    run_id: str,
    *,
    replay_from_offsets: Offsets | None = None,
    replay_from_timestamp_ms: int | None = None,
    accept_source_change: bool = False,
) -> RunPlan:
    """Plan the table's next run (see :func:`cdclake.model.offsets.plan_range`).

    A manual replay starts at ``replay_from_offsets`` (partitions not named start at their low
    watermark) or at the first records at or after ``replay_from_timestamp_ms`` (Kafka's
    offsets-for-times), instead of the committed offsets; it still ends at the high watermarks,
    capped by ``max_events_per_run``. Replaying a range that ends at the current end converges to
    the same table, since an event never overwrites a row written at a greater position.

    Raises:
        TopicNotFoundError: the topic does not exist.
        OffsetsOutOfRangeError: the start offsets are outside the topic's watermarks.
        ConfigError: the table cannot be applied as configured (no primary key, not changelog;
            ``value_format: avro`` and the Kafka clients have no schema registry).
        ValueError: both replay starts given, or a partition the topic does not have, or
            ``accept_source_change`` without replay start offsets (the new history's start).
    """
    cfg.check_runnable(has_schema_registry=kafka.schema_registry is not None)
    if replay_from_offsets is not None and replay_from_timestamp_ms is not None:
        raise ValueError("give replay start offsets or a replay start timestamp, not both")
    if accept_source_change and replay_from_offsets is None:
        raise ValueError(
            "accept_source_change needs replay_from_offsets: the first record of the new binlog history in "
            "each partition, as the error that stopped the table names them"
        )
    watermarks = topic_watermarks(kafka, cfg.topic)
    committed = committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic)
    start = committed
    if replay_from_offsets is not None:
        unknown = sorted(set(replay_from_offsets) - set(watermarks.high))
        if unknown:
            raise ValueError(f"topic {cfg.topic!r} has no partition(s) {unknown}")
        start = {p: replay_from_offsets.get(p, watermarks.low[p]) for p in watermarks.high}
    elif replay_from_timestamp_ms is not None:
        start = offsets_for_time(kafka, cfg.topic, replay_from_timestamp_ms)
    offset_range = plan_range(cfg.topic, start, watermarks.low, watermarks.high, cfg.max_events_per_run)
    replay = replay_from_offsets is not None or replay_from_timestamp_ms is not None
    log.info(
        "table %s: %stopic %r: committed %s, low watermarks %s, high watermarks %s; planned %d event(s) %s",
        cfg.identifier,
        "REPLAY " if replay else "",
        cfg.topic,
        committed,
        watermarks.low,
        watermarks.high,
        offset_range.event_count,
        offset_range.to_json(),
    )
    return RunPlan(
        table=cfg,
        run_id=run_id,
        range=offset_range,
        replay=replay,
        committed=committed,
        accept_source_change=accept_source_change,
    )
