"""Whole source transactions in a batch (Spark side of :mod:`cdclake.model.transactions`): the
``END`` records of the plan's transaction range, the batch's transactions that are not whole, and
the batch cut before the earliest of them.

Only the few transactions the ``END`` records do not show whole are collected to the driver (the
batch's tail, as a rule); the rule itself is :func:`cdclake.model.transactions.cut_position`.

A group member's batch is also cut where every partition was read (so that its commit is at a
source position) and before the first transaction after the group's target
(:data:`~cdclake.model.layout.GROUP_TARGET_PROPERTY`); a batch that ends short of the target is
read further (:attr:`TransactionCut.read_further`, :func:`extended_plan`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from cdclake.io.catalog import update_table_property
from cdclake.io.kafka import topic_watermarks
from cdclake.io.refs import ancestry
from cdclake.io.transaction_topic import read_transaction_ends
from cdclake.model.groups import GroupTarget, SourceInterval, batch_is_prefix, valid_interval
from cdclake.model.layout import GROUP_TARGET_PROPERTY, TRANSACTION_WAIT_PROPERTY, SummaryKeys
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan, TransactionRange
from cdclake.model.position import BinlogPosition
from cdclake.model.transactions import (
    CHANGE_OPS,
    UNIT_OPS,
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
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame

    from cdclake.io.kafka import KafkaClients
    from cdclake.model.config import TableConfig

log = logging.getLogger(__name__)

EXTEND_LIMIT = 3
"""How far a group member's run reads on to reach its group's target: up to this many times its
``max_events_per_run`` (the target is chosen within the cap by the tables' event counts; the
cap's even split over partitions can stop a partition short of it)."""


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
        read_further: per partition, the records a group member's run reads on, past its
            planned range (:func:`extended_plan`): its batch ends short of the group's target, or
            holds no transaction below where every partition was read; empty: none.
    """

    cut: Cut | None
    last: LastTransaction | None
    ends: int
    without_metadata: int = 0
    interval: SourceInterval | None = None
    read_further: Mapping[int, int] = field(default_factory=dict)


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
    source = ctx.plan.transactions
    if source is None:
        return ctx, base, None
    cfg = ctx.cfg
    ends_read = read_transaction_ends(ctx.kafka, source)
    ends = {e.id: e.event_counts[cfg.data_collection] for e in ends_read if cfg.data_collection in e.event_counts}
    # a batch parsed again (the table evolved) is cut again from the range cut already
    planned = ctx.plan.range
    base = base.filter(_inside(planned))
    ctx, base = _before_barrier(ctx, base)
    events = _transaction_events(base)
    wanted = _end_counts(ctx, ends)
    candidates, without = _not_whole(events, wanted)
    # a group member's interval needs every partition's last position too
    partition_last = _partition_last(ctx.plan, events, collect=bool(candidates) or cfg.group is not None)
    read_to_end = _read_to_end(ctx)
    replaying = _replaying(ctx.plan)
    # a replay or a new binlog history applies events below the table's high position again
    through = None if replaying else ctx.state.high_position
    cut = cut_position(candidates, ends, partition_last, read_to_end, through)
    member = None
    if cfg.group is not None and not replaying and len(source.end) == 1:
        member = _member_cuts(ctx, events, ends_read, ends, partition_last, read_to_end, through)
        cut = _earliest(cut, member.prefix, member.target_cut)
    empty = False
    if cut is not None:
        ctx, base = _cut_before(ctx, base, cut)
        empty = ctx.plan.range.is_empty
    last = _last_whole(events, wanted, cut)
    interval = None
    # a replay or a new binlog history applies below positions applied already: at no position,
    # unless it read every partition to its end (then the table is its source at its last
    # transaction, as after any run that did; else its group would wait for the next source change)
    if cfg.group is not None and last is not None and (not replaying or set(read_to_end) >= set(ctx.plan.range.end)):
        read = {p: partition_last.get(p) for p in ctx.plan.range.end}
        interval = _group_interval(cfg, source, ends_read, last, read, read_to_end, ctx.state.high_position)
    further = {} if member is None else _read_further(cfg, planned, member, cut, interval, empty)
    return ctx, base, TransactionCut(cut, last, len(ends), without, interval, further)


def _transaction_events(base: DataFrame) -> DataFrame:
    """The events of ``base`` that transactions are made of: those with a position, tombstones left
    out; a truncate's ``transaction_id`` is null (a unit of its own, see the model's UNIT_OPS)."""
    from pyspark.sql import functions as F

    # bad records count too: a transaction is whole by its events, applicable or quarantined
    return base.filter("position is not null and not is_tombstone").withColumn(
        "transaction_id", F.when(F.col("op").isin(*UNIT_OPS), F.lit(None)).otherwise(F.col("transaction_id"))
    )


def _end_counts(ctx: ApplyContext, ends: Mapping[str, int]) -> DataFrame:
    """The table's event count of each transaction whose ``END`` was read, as a broadcast frame of
    ``transaction_id string, want bigint`` (one row no event matches when there are none)."""
    from pyspark.sql import functions as F

    return F.broadcast(ctx.spark.createDataFrame(list(ends.items()) or [("", 0)], "transaction_id string, want bigint"))


def _not_whole(events: DataFrame, wanted: DataFrame) -> tuple[list[BatchTransaction], int]:
    """The batch's transactions the ``END`` records do not show whole (none read, or fewer events
    than it counts), with their first and last position; and the change events
    (:data:`~cdclake.model.transactions.CHANGE_OPS`) without a ``transaction`` block.

    Args:
        events: the batch's events (:func:`_transaction_events`).
        wanted: the ``END`` records' event counts (:func:`_end_counts`).
    """
    from pyspark.sql import functions as F

    # the events without a transaction are the group of a null id: counted by the same job
    txns = events.groupBy("transaction_id").agg(
        F.count_distinct("transaction_order").alias("orders"),
        F.count(F.when(F.col("op").isin(*CHANGE_OPS), 1)).alias("changes"),
    )
    rows = txns.join(wanted, "transaction_id", "left").filter("want is null or orders < want").collect()
    orders = {r["transaction_id"]: r["orders"] for r in rows if r["transaction_id"] is not None}
    without = sum(r["changes"] for r in rows if r["transaction_id"] is None)
    if not orders:
        return [], without
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
    return candidates, without


def _partition_last(plan: RunPlan, events: DataFrame, collect: bool) -> dict[int, BinlogPosition | None]:
    """Per partition the range reads records of, the greatest position of its events read, the
    partitions cut at the barrier change counted as read up to it (:func:`_read_to_barrier`);
    ``None``: no event read, or ``collect`` is false (one Spark job saved)."""
    from pyspark.sql import functions as F

    partition_last: dict[int, BinlogPosition | None] = {
        p: None for p in plan.range.end if plan.range.end[p] > plan.range.start[p]
    }
    if collect:
        for r in events.groupBy("partition").agg(F.max("position").alias("last")).collect():
            partition_last[r["partition"]] = position_of(r["last"])
        _read_to_barrier(plan, partition_last)
    return partition_last


def _read_to_end(ctx: ApplyContext) -> list[int]:
    """The partitions the range reads to the topic's high watermark, read after the ``END`` records."""
    # read to its end when planned, and still: an END read now was sent after its events, but a
    # partition's record can land after another partition's; the watermark read again after the ENDs
    # (a range extended past the plan, to the high watermark then, counts as planned to its end)
    high = topic_watermarks(ctx.kafka, ctx.plan.range.topic).high
    return [p for p, o in ctx.plan.range.end.items() if high.get(p) == o]


