"""Flattened change events: records Debezium's ``ExtractNewRecordState`` transform (the "unwrap"
SMT, ``io.debezium.transforms.ExtractNewRecordState``) wrote, read back as the envelopes the
apply contract is written for.

The transform replaces the envelope with the row image and copies the metadata its
``add.fields`` names into fields of the row, each named ``<add.fields.prefix><name>``
(Debezium docs, "New record state extraction"; Debezium's ``ExtractNewRecordState.FieldReference``):

================================  ===============================================
``add.fields`` entry              field (prefix ``__``)
================================  ===============================================
``op``, ``ts_ms``                 ``__op``, ``__ts_ms`` (the envelope's)
``source.file``, ``source.pos``   ``__source_file``, ``__source_pos``
``file``, ``pos``, ``row`` ...    ``__file``, ``__pos``, ``__row`` (``source``'s)
``transaction.id``                ``__transaction_id`` (``id``: ``__id``)
================================  ===============================================

A delete becomes, as ``delete.tombstone.handling.mode`` says, the row's ``before`` image with
``__deleted: "true"`` (``rewrite``, ``rewrite-with-tombstone``; the field's name is fixed, not
prefixed) or a Kafka tombstone alone (``tombstone``), or is dropped (``drop``, the transform's
default, which no copy of the table can follow). A truncate is always dropped by the transform
(``AbstractExtractRecordStrategy.handleTruncateRecord``); records that are not change events
(schema changes, transaction metadata, heartbeats) pass unchanged.

:func:`envelope_doc` and :func:`envelope_schema` read a flattened value (a JSON object or an Avro
datum read as one) and its Connect schema as an envelope and its schema; the Spark parse builds
the same envelope column-wise (:mod:`cdclake.spark.flattened`). So every rule of the apply
(binlog order, the row guard, re-emissions, snapshots, schema sync) reads a flattened record as
it reads the envelope it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DELETED_FIELD = "__deleted"
"""The field a rewritten delete carries (``"true"``; ``"false"`` on other events); Debezium's
``ExtractNewRecordStateConfigDefinition.DELETED_FIELD``, never prefixed."""

TRANSFORM_FIELDS = "op,source.ts_ms,source.file,source.pos,source.row,source.snapshot,source.gtid,source.server_id"
"""The transform's ``add.fields`` the full apply contract needs (binlog or GTID order, snapshots):
what docs/table-config.md and ``include/stack/debezium/inventory-connector-flat.json`` set."""

SOURCE_NAMES: Mapping[str, tuple[str, ...]] = {
    "connector": ("source_connector", "connector"),
    "name": ("source_name", "name"),
    "server_id": ("source_server_id", "server_id"),
    "file": ("source_file", "file"),
    "pos": ("source_pos", "pos"),
    "row": ("source_row", "row"),
    "snapshot": ("source_snapshot", "snapshot"),
    "ts_ms": ("source_ts_ms",),
    "db": ("source_db", "db"),
    "table": ("source_table", "table"),
    "gtid": ("source_gtid", "gtid"),
}
"""``source`` field -> the names (without the prefix) the transform gives it, first the
qualified one (``source.file``), then the bare one (``file``); ``ts_ms`` unqualified is the
envelope's."""

TRANSACTION_NAMES: Mapping[str, tuple[str, ...]] = {
    "id": ("transaction_id", "id"),
    "data_collection_order": ("transaction_data_collection_order", "data_collection_order"),
}
"""``transaction`` field -> the names (without the prefix) the transform gives it."""

TOP_NAMES: Mapping[str, tuple[str, ...]] = {"op": ("op",), "ts_ms": ("ts_ms",)}
"""The envelope's own fields -> the names (without the prefix) the transform gives them."""


class FlattenedRecords(BaseModel):
    """The table's topic holds records flattened by Debezium's ``ExtractNewRecordState``
    transform (:mod:`cdclake.model.flattened`), in ``value_format`` (JSON with or without
    schema, Avro through the registry). Its settings mirror the transform's."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    fields_prefix: Annotated[str, Field(max_length=64)] = "__"
    """The transform's ``add.fields.prefix`` (Debezium's default ``__``): added fields are named
    ``<prefix>op``, ``<prefix>source_file``, ..."""
    deletes: Literal["rewrite", "tombstone"] = "rewrite"
    """The transform's ``delete.tombstone.handling.mode``: ``rewrite`` (or
    ``rewrite-with-tombstone``), a delete is its ``before`` image with ``__deleted: "true"`` and
    the added fields, so it has its position; ``tombstone``, a delete is a Kafka tombstone alone,
    without a position: applied in Kafka order, as a log-compacted topic's (docs/table-config.md,
    ``flattened``). The transform's ``drop`` (its default) loses every delete: not accepted."""

    def added(self, names: tuple[str, ...]) -> tuple[str, ...]:
        """``names`` with the prefix: the fields one metadata value may come in."""
        return tuple(self.fields_prefix + n for n in names)

    def is_added_field(self, name: str) -> bool:
        """Whether a field of a flattened record is the transform's, not a source column: the
        prefix's, and ``__deleted``."""
        return name == DELETED_FIELD or (bool(self.fields_prefix) and name.startswith(self.fields_prefix))

    @property
    def op_field(self) -> str:
        """The field of the op (``__op``), which every flattened record must carry."""
        return self.fields_prefix + "op"

    def position_fields(self, ordering: str) -> tuple[str, ...]:
        """The fields an event needs for its position under ``ordering`` (qualified names)."""
        if ordering == "binlog":
            return self.added(("source_file", "source_pos"))
        if ordering == "gtid":
            return self.added(("source_gtid",))
        return ()


