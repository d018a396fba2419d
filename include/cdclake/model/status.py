"""The status figures of a table and the pure rules that compute them (no I/O):
:class:`TableStatus` and its parts, the lag per partition, the activity of the snapshot
summaries, the time lag, the freshness verdict (docs/monitoring.md, "Status").

:mod:`cdclake.pipeline.status` reads the catalog and Kafka and fills them in. Times are epoch
milliseconds (``*_ms``) or durations in milliseconds (``*_age_ms``, ``lag_ms``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    PlainSerializer,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import Offsets
from cdclake.model.transactions import TransactionStatus

HOUR_MS = 3_600_000
WINDOW_HOURS = 24
"""The activity window: :attr:`TableStatus.events_per_hour` has one entry per hour of it."""

SnapshotId = Annotated[int, PlainSerializer(str, return_type=str, when_used="json")]
"""An Iceberg snapshot id (a 64-bit integer): a string in JSON, since JavaScript numbers (IEEE 754
doubles) lose digits above 2**53 and snapshot ids are random 63-bit values."""


def iso_time(ms: int | None) -> str | None:
    """Epoch ms as ISO 8601 in UTC, ``2026-11-24T03:31:06.123Z``; ``None`` when unknown."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Figures(BaseModel):
    """A frozen model whose JSON form carries each epoch-ms field ``<x>_ms`` named in
    ``_epoch_fields`` also as ``<x>_iso`` (:func:`iso_time`); the Python form is unchanged."""

    model_config = ConfigDict(frozen=True)
    _epoch_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _with_iso_times(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if info.mode_is_json() and isinstance(data, dict):
            for name in self._epoch_fields:
                data[name.removesuffix("_ms") + "_iso"] = iso_time(getattr(self, name))
        return data


class LastCommit(_Figures):
    """The table's newest CDC commit (the newest snapshot in the current snapshot's ancestry whose
    summary carries the table topic's end offsets; maintenance and repair commits carry none).

    Attributes:
        snapshot_id: its Iceberg snapshot id (a string in JSON: :data:`SnapshotId`).
        committed_at_ms: its snapshot's timestamp, epoch ms (also ``committed_at_iso`` in JSON).
        age_ms: ``now_ms - committed_at_ms``, ms.
        run_id: ``cdc.run-id``: the Airflow run that committed it.
        events: ``cdc.events``: Kafka records of its range (tombstones and quarantined ones included).
        replay: it was a manual replay (``cdc.replay``).
        connector_contradictions: ``cdc.connector-contradictions``: the Debezium handling modes its
            events showed where the table's columns expect others, one line per column
            (:mod:`cdclake.model.connector_check`); empty when they agreed.
    """

    _epoch_fields = ("committed_at_ms",)

    snapshot_id: SnapshotId
    committed_at_ms: int
    age_ms: int
    run_id: str | None
    events: int
    replay: bool = False
    connector_contradictions: list[str] = []

    def connector_warning(self) -> str | None:
        """One sentence for the status's warnings when its events contradict the connector modes:
        how many columns, the first line; ``None`` when they agreed."""
        lines = self.connector_contradictions
        if not lines:
            return None
        return (
            f"connector modes contradict ({len(lines)} column{'' if len(lines) == 1 else 's'} in the last CDC "
            f'commit, snapshot {self.snapshot_id}; docs/operations.md, "Events that contradict the connector '
            f'modes"): {lines[0]}'
        )


class Activity(_Figures):
    """What the CDC commits of a window applied, summed from their snapshot summaries.

    Every count is of Kafka records (events), not of rows; a run whose range took several
    snapshots (the demotion, the ``MERGE``, the default fill) counts once. A manual replay
    (``cdc.replay``) reads records the table had already consumed: it is counted in ``replays``
    and ``replay_events`` only, never as new source activity.

    Attributes:
        commits: CDC runs that committed in the window (replays not included).
        events: records consumed (``cdc.events``: every record of the ranges; replays not included).
        upserted: ``c``, ``u`` and ``r`` events applied (``cdc.rows-upserted``).
        deleted: ``d`` events applied (``cdc.rows-deleted``).
        kafka_tombstones: records with a null value, skipped (``cdc.kafka-tombstones``).
        quarantined: records written to the quarantine (``cdc.records-quarantined``).
        ops: events applied per Debezium op (``cdc.ops``; commits written before that key
            existed are counted in ``upserted``/``deleted`` only).
        replays: manual replays that committed in the window.
        replay_events: records the replays read again.
        last_source_ts_ms: the greatest ``cdc.last-source-ts`` of the window's commits, replays
            included (epoch ms; also ``last_source_ts_iso`` in JSON), or ``None``.
    """

    _epoch_fields = ("last_source_ts_ms",)

    commits: int = 0
    events: int = 0
    upserted: int = 0
    deleted: int = 0
    kafka_tombstones: int = 0
    quarantined: int = 0
    ops: dict[str, int] = {}
    replays: int = 0
    replay_events: int = 0
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


class ReconcileSummary(_Figures):
    """The table's newest reconcile result: its summary row (``chunk`` -1) in
    :data:`~cdclake.pipeline.reconcile.RECONCILE_TABLE` (after the repair, in ``repair`` mode).

    Attributes:
        run_id: the reconcile run.
        mode: ``report`` or ``repair``.
        reconciled_at_ms: when, epoch ms (also ``reconciled_at_iso`` in JSON).
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

    _epoch_fields = ("reconciled_at_ms",)

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


MAX_ERROR_CHARS = 500
"""How much of an error's first line :class:`RunFailure` keeps."""


def error_line(error: BaseException | str | None) -> str:
    """An error as one line: ``<exception class>: <the message's first line>`` (at most
    :data:`MAX_ERROR_CHARS` characters); a text as its first line; ``None`` (a task that ended
    without an exception: killed, or its heartbeat lost) as a sentence saying so."""
    if error is None:
        return "the task ended without an exception (killed, or its heartbeat was lost): see its log"
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    if isinstance(error, BaseException):
        line = f"{type(error).__name__}: {line}" if line else type(error).__name__
    return line if len(line) <= MAX_ERROR_CHARS else line[: MAX_ERROR_CHARS - 3] + "..."


class RunFailure(_Figures):
    """The failed tries of a table's DAG since its last run that succeeded (table property
    :data:`~cdclake.model.layout.RUN_FAILURE_PROPERTY`, written by the DAG's failure and retry
    callbacks and removed by its next run that succeeds; docs/operations.md, "A table whose runs
    fail").

    Attributes:
        state: ``failing``: the newest try failed for good (no retry left, or an error that is not
            retried); ``retrying``: it failed and Airflow will run it again.
        since_ms: when the first failed try since the last run that succeeded ended, epoch ms
            (also ``since_iso`` in JSON).
        failed_tries: the failed tries since then, of every run, retries included.
        last_failed_ms: when the newest failed try ended, epoch ms (also ``last_failed_iso``).
        run_id: the Airflow run of the newest failed try.
        task_id: its task.
        try_number: its try number.
        error: its error, one line (:func:`error_line`).
    """

    _epoch_fields = ("since_ms", "last_failed_ms")

    state: Literal["failing", "retrying"]
    since_ms: int
    failed_tries: int
    last_failed_ms: int
    run_id: str
    task_id: str
    try_number: int
    error: str

    @classmethod
    def after(
        cls,
        previous: RunFailure | None,
        *,
        state: Literal["failing", "retrying"],
        at_ms: int,
        run_id: str,
        task_id: str,
        try_number: int,
        error: BaseException | str | None,
    ) -> RunFailure:
        """The record after one more failed try (``previous``: the record so far, ``None`` when
        the runs succeeded until now): the streak keeps its start and counts the try."""
        return cls(
            state=state,
            since_ms=previous.since_ms if previous is not None else at_ms,
            failed_tries=(previous.failed_tries if previous is not None else 0) + 1,
            last_failed_ms=at_ms,
            run_id=run_id,
            task_id=task_id,
            try_number=try_number,
            error=error_line(error),
        )

    @classmethod
    def from_property(cls, text: str | None) -> RunFailure | None:
        """The record of the table property, ``None`` when absent or unreadable (status never
        fails on it)."""
        if not text:
            return None
        try:
            return cls.model_validate_json(text)
        except ValueError:
            return None

    def describe(self, now_ms: int) -> str:
        """One sentence for the status's problems: state, since when, the failed tries, the newest
        try and its error."""
        tries = f"{self.failed_tries} failed tr{'y' if self.failed_tries == 1 else 'ies'}"
        return (
            f"its DAG's runs are {self.state}: {tries} since the first, {format_duration(now_ms - self.since_ms)} "
            f"ago (the newest: run {self.run_id!r}, task {self.task_id}, try {self.try_number}, "
            f"{format_duration(now_ms - self.last_failed_ms)} ago): {self.error}"
        )


class TableSource(BaseModel):
    """The source leg of one table's chain, as the table sees it: the Debezium connector feeding
    its topic and how far that connector is behind the source's binary log (the whole figures of
    the source: :class:`cdclake.model.source_health.SourceStatus`).

    Attributes:
        name: the source: its connector's name, or ``topic prefix <p>`` while the connector is
            not known (Kafka Connect did not answer).
        state: the connector's state: ``RUNNING`` when the connector and every task run;
            ``FAILED``, ``PAUSED``, ``STOPPED``, ``UNASSIGNED``, ``RESTARTING`` as Kafka Connect
            says (the worst of the connector and its tasks); ``missing`` (Kafka Connect has no
            connector of that name); ``unreachable`` (Kafka Connect did not answer).
        running: ``state == "RUNNING"``.
        reason: why it is not running, one line (a failed task's first trace line and its root
            cause, Kafka Connect's error); ``None`` while it runs.
        remedy: what to do, one line (the ``curl`` of Kafka Connect's REST API); ``None`` while
            it runs.
        lag_ms: how far the connector is behind the source, ms: 0 when no source transaction
            started after the newest position it is known to have emitted, else now minus that
            position's source time (an upper bound, as :attr:`TableStatus.lag_ms`); ``None``:
            not measured (no source database, another server) or unknown.
        lag_bytes: binlog bytes from that position to the source's current position (the tail
            of the transaction emitted last counts too); ``None``: unknown.
        lag_transactions: source transactions started after that position (any table's, at
            most :data:`cdclake.model.source_health.EVENTS_READ` events read); ``None``: unknown.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    state: str
    running: bool
    reason: str | None = None
    remedy: str | None = None
    lag_ms: int | None = None
    lag_bytes: int | None = None
    lag_transactions: int | None = None

    def problem(self) -> str | None:
        """One sentence for the table's problems while the connector does not run; ``None``
        while it runs."""
        if self.running:
            return None
        return f"its source {self.name} is {self.state}: {self.reason or 'not running'}" + (
            f"; remedy: {self.remedy}" if self.remedy else ""
        )


class TableStatus(_Figures):
    """The status figures of one configured table (JSON: ``model_dump(mode="json")``: snapshot
    ids as strings, :data:`SnapshotId`; each epoch-ms time ``<x>_ms`` also as ``<x>_iso``, ISO
    8601 in UTC).

    Attributes:
        name: the table's name in the table config.
        identifier: the Iceberg table ``namespace.table``.
        topic: its Kafka topic.
        checked_at_ms: the ``now`` the figures were computed at, epoch ms.
        caught_up: the table applied every record of its topic (``lag_events == 0``); ``None``
            when the topic's watermarks are unknown.
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
        last_event_age_ms: ``now_ms`` minus the time of the newest event applied, ms (never below
            0): from ``last_source_ts_ms``, else from ``high_position_kafka_ts_ms``; ``None`` when
            neither is known. It grows while the source is quiet.
        lag_ms: how far the table is behind its source, ms: 0 when ``caught_up`` (nothing is
            pending, however old the newest event), else ``last_event_age_ms``.
        lag_basis: which time ``lag_ms`` counts from: ``source_ts`` or ``kafka_ts``; ``caught_up``
            when the table is caught up.
        last_commit: the newest CDC commit; ``None`` when the table never committed.
        current_snapshot_id: the table's current snapshot (a later maintenance or repair commit
            may follow the last CDC commit; a string in JSON).
        events_per_hour: records consumed per hour over the last 24 hours, 24 entries, oldest
            first: entry ``i`` counts the commits in ``[now - (24 - i) h, now - (23 - i) h)``;
            manual replays are not counted (:class:`Activity`).
            Only snapshots still in the table's history count (an expiry keeping less than 24 h
            leaves the expired commits out).
        activity_24h: the counts by kind over the same 24 hours.
        open_quarantine: records in the quarantine with ``status = 'open'`` (0 without a
            quarantine table).
        schema_id: the Iceberg table's current schema id.
        column_count: its source columns (the ``_cdc_*`` metadata columns left out).
        snapshot_in_progress: the full snapshot being applied, if any: none once an event
            above its position is applied while its end record is not
            (:func:`~cdclake.model.convergence.still_in_progress`).
        last_reconcile: the newest reconcile result; ``None`` when never reconciled.
        run_failure: the failed tries of the table's DAG since its last run that succeeded;
            ``None`` while its runs succeed.
        transactions: the last whole source transaction applied and the records waiting for one
            that is not whole yet; ``None`` for a table not configured ``transactions: whole``.
        freshness_minutes: the freshness limit it was judged by, minutes; ``None``: not judged.
        fresh: ``True`` when the table applied everything in its topic or its newest applied
            event is at most ``freshness_minutes`` old, and its runs are not failing, and, when
            its source is watched, its connector runs and is at most ``freshness_minutes``
            behind the source (:func:`chain_verdict`); ``None`` when not judged or unknown.
        source: the source leg of its chain (:class:`TableSource`): its connector's state and
            how far that connector is behind the source; ``None`` when no connector is watched
            (no Kafka Connect configured, or none found writing the table's topic).
        end_to_end_lag_ms: how far the table is behind the source itself, ms: the greater of
            ``lag_ms`` (Kafka -> lake) and the source leg's ``lag_ms`` (source -> Kafka); ``lag_ms``
            alone when the source leg is not measured; ``None`` when ``lag_ms`` is unknown.
        problems: what is missing or wrong, one sentence each (no table, no topic, offsets
            outside the topic, failing runs: :meth:`RunFailure.describe`, a connector that does
            not run: :meth:`TableSource.problem`).
        warnings: what the table applied but is likely wrong, one sentence each (events that
            contradict the connector modes: :meth:`LastCommit.connector_warning`; events applied
            without transaction metadata: :meth:`TransactionStatus.warning`); they do not make
            the table late.
    """

    _epoch_fields = ("checked_at_ms", "last_source_ts_ms", "high_position_kafka_ts_ms")

    name: str
    identifier: str
    topic: str
    checked_at_ms: int
    table_exists: bool
    topic_exists: bool | None
    caught_up: bool | None = None
    committed_offsets: dict[int, int] | None = None
    high_watermarks: dict[int, int] | None = None
    lag_events: int | None = None
    lag_events_by_partition: dict[int, int] | None = None
    last_source_ts_ms: int | None = None
    high_position_kafka_ts_ms: int | None = None
    last_event_age_ms: int | None = None
    lag_ms: int | None = None
    lag_basis: Literal["source_ts", "kafka_ts", "caught_up"] | None = None
    last_commit: LastCommit | None = None
    current_snapshot_id: SnapshotId | None = None
    events_per_hour: list[int] = [0] * WINDOW_HOURS
    activity_24h: Activity = Activity()
    open_quarantine: int = 0
    schema_id: int | None = None
    column_count: int | None = None
    snapshot_in_progress: SnapshotInProgress | None = None
    last_reconcile: ReconcileSummary | None = None
    run_failure: RunFailure | None = None
    transactions: TransactionStatus | None = None
    freshness_minutes: int | None = None
    fresh: bool | None = None
    source: TableSource | None = None
    end_to_end_lag_ms: int | None = None
    problems: list[str] = []
    warnings: list[str] = []


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
        snapshots of one run (same run id and offsets, one after the other) count once; a manual
        replay (``cdc.replay``) counts in ``replays`` and ``replay_events`` only.
    """
    start_ms = now_ms - WINDOW_HOURS * HOUR_MS
    per_hour = [0] * WINDOW_HOURS
    totals = dict.fromkeys(
        ("commits", "events", "upserted", "deleted", "kafka_tombstones", "quarantined", "replays", "replay_events"), 0
    )
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
                connector_contradictions=json.loads(summary.get(SummaryKeys.CONNECTOR_CONTRADICTIONS, "[]")),
            )
        if same_run or not start_ms <= ts_ms <= now_ms:
            continue
        events = _int(summary, SummaryKeys.EVENTS)
        if SummaryKeys.LAST_SOURCE_TIMESTAMP in summary:
            ts = int(summary[SummaryKeys.LAST_SOURCE_TIMESTAMP])
            last_source_ts = ts if last_source_ts is None else max(last_source_ts, ts)
        if summary.get(SummaryKeys.REPLAY) == "true":  # records consumed before: no new source activity
            totals["replays"] += 1
            totals["replay_events"] += events
            continue
        per_hour[min((ts_ms - start_ms) // HOUR_MS, WINDOW_HOURS - 1)] += events
        totals["commits"] += 1
        totals["events"] += events
        totals["upserted"] += _int(summary, SummaryKeys.UPSERTS)
        totals["deleted"] += _int(summary, SummaryKeys.DELETES)
        totals["kafka_tombstones"] += _int(summary, SummaryKeys.TOMBSTONES)
        totals["quarantined"] += _int(summary, SummaryKeys.QUARANTINED)
        for op, n in json.loads(summary.get(SummaryKeys.OPS, "{}")).items():
            ops[op] = ops.get(op, 0) + int(n)
    return last, per_hour, Activity(**totals, ops=ops, last_source_ts_ms=last_source_ts)


def time_lag(
    now_ms: int, source_ts_ms: int | None, kafka_ts_ms: int | None
) -> tuple[int | None, Literal["source_ts", "kafka_ts"] | None]:
    """``(age ms, basis)`` of the newest event applied: ``now_ms`` minus its source time, or minus
    its Kafka timestamp when the source time is unknown (never below 0); ``(None, None)`` when
    both are unknown. :func:`lag_time` turns it into the lag."""
    if source_ts_ms is not None:
        return max(now_ms - source_ts_ms, 0), "source_ts"
    if kafka_ts_ms is not None:
        return max(now_ms - kafka_ts_ms, 0), "kafka_ts"
    return None, None


def lag_time(
    lag_events: int | None, age_ms: int | None, basis: Literal["source_ts", "kafka_ts"] | None
) -> tuple[int | None, Literal["source_ts", "kafka_ts", "caught_up"] | None]:
    """``(lag ms, basis)`` of :class:`TableStatus`: ``(0, "caught_up")`` when nothing is pending
    (``lag_events == 0``: the newest event's age then says how quiet the source is, not how late
    the table is), else the age of the newest event applied (:func:`time_lag`)."""
    if lag_events == 0:
        return 0, "caught_up"
    return age_ms, basis


def freshness_verdict(
    lag_events: int | None, lag_ms: int | None, freshness_minutes: int | None, run_failure: RunFailure | None = None
) -> bool | None:
    """Whether the table is fresh: its runs are not failing (a table stuck on failures is never
    fresh, whatever its figures say), and it applied every record of its topic
    (``lag_events == 0``) or the newest event it applied is at most ``freshness_minutes`` old.
    ``None`` without a limit, or when neither figure is known."""
    if freshness_minutes is None:
        return None
    if run_failure is not None:
        return False
    if lag_events == 0:
        return True
    if lag_ms is None:
        return None
    return lag_ms <= freshness_minutes * 60_000


def chain_verdict(
    fresh: bool | None, lag_ms: int | None, freshness_minutes: int | None, source: TableSource | None
) -> tuple[bool | None, int | None]:
    """``(fresh, end-to-end lag ms)`` of a table whose whole chain is judged: source -> Kafka
    (its connector, ``source``) and Kafka -> lake (``fresh`` and ``lag_ms`` of
    :func:`freshness_verdict` and :func:`lag_time`).

    The end-to-end lag is the greater of both legs' lags (``lag_ms`` alone when the source leg is
    not measured; ``None`` when ``lag_ms`` is unknown). Judged (``freshness_minutes`` set), the
    table is not fresh while its connector does not run, or the source leg is more than
    ``freshness_minutes`` behind; otherwise ``fresh`` stands. ``source`` ``None`` (not watched):
    ``fresh`` as it is."""
    end_to_end = lag_ms
    if source is not None and source.lag_ms is not None and lag_ms is not None:
        end_to_end = max(lag_ms, source.lag_ms)
    if source is None or freshness_minutes is None:
        return fresh, end_to_end
    if not source.running:
        return False, end_to_end
    if source.lag_ms is not None and source.lag_ms > freshness_minutes * 60_000:
        return False, end_to_end
    return fresh, end_to_end


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