def _replaying(plan: RunPlan) -> bool:
    """Whether the run applies events below positions applied already: a replay, or a new binlog
    history the operator accepts."""
    return plan.replay or plan.accept_source_change


def _cut_before(ctx: ApplyContext, base: DataFrame, cut: Cut) -> tuple[ApplyContext, DataFrame]:
    """The context with the plan's range cut before every partition's first record at or after
    ``cut`` (:func:`~cdclake.model.transactions.partition_ends`), and ``base`` filtered to it."""
    from pyspark.sql import functions as F

    below = F.col("position") < position_literal(cut.position)
    firsts = {
        r["partition"]: r["first"]
        for r in base.filter(~below).groupBy("partition").agg(F.min("offset").alias("first")).collect()
    }
    end = partition_ends(ctx.plan.range.start, ctx.plan.range.end, firsts)
    cut_range = OffsetRange(topic=ctx.plan.range.topic, start=ctx.plan.range.start, end=end)
    log.info(
        "table %s: %s; the batch is cut to %s, the rest waits for the next run",
        ctx.cfg.identifier,
        cut.describe(),
        cut_range.to_json(),
    )
    return ctx.with_plan(ctx.plan.model_copy(update={"range": cut_range})), base.filter(_inside(cut_range))


def _last_whole(events: DataFrame, wanted: DataFrame, cut: Cut | None) -> LastTransaction | None:
    """The newest whole transaction the (cut) batch holds: that of the greatest position among the
    events of transactions whose ``END`` was read, below ``cut``; ``None``: none."""
    from pyspark.sql import functions as F

    whole = events.join(wanted.select("transaction_id"), "transaction_id", "left_semi")
    if cut is not None:
        whole = whole.filter(F.col("position") < position_literal(cut.position))
    newest = whole.orderBy(F.col("position").desc()).select("transaction_id", "position").limit(1).collect()
    return LastTransaction(newest[0]["transaction_id"], position_of(newest[0]["position"])) if newest else None


