"""Schema sync: the source table's schema changes -> its Iceberg schema (``ARCHITECTURE.md`` §6).

Input: the connector's schema-change topic (``<topic.prefix>``, Debezium MySQL connector docs,
"Schema change topic"). Key ``{databaseName}``; value, with or without the JsonConverter
``{"schema", "payload"}`` envelope::

    {"source": {file, pos, row, snapshot, ...}, "ts_ms", "databaseName", "schemaName", "ddl",
     "tableChanges": [{"type": "CREATE" | "ALTER" | "DROP", "id": "\\"db\\".\\"table\\"",
                       "table": {"primaryKeyColumnNames": [...],
                                 "columns": [{name, typeName, typeExpression, length, scale,
                                              optional, position, jdbcType, enumValues, ...}]}}]}

The changes of one table are kept in binlog order (:mod:`cdclake.position`; equal positions in
topic order), each change's columns are mapped to Iceberg (:data:`MYSQL_TYPES`) and diffed
against the table's schema, and the result is committed with pyiceberg in ONE transaction with
the table property :data:`~cdclake.lake.SCHEMA_CHANGE_POSITION_PROPERTY` (the last change
applied), so a re-run applies nothing twice. Rules (Iceberg spec, "Schema evolution"):

=================================  ==============================================================
source change                      Iceberg
=================================  ==============================================================
new column                         optional column at its position (``move_after``)
int->long, float->double,          type promotion (``update_column``)
decimal(P,S)->decimal(P',S), P'>P
NOT NULL -> NULL                   ``make_column_optional``
rename (from the DDL, :mod:`ddl`)  ``rename_column`` (the field id is kept)
dropped column                     kept, optional, null from then on (``dropped_columns: keep``)
                                   or deleted (``dropped_columns: delete``)
primary key                        ``set_identifier_fields``
any other type change              ``incompatible: fail``: :class:`SchemaChangeError` naming the
                                   DDL, its position and the column, nothing committed;
                                   ``incompatible: new_column``: the old column is renamed to
                                   ``<column>__<file seq>_<pos>`` (its values kept) and the
                                   column is added with the new type
CREATE, table not in Iceberg       the table is created (:func:`cdclake.lake.create_cdc_table`)
CREATE, table in Iceberg           diffed like an ALTER (a re-snapshot of the connector)
DROP / RENAME of the table         :class:`SchemaChangeError` (stop; see below), except a DROP in
                                   the connector's snapshot (it rebuilds its schema history) and
                                   a DROP before the Iceberg table exists
=================================  ==============================================================

**Table rename and drop stop the table.** The data topic is named after the source table: after
a rename its events go to another topic, and a dropped table (maybe re-created with other
columns) has nothing left to mirror. The error names the DDL and its position; the remedy is an
operator's decision (point a new table config at the new topic and re-snapshot, or drop or
archive the Iceberg table).

**Barrier** (:func:`sync_for_range`). Rows produced before a change must be written under the
old schema. A change is *additive* when rows written before it decode the same way afterwards
(new optional columns, promotions whose JSON encoding is unchanged, NOT NULL -> NULL, kept
drops); it is applied before the batch even if older rows are in the batch (they have null in
the new column, exactly as if applied in order). Any other change (rename, deleted column,
column renamed aside, primary key, encoding change) is a *barrier*: when the planned batch holds
events before it, the batch is capped, per partition, before the first event at or after the
change; the change is applied by the next run, before the rest of the events.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cdclake.config import ConnectorModes, SchemaChangePolicy, TableConfig
from cdclake.ddl import DdlEffects, DdlParseError, TableName, ddl_effects
from cdclake.errors import SchemaError
from cdclake.kafka_io import read_partition
from cdclake.lake import (
    METADATA_COLUMNS,
    SCHEMA_CHANGE_POSITION_PROPERTY,
    column_encodings,
    column_encodings_property,
    create_cdc_table,
    load_table_or_none,
)
from cdclake.offsets import OffsetRange
from cdclake.position import BinlogPosition
from cdclake.types import ColumnSpec, column_doc, decimal_encoding, iceberg_type_of_encoding, parse_decimal_encoding

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from cdclake.settings import Settings

_TIMEOUT_S = 30.0


class SchemaChangeError(SchemaError):
    """A source schema change schema sync will not apply (incompatible type change under
    ``incompatible: fail``, table renamed or dropped, DDL it cannot read). Nothing was committed;
    the message names the DDL, its position and the column."""


# --- MySQL column type -> Iceberg type -------------------------------------------------------


_INTEGERS = {
    # base type: (signed encoding, unsigned encoding); Debezium MySQL docs, "Basic types"
    "TINYINT": ("int16", "int16"),
    "SMALLINT": ("int16", "int32"),
    "MEDIUMINT": ("int32", "int32"),
    "INT": ("int32", "int64"),
    "INTEGER": ("int32", "int64"),
    "BIGINT": ("int64", "int64"),
}
_STRINGS = {"CHAR", "VARCHAR", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT", "NCHAR", "NVARCHAR",
            "NATIONAL", "CHARACTER", "LONG"}
_BINARIES = {"BINARY", "VARBINARY", "TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"}
_DECIMALS = {"DECIMAL", "NUMERIC", "DEC", "FIXED"}
_GEOMETRIES = {"GEOMETRY", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
               "GEOMETRYCOLLECTION", "GEOMCOLLECTION"}

# The Iceberg type of an encoding is the data path's (cdclake.types.iceberg_type_of_encoding), so
# a column created from tableChanges is the column the Connect schema of its events would create.


def column_type(column: dict[str, Any], modes: ConnectorModes) -> tuple[str, str]:
    """The Iceberg type and the encoding (:mod:`cdclake.types`) of a ``tableChanges`` column, as
    the connector configured with ``modes`` encodes its values.

    Args:
        column: ``{"name", "typeName", "length", "scale", ...}`` of ``tableChanges[].table.columns``.

    Returns:
        ``(iceberg type, encoding)``, e.g. ``("decimal(10,2)", "org.apache.kafka.connect.data.Decimal")``;
        a DECIMAL wider than Iceberg's 38 digits is a ``string``.

    Raises:
        SchemaError: a type this mapping does not know (names the column and the type).
    """
    name = column.get("name")
    words = str(column.get("typeName") or "").upper().split()
    if not words:
        raise SchemaError(f"column {name!r}: no typeName in {column}")
    base = words[0]
    unsigned = "UNSIGNED" in words or "ZEROFILL" in words
    length, scale = column.get("length"), column.get("scale")
    if base == "SERIAL":
        base, unsigned = "BIGINT", True
    if base in ("BOOLEAN", "BOOL") or (base == "BIT" and (length or 1) == 1):
        encoding = "boolean"
    elif base == "BIT":
        encoding = "io.debezium.data.Bits"
    elif base == "BIGINT" and unsigned and modes.bigint_unsigned_handling_mode == "precise":
        encoding = decimal_encoding(20, 0)
    elif base in _INTEGERS:
        encoding = _INTEGERS[base][1 if unsigned else 0]
    elif base == "REAL":
        encoding = "float"
    elif base == "FLOAT":
        # FLOAT(p): p <= 23 single, 24..53 double; FLOAT(M,D) double (Debezium MySQL docs)
        encoding = "double" if scale is not None or (length or 0) > 23 else "float"
    elif base == "DOUBLE":
        encoding = "double"
    elif base in _DECIMALS:
        if modes.decimal_handling_mode == "double":
            encoding = "double"
        elif modes.decimal_handling_mode == "string":
            encoding = "string"
        else:
            encoding = decimal_encoding(length or 10, scale or 0)
    elif base in _STRINGS:
        encoding = "string"
    elif base in _BINARIES:
        encoding = "bytes" if modes.binary_handling_mode == "bytes" else "string"
    elif base == "ENUM":
        encoding = "io.debezium.data.Enum"
    elif base == "SET":
        encoding = "io.debezium.data.EnumSet"
    elif base == "JSON":
        encoding = "io.debezium.data.Json"
    elif base == "YEAR":
        encoding = "io.debezium.time.Year"
    elif base == "DATE":
        encoding = "org.apache.kafka.connect.data.Date" if modes.time_precision_mode == "connect" else "io.debezium.time.Date"
    elif base == "TIME":
        if modes.time_precision_mode == "connect":
            encoding = "org.apache.kafka.connect.data.Time"
        elif modes.time_precision_mode == "adaptive" and (length or 0) <= 3:
            encoding = "io.debezium.time.Time"
        else:
            encoding = "io.debezium.time.MicroTime"
    elif base == "DATETIME":
        if modes.time_precision_mode == "connect":
            encoding = "org.apache.kafka.connect.data.Timestamp"
        else:
            encoding = "io.debezium.time.MicroTimestamp" if (length or 0) > 3 else "io.debezium.time.Timestamp"
    elif base == "TIMESTAMP":
        encoding = "io.debezium.time.ZonedTimestamp"
    elif base == "POINT":
        encoding = "io.debezium.data.geometry.Point"
    elif base in _GEOMETRIES:
        encoding = "io.debezium.data.geometry.Geometry"
    else:
        raise SchemaError(f"column {name!r}: MySQL type {column.get('typeName')!r} is not supported")
    return iceberg_type_of_encoding(encoding), encoding


# --- schema-change records --------------------------------------------------------------------


@dataclass(frozen=True)
class SchemaChange:
    """One ``tableChanges`` entry of this table (or a DDL that renames it), with its event.

    Attributes:
        kind: ``CREATE``, ``ALTER``, ``DROP`` or ``RENAME`` (a DDL renaming the table away or
            onto it, whatever ``tableChanges`` says).
        position: the event's binlog position; a snapshot event ranks as a snapshot read.
        snapshot: the event belongs to the connector's snapshot.
        ddl: the DDL statement.
        database: the event's ``databaseName`` (default database of unqualified names).
        columns: ``tableChanges[].table.columns`` ordered by ``position``.
        primary_key: ``tableChanges[].table.primaryKeyColumnNames``.
        partition, offset: where the event sits in the schema-change topic.
    """

    kind: str
    position: BinlogPosition
    snapshot: bool
    ddl: str
    database: str | None
    columns: tuple[dict[str, Any], ...]
    primary_key: tuple[str, ...]
    partition: int
    offset: int

    @property
    def position_text(self) -> str:
        p = self.position
        return f"{p.file_seq}:{p.pos}:{p.row}:{p.change_rank}"

    def describe(self) -> str:
        return (f"{self.kind} at binlog position {self.position_text} (schema-change topic partition "
                f"{self.partition} offset {self.offset}): {self.ddl!r}")


def parse_position_text(text: str) -> BinlogPosition:
    """Inverse of :attr:`SchemaChange.position_text`."""
    f, p, r, k = (int(x) for x in text.split(":"))
    return BinlogPosition(f, p, r, k)


def changes_from_record(value: bytes | str | dict[str, Any], table_id: str, partition: int = 0,
                        offset: int = 0) -> list[SchemaChange]:
    """The changes of table ``table_id`` (``"db"."table"``) in one schema-change record value.

    Raises:
        SchemaChangeError: the value is not a schema-change event (names partition and offset).
    """
    where = f"schema-change topic partition {partition} offset {offset}"
    doc = json.loads(value) if isinstance(value, (bytes, str)) else value
    if isinstance(doc, dict) and "payload" in doc and "ddl" not in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), dict):
        raise SchemaChangeError(f"{where}: not a Debezium schema-change event")
    source = doc["source"]
    snapshot = source.get("snapshot") not in (None, False, "false")
    try:
        position = BinlogPosition.from_source(source, "r" if snapshot else "c")
    except ValueError as e:
        raise SchemaChangeError(f"{where}: {e}") from e
    ddl = doc.get("ddl") or ""
    database = doc.get("databaseName") or None
    out = []
    for tc in doc.get("tableChanges") or ():
        if tc.get("id") != table_id:
            continue
        table = tc.get("table") or {}
        columns = tuple(sorted(table.get("columns") or (), key=lambda c: c.get("position") or 0))
        out.append(SchemaChange(str(tc.get("type")), position, snapshot, ddl, database, columns,
                                tuple(table.get("primaryKeyColumnNames") or ()), partition, offset))
    if not out:
        renamed = _renames_of(ddl, database, table_id, where)
        if renamed:
            out.append(SchemaChange("RENAME", position, snapshot, ddl, database, (), (), partition, offset))
    return out


def _split_id(table_id: str) -> tuple[str, str]:
    db, _, table = table_id.partition(".")
    return db.strip('"'), table.strip('"')


def _effects(ddl: str, where: str) -> DdlEffects:
    try:
        return ddl_effects(ddl)
    except DdlParseError as e:
        raise SchemaChangeError(f"{where}: {e}") from e


def _renames_of(ddl: str, database: str | None, table_id: str, where: str) -> bool:
    """Whether ``ddl`` renames the table away or onto it."""
    db, name = _split_id(table_id)
    for rename in _effects(ddl, where).table_renames:
        if rename.old.matches(db, name, default_db=database) or rename.new.matches(db, name, default_db=database):
            return True
    return False


def read_schema_changes(bootstrap: str, topic: str, table_id: str) -> list[SchemaChange] | None:
    """Every change of ``table_id`` in the schema-change ``topic``, in binlog order.

    Returns:
        The changes, or ``None`` when the topic does not exist (the connector runs with
        ``include.schema.changes=false``, or has emitted nothing yet).
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdclake-schema-sync",
                         "enable.auto.commit": False, "log_level": 3})
    try:
        meta = consumer.list_topics(topic, timeout=_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return None
        changes: list[SchemaChange] = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=_TIMEOUT_S)
            for msg in read_partition(consumer, topic, p, low, high):
                if msg.value() is not None:
                    changes.extend(changes_from_record(msg.value(), table_id, p, msg.offset()))
        return sorted(changes, key=lambda c: (c.position, c.partition, c.offset))
    finally:
        consumer.close()


