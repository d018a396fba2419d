"""Bad records and the quarantine (dead-letter) table ``<table>__cdc_quarantine``.

A record that cannot be applied is *bad*; every later record of the same Kafka key is *held back*
behind it (its key's order would break otherwise), as is every record of a key with an ``open``
quarantine entry from an earlier run. With ``bad_records: quarantine`` both go to the quarantine
table and the run goes on (and, past ``bad_records_tolerance``, fails after its commit naming the
causes: :func:`new_quarantine`, :mod:`cdclake.model.bad_records`); with ``bad_records: fail`` the
run stops naming the bad records. Either way no offset passes a record that was neither applied nor
quarantined. Columns:
:data:`cdclake.model.layout.QUARANTINE_COLUMNS`; release: :func:`cdclake.io.maintenance.release_quarantined`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdclake.errors import BadBatchError, BadRecordError
from cdclake.model.avro import SchemaLookup
from cdclake.model.bad_records import (
    COLUMN_IN_ERROR,
    ELIDED,
    MAX_CAUSES,
    MAX_PATTERN_CHARS,
    VARIABLE_PARTS,
    NewQuarantine,
    QuarantineCause,
)
from cdclake.model.config import TableConfig
from cdclake.model.envelope import KafkaCoordinates, parse_table_value
from cdclake.model.layout import QUARANTINE_COLUMNS, QUARANTINE_SUFFIX
from cdclake.model.run_state import QuarantinedRecord
from cdclake.spark.context import ApplyContext
from cdclake.spark.merge import merge_into
from cdclake.spark.parse import TYPE_MISMATCH, describe_mismatches
from cdclake.spark.read import KAFKA_RECORD_COLUMNS
from cdclake.spark.writer_schemas import schema_id_of_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

QUARANTINED = "error is not null or held_back_behind is not null"
"""The records a run quarantines: bad, or held back behind a bad record of their key."""

MAX_REPORTED_BAD_RECORDS = 10
"""How many bad records a ``bad_records: fail`` error describes one by one."""


def logical_key(value_format: str) -> Column:
    """The Kafka key as the row's identity rather than its bytes, as a string column: one row may
    be keyed by different bytes over time (an Avro key schema registered again under another id;
    a JSON key with its schema, ``schemas.enable`` turned on or off, an ``int32`` field that
    another producer wrote as ``int64``), and then land in another partition.

    * ``avro``: the key's Avro body, without the Confluent frame (magic byte and schema id); Avro
      encodes ``int`` and ``long`` alike, so a key field widened keeps its bytes.
    * JSON: the key's payload (``payload`` of a ``{"schema", "payload"}`` envelope, else the whole
      object) as a map of field to value text, in JSON; the whole key's hex when it is not a JSON
      object.
    """
    from pyspark.sql import functions as F

    key = F.col("key")
    if value_format == "avro":
        framed = (F.length(key) >= 5) & (F.substring(key, 1, 1) == F.lit(bytearray(b"\x00")))
        return F.hex(F.when(framed, F.expr("substring(key, 6)")).otherwise(key))
    text = key.cast("string")
    fields = F.map_keys(F.from_json(text, "map<string,string>"))
    enveloped = (F.size(fields) == 2) & F.array_contains(fields, "schema") & F.array_contains(fields, "payload")
    body = F.when(enveloped, F.get_json_object(text, "$.payload")).otherwise(text)
    return F.coalesce(F.to_json(F.from_json(body, "map<string,string>")), F.hex(key))


def split_bad_and_held(ctx: ApplyContext, parsed: DataFrame, *, batch_bad: bool = True) -> DataFrame:
    """Add ``held_back_behind`` and ``held_back_partition``: for a good record of a key
    (:func:`logical_key`) that has a bad record before it (this batch) or an ``open`` quarantine
    entry (earlier runs), that bad record's offset and partition; else null. Records of a key
    must apply in order, so they wait behind it.

    Before it means: in the bad record's partition, at a higher offset; in another partition (the
    key's bytes changed, and with them its partition), at a higher source position, or at any
    when either position is unknown (a bad record's, or an earlier run's entry: nothing is lost,
    the record waits in the quarantine).

    ``batch_bad=False``: the batch holds no bad record (its statistics counted none), so only the
    quarantine's entries are looked at; a table without a quarantine table, or without an open
    entry, then holds nothing back, and no query joins the batch with anything.
    """
    from pyspark.sql import functions as F

    held_columns = {"held_back_behind": F.lit(None).cast("bigint"), "held_back_partition": F.lit(None).cast("int")}
    entries = None if ctx.side_table(QUARANTINE_SUFFIX) is None else ctx.spark.table(ctx.spark_name(QUARANTINE_SUFFIX))
    if entries is None and not batch_bad:
        return parsed.withColumns(held_columns)
    position_type = parsed.schema["position"].dataType
    bad = parsed.filter("error is not null and key is not null" if batch_bad else "false")
    if entries is not None:
        # a bad record the operator released no longer holds its key back (on a replay)
        released = entries.filter("status = 'released'").select("partition", "offset")
        bad = bad.join(released, ["partition", "offset"], "left_anti")
    found = bad.select("key", F.col("partition").cast("bigint"), "offset", "position")
    if entries is not None:
        # an earlier run's entry: its position is not recorded
        previous = entries.filter("status = 'open' and key is not null and held_back_behind is null").select(
            "key", F.col("partition").cast("bigint"), "offset", F.lit(None).cast(position_type).alias("position")
        )
        found = found.unionByName(previous)
    if found.isEmpty():
        return parsed.withColumns(held_columns)
    blockers = (
        found.withColumn("logical_key", logical_key(ctx.cfg.value_format))
        .groupBy("logical_key")
        .agg(F.collect_list(F.struct("partition", "offset", "position")).alias("blockers"))
    )
    joined = parsed.withColumn("logical_key", logical_key(ctx.cfg.value_format)).join(
        F.broadcast(blockers), "logical_key", "left"
    )

    def before(b: Column) -> Column:
        same = b["partition"] == F.col("partition")
        unknown = b["position"].isNull() | F.col("position").isNull()
        return (same & (F.col("offset") > b["offset"])) | (~same & (unknown | (F.col("position") > b["position"])))

    applicable = F.col("error").isNull() & ~F.col("is_tombstone") & F.col("blockers").isNotNull()
    # the earliest blocker: the least (partition, offset) of those before the record
    first = F.array_min(
        F.transform(
            F.filter("blockers", before),
            lambda b: F.struct(b["partition"].alias("partition"), b["offset"].alias("offset")),
        )
    )
    held = F.when(applicable, first)
    return (
        joined.withColumn("_held", held)
        .withColumns(
            {
                "held_back_behind": F.col("_held")["offset"],
                "held_back_partition": F.col("_held")["partition"].cast("int"),
            }
        )
        .drop("_held", "blockers", "logical_key")
    )


def write_quarantine(ctx: ApplyContext, raw: DataFrame, records: DataFrame) -> None:
    """Append bad and held-back records to the quarantine table, once per Kafka coordinate.

    ``records`` (parsed, without the raw value) are joined back to ``raw``, the Kafka records, for
    their key, value and timestamp as read."""
    from pyspark.sql import functions as F

    records = records.select("partition", "offset", "error", "held_back_behind", "held_back_partition").join(
        raw.select(*KAFKA_RECORD_COLUMNS), ["partition", "offset"]
    )
    records = describe_mismatches(records, list(ctx.columns), ctx.cfg.value_format, ctx.cfg.flattened)

    ctx.side_table(
        QUARANTINE_SUFFIX, [(n, t, False) for n, t, _ in QUARANTINE_COLUMNS], {n: d for n, _, d in QUARANTINE_COLUMNS}
    )
    rows = records.select(
        *KAFKA_RECORD_COLUMNS,
        _reason().alias("error"),
        "held_back_behind",
        F.lit(ctx.plan.run_id).alias("run_id"),
        F.current_timestamp().alias("quarantined_at"),
        F.lit("open").alias("status"),
        "held_back_partition",
    )
    target = ctx.spark_name(QUARANTINE_SUFFIX)
    merge_into(rows, target, ("topic", "partition", "offset")).whenNotMatched().insertAll().merge()


def new_quarantine(ctx: ApplyContext) -> NewQuarantine:
    """The quarantine entries this run wrote (its run id: entries an earlier run wrote, found again
    by a replay, are not), counted and grouped by cause (:mod:`cdclake.model.bad_records`): held
    back or bad, schema id (Avro), column, and the error without its variable parts; bad ones
    first, then the largest. One small Spark job over the run's new entries: a filter on the run
    id, which the quarantine's file statistics answer without reading older runs' files."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if ctx.side_table(QUARANTINE_SUFFIX) is None:
        return NewQuarantine()
    entries = ctx.spark.table(ctx.spark_name(QUARANTINE_SUFFIX)).filter(F.col("run_id") == F.lit(ctx.plan.run_id))
    cause = F.col("error")
    for pattern in VARIABLE_PARTS:
        cause = F.regexp_replace(cause, pattern, ELIDED)
    column = F.regexp_extract("error", COLUMN_IN_ERROR, 1)
    schema_id = schema_id_of_value() if ctx.cfg.value_format == "avro" else F.lit(None).cast("bigint")
    rows = (
        entries.select(
            F.col("held_back_behind").isNotNull().alias("held_back"),
            schema_id.alias("schema_id"),
            F.when(column != "", column).alias("column"),
            F.substring(cause, 1, MAX_PATTERN_CHARS).alias("cause"),
            F.struct("partition", "offset").alias("first"),
        )
        .groupBy("held_back", "schema_id", "column", "cause")
        .agg(F.count(F.lit(1)).alias("records"), F.min("first").alias("first"))
        .withColumn("of_kind", F.sum("records").over(Window.partitionBy("held_back")))
        .orderBy("held_back", F.desc("records"), "first")
        .limit(MAX_CAUSES + 1)
        .collect()
    )
    causes = tuple(
        QuarantineCause(
            cause=r["cause"],
            records=int(r["records"]),
            column=r["column"],
            schema_id=None if r["schema_id"] is None else int(r["schema_id"]),
            held_back=bool(r["held_back"]),
            partition=int(r["first"]["partition"]),
            offset=int(r["first"]["offset"]),
        )
        for r in rows
    )
    totals = {bool(r["held_back"]): int(r["of_kind"]) for r in rows}
    held = totals.get(True, 0)
    if True not in totals and len(rows) > MAX_CAUSES:  # the held-back cause, if any, was cut
        held = entries.filter("held_back_behind is not null").count()
    return NewQuarantine(bad=totals.get(False, 0), held=held, causes=causes)


