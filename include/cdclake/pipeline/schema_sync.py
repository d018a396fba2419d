"""Schema sync: the source table's schema changes -> its Iceberg schema (pyiceberg, Kafka; no
Spark). The rules are in :mod:`cdclake.model.schema_diff`; this module reads the changes from the
schema-change topic, applies what precedes the batch and commits it in one transaction with the
progress property ``cdc.schema-change-position``, capping the batch before a barrier change.

A barrier change is applied only once every partition of the data topic has settled past it
(:func:`barrier_waits_for`): an event from before it may still be on its way to a partition the
batch read to its end, and would then be read by the new column names.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cdclake.errors import BadRecordError, SchemaChangeError
from cdclake.io.catalog import create_cdc_table, load_table_or_none, update_table_property
from cdclake.io.kafka import KafkaClients, offsets_for_time, read_partition, topic_watermarks
from cdclake.io.refs import committed_offsets
from cdclake.io.schema_evolution import evolve_schema, identifier_fields, source_schema
from cdclake.model.config import TableConfig
from cdclake.model.convergence import SNAPSHOT_SETTLE_MS, unsettled_partitions
from cdclake.model.defaults import added_column_default
from cdclake.model.envelope import KafkaCoordinates, parse_table_value
from cdclake.model.layout import (
    COLUMN_DEFAULTS_PROPERTY,
    SCHEMA_CHANGE_POSITION_PROPERTY,
    SCHEMA_FROM_EVENTS_PROPERTY,
    SCHEMA_GAPS_ACCEPTED_PROPERTY,
)
from cdclake.model.mysql_types import column_type
from cdclake.model.offsets import OffsetRange, Offsets, plan_range
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition
from cdclake.model.schema_changes import SchemaChange, changes_from_record, gap_name, retention_gap
from cdclake.model.schema_diff import ChangePlan, check_primary_key, cut_at, cut_before, plan_change
from cdclake.model.types import ColumnSpec
from cdclake.pipeline.schema_index import catch_up, indexed_records

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


def read_schema_changes(
    catalog: Catalog,
    kafka: KafkaClients,
    topic: str,
    table_id: str,
    ordering: str = "binlog",
    *,
    table: Table | None = None,
) -> list[SchemaChange] | None:
    """Every change of ``table_id`` in the schema-change ``topic``, in the table's ``ordering``
    (:mod:`cdclake.model.position`; equal positions in topic order).

    The topic is read through the schema-change index (:mod:`cdclake.pipeline.schema_index`): the
    index catches up with the records written since the last catch-up of any table, then only the
    records that may concern this table are read from it; the changes are exactly those a full
    read of the topic would give.

    Returns:
        The changes, or ``None`` when the topic does not exist (the connector runs with
        ``include.schema.changes=false``, or has emitted nothing yet) or the ordering reads no
        position (``kafka``: nothing places a change among the data events).

    Records retention deleted before the index read them (a gap the index marks) may have held
    changes of any table: an existing ``table`` stops until an operator checked its schema and
    accepted the gap (:data:`~cdclake.model.layout.SCHEMA_GAPS_ACCEPTED_PROPERTY`). A table not
    created yet has no schema a lost change could leave stale.

    Raises:
        SchemaChangeError: a record that concerns this table (or that every table must read, such
            as a DDL that cannot be parsed) is not a schema-change event it can read; a retention
            gap ``table`` has not accepted (names the gap and the remedies).
    """
    if ordering not in SOURCE_ORDERINGS or catch_up(catalog, kafka, topic) is None:
        return None
    accepted = set()
    if table is not None:
        accepted = {g.strip() for g in table.properties.get(SCHEMA_GAPS_ACCEPTED_PROPERTY, "").split(",")}
    changes: list[SchemaChange] = []
    for partition, offset, value in indexed_records(catalog, topic, table_id):
        gap = retention_gap(value)
        if gap is not None and table is not None and gap_name(topic, partition, gap) not in accepted:
            name = gap_name(topic, partition, gap)
            raise SchemaChangeError(
                f"table {table_id}: schema-change topic {topic!r} partition {partition} offsets {gap[0]} to "
                f"{gap[1] - 1} were deleted by retention before cdclake read them, and may have held changes of "
                "this table; nothing was applied and the table's offsets did not move. Compare the source "
                "table's schema (SHOW CREATE TABLE) with the Iceberg table's; if they agree, accept the gap: "
                f"ALTER TABLE <catalog>.<namespace>.<table> SET TBLPROPERTIES ('{SCHEMA_GAPS_ACCEPTED_PROPERTY}'="
                f"'{name}'); if not, rebuild the table with the snapshot-bootstrap DAG. Keep the schema-change "
                'topic\'s retention unlimited (docs/operations.md, "Schema changes lost to retention").'
            )
        changes.extend(changes_from_record(value, table_id, partition, offset, ordering))
    return sorted(changes, key=lambda c: (c.position, c.partition, c.offset))


def _commit_plans(table: Table, plans: list[ChangePlan], position: BinlogPosition) -> Table:
    """Apply ``plans`` in order and record ``position``, in ONE Iceberg transaction."""
    properties = {SCHEMA_CHANGE_POSITION_PROPERTY: position.to_text()}
    defaults = _added_defaults(table, plans)
    if defaults is not None:
        properties[COLUMN_DEFAULTS_PROPERTY] = defaults
    return evolve_schema(table, plans, properties)


def _added_defaults(table: Table, plans: list[ChangePlan]) -> str | None:
    """The table's ``cdc.column-defaults`` after ``plans`` (``None``: unchanged): for each column
    an ``ALTER`` adds, the value its rows from before the ALTER read at the source
    (:func:`cdclake.model.defaults.added_column_default`). Defaults the lake cannot know exactly
    (``CURRENT_TIMESTAMP``, expressions) are recorded as such and logged; they are never filled."""
    entries = json.loads(table.properties.get(COLUMN_DEFAULTS_PROPERTY, "{}"))
    changed = False
    for plan in plans:
        if plan.change is None or plan.change.kind != "ALTER":
            continue
        aside = {new for _, new in plan.renames}
        raw = {c.get("name"): c for c in plan.change.columns}
        for spec, _ in plan.adds:
            if spec.name in aside or spec.name not in raw:
                continue
            default = added_column_default(raw[spec.name], spec)
            entries[spec.name] = {
                "position": plan.change.position.to_text(),
                "sql": default.sql if default.exact else None,
                "exact": default.exact,
                "reason": default.reason,
            }
            changed = True
            if not default.exact:
                log.warning(
                    "table %s: column %r added by %s: the rows that existed before it read a value the lake "
                    "cannot know (%s); they read NULL in the lake until a re-snapshot or a reconcile repair",
                    table.name(),
                    spec.name,
                    plan.change.describe(),
                    default.reason,
                )
            elif default.sql is not None:
                log.info(
                    "table %s: column %r added by %s: rows from before it read %s (%s); the next apply fills it in",
                    table.name(),
                    spec.name,
                    plan.change.describe(),
                    default.sql,
                    default.reason,
                )
    return json.dumps(entries, sort_keys=True) if changed else None


@dataclass(frozen=True)
class SyncResult:
    """What :func:`sync_for_range` did.

    Attributes:
        offset_range: the range the apply step must read: the planned one, or capped before a
            barrier change (``capped_before`` says which).
        applied: the changes applied (descriptions), in order.
        capped_before: the barrier change the range was capped before, if any.
        barrier_position: its position.
        created: the Iceberg table was created from a ``CREATE`` change.
    """

    offset_range: OffsetRange
    applied: tuple[str, ...] = ()
    capped_before: str | None = None
    created: bool = False
    barrier_position: BinlogPosition | None = None


def pending_changes(changes: list[SchemaChange], table: Table | None) -> list[SchemaChange]:
    """The changes after the table's recorded schema-change position (all when none)."""
    done = table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY) if table is not None else None
    if done is None:
        return list(changes)
    floor = BinlogPosition.from_text(done)
    return [c for c in changes if c.position > floor]


