"""Schema sync against a real broker: recorded Debezium schema-change records plus ALTERs shaped
like them on the schema-change topic, recorded data events on the data topic, a real SQL
catalog; the Iceberg schema history must show renames as renames, promotions, kept drops and
incompatible changes under both policies, and a re-run must change nothing."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest

from cdclake.errors import SchemaChangeError
from cdclake.io.catalog import load_catalog
from cdclake.model.layout import COLUMN_ENCODINGS_PROPERTY, SCHEMA_CHANGE_POSITION_PROPERTY
from cdclake.model.offsets import OffsetRange
from cdclake.pipeline.schema_sync import sync_for_range
from tests.conftest import apply_offsets, make_table
from tests.unit.test_schema_sync import columns_with, event

pytestmark = pytest.mark.integration

CHAIN = Path(__file__).resolve().parents[1] / "data" / "chain"


def produce(kafka, topic: str, records: list[tuple[str | None, str | None]]) -> None:
    from cdclake.io.kafka import ensure_topic

    ensure_topic(kafka, topic, 1)
    producer = kafka.producer()
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    producer.flush(30)


def data_event_at(template: str, pos: int, **after) -> str:
    doc = json.loads(template)
    doc["payload"]["source"]["pos"] = pos
    doc["payload"]["after"].update(after)
    return json.dumps(doc)


def source_fields(table) -> dict[str, tuple[int, str, bool]]:
    return {
        f.name: (f.field_id, str(f.field_type), f.required)
        for f in table.schema().fields
        if not f.name.startswith("_cdc_")
    }


def test_schema_changes_from_the_topic_reach_the_iceberg_schema_history(kafka, stack_settings):
    prefix = f"sc{uuid.uuid4().hex[:8]}"
    cfg = make_table(topic=f"{prefix}.inventory.orders")
    catalog = load_catalog(stack_settings)

    recorded = [json.loads(line) for line in (CHAIN / "schema-changes.jsonl").read_text().splitlines() if line]
    data = [json.loads(line) for line in (CHAIN / "orders.jsonl").read_text().splitlines() if line]
    # the synthetic ALTERs and events come after everything recorded (binlog file 1)
    top = max(json.loads(r["value"])["payload"]["source"]["pos"] for r in recorded + data if r["value"])
    base = (top // 10000 + 1) * 10000
    alters = [
        event(
            "ALTER TABLE orders CHANGE COLUMN qty quantity INT NOT NULL",
            base + 0,
            columns_with(rename={"qty": "quantity"}),
        ),
        event(
            "ALTER TABLE orders MODIFY quantity BIGINT NOT NULL",
            base + 1000,
            columns_with(rename={"qty": "quantity"}, change={"quantity": {"typeName": "BIGINT"}}),
            envelope=False,
        ),
        event(
            "ALTER TABLE orders DROP COLUMN note",
            base + 2000,
            columns_with(rename={"qty": "quantity"}, change={"quantity": {"typeName": "BIGINT"}}, drop=("note",)),
        ),
        event(
            "ALTER TABLE orders MODIFY price INT NULL",
            base + 3000,
            columns_with(
                rename={"qty": "quantity"},
                drop=("note",),
                change={"quantity": {"typeName": "BIGINT"}, "price": {"typeName": "INT"}},
            ),
        ),
    ]
    produce(
        kafka,
        prefix,
        [(r["key"], r["value"]) for r in recorded] + [('{"databaseName":"inventory"}', json.dumps(a)) for a in alters],
    )

    data = [(r["key"], r["value"]) for r in data if r["value"] is not None and '"op":"t"' not in r["value"]]
    template = data[0][1]
    later = [(data[0][0], data_event_at(template, pos)) for pos in (base + 500, base + 1500, base + 2500, base + 3500)]
    produce(kafka, cfg.topic, data + later)
    total = len(data) + len(later)
    full = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: total})

    # run 1: the CREATE makes the table; the rename is a barrier behind the recorded events
    first = sync_for_range(catalog, kafka, cfg, full)
    assert first.created
    assert first.offset_range.end == {0: len(data)}
    assert "CHANGE COLUMN qty quantity" in first.capped_before
    table = catalog.load_table(cfg.identifier)
    created = source_fields(table)
    assert list(created) == ["id", "customer", "qty", "price", "note", "placed", "active"]
    assert table.schema().identifier_field_names() == {"id"}

    # run 2 (the recorded events applied): the incompatible price change fails, nothing advances
    rest = OffsetRange(topic=cfg.topic, start={0: len(data)}, end={0: total})
    schemas_before = len(table.metadata.schemas)
    with pytest.raises(SchemaChangeError, match=rf"MODIFY price INT.*1:{base + 3000}:0:1|'price'"):
        sync_for_range(catalog, kafka, cfg, rest)
    table = catalog.load_table(cfg.identifier)
    assert len(table.metadata.schemas) == schemas_before
    create_pos = next(
        json.loads(r["value"])["payload"]["source"]["pos"]
        for r in recorded
        if json.loads(r["value"])["payload"]["ddl"].startswith("CREATE TABLE orders")
    )
    assert table.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == f"1:{create_pos}:0:1"

    # the operator chooses new_column: rename, promotion and kept drop apply in one transaction;
    # renaming price aside is a barrier behind the events at base+500..base+2500
    cfg = cfg.model_copy(
        update={"schema_changes": cfg.schema_changes.model_copy(update={"incompatible": "new_column"})}
    )
    second = sync_for_range(catalog, kafka, cfg, rest)
    assert second.offset_range.end == {0: total - 1}
    assert "MODIFY price INT" in second.capped_before
    assert len(second.applied) == 3
    assert catalog.load_table(cfg.identifier).properties[SCHEMA_CHANGE_POSITION_PROPERTY] == f"1:{base + 2000}:0:1"
    rest = OffsetRange(topic=cfg.topic, start={0: total - 1}, end={0: total})
    third = sync_for_range(catalog, kafka, cfg, rest)
    assert third.capped_before is None and third.offset_range == rest and len(third.applied) == 1
    table = catalog.load_table(cfg.identifier)
    now = source_fields(table)
    assert now["quantity"] == (created["qty"][0], "long", True)  # renamed, then promoted
    assert now["note"] == (created["note"][0], "string", False)  # dropped at the source, kept
    assert now[f"price__1_{base + 3000}"] == (created["price"][0], "double", False)  # renamed aside
    assert now["price"][1:] == ("int", False) and now["price"][0] not in {i for i, _, _ in created.values()}
    assert table.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == f"1:{base + 3000}:0:1"
    encodings = json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])
    assert encodings["quantity"] == "int64" and encodings["price"] == "int32"

    # the history: one schema per change (renames first, then the rest), field ids kept
    history = [{f.name: f.field_id for f in s.fields} for s in table.metadata.schemas]
    qty_id = created["qty"][0]
    assert any(h.get("qty") == qty_id for h in history)
    assert any(h.get("quantity") == qty_id for h in history)
    assert all(h.get("quantity", qty_id) == qty_id for h in history)

    # re-run: nothing applied, nothing committed
    metadata = table.metadata_location
    again = sync_for_range(catalog, kafka, cfg, rest)
    assert again.applied == () and again.offset_range == rest
    assert catalog.load_table(cfg.identifier).metadata_location == metadata


def test_missing_schema_change_topic_applies_nothing(kafka, stack_settings):
    cfg = make_table(topic=f"nosc{uuid.uuid4().hex[:8]}.inventory.orders")
    planned = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 3})
    result = sync_for_range(load_catalog(stack_settings), kafka, cfg, planned)
    assert result.offset_range == planned and result.applied == ()


def test_a_missing_schema_change_topic_is_said_once(kafka, stack_settings, caplog):
    import logging

    from cdclake.io.catalog import create_cdc_table
    from cdclake.model.types import ColumnSpec

    cfg = make_table(topic=f"nosc{uuid.uuid4().hex[:8]}.inventory.orders")
    catalog = load_catalog(stack_settings)
    create_cdc_table(catalog, cfg.identifier, [ColumnSpec("id", "int", True, "int32")], ("id",))
    planned = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 3})
    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.schema_sync"):
        for _ in range(3):
            assert sync_for_range(catalog, kafka, cfg, planned).offset_range == planned
    said = [r for r in caplog.records if "does not exist" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO, logging.INFO]
    assert "evolves from the schemas its events carry" in said[0].getMessage()
    from cdclake.model.config_blocks import SchemaChangePolicy
    from cdclake.model.layout import SCHEMA_FROM_EVENTS_PROPERTY

    assert catalog.load_table(cfg.identifier).properties[SCHEMA_FROM_EVENTS_PROPERTY] == "true"
    caplog.clear()  # schema_changes.source: events: the topic is not looked for
    events = cfg.model_copy(update={"schema_changes": SchemaChangePolicy(source="events")})
    with caplog.at_level(logging.INFO, logger="cdclake.pipeline.schema_sync"):
        assert sync_for_range(catalog, kafka, events, planned).offset_range == planned
    assert [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()] == []


def test_apply_stops_on_a_column_the_table_lacks(spark, kafka, stack_settings):
    from cdclake.errors import SchemaError

    cfg = make_table(topic=f"uc{uuid.uuid4().hex[:8]}.inventory.orders")
    data = [json.loads(line) for line in (CHAIN / "orders.jsonl").read_text().splitlines() if line][:3]
    produce(kafka, cfg.topic, [(r["key"], r["value"]) for r in data])
    first = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 3})
    assert apply_offsets(spark, stack_settings, cfg, first, "run-1").status == "committed"

    doc = json.loads(data[0]["value"])
    doc["payload"]["source"]["pos"] = 50000
    doc["payload"]["after"]["discount"] = 5
    produce(kafka, cfg.topic, [(data[0]["key"], data[1]["value"]), (data[0]["key"], json.dumps(doc))])
    second = OffsetRange(topic=cfg.topic, start={0: 3}, end={0: 5})
    with pytest.raises(SchemaError, match=r"partition 0 offset 4: the event has column 'discount'"):
        apply_offsets(spark, stack_settings, cfg, second, "run-2")
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert "discount" not in table.schema().column_names


def test_an_event_from_before_a_rename_landing_late_in_another_partition_keeps_its_value(spark, kafka, stack_settings):
    """Partitions are applied at different paces: the rename has reached the schema-change topic
    and partition 0, while an update from before it is still on its way to partition 1. The rename
    waits until partition 1 has settled past it, so that update is read by the old name."""
    import time

    from cdclake.io.kafka import ensure_topic
    from tests.conftest import plan_offsets
    from tests.unit.test_schema_sync import CREATE

    prefix = f"rn{uuid.uuid4().hex[:8]}"
    cfg = make_table(topic=f"{prefix}.inventory.orders")
    catalog = load_catalog(stack_settings)
    ensure_topic(kafka, prefix, 1)
    ensure_topic(kafka, cfg.topic, 2)
    template = json.loads(next(line for line in (CHAIN / "orders.jsonl").read_text().splitlines() if line))
    producer = kafka.producer()

    def send(topic: str, key: str, value: dict, partition: int = 0, timestamp: int = 0) -> None:
        producer.produce(topic, key=key, value=json.dumps(value), partition=partition, timestamp=timestamp)
        producer.flush(30)

    def row(op: str, id_: int, pos: int, qty_name: str, qty: int) -> dict:
        doc = copy.deepcopy(json.loads(template["value"]))
        for f in doc["schema"]["fields"][:2]:  # before, after
            for c in f["fields"]:
                c["field"] = qty_name if c["field"] == "qty" else c["field"]
        after = {**doc["payload"]["after"], "id": id_}
        after[qty_name] = qty
        if qty_name != "qty":
            del after["qty"]
        doc["payload"].update(op=op, after=after)
        doc["payload"]["source"].update(file="mysql-bin.000001", pos=pos, row=0)
        return doc

    def run(run_id: str):
        planned = plan_offsets(stack_settings, cfg, run_id)
        synced = sync_for_range(catalog, kafka, cfg, planned.range)
        if not synced.offset_range.is_empty:
            apply_offsets(spark, stack_settings, cfg, synced.offset_range, run_id)
        return synced

    def quantities(name: str) -> dict:
        return {r["id"]: r[name] for r in catalog.load_table(cfg.identifier).scan().to_arrow().to_pylist()}

    key = '{"databaseName":"inventory"}'
    send(prefix, key, CREATE)
    send(cfg.topic, '{"id":1}', row("c", 1, 2000, "qty", 5))
    assert run("run-1").created and quantities("qty") == {1: 5}

    renamed_at = int(time.time() * 1000) - 1_000  # when Debezium sent the rename
    rename = event(
        "ALTER TABLE orders CHANGE COLUMN qty quantity INT NOT NULL", 3000, columns_with(rename={"qty": "quantity"})
    )
    send(prefix, key, rename, timestamp=renamed_at)
    send(cfg.topic, '{"id":1}', row("u", 1, 3100, "quantity", 6))
    waiting = run("run-2")  # partition 1 has no record sent after the rename yet
    assert "CHANGE COLUMN qty quantity" in (waiting.capped_before or "") and waiting.offset_range.is_empty
    # the update from before the rename lands (stamped before it), then a record sent after it
    send(cfg.topic, '{"id":2}', row("c", 2, 2900, "qty", 7), partition=1, timestamp=renamed_at - 1)
    send(cfg.topic, '{"id":3}', row("c", 3, 3200, "quantity", 8), partition=1)
    assert run("run-3").capped_before is not None  # the batch holds the late update: capped after it
    assert run("run-4").capped_before is None
    assert quantities("quantity") == {1: 6, 2: 7, 3: 8}


def evolved_event(
    template: str, pos: int, row: dict, *, add: tuple[tuple[str, dict], ...] = (), retype=None, drop=()
) -> tuple[str, str]:
    """``(key, value)`` of a create event shaped like ``template`` whose Connect row schema gains
    ``add`` (``(column it follows, field)``), changes ``retype`` (``{column: Connect type}``) and
    loses ``drop``: the event's own schema shows the change, no schema-change topic does."""
    doc = json.loads(template)
    for image in doc["schema"]["fields"][:2]:  # before, after
        fields = [dict(f) for f in image["fields"] if f["field"] not in drop]
        for f in fields:
            f["type"] = (retype or {}).get(f["field"], f["type"])
        for follows, field in add:
            fields.insert(next(i for i, f in enumerate(fields) if f["field"] == follows) + 1, field)
        image["fields"] = fields
    doc["payload"]["source"]["pos"] = pos
    doc["payload"]["after"] = {k: v for k, v in doc["payload"]["after"].items() if k not in drop} | row
    return json.dumps({"id": row["id"]}), json.dumps(doc)


