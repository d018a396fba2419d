"""Debezium events flattened here as Debezium's ``ExtractNewRecordState`` transform flattens them
(``io.debezium.transforms.ExtractNewRecordState``, Debezium 3.x: its ``FieldReference`` naming,
``AbstractExtractRecordStrategy``'s ``__deleted`` and truncate handling), independently of
:mod:`cdclake.model.flattened` (which reads them back). The real transform's output is captured on
the chain by ``tests/e2e/test_conformance.py``'s flattened cell.

Events are ``json_with_schema`` ones (``{"schema", "payload"}``); the result is the same shape,
the flattened record's Connect schema and value, or ``None`` when the transform drops the event.
"""

from __future__ import annotations

import copy
from typing import Any

TOMBSTONE = "tombstone"
"""What :func:`flatten` returns for a delete under ``delete.tombstone.handling.mode=tombstone``:
the record becomes a Kafka tombstone (null value)."""


def _entry(entry: str, prefix: str) -> tuple[str | None, str, str]:
    """``(struct, field, new name)`` of one ``add.fields`` entry (``FieldReference``)."""
    if "." in entry:
        struct, field = entry.split(".", 1)
        return struct, field, f"{prefix}{struct}_{field}"
    if entry in ("op", "ts_ms"):
        return None, entry, prefix + entry
    if entry in ("id", "total_order", "data_collection_order"):
        return "transaction", entry, prefix + entry
    return "source", entry, prefix + entry


def flatten(
    event: dict[str, Any], add_fields: str, *, prefix: str = "__", deletes: str = "rewrite"
) -> dict[str, Any] | str | None:
    """The flattened record of ``event``: its row image (``after``; a delete's ``before`` under
    ``rewrite``) and the ``add_fields`` (comma-separated entries) with ``prefix``; ``__deleted``
    (``"true"`` on a delete, ``"false"`` otherwise) under ``rewrite``. ``None``: dropped (a
    truncate; a delete under ``drop``); :data:`TOMBSTONE`: a delete under ``tombstone``."""
    schema, payload = event["schema"], event["payload"]
    op = payload["op"]
    envelope = {f["field"]: f for f in schema["fields"]}
    if payload.get("after") is None and payload.get("before") is None:
        return None  # a truncate: handleTruncateRecord drops it
    image = "after"
    if payload.get("after") is None:  # a delete
        if deletes == "drop":
            return None
        if deletes == "tombstone":
            return TOMBSTONE
        image = "before"
    row_schema = copy.deepcopy(envelope[image])
    row_schema.pop("field", None)
    row_schema["optional"] = False
    value = dict(payload[image])
    for entry in (e.strip() for e in add_fields.split(",") if e.strip()):
        struct, field, name = _entry(entry, prefix)
        if struct is None:
            field_schema, field_value = envelope[field], payload.get(field)
        else:
            block = {f["field"]: f for f in envelope[struct]["fields"]} if struct in envelope else {}
            if field not in block:
                continue
            field_schema, field_value = block[field], (payload.get(struct) or {}).get(field)
        row_schema["fields"].append(dict(copy.deepcopy(field_schema), field=name, optional=True))
        value[name] = field_value
    if deletes in ("rewrite", "rewrite-with-tombstone"):
        row_schema["fields"].append({"type": "string", "optional": True, "field": "__deleted"})
        value["__deleted"] = "true" if op == "d" else "false"
    return {"schema": row_schema, "payload": value}
