"""Deletes that only a Kafka tombstone still carries (Spark): on a log-compacted data topic
(``cleanup.policy=compact``) Kafka keeps the last record of each key, so a table that fell behind
may find a deleted row's ``d`` event compacted away and only the tombstone Debezium wrote after it
(``tombstones.on.delete=true``) left.

A *bare* tombstone is a Kafka tombstone of the batch whose key's last record before it is not a
``d`` event and which no record of its key follows, in its partition (keys compared by their bytes: Debezium keys a
row's records alike, and Kafka compacts by those bytes). Its key's row goes, when the row was
written by a record of the same partition at a lower offset (the table's ``_cdc_kafka_partition``
and ``_cdc_kafka_offset``): the tombstone follows every record of the key that partition held
before it. A row written from another partition (the key's bytes changed) or from a higher offset
(a replay that stops before the tombstone's key was written again) stays. A tombstone that follows
its ``d`` in the batch (no compaction) is not bare; one whose ``d`` a run before applied finds no
row. The delete is part of the run's commit. It is written to no delete-tombstone table, change
feed or history: the ``d`` that would say when the row went is gone.

The key is read as the row's primary key: a JSON key's payload (``{"schema", "payload"}`` or the
bare object), an Avro key decoded by its writer schema from the registry, each column decoded as
the value's columns are (:func:`cdclake.spark.decode.decode`). A key that cannot be read deletes
nothing and is said at warning, once per run.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from cdclake.model.avro import read_value
from cdclake.spark.context import ApplyContext
from cdclake.spark.decode import decode, json_read_type
from cdclake.spark.flat import all_of
from cdclake.spark.merge import SOURCE_ALIAS, source_column
from cdclake.spark.names import qualified, quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

_KEY_TEXT = "_cdc_key_text"
"""Column of :func:`bare_tombstones`: the key's primary-key object as JSON text."""


def bare_tombstones(ctx: ApplyContext, parsed: DataFrame) -> DataFrame | None:
    """The batch's bare Kafka tombstones (module docstring) as ``partition``, ``offset`` and the
    key's primary-key columns, decoded; ``None`` when there are none (one Spark job over the batch's
    tombstones).

    Args:
        ctx: the run (its columns, primary key and value format).
        parsed: the parsed batch (``partition``, ``offset``, ``key``, ``is_tombstone``, ``op``).
    """
    from pyspark.sql import functions as F

    tombstones = parsed.filter("is_tombstone and key is not null").select("partition", "offset", "key")
    events = parsed.filter("not is_tombstone and key is not null").select(
        F.col("partition").alias("e_partition"), F.col("offset").alias("e_offset"), F.col("key").alias("e_key"), "op"
    )
    same = (F.col("e_partition") == F.col("partition")) & (F.col("e_key") == F.col("key"))
    # per tombstone: an event of its key after it, and the last event of its key before it
    seen = (
        F.broadcast(tombstones)
        .join(events, same, "left")
        .groupBy("partition", "offset", "key")
        .agg(
            F.max(F.when(F.col("e_offset") > F.col("offset"), F.lit(1))).alias("later"),
            F.max(F.when(F.col("e_offset") < F.col("offset"), F.struct("e_offset", "op"))).alias("before"),
        )
    )
    bare = seen.filter(F.col("later").isNull() & (F.col("before").isNull() | (F.col("before.op") != "d")))
    bare = bare.select("partition", "offset", "key")
    if ctx.cfg.value_format == "avro":
        rows = bare.collect()
        if not rows:
            return None
        return _decoded(
            ctx,
            ctx.spark.createDataFrame(
                _avro_key_texts(ctx, rows), "partition int, offset long, " + f"{_KEY_TEXT} string"
            ),
        )
    if bare.isEmpty():
        return None
    text = F.col("key").cast("string")
    fields = F.map_keys(F.from_json(text, "map<string,string>"))
    enveloped = (F.size(fields) == 2) & F.array_contains(fields, "schema") & F.array_contains(fields, "payload")
    body = F.when(enveloped, F.get_json_object(text, "$.payload")).otherwise(text)
    return _decoded(ctx, bare.select("partition", "offset", body.alias(_KEY_TEXT)))


def _avro_key_texts(ctx: ApplyContext, rows: list) -> list[tuple[int, int, str | None]]:
    """``(partition, offset, key JSON)`` of collected Avro tombstones, the key decoded by its
    writer schema (``None`` when it cannot be: said once, at warning)."""
    lookup = ctx.kafka.schema_lookup
    out: list[tuple[int, int, str | None]] = []
    unread: list[str] = []
    for r in rows:
        try:
            if lookup is None:
                raise ValueError("no schema registry")
            _, _, datum = read_value(bytes(r["key"]), lookup)
            out.append((r["partition"], r["offset"], json.dumps(datum)))
        except Exception as e:  # noqa: BLE001 - a key that cannot be read deletes nothing
            unread.append(f"partition {r['partition']} offset {r['offset']}: {e}")
            out.append((r["partition"], r["offset"], None))
    if unread:
        log.warning(
            "table %s: %d Kafka tombstone key(s) could not be read, so their rows are not deleted (first: %s)",
            ctx.cfg.identifier,
            len(unread),
            unread[0],
        )
    return out


def _decoded(ctx: ApplyContext, keys: DataFrame) -> DataFrame:
    """``keys`` (``partition``, ``offset``, :data:`_KEY_TEXT`) with the primary-key columns decoded
    from the key's JSON; rows whose key lacks one are dropped."""
    from pyspark.sql import functions as F

    by_name = {c.name: c for c in ctx.columns}
    pk = [by_name[name] for name in ctx.cfg.primary_key]
    read = {c.name: json_read_type(c.encoding) for c in pk}
    schema = ", ".join(f"{quote_identifier(c.name)}: {read[c.name]}" for c in pk)
    raw = keys.withColumn("_cdc_key_raw", F.from_json(F.col(_KEY_TEXT), f"struct<{schema}>"))
    decoded = raw.select(
        "partition",
        "offset",
        *[decode(f"_cdc_key_raw.{quote_identifier(c.name)}", c.encoding, read[c.name]).alias(c.name) for c in pk],
    )
    return decoded.dropna(subset=[c.name for c in pk])


def delete_compacted(ctx: ApplyContext, target: str, keys: DataFrame) -> None:
    """Delete from ``target`` (the run's branch) the rows of ``keys`` (:func:`bare_tombstones`)
    written by a record of the tombstone's partition at a lower offset: one ``MERGE``."""
    from pyspark.sql import functions as F

    same_key = [F.col(qualified(target, k)) == source_column(k) for k in ctx.cfg.primary_key]
    before = [
        F.col(qualified(target, "_cdc_kafka_partition")) == source_column("partition"),
        F.col(qualified(target, "_cdc_kafka_offset")) < source_column("offset"),
    ]
    # one source row per key and partition: its latest tombstone
    latest = keys.groupBy(*ctx.cfg.primary_key, "partition").agg(F.max("offset").alias("offset"))
    latest.alias(SOURCE_ALIAS).mergeInto(target, all_of([*same_key, *before])).whenMatched().delete().merge()
    log.info(
        "table %s: rows of Kafka tombstones whose delete event is not in the topic (log compaction) deleted",
        ctx.cfg.identifier,
    )
