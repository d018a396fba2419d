"""How far behind each table is and what it did: the per-table status figures (pyiceberg and
confluent-kafka only, no Spark; ``cdclake status`` prints them, docs/operations.md, "Status").

Per table, from what is already stored:

* **Kafka** (:func:`~cdclake.io.kafka.topics_watermarks`): the topic's high watermarks, against the
  table's committed offsets: the records not applied yet, per partition and in all.
* **The snapshot summaries** of the table's ancestry (:class:`~cdclake.model.layout.SummaryKeys`):
  the last CDC commit (snapshot id, time, run id), the records applied per hour and the counts by
  kind over the last 24 hours, the full snapshot in progress, the greatest position's Kafka
  timestamp.
* **The source time of the newest event applied**: the greatest ``cdc.last-source-ts`` of the
  window's commits, and the data files' column bounds of ``_cdc_source_ts`` in the table's rows
  and delete tombstones (no data file is read; the bounds also cover commits older than the key).
* **The side tables**: the quarantine's ``open`` records; the newest summary row of the reconcile
  table (:data:`~cdclake.pipeline.reconcile.RECONCILE_TABLE`).

A table or topic that does not exist is a status (``table_exists``, ``topic_exists``,
``problems``), never an exception. Times are epoch milliseconds (``*_ms``) or durations in
milliseconds (``*_age_ms``, ``lag_ms``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from cdclake.errors import ConfigError
from cdclake.io.catalog import committed_state, load_table_or_none
from cdclake.io.kafka import KafkaClients, Watermarks, topics_watermarks
from cdclake.model.config import TableConfig
from cdclake.model.layout import (
    METADATA_COLUMN_NAMES,
    QUARANTINE_SUFFIX,
    TOMBSTONES_SUFFIX,
    SummaryKeys,
    side_table,
)
from cdclake.model.offsets import Offsets
from cdclake.pipeline.reconcile import RECONCILE_TABLE

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
WINDOW_HOURS = 24
"""The activity window: :attr:`TableStatus.events_per_hour` has one entry per hour of it."""

SOURCE_TS_COLUMN = "_cdc_source_ts"
"""The metadata column holding each row's (and tombstone's) source time (``source.ts_ms``)."""


class LastCommit(BaseModel):
    """The table's newest CDC commit (the newest snapshot in the current snapshot's ancestry whose
    summary carries the table topic's end offsets; maintenance and repair commits carry none).

    Attributes:
        snapshot_id: its Iceberg snapshot id.
        committed_at_ms: its snapshot's timestamp, epoch ms.
        age_ms: ``now_ms - committed_at_ms``, ms.
        run_id: ``cdc.run-id``: the Airflow run that committed it.
        events: ``cdc.events``: Kafka records of its range (tombstones and quarantined ones included).
        replay: it was a manual replay (``cdc.replay``).
    """

    model_config = ConfigDict(frozen=True)

    snapshot_id: int
    committed_at_ms: int
    age_ms: int
    run_id: str | None
    events: int
    replay: bool = False


class Activity(BaseModel):
    """What the CDC commits of a window applied, summed from their snapshot summaries.

    Every count is of Kafka records (events), not of rows; a run whose range took several
    snapshots (the demotion, the ``MERGE``, the default fill) counts once.

    Attributes:
        commits: CDC runs that committed in the window.
        events: records consumed (``cdc.events``: every record of the ranges).
        upserted: ``c``, ``u`` and ``r`` events applied (``cdc.rows-upserted``).
        deleted: ``d`` events applied (``cdc.rows-deleted``).
        kafka_tombstones: records with a null value, skipped (``cdc.kafka-tombstones``).
        quarantined: records written to the quarantine (``cdc.records-quarantined``).
        ops: events applied per Debezium op (``cdc.ops``; commits written before that key
            existed are counted in ``upserted``/``deleted`` only).
        last_source_ts_ms: the greatest ``cdc.last-source-ts`` of the window's commits (epoch
            ms), or ``None``.
    """

    model_config = ConfigDict(frozen=True)

    commits: int = 0
    events: int = 0
    upserted: int = 0
    deleted: int = 0
    kafka_tombstones: int = 0
    quarantined: int = 0
    ops: dict[str, int] = {}
    last_source_ts_ms: int | None = None


class SnapshotInProgress(BaseModel):
    """A full snapshot whose records are being applied (``cdc.snapshot-in-progress``).

    Attributes:
        position: its binlog position ``<file seq>:<pos>:<row>:<rank>``.
        records: its records applied so far (all runs).
        end_applied: its end-marker record was applied (it waits for the other partitions, or for
            the quarantine to be released).
    """

    model_config = ConfigDict(frozen=True)

    position: str
    records: int
    end_applied: bool


class ReconcileSummary(BaseModel):
    """The table's newest reconcile result: its summary row (``chunk`` -1) in
    :data:`~cdclake.pipeline.reconcile.RECONCILE_TABLE` (after the repair, in ``repair`` mode).

    Attributes:
        run_id: the reconcile run.
        mode: ``report`` or ``repair``.
        reconciled_at_ms: when, epoch ms.
        age_ms: ``now_ms - reconciled_at_ms``, ms.
        source_rows: rows in the source table (or the key range compared).
        lake_rows: rows in the Iceberg table (same range).
        only_in_source: keys the lake lacks.
        only_in_lake: keys the source lacks.
        differing: keys whose values differ.
        unsettled: keys still changing while compared (not differences).
        repaired: a repair ran.
        clean: no key only in the source, only in the lake, or differing.
    """

    model_config = ConfigDict(frozen=True)

    run_id: str
    mode: str
    reconciled_at_ms: int
    age_ms: int
    source_rows: int
    lake_rows: int
    only_in_source: int
    only_in_lake: int
    differing: int
    unsettled: int
    repaired: bool
    clean: bool


class TableStatus(BaseModel):
    """The status figures of one configured table (JSON: ``model_dump(mode="json")``).

    Attributes:
        name: the table's name in the table config.
        identifier: the Iceberg table ``namespace.table``.
        topic: its Kafka topic.
        checked_at_ms: the ``now`` the figures were computed at, epoch ms.
        table_exists: the Iceberg table exists.
        topic_exists: the topic exists; ``None`` when Kafka was not asked or did not answer.
        committed_offsets: ``{partition: next offset to apply}`` of the last CDC commit; ``None``
            when the table never committed.
        high_watermarks: ``{partition: next offset to be written}`` of the topic; ``None`` when
            unknown.
        lag_events: records in the topic not applied yet, all partitions (high watermark minus
            committed offset; from the low watermark for a partition never committed); ``None``
            when the topic's watermarks are unknown.
        lag_events_by_partition: the same per partition.
        last_source_ts_ms: source time (``source.ts_ms``) of the newest event applied, epoch ms:
            the greatest ``_cdc_source_ts`` of the table's rows and delete tombstones, from the
            data files' column bounds; ``None`` when no file carries the bound.
        high_position_kafka_ts_ms: Kafka timestamp of the record of the greatest position applied
            (``cdc.high-position-timestamp``), epoch ms; ``None`` when unknown.
        lag_ms: ``now_ms`` minus the time of the newest event applied, ms (never below 0): from
            ``last_source_ts_ms``, else from ``high_position_kafka_ts_ms``; ``None`` when neither is
            known. It grows while the source is quiet, even with nothing pending: read it with
            ``lag_events``.
        lag_basis: which time ``lag_ms`` counts from: ``source_ts`` or ``kafka_ts``.
        last_commit: the newest CDC commit; ``None`` when the table never committed.
        current_snapshot_id: the table's current snapshot (a later maintenance or repair commit
            may follow the last CDC commit).
        events_per_hour: records consumed per hour over the last 24 hours, 24 entries, oldest
            first: entry ``i`` counts the commits in ``[now - (24 - i) h, now - (23 - i) h)``.
            Only snapshots still in the table's history count (an expiry keeping less than 24 h
            leaves the expired commits out).
        activity_24h: the counts by kind over the same 24 hours.
        open_quarantine: records in the quarantine with ``status = 'open'`` (0 without a
            quarantine table).
        schema_id: the Iceberg table's current schema id.
        column_count: its source columns (the ``_cdc_*`` metadata columns left out).
        snapshot_in_progress: the full snapshot being applied, if any.
        last_reconcile: the newest reconcile result; ``None`` when never reconciled.
        freshness_minutes: the freshness limit it was judged by, minutes; ``None``: not judged.
        fresh: ``True`` when the table applied everything in its topic or its newest applied
            event is at most ``freshness_minutes`` old; ``None`` when not judged or unknown.
        problems: what is missing or wrong, one sentence each (no table, no topic, offsets
            outside the topic).
    """

    model_config = ConfigDict(frozen=True)

    name: str
    identifier: str
    topic: str
    checked_at_ms: int
    table_exists: bool
    topic_exists: bool | None
    committed_offsets: dict[int, int] | None = None
    high_watermarks: dict[int, int] | None = None
    lag_events: int | None = None
    lag_events_by_partition: dict[int, int] | None = None
    last_source_ts_ms: int | None = None
    high_position_kafka_ts_ms: int | None = None
    lag_ms: int | None = None
    lag_basis: Literal["source_ts", "kafka_ts"] | None = None
    last_commit: LastCommit | None = None
    current_snapshot_id: int | None = None
    events_per_hour: list[int] = [0] * WINDOW_HOURS
    activity_24h: Activity = Activity()
    open_quarantine: int = 0
    schema_id: int | None = None
    column_count: int | None = None
    snapshot_in_progress: SnapshotInProgress | None = None
    last_reconcile: ReconcileSummary | None = None
    freshness_minutes: int | None = None
    fresh: bool | None = None
    problems: list[str] = []


# --- pure parts -------------------------------------------------------------------------------


def select_tables(tables: Sequence[TableConfig], names: Sequence[str]) -> list[TableConfig]:
    """The configured tables named ``names`` in that order (all of them, in config order, when
    ``names`` is empty).

    Raises:
        ConfigError: a name that is not configured (the message lists the configured ones).
    """
    if not names:
        return list(tables)
    by_name = {t.name: t for t in tables}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ConfigError(f"no table(s) {unknown} in the table config; configured: {sorted(by_name)}")
    return [by_name[n] for n in dict.fromkeys(names)]


def partition_lag(
    topic: str, committed: Offsets | None, low: Mapping[int, int], high: Mapping[int, int]
) -> tuple[dict[int, int], list[str]]:
    """Records not applied yet per partition, and the problems seen.

    A partition is behind by ``high - committed``; one the table never committed (a new table or
    a new partition) by ``high - low``, since its next run starts at the low watermark. A committed
    offset below the low watermark (retention deleted records before they were applied) or above
    the high watermark (the topic was recreated) is named in the problems; the lag still counts
    from the committed offset (at least 0).
    """
    lag: dict[int, int] = {}
    problems: list[str] = []
    for p in sorted(high):
        start = low.get(p, 0) if committed is None or p not in committed else committed[p]
        if committed is not None and p in committed:
            if start < low.get(p, 0):
                problems.append(
                    f"topic {topic!r} partition {p}: committed offset {start} is below the low watermark "
                    f"{low[p]}: records were deleted by retention before they were applied (re-snapshot)"
                )
            elif start > high[p]:
                problems.append(
                    f"topic {topic!r} partition {p}: committed offset {start} is above the high watermark "
                    f"{high[p]}: the topic was recreated?"
                )
        lag[p] = max(high[p] - start, 0)
    if committed is not None:
        gone = sorted(set(committed) - set(high))
        if gone:
            problems.append(f"topic {topic!r} has no partition(s) {gone} the table committed offsets for")
    return lag, problems


def _int(summary: Mapping[str, str], key: str) -> int:
    try:
        return int(summary.get(key) or 0)
    except ValueError:
        return 0


def commit_activity(
    snapshots: Iterable[tuple[int, int, Mapping[str, str] | None]], topic: str, now_ms: int
) -> tuple[LastCommit | None, list[int], Activity]:
    """The last CDC commit, the records per hour and the activity of the last 24 hours.

    Args:
        snapshots: ``(snapshot id, timestamp ms, summary properties or None)`` from the current
            snapshot back through its ancestors, newest first.
        topic: the table's topic; commits of another topic (and snapshots without offsets) are
            passed over.
        now_ms: the end of the window, epoch ms.

    Returns:
        ``(last commit or None, records per hour (24 entries, oldest first), activity)``. The
        snapshots of one run (same run id and offsets, one after the other) count once.
    """
    start_ms = now_ms - WINDOW_HOURS * HOUR_MS
    per_hour = [0] * WINDOW_HOURS
    totals = dict.fromkeys(("commits", "events", "upserted", "deleted", "kafka_tombstones", "quarantined"), 0)
    ops: dict[str, int] = {}
    last_source_ts: int | None = None
    last: LastCommit | None = None
    previous_run: tuple[str | None, str | None, str | None] | None = None
    for snapshot_id, ts_ms, summary in snapshots:
        if ts_ms < start_ms and last is not None:
            break
        if summary is None or SummaryKeys.END_OFFSETS not in summary or summary.get(SummaryKeys.TOPIC) != topic:
            continue
        run = (
            summary.get(SummaryKeys.RUN_ID),
            summary.get(SummaryKeys.START_OFFSETS),
            summary.get(SummaryKeys.END_OFFSETS),
        )
        same_run = run == previous_run
        previous_run = run
        if last is None:
            last = LastCommit(
                snapshot_id=snapshot_id,
                committed_at_ms=ts_ms,
                age_ms=max(now_ms - ts_ms, 0),
                run_id=run[0],
                events=_int(summary, SummaryKeys.EVENTS),
                replay=summary.get(SummaryKeys.REPLAY) == "true",
            )
        if same_run or not start_ms <= ts_ms <= now_ms:
            continue
        events = _int(summary, SummaryKeys.EVENTS)
        per_hour[min((ts_ms - start_ms) // HOUR_MS, WINDOW_HOURS - 1)] += events
        totals["commits"] += 1
        totals["events"] += events
        totals["upserted"] += _int(summary, SummaryKeys.UPSERTS)
        totals["deleted"] += _int(summary, SummaryKeys.DELETES)
        totals["kafka_tombstones"] += _int(summary, SummaryKeys.TOMBSTONES)
        totals["quarantined"] += _int(summary, SummaryKeys.QUARANTINED)
        for op, n in json.loads(summary.get(SummaryKeys.OPS, "{}")).items():
            ops[op] = ops.get(op, 0) + int(n)
        if SummaryKeys.LAST_SOURCE_TIMESTAMP in summary:
            ts = int(summary[SummaryKeys.LAST_SOURCE_TIMESTAMP])
            last_source_ts = ts if last_source_ts is None else max(last_source_ts, ts)
    return last, per_hour, Activity(**totals, ops=ops, last_source_ts_ms=last_source_ts)


def time_lag(
    now_ms: int, source_ts_ms: int | None, kafka_ts_ms: int | None
) -> tuple[int | None, Literal["source_ts", "kafka_ts"] | None]:
    """``(lag ms, basis)``: ``now_ms`` minus the source time of the newest event applied, or minus
    its Kafka timestamp when the source time is unknown (never below 0); ``(None, None)`` when
    both are unknown."""
    if source_ts_ms is not None:
        return max(now_ms - source_ts_ms, 0), "source_ts"
    if kafka_ts_ms is not None:
        return max(now_ms - kafka_ts_ms, 0), "kafka_ts"
    return None, None


def freshness_verdict(lag_events: int | None, lag_ms: int | None, freshness_minutes: int | None) -> bool | None:
    """Whether the table is fresh: it applied every record of its topic (``lag_events == 0``), or
    the newest event it applied is at most ``freshness_minutes`` old. ``None`` without a limit,
    or when neither figure is known."""
    if freshness_minutes is None:
        return None
    if lag_events == 0:
        return True
    if lag_ms is None:
        return None
    return lag_ms <= freshness_minutes * 60_000


def reconcile_summary(row: Mapping[str, Any], now_ms: int) -> ReconcileSummary:
    """A summary row of the reconcile table (a pyarrow ``to_pylist`` dict) as a
    :class:`ReconcileSummary`."""
    at = row["reconciled_at"]
    at_ms = int(at.timestamp() * 1000) if isinstance(at, datetime) else int(at or 0)
    counts = {k: int(row.get(k) or 0) for k in ("only_in_source", "only_in_lake", "differing")}
    return ReconcileSummary(
        run_id=str(row["run_id"]),
        mode=str(row.get("mode") or ""),
        reconciled_at_ms=at_ms,
        age_ms=max(now_ms - at_ms, 0),
        source_rows=int(row.get("source_rows") or 0),
        lake_rows=int(row.get("lake_rows") or 0),
        unsettled=int(row.get("unsettled") or 0),
        repaired=bool(row.get("repaired")),
        clean=not any(counts.values()),
        **counts,
    )


# --- reads ------------------------------------------------------------------------------------


def column_upper_bound_ms(table: Table, column: str) -> int | None:
    """The greatest value of the timestamp ``column`` in the live data files of ``table``'s
    current snapshot, epoch ms, from the manifests' column bounds (no data file is read).

    ``None`` when the table has no snapshot or no non-null value, lacks the column (or it is not
    a timestamp), or a data file with non-null values carries no bound for it (Iceberg keeps
    column metrics for the first 100 columns by default).
    """
    from pyiceberg.conversions import from_bytes
    from pyiceberg.manifest import DataFileContent, ManifestContent
    from pyiceberg.types import TimestampType, TimestamptzType

    snapshot = table.current_snapshot()
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


def _ancestry(table: Table) -> Iterator[tuple[int, int, Mapping[str, str] | None]]:
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return
    for snap in ancestors_of(current, table.metadata):
        summary = None if snap.summary is None else snap.summary.additional_properties
        yield snap.snapshot_id, snap.timestamp_ms, summary


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
    Kafka was not asked (``kafka`` is ``None``) or did not answer."""
    from confluent_kafka import KafkaException

    if kafka is None:
        return {}, "Kafka was not asked"
    try:
        return topics_watermarks(kafka, topics), None
    except KafkaException as e:
        log.warning("Kafka at %s did not answer: %s", kafka.bootstrap, e)
        return {}, f"Kafka at {kafka.bootstrap} did not answer: {e}"


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
) -> list[TableStatus]:
    """The status figures of each table, in the order given (see :func:`table_status`).

    One ``now`` for all. The Iceberg side is read first, then the watermarks of every topic
    through one Kafka consumer (so a commit landing in between makes a lag too large, never
    negative), and the reconcile table once. A broker that does not answer costs one timeout
    (:data:`~cdclake.io.kafka.TIMEOUT_S`) and leaves every table's Kafka figures unknown.

    Args:
        freshness_minutes: one limit for every table, or a limit per table name (tables not named
            are not judged); default: each table's ``freshness_minutes`` of the table config.
    """
    configs = list(tables)
    now = _now_ms() if now_ms is None else now_ms
    lakes = [_lake(catalog, cfg, now) for cfg in configs]
    marks, kafka_problem = read_watermarks(kafka, [c.topic for c in configs])
    reconciled = last_reconciles(catalog, now, [c.identifier for c in configs])
    out: list[TableStatus] = []
    for cfg, lake in zip(configs, lakes, strict=True):
        if freshness_minutes is None:
            limit = cfg.freshness_minutes
        elif isinstance(freshness_minutes, Mapping):
            limit = freshness_minutes.get(cfg.name)
        else:
            limit = freshness_minutes
        fields, problems = dict(lake.fields), list(lake.problems)
        topic_exists: bool | None = None
        if kafka_problem is not None:
            problems.append(f"{kafka_problem}: lag in events unknown")
        else:
            topic_marks = marks.get(cfg.topic)
            topic_exists = topic_marks is not None
            if topic_marks is None:
                problems.append(f"Kafka topic {cfg.topic!r} does not exist")
            else:
                by_partition, lag_problems = partition_lag(
                    cfg.topic, fields.get("committed_offsets"), topic_marks.low, topic_marks.high
                )
                problems.extend(lag_problems)
                fields.update(
                    high_watermarks=topic_marks.high,
                    lag_events_by_partition=by_partition,
                    lag_events=sum(by_partition.values()),
                )
        lag_ms, basis = time_lag(now, fields.get("last_source_ts_ms"), fields.get("high_position_kafka_ts_ms"))
        for problem in problems:
            log.debug("table %s: %s", cfg.identifier, problem)
        out.append(
            TableStatus(
                name=cfg.name,
                identifier=cfg.identifier,
                topic=cfg.topic,
                checked_at_ms=now,
                table_exists=lake.exists,
                topic_exists=topic_exists,
                lag_ms=lag_ms,
                lag_basis=basis,
                last_reconcile=reconciled.get(cfg.identifier),
                freshness_minutes=limit,
                fresh=freshness_verdict(fields.get("lag_events"), lag_ms, limit),
                problems=problems,
                **fields,
            )
        )
    return out