def _first(doc: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if doc.get(name) is not None:
            return doc[name]
    return None


def envelope_doc(doc: Mapping[str, Any], flat: FlattenedRecords) -> dict[str, Any]:
    """The envelope of a flattened record's value ``doc`` (a JSON object, or an Avro datum read
    as one): ``before`` (a delete) or ``after`` (every other op) is the row without the added
    fields, ``source``, ``transaction``, ``op`` and ``ts_ms`` from the added fields (null where
    the record lacks one). A record with ``__deleted: "true"`` and no op is a delete."""
    row = {k: v for k, v in doc.items() if not flat.is_added_field(k)}
    op = _first(doc, flat.added(TOP_NAMES["op"]))
    if op is None and str(doc.get(DELETED_FIELD)).lower() == "true":
        op = "d"
    source = {name: _first(doc, flat.added(names)) for name, names in SOURCE_NAMES.items()}
    transaction = {name: _first(doc, flat.added(names)) for name, names in TRANSACTION_NAMES.items()}
    return {
        "before": row if op == "d" else None,
        "after": row if op != "d" else None,
        "source": source,
        "op": op,
        "ts_ms": _first(doc, flat.added(TOP_NAMES["ts_ms"])),
        "transaction": transaction if transaction["id"] is not None else None,
    }


def envelope_schema(schema: Mapping[str, Any], flat: FlattenedRecords) -> dict[str, Any]:
    """The Connect schema of the envelope of :func:`envelope_doc`, from the flattened value's
    Connect struct schema ``schema`` (``json_with_schema``'s ``schema``; an Avro writer schema
    read by :func:`cdclake.model.avro.connect_schema`): ``before`` and ``after`` hold its fields
    that are not added ones, ``source`` and ``transaction`` the added ones under their envelope
    names, ``op`` and ``ts_ms`` theirs."""
    fields = [f for f in schema.get("fields", ()) if isinstance(f, Mapping) and "field" in f]
    by_name = {f["field"]: f for f in fields}
    row = [dict(f) for f in fields if not flat.is_added_field(f["field"])]
    name = schema.get("name") or "Value"

    def block(names: Mapping[str, tuple[str, ...]]) -> list[dict[str, Any]]:
        out = []
        for field, candidates in names.items():
            found = next((by_name[n] for n in flat.added(candidates) if n in by_name), None)
            if found is not None:
                out.append(dict(found, field=field))
        return out

    envelope: list[dict[str, Any]] = [
        {"type": "struct", "fields": row, "optional": True, "name": name, "field": "before"},
        {"type": "struct", "fields": row, "optional": True, "name": name, "field": "after"},
        {"type": "struct", "fields": block(SOURCE_NAMES), "optional": False, "field": "source"},
    ]
    for field, candidates in TOP_NAMES.items():
        found = next((by_name[n] for n in flat.added(candidates) if n in by_name), None)
        if found is not None:
            envelope.append(dict(found, field=field))
    transaction = block(TRANSACTION_NAMES)
    if transaction:
        envelope.append({"type": "struct", "fields": transaction, "optional": True, "field": "transaction"})
    return {"type": "struct", "fields": envelope, "optional": False, "name": f"{name}.Envelope"}


def missing_field_error(field: str, flat: FlattenedRecords, setting: str) -> str:
    """The error of a flattened record that lacks ``field`` (a name with the prefix), which
    ``setting`` (the table config's) needs: the field, the setting and the remedy."""
    entry = field[len(flat.fields_prefix) :].replace("source_", "source.", 1).replace("transaction_", "transaction.", 1)
    return (
        f"flattened record has no {field!r}, which {setting} needs: add {entry} to the ExtractNewRecordState "
        f"transform's add.fields (with add.fields.prefix {flat.fields_prefix!r}; the contract's set: "
        f"{TRANSFORM_FIELDS})" + (", or set ordering: kafka" if "source" in entry or "gtid" in entry else "")
    )


__all__ = [
    "DELETED_FIELD",
    "SOURCE_NAMES",
    "TOP_NAMES",
    "TRANSACTION_NAMES",
    "TRANSFORM_FIELDS",
    "FlattenedRecords",
    "envelope_doc",
    "envelope_schema",
    "missing_field_error",
]
