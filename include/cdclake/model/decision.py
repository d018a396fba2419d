"""The decisions one apply run makes (pure: no Spark, no Kafka, no catalog).

An apply run is ``read -> parse -> stats -> decide -> write -> commit`` (:mod:`cdclake.spark.apply`).
This module is the *decide*: given the table's :class:`~cdclake.model.run_state.CommittedState`, the
:class:`~cdclake.model.run_state.BatchStats` of the batch and the :class:`~cdclake.model.plan.RunPlan`,
:func:`decide` returns the :class:`RunDecision`: which floors discard which events, whether the
source identity still holds, the highest position, the full snapshot's progress or completion
(:mod:`cdclake.model.convergence`), the column defaults to fill in, and the snapshot summary of the
commit.

The few facts a decision needs from Kafka or the catalog (watermarks, offsets for a time, open
quarantine records, where a changed identity starts) are asked through :class:`RunLookups`, and only
when the batch makes the question arise.

Rules: ``docs/architecture.md``, "The apply contract".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from cdclake.errors import ConcurrentRunError, PositionOrderError, QuarantinedBatchError, SchemaError
from cdclake.model.config import TableConfig
from cdclake.model.convergence import (
    BatchSnapshot,
    Continuation,
    IdentitySpan,
    SnapshotProgress,
    SourceIdentity,
    advance_snapshot,
    continue_history,
    identity_changes,
    merge_identities,
    pending_partitions,
    progress_after_completion,
)
from cdclake.model.layout import COLUMN_DEFAULTS_PROPERTY, QUARANTINE_SUFFIX, SummaryKeys, side_table
from cdclake.model.offsets import Offsets, decode_offsets, encode_offsets
from cdclake.model.outcome import ApplyResult
from cdclake.model.plan import RunPlan
from cdclake.model.position import SOURCE_ORDERINGS, BinlogPosition
from cdclake.model.run_state import BatchStats, ColumnDefault, CommittedState, QuarantinedRecord, run_commit_of

log = logging.getLogger(__name__)


class RunLookups(Protocol):
    """The facts a decision may need from outside (Kafka, the catalog, Spark), asked lazily."""

    def first_offsets_outside(self, known: SourceIdentity) -> Mapping[int, int]:
        """Per partition, the first offset of a batch event whose identity differs from ``known``."""
        ...

    def identity_spans(self) -> Sequence[IdentitySpan]:
        """The batch's applied events per source identity, with their lowest and greatest position."""
        ...

    def high_watermarks(self) -> Offsets:
        """The table's topic's high watermarks now."""
        ...

    def offsets_after(self, timestamp_ms: int) -> Mapping[int, int]:
        """Per partition, the first offset stamped at or after ``timestamp_ms`` (the high
        watermark where none is)."""
        ...

    def open_quarantine(self) -> int:
        """Records of the table open in the quarantine."""
        ...

    def now_ms(self) -> int:
        """The time now (epoch ms)."""
        ...


@dataclass(frozen=True)
class Convergence:
    """The full-snapshot rule's outcome for one batch (:mod:`cdclake.model.convergence`).

    Attributes:
        snapshot_floor: events below it are discarded (the newest complete full snapshot).
        completed: the position of the snapshot this commit completes (rows and tombstones below
            it are deleted), else ``None``.
        progress: the snapshot still in progress after this commit.
    """

    snapshot_floor: BinlogPosition | None
    completed: BinlogPosition | None = None
    progress: SnapshotProgress | None = None


@dataclass(frozen=True)
class RunDecision:
    """What one run writes, decided before anything is written.

    Attributes:
        state: the state the commit records (its ``snapshot_id`` is the run's base snapshot).
        truncate: the batch's newest truncate, whose rows below it the merge deletes.
        completed: the full snapshot this commit completes (rows below it that the batch does not
            rewrite are deleted, and tombstones below it dropped), else ``None``.
        backfill: columns whose default is filled, in this commit, into the rows below the ALTER.
        summary: the commit's snapshot-summary properties, but for
            :attr:`~cdclake.model.layout.SummaryKeys.SNAPSHOT_COMPLETED` (it counts rows the write
            deletes).
    """

    state: CommittedState
    truncate: BinlogPosition | None
    completed: BinlogPosition | None
    backfill: Mapping[str, ColumnDefault]
    summary: Mapping[str, str]


