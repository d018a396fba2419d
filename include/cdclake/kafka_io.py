"""Kafka I/O with confluent-kafka: topic watermarks, topic creation, reading a partition's offset
range, and the event-file loader."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cdclake.config import TableConfig
from cdclake.envelope import KafkaCoordinates, parse_value
from cdclake.keys import build_key

_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Watermarks:
    """Per-partition offsets of a topic: ``low`` (first kept) and ``high`` (next to be written)."""

    low: dict[int, int]
    high: dict[int, int]


def topic_watermarks(bootstrap: str, topic: str) -> Watermarks:
    """Low and high watermarks of every partition of ``topic``.

    Raises:
        LookupError: the topic does not exist.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cdclake-watermarks", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=_TIMEOUT_S)
        tmeta = meta.topics.get(topic)
        if tmeta is None or tmeta.error is not None or not tmeta.partitions:
            raise LookupError(f"Kafka topic {topic!r} does not exist on {bootstrap}")
        low, high = {}, {}
        for p in sorted(tmeta.partitions):
            lo, hi = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)
            low[p], high[p] = lo, hi
        return Watermarks(low, high)
    finally:
        consumer.close()


def offsets_for_time(bootstrap: str, topic: str, timestamp_ms: int) -> dict[int, int]:
    """Per partition, the earliest offset whose record timestamp is >= ``timestamp_ms`` (epoch
    ms), or the high watermark where no record is that new (Kafka's ``offsetsForTimes``).

    Raises:
        LookupError: the topic does not exist.
    """
    from confluent_kafka import Consumer, TopicPartition

    marks = topic_watermarks(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "cdclake-offsets-for-times", "enable.auto.commit": False}
    )
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(topic, p, timestamp_ms) for p in marks.high], timeout=_TIMEOUT_S
        )
        return {tp.partition: (tp.offset if tp.offset >= 0 else marks.high[tp.partition]) for tp in found}
    finally:
        consumer.close()


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> bool:
    """Create ``topic`` with ``partitions`` partitions unless it exists. Returns whether created."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    if topic in admin.list_topics(timeout=_TIMEOUT_S).topics:
        return False
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=_TIMEOUT_S)
    return True


def read_partition(consumer: Any, topic: str, partition: int, low: int, high: int,
                   timeout_s: float = _TIMEOUT_S) -> Iterator[Any]:
    """Yield every record (a confluent-kafka ``Message``) of ``topic``/``partition`` in
    ``[low, high)``, in offset order, with ``consumer`` (assigned to that partition here).

    Offsets missing from the log (compacted away, or transaction markers) are skipped.

    Raises:
        TimeoutError: no record arrived within ``timeout_s`` seconds while offsets below ``high``
            were still unread; names the topic, partition and offset.
        confluent_kafka.KafkaException: the broker reported an error for the partition.
    """
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    if low >= high:
        return
    consumer.assign([TopicPartition(topic, partition, low)])
    next_offset = low
    while next_offset < high:
        msg = consumer.poll(timeout_s)
        if msg is None:
            raise TimeoutError(f"topic {topic!r} partition {partition}: no record at offset {next_offset} "
                               f"within {timeout_s:.0f} s (high watermark {high})")
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(msg.error())
        next_offset = msg.offset() + 1
        yield msg


def read_event_file(path: Path) -> list[bytes]:
    """The event values of a captured file, as bytes exactly as written.

    Accepts JSON lines (one event per line) and files of concatenated, possibly pretty-printed,
    JSON documents; blank lines are skipped.

    Raises:
        ValueError: the file holds text that is not a JSON document (names the line).
    """
    text = path.read_text()
    decoder = json.JSONDecoder()
    values: list[bytes] = []
    idx = 0
    while idx < len(text):
        while idx < len(text) and text[idx].isspace():
            idx += 1
        if idx >= len(text):
            break
        try:
            _, end = decoder.raw_decode(text, idx)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON at line {e.lineno}: {e.msg}") from e
        values.append(text[idx:end].encode())
        idx = end
    return values


def load_events(
    path: Path, table: TableConfig, bootstrap: str, *, partitions: int = 1
) -> Counter[int]:
    """Produce the events of a captured file to ``table.topic`` as Debezium would.

    Values are sent byte for byte as in the file; keys are built from the primary key in
    Debezium's key format (:func:`cdclake.keys.build_key`) and partitioned by Kafka's default
    partitioner (murmur2 of the key bytes, as Kafka Connect's producer does), so that all events of
    a key land in one partition in file order. The topic is created with ``partitions``
    partitions if it does not exist.

    Returns:
        Number of records produced per partition.

    Raises:
        BadRecordError: an event of the file is not a valid envelope (names the file and index).
        RuntimeError: the broker rejected a record.
    """
    from confluent_kafka import Producer

    ensure_topic(bootstrap, table.topic, partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
            "linger.ms": 5,
            # the broker's first idempotent producer may be told to retry while the transaction
            # coordinator loads; librdkafka retries by itself, only errors are worth printing
            "log_level": 3,
        }
    )
    counts: Counter[int] = Counter()
    errors: list[str] = []

    def _delivered(err, msg) -> None:  # noqa: ANN001 - confluent-kafka callback signature
        if err is not None:
            errors.append(str(err))
        else:
            counts[msg.partition()] += 1

    for index, value in enumerate(read_event_file(path)):
        where = KafkaCoordinates(f"{path.name}[{index}]")
        event = parse_value(value, table.value_format, where)
        key = None if event is None or event.op == "t" else build_key(
            event, table.primary_key, table.value_format
        )
        producer.produce(table.topic, key=key, value=value, on_delivery=_delivered)
        producer.poll(0)
    producer.flush(_TIMEOUT_S)
    if errors:
        raise RuntimeError(f"producing {path} to {table.topic!r} failed: {errors[:3]}")
    return counts
