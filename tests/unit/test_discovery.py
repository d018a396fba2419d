"""Discovery's pure parts: patterns, key schemas, the registry and the tables they make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from cdclake.errors import ConfigError
from cdclake.model.config import TablesFile, load_tables
from cdclake.model.discovery import Candidate, DiscoverPattern, Excluded, key_columns, read_registry, write_registry

CONFIG = {
    "defaults": {"owner": "lake", "schedule": "@hourly"},
    "discover": [
        {
            "topic_prefix": "mariadb",
            "databases": ["inventory"],
            "exclude_tables": [r"inventory\.tmp_.*"],
            "namespace": "raw_{database}",
            "defaults": {"schedule": "*/5 * * * *", "tags": ["discovered"]},
        }
    ],
    "tables": [
        {
            "name": "orders_by_hand",
            "topic": "mariadb.inventory.orders",
            "namespace": "sales",
            "table": "orders",
            "primary_key": ["order_id"],
            "tags": ["reviewed"],
        }
    ],
}


def write_config(tmp_path: Path, config: dict | None = None) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(yaml.safe_dump(config or CONFIG))
    return path


def test_pattern_takes_a_topic_with_its_names_and_refuses_excluded_ones_with_the_reason() -> None:
    pattern = TablesFile.model_validate(CONFIG).discover[0]
    assert pattern.match("mariadb.inventory.Customer-Notes") == Candidate(
        topic="mariadb.inventory.Customer-Notes",
        name="inventory_customer_notes",
        namespace="raw_inventory",
        table="Customer_Notes",
    )
    excluded = pattern.match("mariadb.inventory.tmp_load")
    assert isinstance(excluded, Excluded) and "exclude_tables" in excluded.reason
    other_db = pattern.match("mariadb.billing.invoices")
    assert isinstance(other_db, Excluded) and "databases" in other_db.reason
    # not a data topic of the prefix: the schema-change, transaction and other prefixes' topics
    assert pattern.match("mariadb") is None
    assert pattern.match("mariadb.transaction") is None
    assert pattern.match("other.inventory.orders") is None


def test_topic_regex_without_prefix_splits_the_last_two_parts() -> None:
    pattern = DiscoverPattern(topics=r"dc1\.mysql\..*", name="{prefix}_{table}")
    found = pattern.match("dc1.mysql.shop.orders")
    assert isinstance(found, Candidate) and found.name == "dc1_mysql_orders" and found.namespace == "shop"
    assert pattern.match("dc2.mysql.shop.orders") is None


@pytest.mark.parametrize(
    "pattern, message",
    [
        ({"databases": ["inv"]}, "topic_prefix or topics"),
        ({"topic_prefix": "m", "tables": ["(unclosed"]}, "not a regular expression"),
        ({"topic_prefix": "m", "name": "{schema}_{table}"}, "uses ['schema']"),
        ({"topic_prefix": "m", "defaults": {"scheduel": "@daily"}}, "scheduel"),
        ({"topic_prefix": "m", "exclude": ["x"]}, "exclude"),
    ],
)
def test_bad_patterns_are_refused_naming_the_key(tmp_path: Path, pattern: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        load_tables(write_config(tmp_path, {"discover": [pattern]}))


def test_key_columns_from_each_converter_and_none_for_a_keyless_table() -> None:
    with_schema = {
        "schema": {"type": "struct", "fields": [{"type": "int32", "field": "b"}, {"type": "int32", "field": "a"}]},
        "payload": {"a": 1, "b": 2},
    }
    assert key_columns(json.dumps(with_schema).encode(), None) == ("b", "a")
    assert key_columns(b'{"tenant": 1, "id": 2}', None) == ("tenant", "id")
    assert key_columns(None, None) == ()
    avro_key = b"\x00\x00\x00\x00\x07" + b"\x02"
    writer = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
    assert key_columns(avro_key, {7: writer}.__getitem__) == ("id",)
    with pytest.raises(ConfigError, match="no schema registry"):
        key_columns(avro_key, None)


def test_registry_round_trip_keeps_existing_entries(tmp_path: Path) -> None:
    path = tmp_path / "discovery" / "tables.json"
    assert read_registry(path) == {}
    write_registry(path, {"mariadb.inventory.a": ("id",)}, now_ms=1)
    write_registry(path, {"mariadb.inventory.a": ("other",), "mariadb.inventory.b": ()}, now_ms=2)
    assert read_registry(path) == {"mariadb.inventory.a": ("id",), "mariadb.inventory.b": ()}
    assert [p.name for p in path.parent.iterdir()] == ["tables.json"]  # no temporary file left
    assert path.stat().st_mode & 0o777 == 0o644  # every Airflow process may read it
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        read_registry(path)


def test_registered_topics_become_tables_and_explicit_entries_override_the_pattern(tmp_path: Path) -> None:
    registry = tmp_path / "tables.json"
    write_registry(
        registry,
        {
            "mariadb.inventory.customers": ("id",),
            "mariadb.inventory.audit_log": (),
            "mariadb.inventory.orders": ("id",),  # the explicit entry wins
            "mariadb.inventory.tmp_x": ("id",),  # excluded since registered
            "mariadb.inventory.products": ("id",),
        },
        now_ms=1,
    )
    cfg = write_config(tmp_path)
    assert [t.name for t in load_tables(cfg).tables] == ["orders_by_hand"]  # without the registry
    tables = {t.topic: t for t in load_tables(cfg, registry).tables}
    assert sorted(tables) == [
        "mariadb.inventory.audit_log",
        "mariadb.inventory.customers",
        "mariadb.inventory.orders",
        "mariadb.inventory.products",
    ]
    customers = tables["mariadb.inventory.customers"]
    assert (customers.name, customers.identifier, customers.primary_key) == (
        "inventory_customers",
        "raw_inventory.customers",
        ("id",),
    )
    assert (customers.write_mode, customers.schedule, customers.owner, customers.tags) == (
        "upsert",
        "*/5 * * * *",
        "lake",
        ("discovered",),
    )
    audit = tables["mariadb.inventory.audit_log"]
    assert (audit.primary_key, audit.write_mode) == ((), "changelog")
    by_hand = tables["mariadb.inventory.orders"]
    assert (by_hand.name, by_hand.primary_key, by_hand.tags, by_hand.schedule) == (
        "orders_by_hand",
        ("order_id",),
        ("reviewed",),
        "*/5 * * * *",
    )


def test_a_discovered_table_that_clashes_is_left_out_not_the_whole_config(tmp_path: Path) -> None:
    config = {**CONFIG, "tables": [{**CONFIG["tables"][0], "namespace": "raw_inventory", "table": "items"}]}
    tables = TablesFile.model_validate(config)
    found, skipped = tables.discovered({"mariadb.inventory.items": ("id",), "mariadb.inventory.ok": ("id",)})
    assert [t.name for t in found] == ["inventory_ok"]
    assert "identifier 'raw_inventory.items'" in skipped["mariadb.inventory.items"]


def test_the_dry_run_table_says_key_or_changelog_and_why_excluded() -> None:
    from cdclake.pipeline.discovery import Finding
    from cdclake_dev.views import format_findings

    text = format_findings(
        [
            Finding("m.inv.a", "new", "inv_a", "inv.a", ("id", "k"), dag_id="cdc_inv_a"),
            Finding("m.inv.b", "registered", "inv_b", "inv.b", (), "topic gone", dag_id="cdc_shared_inv"),
            Finding("m.inv.tmp", "excluded", reason="table 'inv.tmp' matches exclude_tables 'inv\\\\.tmp'"),
        ]
    )
    lines = [line.split() for line in text.splitlines()]
    assert lines[0] == ["topic", "state", "iceberg", "table", "dag", "primary", "key", "why"]
    assert lines[1] == ["m.inv.a", "new", "inv.a", "cdc_inv_a", "id,k"]
    # a table of a shared DAG shows the DAG that applies it on schedule
    assert lines[2] == ["m.inv.b", "registered", "inv.b", "cdc_shared_inv", "changelog", "topic", "gone"]
    assert lines[3][:5] == ["m.inv.tmp", "excluded", "-", "-", "-"] and "exclude_tables" in lines[3]
