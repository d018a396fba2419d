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

from cdclake.io.catalog import update_table_property
from cdclake.io.kafka import topic_watermarks
from cdclake.io.transaction_topic import read_transaction_ends
from cdclake.model.groups import SourceInterval, batch_is_prefix, valid_interval
from cdclake.model.layout import TRANSACTION_WAIT_PROPERTY, SummaryKeys
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan, TransactionRange
from cdclake.model.position import BinlogPosition
from cdclake.model.transactions import (
    CHANGE_OPS,
    BatchTransaction,
    Cut,
    LastTransaction,
    TransactionEnd,
    TransactionWait,
    cut_position,
    cuts_whole,
    partition_ends,
)
from cdclake.spark.context import ApplyContext
from cdclake.spark.positions import position_literal, position_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyiceberg.catalog import Catalog
    from pyspark.sql import Column, DataFrame

    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionCut:
    """What :func:`cut_batch` decided.

    Attributes:
        cut: where the batch was cut, ``None``: every transaction in it is whole.
        last: the last whole transaction the (cut) batch holds, ``None``: none.
        ends: ``END`` records read.
        without_metadata: change events (:data:`~cdclake.model.transactions.CHANGE_OPS`) of the
            batch without a ``transaction`` block: no cut can keep their transactions whole.
        interval: a group member's positions at which the commit equals its source table
            (``None``: not in a group, or at none).
    """

    cut: Cut | None
    last: LastTransaction | None
    ends: int
    without_metadata: int = 0
    interval: SourceInterval | None = None


def cut_batch(ctx: ApplyContext, base: DataFrame) -> tuple[ApplyContext, DataFrame, TransactionCut | None]:
    """Cut the parsed batch ``base`` before the first event of its earliest transaction that is not
    whole (:func:`~cdclake.model.transactions.cut_position`).

    The batch is aggregated by transaction id by hashing only (a minimum or maximum of the position
    struct would sort the whole batch): the positions are read for the few transactions the ``END``
    records do not show whole, and the newest whole one is the transaction of the batch's greatest
    position below the cut (a transaction's events are contiguous in the binlog).

    Returns:
        The context with the plan's range cut (unchanged when nothing is cut), ``base`` filtered
        to the cut range, and what was decided (``None`` when the plan has no transaction range).
    """
    from pyspark.sql import functions as F

    source = ctx.plan.transactions
    if source is None:
        return ctx, base, None
    cfg = ctx.cfg
    ends_read = read_transaction_ends(ctx.kafka, source)
    ends = {e.id: e.event_counts[cfg.data_collection] for e in ends_read if cfg.data_collection in e.event_counts}
    # a batch parsed again (the table evolved) is cut again from the range cut already
    base = base.filter(_inside(ctx.plan.range))
    # bad records count too: a transaction is whole by its events, applicable or quarantined
    events = base.filter("position is not null and not is_tombstone")
    wanted = F.broadcast(
        ctx.spark.createDataFrame(list(ends.items()) or [("", 0)], "transaction_id string, want bigint")
    )
    # the events without a transaction are the group of a null id: counted by the same job
    txns = events.groupBy("transaction_id").agg(
        F.count_distinct("transaction_order").alias("orders"),
        F.count(F.when(F.col("op").isin(*CHANGE_OPS), 1)).alias("changes"),
    )
    rows = txns.join(wanted, "transaction_id", "left").filter("want is null or orders < want").collect()
    orders = {r["transaction_id"]: r["orders"] for r in rows if r["transaction_id"] is not None}
    without = sum(r["changes"] for r in rows if r["transaction_id"] is None)
    candidates: list[BatchTransaction] = []
    partition_last: dict[int, BinlogPosition | None] = {
        p: None for p in ctx.plan.range.end if ctx.plan.range.end[p] > ctx.plan.range.start[p]
    }
    if orders:
        spans = (
            events.filter(F.col("transaction_id").isin(list(orders)))
            .groupBy("transaction_id")
            .agg(F.min("position").alias("first"), F.max("position").alias("last"))
        )
        candidates = [
            BatchTransaction(
                r["transaction_id"], orders[r["transaction_id"]], position_of(r["first"]), position_of(r["last"])
            )
            for r in spans.collect()
        ]
    if orders or cfg.group is not None:  # a group member's interval needs them too
        for r in events.groupBy("partition").agg(F.max("position").alias("last")).collect():
            partition_last[r["partition"]] = position_of(r["last"])
    # read to its end when planned, and still: an END read now was sent after its events, but a
    # partition's record can land after another partition's; the watermark read again after the ENDs
    high = topic_watermarks(ctx.kafka, ctx.plan.range.topic).high
    read_to_end = [p for p in source.read_to_end if high.get(p) == ctx.plan.range.end.get(p)]
    # a replay or a new binlog history applies events below the table's high position again
    through = None if ctx.plan.replay or ctx.plan.accept_source_change else ctx.state.high_position
    cut = cut_position(candidates, ends, partition_last, read_to_end, through)
    # the events of transactions whose END was read: those below the cut are of whole ones
    whole = events.join(wanted.select("transaction_id"), "transaction_id", "left_semi")
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
        whole = whole.filter(below)
        log.info(
            "table %s: %s; the batch is cut to %s, the rest waits for the next run",
            cfg.identifier,
            cut.describe(),
            cut_range.to_json(),
        )
    newest = whole.orderBy(F.col("position").desc()).select("transaction_id", "position").limit(1).collect()
    last = LastTransaction(newest[0]["transaction_id"], position_of(newest[0]["position"])) if newest else None
    interval = None
    # a replay or a new binlog history applies below positions applied already: at no position
    if cfg.group is not None and last is not None and not (ctx.plan.replay or ctx.plan.accept_source_change):
        read = {p: partition_last.get(p) for p in ctx.plan.range.end}
        interval = _group_interval(cfg, source, ends_read, last, read, read_to_end, ctx.state.high_position)
    return ctx, base, TransactionCut(cut, last, len(ends), without, interval)