@dataclass(frozen=True)
class _Lake:
    """The Iceberg side of a table's status: whether it exists, :class:`TableStatus` fields, problems."""

    exists: bool
    fields: dict[str, Any]
    problems: list[str]


def _lake(catalog: Catalog, cfg: TableConfig, now: int) -> _Lake:
    table = load_table_or_none(catalog, cfg.identifier)
    if table is None:
        return _Lake(
            False, {}, [f"Iceberg table {cfg.identifier} does not exist yet (its DAG has not applied anything)"]
        )
    problems: list[str] = []
    state = committed_state(table, cfg.topic)
    schema = table.schema()
    last, per_hour, activity = commit_activity(_ancestry(table), cfg.topic, now)
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
    }
    if state.snapshot is not None:
        fields["snapshot_in_progress"] = SnapshotInProgress(
            position=state.snapshot.position.to_text(),
            records=state.snapshot.records,
            end_applied=state.snapshot.end is not None,
        )
    if state.offsets is None:
        problems.append(f"Iceberg table {cfg.identifier} has no CDC commit of topic {cfg.topic!r} yet")
    return _Lake(True, fields, problems)


def format_duration(ms: int | None) -> str:
    """A duration in milliseconds as ``42s``, ``12m05s``, ``3h07m``, ``2d03h`` (``-``: unknown)."""
    if ms is None:
        return "-"
    s = max(ms, 0) // 1000
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
