"""Unit tests for :mod:`cdclake.pipeline.schema_sync`: the MySQL type map, schema-change records, and the
diff applied with pyiceberg on a real SQL catalog (SQLite, temporary warehouse)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from pyiceberg.types import IntegerType

from cdclake.errors import SchemaChangeError, SchemaError
from cdclake.io.catalog import load_catalog
from cdclake.model.config_blocks import ConnectorModes
from cdclake.model.layout import COLUMN_ENCODINGS_PROPERTY, SCHEMA_CHANGE_POSITION_PROPERTY
from cdclake.model.mysql_types import column_type
from cdclake.model.offsets import OffsetRange
from cdclake.model.position import BinlogPosition
from cdclake.model.schema_changes import changes_from_record
from cdclake.model.schema_diff import is_promotion, same_json_values
from cdclake.model.types import columns_from_connect
from cdclake.pipeline.schema_sync import sync_changes
from cdclake.settings import Settings
from tests.conftest import make_table

CHAIN = Path(__file__).resolve().parents[1] / "data" / "chain"
RECORDS = [json.loads(line) for line in (CHAIN / "schema-changes.jsonl").read_text().splitlines() if line]
TABLE_ID = '"inventory"."orders"'
CREATE = next(  # the recorded CREATE TABLE orders, with its envelope
    json.loads(r["value"])
    for r in RECORDS
    if json.loads(r["value"])["payload"]["ddl"].startswith("CREATE TABLE orders")
)
# the positions in these tests are set relative to the CREATE at 1915 (whatever the recording's was)
CREATE["payload"]["source"].update({"file": "mysql-bin.000001", "pos": 1915, "row": 0})
BASE_COLUMNS = CREATE["payload"]["tableChanges"][0]["table"]["columns"]


def column(name: str, type_name: str, position: int, *, optional: bool = True, length=None, scale=None) -> dict:
    return {
        "name": name,
        "jdbcType": 0,
        "nativeType": None,
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": None,
        "length": length,
        "scale": scale,
        "position": position,
        "optional": optional,
        "autoIncremented": False,
        "generated": False,
        "comment": None,
        "defaultValueExpression": None,
        "enumValues": None,
    }


def columns_with(*, drop=(), rename=None, change=None, insert=None) -> list[dict]:
    """The recorded orders columns, edited: drop names, rename {old: new}, change {name: fields},
    insert [(after_name, column)]; positions renumbered."""
    cols = [copy.deepcopy(c) for c in BASE_COLUMNS if c["name"] not in drop]
    for c in cols:
        c["name"] = (rename or {}).get(c["name"], c["name"])
        c.update((change or {}).get(c["name"], {}))
    for after, new in insert or ():
        idx = next(i for i, c in enumerate(cols) if c["name"] == after) + 1
        cols.insert(idx, new)
    for i, c in enumerate(cols, start=1):
        c["position"] = i
    return cols


def event(
    ddl: str,
    pos: int,
    columns: list[dict] | None,
    *,
    kind: str = "ALTER",
    pk=("id",),
    snapshot="false",
    envelope: bool = True,
    table_id: str = TABLE_ID,
) -> dict:
    """A schema-change record value shaped like the recorded ones."""
    doc = copy.deepcopy(CREATE)
    payload = doc["payload"]
    payload["source"].update({"pos": pos, "snapshot": snapshot})
    payload["ddl"] = ddl
    payload["tableChanges"] = [
        {
            "type": kind,
            "id": table_id,
            "table": None
            if columns is None
            else {"defaultCharsetName": None, "primaryKeyColumnNames": list(pk), "columns": columns, "comment": None},
        }
    ]
    return doc if envelope else payload


def parse(*values: dict) -> list:
    out = []
    for offset, v in enumerate(values):
        out.extend(changes_from_record(json.dumps(v), TABLE_ID, 0, offset))
    return sorted(out, key=lambda c: (c.position, c.offset))


@pytest.fixture
def catalog(tmp_path):
    return load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))


def cfg(**overrides):
    return make_table(topic="chain.inventory.orders", **overrides)


RANGE = OffsetRange(topic="chain.inventory.orders", start={0: 0}, end={0: 10})


@dataclass
class Times:
    """What Kafka answers the settle rule of a barrier change (:class:`~cdclake.pipeline.schema_sync.SettleFacts`):
    when the change's record was stamped, where the first data record stamped after a time sits,
    the high watermarks and the time now."""

    produced: int = 1_000
    after: dict[int, int] = field(default_factory=lambda: {0: 0})
    high: dict[int, int] = field(default_factory=lambda: {0: 10})
    now: int = 2_000

    def produced_at(self, change):
        return self.produced

    def offsets_after(self, timestamp_ms):
        return self.after

    def high_watermarks(self):
        return self.high

    def now_ms(self):
        return self.now


SETTLED = Times()
"""The data topic's one partition holds records sent after every schema change (from offset 0)."""


