"""The apply: one run plan (a Kafka offset range of Debezium events) -> one Iceberg commit.

This is the apply contract (``docs/architecture.md``, "The apply contract"), step by step; each
step lives in the module named:

1. **Start check** (here). The table's committed offsets must be the range's start; if they are
   its end, the range is already applied (an Airflow retry after the commit) and nothing happens;
   anything else is another run's commit (:class:`~cdclake.errors.ConcurrentRunError`). A manual
   replay (``plan.replay``) starts wherever the operator said.
2. **Read** exactly ``[start, end)`` of each partition (:mod:`cdclake.spark.read`).
3. **Parse and decode** (:mod:`cdclake.spark.parse`, :mod:`cdclake.spark.decode`). Kafka
   tombstones (null values) are skipped and counted.
4. **Bad records** (:mod:`cdclake.spark.quarantine`): quarantined with the records of their key
   held back behind them, or the run fails naming them (``bad_records: fail``).
5. **Order** by binlog position ``(file sequence number, pos, row, change rank)``
   (:mod:`cdclake.model.position`); events of another binlog basename or server stop the table
   (:class:`~cdclake.errors.PositionOrderError`).
6. **Truncate** (``op: t``) at position T: rows and events below T are gone; T becomes the
   table's *truncate floor* (snapshot summary), below which later events are discarded.
7. **Reduce** (:mod:`cdclake.spark.reduce`): the latest event per primary key; upserts at or
   below the key's delete tombstone are discarded and the batch's deletes update the tombstones.
8. **Commit** (:mod:`cdclake.spark.commit`): ``MERGE INTO`` a run branch, the offsets and counts
   in the snapshot summary, then ``main`` fast-forwarded.

Tables configured ``write_mode: changelog`` (no primary key) skip steps 6-7 and append every
event as a row.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError, PositionOrderError
from cdclake.io.catalog import check_ordering, committed_state, ensure_columns, load_catalog, load_table_or_none
from cdclake.io.kafka import KafkaClients, offsets_for_time, topic_watermarks
from cdclake.model.config import TableConfig
from cdclake.model.convergence import (
    END_MARKERS,
    FULL_SNAPSHOT_MARKERS,
    START_MARKERS,
    BatchSnapshot,
    SnapshotEnd,
    SnapshotProgress,
    SourceIdentity,
    advance_snapshot,
    identity_changes,
    merge_identities,
    pending_partitions,
    progress_after_completion,
)
from cdclake.model.layout import (
    COLUMN_DEFAULTS_PROPERTY,
    METADATA_COLUMNS,
    QUARANTINE_SUFFIX,
    TOMBSTONES_SUFFIX,
    CommittedState,
    SummaryKeys,
)
from cdclake.model.offsets import Offsets, encode_offsets
from cdclake.model.plan import RunPlan
from cdclake.model.position import MARIADB_GTID_PATTERN, BinlogPosition
from cdclake.settings import Settings
from cdclake.spark.commit import commit, demote_rows, merge
from cdclake.spark.context import ApplyContext, resolve_table, source_columns
from cdclake.spark.parse import (
    check_no_unknown_columns,
    parse_records,
    position_literal,
    position_of,
    position_struct,
    unknown_columns_floor,
)
from cdclake.spark.quarantine import bad_batch, split_bad_and_held, write_quarantine
from cdclake.spark.read import read_range
from cdclake.spark.reduce import apply_tombstones, reduce_latest

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row, SparkSession

log = logging.getLogger(__name__)

_GOOD = "not is_tombstone and error is null and held_back_behind is null"
"""The records a run applies: not a Kafka tombstone, not bad, not held back."""


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did.

    Attributes:
        status: ``committed``, ``already_applied`` (the table is at the range's end already) or
            ``empty`` (the range has no records).
        snapshot_id: the Iceberg snapshot committed (``committed`` only).
        events: Kafka records read, tombstones included.
        tombstones: Kafka tombstones (null values) skipped.
        ops: applicable events per Debezium op.
        quarantined: records written to the quarantine table (bad and held back).
        keys_changed: rows in the merge source after reduction (upsert mode).
    """

    status: str
    snapshot_id: int | None = None
    events: int = 0
    tombstones: int = 0
    ops: dict[str, int] | None = None
    quarantined: int = 0
    keys_changed: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def apply_range(
    spark: SparkSession, settings: Settings, plan: RunPlan, *, kafka: KafkaClients | None = None
) -> ApplyResult:
    """Apply one run plan to the table in one Iceberg commit (see the module docstring).

    Args:
        kafka: the Kafka clients; default: plaintext to ``settings.kafka_bootstrap``.

    Raises:
        ConfigError: a table without primary key in ``upsert`` mode.
        ConcurrentRunError: the table's committed offsets are neither the range's start nor its
            end, or another run committed while this one ran.
        BadBatchError: ``bad_records: fail`` and records that cannot be applied (nothing committed).
        PositionOrderError: the events change binlog basename or source server.
        SchemaError: the table cannot be created from, or does not fit, the events.
    """
    from pyspark import StorageLevel

    cfg, offset_range = plan.table, plan.range
    cfg.check_runnable()
    if offset_range.is_empty:
        return ApplyResult("empty")
    kafka = kafka or KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    catalog = load_catalog(settings)
    existing = load_table_or_none(catalog, cfg.identifier)
    state = committed_state(existing, cfg.topic) if existing is not None else None
    if state is not None and state.offsets is not None and not plan.replay and state.offsets != offset_range.start:
        if state.offsets == offset_range.end:
            log.info("table %s is at the range's end already: nothing to do (a retry?)", cfg.identifier)
            return ApplyResult("already_applied", events=offset_range.event_count)
        raise ConcurrentRunError(
            f"table {cfg.identifier}: committed offsets {encode_offsets(state.offsets)} are not "
            f"this run's start {encode_offsets(offset_range.start)}; another run committed "
            "in between. Nothing was committed; the next run plans from the table's offsets."
        )

    # Not cached: a 1,000,000-event batch is 4.4 GiB of values. The records are parsed once into a
    # cache without the raw value; the rare bad and held-back records are read again from Kafka.
    raw = read_range(spark, kafka, offset_range)
    table = ensure_columns(existing or resolve_table(catalog, cfg, raw), METADATA_COLUMNS)
    check_ordering(table, cfg.ordering, has_commits=state is not None and state.offsets is not None)
    ctx = ApplyContext(
        spark, settings, kafka, plan, catalog, table, state or committed_state(table, cfg.topic), source_columns(table)
    )
    base = parse_records(raw, cfg.value_format, list(ctx.columns), cfg.primary_key, cfg.ordering).drop("value")
    base = base.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        parsed = split_bad_and_held(ctx, base)
        stats = _batch_stats(parsed, cfg, unknown_columns_floor(table))
        check_no_unknown_columns(stats["unknown"], cfg)
        quarantined = (stats["bad"] or 0) + (stats["held"] or 0)
        if stats["bad"] and cfg.bad_records == "fail":
            raise bad_batch(ctx, parsed, stats["bad"])
        if quarantined:
            write_quarantine(ctx, raw, parsed.filter("error is not null or held_back_behind is not null"))
        state = _accepted_state(ctx) if plan.accept_source_change else ctx.state
        defaults = {} if plan.accept_source_change else _column_defaults(ctx)
        good = _fill_defaults(parsed.filter(_GOOD), defaults)
        identity = _check_identity(ctx, state, good, stats)
        ops = _ops(parsed, stats)
        truncate = position_of(stats["truncate"]) if stats["truncate"] is not None else None
        floors = [p for p in (state.truncate_floor, truncate) if p is not None]
        floor = max(floors) if floors else None
        conv = _converge(ctx, state, good, stats) if cfg.write_mode == "upsert" else _Convergence(state.snapshot_floor)
        high = _high(state, stats)
        properties = _summary(plan, stats, ops, quarantined, floor, identity, conv, high, ctx.state.max_offsets)
        backfill = {
            c: d for c, d in defaults.items() if state.defaults_position is None or d[0] > state.defaults_position
        }
        done = [p for p in [state.defaults_position, *(d[0] for d in backfill.values())] if p is not None]
        if done:
            properties[SummaryKeys.DEFAULTS_POSITION] = max(done).to_text()
        if plan.accept_source_change:
            properties[SummaryKeys.SOURCE_CHANGE_ACCEPTED] = json.dumps(
                {
                    "identity": ctx.state.identity.to_json() if ctx.state.identity else None,
                    "high_position": ctx.state.high_position.to_text() if ctx.state.high_position else None,
                }
            )
        meta_cols = [name for name, _, _ in METADATA_COLUMNS]
        image = [good["image"][c.name].alias(c.name) for c in ctx.columns]
        if cfg.write_mode == "changelog":
            source = good.select(*image, *meta_cols)
            keys_changed = 0
            snapshot_id = commit(ctx, properties, lambda target: source.writeTo(target).append())
        else:
            keys_changed, snapshot_id = _upsert(
                ctx, good, floor, truncate, conv, properties, meta_cols, backfill, deletes=bool(ops.get("d"))
            )
        if conv.completed is not None:
            _drop_tombstones_below(ctx, conv.completed)
        result = ApplyResult(
            "committed",
            snapshot_id=snapshot_id,
            events=stats["events"],
            tombstones=stats["tombstones"] or 0,
            ops=ops,
            quarantined=quarantined,
            keys_changed=keys_changed,
        )
        log.info("table %s: committed snapshot %s: %s", cfg.identifier, snapshot_id, result.to_json())
        return result
    finally:
        base.unpersist()