# --- the diff ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceSchema:
    """The source columns of an Iceberg CDC table (metadata columns left out), in order."""

    columns: tuple[ColumnSpec, ...]
    identifier: tuple[str, ...]

    def get(self, name: str) -> ColumnSpec | None:
        return next((c for c in self.columns if c.name == name), None)


def source_schema(table: Table) -> SourceSchema:
    """The source part of ``table``'s current schema, with the recorded encodings."""
    meta = {name for name, _, _ in METADATA_COLUMNS}
    encodings = column_encodings(table)
    schema = table.schema()
    columns = tuple(
        ColumnSpec(f.name, iceberg_type_name(f.field_type), f.required, encodings.get(f.name, ""))
        for f in schema.fields if f.name not in meta
    )
    return SourceSchema(columns, tuple(sorted(schema.identifier_field_names())))


def iceberg_type_name(field_type: Any) -> str:
    """A pyiceberg type as :func:`cdclake.lake.create_cdc_table` names it (``decimal(P,S)``,
    ``struct<wkb:binary,srid:int>``)."""
    from pyiceberg.types import DecimalType, StructType

    if isinstance(field_type, DecimalType):
        return f"decimal({field_type.precision},{field_type.scale})"
    if isinstance(field_type, StructType):
        return "struct<" + ",".join(f"{f.name}:{iceberg_type_name(f.field_type)}" for f in field_type.fields) + ">"
    return str(field_type)