def positions(*pos: int) -> list[tuple[int, int, BinlogPosition]]:
    """Data events at offsets 0.. of partition 0 with binlog positions ``pos`` (file 1)."""
    return [(0, i, BinlogPosition(1, p, 0, 1)) for i, p in enumerate(pos)]


def fields(table) -> list[tuple[int, str, str, bool]]:
    return [
        (f.field_id, f.name, str(f.field_type), f.required)
        for f in table.schema().fields
        if not f.name.startswith("_cdc_")
    ]


def create_orders(catalog, t):
    result = sync_changes(catalog, t, parse(CREATE), data_positions=positions(2000), offset_range=RANGE, facts=SETTLED)
    assert result.created
    return catalog.load_table(t.identifier)


# --- the type map ------------------------------------------------------------------------------


def test_created_table_matches_the_data_paths_connect_mapping(catalog):
    """The recorded CREATE and the recorded data events of the same table map to the same Iceberg
    types and encodings."""
    t = cfg()
    table = create_orders(catalog, t)
    first = json.loads(json.loads((CHAIN / "orders.jsonl").read_text().splitlines()[0])["value"])
    after = next(f for f in first["schema"]["fields"] if f["field"] == "after")
    expected = columns_from_connect(after)
    assert [(n, ty) for _, n, ty, _ in fields(table)] == [(c.name, c.iceberg_type) for c in expected]
    assert json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY]) == {c.name: c.encoding for c in expected}
    assert [r for *_, r in fields(table)] == [c.required for c in expected]
    assert table.schema().identifier_field_names() == {"id"}
    assert table.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == "1:1915:0:1"


