"""GTID ordering (table config ``ordering: gtid``, :mod:`cdclake.model.position`) on the real stack:
Kafka broker, SparkSession with the Iceberg runtime, SQLite JDBC catalog.

A failover to a replica is written here as Debezium writes it after reconnecting to the new
primary: the new primary's own transactions carry its server id, its binlog's (lower) coordinates
and MariaDB GTIDs of the same domain whose sequence goes on; transactions replicated from the old
primary keep their originating server id and GTID but sit at the new binlog's coordinates
(MariaDB KB, "Global Transaction ID"; the shapes are those of the recorded chain events in
tests/data/chain, which carry ``gtid`` ``0-223344-<n>``).
"""

from __future__ import annotations

import json

import pytest

from cdclake.errors import ConfigError, PositionOrderError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.model.layout import ORDERING_PROPERTY, TOMBSTONES_SUFFIX, SummaryKeys, side_table
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}


def ev(op, key, v, *, gtid, file, pos, row=0, snapshot="false", server_id=1):
    """A payload-only Debezium envelope of table t(id int, v string)."""
    image = {"id": key, "v": v}
    return json.dumps(
        {
            "before": image if op in ("u", "d") else None,
            "after": image if op in ("c", "u", "r") else None,
            "op": op,
            "ts_ms": 1_700_000_000_000,
            "source": {
                "connector": "mariadb",
                "name": "t",
                "server_id": server_id,
                "file": file,
                "pos": pos,
                "row": row,
                "snapshot": snapshot,
                "ts_ms": 1_700_000_000_000,
                "db": "d",
                "table": "t",
                "gtid": gtid,
            },
        }
    ).encode()


def on_a(op, key, v, seq, pos):
    """An event of the old primary A (server 1, ``mysql-bin.000009``)."""
    return json.dumps({"id": key}).encode(), ev(op, key, v, gtid=f"0-1-{seq}", file="mysql-bin.000009", pos=pos)


def on_b(op, key, v, seq, pos, *, origin=2):
    """An event read from the new primary B (``mysql-bin.000001``): its own (server 2) or one
    replicated from A (``origin`` 1, A's GTID)."""
    return json.dumps({"id": key}).encode(), ev(
        op, key, v, gtid=f"0-{origin}-{seq}", file="mysql-bin.000001", pos=pos, server_id=origin
    )


def rows(settings, cfg) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: r["v"] for r in arrow.to_pylist()}


@pytest.fixture
def table(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS, ordering="gtid")
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def test_a_failover_to_a_replica_is_followed_without_a_stop(spark, kafka, stack_settings, table):
    produce_raw(kafka, table.topic, [on_a("c", 1, "a", 100, 9000), on_a("c", 2, "b", 101, 9300)])
    produce_raw(kafka, table.topic, [on_a("c", 3, "c", 102, 9600)], partition=1)
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a", 2: "b", 3: "c"}

    # A's transaction 103 reached B through replication but was never read from A; after the
    # failover Debezium reads it from B, then B's own transactions 104..106 at B's low positions.
    # B also re-emits 101 (already applied): its older value must not come back.
    produce_raw(
        kafka,
        table.topic,
        [on_b("u", 1, "a-103", 103, 700, origin=1), on_b("u", 1, "a-on-b", 104, 800), on_b("d", 2, "b", 105, 900)],
    )
    produce_raw(
        kafka, table.topic, [on_b("c", 2, "b-old", 101, 400, origin=1), on_b("c", 4, "d", 106, 1000)], partition=1
    )
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a-on-b", 3: "c", 4: "d"}

    lake = load_catalog(stack_settings).load_table(table.identifier)
    assert lake.properties[ORDERING_PROPERTY] == "gtid"
    summary = lake.current_snapshot().summary
    assert json.loads(summary[SummaryKeys.SOURCE_IDENTITY])["gtid_domain"] == 0
    assert summary[SummaryKeys.HIGH_POSITION].startswith("106:1000:")
    by_id = {r["id"]: r for r in lake.scan().to_arrow().to_pylist()}
    assert (by_id[1]["_cdc_gtid_seq"], by_id[1]["_cdc_binlog_file_seq"]) == (104, 1)
    tombstones = load_catalog(stack_settings).load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert [(r["id"], r["_cdc_gtid_seq"]) for r in tombstones.scan().to_arrow().to_pylist()] == [(2, 105)]

    # a replay of everything, old primary and new, ends where the runs ended
    planned = plan_offsets(stack_settings, table, replay_from_offsets={0: 0, 1: 0})
    apply_offsets(spark, stack_settings, table, planned.range, "replay", replay=True)
    assert rows(stack_settings, table) == {1: "a-on-b", 3: "c", 4: "d"}


