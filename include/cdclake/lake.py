"""The Iceberg side: catalog, CDC table layout, and the state kept in snapshot summaries.

State (``ARCHITECTURE.md`` section 5): the consumed Kafka offsets and the run's provenance are
properties of the snapshot summary of the data commit (keys in :class:`SummaryKeys`), so they are
committed atomically with the rows. The committed offsets of a table are those of the newest
snapshot in the current snapshot's ancestry that carries them (maintenance snapshots carry none).

Every CDC table holds the source columns followed by the metadata columns of
:data:`METADATA_COLUMNS`, which record the event that wrote the row.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from cdclake.offsets import Offsets, decode_offsets
from cdclake.settings import Settings
from cdclake.types import ColumnSpec

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


COLUMN_ENCODINGS_PROPERTY = "cdc.column-encodings"
"""Table property: JSON ``{column: encoding}`` (see :mod:`cdclake.types`)."""

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


def committed_offsets(table: Table, topic: str) -> Offsets | None:
    """End offsets of the newest CDC commit in the current snapshot's ancestry.

    Returns:
        Partition -> next offset to read, or ``None`` when no commit of ``topic`` exists.
    """
    from pyiceberg.table.snapshots import ancestors_of

    current = table.current_snapshot()
    if current is None:
        return None
    for snap in ancestors_of(current, table.metadata):
        summary = snap.summary
        if summary is None:
            continue
        end = summary.get(SummaryKeys.END_OFFSETS)
        if end is not None and summary.get(SummaryKeys.TOPIC) == topic:
            return decode_offsets(end)
    return None


def column_encodings(table: Table) -> dict[str, str]:
    """The ``{column: encoding}`` map stored with the table."""
    return json.loads(table.properties.get(COLUMN_ENCODINGS_PROPERTY, "{}"))


def create_cdc_table(
    catalog: Catalog, identifier: str, columns: list[ColumnSpec], primary_key: tuple[str, ...]
) -> Table:
    """Create a CDC table: source columns, then metadata columns; primary key = identifier fields.

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
    fields = []
    for i, col in enumerate(columns, start=1):
        fields.append(
            NestedField(
                i,
                col.name,
                _iceberg_type(col.iceberg_type),
                required=col.required or col.name in primary_key,
            )
        )
    for j, (name, typ, doc) in enumerate(METADATA_COLUMNS, start=len(columns) + 1):
        fields.append(NestedField(j, name, _iceberg_type(typ), required=False, doc=doc))
    ids = [f.field_id for f in fields if f.name in primary_key]
    schema = Schema(*fields, identifier_field_ids=ids)
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    properties = dict(TABLE_PROPERTIES)
    properties[COLUMN_ENCODINGS_PROPERTY] = json.dumps({c.name: c.encoding for c in columns})
    return catalog.create_table(identifier, schema=schema, properties=properties)


def _iceberg_type(name: str):  # noqa: ANN202 - pyiceberg type
    from pyiceberg import types as t

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