@pytest.mark.parametrize(
    ("col", "modes", "expected"),
    [
        (column("a", "TINYINT", 1), {}, ("int", "int16")),
        (column("a", "SMALLINT UNSIGNED", 1), {}, ("int", "int32")),
        (column("a", "INT UNSIGNED", 1), {}, ("long", "int64")),
        # long mode: Connect int64 whose wrapped (negative) values are bad records, so unsigned is recorded
        (column("a", "BIGINT UNSIGNED", 1), {"bigint_unsigned_handling_mode": "long"}, ("long", "int64(unsigned)")),
        (column("a", "SERIAL", 1), {"bigint_unsigned_handling_mode": "long"}, ("long", "int64(unsigned)")),
        (column("a", "BIGINT", 1), {"bigint_unsigned_handling_mode": "long"}, ("long", "int64")),
        (
            column("a", "BIGINT UNSIGNED", 1),
            {"bigint_unsigned_handling_mode": "precise"},
            ("decimal(20,0)", "org.apache.kafka.connect.data.Decimal(20,0)"),
        ),
        (column("a", "FLOAT", 1), {}, ("float", "float")),
        (column("a", "FLOAT", 1, length=25), {}, ("double", "double")),
        (column("a", "FLOAT", 1, length=10, scale=2), {}, ("double", "double")),
        (
            column("a", "DECIMAL", 1, length=10, scale=2),
            {},
            ("decimal(10,2)", "org.apache.kafka.connect.data.Decimal(10,2)"),
        ),
        (column("a", "DECIMAL", 1, length=65, scale=1), {}, ("string", "org.apache.kafka.connect.data.Decimal(65,1)")),
        (column("a", "DECIMAL", 1, length=10, scale=2), {"decimal_handling_mode": "double"}, ("double", "double")),
        (column("a", "DECIMAL", 1, length=10, scale=2), {"decimal_handling_mode": "string"}, ("string", "string")),
        (column("a", "TIME", 1, length=3), {}, ("long", "io.debezium.time.MicroTime")),
        (column("a", "TIME", 1, length=3), {"time_precision_mode": "adaptive"}, ("long", "io.debezium.time.Time")),
        (column("a", "TIME", 1), {"time_precision_mode": "connect"}, ("long", "org.apache.kafka.connect.data.Time")),
        (column("a", "DATETIME", 1), {}, ("timestamp", "io.debezium.time.Timestamp")),
        (column("a", "DATETIME", 1, length=6), {}, ("timestamp", "io.debezium.time.MicroTimestamp")),
        (column("a", "TIMESTAMP", 1, length=6), {}, ("timestamptz", "io.debezium.time.ZonedTimestamp")),
        (column("a", "DATE", 1), {}, ("date", "io.debezium.time.Date")),
        (column("a", "YEAR", 1), {}, ("int", "io.debezium.time.Year")),
        (column("a", "BIT", 1, length=1), {}, ("boolean", "boolean")),
        (column("a", "BIT", 1, length=64), {}, ("binary", "io.debezium.data.Bits")),
        (column("a", "VARBINARY", 1, length=16), {}, ("binary", "bytes")),
        (column("a", "BLOB", 1), {"binary_handling_mode": "hex"}, ("string", "string")),
        (column("a", "ENUM", 1), {}, ("string", "io.debezium.data.Enum")),
        (column("a", "SET", 1), {}, ("string", "io.debezium.data.EnumSet")),
        (column("a", "JSON", 1), {}, ("string", "io.debezium.data.Json")),
        (column("a", "POINT", 1), {}, ("struct<wkb:binary,srid:int>", "io.debezium.data.geometry.Point")),
        (column("a", "MULTIPOLYGON", 1), {}, ("struct<wkb:binary,srid:int>", "io.debezium.data.geometry.Geometry")),
        (column("a", "LONGTEXT", 1), {}, ("string", "string")),
    ],
)
def test_column_type_by_connector_modes(col, modes, expected):
    assert column_type(col, ConnectorModes(**modes)) == expected


def test_unknown_mysql_type_is_an_error_naming_the_column():
    with pytest.raises(SchemaError, match="'v'.*VECTOR"):
        column_type(column("v", "VECTOR", 1), ConnectorModes())


def test_promotion_rules_are_icebergs():
    assert is_promotion("int", "long") and is_promotion("float", "double")
    assert is_promotion("decimal(10,2)", "decimal(12,2)")
    assert not is_promotion("long", "int")
    assert not is_promotion("decimal(10,2)", "decimal(10,3)")
    assert not is_promotion("decimal(12,2)", "decimal(10,2)")
    assert not is_promotion("string", "int")
    assert same_json_values("int16", "int64") and not same_json_values(
        "io.debezium.time.Timestamp", "io.debezium.time.MicroTimestamp"
    )


# --- records -----------------------------------------------------------------------------------


def test_recorded_records_yield_this_tables_changes_only():
    changes = []
    for r in RECORDS:
        changes.extend(changes_from_record(r["value"], TABLE_ID, r["partition"], r["offset"]))
    # the orders table's DROP IF EXISTS and CREATE, re-emitted once by the connector killed with
    # SIGKILL before its offsets flushed (tests/e2e/test_chain.py): the same positions twice
    kinds = [(c.kind, c.snapshot) for c in changes]
    assert kinds == [("DROP", False), ("CREATE", False)] * 2
    assert changes[0].position == changes[2].position and changes[1].position == changes[3].position
    assert changes[0].position < changes[1].position
    create = changes[1]
    assert [c["name"] for c in create.columns] == ["id", "customer", "qty", "price", "note", "placed", "active"]
    assert create.primary_key == ("id",)
    signal = changes_from_record(
        next(r["value"] for r in RECORDS if "CREATE TABLE `debezium_signal`" in r["value"]),
        '"inventory"."debezium_signal"',
    )
    assert signal[0].snapshot and signal[0].position.change_rank == 0