def _reason() -> Column:
    """The reason a record is quarantined: its error, or which bad record it is held back behind."""
    from pyspark.sql import functions as F

    return F.coalesce(
        "error",
        F.concat(
            F.lit("held back behind the quarantined record at offset "),
            F.col("held_back_behind").cast("string"),
            F.when(
                F.col("held_back_partition") != F.col("partition"),
                F.concat(F.lit(" of partition "), F.col("held_back_partition").cast("string")),
            ).otherwise(F.lit("")),
            F.lit(" of the same key"),
        ),
    )


def first_quarantined(parsed: DataFrame) -> QuarantinedRecord:
    """The batch's first quarantined record (lowest partition, then offset) and its reason: for the
    error of a run that applied nothing (one small Spark job, on that path only)."""
    row = (
        parsed.filter(QUARANTINED)
        .orderBy("partition", "offset")
        .select("partition", "offset", _reason().alias("reason"))
        .first()
    )
    if row is None:
        raise ValueError("the batch has no quarantined record")
    return QuarantinedRecord(int(row["partition"]), int(row["offset"]), str(row["reason"]))


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
    described = []
    for b in bad_rows:
        where = KafkaCoordinates(cfg.topic, b["partition"], b["offset"])
        value = ctx.record_value(b["partition"], b["offset"])
        reason = _describe_bad_record(value, cfg, where, b["error"], ctx.kafka.schema_lookup)
        described.append((b["partition"], b["offset"], value, reason))
    if any(reason == TYPE_MISMATCH for *_, reason in described):
        # the column is named by Spark, on these few values only (parse.describe_mismatches)
        records = ctx.spark.createDataFrame(described, "partition int, offset long, value binary, error string")
        rows = describe_mismatches(records, list(ctx.columns), cfg.value_format, cfg.flattened).orderBy(
            "partition", "offset"
        )
        described = [(r["partition"], r["offset"], None, r["error"]) for r in rows.collect()]
    return BadBatchError([(cfg.topic, p, o, reason) for p, o, _, reason in described], total)


def _describe_bad_record(
    value: bytes | None,
    cfg: TableConfig,
    where: KafkaCoordinates,
    spark_reason: str,
    schema_lookup: SchemaLookup | None,
) -> str:
    """The reason for a record Spark flagged: the envelope's defect as the Python parser names it
    (:func:`~cdclake.model.envelope.parse_value`), else Spark's reason (which names a column whose
    value does not fit, :mod:`cdclake.spark.parse`)."""
    if value is None:
        return spark_reason
    try:
        parse_table_value(cfg, value, where, schema_lookup)
    except BadRecordError as e:
        return e.reason
    return spark_reason