def _high(state: CommittedState, stats: Row) -> tuple[BinlogPosition, int] | None:
    """The greatest position applied after this batch, with its record's Kafka timestamp."""
    known = (state.high_position, state.high_position_ts or 0) if state.high_position is not None else None
    if stats["high"] is None:
        return known
    batch = (position_of(stats["high"]["position"]), -int(stats["high"]["neg_ts"]))
    if known is None or batch[0] > known[0]:
        return batch
    return known


APPLIED_OPS = ("c", "u", "d", "r", "t")
"""The Debezium ops an apply counts one by one (create, update, delete, read, truncate)."""


def _batch_stats(parsed: DataFrame, cfg: TableConfig, unknown_floor: BinlogPosition | None) -> Row:
    """One pass over the parsed batch, one Spark job, whatever the batch's size: counts (events,
    tombstones, bad, held, per op, full-snapshot reads), first/last/high/truncate positions,
    basenames, servers, the source identities (:func:`_check_identity`), the first event with a
    column the table lacks at or above ``unknown_floor``
    (:func:`~cdclake.spark.parse.check_no_unknown_columns`) and, under GTID ordering, the first
    change event without a MariaDB GTID.

    A small batch costs a few Spark jobs, not one per question (a job is about 0.3 s even on a
    one-row batch).
    """
    from pyspark.sql import functions as F

    good = F.expr(_GOOD)
    unknown = F.col("unknown_column").isNotNull()
    if unknown_floor is not None:
        unknown = unknown & (F.col("position") >= F.expr(position_literal(unknown_floor)))
    aggs = [
        F.count(F.lit(1)).alias("events"),
        F.sum(F.col("is_tombstone").cast("int")).alias("tombstones"),
        F.sum(F.col("error").isNotNull().cast("int")).alias("bad"),
        F.sum(F.col("held_back_behind").isNotNull().cast("int")).alias("held"),
        F.min(F.when(good, F.col("position"))).alias("first"),
        F.max(F.when(good, F.col("position"))).alias("last"),
        # the greatest position with the earliest Kafka timestamp that carried it
        F.max(F.when(good, F.struct(F.col("position"), (-F.unix_millis("timestamp")).alias("neg_ts")))).alias("high"),
        F.max(F.when(good & (F.col("op") == "t"), F.col("position"))).alias("truncate"),
        F.max(F.when(good, F.unix_millis("_cdc_source_ts"))).alias("last_source_ts"),
        F.collect_set(F.when(good, F.col("file_base"))).alias("basenames"),
        # snapshot reads carry server_id 0: only changes name the server that wrote them
        F.collect_set(F.when(good & (F.col("server_id") != 0), F.col("server_id"))).alias("servers"),
        # the first (partition, offset) of an event with a column the table lacks
        F.min(F.when(unknown, F.struct("partition", "offset", "unknown_column"))).alias("unknown"),
        F.sum((good & ~F.col("op").isin(*APPLIED_OPS)).cast("int")).alias("other_ops"),
        F.sum((good & (F.col("op") == "r") & F.col("snapshot_marker").isin(*FULL_SNAPSHOT_MARKERS)).cast("int")).alias(
            "full_snapshot_reads"
        ),
        *[F.sum((good & (F.col("op") == op)).cast("int")).alias(f"op_{op}") for op in APPLIED_OPS],
    ]
    if cfg.ordering == "gtid":
        missing = good & F.col("_cdc_gtid_seq").isNull() & (F.col("gtid").isNotNull() | ~F.col("_cdc_snapshot"))
        aggs += [
            F.min(F.when(missing, F.struct("partition", "offset", "op", "gtid"))).alias("gtid_missing"),
            F.collect_set(F.when(good, _gtid_domain())).alias("gtid_domains"),
        ]
    else:
        aggs.append(
            F.collect_set(
                F.when(
                    good,
                    F.struct(
                        F.when(F.col("server_id") != 0, F.col("server_id")).alias("server_id"),
                        F.col("file_base").alias("basename"),
                        F.expr(_GTID_SOURCE).alias("gtid_source"),
                    ),
                )
            ).alias("identities")
        )
    return parsed.agg(*aggs).collect()[0]


