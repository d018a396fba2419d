"""Catching the lake up with its source before reconcile compares them
(:mod:`cdclake.pipeline.reconcile`): a marker through the connector's signal table shows how far
the source's binlog was read, and a :data:`CatchUp` brings the table's committed offsets there."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from cdclake.errors import CatchUpTimeoutError, ReconcileError, TopicNotFoundError
from cdclake.io.catalog import load_table_or_none
from cdclake.io.kafka import KafkaClients, read_partition, topic_watermarks
from cdclake.io.refs import committed_offsets
from cdclake.io.source_db import SourceDatabase, send_marker
from cdclake.model.config import TableConfig
from cdclake.model.snapshot import caught_up
from cdclake.settings import Settings

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

CatchUp = Callable[[dict[int, int]], None]
"""Makes the table's committed offsets reach the given end offsets (runs its DAG, or waits)."""


def wait_for_lake(
    settings: Settings,
    kafka: KafkaClients,
    cfg: TableConfig,
    db: SourceDatabase,
    catch_up: CatchUp,
    *,
    marker_timeout_s: float = 300.0,
) -> None:
    """Make sure the lake has applied every event committed at the source before now: a marker
    signal (:func:`~cdclake.io.source_db.send_marker`) shows on the signal table's topic once the
    connector has read the binlog past everything before it; ``catch_up`` then brings the table's
    committed offsets to the data topic's end offsets of that moment.

    Raises:
        ReconcileError: the marker did not reach Kafka within ``marker_timeout_s`` (the connector
            is down, or does not capture its signal table).
    """
    topic = f"{settings.topic_prefix}.{settings.signal_table}"
    start = _high_or_empty(kafka, topic)  # the connector creates the topic with its first event
    marker = f"cdclake-marker-{uuid.uuid4().hex[:16]}"
    send_marker(db, settings.signal_table, marker)
    deadline = time.monotonic() + marker_timeout_s
    seen = False
    while not seen:
        if time.monotonic() > deadline:
            raise ReconcileError(
                f"the reconcile marker {marker} did not reach topic {topic!r} within {marker_timeout_s:.0f} s: the "
                "connector is not streaming, or does not capture its signal table; differences cannot be confirmed"
            )
        end = _high_or_empty(kafka, topic)
        for p, high in end.items():
            for msg in read_partition(kafka, topic, p, start.get(p, 0), high, group_id="cdclake-reconcile"):
                value = msg.value()
                if value and marker.encode() in value:
                    seen = True
            start[p] = high
        if not seen:
            time.sleep(1.0)
    time.sleep(2.0)  # the producer's in-flight batches to the data topic's other partitions
    catch_up(topic_watermarks(kafka, cfg.topic).high)


def _high_or_empty(kafka: KafkaClients, topic: str) -> dict[int, int]:
    try:
        return topic_watermarks(kafka, topic).high
    except TopicNotFoundError:
        return {}


def poll_catch_up(catalog: Catalog, cfg: TableConfig, timeout_s: float = 3600.0, interval_s: float = 15.0) -> CatchUp:
    """A :data:`CatchUp` that waits for the table's DAG runs (on their schedule) to commit.

    Raises:
        CatchUpTimeoutError: the table did not commit the offsets within ``timeout_s``.
    """

    def wait(end: dict[int, int]) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            committed = committed_offsets(load_table_or_none(catalog, cfg.identifier), cfg.topic)
            if caught_up(committed, end):
                return
            if time.monotonic() > deadline:
                raise CatchUpTimeoutError(
                    f"table {cfg.identifier}: committed offsets {committed} did not reach {end} within "
                    f"{timeout_s:.0f} s; its DAG ({cfg.scheduled_dag_id}) must run for reconcile to confirm differences"
                )
            time.sleep(interval_s)

    return wait
