"""Unit tests for Avro values record by record: :mod:`cdclake.model.avro` (the writer schema read as
the Connect schema, the datum as JSON) and ``value_format: avro`` in
:func:`cdclake.model.envelope.parse_value`, on the Avro values Flink captured from Debezium and on
captured JSON events written as Kafka Connect's Avro converter writes them
(:mod:`tests.avro_events`): both formats must give the same events. The registry is a dict here
(its client is tested against a real registry in tests/integration/test_schema_registry.py),
except where a real port with nothing listening is the fault."""

from __future__ import annotations

import http.server
import io
import json
import struct
import threading
from pathlib import Path

import fastavro
import pytest

from cdclake.errors import (
    BadRecordError,
    ConfigError,
    SchemaRegistryUnavailableError,
    UnknownSchemaIdError,
)
from cdclake.io.events import read_event_file
from cdclake.io.registry import SchemaRegistry
from cdclake.model.avro import connect_schema, read_value
from cdclake.model.envelope import KafkaCoordinates, parse_value
from cdclake.model.snapshot import match_notification, parse_notification
from cdclake.model.types import columns_from_connect
from cdclake_dev.process import free_port
from tests.avro_events import avro_event
from tests.conftest import DebeziumFiles
from tests.full_types import events_with_schema

FIXTURES = DebeziumFiles()
FLINK_SCHEMA = json.loads((FIXTURES / "flink/debezium-test-schema.json").read_text())
FLINK_SCHEMA_ID = 81
"""The schema id of Flink's three captured values (their README)."""
WHERE = KafkaCoordinates("fullfillment.test1.person", 3, 1207)


def captured(op: str) -> bytes:
    return (FIXTURES / f"flink/debezium-avro-{op}.avro").read_bytes()


def lookup_of(schemas: dict[int, dict]):
    """A schema registry's ``writer_schema`` over ``schemas``: an unknown id raises as the
    registry's client does."""

    def lookup(schema_id: int) -> dict:
        if schema_id not in schemas:
            raise UnknownSchemaIdError(schema_id, "schema registry http://registry.test (a dict)")
        return schemas[schema_id]

    return lookup


FLINK_LOOKUP = lookup_of({FLINK_SCHEMA_ID: FLINK_SCHEMA})


def test_flink_writer_schema_reads_as_the_connect_schema_of_its_events():
    schema = connect_schema(FLINK_SCHEMA)
    fields = {f["field"]: f for f in schema["fields"]}
    assert schema["type"] == "struct" and schema["name"] == "fullfillment.test1.person.Envelope"
    before, after = fields["before"], fields["after"]
    # `after` refers to the record `Value` that `before` defines: the same struct, both optional
    assert before == {**after, "field": "before"} and before["optional"] is True
    assert before["name"] == "fullfillment.test1.person.Value"
    assert [(f["field"], f["type"], f["optional"]) for f in before["fields"]] == [
        ("id", "int64", False),
        ("name", "string", True),
        ("description", "string", True),
        ("weight", "double", True),
    ]
    source = {f["field"]: f for f in fields["source"]["fields"]}
    assert fields["source"]["name"] == "io.debezium.connector.mysql.Source"
    # ["<Enum string>", "null"]: the non-null branch first, still optional; Connect's attributes kept
    assert source["snapshot"] == {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "version": 1,
        "parameters": {"allowed": "true,last,false"},
        "default": "false",
        "field": "snapshot",
    }
    assert (fields["op"]["type"], fields["ts_ms"]["optional"]) == ("string", True)
    assert [c.name for c in columns_from_connect(before)] == ["id", "name", "description", "weight"]