def _restated(changes: list[SchemaChange], i: int) -> bool:
    """Whether the DROP ``changes[i]`` is followed by a CREATE of the table at the same position: a
    blocking snapshot restating the table's schema (Debezium emits ``DROP TABLE IF EXISTS`` and the
    table's ``CREATE TABLE`` at the signal's position, with ``snapshot`` false), not a drop."""
    after = changes[i + 1] if i + 1 < len(changes) else None
    return after is not None and after.kind == "CREATE" and after.position == changes[i].position


class SettleFacts(Protocol):
    """What the settle rule of a barrier change asks Kafka (:func:`barrier_waits_for`)."""

    def produced_at(self, change: SchemaChange) -> int:
        """When the change's record was stamped in the schema-change topic (epoch ms)."""
        ...

    def offsets_after(self, timestamp_ms: int) -> Mapping[int, int]:
        """Per partition of the data topic, the first offset stamped at or after ``timestamp_ms``
        (the high watermark where none is)."""
        ...

    def high_watermarks(self) -> Offsets:
        """The data topic's high watermarks now."""
        ...

    def now_ms(self) -> int:
        """The time now (epoch ms)."""
        ...


class KafkaSettleFacts:
    """:class:`SettleFacts` read from Kafka: the table's schema-change and data topics."""

    def __init__(self, kafka: KafkaClients, cfg: TableConfig) -> None:
        self._kafka = kafka
        self._cfg = cfg

    def produced_at(self, change: SchemaChange) -> int:
        """The record's Kafka timestamp; a record removed by the topic's retention is older than
        the first one left in its partition (that one's timestamp), or than anything in flight
        when none is left (0)."""
        topic = self._cfg.schema_change_topic
        marks = topic_watermarks(self._kafka, topic)
        low, high = marks.low.get(change.partition, 0), marks.high.get(change.partition, 0)
        offset = max(change.offset, low)
        for msg in read_partition(
            self._kafka, topic, change.partition, offset, min(offset + 1, high), group_id="cdclake-schema-sync"
        ):
            return max(msg.timestamp()[1], 0)
        return 0

    def offsets_after(self, timestamp_ms: int) -> Mapping[int, int]:
        return offsets_for_time(self._kafka, self._cfg.topic, timestamp_ms)

    def high_watermarks(self) -> Offsets:
        return topic_watermarks(self._kafka, self._cfg.topic).high

    def now_ms(self) -> int:
        return int(time.time() * 1000)


