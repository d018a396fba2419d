"""The Kafka side of snapshot bootstrap against a real broker: the Kafka signal channel (one
partition, key = topic.prefix, a retry does not signal twice) and the notification reader over the
notifications recorded from the real connector (tests/data/chain/notifications.jsonl)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from cdclake.errors import SnapshotError, TopicNotFoundError
from cdclake.io.kafka import ensure_topic, topic_watermarks
from cdclake.model.snapshot import SIGNAL_ID_HEADER, build_signal, parse_notification, scan_results, signal_id
from cdclake.pipeline.snapshot import read_notifications, send_kafka_signal

pytestmark = pytest.mark.integration

RECORDED = Path(__file__).resolve().parents[1] / "data" / "chain" / "notifications.jsonl"


def _records(kafka, topic: str, partition: int = 0) -> list:
    from cdclake.io.kafka import read_partition

    marks = topic_watermarks(kafka, topic)
    return [
        (m.offset(), m.key(), m.value(), dict(m.headers() or []))
        for m in read_partition(kafka, topic, partition, marks.low[partition], marks.high[partition])
    ]


def test_kafka_signal_is_sent_once_per_signal_id(kafka):
    topic = f"sig{uuid.uuid4().hex[:8]}.signals"
    first = build_signal(signal_id("manual__1", "execute"), "execute", ["inventory.orders"])
    second = build_signal(signal_id("manual__2", "execute"), "execute", ["inventory.customers"])

    at = send_kafka_signal(kafka, topic, "dbserver1", first)
    assert send_kafka_signal(kafka, topic, "dbserver1", first) == at  # a retried task
    assert send_kafka_signal(kafka, topic, "dbserver1", second) == at + 1

    records = _records(kafka, topic)
    assert [r[0] for r in records] == [at, at + 1]
    offset, key, value, headers = records[0]
    assert key == b"dbserver1"  # the connector acts only on records keyed with its topic.prefix
    assert headers[SIGNAL_ID_HEADER] == first.id.encode()
    assert json.loads(value) == {"type": "execute-snapshot", "data": first.data}


def test_kafka_signal_topic_with_more_than_one_partition_is_refused(kafka):
    topic = f"sig{uuid.uuid4().hex[:8]}.signals"
    ensure_topic(kafka, topic, 2)
    with pytest.raises(SnapshotError, match="exactly one partition"):
        send_kafka_signal(kafka, topic, "dbserver1", build_signal("s1", "execute", ["inventory.orders"]))


def test_read_notifications_reads_every_partition_in_time_order(kafka):
    topic = f"note{uuid.uuid4().hex[:8]}.notifications"
    lines = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    partitions = sorted({line["partition"] for line in lines})
    ensure_topic(kafka, topic, max(partitions) + 1)
    producer = kafka.producer()
    for line in lines:
        producer.produce(topic, key=line["key"], value=line["value"], partition=line["partition"])
    producer.produce(topic, key=b"x", value=b"not a notification", partition=0)
    assert producer.flush(30) == 0

    found = read_notifications(kafka, topic)
    expected = [parse_notification(line["value"]) for line in lines]
    assert len(found) == len(expected) == len(lines)
    assert sorted(found, key=lambda n: (n.timestamp_ms, n.id, n.type)) == sorted(
        expected, key=lambda n: (n.timestamp_ms, n.id, n.type)
    )
    assert [n.timestamp_ms for n in found] == sorted(n.timestamp_ms for n in found)
    sid = next(n.id for n in found if n.id.startswith("cdclake-execute-"))
    assert scan_results(found, [sid], "incremental", 0, ["inventory.accounts"]) == {"inventory.accounts": "SUCCEEDED"}


def test_watermarks_of_topics_asked_the_moment_they_are_created(kafka):
    """A topic the connector has just created (the signal topic, with the first reconcile marker of
    several reconcile tasks) may still be unknown to the partition's leader: its watermarks are
    asked again, not failed (a clean-clone run's reconcile task failed so within 2 s)."""
    for _ in range(15):
        topic = f"fresh{uuid.uuid4().hex[:8]}.signals"
        assert ensure_topic(kafka, topic, 3)
        marks = None
        while marks is None:  # what the broker's metadata shows first: not yet the topic, then it
            try:
                marks = topic_watermarks(kafka, topic)
            except TopicNotFoundError:
                continue
        assert (marks.low, marks.high) == ({0: 0, 1: 0, 2: 0}, {0: 0, 1: 0, 2: 0})
