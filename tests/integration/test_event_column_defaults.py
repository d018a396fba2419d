"""A column added with a default to a populated source table, for tables that evolve from their
events' own schemas (``schema_changes.source: events``), on a real broker, Spark and Iceberg: the
rows written before the column read the default its field carries in the events' schema (as the
source reads it: ``ADD COLUMN ... DEFAULT`` fills them with no row event), the rows written after
it their own values, and deleted rows stay deleted (``cdclake.spark.evolve``, "_defaults_property")."""

from __future__ import annotations

import json
import uuid

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic
from cdclake.io.registry import SchemaRegistry
from cdclake.model.layout import COLUMN_DEFAULTS_PROPERTY
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.model.position import BinlogPosition
from cdclake.spark.apply import apply_range
from tests.avro_events import avro_datum, avro_schema, confluent_value
from tests.conftest import make_table
from tests.integration.test_schema_sync import evolved_event, orders_template

pytestmark = pytest.mark.integration

TAG = ("active", {"type": "string", "optional": False, "field": "tag", "default": "abc"})
"""``ALTER TABLE orders ADD COLUMN tag VARCHAR(8) NOT NULL DEFAULT 'abc'``, as the events' Connect
row schema shows it from then on (``JsonConverter`` writes the column's default as ``default``)."""
RANK = ("tag", {"type": "int32", "optional": True, "field": "rank", "default": 3})
"""``... ADD COLUMN rank INT NULL DEFAULT 3``, by a second ALTER of the same batch."""


def event(pos: int, row: dict, *, op: str = "c", add=()) -> tuple[str, str]:
    """``(key, value)`` of an orders event at binlog ``pos``: a create, update (``u``) or delete
    (``d``: the row as the before image) whose Connect row schema holds the columns ``add``."""
    key, value = evolved_event(orders_template(), pos, row, add=add)
    doc = json.loads(value)
    doc["payload"]["op"] = op
    if op == "d":
        doc["payload"]["before"], doc["payload"]["after"] = doc["payload"]["after"], None
    return key, json.dumps(doc)


def send(kafka, topic: str, records: list[tuple[int, tuple[str, str]]], encode=None) -> None:
    producer = kafka.producer()
    for partition, (key, value) in records:
        producer.produce(topic, key=key, value=encode(value) if encode else value, partition=partition)
    producer.flush(30)


def batches() -> list[list[tuple[int, tuple[str, str]]]]:
    """Three batches on two partitions (even ids on 0, odd on 1). 1: rows 1-6, row 6 deleted. 2:
    updates of rows 2 and 5 from before the ALTERs (old schema), then the ALTERs (no event):
    ``tag`` shown first by row 4's update at 30800, ``rank`` by row 8's insert at 30900, and a
    re-emitted older create of the deleted row 6. 3: partition 1 lagged: an insert from before the
    ALTERs lands late (row 7, old schema), and one from after both below 30900 (row 9, its own
    values)."""
    return [
        [
            *[(i % 2, event(30000 + 100 * i, {"id": i, "qty": i})) for i in range(1, 7)],
            (0, event(30650, {"id": 6, "qty": 6}, op="d")),
        ],
        [
            (0, event(30700, {"id": 2, "qty": 20}, op="u")),
            (1, event(30710, {"id": 5, "qty": 50}, op="u")),
            (0, event(30800, {"id": 4, "qty": 40, "tag": "xyz"}, op="u", add=(TAG,))),
            (0, event(30900, {"id": 8, "qty": 8, "tag": "new", "rank": 9}, add=(TAG, RANK))),
            (0, event(30600, {"id": 6, "qty": 6})),  # re-emitted after a connector restart
        ],
        [
            (1, event(30720, {"id": 7, "qty": 7})),
            (1, event(30850, {"id": 9, "qty": 9, "tag": "zzz", "rank": 4}, add=(TAG, RANK))),
        ],
    ]


