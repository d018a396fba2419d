"""Schema evolution from the events' own schemas (:func:`cdclake.model.schema_diff.plan_from_events`):
the row schema an event carries against the table's columns, for tables without a schema-change
topic."""

from __future__ import annotations

import pytest

from cdclake.errors import SchemaChangeError
from cdclake.model.config import SchemaChangePolicy
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.schema_diff import ObservedSchema, SourceSchema, fits_table, plan_from_events
from cdclake.model.types import ColumnSpec, columns_from_config, columns_from_connect

TABLE = SourceSchema(
    (
        ColumnSpec("id", "int", True, "int32"),
        ColumnSpec("qty", "int", True, "int32"),
        ColumnSpec("price", "decimal(10,2)", False, "org.apache.kafka.connect.data.Decimal(10,2)"),
        ColumnSpec("note", "string", False, "string"),
    ),
    ("id",),
)


def shown(*fields: dict, offset: int = 7) -> ObservedSchema:
    return ObservedSchema(
        tuple(columns_from_connect({"fields": list(fields)})), KafkaCoordinates("db.inv.orders", 0, offset)
    )


ID = {"field": "id", "type": "int32", "optional": False}
QTY = {"field": "qty", "type": "int32", "optional": False}
NOTE = {"field": "note", "type": "string", "optional": True}


def price(precision: int, scale: int = 2) -> dict:
    return {
        "field": "price",
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)},
    }


def plan(*observed: ObservedSchema, incompatible: str = "fail"):
    policy = SchemaChangePolicy(incompatible=incompatible)  # type: ignore[arg-type]
    return plan_from_events(TABLE, list(observed), table="lake.orders", policy=policy)


def test_events_the_table_takes_change_nothing():
    # the same schema, and an event from before a promotion (int16 into int, decimal(8,2) into (10,2))
    older = shown(ID, {**QTY, "type": "int16"}, price(8), NOTE)
    assert fits_table(TABLE, shown(ID, QTY, price(10), NOTE)) and fits_table(TABLE, older)
    assert plan(shown(ID, QTY, price(10), NOTE), older).is_empty


def test_new_columns_are_added_optional_after_their_predecessor_and_types_promoted():
    discount = {"field": "discount", "type": "int64", "optional": False}
    result = plan(shown(ID, {**QTY, "type": "int64"}, discount, price(12), NOTE))
    assert [(s.name, s.iceberg_type, s.required, after) for s, after in result.adds] == [
        ("discount", "long", False, "qty")
    ]
    assert result.promotions == [("qty", "long"), ("price", "decimal(12,2)")]
    assert result.encodings["qty"] == "int64"
    assert result.encodings["price"] == "org.apache.kafka.connect.data.Decimal(12,2)"
    assert [c.name for c in result.after.columns] == ["id", "qty", "discount", "price", "note"]


def test_a_column_the_events_lose_is_kept_and_made_optional():
    result = plan(shown(ID, NOTE))
    assert not result.deletes and result.optional == ["qty"]
    assert [c.name for c in result.after.columns] == ["id", "qty", "price", "note"]


def test_a_column_added_and_widened_in_one_batch_is_added_wide():
    extra = {"field": "extra", "type": "float", "optional": True}
    result = plan(shown(ID, QTY, price(10), NOTE, extra), shown(ID, QTY, price(10), NOTE, {**extra, "type": "double"}))
    assert [(s.name, s.iceberg_type) for s, _ in result.adds] == [("extra", "double")] and not result.promotions


def test_an_incompatible_type_fails_naming_the_event_the_column_and_both_types():
    with pytest.raises(SchemaChangeError) as e:
        plan(shown(ID, {**QTY, "type": "string"}, price(10), NOTE, offset=41))
    assert "topic 'db.inv.orders' partition 0 offset 41" in str(e.value)
    assert "column 'qty' from int to string" in str(e.value) and "Nothing was committed" in str(e.value)
    with pytest.raises(SchemaChangeError, match="column 'price' from decimal\\(10,2\\) to decimal\\(10,3\\)"):
        plan(shown(ID, QTY, price(10, 3), NOTE))  # a scale change reads every value wrong


def test_new_column_sets_the_old_column_aside_but_never_a_key_column():
    result = plan(shown(ID, {**QTY, "type": "string"}, price(10), NOTE, offset=41), incompatible="new_column")
    assert result.renames == [("qty", "qty__0_41")]
    assert [(s.name, s.iceberg_type, after) for s, after in result.adds] == [("qty", "string", "id")]
    assert [c.name for c in result.after.columns] == ["id", "qty", "qty__0_41", "price", "note"]
    with pytest.raises(SchemaChangeError, match="column 'id' from int to string"):
        plan(shown({**ID, "type": "string"}, QTY), incompatible="new_column")


def test_the_table_configs_columns_are_added_or_promoted_never_set_aside():
    config = ObservedSchema(tuple(columns_from_config({"id": "int", "qty": "long", "region": "string"}, ("id",))))
    result = plan(config, incompatible="new_column")
    assert result.promotions == [("qty", "long")] and [s.name for s, _ in result.adds] == ["region"]
    assert not result.optional  # the config lists no nullability
    wrong = ObservedSchema(tuple(columns_from_config({"id": "int", "note": "int"}, ("id",))))
    with pytest.raises(SchemaChangeError, match="the table config's columns changes column 'note'"):
        plan(wrong, incompatible="new_column")
