"""Debezium events in Avro, written here as a Kafka Connect Avro converter writes them: the Connect
schema of a ``json_with_schema`` event turned into an Avro writer schema the way Confluent's
``AvroData`` does (``connect.name``, ``connect.version``, ``connect.parameters``, ``connect.type``,
``connect.default``, the ``decimal`` and millisecond logical types, ``["null", X]`` for optional,
a named record used again referred to by its name), the payload into its datum, and the Confluent
wire format (magic byte 0, 4-byte big-endian schema id, Avro binary). Written from the converter's
behaviour, independently of :mod:`cdclake.model.avro` (which reads it back).

The field names are adjusted as Debezium's ``field.name.adjustment.mode=avro`` does: each character
outside ``[A-Za-z0-9_]``, and a leading digit, becomes ``_``.
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

import fastavro

from cdclake.model.types import DECIMAL

_PRIMITIVE = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "float32": "float",
    "double": "double",
    "float64": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": "date",
    "org.apache.kafka.connect.data.Time": "time-millis",
    "org.apache.kafka.connect.data.Timestamp": "timestamp-millis",
}


def avro_name(name: str) -> str:
    """A field name as Debezium's ``avro`` field name adjustment writes it."""
    adjusted = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return "_" + adjusted[1:] if adjusted[:1].isdigit() else adjusted


def avro_schema(connect: dict[str, Any], defined: set[str] | None = None) -> Any:
    """The Avro writer schema of a Connect schema (``{"type", "optional", "name"?, "parameters"?,
    "fields"?, "version"?, "default"?}``)."""
    defined = set() if defined is None else defined
    ctype, name = connect["type"], connect.get("name")
    out: Any
    if ctype == "struct":
        full = name or "io.confluent.connect.avro.ConnectDefault"
        if full in defined:
            out = full
        else:
            defined.add(full)
            namespace, _, short = full.rpartition(".")
            out = {"type": "record", "name": short}
            if namespace:
                out["namespace"] = namespace
            out["fields"] = [_field(f, defined) for f in connect["fields"]]
            if name:
                out["connect.name"] = name
    elif ctype == "array":
        out = {"type": "array", "items": avro_schema(connect["items"], defined)}
    elif ctype == "map":  # string keys: an Avro map (Connect's other keys are an array of pairs)
        out = {"type": "map", "values": avro_schema(connect["values"], defined)}
    else:
        out = {"type": _PRIMITIVE[ctype]}
        if ctype in ("int8", "int16"):
            out["connect.type"] = ctype
        if name is not None:
            if "version" in connect:
                out["connect.version"] = connect["version"]
            if connect.get("parameters"):
                out["connect.parameters"] = dict(connect["parameters"])
            if "default" in connect:
                out["connect.default"] = connect["default"]
            out["connect.name"] = name
            if name == DECIMAL:
                params = connect["parameters"]
                out["scale"] = int(params["scale"])
                out["precision"] = int(params.get("connect.decimal.precision", 64))
                out["logicalType"] = "decimal"
            elif name in _LOGICAL:
                out["logicalType"] = _LOGICAL[name]
        if len(out) == 1:
            out = out["type"]
    return ["null", out] if connect.get("optional") else out


def _field(connect: dict[str, Any], defined: set[str]) -> dict[str, Any]:
    field: dict[str, Any] = {"name": avro_name(connect["field"]), "type": avro_schema(connect, defined)}
    if connect.get("default") is not None:
        # a default puts its branch first in the union (Avro: a union's default is of its first branch)
        if connect.get("optional"):
            field["type"] = field["type"][::-1]
        field["default"] = connect["default"]
    elif connect.get("optional"):
        field["default"] = None
    return field


def avro_datum(connect: dict[str, Any], value: Any) -> Any:
    """The Avro datum of a ``JsonConverter`` JSON value of the Connect schema (bytes from their
    base64 text, field names adjusted)."""
    if value is None:
        return None
    if connect["type"] == "struct":
        fields = {f["field"]: f for f in connect["fields"]}
        return {avro_name(k): avro_datum(fields[k], v) for k, v in value.items() if k in fields}
    if connect["type"] == "bytes":
        return base64.b64decode(value)
    if connect["type"] == "array":
        return [avro_datum(connect["items"], v) for v in value]
    if connect["type"] == "map":
        return {k: avro_datum(connect["values"], v) for k, v in value.items()}
    return value


def confluent_value(schema_id: int, schema: Any, datum: Any) -> bytes:
    """The Confluent wire format of ``datum``: magic byte 0, the schema id, the Avro binary."""
    out = io.BytesIO()
    out.write(b"\x00" + schema_id.to_bytes(4, "big", signed=True))
    # logical types off: the datum holds the raw values (decimal bytes, epoch numbers), as the
    # converter encodes them
    fastavro.schemaless_writer(out, fastavro.parse_schema(_raw(schema)), datum)
    return out.getvalue()


def avro_event(schema_id: int, event: dict[str, Any]) -> tuple[Any, bytes]:
    """``(Avro writer schema, Confluent-framed value)`` of a ``json_with_schema`` event
    (``{"schema", "payload"}``)."""
    schema = avro_schema(event["schema"])
    return schema, confluent_value(schema_id, schema, avro_datum(event["schema"], event["payload"]))


def _raw(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_raw(s) for s in schema]
    if isinstance(schema, dict):
        return {k: _raw(v) for k, v in schema.items() if k != "logicalType"}
    return schema
