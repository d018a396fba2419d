"""The apply: one run plan (a Kafka offset range of Debezium events) -> one Iceberg commit.

This is the apply contract (``docs/architecture.md``, "The apply contract"), as
``read -> parse -> stats -> decide -> write -> commit``; each step lives in the module named:

1. **Start check** (:func:`cdclake.model.decision.check_start`). The table's committed offsets
   must be the range's start in every partition the table committed (a partition the topic gained
   since starts at its low watermark); if they are its end, the range is already applied (an
   Airflow retry after the commit) and nothing happens; anything else is another run's commit
   (:class:`~cdclake.errors.ConcurrentRunError`). A manual replay (``plan.replay``) starts wherever
   the operator said, once: a replay whose run id committed already is applied already.
2. **Read** exactly ``[start, end)`` of each partition (:mod:`cdclake.spark.read`).
3. **Parse and decode** (:mod:`cdclake.spark.parse`, :mod:`cdclake.spark.decode`). Kafka
   tombstones (null values) are skipped and counted.
4. **Statistics** (:mod:`cdclake.spark.stats`): one pass gives the typed
   :class:`~cdclake.model.run_state.BatchStats`.
5. **Bad records** (:mod:`cdclake.spark.quarantine`): quarantined with the records of their key
   held back behind them, or the run fails naming them (``bad_records: fail``). A run that newly
   quarantined more bad records than ``bad_records_tolerance`` fails after its commit, naming
   their causes (:mod:`cdclake.model.bad_records`).
6. **Decide** (:func:`cdclake.model.decision.decide`, pure): events are ordered by binlog position
   ``(file sequence number, pos, row, change rank)`` (:mod:`cdclake.model.position`), so events of
   another binlog basename or server stop the table (:class:`~cdclake.errors.PositionOrderError`);
   a truncate (``op: t``) at position T becomes the table's *truncate floor*, below which events
   are discarded; the full-snapshot rule (:mod:`cdclake.model.convergence`), the column defaults,
   and the snapshot summary that carries the table's state forward.
7. **Reduce** (:mod:`cdclake.spark.reduce`): the latest event per primary key; upserts at or
   below the key's delete tombstone are discarded and the batch's deletes update the tombstones.
8. **Commit** (:mod:`cdclake.spark.commit`): ``MERGE INTO`` a run branch, the offsets and counts
   in the snapshot summary, then ``main`` fast-forwarded. A table with a change feed gets the
   changes the merge applies committed to ``<table>__changes`` just before (:mod:`cdclake.spark.changes`),
   and a table with a history its versions to ``<table>__history`` (:mod:`cdclake.spark.history`).

Tables configured ``write_mode: changelog`` (no primary key) skip the truncate and step 7 and
append every event as a row.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cdclake.errors import ConcurrentRunError
from cdclake.io.catalog import load_catalog, update_table_property
from cdclake.io.kafka import KafkaClients, offsets_for_time, topic_watermarks
from cdclake.io.run_inputs import read_run_inputs
from cdclake.model.bad_records import NewQuarantine, describe_causes, tolerance_error
from cdclake.model.convergence import IdentitySpan, SourceIdentity
from cdclake.model.decision import (
    RunDecision,
    check_columns,
    column_defaults,
    decide,
    nothing_applied_error,
    starting_state,
)
from cdclake.model.layout import (
    COLUMN_DEFAULTS_PROPERTY,
    COMMITTED_PROPERTY,
    METADATA_COLUMNS,
    QUARANTINE_SUFFIX,
    TOMBSTONES_SUFFIX,
    SummaryKeys,
)
from cdclake.model.offsets import Offsets
from cdclake.model.outcome import ApplyResult, Replan, replan_until_applied
from cdclake.model.plan import RunPlan
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition
from cdclake.model.run_state import ColumnDefault
from cdclake.model.transactions import Cut, extended_end
from cdclake.model.write_plan import Backfill, WritePlan, write_plan
from cdclake.settings import Settings
from cdclake.spark.batch import ParsedBatch, parse_batch
from cdclake.spark.changes import event_columns, write_changes
from cdclake.spark.commit import commit, demote_rows, merge
from cdclake.spark.compacted import bare_tombstones, delete_compacted
from cdclake.spark.context import ApplyContext, create_table
from cdclake.spark.evolve import MAX_EVOLUTIONS, IncompatibleCut, evolve_table, from_events
from cdclake.spark.history import write_history
from cdclake.spark.names import quote_identifier
from cdclake.spark.positions import position_column, position_literal, position_literal_sql, position_sql
from cdclake.spark.quarantine import QUARANTINED, bad_batch, first_quarantined, new_quarantine, write_quarantine
from cdclake.spark.read import read_range
from cdclake.spark.reduce import reduce_batch
from cdclake.spark.session import unpersist_quietly
from cdclake.spark.stats import GOOD, first_offsets_outside, identity_spans, snapshot_groups
from cdclake.spark.transactions import extended_plan, record_wait, transaction_summary
from cdclake.spark.writer_schemas import WriterSchemas, writer_schemas_for

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Column, DataFrame, SparkSession

log = logging.getLogger(__name__)


def apply_range(
    spark: SparkSession,
    settings: Settings,
    plan: RunPlan,
    *,
    kafka: KafkaClients | None = None,
    cut_incompatible: bool = True,
) -> ApplyResult:
    """Apply one run plan to the table in one Iceberg commit (see the module docstring).

    The commit's summary properties are set on ``spark``'s session conf while it writes: one run
    at a time per session (each table run opens its own session).

    A try that finds the range is to be applied as another (a
    :class:`~cdclake.model.outcome.Replan`: a source transaction larger than the range, a group
    member reading on, an incompatible type change) applies nothing, and the run tries the other
    range (:func:`~cdclake.model.outcome.replan_until_applied`; :func:`apply_once` is one try).

    Args:
        kafka: the Kafka clients; default: plaintext to ``settings.kafka_bootstrap``.
        cut_incompatible: a batch holding events before an incompatible type change that
            ``incompatible: new_column`` sets aside is applied up to the change only (the change
            waits for the next run; :func:`~cdclake.spark.evolve.evolve_table`). ``False`` for
            the range so cut.

    Raises:
        ConfigError: a table without primary key in ``upsert`` mode.
        ConcurrentRunError: the table's committed offsets are neither the range's start nor its
            end, or another run committed while this one ran.
        BadBatchError: ``bad_records: fail`` and records that cannot be applied (nothing committed).
        QuarantinedBatchError: every record of the range was quarantined, none applied (raised
            after the quarantine was written and the offsets committed).
        QuarantineToleranceError: ``bad_records: quarantine`` and the run newly quarantined more
            bad records than ``bad_records_tolerance`` (raised after the commit; the range is then
            applied: a retry finds nothing to do).
        PositionOrderError: the events change binlog basename or source server.
        SchemaError: the table cannot be created from, or does not fit, the events.
        TransactionTooLargeError: a source transaction needs more than ``max_transaction_events``
            records (nothing committed).
        ReplanLimitError: the range changed more than
            :data:`~cdclake.model.outcome.MAX_REPLANS` times (a bug; the batch was not committed).
    """
    clients = kafka or KafkaClients.from_settings(settings)
    return replan_until_applied(
        lambda p, cut: apply_once(spark, settings, p, kafka=clients, cut_incompatible=cut), plan, cut_incompatible
    )


def apply_once(
    spark: SparkSession, settings: Settings, plan: RunPlan, *, kafka: KafkaClients, cut_incompatible: bool
) -> ApplyResult | Replan:
    """One try of :func:`apply_range` (its arguments, but ``kafka`` resolved, and its errors): the
    plan's range applied in one commit, found applied, empty or waiting (:class:`ApplyResult`),
    or the plan to try instead (:class:`~cdclake.model.outcome.Replan`; this try committed nothing
    of the range)."""
    plan.table.check_runnable(has_schema_registry=kafka.schema_registry is not None)
    if plan.range.is_empty:
        return ApplyResult("empty")
    opened = _open(spark, settings, plan, kafka)
    if isinstance(opened, ApplyResult):
        return opened
    return _apply_records(opened, cut_incompatible=cut_incompatible)


def _open(spark: SparkSession, settings: Settings, plan: RunPlan, kafka: KafkaClients) -> ApplyContext | ApplyResult:
    """Steps 1 and 2 of the module docstring: the plan's table read once
    (:func:`~cdclake.io.run_inputs.read_run_inputs`, with the start check), created from the events
    when it does not exist, and the range read.

    Returns:
        The try's context, or the result when the range is applied already.

    Raises:
        ConcurrentRunError: another run committed since this one was planned.
        SchemaError: the table cannot be created from the events.
    """
    catalog = load_catalog(settings)
    inputs = read_run_inputs(catalog, plan)
    if isinstance(inputs, ApplyResult):
        return inputs
    # Not cached: a 1,000,000-event batch is 4.4 GiB of values. The records are parsed once into a
    # cache without the raw value; the rare bad and held-back records are read again from Kafka.
    records = read_range(spark, kafka, plan.range)
    if inputs is None:  # a new table: created by this run, or by a first run racing it since
        create_table(catalog, plan.table, records, schema_lookup=kafka.schema_lookup)
        inputs = read_run_inputs(catalog, plan)
        if isinstance(inputs, ApplyResult):
            return inputs
        if inputs is None:
            raise ConcurrentRunError(f"table {plan.table.identifier} was dropped while this run created it")
    return ApplyContext(spark, settings, kafka, inputs, records)


def _apply_records(ctx: ApplyContext, *, cut_incompatible: bool) -> ApplyResult | Replan:
    """Steps 3 to 8 of the module docstring on the records a try read (``ctx.records``)."""
    # avro: the writer schemas of the topic's newest versions in the registry, else the batch's
    # schema ids (one Spark job) and theirs; a registry that does not answer fails the run here,
    # before anything is written
    writers = writer_schemas_for(ctx.cfg, ctx.kafka, ctx.raw)
    batch = _parse_and_evolve(ctx, writers, cut_incompatible=cut_incompatible)
    if isinstance(batch, Replan):
        return batch
    try:
        whole = batch.whole
        # a group member's batch short of its group's target, or empty once cut where every partition
        # was read: read on (docs/architecture.md, "Table groups")
        further = extended_plan(ctx.kafka, ctx.plan, whole.read_further) if whole and whole.read_further else None
        if further is not None:
            batch.base.unpersist()
            return Replan(
                further, "a table group member's batch is read further (docs/architecture.md, 'Table groups')"
            )
        # the plan's range cut before a transaction that is not whole, to nothing
        if batch.ctx.plan.range.is_empty and whole is not None and whole.cut is not None:
            batch.base.unpersist()
            return _without_whole_transaction(ctx, whole.cut)
        found = _check_and_quarantine(batch)
        return _decide_and_commit(batch, ctx.plan, found)
    finally:
        unpersist_quietly(batch.base)


def _parse_and_evolve(
    ctx: ApplyContext, writers: WriterSchemas | None, *, cut_incompatible: bool
) -> ParsedBatch | Replan:
    """Steps 3 and 4 of the module docstring: the batch parsed (:func:`~cdclake.spark.batch.parse_batch`)
    and the table evolved to its events (:func:`~cdclake.spark.evolve.evolve_table`; the batch parsed
    again by the evolved table, at most :data:`~cdclake.spark.evolve.MAX_EVOLUTIONS` times).

    Returns:
        The batch, whose cache the caller unpersists; or, when the batch holds events before an
        incompatible type change and ``cut_incompatible``, the try's plan cut before it (no cache left).
    """
    batch = parse_batch(ctx, writers)
    try:
        for n in range(MAX_EVOLUTIONS):
            evolved = evolve_table(
                batch.ctx,
                batch.stats,
                batch.parsed,
                first=n == 0,
                writers=batch.writers,
                cut=cut_incompatible and n == 0,
            )
            if evolved is None:
                break
            if isinstance(evolved, IncompatibleCut):
                batch.base.unpersist()
                return _before_incompatible(ctx.plan, evolved)
            # the table took the events' schema (or the config's columns): the batch is parsed again by it
            batch.base.unpersist()
            batch = parse_batch(evolved, batch.writers)
    except BaseException:
        unpersist_quietly(batch.base)
        raise
    return batch


def _check_and_quarantine(batch: ParsedBatch) -> NewQuarantine:
    """Step 5 of the module docstring: the batch's columns checked against the table's, then its
    bad records failing the run (``bad_records: fail``) or quarantined with the records held back
    behind them (with their values, read from the try's records).

    Returns:
        What this run newly quarantined (nothing, when no record was).

    Raises:
        SchemaError: an event has a column the table lacks (:func:`~cdclake.model.decision.check_columns`).
        BadBatchError: ``bad_records: fail`` and bad records (nothing committed).
    """
    ctx, stats = batch.ctx, batch.stats
    cfg = ctx.cfg
    check_columns(stats, cfg, from_events=stats.unknown_column is not None and from_events(ctx))
    if stats.bad and cfg.bad_records == "fail":
        raise bad_batch(ctx, batch.parsed, stats.bad)
    found = NewQuarantine()
    if stats.quarantined:
        write_quarantine(ctx, ctx.raw, batch.parsed.filter(QUARANTINED))
        found = new_quarantine(ctx)
        if found.bad or found.held:
            log.warning(
                "table %s: this run quarantined %d bad record(s) (bad_records_tolerance %s) and held back %d; "
                "by cause:\n%s",
                cfg.identifier,
                found.bad,
                cfg.bad_records_tolerance,
                found.held,
                describe_causes(found, cfg),
            )
    return found


def _decide_and_commit(batch: ParsedBatch, planned: RunPlan, found: NewQuarantine) -> ApplyResult:
    """Steps 6 to 8 of the module docstring: the batch's good records decided on and written in
    one commit (``planned``: the plan before the batch was cut to whole source transactions;
    ``found``: what the run newly quarantined).

    Returns:
        The ``committed`` result.

    Raises:
        PositionOrderError, ConcurrentRunError: see :func:`apply_range`.
        QuarantinedBatchError, QuarantineToleranceError: raised after the commit (see :func:`apply_range`).
    """
    ctx, stats, whole = batch.ctx, batch.stats, batch.whole
    cfg, table, plan = ctx.cfg, ctx.table, ctx.plan  # the plan's range cut before a transaction that is not whole
    if plan.accept_source_change:
        _forget_old_history(ctx)
    defaults = column_defaults(table.properties, (c.name for c in ctx.columns), plan)
    good = _fill_defaults(batch.parsed.filter(GOOD), defaults, [c.name for c in ctx.columns])
    start = starting_state(ctx.state, plan)
    full_snapshots = cfg.write_mode == "upsert" and cfg.ordering in SOURCE_ORDERINGS and stats.full_snapshot_reads
    decision = decide(
        ctx.state,
        stats,
        plan,
        defaults=defaults,
        snapshots=snapshot_groups(good, start.max_offsets) if full_snapshots else [],
        lookups=_Lookups(ctx, good),
    )
    in_transactions = transaction_summary(cfg, planned.range, plan.range, whole, stats.ops)
    decision = replace(decision, summary={**decision.summary, **in_transactions})
    write = write_plan(cfg, plan, decision, tombstones=stats.tombstones)
    # a compacted topic's deletes that only their Kafka tombstones still carry (spark.compacted)
    compacted = bare_tombstones(ctx, batch.parsed) if write.delete_compacted else None
    snapshot_id, keys_changed = _write(ctx, good, decision, write, compacted)
    if decision.completed is not None:
        _drop_tombstones_below(ctx, decision.completed)
    result = ApplyResult(
        "committed",
        snapshot_id=snapshot_id,
        events=stats.events,
        tombstones=stats.tombstones,
        ops=dict(stats.ops),
        quarantined=stats.quarantined,
        keys_changed=keys_changed,
        connector_contradictions=stats.connector_contradictions,
        applied_end=dict(plan.range.end),
        waiting_events=planned.range.event_count - plan.range.event_count if whole and whole.cut else 0,
    )
    log.info("table %s: committed snapshot %s: %s", cfg.identifier, snapshot_id, result.to_json())
    if COMMITTED_PROPERTY not in table.properties:  # once per table: lost commits can be told (planner)
        update_table_property(ctx.catalog, cfg.identifier, COMMITTED_PROPERTY, lambda _: "true")
    if stats.nothing_applied:
        raise nothing_applied_error(plan, stats, first_quarantined(batch.parsed))
    if not cfg.tolerates_bad_records(found.bad):
        raise tolerance_error(plan, found, snapshot_id)
    return result


def _without_whole_transaction(ctx: ApplyContext, cut: Cut) -> ApplyResult | Replan:
    """The try when its range (``ctx.plan``'s) holds no whole transaction: a transaction with more
    events than the range holds (the cap, ``max_events_per_run``, split evenly over the partitions)
    is applied whole by a range extended past the cap, up to the high watermarks and at most
    ``max_transaction_events`` records (:func:`~cdclake.model.transactions.extended_end`: the
    :class:`Replan` returned); otherwise (its ``END`` is not in Kafka yet, or its events are not all
    there yet) nothing is applied and the run waits (the ``waiting`` result).

    Raises:
        TransactionTooLargeError: the transaction needs more than ``max_transaction_events`` records.
    """
    plan = ctx.plan
    high = topic_watermarks(ctx.kafka, plan.range.topic).high
    if cut.want is not None:
        end = extended_end(cut, plan.range.start, plan.range.end, high, limit=plan.table.max_transaction_events)
        if end != dict(plan.range.end):
            log.warning(
                "table %s: %s; it is applied whole: the range is extended past max_events_per_run (%d) to %s",
                plan.table.identifier,
                cut.describe(),
                plan.table.max_events_per_run,
                json.dumps(end, sort_keys=True),
            )
            extended = plan.range.model_copy(update={"end": end})
            return Replan(
                plan.model_copy(update={"range": extended}),
                "the range holds no whole source transaction: it is extended to apply one whole",
            )
    log.info("table %s: %s; nothing is applied, the next run goes on from here", plan.table.identifier, cut.describe())
    record_wait(ctx.catalog, plan, cut)
    return ApplyResult("waiting", waiting_events=plan.range.event_count)


def _before_incompatible(plan: RunPlan, cut: IncompatibleCut) -> Replan:
    """``plan``'s range up to an incompatible type change (``cut``), to apply unchanged; the next run
    starts at the change and sets the column aside (:class:`~cdclake.spark.evolve.IncompatibleCut`)."""
    end = {p: min(o, cut.end.get(p, o)) for p, o in plan.range.end.items()}
    log.warning(
        "table %s: the batch holds events before an incompatible type change (%s): applying the range up to it, "
        "%s; the change and the events from it are applied by the next run",
        plan.table.identifier,
        cut.describe,
        json.dumps(end, sort_keys=True),
    )
    before = plan.model_copy(update={"range": plan.range.model_copy(update={"end": end})})
    return Replan(before, "the batch holds an incompatible type change: it is cut before it", cut_incompatible=False)


class _Lookups:
    """The outside facts :func:`~cdclake.model.decision.decide` may ask for
    (:class:`~cdclake.model.decision.RunLookups`): the batch, the topic, the quarantine."""

    def __init__(self, ctx: ApplyContext, good: DataFrame) -> None:
        self._ctx = ctx
        self._good = good

    def first_offsets_outside(self, known: SourceIdentity) -> Mapping[int, int]:
        return first_offsets_outside(self._good, known)

    def identity_spans(self) -> Sequence[IdentitySpan]:
        return identity_spans(self._good)

    def high_watermarks(self) -> Offsets:
        return topic_watermarks(self._ctx.kafka, self._ctx.cfg.topic).high

    def offsets_after(self, timestamp_ms: int) -> Mapping[int, int]:
        return offsets_for_time(self._ctx.kafka, self._ctx.cfg.topic, timestamp_ms)

    def open_quarantine(self) -> int:
        table = self._ctx.side_table(QUARANTINE_SUFFIX)
        if table is None:
            return 0
        return len(table.scan(row_filter="status = 'open'", selected_fields=("offset",)).to_arrow())

    def now_ms(self) -> int:
        return int(time.time() * 1000)


def _forget_old_history(ctx: ApplyContext) -> None:
    """What a run that accepts a new binlog history removes before it writes: the delete
    tombstones and the column defaults of the old history (their positions are not comparable with
    the new one's; filling by them would overwrite values).

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
    if ctx.side_table(TOMBSTONES_SUFFIX) is not None:
        ctx.spark.sql(f"DELETE FROM {ctx.spark_name(TOMBSTONES_SUFFIX)}")
    if COLUMN_DEFAULTS_PROPERTY in ctx.table.properties:
        with ctx.table.transaction() as txn:
            txn.remove_properties(COLUMN_DEFAULTS_PROPERTY)


def _fill_defaults(good: DataFrame, defaults: Mapping[str, ColumnDefault], names: Sequence[str]) -> DataFrame:
    """Events below the ALTER that added a column with a default were written before the column
    existed: their rows read the default at the source, not NULL. Only a null value is filled: an
    event below the position that carries a value was written with the column (a default placed by
    the first event showing the column, :func:`cdclake.spark.evolve.evolve_table`, is an upper
    bound of the ALTER's position; an event from before the column has none). ``names``: the
    image's fields, in order; the image is built again from them in one struct (a ``withField``
    per column would nest the plan once per column: :mod:`cdclake.spark.flat`)."""
    from pyspark.sql import functions as F

    if not defaults:
        return good
    image = F.col("image")

    def filled(column: str) -> Column:
        position, sql = defaults[column]
        below = (F.col("position") < position_literal(position)) & image[column].isNull()
        return F.when(below, F.expr(sql)).otherwise(image[column])

    return good.withColumn("image", F.struct(*[(filled(n) if n in defaults else image[n]).alias(n) for n in names]))


def _write(
    ctx: ApplyContext, good: DataFrame, decision: RunDecision, write: WritePlan, compacted: DataFrame | None = None
) -> tuple[int, int]:
    """Write the batch as ``write`` says (:class:`~cdclake.model.write_plan.WritePlan`, made from
    ``decision``), in one commit; returns ``(snapshot id, keys changed)``.

    Upsert tables: events at or below the truncate floor, and below the snapshot floor, are
    discarded first; the batch is reduced to the latest event per key, the tombstones are applied
    (and, when the batch has deletes, recorded) and the rows merged; the backfills and the deletes
    of a completed full snapshot and of ``compacted`` (bare Kafka tombstones) follow in the same
    commit. A table with a change feed gets the change rows committed to its feed first
    (:func:`~cdclake.spark.changes.write_changes`), and a table with a history its versions
    (:func:`~cdclake.spark.history.write_history`). Change-log tables append every event as a row."""
    from pyspark.sql import functions as F

    meta_cols = [name for name, _, _ in METADATA_COLUMNS]
    image = [F.col("image")[c.name].alias(c.name) for c in ctx.columns]
    properties = dict(decision.summary)
    if write.append:
        appended = good.select(*image, *meta_cols)
        return commit(ctx, properties, lambda target: appended.writeTo(target).append()), 0
    rows = good.filter("op <> 't'")
    if write.truncate_floor is not None:
        rows = rows.filter(F.col("position") > position_literal(write.truncate_floor))
    if write.snapshot_floor is not None:
        rows = rows.filter(F.col("position") >= position_literal(write.snapshot_floor))
    columns: list[Column | str] = [*image, *meta_cols, *(event_columns() if write.change_feed else [])]
    source, keys_changed = reduce_batch(ctx, rows, columns, persist=write.source_read_again)
    try:
        properties[SummaryKeys.KEYS_CHANGED] = str(keys_changed)
        if write.change_feed:  # committed first: a try that fails before the table's commit is replaced by its retry
            properties.update(write_changes(ctx, source, good, decision))
        if write.history:  # committed first too: its retry finds the try's versions known
            properties.update(write_history(ctx, good, decision, source))
        if write.completed is not None:
            properties[SummaryKeys.SNAPSHOT_COMPLETED] = json.dumps(
                {"position": write.completed.to_text(), "rows_deleted": _rows_below(ctx, source, write.completed)}
            )
        all_cols = [c.name for c in ctx.columns] + meta_cols

        def merge_and_fill(target: str) -> None:
            if write.demote:
                demote_rows(ctx, target)
            merge(ctx, target, source, all_cols, decision.truncate, write.completed)
            for fill in write.backfill:
                _backfill(ctx, target, fill)
            if compacted is not None:
                delete_compacted(ctx, target, compacted)

        snapshot_id = commit(ctx, properties, merge_and_fill)
    finally:
        if write.source_read_again:
            unpersist_quietly(source)
    return snapshot_id, keys_changed


def _backfill(ctx: ApplyContext, target: str, fill: Backfill) -> None:
    """Set ``fill.column`` to its default in the rows of ``target`` below the ALTER's position that
    do not hold it already (:class:`~cdclake.model.write_plan.Backfill`)."""
    log.info(
        "table %s: filling column %r with its default %s in the rows below the ALTER at %s",
        ctx.cfg.identifier,
        fill.column,
        fill.sql,
        fill.position.to_event_text(),
    )
    name = quote_identifier(fill.column)
    ctx.spark.sql(
        f"UPDATE {target} SET {name} = {fill.sql} "
        f"WHERE {position_sql(ctx.cfg.ordering)} < {position_literal_sql(fill.position)} AND NOT ({name} <=> {fill.sql})"
    )


def _rows_below(ctx: ApplyContext, source: DataFrame, position: BinlogPosition) -> int:
    """Rows of the table below ``position`` whose key the merge source does not hold: the rows a
    completed full snapshot deletes."""

    keys = list(ctx.cfg.primary_key)
    base = ctx.state.snapshot_id
    # the run's base, the head of the table's write ref (a group table's main lags it)
    rows = ctx.spark.read.option("versionAsOf", str(base)) if base is not None else ctx.spark.read
    below = rows.table(ctx.spark_name())
    if not ctx.plan.accept_source_change:
        below = below.filter(position_column(ctx.cfg.ordering) < position_literal(position))
    return below.select(*keys).join(source.select(*keys), keys, "left_anti").count()


def _drop_tombstones_below(ctx: ApplyContext, position: BinlogPosition) -> None:
    """Delete the delete tombstones below a completed full snapshot: events below it are
    discarded from now on, so they protect nothing."""
    if ctx.side_table(TOMBSTONES_SUFFIX) is None:
        return
    ctx.spark.sql(
        f"DELETE FROM {ctx.spark_name(TOMBSTONES_SUFFIX)} "
        f"WHERE {position_sql(ctx.cfg.ordering, change=True)} < {position_literal_sql(position)}"
    )
