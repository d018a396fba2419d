"""Schema evolution from the events' own schemas (:func:`cdclake.model.schema_from_events.plan_from_events`):
the row schema an event carries against the table's columns, for tables without a schema-change
topic."""

from __future__ import annotations

import pytest

from cdclake.errors import SchemaChangeError
from cdclake.model.config_blocks import SchemaChangePolicy
from cdclake.model.defaults import ColumnDefault
from cdclake.model.envelope import KafkaCoordinates
from cdclake.model.event_defaults import connect_defaults
from cdclake.model.schema_diff import SourceSchema
from cdclake.model.schema_from_events import ObservedSchema, fits_table, plan_from_events
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


def observed(*fields: dict, offset: int = 7) -> ObservedSchema:
    """The schema of an event whose Connect row fields are ``fields``, with their defaults."""
    row = {"fields": list(fields)}
    where = KafkaCoordinates("db.inv.orders", 0, offset)
    return ObservedSchema(tuple(columns_from_connect(row)), where, None, connect_defaults(row))


TAG = {"field": "tag", "type": "string", "optional": False, "default": "abc"}


def test_a_column_added_with_a_default_gives_it_to_the_rows_from_before_it():
    """``ALTER TABLE t ADD COLUMN tag VARCHAR(8) NOT NULL DEFAULT 'abc'``: the event's Connect
    schema carries ``"default": "abc"`` (:func:`cdclake.model.defaults.connect_defaults`); the
    plan carries the value, typed to the column, as the rows written before the column read it."""
    result = plan(observed(ID, QTY, price(10), NOTE, TAG))
    assert [s.name for s, _ in result.adds] == ["tag"]
    reason = "DEFAULT \"abc\" in the schema of the event at topic 'db.inv.orders' partition 0 offset 7"
    assert result.defaults == {"tag": ColumnDefault("tag", "CAST('abc' AS STRING)", True, reason)}


def test_defaults_are_decoded_by_the_columns_encoding_and_typed_to_its_final_type():
    rate = {**price(5), "field": "rate", "default": "AJY="}  # 1.50: base64 of the unscaled 150
    since = {"field": "since", "type": "int32", "optional": True, "name": "io.debezium.time.Date", "default": 18263}
    n = {"field": "n", "type": "int32", "optional": True, "default": 5}
    result = plan(
        observed(ID, QTY, price(10), NOTE, rate, since, n),
        observed(ID, QTY, price(10), NOTE, rate, since, {**n, "type": "int64"}, offset=9),
    )
    assert {c: (d.sql, d.exact) for c, d in result.defaults.items()} == {
        "rate": ("CAST('1.50' AS DECIMAL(5,2))", True),
        "since": ("CAST('2020-01-02' AS DATE)", True),
        "n": ("CAST('5' AS BIGINT)", True),  # added as a long: the wider schema of the batch
    }


def test_no_default_or_a_null_one_leaves_null_and_an_unknown_one_is_not_filled():
    plain = {"field": "plain", "type": "string", "optional": True}
    nulled = {"field": "nulled", "type": "string", "optional": True, "default": None}
    stamp = {
        "field": "stamp",
        "type": "string",
        "optional": False,
        "name": "io.debezium.time.ZonedTimestamp",
        "default": "1970-01-01T00:00:00Z",  # what Debezium writes for DEFAULT CURRENT_TIMESTAMP
    }
    result = plan(observed(ID, QTY, price(10), NOTE, plain, nulled, stamp))
    assert sorted(s.name for s, _ in result.adds) == ["nulled", "plain", "stamp"]
    assert list(result.defaults) == ["stamp"]
    assert (result.defaults["stamp"].sql, result.defaults["stamp"].exact) == (None, False)
    assert "CURRENT_TIMESTAMP" in result.defaults["stamp"].reason


def test_schemas_that_disagree_on_a_new_columns_default_leave_it_unknown():
    """``ADD COLUMN tag ... DEFAULT 'abc'`` then ``ALTER COLUMN tag SET DEFAULT 'xyz'`` in one batch:
    which default the rows from before the column read is not in the schemas."""
    first = observed(ID, QTY, price(10), NOTE, TAG, offset=3)
    result = plan(first, observed(ID, QTY, price(10), NOTE, {**TAG, "default": "xyz"}, offset=5))
    assert (result.defaults["tag"].sql, result.defaults["tag"].exact) == (None, False)
    assert '"abc", "xyz"' in result.defaults["tag"].reason
    assert plan(first, observed(ID, QTY, price(10), NOTE, TAG, offset=5)).defaults["tag"].exact


def test_no_default_for_columns_of_the_table_config_or_set_aside():
    config = ObservedSchema(tuple(columns_from_config({"id": "int", "region": "string"}, ("id",))))
    region = {"field": "region", "type": "string", "optional": True, "default": "eu"}
    assert plan(config, observed(ID, QTY, price(10), NOTE, region)).defaults == {}
    result = plan(observed(ID, {**QTY, "type": "string", "default": "0"}, price(10), NOTE), incompatible="new_column")
    assert result.renames == [("qty", "qty__0_7")] and result.defaults == {}  # MODIFY converts, fills nothing


def test_an_avro_writer_schemas_default_reaches_the_plan():
    """An Avro converter writes the Connect default as the type's ``connect.default`` (and the
    field's Avro ``default``); without ``connect.default`` the field's default is read, its bytes
    (an Avro string of code points) as their base64 text, as ``JsonConverter`` writes them."""
    from cdclake.model.avro import connect_schema

    def planned(tag_type, **field_keys):
        fields = [
            {"name": "id", "type": "int"},
            {"name": "qty", "type": "int"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tag", "type": tag_type, **field_keys},
        ]
        row = connect_schema({"type": "record", "name": "Value", "fields": fields})
        where = KafkaCoordinates("t", 0, 1)
        return plan(ObservedSchema(tuple(columns_from_connect(row)), where, 4, connect_defaults(row))).defaults

    assert planned({"type": "string", "connect.default": "abc"}, default="abc")["tag"].sql == "CAST('abc' AS STRING)"
    assert planned("string", default="abc")["tag"].sql == "CAST('abc' AS STRING)"
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}
    assert planned(decimal, default="\u0000\u0096")["tag"].sql == "CAST('1.50' AS DECIMAL(5,2))"
    assert planned(["null", "string"], default=None) == {}