def barrier_waits_for(
    change: SchemaChange,
    positions: list[tuple[int, int, BinlogPosition]],
    offset_range: OffsetRange,
    facts: SettleFacts,
) -> list[int]:
    """The partitions of the data topic that may still receive an event from before the barrier
    ``change`` beyond ``offset_range``'s end (empty: it may be applied).

    Debezium emits in binlog order and sends the schema-change record after every event before the
    change, through the same producer, and records land in a partition in the order they were sent.
    So a partition has settled once the range passes a record of it sent after the change: an
    event at or after the change's position (``positions``, the range's events), or a record
    stamped after the schema-change record; with none yet, once the range reaches its high
    watermark :data:`~cdclake.model.convergence.SNAPSHOT_SETTLE_MS` after it: the rule of full
    snapshots (:func:`~cdclake.model.convergence.unsettled_partitions`).
    """
    passed = {p for p, _, position in positions if position >= change.position}
    if passed >= set(offset_range.end):
        return []
    produced = facts.produced_at(change)
    high = facts.high_watermarks()
    after = {p: (o if o < high.get(p, 0) else None) for p, o in facts.offsets_after(produced + 1).items()}
    return [p for p in unsettled_partitions(produced, offset_range.end, after, high, facts.now_ms()) if p not in passed]


def _stop_for_table_change(change: SchemaChange, identifier: str) -> SchemaChangeError:
    what = "renamed" if change.kind == "RENAME" else "dropped"
    return SchemaChangeError(
        f"table {identifier}: the source table was {what}: {change.describe()}. Schema sync stops "
        "here; nothing was applied and the offsets did not move. The data topic is named after "
        "the source table, so this table cannot follow: point a new table config at the new "
        "topic and re-snapshot it (snapshot-bootstrap DAG), then retire this table."
    )