def _before_barrier(ctx: ApplyContext, base: DataFrame) -> tuple[ApplyContext, DataFrame]:
    """The batch cut before every partition's first event at or after the barrier change its plan
    was capped before (:attr:`~cdclake.model.plan.RunPlan.barrier_position`): a range extended to
    hold a transaction whole reads past schema sync's cap, and the events past the change may be of
    its new schema; a transaction before the change ends before it (DDL commits implicitly)."""
    from pyspark.sql import functions as F

    if ctx.plan.barrier_position is None:
        return ctx, base
    barrier = BinlogPosition.from_text(ctx.plan.barrier_position)
    planned = ctx.plan.range
    at_or_after = base.filter(F.col("position").isNotNull() & (F.col("position") >= position_literal(barrier)))
    firsts = {
        r["partition"]: r["first"]
        for r in at_or_after.groupBy("partition").agg(F.min("offset").alias("first")).collect()
    }
    end = partition_ends(planned.start, planned.end, firsts)
    if end == dict(planned.end):
        return ctx, base
    cut_range = OffsetRange(topic=planned.topic, start=planned.start, end=end)
    log.info(
        "table %s: the range read further is cut to %s, before the barrier change %s",
        ctx.cfg.identifier,
        cut_range.to_json(),
        ctx.plan.capped_before,
    )
    cut = tuple(sorted({*ctx.plan.barrier_cut, *(p for p, o in end.items() if o != planned.end[p])}))
    plan = ctx.plan.model_copy(update={"range": cut_range, "barrier_cut": cut})
    return ctx.with_plan(plan), base.filter(_inside(cut_range))


def _read_to_barrier(plan: RunPlan, partition_last: dict[int, BinlogPosition | None]) -> None:
    """Count the partitions cut at the barrier change (:attr:`~cdclake.model.plan.RunPlan.barrier_cut`)
    as read up to it: their next event is at or after it, so no transaction before it has more of
    its events there, and a group member's batch is a prefix of the binlog up to the change. Without
    it, a partition whose last event read is far below the change would cut the other partitions'
    events before the change from every run (the group never passes the change)."""
    if plan.barrier_position is None:
        return
    barrier = BinlogPosition.from_text(plan.barrier_position)
    for p in plan.barrier_cut:
        if p in partition_last:
            last = partition_last[p]
            partition_last[p] = barrier if last is None else max(last, barrier)