def _ops(parsed: DataFrame, stats: Row) -> dict[str, int]:
    """Applicable events per op: from the stats pass, or counted again in the (never seen) case of
    an op outside :data:`APPLIED_OPS`."""
    if stats["other_ops"]:
        return {r["op"]: r["count"] for r in parsed.filter(_GOOD).groupBy("op").count().collect()}
    return {op: int(stats[f"op_{op}"]) for op in APPLIED_OPS if stats[f"op_{op}"]}


_GTID_SOURCE = (
    "CASE WHEN gtid LIKE '%:%' THEN trim(substring_index(gtid, ':', 1)) "
    "WHEN gtid RLIKE '^[0-9]+-[0-9]+-[0-9]+$' THEN regexp_extract(gtid, '^([0-9]+-[0-9]+)-', 1) END"
)
"""SQL of the GTID's source (:func:`cdclake.model.convergence.gtid_source`)."""


def _gtid_domain() -> Column:
    from pyspark.sql import functions as F

    return F.regexp_extract(F.trim(F.col("gtid")), MARIADB_GTID_PATTERN, 1).try_cast("bigint")


def _accepted_state(ctx: ApplyContext) -> CommittedState:
    """The state a run that accepts a new binlog history starts from: the offsets and snapshot
    of the table, and nothing of the old history (identity, positions, floors, tombstones).

    The rows stay readable; they are demoted below every position of the new history in the run's
    commit (:func:`cdclake.spark.commit.demote_rows`) and replaced or deleted when a full snapshot
    of the new history completes."""
    old = ctx.state
    log.warning(
        "table %s: ACCEPTING A NEW BINLOG HISTORY (accept_source_change): the table's identity %s and "
        "highest position %s are dropped, its rows are demoted below the new history and its delete "
        "tombstones are removed; it equals its source again once a full snapshot of the new history "
        "completes",
        ctx.cfg.identifier,
        old.identity.to_json() if old.identity else None,
        old.high_position.to_text() if old.high_position else None,
    )
    tombstones = ctx.side_table(TOMBSTONES_SUFFIX)
    if tombstones is not None:
        ctx.spark.sql(f"DELETE FROM {ctx.spark_name(TOMBSTONES_SUFFIX)}")
    if COLUMN_DEFAULTS_PROPERTY in ctx.table.properties:
        # their ALTER positions belong to the old history: filling by them would overwrite values
        with ctx.table.transaction() as txn:
            txn.remove_properties(COLUMN_DEFAULTS_PROPERTY)
    return CommittedState(old.snapshot_id, old.offsets)