def test_record_without_envelope_is_read_the_same():
    with_schema = changes_from_record(json.dumps(event("ALTER TABLE orders ADD x INT", 3000, columns_with())), TABLE_ID)
    bare = changes_from_record(
        json.dumps(event("ALTER TABLE orders ADD x INT", 3000, columns_with(), envelope=False)), TABLE_ID
    )
    assert with_schema == bare


def test_rename_of_the_table_is_kept_even_without_its_table_change():
    value = event("RENAME TABLE orders TO orders_old", 3000, None, table_id='"inventory"."orders_old"')
    assert [c.kind for c in changes_from_record(json.dumps(value), TABLE_ID)] == ["RENAME"]


# --- the diff on a real catalog ----------------------------------------------------------------


def test_new_column_is_optional_at_its_position_with_its_encoding(catalog):
    t = cfg()
    create_orders(catalog, t)
    add = event(
        "ALTER TABLE orders ADD COLUMN discount DECIMAL(10,2) NOT NULL DEFAULT 0 AFTER price",
        3000,
        columns_with(insert=[("price", column("discount", "DECIMAL", 0, optional=False, length=10, scale=2))]),
    )
    # additive: applied although the batch has events before it
    result = sync_changes(
        catalog, t, parse(CREATE, add), data_positions=positions(2500, 3500), offset_range=RANGE, facts=SETTLED
    )
    assert result.capped_before is None and result.offset_range == RANGE
    table = catalog.load_table(t.identifier)
    names = [n for _, n, _, _ in fields(table)]
    assert names == ["id", "customer", "qty", "price", "discount", "note", "placed", "active"]
    discount = table.schema().find_field("discount")
    assert (str(discount.field_type), discount.required) == ("decimal(10, 2)", False)
    assert (
        json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])["discount"]
        == "org.apache.kafka.connect.data.Decimal(10,2)"
    )
    assert table.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == "1:3000:0:1"


def test_widening_and_nullability_keep_field_ids(catalog):
    t = cfg()
    before = {n: i for i, n, _, _ in fields(create_orders(catalog, t))}
    alter = event(
        "ALTER TABLE orders MODIFY qty BIGINT NOT NULL, MODIFY customer VARCHAR(80) NULL",
        3000,
        columns_with(change={"qty": {"typeName": "BIGINT"}, "customer": {"optional": True, "length": 80}}),
    )
    sync_changes(
        catalog, t, parse(CREATE, alter), data_positions=positions(2500, 3500), offset_range=RANGE, facts=SETTLED
    )
    table = catalog.load_table(t.identifier)
    by_name = {n: (i, ty, req) for i, n, ty, req in fields(table)}
    assert by_name["qty"] == (before["qty"], "long", True)
    assert by_name["customer"] == (before["customer"], "string", False)
    assert json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])["qty"] == "int64"


def test_rename_is_a_rename_and_a_barrier(catalog):
    t = cfg()
    ids = {n: i for i, n, _, _ in fields(create_orders(catalog, t))}
    rename = event(
        "ALTER TABLE orders CHANGE COLUMN qty quantity INT NOT NULL", 3000, columns_with(rename={"qty": "quantity"})
    )
    changes = parse(CREATE, rename)
    # events before the rename in the batch: capped before the first event at or after it
    result = sync_changes(
        catalog, t, changes, data_positions=positions(2500, 2600, 3100, 3200), offset_range=RANGE, facts=SETTLED
    )
    assert result.offset_range.end == {0: 2}
    assert "CHANGE COLUMN qty quantity" in result.capped_before
    assert "quantity" not in [n for _, n, _, _ in fields(catalog.load_table(t.identifier))]
    # next run: the batch starts after the rename
    after = OffsetRange(topic=RANGE.topic, start={0: 2}, end={0: 10})
    result = sync_changes(
        catalog, t, changes, data_positions=[(0, 2, BinlogPosition(1, 3100, 0, 1))], offset_range=after, facts=SETTLED
    )
    assert result.offset_range == after
    table = catalog.load_table(t.identifier)
    by_name = {n: i for i, n, _, _ in fields(table)}
    assert by_name["quantity"] == ids["qty"] and "qty" not in by_name
    assert "quantity" in json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])