def _decimal(t: str) -> tuple[int, int] | None:
    if not t.startswith("decimal("):
        return None
    p, s = t[len("decimal("):-1].split(",")
    return int(p), int(s)


def is_promotion(old: str, new: str) -> bool:
    """Whether Iceberg can change a column from type ``old`` to ``new`` (spec, "Schema evolution":
    int->long, float->double, decimal(P,S)->decimal(P',S) with P' >= P)."""
    if old == new or (old, new) in (("int", "long"), ("float", "double")):
        return True
    a, b = _decimal(old), _decimal(new)
    return a is not None and b is not None and a[1] == b[1] and b[0] >= a[0]


_JSON_FAMILIES = ({"int8", "int16", "int32", "int64"}, {"float", "double"})


def same_json_values(old: str, new: str) -> bool:
    """Whether values written under encoding ``old`` decode the same under ``new`` (decimals:
    the same scale, whatever the precision)."""
    a, b = parse_decimal_encoding(old), parse_decimal_encoding(new)
    if a is not None and b is not None:
        return a[1] == b[1]
    return old == new or any(old in f and new in f for f in _JSON_FAMILIES)


@dataclass
class ChangePlan:
    """What one schema change does to the Iceberg table (see the module table).

    ``renames`` run first (in their own schema update), then the rest; names in ``adds``,
    ``promotions``, ``optional`` and ``deletes`` are the names after the renames.
    """

    change: SchemaChange
    renames: list[tuple[str, str]] = field(default_factory=list)
    adds: list[tuple[ColumnSpec, str | None]] = field(default_factory=list)
    """``(column, the column it goes after or None for first)``; always optional."""
    promotions: list[tuple[str, str]] = field(default_factory=list)
    optional: list[str] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    identifier: tuple[str, ...] | None = None
    barrier_reasons: list[str] = field(default_factory=list)
    after: SourceSchema | None = None
    encodings: dict[str, str] = field(default_factory=dict)

    @property
    def is_barrier(self) -> bool:
        return bool(self.barrier_reasons)

    @property
    def is_empty(self) -> bool:
        return not (self.renames or self.adds or self.promotions or self.optional or self.deletes
                    or self.identifier is not None)