def test_binlog_ordering_stops_on_the_same_failover(spark, kafka, stack_settings):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 1)
    produce_raw(kafka, cfg.topic, [on_a("c", 1, "a", 100, 9000)])
    run_once(spark, stack_settings, cfg)
    produce_raw(kafka, cfg.topic, [on_b("u", 1, "a-on-b", 104, 800)])
    with pytest.raises(PositionOrderError, match="server id"):
        run_once(spark, stack_settings, cfg)
    assert rows(stack_settings, cfg) == {1: "a"}


def test_an_initial_snapshot_without_gtids_ranks_below_the_changes_after_it(spark, kafka, stack_settings, table):
    """Debezium leaves source.gtid null in an initial snapshot's rows (tests/data/chain's
    schema-change records of the snapshot show the same); under GTID ordering they rank below every
    GTID, so a change after the snapshot wins whatever its binlog coordinates."""
    key = json.dumps({"id": 1}).encode()
    snap = ev("r", 1, "snap", gtid=None, file="mysql-bin.000001", pos=1695, snapshot="true", server_id=0)
    produce_raw(kafka, table.topic, [(key, ev("u", 1, "changed", gtid="0-1-2", file="mysql-bin.000001", pos=1000))])
    produce_raw(kafka, table.topic, [(key, snap)], partition=1)
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "changed"}


@pytest.mark.parametrize(
    "gtid, what",
    [(None, "None"), ("3E11FA47-71CA-11E1-9E33-C80AA9429562:23", "3E11FA47")],
    ids=["no-gtid", "mysql-gtid"],
)
def test_a_change_without_a_mariadb_gtid_stops_the_table(spark, kafka, stack_settings, table, gtid, what):
    produce_raw(kafka, table.topic, [on_a("c", 1, "a", 100, 9000)])
    produce_raw(
        kafka,
        table.topic,
        [(json.dumps({"id": 2}).encode(), ev("c", 2, "b", gtid=gtid, file="mysql-bin.000009", pos=9500))],
        partition=1,
    )
    with pytest.raises(PositionOrderError, match=rf"partition 1 offset 0: .*source.gtid is '?{what}") as err:
        run_once(spark, stack_settings, table)
    assert "ordering: binlog" in str(err.value)


def test_another_gtid_domain_stops_the_table(spark, kafka, stack_settings, table):
    produce_raw(kafka, table.topic, [on_a("c", 1, "a", 100, 9000)])
    run_once(spark, stack_settings, table)
    key = json.dumps({"id": 1}).encode()
    produce_raw(kafka, table.topic, [(key, ev("u", 1, "x", gtid="7-2-5", file="mysql-bin.000001", pos=500))])
    with pytest.raises(PositionOrderError, match=r"GTID domain: \['0', '7'\] \(the table's: 0\)"):
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a"}


def test_the_ordering_of_a_table_with_data_cannot_change(spark, kafka, stack_settings, table):
    produce_raw(kafka, table.topic, [on_a("c", 1, "a", 100, 9000)])
    run_once(spark, stack_settings, table)
    produce_raw(kafka, table.topic, [on_a("c", 2, "b", 101, 9100)])
    as_binlog = table.model_copy(update={"ordering": "binlog"})
    with pytest.raises(ConfigError, match="ordering 'binlog', but the table's positions are in ordering 'gtid'"):
        run_once(spark, stack_settings, as_binlog)
    assert rows(stack_settings, table) == {1: "a"}
