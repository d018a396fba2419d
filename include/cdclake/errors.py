"""The project's one error hierarchy.

Every error raised for a data, configuration or state problem derives from :class:`CdcLakeError`;
its message names where the problem is (topic, partition, offset, table, DDL, position) and what
to do about it. ``docs/errors.md`` ("Errors and what to do") has one entry per class.

Some classes also derive from the built-in exception a caller would expect (``ValueError`` for
bad input, ``LookupError`` for something missing), so that generic handlers keep working.

This module imports nothing of the project: it is the bottom layer.
"""

from __future__ import annotations

from typing import Protocol


class CdcLakeError(Exception):
    """Base of every error this project raises on purpose."""


class ConfigError(CdcLakeError, ValueError):
    """The table config or the settings are missing, malformed, or name an unknown key; or a
    table cannot run as configured. The message names the file or variable and the key."""


class TriggerParamError(CdcLakeError, ValueError):
    """A Param of a DAG run's trigger form does not fit the table: a replay start the form could
    not check (a partition the topic does not have, an offset outside the topic's watermarks, a
    time whose records retention deleted, a time still to come, both replay starts) or a recovery
    switch without what it needs. The message is one line naming the Param and the values it
    allows. A user-input error: the task fails at once and is not retried."""


class _KafkaWhere(Protocol):
    """Anything naming a Kafka record: :class:`cdclake.model.envelope.KafkaCoordinates`."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int | None: ...

    @property
    def offset(self) -> int | None: ...


class BadRecordError(CdcLakeError):
    """A Kafka record that cannot be applied (not JSON, no op, no position, a value that does not
    fit). The message names topic, partition and offset."""

    def __init__(self, where: _KafkaWhere, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"bad record at {where}: {reason}")


class BadBatchError(CdcLakeError):
    """A batch holds records that cannot be applied (``bad_records: fail``); nothing was committed
    and the committed offsets did not move.

    ``records`` lists ``(topic, partition, offset, reason)`` for the first bad records found.
    """

    def __init__(self, records: list[tuple[str, int, int, str]], total: int) -> None:
        self.records = records
        self.total = total
        lines = "\n".join(f"  topic {t!r} partition {p} offset {o}: {r}" for t, p, o, r in records)
        more = f"\n  ... and {total - len(records)} more" if total > len(records) else ""
        super().__init__(
            f"{total} record(s) cannot be applied; nothing was committed and the committed "
            f"offsets did not move:\n{lines}{more}\nFix the producer or set `bad_records: "
            "quarantine` to set them aside, then re-run."
        )


class QuarantinedBatchError(CdcLakeError):
    """Every record of a run's batch was quarantined (bad, or held back behind a bad record of
    its key): the run applied nothing (``bad_records: quarantine``). The quarantine was written
    and the committed offsets moved past the records, so later records flow; the run fails so
    that it is seen, and is not retried (a retry would find nothing left to do). The message
    names the topic, the partitions and offset ranges, the count, the first record's error, and
    how to list and release the quarantine."""


class QuarantineToleranceError(CdcLakeError):
    """A run newly quarantined more bad records than its table's ``bad_records_tolerance``
    (default 0: any). The run committed its good records, the quarantine and its offsets, so
    nothing is lost and nothing is applied twice; it fails after its commit so that Airflow's
    failure alerting fires, and is not retried. A later try of the same run (a cleared task) finds
    the run committed and succeeds. The message names the table, the offset ranges, the counts
    and, once per cause (schema id, column, the error without its variable parts), how many
    records it hit and the remedy (:mod:`cdclake.model.bad_records`)."""


class OffsetsOutOfRangeError(CdcLakeError):
    """The committed offsets are outside the topic's watermarks: below the low watermark, events
    were deleted by retention before they were applied (remedy: a re-snapshot through the
    bootstrap DAG); above the high watermark, the topic was recreated."""


class CommittedStateLostError(CdcLakeError):
    """The table holds rows but no snapshot of its ancestry records committed offsets (snapshots
    expired by another engine or a managed catalog, ``CREATE OR REPLACE TABLE``): planning from the
    low watermarks would drop every floor, identity and high position in silence. Names the table
    and the remedies."""


class TransactionTooLargeError(CdcLakeError):
    """A source transaction needs a run of more records than the table's ``max_transaction_events``
    to be applied whole (``transactions: whole``). Nothing was applied; names the transaction and
    what the operator can do."""


class TopicNotFoundError(CdcLakeError, LookupError):
    """A Kafka topic the table needs does not exist (names the topic and the brokers)."""


class ConcurrentRunError(CdcLakeError):
    """The table's committed offsets are not the ones this run started from: another run
    committed in between. The run commits nothing; the next run plans from the table."""


class ReplanLimitError(CdcLakeError):
    """A run changed its range (extended to a whole source transaction, read further to its
    group's target, cut before an incompatible type change) more times than it may without
    applying it: a defect of cdclake, not of the data. Nothing was committed."""


class SchemaError(CdcLakeError):
    """The events' schema cannot be mapped to, or does not fit, the Iceberg table."""


class SchemaChangeError(SchemaError):
    """A source schema change schema sync will not apply (incompatible type change under
    ``incompatible: fail``, table renamed or dropped, DDL it cannot read). Nothing was committed;
    the message names the DDL, its position and the column."""


class FormatVersionError(CdcLakeError, ValueError):
    """A table cannot have the Iceberg format version asked for: a downgrade (Iceberg allows none),
    a version the catalog cannot hold for cdclake (v3 outside the REST catalog), or a table to
    upgrade that does not exist. Nothing was committed; the message names the table, both versions
    and what to do (docs/operations.md, "Upgrading a table to format v3")."""


class DdlParseError(CdcLakeError, ValueError):
    """A DDL statement sqlglot cannot read (names the statement)."""


class PositionOrderError(CdcLakeError):
    """Positions of a batch are not comparable (binlog basename or source server changed)."""


class SnapshotError(CdcLakeError):
    """A snapshot signal failed or was refused; the message names the table and the reason."""


class ReconcileError(CdcLakeError):
    """Reconcile cannot reach a verdict: the table is missing, the connector does not stream, or
    the lake does not catch up with the source (docs/operations.md, "Reconcile and repair")."""


class CatchUpTimeoutError(ReconcileError):
    """The table's DAG runs did not commit up to the source's position within the reconcile run's
    catch-up timeout (Param ``catch_up_timeout_minutes``). Not retried: a retry would wait as long
    again while the table is behind, and hold a task slot and the run (docs/operations.md,
    "Reconcile and repair")."""


class DriftError(CdcLakeError):
    """Reconcile found keys where the Iceberg table differs from its source table."""


class EngineUnavailableError(CdcLakeError, ConnectionError):
    """The Spark Connect server of the ``connect`` engine does not accept connections (it is not
    started, or restarting). Nothing was applied; the task's retry runs the same plan. The
    message names the server (never its token) and the Airflow connection."""


class UnknownSchemaIdError(CdcLakeError, LookupError):
    """The schema registry has no schema of an id a record names (HTTP 404, error code 40403):
    the record was written against another registry, or its schema was deleted. ``schema_id``
    is the id; the message names the registry (never its credentials).

    Args:
        registry: the registry as messages name it, ``schema registry <URL> (<its config's origin>)``.
    """

    def __init__(self, schema_id: int, registry: str) -> None:
        self.schema_id = schema_id
        super().__init__(
            f"{registry} has no schema of id {schema_id}: the record was written against another registry, "
            "or its schema was deleted"
        )


class SchemaRegistryUnavailableError(CdcLakeError, ConnectionError):
    """The schema registry does not answer, answers with a server error (5xx), or refuses the
    credentials (401, 403). Nothing was applied; the task's retry tries again. The message names
    the registry and its Airflow connection or environment variable, never the credentials."""


class MultiTableCommitError(CdcLakeError):
    """A commit of several tables in one catalog commit (a group's tag,
    :mod:`cdclake.io.multi_commit`) was refused: a table changed since it was read (its ref
    moved, or its metadata pointer), or the catalog failed mid-request. Nothing moved, except where
    the message says the outcome is unknown; the next publish reads the tables again."""


class ChangeFeedGapError(CdcLakeError, LookupError):
    """A reader of a table's change feed cannot read on without missing or repeating changes: the
    last table snapshot it processed is no longer in the table's history (``expire_snapshots``
    expired it, or the table was rolled back or re-created), so the runs committed since cannot be
    told apart; or a run's change rows are fewer than its commit recorded (``expire_changes``
    deleted them before the reader came). The message names the table or topic, the snapshot or
    run, and the remedy (docs/guide.md, "Reading the change feed")."""


class SharedTablesError(CdcLakeError):
    """Tables of a shared DAG's task (:mod:`cdclake.model.shared`) failed; the task applied its other
    tables, each with its own commit, and fails so that Airflow's retry runs it again (a table that
    committed is found committed and only published). The message names each failed table and its
    error; each table's record of failed tries has its own.

    Attributes:
        errors: ``{table name: the error its run raised}``.
    """

    def __init__(self, errors: dict[str, BaseException]) -> None:
        self.errors = errors
        lines = "; ".join(
            f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}" for name, e in errors.items()
        )
        super().__init__(f"{len(errors)} table(s) of the task failed (the others were applied): {lines}")


