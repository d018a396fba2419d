"""Reading exactly one planned Kafka offset range with Spark's Kafka source."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cdclake.io.kafka import KafkaClients
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


def read_range(spark: SparkSession, kafka: KafkaClients, offset_range: OffsetRange) -> DataFrame:
    """Exactly the records ``[start, end)`` of each partition, with Spark's Kafka source.

    Columns: ``key`` (binary), ``value`` (binary), ``topic``, ``partition``, ``offset``,
    ``timestamp``, ``headers``. Partitions whose range is empty are not read. A range of more
    than :data:`RECORDS_PER_SPARK_PARTITION` records is read in Spark partitions of about that
    many records. ``failOnDataLoss``: a record missing from the range fails the read.

    Only committed records are read (``kafka.isolation.level``, set by
    :meth:`~cdclake.io.kafka.KafkaClients.spark_options`: :data:`~cdclake.io.kafka.ISOLATION_LEVEL`):
    the source skips transaction markers and aborted records as offsets with nothing to read, not
    as lost data. It would wait for records beyond a partition's last stable offset and fail: the
    planned end never lies beyond it (the planner's high watermarks are the last stable offsets).
    """
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
