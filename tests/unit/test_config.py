"""Unit tests for :mod:`cdclake.model.config`: loading and validating the table-config YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.errors import ConfigError
from cdclake.model.config import TableConfig, TablesFile, load_tables

PROJECT_TABLES = Path(__file__).resolve().parents[2] / "include" / "tables.yaml"

TABLE_A = """\
  - name: inventory_products
    topic: dbserver1.inventory.products
    namespace: inventory
    table: products
    primary_key: [id]
"""

TABLE_B = """\
  - name: inventory_customers
    topic: dbserver1.inventory.customers
    namespace: inventory
    table: customers
    primary_key: [id]
"""


def write(tmp_path: Path, text: str | bytes, name: str = "tables.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def load_text(tmp_path: Path, text: str | bytes) -> TablesFile:
    return load_tables(write(tmp_path, text))


def config_error(tmp_path: Path, text: str | bytes) -> str:
    """Load ``text`` expecting a ConfigError; return its message."""
    with pytest.raises(ConfigError) as excinfo:
        load_text(tmp_path, text)
    return str(excinfo.value)


# --- valid files -------------------------------------------------------------------------------


def test_valid_file_merges_defaults_into_every_table(tmp_path):
    cfg = load_text(
        tmp_path,
        "defaults:\n  owner: team-x\n  max_events_per_run: 1000\n  tags: [cdc]\ntables:\n" + TABLE_A + TABLE_B,
    )
    assert [t.name for t in cfg.tables] == ["inventory_products", "inventory_customers"]
    for t in cfg.tables:
        assert t.owner == "team-x"
        assert t.max_events_per_run == 1000
        assert t.tags == ("cdc",)


def test_fields_not_given_anywhere_take_model_defaults(tmp_path):
    t = load_text(tmp_path, "tables:\n" + TABLE_A).tables[0]
    assert t.owner == "data-platform"
    assert t.schedule == "*/15 * * * *"
    assert t.max_events_per_run == 500_000
    assert t.value_format == "json_with_schema"
    assert t.retries == 3
    assert t.retry_delay_s == 60
    assert t.tags == ()
    assert t.columns is None


def test_table_entry_overrides_defaults(tmp_path):
    cfg = load_text(
        tmp_path,
        "defaults:\n  owner: team-x\n  schedule: '@hourly'\n"
        "tables:\n" + TABLE_A + "    owner: team-y\n    schedule: null\n" + TABLE_B,
    )
    products, customers = cfg.tables
    assert (products.owner, products.schedule) == ("team-y", None)
    assert (customers.owner, customers.schedule) == ("team-x", "@hourly")


def test_table_config_derives_dag_id_and_identifier(tmp_path):
    t = load_text(tmp_path, "tables:\n" + TABLE_A).tables[0]
    assert t.dag_id == "cdc_inventory_products"
    assert t.identifier == "inventory.products"
    assert t.topic == "dbserver1.inventory.products"
    assert t.primary_key == ("id",)


def test_decimal_column_type_is_accepted(tmp_path):
    t = load_text(
        tmp_path,
        "tables:\n" + TABLE_A + "    value_format: json\n"
        "    columns:\n"
        "      id: int\n"
        "      price: decimal(10,2)\n"
        "      cost: decimal(12, 4)\n",
    ).tables[0]
    assert t.columns == {"id": "int", "price": "decimal(10,2)", "cost": "decimal(12, 4)"}
    assert t.value_format == "json"


def test_composite_primary_key_keeps_its_order(tmp_path):
    text = "tables:\n" + TABLE_A.replace("[id]", "[order_id, line_no]")
    assert load_text(tmp_path, text).tables[0].primary_key == ("order_id", "line_no")


# --- unknown keys ------------------------------------------------------------------------------


def test_unknown_key_in_table_entry_raises_naming_the_key(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    scheduel: '@daily'\n")
    assert "scheduel" in msg
    # the table by its name and the key's line, not pydantic's "tables.0.scheduel"
    assert "line 7, table 'inventory_products': unknown key 'scheduel'; did you mean 'schedule'?" in msg


def test_a_misspelled_key_is_one_line_naming_table_line_and_the_near_key_without_pydantic(tmp_path):
    """The missing ``primary_key`` the typo leaves is not a second problem; no pydantic URL or type."""
    entry = TABLE_B + TABLE_A.replace("primary_key:", "primary_keys:")
    msg = config_error(tmp_path, "tables:\n" + entry)
    path = tmp_path / "tables.yaml"
    assert msg == (
        f"table config {path} is invalid:\n"
        "  line 11, table 'inventory_products': unknown key 'primary_keys'; did you mean 'primary_key'?"
    )


def test_config_errors_name_nested_and_default_keys_by_their_path_and_line(tmp_path):
    text = (
        "defaults:\n  max_event_per_run: 10\n  namespace: inventory\ntables:\n"
        + TABLE_A
        + "    maintenance: {snapshot_retention: 24}\n    value_format: protobuf\n"
    )
    lines = config_error(tmp_path, text).splitlines()[1:]
    assert lines == [
        "  line 2, defaults: unknown key 'max_event_per_run'; did you mean 'max_events_per_run'?",
        "  line 3, defaults: unknown key 'namespace': each table gives its own namespace, it cannot be a default",
    ]  # the defaults are checked first, once for every table
    lines = config_error(tmp_path, text.replace("  max_event_per_run: 10\n  namespace: inventory\n", "")).splitlines()
    assert lines[1:] == [
        "  line 8, table 'inventory_products': unknown key 'maintenance.snapshot_retention'; "
        "did you mean 'maintenance.snapshot_retention_hours'?",
        "  line 9, table 'inventory_products': value_format should be 'json', 'json_with_schema' or 'avro', "
        "not 'protobuf'",
    ]


def test_a_missing_required_key_says_what_it_is_for(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A.replace("    namespace: inventory\n", ""))
    assert msg.splitlines()[1] == (
        "  line 2, table 'inventory_products': missing required key 'namespace' (Iceberg namespace of the target table)"
    )
    assert "pydantic" not in msg and "errors.pydantic.dev" not in msg and "type=" not in msg


def test_the_alternatives_of_one_value_are_one_line(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    bad_records_tolerance: some\n")
    assert msg.splitlines()[1:] == [
        "  line 7, table 'inventory_products': bad_records_tolerance should be a valid integer, unable to parse "
        "string as an integer, or should be 'all', not 'some'"
    ]


def test_unknown_key_in_defaults_raises_naming_the_key(tmp_path):
    msg = config_error(tmp_path, "defaults:\n  max_event_per_run: 10\ntables:\n" + TABLE_A)
    assert "max_event_per_run" in msg


def test_identity_field_in_defaults_is_rejected(tmp_path):
    msg = config_error(tmp_path, "defaults:\n  namespace: inventory\ntables:\n" + TABLE_A)
    assert "namespace" in msg


def test_unknown_top_level_key_raises_naming_the_key(tmp_path):
    msg = config_error(tmp_path, "tabels: []\ntables:\n" + TABLE_A)
    assert "line 1: unknown key 'tabels'; did you mean 'tables'?" in msg


def test_error_message_names_the_file(tmp_path):
    path = write(tmp_path, "tables:\n" + TABLE_A + "    bogus: 1\n", name="my-tables.yaml")
    with pytest.raises(ConfigError, match="my-tables.yaml"):
        load_tables(path)


# --- invalid values ----------------------------------------------------------------------------


def test_duplicate_table_name_raises(tmp_path):
    dup = TABLE_B.replace("inventory_customers", "inventory_products")
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + dup)
    assert "two tables share the name 'inventory_products'" in msg


def test_duplicate_topic_raises(tmp_path):
    dup = TABLE_B.replace("dbserver1.inventory.customers", "dbserver1.inventory.products")
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + dup)
    assert "two tables share the topic 'dbserver1.inventory.products'" in msg


def test_duplicate_iceberg_identifier_raises(tmp_path):
    dup = TABLE_B.replace("table: customers", "table: products")
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + dup)
    assert "two tables share the identifier 'inventory.products'" in msg


def test_table_without_primary_key_is_refused_unless_changelog(tmp_path):
    path = tmp_path / "tables.yaml"
    path.write_text("tables:\n" + TABLE_A.replace("[id]", "[]"))
    cfg = load_tables(path).tables[0]
    with pytest.raises(ConfigError, match="has no primary key.*write_mode: changelog"):
        cfg.check_runnable(has_schema_registry=False)
    cfg.model_copy(update={"write_mode": "changelog"}).check_runnable(has_schema_registry=False)


def test_avro_table_is_runnable_only_with_a_schema_registry(tmp_path):
    path = tmp_path / "tables.yaml"
    path.write_text("tables:\n" + TABLE_A + "    value_format: avro\n")
    cfg = load_tables(path).tables[0]
    assert cfg.value_format == "avro"
    with pytest.raises(ConfigError, match="needs a schema registry.*'schema_registry'.*CDCLAKE_SCHEMA_REGISTRY_URL"):
        cfg.check_runnable(has_schema_registry=False)
    cfg.check_runnable(has_schema_registry=True)


def test_repeated_primary_key_column_raises(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A.replace("[id]", "[id, id]"))
    assert "repeats a column" in msg


def test_upper_case_name_raises(tmp_path):
    entry = TABLE_A.replace("name: inventory_products", "name: Inventory_Products")
    msg = config_error(tmp_path, "tables:\n" + entry)
    assert "'Inventory_Products'" in msg
    assert "[a-z0-9_]+" in msg


def test_namespace_that_is_not_an_identifier_raises(tmp_path):
    entry = TABLE_A.replace("namespace: inventory", "namespace: inv-entory")
    msg = config_error(tmp_path, "tables:\n" + entry)
    assert "'inv-entory' is not a plain identifier" in msg


def test_columns_without_a_primary_key_column_raise(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    columns: {name: string, weight: double}\n")
    assert "primary key column(s) ['id'] are not in columns" in msg


def test_unsupported_column_type_raises_naming_column_and_type(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    columns: {id: int, name: varchar}\n")
    assert "column 'name'" in msg
    assert "'varchar'" in msg


def test_unknown_value_format_raises(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    value_format: protobuf\n")
    assert "value_format" in msg


def test_non_positive_max_events_raises(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A + "    max_events_per_run: 0\n")
    assert "max_events_per_run" in msg


def test_tables_that_is_not_a_list_raises(tmp_path):
    msg = config_error(tmp_path, "tables: {name: x}\n")
    assert "'tables' must be a list" in msg


def test_empty_file_raises(tmp_path):
    msg = config_error(tmp_path, "")
    assert "must be a mapping with a 'tables' list" in msg


def test_empty_defaults_key_is_treated_as_no_defaults(tmp_path):
    # ``defaults:`` with every entry commented out is YAML null; the loader's own merge step
    # treats it as "no defaults" (``data.get("defaults") or {}``), so validation should too.
    cfg = load_text(tmp_path, "defaults:\n  # owner: team-x\ntables:\n" + TABLE_A)
    assert cfg.tables[0].owner == "data-platform"


# --- unreadable files --------------------------------------------------------------------------


def test_missing_file_raises_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_tables(tmp_path / "nope.yaml")


def test_invalid_yaml_raises_config_error(tmp_path):
    msg = config_error(tmp_path, "tables: [\n  - name: x\n")
    assert "is not valid YAML" in msg


def test_non_utf8_file_raises_config_error(tmp_path):
    # A binary file is "not YAML" too; the documented contract is ConfigError.
    msg = config_error(tmp_path, b"\xff\xfe\x00tables: []\n")
    assert "tables.yaml" in msg


# --- lookup and the project's own file ---------------------------------------------------------


def test_get_unknown_name_raises_config_error_naming_the_file_and_listing_names(tmp_path):
    cfg = load_text(tmp_path, "tables:\n" + TABLE_A + TABLE_B)
    with pytest.raises(ConfigError) as excinfo:
        cfg.get("inventory_orders")
    # no near match: inventory_orders shares only its database's prefix with the others
    assert str(excinfo.value) == (
        f"no table 'inventory_orders' in {tmp_path / 'tables.yaml'}; configured: inventory_products, inventory_customers"
    )


def test_get_a_misspelled_name_suggests_the_near_one(tmp_path):
    cfg = load_text(tmp_path, "tables:\n" + TABLE_A + TABLE_B)
    with pytest.raises(
        ConfigError,
        match=r"no table 'inventory_prodcts' in .*tables\.yaml; did you mean 'inventory_products'\? configured: inventory_products, inventory_customers$",
    ):
        cfg.get("inventory_prodcts")
    with pytest.raises(ConfigError, match="^no table 'x' in the table config; configured: none$"):
        TablesFile.model_validate({"tables": []}).get("x")


def test_get_returns_the_named_table(tmp_path):
    cfg = load_text(tmp_path, "tables:\n" + TABLE_A + TABLE_B)
    assert cfg.get("inventory_customers").topic == "dbserver1.inventory.customers"


def test_project_tables_yaml_loads_with_inventory_tables():
    cfg = load_tables(PROJECT_TABLES)
    products = cfg.get("inventory_products")
    customers = cfg.get("inventory_customers")
    assert isinstance(products, TableConfig)
    assert products.dag_id == "cdc_inventory_products"
    assert customers.dag_id == "cdc_inventory_customers"
    assert products.topic == "dbserver1.inventory.products"
    assert customers.topic == "dbserver1.inventory.customers"
    assert products.identifier == "inventory.products"
    assert customers.identifier == "inventory.customers"
    assert products.primary_key == customers.primary_key == ("id",)
    assert products.value_format == "json_with_schema"
    assert products.tags == ("cdc", "inventory")


# --- schema changes and connector modes --------------------------------------------------------


def test_schema_change_policy_defaults_fail_and_keep(tmp_path):
    t = load_text(tmp_path, "tables:\n" + TABLE_A).tables[0]
    assert t.schema_changes.incompatible == "fail"
    assert t.schema_changes.dropped_columns == "keep"
    assert t.schema_change_topic == "dbserver1"
    assert t.source_table_id == '"inventory"."products"'
    assert t.connector.decimal_handling_mode == "precise"
    assert t.connector.time_precision_mode == "adaptive_time_microseconds"
    assert t.connector.bigint_unsigned_handling_mode == "precise"  # as the project's connector
    assert t.connector.binary_handling_mode == "bytes"


def test_schema_change_policy_from_defaults_and_table(tmp_path):
    cfg = load_text(
        tmp_path,
        "defaults:\n  schema_changes: {incompatible: new_column}\n"
        "  connector: {decimal_handling_mode: string}\n"
        "tables:\n" + TABLE_A + "    schema_changes: {dropped_columns: delete, topic: my.prefix}\n" + TABLE_B,
    )
    products, customers = cfg.tables
    assert (products.schema_changes.incompatible, products.schema_changes.dropped_columns) == ("fail", "delete")
    assert products.schema_change_topic == "my.prefix"
    assert (customers.schema_changes.incompatible, customers.schema_changes.dropped_columns) == ("new_column", "keep")
    assert products.connector.decimal_handling_mode == customers.connector.decimal_handling_mode == "string"


def test_topic_prefix_with_dots_keeps_database_and_table(tmp_path):
    t = load_text(tmp_path, "tables:\n" + TABLE_A.replace("dbserver1.", "dc1.prod.")).tables[0]
    assert t.schema_change_topic == "dc1.prod"
    assert t.source_table_id == '"inventory"."products"'


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("    schema_changes: {incompatible: widen}\n", "incompatible"),
        ("    schema_changes: {dropped_columns: drop}\n", "dropped_columns"),
        ("    schema_changes: {incompatibel: fail}\n", "incompatibel"),
        ("    connector: {decimal.handling.mode: double}\n", "decimal.handling.mode"),
        ("    connector: {time_precision_mode: nanos}\n", "time_precision_mode"),
    ],
)
def test_bad_schema_change_or_connector_key_raises_naming_it(tmp_path, entry, key):
    assert key in config_error(tmp_path, "tables:\n" + TABLE_A + entry)


def test_topic_without_database_and_table_raises(tmp_path):
    msg = config_error(tmp_path, "tables:\n" + TABLE_A.replace("dbserver1.inventory.products", "products"))
    assert "<topic.prefix>.<database>.<table>" in msg


# --- maintenance -------------------------------------------------------------------------------


def test_maintenance_policy_defaults(tmp_path):
    m = load_text(tmp_path, "tables:\n" + TABLE_A).tables[0].maintenance
    assert m.snapshot_retention_hours == 168
    assert m.retain_last == 10
    assert m.orphan_file_age_hours == 72
    assert m.target_file_size_mb is None
    assert m.delete_file_threshold == 1


def test_maintenance_policy_from_defaults_and_table(tmp_path):
    cfg = load_text(
        tmp_path,
        "defaults:\n  maintenance: {snapshot_retention_hours: 48, retain_last: 3}\n"
        "tables:\n" + TABLE_A + "    maintenance: {snapshot_retention_hours: 0, orphan_file_age_hours: 24,"
        " target_file_size_mb: 128, delete_file_threshold: 2}\n" + TABLE_B,
    )
    products, customers = cfg.tables
    # a table's block replaces the defaults' block whole (as for every nested key)
    assert products.maintenance.snapshot_retention_hours == 0
    assert products.maintenance.retain_last == 10
    assert products.maintenance.orphan_file_age_hours == 24
    assert products.maintenance.target_file_size_mb == 128
    assert products.maintenance.delete_file_threshold == 2
    assert (customers.maintenance.snapshot_retention_hours, customers.maintenance.retain_last) == (48, 3)


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ("    maintenance: {orphan_file_age_hours: 23}\n", "orphan_file_age_hours"),
        ("    maintenance: {retain_last: 0}\n", "retain_last"),
        ("    maintenance: {snapshot_retention_hours: -1}\n", "snapshot_retention_hours"),
        ("    maintenance: {target_file_size_mb: 0}\n", "target_file_size_mb"),
        ("    maintenance: {delete_file_threshold: 0}\n", "delete_file_threshold"),
        ("    maintenance: {snapshot_retention: 24}\n", "snapshot_retention"),
    ],
)
def test_bad_maintenance_key_raises_naming_it(tmp_path, entry, key):
    assert key in config_error(tmp_path, "tables:\n" + TABLE_A + entry)


def test_bad_maintenance_default_raises(tmp_path):
    msg = config_error(tmp_path, "defaults:\n  maintenance: {orphan_file_age_hours: 1}\ntables:\n" + TABLE_A)
    assert "orphan_file_age_hours" in msg


# --- bad records: quarantine and its tolerance ---------------------------------------------------


def test_bad_records_default_to_quarantine_with_no_tolerance(tmp_path):
    """By default a run that quarantines any bad record fails after its commit (the alert)."""
    t = load_text(tmp_path, "tables:\n" + TABLE_A).tables[0]
    assert (t.bad_records, t.bad_records_tolerance) == ("quarantine", 0)
    assert t.tolerates_bad_records(0) and not t.tolerates_bad_records(1)


@pytest.mark.parametrize(
    ("entry", "tolerance", "tolerated", "not_tolerated"),
    [
        ("    bad_records_tolerance: none\n", 0, 0, 1),
        ("    bad_records_tolerance: 0\n", 0, 0, 1),
        ("    bad_records_tolerance: 25\n", 25, 25, 26),
        ("    bad_records_tolerance: '25'\n", 25, 25, 26),
        ("    bad_records_tolerance: all\n", "all", 10**9, None),
    ],
)
def test_bad_records_tolerance_is_none_a_count_or_all(tmp_path, entry, tolerance, tolerated, not_tolerated):
    t = load_text(tmp_path, "tables:\n" + TABLE_A + "    bad_records: quarantine\n" + entry).tables[0]
    assert t.bad_records_tolerance == tolerance
    assert t.tolerates_bad_records(tolerated)
    assert not_tolerated is None or not t.tolerates_bad_records(not_tolerated)
    # it survives the JSON a DAG hands its tasks
    assert TableConfig.model_validate_json(t.model_dump_json()).bad_records_tolerance == tolerance


def test_bad_records_tolerance_from_defaults_and_table(tmp_path):
    cfg = load_text(
        tmp_path,
        "defaults:\n  bad_records_tolerance: all\ntables:\n" + TABLE_A + "    bad_records_tolerance: 3\n" + TABLE_B,
    )
    products, customers = cfg.tables
    assert (products.bad_records_tolerance, customers.bad_records_tolerance) == (3, "all")


def test_bad_records_fail_is_accepted_as_before(tmp_path):
    t = load_text(tmp_path, "tables:\n" + TABLE_A + "    bad_records: fail\n").tables[0]
    assert t.bad_records == "fail"


@pytest.mark.parametrize(
    "entry",
    [
        "    bad_records_tolerance: -1\n",
        "    bad_records_tolerance: some\n",
        "    bad_records_tolerance: 1.5\n",
        "    bad_records_tolerance: true\n",
        "    bad_records: skip\n",
        "    bad_records_tolerence: 3\n",
    ],
)
def test_bad_records_tolerance_that_is_not_none_all_or_a_count_raises(tmp_path, entry):
    assert entry.split(":")[0].strip() in config_error(tmp_path, "tables:\n" + TABLE_A + entry)
