"""Bad records and the quarantine (dead-letter) table ``<table>__cdc_quarantine``.

A record that cannot be applied is *bad*; every later record of the same Kafka key is *held back*
behind it (its key's order would break otherwise), as is every record of a key with an ``open``
quarantine entry from an earlier run. With ``bad_records: quarantine`` both go to the quarantine
table and the run goes on; with ``bad_records: fail`` the run stops naming the bad records. Either
way no offset passes a record that was neither applied nor quarantined. Columns:
:data:`cdclake.model.layout.QUARANTINE_COLUMNS`; release: :func:`cdclake.io.maintenance.release_quarantined`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cdclake.errors import BadBatchError, BadRecordError
from cdclake.io.kafka import read_partition
from cdclake.model.config import TableConfig
from cdclake.model.envelope import KafkaCoordinates, parse_value
from cdclake.model.layout import QUARANTINE_COLUMNS, QUARANTINE_SUFFIX
from cdclake.model.types import ColumnSpec
from cdclake.spark.context import ApplyContext
from cdclake.spark.decode import json_read_type
from cdclake.spark.merge import merge_into
from cdclake.spark.read import KAFKA_RECORD_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MAX_REPORTED_BAD_RECORDS = 10
"""How many bad records a ``bad_records: fail`` error describes one by one."""


def split_bad_and_held(ctx: ApplyContext, parsed: DataFrame) -> DataFrame:
    """Add ``held_back_behind``: for a good record of a key that has a bad record earlier in its
    partition (this batch) or an ``open`` quarantine entry (earlier runs), that bad record's
    offset; else null. Records of a key must apply in order, so they wait behind it."""
    from pyspark.sql import functions as F

    bad = parsed.filter("error is not null and key is not null")
    entries = None if ctx.side_table(QUARANTINE_SUFFIX) is None else ctx.spark.table(ctx.spark_name(QUARANTINE_SUFFIX))
    if entries is not None:
        # a bad record the operator released no longer holds its key back (on a replay)
        released = entries.filter("status = 'released'").select("partition", "offset")
        bad = bad.join(released, ["partition", "offset"], "left_anti")
    blockers = bad.groupBy("partition", "key").agg(F.min("offset").alias("blocker_offset"))
    if entries is not None:
        previous = (
            entries.filter("status = 'open' and key is not null and held_back_behind is null")
            .groupBy("partition", "key")
            .agg(F.min("offset").alias("blocker_offset"))
        )
        blockers = (
            blockers.unionByName(previous)
            .groupBy("partition", "key")
            .agg(F.min("blocker_offset").alias("blocker_offset"))
        )
    joined = parsed.join(F.broadcast(blockers), ["partition", "key"], "left")
    held = F.when(
        F.col("error").isNull() & ~F.col("is_tombstone") & (F.col("offset") > F.col("blocker_offset")),
        F.col("blocker_offset"),
    )
    return joined.withColumn("held_back_behind", held).drop("blocker_offset")


def write_quarantine(ctx: ApplyContext, raw: DataFrame, records: DataFrame) -> None:
    """Append bad and held-back records to the quarantine table, once per Kafka coordinate.

    ``records`` (parsed, without the raw value) are joined back to ``raw``, the Kafka records, for
    their key, value and timestamp as read."""
    from pyspark.sql import functions as F

    records = records.select("partition", "offset", "error", "held_back_behind").join(
        raw.select(*KAFKA_RECORD_COLUMNS), ["partition", "offset"]
    )

    ctx.side_table(
        QUARANTINE_SUFFIX, [(n, t, False) for n, t, _ in QUARANTINE_COLUMNS], {n: d for n, _, d in QUARANTINE_COLUMNS}
    )
    rows = records.select(
        *KAFKA_RECORD_COLUMNS,
        F.coalesce(
            "error",
            F.concat(
                F.lit("held back behind the quarantined record at offset "),
                F.col("held_back_behind").cast("string"),
                F.lit(" of the same key"),
            ),
        ).alias("error"),
        "held_back_behind",
        F.lit(ctx.plan.run_id).alias("run_id"),
        F.current_timestamp().alias("quarantined_at"),
        F.lit("open").alias("status"),
    )
    target = ctx.spark_name(QUARANTINE_SUFFIX)
    merge_into(rows, target, ("topic", "partition", "offset")).whenNotMatched().insertAll().merge()


def bad_batch(ctx: ApplyContext, parsed: DataFrame, total: int) -> BadBatchError:
    """The error of a ``bad_records: fail`` run: the first :data:`MAX_REPORTED_BAD_RECORDS` bad records,
    each described from its raw value (fetched from Kafka by its coordinates: the parse cache has
    no raw values)."""
    bad_rows = (
        parsed.filter("error is not null")
        .orderBy("partition", "offset")
        .select("partition", "offset", "error")
        .limit(MAX_REPORTED_BAD_RECORDS)
        .collect()
    )
    cfg = ctx.cfg
    reported = []
    for b in bad_rows:
        where = KafkaCoordinates(cfg.topic, b["partition"], b["offset"])
        records = read_partition(
            ctx.kafka, cfg.topic, b["partition"], b["offset"], b["offset"] + 1, group_id="cdclake-bad-records"
        )
        value = next((m.value() for m in records), None)
        reason = _describe_bad_record(value, cfg, ctx.columns, where, b["error"])
        reported.append((cfg.topic, b["partition"], b["offset"], reason))
    return BadBatchError(reported, total)


def _describe_bad_record(
    value: bytes | None, cfg: TableConfig, columns: tuple[ColumnSpec, ...], where: KafkaCoordinates, spark_reason: str
) -> str:
    """A precise reason for a record Spark flagged, found by re-parsing it in Python."""
    if value is None:
        return spark_reason
    try:
        parse_value(value, cfg.value_format, where)
    except BadRecordError as e:
        return e.reason
    doc = json.loads(value)  # parse_value accepted it, so this is JSON
    envelope = doc.get("payload", doc) if cfg.value_format == "json_with_schema" else doc
    image = envelope.get("before") if envelope.get("op") == "d" else envelope.get("after")
    for col in columns:
        v = (image or {}).get(col.name)
        if v is None:
            continue
        expected = json_read_type(col.encoding)
        ok = {
            "int": isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31,
            "bigint": isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63,
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "double": isinstance(v, (int, float)) and not isinstance(v, bool),
            "boolean": isinstance(v, bool),
            "string": True,
            "variant": True,
        }.get(expected, isinstance(v, dict))  # the struct<...> types
        if not ok:
            return f"column {col.name!r}: value {v!r} does not fit {col.iceberg_type} (encoding {col.encoding})"
    return spark_reason
