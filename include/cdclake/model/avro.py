"""Debezium events in Avro, Confluent wire format: the framing, and the writer schema read as the
Connect schema that Kafka Connect's ``JsonConverter`` would have written.

Wire format (Confluent docs, "Schema Registry: Wire format"; served alike by Confluent, Apicurio in
``ccompat`` mode, Redpanda and Karapace): byte 0 is the magic byte ``0x00``, bytes 1-4 the schema id
(big-endian int32), then the Avro binary datum. A Kafka tombstone is a null value, without framing.

Debezium's semantic types live in the writer schema's ``connect.name``, ``connect.parameters``,
``connect.type`` and ``logicalType`` attributes (Confluent's ``AvroData``, which Apicurio's
converter follows), which a generic Avro decoder drops. :func:`connect_schema` turns the Avro
schema back into the Connect schema (``{"type": "struct", "fields": [{"field", "type",
"optional", "name", "parameters"}]}``) so that every rule keyed on a Connect schema (column types
and encodings in :mod:`cdclake.model.types`, connector-mode checks, schema sync) reads Avro events
exactly as it reads JSON ones, and :func:`json_datum` turns a decoded datum into the JSON value
that ``JsonConverter`` writes (bytes as base64), so that both formats decode to the same Iceberg
values.

Record by record (:func:`read_value`): the framing gives the schema id, a
:data:`SchemaLookup` (the schema registry, :meth:`cdclake.io.registry.SchemaRegistry.writer_schema`)
gives its writer schema, and fastavro decodes the datum with :func:`without_logical_types`.

Names: with ``field.name.adjustment.mode=avro`` Debezium replaces each character of a column name
that Avro does not allow (``[A-Za-z_][A-Za-z0-9_]*``) by ``_``; :func:`avro_adjusted_name` is that
rule, and :func:`source_names` maps adjusted names back to the source column names.
"""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeGuard

import fastavro

from cdclake.errors import SchemaError
from cdclake.model.types import DECIMAL

MAGIC_BYTE = 0
"""The first byte of a Confluent-framed value."""
HEADER_BYTES = 5
"""Magic byte and schema id: the datum starts at this offset (0-based)."""

_AVRO_TO_CONNECT = {
    "boolean": "boolean",
    "int": "int32",
    "long": "int64",
    "float": "float",
    "double": "double",
    "bytes": "bytes",
    "fixed": "bytes",
    "string": "string",
    "enum": "string",
}
"""Avro type -> the Connect type ``JsonConverter`` names (``float``/``double`` for float32/64);
``connect.type`` (``int8``, ``int16``) refines an Avro ``int``."""

_LOGICAL_TO_CONNECT = {
    "date": "org.apache.kafka.connect.data.Date",
    "time-millis": "org.apache.kafka.connect.data.Time",
    "timestamp-millis": "org.apache.kafka.connect.data.Timestamp",
    "time-micros": "io.debezium.time.MicroTime",
    "timestamp-micros": "io.debezium.time.MicroTimestamp",
}
"""Avro logical types of producers that write no ``connect.name`` -> the semantic type of the
same unit (Confluent's ``AvroData`` maps the millisecond ones so)."""

_AVRO_NAME = re.compile(r"[^A-Za-z0-9_]")

SchemaLookup = Callable[[int], dict[str, Any]]
"""The writer schema (parsed Avro JSON) of a schema id: the schema registry's
:meth:`~cdclake.io.registry.SchemaRegistry.writer_schema`, which raises
:class:`~cdclake.errors.UnknownSchemaIdError` for an id it does not have and
:class:`~cdclake.errors.SchemaRegistryUnavailableError` when it does not answer."""

_DECODE_ERRORS = (EOFError, ValueError, IndexError, OverflowError)
"""What fastavro raises on bytes that are not a datum of the schema: the data ends early
(``EOFError``), a string is not UTF-8 (``UnicodeDecodeError``), a union or enum index is out of
range (``IndexError``)."""

_DECODERS: dict[int, tuple[dict[str, Any], Any, dict[str, Any]]] = {}
"""``id(writer schema) -> (writer schema, fastavro's parsed schema, Connect schema)``: parsing a
schema costs far more than decoding a datum, and a registry hands out the same schema object for
an id (its cache), so each is parsed once. The entry holds the schema object, so its ``id`` is
not reused while the entry lives; checked by identity on each hit."""

_DECODERS_MAX = 256
"""Entries of :data:`_DECODERS` kept before it is emptied (many distinct schema objects: a lookup
that builds a new dict per call)."""


def split_wire(value: bytes) -> tuple[int, bytes]:
    """``(schema id, Avro datum)`` of a Confluent-framed value.

    Raises:
        ValueError: shorter than the 5-byte header, or a first byte other than :data:`MAGIC_BYTE`
            (the message says which).
    """
    if len(value) < HEADER_BYTES:
        raise ValueError(f"value of {len(value)} bytes is shorter than the Confluent wire header (5 bytes)")
    if value[0] != MAGIC_BYTE:
        raise ValueError(f"value starts with byte 0x{value[0]:02x}, not the Confluent wire format's magic byte 0x00")
    return int.from_bytes(value[1:HEADER_BYTES], "big", signed=True), bytes(value[HEADER_BYTES:])


