"""The schema registry client (:mod:`cdclake.io.registry`) against a real registry (Apicurio's
Confluent-compatible API, the tests' ``schema_registry``) and Avro records on a real broker: writer
schemas by id, an unknown id, a URL that is not a registry's API; the Kafka clients' registry
reaching the readers of the Debezium topics (data events, the schema-change topic, the
notification topic), which read Avro records as the same events as their JSON."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest

from cdclake.errors import ConfigError, UnknownSchemaIdError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic
from cdclake.io.registry import SchemaRegistry
from cdclake.model.avro import connect_schema
from cdclake.model.envelope import KafkaCoordinates, parse_value
from cdclake.pipeline.schema_sync import read_schema_changes
from cdclake.pipeline.snapshot import read_notifications
from tests.avro_events import avro_datum, avro_schema, confluent_value
from tests.conftest import DebeziumFiles

pytestmark = pytest.mark.integration

FIXTURES = DebeziumFiles()
CHAIN = Path(__file__).resolve().parents[1] / "data" / "chain"
FLINK_SCHEMA = json.loads((FIXTURES / "flink/debezium-test-schema.json").read_text())


def register(url: str, subject: str, schema: dict) -> int:
    """The id of ``schema`` registered under ``subject`` (``POST /subjects/<s>/versions``)."""
    response = httpx.post(
        f"{url}/subjects/{subject}/versions",
        json={"schema": json.dumps(schema)},
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    assert response.status_code == 200, response.text
    return int(response.json()["id"])


def as_avro(url: str, subject: str, value: str | None) -> bytes | None:
    """A recorded ``json_with_schema`` value as Kafka Connect's Avro converter writes it through the
    registry: its schema registered, the datum behind the Confluent header."""
    if value is None:
        return None
    event = json.loads(value)
    schema = avro_schema(event["schema"])
    return confluent_value(register(url, subject, schema), schema, avro_datum(event["schema"], event["payload"]))


def recorded(name: str) -> list[str | None]:
    lines = [json.loads(line) for line in (CHAIN / name).read_text().splitlines() if line.strip()]
    return [r["value"] for r in sorted(lines, key=lambda r: (r["partition"], r["offset"]))]


def send(kafka: KafkaClients, topic: str, values: list[bytes | str | None]) -> None:
    ensure_topic(kafka, topic, 1)
    producer = kafka.producer()
    for value in values:
        producer.produce(topic, value=value.encode() if isinstance(value, str) else value)
    assert producer.flush(30) == 0


def test_writer_schemas_by_id_from_a_real_registry(schema_registry: str):
    registry = SchemaRegistry({"url": schema_registry}, origin="the test")
    schema_id = register(schema_registry, f"flink-{uuid.uuid4().hex[:8]}-value", FLINK_SCHEMA)
    # Apicurio keeps Connect's attributes: the same Connect schema as the captured writer schema's
    assert connect_schema(registry.writer_schema(schema_id)) == connect_schema(FLINK_SCHEMA)
    assert registry.writer_schema(schema_id) is registry.writer_schema(schema_id)  # cached
    captured = (FIXTURES / "flink/debezium-avro-update.avro").read_bytes()
    framed = b"\x00" + schema_id.to_bytes(4, "big") + captured[5:]
    where = KafkaCoordinates("fullfillment.test1.person", 0, 9)
    event = parse_value(framed, "avro", where, schema_lookup=registry.writer_schema)
    assert (event.op, event.before["name"], event.after["name"]) == ("u", "lisi", "zhangsan")

    with pytest.raises(UnknownSchemaIdError, match=f"no schema of id {schema_id + 1000}") as unknown:
        registry.writer_schema(schema_id + 1000)
    assert unknown.value.schema_id == schema_id + 1000
    # the server's root instead of its Confluent-compatible API: a wrong URL, not an unknown id
    root = schema_registry.removesuffix("/apis/ccompat/v7")
    with pytest.raises(ConfigError, match="HTTP 404.*apis/ccompat/v7"):
        SchemaRegistry({"url": root}).writer_schema(schema_id)


def test_a_subjects_newest_versions_give_their_writer_schemas(schema_registry: str):
    """``subject_schemas``: the ids and writer schemas of a subject's newest versions, as
    ``writer_schema`` gives them by id; ``None`` for a subject the registry does not have."""
    registry = SchemaRegistry({"url": schema_registry}, origin="the test")
    subject = f"orders-{uuid.uuid4().hex[:8]}-value"
    versions = []
    for k in range(4):
        schema = {**FLINK_SCHEMA, "fields": [*FLINK_SCHEMA["fields"], {"name": f"extra{k}", "type": "string"}]}
        versions.append(register(schema_registry, subject, schema))
    newest = registry.subject_schemas(subject, 3)
    assert newest is not None and sorted(newest) == sorted(versions[1:])
    for schema_id, schema in newest.items():
        assert schema == SchemaRegistry({"url": schema_registry}).writer_schema(schema_id)
        assert registry.writer_schema(schema_id) is schema  # cached for the reads by id
    assert sorted(registry.subject_schemas(subject, 10) or {}) == sorted(versions)
    assert registry.subject_schemas(f"nothing-{uuid.uuid4().hex[:8]}-value", 3) is None


def test_avro_topics_read_through_the_kafka_clients_registry(schema_registry: str, kafka, stack_settings):
    """The recorded schema-change and notification records, once as JSON and once as Avro on
    topics of their own: the schema-change index and the notification reader, given the Kafka
    clients with the registry, read the same changes and notifications from both."""
    registry = SchemaRegistry({"url": schema_registry})
    with_registry = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, registry)
    run = uuid.uuid4().hex[:8]
    changes_json, changes_avro = f"scj{run}", f"sca{run}"
    values = recorded("schema-changes.jsonl")
    send(kafka, changes_json, values)
    send(kafka, changes_avro, [as_avro(schema_registry, f"{changes_avro}-value", v) for v in values])
    catalog = load_catalog(stack_settings)
    for table_id in ('"inventory"."orders"', '"inventory"."accounts"'):
        from_json = read_schema_changes(catalog, kafka, changes_json, table_id)
        assert from_json and read_schema_changes(catalog, with_registry, changes_avro, table_id) == from_json
    # without a registry, an Avro schema-change topic says how to configure one
    unread = f"scn{run}"
    send(kafka, unread, [as_avro(schema_registry, f"{unread}-value", values[-1])])
    with pytest.raises(ConfigError, match=f"{unread}.*holds Avro values.*CDCLAKE_SCHEMA_REGISTRY_URL"):
        read_schema_changes(catalog, kafka, unread, '"inventory"."orders"')

    notes_json, notes_avro = f"ntj{run}", f"nta{run}"
    notes = recorded("notifications.jsonl")
    send(kafka, notes_json, notes)
    send(kafka, notes_avro, [as_avro(schema_registry, f"{notes_avro}-value", v) for v in notes])
    assert read_notifications(with_registry, notes_avro) == read_notifications(kafka, notes_json)
