"""Reduction of a batch (Spark): the latest event per primary key, and the delete tombstones
(``<table>__cdc_tombstones``) that keep a re-emitted or replayed older event from bringing a
deleted row back (``docs/architecture.md``, "The apply contract")."""

from __future__ import annotations

import operator
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.model.layout import TOMBSTONE_COLUMNS, TOMBSTONES_SUFFIX
from cdclake.spark.context import ApplyContext
from cdclake.spark.merge import SOURCE, merge_into
from cdclake.spark.positions import position_column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def reduce_latest(events: DataFrame, primary_key: tuple[str, ...]) -> DataFrame:
    """Keep, per primary key, the event at the greatest position.

    Order: ``(file_seq, pos, row, change rank)``, where a snapshot read ranks below a change at an
    equal position; identical positions (the same event twice) keep either copy.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy(*[F.col("image")[c] for c in primary_key]).orderBy(
        F.col("position").desc(), F.col("partition").desc(), F.col("offset").desc()
    )
    return events.withColumn("_rn", F.row_number().over(w)).filter("_rn = 1").drop("_rn")


def apply_tombstones(ctx: ApplyContext, reduced: DataFrame, *, record: bool = True) -> DataFrame:
    """Discard upserts at or below their key's tombstone; record the batch's deletes as
    tombstones (newest position per key). Returns the surviving merge source.

    ``record=False`` (the batch holds no delete event) records nothing: no ``MERGE`` into the
    tombstone table, no commit there."""
    from pyspark.sql import functions as F

    cfg = ctx.cfg
    by_name = {c.name: c for c in ctx.columns}
    pk_fields = [(c, by_name[c].iceberg_type, True) for c in cfg.primary_key]
    ctx.side_table(
        TOMBSTONES_SUFFIX,
        pk_fields + [(n, t, False) for n, t, _ in TOMBSTONE_COLUMNS],
        {n: d for n, _, d in TOMBSTONE_COLUMNS},
    )
    name = ctx.spark_name(TOMBSTONES_SUFFIX)
    tomb = ctx.spark.table(name).select(
        *[F.col(c).alias(f"_tomb_{c}") for c in cfg.primary_key],
        position_column(cfg.ordering, change=True).alias("_tomb_position"),
    )
    cond = reduce(operator.and_, [F.col("image")[c] == F.col(f"_tomb_{c}") for c in cfg.primary_key])
    joined = reduced.join(tomb, cond, "left")
    survivors = joined.filter(
        F.col("_tomb_position").isNull() | (F.col("_cdc_op") == "d") | (F.col("position") > F.col("_tomb_position"))
    ).drop(*[f"_tomb_{c}" for c in cfg.primary_key], "_tomb_position")

    if not record:
        return survivors
    deletes = reduced.filter("_cdc_op = 'd'").select(
        *[F.col("image")[c].alias(c) for c in cfg.primary_key],
        "_cdc_binlog_file_seq",
        "_cdc_binlog_pos",
        "_cdc_binlog_row",
        "_cdc_gtid_seq",
        "_cdc_source_ts",
        F.current_timestamp().alias("_cdc_recorded_at"),
    )
    newer = position_column(cfg.ordering, SOURCE, change=True) > position_column(cfg.ordering, name, change=True)
    merge_into(deletes, name, cfg.primary_key).whenMatched(newer).updateAll().whenNotMatched().insertAll().merge()
    return survivors
