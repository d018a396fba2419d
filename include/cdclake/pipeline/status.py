"""How far behind each table is and what it did: the per-table status figures read from what is
already stored (pyiceberg and confluent-kafka only, no Spark; ``cdclake status`` prints them,
docs/monitoring.md, "Status"). The figures and the rules that compute them are
:mod:`cdclake.model.status`.

Per table:

* **Kafka** (:func:`~cdclake.io.kafka.topics_watermarks`): the topic's high watermarks, against the
  table's committed offsets: the records not applied yet, per partition and in all.
* **The snapshot summaries** of the table's ancestry (:class:`~cdclake.model.layout.SummaryKeys`):
  the last CDC commit (snapshot id, time, run id, and the connector modes its events contradicted:
  a warning, the table may still be fresh), the records applied per hour and the counts by kind
  over the last 24 hours, the full snapshot in progress, the greatest position's Kafka timestamp;
  under ``transactions: whole`` the last whole source transaction applied, the records waiting for
  one that is not whole (also the table property
  :data:`~cdclake.model.layout.TRANSACTION_WAIT_PROPERTY` of a run that applied nothing) and the
  events applied without transaction metadata (a warning).
* **The source time of the newest event applied**: the greatest ``cdc.last-source-ts`` of the
  window's commits, and the data files' column bounds of ``_cdc_source_ts`` in the table's rows
  and delete tombstones (no data file is read; the bounds also cover commits older than the key).
* **The side tables**: the quarantine's ``open`` records; the newest summary row of the reconcile
  table (:data:`~cdclake.pipeline.reconcile.RECONCILE_TABLE`).
* **The table property** :data:`~cdclake.model.layout.RUN_FAILURE_PROPERTY`: the failed tries of
  the table's DAG since its last run that succeeded (also a problem, and the table is not fresh).

With a :class:`~cdclake.pipeline.sources.SourceProbe` (Kafka Connect, the source database),
also **the sources** (:mod:`cdclake.pipeline.sources`): each table's Debezium connector, its state
and how far it is behind the source's binlog; a table is then fresh only when its whole chain is
(:func:`~cdclake.model.status.chain_verdict`).

A table or topic that does not exist is a status (``table_exists``, ``topic_exists``,
``problems``), never an exception.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.io.catalog import load_table_or_none
from cdclake.io.kafka import KafkaClients, Watermarks, topics_watermarks
from cdclake.io.refs import ancestry, committed_state, head_snapshot
from cdclake.model.config import TableConfig
from cdclake.model.convergence import still_in_progress
from cdclake.model.layout import (
    METADATA_COLUMN_NAMES,
    QUARANTINE_SUFFIX,
    RUN_FAILURE_PROPERTY,
    TOMBSTONES_SUFFIX,
    TRANSACTION_WAIT_PROPERTY,
    side_table,
)
from cdclake.model.run_state import CommittedState
from cdclake.model.source_health import EmittedPoint, SourceStatus
from cdclake.model.status import (
    ReconcileSummary,
    RunFailure,
    SnapshotInProgress,
    TableStatus,
    chain_verdict,
    commit_activity,
    freshness_verdict,
    lag_time,
    partition_lag,
    reconcile_summary,
    time_lag,
)
from cdclake.model.transactions import cuts_whole, transaction_status
from cdclake.pipeline.reconcile import RECONCILE_TABLE

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.pipeline.sources import SourceProbe

log = logging.getLogger(__name__)

SOURCE_TS_COLUMN = "_cdc_source_ts"
"""The metadata column holding each row's (and tombstone's) source time (``source.ts_ms``)."""


def column_upper_bound_ms(table: Table, column: str) -> int | None:
    """The greatest value of the timestamp ``column`` in the live data files of ``table``'s
    :func:`~cdclake.io.refs.head_snapshot`, epoch ms, from the manifests' column bounds (no data file is read).

    ``None`` when the table has no snapshot or no non-null value, lacks the column (or it is not
    a timestamp), or a data file with non-null values carries no bound for it (Iceberg keeps
    column metrics for the first 100 columns by default).
    """
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFileContent, ManifestContent
    from pyiceberg.types import TimestampType, TimestamptzType

    snapshot = head_snapshot(table)  # a group table's: its stage branch, as the rest of the status
    if snapshot is None:
        return None
    try:
        field = table.schema().find_field(column)
    except ValueError:
        return None
    field_type = field.field_type
    if not isinstance(field_type, (TimestampType, TimestamptzType)):
        return None
    best: int | None = None
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            if data_file.content != DataFileContent.DATA or not data_file.record_count:
                continue
            raw = (data_file.upper_bounds or {}).get(field.field_id)
            if raw is None:
                if (data_file.null_value_counts or {}).get(field.field_id) == data_file.record_count:
                    continue  # only nulls (Debezium 1.x snapshot reads carry no source time)
                return None
            value = int(from_bytes(field_type, raw)) // 1000  # micros
            best = value if best is None else max(best, value)
    return best


def open_quarantine(catalog: Catalog, identifier: str) -> int:
    """Records of the table's quarantine with ``status = 'open'`` (0 without a quarantine table)."""
    table = load_table_or_none(catalog, side_table(identifier, QUARANTINE_SUFFIX))
    if table is None or table.current_snapshot() is None:
        return 0
    return len(table.scan(row_filter="status = 'open'", selected_fields=("offset",)).to_arrow())


