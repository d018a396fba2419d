"""The layout of a CDC table and of the state kept with it (pure: no pyiceberg, no Spark).

State (``docs/state.md``, "Where state lives"): the consumed Kafka offsets and the run's
provenance are properties of the snapshot summary of the data commit (keys in
:class:`SummaryKeys`), so they are committed atomically with the rows. The committed offsets of a
table are those of the newest snapshot in the current snapshot's ancestry that carries them
(maintenance snapshots carry none): :func:`cdclake.model.run_state.committed_state_of`, which
decodes and encodes that state.

Every CDC table holds the source columns followed by the metadata columns of
:data:`METADATA_COLUMNS`, which record the event that wrote the row. Two side tables sit beside
it: delete tombstones (:data:`TOMBSTONE_COLUMNS`) and the quarantine (:data:`QUARANTINE_COLUMNS`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from types import MappingProxyType

from cdclake.model.format_version import DEFAULT_FORMAT_VERSION, FORMAT_VERSION_PROPERTY, SIDE_TABLE_FORMAT_VERSION


class SummaryKeys:
    """Snapshot-summary properties written by every data commit of the apply job."""

    TOPIC = "cdc.kafka.topic"
    START_OFFSETS = "cdc.kafka.start-offsets"
    """JSON ``{"<partition>": <offset>}``: where the run started (previous end offsets)."""
    END_OFFSETS = "cdc.kafka.end-offsets"
    """JSON ``{"<partition>": <offset>}``: next offset to read per partition after this commit."""
    TOPIC_ID = "cdc.kafka.topic-id"
    """Kafka's id of the topic the offsets are of (KIP-516), when the broker gives one: a topic
    deleted and created again under its name has another."""
    RUN_ID = "cdc.run-id"
    """Airflow run id (or ``manual__...``) of the run that committed."""
    EVENTS = "cdc.events"
    """Kafka records in the range, tombstones included."""
    TOMBSTONES = "cdc.kafka-tombstones"
    UPSERTS = "cdc.rows-upserted"
    DELETES = "cdc.rows-deleted"
    OPS = "cdc.ops"
    """JSON ``{"<op>": <events>}``: the range's applicable events per Debezium op (``c``, ``u``,
    ``d``, ``r``, ``t``), zero counts left out."""
    LAST_SOURCE_TIMESTAMP = "cdc.last-source-ts"
    """Greatest source timestamp (``source.ts_ms``, epoch ms) of the range's applied events; absent
    when none carried one. The time lag of a table is measured from it (``cdclake status``)."""
    FIRST_POSITION = "cdc.first-position"
    LAST_POSITION = "cdc.last-position"
    """Binlog positions ``<file>:<pos>:<row>`` of the oldest and newest event applied."""
    QUARANTINED = "cdc.records-quarantined"
    """Records of the range written to the quarantine table (bad, or held back behind one)."""
    KEYS_CHANGED = "cdc.keys-changed"
    """Rows of the merge source: the batch's keys after reduction to the latest event per key
    (``upsert`` tables; absent on change-log commits)."""
    LAST_TRANSACTION = "cdc.last-transaction"
    """JSON :class:`~cdclake.model.transactions.LastTransaction` (id, position of its last event) of
    the newest whole source transaction the commit applied; absent when it applied none (no
    transaction metadata, snapshot reads only)."""
    TRANSACTION_WAIT = "cdc.transaction-wait"
    """JSON :class:`~cdclake.model.transactions.TransactionWait` (records, transaction id) when the
    run cut its range before a source transaction that was not whole: the records of the planned
    range it left for the next run; absent when it applied the range as planned."""
    WITHOUT_TRANSACTION = "cdc.events-without-transaction"
    """Change events (``c``, ``u``, ``d``) the commit applied without Debezium transaction metadata
    although the table is configured ``transactions: whole`` (no transaction topic, or events
    without a ``transaction`` block): the commit may hold part of a source transaction; absent
    when there were none."""
    TRANSACTION_INTERVAL = "cdc.transaction-interval"
    """JSON :class:`~cdclake.model.groups.SourceInterval` (transaction topic, ``from``, ``to``:
    offsets of ``END`` records in its one partition) of a table in a group: the committed state
    equals the source table at every transaction boundary from ``from`` to ``to``; absent when the
    run cannot tell (not in a group, no whole transaction applied, a batch that is not a prefix of
    the binlog, a transaction topic of several partitions)."""
    TRUNCATE_FLOOR = "cdc.truncate-floor"
    """Position ``<file>:<pos>:<row>:<rank>`` of the newest truncate applied; events below it are
    discarded. Carried forward by every commit."""
    BINLOG_BASENAME = "cdc.binlog-basename"
    """Binlog basename of the applied events (``mysql-bin``); carried forward by every commit.
    Events of another basename (a failover) stop the table."""
    REPLAY = "cdc.replay"
    """``true`` on the commit of a manual replay (start offsets given by the operator)."""
    SNAPSHOT_FLOOR = "cdc.snapshot-floor"
    """Position ``<file>:<pos>:<row>:<rank>`` of the newest complete full snapshot: rows and
    tombstones below it were deleted when it completed, and events below it are discarded
    (:mod:`cdclake.model.convergence`). Carried forward by every commit."""
    SNAPSHOT_IN_PROGRESS = "cdc.snapshot-in-progress"
    """JSON :class:`~cdclake.model.convergence.SnapshotProgress` of a full snapshot whose records
    are being applied, with (``ended``) the older snapshots whose end record is applied but that
    have not completed yet; absent when none. Carried forward by every commit."""
    SNAPSHOT_COMPLETED = "cdc.snapshot-completed"
    """On the commit that completed a full snapshot: its position and the rows it deleted."""
    SOURCE_IDENTITY = "cdc.source-identity"
    """JSON :class:`~cdclake.model.convergence.SourceIdentity` (server id, binlog basename, GTID
    source) of the events applied so far, with (``earlier``) the identities the same binlog carried
    before. Carried forward by every commit."""
    MAX_OFFSETS = "cdc.kafka.max-offsets"
    """JSON ``{"<partition>": <offset>}``: the greatest end offsets ever committed (a replay moves
    the end offsets back, not these). Carried forward."""
    HIGH_POSITION = "cdc.high-position"
    """Greatest position applied so far (``<file>:<pos>:<row>:<rank>``). Carried forward."""
    HIGH_POSITION_TIMESTAMP = "cdc.high-position-timestamp"
    """Kafka timestamp (epoch ms) of the record that carried :attr:`HIGH_POSITION`: a full snapshot
    produced after it at a lower position means the positions started over. Carried forward."""
    SOURCE_IDENTITY_CONTINUED = "cdc.source-identity-continued"
    """On the commit of a forward run whose events changed server id or GTID source within the same
    binlog (a failover upstream of the replica Debezium reads): JSON ``{"from", "to", "since"}``,
    the identities before and after and the lowest position of the new one."""
    SOURCE_CHANGE_ACCEPTED = "cdc.source-change-accepted"
    """On the commit of a run that accepted a new binlog history (``accept_source_change``): the
    identity and position the table held before."""
    DEFAULTS_POSITION = "cdc.defaults-position"
    """Position of the newest ``ADD COLUMN ... DEFAULT`` whose default was filled into the rows
    that existed before it (:mod:`cdclake.model.defaults`). Carried forward."""
    CONNECTOR_CONTRADICTIONS = "cdc.connector-contradictions"
    """On the commit of a run whose events show another Debezium handling mode than the table's
    columns were made for (:mod:`cdclake.model.connector_check`): JSON list of one line per column
    (``column 'price': the events are double (decimal.handling.mode=double) but ...``); absent
    when none. Not carried forward: each run checks its own events."""
    CHANGES_SNAPSHOT = "cdc.changes-snapshot-id"
    """On the commit of a run of a table with a change feed (``change_feed``,
    :mod:`cdclake.model.changes`): the snapshot of ``<table>__changes`` that holds the run's change
    rows, committed just before this commit."""
    CHANGES_ROWS = "cdc.changes-rows"
    """With :attr:`CHANGES_SNAPSHOT`: how many change rows the run wrote (a reader checks it finds
    them all)."""
    HISTORY_SNAPSHOT = "cdc.history-snapshot-id"
    """On the commit of a run of a table with a history (``history``, :mod:`cdclake.model.history`):
    the snapshot of ``<table>__history`` after the run's versions, committed just before this
    commit (absent while the history has no snapshot). A time-travel read of the history at it
    holds the versions up to this commit."""


COLUMN_ENCODINGS_PROPERTY = "cdc.column-encodings"
"""Table property: JSON ``{column: encoding}`` (see :mod:`cdclake.model.types`)."""

SCHEMA_CHANGE_POSITION_PROPERTY = "cdc.schema-change-position"
"""Table property: position ``<file seq>:<pos>:<row>:<rank>`` of the last source schema change
applied by schema sync (:mod:`cdclake.pipeline.schema_sync`), committed with the schema update."""

COMMITTED_PROPERTY = "cdc.committed"
"""Table property: ``true`` once cdclake committed to the table (set after its first CDC commit).
Properties outlive snapshot expiry and ``CREATE OR REPLACE TABLE``: a table that has it, holds rows
and has no snapshot recording offsets lost its CDC commits (:func:`cdclake.model.run_state.lost_commits`);
a table loaded outside cdclake and never applied to has not."""

SCHEMA_GAPS_ACCEPTED_PROPERTY = "cdc.schema-change-gaps-accepted"
"""Table property: the schema-change topic's retention gaps (:func:`cdclake.model.schema_changes.gap_name`,
``<topic>:<partition>:<from>-<to>``, comma-separated) an operator checked for this table and accepted:
schema sync no longer stops the table for them."""

SCHEMA_FROM_EVENTS_PROPERTY = "cdc.schema-from-events"
"""Table property: ``true`` once schema sync has said (a warning, once) that the table's
schema-change topic does not exist and the table evolves from its events' own schemas
(``schema_changes.source``)."""

SCHEMA_INDEX_OFFSETS_KEY = "cdc.indexed-offsets"
"""Snapshot-summary key of the schema-change index table (:mod:`cdclake.pipeline.schema_index`):
JSON ``{"<topic>": {"<partition>": <next offset>}}``, the offsets of every schema-change topic
indexed so far. Every commit of the index writes it whole (the other topics carried forward)."""

ORDERING_PROPERTY = "cdc.ordering"
"""Table property: the event ordering the table's positions are in (``binlog``, ``gtid`` or
``kafka``, :mod:`cdclake.model.position`); set when the table is created, absent on tables created
before GTID ordering existed (``binlog``)."""

COLUMN_DEFAULTS_PROPERTY = "cdc.column-defaults"
"""Table property: JSON ``{column: {"position", "sql", "exact", "reason"}}``: the value the rows
that existed before ``ALTER TABLE ... ADD COLUMN`` (at ``position``) read at the source
(:mod:`cdclake.model.defaults`); written by schema sync with the schema update. The apply job
fills ``sql`` into events below the position and, once, into the table's rows below it."""