def test_captured_flink_avro_values_parse_with_the_registry():
    events = [
        parse_value(captured(op), "avro", WHERE, schema_lookup=FLINK_LOOKUP) for op in ("insert", "update", "delete")
    ]
    assert [e.op for e in events] == ["c", "u", "d"]
    row = {"id": 1, "name": "lisi", "description": "test debezium avro data", "weight": 21.799999237060547}
    assert events[0].before is None and events[0].after == row
    assert events[1].before == row and events[1].after == {**row, "name": "zhangsan"}
    assert events[2].before == {**row, "name": "zhangsan"} and events[2].after is None
    assert [(e.position.file_seq, e.position.pos) for e in events] == [
        (5, 213795),
        (5, 214095),
        (5, 214438),
    ]
    assert events[0].source["snapshot"] == "false" and events[0].ts_ms == 1599207472705
    # the row schema is the writer schema's `Value` record read as a Connect struct
    assert [f["field"] for f in events[2].row_schema()["fields"]] == ["id", "name", "description", "weight"]


def test_the_captured_values_trailing_byte_is_ignored():
    """Each Flink file ends with one 0x0A after the datum (README): the datum decodes without it."""
    value = captured("insert")
    assert value[-1:] == b"\n"
    assert read_value(value, FLINK_LOOKUP) == read_value(value[:-1], FLINK_LOOKUP)


@pytest.mark.parametrize(
    "path", ["flink/debezium-data-schema-include.txt", "risingwave/debezium_log.1", "flink-cdc/full_types"]
)
def test_avro_events_parse_to_the_events_of_their_json(path):
    """Captured json_with_schema events written as Kafka Connect's Avro converter writes them
    (``full_types``: every MySQL type, decimals, temporal types, bytes, geometry structs):
    ``parse_value`` gives the same op, images, source, position, ts_ms, and the same row columns.
    A FLOAT (Connect ``float``, Avro ``float``) is the same 32-bit value: JsonConverter prints it
    shortest (``123.102``), Avro decodes it widened (``123.10199737548828``)."""
    if path == "flink-cdc/full_types":
        values = events_with_schema((FIXTURES / "flink-cdc").parent, "debezium-data-schema-include.json")
    else:
        values = read_event_file(FIXTURES / path)
    for i, value in enumerate(values):
        where = KafkaCoordinates(path, 0, i)
        as_json = parse_value(value, "json_with_schema", where)
        schema, framed = avro_event(100 + i, json.loads(value))
        as_avro = parse_value(framed, "avro", where, schema_lookup=lookup_of({100 + i: schema}))
        assert (as_avro.op, as_avro.position, as_avro.ts_ms) == (as_json.op, as_json.position, as_json.ts_ms), where
        row_schema = as_json.row_schema()
        for image in ("before", "after"):
            assert float32(getattr(as_avro, image), row_schema) == float32(getattr(as_json, image), row_schema), where
        # the source fields the writer schema has (a fixture's Connect schema may list fewer)
        assert as_avro.source == {k: as_json.source.get(k) for k in as_avro.source}, where
        assert columns_from_connect(as_avro.row_schema()) == columns_from_connect(row_schema), where


def float32(row: dict | None, row_schema: dict) -> dict | None:
    """``row`` with the values of its Connect ``float`` (32-bit) fields rounded to 32 bits."""
    if row is None:
        return None
    floats = {f["field"] for f in row_schema["fields"] if f["type"] == "float"}
    return {
        k: struct.unpack("f", struct.pack("f", v))[0] if k in floats and v is not None else v for k, v in row.items()
    }


def test_avro_value_that_cannot_be_read_is_a_bad_record_naming_where_and_the_schema_id():
    value = captured("insert")
    with pytest.raises(BadRecordError, match=r"offset 1207: .*byte 0x7b, not .* magic byte 0x00"):
        parse_value(b'{"op": "c"}', "avro", WHERE, schema_lookup=FLINK_LOOKUP)
    with pytest.raises(BadRecordError, match=r"offset 1207: .*shorter than the Confluent wire header"):
        parse_value(b"\x00\x00", "avro", WHERE, schema_lookup=FLINK_LOOKUP)
    with pytest.raises(BadRecordError, match=r"partition 3 offset 1207: .*no schema of id 82") as unknown:
        parse_value(value[:4] + b"\x52" + value[5:], "avro", WHERE, schema_lookup=FLINK_LOOKUP)
    assert isinstance(unknown.value.__cause__, UnknownSchemaIdError) and unknown.value.__cause__.schema_id == 82
    with pytest.raises(BadRecordError, match=r"offset 1207: .*does not decode with writer schema id 81"):
        parse_value(value[:40], "avro", WHERE, schema_lookup=FLINK_LOOKUP)
    with pytest.raises(BadRecordError, match="not Confluent-framed Avro"):
        parse_value(value.decode("latin-1"), "avro", WHERE, schema_lookup=FLINK_LOOKUP)
    assert parse_value(None, "avro", WHERE) is None  # a Kafka tombstone needs no registry


