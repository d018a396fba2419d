"""Kafka record keys in Debezium's key format.

Debezium keys a data-change record by the table's primary key (Debezium MySQL connector docs,
"Change event keys"). With Kafka Connect's ``JsonConverter``:

* ``schemas.enable=true``::

    {"schema": {"type": "struct", "name": "<server>.<db>.<table>.Key", "optional": false,
                "fields": [{"type": "int32", "optional": false, "field": "id"}]},
     "payload": {"id": 1001}}

* ``schemas.enable=false``: ``{"id": 1001}``

Serialized compactly (no spaces), in primary-key column order, as ``JsonConverter`` does.

A key field keeps only what identifies the column's Connect type (``type``, and ``name`` and
``version`` of a logical type) from the event's value schema: attributes that may differ between
events of one row (``default`` after an ``ALTER TABLE``, ``parameters`` such as
``__debezium.source.column.length``, ``doc``) are left out, so that a row gets the same key
bytes, hence the same partition, whatever its events' schemas hold.
"""

from __future__ import annotations

import json
from typing import Any

from cdclake.model.config import ValueFormat
from cdclake.model.envelope import ChangeEvent

KEY_FIELD_ATTRIBUTES = ("type", "name", "version")
"""The attributes of a column's value-schema field a key field keeps (module docstring)."""


def _compact(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def key_fields(event: ChangeEvent) -> dict[str, dict[str, Any]]:
    """The value-schema fields of ``event``'s row (``{column: field}``); empty for an event without
    a schema (``"schema": null``)."""
    row_schema = event.row_schema() or {}
    return {f["field"]: f for f in row_schema.get("fields", ())}


def build_key(
    event: ChangeEvent,
    primary_key: tuple[str, ...],
    value_format: ValueFormat,
    known: dict[str, dict[str, Any]] | None = None,
) -> bytes:
    """The Kafka key Debezium would give ``event``.

    Args:
        event: a row event (``c``/``u``/``d``/``r``); truncates have no key.
        primary_key: primary-key columns in key order.
        value_format: the converter setting, applied to keys as to values.
        known: key columns' value-schema fields from other events of the table
            (:func:`key_fields`), for an event that carries no schema: its key then has the same
            bytes (and partition) as theirs. A column known nowhere gets a type inferred from its
            value (an integer is ``int64``).

    Returns:
        The key as UTF-8 JSON bytes.

    Raises:
        ValueError: ``event`` is a truncate, or its row image lacks a primary-key column.
    """
    image = event.row_image
    if event.op == "t" or image is None:
        raise ValueError("a truncate event has no key")
    missing = [c for c in primary_key if c not in image]
    if missing:
        raise ValueError(f"row image has no primary-key column(s) {missing}")
    payload = {c: image[c] for c in primary_key}
    if value_format == "json":
        return _compact(payload)
    by_name = {**(known or {}), **key_fields(event)}
    fields = []
    for col in primary_key:
        declared = by_name.get(col) or {"type": _infer_connect_type(image[col])}
        # JsonConverter's order: type, optional, name, version, field
        logical = {k: declared[k] for k in KEY_FIELD_ATTRIBUTES[1:] if k in declared}
        fields.append({"type": declared["type"], "optional": False, **logical, "field": col})
    src = event.source
    schema = {
        "type": "struct",
        "fields": fields,
        "optional": False,
        "name": f"{src.get('name')}.{src.get('db')}.{src.get('table')}.Key",
    }
    return _compact({"schema": schema, "payload": payload})


def _infer_connect_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "double"
    return "string"