RUN_FAILURE_PROPERTY = "cdc.run-failure"
"""Table property: JSON :class:`~cdclake.model.status.RunFailure`, the failed tries of the table's
DAG since its last run that succeeded; written by the DAG's failure and retry callbacks, removed by
its next run that succeeds (``cdclake_airflow.table_failures``); absent while the runs succeed."""

TRANSACTION_WAIT_PROPERTY = "cdc.transaction-wait"
"""Table property: JSON :class:`~cdclake.model.transactions.TransactionWait` (records, transaction
id, the range's start offsets) of the newest run that applied nothing because its range held no
whole source transaction yet; it holds while the table's committed offsets are its ``start``
(a later commit makes it stale; nothing removes it)."""

GROUP_POSITION_PROPERTY = "cdc.group-position"
"""Table property of a table in a group: JSON :class:`~cdclake.model.groups.GroupPosition` (group,
transaction-topic position, snapshot, publish time ms) written with the move of the group's tag
(:func:`group_tag`) in the same catalog commit (:mod:`cdclake.pipeline.groups`)."""

GROUP_TARGET_PROPERTY = "cdc.group-target"
"""Table property of a table in a group: JSON :class:`~cdclake.model.groups.GroupTarget` (group,
transaction-topic position), the position the group's publish chose for the members' next runs
(:func:`cdclake.model.groups.choose_target`): a member's run below it stops there, or reads on past
``max_events_per_run`` to reach it (:func:`cdclake.spark.transactions.cut_batch`)."""

