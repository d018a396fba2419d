"""Reduction of a batch (Spark): the latest event per primary key, and the delete tombstones
(``<table>__cdc_tombstones``) that keep a re-emitted or replayed older event from bringing a
deleted row back (``docs/architecture.md``, "The apply contract").

The order of one key's events is :class:`cdclake.model.position.EventPlace`'s (position, then
Kafka partition and offset) and the batch's rule is :func:`cdclake.model.position.batch_pick`: the
events at the latest event's position that differ from it were ordered by Kafka offset (logged
once per run), or, in another partition, have no order (:class:`~cdclake.errors.PositionOrderError`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdclake.errors import PositionOrderError
from cdclake.model.layout import TOMBSTONE_COLUMNS, TOMBSTONES_SUFFIX
from cdclake.model.position import SOURCE_ORDERINGS, EventPlace, unordered_message
from cdclake.spark.context import ApplyContext
from cdclake.spark.flat import all_of
from cdclake.spark.merge import SOURCE, merge_into
from cdclake.spark.names import qualified, quote_identifier
from cdclake.spark.positions import place_columns, position_of, supersedes_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

TIED = "_cdc_tied"
"""Column of :func:`reduce_latest`'s rows: another event of the key at the row's position has other
content (:attr:`cdclake.model.position.BatchPick.tied`)."""

_UNORDERED = "_cdc_unordered"
"""Column of the ranked events: ``(partition, offset)`` of an event the key's latest one has no
order with (:attr:`cdclake.model.position.BatchPick.unordered`), else null."""

_UNORDERED_MARKER = "cdclake: events of one key without an order"
"""The text of the Spark error a batch with :data:`_UNORDERED` events raises, to tell it apart."""

_EVENT_ALIAS, _TOMB_ALIAS = "cdc-event", "cdc-tomb"
"""Aliases of the batch's events and of the tombstone table in their join (hyphenated, as
:data:`cdclake.spark.merge.SOURCE_ALIAS`: apart from every column and table name)."""

_EVENT, _TOMB = quote_identifier(_EVENT_ALIAS), quote_identifier(_TOMB_ALIAS)


_KEY, _POSITION, _PARTITION, _OFFSET = "_cdc_rank_key", "_cdc_rank_position", "_cdc_rank_partition", "_cdc_rank_offset"
"""Columns of :func:`_ranked`'s sort (dropped from its result): the primary key (``<name><i>``)
and the event's place. The window is specified on these columns, never on expressions: Spark
projects each expression of a window specification afresh, so a specification written with
expressions is a new one in every window function (a sort each, and a second shuffle)."""


def _ranked(events: DataFrame, primary_key: tuple[str, ...], ordering: str) -> DataFrame:
    """``events`` with ``_rn`` (1: the key's latest event) and, on every row of a key, the key's
    :data:`TIED` and :data:`_UNORDERED`: :func:`~cdclake.model.position.batch_pick` in one window
    (one shuffle by key, one sort, two ``Window`` operators)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = [f"{_KEY}{i}" for i in range(len(primary_key))]
    place = place_columns(ordering)
    placed = events.select(
        "*",
        *[F.col("image")[c].alias(k) for c, k in zip(primary_key, keys, strict=True)],
        *[column.alias(name) for column, name in zip(place, (_POSITION, _PARTITION, _OFFSET), strict=True)],
    )
    position, partition, offset = F.col(_POSITION), F.col(_PARTITION), F.col(_OFFSET)
    w = Window.partitionBy(*keys).orderBy(position.desc(), partition.desc(), offset.desc())
    whole = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    at_top = position == F.first(position).over(whole)
    # the content (op and row image) of the key's latest event, compared field by field: a struct of
    # the two would be projected before the shuffle, a second copy of every image
    differs = ~(
        F.col("_cdc_op").eqNullSafe(F.first("_cdc_op").over(whole))
        & F.col("image").eqNullSafe(F.first("image").over(whole))
    )
    # the first row of its partition at its position in this order: that partition's last event there
    head = F.coalesce((F.lag(partition).over(w) != partition) | (F.lag(position).over(w) != position), F.lit(True))
    flagged = placed.select(
        "*",
        F.row_number().over(w).alias("_rn"),
        (at_top & differs).alias("_tied_here"),
        F.when(
            at_top & differs & head & (partition != F.first(partition).over(whole)),
            F.struct(partition.alias("partition"), offset.alias("offset")),
        ).alias("_unordered_here"),
    )
    return flagged.select(
        "*",
        F.max("_tied_here").over(whole).alias(TIED),
        # the greatest partition's: as batch_pick
        F.max("_unordered_here").over(whole).alias(_UNORDERED),
    ).drop("_tied_here", "_unordered_here", *keys, _POSITION, _PARTITION, _OFFSET)


def reduce_latest(events: DataFrame, primary_key: tuple[str, ...], ordering: str) -> DataFrame:
    """Keep, per primary key, the event at the greatest place (position, Kafka partition, offset),
    with :data:`TIED`. A key whose latest event has an event of other content at its position in
    another partition fails the Spark job that computes it (see :func:`reduce_batch`)."""
    from pyspark.sql import functions as F

    unordered = F.col(_UNORDERED)
    return (
        _ranked(events, primary_key, ordering)
        .filter(F.col("_rn") == 1)
        # fails the job that computes the batch anyway (reduce_batch's count): a check
        # of its own would cost every run a Spark job
        .filter(F.when(unordered.isNotNull(), F.raise_error(F.lit(_UNORDERED_MARKER))).otherwise(F.lit(True)))
        .drop("_rn", _UNORDERED)
    )


def reduce_batch(
    ctx: ApplyContext, rows: DataFrame, columns: list[Column | str], *, persist: bool = False
) -> tuple[DataFrame, int]:
    """The merge source of a batch: :func:`reduce_latest`, then the tombstones
    (:func:`apply_tombstones`); returns it (``columns`` and :data:`TIED`) with its row count, and
    logs once when ties at one position were broken by Kafka offset. ``columns`` name the primary
    key's columns and the metadata columns (:data:`~cdclake.model.layout.METADATA_COLUMNS`) as
    themselves: the batch's deletes are recorded from them (:func:`record_tombstones`). With
    ``persist`` (a caller that reads the source more than once), the source is persisted when
    first computed, and the caller unpersists it.

    The reduction (a sort of the batch by key) runs once: its rows are checkpointed (kept on the
    executors, their plan cut off), and one job counts them, their ties, their deletes and the rows
    the tombstones recorded before this run keep. The batch's deletes are then recorded, and the
    merge source is the checkpoint joined with the tombstones again: the same rows whether the
    tombstones are read before or after the batch's own, since every delete survives and the batch
    records none for a key whose latest event is an upsert. Persisted only after the tombstone
    ``MERGE``: Spark refreshes the cached data of every plan that reads a table it writes. Not
    persisted, the ``MERGE`` reads the checkpoint (1,000,000 events: 0.3 s less than filling a
    cache first). Checkpointed, not only persisted: over Spark Connect the ``MERGE`` carries its
    source's whole plan in one protobuf message, which the client refuses past 100 levels of
    nesting (an Avro batch of several writer schemas and many columns reached it).

    A table whose tombstone table holds none (:func:`has_tombstones`: most tables of a fleet, and
    every new one) has nothing to supersede the batch's events: its merge source is the reduction
    as is, with no tombstone table read or joined (the batch's deletes are recorded all the same).

    Raises:
        PositionOrderError: a key's latest event has an event of other content at its position in
            another partition (:func:`~cdclake.model.position.unordered_message`); nothing was
            written.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    try:
        reduced = (
            reduce_latest(rows, cfg.primary_key, cfg.ordering)
            .select(*columns, TIED)
            .localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
        )
    except Exception as e:  # noqa: BLE001 - Spark wraps the raised error in several types
        if _UNORDERED_MARKER not in str(e):
            raise
        raise _unordered_error(ctx, rows) from e
    # the tombstones of earlier runs, looked up before this one records its own (the table is loaded once)
    tombstones = _tombstone_table(ctx) if has_tombstones(ctx) else None
    kept = _kept(ctx, reduced, tombstones) if tombstones else reduced.withColumn(_KEPT, F.lit(True))
    counts = kept.agg(
        F.sum(F.col(TIED).cast("int")).alias("tied"),
        F.count_if(F.col("_cdc_op") == "d").alias("deletes"),
        F.count_if(_KEPT).alias("kept"),
    ).collect()[0]
    if counts["deletes"]:
        record_tombstones(ctx, reduced)
    source = apply_tombstones(ctx, reduced, tombstones) if tombstones else reduced
    if persist:  # a plan of its own over the checkpoint, even without tombstones: the caller unpersists it
        source = source.select("*").persist(StorageLevel.MEMORY_AND_DISK)
    if counts["tied"] and cfg.ordering in SOURCE_ORDERINGS:
        log.warning(
            "table %s: %d key(s) had events of other content at the position of their latest event; each "
            "was ordered by Kafka offset within its partition (Debezium's emission order). MySQL's "
            "binlog_transaction_compression=ON gives every rows event of a compressed transaction one "
            "position (docs/operations.md, 'Events sharing one position')",
            cfg.identifier,
            counts["tied"],
        )
    return source, int(counts["kept"])


def _unordered_error(ctx: ApplyContext, rows: DataFrame) -> PositionOrderError:
    """The error naming the first key's latest event and the event it has no order with."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    first = (
        _ranked(rows, cfg.primary_key, cfg.ordering)
        .filter((F.col("_rn") == 1) & F.col(_UNORDERED).isNotNull())
        .select("position", "partition", "offset", _UNORDERED)
        .orderBy("partition", "offset")
        .first()
    )
    assert first is not None  # the Spark job failed on such a row
    position = position_of(first["position"])
    places = [
        EventPlace(position, int(first["partition"]), int(first["offset"])),
        EventPlace(position, int(first[_UNORDERED]["partition"]), int(first[_UNORDERED]["offset"])),
    ]
    return PositionOrderError(unordered_message(cfg.topic, cfg.ordering, sorted(places)))