def last_reconciles(
    catalog: Catalog, now_ms: int, identifiers: Iterable[str] | None = None
) -> dict[str, ReconcileSummary]:
    """The newest reconcile result of each table (by Iceberg identifier), from the summary rows
    of :data:`~cdclake.pipeline.reconcile.RECONCILE_TABLE`; ``identifiers`` limits the read."""
    table = load_table_or_none(catalog, RECONCILE_TABLE)
    if table is None or table.current_snapshot() is None:
        return {}
    wanted = sorted(set(identifiers)) if identifiers is not None else None
    if wanted == []:
        return {}
    row_filter = "chunk = -1"
    if wanted is not None:  # identifiers are plain identifiers joined by a dot (TableConfig checks)
        row_filter += " AND identifier IN (" + ", ".join(f"'{w}'" for w in wanted) + ")"
    fields = (
        "run_id",
        "identifier",
        "mode",
        "source_rows",
        "lake_rows",
        "only_in_source",
        "only_in_lake",
        "differing",
        "unsettled",
        "repaired",
        "reconciled_at",
    )
    rows = table.scan(row_filter=row_filter, selected_fields=fields).to_arrow().to_pylist()
    newest: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        seen = newest.get(row["identifier"])
        if seen is None or (row["reconciled_at"], row["run_id"]) > (seen["reconciled_at"], seen["run_id"]):
            newest[row["identifier"]] = row
    return {ident: reconcile_summary(row, now_ms) for ident, row in newest.items()}


def _now_ms() -> int:
    return int(time.time() * 1000)


def read_watermarks(
    kafka: KafkaClients | None, topics: Iterable[str]
) -> tuple[dict[str, Watermarks | None], str | None]:
    """``({topic: watermarks, or None when it does not exist}, None)``, or ``({}, why)`` when
    Kafka was not asked (``kafka`` is ``None``) or did not answer. A cluster whose every broker is
    down is given up on at once (the status reports, it does not wait for a broker to return)."""
    from confluent_kafka import KafkaException

    if kafka is None:
        return {}, "Kafka was not asked"
    try:
        return topics_watermarks(kafka, topics, give_up_when_down=True), None
    except KafkaException as e:  # a status, not an error: the caller shows it once per table
        error = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)
        log.info("Kafka at %s did not answer: %s", kafka.bootstrap, error)
        return {}, f"Kafka at {kafka.bootstrap} did not answer: {error}"