def aside_name(column: str, change: SchemaChange) -> str:
    """Name an incompatibly changed column's old version is renamed to (``new_column`` policy):
    ``<column>__<binlog file seq>_<pos>``; deterministic, so a re-run names it the same."""
    return f"{column}__{change.position.file_seq}_{change.position.pos}"


def plan_change(
    current: SourceSchema,
    change: SchemaChange,
    *,
    table_id: str,
    policy: SchemaChangePolicy,
    modes: ConnectorModes,
    changelog: bool = False,
) -> ChangePlan:
    """Diff one ``CREATE``/``ALTER`` change against ``current`` (pure; nothing is written).

    Raises:
        SchemaChangeError: an incompatible type change under ``incompatible: fail``; the DDL
            cannot be read; a new column would have to be an identifier field.
    """
    plan = ChangePlan(change)
    encodings = {c.name: c.encoding for c in current.columns}
    columns = {c.name: c for c in current.columns}
    order = [c.name for c in current.columns]

    def rename(old: str, new: str) -> None:
        plan.renames.append((old, new))
        col = columns.pop(old)
        columns[new] = replace(col, name=new)
        order[order.index(old)] = new
        encodings[new] = encodings.pop(old)

    db, name = _split_id(table_id)
    try:
        renames = ddl_effects(change.ddl).column_renames
    except DdlParseError as e:
        # the DDL only matters for renames: a change that drops no column and adds none cannot
        # hide one (the columns themselves come from tableChanges); otherwise refuse to guess
        gone = set(columns) - {c["name"] for c in change.columns}
        new = {c["name"] for c in change.columns} - set(columns)
        if gone and new:
            raise SchemaChangeError(
                f"{change.describe()}: {e}; columns {sorted(gone)} disappeared and {sorted(new)} "
                "appeared, and without the DDL a rename cannot be told from a drop and an add"
            ) from e
        renames = ()
    for r in renames:
        if r.table.matches(db, name, default_db=change.database) and r.old in columns and r.new not in columns:
            rename(r.old, r.new)
            plan.barrier_reasons.append(f"column {r.old!r} renamed to {r.new!r}")

    wanted = [c["name"] for c in change.columns]
    mapped = {c["name"]: (*column_type(c, modes), bool(c.get("optional", True))) for c in change.columns}
    if not mapped:
        raise SchemaChangeError(f"{change.describe()}: the change lists no columns")

    previous: str | None = None
    for col_name in wanted:
        iceberg_type, encoding, optional = mapped[col_name]
        existing = columns.get(col_name)
        if existing is not None and not is_promotion(existing.iceberg_type, iceberg_type):
            where = (f"{change.describe()}: column {col_name!r} changes type from "
                     f"{existing.iceberg_type} to {iceberg_type}, which Iceberg cannot promote")
            if policy.incompatible == "fail":
                raise SchemaChangeError(
                    f"{where}. Nothing was applied and the table's offsets did not move. Set "
                    "schema_changes.incompatible: new_column to keep the old column renamed aside, "
                    "or migrate the table by hand."
                )
            rename(col_name, aside_name(col_name, change))
            plan.barrier_reasons.append(f"column {col_name!r} renamed aside (incompatible type)")
            existing = None
        if existing is None:
            spec = ColumnSpec(col_name, iceberg_type, False, encoding)
            plan.adds.append((spec, previous))
            columns[col_name] = spec
            order.insert(order.index(previous) + 1 if previous else 0, col_name)
            encodings[col_name] = encoding
        else:
            if existing.iceberg_type != iceberg_type:
                plan.promotions.append((col_name, iceberg_type))
            if not same_json_values(existing.encoding, encoding):
                plan.barrier_reasons.append(
                    f"column {col_name!r} encoding {existing.encoding or '?'} -> {encoding}")
            if existing.required and (optional or changelog):
                plan.optional.append(col_name)
            columns[col_name] = replace(existing, iceberg_type=iceberg_type, encoding=encoding,
                                        required=existing.required and not optional)
            encodings[col_name] = encoding
        previous = col_name

    for col_name in [n for n in order if n not in mapped]:
        if policy.dropped_columns == "delete":
            plan.deletes.append(col_name)
            plan.barrier_reasons.append(f"column {col_name!r} deleted")
            columns.pop(col_name)
            order.remove(col_name)
            encodings.pop(col_name, None)
        elif columns[col_name].required:
            plan.optional.append(col_name)
            columns[col_name] = replace(columns[col_name], required=False)

    if not changelog:
        identifier = tuple(sorted(change.primary_key))
        if identifier and identifier != current.identifier:
            not_required = [c for c in identifier if not columns[c].required]
            if not_required:
                raise SchemaChangeError(
                    f"{change.describe()}: the primary key becomes {list(change.primary_key)} but "
                    f"column(s) {not_required} are optional in Iceberg (new or once nullable), and "
                    "identifier fields must be required. Re-create the table (snapshot bootstrap)."
                )
            plan.identifier = identifier
            plan.barrier_reasons.append(f"primary key -> {list(change.primary_key)}")
    plan.after = SourceSchema(tuple(columns[n] for n in order),
                              plan.identifier if plan.identifier is not None else current.identifier)
    plan.encodings = encodings
    return plan