class FreshnessError(CdcLakeError):
    """A table is behind its freshness target (``freshness_minutes``): events are waiting and the
    newest applied one is older than the target. The message names the table, its lag in events
    and in time, and its last commit."""


RACE_EXCEPTIONS = ("CommitFailedException", "ValidationException")
"""The Iceberg exceptions (Java class and pyiceberg class names) of a lost optimistic commit:
``CommitFailedException`` ("Table metadata refresh is required", "Table has been updated by another
process", a failed requirement such as a branch created concurrently, Iceberg's commit retries run
out) and ``ValidationException`` (a concurrent commit conflicts with a rewrite)."""

NOT_AN_ANCESTOR = "is not an ancestor of"
"""How the ``fast_forward`` procedure refuses a branch when ``main`` moved since the branch's base."""


def lost_commit_race(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from or while handling, is Iceberg's refusal of
    a commit because another commit moved the table (:data:`RACE_EXCEPTIONS`, the fast-forward's
    :data:`NOT_AN_ANCESTOR`), however it is wrapped: Spark (``Py4JJavaError``, a captured
    exception) or Spark Connect (``SparkConnectGrpcException``) naming the Java class in the message
    or the JVM stack trace, or pyiceberg's own class. ``CommitStateUnknownException`` never is: such
    a commit may have landed."""
    seen: set[int] = set()
    err: BaseException | None = error
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        names = [cls.__name__ for cls in type(err).__mro__]
        text = " ".join([str(err), str(getattr(err, "_stackTrace", "") or "")])
        if "CommitStateUnknownException" in names or "CommitStateUnknownException" in text:
            return False
        if any(m in names or m in text for m in RACE_EXCEPTIONS) or NOT_AN_ANCESTOR in text:
            return True
        err = err.__cause__ or err.__context__
    return False