def table_status(
    catalog: Catalog,
    kafka: KafkaClients | None,
    cfg: TableConfig,
    *,
    now_ms: int | None = None,
    freshness_minutes: int | None = None,
) -> TableStatus:
    """The status figures of one table (module docstring; the fields: :class:`TableStatus`).

    Args:
        catalog: the pyiceberg catalog (:func:`~cdclake.io.catalog.load_catalog`).
        kafka: the Kafka clients; ``None`` leaves the Kafka figures unknown.
        cfg: the table's config.
        now_ms: the time the ages are counted to, epoch ms; default: now.
        freshness_minutes: the limit :attr:`TableStatus.fresh` is judged by; ``None``: not judged.

    A missing table or topic, or a broker that does not answer, is reported in the status.
    """
    return status_of_tables(catalog, kafka, [cfg], now_ms=now_ms, freshness_minutes=freshness_minutes)[0]


def status_of_tables(
    catalog: Catalog,
    kafka: KafkaClients | None,
    tables: Iterable[TableConfig],
    *,
    now_ms: int | None = None,
    freshness_minutes: Mapping[str, int] | int | None = None,
    sources: SourceProbe | None = None,
) -> list[TableStatus]:
    """The status figures of each table, in the order given (see :func:`table_status`;
    :func:`status_report` with the sources' figures)."""
    return status_report(
        catalog, kafka, tables, now_ms=now_ms, freshness_minutes=freshness_minutes, sources=sources
    ).tables


@dataclass(frozen=True)
class StatusReport:
    """:func:`status_report`'s answer: the tables' figures (the order given) and their sources'
    (:class:`~cdclake.model.source_health.SourceStatus`, in the order of their first table; empty
    when the sources were not asked), and why Kafka's figures are unknown (``None``: Kafka
    answered)."""

    tables: list[TableStatus]
    sources: list[SourceStatus]
    kafka_problem: str | None = None


def status_report(
    catalog: Catalog,
    kafka: KafkaClients | None,
    tables: Iterable[TableConfig],
    *,
    now_ms: int | None = None,
    freshness_minutes: Mapping[str, int] | int | None = None,
    sources: SourceProbe | None = None,
) -> StatusReport:
    """The status figures of each table, in the order given (see :func:`table_status`), and of
    their sources.

    One ``now`` for all. The Iceberg side is read first, then the watermarks of every topic
    through one Kafka consumer (so a commit landing in between makes a lag too large, never
    negative), and the reconcile table once; then, with ``sources``, Kafka Connect and the source
    database (:func:`cdclake.pipeline.sources.source_statuses`; read last, so that a write landing
    in between makes the source leg's lag too large, never too small). A broker that does not
    answer costs one timeout (:data:`~cdclake.io.kafka_auth.TIMEOUT_S`) and leaves every table's
    Kafka figures unknown.

    Args:
        freshness_minutes: one limit for every table, or a limit per table name (tables not named
            are not judged); default: each table's ``freshness_minutes`` of the table config.
        sources: Kafka Connect and the source database; ``None``: the sources are not asked, and
            tables are judged by Kafka -> lake alone.
    """
    configs = list(tables)
    now = _now_ms() if now_ms is None else now_ms
    lakes = [_lake(catalog, cfg, now) for cfg in configs]
    marks, kafka_problem = read_watermarks(kafka, [c.topic for c in configs])
    reconciled = last_reconciles(catalog, now, [c.identifier for c in configs])
    answer = None
    if sources is not None:
        from cdclake.pipeline.sources import source_statuses

        answer = source_statuses(sources, configs, [lake.point for lake in lakes], now)
    read = _Readings(now, marks, kafka_problem, reconciled)
    out = [
        _table_status(
            cfg,
            lake,
            read,
            limit=_freshness_limit(cfg, freshness_minutes),
            source_status=None if answer is None else answer.of_table[i],
            unwatched=None if answer is None else answer.unwatched[i],
        )
        for i, (cfg, lake) in enumerate(zip(configs, lakes, strict=True))
    ]
    return StatusReport(out, [] if answer is None else answer.sources, kafka_problem if kafka is not None else None)