def wire_header(schema_id: int) -> bytes:
    """The 5-byte Confluent wire header of a value of ``schema_id``: :data:`MAGIC_BYTE` and the id
    as a big-endian signed int32 (what :func:`split_wire` reads)."""
    return bytes([MAGIC_BYTE]) + schema_id.to_bytes(HEADER_BYTES - 1, "big", signed=True)


def is_framed(value: bytes | str | None) -> TypeGuard[bytes]:
    """Whether ``value`` starts with :data:`MAGIC_BYTE`: a Confluent-framed value, never a JSON
    document (whose first byte is ``{``, ``[``, a quote, a digit, a letter or white space)."""
    return isinstance(value, (bytes, bytearray)) and value[:1] == bytes([MAGIC_BYTE])


def read_value(value: bytes, lookup: SchemaLookup) -> tuple[int, dict[str, Any], Any]:
    """``(schema id, writer schema, datum)`` of a Confluent-framed Avro value; the datum as
    ``JsonConverter`` writes the same Connect value (:func:`json_datum`): a Debezium envelope is the
    same dict a ``json`` value parses to. Bytes after the datum are ignored (the binary encoding
    knows where a datum ends).

    Raises:
        ValueError: bad framing (:func:`split_wire`), or bytes that do not decode with the writer
            schema (the message names the schema id).
        SchemaError: a writer schema fastavro cannot read, or with no Connect schema
            (:func:`connect_schema`); the message names the schema id.
        UnknownSchemaIdError, SchemaRegistryUnavailableError, SchemaError: from ``lookup``.
    """
    schema_id, body = split_wire(value)
    writer = lookup(schema_id)
    try:
        parsed = _decoder(writer)[1]
    except SchemaError as e:
        raise SchemaError(f"writer schema id {schema_id}: {e}") from e
    try:
        datum = fastavro.schemaless_reader(io.BytesIO(body), parsed, None)
    except _DECODE_ERRORS as e:
        raise ValueError(
            f"Avro datum of {len(body)} bytes does not decode with writer schema id {schema_id} "
            f"({type(e).__name__}: {e})"
        ) from e
    return schema_id, writer, json_datum(datum)


def value_connect_schema(writer: dict[str, Any]) -> dict[str, Any]:
    """:func:`connect_schema` of a writer schema, computed once per schema object (see
    :data:`_DECODERS`). Callers must not modify it: events of one schema share it.

    Raises:
        SchemaError: as :func:`connect_schema`.
    """
    return _decoder(writer)[2]


def _decoder(writer: dict[str, Any]) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    entry = _DECODERS.get(id(writer))
    if entry is None or entry[0] is not writer:
        try:
            parsed = fastavro.parse_schema(without_logical_types(writer))
        except (fastavro.schema.SchemaParseException, ValueError, TypeError, KeyError) as e:
            raise SchemaError(f"not an Avro schema fastavro can read ({type(e).__name__}: {e})") from e
        if len(_DECODERS) >= _DECODERS_MAX:
            _DECODERS.clear()
        entry = (writer, parsed, connect_schema(writer))
        _DECODERS[id(writer)] = entry
    return entry


def without_logical_types(schema: Any) -> Any:
    """The Avro schema with every ``logicalType`` removed: the same binary encoding, decoded to
    the raw primitives (a decimal's unscaled bytes, a timestamp's epoch number), which
    :mod:`cdclake.model.types` decodes by the Connect semantic type instead."""
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if "fields" in schema:
        out["fields"] = [{**f, "type": without_logical_types(f["type"])} for f in schema["fields"]]
    return out