_KEPT = "_cdc_kept"
"""Column of :func:`_kept`'s rows: the tombstones do not supersede the row's event."""


def _kept(ctx: ApplyContext, reduced: DataFrame, tombstones: str) -> DataFrame:
    """``reduced`` (one event per key: its primary key's columns and the metadata columns by name)
    joined with the tombstone table ``tombstones`` (its Spark name), with :data:`_KEPT`: false for an upsert its key's tombstone supersedes
    (:func:`~cdclake.model.position.supersedes`: at or below it, ties by Kafka offset); every
    delete is kept (:func:`record_tombstones` records them)."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    tomb = ctx.spark.table(tombstones).alias(_TOMB_ALIAS)
    cond = all_of([F.col(qualified(_EVENT, c)) == F.col(qualified(_TOMB, c)) for c in cfg.primary_key])
    joined = reduced.alias(_EVENT_ALIAS).join(tomb, cond, "left")
    kept = (
        F.col(qualified(_TOMB, cfg.primary_key[0])).isNull()
        | (F.col(qualified(_EVENT, "_cdc_op")) == "d")
        | supersedes_column(cfg.ordering, _EVENT, _TOMB, stored_change=True)
    )
    return joined.select(f"{_EVENT}.*", kept.alias(_KEPT))


def apply_tombstones(ctx: ApplyContext, reduced: DataFrame, tombstones: str) -> DataFrame:
    """The rows of ``reduced`` (as :func:`_kept`'s) that their key's tombstone does not supersede:
    the surviving merge source."""
    from pyspark.sql import functions as F

    return _kept(ctx, reduced, tombstones).filter(F.col(_KEPT)).drop(_KEPT)


def has_tombstones(ctx: ApplyContext) -> bool:
    """Whether the table's tombstone table may hold a row: its current snapshot's
    ``total-records`` (rows of its data files, from the catalog: no Spark job) is not 0. ``False``
    when it does not exist: it is created by the table's first delete (:func:`record_tombstones`)."""
    tombstones = ctx.side_table(TOMBSTONES_SUFFIX)
    snapshot = tombstones.current_snapshot() if tombstones is not None else None
    if snapshot is None:
        return False
    total = snapshot.summary.get("total-records") if snapshot.summary is not None else None
    return total is None or int(total) > 0  # without the figure: read them


def record_tombstones(ctx: ApplyContext, source: DataFrame) -> None:
    """Record the deletes of ``source`` (one event per key: the primary key's columns and the
    metadata columns by name) as their keys' tombstones: a ``MERGE`` into the tombstone table, its
    own commit. A tombstone only moves to a delete that supersedes it
    (:func:`~cdclake.model.position.supersedes`), so a replayed older delete changes nothing."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    name = _tombstone_table(ctx)
    deletes = source.filter(F.col("_cdc_op") == "d").select(
        *cfg.primary_key,
        *[n for n, _, _ in TOMBSTONE_COLUMNS if n != "_cdc_recorded_at"],
        F.current_timestamp().alias("_cdc_recorded_at"),
    )
    tombstones = ctx.side_table(TOMBSTONES_SUFFIX)
    earlier_key = (
        [] if tombstones is None else [f.name for f in tombstones.schema().fields if f.name not in deletes.columns]
    )
    if earlier_key:  # a primary key changed at the source: the old key's columns are null in new tombstones
        types = {f.name: f.dataType for f in ctx.spark.table(name).schema.fields}
        deletes = deletes.select(*deletes.columns, *[F.lit(None).cast(types[c]).alias(c) for c in earlier_key])
    newer = supersedes_column(cfg.ordering, SOURCE, name, event_change=True, stored_change=True)
    merge_into(deletes, name, cfg.primary_key).whenMatched(newer).updateAll().whenNotMatched().insertAll().merge()


def _tombstone_table(ctx: ApplyContext) -> str:
    """The tombstone table's Spark name, the table created first when missing."""
    by_name = {c.name: c for c in ctx.columns}
    pk_fields = [(c, by_name[c].iceberg_type, True) for c in ctx.cfg.primary_key]
    ctx.side_table(
        TOMBSTONES_SUFFIX,
        pk_fields + [(n, t, False) for n, t, _ in TOMBSTONE_COLUMNS],
        {n: d for n, _, d in TOMBSTONE_COLUMNS},
    )
    return ctx.spark_name(TOMBSTONES_SUFFIX)