def check_start(state: CommittedState | None, plan: RunPlan, *, run_committed: bool = False) -> bool:
    """Whether the run applies its range (``docs/architecture.md``, "Start check").

    A forward run applies when, in every partition the table committed, the committed offset is
    the range's start. A partition without a committed offset (the topic gained partitions since
    the table's last commit, a routine Kafka operation) starts where the planner put it, at its
    low watermark (:func:`cdclake.model.offsets.plan_range`). A table that never committed applies
    any range. A manual replay starts wherever the operator said, once per run: a replay whose run
    id has a commit in the table's history is an Airflow retry after that commit.

    Args:
        state: the table's committed state when the run started (``None``: no table yet).
        plan: the run's plan.
        run_committed: the table's history holds a commit of ``plan.run_id``
            (:func:`cdclake.io.refs.run_commit`): a replay, or a forward run whose range may be
            cut to whole transactions (``plan.transactions``), applied it already; other forward
            runs' offsets say whether their range is applied.

    Returns:
        ``True`` to apply; ``False`` when the range is applied already (an Airflow retry after the
        commit: the table is at the range's end, or the replay's run committed).

    Raises:
        ConcurrentRunError: a forward run whose range neither starts nor ends at the committed
            offsets (another run committed in between).
    """
    if plan.replay:
        return not run_committed
    if state is None or state.offsets is None:
        return True
    if all(plan.range.start.get(p) == o for p, o in state.offsets.items()):
        return True
    # a range cut to whole transactions ends where the run's commit says, not at the plan's end
    if state.offsets == plan.range.end or run_committed:
        return False
    raise ConcurrentRunError(
        f"table {plan.table.identifier}: committed offsets {encode_offsets(state.offsets)} are not "
        f"this run's start {encode_offsets(plan.range.start)}; another run committed "
        "in between. Nothing was committed; the next run plans from the table's offsets."
    )


def applied_already(
    state: CommittedState, plan: RunPlan, history: Sequence[tuple[int, int, Mapping[str, str] | None]]
) -> ApplyResult | None:
    """The start check (:func:`check_start`) on a table read at the start of a try: ``None`` to
    apply the plan's range, or the result to return when it is applied already (with the figures of
    this run's commit when it made it: a retry publishes them).

    Args:
        state: the table's committed state (:func:`~cdclake.model.run_state.committed_state_of`).
        history: the table's ancestry, newest first (:func:`~cdclake.model.run_state.run_commit_of`).

    Raises:
        ConcurrentRunError: another run committed since this one was planned.
    """
    topic = plan.table.topic
    # a replay, or a range cut to whole transactions, is found applied by its run's commit
    own = run_commit_of(history, topic, plan.run_id) if plan.replay or plan.transactions is not None else None
    if check_start(state, plan, run_committed=own is not None):
        return None
    own = own or run_commit_of(history, topic, plan.run_id)
    log.info(
        "table %s: the range is applied already (%s): nothing to do (a retry after the commit?)",
        plan.table.identifier,
        f"by this run, snapshot {own[0]}" if own is not None else "by another run",
    )
    return ApplyResult.of_commit("already_applied", *own) if own is not None else ApplyResult("already_applied")


def check_columns(stats: BatchStats, cfg: TableConfig, *, from_events: bool = False) -> None:
    """Stop when an event's row image has a column the Iceberg table lacks: parsing would drop the
    column silently. With a schema-change topic, its schema change was not synced; for a table that
    evolves from its events (``from_events``: docs/operations.md, "Schema evolution from the
    events"), the event's payload has a column its own row schema does not list.

    Raises:
        SchemaError: names the topic, partition, offset and column of the first such event, what
            is wrong and the remedy.
    """
    first = stats.unknown_column
    if first is None:
        return
    where = (
        f"topic {cfg.topic!r} partition {first.partition} offset {first.offset}: the event has "
        f"column {first.column!r}, which Iceberg table {cfg.identifier} lacks"
    )
    if from_events:
        cause = (
            "; the table evolves from its events' row schemas, and this event's payload has the column but its "
            "own row schema does not list it (Kafka Connect's JsonConverter lists every field: another producer "
            "wrote the event). Correct the producer, or declare the column in the table config's columns: the "
            "next run adds it"
        )
    else:
        cause = (
            f" (its schema change was not applied; schema-change topic {cfg.schema_change_topic!r}). Check that "
            "the connector writes its schema changes there (include.schema.changes=true, schema_changes.topic)"
        )
    raise SchemaError(
        f"{where}{cause}. Nothing was committed and the offsets did not move; the column is never dropped silently."
    )