def _check_identity(ctx: ApplyContext, state: CommittedState, good: DataFrame, stats: Row) -> SourceIdentity | None:
    """The table's source identity after this batch; positions of different binlog histories are
    not comparable.

    Raises:
        PositionOrderError: the batch's events come from another server, binlog basename or GTID
            source than the table's (or from several): names what changed, where the first such
            record of each partition is, and the remedy.
    """
    if ctx.cfg.ordering == "gtid":
        _check_gtids(ctx, stats["gtid_missing"])
        seen = [SourceIdentity(gtid_domain=int(d)) for d in stats["gtid_domains"] if d is not None]
    else:
        seen = [SourceIdentity(r["server_id"], r["basename"] or None, r["gtid_source"]) for r in stats["identities"]]
    changes = identity_changes(state.identity, seen)
    if changes:
        known = state.identity
        first = _first_offsets_outside(good, known) if known is not None else {}
        raise PositionOrderError(
            f"topic {ctx.cfg.topic!r}: the events come from another binlog history than the table's "
            f"({'; '.join(changes)}): a failover to another server, or a new binlog. Positions of "
            "different binlog histories are not comparable, so nothing was committed. " + _accept_remedy(ctx, first)
        )
    return merge_identities(state.identity, seen)


def _check_gtids(ctx: ApplyContext, row: Row | None) -> None:
    """Under GTID ordering every change event needs a MariaDB GTID (only the rows of an initial
    snapshot may lack one); ``row`` is the stats pass's first one without (partition, offset, op,
    gtid), if any.

    Raises:
        PositionOrderError: names the first such record (topic, partition, offset) and its GTID.
    """
    if row is not None:
        raise PositionOrderError(
            f"topic {ctx.cfg.topic!r} partition {row['partition']} offset {row['offset']}: the table is ordered "
            f"by GTID (ordering: gtid), but this op {row['op']!r} event's source.gtid is {row['gtid']!r}, not a "
            "MariaDB GTID <domain>-<server>-<sequence>. GTID ordering needs a MariaDB source with GTIDs (MySQL "
            "GTIDs have no order across servers); set ordering: binlog for this source. Nothing was committed."
        )