def sync_changes(
    catalog: Catalog,
    cfg: TableConfig,
    changes: list[SchemaChange],
    *,
    data_positions: list[tuple[int, int, BinlogPosition]] | None,
    offset_range: OffsetRange,
    facts: SettleFacts,
) -> SyncResult:
    """Apply the pending ``changes`` that precede the batch's events, capping the batch before a
    barrier change (:mod:`cdclake.model.schema_diff`, "Barrier") that the batch holds events before
    or that has not settled (:func:`barrier_waits_for`).

    Args:
        changes: this table's changes in binlog order (:func:`read_schema_changes`).
        data_positions: ``(partition, offset, position)`` of the batch's events (records that
            have no position are left out: the apply step quarantines them).
        offset_range: the planned range.
        facts: where the settle rule's facts come from (asked only for a barrier change that the
            batch holds no event before).

    Raises:
        SchemaChangeError: see :func:`plan_change`, and a table renamed or dropped at the source.
        SchemaError: the primary key in the table config is not the source table's.
    """
    table = load_table_or_none(catalog, cfg.identifier)
    pending = pending_changes(changes, table)
    positions = data_positions or []
    if not pending or not positions:
        check_primary_key(identifier_fields(table), cfg)
        return SyncResult(offset_range)
    last = max(p for _, _, p in positions)
    created = False
    applied: list[str] = []
    plans: list[ChangePlan] = []
    state = source_schema(table) if table is not None else None
    done_position: BinlogPosition | None = None
    capped: tuple[SchemaChange, dict[int, int]] | None = None
    changelog = cfg.write_mode == "changelog"
    for i, change in enumerate(pending):
        if change.position > last:
            break
        if change.kind in ("DROP", "RENAME"):
            applied.append(_skipped_table_change(pending, i, table_exists=table is not None, identifier=cfg.identifier))
            done_position = change.position
            continue
        if table is None:
            table = _create_first(catalog, cfg, change)
            created = True
            state = source_schema(table)
            applied.append(change.describe())
            done_position = change.position
            continue
        assert state is not None  # the table exists here, and state is its schema
        plan = plan_change(
            state,
            change,
            table_id=cfg.source_table_id,
            policy=cfg.schema_changes,
            modes=cfg.connector,
            changelog=changelog,
        )
        if plan.is_barrier:
            cut = _barrier_cut(cfg, change, positions, offset_range, facts)
            if cut is not None:
                capped = (change, cut)
                break
        plans.append(plan)
        state = plan.after
        applied.append(change.describe())
        done_position = change.position
    if done_position is not None and table is not None:
        table = _record_applied(table, plans, done_position)
    check_primary_key(identifier_fields(table), cfg)
    return _sync_result(offset_range, applied, created, capped)


def _sync_result(
    offset_range: OffsetRange,
    applied: list[str],
    created: bool,
    capped: tuple[SchemaChange, dict[int, int]] | None,
) -> SyncResult:
    """:func:`sync_changes`' result: the planned ``offset_range``, or, when ``capped`` ``(barrier
    change, end offsets)``, that range capped at those end offsets before the change."""
    if capped is not None:
        change, cut = capped
        capped_range = OffsetRange(topic=offset_range.topic, start=offset_range.start, end=cut)
        return SyncResult(capped_range, tuple(applied), change.describe(), created, change.position)
    return SyncResult(offset_range, tuple(applied), None, created)


def _skipped_table_change(pending: list[SchemaChange], i: int, *, table_exists: bool, identifier: str) -> str:
    """What is applied of the table's DROP or RENAME ``pending[i]``: it is skipped (its description
    says so) when there is no table yet to drop, or when it is a DROP of the connector's snapshot
    rebuilding its schema history (:func:`_restated`).

    Raises:
        SchemaChangeError: the source table was renamed or dropped (:func:`_stop_for_table_change`).
    """
    change = pending[i]
    if not table_exists or (change.kind == "DROP" and (change.snapshot or _restated(pending, i))):
        # nothing to drop yet, or the connector's snapshot rebuilding its schema history
        return f"skipped {change.describe()}"
    raise _stop_for_table_change(change, identifier)


def _create_first(catalog: Catalog, cfg: TableConfig, change: SchemaChange) -> Table:
    """The table created from the first change of its source table (:func:`_create`).

    Raises:
        SchemaChangeError: that change is not a ``CREATE``.
    """
    if change.kind != "CREATE":
        raise SchemaChangeError(
            f"table {cfg.identifier} does not exist and the first change of its source "
            f"table is not a CREATE: {change.describe()}"
        )
    return _create(catalog, cfg, change)


