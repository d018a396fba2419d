"""Source health end to end, on the session's real chain (MariaDB -> Kafka Connect + Debezium ->
Kafka -> the table DAG -> Iceberg): a table applied once, then its connector paused while the
source writes (the end-to-end lag grows while Kafka's does not), Kafka Connect stopped
(unreachable) and started, and a connector failed by a DDL statement Debezium's parser cannot
read (``ADD COLUMN ip INET6``, Debezium 3.5). Each shows in the status (``status_report`` with
the sources, as ``cdclake status`` and the monitor read it) and in the freshness check, the paused
connector also through a real ``cdc_freshness`` run; each clears when the chain recovers.

The DDL breaks every connector reading that binlog (Debezium parses the DDL of every database),
and a connector that skipped it keeps it in its schema history for good: so it runs on a MariaDB
of its own, read by a connector added to the session's Connect worker for this test only, never
on the session's source."""

from __future__ import annotations

import time
import uuid

import pytest
import requests
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.connect import KafkaConnect
from cdclake.io.kafka import KafkaClients, topics_watermarks
from cdclake.model.config import load_tables
from cdclake.pipeline.sources import SourceProbe
from cdclake.pipeline.status import StatusReport, status_report
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_airflow, run_table_dag
from cdclake_dev.process import free_port

pytestmark = pytest.mark.e2e

CONNECTOR = "inventory-connector"


def wait_until(what: str, check, timeout_s: float = 90.0):
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)


def records(settings, topic: str) -> int:
    from confluent_kafka import KafkaException

    try:
        marks = topics_watermarks(KafkaClients.from_settings(settings), [topic])[topic]
    except KafkaException:  # a topic the connector is creating has no leader yet
        return 0
    return 0 if marks is None else sum(marks.high.values()) - sum(marks.low.values())


def connector_state(settings, name: str) -> str:
    """The worst of the connector's and its tasks' states (``missing`` while a starting worker has
    no status for it yet)."""
    return KafkaConnect(settings.connect_url).status(name).state


def all_paused(settings, name: str) -> bool:
    status = source_chain.connector_status(settings, name)
    return {status["connector"]["state"], *(t["state"] for t in status["tasks"])} == {"PAUSED"}


@pytest.fixture(scope="module")
def health(chain, stack_settings, tmp_path_factory):
    """A source table of the session's MariaDB applied once by its DAG; the settings name the
    session's Kafka Connect (``CDCLAKE_CONNECT_URL``, so the local Airflow gets the connection
    ``kafka_connect``) and a table config of that table alone."""
    suffix = uuid.uuid4().hex[:6]
    folder = tmp_path_factory.mktemp("health")
    settings = stack_settings.model_copy(
        update={
            "tables_config": folder / "tables.yaml",
            "connect_url": f"http://127.0.0.1:{stack_settings.connect_port}",
        }
    )
    source_table = f"health_{suffix}"
    topic = f"{settings.topic_prefix}.inventory.{source_table}"
    settings.tables_config.write_text(
        yaml.safe_dump(
            {
                "defaults": {"schedule": None, "retries": 0, "freshness_minutes": 10},
                # no connector.name: found by its offsets' prefix (the chain's config says ${env:CDC_TOPIC_PREFIX})
                "tables": [
                    {"name": f"health_{suffix}", "topic": topic, "namespace": "health", "table": source_table}
                    | {"primary_key": ["id"]}
                ],
            }
        )
    )
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute(f"CREATE TABLE {source_table} (id INT PRIMARY KEY, v VARCHAR(20))")
        for i in range(1, 4):
            cur.execute(f"INSERT INTO {source_table} VALUES (%s, %s)", (i, f"v{i}"))
    wait_until("the rows on their topic", lambda: records(settings, topic) >= 3)
    cfg = load_tables(settings.tables_config).tables[0]
    ensure_airflow_db(settings)
    assert run_table_dag(cfg.name, settings) == 0
    yield settings, cfg, db, source_table
    db.close()