def orders_template() -> str:
    return next(
        json.loads(line)["value"] for line in (CHAIN / "orders.jsonl").read_text().splitlines() if '"op\\":\\"c' in line
    )


def test_a_table_without_schema_change_topic_evolves_from_the_events_schema(spark, kafka, stack_settings):
    """No schema-change topic: a column added mid-batch and in a later run, and an int32 column
    widened to int64 (a value above 2^31), reach the Iceberg table from the events' own Connect
    schema; a column the events lose is kept; a column added to the config's ``columns`` is added."""
    cfg = make_table(topic=f"ev{uuid.uuid4().hex[:8]}.inventory.orders")
    template = orders_template()
    discount = ("qty", {"type": "int32", "optional": True, "field": "discount"})
    coupon = ("active", {"type": "string", "optional": True, "field": "coupon"})
    produce(
        kafka,
        cfg.topic,
        [
            evolved_event(template, 30000, {"id": 1, "qty": 1}),
            evolved_event(template, 30100, {"id": 2, "qty": 2, "discount": 5}, add=(discount,)),
            evolved_event(template, 30200, {"id": 1, "qty": 1, "discount": 7}, add=(discount,)),
        ],
    )
    first = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 3})
    assert apply_offsets(spark, stack_settings, cfg, first, "run-1").status == "committed"
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    names = [n for n in table.schema().column_names if not n.startswith("_cdc_")]
    assert names == ["id", "customer", "qty", "discount", "price", "note", "placed", "active"]
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert (rows[1]["discount"], rows[2]["discount"]) == (7, 5)

    big = 3_000_000_000
    produce(
        kafka,
        cfg.topic,
        [
            evolved_event(
                template,
                30300,
                {"id": 3, "qty": big, "discount": 1, "coupon": "SPRING"},
                add=(discount, coupon),
                retype={"qty": "int64"},
                drop=("note",),
            ),
            evolved_event(template, 30400, {"id": 2, "qty": 4, "discount": 6}, add=(discount,)),
        ],
    )
    second = OffsetRange(topic=cfg.topic, start={0: 3}, end={0: 5})
    # a column added to the table config's `columns` after the table exists is added too
    edited = cfg.model_copy(update={"columns": {"id": "int", "customer": "string", "region": "string"}})
    assert apply_offsets(spark, stack_settings, edited, second, "run-2").status == "committed"
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    fields = source_fields(table)
    assert fields["qty"][1] == "long" and fields["coupon"][1] == "string" and "note" in fields
    assert fields["region"][1] == "string"
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert (rows[3]["qty"], rows[3]["coupon"], rows[3]["note"]) == (big, "SPRING", None)
    assert (rows[2]["qty"], rows[2]["discount"], rows[1]["qty"]) == (4, 6, 1)
    assert json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])["qty"] == "int64"