# --- applying ---------------------------------------------------------------------------------


def _commit_plans(table: Table, plans: list[ChangePlan], position_text: str) -> Table:
    """Apply ``plans`` in order and record ``position_text``, in ONE Iceberg transaction."""
    import itertools

    from cdclake.lake import _iceberg_type

    # nested field ids (struct<wkb,srid>) are placeholders: add_column assigns fresh ones
    placeholder_ids = itertools.count(1_000_000)
    with table.transaction() as txn:
        for plan in plans:
            if plan.renames:
                with txn.update_schema() as update:
                    for old, new in plan.renames:
                        update.rename_column(old, new)
            if plan.is_empty:
                continue
            with txn.update_schema() as update:
                for spec, after in plan.adds:
                    update.add_column(spec.name, _iceberg_type(spec.iceberg_type, placeholder_ids), required=False,
                                      doc=column_doc(spec.encoding))
                    if after is None:
                        update.move_first(spec.name)
                    else:
                        update.move_after(spec.name, after)
                for name, new_type in plan.promotions:
                    update.update_column(name, field_type=_iceberg_type(new_type))
                for name in plan.optional:
                    update.make_column_optional(name)
                if plan.identifier is not None:
                    update.set_identifier_fields(*plan.identifier)
                for name in plan.deletes:
                    update.delete_column(name)
        properties = {SCHEMA_CHANGE_POSITION_PROPERTY: position_text}
        if plans:
            properties.update(column_encodings_property(plans[-1].encodings))
        txn.set_properties(properties)
    return table.refresh()