def report(settings, cfg, source_db=None) -> StatusReport:
    probe = SourceProbe(
        KafkaConnect(settings.connect_url),
        source_db or source_chain.local_source(settings, user="debezium", password="dbz"),
        "the chain's MariaDB",
    )
    return status_report(load_catalog(settings), KafkaClients.from_settings(settings), [cfg], sources=probe)


def check(cfg, st) -> dict:
    from cdclake_airflow.freshness_dag import check_freshness

    return check_freshness(cfg.name, {cfg.name: {**st.model_dump(mode="json"), "dag_id": cfg.dag_id}})


def test_a_paused_connector_and_the_source_writing_past_it(health):
    from cdclake.errors import FreshnessError

    settings, cfg, db, source_table = health
    first = report(settings, cfg)
    (st,) = first.tables
    (source,) = first.sources
    assert source.name == CONNECTOR and source.connector.running and cfg.name in source.tables
    assert st.caught_up and st.fresh is True, st.problems
    assert source.lag is not None and source.lag.transactions == 0, source.lines()
    assert st.end_to_end_lag_ms == 0 and check(cfg, st)["connector_state"] == "RUNNING"

    base = f"{settings.connect_url}/connectors/{CONNECTOR}"
    requests.put(f"{base}/pause", timeout=10).raise_for_status()
    try:
        wait_until("the connector and its task paused", lambda: all_paused(settings, CONNECTOR))
        with db.cursor() as cur:  # the source goes on: three transactions Debezium does not read
            for i in range(10, 13):
                cur.execute(f"INSERT INTO {source_table} VALUES (%s, 'while paused')", (i,))
        paused = report(settings, cfg)
        (st,) = paused.tables
        lines = paused.sources[0].lines()
        assert lines[0].startswith(f"source {CONNECTOR} (Kafka Connect at {settings.connect_url}; 1 table): PAUSED")
        assert lines[-1] == f"  remedy: curl -X PUT '{base}/resume'"
        assert st.source.state == "PAUSED" and st.fresh is False
        assert any(p.startswith(f"its source {CONNECTOR} is PAUSED") for p in st.problems)
        # Kafka's lag says caught up; the source leg counts the transactions written since (three,
        # less any the task read while its pause was on its way to it)
        assert st.caught_up and st.lag_ms == 0
        assert paused.sources[0].lag.transactions >= 1 and paused.sources[0].lag.bytes > 0
        assert st.end_to_end_lag_ms > 0
        with pytest.raises(FreshnessError, match=f"its source {CONNECTOR} is PAUSED"):
            check(cfg, st)
        time.sleep(1.5)
        (later,) = report(settings, cfg).tables
        assert later.caught_up and later.end_to_end_lag_ms >= st.end_to_end_lag_ms + 1000

        # Airflow's failure path: the table's check of a real cdc_freshness run fails
        proc = run_airflow(["dags", "test", "cdc_freshness"], settings, capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        assert "state=failed" in out.replace(" ", ""), out[-5000:]
        assert (
            f"FreshnessError: table {cfg.name} ({cfg.identifier}) is not fresh: its source {CONNECTOR} is PAUSED" in out
        )
    finally:
        requests.put(f"{base}/resume", timeout=10).raise_for_status()
    wait_until("the connector running", lambda: connector_state(settings, CONNECTOR) == "RUNNING")
    wait_until("the paused writes on the topic", lambda: records(settings, cfg.topic) >= 6)
    (st,) = report(settings, cfg).tables
    assert st.source.running and st.fresh is True and not st.problems, st.problems
    assert check(cfg, st)["fresh"] is True


def test_a_connector_failed_by_a_ddl_its_parser_cannot_read(health, stack_settings, tmp_path):
    """On a MariaDB of its own (module docstring), read by a connector named in the table config."""
    from cdclake.errors import FreshnessError

    settings, _, _, _ = health
    other = stack_settings.model_copy(
        update={"state_dir": tmp_path / "ddl-source", "mariadb_port": free_port(), "topic_prefix": "ddlsrc"}
    )
    name = "ddl-connector"
    source_chain.start_mariadb(other)
    try:
        db = source_chain.mariadb_connect(other, database="inventory")
        with db.cursor() as cur:
            cur.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20))")
            cur.execute("CREATE TABLE unconfigured (id INT PRIMARY KEY)")
        source_chain.add_connector(stack_settings, name, other)
        cfg = (
            load_tables(settings.tables_config)
            .tables[0]
            .model_copy(update={"name": "ddl_items", "topic": "ddlsrc.inventory.items", "table": "ddl_items"})
        )
        cfg = cfg.model_copy(update={"connector": cfg.connector.model_copy(update={"name": name})})
        own_db = source_chain.local_source(other)
        (st,) = report(settings, cfg, own_db).tables
        assert st.source.name == name and st.source.running, st.problems

        with db.cursor() as cur:  # valid MariaDB; Debezium 3.5's DDL parser has no INET6
            cur.execute("ALTER TABLE unconfigured ADD COLUMN ip INET6")
        wait_until("the connector failed", lambda: connector_state(settings, name) == "FAILED", 60)
        failed = report(settings, cfg, own_db)
        (st,) = failed.tables
        head = failed.sources[0].lines()[0]
        assert head.startswith(
            f"source {name} (Kafka Connect at {settings.connect_url}; 1 table): FAILED: task 0 FAILED: "
        )
        assert "cause: io.debezium.text.ParsingException: DDL statement couldn't be parsed" in head
        assert st.fresh is False and '"A connector that failed"' in st.source.remedy
        assert "restart?includeTasks=true&onlyFailed=true" in st.source.remedy
        with pytest.raises(FreshnessError, match=f"its source {name} is FAILED: task 0 FAILED"):
            check(cfg, st)

        # the runbook's way out for a DDL of a table nobody reads: skip what the parser cannot read
        config = requests.get(f"{settings.connect_url}/connectors/{name}/config", timeout=10).json()
        config["schema.history.internal.skip.unparseable.ddl"] = "true"
        requests.put(f"{settings.connect_url}/connectors/{name}/config", json=config, timeout=30).raise_for_status()
        wait_until("the connector running again", lambda: connector_state(settings, name) == "RUNNING", 60)
        with db.cursor() as cur:
            cur.execute("INSERT INTO items VALUES (1, 'after')")
        wait_until("the row after the DDL on its topic", lambda: records(settings, cfg.topic) >= 1)
        (st,) = report(settings, cfg, own_db).tables
        assert st.source.running and st.fresh is not False
        assert not any("its source" in p for p in st.problems), st.problems
        db.close()
    finally:
        source_chain.remove_connector(stack_settings, name)
        source_chain.stop_mariadb(other)


def test_kafka_connect_down_then_up(health, stack_settings):
    from cdclake.errors import FreshnessError

    settings, cfg, _, _ = health
    source_chain.stop_connect(stack_settings)
    try:
        down = report(settings, cfg)
        (st,) = down.tables
        assert down.sources[0].name == f"topic prefix {stack_settings.topic_prefix}"  # no name in the config
        assert st.source.state == "unreachable" and st.fresh is False
        assert f"Kafka Connect at {settings.connect_url} did not answer: ConnectionError" in st.source.reason
        with pytest.raises(FreshnessError, match="is unreachable: Kafka Connect at .* did not answer"):
            check(cfg, st)
    finally:
        source_chain.start_connect(stack_settings)
    wait_until("the connector running", lambda: connector_state(settings, CONNECTOR) == "RUNNING")
    (st,) = report(settings, cfg).tables
    assert st.source.name == CONNECTOR and st.source.running and st.fresh is True, st.problems
