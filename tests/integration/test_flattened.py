"""Flattened change events (Debezium's ``ExtractNewRecordState``, issue 55) on a real broker, Spark
and catalog: the same history lands the same rows flattened (JSON with and without schema, Avro
through a real registry) as in Debezium's envelopes, positions and all (a re-emitted event older
than a delete brings no row back); a record without the fields its ordering needs is a bad record
naming the field and the remedy; tombstone deletes under ``ordering: kafka``."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import QuarantinedBatchError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic, produce
from cdclake.io.registry import SchemaRegistry
from cdclake.model.flattened import TRANSFORM_FIELDS
from cdclake.model.layout import QUARANTINE_SUFFIX
from cdclake.pipeline.planner import plan_next
from cdclake.spark.apply import apply_range
from tests.avro_events import avro_datum, avro_schema, confluent_value
from tests.conftest import make_table
from tests.flattening import TOMBSTONE, flatten

pytestmark = pytest.mark.integration


def _f(name: str, ctype: str, *, optional: bool = True) -> dict:
    return {"type": ctype, "optional": optional, "field": name}


ROW = {
    "type": "struct",
    "optional": True,
    "name": "srv.db.tbl.Value",
    "fields": [_f("id", "int32", optional=False), _f("v", "string"), _f("n", "int64")],
}
SOURCE = {
    "type": "struct",
    "optional": False,
    "field": "source",
    "name": "io.debezium.connector.mysql.Source",
    "fields": [
        _f("connector", "string", optional=False),
        _f("name", "string", optional=False),
        _f("ts_ms", "int64", optional=False),
        _f("snapshot", "string"),
        _f("db", "string", optional=False),
        _f("table", "string"),
        _f("server_id", "int64", optional=False),
        _f("gtid", "string"),
        _f("file", "string", optional=False),
        _f("pos", "int64", optional=False),
        _f("row", "int32", optional=False),
    ],
}
ENVELOPE = {
    "type": "struct",
    "optional": False,
    "name": "srv.db.tbl.Envelope",
    "fields": [
        dict(ROW, field="before"),
        dict(ROW, field="after"),
        SOURCE,
        _f("op", "string", optional=False),
        _f("ts_ms", "int64"),
    ],
}


def event(op: str, key: int, v: str | None, pos: int, *, n: int | None = None, row: int = 0) -> dict:
    image = {"id": key, "v": v, "n": n}
    source = {
        "connector": "mariadb",
        "name": "srv",
        "ts_ms": 1_700_000_000_000 + pos,
        "snapshot": "true" if op == "r" else "false",
        "db": "db",
        "table": "tbl",
        "server_id": 1,
        "gtid": None,
        "file": "mysql-bin.000003",
        "pos": pos,
        "row": row,
    }
    payload = {
        "before": image if op in ("u", "d") else None,
        "after": image if op in ("c", "u", "r") else None,
        "source": source,
        "op": op,
        "ts_ms": 1_700_000_000_500 + pos,
    }
    return {"schema": ENVELOPE, "payload": payload}


# (key, event) in Kafka order: a snapshot read, creates, an update, a delete, a primary-key change
# (Debezium: a delete of the old key, then a create of the new one), then the connector re-emits
# events older than the delete (a restart before its offset flush): the row guard keeps 2 deleted
HISTORY = [
    (1, event("r", 1, "snap", 100)),
    (2, event("c", 2, "b", 200, n=7)),
    (3, event("c", 3, "c", 210)),
    (1, event("u", 1, "a2", 300, n=1)),
    (2, event("d", 2, "b", 400, n=7)),
    (3, event("d", 3, "c", 500)),
    (30, event("c", 30, "c", 500, row=1)),
    (2, event("c", 2, "b", 200, n=7)),  # re-emitted: below its delete's position
    (4, event("c", 4, "d", 600)),
]
EXPECTED = {1: ("a2", 1), 4: ("d", None), 30: ("c", None)}


def _key(k: int) -> bytes:
    return json.dumps({"id": k}).encode()


def _rows(settings, cfg) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: (r["v"], r["n"]) for r in arrow.to_pylist()}


def _meta(settings, cfg) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: (r["_cdc_op"], r["_cdc_binlog_pos"], r["_cdc_snapshot"]) for r in arrow.to_pylist()}


def _apply(spark, settings, cfg, clients) -> object:
    plan = plan_next(load_catalog(settings), clients, cfg, "flattened-run")
    return apply_range(spark, settings, plan, kafka=clients)


def _flat_value(cfg, flat: dict, registry, ids: dict) -> bytes:
    if cfg.value_format == "json":
        return json.dumps(flat["payload"]).encode()
    if cfg.value_format == "json_with_schema":
        return json.dumps(flat).encode()
    from confluent_kafka.schema_registry import Schema

    schema = avro_schema(flat["schema"])
    text = json.dumps(schema, sort_keys=True)
    if text not in ids:
        ids[text] = registry.register_schema(f"{cfg.topic}-value", Schema(json.dumps(schema), "AVRO"))
    return confluent_value(ids[text], schema, avro_datum(flat["schema"], flat["payload"]))


def test_a_flattened_history_lands_the_rows_of_its_envelopes(spark, kafka, schema_registry, stack_settings):
    """The history flattened with the contract's ``add.fields`` and ``rewrite`` deletes, in JSON
    with schema, JSON without and Avro, lands the rows, ops, positions and snapshot flags of the
    same history in envelopes, over two runs; with every table column typed from the flattened
    record's schema (JSON with schema, Avro)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    flat_cfgs = [
        make_table(value_format=value_format, columns=columns, flattened={})
        for value_format, columns in (
            ("json_with_schema", None),
            ("json", {"id": "int", "v": "string", "n": "long"}),
            ("avro", None),
        )
    ]
    envelope_cfg = make_table(value_format="json_with_schema")
    registry = SchemaRegistryClient({"url": schema_registry})
    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))
    ids: dict = {}
    for cfg in (*flat_cfgs, envelope_cfg):
        ensure_topic(kafka, cfg.topic, 1)
    for half in (HISTORY[:5], HISTORY[5:]):
        for flat_cfg in flat_cfgs:
            flat_records = []
            for k, e in half:
                flat = flatten(e, TRANSFORM_FIELDS)
                assert isinstance(flat, dict)
                flat_records.append((_key(k), _flat_value(flat_cfg, flat, registry, ids), None))
            produce(kafka, flat_cfg.topic, flat_records)
        produce(kafka, envelope_cfg.topic, [(_key(k), json.dumps(e).encode(), None) for k, e in half])
        for cfg in (*flat_cfgs, envelope_cfg):
            result = _apply(spark, stack_settings, cfg, clients)
            assert result.quarantined == 0, cfg.value_format
    assert _rows(stack_settings, envelope_cfg) == EXPECTED
    for flat_cfg in flat_cfgs:
        assert _rows(stack_settings, flat_cfg) == EXPECTED, flat_cfg.value_format
        assert _meta(stack_settings, flat_cfg) == _meta(stack_settings, envelope_cfg), flat_cfg.value_format
    assert _meta(stack_settings, envelope_cfg)[30] == ("c", 500, False)


