"""Convergence on the real chain (MariaDB -> Debezium -> Kafka -> the table DAG -> Iceberg): the lake
equals the source after re-snapshots (connector killed before its first offset flush, offsets
deleted), after ``ADD COLUMN ... DEFAULT`` on a populated table, and across ``RESET MASTER``
(``include/cdclake/model/convergence.py``, ``include/cdclake/model/defaults.py``)."""

from __future__ import annotations

import decimal
import json
import re
import time

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.model.convergence import SNAPSHOT_SETTLE_MS
from cdclake.model.layout import SummaryKeys
from cdclake.model.snapshot import build_signal
from cdclake_dev import chain as source_chain
from cdclake_dev.cli import ensure_airflow_db, run_table_dag
from cdclake_dev.process import free_port
from tests.e2e.test_chain import wait_for_note

pytestmark = pytest.mark.e2e

DDL = "CREATE TABLE {name} (id INT NOT NULL PRIMARY KEY, v VARCHAR(40) NOT NULL, note VARCHAR(40) NULL)"


def with_table(stack_settings, tmp_path, name: str, prefix: str | None = None, **table_keys):
    """Settings whose table config holds the one table ``conv_<name>`` (source ``inventory.<name>``,
    topic ``<prefix>.inventory.<name>``; by default the chain's prefix)."""
    settings = stack_settings.model_copy(update={"tables_config": tmp_path / "tables.yaml"})
    topic = f"{prefix or settings.topic_prefix}.inventory.{name}"
    table = {"name": name, "topic": topic, "namespace": "conv", "table": name, "primary_key": ["id"], **table_keys}
    settings.tables_config.write_text(yaml.safe_dump({"defaults": {"schedule": None, "retries": 0}, "tables": [table]}))
    ensure_airflow_db(settings)
    return settings, topic


def source_rows(db, name: str, columns: str = "id, v, note") -> list[tuple]:
    with db.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM {name} ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def lake_rows(settings, name: str, columns: tuple[str, ...] = ("id", "v", "note")) -> list[tuple]:
    arrow = load_catalog(settings).load_table(f"conv.{name}").scan().to_arrow()
    return sorted(tuple(r[c] for c in columns) for r in arrow.to_pylist())


def summary(settings, name: str) -> dict[str, str]:
    snap = load_catalog(settings).load_table(f"conv.{name}").current_snapshot()
    return dict(snap.summary.additional_properties) if snap is not None else {}


def catch_up(
    settings, name: str, db, max_runs: int = 3, *, source: str | None = None, topic: str | None = None
) -> dict[str, str]:
    """Run the table DAG ``name`` (source table ``source``, default ``name``, its events on
    ``topic``, default the chain's JSON topic of it; Avro when the settings name a registry) until
    no full snapshot is in progress; returns the last commit's summary.

    A partition without records after the snapshot's end counts as done once read to its end a
    minute after it: between runs the test waits that long and changes a row (a run with nothing
    new stops at ``plan``)."""
    source = source or name
    topic = topic or f"{settings.topic_prefix}.inventory.{source}"
    registry = settings.schema_registry_url if not topic.startswith(f"{settings.topic_prefix}.") else None
    for i in range(max_runs):
        assert run_table_dag(name, settings) == 0
        props = summary(settings, name)
        progress = props.get(SummaryKeys.SNAPSHOT_IN_PROGRESS)
        if progress is None:
            return props
        end = json.loads(progress).get("end")
        if end is not None:
            time.sleep(max(0.0, (end["timestamp"] + SNAPSHOT_SETTLE_MS) / 1000 - time.time()) + 1)
        with db.cursor() as cur:
            cur.execute(f"SELECT min(id) FROM {source}")
            cur.execute(f"UPDATE {source} SET note = %s WHERE id = %s", (f"nudge-{name}-{i}", cur.fetchone()[0]))
        wait_for_note(settings, topic, f"nudge-{name}-{i}", registry_url=registry)
    raise AssertionError(f"a full snapshot is still in progress after {max_runs} runs: {progress}")


