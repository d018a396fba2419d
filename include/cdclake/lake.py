"""The Iceberg side: catalog, CDC table layout, and the state kept in snapshot summaries.

State (``ARCHITECTURE.md`` section 5): the consumed Kafka offsets and the run's provenance are
properties of the snapshot summary of the data commit (keys in :class:`SummaryKeys`), so they are
committed atomically with the rows. The committed offsets of a table are those of the newest
snapshot in the current snapshot's ancestry that carries them (maintenance snapshots carry none).

Every CDC table holds the source columns followed by the metadata columns of
:data:`METADATA_COLUMNS`, which record the event that wrote the row.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.offsets import Offsets, decode_offsets
from cdclake.settings import Settings
from cdclake.types import ColumnSpec, column_doc

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table


class SummaryKeys:
    """Snapshot-summary properties written by every data commit of the apply job."""

    TOPIC = "cdc.kafka.topic"
    START_OFFSETS = "cdc.kafka.start-offsets"
    """JSON ``{"<partition>": <offset>}``: where the run started (previous end offsets)."""
    END_OFFSETS = "cdc.kafka.end-offsets"
    """JSON ``{"<partition>": <offset>}``: next offset to read per partition after this commit."""
    RUN_ID = "cdc.run-id"
    """Airflow run id (or ``manual__...``) of the run that committed."""
    EVENTS = "cdc.events"
    """Kafka records in the range, tombstones included."""
    TOMBSTONES = "cdc.kafka-tombstones"
    UPSERTS = "cdc.rows-upserted"
    DELETES = "cdc.rows-deleted"
    FIRST_POSITION = "cdc.first-position"
    LAST_POSITION = "cdc.last-position"
    """Binlog positions ``<file>:<pos>:<row>`` of the oldest and newest event applied."""
    QUARANTINED = "cdc.records-quarantined"
    """Records of the range written to the quarantine table (bad, or held back behind one)."""
    TRUNCATE_FLOOR = "cdc.truncate-floor"
    """Position ``<file>:<pos>:<row>:<rank>`` of the newest truncate applied; events below it are
    discarded. Carried forward by every commit."""
    BINLOG_BASENAME = "cdc.binlog-basename"
    """Binlog basename of the applied events (``mysql-bin``); carried forward by every commit.
    Events of another basename (a failover) stop the table."""
    REPLAY = "cdc.replay"
    """``true`` on the commit of a manual replay (start offsets given by the operator)."""


COLUMN_ENCODINGS_PROPERTY = "cdc.column-encodings"
"""Table property: JSON ``{column: encoding}`` (see :mod:`cdclake.types`)."""

SCHEMA_CHANGE_POSITION_PROPERTY = "cdc.schema-change-position"
"""Table property: position ``<file seq>:<pos>:<row>:<rank>`` of the last source schema change
applied by schema sync (:mod:`cdclake.schema_sync`), committed with the schema update."""

METADATA_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_op", "string", "Debezium op of the event that wrote the row: c, u or r"),
    ("_cdc_snapshot", "boolean", "true when the row was written by a snapshot read"),
    ("_cdc_binlog_file_seq", "long", "binlog file sequence number of that event (mysql-bin.000003 -> 3)"),
    ("_cdc_binlog_pos", "long", "binlog position (source.pos) of that event"),
    ("_cdc_binlog_row", "int", "row index within the binlog event (source.row)"),
    ("_cdc_source_ts", "timestamptz", "when the change was made in the source (source.ts_ms)"),
    ("_cdc_kafka_partition", "int", "Kafka partition of that event"),
    ("_cdc_kafka_offset", "long", "Kafka offset of that event"),
)
"""``(name, Iceberg type, doc)`` of the columns every CDC table carries after the source columns."""

TABLE_PROPERTIES = {
    "format-version": "2",
    # Row-level changes as position deletes (merge-on-read): a merge rewrites only the rows it
    # touches, never whole files, and never writes equality deletes.
    "write.merge.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.delete.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
}


def load_catalog(settings: Settings) -> Catalog:
    """The pyiceberg SQL catalog that Spark's ``JdbcCatalog`` also uses (same name, same DB)."""
    from pyiceberg.catalog.sql import SqlCatalog

    if settings.catalog_uri.startswith("sqlite:///"):
        from pathlib import Path

        Path(settings.catalog_uri[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    return SqlCatalog(settings.catalog_name, uri=settings.catalog_uri, warehouse=settings.warehouse)


def load_table_or_none(catalog: Catalog, identifier: str) -> Table | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


@dataclass(frozen=True)
class CommittedState:
    """What the newest CDC commit of a table recorded (see :class:`SummaryKeys`)."""

    snapshot_id: int | None
    """The table's current snapshot (the base a new run must commit on top of)."""
    offsets: Offsets | None
    truncate_floor: str | None
    binlog_basename: str | None


def committed_state(table: Table, topic: str) -> CommittedState:
    """The state recorded by the newest CDC commit of ``topic`` in the current snapshot's ancestry
    (maintenance snapshots, which carry no offsets, are walked past)."""
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return CommittedState(None, None, None, None)
    for snap in ancestors_of(current, table.metadata):
        summary = snap.summary
        if summary is None:
            continue
        end = summary.get(SummaryKeys.END_OFFSETS)
        if end is not None and summary.get(SummaryKeys.TOPIC) == topic:
            return CommittedState(
                current.snapshot_id,
                decode_offsets(end),
                summary.get(SummaryKeys.TRUNCATE_FLOOR),
                summary.get(SummaryKeys.BINLOG_BASENAME),
            )
    return CommittedState(current.snapshot_id, None, None, None)


def committed_offsets(table: Table, topic: str) -> Offsets | None:
    """End offsets of the newest CDC commit of ``topic`` (``None``: the table never committed)."""
    return committed_state(table, topic).offsets


TOMBSTONES_SUFFIX = "__cdc_tombstones"
QUARANTINE_SUFFIX = "__cdc_quarantine"

TOMBSTONE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("_cdc_binlog_file_seq", "long", "binlog file sequence number of the delete"),
    ("_cdc_binlog_pos", "long", "binlog position of the delete"),
    ("_cdc_binlog_row", "int", "row index of the delete within its binlog event"),
    ("_cdc_source_ts", "timestamptz", "when the row was deleted in the source"),
    ("_cdc_recorded_at", "timestamptz", "when the tombstone was written (retention counts from it)"),
)
"""Columns of the tombstone table after the primary-key columns: one row per deleted key, the
newest delete's position. An upsert at or below it is discarded (``ARCHITECTURE.md`` section 4)."""

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
)
"""Columns of a table's quarantine (dead-letter) table: one row per Kafka record not applied."""


