"""Whole source transactions in a batch (Spark side of :mod:`cdclake.model.transactions`): the
``END`` records of the plan's transaction range, the batch's transactions that are not whole, and
the batch cut before the earliest of them.

Only the few transactions the ``END`` records do not show whole are collected to the driver (the
batch's tail, as a rule); the rule itself is :func:`cdclake.model.transactions.cut_position`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdclake.errors import ConfigError, SchemaError, UnknownSchemaIdError
from cdclake.io.kafka import read_partition, topic_watermarks
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import TransactionRange
from cdclake.model.position import BinlogPosition
from cdclake.model.snapshot import metadata_document
from cdclake.model.transactions import (
    BatchTransaction,
    Cut,
    LastTransaction,
    TransactionEnd,
    cut_position,
    partition_ends,
)
from cdclake.spark.context import ApplyContext
from cdclake.spark.positions import position_literal, position_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cdclake.io.kafka import KafkaClients

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionCut:
    """What :func:`cut_batch` decided.

    Attributes:
        cut: where the batch was cut, ``None``: every transaction in it is whole.
        last: the last whole transaction the (cut) batch holds, ``None``: none.
        ends: ``END`` records read.
    """

    cut: Cut | None
    last: LastTransaction | None
    ends: int


def read_transaction_ends(kafka: KafkaClients, source: TransactionRange, data_collection: str) -> dict[str, int]:
    """The ``END`` records of ``source`` that count events of ``data_collection``
    (``<database>.<table>``): transaction id -> its events there. A record that is not
    transaction metadata is skipped with a warning naming its topic, partition and offset: the
    transaction whose ``END`` it may have been waits, as one whose ``END`` is not written yet.

    Raises:
        ConfigError: Avro records and no schema registry (:func:`~cdclake.model.snapshot.metadata_document`).
        TimeoutError: see :func:`~cdclake.io.kafka.read_partition`.
    """
    found: dict[str, int] = {}
    messages = (
        msg
        for p, end in sorted(source.end.items())
        if source.start.get(p, end) < end
        for msg in read_partition(kafka, source.topic, p, source.start[p], end, group_id="cdclake-transactions")
    )
    for msg in messages:
        value, offset = msg.value(), msg.offset() or 0
        if value is None:
            continue
        try:
            doc = metadata_document(value, kafka.schema_lookup, "transaction metadata records")
            end = TransactionEnd.from_value(doc, offset)
        except ConfigError:  # Avro without a registry, or its config is wrong: not a record's fault
            raise
        except (ValueError, TypeError, KeyError, SchemaError, UnknownSchemaIdError) as e:
            log.warning(
                "topic %s partition %s offset %d: not a transaction metadata record, skipped: %s",
                source.topic,
                msg.partition(),
                offset,
                e,
            )
            continue
        if end is not None and data_collection in end.event_counts:
            found[end.id] = end.event_counts[data_collection]
    return found


def cut_batch(ctx: ApplyContext, base: DataFrame) -> tuple[ApplyContext, DataFrame, TransactionCut | None]:
    """Cut the parsed batch ``base`` before the first event of its earliest transaction that is not
    whole (:func:`~cdclake.model.transactions.cut_position`).

    Returns:
        The context with the plan's range cut (unchanged when nothing is cut), ``base`` filtered
        to the cut range, and what was decided (``None`` when the plan has no transaction range).
    """
    from pyspark.sql import functions as F

    source = ctx.plan.transactions
    if source is None:
        return ctx, base, None
    cfg = ctx.cfg
    ends = read_transaction_ends(ctx.kafka, source, cfg.data_collection)
    # a batch parsed again (the table evolved) is cut again from the range cut already
    base = base.filter(_inside(ctx.plan.range))
    # bad records count too: a transaction is whole by its events, applicable or quarantined
    events = base.filter("position is not null and not is_tombstone")
    txns = (
        events.filter("transaction_id is not null")
        .groupBy("transaction_id")
        .agg(
            F.count_distinct("transaction_order").alias("orders"),
            F.min("position").alias("first"),
            F.max("position").alias("last"),
        )
    )
    wanted = ctx.spark.createDataFrame(list(ends.items()) or [("", 0)], "transaction_id string, want bigint")
    joined = txns.join(F.broadcast(wanted), "transaction_id", "left")
    candidates = [
        BatchTransaction(r["transaction_id"], r["orders"], position_of(r["first"]), position_of(r["last"]))
        for r in joined.filter("want is null or orders < want").collect()
    ]
    partition_last: dict[int, BinlogPosition | None] = {
        p: None for p in ctx.plan.range.end if ctx.plan.range.end[p] > ctx.plan.range.start[p]
    }
    if candidates:
        for r in events.groupBy("partition").agg(F.max("position").alias("last")).collect():
            partition_last[r["partition"]] = position_of(r["last"])
    # read to its end when planned, and still: an END read now was sent after its events, but a
    # partition's record can land after another partition's; the watermark read again after the ENDs
    high = topic_watermarks(ctx.kafka, ctx.plan.range.topic).high
    read_to_end = [p for p in source.read_to_end if high.get(p) == ctx.plan.range.end.get(p)]
    # a replay or a new binlog history applies events below the table's high position again
    through = None if ctx.plan.replay or ctx.plan.accept_source_change else ctx.state.high_position
    cut = cut_position(candidates, ends, partition_last, read_to_end, through)
    whole = joined.filter("transaction_id is not null and want is not null")
    if cut is not None:
        below = F.col("position") < position_literal(cut.position)
        firsts = {
            r["partition"]: r["first"]
            for r in base.filter(~below).groupBy("partition").agg(F.min("offset").alias("first")).collect()
        }
        end = partition_ends(ctx.plan.range.start, ctx.plan.range.end, firsts)
        cut_range = OffsetRange(topic=ctx.plan.range.topic, start=ctx.plan.range.start, end=end)
        ctx = replace(ctx, plan=ctx.plan.model_copy(update={"range": cut_range}))
        base = base.filter(_inside(cut_range))
        whole = whole.filter(F.col("last") < position_literal(cut.position))
        log.info(
            "table %s: %s; the batch is cut to %s, the rest waits for the next run",
            cfg.identifier,
            cut.describe(),
            cut_range.to_json(),
        )
    newest = whole.orderBy(F.col("last").desc()).select("transaction_id", "last").limit(1).collect()
    last = None
    if newest:
        txn = newest[0]["transaction_id"]
        last = LastTransaction(txn, position_of(newest[0]["last"]))
    return ctx, base, TransactionCut(cut, last, len(ends))


def _inside(offset_range: OffsetRange) -> Column:
    """Whether a record's ``(partition, offset)`` is in ``offset_range``."""
    from pyspark.sql import functions as F

    inside = F.lit(False)
    for p, end in offset_range.end.items():
        inside = inside | ((F.col("partition") == p) & F.col("offset").between(offset_range.start[p], end - 1))
    return inside