def nothing_applied_error(plan: RunPlan, stats: BatchStats, first: QuarantinedRecord) -> QuarantinedBatchError:
    """The error of a run whose batch had records and applied none of them
    (:attr:`BatchStats.nothing_applied <cdclake.model.run_state.BatchStats.nothing_applied>`),
    raised after the quarantine was written and the offsets committed.

    Args:
        plan: the run's plan (topic, partitions and offset ranges, table name).
        stats: the batch's statistics (the counts).
        first: the batch's first quarantined record (lowest partition, then offset).
    """
    cfg = plan.table
    ranges = ", ".join(
        f"partition {p} offsets [{plan.range.start[p]}, {end})"
        for p, end in sorted(plan.range.end.items())
        if end > plan.range.start[p]
    )
    return QuarantinedBatchError(
        f"topic {cfg.topic!r} ({ranges}): all {stats.quarantined} record(s) of this run were quarantined "
        f"({stats.bad} bad, {stats.held} held back behind a quarantined record of their key), none applied to "
        f"Iceberg table {cfg.identifier}; the first: partition {first.partition} offset {first.offset}: "
        f"{first.reason}\n" + _quarantine_remedy(cfg)
    )


def applied_nothing_before(
    cfg: TableConfig, run_id: str, snapshot_id: int, summary: Mapping[str, str]
) -> QuarantinedBatchError:
    """The error of a retry that finds its run's commit applied nothing (its try that committed
    failed with :func:`nothing_applied_error`; with the ``submit`` engine Airflow retries the Spark
    job, which then finds its range applied): the run fails again rather than succeed silently.

    Args:
        cfg: the table.
        run_id: the run.
        snapshot_id: the run's commit.
        summary: its snapshot summary (:func:`~cdclake.io.refs.run_commit`); named: its offset
            ranges (``cdc.kafka.start-offsets`` to ``cdc.kafka.end-offsets``, the partitions it
            read) and the records it quarantined (``cdc.records-quarantined``).
    """
    start = decode_offsets(summary[SummaryKeys.START_OFFSETS])
    ranges = ", ".join(
        f"partition {p} offsets [{start[p]}, {end})"
        for p, end in sorted(decode_offsets(summary[SummaryKeys.END_OFFSETS]).items())
        if end > start[p]
    )
    return QuarantinedBatchError(
        f"topic {cfg.topic!r} ({ranges}): all {summary[SummaryKeys.QUARANTINED]} record(s) of run "
        f"{run_id!r} were quarantined, none applied to Iceberg table {cfg.identifier} (snapshot {snapshot_id}); "
        "the log of the try that committed names the first\n" + _quarantine_remedy(cfg)
    )


def _quarantine_remedy(cfg: TableConfig) -> str:
    """What a run that applied nothing did, and what the operator does about its records."""
    return (
        "The quarantine holds them and the committed offsets moved past them, so the next run applies the "
        "records that follow; this run fails so that it is seen, and is not retried. List them with "
        f"`cdclake quarantine list {cfg.name}` (or read {side_table(cfg.identifier, QUARANTINE_SUFFIX)} WHERE "
        "status = 'open'); fix the producer, then release a bad record with `cdclake quarantine release "
        f'{cfg.name} --partition P --offset O` and replay from it (docs/operations.md, "Quarantine: list, '
        'release, replay").'
    )


def starting_state(committed: CommittedState, plan: RunPlan) -> CommittedState:
    """The state the run's decisions start from: the committed one, or, for a run that accepts a
    new binlog history, :meth:`CommittedState.accepting_new_history`."""
    return committed.accepting_new_history() if plan.accept_source_change else committed


def column_defaults(properties: Mapping[str, str], columns: Iterable[str], plan: RunPlan) -> dict[str, ColumnDefault]:
    """``{column: ColumnDefault}`` of the table's columns added with a default the lake knows exactly
    (table property ``cdc.column-defaults``, written by schema sync); none for a run that accepts a
    new binlog history (their ALTER positions belong to the old history)."""
    if plan.accept_source_change:
        return {}
    entries = json.loads(properties.get(COLUMN_DEFAULTS_PROPERTY, "{}"))
    names = set(columns)
    return {
        c: ColumnDefault(BinlogPosition.from_text(e["position"]), e["sql"])
        for c, e in entries.items()
        if e.get("sql") and e.get("exact") and c in names
    }


