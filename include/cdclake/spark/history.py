"""The history's write (Spark): the versions of one run, committed to ``<table>__history`` just
before the table's own commit (:mod:`cdclake.model.history` has the layout and the rules).

Statements, each its own commit of the history:

0. while the history holds no version and the table has rows at the run's base snapshot, the
   seed: one open version per row (an append; :data:`~cdclake.model.history.CHANGE_SEED`);
1. the run's versions: every event the guard keeps (not the latest per key only), chained by
   position within each key (a version below one of the run's truncates ends there at the
   latest): first each key's open version closed at the key's first version of the run (a
   ``MERGE`` of one closing row per key), then the versions appended (two commits);
2. per truncate of the run, in position order: every version valid across its position (open, or
   closed above it) ends there;
3. when the run completes a full snapshot, the lake's repair of its table (the rows below the
   snapshot's position that it did not read go): each such key's open version ends at the
   snapshot's position and a deleted version (:data:`~cdclake.model.history.CHANGE_REPAIR`) opens
   there, as a delete event's would;
4. when the run fills a column's default into the table's rows below its ``ADD COLUMN``: the
   same default into the versions valid across that position (open, or ended above it by the
   run's later events or truncates), in place.

**A retried try does not double them.** The guard takes only events that supersede every version
of their key the history holds. An earlier try of the run that committed the history but not the
table left its versions there, so its retry finds none of the same events new, and its truncates
find no version valid across them: the statements change nothing. A retry whose range reaches
further (the planner read higher watermarks) adds the versions of the further events only. The
seed is appended only to a history without a version: a retry finds it (or the try's versions)
there and seeds nothing. The repairs take only versions not yet repaired (3: open, not deleted,
below the position; 4: valid across the position, a value other than the default), which a retry
finds none of. The statements are written to a branch of the history created at its ``main``,
then ``main`` is fast-forwarded to it (:func:`cdclake.spark.commit.side_branch`), which the
catalog refuses when ``main`` moved since: a try killed in Airflow whose statements the shared
engine still ran may write the history after its retry read it, and without the check both would
add the same versions.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.io.history import ensure_history_table
from cdclake.model.decision import RunDecision, starting_state
from cdclake.model.history import (
    CHANGE_COLUMN,
    CHANGE_EVENT,
    CHANGE_REPAIR,
    CHANGE_SEED,
    HISTORY_SUFFIX,
    IS_CURRENT_COLUMN,
    IS_DELETED_COLUMN,
    POSITION_TYPE,
    RUN_ID_COLUMN,
    VALID_FROM_POSITION_COLUMN,
    VALID_FROM_TS_COLUMN,
    VALID_TO_POSITION_COLUMN,
    VALID_TO_TS_COLUMN,
)
from cdclake.model.layout import METADATA_COLUMNS, TOMBSTONES_SUFFIX, SummaryKeys
from cdclake.model.position import BinlogPosition
from cdclake.spark.commit import SideBranch, demote_rows, side_branch
from cdclake.spark.context import ApplyContext
from cdclake.spark.flat import any_of
from cdclake.spark.merge import SOURCE_ALIAS, source_column
from cdclake.spark.names import qualified, quote_identifier, quote_string
from cdclake.spark.positions import (
    position_column,
    position_literal,
    position_literal_sql,
    position_of,
    supersedes_column,
)
from cdclake.spark.session import unpersist_quietly

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)

_EVENT_ALIAS, _KNOWN_ALIAS = "cdc-version", "cdc-known"
"""Aliases of the run's events and of what the lake knows of their keys, in the guard's join
(hyphenated: apart from every column and table name, as :data:`cdclake.spark.merge.SOURCE_ALIAS`)."""

_EVENT, _KNOWN = quote_identifier(_EVENT_ALIAS), quote_identifier(_KNOWN_ALIAS)

_KIND = "_cdc_history_kind"
"""Column of :func:`_merge_versions`' source: :data:`_VERSION` (a row to insert) or :data:`_CLOSE`
(the key's open version to close)."""

_VERSION, _CLOSE = "version", "close"

_FIRST = "_cdc_first"
"""Column of :func:`_versions`: the version is its key's first of the run."""

_FILE_SEQ = "_cdc_binlog_file_seq"
"""The metadata column a demoted version holds -1 in (:func:`_demote_versions`)."""

_PLACE_COLUMNS = (
    "_cdc_snapshot",
    "_cdc_binlog_file_seq",
    "_cdc_binlog_pos",
    "_cdc_binlog_row",
    "_cdc_gtid_seq",
    "_cdc_kafka_partition",
    "_cdc_kafka_offset",
)
"""The metadata columns an event's place is read from (:func:`~cdclake.spark.positions.place_columns`)."""


@dataclass(frozen=True)
class _Truncate:
    """A truncate of the run: its position and source time (epoch microseconds; ``None``: the
    event carried no ``ts_ms``)."""

    position: BinlogPosition
    ts_us: int | None

    def ts(self) -> Column:
        from pyspark.sql import functions as F

        return F.lit(None).cast("timestamp") if self.ts_us is None else F.timestamp_micros(F.lit(self.ts_us))


def write_history(ctx: ApplyContext, good: DataFrame, decision: RunDecision, source: DataFrame) -> dict[str, str]:
    """Commit the run's versions to the table's history (created when missing) and return the
    summary property of the table's commit that names the history's snapshot
    (:attr:`~cdclake.model.layout.SummaryKeys.HISTORY_SNAPSHOT`; none while the history has none).

    The events are the batch's upserts and deletes above the truncate floor the run started from
    and the run's snapshot floor: an event below one of the run's own truncates was the source's
    state until that truncate, though the table discards it.

    Args:
        ctx: the run.
        good: the batch's applicable events (with ``op``, ``image``, ``position`` and the
            metadata columns).
        decision: the run's decision (its snapshot floor, the full snapshot it completes, the
            defaults it fills).
        source: the run's merge source (:func:`cdclake.spark.reduce.reduce_batch`): the keys a
            completed full snapshot keeps.

    Raises:
        ConcurrentRunError: the table moved since the run's base snapshot (another run
            committed), or another try of the run wrote the history since this one read it (a
            task killed while its engine went on): nothing is written.
    """

    ctx.check_at_base()
    history = ensure_history_table(ctx.catalog, ctx.cfg.identifier, ctx.table)
    what = f"the history of table {ctx.cfg.identifier}"
    with side_branch(ctx.spark, history, ctx.spark_name(HISTORY_SUFFIX), what, pause="history") as branch:
        counts = _write_versions(ctx, history, branch, good, decision, source)
    head = history.refresh().current_snapshot()
    log.info(
        "table %s: %d version(s) seeded, %d added to its history, %d truncate(s), %d key(s) a full snapshot "
        "did not read ended (snapshot %s)",
        ctx.cfg.identifier,
        *counts,
        head.snapshot_id if head is not None else None,
    )
    # not the versions added: a retry adds none of those its earlier try added
    return {} if head is None else {SummaryKeys.HISTORY_SNAPSHOT: str(head.snapshot_id)}


def _write_versions(
    ctx: ApplyContext, history: Table, branch: SideBranch, good: DataFrame, decision: RunDecision, source: DataFrame
) -> tuple[int, int, int, int]:
    """The statements of :func:`write_history` on the history's ``branch``; returns the versions
    seeded and added, the truncates and the keys a full snapshot did not read."""
    from pyspark.sql import functions as F

    target = branch.target
    seeded = _seed(ctx, history, branch)  # before the versions: their guard and closing rows see it
    if ctx.plan.accept_source_change:
        _demote_versions(ctx, target)
    events = good
    floor = starting_state(ctx.state, ctx.plan).truncate_floor  # none of an abandoned binlog history
    if floor is not None:
        events = events.filter(F.col("position") > position_literal(floor))
    truncates = _truncates(events) if decision.truncate is not None else []  # none in the batch: no job
    events = events.filter(F.col("op") != "t")
    if decision.state.snapshot_floor is not None:
        events = events.filter(F.col("position") >= position_literal(decision.state.snapshot_floor))
    versions = _versions(ctx, events, target, truncates)
    try:
        added = versions.count()
        if added:
            _close_and_append(ctx, target, versions)
    finally:
        unpersist_quietly(versions)
    for truncate in truncates:
        _end_at_truncate(ctx.spark, target, truncate)
    repaired = 0 if decision.completed is None else _end_unread(ctx, target, source, decision.completed)
    for column, (position, sql) in decision.backfill.items():
        _fill_default(ctx.spark, target, column, position, sql)
    return seeded, added, len(truncates), repaired


def _holds_versions(spark: SparkSession, history: Table, target: str) -> bool:
    """Whether the history holds a version: its snapshot's ``total-records`` (rows of its data
    files; a run never deletes a version, it updates it), or a read when the summary lacks it."""
    head = history.current_snapshot()
    if head is None:
        return False
    total = head.summary.get("total-records") if head.summary is not None else None
    if total is not None:
        return int(total) > 0
    return not spark.table(target).isEmpty()


def _seed(ctx: ApplyContext, history: Table, branch: SideBranch) -> int:
    """Seed a history that holds no version yet with the table's rows at the run's base snapshot:
    one open version per row, valid from the row's own source time and position
    (:mod:`cdclake.model.history`, "Seed"), in one append. Returns the rows seeded (0: the
    history holds versions, or the table had no rows or no snapshot)."""
    from pyspark.sql import functions as F

    base = ctx.state.snapshot_id
    target = branch.target
    if base is None or _holds_versions(ctx.spark, history, target):
        return 0
    rows = ctx.spark.read.option("versionAsOf", str(base)).table(ctx.spark_name())
    if rows.isEmpty():
        return 0
    # the base snapshot's schema: a column this run added is NULL in its rows
    types = {f.name: f.dataType for f in ctx.spark.table(ctx.spark_name()).schema.fields}
    present = set(rows.columns)
    names = [c.name for c in ctx.columns] + [n for n, _, _ in METADATA_COLUMNS]
    seed = rows.select(
        *[F.col(n) if n in present else F.lit(None).cast(types[n]).alias(n) for n in names],
        F.col("_cdc_source_ts").alias(VALID_FROM_TS_COLUMN),
        position_column(ctx.cfg.ordering).alias(VALID_FROM_POSITION_COLUMN),
        F.lit(None).cast("timestamp").alias(VALID_TO_TS_COLUMN),
        F.lit(None).cast(POSITION_TYPE).alias(VALID_TO_POSITION_COLUMN),
        F.lit(True).alias(IS_CURRENT_COLUMN),
        F.lit(False).alias(IS_DELETED_COLUMN),
        F.lit(ctx.plan.run_id).alias(RUN_ID_COLUMN),
        F.lit(CHANGE_SEED).alias(CHANGE_COLUMN),
    )
    seed.writeTo(target).append()
    head = history.refresh().snapshot_by_name(branch.name)
    added = head.summary.get("added-records") if head is not None and head.summary is not None else None
    seeded = int(added) if added is not None else seed.count()
    log.info(
        "table %s: its history held no version: seeded with the %d row(s) of snapshot %s (%s = '%s')",
        ctx.cfg.identifier,
        seeded,
        base,
        CHANGE_COLUMN,
        CHANGE_SEED,
    )
    return seeded


def _truncates(events: DataFrame) -> list[_Truncate]:
    """The truncates among ``events``, in position order (one Spark job; a batch holds few)."""
    from pyspark.sql import functions as F

    found = (
        events.filter(F.col("op") == "t")
        .select("position", F.unix_micros("_cdc_source_ts").alias("ts_us"))
        .dropDuplicates(["position"])
        .collect()
    )
    return sorted((_Truncate(position_of(r["position"]), r["ts_us"]) for r in found), key=lambda t: t.position)


def _end_at_truncate(spark: SparkSession, target: str, truncate: _Truncate) -> None:
    """End every version valid across ``truncate`` (from below its position to above it, or open)
    at its source time and position: the open ones, and those a later version closed when the
    truncate comes late from another Kafka partition (the table keeps rows above a truncate)."""
    from pyspark.sql import functions as F

    at = position_literal(truncate.position)
    row = spark.range(1).select(at.alias(VALID_TO_POSITION_COLUMN), truncate.ts().alias(VALID_TO_TS_COLUMN))
    valid_to = F.col(qualified(target, VALID_TO_POSITION_COLUMN))
    across = (F.col(qualified(target, VALID_FROM_POSITION_COLUMN)) < at) & (valid_to.isNull() | (valid_to > at))
    row.alias(SOURCE_ALIAS).mergeInto(target, across).whenMatched().update(_closing()).merge()


def _end_unread(ctx: ApplyContext, target: str, source: DataFrame, completed: BinlogPosition) -> int:
    """The full snapshot at ``completed`` deletes from the table the rows below its position whose
    key the merge source lacks (:func:`cdclake.spark.commit.merge`; every row when the run accepts
    a new binlog history, which demotes them): end those keys' open versions at the snapshot's
    position and add a deleted version there (:data:`~cdclake.model.history.CHANGE_REPAIR`), as a
    delete event does. Its source time is the newest of the snapshot's reads in the history (the
    time Debezium read them), or the run's time when the history holds none (the snapshot read no
    row). Returns the keys ended (0 on a retry: their open versions are deleted ones)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    spark, keys = ctx.spark, list(ctx.cfg.primary_key)
    at = position_literal(completed)
    history = spark.table(target)
    open_versions = history.filter(F.col(IS_CURRENT_COLUMN) & ~F.col(IS_DELETED_COLUMN))
    if not ctx.plan.accept_source_change:
        open_versions = open_versions.filter(F.col(VALID_FROM_POSITION_COLUMN) < at)
    gone = open_versions.select(*keys).join(source.select(*keys), keys, "left_anti")
    [read] = history.filter(F.col(VALID_FROM_POSITION_COLUMN) == at).agg(F.max(VALID_FROM_TS_COLUMN)).collect()
    ts = F.lit(read[0]) if read[0] is not None else F.current_timestamp()
    types = {f.name: f.dataType for f in history.schema.fields}
    fixed = {
        "_cdc_op": F.lit("d"),
        VALID_FROM_TS_COLUMN: ts,
        VALID_FROM_POSITION_COLUMN: at,
        IS_CURRENT_COLUMN: F.lit(True),
        IS_DELETED_COLUMN: F.lit(True),
        RUN_ID_COLUMN: F.lit(ctx.plan.run_id),
        CHANGE_COLUMN: F.lit(CHANGE_REPAIR),
        _FIRST: F.lit(True),
    }
    deleted = gone.select(
        *[
            F.col(n) if n in keys else fixed.get(n, F.lit(None)).cast(types[n]).alias(n)
            for n in [f.name for f in history.schema.fields]
        ],
        fixed[_FIRST].alias(_FIRST),
    ).localCheckpoint(
        eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK
    )  # its plan reads the history, which the merge writes
    try:
        ended = deleted.count()
        if ended:
            _merge_versions(ctx, target, deleted)
            log.info(
                "table %s: the full snapshot at %s did not read %d key(s): their versions end there (%s = '%s')",
                ctx.cfg.identifier,
                completed.to_event_text(),
                ended,
                CHANGE_COLUMN,
                CHANGE_REPAIR,
            )
    finally:
        unpersist_quietly(deleted)
    return ended


def _fill_default(spark: SparkSession, target: str, column: str, position: BinlogPosition, sql: str) -> None:
    """The table's rows below the ``ADD COLUMN`` at ``position`` get the column's default in the
    run's commit (:func:`cdclake.spark.apply._write`), as the run's events below it do: the
    versions valid across it get it too, in place: the open ones, and those the run's own later
    events or truncates ended above it (run after them), whose rows read the default from the
    ``ALTER`` on. No version is added (the source's rows read the default, not a change;
    ``_cdc_change`` keeps its value)."""
    name = quote_identifier(column)
    at = position_literal_sql(position)
    valid_to = quote_identifier(VALID_TO_POSITION_COLUMN)
    spark.sql(
        f"UPDATE {target} SET {name} = {sql} WHERE NOT {quote_identifier(IS_DELETED_COLUMN)} "
        f"AND {quote_identifier(VALID_FROM_POSITION_COLUMN)} < {at} "
        f"AND ({valid_to} IS NULL OR {valid_to} > {at}) "
        f"AND NOT ({name} <=> {sql})"
    )


def _closing() -> dict[str, Column]:
    """The assignments that end a target version at its source row's ``valid_to``."""
    from pyspark.sql import functions as F

    return {
        quote_identifier(VALID_TO_TS_COLUMN): source_column(VALID_TO_TS_COLUMN),
        quote_identifier(VALID_TO_POSITION_COLUMN): source_column(VALID_TO_POSITION_COLUMN),
        quote_identifier(IS_CURRENT_COLUMN): F.lit(False),
    }


def _versions(ctx: ApplyContext, events: DataFrame, target: str, truncates: list[_Truncate]) -> DataFrame:
    """The run's new versions of each key, chained by position, with :data:`_FIRST`, persisted (a
    local checkpoint: its plan, which reads the history, is cut off before the history is written;
    the caller unpersists it)."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    keys = list(cfg.primary_key)
    meta = [n for n, _, _ in METADATA_COLUMNS]
    deleting = F.col("_cdc_op") == "d"
    events = events.select(*[F.col("image")[c.name].alias(c.name) for c in ctx.columns], *meta, F.col("position"))
    # several events of a key at one position (a compressed transaction): the last one, by offset
    at_position = Window.partitionBy(*keys, "position").orderBy(
        F.col("_cdc_kafka_partition").desc(), F.col("_cdc_kafka_offset").desc()
    )
    events = events.withColumn("_rn", F.row_number().over(at_position)).filter("_rn = 1").drop("_rn")
    if ctx.plan.accept_source_change:  # a new binlog history's positions compare with nothing kept
        events = _above_known(ctx, events, target, this_run_only=True)  # but an earlier try's
    else:
        events = _new_to_the_lake(ctx, events, target)
    chain = Window.partitionBy(*keys).orderBy("position")
    position = F.col("position")
    next_position, next_ts = F.lead("position").over(chain), F.lead("_cdc_source_ts").over(chain)
    # the run's first truncate above the version, where it ends unless the next version comes first
    cap_position: Column | None = None
    cap_ts: Column | None = None
    for truncate in truncates:
        below, at = position < position_literal(truncate.position), position_literal(truncate.position)
        cap_position = F.when(below, at) if cap_position is None else cap_position.when(below, at)
        cap_ts = F.when(below, truncate.ts()) if cap_ts is None else cap_ts.when(below, truncate.ts())
    valid_to_position, valid_to_ts = next_position, next_ts
    if cap_position is not None and cap_ts is not None:
        capped = cap_position.isNotNull() & (next_position.isNull() | (next_position > cap_position))
        valid_to_position = F.when(capped, cap_position).otherwise(next_position)
        valid_to_ts = F.when(capped, cap_ts).otherwise(next_ts)
    versions = events.select(
        *[c.name if c.name in keys else F.when(~deleting, F.col(c.name)).alias(c.name) for c in ctx.columns],
        *meta,
        F.col("_cdc_source_ts").alias(VALID_FROM_TS_COLUMN),
        position.alias(VALID_FROM_POSITION_COLUMN),
        valid_to_ts.alias(VALID_TO_TS_COLUMN),
        valid_to_position.alias(VALID_TO_POSITION_COLUMN),
        valid_to_position.isNull().alias(IS_CURRENT_COLUMN),
        deleting.alias(IS_DELETED_COLUMN),
        F.lit(ctx.plan.run_id).alias(RUN_ID_COLUMN),
        F.lit(CHANGE_EVENT).alias(CHANGE_COLUMN),
        (F.row_number().over(chain) == 1).alias(_FIRST),
    )
    return versions.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)


def _new_to_the_lake(ctx: ApplyContext, events: DataFrame, target: str) -> DataFrame:
    """The guard: the events above every version of their key in the history (strictly: an event
    re-emitted at a version's position, at a higher offset, is that version again), and that
    supersede (:func:`~cdclake.model.position.supersedes`, as the table's ``MERGE``) the key's row
    at the run's base snapshot and its delete tombstone (but one this run's earlier try recorded:
    at or after the range's start)."""
    from pyspark.sql import functions as F

    cfg, spark = ctx.cfg, ctx.spark
    keys = list(cfg.primary_key)

    def same_key(known: str) -> list[Column]:
        return [F.col(qualified(_EVENT, k)) == F.col(qualified(known, k)) for k in keys]

    events = _above_known(ctx, events, target)
    known = []
    if ctx.state.snapshot_id is not None:
        stored = spark.read.option("versionAsOf", str(ctx.state.snapshot_id)).table(ctx.spark_name())
        known.append(stored.select(*keys, *_PLACE_COLUMNS))
    if ctx.side_table(TOMBSTONES_SUFFIX) is not None:
        partition, offset = F.col("_cdc_kafka_partition"), F.col("_cdc_kafka_offset")
        this_run = any_of([(partition == p) & (offset >= start) for p, start in ctx.plan.range.start.items()])
        tombstones = spark.table(ctx.spark_name(TOMBSTONES_SUFFIX)).filter(~F.coalesce(this_run, F.lit(False)))
        known.append(tombstones.withColumn("_cdc_snapshot", F.lit(False)).select(*keys, *_PLACE_COLUMNS))
    if not known:
        return events
    older = ~supersedes_column(cfg.ordering, _EVENT, _KNOWN)
    on = reduce(operator.and_, [*same_key(_KNOWN), older])
    return events.alias(_EVENT_ALIAS).join(
        reduce(lambda a, b: a.unionByName(b), known).alias(_KNOWN_ALIAS), on, "left_anti"
    )


def _demoted() -> Column:
    """Whether a version was demoted (:func:`_demote_versions`: file sequence -1)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.col(_FILE_SEQ) == -1, F.lit(False))


def _demote_versions(ctx: ApplyContext, target: str) -> None:
    """Demote the versions of an abandoned binlog history as the table's rows are
    (:func:`cdclake.spark.commit.demote_rows`), so that the guard
    (:func:`_above_known`) compares the new history's events with none of them; their
    ``_cdc_valid_from_position`` and ``_cdc_valid_to_position`` keep the positions they had. Every
    version but the ones this run's earlier try added from events (a seed is of the old history)."""
    file_seq = quote_identifier(_FILE_SEQ)
    run_id, change = quote_identifier(RUN_ID_COLUMN), quote_identifier(CHANGE_COLUMN)
    demote_rows(
        ctx,
        target,
        f"NOT coalesce({file_seq} = -1, false) "
        f"AND ({run_id} <> {quote_string(ctx.plan.run_id)} OR {change} = {quote_string(CHANGE_SEED)})",
    )


def _above_known(ctx: ApplyContext, events: DataFrame, target: str, *, this_run_only: bool = False) -> DataFrame:
    """The events above every version of their key in the history ``target`` (strictly: an event
    re-emitted at a version's position, at a higher offset, is that version again). With
    ``this_run_only``, only the versions this run (an earlier try of it: the same Airflow run id)
    added count: a run that accepts a new binlog history compares its positions with no version of
    the abandoned history, but its retry must not add the versions its failed try committed."""
    from pyspark.sql import functions as F

    keys = list(ctx.cfg.primary_key)
    versions = ctx.spark.table(target).filter(~_demoted())  # below every position: above no event
    if this_run_only:
        versions = versions.filter(F.col(RUN_ID_COLUMN) == ctx.plan.run_id)
    versions = versions.select(*keys, VALID_FROM_POSITION_COLUMN)
    same_key = [F.col(qualified(_EVENT, k)) == F.col(qualified(_KNOWN, k)) for k in keys]
    not_above = F.col(qualified(_EVENT, "position")) <= F.col(qualified(_KNOWN, VALID_FROM_POSITION_COLUMN))
    on = reduce(operator.and_, [*same_key, not_above])
    return events.alias(_EVENT_ALIAS).join(versions.alias(_KNOWN_ALIAS), on, "left_anti")


def _closing_rows(ctx: ApplyContext, versions: DataFrame) -> DataFrame:
    """One row per key of ``versions`` (:func:`_versions`): the key's first version's ``valid_from``
    as the ``valid_to`` of the key's open version."""
    from pyspark.sql import functions as F

    return versions.filter(_FIRST).select(
        *ctx.cfg.primary_key,
        F.col(VALID_FROM_TS_COLUMN).alias(VALID_TO_TS_COLUMN),
        F.col(VALID_FROM_POSITION_COLUMN).alias(VALID_TO_POSITION_COLUMN),
    )


def _closes_open_version(ctx: ApplyContext, target: str) -> list[Column]:
    """The ``MERGE`` conditions that match a closing row with its key's open version."""
    from pyspark.sql import functions as F

    same_key = [F.col(qualified(target, k)) == source_column(k) for k in ctx.cfg.primary_key]
    return [*same_key, F.col(qualified(target, IS_CURRENT_COLUMN))]


def _close_and_append(ctx: ApplyContext, target: str, versions: DataFrame) -> None:
    """Close, per key, the open version at the key's first version of the run (a ``MERGE`` whose
    source is one closing row per key), then append ``versions`` (:func:`_versions`): two commits
    of the history, in this order, so that the closing rows meet only the versions open before the
    run (:func:`_merge_versions`, one commit, joins every version with the history: 16 s against
    9.5 s for both at 1M events, bench/HISTORY.md).

    A try that dies between the two leaves keys closed without their new versions; its retry's
    guard finds the same events new (a closed version keeps its ``valid_from``), and its closing
    rows find those keys' versions closed already: it appends them once."""
    from pyspark.sql import functions as F

    on = reduce(operator.and_, _closes_open_version(ctx, target))
    _closing_rows(ctx, versions).alias(SOURCE_ALIAS).mergeInto(target, on).whenMatched().update(_closing()).merge()
    present = set(versions.columns)
    rows = versions.select(  # the history's columns by name: NULL in one the versions lack
        *[
            F.col(f.name) if f.name in present else F.lit(None).cast(f.dataType).alias(f.name)
            for f in ctx.spark.table(target).schema.fields
        ]
    )
    rows.writeTo(target).append()


def _merge_versions(ctx: ApplyContext, target: str, versions: DataFrame) -> None:
    """Insert ``versions`` and close, per key, the open version at the key's first version, in one
    commit: the ``MERGE``'s source is the versions and one closing row per key. For the repairs
    (:func:`_end_unread`), whose retry finds only the keys whose open version is still open: a
    commit between the closing and the insert would lose the deleted versions of a try that died
    between them."""
    from pyspark.sql import functions as F

    names = [c for c in versions.columns if c != _FIRST]
    closing = _closing_rows(ctx, versions).withColumn(_KIND, F.lit(_CLOSE))
    source = versions.select(*names, F.lit(_VERSION).alias(_KIND)).unionByName(closing, allowMissingColumns=True)
    on = reduce(operator.and_, [*_closes_open_version(ctx, target), source_column(_KIND) == _CLOSE])
    (
        source.alias(SOURCE_ALIAS)
        .mergeInto(target, on)
        .whenMatched()
        .update(_closing())
        .whenNotMatched(source_column(_KIND) == _VERSION)
        .insert({quote_identifier(n): source_column(n) for n in names})
        .merge()
    )