GROUP_TAG_PREFIX = "cdc_group_"

STAGE_BRANCH = "cdc_stage"
"""The branch a table of a group commits its runs to (:data:`WRITE_REF_PROPERTY`): ``main`` moves
to one of its snapshots only when the group is published, for every member in one catalog commit,
so that ``main`` of the members shows the source at one transaction boundary
(:mod:`cdclake.pipeline.groups`)."""

WRITE_REF_PROPERTY = "cdc.write-ref"
"""Table property: the branch the table's runs commit to and plan from, :data:`STAGE_BRANCH` for a
table of a group; absent: ``main``. Set and removed by the apply when the table joins or leaves a
group (:func:`cdclake.io.refs.ensure_write_ref`)."""


def group_tag(group: str) -> str:
    """The tag every table of ``group`` moves to its snapshot at the group's published position:
    ``cdc_group_<group>`` (readers: ``VERSION AS OF 'cdc_group_<group>'``)."""
    return f"{GROUP_TAG_PREFIX}{group}"


POSITION_TAG_INFIX = "-at-"
"""Between the group's tag and a position in :func:`position_tag` (a group name has no ``-``)."""


def position_tag(group: str, position: int) -> str:
    """The tag of a table of ``group`` at one published position (a transaction-topic offset) when
    the group is published by pointer (``CDCLAKE_GROUP_COMMIT=pointer``):
    ``cdc_group_<group>-at-<position>``, e.g. ``cdc_group_bank-at-120``. Created on every member
    before any member's ``cdc.group-position`` names the position; the publish after next removes
    it."""
    return f"{group_tag(group)}{POSITION_TAG_INFIX}{position}"