@pytest.mark.parametrize("value_format", ["json", "avro"])
def test_a_flattened_record_without_its_position_fields_is_a_bad_record_naming_the_field(
    spark, kafka, schema_registry, stack_settings, value_format
):
    """Flattened without ``source.file``/``source.pos`` in ``add.fields``: under ``ordering:
    binlog`` every record is a bad record naming the missing field, the setting and the remedy,
    and a run whose every record is so fails as an all-quarantined run does; nothing is lost (the
    quarantine holds them). Under ``ordering: kafka`` the same records apply in Kafka order."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    columns = {"id": "int", "v": "string", "n": "long"}
    registry = SchemaRegistryClient({"url": schema_registry})
    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))
    ids: dict = {}
    binlog = make_table(value_format=value_format, columns=columns, flattened={})
    kafka_ordered = make_table(value_format=value_format, columns=columns, flattened={}, ordering="kafka")
    # the Kafka-ordered apply once (JSON): the Avro parse's part is the missing field's error
    for cfg in (binlog, kafka_ordered) if value_format == "json" else (binlog,):
        ensure_topic(kafka, cfg.topic, 1)
        records = []
        for k, e in HISTORY[1:5]:
            flat = flatten(e, "op,source.ts_ms")
            assert isinstance(flat, dict)
            records.append((_key(k), _flat_value(cfg, flat, registry, ids), None))
        produce(kafka, cfg.topic, records)
    with pytest.raises(QuarantinedBatchError, match="all 4 record"):
        _apply(spark, stack_settings, binlog, clients)
    quarantine = load_catalog(stack_settings).load_table(binlog.identifier + QUARANTINE_SUFFIX).scan().to_arrow()
    errors = set(quarantine.column("error").to_pylist())
    assert len(errors) == 1 and quarantine.num_rows == 4
    (error,) = errors
    assert error.startswith("flattened record has no '__source_file', which ordering: binlog needs: add source.file")
    assert error.endswith("or set ordering: kafka")
    if value_format == "json":
        _apply(spark, stack_settings, kafka_ordered, clients)
        assert _rows(stack_settings, kafka_ordered) == {1: ("a2", 1), 3: ("c", None)}


def test_tombstone_deletes_of_a_flattened_topic_delete_in_kafka_order(spark, kafka, stack_settings):
    """``delete.tombstone.handling.mode=tombstone``: a delete is a Kafka tombstone alone. Under
    ``ordering: kafka`` each deletes its key's row written before it in its partition; a key
    written again after its tombstone stays."""
    cfg = make_table(
        value_format="json",
        columns={"id": "int", "v": "string", "n": "long"},
        ordering="kafka",
        flattened={"deletes": "tombstone"},
    )
    ensure_topic(kafka, cfg.topic, 1)
    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap)
    records = []
    for k, e in [*HISTORY[1:4], (2, event("d", 2, "b", 400)), (5, event("c", 5, "x", 700))]:
        flat = flatten(e, "op,source.ts_ms", deletes="tombstone")
        records.append((_key(k), None if flat == TOMBSTONE else json.dumps(flat["payload"]).encode(), None))  # type: ignore[index]
    produce(kafka, cfg.topic, records[:3])
    _apply(spark, stack_settings, cfg, clients)
    assert _rows(stack_settings, cfg) == {1: ("a2", 1), 2: ("b", 7), 3: ("c", None)}
    produce(
        kafka,
        cfg.topic,
        [
            *records[3:],
            (_key(3), None, None),
            (_key(3), json.dumps({"id": 3, "v": "again", "n": None, "__op": "c"}).encode(), None),
        ],
    )
    _apply(spark, stack_settings, cfg, clients)
    assert _rows(stack_settings, cfg) == {1: ("a2", 1), 3: ("again", None), 5: ("x", None)}