def test_avro_value_without_a_registry_says_how_to_configure_one():
    with pytest.raises(ConfigError, match=r"offset 1207: .*'schema_registry'.*CDCLAKE_SCHEMA_REGISTRY_URL"):
        parse_value(captured("insert"), "avro", WHERE)

    def wrong_url(schema_id: int) -> dict:
        raise ConfigError("schema registry http://registry.test answered HTTP 404 (error code -1)")

    # a registry URL that is not a registry's API is the config's fault, never the record's
    with pytest.raises(ConfigError, match="HTTP 404"):
        parse_value(captured("insert"), "avro", WHERE, schema_lookup=wrong_url)
    with pytest.raises(ConfigError, match="HTTP 404"):
        parse_notification(captured("insert"), wrong_url)


def test_registry_that_does_not_answer_is_unavailable_not_a_bad_record():
    """A real port with nothing listening: the client's connection is refused; the error is
    transient (a ``ConnectionError``: the task's retry reads the record again), and the message
    names the registry without its credentials."""
    port = free_port()
    registry = SchemaRegistry(
        {"url": f"http://reader:s3cret@127.0.0.1:{port}/apis/ccompat/v7", "max.retries": 0},
        origin="Airflow connection 'schema_registry'",
    )
    assert registry.describe() == f"http://127.0.0.1:{port}/apis/ccompat/v7"
    with pytest.raises(SchemaRegistryUnavailableError, match="does not answer reading schema id 81") as down:
        parse_value(captured("insert"), "avro", WHERE, schema_lookup=registry.writer_schema)
    assert isinstance(down.value, ConnectionError)
    assert "s3cret" not in str(down.value) and "'schema_registry'" in str(down.value)


