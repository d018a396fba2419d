"""Metadata and watermark calls on the real broker through the one consumer a
:class:`~cdclake.io.kafka.KafkaClients` keeps for them (:meth:`~cdclake.io.kafka.KafkaClients.metadata_consumer`)."""

from __future__ import annotations

import uuid

import pytest

from cdclake.errors import TopicNotFoundError
from cdclake.io.kafka import KafkaClients, ensure_topic, produce, topic_watermarks

pytestmark = pytest.mark.integration


def test_watermark_calls_share_one_kept_consumer_until_closed_and_see_new_records(kafka):
    clients = KafkaClients.from_bootstrap(kafka.bootstrap)
    topic = f"marks{uuid.uuid4().hex[:8]}"
    ensure_topic(clients, topic, 2)
    try:
        assert topic_watermarks(clients, topic).high == {0: 0, 1: 0}
        with clients.metadata_consumer() as (first, _):
            pass
        produce(clients, topic, iter([(b"k", b"v", None)] * 3))
        assert sum(topic_watermarks(clients, topic).high.values()) == 3  # asked anew, not cached
        with pytest.raises(TopicNotFoundError, match=f"{topic}-missing"):
            topic_watermarks(clients, f"{topic}-missing")
        with clients.metadata_consumer() as (second, _):
            assert second is first  # an answer such as "no such topic" keeps the consumer
        clients.close()
        assert sum(topic_watermarks(clients, topic).high.values()) == 3
        with clients.metadata_consumer() as (third, _):
            assert third is not first
    finally:
        clients.close()


def test_a_call_that_fails_drops_the_kept_consumer(kafka):
    clients = KafkaClients.from_bootstrap(kafka.bootstrap)
    try:
        with clients.metadata_consumer() as (first, _):
            pass
        with pytest.raises(RuntimeError, match="mid-call"), clients.metadata_consumer():
            raise RuntimeError("mid-call")
        with clients.metadata_consumer() as (second, _):
            assert second is not first
            assert second.list_topics(timeout=10).brokers  # a working consumer
    finally:
        clients.close()


def test_a_read_whose_start_retention_deleted_fails_instead_of_reading_nothing(kafka):
    """The small-range reader never jumps to the partition's end: records deleted from the log
    (``DeleteRecords``, what retention does) between the planner's watermark check and the read
    fail the read naming the offset, instead of a range committed as applied with fewer records."""
    from confluent_kafka import TopicPartition

    from cdclake.errors import OffsetsOutOfRangeError
    from cdclake.io.kafka import read_partition

    clients = KafkaClients.from_bootstrap(kafka.bootstrap)
    topic = f"deleted{uuid.uuid4().hex[:8]}"
    ensure_topic(clients, topic, 1)
    try:
        produce(clients, topic, iter([(b"k", str(i).encode(), None) for i in range(10)]))
        assert [m.value() for m in read_partition(clients, topic, 0, 0, 3)] == [b"0", b"1", b"2"]
        admin = clients.admin()  # kept: the futures complete on its thread
        for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
            future.result(30)
        assert topic_watermarks(clients, topic).low == {0: 5}
        with pytest.raises(
            OffsetsOutOfRangeError, match=f"topic '{topic}' partition 0: offset 0 is no longer in Kafka"
        ):
            list(read_partition(clients, topic, 0, 0, 10, timeout_s=10))
        assert [m.value() for m in read_partition(clients, topic, 0, 5, 10)] == [str(i).encode() for i in range(5, 10)]
    finally:
        clients.close()


def test_settled_watermarks_wait_for_records_still_being_written(kafka):
    """A producer writing a record every half second while the watermarks are asked for: the
    settled watermarks hold every record it wrote (the first read, taken while it writes, holds
    fewer). The quiet time (5 s) is ten times the writer's pace, so a writer slowed by a loaded
    machine still writes within it."""
    import threading
    import time

    from cdclake.io.kafka import settled_watermarks

    clients = KafkaClients.from_bootstrap(kafka.bootstrap)
    topic = f"settle{uuid.uuid4().hex[:8]}"
    ensure_topic(clients, topic, 3)
    producer = clients.producer()
    started = threading.Event()

    def write() -> None:
        for n in range(6):
            producer.produce(topic, key=f"k{n}".encode(), value=b"v")
            producer.flush(30)
            started.set()
            time.sleep(0.5)

    writer = threading.Thread(target=write)
    try:
        writer.start()
        assert started.wait(30)
        first = sum(topic_watermarks(clients, topic).high.values())
        settled = settled_watermarks(clients, topic, quiet_s=5.0, most_s=120.0)
        writer.join()
        assert first < 6
        assert sum(settled.high.values()) == 6 == sum(topic_watermarks(clients, topic).high.values())
        quiet = settled_watermarks(clients, topic, quiet_s=0.2, most_s=30.0)  # nothing written: one wait
        assert quiet.high == settled.high
    finally:
        writer.join()
        clients.close()