@pytest.mark.parametrize(
    "ddl",
    [
        "ALTER TABLE orders RENAME COLUMN QTY TO quantity",  # MySQL column names ignore case
        "ALTER TABLE orders CHANGE COLUMN Qty quantity INT NOT NULL",
        "ALTER TABLE orders CHANGE COLUMN qty QUANTITY INT NOT NULL",
    ],
)
def test_a_rename_written_in_another_letter_case_is_a_rename(catalog, ddl):
    t = cfg()
    ids = {n: i for i, n, _, _ in fields(create_orders(catalog, t))}
    rename = event(ddl, 3000, columns_with(rename={"qty": "quantity"}))
    after = OffsetRange(topic=RANGE.topic, start={0: 0}, end={0: 10})
    sync_changes(
        catalog,
        t,
        parse(CREATE, rename),
        data_positions=[(0, 0, BinlogPosition(1, 3100, 0, 1))],
        offset_range=after,
        facts=SETTLED,
    )
    by_name = {n: i for i, n, _, _ in fields(catalog.load_table(t.identifier))}
    assert by_name["quantity"] == ids["qty"] and "qty" not in by_name  # the same field: its values kept


def test_a_rename_waits_until_every_partition_has_settled_past_it(catalog):
    """Partition 1 was read to its end, but Debezium sent it nothing after the rename yet: an event
    from before the rename may still be on its way there, and would be read by the new name."""
    rename = event(
        "ALTER TABLE orders CHANGE COLUMN qty quantity INT NOT NULL", 3000, columns_with(rename={"qty": "quantity"})
    )
    after_rename = [(0, 0, BinlogPosition(1, 3100, 0, 1))]  # partition 0: an event sent after the rename

    def sync(t, high_1: int, now: int):
        reach = OffsetRange(topic=RANGE.topic, start={0: 0, 1: 4}, end={0: 1, 1: high_1})
        facts = Times(produced=1_000, after={0: 0, 1: 4}, high={0: 1, 1: high_1}, now=now)
        result = sync_changes(
            catalog, t, parse(CREATE, rename), data_positions=after_rename, offset_range=reach, facts=facts
        )
        return result, [n for _, n, _, _ in fields(catalog.load_table(t.identifier))]

    waiting, settled_by_record, settled_by_time = cfg(), cfg(), cfg()
    for t in (waiting, settled_by_record, settled_by_time):
        create_orders(catalog, t)
    result, names = sync(waiting, 4, now=1_000 + 5_000)
    assert result.offset_range.end == {0: 0, 1: 4} and "CHANGE COLUMN qty quantity" in result.capped_before
    assert "qty" in names and "quantity" not in names
    # partition 1 gets a record sent after the rename, or stays idle for a minute after it: settled
    for t, high_1, now in ((settled_by_record, 5, 1_000 + 5_000), (settled_by_time, 4, 1_000 + 60_000)):
        result, names = sync(t, high_1, now)
        assert result.capped_before is None and result.offset_range.end == {0: 1, 1: high_1}
        assert "quantity" in names and "qty" not in names


def test_dropped_column_is_kept_optional_by_default(catalog):
    t = cfg()
    create_orders(catalog, t)
    drop = event("ALTER TABLE orders DROP COLUMN customer", 3000, columns_with(drop=("customer",)))
    result = sync_changes(
        catalog, t, parse(CREATE, drop), data_positions=positions(2500, 3500), offset_range=RANGE, facts=SETTLED
    )
    assert result.capped_before is None  # keeping is additive
    customer = catalog.load_table(t.identifier).schema().find_field("customer")
    assert not customer.required


def test_dropped_column_is_deleted_by_config_as_a_barrier(catalog):
    t = cfg(schema_changes={"dropped_columns": "delete"})
    create_orders(catalog, t)
    drop = event("ALTER TABLE orders DROP COLUMN note", 3000, columns_with(drop=("note",)))
    result = sync_changes(
        catalog, t, parse(CREATE, drop), data_positions=positions(2500, 3500), offset_range=RANGE, facts=SETTLED
    )
    assert result.offset_range.end == {0: 1}
    sync_changes(catalog, t, parse(CREATE, drop), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)
    table = catalog.load_table(t.identifier)
    assert "note" not in [n for _, n, _, _ in fields(table)]
    assert "note" not in json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])


