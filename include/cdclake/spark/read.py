"""Reading exactly one planned Kafka offset range: with Spark's Kafka source, or, for a small
range, with the Kafka client in the task, handed to Spark as a local relation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdclake.errors import OffsetsOutOfRangeError
from cdclake.io.kafka import KafkaClients, read_partition, topic_watermarks
from cdclake.model.offsets import OffsetRange

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KAFKA_RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value")
"""The columns of Spark's Kafka source a run keeps from each record (``read_range``'s rows)."""

RECORDS_PER_SPARK_PARTITION = 50_000
"""Above this many records, the Kafka read is split into Spark partitions of about this size
(the Kafka source's ``minPartitions``): one task per Kafka partition would cache gigabytes of
values in one block (measured: a 1,000,000-event batch of 4.4 kB values ran out of a 2 GiB heap).
Order does not depend on it: events are ordered by binlog position, not by Spark partition."""

LOCAL_READ_RECORDS = 1_000
"""At most this many records, the range is read in the task with the Kafka client and handed to
Spark as a local relation (:func:`read_local`): Spark's Kafka source costs most of a second for
any range, one record too (its consumers and offset checks on the engine), and the parse reads
the range twice (bench/HISTORY.md, "Engine benchmark", "Where the time goes now"). 1,000 records of
Debezium's JSON are about 5 MB in the plan."""

KAFKA_SOURCE_COLUMNS = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
    ("headers", "array<struct<key: string, value: binary>>"),
)
"""The columns (name, Spark SQL type) of Spark's Kafka source with ``includeHeaders``, which
:func:`read_local` gives too."""


def read_range(spark: SparkSession, kafka: KafkaClients, offset_range: OffsetRange) -> DataFrame:
    """Exactly the records ``[start, end)`` of each partition: with Spark's Kafka source, or, for at
    most :data:`LOCAL_READ_RECORDS` records, with the Kafka client (:func:`read_local`).

    Columns: :data:`KAFKA_SOURCE_COLUMNS`. Partitions whose range is empty are not read. A range
    of more than :data:`RECORDS_PER_SPARK_PARTITION` records is read in Spark partitions of about
    that many records. ``failOnDataLoss``: a record missing from the range fails the read.

    Only committed records are read (``kafka.isolation.level``, set by
    :meth:`~cdclake.io.kafka.KafkaClients.spark_options`: :data:`~cdclake.io.kafka.ISOLATION_LEVEL`):
    the source skips transaction markers and aborted records as offsets with nothing to read, not
    as lost data. It would wait for records beyond a partition's last stable offset and fail: the
    planned end never lies beyond it (the planner's high watermarks are the last stable offsets).
    """
    if offset_range.event_count <= LOCAL_READ_RECORDS:
        return read_local(spark, kafka, offset_range)
    parts = sorted(p for p in offset_range.end if offset_range.end[p] > offset_range.start[p])
    topic = offset_range.topic
    reader = spark.read.format("kafka").options(**kafka.spark_options())
    if offset_range.event_count > RECORDS_PER_SPARK_PARTITION:
        reader = reader.option("minPartitions", str(-(-offset_range.event_count // RECORDS_PER_SPARK_PARTITION)))
    return (
        reader.option("assign", json.dumps({topic: parts}))
        .option("startingOffsets", json.dumps({topic: {str(p): offset_range.start[p] for p in parts}}))
        .option("endingOffsets", json.dumps({topic: {str(p): offset_range.end[p] for p in parts}}))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
        .load()
    )


def read_local(spark: SparkSession, kafka: KafkaClients, offset_range: OffsetRange) -> DataFrame:
    """The records ``[start, end)`` of each partition read with the Kafka client
    (:func:`~cdclake.io.kafka.read_partition`: committed records only, like the Kafka source),
    as a local relation of :data:`KAFKA_SOURCE_COLUMNS`, in (partition, offset) order.

    Raises:
        OffsetsOutOfRangeError: a partition's low watermark is above the range's start: retention
            deleted records of the range (what ``failOnDataLoss`` fails the Kafka source for).
        TimeoutError, confluent_kafka.KafkaException: as :func:`~cdclake.io.kafka.read_partition`.
    """
    topic = offset_range.topic
    parts = sorted(p for p in offset_range.end if offset_range.end[p] > offset_range.start[p])
    low = topic_watermarks(kafka, topic).low if parts else {}
    for p in parts:
        if low.get(p, 0) > offset_range.start[p]:
            raise OffsetsOutOfRangeError(
                f"topic {topic!r} partition {p}: the run's range starts at offset {offset_range.start[p]} but the "
                f"earliest offset still in Kafka is {low[p]}; events were deleted by retention before they were "
                "applied. Re-snapshot the table with the snapshot-bootstrap DAG, then replay from the snapshot's start."
            )
    rows: list[tuple[Any, ...]] = []
    for p in parts:
        for msg in read_partition(
            kafka, topic, p, offset_range.start[p], offset_range.end[p], group_id="cdclake-apply"
        ):
            kind, ms = msg.timestamp()
            rows.append(
                (
                    msg.key(),
                    msg.value(),
                    topic,
                    p,
                    msg.offset(),
                    datetime.fromtimestamp(ms / 1000, tz=UTC),
                    kind - 1,  # librdkafka: 1 create time, 2 log-append time; Spark: 0 and 1
                    list(msg.headers() or ()) or None,  # (key, value) pairs; none: NULL, as the Kafka source
                )
            )
    schema = ", ".join(f"`{name}` {sql_type}" for name, sql_type in KAFKA_SOURCE_COLUMNS)
    return spark.createDataFrame(rows, schema=schema)