@dataclass(frozen=True)
class SyncResult:
    """What :func:`sync_for_range` did.

    Attributes:
        offset_range: the range the apply step must read: the planned one, or capped before a
            barrier change (``capped_before`` says which).
        applied: the changes applied (descriptions), in order.
        capped_before: the barrier change the range was capped before, if any.
        created: the Iceberg table was created from a ``CREATE`` change.
    """

    offset_range: OffsetRange
    applied: tuple[str, ...] = ()
    capped_before: str | None = None
    created: bool = False


def pending_changes(changes: list[SchemaChange], table: Table | None) -> list[SchemaChange]:
    """The changes after the table's recorded schema-change position (all when none)."""
    done = table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY) if table is not None else None
    if done is None:
        return list(changes)
    floor = parse_position_text(done)
    return [c for c in changes if c.position > floor]


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
) -> SyncResult:
    """Apply the pending ``changes`` that precede the batch's events, capping the batch before a
    barrier change (module docstring, "Barrier").

    Args:
        changes: this table's changes in binlog order (:func:`read_schema_changes`).
        data_positions: ``(partition, offset, position)`` of the batch's events (records that
            have no position are left out: the apply step quarantines them).
        offset_range: the planned range.

    Raises:
        SchemaChangeError: see :func:`plan_change`, and a table renamed or dropped at the source.
        SchemaError: the primary key in the table config is not the source table's.
    """
    table = load_table_or_none(catalog, cfg.identifier)
    pending = pending_changes(changes, table)
    positions = data_positions or []
    if not pending or not positions:
        _check_primary_key(table, cfg)
        return SyncResult(offset_range)
    last = max(p for _, _, p in positions)
    created = False
    applied: list[str] = []
    plans: list[ChangePlan] = []
    state = source_schema(table) if table is not None else None
    done_position: str | None = None
    capped: tuple[SchemaChange, dict[int, int]] | None = None
    changelog = cfg.write_mode == "changelog"
    for change in pending:
        if change.position > last:
            break
        if change.kind in ("DROP", "RENAME"):
            if table is None or (change.kind == "DROP" and change.snapshot):
                # nothing to drop yet, or the connector's snapshot rebuilding its schema history
                applied.append(f"skipped {change.describe()}")
                done_position = change.position_text
                continue
            raise _stop_for_table_change(change, cfg.identifier)
        if table is None:
            if change.kind != "CREATE":
                raise SchemaChangeError(
                    f"table {cfg.identifier} does not exist and the first change of its source "
                    f"table is not a CREATE: {change.describe()}"
                )
            table = _create(catalog, cfg, change)
            created = True
            state = source_schema(table)
            applied.append(change.describe())
            done_position = change.position_text
            continue
        plan = plan_change(state, change, table_id=cfg.source_table_id, policy=cfg.schema_changes,
                           modes=cfg.connector, changelog=changelog)
        if plan.is_barrier:
            cut = _cut_before(positions, change.position, offset_range)
            if cut is not None:
                capped = (change, cut)
                break
        plans.append(plan)
        state = plan.after
        applied.append(change.describe())
        done_position = change.position_text
    if done_position is not None and table is not None:
        if plans:
            table = _commit_plans(table, plans, done_position)
        elif table.properties.get(SCHEMA_CHANGE_POSITION_PROPERTY) != done_position:
            with table.transaction() as txn:
                txn.set_properties({SCHEMA_CHANGE_POSITION_PROPERTY: done_position})
            table = table.refresh()
    _check_primary_key(table, cfg)
    if capped is not None:
        change, cut = capped
        capped_range = OffsetRange(topic=offset_range.topic, start=offset_range.start, end=cut)
        return SyncResult(capped_range, tuple(applied), change.describe(), created)
    return SyncResult(offset_range, tuple(applied), None, created)


