"""The Kafka client configs :class:`cdclake.io.kafka.KafkaClients` builds (no broker)."""

from __future__ import annotations

import pytest

from cdclake.errors import ConfigError
from cdclake.io.kafka import ISOLATION_LEVEL, KafkaClients


def test_spark_and_librdkafka_readers_read_committed_records_only():
    kafka = KafkaClients({"bootstrap.servers": "127.0.0.1:1", "isolation.level": "read_committed"})
    assert ISOLATION_LEVEL == "read_committed"
    assert kafka.spark_options()["kafka.isolation.level"] == ISOLATION_LEVEL
    assert KafkaClients.from_bootstrap("127.0.0.1:1").spark_options()["kafka.isolation.level"] == ISOLATION_LEVEL


def test_a_connection_reading_uncommitted_records_is_refused_naming_the_property():
    with pytest.raises(ConfigError, match="isolation.level='read_uncommitted'"):
        KafkaClients({"bootstrap.servers": "127.0.0.1:1", "isolation.level": "read_uncommitted"})
