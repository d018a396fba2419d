"""The Debezium change-event envelope, record by record, in plain Python.

Used where records are handled one at a time (the loader builds Kafka keys from it; the CLI and
tests inspect events). The Spark job applies the same rules column-wise in
:mod:`cdclake.spark.apply`; both are tested against the same captured Debezium files.

Envelope (Debezium MySQL connector docs, "Data change events")::

    {"before": {...} | null, "after": {...} | null,
     "source": {"connector", "name", "server_id", "file", "pos", "row", "snapshot", "ts_ms", ...},
     "op": "c" | "u" | "d" | "r" | "t", "ts_ms": <ms>, "transaction": {...} | null}

With ``value_format: json_with_schema`` the envelope is the ``payload`` of
``{"schema": <Connect schema>, "payload": <envelope>}``. With ``value_format: avro`` it is the
Avro datum of a Confluent-framed value, read as the JSON value ``JsonConverter`` would have written,
and its writer schema read as the Connect schema (:mod:`cdclake.model.avro`): both formats give
the same :class:`ChangeEvent`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdclake.errors import BadRecordError, ConfigError, SchemaError, UnknownSchemaIdError
from cdclake.model.avro import SchemaLookup, read_value, value_connect_schema
from cdclake.model.config import NO_SCHEMA_REGISTRY, TableConfig, ValueFormat
from cdclake.model.flattened import FlattenedRecords, envelope_doc, envelope_schema, missing_field_error
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
        value_schema: the Connect schema of the value (``json_with_schema``; ``avro``: the
            writer schema's, :func:`cdclake.model.avro.connect_schema`); ``None`` for ``json``.
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
    value: bytes | str | None,
    value_format: ValueFormat,
    where: KafkaCoordinates,
    ordering: str = "binlog",
    *,
    schema_lookup: SchemaLookup | None = None,
    flattened: FlattenedRecords | None = None,
) -> ChangeEvent | None:
    """Parse one Kafka record value into a :class:`ChangeEvent`.

    Args:
        value: the record value (UTF-8 JSON; ``avro``: Confluent-framed Avro), or ``None`` for a
            Kafka tombstone.
        value_format: ``json_with_schema``, ``json`` or ``avro`` (see
            :data:`cdclake.model.config.ValueFormat`).
        where: the record's Kafka coordinates, for error messages.
        schema_lookup: ``avro`` only: the writer schema of a schema id (the Kafka clients'
            schema registry, :meth:`cdclake.io.registry.SchemaRegistry.writer_schema`).
        flattened: the table's ``flattened`` setting: the value is a record flattened by
            ``ExtractNewRecordState``, read as the envelope it came from
            (:func:`cdclake.model.flattened.envelope_doc`; its schema by
            :func:`~cdclake.model.flattened.envelope_schema`).

    Returns:
        The event, or ``None`` for a Kafka tombstone (null value), which carries no change.

    Raises:
        BadRecordError: not JSON (``avro``: bad framing, a schema id the registry does not have,
            bytes that do not decode with the writer schema; the message names the schema id),
            not an envelope, no or unknown ``op``, no binlog position, or no row image for the
            op; the message names ``where``.
        ConfigError: ``avro`` without ``schema_lookup`` (no schema registry configured), or a
            registry config that is wrong (from ``schema_lookup``).
        SchemaRegistryUnavailableError: ``avro``: the registry does not answer (from
            ``schema_lookup``; a retry may succeed, so the record is not bad).
    """
    if value is None:
        return None
    value_schema = None
    if value_format == "avro":
        doc, value_schema = _avro_doc(value, where, schema_lookup)
    else:
        try:
            doc = json.loads(value)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise BadRecordError(where, f"value is not JSON ({e})") from e
    if not isinstance(doc, dict):
        raise BadRecordError(where, "value is not a JSON object")
    if value_format == "json_with_schema":
        if "payload" not in doc:
            raise BadRecordError(where, "value has no 'payload' (expected value_format json_with_schema)")
        value_schema = doc.get("schema")
        doc = doc["payload"]
        if not isinstance(doc, dict):
            raise BadRecordError(where, "payload is not a JSON object")
    if flattened is not None:
        doc, value_schema = _unflattened(doc, value_schema, flattened, where, ordering)
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


def parse_table_value(
    cfg: TableConfig, value: bytes | str | None, where: KafkaCoordinates, schema_lookup: SchemaLookup | None = None
) -> ChangeEvent | None:
    """:func:`parse_value` of a record of ``cfg``'s topic, read as the table is: its
    ``value_format``, ``ordering`` and ``flattened`` settings (same returns and errors)."""
    return parse_value(
        value, cfg.value_format, where, cfg.ordering, schema_lookup=schema_lookup, flattened=cfg.flattened
    )


def _unflattened(
    doc: dict[str, Any],
    schema: dict[str, Any] | None,
    flattened: FlattenedRecords,
    where: KafkaCoordinates,
    ordering: str,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A flattened record's value and schema as the envelope's (:func:`parse_value`)."""
    if doc.get(flattened.op_field) is None:
        raise BadRecordError(where, missing_field_error(flattened.op_field, flattened, "every flattened record"))
    for field in flattened.position_fields(ordering):
        if doc.get(field) is None and doc.get(field.replace("source_", "", 1)) is None:
            raise BadRecordError(where, missing_field_error(field, flattened, f"ordering: {ordering}"))
    envelope = envelope_doc(doc, flattened)
    return envelope, envelope_schema(schema, flattened) if schema is not None else None


def _avro_doc(
    value: bytes | str, where: KafkaCoordinates, schema_lookup: SchemaLookup | None
) -> tuple[Any, dict[str, Any]]:
    """The envelope and the Connect schema of an ``avro`` value (see :func:`parse_value`)."""
    if schema_lookup is None:
        raise ConfigError(f"cannot read the Avro record at {where}: {NO_SCHEMA_REGISTRY}")
    if isinstance(value, str):
        raise BadRecordError(where, "value is text, not Confluent-framed Avro bytes")
    try:
        _, writer, doc = read_value(value, schema_lookup)
    except ConfigError:  # the registry's URL or config is wrong: not the record's fault
        raise
    except UnknownSchemaIdError as e:
        raise BadRecordError(where, str(e)) from e
    except (ValueError, SchemaError) as e:  # framing; decoding, a schema read_value cannot map (names the id)
        raise BadRecordError(where, f"Avro value cannot be read: {e}") from e
    return doc, value_connect_schema(writer)