def _cut_before(
    positions: list[tuple[int, int, BinlogPosition]], barrier: BinlogPosition, offset_range: OffsetRange
) -> dict[int, int] | None:
    """End offsets that stop each partition before its first event at or after ``barrier``, or
    ``None`` when no event of the range comes before it (in its partition's order)."""
    first_after: dict[int, int] = {}
    for partition, offset, position in positions:
        if position >= barrier and offset < first_after.get(partition, offset_range.end[partition]):
            first_after[partition] = offset
    end = {p: first_after.get(p, offset_range.end[p]) for p in offset_range.end}
    before = any(offset < end[partition] and position < barrier for partition, offset, position in positions)
    return end if before else None


def _create(catalog: Catalog, cfg: TableConfig, change: SchemaChange) -> Table:
    columns = []
    for c in change.columns:
        iceberg_type, encoding = column_type(c, cfg.connector)
        required = not c.get("optional", True) and cfg.write_mode != "changelog"
        columns.append(ColumnSpec(c["name"], iceberg_type, required, encoding))
    primary_key = cfg.primary_key if cfg.write_mode == "changelog" else change.primary_key
    return create_cdc_table(catalog, cfg.identifier, columns, tuple(primary_key),
                            properties={SCHEMA_CHANGE_POSITION_PROPERTY: change.position_text})


def _check_primary_key(table: Table | None, cfg: TableConfig) -> None:
    if table is None or cfg.write_mode == "changelog":
        return
    identifier = tuple(sorted(table.schema().identifier_field_names()))
    if identifier and identifier != tuple(sorted(cfg.primary_key)):
        raise SchemaError(
            f"table {cfg.identifier}: the source table's primary key is {list(identifier)} "
            f"(Iceberg identifier fields) but the table config says primary_key "
            f"{list(cfg.primary_key)}; set primary_key to the source's key (in key order) and "
            "re-run. Nothing more is applied until they agree."
        )