def decide(
    committed: CommittedState,
    stats: BatchStats,
    plan: RunPlan,
    *,
    defaults: Mapping[str, ColumnDefault],
    snapshots: Sequence[BatchSnapshot],
    lookups: RunLookups,
) -> RunDecision:
    """Decide everything one run writes (see the module docstring).

    Args:
        committed: the table's committed state, read when the run started.
        stats: the batch's statistics.
        plan: the run plan.
        defaults: :func:`column_defaults`.
        snapshots: the batch's full-snapshot records, one group per snapshot position (upsert
            tables; empty when ``stats.full_snapshot_reads`` is 0).
        lookups: where the outside facts come from.

    Raises:
        PositionOrderError: the events come from another binlog history than the table's; a GTID
            table meets an event without a MariaDB GTID; a forward run meets a full snapshot below
            the table's highest applied position.
    """
    cfg = plan.table
    state = starting_state(committed, plan)
    source = _identity_after(state, stats, plan, lookups)
    floors = [p for p in (state.truncate_floor, stats.truncate) if p is not None]
    floor = max(floors) if floors else None
    if cfg.write_mode == "upsert" and cfg.ordering in SOURCE_ORDERINGS:
        conv = converge(state, snapshots, plan, lookups)
    else:  # append-only, or no position to place a snapshot by (ordering kafka): no snapshot converges
        conv = Convergence(state.snapshot_floor)
    high = _high_after(state, stats, cfg.ordering)
    backfill = {
        c: d for c, d in defaults.items() if state.defaults_position is None or d.position > state.defaults_position
    }
    done = [p for p in [state.defaults_position, *(d.position for d in backfill.values())] if p is not None]
    most = dict(committed.max_offsets or {})
    for p, o in plan.range.end.items():
        most[p] = max(o, most.get(p, 0))
    after = CommittedState(
        snapshot_id=state.snapshot_id,
        offsets=plan.range.end,
        truncate_floor=floor,
        snapshot_floor=conv.snapshot_floor,
        snapshot=conv.progress,
        identity=source.identity,
        high_position=high[0] if high is not None else None,
        defaults_position=max(done) if done else None,
        max_offsets=most,
        high_position_ts=high[1] if high is not None else None,
    )
    summary = {**_run_summary(plan, stats), **after.to_summary()}
    if source.since is not None:
        summary[SummaryKeys.SOURCE_IDENTITY_CONTINUED] = json.dumps(
            {
                "from": state.identity.to_json() if state.identity else None,
                "to": after.identity.to_json() if after.identity else None,
                "since": source.since.to_text(),
            }
        )
    if plan.accept_source_change:
        summary[SummaryKeys.SOURCE_CHANGE_ACCEPTED] = json.dumps(
            {
                "identity": committed.identity.to_json() if committed.identity else None,
                "high_position": committed.high_position.to_text() if committed.high_position else None,
            }
        )
    return RunDecision(after, stats.truncate, conv.completed, backfill, summary)


def _run_summary(plan: RunPlan, stats: BatchStats) -> dict[str, str]:
    """The summary properties that describe the run itself (not carried forward)."""
    ops = dict(stats.ops)
    out = {
        SummaryKeys.TOPIC: plan.table.topic,
        **({SummaryKeys.TOPIC_ID: plan.topic_id} if plan.topic_id else {}),
        SummaryKeys.START_OFFSETS: encode_offsets(plan.range.start),
        SummaryKeys.RUN_ID: plan.run_id,
        SummaryKeys.EVENTS: str(stats.events),
        SummaryKeys.TOMBSTONES: str(stats.tombstones),
        SummaryKeys.UPSERTS: str(sum(v for k, v in ops.items() if k in ("c", "u", "r"))),
        SummaryKeys.DELETES: str(ops.get("d", 0)),
        SummaryKeys.OPS: json.dumps(ops, sort_keys=True),
        SummaryKeys.QUARANTINED: str(stats.quarantined),
    }
    if stats.last_source_ts_ms is not None:
        out[SummaryKeys.LAST_SOURCE_TIMESTAMP] = str(stats.last_source_ts_ms)
    if plan.replay:
        out[SummaryKeys.REPLAY] = "true"
    if stats.first is not None and stats.last is not None:
        out[SummaryKeys.FIRST_POSITION] = stats.first.to_event_text()
        out[SummaryKeys.LAST_POSITION] = stats.last.to_event_text()
    if stats.connector_contradictions:
        out[SummaryKeys.CONNECTOR_CONTRADICTIONS] = json.dumps(list(stats.connector_contradictions))
    return out