class _Refusing(http.server.BaseHTTPRequestHandler):
    """A registry stand-in answering every request with the status its path's last number names
    (``.../schemas/ids/401`` -> 401, ``/subjects/503/versions`` -> 503; 404 with Confluent's
    "Schema not found", 40403, or for a subject "Subject not found", 40401): a refusal of
    credentials and a server error cannot be made with the tests' real registry, which has no
    authentication."""

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        status = int(next(part for part in reversed(path.split("/")) if part.isdigit()))
        code = (40401 if "/subjects/" in path else 40403) if status == 404 else status * 100 + 1
        body = json.dumps({"error_code": code, "message": "refused"}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stand_in():
    """The URL of a running :class:`_Refusing` registry stand-in."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Refusing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("status", "message"),
    [(401, "refused the credentials .*HTTP 401.* of Airflow connection 'schema_registry'"), (503, "HTTP 503")],
)
def test_registry_refusing_credentials_or_failing_is_unavailable(stand_in, status, message):
    registry = SchemaRegistry(
        {"url": stand_in, "basic.auth.user.info": "reader:s3cret", "max.retries": 0},
        origin="Airflow connection 'schema_registry'",
    )
    with pytest.raises(SchemaRegistryUnavailableError, match=message) as refused:
        registry.writer_schema(status)
    assert "s3cret" not in str(refused.value)
    # the apply's first request: the versions of the topic's subject
    with pytest.raises(SchemaRegistryUnavailableError, match=message) as refused:
        registry.subject_schemas(str(status), 3)
    assert f"listing the versions of subject '{status}'" in str(refused.value) and "s3cret" not in str(refused.value)


def test_a_subject_the_registry_does_not_have_is_none_not_an_error(stand_in):
    registry = SchemaRegistry({"url": stand_in, "max.retries": 0})
    assert registry.subject_schemas("404", 3) is None


def test_an_unknown_schema_id_names_the_registry_once(stand_in):
    registry = SchemaRegistry({"url": stand_in, "max.retries": 0}, origin="Airflow connection 'schema_registry'")
    with pytest.raises(UnknownSchemaIdError) as unknown:
        registry.writer_schema(404)
    assert str(unknown.value) == (
        f"schema registry {stand_in} (Airflow connection 'schema_registry') has no schema of id 404: the record "
        "was written against another registry, or its schema was deleted"
    )


def test_registry_config_refused_names_the_origin_never_the_secret():
    with pytest.raises(ConfigError, match="has no 'url'"):
        SchemaRegistry({"basic.auth.user.info": "reader:s3cret"})
    with pytest.raises(ConfigError, match=r"CDCLAKE_SCHEMA_REGISTRY_URL .*Unrecognized properties: bogus") as bad:
        SchemaRegistry({"url": "http://reader:s3cret@registry.test", "bogus": "1"}, "CDCLAKE_SCHEMA_REGISTRY_URL")
    assert "s3cret" not in str(bad.value)


NOTIFICATIONS = Path(__file__).resolve().parents[1] / "data" / "chain" / "notifications.jsonl"
"""Debezium's notifications of a real snapshot (JsonConverter, with schema)."""


class _Message:
    def __init__(self, value: bytes) -> None:
        self._value = value

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return 5


def test_avro_notifications_read_as_their_json():
    """The recorded notifications written as the Avro converter writes them: the same
    notifications, and the bootstrap wait fires on the same one."""
    recorded = [json.loads(line)["value"] for line in NOTIFICATIONS.read_text().splitlines() if line.strip()]
    schemas, framed = {}, []
    for i, value in enumerate(recorded):
        schemas[i], avro_value = avro_event(i, json.loads(value))
        framed.append(avro_value)
    lookup = lookup_of(schemas)
    assert [parse_notification(v, lookup) for v in framed] == [parse_notification(v) for v in recorded]
    sid = next(n.id for n in map(parse_notification, recorded) if n.id.startswith("cdclake-execute-"))
    kw = {"signal_ids": [sid], "snapshot_type": "incremental", "since_ms": 0, "data_collections": []}
    fired = [match_notification(_Message(v), **kw, schema_lookup=lookup) for v in framed]
    assert [f["type"] for f in fired if f] == ["COMPLETED"]
    assert parse_notification(framed[0], lookup_of({})) is None  # unreadable: not a notification
    with pytest.raises(ConfigError, match="notifications are Avro.*CDCLAKE_SCHEMA_REGISTRY_URL"):
        parse_notification(framed[0])


def test_decoding_uses_the_writer_schema_without_logical_types():
    """A Connect decimal and timestamp decode to the raw unscaled bytes (base64, as JsonConverter
    writes them) and epoch number that the Connect semantic types decode."""
    schema = {
        "type": "record",
        "name": "Value",
        "fields": [
            {
                "name": "price",
                "type": {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": 8,
                    "scale": 4,
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "connect.parameters": {"scale": "4", "connect.decimal.precision": "8"},
                },
            },
            {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        ],
    }
    out = io.BytesIO()
    raw_schema = {
        "type": "record",
        "name": "Raw",
        "fields": [{"name": "price", "type": "bytes"}, {"name": "at", "type": "long"}],
    }
    raw = {"price": (1234567).to_bytes(3, "big", signed=True), "at": 1599207472705}
    fastavro.schemaless_writer(out, fastavro.parse_schema(raw_schema), raw)
    value = b"\x00" + (5).to_bytes(4, "big") + out.getvalue()
    assert read_value(value, lookup_of({5: schema}))[2] == {"price": "EtaH", "at": 1599207472705}