def read_data_positions(bootstrap: str, offset_range: OffsetRange, value_format: str) -> list[tuple[int, int, BinlogPosition]]:
    """``(partition, offset, position)`` of every event of the range that has one (Kafka
    tombstones and bad records have none; the apply step skips or quarantines them)."""
    from confluent_kafka import Consumer

    from cdclake.envelope import KafkaCoordinates, parse_value
    from cdclake.errors import BadRecordError

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdclake-schema-sync",
                         "enable.auto.commit": False, "log_level": 3})
    out = []
    try:
        topic = offset_range.topic
        for p in sorted(offset_range.end):
            for msg in read_partition(consumer, topic, p, offset_range.start[p], offset_range.end[p]):
                try:
                    event = parse_value(msg.value(), value_format, KafkaCoordinates(topic, p, msg.offset()))
                except BadRecordError:
                    continue
                if event is not None:
                    out.append((p, msg.offset(), event.position))
    finally:
        consumer.close()
    return out


def sync_for_range(catalog: Catalog, cfg: TableConfig, bootstrap: str, offset_range: OffsetRange) -> SyncResult:
    """The ``schema_sync`` step of a table run: apply the table's schema changes up to the planned
    batch (:func:`sync_changes`), reading the schema-change topic and, only when changes are
    pending, the batch's event positions.

    A missing schema-change topic (``include.schema.changes=false``) applies nothing; events whose
    columns the table lacks then stop the apply step (it never drops a column silently).
    """
    changes = read_schema_changes(bootstrap, cfg.schema_change_topic, cfg.source_table_id)
    if changes is None:
        print(f"schema-change topic {cfg.schema_change_topic!r} does not exist: no schema sync")
        return SyncResult(offset_range)
    table = load_table_or_none(catalog, cfg.identifier)
    positions = None
    if pending_changes(changes, table):
        positions = read_data_positions(bootstrap, offset_range, cfg.value_format)
    return sync_changes(catalog, cfg, changes, data_positions=positions, offset_range=offset_range)


def sync_table_schema(settings: Settings, cfg: TableConfig, bootstrap: str | None = None) -> SyncResult:
    """Bring the Iceberg table to the source table's current schema, as the bootstrap DAG needs
    before a snapshot: creates the table from its ``CREATE`` change if it does not exist.

    When events are waiting to be applied (committed offsets -> high watermarks), this is exactly
    the table run's schema sync for that range: a barrier change behind pending events waits for
    the table's DAG. When none are waiting, every change up to the end of the schema-change topic
    is applied (no event can be written under the wrong schema).

    Raises:
        SchemaChangeError, SchemaError: as :func:`sync_changes`.
        LookupError: the data topic does not exist.
    """
    from cdclake.kafka_io import topic_watermarks
    from cdclake.lake import committed_offsets, load_catalog
    from cdclake.offsets import plan_range

    servers = bootstrap or settings.kafka_bootstrap
    catalog = load_catalog(settings)
    changes = read_schema_changes(servers, cfg.schema_change_topic, cfg.source_table_id)
    if changes is None:
        print(f"schema-change topic {cfg.schema_change_topic!r} does not exist: no schema sync")
        return SyncResult(OffsetRange(topic=cfg.topic, start={}, end={}))
    table = load_table_or_none(catalog, cfg.identifier)
    marks = topic_watermarks(servers, cfg.topic)
    committed = committed_offsets(table, cfg.topic) if table is not None else None
    offset_range = plan_range(cfg.topic, committed, marks.low, marks.high, 2**62)
    pending = pending_changes(changes, table)
    if not pending:
        _check_primary_key(table, cfg)
        return SyncResult(offset_range)
    positions = read_data_positions(servers, offset_range, cfg.value_format)
    if not positions:
        # nothing to apply: every change may go in; a stand-in event after the last change makes
        # sync_changes apply them all without capping anything
        # (at the range's end offset: it is not in the range, so nothing is cut before it)
        partition = min(offset_range.end)
        positions = [(partition, offset_range.end[partition], max(c.position for c in pending))]
    return sync_changes(catalog, cfg, changes, data_positions=positions, offset_range=offset_range)
