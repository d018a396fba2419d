"""The change feed's write (Spark): the change rows of one run, committed to ``<table>__changes``
just before the table's own commit (:mod:`cdclake.model.changes` has the layout and the rules).

The rows are the run's merge source (one event per key, after the truncate and snapshot floors
and the delete tombstones) joined with the table at the run's base snapshot by key, so that only
the events the ``MERGE`` applies are kept (:func:`cdclake.spark.commit.merge`): an upsert or delete
whose event supersedes the stored row, an upsert of a key the table lacks. The run's truncate, if
any, is one ``t`` row; the rows a completed full snapshot deletes (it did not read them) are
``d`` rows marked ``repair`` (:mod:`cdclake.model.changes`).
"""

from __future__ import annotations

import logging
import operator
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.io.changes import ensure_changes_table
from cdclake.model.changes import BASE_SNAPSHOT_COLUMN, CHANGES_SUFFIX, RUN_ID_COLUMN, TRANSACTION_COLUMN
from cdclake.model.decision import RunDecision, starting_state
from cdclake.model.history import CHANGE_COLUMN, CHANGE_EVENT, CHANGE_REPAIR
from cdclake.model.layout import METADATA_COLUMNS, SummaryKeys
from cdclake.model.position import BinlogPosition
from cdclake.spark.context import ApplyContext
from cdclake.spark.names import qualified, quote_identifier
from cdclake.spark.positions import position_column, position_literal, supersedes_column

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

_EVENT_ALIAS, _STORED_ALIAS = "cdc-change", "cdc-stored"
"""Aliases of the merge source and of the table in their join (hyphenated: apart from every
column and table name, as :data:`cdclake.spark.merge.SOURCE_ALIAS`)."""

_EVENT, _STORED = quote_identifier(_EVENT_ALIAS), quote_identifier(_STORED_ALIAS)


def event_columns() -> list[Column]:
    """The columns of the batch's events the change rows need beyond the table's: the merge source
    carries them when the table has a change feed (:func:`cdclake.spark.reduce.reduce_batch`'s
    ``columns``)."""
    from pyspark.sql import functions as F

    return [F.col("transaction_id").alias(TRANSACTION_COLUMN)]


def write_changes(ctx: ApplyContext, source: DataFrame, good: DataFrame, decision: RunDecision) -> dict[str, str]:
    """Commit the run's change rows to the table's change feed (created when missing) and return
    the summary properties of the table's commit that name them
    (:attr:`~cdclake.model.layout.SummaryKeys.CHANGES_SNAPSHOT`, ``CHANGES_ROWS``).

    The write is Iceberg's overwrite by filter: it replaces the rows whose
    ``_cdc_base_snapshot_id`` is the run's base snapshot (an earlier try of the run left them, and
    never committed the table), in one commit; rows of committed runs have other bases. It is
    validated from the feed's snapshot read here (``isolation-level`` ``serializable``): a run
    that committed rows on the same base meanwhile makes it fail.

    Args:
        ctx: the run.
        source: the merge source (:func:`cdclake.spark.reduce.reduce_batch`, with :func:`event_columns`).
        good: the batch's applicable events (the truncate events among them).
        decision: the run's decision (its truncate).

    Raises:
        ConcurrentRunError: the table moved since the run's base snapshot (another run
            committed): nothing is written.
    """
    from pyspark.sql import functions as F

    base = ctx.state.snapshot_id
    ctx.check_at_base()
    changes = ensure_changes_table(ctx.catalog, ctx.cfg.identifier, ctx.table)
    before = changes.current_snapshot()
    writer = _change_rows(ctx, source, good, decision).writeTo(ctx.spark_name(CHANGES_SUFFIX))
    if before is not None:
        writer = writer.option("validate-from-snapshot-id", str(before.snapshot_id))
        writer = writer.option("isolation-level", "serializable")
    ours = F.col(BASE_SNAPSHOT_COLUMN)
    writer.overwrite(ours.isNull() if base is None else ours == F.lit(base))
    head = changes.refresh().current_snapshot()
    if head is None or (before is not None and head.snapshot_id == before.snapshot_id):
        raise RuntimeError(f"table {ctx.cfg.identifier}: the change feed's overwrite committed no snapshot")
    rows = head.summary.additional_properties.get("added-records", "0") if head.summary is not None else "0"
    log.info("table %s: %s change rows in snapshot %s of its change feed", ctx.cfg.identifier, rows, head.snapshot_id)
    return {SummaryKeys.CHANGES_SNAPSHOT: str(head.snapshot_id), SummaryKeys.CHANGES_ROWS: rows}