def _first_offsets_outside(good: DataFrame, known: SourceIdentity) -> dict[int, int]:
    """Per partition, the first offset of an event whose identity differs from ``known``."""
    from pyspark.sql import functions as F

    differs = F.lit(False)
    if known.server_id is not None:
        differs = differs | ((F.col("server_id") != 0) & (F.col("server_id") != known.server_id))
    if known.basename is not None:
        differs = differs | (F.col("file_base") != known.basename)
    if known.gtid_source is not None:
        differs = differs | F.coalesce(F.expr(_GTID_SOURCE) != known.gtid_source, F.lit(False))
    if known.gtid_domain is not None:
        differs = differs | F.coalesce(_gtid_domain() != known.gtid_domain, F.lit(False))
    rows = good.filter(differs).groupBy("partition").agg(F.min("offset").alias("o")).collect()
    return {int(r["partition"]): int(r["o"]) for r in rows}


def _accept_remedy(ctx: ApplyContext, first: dict[int, int]) -> str:
    """The operator's way out of a binlog-history change (docs/operations.md, "A new binlog history")."""
    offsets = {str(p): o for p, o in sorted({**ctx.plan.range.end, **first}.items())}
    return (
        "To go on with the new history, trigger this table's DAG with "
        f'{{"accept_source_change": true, "replay_from_offsets": {json.dumps(offsets)}}} (the first record '
        "of the new history in each partition; the old history's rows stay readable until a full snapshot "
        "of the new history completes), then, unless the connector took a new snapshot itself, re-snapshot "
        "the table with the cdc_snapshot_bootstrap DAG (snapshot_type blocking)."
    )


def _column_defaults(ctx: ApplyContext) -> dict[str, tuple[BinlogPosition, str]]:
    """``{column: (ALTER position, default SQL)}`` of the columns added with a default the lake
    knows exactly (``cdc.column-defaults``, written by schema sync)."""
    entries = json.loads(ctx.table.properties.get(COLUMN_DEFAULTS_PROPERTY, "{}"))
    names = {c.name for c in ctx.columns}
    return {
        c: (BinlogPosition.from_text(e["position"]), e["sql"])
        for c, e in entries.items()
        if e.get("sql") and e.get("exact") and c in names
    }


def _fill_defaults(good: DataFrame, defaults: dict[str, tuple[BinlogPosition, str]]) -> DataFrame:
    """Events below the ALTER that added a column with a default were written before the column
    existed: their rows read the default at the source, not NULL."""
    from pyspark.sql import functions as F

    image = F.col("image")
    for column, (position, sql) in defaults.items():
        image = image.withField(
            column,
            F.when(F.col("position") < F.expr(position_literal(position)), F.expr(sql)).otherwise(image[column]),
        )
    return good.withColumn("image", image) if defaults else good


@dataclass(frozen=True)
class _Convergence:
    """The full-snapshot rule's outcome for one batch (:mod:`cdclake.model.convergence`).

    Attributes:
        snapshot_floor: events below it are discarded (the newest complete full snapshot).
        completed: the position of the snapshot this commit completes (rows and tombstones below
            it are deleted), else ``None``.
        progress: the snapshot still in progress after this commit.
    """

    snapshot_floor: BinlogPosition | None
    completed: BinlogPosition | None = None
    progress: SnapshotProgress | None = None