def _barrier_cut(
    cfg: TableConfig,
    change: SchemaChange,
    positions: list[tuple[int, int, BinlogPosition]],
    offset_range: OffsetRange,
    facts: SettleFacts,
) -> dict[int, int] | None:
    """The end offsets the batch is capped at for the barrier ``change``: before its first event at
    or after the change when the batch holds events before it (:func:`cut_before`), else at the
    change while a partition has not settled (:func:`barrier_waits_for`; logged); ``None``: the
    change applies now."""
    cut = cut_before(positions, change.position, offset_range)
    waiting = barrier_waits_for(change, positions, offset_range, facts) if cut is None else []
    if waiting:
        log.info(
            "table %s: the barrier change %s waits for partition(s) %s of topic %r, which may still "
            "receive events from before it (it applies once a record sent after it is read in each, "
            "or once they were read to their end %d s after it)",
            cfg.identifier,
            change.describe(),
            waiting,
            cfg.topic,
            SNAPSHOT_SETTLE_MS // 1000,
        )
        cut = cut_at(positions, change.position, offset_range)
    return cut


def _record_applied(table: Table, plans: list[ChangePlan], position: BinlogPosition) -> Table:
    """Commit ``plans`` with the progress property at ``position`` (:func:`_commit_plans`); with
    no plan, set the property alone when it changes. Returns the table refreshed (as it was when
    nothing changed)."""
    if plans:
        return _commit_plans(table, plans, position)
    if table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY) != position.to_text():
        with table.transaction() as txn:
            txn.set_properties({SCHEMA_CHANGE_POSITION_PROPERTY: position.to_text()})
        return table.refresh()
    return table


def _create(catalog: Catalog, cfg: TableConfig, change: SchemaChange) -> Table:
    columns = []
    for c in change.columns:
        iceberg_type, encoding = column_type(c, cfg.connector)
        required = not c.get("optional", True) and cfg.write_mode != "changelog"
        columns.append(ColumnSpec(c["name"], iceberg_type, required, encoding))
    primary_key = cfg.primary_key if cfg.write_mode == "changelog" else change.primary_key
    return create_cdc_table(
        catalog,
        cfg.identifier,
        columns,
        tuple(primary_key),
        properties={SCHEMA_CHANGE_POSITION_PROPERTY: change.position.to_text()},
        ordering=cfg.ordering,
        format_version=cfg.format_version,
    )


def read_data_positions(
    kafka: KafkaClients, offset_range: OffsetRange, cfg: TableConfig
) -> list[tuple[int, int, BinlogPosition]]:
    """``(partition, offset, position)`` of every event of the range that has one, read as
    ``cfg``'s records are (Kafka tombstones and bad records have none; the apply step skips or
    quarantines them)."""
    topic = offset_range.topic

    def positions() -> Iterator[tuple[int, int, BinlogPosition]]:
        for p in sorted(offset_range.end):
            for msg in read_partition(
                kafka, topic, p, offset_range.start[p], offset_range.end[p], group_id="cdclake-schema-sync"
            ):
                offset = msg.offset() or 0
                try:
                    where = KafkaCoordinates(topic, p, offset)
                    event = parse_table_value(cfg, msg.value(), where, kafka.schema_lookup)
                except BadRecordError:
                    continue
                if event is not None:
                    yield p, offset, event.position

    return list(positions())


def _no_schema_topic(catalog: Catalog, cfg: TableConfig) -> None:
    """Say that the table has no schema sync and evolves from its events' own schemas: a warning
    the first time its schema-change topic is found missing (recorded in the table property
    :data:`~cdclake.model.layout.SCHEMA_FROM_EVENTS_PROPERTY`), an info line on later runs."""
    if cfg.ordering not in SOURCE_ORDERINGS:
        log.info(
            "table %s: ordering %s places no schema change among the events: no schema sync; the table "
            "evolves from the events' own schemas (docs/table-config.md)",
            cfg.identifier,
            cfg.ordering,
        )
        return
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None or table.properties.get(SCHEMA_FROM_EVENTS_PROPERTY) == "true":
        log.info(
            "table %s: schema-change topic %r does not exist: the table evolves from the events' own schemas",
            cfg.identifier,
            cfg.schema_change_topic,
        )
        return
    log.warning(
        "table %s: schema-change topic %r does not exist (the connector runs with include.schema.changes=false, "
        "or has written nothing yet): the table evolves from the schemas its events carry: columns added, types "
        'promoted, columns the events lose kept (docs/operations.md, "Schema evolution from the events"). Set '
        "schema_changes.source: events to make it the table's rule; this is said once",
        cfg.identifier,
        cfg.schema_change_topic,
    )
    update_table_property(catalog, cfg.identifier, SCHEMA_FROM_EVENTS_PROPERTY, lambda _: "true")


