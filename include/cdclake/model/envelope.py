"""The Debezium change-event envelope, record by record, in plain Python.

Used where records are handled one at a time (the loader builds Kafka keys from it; the CLI and
tests inspect events). The Spark job applies the same rules column-wise in
:mod:`cdclake.spark.apply`; both are tested against the same captured Debezium files.

Envelope (Debezium MySQL connector docs, "Data change events")::

    {"before": {...} | null, "after": {...} | null,
     "source": {"connector", "name", "server_id", "file", "pos", "row", "snapshot", "ts_ms", ...},
     "op": "c" | "u" | "d" | "r" | "t", "ts_ms": <ms>, "transaction": {...} | null}

With ``value_format: json_with_schema`` the envelope is the ``payload`` of
``{"schema": <Connect schema>, "payload": <envelope>}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdclake.errors import BadRecordError
from cdclake.model.config import ValueFormat
from cdclake.model.position import BinlogPosition

OPS = ("c", "u", "d", "r", "t")


@dataclass(frozen=True)
class KafkaCoordinates:
    """Where a record sits in Kafka; every error about a record names these."""

    topic: str
    partition: int | None = None
    offset: int | None = None

    def __str__(self) -> str:
        return f"topic {self.topic!r} partition {self.partition} offset {self.offset}"


@dataclass(frozen=True)
class ChangeEvent:
    """One parsed Debezium change event.

    Attributes:
        op: ``c``, ``u``, ``d``, ``r`` or ``t``.
        before: the row before the change (``u``, ``d``), else ``None``.
        after: the row after the change (``c``, ``u``, ``r``), else ``None``.
        source: the ``source`` metadata block.
        position: the event's binlog position (see :mod:`cdclake.model.position`).
        ts_ms: when the connector processed the event, epoch milliseconds.
        value_schema: the Connect schema of the value (``json_with_schema`` only).
    """

    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    source: dict[str, Any]
    position: BinlogPosition
    ts_ms: int | None
    value_schema: dict[str, Any] | None

    @property
    def row_image(self) -> dict[str, Any] | None:
        """The image that identifies the row: ``before`` for a delete, ``after`` otherwise."""
        return self.before if self.op == "d" else self.after

    def row_schema(self) -> dict[str, Any] | None:
        """The Connect struct schema of the row image (``before``/``after`` field), if present."""
        if not self.value_schema:
            return None
        for field in self.value_schema.get("fields", ()):
            if field.get("field") in ("after", "before") and field.get("type") == "struct":
                row_schema: dict[str, Any] = field
                return row_schema
        return None


def parse_value(
    value: bytes | str | None, value_format: ValueFormat, where: KafkaCoordinates, ordering: str = "binlog"
) -> ChangeEvent | None:
    """Parse one Kafka record value into a :class:`ChangeEvent`.

    Args:
        value: the record value (UTF-8 JSON), or ``None`` for a Kafka tombstone.
        value_format: ``json_with_schema`` or ``json`` (see :data:`cdclake.model.config.ValueFormat`).
        where: the record's Kafka coordinates, for error messages.

    Returns:
        The event, or ``None`` for a Kafka tombstone (null value), which carries no change.

    Raises:
        BadRecordError: not JSON, not an envelope, no or unknown ``op``, no binlog position, or
            no row image for the op; the message names ``where``.
    """
    if value is None:
        return None
    try:
        doc = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRecordError(where, f"value is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise BadRecordError(where, "value is not a JSON object")
    value_schema = None
    if value_format == "json_with_schema":
        if "payload" not in doc:
            raise BadRecordError(where, "value has no 'payload' (expected value_format json_with_schema)")
        value_schema = doc.get("schema")
        doc = doc["payload"]
        if not isinstance(doc, dict):
            raise BadRecordError(where, "payload is not a JSON object")
    op = doc.get("op")
    if op is None:
        raise BadRecordError(where, "envelope has no 'op'")
    if op not in OPS:
        raise BadRecordError(where, f"unknown op {op!r} (expected one of {list(OPS)})")
    source = doc.get("source")
    if not isinstance(source, dict):
        raise BadRecordError(where, "envelope has no 'source' block")
    try:
        position = BinlogPosition.from_source(source, op, ordering)
    except ValueError as e:
        raise BadRecordError(where, str(e)) from e
    before, after = doc.get("before"), doc.get("after")
    if op in ("c", "u", "r") and not isinstance(after, dict):
        raise BadRecordError(where, f"op {op!r} without an 'after' image")
    if op == "d" and not isinstance(before, dict):
        raise BadRecordError(where, "op 'd' without a 'before' image")
    return ChangeEvent(op, before, after, source, position, doc.get("ts_ms"), value_schema)
