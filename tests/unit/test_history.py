"""Unit tests for the history's table-config option ``history`` and its layout
(:mod:`cdclake.model.history`, the schema :mod:`cdclake.io.history` creates it with)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.errors import ConfigError
from cdclake.io.schema_evolution import iceberg_type_name
from cdclake.io.side_tables import image_schema
from cdclake.model.config import load_tables
from cdclake.model.config_blocks import HistoryPolicy
from cdclake.model.history import HISTORY_COLUMNS, POSITION_TYPE
from cdclake.model.layout import METADATA_COLUMNS

TABLE = """\
tables:
  - name: customers
    topic: dbserver1.inventory.customers
    namespace: inventory
    table: customers
    primary_key: [id]
"""


def test_history_is_off_unless_configured_and_unknown_keys_are_errors(tmp_path: Path):
    path = tmp_path / "tables.yaml"
    path.write_text(TABLE)
    assert load_tables(path).tables[0].history is None
    path.write_text(TABLE + "    history: {}\n")
    assert load_tables(path).tables[0].history == HistoryPolicy()
    path.write_text(TABLE + "    history: {scd_type: 2}\n")
    with pytest.raises(ConfigError, match="scd_type"):
        load_tables(path)


def test_history_is_given_per_table_only(tmp_path: Path):
    path = tmp_path / "tables.yaml"
    path.write_text("defaults:\n  history: {}\n" + TABLE)
    with pytest.raises(ConfigError, match="history"):
        load_tables(path)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ("    write_mode: changelog\n", "history needs write_mode: upsert"),
        ("    ordering: kafka\n", "history needs ordering: binlog or gtid"),
    ],
)
def test_history_needs_an_upsert_table_ordered_by_source_position(tmp_path: Path, extra: str, error: str):
    path = tmp_path / "tables.yaml"
    table = TABLE.replace("[id]", "[]") if "changelog" in extra else TABLE
    path.write_text(table + extra + "    history: {}\n")
    with pytest.raises(ConfigError, match=error):
        load_tables(path)


def test_history_schema_is_the_tables_columns_optional_then_its_own_with_position_structs():
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField, StringType

    from cdclake.io.schema_evolution import iceberg_type

    meta = [
        NestedField(i, name, iceberg_type(typ), required=False, doc=doc)
        for i, (name, typ, doc) in enumerate(METADATA_COLUMNS, start=3)
    ]
    table = Schema(
        NestedField(1, "id", IntegerType(), required=True),
        NestedField(2, "name", StringType(), required=False),
        *meta,
        identifier_field_ids=[1],
    )
    schema = image_schema(table, HISTORY_COLUMNS, {"_cdc_op": "the op"})
    names = [f.name for f in schema.fields]
    assert names == ["id", "name", *[n for n, _, _ in METADATA_COLUMNS], *[n for n, _, _ in HISTORY_COLUMNS]]
    assert not any(f.required for f in schema.fields)  # a deleted version has no after image
    assert schema.find_field("id").field_id == 1 and schema.find_field("_cdc_op").doc == "the op"
    types = {f.name: iceberg_type_name(f.field_type) for f in schema.fields}
    assert types["_cdc_valid_from_position"] == types["_cdc_valid_to_position"] == POSITION_TYPE
    assert POSITION_TYPE == "struct<file_seq:long,pos:long,row:int,change_rank:int>"
    assert (types["_cdc_valid_from_ts"], types["_cdc_is_current"], types["_cdc_is_deleted"]) == (
        "timestamptz",
        "boolean",
        "boolean",
    )
    ids = [f.field_id for f in schema.fields] + [
        n.field_id for f in schema.fields if hasattr(f.field_type, "fields") for n in f.field_type.fields
    ]
    assert len(ids) == len(set(ids)) and min(ids[len(table.fields) :]) > table.highest_field_id


def test_the_history_check_names_each_kind_of_difference_and_the_docs():
    """Reconcile's history check, key by key (:mod:`cdclake.pipeline.reconcile_history`): keys only
    in the table, only in the history, with other values, and held twice by the history."""
    from cdclake.pipeline.reconcile_history import DUPLICATE, HistoryCheck, _compare_keys

    table = {(1,): ("1", "a"), (2,): ("1", "b"), (3,): ("1", "c"), (5,): ("1", "e")}
    history = iter([((1,), ("1", "a")), ((3,), ("1", "x")), ((4,), ("1", "d")), ((5,), ("1", "e")), ((5,), ("1", "e"))])
    check = HistoryCheck("inventory.customers", 11, 22, table_rows=4, history_rows=5)
    _compare_keys(check, ["id", "v"], table, history)
    assert (check.only_in_table, check.only_in_history, check.differing) == (
        [(2,)],
        [(4,)],
        {(3,): ["v"], (5,): [DUPLICATE]},
    )
    assert check.differences == 4
    message = check.message()
    for part in ("4 table row(s), 5 current version(s)", "1 only in the table ((2,))", "1 only in the history ((4,))",
                 "2 differing ((3,), (5,))", "table snapshot 11, history snapshot 22", "docs/operations.md"):  # fmt: skip
        assert part in message
    assert "equal" in HistoryCheck("inventory.customers", 11, 22, table_rows=4, history_rows=4).message()