def _snapshot_groups(good: DataFrame, max_offsets: Offsets | None) -> list[BatchSnapshot]:
    """The batch's full-snapshot records, one group per snapshot position."""
    from pyspark.sql import functions as F

    unseen = F.lit(True)
    if max_offsets:
        unseen = F.lit(True)
        for p, o in max_offsets.items():
            unseen = F.when(F.col("partition") == p, F.col("offset") >= o).otherwise(unseen)
    marker = F.col("snapshot_marker")
    full = good.filter((F.col("op") == "r") & marker.isin(*FULL_SNAPSHOT_MARKERS))
    per_partition = full.groupBy("position", "partition").agg(
        F.count(F.lit(1)).alias("n"),
        F.min("offset").alias("first_offset"),
        F.max(marker.isin(*START_MARKERS).cast("int")).alias("started"),
        F.max(unseen.cast("int")).alias("unseen"),
        F.min(F.unix_millis("timestamp")).alias("first_ts"),
        F.max(F.when(marker.isin(*END_MARKERS), F.struct("offset", F.unix_millis("timestamp").alias("ts")))).alias(
            "end"
        ),
    )
    groups: dict[BinlogPosition, dict] = {}
    for r in per_partition.collect():
        g = groups.setdefault(
            position_of(r["position"]),
            {"n": 0, "started": False, "end": None, "first": {}, "unseen": False, "ts": r["first_ts"]},
        )
        g["ts"] = min(g["ts"], r["first_ts"])
        g["n"] += r["n"]
        g["unseen"] = g["unseen"] or bool(r["unseen"])
        g["started"] = g["started"] or bool(r["started"])
        g["first"][int(r["partition"])] = int(r["first_offset"])
        if r["end"] is not None:
            g["end"] = SnapshotEnd(int(r["partition"]), int(r["end"]["offset"]), int(r["end"]["ts"]))
    return [
        BatchSnapshot(p, g["n"], g["started"], g["end"], g["first"], g["unseen"], int(g["ts"]))
        for p, g in groups.items()
    ]


def _converge(ctx: ApplyContext, state: CommittedState, good: DataFrame, stats: Row) -> _Convergence:
    """Apply the full-snapshot rule to this batch (:mod:`cdclake.model.convergence`).

    Raises:
        PositionOrderError: a forward run meets a full snapshot below the table's highest applied
            position: the source's binlog positions started over (``RESET MASTER``, another server).
    """
    groups = _snapshot_groups(good, state.max_offsets) if stats["full_snapshot_reads"] else []
    cfg, plan = ctx.cfg, ctx.plan
    if not plan.replay and state.high_position is not None:
        in_progress = state.snapshot.position if state.snapshot else None
        for g in groups:
            above_floor = state.snapshot_floor is None or g.position > state.snapshot_floor
            produced_after_high = g.first_timestamp_ms > (state.high_position_ts or 0)
            if (
                g.unseen
                and produced_after_high
                and above_floor
                and g.position != in_progress
                and g.position < state.high_position
            ):
                raise PositionOrderError(
                    f"topic {cfg.topic!r}: a full snapshot at binlog position {g.position.to_event_text()} "
                    f"(partition/offset of its first records: {dict(sorted(g.first_offsets.items()))}) is below "
                    f"the table's highest applied position {state.high_position.to_event_text()}: the source's "
                    "binlog positions started over (RESET MASTER, or another server). Nothing was committed. "
                    + _accept_remedy(ctx, dict(g.first_offsets))
                )
    step = advance_snapshot(state.snapshot, groups, state.snapshot_floor)
    for note in step.notes:
        log.info("table %s: %s", cfg.identifier, note)
    progress = step.progress
    if not cfg.authoritative_snapshots:
        for older in step.ended:
            log.info(
                "table %s: %s ended; authoritative_snapshots is false: it deletes no row it did not read",
                cfg.identifier,
                older.describe(),
            )
        if progress is not None and progress.end is not None:
            log.info(
                "table %s: %s ended; authoritative_snapshots is false: it deletes no row it did not read",
                cfg.identifier,
                progress.describe(),
            )
            progress = None
        elif progress is not None:
            progress = replace(progress, ended=())
        return _Convergence(state.snapshot_floor, None, progress)
    candidates = [p for p in (*step.ended, progress) if p is not None and p.end is not None]
    if not candidates:
        if progress is not None:
            log.info("table %s: %s in progress", cfg.identifier, progress.describe())
        return _Convergence(state.snapshot_floor, None, progress)
    now_ms = int(time.time() * 1000)
    marks = topic_watermarks(ctx.kafka, cfg.topic)
    open_quarantine = None
    for candidate in reversed(candidates):  # the newest complete one wins
        assert candidate.end is not None
        after = offsets_for_time(ctx.kafka, cfg.topic, candidate.end.timestamp_ms + 1)
        first_after = {p: (o if o < marks.high.get(p, 0) else None) for p, o in after.items()}
        pending = pending_partitions(candidate.end, plan.range.end, first_after, marks.high, now_ms)
        if pending:
            log.info(
                "table %s: %s: its end record is applied; waiting for partition(s) %s, which may still hold "
                "records Debezium sent before it (complete once a later record of theirs is applied, or "
                "once they were read to their end a minute after it)",
                cfg.identifier,
                candidate.describe(),
                pending,
            )
            continue
        open_quarantine = _open_quarantine(ctx) if open_quarantine is None else open_quarantine
        if open_quarantine:
            log.warning(
                "table %s: %s is complete, but %d record(s) of the table are open in the quarantine: rows "
                "are deleted by it only once they are released",
                cfg.identifier,
                candidate.describe(),
                open_quarantine,
            )
            break
        log.info(
            "table %s: %s COMPLETE: rows and tombstones below %s that it did not read are deleted in this commit",
            cfg.identifier,
            candidate.describe(),
            candidate.position.to_event_text(),
        )
        return _Convergence(
            candidate.position, candidate.position, progress_after_completion(progress, candidate.position)
        )
    return _Convergence(state.snapshot_floor, None, progress)


