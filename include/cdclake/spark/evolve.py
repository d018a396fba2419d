"""Schema evolution from the events' own schemas, for tables without a schema-change topic
(``schema_changes.source``; docs/operations.md, "Schema evolution from the events").

``avro``: every writer schema of the batch is known before the parse
(:func:`cdclake.spark.parse_avro.read_writer_schemas`), and each one the table does not take is
observed, named by its schema id and the batch's first record of that id: a column the table
lacks, a type it must promote (int32 -> int64), a type it cannot take. The records of a writer
column the table's column cannot take are bad records of the parse; once the column is promoted
they parse.

``json_with_schema``: the parse reads every record by the table's columns, and a record whose row
schema the table does not take shows there: a column the table lacks (``unknown_column``), or a
value that does not fit its column's type (a bad record: a long in an int column, text in a number
column). This module reads the row schemas of the few records that show it (the first with an
unknown column, the first misfit of each partition) and of the batch's last record (which the
connector-mode check reads anyway, and which shows a change every value still parses under, such as
float -> double).

The schema update is planned (:func:`cdclake.model.schema_from_events.plan_from_events`) and committed in
one Iceberg transaction; the apply then parses the batch again under the new columns. A batch whose
events fit the table costs nothing more: no Spark job, no Kafka read.

A column added with a default (its field's ``default`` in the events' schema) gives it to the rows
written before the column, as ``ADD COLUMN ... DEFAULT`` does at the source: the same transaction
records it in ``cdc.column-defaults`` at the position of the batch's first event showing the
column, and the apply fills it like a default from the schema-change topic (:func:`_defaults_property`;
one more Spark job in the run that adds such a column).

The table config's ``columns`` evolve the table the same way (added and promoted, never set aside),
so that a ``columns:`` edited after the table exists is applied, not ignored.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cdclake.errors import SchemaError
from cdclake.io.kafka import topic_exists
from cdclake.io.schema_evolution import evolve_schema, source_columns, source_schema
from cdclake.model.avro import source_names
from cdclake.model.connector_check import contradicts_modes
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.event_defaults import connect_defaults
from cdclake.model.layout import COLUMN_DEFAULTS_PROPERTY
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition
from cdclake.model.run_state import BatchStats
from cdclake.model.schema_diff import ChangePlan, SourceSchema
from cdclake.model.schema_from_events import ObservedSchema, fits_table, incompatible_columns, plan_from_events
from cdclake.model.types import ColumnSpec, columns_from_config, columns_from_connect
from cdclake.spark.context import ApplyContext
from cdclake.spark.parse import TYPE_MISMATCH
from cdclake.spark.positions import position_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame

    from cdclake.spark.writer_schemas import WriterSchemas

log = logging.getLogger(__name__)

MAX_EVOLUTIONS = 3
"""Schema updates one run makes at most: each is followed by a parse of the batch under the new
columns, which may show a further schema (a batch holding three schema versions)."""


@dataclass(frozen=True)
class IncompatibleCut:
    """The batch holds events from before an incompatible type change that ``incompatible:
    new_column`` sets aside: apply the range up to the change first, unchanged, and the change
    with the events from it by the next run (see :func:`evolve_table`).

    Attributes:
        end: the range's end offsets, cut at the first record showing the change in each
            partition that holds one.
        describe: the change and where it is, for the log.
    """

    end: dict[int, int]
    describe: str


def evolve_table(
    ctx: ApplyContext,
    stats: BatchStats,
    parsed: DataFrame,
    *,
    first: bool,
    writers: WriterSchemas | None = None,
    cut: bool = False,
) -> ApplyContext | IncompatibleCut | None:
    """Evolve the table to the table config's ``columns`` and, for a table without a schema-change
    topic, to the row schemas of the batch's events that it does not take (see the module
    docstring); nothing is read unless the parse shows a misfit.

    Args:
        ctx: the run's context, with the table as the batch was parsed by.
        stats: the parsed batch's statistics.
        parsed: the parsed batch (its ``error`` and ``partition``/``offset``).
        first: the run's first evolution. Later ones, made after the batch was parsed again, take
            no incompatible change: events of the batch from before such a change (its old type)
            would set the new column aside again; they are bad records of the new column instead.
        writers: ``avro``: the batch's writer schemas (:func:`~cdclake.spark.parse_avro.read_writer_schemas`),
            each observed as it is, named by its id and its first record; ``stats`` and ``parsed``
            are then not read.
        cut: when an incompatible type is set aside (``incompatible: new_column``) and the batch
            holds events before the first record showing it, return an :class:`IncompatibleCut`
            instead of updating the table: the events of the old type are applied under it, and
            the run that sets the column aside starts at the change, so that its retry, should it
            fail after the update, reads no event of the old type against the set-aside column.
            In each partition the cut is at its first record read that shows the change (Avro:
            the first record of each writer schema with the new type; JSON: the first record whose
            value does not fit the old type, or the batch's last record).

    Returns:
        The context with the evolved table and its columns, ``None`` when nothing changed, or an
        :class:`IncompatibleCut` (nothing changed yet).

    Raises:
        SchemaChangeError: an incompatible type change under ``schema_changes.incompatible: fail``
            (or in the table config's ``columns``), naming the topic, partition and offset of the
            first event read that shows it (and its writer schema id), the column, its type and
            the new one; nothing committed.
        SchemaError: an event's row schema has a type this version does not map.
    """
    cfg = ctx.cfg
    current = source_schema(ctx.table)
    observed = []
    if cfg.columns is not None:
        observed.append(ObservedSchema(tuple(columns_from_config(cfg.columns, cfg.primary_key))))
    if writers is not None:
        observed.extend(_writers_not_taken(ctx, current, writers, first=first))
    elif cfg.value_format != "json":  # events of other formats carry their row schema
        observed.extend(_drifted(ctx, current, stats, parsed, first=first))
    plan = plan_from_events(current, observed, table=cfg.identifier, policy=cfg.schema_changes)
    if plan.is_empty:
        return None
    if cut and plan.renames:
        end = _cut_before_incompatible(ctx, current, observed, writers)
        if end is not None:
            shown = next(o for o in observed if o.where is not None and incompatible_columns(current, o))
            return IncompatibleCut(end, f"{_describe(plan)}, shown by {shown.describe()}")
    properties = _defaults_property(ctx, plan, observed, parsed, writers, ctx.records) if plan.defaults else {}
    table = evolve_schema(ctx.table, [plan], properties)
    log.info(
        "table %s: schema evolved from %s: %s",
        cfg.identifier,
        "; ".join(o.describe() for o in observed),
        _describe(plan),
    )
    return ctx.with_table(table, source_columns(table))


def _defaults_property(
    ctx: ApplyContext,
    plan: ChangePlan,
    observed: Sequence[ObservedSchema],
    parsed: DataFrame,
    writers: WriterSchemas | None,
    raw: DataFrame | None,
) -> dict[str, str]:
    """The table's ``cdc.column-defaults`` (:data:`~cdclake.model.layout.COLUMN_DEFAULTS_PROPERTY`)
    with the defaults of the columns ``plan`` adds (:attr:`~cdclake.model.schema_diff.ChangePlan.defaults`),
    committed with the schema update that adds them.

    The rule: an event whose own schema lacks the column was produced before the ``ADD COLUMN``
    (Debezium gives each event the schema of its binlog position), so the row it wrote reads the
    default at the source now; an event whose schema shows it carries the column's own value. Each
    column's entry is placed at the position of the batch's first event (lowest position) that
    shows it (:func:`_first_showing`): every event below it is from before the column, every event
    the table holds so far too (the table would have the column otherwise). The apply then fills
    the default, as for a default read from the schema-change topic
    (:mod:`cdclake.model.defaults`): into the rows stored below that position, once, in the run's
    commit (:func:`cdclake.model.decision.decide`, ``backfill``), and into every event below it
    whose value is null, in this run and later ones (events from before the ``ADD COLUMN`` that
    reach Kafka late, or again after a connector restart). A re-emitted older event changes no row
    it does not supersede (the no-regression rule), and a deleted row stays deleted: the backfill
    updates the rows the table holds, and a tombstone keeps an older event out.

    Not filled (recorded with ``exact: false`` and logged): a default the lake cannot know
    (:func:`cdclake.model.event_defaults.connect_default`), one no applied event of the batch shows, and
    every default of a table ordered by Kafka offset alone (no position places the column among
    the events of other partitions).
    """
    cfg = ctx.cfg
    wanted = [c for c, d in plan.defaults.items() if d.exact and d.sql is not None]
    firsts: dict[str, BinlogPosition] = {}
    if wanted and cfg.ordering in SOURCE_ORDERINGS:
        firsts = _first_showing(ctx, wanted, observed, parsed, writers, raw)
    entries = json.loads(ctx.table.properties.get(COLUMN_DEFAULTS_PROPERTY, "{}"))
    for column, default in plan.defaults.items():
        position = firsts.get(column)
        exact = default.exact and default.sql is not None and position is not None
        reason = default.reason
        if default.exact and default.sql is not None and position is None:
            reason += (
                f"; ordering {cfg.ordering} places no column among the events"
                if cfg.ordering not in SOURCE_ORDERINGS
                else "; no applied event of the batch shows the column"
            )
        entry: dict[str, object] = {"sql": default.sql if exact else None, "exact": exact, "reason": reason}
        if position is not None:
            entry["position"] = position.to_text()
        entries[column] = entry
        if exact:
            log.info(
                "table %s: column %r added from the events with %s: the rows from before it (below %s) read %s; "
                "this run fills it in",
                cfg.identifier,
                column,
                reason,
                position.to_event_text() if position is not None else None,
                default.sql,
            )
        else:
            log.warning(
                "table %s: column %r added from the events: the rows from before it read a value the lake does "
                "not fill (%s); they read NULL in the lake until a re-snapshot or a reconcile repair",
                cfg.identifier,
                column,
                reason,
            )
    return {COLUMN_DEFAULTS_PROPERTY: json.dumps(entries, sort_keys=True)}


def _first_showing(
    ctx: ApplyContext,
    columns: Sequence[str],
    observed: Sequence[ObservedSchema],
    parsed: DataFrame,
    writers: WriterSchemas | None,
    raw: DataFrame | None,
) -> dict[str, BinlogPosition]:
    """The lowest position of the batch's applicable events (not bad, not Kafka tombstones) whose
    own schema shows each of ``columns``, by one Spark job: for Avro, the records of the writer
    schemas that have the column (the parse's ``schema_id``); for ``json_with_schema``, the records
    whose row image has the field (its JSON names, read from ``raw``; ``JsonConverter`` writes
    every field of the schema, null or not), among those the parse found a column the table lacks
    in. A column no such event shows is left out."""
    from pyspark.sql import functions as F

    events = parsed.filter("error IS NULL AND NOT is_tombstone")
    if writers is not None:
        shown = {
            c: sorted(
                {o.schema_id for o in observed if o.schema_id is not None and any(s.name == c for s in o.columns)}
            )
            for c in columns
        }
        flags = {c: F.col("schema_id").isin(*ids) if ids else F.lit(False) for c, ids in shown.items()}
    else:
        if raw is None:
            return {}
        text = F.col("value").cast("string")
        image = F.coalesce(F.get_json_object(text, "$.payload.after"), F.get_json_object(text, "$.payload.before"))
        names = F.coalesce(F.json_object_keys(image), F.array().cast("array<string>"))
        marks = raw.select(
            "partition", "offset", *[F.array_contains(names, c).alias(f"_shows{i}") for i, c in enumerate(columns)]
        )
        events = events.filter(F.col("unknown_column").isNotNull()).select("partition", "offset", "position")
        events = events.join(marks, ["partition", "offset"])
        flags = {c: F.col(f"_shows{i}") for i, c in enumerate(columns)}
    row = events.agg(
        *[F.min(F.when(flag, F.col("position"))).alias(f"_first{i}") for i, flag in enumerate(flags.values())]
    ).collect()[0]
    return {c: position_of(row[f"_first{i}"]) for i, c in enumerate(flags) if row[f"_first{i}"] is not None}


def _cut_before_incompatible(
    ctx: ApplyContext, current: SourceSchema, observed: Sequence[ObservedSchema], writers: WriterSchemas | None
) -> dict[int, int] | None:
    """The batch's end offsets cut at the first record showing an incompatible type in each
    partition (see :func:`evolve_table`), or ``None`` when no event comes before the change."""
    starts: dict[int, int] = {}
    for o in observed:
        where = o.where
        if where is None or where.partition is None or where.offset is None or not incompatible_columns(current, o):
            continue
        shown: dict[int, int] = {where.partition: where.offset}
        if writers is not None and o.schema_id is not None:
            shown = dict(writers.first_in_partition.get(o.schema_id, shown))
        for partition, offset in shown.items():
            starts[partition] = min(starts.get(partition, offset), offset)
    rng = ctx.plan.range
    end = {p: max(rng.start[p], min(e, starts.get(p, e))) for p, e in rng.end.items()}
    if not starts or all(end[p] == rng.start[p] for p in end):
        return None
    return end


def _describe(plan: ChangePlan) -> str:
    parts = [f"column {old!r} set aside as {new!r} (incompatible type)" for old, new in plan.renames]
    parts += [f"column {spec.name!r} {spec.iceberg_type} added" for spec, _ in plan.adds]
    parts += [f"column {name!r} promoted to {typ}" for name, typ in plan.promotions]
    parts += [f"column {name!r} made optional" for name in plan.optional]
    return ", ".join(parts)


def _writers_not_taken(
    ctx: ApplyContext, current: SourceSchema, writers: WriterSchemas, *, first: bool
) -> list[ObservedSchema]:
    """The batch's Avro writer schemas the table does not take, each named by its id and the
    first record of that id, in Kafka order (partition, offset); none for a table that evolves by
    its schema-change topic. Every writer schema of the batch is known before the parse: no Spark
    job, and a Kafka metadata request only when one is not taken."""
    schemas = [
        (KafkaCoordinates(ctx.cfg.topic, p, o), row, schema_id)
        for schema_id, (p, o), row in writers.row_schemas(ctx.cfg.flattened)
    ]
    drifted = _not_taken(ctx, current, schemas, first=first)
    return drifted if drifted and from_events(ctx) else []


def _drifted(
    ctx: ApplyContext, current: SourceSchema, stats: BatchStats, parsed: DataFrame, *, first: bool
) -> list[ObservedSchema]:
    """``json_with_schema``: the row schemas the table does not take, of the batch's last record,
    its first record with an unknown column and its first misfit of each partition, in Kafka order
    (partition, offset); none for a table that evolves by its schema-change topic. Only a batch
    with bad records costs a Spark job (the misfits), and only a batch the table does not take a
    Kafka metadata request."""
    from pyspark.sql import functions as F

    coordinates = set(stats.schema_samples[-1:])
    if stats.unknown_column is not None:
        coordinates.add((stats.unknown_column.partition, stats.unknown_column.offset))
    drifted = _not_taken(ctx, current, _read_row_schemas(ctx, coordinates), first=first)
    if not (drifted or stats.bad) or not from_events(ctx):
        return []
    if stats.bad:
        misfit = (F.col("error") == TYPE_MISMATCH) | F.col("error").startswith("column '")
        rows = parsed.filter(misfit).groupBy("partition").agg(F.min("offset").alias("offset")).collect()
        misfits = {(int(r["partition"]), int(r["offset"])) for r in rows} - coordinates
        drifted += _not_taken(ctx, current, _read_row_schemas(ctx, misfits), first=first)
    return sorted(drifted, key=lambda o: (o.where.partition, o.where.offset) if o.where else (-1, -1))


def _read_row_schemas(
    ctx: ApplyContext, coordinates: set[tuple[int, int]]
) -> list[tuple[KafkaCoordinates, dict[str, Any], None]]:
    """The Connect row schemas of the records at ``coordinates`` (one Kafka read each; a record
    without one is left out)."""
    out = []
    for partition, offset in sorted(coordinates):
        row_schema = ctx.row_schema(partition, offset)
        if row_schema is not None:
            out.append((KafkaCoordinates(ctx.cfg.topic, partition, offset), row_schema, None))
    return out


def _not_taken(
    ctx: ApplyContext,
    current: SourceSchema,
    schemas: Sequence[tuple[KafkaCoordinates, dict[str, Any], int | None]],
    *,
    first: bool,
) -> list[ObservedSchema]:
    """Of ``schemas`` (``(the record that shows it, its Connect row schema, its writer schema id
    or None)``), those the table does not take as it is (after the run's first evolution: leaving
    out those with an incompatible type, see :func:`evolve_table`)."""
    avro = ctx.cfg.value_format == "avro"
    out = []
    for where, row_schema, schema_id in schemas:
        try:
            shown = columns_from_connect(row_schema)
            columns = _as_the_table_reads(current, shown, avro=avro)
        except SchemaError as e:
            if not from_events(ctx):  # the schema-change topic says what the columns are
                continue
            of_id = f" (writer schema id {schema_id})" if schema_id is not None else ""
            raise SchemaError(f"{where}{of_id}: the event's row schema cannot be mapped to Iceberg: {e}") from e
        names = {s.name: c.name for s, c in zip(shown, columns, strict=True)}
        defaults = {names.get(n, n): v for n, v in connect_defaults(row_schema).items()}
        observed = ObservedSchema(tuple(columns), where, schema_id, defaults)
        if not fits_table(current, observed) and (first or not incompatible_columns(current, observed)):
            out.append(observed)
    return out


def _as_the_table_reads(current: SourceSchema, columns: list[ColumnSpec], *, avro: bool) -> list[ColumnSpec]:
    """``columns`` by their source names (``avro``: a field name adjusted by Debezium's ``avro`` name
    adjustment is the table column's it stands for: :func:`cdclake.model.avro.source_names`), with
    each column whose encoding contradicts the table's connector modes taken as the table's column:
    the connector-mode check reports it (``decimal.handling.mode=double`` against a decimal column
    is a connector setting, not a source schema change)."""
    if avro:
        names = source_names([c.name for c in columns], [c.name for c in current.columns])
        columns = [replace(c, name=names[c.name]) for c in columns]
    out = []
    for c in columns:
        existing = current.get(c.name)
        if existing is not None and contradicts_modes(existing.encoding, c.encoding):
            c = replace(existing, required=c.required)
        out.append(c)
    return out


def from_events(ctx: ApplyContext) -> bool:
    """Whether the table evolves from its events: ``schema_changes.source: events``, an ordering
    that places no schema change among the events (``kafka``), or no schema-change topic (asked of
    Kafka only when the events show a schema the table does not take)."""
    cfg = ctx.cfg
    if cfg.schema_changes.source == "events" or cfg.ordering not in SOURCE_ORDERINGS:
        return True
    return not topic_exists(ctx.kafka, cfg.schema_change_topic)