def test_incompatible_change_fails_naming_ddl_position_and_column_and_advances_nothing(catalog):
    t = cfg()
    table = create_orders(catalog, t)
    schema_id = table.schema().schema_id
    bad = event("ALTER TABLE orders MODIFY note INT", 3000, columns_with(change={"note": {"typeName": "INT"}}))
    with pytest.raises(SchemaChangeError) as excinfo:
        sync_changes(catalog, t, parse(CREATE, bad), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)
    msg = str(excinfo.value)
    assert "ALTER TABLE orders MODIFY note INT" in msg and "1:3000:0:1" in msg and "'note'" in msg
    table = catalog.load_table(t.identifier)
    assert table.schema().schema_id == schema_id
    assert table.properties[SCHEMA_CHANGE_POSITION_PROPERTY] == "1:1915:0:1"


def test_incompatible_change_as_new_column_renames_the_old_one_aside(catalog):
    t = cfg(schema_changes={"incompatible": "new_column"})
    ids = {n: i for i, n, _, _ in fields(create_orders(catalog, t))}
    bad = event("ALTER TABLE orders MODIFY note INT", 3000, columns_with(change={"note": {"typeName": "INT"}}))
    sync_changes(catalog, t, parse(CREATE, bad), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)
    table = catalog.load_table(t.identifier)
    by_name = {n: (i, ty, req) for i, n, ty, req in fields(table)}
    assert by_name["note__1_3000"] == (ids["note"], "string", False)
    assert by_name["note"][1:] == ("int", False) and by_name["note"][0] not in ids.values()
    names = [n for _, n, _, _ in fields(table)]
    assert names.index("note") == names.index("price") + 1
    encodings = json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])
    assert encodings["note"] == "int32" and encodings["note__1_3000"] == "string"


def test_primary_key_change_sets_identifier_fields_and_requires_the_config_to_follow(catalog):
    t = cfg()
    create_orders(catalog, t)
    pk = event(
        "ALTER TABLE orders DROP PRIMARY KEY, ADD PRIMARY KEY (id, customer)",
        3000,
        columns_with(),
        pk=("id", "customer"),
    )
    with pytest.raises(SchemaError, match=r"primary key is \['customer', 'id'\]"):
        sync_changes(catalog, t, parse(CREATE, pk), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)
    table = catalog.load_table(t.identifier)
    assert table.schema().identifier_field_names() == {"id", "customer"}
    t2 = t.model_copy(update={"primary_key": ("id", "customer")})
    sync_changes(catalog, t2, parse(CREATE, pk), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)


def test_rerun_applies_nothing_twice(catalog):
    t = cfg()
    create_orders(catalog, t)
    changes = parse(
        CREATE,
        event("ALTER TABLE orders ADD COLUMN x INT", 3000, columns_with(insert=[("active", column("x", "INT", 0))])),
        event(
            "ALTER TABLE orders RENAME COLUMN x TO y", 3100, columns_with(insert=[("active", column("y", "INT", 0))])
        ),
    )
    sync_changes(catalog, t, changes, data_positions=positions(3200), offset_range=RANGE, facts=SETTLED)
    table = catalog.load_table(t.identifier)
    state = (table.schema().schema_id, len(table.metadata.schemas), dict(table.properties))
    result = sync_changes(catalog, t, changes, data_positions=positions(3200), offset_range=RANGE, facts=SETTLED)
    assert result.applied == ()
    table = catalog.load_table(t.identifier)
    assert (table.schema().schema_id, len(table.metadata.schemas), dict(table.properties)) == state
    assert [n for _, n, _, _ in fields(table)][-1] == "y"


def test_changes_after_the_batch_wait(catalog):
    t = cfg()
    create_orders(catalog, t)
    later = event("ALTER TABLE orders ADD COLUMN x INT", 9000, columns_with(insert=[("active", column("x", "INT", 0))]))
    result = sync_changes(
        catalog, t, parse(CREATE, later), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED
    )
    assert result.applied == ()
    assert "x" not in [n for _, n, _, _ in fields(catalog.load_table(t.identifier))]


