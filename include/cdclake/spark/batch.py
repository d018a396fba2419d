"""The parse stage of a run (Spark): the batch parsed into a cache, cut to whole source
transactions, its records held back behind bad ones, its statistics, and, for Avro values, the
writer schemas of its own schema ids.

The statistics pass is the first Spark job over the parse's cache: it fills it, and the same pass
finds the batch's schema ids (:func:`~cdclake.spark.writer_schemas.id_aggregates`) and whether any
record is bad (a table without a quarantine table needs no job for the keys records are held back
behind then).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cdclake.model.connector_check import mode_contradictions
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.run_state import BatchStats
from cdclake.spark.context import ApplyContext
from cdclake.spark.parse import parse_records, unknown_columns_floor
from cdclake.spark.parse_avro import parse_avro_records
from cdclake.spark.quarantine import split_bad_and_held
from cdclake.spark.session import unpersist_quietly
from cdclake.spark.stats import batch_stats
from cdclake.spark.transactions import TransactionCut, cut_batch
from cdclake.spark.writer_schemas import (
    WriterSchemas,
    batch_writer_schemas,
    batch_writers_of,
    id_aggregates,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ParsedBatch:
    """One batch parsed (:func:`parse_batch`): what the decision and the write of a run read.

    Attributes:
        ctx: the run's context, its plan's range cut to whole source transactions
            (:func:`~cdclake.spark.transactions.cut_batch`; the range read when nothing was cut).
        base: the cache the batch was parsed into: one row per Kafka record of the range read,
            without the raw value (``MEMORY_AND_DISK``; its owner unpersists it).
        parsed: ``base`` cut to whole source transactions, with the quarantine's hold-backs
            (:func:`~cdclake.spark.quarantine.split_bad_and_held`): one row per record of the cut
            range, tombstones included; ``error`` (bad) and ``held_back_behind`` tell the records
            applied (:data:`~cdclake.spark.stats.GOOD`) from those quarantined
            (:data:`~cdclake.spark.quarantine.QUARANTINED`).
        stats: the statistics of ``parsed`` (:func:`~cdclake.spark.stats.batch_stats`), with the
            connector modes the events contradict.
        whole: the cut to whole source transactions; ``None``: the table does not keep them whole.
        writers: the batch's writer schemas (Avro values); ``None``: JSON values.
    """

    ctx: ApplyContext
    base: DataFrame
    parsed: DataFrame
    stats: BatchStats
    whole: TransactionCut | None
    writers: WriterSchemas | None


def parse_batch(ctx: ApplyContext, writers: WriterSchemas | None) -> ParsedBatch:
    """The try's records (:attr:`~cdclake.spark.context.ApplyContext.records`) parsed by the table's columns (``writers``: Avro values, by these writer schemas)
    into a cache without the raw values, the same cut to whole source transactions
    (:func:`~cdclake.spark.transactions.cut_batch`; the context's plan then holds the cut range)
    with the quarantine's hold-backs, its statistics, the cut and the batch's writer schemas
    (``writers`` not :attr:`~cdclake.spark.writer_schemas.WriterSchemas.complete`: the batch's own,
    found by the statistics pass, and the batch parsed again when it holds ids they lack; the
    caller unpersists the cache, :attr:`ParsedBatch.base`)."""
    from pyspark import StorageLevel

    cfg, columns, raw = ctx.cfg, list(ctx.columns), ctx.raw
    registry = ctx.kafka.schema_registry

    def parse(writers: WriterSchemas | None) -> DataFrame:
        if writers is not None:
            records = parse_avro_records(
                raw,
                writers.schemas,
                columns,
                cfg.primary_key,
                cfg.ordering,
                unusable=writers.unusable,
                flattened=cfg.flattened,
            )
        else:
            records = parse_records(raw, cfg.value_format, columns, cfg.primary_key, cfg.ordering, cfg.flattened)
        return records.drop("value").persist(StorageLevel.MEMORY_AND_DISK)

    def parse_again(batch: WriterSchemas) -> DataFrame:
        log.info("table %s: the batch holds schema ids %s: parsed again with them", cfg.identifier, sorted(batch.first))
        base.unpersist()
        return parse(batch)

    base = parse(writers)
    try:
        if writers is not None and not writers.complete and ctx.plan.transactions is not None:
            # the cut to whole transactions reads the records' positions: parsed by their own schemas first
            assert registry is not None  # an avro batch's writers come from it
            batch = batch_writer_schemas(base, writers, registry.writer_schema)
            base = base if writers.covers(batch) else parse_again(batch)
            writers = batch
        partitions = sorted(ctx.plan.range.end)
        while True:
            cut_ctx, whole_batch, whole = cut_batch(ctx, base)
            ids = id_aggregates(writers, partitions) if writers is not None and not writers.complete else None
            parsed, stats, values = _split_and_count(cut_ctx, whole_batch, ids)
            if writers is not None and not writers.complete:
                assert registry is not None
                found = batch_writers_of(values, writers, partitions, registry.writer_schema) if ids else None
                batch = found or batch_writer_schemas(base, writers, registry.writer_schema)
                if not writers.covers(batch):  # parsed again, and counted again
                    base, writers = parse_again(batch), batch
                    continue
                writers = batch
            stats = _check_connector_modes(cut_ctx, stats, writers)
            return ParsedBatch(cut_ctx, base, parsed, stats, whole, writers)
    except BaseException:
        unpersist_quietly(base)
        raise


def _split_and_count(
    ctx: ApplyContext, batch: DataFrame, more: Mapping[str, Column] | None
) -> tuple[DataFrame, BatchStats, Mapping[str, Any]]:
    """``batch`` with the quarantine's hold-backs (:func:`~cdclake.spark.quarantine.split_bad_and_held`)
    and its statistics with ``more`` (:func:`~cdclake.spark.stats.batch_stats`). The hold-backs are
    first those of the quarantine's entries alone (for a table without a quarantine table, none:
    no job looks for the bad records' keys); when the statistics find bad records in the batch,
    their keys are held back too, and the statistics counted again."""
    floor = unknown_columns_floor(ctx.table)
    parsed = split_bad_and_held(ctx, batch, batch_bad=False)
    stats, values = batch_stats(parsed, ctx.cfg, floor, more)
    if stats.bad:
        parsed = split_bad_and_held(ctx, batch)
        stats, values = batch_stats(parsed, ctx.cfg, floor, more)
    return parsed, stats, values


def _check_connector_modes(ctx: ApplyContext, stats: BatchStats, writers: WriterSchemas | None) -> BatchStats:
    """``stats`` with the connector modes the events contradict (:mod:`cdclake.model.connector_check`),
    checked on the Connect schemas of the batch's first and last record (two Kafka reads; events
    without a schema are not checked) or, Avro, of every writer schema of the batch (``writers``,
    each named by its first record; no read), and said once in the run's log."""
    if ctx.cfg.value_format == "json":
        return stats
    schemas = []
    if writers is not None:
        schemas = [
            (KafkaCoordinates(ctx.cfg.topic, p, o), row) for _, (p, o), row in writers.row_schemas(ctx.cfg.flattened)
        ]
    for partition, offset in stats.schema_samples if writers is None else ():
        row_schema = ctx.row_schema(partition, offset)
        if row_schema is not None:
            schemas.append((KafkaCoordinates(ctx.cfg.topic, partition, offset), row_schema))
    found = tuple(c.describe() for c in mode_contradictions(ctx.columns, schemas, ctx.cfg.connector))
    if found:
        log.warning(
            "table %s: THE EVENTS CONTRADICT THE CONNECTOR MODES the table was made for; they are applied as "
            "the table's columns read them (docs/operations.md, \"Events that contradict the connector "
            'modes"): %s',
            ctx.cfg.identifier,
            "; ".join(found),
        )
    return replace(stats, connector_contradictions=found)