def _open_quarantine(ctx: ApplyContext) -> int:
    """Records of the table open in the quarantine."""
    table = ctx.side_table(QUARANTINE_SUFFIX)
    if table is None:
        return 0
    return len(table.scan(row_filter="status = 'open'", selected_fields=("offset",)).to_arrow())


def _drop_tombstones_below(ctx: ApplyContext, position: BinlogPosition) -> None:
    """Delete the delete tombstones below a completed full snapshot: events below it are
    discarded from now on, so they protect nothing."""
    if ctx.side_table(TOMBSTONES_SUFFIX) is None:
        return
    ctx.spark.sql(
        f"DELETE FROM {ctx.spark_name(TOMBSTONES_SUFFIX)} "
        f"WHERE {position_struct(change=True, ordering=ctx.cfg.ordering)} < {position_literal(position)}"
    )


def _summary(
    plan: RunPlan,
    stats: Row,
    ops: dict[str, int],
    quarantined: int,
    floor: BinlogPosition | None,
    identity: SourceIdentity | None,
    conv: _Convergence,
    high: tuple[BinlogPosition, int] | None,
    max_offsets: Offsets | None,
) -> dict[str, str]:
    """The snapshot summary properties of the commit (:class:`~cdclake.model.layout.SummaryKeys`)."""
    properties = {
        SummaryKeys.TOPIC: plan.table.topic,
        SummaryKeys.START_OFFSETS: encode_offsets(plan.range.start),
        SummaryKeys.END_OFFSETS: encode_offsets(plan.range.end),
        SummaryKeys.RUN_ID: plan.run_id,
        SummaryKeys.EVENTS: str(stats["events"]),
        SummaryKeys.TOMBSTONES: str(stats["tombstones"] or 0),
        SummaryKeys.UPSERTS: str(sum(v for k, v in ops.items() if k in ("c", "u", "r"))),
        SummaryKeys.DELETES: str(ops.get("d", 0)),
        SummaryKeys.OPS: json.dumps(ops, sort_keys=True),
        SummaryKeys.QUARANTINED: str(quarantined),
    }
    if stats["last_source_ts"] is not None:
        properties[SummaryKeys.LAST_SOURCE_TIMESTAMP] = str(stats["last_source_ts"])
    if plan.replay:
        properties[SummaryKeys.REPLAY] = "true"
    if floor is not None:
        properties[SummaryKeys.TRUNCATE_FLOOR] = floor.to_text()
    if identity is not None:
        properties[SummaryKeys.SOURCE_IDENTITY] = identity.to_json()
        if identity.basename is not None:
            properties[SummaryKeys.BINLOG_BASENAME] = identity.basename
    if high is not None:
        properties[SummaryKeys.HIGH_POSITION] = high[0].to_text()
        properties[SummaryKeys.HIGH_POSITION_TIMESTAMP] = str(high[1])
    if conv.snapshot_floor is not None:
        properties[SummaryKeys.SNAPSHOT_FLOOR] = conv.snapshot_floor.to_text()
    if conv.progress is not None:
        properties[SummaryKeys.SNAPSHOT_IN_PROGRESS] = conv.progress.to_json()
    most = dict(max_offsets or {})
    for p, o in plan.range.end.items():
        most[p] = max(o, most.get(p, 0))
    properties[SummaryKeys.MAX_OFFSETS] = encode_offsets(most)
    if stats["first"] is not None:
        properties[SummaryKeys.FIRST_POSITION] = position_of(stats["first"]).to_event_text()
        properties[SummaryKeys.LAST_POSITION] = position_of(stats["last"]).to_event_text()
    return properties