@dataclass(frozen=True)
class _MemberCuts:
    """The cuts of a group member's batch (:func:`_member_cuts`).

    Attributes:
        bounds: per partition not read to its end, the position it was read to (at least the
            table's high position: everything below it was applied); ``None``: unknown.
        prefix: the cut before the transaction of the batch's first event above the least of
            ``bounds`` (``None``: none, or a bound unknown).
        target: the group's target, when the table has a transaction up to it left to apply.
        needed: the table's events in those transactions.
        target_cut: the cut before the batch's first transaction after ``target``.
    """

    bounds: Mapping[int, BinlogPosition | None]
    prefix: Cut | None = None
    target: int | None = None
    needed: int = 0
    target_cut: Cut | None = None


def _member_cuts(
    ctx: ApplyContext,
    events: DataFrame,
    ends_read: list[TransactionEnd],
    ends: Mapping[str, int],
    partition_last: Mapping[int, BinlogPosition | None],
    read_to_end: list[int],
    through: BinlogPosition | None,
) -> _MemberCuts:
    """A group member's batch holds every event of its table up to where its least-read partition
    was read (the one-table cut keeps transactions whole, but with ``max_events_per_run`` split
    evenly over partitions one may be read far beyond another, and such a commit is at no source
    position), and no transaction after the group's target when it has one up to it to apply."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    done = set(read_to_end)
    bounds = {p: _bound(last, through) for p, last in partition_last.items() if p not in done}
    prefix = None
    least = _least(bounds)
    if least is not None:
        prefix = _first_transaction(events, events.filter(F.col("position") > position_literal(least)), ends, "prefix")
    target = GroupTarget.from_text(ctx.table.properties.get(GROUP_TARGET_PROPERTY))
    source = ctx.plan.transactions
    if target is None or target.group != cfg.group or source is None or target.position >= source.end.get(0, 0):
        return _MemberCuts(bounds, prefix)
    newest = _newest_interval(ctx.table, cfg.topic, source.topic)
    if newest is None:  # at no known position: the run goes as far as its cap
        return _MemberCuts(bounds, prefix)
    first: dict[str, int] = {}
    for e in sorted(ends_read, key=lambda e: e.offset):
        first.setdefault(e.id, e.offset)
    needed = sum(
        e.event_counts[cfg.data_collection]
        for e in ends_read
        if cfg.data_collection in e.event_counts
        and first[e.id] == e.offset
        and newest.start < e.offset <= target.position
    )
    if not needed:  # at the target or past it: the run goes as far as its cap
        return _MemberCuts(bounds, prefix)
    upto = ctx.spark.createDataFrame(
        [(i,) for i, o in first.items() if o <= target.position] or [("",)], "transaction_id string"
    )
    later = events.filter(F.col("transaction_id").isNotNull())
    if through is not None:  # re-emitted copies of transactions applied are no later ones
        later = later.filter(F.col("position") > position_literal(through))
    later = later.join(F.broadcast(upto), "transaction_id", "left_anti")
    return _MemberCuts(bounds, prefix, target.position, needed, _first_transaction(events, later, ends, "target"))


def _first_transaction(
    events: DataFrame, among: DataFrame, ends: Mapping[str, int], reason: Literal["prefix", "target"]
) -> Cut | None:
    """The cut before the transaction of the first event (by position) of ``among`` (a subset of
    ``events``): at that transaction's first event in ``events`` (a transaction's events are
    contiguous in the binlog); ``None`` when ``among`` is empty."""
    from pyspark.sql import functions as F

    row = among.orderBy("position").select("transaction_id", "position").limit(1).collect()
    if not row:
        return None
    txn, position = row[0]["transaction_id"], position_of(row[0]["position"])
    if txn is not None:
        own = events.filter(F.col("transaction_id") == txn).orderBy("position").select("position").limit(1).collect()
        position = position_of(own[0]["position"])
    return Cut(position, txn or "", 0, ends.get(txn) if txn is not None else None, reason)


def _bound(last: BinlogPosition | None, through: BinlogPosition | None) -> BinlogPosition | None:
    """How far a partition was read: its last event read, or the table's high position when
    greater (everything up to it was applied)."""
    if last is None or through is None:
        return through if last is None else last
    return max(last, through)


def _least(bounds: Mapping[int, BinlogPosition | None]) -> BinlogPosition | None:
    """The least of ``bounds``; ``None`` when there are none, or one is unknown."""
    known = [b for b in bounds.values() if b is not None]
    return min(known) if known and len(known) == len(bounds) else None


def _earliest(*cuts: Cut | None) -> Cut | None:
    """The cut at the lowest position (the first of equals)."""
    found = [c for c in cuts if c is not None]
    return min(found, key=lambda c: c.position) if found else None


def _newest_interval(table: Table, topic: str, transaction_topic: str) -> SourceInterval | None:
    """The interval the table's newest CDC commit of ``topic`` recorded (``None``: none)."""
    for _, _, summary in ancestry(table):
        if summary is None or summary.get(SummaryKeys.TOPIC) != topic or SummaryKeys.END_OFFSETS not in summary:
            continue
        interval = SourceInterval.from_json(summary.get(SummaryKeys.TRANSACTION_INTERVAL) or "")
        return interval if interval is not None and interval.topic == transaction_topic else None
    return None