_POSITION_TAG = re.compile(rf"{GROUP_TAG_PREFIX}[a-z0-9_]+{POSITION_TAG_INFIX}[0-9]+")


def is_position_tag(ref: str) -> bool:
    """Whether ``ref`` is a :func:`position_tag` of any group."""
    return _POSITION_TAG.fullmatch(ref) is not None


def position_of_tag(group: str, ref: str) -> int | None:
    """The position of ``ref`` when it is a :func:`position_tag` of ``group``; else ``None``."""
    head = f"{group_tag(group)}{POSITION_TAG_INFIX}"
    tail = ref[len(head) :]
    return int(tail) if ref.startswith(head) and tail.isdigit() else None


METADATA_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_op", "string", "Debezium op of the event that wrote the row: c, u or r"),
    ("_cdc_snapshot", "boolean", "true when the row was written by a snapshot read"),
    ("_cdc_binlog_file_seq", "long", "binlog file sequence number of that event (mysql-bin.000003 -> 3)"),
    ("_cdc_binlog_pos", "long", "binlog position (source.pos) of that event"),
    ("_cdc_binlog_row", "int", "row index within the binlog event (source.row)"),
    ("_cdc_gtid_seq", "long", "sequence number of that event's MariaDB GTID (source.gtid); null without one"),
    ("_cdc_source_ts", "timestamptz", "when the change was made in the source (source.ts_ms)"),
    ("_cdc_kafka_partition", "int", "Kafka partition of that event"),
    ("_cdc_kafka_offset", "long", "Kafka offset of that event"),
)
"""``(name, Iceberg type, doc)`` of the columns every CDC table carries after the source columns."""

METADATA_COLUMN_NAMES = frozenset(name for name, _, _ in METADATA_COLUMNS)

TABLE_PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        # the default; a CDC table gets its config's format_version (cdclake.io.catalog.create_cdc_table),
        # a history (cdclake.io.history) this one: it is a side table (cdclake.model.format_version)
        FORMAT_VERSION_PROPERTY: str(DEFAULT_FORMAT_VERSION),
        # Row-level changes as position deletes (merge-on-read): a merge rewrites only the rows it
        # touches, never whole files, and never writes equality deletes.
        "write.merge.mode": "merge-on-read",
        "write.update.mode": "merge-on-read",
        "write.delete.mode": "merge-on-read",
        "write.parquet.compression-codec": "zstd",
        # every commit writes a metadata.json: keep the newest 100, delete older ones at commit time
        # (nothing reads them; the committed state is read from snapshot summaries)
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "100",
    }
)
"""Properties every CDC table is created with (read-only: pyiceberg's ``create_table`` pops
``format-version`` from the dict it is given, so callers pass a copy)."""

SIDE_TABLE_PROPERTIES: Mapping[str, str] = MappingProxyType(
    {
        FORMAT_VERSION_PROPERTY: str(SIDE_TABLE_FORMAT_VERSION),
        "write.parquet.compression-codec": "zstd",
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": "100",
    }
)
"""Properties of the side tables: small, and changed by pyiceberg too, which deletes by rewriting
files (and writes no v3 manifests: they stay v2 whatever their table's version)."""


def column_encodings(properties: Mapping[str, str]) -> dict[str, str]:
    """The ``{column: encoding}`` map stored in a table's ``properties``."""
    encodings: dict[str, str] = json.loads(properties.get(COLUMN_ENCODINGS_PROPERTY, "{}"))
    return encodings