def _upsert(
    ctx: ApplyContext,
    good: DataFrame,
    floor: BinlogPosition | None,
    truncate: BinlogPosition | None,
    conv: _Convergence,
    properties: dict[str, str],
    meta_cols: list[str],
    backfill: dict[str, tuple[BinlogPosition, str]],
    *,
    deletes: bool = True,
) -> tuple[int, int]:
    """Reduce the batch, apply the tombstones and merge; returns ``(keys changed, snapshot id)``.
    ``deletes=False`` (the batch has no delete event) skips recording tombstones.

    Columns in ``backfill`` (added with a default since the last run) are then set to their
    default in the rows below the ALTER's position, in the same commit.

    Events at or below the truncate floor, and below the snapshot floor, are discarded first; a
    completed full snapshot deletes the rows below its position that the batch does not rewrite."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    rows = good.filter("op <> 't'")
    if floor is not None:
        rows = rows.filter(F.col("position") > F.expr(position_literal(floor)))
    if conv.snapshot_floor is not None:
        rows = rows.filter(F.col("position") >= F.expr(position_literal(conv.snapshot_floor)))
    survivors = apply_tombstones(ctx, reduce_latest(rows, ctx.cfg.primary_key), record=deletes)
    source = survivors.select(*[F.col("image")[c.name].alias(c.name) for c in ctx.columns], *meta_cols)
    source = source.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        keys_changed = source.count()
        if conv.completed is not None:
            properties[SummaryKeys.SNAPSHOT_COMPLETED] = json.dumps(
                {"position": conv.completed.to_text(), "rows_deleted": _rows_below(ctx, source, conv.completed)}
            )
        all_cols = [c.name for c in ctx.columns] + meta_cols

        def write(target: str) -> None:
            if ctx.plan.accept_source_change:
                demote_rows(ctx, target)
            merge(ctx, target, source, all_cols, truncate, conv.completed)
            for column, (position, sql) in backfill.items():
                log.info(
                    "table %s: filling column %r with its default %s in the rows below the ALTER at %s",
                    ctx.cfg.identifier,
                    column,
                    sql,
                    position.to_event_text(),
                )
                ctx.spark.sql(
                    f"UPDATE {target} SET `{column}` = {sql} "
                    f"WHERE {position_struct(ordering=ctx.cfg.ordering)} < {position_literal(position)} AND NOT (`{column}` <=> {sql})"
                )

        snapshot_id = commit(ctx, properties, write)
    finally:
        source.unpersist()
    return keys_changed, snapshot_id


def _rows_below(ctx: ApplyContext, source: DataFrame, position: BinlogPosition) -> int:
    """Rows of the table below ``position`` whose key the merge source does not hold: the rows a
    completed full snapshot deletes."""
    from pyspark.sql import functions as F

    keys = list(ctx.cfg.primary_key)
    below = ctx.spark.table(ctx.spark_name()).filter(
        F.expr(position_struct(ordering=ctx.cfg.ordering)) < F.expr(position_literal(position))
    )
    if ctx.plan.accept_source_change:
        below = ctx.spark.table(ctx.spark_name())
    return below.select(*keys).join(source.select(*keys), keys, "left_anti").count()