def connect_schema(schema: Any) -> dict[str, Any]:
    """The Connect schema (as ``JsonConverter`` writes it in ``json_with_schema`` events) of an
    Avro writer schema (parsed JSON).

    A ``["null", X]`` union is ``X`` with ``optional: true``; a named type used again (Debezium's
    ``after`` reuses the ``before`` record ``Value``) is resolved by its full name; Connect's
    attributes (``connect.name``, ``connect.parameters``, ``connect.type``, ``connect.version``,
    ``connect.default``) become the Connect schema's ``name``, ``parameters``, ``type``,
    ``version``, ``default`` (a field without ``connect.default``: its Avro ``default``); a
    ``decimal`` logical type without ``connect.name`` is a Connect decimal of its ``precision`` and
    ``scale``.

    Raises:
        SchemaError: a union of two non-null types, or a reference to an undefined name.
    """
    return _connect(schema, {}, None, optional=False)


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _connect(schema: Any, names: dict[str, dict[str, Any]], namespace: str | None, *, optional: bool) -> dict[str, Any]:
    if isinstance(schema, list):
        branches = [s for s in schema if s != "null"]
        if len(branches) != 1:
            raise SchemaError(f"Avro union {schema} has more than one non-null branch (Connect has no such type)")
        return _connect(branches[0], names, namespace, optional=optional or len(branches) < len(schema))
    if isinstance(schema, str):
        if schema in _AVRO_TO_CONNECT:
            return {"type": _AVRO_TO_CONNECT[schema], "optional": optional}
        known = names.get(_full_name(schema, namespace)) or names.get(schema)
        if known is None:
            raise SchemaError(f"Avro schema refers to type {schema!r}, which it does not define")
        return {**known, "optional": optional}
    if not isinstance(schema, dict) or "type" not in schema:
        raise SchemaError(f"not an Avro schema: {schema!r}")
    avro_type = schema["type"]
    if isinstance(avro_type, (list, dict)):
        return _connect(avro_type, names, namespace, optional=optional)
    out: dict[str, Any]
    if avro_type == "record":
        ns = schema.get("namespace", namespace)
        full = _full_name(schema["name"], ns)
        record_ns = full.rsplit(".", 1)[0] if "." in full else None
        out = {"type": "struct", "optional": optional, "fields": []}
        names[full] = out  # before the fields: a field may refer to its own record
        out["fields"] = [_connect_field(f, names, record_ns) for f in schema["fields"]]
    elif avro_type == "array":
        out = {
            "type": "array",
            "optional": optional,
            "items": _connect(schema["items"], names, namespace, optional=False),
        }
    elif avro_type == "map":
        out = {
            "type": "map",
            "optional": optional,
            "keys": {"type": "string", "optional": False},
            "values": _connect(schema["values"], names, namespace, optional=False),
        }
    elif avro_type in _AVRO_TO_CONNECT:
        out = {"type": schema.get("connect.type") or _AVRO_TO_CONNECT[avro_type], "optional": optional}
        if avro_type in ("enum", "fixed") and "name" in schema:
            names[_full_name(schema["name"], schema.get("namespace", namespace))] = {**out, "optional": False}
    else:
        return _connect(avro_type, names, namespace, optional=optional)
    for avro_key, connect_key in (
        ("connect.name", "name"),
        ("connect.version", "version"),
        ("connect.parameters", "parameters"),
        ("connect.default", "default"),
    ):
        if avro_key in schema:
            out[connect_key] = schema[avro_key]
    logical = schema.get("logicalType")
    if "name" not in out and logical == "decimal":
        out["name"] = DECIMAL
        out["parameters"] = {"scale": str(schema.get("scale", 0))}
        if "precision" in schema:
            out["parameters"]["connect.decimal.precision"] = str(schema["precision"])
    elif "name" not in out and logical in _LOGICAL_TO_CONNECT:
        out["name"] = _LOGICAL_TO_CONNECT[logical]
    if out["type"] == "struct" and "name" not in out and avro_type == "record":
        out["name"] = _full_name(schema["name"], schema.get("namespace", namespace))
    return out


def _connect_field(field: dict[str, Any], names: dict[str, dict[str, Any]], namespace: str | None) -> dict[str, Any]:
    """One field of a record as a Connect struct field. Its default is the type's
    ``connect.default`` (Connect's value, as ``JsonConverter`` writes it), else the Avro field's
    non-null ``default`` (a converter without Connect metadata), whose bytes (an Avro JSON string of
    code points 0-255, Avro spec "Schema Declaration") become their base64 text, as Connect's are."""
    out = {**_connect(field["type"], names, namespace, optional=False), "field": field["name"]}
    default = field.get("default")
    if "default" not in out and default is not None:
        if out.get("type") == "bytes" and isinstance(default, str):
            try:
                default = base64.b64encode(default.encode("latin-1")).decode("ascii")
            except UnicodeEncodeError:
                return out  # not an Avro bytes default: left out
        out["default"] = default
    return out


def json_datum(datum: Any) -> Any:
    """A datum decoded with :func:`without_logical_types` as ``JsonConverter`` writes the same
    Connect value: bytes as standard base64 text, records and maps as dicts, arrays as lists."""
    if isinstance(datum, (bytes, bytearray)):
        return base64.b64encode(bytes(datum)).decode("ascii")
    if isinstance(datum, dict):
        return {k: json_datum(v) for k, v in datum.items()}
    if isinstance(datum, list):
        return [json_datum(v) for v in datum]
    return datum


def avro_adjusted_name(name: str) -> str:
    """A name as Debezium's ``avro`` name adjustment writes it (``SchemaNameAdjuster``): each
    character outside ``[A-Za-z0-9_]``, and a leading digit, replaced by ``_``."""
    adjusted = _AVRO_NAME.sub("_", name)
    return "_" + adjusted[1:] if adjusted[:1].isdigit() else adjusted


def source_names(avro_names: Iterable[str], known: Iterable[str]) -> Mapping[str, str]:
    """The source column name of each Avro field name: itself when it is a ``known`` column, else
    the one ``known`` column whose :func:`avro_adjusted_name` it is, else itself (a new column)."""
    known = list(known)
    present = set(known)
    adjusted: dict[str, list[str]] = {}
    for name in known:
        adjusted.setdefault(avro_adjusted_name(name), []).append(name)
    out = {}
    for name in avro_names:
        candidates = adjusted.get(name, [])
        out[name] = name if name in present or len(candidates) != 1 else candidates[0]
    return out