def qty_turning_to_text() -> list[tuple[str, str]]:
    """Four events of orders whose ``qty`` is an int at offsets 0-1 and a string from offset 2."""
    template = orders_template()
    return [
        evolved_event(template, 30000, {"id": 1, "qty": 1}),
        evolved_event(template, 30100, {"id": 3, "qty": 3}),
        evolved_event(template, 30200, {"id": 2, "qty": "many"}, retype={"qty": "string"}),
        evolved_event(template, 30300, {"id": 1, "qty": "lots"}, retype={"qty": "string"}),
    ]


def test_an_incompatible_type_in_the_events_schema_follows_the_policy(spark, kafka, stack_settings):
    """No schema-change topic: an int column whose events turn to strings stops the table under
    ``incompatible: fail`` (naming the column, both types and the first event), nothing
    committed; under ``new_column`` the old column is set aside with its values."""
    from cdclake.model.config_blocks import SchemaChangePolicy

    cfg = make_table(topic=f"ei{uuid.uuid4().hex[:8]}.inventory.orders")
    produce(kafka, cfg.topic, qty_turning_to_text())
    first = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 2})
    assert apply_offsets(spark, stack_settings, cfg, first, "run-1").status == "committed"
    catalog = load_catalog(stack_settings)
    before = catalog.load_table(cfg.identifier).metadata
    second = OffsetRange(topic=cfg.topic, start={0: 2}, end={0: 4})
    with pytest.raises(
        SchemaChangeError, match=r"partition 0 offset 2 changes column 'qty' from int to string .*cannot promote"
    ):
        apply_offsets(spark, stack_settings, cfg, second, "run-2")
    after = catalog.load_table(cfg.identifier).metadata
    assert (after.current_snapshot_id, after.current_schema_id) == (
        before.current_snapshot_id,
        before.current_schema_id,
    )

    aside = cfg.model_copy(update={"schema_changes": SchemaChangePolicy(incompatible="new_column")})
    assert apply_offsets(spark, stack_settings, aside, second, "run-3").status == "committed"
    table = catalog.load_table(cfg.identifier)
    assert source_fields(table)["qty"][1] == "string" and source_fields(table)["qty__0_2"][1] == "int"
    rows = {r["id"]: (r["qty"], r["qty__0_2"]) for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: ("lots", None), 2: ("many", None), 3: (None, 3)}


