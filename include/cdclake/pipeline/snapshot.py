"""Snapshot bootstrap I/O: send a Debezium signal (source table or Kafka channel) and read the
connector's notifications. The rules (signal shapes, which notification ends a snapshot) are in
:mod:`cdclake.model.snapshot`.
"""

from __future__ import annotations

import json
import logging

from cdclake.errors import SnapshotError
from cdclake.io.kafka import KafkaClients, ensure_topic, produce, read_partition, read_topic, topic_watermarks
from cdclake.model.snapshot import SIGNAL_ID_HEADER, Notification, Signal, parse_notification

log = logging.getLogger(__name__)


def send_kafka_signal(kafka: KafkaClients, topic: str, topic_prefix: str, signal: Signal) -> int:
    """Produce ``signal`` to the Kafka signal channel (key ``topic_prefix``) unless a record with
    the same signal id (header :data:`~cdclake.model.snapshot.SIGNAL_ID_HEADER`) is already there.

    Returns:
        The record's offset, which the connector uses as the signal's id.

    Raises:
        SnapshotError: the topic does not have exactly one partition (the connector reads
            partition 0 only), or the record was not delivered.
    """
    ensure_topic(kafka, topic, 1)
    marks = topic_watermarks(kafka, topic)
    if list(marks.high) != [0]:
        raise SnapshotError(f"Kafka signal topic {topic!r} must have exactly one partition, has {len(marks.high)}")
    for msg in read_partition(kafka, topic, 0, marks.low[0], marks.high[0]):
        if dict(msg.headers() or []).get(SIGNAL_ID_HEADER) == signal.id.encode():
            log.info(
                "signal %s is already on %r at offset %s (a retry): not sent again", signal.id, topic, msg.offset()
            )
            return int(msg.offset() or 0)
    value = json.dumps({"type": signal.type, "data": signal.data}).encode()
    try:
        [(_, offset)] = produce(
            kafka, topic, iter([(topic_prefix.encode(), value, [(SIGNAL_ID_HEADER, signal.id.encode())])])
        )
    except RuntimeError as e:
        raise SnapshotError(f"signal {signal.id} not delivered to {topic!r}: {e}") from e
    log.info("signal %s %s on %r at offset %d", signal.type, signal.data_json, topic, offset)
    return offset


def read_notifications(kafka: KafkaClients, topic: str) -> list[Notification]:
    """Every notification on ``topic`` now (all partitions, low to high watermark), oldest first;
    none when the topic does not exist."""
    records = read_topic(kafka, topic, group_id="cdclake-notifications")
    found = []
    for msg in records or ():
        n = parse_notification(msg.value(), kafka.schema_lookup)
        if n is not None:
            found.append(n)
    return sorted(found, key=lambda n: n.timestamp_ms)