def _high_after(state: CommittedState, stats: BatchStats, ordering: str) -> tuple[BinlogPosition, int] | None:
    """The greatest position applied after this batch, with the Kafka timestamp of its record.

    Without source positions (``ordering: kafka``) every position is equal and the batch's latest
    record is the newest: its timestamp replaces the stored one (the freshness lag reads it)."""
    known = (state.high_position, state.high_position_ts or 0) if state.high_position is not None else None
    if stats.high is None:
        return known
    batch = (stats.high, stats.high_timestamp_ms or 0)
    if known is None or batch[0] > known[0] or (ordering not in SOURCE_ORDERINGS and batch[1] > known[1]):
        return batch
    return known


def accept_remedy(plan: RunPlan, first: Mapping[int, int]) -> str:
    """The operator's way out of a binlog-history change (docs/operations.md, "A new binlog history"):
    a replay from ``first`` (per partition, the first record of the new history; the range's end
    elsewhere) that accepts the new history."""
    offsets = {str(p): o for p, o in sorted({**plan.range.end, **first}.items())}
    return (
        "To go on with the new history, trigger this table's DAG with "
        f'{{"accept_source_change": true, "replay_from_offsets": {json.dumps(offsets)}}} (the first record '
        "of the new history in each partition; the old history's rows stay readable until a full snapshot "
        "of the new history completes), then, unless the connector took a new snapshot itself, re-snapshot "
        "the table with the cdc_snapshot_bootstrap DAG (snapshot_type blocking)."
    )


def _identity_after(state: CommittedState, stats: BatchStats, plan: RunPlan, lookups: RunLookups) -> Continuation:
    """The table's source identity after this batch; positions of different binlog histories are
    not comparable. A forward run whose events change server id or GTID source in the same binlog
    goes on with the new identity (:func:`~cdclake.model.convergence.continue_history`: a failover
    upstream of the replica Debezium reads), with a warning.

    Raises:
        PositionOrderError: under GTID ordering, a change event without a MariaDB GTID; events from
            another binlog history than the table's: names what changed, why the positions are not
            comparable, where the first such record of each partition is, and the remedy.
    """
    cfg = plan.table
    missing = stats.gtid_missing
    if cfg.ordering == "gtid" and missing is not None:
        raise PositionOrderError(
            f"topic {cfg.topic!r} partition {missing.partition} offset {missing.offset}: the table is ordered "
            f"by GTID (ordering: gtid), but this op {missing.op!r} event's source.gtid is {missing.gtid!r}, not a "
            "MariaDB GTID <domain>-<server>-<sequence>. GTID ordering needs a MariaDB source with GTIDs (MySQL "
            "GTIDs have no order across servers); set ordering: binlog for this source. Nothing was committed."
        )
    changes = identity_changes(state.identity, stats.identities)
    if not changes:
        return Continuation(merge_identities(state.identity, stats.identities))
    if plan.replay:
        why = "a replay does not continue the table's offsets"
    elif cfg.ordering == "gtid":
        why = "the GTID sequences of different domains have no order"
    else:
        source = continue_history(state.identity, state.high_position, lookups.identity_spans())
        if source.identity is not None:
            if source.note is not None:
                log.warning("table %s: %s: going on with the new identity", cfg.identifier, source.note)
            return source
        why = source.note or ""
    known = state.identity
    first = lookups.first_offsets_outside(known) if known is not None else {}
    raise PositionOrderError(
        f"topic {cfg.topic!r}: the events come from another binlog history than the table's "
        f"({'; '.join(changes)}; {why}): a failover to another server, or a new binlog. Positions of "
        "different binlog histories are not comparable, so nothing was committed. " + accept_remedy(plan, first)
    )


