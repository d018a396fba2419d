"""Debezium schema-change records: which changes of one source table a record holds.

Input: a record of the connector's schema-change topic (``<topic.prefix>``, Debezium MySQL
connector docs, "Schema change topic"). Key ``{databaseName}``; value, with or without the
JsonConverter ``{"schema", "payload"}`` envelope::

    {"source": {file, pos, row, snapshot, ...}, "ts_ms", "databaseName", "schemaName", "ddl",
     "tableChanges": [{"type": "CREATE" | "ALTER" | "DROP", "id": "\\"db\\".\\"table\\"",
                       "table": {"primaryKeyColumnNames": [...],
                                 "columns": [{name, typeName, typeExpression, length, scale,
                                              optional, position, jdbcType, enumValues, ...}]}}]}

A DDL that renames the table away or onto it (``RENAME TABLE``, ``ALTER TABLE ... RENAME``) is a
``RENAME`` change of the table whatever ``tableChanges`` says (:mod:`cdclake.model.ddl`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdclake.errors import DdlParseError, SchemaChangeError
from cdclake.model.ddl import ddl_effects, named_tables
from cdclake.model.position import BinlogPosition


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

    def describe(self) -> str:
        return (
            f"{self.kind} at binlog position {self.position.to_text()} (schema-change topic partition "
            f"{self.partition} offset {self.offset}): {self.ddl!r}"
        )


def changes_from_record(
    value: bytes | str | dict[str, Any], table_id: str, partition: int = 0, offset: int = 0, ordering: str = "binlog"
) -> list[SchemaChange]:
    """The changes of table ``table_id`` (``"db"."table"``) in one schema-change record value,
    positioned by ``ordering`` (:mod:`cdclake.model.position`).

    Raises:
        SchemaChangeError: the value is not a schema-change event (names partition and offset).
    """
    where = f"schema-change topic partition {partition} offset {offset}"
    if isinstance(value, (bytes, str)) and retention_gap(value) is not None:
        return []  # the index's marker of records retention deleted: see read_schema_changes
    doc = json.loads(value) if isinstance(value, (bytes, str)) else value
    if isinstance(doc, dict) and "payload" in doc and "ddl" not in doc:
        doc = doc["payload"]
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), dict):
        raise SchemaChangeError(f"{where}: not a Debezium schema-change event")
    source = doc["source"]
    snapshot = source.get("snapshot") not in (None, False, "false")
    try:
        position = BinlogPosition.from_source(source, "r" if snapshot else "c", ordering)
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
        out.append(
            SchemaChange(
                str(tc.get("type")),
                position,
                snapshot,
                ddl,
                database,
                columns,
                tuple(table.get("primaryKeyColumnNames") or ()),
                partition,
                offset,
            )
        )
    if not out:
        renamed = _renames_of(ddl, database, table_id, where)
        if renamed:
            out.append(SchemaChange("RENAME", position, snapshot, ddl, database, (), (), partition, offset))
    return out


RETENTION_GAP_KEY = "cdclake.retention_gap"
"""The one key of the value the schema-change index stores where retention deleted records before
they were indexed (:func:`gap_value`): ``{"cdclake.retention_gap": {"from": a, "to": b}}``."""


def gap_value(first: int, end: int) -> str:
    """The index value marking the offsets ``[first, end)`` of a partition of the schema-change
    topic as deleted before they were read."""
    return json.dumps({RETENTION_GAP_KEY: {"from": first, "to": end}})


def retention_gap(value: bytes | str) -> tuple[int, int] | None:
    """``(from, to)`` of a retention-gap marker (:func:`gap_value`); ``None`` for any other value."""
    text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
    if RETENTION_GAP_KEY not in text:
        return None
    try:
        gap = json.loads(text)[RETENTION_GAP_KEY]
        return int(gap["from"]), int(gap["to"])
    except (ValueError, KeyError, TypeError):
        return None


def gap_name(topic: str, partition: int, gap: tuple[int, int]) -> str:
    """``<topic>:<partition>:<from>-<to>``: how a retention gap is named in errors and in
    :data:`~cdclake.model.layout.SCHEMA_GAPS_ACCEPTED_PROPERTY`."""
    return f"{topic}:{partition}:{gap[0]}-{gap[1]}"


def split_table_id(table_id: str) -> tuple[str, str]:
    """``("db", "table")`` of a ``tableChanges`` id ``"db"."table"``."""
    db, _, table = table_id.partition(".")
    return db.strip('"'), table.strip('"')


def _renames_of(ddl: str, database: str | None, table_id: str, where: str) -> bool:
    """Whether ``ddl`` renames the table away or onto it. A statement that cannot be read at all
    (:func:`~cdclake.model.ddl.ddl_effects` and its word reading both fail) and whose words never
    name the table cannot rename it: it stops no table it does not name.

    Raises:
        SchemaChangeError: the statement cannot be read and names the table (the statement, the
            table and the remedy).
    """
    db, name = split_table_id(table_id)
    try:
        effects = ddl_effects(ddl)
    except DdlParseError as e:
        named = named_tables(ddl)
        if named is not None and name.lower() not in {n.lower() for n in named}:
            return False
        raise SchemaChangeError(
            f"{where}: {e}, and the statement may rename table {table_id}. Nothing was applied and the "
            "table's offsets did not move. If it does not rename the table, set the table property "
            'cdc.schema-change-position to the record\'s position (docs/errors.md, "SchemaChangeError").'
        ) from e
    for rename in effects.table_renames:
        if rename.old.matches(db, name, default_db=database) or rename.new.matches(db, name, default_db=database):
            return True
    return False
