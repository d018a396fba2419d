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
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError, PositionOrderError
from cdclake.io.catalog import committed_state, load_catalog, load_table_or_none
from cdclake.io.kafka import KafkaClients
from cdclake.model.layout import METADATA_COLUMNS, SummaryKeys
from cdclake.model.offsets import encode_offsets
from cdclake.model.plan import RunPlan
from cdclake.model.position import BinlogPosition
from cdclake.settings import Settings
from cdclake.spark.commit import commit, merge
from cdclake.spark.context import ApplyContext, resolve_table, source_columns
from cdclake.spark.parse import check_no_unknown_columns, parse_records, position_literal, position_of
from cdclake.spark.quarantine import bad_batch, split_bad_and_held, write_quarantine
from cdclake.spark.read import read_range
from cdclake.spark.reduce import apply_tombstones, reduce_latest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Row, SparkSession

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
    table = existing or resolve_table(catalog, cfg, raw)
    ctx = ApplyContext(
        spark, settings, kafka, plan, catalog, table, state or committed_state(table, cfg.topic), source_columns(table)
    )
    base = parse_records(raw, cfg.value_format, list(ctx.columns), cfg.primary_key).drop("value")
    base = base.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        check_no_unknown_columns(base, cfg, table)
        parsed = split_bad_and_held(ctx, base)
        stats = _batch_stats(parsed)
        quarantined = (stats["bad"] or 0) + (stats["held"] or 0)
        if stats["bad"] and cfg.bad_records == "fail":
            raise bad_batch(ctx, parsed, stats["bad"])
        if quarantined:
            write_quarantine(ctx, raw, parsed.filter("error is not null or held_back_behind is not null"))
        basename = _check_one_binlog(ctx, stats)
        good = parsed.filter(_GOOD)
        ops = {r["op"]: r["count"] for r in good.groupBy("op").count().collect()}
        truncate = position_of(stats["truncate"]) if stats["truncate"] is not None else None
        floors = [p for p in (ctx.state.truncate_floor, truncate) if p is not None]
        floor = max(floors) if floors else None
        properties = _summary(plan, stats, ops, quarantined, floor, basename)
        meta_cols = [name for name, _, _ in METADATA_COLUMNS]
        image = [good["image"][c.name].alias(c.name) for c in ctx.columns]
        if cfg.write_mode == "changelog":
            source = good.select(*image, *meta_cols)
            keys_changed = 0
            snapshot_id = commit(ctx, properties, lambda target: source.writeTo(target).append())
        else:
            keys_changed, snapshot_id = _upsert(ctx, good, floor, truncate, properties, meta_cols)
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


def _batch_stats(parsed: DataFrame) -> Row:
    """One pass over the parsed batch: counts, first/last/truncate positions, basenames, servers."""
    from pyspark.sql import functions as F

    good = F.expr(_GOOD)
    return parsed.agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(F.col("is_tombstone").cast("int")).alias("tombstones"),
        F.sum(F.col("error").isNotNull().cast("int")).alias("bad"),
        F.sum(F.col("held_back_behind").isNotNull().cast("int")).alias("held"),
        F.min(F.when(good, F.col("position"))).alias("first"),
        F.max(F.when(good, F.col("position"))).alias("last"),
        F.max(F.when(good & (F.col("op") == "t"), F.col("position"))).alias("truncate"),
        F.collect_set(F.when(good, F.col("file_base"))).alias("basenames"),
        # snapshot reads carry server_id 0: only changes name the server that wrote them
        F.collect_set(F.when(good & (F.col("server_id") != 0), F.col("server_id"))).alias("servers"),
    ).collect()[0]


def _check_one_binlog(ctx: ApplyContext, stats: Row) -> str | None:
    """The binlog basename of the batch and the table; positions of different binlogs (a
    failover, a new server) are not comparable.

    Raises:
        PositionOrderError: more than one basename or server id (names them and the remedy).
    """
    basenames = sorted(stats["basenames"])
    known = [ctx.state.binlog_basename] if ctx.state.binlog_basename else []
    if len(set(basenames + known)) > 1 or len(stats["servers"]) > 1:
        raise PositionOrderError(
            f"topic {ctx.cfg.topic!r}: events from binlog basename(s) {basenames} and server id(s) "
            f"{sorted(stats['servers'])} (the table so far: {known or 'none'}); positions of "
            "different binlogs are not comparable (a failover?). Nothing was committed: "
            "re-snapshot the table (snapshot-bootstrap DAG) after a failover."
        )
    return (basenames or known or [None])[0]


def _summary(
    plan: RunPlan, stats: Row, ops: dict[str, int], quarantined: int, floor: BinlogPosition | None, basename: str | None
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
        SummaryKeys.QUARANTINED: str(quarantined),
    }
    if plan.replay:
        properties[SummaryKeys.REPLAY] = "true"
    if floor is not None:
        properties[SummaryKeys.TRUNCATE_FLOOR] = floor.to_text()
    if basename is not None:
        properties[SummaryKeys.BINLOG_BASENAME] = basename
    if stats["first"] is not None:
        properties[SummaryKeys.FIRST_POSITION] = position_of(stats["first"]).to_event_text()
        properties[SummaryKeys.LAST_POSITION] = position_of(stats["last"]).to_event_text()
    return properties


def _upsert(
    ctx: ApplyContext,
    good: DataFrame,
    floor: BinlogPosition | None,
    truncate: BinlogPosition | None,
    properties: dict[str, str],
    meta_cols: list[str],
) -> tuple[int, int]:
    """Reduce the batch, apply the tombstones and merge; returns ``(keys changed, snapshot id)``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    rows = good.filter("op <> 't'")
    if floor is not None:
        rows = rows.filter(F.col("position") > F.expr(position_literal(floor)))
    survivors = apply_tombstones(ctx, reduce_latest(rows, ctx.cfg.primary_key))
    source = survivors.select(*[F.col("image")[c.name].alias(c.name) for c in ctx.columns], *meta_cols)
    source = source.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        keys_changed = source.count()
        all_cols = [c.name for c in ctx.columns] + meta_cols
        snapshot_id = commit(ctx, properties, lambda target: merge(ctx, target, source, all_cols, truncate))
    finally:
        source.unpersist()
    return keys_changed, snapshot_id