def column_encodings_property(encodings: Mapping[str, str]) -> dict[str, str]:
    """The table property recording ``{column: encoding}`` (every writer of the map uses this:
    table creation and schema sync)."""
    return {COLUMN_ENCODINGS_PROPERTY: json.dumps(dict(encodings))}


TOMBSTONES_SUFFIX = "__cdc_tombstones"
QUARANTINE_SUFFIX = "__cdc_quarantine"

TOMBSTONE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_binlog_file_seq", "long", "binlog file sequence number of the delete"),
    ("_cdc_binlog_pos", "long", "binlog position of the delete"),
    ("_cdc_binlog_row", "int", "row index of the delete within its binlog event"),
    ("_cdc_gtid_seq", "long", "sequence number of the delete's MariaDB GTID; null without one"),
    ("_cdc_source_ts", "timestamptz", "when the row was deleted in the source"),
    ("_cdc_recorded_at", "timestamptz", "when the tombstone was written (retention counts from it)"),
    ("_cdc_kafka_partition", "int", "Kafka partition of the delete"),
    ("_cdc_kafka_offset", "long", "Kafka offset of the delete"),
)
"""Columns of the tombstone table after the primary-key columns: one row per deleted key, the
newest delete's position and Kafka partition and offset (which break ties at one position,
:func:`cdclake.model.position.supersedes`). An upsert it supersedes is discarded
(``docs/architecture.md``, "The apply contract")."""

QUARANTINE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("topic", "string", "Kafka topic of the record"),
    ("partition", "int", "Kafka partition"),
    ("offset", "long", "Kafka offset"),
    ("timestamp", "timestamptz", "Kafka record timestamp"),
    ("key", "binary", "raw Kafka key bytes"),
    ("value", "binary", "raw Kafka value bytes"),
    ("error", "string", "why the record was not applied"),
    ("held_back_behind", "long", "for a held-back record: offset of the bad record of its key"),
    ("run_id", "string", "the run that quarantined it"),
    ("quarantined_at", "timestamptz", "when"),
    ("status", "string", "open (its key's later events are held back) or released"),
    (
        "held_back_partition",
        "int",
        "for a held-back record: partition of the bad record of its key (another one when the key's bytes changed)",
    ),
)
"""Columns of a table's quarantine (dead-letter) table: one row per Kafka record not applied."""


def side_table(identifier: str, suffix: str) -> str:
    """``namespace.table`` of a side table (tombstones, quarantine) of ``identifier``."""
    return identifier + suffix


RUN_BRANCH_PREFIX = "cdc-run-"
"""Branches the apply job commits to before fast-forwarding ``main`` (dropped by the job), named
by :func:`run_branch_name`."""

_RUN_BRANCH_TAIL = re.compile(r"([0-9]{1,18})-([0-9a-f]+)")
"""What follows :data:`RUN_BRANCH_PREFIX` in a name of :func:`run_branch_name`."""


def run_branch_name(created_ms: int, token: str) -> str:
    """The name of a run branch created at ``created_ms``: ``cdc-run-<created ms>-<token>``.

    Iceberg keeps no creation time for a ref, and a run branch starts at the run's base snapshot,
    which is as old as the table's last commit: maintenance reads the creation time back from the
    name (:func:`run_branch_created_ms`) to tell a live run's branch from one a killed run left.

    Args:
        created_ms: when the apply creates the branch, epoch ms (its own clock).
        token: lowercase hex digits that tell apart the branches of runs started in the same
            millisecond (12 digits of a random UUID).

    Raises:
        ValueError: a negative ``created_ms`` or a ``token`` that is not lowercase hex.
    """
    name = f"{RUN_BRANCH_PREFIX}{created_ms}-{token}"
    if run_branch_created_ms(name) != created_ms:
        raise ValueError(f"run branch: creation time {created_ms!r} ms and token {token!r} make no run branch name")
    return name


def run_branch_created_ms(name: str) -> int | None:
    """When the run branch ``name`` was created (epoch ms), as :func:`run_branch_name` wrote it.

    Returns:
        The creation time, or ``None`` for a ref that is not such a name: another branch or tag, or
        a run branch of a release before creation times were named (``cdc-run-<12 hex digits>``).
    """
    if not name.startswith(RUN_BRANCH_PREFIX):
        return None
    tail = _RUN_BRANCH_TAIL.fullmatch(name[len(RUN_BRANCH_PREFIX) :])
    return None if tail is None else int(tail.group(1))
