"""Discovery on the real chain: tables created in MariaDB while Debezium runs are found by a
``discover`` pattern, registered, and their DAGs converge them; an excluded table stays out; a
table without a primary key becomes a changelog table."""

from __future__ import annotations

import time
import uuid

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import KafkaClients, ensure_topic
from cdclake.model.config import load_tables
from cdclake.model.discovery import read_registry
from cdclake.pipeline.discovery import discover
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_airflow, run_table_dag

pytestmark = pytest.mark.e2e


def test_a_pattern_registers_new_source_tables_and_their_dags_converge(chain, stack_settings, tmp_path):
    tag = uuid.uuid4().hex[:6]
    settings = stack_settings.model_copy(
        update={"tables_config": tmp_path / "tables.yaml", "discovery_registry": tmp_path / "discovery.json"}
    )
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "discover": [
                    {
                        "topic_prefix": settings.topic_prefix,
                        "databases": ["inventory"],
                        "tables": [rf"inventory\.d{tag}_.*"],
                        "exclude_tables": [r".*_scratch"],
                        "namespace": "found",
                        "defaults": {"schedule": None},
                    }
                ]
            }
        )
    )
    items, log, scratch = f"d{tag}_items", f"d{tag}_log", f"d{tag}_scratch"
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:  # created while the connector streams: no snapshot reads them
        cur.execute(f"CREATE TABLE {items} (id INT NOT NULL PRIMARY KEY, name VARCHAR(40), qty INT)")
        cur.execute(f"CREATE TABLE {log} (msg VARCHAR(40), n INT)")
        cur.execute(f"CREATE TABLE {scratch} (id INT NOT NULL PRIMARY KEY)")
        cur.executemany(f"INSERT INTO {items} VALUES (%s, %s, %s)", [(i, f"item {i}", i) for i in range(1, 6)])
        cur.executemany(f"INSERT INTO {log} VALUES (%s, %s)", [("a", 1), ("b", 2), ("a", 1)])
        cur.execute(f"INSERT INTO {scratch} VALUES (1)")
        cur.execute(f"UPDATE {items} SET qty = 40, name = NULL WHERE id = 4")
        cur.execute(f"DELETE FROM {items} WHERE id = 2")

    kafka = KafkaClients.from_settings(settings)
    tables = load_tables(settings.tables_config)
    topic = {t: f"{settings.topic_prefix}.inventory.{t}" for t in (items, log, scratch)}
    deadline = time.monotonic() + 90
    while True:  # until Debezium has created the topics and written a record to each
        found = {f.topic: f for f in discover(tables, kafka, settings.discovery_registry, write=False, now_ms=0)}
        if all(topic[t] in found and found[topic[t]].state != "pending" for t in topic):
            break
        assert time.monotonic() < deadline, f"the new tables' topics did not appear: {found}"
        time.sleep(2)
    assert not settings.discovery_registry.exists()  # the dry run wrote nothing

    assert (found[topic[items]].state, found[topic[items]].primary_key) == ("new", ("id",))
    assert (found[topic[log]].state, found[topic[log]].primary_key) == ("new", ())
    assert found[topic[scratch]].state == "excluded" and "exclude_tables" in found[topic[scratch]].reason

    ensure_airflow_db(settings)  # the cdc_discovery DAG registers them (Kafka through kafka_default)
    proc = run_airflow(["dags", "test", "cdc_discovery"], settings, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "state=success" in output.replace(" ", ""), output[-3000:]
    assert read_registry(settings.discovery_registry) == {topic[items]: ("id",), topic[log]: ()}

    configured = {t.topic: t for t in load_tables(settings.tables_config, settings.discovery_registry).tables}
    assert (configured[topic[log]].write_mode, configured[topic[items]].write_mode) == ("changelog", "upsert")
    assert run_table_dag(f"inventory_{items}", settings) == 0
    assert run_table_dag(f"inventory_{log}", settings) == 0

    with db.cursor() as cur:
        cur.execute(f"SELECT id, name, qty FROM {items} ORDER BY id")
        source = [tuple(r) for r in cur.fetchall()]
    catalog = load_catalog(settings)
    lake = sorted(
        (r["id"], r["name"], r["qty"]) for r in catalog.load_table(f"found.{items}").scan().to_arrow().to_pylist()
    )
    assert lake == source
    changelog = catalog.load_table(f"found.{log}").scan().to_arrow().to_pylist()
    assert sorted((r["msg"], r["n"]) for r in changelog) == [("a", 1), ("a", 1), ("b", 2)]


def test_a_topic_without_a_record_takes_its_key_from_the_tables_table_changes(chain, stack_settings, tmp_path):
    """A data topic created ahead of its first event (topics made by an operator, or every record
    expired) has no key to read: discovery takes the primary key from the table's latest
    ``tableChanges`` in the schema-change topic (through the schema-change index); without the
    catalog to read that index from, the topic stays pending."""
    tag = uuid.uuid4().hex[:6]
    settings = stack_settings.model_copy(
        update={"tables_config": tmp_path / "tables.yaml", "discovery_registry": tmp_path / "discovery.json"}
    )
    settings.tables_config.write_text(
        yaml.safe_dump({"discover": [{"topic_prefix": settings.topic_prefix, "tables": [rf"inventory\.e{tag}_.*"]}]})
    )
    keyed, keyless = f"e{tag}_pairs", f"e{tag}_notes"
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:  # no row: Debezium writes the DDL to the schema-change topic only
        cur.execute(f"CREATE TABLE {keyed} (a INT NOT NULL, b VARCHAR(8) NOT NULL, v INT, PRIMARY KEY (b, a))")
        cur.execute(f"CREATE TABLE {keyless} (msg VARCHAR(40))")
    kafka = KafkaClients.from_settings(settings)
    topic = {t: f"{settings.topic_prefix}.inventory.{t}" for t in (keyed, keyless)}
    for t in topic.values():
        ensure_topic(kafka, t, 1)
    tables = load_tables(settings.tables_config)
    catalog = load_catalog(settings)

    without = {f.topic: f for f in discover(tables, kafka, settings.discovery_registry, write=False, now_ms=0)}
    assert {without[t].state for t in topic.values()} == {"pending"}, without

    deadline = time.monotonic() + 60
    while True:  # until Debezium has written both CREATE TABLEs to the schema-change topic
        found = {
            f.topic: f
            for f in discover(tables, kafka, settings.discovery_registry, write=False, now_ms=0, catalog=catalog)
        }
        if all(found[t].state == "new" for t in topic.values()):
            break
        assert time.monotonic() < deadline, f"the tables' tableChanges were not found: {found}"
        time.sleep(2)
    assert found[topic[keyed]].primary_key == ("b", "a")  # primaryKeyColumnNames' order, not the columns'
    assert found[topic[keyless]].primary_key == ()
