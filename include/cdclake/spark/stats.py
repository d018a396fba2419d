"""The statistics of a parsed batch (Spark): one aggregation pass gives the typed
:class:`~cdclake.model.run_state.BatchStats` the run's decisions are made from
(:func:`cdclake.model.decision.decide`), plus the two rarer queries a decision may ask for (the
full-snapshot groups, and where a changed source identity starts).

A small batch costs a few Spark jobs, not one per question (a job is about 0.3 s even on a one-row
batch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cdclake.model.config import TableConfig
from cdclake.model.convergence import (
    END_MARKERS,
    FULL_SNAPSHOT_MARKERS,
    START_MARKERS,
    BatchSnapshot,
    IdentitySpan,
    SnapshotEnd,
    SourceIdentity,
)
from cdclake.model.offsets import Offsets
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition
from cdclake.model.run_state import APPLIED_OPS, BatchStats, GtidMissing, UnknownColumn
from cdclake.spark.flat import first_of
from cdclake.spark.positions import gtid_domain, gtid_source, position_literal, position_of

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

GOOD = "not is_tombstone and error is null and held_back_behind is null"
"""The records a run applies: not a Kafka tombstone, not bad, not held back."""


def batch_stats(
    parsed: DataFrame,
    cfg: TableConfig,
    unknown_floor: BinlogPosition | None,
    more: Mapping[str, Column] | None = None,
) -> tuple[BatchStats, Mapping[str, Any]]:
    """One pass over the parsed batch (:func:`cdclake.spark.parse.parse_records`, with the
    quarantine's ``held_back_behind``), one Spark job whatever the batch's size: the first job
    over the parse's cache, which it fills.

    Args:
        parsed: the parsed batch.
        cfg: the table config (its ``ordering`` decides which identities are collected).
        unknown_floor: an event's unknown column counts only at or above this position
            (:func:`cdclake.spark.parse.unknown_columns_floor`); ``None``: everywhere.
        more: more aggregates of the same pass, by name (the batch's schema ids,
            :func:`cdclake.spark.writer_schemas.id_aggregates`).

    Returns:
        The statistics, and the value of each of ``more`` by its name.
    """
    # the high position's timestamp is kept as a key the maximum picks: negated with source
    # positions (the earliest Kafka timestamp that carried it), as is without (the latest record's)
    latest = 1 if cfg.ordering not in SOURCE_ORDERINGS else -1
    aggs = [*_batch_aggregates(unknown_floor, latest), *_ordering_aggregates(cfg)]
    aggs += [column.alias(name) for name, column in (more or {}).items()]
    row = parsed.agg(*aggs).collect()[0]
    high = row["high"]
    stats = BatchStats(
        events=int(row["events"]),
        tombstones=int(row["tombstones"] or 0),
        bad=int(row["bad"] or 0),
        held=int(row["held"] or 0),
        ops=_op_counts(parsed, row),
        first=_position(row["first"]),
        last=_position(row["last"]),
        high=_position(high["position"]) if high is not None else None,
        high_timestamp_ms=latest * int(high["ts_key"]) if high is not None else None,
        truncate=_position(row["truncate"]),
        last_source_ts_ms=int(row["last_source_ts"]) if row["last_source_ts"] is not None else None,
        identities=_identities(cfg, row),
        full_snapshot_reads=int(row["full_snapshot_reads"] or 0),
        unknown_column=_unknown_column(row["unknown"]),
        # only GTID ordering aggregates it
        gtid_missing=_gtid_missing(row["gtid_missing"]) if cfg.ordering == "gtid" else None,
        schema_samples=_schema_samples(row),
    )
    return stats, {name: row[name] for name in more or {}}


def _batch_aggregates(unknown_floor: BinlogPosition | None, latest: int) -> list[Column]:
    """The aggregates of :func:`batch_stats` under every ordering: record counts, positions,
    timestamps, samples and op counts, one column each (``op_<op>`` per applied op).

    Args:
        unknown_floor: as :func:`batch_stats`'s.
        latest: the sign of the high position's timestamp key (``ts_key``, epoch ms): ``1``
            picks the latest Kafka timestamp, ``-1`` the earliest.
    """
    from pyspark.sql import functions as F

    good = F.expr(GOOD)
    unknown = F.col("unknown_column").isNotNull()
    if unknown_floor is not None:
        unknown = unknown & (F.col("position") >= position_literal(unknown_floor))
    return [
        F.count(F.lit(1)).alias("events"),
        F.sum(F.col("is_tombstone").cast("int")).alias("tombstones"),
        F.sum(F.col("error").isNotNull().cast("int")).alias("bad"),
        F.sum(F.col("held_back_behind").isNotNull().cast("int")).alias("held"),
        F.min(F.when(good, F.col("position"))).alias("first"),
        F.max(F.when(good, F.col("position"))).alias("last"),
        # the greatest position with the earliest Kafka timestamp that carried it; without source
        # positions (ordering kafka) every position is equal: the latest record's timestamp
        F.max(F.when(good, F.struct(F.col("position"), (latest * F.unix_millis("timestamp")).alias("ts_key")))).alias(
            "high"
        ),
        F.max(F.when(good & (F.col("op") == "t"), F.col("position"))).alias("truncate"),
        F.max(F.when(good, F.unix_millis("_cdc_source_ts"))).alias("last_source_ts"),
        # the first (partition, offset) of an event with a column the table lacks
        F.min(F.when(unknown, F.struct("partition", "offset", "unknown_column"))).alias("unknown"),
        # the first and last record with a value: their Connect schemas are checked (connector modes)
        F.min(F.when(~F.col("is_tombstone"), F.struct("partition", "offset"))).alias("first_value"),
        F.max(F.when(~F.col("is_tombstone"), F.struct("partition", "offset"))).alias("last_value"),
        F.sum((good & ~F.col("op").isin(*APPLIED_OPS)).cast("int")).alias("other_ops"),
        F.sum((good & (F.col("op") == "r") & F.col("snapshot_marker").isin(*FULL_SNAPSHOT_MARKERS)).cast("int")).alias(
            "full_snapshot_reads"
        ),
        *[F.sum((good & (F.col("op") == op)).cast("int")).alias(f"op_{op}") for op in APPLIED_OPS],
    ]


def _ordering_aggregates(cfg: TableConfig) -> list[Column]:
    """The aggregates of :func:`batch_stats` that ``cfg.ordering`` asks for: under GTID ordering
    the first change event without a GTID (``gtid_missing``) and the GTID domains
    (``gtid_domains``); under the other source orderings the source identities (``identities``);
    under ``ordering: kafka`` none."""
    from pyspark.sql import functions as F

    good = F.expr(GOOD)
    if cfg.ordering == "gtid":
        missing = good & F.col("_cdc_gtid_seq").isNull() & (F.col("gtid").isNotNull() | ~F.col("_cdc_snapshot"))
        return [
            F.min(F.when(missing, F.struct("partition", "offset", "op", "gtid"))).alias("gtid_missing"),
            F.collect_set(F.when(good, gtid_domain(F.col("gtid")))).alias("gtid_domains"),
        ]
    if cfg.ordering in SOURCE_ORDERINGS:
        return [F.collect_set(F.when(good, F.struct(*_identity_columns()))).alias("identities")]
    return []


def _op_counts(parsed: DataFrame, row: Any) -> dict[str, int]:
    """The applicable events per Debezium op, zero counts left out, from the aggregated ``row``."""
    if row["other_ops"]:  # never seen: an op outside APPLIED_OPS is counted by its name
        return {r["op"]: r["count"] for r in parsed.filter(GOOD).groupBy("op").count().collect()}
    return {op: int(row[f"op_{op}"]) for op in APPLIED_OPS if row[f"op_{op}"]}


def _identities(cfg: TableConfig, row: Any) -> tuple[SourceIdentity, ...]:
    """The source identities of the aggregated ``row`` (:func:`_ordering_aggregates`)."""
    if cfg.ordering == "gtid":
        return tuple(SourceIdentity(gtid_domain=int(d)) for d in row["gtid_domains"] if d is not None)
    if cfg.ordering in SOURCE_ORDERINGS:
        return tuple(_identity(r) for r in row["identities"])
    return ()  # without source positions (ordering kafka) no identity is recorded or compared


def _unknown_column(row: Any) -> UnknownColumn | None:
    return UnknownColumn(int(row["partition"]), int(row["offset"]), row["unknown_column"]) if row is not None else None


def _gtid_missing(row: Any) -> GtidMissing | None:
    return GtidMissing(int(row["partition"]), int(row["offset"]), row["op"], row["gtid"]) if row is not None else None


def _schema_samples(row: Any) -> tuple[tuple[int, int], ...]:
    """``(partition, offset)`` of the batch's first and last record with a value, once when the same."""
    return tuple(
        dict.fromkeys((int(r["partition"]), int(r["offset"])) for r in (row["first_value"], row["last_value"]) if r)
    )


def _position(row: Any) -> BinlogPosition | None:
    return position_of(row) if row is not None else None


def _identity_columns() -> list[Column]:
    """An event's source identity under binlog ordering: ``server_id``, ``basename``, ``gtid_source``."""
    from pyspark.sql import functions as F

    return [
        # snapshot reads carry server_id 0: only changes name the server that wrote them
        F.when(F.col("server_id") != 0, F.col("server_id")).alias("server_id"),
        F.col("file_base").alias("basename"),
        gtid_source(F.col("gtid")).alias("gtid_source"),
    ]


def _identity(row: Any) -> SourceIdentity:
    return SourceIdentity(row["server_id"], row["basename"] or None, row["gtid_source"])


def snapshot_groups(good: DataFrame, max_offsets: Offsets | None) -> list[BatchSnapshot]:
    """The batch's full-snapshot records (``r`` events framed by initial/blocking snapshot markers),
    one group per snapshot position; a group is ``unseen`` when some of its records sit at or above
    ``max_offsets`` (the greatest offsets the table ever committed)."""
    from pyspark.sql import functions as F

    # one CASE, not one nested per partition (cdclake.spark.flat)
    unseen = first_of(
        [(F.col("partition") == p, F.col("offset") >= o) for p, o in reversed(list((max_offsets or {}).items()))],
        F.lit(True),
    )
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
    groups: dict[BinlogPosition, dict[str, Any]] = {}
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


def identity_spans(good: DataFrame) -> list[IdentitySpan]:
    """The applied events per source identity (binlog ordering), with their lowest and greatest
    position (:func:`cdclake.model.convergence.continue_history`)."""
    from pyspark.sql import functions as F

    rows = good.groupBy(*_identity_columns()).agg(F.min("position").alias("first"), F.max("position").alias("last"))
    return [IdentitySpan(_identity(r), position_of(r["first"]), position_of(r["last"])) for r in rows.collect()]


def first_offsets_outside(good: DataFrame, known: SourceIdentity) -> dict[int, int]:
    """Per partition, the first offset of an event whose identity differs from ``known``."""
    from pyspark.sql import functions as F

    differs = F.lit(False)
    if known.server_id is not None:
        differs = differs | ((F.col("server_id") != 0) & (F.col("server_id") != known.server_id))
    if known.basename is not None:
        differs = differs | (F.col("file_base") != known.basename)
    if known.gtid_source is not None:
        differs = differs | F.coalesce(gtid_source(F.col("gtid")) != known.gtid_source, F.lit(False))
    if known.gtid_domain is not None:
        differs = differs | F.coalesce(gtid_domain(F.col("gtid")) != known.gtid_domain, F.lit(False))
    rows = good.filter(differs).groupBy("partition").agg(F.min("offset").alias("o")).collect()
    return {int(r["partition"]): int(r["o"]) for r in rows}