def test_table_rename_and_live_drop_stop_the_table(catalog):
    t = cfg()
    create_orders(catalog, t)
    rename = event("RENAME TABLE orders TO orders_old", 3000, None, table_id='"inventory"."orders_old"')
    with pytest.raises(SchemaChangeError, match="renamed.*RENAME TABLE orders TO orders_old"):
        sync_changes(
            catalog, t, parse(CREATE, rename), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED
        )
    drop = event("DROP TABLE orders", 3000, None, kind="DROP")
    with pytest.raises(SchemaChangeError, match="dropped.*DROP TABLE orders"):
        sync_changes(catalog, t, parse(CREATE, drop), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)
    snapshot_drop = event("DROP TABLE IF EXISTS orders", 3000, None, kind="DROP", snapshot="true")
    sync_changes(
        catalog, t, parse(CREATE, snapshot_drop), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED
    )


def test_unreadable_ddl_with_a_change_of_this_table_stops_it(catalog):
    t = cfg()
    create_orders(catalog, t)
    # a column gone and one new: without the DDL, a rename cannot be told from a drop and an add
    odd = event("ALTER TABLE orders CHANGE", 3000, columns_with(rename={"qty": "quantity"}))
    with pytest.raises(SchemaChangeError, match="ALTER TABLE orders CHANGE"):
        sync_changes(catalog, t, parse(CREATE, odd), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED)


def test_unreadable_ddl_that_cannot_hide_a_rename_is_applied_from_table_changes(catalog):
    """sqlglot does not know every MySQL type (POINT): the columns come from tableChanges, and a
    change that only adds a column cannot be a rename."""
    t = cfg()
    create_orders(catalog, t)
    add = event(
        "ALTER TABLE orders ADD loc POINT NULL", 3000, columns_with(insert=[("active", column("loc", "POINT", 8))])
    )
    sync_changes(
        catalog, t, parse(CREATE, add), data_positions=positions(2500, 3500), offset_range=RANGE, facts=SETTLED
    )
    table = catalog.load_table(t.identifier)
    loc = table.schema().find_field("loc")
    assert str(loc.field_type).startswith("struct<") and not loc.required
    assert [f.name for f in loc.field_type.fields] == ["wkb", "srid"]
    assert json.loads(table.properties[COLUMN_ENCODINGS_PROPERTY])["loc"] == "io.debezium.data.geometry.Point"
    # and a later change leaves the struct column alone (its type reads back the same)
    more = event(
        "ALTER TABLE orders ADD tag INT NULL",
        4000,
        columns_with(insert=[("active", column("loc", "POINT", 8)), ("loc", column("tag", "INT", 9))]),
    )
    sync_changes(
        catalog, t, parse(CREATE, add, more), data_positions=positions(2500, 4500), offset_range=RANGE, facts=SETTLED
    )
    assert catalog.load_table(t.identifier).schema().find_field("tag").field_type == IntegerType()


def test_a_blocking_snapshots_drop_and_create_at_one_position_restate_the_schema(catalog):
    """A blocking snapshot emits ``DROP TABLE IF EXISTS`` and the table's ``CREATE TABLE`` at the
    signal's position with ``snapshot`` false (seen on the real chain, tests/e2e/test_convergence.py):
    the pair restates the schema; it is no drop. A DROP alone at that position still stops."""
    t = cfg()
    create_orders(catalog, t)
    drop = event("DROP TABLE IF EXISTS `inventory`.`orders`", 3000, None, kind="DROP")
    restated = event("CREATE TABLE `orders` (...)", 3000, columns_with(), kind="CREATE")
    result = sync_changes(
        catalog, t, parse(CREATE, drop, restated), data_positions=positions(3500), offset_range=RANGE, facts=SETTLED
    )
    assert result.capped_before is None
    table = catalog.load_table(t.identifier)
    assert table.properties["cdc.schema-change-position"].split(":")[1] == "3000"
    late_drop = event("DROP TABLE orders", 3400, None, kind="DROP")
    with pytest.raises(SchemaChangeError, match="dropped"):
        sync_changes(
            catalog,
            t,
            parse(CREATE, drop, restated, late_drop),
            data_positions=positions(3500),
            offset_range=RANGE,
            facts=SETTLED,
        )