def side_table(identifier: str, suffix: str) -> str:
    """``namespace.table`` of a side table (tombstones, quarantine) of ``identifier``."""
    return identifier + suffix


def ensure_side_table(
    catalog: Catalog,
    identifier: str,
    columns: list[tuple[str, str, bool]],
    docs: dict[str, str] | None = None,
) -> Table:
    """Create ``identifier`` with ``(name, Iceberg type, required)`` columns unless it exists."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    existing = load_table_or_none(catalog, identifier)
    if existing is not None:
        return existing
    docs = docs or {}
    fields = [
        NestedField(i, name, _iceberg_type(typ), required=req, doc=docs.get(name))
        for i, (name, typ, req) in enumerate(columns, start=1)
    ]
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    from pyiceberg.exceptions import TableAlreadyExistsError

    try:
        # side tables are small and changed by pyiceberg too, which deletes by rewriting files
        properties = {"format-version": "2", "write.parquet.compression-codec": "zstd"}
        return catalog.create_table(identifier, schema=Schema(*fields), properties=properties)
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def column_encodings(table: Table) -> dict[str, str]:
    """The ``{column: encoding}`` map stored with the table."""
    return json.loads(table.properties.get(COLUMN_ENCODINGS_PROPERTY, "{}"))


def column_encodings_property(encodings: dict[str, str]) -> dict[str, str]:
    """The table property recording ``{column: encoding}`` (every writer of the map uses this:
    table creation and schema sync)."""
    return {COLUMN_ENCODINGS_PROPERTY: json.dumps(encodings)}


def create_cdc_table(
    catalog: Catalog,
    identifier: str,
    columns: list[ColumnSpec],
    primary_key: tuple[str, ...],
    *,
    properties: dict[str, str] | None = None,
) -> Table:
    """Create a CDC table: source columns, then metadata columns; primary key = identifier fields.

    ``properties`` are added to the table's (schema sync records its progress there).

    Raises:
        SchemaError: a primary-key column is missing from ``columns``.
    """
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField

    from cdclake.errors import SchemaError

    names = [c.name for c in columns]
    missing = [c for c in primary_key if c not in names]
    if missing:
        raise SchemaError(f"table {identifier}: primary key column(s) {missing} not in {names}")
    # top-level fields take ids 1..n in order; nested fields (spatial structs) the ids after them
    nested_ids = itertools.count(len(columns) + len(METADATA_COLUMNS) + 1)
    fields = []
    for i, col in enumerate(columns, start=1):
        fields.append(
            NestedField(
                i,
                col.name,
                _iceberg_type(col.iceberg_type, nested_ids),
                required=col.required or col.name in primary_key,
                doc=column_doc(col.encoding),
            )
        )
    for j, (name, typ, doc) in enumerate(METADATA_COLUMNS, start=len(columns) + 1):
        fields.append(NestedField(j, name, _iceberg_type(typ), required=False, doc=doc))
    ids = [f.field_id for f in fields if f.name in primary_key]
    schema = Schema(*fields, identifier_field_ids=ids)
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    table_properties = {**TABLE_PROPERTIES, **(properties or {})}
    table_properties.update(column_encodings_property({c.name: c.encoding for c in columns}))
    return catalog.create_table(identifier, schema=schema, properties=table_properties)


_STRUCT_TYPE = re.compile(r"^struct<(.*)>$")


def _iceberg_type(name: str, nested_ids: Iterator[int] | None = None):  # noqa: ANN202 - pyiceberg type
    """The pyiceberg type of an Iceberg type name: a primitive, ``decimal(P,S)``, or
    ``struct<name:primitive,...>`` (optional fields, ids from ``nested_ids``)."""
    from pyiceberg import types as t

    struct = _STRUCT_TYPE.match(name)
    if struct is not None:
        if nested_ids is None:
            raise ValueError(f"Iceberg type {name!r} needs ids for its fields")
        members = [m.split(":", 1) for m in struct.group(1).split(",")]
        return t.StructType(*[
            t.NestedField(next(nested_ids), fname, _iceberg_type(ftype), required=False)
            for fname, ftype in members
        ])

    simple = {
        "boolean": t.BooleanType(),
        "int": t.IntegerType(),
        "long": t.LongType(),
        "float": t.FloatType(),
        "double": t.DoubleType(),
        "date": t.DateType(),
        "timestamp": t.TimestampType(),
        "timestamptz": t.TimestamptzType(),
        "string": t.StringType(),
        "binary": t.BinaryType(),
    }
    if name in simple:
        return simple[name]
    if name.startswith("decimal("):
        p, s = name[len("decimal(") : -1].split(",")
        return t.DecimalType(int(p), int(s))
    raise ValueError(f"unknown Iceberg type {name!r}")


def expire_tombstones(catalog: Catalog, identifier: str, retention_hours: int, *, now_ms: int | None = None) -> int:
    """Delete the tombstones of ``identifier`` recorded more than ``retention_hours`` ago.

    Runs with pyiceberg (no Spark). Tombstones must outlive the topic's retention: an event older
    than its key's tombstone can only come back from Kafka while Kafka still holds it.

    Returns:
        The number of tombstones removed.
    """
    import time

    from pyiceberg.expressions import LessThan

    table = load_table_or_none(catalog, side_table(identifier, TOMBSTONES_SUFFIX))
    if table is None:
        return 0
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff_us = (now_ms - retention_hours * 3600 * 1000) * 1000
    expired = LessThan("_cdc_recorded_at", cutoff_us)
    n = table.scan(row_filter=expired, selected_fields=("_cdc_recorded_at",)).to_arrow().num_rows
    if n:
        table.delete(delete_filter=expired, snapshot_properties={"cdc.maintenance": "expire-tombstones"})
    return n


def release_quarantined(catalog: Catalog, identifier: str, partition: int, offset: int) -> int:
    """Release the quarantined record at ``partition``/``offset`` of ``identifier``'s topic, and
    the records held back behind it: their status becomes ``released``.

    A released bad record no longer holds its key back. Its held-back records are applied by the
    next manual replay that starts at or before ``offset`` (the bad record itself is skipped).

    Returns:
        The number of quarantine entries released.

    Raises:
        LookupError: no open quarantine entry at that partition and offset.
    """
    import pyarrow as pa
    from pyiceberg.expressions import And, EqualTo, In, Or

    table = load_table_or_none(catalog, side_table(identifier, QUARANTINE_SUFFIX))
    if table is None:
        raise LookupError(f"table {identifier} has no quarantine table")
    match = And(
        And(EqualTo("partition", partition), EqualTo("status", "open")),
        Or(EqualTo("offset", offset), EqualTo("held_back_behind", offset)),
    )
    rows = table.scan(row_filter=match).to_arrow()
    if not any(r["offset"] == offset and r["held_back_behind"] is None for r in rows.to_pylist()):
        raise LookupError(
            f"no open quarantine entry of {identifier} at partition {partition} offset {offset}"
        )
    status = rows.schema.get_field_index("status")
    released = rows.set_column(
        status, rows.schema.field(status), pa.array(["released"] * rows.num_rows, rows.schema.field(status).type)
    )
    # the rewrite filter names the entries by their (non-null) coordinates
    coordinates = And(EqualTo("partition", partition), In("offset", set(rows["offset"].to_pylist())))
    table.overwrite(released, overwrite_filter=coordinates,
                    snapshot_properties={"cdc.maintenance": "release-quarantined"})
    return rows.num_rows


RUN_BRANCH_PREFIX = "cdc-run-"
"""Branches the apply job commits to before fast-forwarding ``main`` (dropped by the job)."""


def remove_stale_run_branches(catalog: Catalog, identifier: str, *, older_than_ms: int, now_ms: int | None = None) -> list[str]:
    """Remove run branches left by killed jobs (their snapshot is older than ``older_than_ms``).

    A job killed between its branch write and the fast-forward leaves its branch behind; nothing
    reads it, and the retry commits on a branch of its own.

    Returns:
        The names of the branches removed.
    """
    import time

    table = load_table_or_none(catalog, identifier)
    if table is None:
        return []
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    stale = []
    for name, ref in table.refs().items():
        if not name.startswith(RUN_BRANCH_PREFIX):
            continue
        snap = table.snapshot_by_id(ref.snapshot_id)
        if snap is None or now_ms - snap.timestamp_ms > older_than_ms:
            stale.append(name)
    if stale:
        manage = table.manage_snapshots()
        for name in stale:
            manage = manage.remove_branch(name)
        manage.commit()
    return stale