def test_an_incompatible_type_set_aside_is_applied_by_a_run_that_starts_at_it_so_its_retry_converges(
    spark, kafka, stack_settings
):
    """No schema-change topic, ``incompatible: new_column``: a batch whose int column turns to
    strings at offset 2 is applied up to the change only (old type, no schema update); the next run
    starts at the change and sets the column aside. When that run fails after its schema update
    (``bad_records: fail`` and a corrupt record), its retry reads no event of the old type: it
    converges instead of stopping at the set-aside column."""
    from cdclake.errors import BadBatchError
    from cdclake.model.config_blocks import SchemaChangePolicy

    cfg = make_table(
        topic=f"ec{uuid.uuid4().hex[:8]}.inventory.orders",
        schema_changes=SchemaChangePolicy(incompatible="new_column"),
        bad_records="fail",
    )
    produce(kafka, cfg.topic, [*qty_turning_to_text(), (json.dumps({"id": 9}), "not json")])
    catalog = load_catalog(stack_settings)
    whole = OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 5})
    first = apply_offsets(spark, stack_settings, cfg, whole, "run-1")
    assert (first.status, first.applied_end, first.events) == ("committed", {0: 2}, 2)
    table = catalog.load_table(cfg.identifier)
    assert source_fields(table)["qty"][1] == "int" and "qty__0_2" not in source_fields(table)
    assert {r["id"]: r["qty"] for r in table.scan().to_arrow().to_pylist()} == {1: 1, 3: 3}

    rest = OffsetRange(topic=cfg.topic, start={0: 2}, end={0: 5})
    with pytest.raises(BadBatchError):  # after the schema update: the column is set aside already
        apply_offsets(spark, stack_settings, cfg, rest, "run-2")
    table = catalog.load_table(cfg.identifier)
    assert source_fields(table)["qty"][1] == "string" and source_fields(table)["qty__0_2"][1] == "int"

    retry = cfg.model_copy(update={"bad_records": "quarantine", "bad_records_tolerance": "all"})
    result = apply_offsets(spark, stack_settings, retry, rest, "run-2")
    assert (result.status, result.events, result.quarantined) == ("committed", 3, 1)
    table = catalog.load_table(cfg.identifier)
    rows = {r["id"]: (r["qty"], r["qty__0_2"]) for r in table.scan().to_arrow().to_pylist()}
    assert rows == {1: ("lots", None), 2: ("many", None), 3: (None, 3)}  # an upsert writes the event's image