def converge(
    state: CommittedState, snapshots: Sequence[BatchSnapshot], plan: RunPlan, lookups: RunLookups
) -> Convergence:
    """Apply the full-snapshot rule to this batch (:mod:`cdclake.model.convergence`): fold the batch's
    full-snapshot records into the snapshot in progress, and complete the newest snapshot whose end
    record is applied and whose partitions are done (:func:`~cdclake.model.convergence.pending_partitions`),
    unless records of the table are open in the quarantine.

    Raises:
        PositionOrderError: a forward run meets a full snapshot below the table's highest applied
            position: the source's binlog positions started over (``RESET MASTER``, another server).
    """
    cfg = plan.table
    if not plan.replay and state.high_position is not None:
        _check_snapshots_above_high(state, snapshots, plan)
    step = advance_snapshot(state.snapshot, snapshots, state.snapshot_floor)
    for note in step.notes:
        log.info("table %s: %s", cfg.identifier, note)
    progress = step.progress
    if not cfg.authoritative_snapshots:
        for older in step.ended:
            log.info(
                "table %s: %s ended; authoritative_snapshots is false: it deletes no row it did not read",
                cfg.identifier,
                older.describe(),
            )
        if progress is not None and progress.end is not None:
            log.info(
                "table %s: %s ended; authoritative_snapshots is false: it deletes no row it did not read",
                cfg.identifier,
                progress.describe(),
            )
            progress = None
        elif progress is not None:
            progress = replace(progress, ended=())
        return Convergence(state.snapshot_floor, None, progress)
    candidates = [p for p in (*step.ended, progress) if p is not None and p.end is not None]
    if not candidates:
        if progress is not None:
            log.info("table %s: %s in progress", cfg.identifier, progress.describe())
        return Convergence(state.snapshot_floor, None, progress)
    now_ms = lookups.now_ms()
    high = lookups.high_watermarks()
    open_quarantine: int | None = None
    for candidate in reversed(candidates):  # the newest complete one wins
        end = candidate.end
        assert end is not None
        after = lookups.offsets_after(end.timestamp_ms + 1)
        first_after = {p: (o if o < high.get(p, 0) else None) for p, o in after.items()}
        pending = pending_partitions(end, plan.range.end, first_after, high, now_ms)
        if pending:
            log.info(
                "table %s: %s: its end record is applied; waiting for partition(s) %s, which may still hold "
                "records Debezium sent before it (complete once a later record of theirs is applied, or "
                "once they were read to their end a minute after it)",
                cfg.identifier,
                candidate.describe(),
                pending,
            )
            continue
        open_quarantine = lookups.open_quarantine() if open_quarantine is None else open_quarantine
        if open_quarantine:
            log.warning(
                "table %s: %s is complete, but %d record(s) of the table are open in the quarantine: rows "
                "are deleted by it only once they are released",
                cfg.identifier,
                candidate.describe(),
                open_quarantine,
            )
            break
        log.info(
            "table %s: %s COMPLETE: rows and tombstones below %s that it did not read are deleted in this commit",
            cfg.identifier,
            candidate.describe(),
            candidate.position.to_event_text(),
        )
        return Convergence(
            candidate.position, candidate.position, progress_after_completion(progress, candidate.position)
        )
    return Convergence(state.snapshot_floor, None, progress)


def _check_snapshots_above_high(state: CommittedState, snapshots: Sequence[BatchSnapshot], plan: RunPlan) -> None:
    """A full snapshot first produced after the table's highest position was applied, at a lower
    position, not the one in progress and above the snapshot floor, means the positions started over.

    Raises:
        PositionOrderError: names the snapshot's position, where its first records are, and the remedy.
    """
    high = state.high_position
    assert high is not None
    in_progress = state.snapshot.position if state.snapshot else None
    for g in snapshots:
        above_floor = state.snapshot_floor is None or g.position > state.snapshot_floor
        produced_after_high = g.first_timestamp_ms > (state.high_position_ts or 0)
        if g.unseen and produced_after_high and above_floor and g.position != in_progress and g.position < high:
            raise PositionOrderError(
                f"topic {plan.table.topic!r}: a full snapshot at binlog position {g.position.to_event_text()} "
                f"(partition/offset of its first records: {dict(sorted(g.first_offsets.items()))}) is below "
                f"the table's highest applied position {high.to_event_text()}: the source's "
                "binlog positions started over (RESET MASTER, or another server). Nothing was committed. "
                + accept_remedy(plan, dict(g.first_offsets))
            )