def _change_rows(ctx: ApplyContext, source: DataFrame, good: DataFrame, decision: RunDecision) -> DataFrame:
    """The run's change rows in the feed's columns: the applied events of ``source`` (a delete
    keeps its key only), the truncate's ``t`` row, then the repairs of a completed full snapshot
    (:func:`_repairs`)."""
    from pyspark.sql import functions as F

    keys = set(ctx.cfg.primary_key)
    names = [c.name for c in ctx.columns]
    meta = [n for n, _, _ in METADATA_COLUMNS]
    deleting = F.col("_cdc_op") == "d"
    feed = [
        F.lit(ctx.plan.run_id).alias(RUN_ID_COLUMN),
        F.lit(ctx.state.snapshot_id).cast("bigint").alias(BASE_SNAPSHOT_COLUMN),
    ]
    event = F.lit(CHANGE_EVENT).alias(CHANGE_COLUMN)
    image: list[Column | str] = [n if n in keys else F.when(~deleting, F.col(n)).alias(n) for n in names]
    rows = _applied(ctx, source).select(*image, *meta, TRANSACTION_COLUMN, *feed, event)
    # a truncate at or below the floor the run starts from is one an earlier run applied, emitted
    # again by Debezium after a restart: the table discards it, and so does the feed
    floor = starting_state(ctx.state, ctx.plan).truncate_floor
    if decision.truncate is not None and (floor is None or decision.truncate > floor):
        truncate = good.filter((F.col("op") == "t") & (F.col("position") == position_literal(decision.truncate)))
        image = [F.col("image")[n].alias(n) for n in names]
        rows = rows.unionByName(truncate.limit(1).select(*image, *meta, *event_columns(), *feed, event))
    if decision.completed is not None and ctx.state.snapshot_id is not None:
        rows = rows.unionByName(_repairs(ctx, source, good, decision, decision.completed, feed))
    return rows


def _repairs(
    ctx: ApplyContext,
    source: DataFrame,
    good: DataFrame,
    decision: RunDecision,
    completed: BinlogPosition,
    feed: list[Column],
) -> DataFrame:
    """The ``d`` rows (marked :data:`~cdclake.model.history.CHANGE_REPAIR`) of the rows the
    ``MERGE`` deletes because the full snapshot completed at ``completed`` did not read them
    (:func:`cdclake.spark.commit.merge`): the table's rows at the run's base snapshot below that
    position whose key the merge source lacks, above the run's truncate (whose ``t`` row deletes
    the rows below it); every row but the source's when the run accepts a new binlog history (it
    demotes them all), none when it also truncates. A row's ``_cdc_source_ts`` is the newest source
    time of the snapshot's reads in the batch (the run's time when it has none), its other metadata
    columns NULL: no event made the change."""
    from pyspark.sql import functions as F

    cfg, keys = ctx.cfg, list(ctx.cfg.primary_key)
    stored = ctx.spark.read.option("versionAsOf", str(ctx.state.snapshot_id)).table(ctx.spark_name())
    position = position_column(cfg.ordering)
    if ctx.plan.accept_source_change:
        below = stored.filter(F.lit(decision.truncate is None))
    else:
        below = stored.filter(position < position_literal(completed))
        if decision.truncate is not None:
            below = below.filter(position >= position_literal(decision.truncate))
    gone = below.select(*keys).join(source.select(*keys), keys, "left_anti")
    reads = good.filter(F.col("position") == position_literal(completed))
    read_at = reads.agg(F.max("_cdc_source_ts").alias("_cdc_read_ts"))
    # the table's schema now, not the base snapshot's: a column this run added is NULL here too
    types = {f.name: f.dataType for f in ctx.spark.table(ctx.spark_name()).schema.fields}
    fixed = {
        "_cdc_op": F.lit("d"),
        "_cdc_source_ts": F.coalesce(F.col("_cdc_read_ts"), F.current_timestamp()),
    }
    columns = [c.name for c in ctx.columns] + [n for n, _, _ in METADATA_COLUMNS]
    image = [F.col(n) if n in keys else fixed.get(n, F.lit(None)).cast(types[n]).alias(n) for n in columns]
    return gone.crossJoin(read_at).select(
        *image,
        F.lit(None).cast("string").alias(TRANSACTION_COLUMN),
        *feed,
        F.lit(CHANGE_REPAIR).alias(CHANGE_COLUMN),
    )


def _applied(ctx: ApplyContext, source: DataFrame) -> DataFrame:
    """The rows of ``source`` the run's ``MERGE`` applies, by the merge's own conditions against
    the table at the run's base snapshot. A run that accepts a new binlog history demotes every
    row first (:func:`cdclake.spark.commit.demote_rows`): each event of the new history
    supersedes them."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    deleting = F.col(qualified(_EVENT, "_cdc_op")) == "d"
    if ctx.state.snapshot_id is None:
        return source.filter(F.col("_cdc_op") != "d")
    stored = (
        ctx.spark.read.option("versionAsOf", str(ctx.state.snapshot_id))
        .table(ctx.spark_name())
        .select(*cfg.primary_key, *[n for n, _, _ in METADATA_COLUMNS])
    )
    on = reduce(operator.and_, [F.col(qualified(_EVENT, k)) == F.col(qualified(_STORED, k)) for k in cfg.primary_key])
    joined = source.alias(_EVENT_ALIAS).join(stored.alias(_STORED_ALIAS), on, "left")
    found = F.col(qualified(_STORED, cfg.primary_key[0])).isNotNull()
    newer = F.lit(True) if ctx.plan.accept_source_change else supersedes_column(cfg.ordering, _EVENT, _STORED)
    return joined.filter((found & newer) | (~found & ~deleting)).select(f"{_EVENT}.*")
