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