EXPECTED = {
    1: (1, "abc", 3),  # untouched since before the ALTERs: the defaults
    2: (20, "abc", 3),  # updated before the ALTERs, in the batch that adds the columns
    3: (3, "abc", 3),
    4: (40, "xyz", 3),  # updated after tag's ALTER, before rank's: rank's default
    5: (50, "abc", 3),
    8: (8, "new", 9),  # inserted after both: its own values
    7: (7, "abc", 3),  # from before the ALTERs, late
    9: (9, "zzz", 4),  # from after them, below rank's first event: its own values
}


def rows(settings, identifier: str) -> dict[int, tuple]:
    table = load_catalog(settings).load_table(identifier)
    return {r["id"]: (r["qty"], r["tag"], r["rank"]) for r in table.scan().to_arrow().to_pylist()}


def test_json_events_adding_a_column_with_a_default_fill_the_rows_from_before_it(spark, kafka, stack_settings):
    cfg = make_table(topic=f"ed{uuid.uuid4().hex[:8]}.inventory.orders", schema_changes={"source": "events"})
    ensure_topic(kafka, cfg.topic, 2)
    start = {0: 0, 1: 0}
    for n, batch in enumerate(batches(), 1):
        send(kafka, cfg.topic, batch)
        end = {p: start[p] + sum(1 for q, _ in batch if q == p) for p in start}
        plan = RunPlan(table=cfg, run_id=f"run-{n}", range=OffsetRange(topic=cfg.topic, start=start, end=end))
        assert apply_range(spark, stack_settings, plan).status == "committed"
        start = end
        if n == 2:
            got = rows(stack_settings, cfg.identifier)
            assert got == {k: v for k, v in EXPECTED.items() if k not in (7, 9)}
    assert rows(stack_settings, cfg.identifier) == EXPECTED
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    defaults = json.loads(table.properties[COLUMN_DEFAULTS_PROPERTY])
    assert {c: (d["sql"], d["exact"], BinlogPosition.from_text(d["position"]).pos) for c, d in defaults.items()} == {
        "tag": ("CAST('abc' AS STRING)", True, 30800),
        "rank": ("CAST('3' AS INT)", True, 30900),
    }


def test_avro_events_adding_a_column_with_a_default_fill_the_rows_from_before_it(
    spark, kafka, schema_registry, stack_settings
):
    """The same batches in Avro through the registry: the writer schemas carry the defaults (the
    Avro field's ``default``, which :func:`cdclake.model.avro.connect_schema` reads)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    cfg = make_table(
        value_format="avro", topic=f"eda{uuid.uuid4().hex[:8]}.inventory.orders", schema_changes={"source": "events"}
    )
    registry = SchemaRegistryClient({"url": schema_registry})
    ids: dict[str, int] = {}

    def encode(value: str) -> bytes:
        doc = json.loads(value)
        schema = avro_schema(doc["schema"])
        text = json.dumps(schema, sort_keys=True)
        if text not in ids:
            ids[text] = registry.register_schema(f"{cfg.topic}-value", Schema(text, "AVRO"))
        return confluent_value(ids[text], schema, avro_datum(doc["schema"], doc["payload"]))

    clients = KafkaClients.from_bootstrap(stack_settings.kafka_bootstrap, SchemaRegistry({"url": schema_registry}))
    ensure_topic(kafka, cfg.topic, 2)
    start = {0: 0, 1: 0}
    for n, batch in enumerate(batches(), 1):
        send(kafka, cfg.topic, batch, encode)
        end = {p: start[p] + sum(1 for q, _ in batch if q == p) for p in start}
        plan = RunPlan(table=cfg, run_id=f"run-{n}", range=OffsetRange(topic=cfg.topic, start=start, end=end))
        assert apply_range(spark, stack_settings, plan, kafka=clients).status == "committed"
        start = end
    assert rows(stack_settings, cfg.identifier) == EXPECTED