@dataclass(frozen=True)
class _Readings:
    """What :func:`status_report` read once for every table.

    Attributes:
        now: the time the ages are counted to, epoch ms.
        marks: topic -> its watermarks (``None``: the topic does not exist); empty when Kafka did not answer.
        kafka_problem: why Kafka's figures are unknown (:func:`read_watermarks`); ``None`` when known.
        reconciled: Iceberg identifier -> its newest reconcile result.
    """

    now: int
    marks: dict[str, Watermarks | None]
    kafka_problem: str | None
    reconciled: dict[str, ReconcileSummary]


def _freshness_limit(cfg: TableConfig, freshness_minutes: Mapping[str, int] | int | None) -> int | None:
    """The freshness limit of table ``cfg`` in minutes, from :func:`status_report`'s ``freshness_minutes``."""
    if freshness_minutes is None:
        return cfg.freshness_minutes
    if isinstance(freshness_minutes, Mapping):
        return freshness_minutes.get(cfg.name)
    return freshness_minutes


def _kafka_figures(cfg: TableConfig, read: _Readings, fields: dict[str, Any], problems: list[str]) -> bool | None:
    """Add the Kafka lag of table ``cfg`` to its status ``fields`` and its ``problems``; whether its
    topic exists (``None``: Kafka did not answer)."""
    if read.kafka_problem is not None:
        problems.append(f"{read.kafka_problem}: lag in events unknown")
        return None
    topic_marks = read.marks.get(cfg.topic)
    if topic_marks is None:
        problems.append(f"Kafka topic {cfg.topic!r} does not exist")
        return False
    by_partition, lag_problems = partition_lag(
        cfg.topic, fields.get("committed_offsets"), topic_marks.low, topic_marks.high
    )
    problems.extend(lag_problems)
    fields.update(
        high_watermarks=topic_marks.high,
        lag_events_by_partition=by_partition,
        lag_events=sum(by_partition.values()),
    )
    return True


def _table_status(
    cfg: TableConfig,
    lake: _Lake,
    read: _Readings,
    *,
    limit: int | None,
    source_status: SourceStatus | None,
    unwatched: str | None,
) -> TableStatus:
    """The status of table ``cfg`` from its Iceberg side ``lake``, the shared readings ``read`` and
    its source (``source_status``, or why none is watched: ``unwatched``); logs its problems."""
    now = read.now
    fields, problems = dict(lake.fields), list(lake.problems)
    topic_exists = _kafka_figures(cfg, read, fields, problems)
    age_ms, age_basis = time_lag(now, fields.get("last_source_ts_ms"), fields.get("high_position_kafka_ts_ms"))
    lag_events = fields.get("lag_events")
    lag_ms, basis = lag_time(lag_events, age_ms, age_basis)
    failure = fields.get("run_failure")
    if failure is not None:
        problems.append(failure.describe(now))
    source = None if source_status is None else source_status.table_view()
    for problem in (None if source is None else source.problem(), unwatched):
        if problem is not None:
            problems.append(problem)
    fresh, end_to_end = chain_verdict(freshness_verdict(lag_events, lag_ms, limit, failure), lag_ms, limit, source)
    for problem in problems:
        log.debug("table %s: %s", cfg.identifier, problem)
    return TableStatus(
        name=cfg.name,
        identifier=cfg.identifier,
        topic=cfg.topic,
        checked_at_ms=now,
        table_exists=lake.exists,
        topic_exists=topic_exists,
        caught_up=None if lag_events is None else lag_events == 0,
        last_event_age_ms=age_ms,
        lag_ms=lag_ms,
        lag_basis=basis,
        last_reconcile=read.reconciled.get(cfg.identifier),
        freshness_minutes=limit,
        fresh=fresh,
        source=source,
        end_to_end_lag_ms=end_to_end,
        problems=problems,
        **fields,
    )