def _read_further(
    cfg: TableConfig,
    planned: OffsetRange,
    member: _MemberCuts,
    cut: Cut | None,
    interval: SourceInterval | None,
    empty: bool,
) -> dict[int, int]:
    """Per partition, the records a group member's run reads on: when its commit would not be at
    the group's target (the partitions read to before the first transaction after it, each by the
    table's events up to the target, while the range holds fewer than :data:`EXTEND_LIMIT` times
    ``max_events_per_run``), or when the cut where every partition was read leaves nothing (the
    least-read partitions, their range doubled). ``planned``: the range before the cut."""
    if member.target is not None and (interval is None or not interval.covers(member.target)):
        edge = member.target_cut.position if member.target_cut is not None else None
        short = sorted(p for p, b in member.bounds.items() if b is None or edge is None or b < edge)
        if short and planned.event_count < EXTEND_LIMIT * cfg.max_events_per_run:
            log.info(
                "table %s: group %s: the batch ends short of the group's target (transaction topic offset %d): "
                "partition(s) %s are read further, past max_events_per_run (%d)",
                cfg.identifier,
                cfg.group,
                member.target,
                short,
                cfg.max_events_per_run,
            )
            return dict.fromkeys(short, max(member.needed, 1))
        log.info(
            "table %s: group %s: the commit stops short of the group's target (transaction topic offset %d); "
            "the next run goes on to it",
            cfg.identifier,
            cfg.group,
            member.target,
        )
    if empty and cut is not None and cut is member.prefix:
        least = _least(member.bounds)
        return {p: max(planned.end[p] - planned.start[p], 1) for p, b in member.bounds.items() if b == least}
    return {}


def extended_plan(kafka: KafkaClients, plan: RunPlan, more: Mapping[int, int]) -> RunPlan | None:
    """``plan`` with its range read ``more`` records further in the partitions named, up to the
    high watermarks (:attr:`TransactionCut.read_further`); ``None`` when it cannot grow. A range
    schema sync capped before a barrier change is still cut before it (:func:`cut_batch`)."""
    high = topic_watermarks(kafka, plan.range.topic).high
    end = {p: min(high.get(p, o), o + more.get(p, 0)) for p, o in plan.range.end.items()}
    if end == dict(plan.range.end):
        return None
    log.info("table %s: the range is extended to %s", plan.table.identifier, end)
    return plan.model_copy(update={"range": plan.range.model_copy(update={"end": end})})


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