def _group_interval(
    cfg: TableConfig,
    source: TransactionRange,
    ends: list[TransactionEnd],
    last: LastTransaction,
    partition_last: Mapping[int, BinlogPosition | None],
    read_to_end: list[int],
    applied_before: BinlogPosition | None,
) -> SourceInterval | None:
    """The positions at which the commit of a group member equals its source table
    (:func:`~cdclake.model.groups.valid_interval`); ``None`` when it is at none: a transaction
    topic of several partitions (said at warning), a batch that is not a prefix of the binlog
    (:func:`~cdclake.model.groups.batch_is_prefix`)."""
    if len(source.end) != 1:
        log.warning(
            "table %s: group %s: the transaction topic %s has %d partitions, so its offsets do not order the "
            "source transactions and no commit is at a group position; recreate it with one partition "
            '(docs/operations.md, "Table groups")',
            cfg.identifier,
            cfg.group,
            source.topic,
            len(source.end),
        )
        return None
    if not batch_is_prefix(last.position, partition_last, read_to_end, applied_before):
        log.info(
            "table %s: group %s: the batch read a partition less far than the last transaction applied, so this "
            "commit is at no group position (the next run that reads every partition to its end is)",
            cfg.identifier,
            cfg.group,
        )
        return None
    return valid_interval(source.topic, ends, cfg.data_collection, last.id)


def transaction_summary(
    cfg: TableConfig, planned: OffsetRange, applied: OffsetRange, whole: TransactionCut | None, ops: Mapping[str, int]
) -> dict[str, str]:
    """The snapshot-summary keys of whole transactions for a commit of ``applied`` (``planned``
    cut by :func:`cut_batch`, or the same): :attr:`~SummaryKeys.LAST_TRANSACTION`,
    :attr:`~SummaryKeys.TRANSACTION_WAIT` (the records of ``planned`` left for the next run) and
    :attr:`~SummaryKeys.WITHOUT_TRANSACTION` for a table configured ``transactions: whole`` whose
    events carry no transaction metadata: without a transaction topic (``whole`` is ``None``; the
    planner said so) every change event of ``ops``, else those without a ``transaction`` block,
    said here, once per run."""
    if not cuts_whole(cfg):
        return {}
    out: dict[str, str] = {}
    without = sum(ops.get(op, 0) for op in CHANGE_OPS)
    if whole is not None:
        without = whole.without_metadata
        if whole.last is not None:
            out[SummaryKeys.LAST_TRANSACTION] = whole.last.to_json()
        if whole.interval is not None:
            out[SummaryKeys.TRANSACTION_INTERVAL] = whole.interval.to_json()
        if whole.cut is not None:
            left = planned.event_count - applied.event_count
            wait = TransactionWait(events=left, transaction=whole.cut.transaction)
            out[SummaryKeys.TRANSACTION_WAIT] = wait.model_dump_json(exclude_defaults=True)
        if without:
            log.warning(
                "table %s: transactions: whole, but %d change event(s) of the batch carry no Debezium transaction "
                "block (the connector runs without provide.transaction.metadata): they are applied as batches cut by "
                "offsets, and a commit may hold part of a source transaction (set transactions: ignore to accept it)",
                cfg.identifier,
                without,
            )
    if without:
        out[SummaryKeys.WITHOUT_TRANSACTION] = str(without)
    return out


def record_wait(catalog: Catalog, plan: RunPlan, cut: Cut) -> None:
    """Record on the table (:data:`~cdclake.model.layout.TRANSACTION_WAIT_PROPERTY`) that a run
    of ``plan`` applied nothing: its range waits for the transaction ``cut`` names (a table that
    does not exist yet is left alone)."""
    wait = TransactionWait(events=plan.range.event_count, transaction=cut.transaction, start=dict(plan.range.start))
    update_table_property(catalog, plan.table.identifier, TRANSACTION_WAIT_PROPERTY, lambda _: wait.model_dump_json())


def _inside(offset_range: OffsetRange) -> Column:
    """Whether a record's ``(partition, offset)`` is in ``offset_range``."""
    from pyspark.sql import functions as F

    inside = F.lit(False)
    for p, end in offset_range.end.items():
        inside = inside | ((F.col("partition") == p) & F.col("offset").between(offset_range.start[p], end - 1))
    return inside