@dataclass(frozen=True)
class _Lake:
    """The Iceberg side of a table's status: whether it exists, :class:`TableStatus` fields, problems."""

    exists: bool
    fields: dict[str, Any]
    problems: list[str]
    point: EmittedPoint | None = None
    """The greatest binlog position the table applied, as a position its connector emitted
    (tables ordered by binlog position only)."""


def _lake(catalog: Catalog, cfg: TableConfig, now: int) -> _Lake:
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:
        return _Lake(
            False, {}, [f"Iceberg table {cfg.identifier} does not exist yet (its DAG has not applied anything)"]
        )
    problems: list[str] = []
    state = committed_state(table, cfg.topic)
    schema = table.schema()
    last, per_hour, activity = commit_activity(ancestry(table), cfg.topic, now)
    warnings = [w for w in [last.connector_warning() if last is not None else None] if w is not None]
    transactions = None
    if cuts_whole(cfg):
        wait = table.properties.get(TRANSACTION_WAIT_PROPERTY)
        transactions = transaction_status(ancestry(table), cfg.topic, state.offsets, wait)
        warnings += [w for w in [transactions.warning()] if w is not None]
    source_ts = [activity.last_source_ts_ms, column_upper_bound_ms(table, SOURCE_TS_COLUMN)]
    tombstones = load_table_or_none(catalog, side_table(cfg.identifier, TOMBSTONES_SUFFIX))
    if tombstones is not None:
        source_ts.append(column_upper_bound_ms(tombstones, SOURCE_TS_COLUMN))
    known = [t for t in source_ts if t is not None]
    fields: dict[str, Any] = {
        "committed_offsets": state.offsets,
        "current_snapshot_id": state.snapshot_id,
        "last_commit": last,
        "events_per_hour": per_hour,
        "activity_24h": activity,
        "schema_id": schema.schema_id,
        "column_count": sum(1 for f in schema.fields if f.name not in METADATA_COLUMN_NAMES),
        "high_position_kafka_ts_ms": state.high_position_ts,
        "last_source_ts_ms": max(known) if known else None,
        "open_quarantine": open_quarantine(catalog, cfg.identifier),
        "run_failure": RunFailure.from_property(table.properties.get(RUN_FAILURE_PROPERTY)),
        "transactions": transactions,
        "warnings": warnings,
    }
    if state.snapshot is not None and still_in_progress(state.snapshot, state.high_position):
        fields["snapshot_in_progress"] = SnapshotInProgress(
            position=state.snapshot.position.to_text(),
            records=state.snapshot.records,
            end_applied=state.snapshot.end is not None,
        )
    if state.offsets is None:
        problems.append(f"Iceberg table {cfg.identifier} has no CDC commit of topic {cfg.topic!r} yet")
    return _Lake(True, fields, problems, _applied_point(cfg, state, fields["last_source_ts_ms"]))


def _applied_point(cfg: TableConfig, state: CommittedState, source_ts_ms: int | None) -> EmittedPoint | None:
    """The table's greatest applied binlog position as an :class:`EmittedPoint` (``None`` unless the
    table is ordered by binlog position and its binlog basename is recorded)."""
    high, identity = state.high_position, state.identity
    if cfg.ordering != "binlog" or high is None or high.file_seq < 0 or identity is None or not identity.basename:
        return None
    server = identity.server_id if identity.server_id else None
    return EmittedPoint(
        basename=identity.basename,
        file_seq=high.file_seq,
        pos=high.pos,
        ts_ms=source_ts_ms,
        origin="lake",
        server_id=server,
    )