def completed_snapshots(settings, name: str) -> list[dict]:
    """``cdc.snapshot-completed`` of every commit of the table, oldest first."""
    table = load_catalog(settings).load_table(f"conv.{name}")
    out = []
    for snap in table.snapshots():
        props = snap.summary.additional_properties if snap.summary else {}
        if SummaryKeys.SNAPSHOT_COMPLETED in props:
            out.append(json.loads(props[SummaryKeys.SNAPSHOT_COMPLETED]))
    return out


def restart_without_offsets(settings, **kwargs) -> None:
    """Stop Connect, delete its offsets and start it again: the connector takes a new initial
    snapshot (of every table of ``inventory``)."""
    source_chain.stop_connect(settings)
    source_chain.connect_offsets_file(settings).unlink(missing_ok=True)
    source_chain.start_connect(settings, **kwargs)


def test_connect_killed_before_its_first_offset_flush_converges(chain, stack_settings, schema_registry, tmp_path):
    """Debezium killed (kill -9) before it ever saved its offsets takes a new initial snapshot when
    it comes back, with no record of what it streamed; the lake converges through it, both for the
    JsonConverter connector and for a second connector writing Avro through the schema registry
    (``conv.crash_avro``: Connect forgets a standalone worker's REST-added connector, so it is added
    again, with no offsets either)."""
    settings, topic = with_table(stack_settings, tmp_path, "crash")
    avro_prefix = f"{settings.topic_prefix}_crash"
    avro_topic = f"{avro_prefix}.inventory.crash"
    config = yaml.safe_load(settings.tables_config.read_text())
    avro_entry = {**config["tables"][0], "name": "crash_avro", "table": "crash_avro", "topic": avro_topic}
    config["tables"].append({**avro_entry, "value_format": "avro"})
    settings.tables_config.write_text(yaml.safe_dump(config))
    settings = settings.model_copy(update={"schema_registry_url": schema_registry})

    def add_avro_connector() -> None:
        # its own binlog client id: another Avro connector of the session may still be connected
        print(
            source_chain.add_avro_connector(
                settings,
                schema_registry,
                ["inventory.crash"],
                name="crash-avro",
                topic_prefix=avro_prefix,
                overrides={"database.server.id": "184058"},
            )
        )

    def converged() -> None:
        for name in ("crash", "crash_avro"):
            catch_up(settings, name, db, source="crash", topic=avro_topic if name == "crash_avro" else topic)
        expected = source_rows(db, "crash")
        assert lake_rows(settings, "crash") == expected
        assert lake_rows(settings, "crash_avro") == expected

    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS crash")
        cur.execute(DDL.format(name="crash"))
        cur.executemany("INSERT INTO crash VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 61)])
    # connectors that never saved their offsets (flush every 10 minutes) stream DML ...
    restart_without_offsets(settings, offset_flush_interval_ms=600_000)
    try:
        add_avro_connector()
        with db.cursor() as cur:
            cur.execute("UPDATE crash SET v = 'streamed' WHERE id <= 10")
            cur.execute("DELETE FROM crash WHERE id BETWEEN 11 AND 15")
            cur.execute("INSERT INTO crash VALUES (100, 'new', NULL)")
            cur.execute("UPDATE crash SET note = 'barrier-1' WHERE id = 1")
        wait_for_note(settings, topic, "barrier-1")
        wait_for_note(settings, avro_topic, "barrier-1", registry_url=schema_registry)
        converged()  # the restart's own snapshots complete too
        # ... and are killed before their first flush
        assert not source_chain.connect_offsets_file(settings).exists()
        source_chain.stop_connect(settings, hard=True)
        with db.cursor() as cur:  # never streamed: only a new snapshot tells the lake
            cur.execute("DELETE FROM crash WHERE id BETWEEN 20 AND 39")
            cur.execute("DELETE FROM crash WHERE id = 100")
            cur.execute("UPDATE crash SET v = 'offline' WHERE id BETWEEN 40 AND 45")
            cur.execute("INSERT INTO crash VALUES (200, 'offline-insert', NULL)")
        source_chain.start_connect(settings)  # no offsets: new initial snapshots
        add_avro_connector()
        with db.cursor() as cur:
            cur.executemany("INSERT INTO crash VALUES (%s, 'after', NULL)", [(i,) for i in range(300, 330)])
            cur.execute("UPDATE crash SET note = 'barrier-2' WHERE id = 1")
        wait_for_note(settings, topic, "barrier-2", timeout_s=240)
        wait_for_note(settings, avro_topic, "barrier-2", timeout_s=240, registry_url=schema_registry)
        converged()
    finally:
        print(source_chain.remove_connector(settings, "crash-avro"))
    for name in ("crash", "crash_avro"):
        done = completed_snapshots(settings, name)
        assert done and done[-1]["rows_deleted"] >= 21, (name, done)  # ids 20..39 and 100
        assert SummaryKeys.SNAPSHOT_FLOOR in summary(settings, name)
        print(f"\n{name}: snapshots completed: {done}")


def test_offsets_deleted_after_deletes_and_a_truncate_converges(chain, stack_settings, tmp_path):
    settings, topic = with_table(stack_settings, tmp_path, "lost")
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS lost")
        cur.execute(DDL.format(name="lost"))
        cur.executemany("INSERT INTO lost VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 41)])
        cur.execute("UPDATE lost SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    assert run_table_dag("lost", settings) == 0
    assert lake_rows(settings, "lost") == source_rows(db, "lost")
    source_chain.stop_connect(settings)
    source_chain.connect_offsets_file(settings).unlink()
    with db.cursor() as cur:
        cur.execute("DELETE FROM lost WHERE id > 30")
        cur.execute("TRUNCATE TABLE lost")
        cur.executemany("INSERT INTO lost VALUES (%s, 'after-truncate', NULL)", [(i,) for i in range(5, 16)])
    source_chain.start_connect(settings)
    with db.cursor() as cur:
        cur.executemany("INSERT INTO lost VALUES (%s, 'after', NULL)", [(i,) for i in range(500, 530)])
        cur.execute("UPDATE lost SET note = 'barrier-2' WHERE id = 5")
    wait_for_note(settings, topic, "barrier-2", timeout_s=240)
    catch_up(settings, "lost", db)
    assert lake_rows(settings, "lost") == source_rows(db, "lost")
    assert len(source_rows(db, "lost")) == 41


def test_add_column_with_default_on_a_populated_table(chain, stack_settings, tmp_path, spark):
    settings, topic = with_table(stack_settings, tmp_path, "dflt")
    # the same events for a table that evolves from their own schemas (no schema-change topic read);
    # a table config of its own: two tables of one config cannot share a topic
    config = yaml.safe_load(settings.tables_config.read_text())
    events = {**config["tables"][0], "name": "dflt_ev", "table": "dflt_ev", "schema_changes": {"source": "events"}}
    events_settings = settings.model_copy(update={"tables_config": tmp_path / "tables-events.yaml"})
    events_settings.tables_config.write_text(yaml.safe_dump({**config, "tables": [events]}))
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS dflt")
        cur.execute(DDL.format(name="dflt"))
        cur.executemany("INSERT INTO dflt VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 31)])
        cur.execute("UPDATE dflt SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    assert run_table_dag("dflt", settings) == 0 and run_table_dag("dflt_ev", events_settings) == 0
    with db.cursor() as cur:
        cur.execute("UPDATE dflt SET v = 'before-alter' WHERE id <= 5")  # same batch, below the ALTERs
        cur.execute("ALTER TABLE dflt ADD COLUMN tag CHAR(3) NULL DEFAULT 'abc'")
        cur.execute("ALTER TABLE dflt ADD COLUMN n INT NOT NULL")  # implicit default 0
        cur.execute("ALTER TABLE dflt ADD COLUMN d DECIMAL(5,2) NOT NULL DEFAULT 1.50")
        cur.execute("ALTER TABLE dflt ADD COLUMN s VARCHAR(10) NOT NULL")  # implicit default ''
        cur.execute("UPDATE dflt SET tag = 'xyz', n = 7 WHERE id = 2")
        cur.execute("INSERT INTO dflt (id, v, tag, n, d, s) VALUES (99, 'new', NULL, 3, 2.25, 'x')")
        cur.execute("UPDATE dflt SET note = 'barrier-2' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-2")
    assert run_table_dag("dflt", settings) == 0 and run_table_dag("dflt_ev", events_settings) == 0
    columns = ("id", "v", "note", "tag", "n", "d", "s")
    expected = source_rows(db, "dflt", ", ".join(columns))
    assert [r for r in expected if r[0] == 8] == [(8, "v8", None, "abc", 0, decimal.Decimal("1.50"), "")]
    assert lake_rows(settings, "dflt", columns) == expected  # pyiceberg
    through_spark = spark.sql(f"SELECT {', '.join(columns)} FROM {settings.catalog_name}.conv.dflt ORDER BY id")
    assert [tuple(r) for r in through_spark.collect()] == expected
    props = load_catalog(settings).load_table("conv.dflt").properties
    defaults = json.loads(props["cdc.column-defaults"])
    assert {c: (d["sql"], d["exact"]) for c, d in defaults.items()} == {
        "tag": ("CAST('abc' AS STRING)", True),
        "n": ("CAST('0' AS INT)", True),
        "d": ("CAST('1.50' AS DECIMAL(5,2))", True),
        "s": ("CAST('' AS STRING)", True),
    }
    # from the events: the defaults their Connect schema carries; Debezium writes none for the
    # implicit default of a NOT NULL column, so n and s read NULL in the rows last written before
    # the ALTERs (every row but 1, 2 and 99)
    implicit = (columns.index("n"), columns.index("s"))
    shown = [tuple(None if i in implicit and r[0] not in (1, 2, 99) else v for i, v in enumerate(r)) for r in expected]
    assert lake_rows(settings, "dflt_ev", columns) == shown
    defaults = json.loads(load_catalog(settings).load_table("conv.dflt_ev").properties["cdc.column-defaults"])
    assert {c: (d["sql"], d["exact"]) for c, d in defaults.items()} == {
        "tag": ("CAST('abc' AS STRING)", True),
        "d": ("CAST('1.50' AS DECIMAL(5,2))", True),
    }


def test_gtid_ordered_table_with_offline_changes_and_a_blocking_snapshot(chain, stack_settings, tmp_path):
    """``ordering: gtid`` on the real chain: MariaDB's GTIDs order the streamed events, and a blocking
    snapshot (whose rows Debezium stamps with the signal's GTID) deletes the rows removed behind
    Debezium's back (``sql_log_bin=0``) once it completes."""
    settings, topic = with_table(stack_settings, tmp_path, "gtd", ordering="gtid")
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS gtd")
        cur.execute(DDL.format(name="gtd"))
        cur.executemany("INSERT INTO gtd VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 41)])
        cur.execute("UPDATE gtd SET v = 'multi' WHERE id BETWEEN 5 AND 9")
        cur.execute("DELETE FROM gtd WHERE id = 3")
        cur.execute("UPDATE gtd SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    assert run_table_dag("gtd", settings) == 0
    assert lake_rows(settings, "gtd") == source_rows(db, "gtd")
    table = load_catalog(settings).load_table("conv.gtd")
    assert table.properties["cdc.ordering"] == "gtid"
    assert all(r["_cdc_gtid_seq"] > 0 for r in table.scan().to_arrow().to_pylist())

    with db.cursor() as cur:  # behind Debezium's back
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("DELETE FROM gtd WHERE id > 30")
        cur.execute("UPDATE gtd SET v = 'offline' WHERE id <= 2")
        cur.execute("SET SESSION sql_log_bin = 1")
    signal = build_signal(f"gtd-{time.time_ns()}", "execute", ["inventory.gtd"], "blocking")
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO debezium_signal (id, type, data) VALUES (%s, %s, %s)",
            (signal.id, signal.type, json.dumps(signal.data)),
        )
    with db.cursor() as cur:
        cur.execute("INSERT INTO gtd VALUES (50, 'after', NULL)")
        cur.execute("UPDATE gtd SET note = 'barrier-2' WHERE id = 4")
    wait_for_note(settings, topic, "barrier-2", timeout_s=240)
    props = catch_up(settings, "gtd", db)
    assert lake_rows(settings, "gtd") == source_rows(db, "gtd")
    done = completed_snapshots(settings, "gtd")
    assert done and done[-1]["rows_deleted"] == 10, done  # ids 31..40
    snapshot_seq = int(done[-1]["position"].split(":")[0])
    assert snapshot_seq > 0, done  # the blocking snapshot's rows carry a GTID
    assert json.loads(props[SummaryKeys.SOURCE_IDENTITY]) == {
        "basename": None,
        "gtid_domain": 0,
        "gtid_source": None,
        "server_id": None,
    }


def test_a_failover_upstream_of_the_replica_debezium_reads_goes_on(chain, stack_settings, tmp_path):
    """Debezium reads a MariaDB replica (``log_slave_updates``): the replica's binlog carries each
    event with the server id and GTID of the server that wrote it. The primary's writes then come
    from server id 7 (``SET SESSION server_id``: what a new primary upstream of the replica looks
    like in the replica's binlog) while the replica's binlog goes on: the table follows, recording
    the new identity, instead of stopping for a re-snapshot."""

    replica = stack_settings.model_copy(
        update={"state_dir": tmp_path / "replica", "mariadb_port": free_port(), "topic_prefix": "replica"}
    )
    settings, topic = with_table(stack_settings, tmp_path, "rpl", prefix=replica.topic_prefix)
    print(source_chain.start_mariadb(replica, replica_of=stack_settings))
    try:
        db = source_chain.mariadb_connect(settings, database="inventory")
        with db.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS rpl")
            cur.execute(DDL.format(name="rpl"))
        # Debezium starts streaming a MariaDB binlog at a GTID: the replica's must hold one
        print(source_chain.wait_replicated(replica, stack_settings))
        print(source_chain.add_connector(stack_settings, "replica-connector", replica))
        with db.cursor() as cur:
            cur.executemany("INSERT INTO rpl VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 21)])
            cur.execute("UPDATE rpl SET note = 'barrier-1' WHERE id = 1")
        wait_for_note(settings, topic, "barrier-1")
        assert run_table_dag("rpl", settings) == 0
        assert lake_rows(settings, "rpl") == source_rows(db, "rpl")
        before = json.loads(summary(settings, "rpl")[SummaryKeys.SOURCE_IDENTITY])
        assert (before["server_id"], before["gtid_source"]) == (source_chain.SERVER_ID, f"0-{source_chain.SERVER_ID}")

        with db.cursor() as cur:  # the replica's new upstream
            cur.execute("SET SESSION server_id = 7")
            cur.execute("UPDATE rpl SET v = 'new-upstream' WHERE id <= 5")
            cur.execute("DELETE FROM rpl WHERE id BETWEEN 10 AND 12")
            cur.execute("INSERT INTO rpl VALUES (30, 'new', NULL)")
            cur.execute("UPDATE rpl SET note = 'barrier-2' WHERE id = 2")
        wait_for_note(settings, topic, "barrier-2")
        assert run_table_dag("rpl", settings) == 0
        assert lake_rows(settings, "rpl") == source_rows(db, "rpl")
        props = summary(settings, "rpl")
        after = json.loads(props[SummaryKeys.SOURCE_IDENTITY])
        assert (after["server_id"], after["gtid_source"], after["basename"]) == (7, "0-7", "mysql-bin")
        assert [(e["server_id"], e["gtid_source"]) for e in after["earlier"]] == [
            (source_chain.SERVER_ID, f"0-{source_chain.SERVER_ID}")
        ]
        continued = json.loads(props[SummaryKeys.SOURCE_IDENTITY_CONTINUED])
        assert continued["since"] == after["earlier"][0]["until"]
    finally:
        print(source_chain.remove_connector(stack_settings, "replica-connector"))
        print(source_chain.stop_mariadb(replica))


@pytest.mark.runs_last
def test_reset_master_stops_the_table_until_the_new_history_is_accepted(chain, stack_settings, tmp_path, capsys):
    """RESET MASTER: binlog positions (and MariaDB GTIDs) start over. Debezium cannot follow; restarted
    with ``snapshot.mode=when_needed`` it takes a new snapshot at a position below everything the
    table applied. The table stops naming the change; accepting the new history from the offsets the
    error names lets that snapshot converge the table. Runs last (``runs_last``): the chain streams
    the new history afterwards."""
    settings, topic = with_table(stack_settings, tmp_path, "rst")
    db = source_chain.mariadb_connect(settings, database="inventory")
    with db.cursor() as cur:
        cur.execute("DROP TABLE IF EXISTS rst")
        cur.execute(DDL.format(name="rst"))
        cur.executemany("INSERT INTO rst VALUES (%s, %s, NULL)", [(i, f"v{i}") for i in range(1, 41)])
        cur.execute("UPDATE rst SET note = 'barrier-1' WHERE id = 1")
    wait_for_note(settings, topic, "barrier-1")
    assert run_table_dag("rst", settings) == 0
    assert lake_rows(settings, "rst") == source_rows(db, "rst")

    source_chain.stop_connect(settings)
    with source_chain.mariadb_connect(settings).cursor() as cur:
        cur.execute("RESET MASTER")
    with db.cursor() as cur:
        cur.execute("DELETE FROM rst WHERE id > 30")
        cur.execute("UPDATE rst SET v = 'after-reset' WHERE id <= 5")
        cur.execute("INSERT INTO rst VALUES (77, 'after-reset', NULL)")
    source_chain.start_connect(settings, snapshot_mode="when_needed")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO rst VALUES (%s, 'after', NULL)", [(i,) for i in range(600, 630)])
        cur.execute("UPDATE rst SET note = 'barrier-2' WHERE id = 2")
    wait_for_note(settings, topic, "barrier-2", timeout_s=240)

    capsys.readouterr()
    assert run_table_dag("rst", settings) != 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "binlog positions started over" in text, text[-5000:]
    match = re.search(r'(\{"accept_source_change": true, "replay_from_offsets": \{[^}]*\}\})', text)
    assert match, text[-5000:]
    assert lake_rows(settings, "rst") != source_rows(db, "rst")  # nothing was committed

    assert run_table_dag("rst", settings, conf=json.loads(match.group(1))) == 0
    props = catch_up(settings, "rst", db)
    assert lake_rows(settings, "rst") == source_rows(db, "rst")
    assert SummaryKeys.SOURCE_CHANGE_ACCEPTED in {
        k
        for s in load_catalog(settings).load_table("conv.rst").snapshots()
        for k in (s.summary.additional_properties if s.summary else {})
    }
    assert json.loads(props[SummaryKeys.SOURCE_IDENTITY])["basename"] == "mysql-bin"