def _from_events(cfg: TableConfig) -> bool:
    """The table evolves from its events by configuration (``schema_changes.source: events``):
    its schema-change topic is not read."""
    if cfg.schema_changes.source == "events":
        log.info("table %s: schema_changes.source: events: no schema sync; the apply evolves the table", cfg.identifier)
        return True
    return False


def sync_for_range(catalog: Catalog, kafka: KafkaClients, cfg: TableConfig, offset_range: OffsetRange) -> SyncResult:
    """The ``schema_sync`` step of a table run: apply the table's schema changes up to the planned
    batch (:func:`sync_changes`), reading the schema-change topic and, only when changes are
    pending, the batch's event positions.

    A missing schema-change topic (``include.schema.changes=false``), or ``schema_changes.source:
    events``, applies nothing here: the apply step evolves the table from the events' own schemas
    (:mod:`cdclake.spark.evolve`).
    """
    if _from_events(cfg):
        return SyncResult(offset_range)
    table = load_table_or_none(catalog, cfg.identifier)
    changes = read_schema_changes(
        catalog, kafka, cfg.schema_change_topic, cfg.source_table_id, cfg.ordering, table=table
    )
    if changes is None:
        _no_schema_topic(catalog, cfg)
        return SyncResult(offset_range)
    positions = None
    if pending_changes(changes, table):
        positions = read_data_positions(kafka, offset_range, cfg)
    return sync_changes(
        catalog, cfg, changes, data_positions=positions, offset_range=offset_range, facts=KafkaSettleFacts(kafka, cfg)
    )


def sync_table_schema(catalog: Catalog, kafka: KafkaClients, cfg: TableConfig) -> SyncResult:
    """Bring the Iceberg table to the source table's current schema, as the bootstrap DAG needs
    before a snapshot: creates the table from its ``CREATE`` change if it does not exist.

    When events are waiting to be applied (committed offsets -> high watermarks), this is exactly
    the table run's schema sync for that range: a barrier change behind pending events waits for
    the table's DAG. When none are waiting, every change up to the end of the schema-change topic
    is applied (no event can be written under the wrong schema).

    Raises:
        SchemaChangeError, SchemaError: as :func:`sync_changes`.
        TopicNotFoundError: the data topic does not exist.
    """
    if _from_events(cfg):
        return SyncResult(OffsetRange(topic=cfg.topic, start={}, end={}))
    table = load_table_or_none(catalog, cfg.identifier)
    changes = read_schema_changes(
        catalog, kafka, cfg.schema_change_topic, cfg.source_table_id, cfg.ordering, table=table
    )
    if changes is None:
        _no_schema_topic(catalog, cfg)
        return SyncResult(OffsetRange(topic=cfg.topic, start={}, end={}))
    marks = topic_watermarks(kafka, cfg.topic)
    offset_range = plan_range(cfg.topic, committed_offsets(table, cfg.topic), marks.low, marks.high, 2**62)
    pending = pending_changes(changes, table)
    if not pending:
        check_primary_key(identifier_fields(table), cfg)
        return SyncResult(offset_range)
    positions = read_data_positions(kafka, offset_range, cfg)
    if not positions:
        # nothing to apply: every change may go in; a stand-in event after the last change makes
        # sync_changes apply them all without capping anything
        # (at the range's end offset: it is not in the range, so nothing is cut before it)
        partition = min(offset_range.end)
        positions = [(partition, offset_range.end[partition], max(c.position for c in pending))]
    return sync_changes(
        catalog, cfg, changes, data_positions=positions, offset_range=offset_range, facts=KafkaSettleFacts(kafka, cfg)
    )
