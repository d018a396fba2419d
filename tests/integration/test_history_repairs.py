"""The lake's own repairs in a table's history (:mod:`cdclake.model.history`, "Repairs") on the real
stack: Kafka broker, SparkSession with the Iceberg runtime, SQLite JDBC catalog. After each repair
the history's current rows equal the table (reconcile's history check), the repair's versions are
marked, and a try that fails between the history's commit and the table's is retried without
doubling them."""

from __future__ import annotations

import json

import pytest

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.io.schema_evolution import evolve_schema
from cdclake.model.history import HISTORY_SUFFIX
from cdclake.model.layout import COLUMN_DEFAULTS_PROPERTY, column_encodings, side_table
from cdclake.model.reconcile import CompareColumn, Kind
from cdclake.model.schema_diff import ChangePlan
from cdclake.model.types import ENCODING_FOR_ICEBERG_TYPE, ColumnSpec
from cdclake.pipeline.reconcile_history import check_history
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_change_feed import (
    at,
    fail_between_the_two_commits,
    history_at,
    replay,
    run,
    run_changes,
    table_now,
    timed,
)
from tests.integration.test_contract import COLUMNS, key, send

pytestmark = pytest.mark.integration

COMPARED = [CompareColumn("id", Kind.INT), CompareColumn("v", Kind.STRING)]


def read(k, v, pos, marker) -> bytes:
    """A full snapshot's read of key ``k`` at binlog position ``pos`` (``marker``: Debezium's
    ``source.snapshot``: ``first``, ``true``, ``last``), read at the source time of ``pos``."""
    envelope = json.loads(timed("r", k, v, pos))
    envelope["source"]["snapshot"] = marker
    return json.dumps(envelope).encode()


def tried_and_retried(spark, settings, cfg, run_id: str, monkeypatch, **replay) -> tuple[list[dict], list[dict]]:
    """Run ``run_id`` as a try that fails between the history's commit and the table's, then as its
    retry; returns the history's rows after the try and after the retry (``replay``: the trigger
    form's ``replay_from_offsets`` and ``accept_source_change``)."""
    from cdclake.spark import apply as apply_module

    planned = plan_offsets(settings, cfg, run_id, **replay)
    flags = {"replay": True, "accept_source_change": True} if replay.get("accept_source_change") else {}
    # the fault between the history's commit and the table's cannot be made real in-process: the
    # table's commit is replaced by one that raises (a mock, to inject the fault only)
    monkeypatch.setattr(apply_module, "commit", fail_between_the_two_commits)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, settings, cfg, planned.range, run_id, **flags)
    history = load_catalog(settings).load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    tried = history.scan().to_arrow().to_pylist()
    monkeypatch.undo()  # the Airflow retry: the same plan
    assert apply_offsets(spark, settings, cfg, planned.range, run_id, **flags).status == "committed"
    return tried, history.refresh().scan().to_arrow().to_pylist()


def on_server(event: bytes, server_id: int) -> bytes:
    """``event`` as the server ``server_id`` wrote it: a failover's new primary, whose binlog file
    sequence (1) is below the old primary's (7) at a later source time."""
    envelope = json.loads(event)
    envelope["source"]["server_id"] = server_id
    envelope["source"]["file"] = "mysql-bin.000001"
    return json.dumps(envelope).encode()


def table_rows(settings, cfg, columns=("v",)) -> dict[int, tuple]:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: tuple(r[c] for c in columns) for r in arrow.to_pylist()}


def test_a_complete_full_snapshot_ends_the_versions_of_the_rows_it_did_not_read(
    spark, kafka, stack_settings, monkeypatch
):
    """A re-snapshot reads keys 1 and 2 but not 3 (deleted behind the connector's back): its
    completion deletes key 3 from the table, and in the history ends key 3's version at the
    snapshot's position with a deleted version marked ``repair``."""
    cfg = make_table(value_format="json", columns=COLUMNS, history={}, change_feed={})
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(k), timed(op, k, v, pos)) for op, k, v, pos in [
        ("c", 1, "a", 100), ("c", 2, "b", 110), ("c", 3, "c", 120)]])  # fmt: skip
    run(spark, stack_settings, cfg, "run-1")
    send(kafka, cfg, [(key(1), read(1, "a", 200, "first")), (key(2), read(2, "b2", 200, "last"))])

    tried, retried = tried_and_retried(spark, stack_settings, cfg, "run-2", monkeypatch)
    assert sorted(map(str, retried)) == sorted(map(str, tried))  # nothing doubled, nothing changed
    assert table_rows(stack_settings, cfg) == {1: ("a",), 2: ("b2",)}
    catalog = load_catalog(stack_settings)
    assert check_history(catalog, cfg, COMPARED).differences == 0
    assert history_at(stack_settings, cfg, 150) == {1: "a", 2: "b", 3: "c"}
    assert history_at(stack_settings, cfg, 205) == {1: "a", 2: "b2"}
    three = sorted((r for r in retried if r["id"] == 3), key=lambda r: r["_cdc_valid_from_ts"])
    assert [(r["_cdc_change"], r["_cdc_is_current"], r["_cdc_is_deleted"], r["_cdc_run_id"]) for r in three] == [
        ("event", False, False, "run-1"),
        ("repair", True, True, "run-2"),
    ]
    snapshot_position = {"file_seq": 7, "pos": 200, "row": 0, "change_rank": 0}
    assert three[0]["_cdc_valid_to_position"] == three[1]["_cdc_valid_from_position"] == snapshot_position
    assert three[0]["_cdc_valid_to_ts"] == three[1]["_cdc_valid_from_ts"] == at(200)  # the snapshot's read time
    assert [r["_cdc_change"] for r in retried if r["id"] != 3 and r["_cdc_change"] != "event"] == []
    # the change feed: the try's rows replaced by its retry's, the repair among them
    first, _ = run_changes(stack_settings, cfg, "run-1")
    changes, _ = run_changes(stack_settings, cfg, "run-2")
    assert sorted((c["_cdc_op"], c["id"], c["v"], c["_cdc_change"]) for c in changes) == [
        ("d", 3, None, "repair"), ("r", 1, "a", "event"), ("r", 2, "b2", "event")]  # fmt: skip
    [repair] = [c for c in changes if c["_cdc_change"] == "repair"]
    assert repair["_cdc_source_ts"] == at(200) and repair["_cdc_binlog_pos"] is None
    assert replay([first, changes]) == table_now(stack_settings, cfg)


def test_a_full_snapshot_completed_after_a_column_was_added_repairs_the_feed_and_the_history(
    spark, kafka, stack_settings
):
    """A column added after the run's base snapshot (schema sync's ``ADD COLUMN``; the base
    snapshot's schema lacks it) and a re-snapshot that completes in that run without reading key 3:
    the change feed's repair row and the history's deleted version hold the new column, NULL
    (found by the chain's history test: the feed's repair rows took their types from the base
    snapshot's schema and failed with ``KeyError``)."""
    cfg = make_table(value_format="json", columns=COLUMNS, history={}, change_feed={})
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(k), timed("c", k, v, pos)) for k, v, pos in [(1, "a", 100), (2, "b", 110), (3, "c", 120)]])
    run(spark, stack_settings, cfg, "run-1")
    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    tag = ColumnSpec("tag", "string", False, ENCODING_FOR_ICEBERG_TYPE["string"])
    encodings = {**column_encodings(table.properties), "tag": tag.encoding}
    evolve_schema(table, [ChangePlan(None, adds=[(tag, "v")], encodings=encodings)], {})
    send(kafka, cfg, [(key(1), read(1, "a", 200, "first")), (key(2), read(2, "b2", 200, "last"))])
    run(spark, stack_settings, cfg, "run-2")

    assert table_rows(stack_settings, cfg, ("v", "tag")) == {1: ("a", None), 2: ("b2", None)}
    changes, _ = run_changes(stack_settings, cfg, "run-2")
    assert sorted((c["_cdc_op"], c["id"], c["v"], c["tag"], c["_cdc_change"]) for c in changes) == [
        ("d", 3, None, None, "repair"), ("r", 1, "a", None, "event"), ("r", 2, "b2", None, "event")]  # fmt: skip
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX)).scan().to_arrow().to_pylist()
    three = sorted((r["_cdc_change"], r["_cdc_is_deleted"], r["tag"]) for r in history if r["id"] == 3)
    assert three == [("event", False, None), ("repair", True, None)]
    compared = [*COMPARED, CompareColumn("tag", Kind.STRING)]
    assert check_history(catalog, cfg, compared).differences == 0


def test_a_default_filled_into_older_rows_is_filled_into_their_open_versions(spark, kafka, stack_settings, monkeypatch):
    """``ADD COLUMN tag ... DEFAULT 'abc'`` at 7:150: the run fills the default into the table's
    rows below it, and the history's versions valid across it get it too, in place (also key 2's,
    which the run's own event above the ``ALTER`` ends); the versions closed before it keep NULL,
    and a version from an event above it keeps its own value."""
    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(k), timed(op, k, v, pos)) for op, k, v, pos in [
        ("c", 1, "a", 100), ("c", 2, "b", 110), ("u", 1, "a2", 120)]])  # fmt: skip
    run(spark, stack_settings, cfg, "run-1")
    # schema sync's part, as it does it: the column added and its default recorded
    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    tag = ColumnSpec("tag", "string", False, ENCODING_FOR_ICEBERG_TYPE["string"])
    encodings = {**column_encodings(table.properties), "tag": tag.encoding}
    default = {"tag": {"position": "7:150:0:1", "sql": "CAST('abc' AS STRING)", "exact": True, "reason": "test"}}
    evolve_schema(
        table,
        [ChangePlan(None, adds=[(tag, "v")], encodings=encodings)],
        {COLUMN_DEFAULTS_PROPERTY: json.dumps(default)},
    )
    send(kafka, cfg, [(key(k), timed(op, k, v, pos)) for op, k, v, pos in [("c", 3, "c", 200), ("u", 2, "b2", 210)]])

    tried, retried = tried_and_retried(spark, stack_settings, cfg, "run-2", monkeypatch)
    assert sorted(map(str, retried)) == sorted(map(str, tried))  # nothing doubled, nothing changed
    assert table_rows(stack_settings, cfg, ("v", "tag")) == {1: ("a2", "abc"), 2: ("b2", None), 3: ("c", None)}
    compared = [*COMPARED, CompareColumn("tag", Kind.STRING)]
    assert check_history(catalog, cfg, compared).differences == 0
    versions = sorted((r["id"], r["v"], r["tag"], r["_cdc_is_current"], r["_cdc_change"]) for r in retried)
    assert versions == [
        (1, "a", None, False, "event"),  # closed before the ALTER
        (1, "a2", "abc", True, "event"),
        (2, "b", "abc", False, "event"),  # valid across the ALTER, ended by the run's own event above it
        (2, "b2", None, True, "event"),
        (3, "c", None, True, "event"),
    ]


def test_a_reconcile_repair_ends_the_versions_of_the_rows_the_source_lacks(
    spark, kafka, stack_settings, mariadb, monkeypatch
):
    """Key 3 was deleted at the source behind the connector's back: reconcile's repair (on the real
    MariaDB) deletes it from the table behind a tombstone, and in the history ends key 3's version at
    the tombstone's position with a deleted version marked ``repair``, committed before the table's
    delete, which names it. A try that dies between the two commits is retried: nothing doubles."""
    from datetime import UTC, datetime

    from pyiceberg.table import Table

    from cdclake.io.history import history_as_of
    from cdclake.model.layout import TOMBSTONES_SUFFIX, SummaryKeys
    from cdclake.model.reconcile import Chunk, ChunkOutcome
    from cdclake.pipeline.reconcile_repair import repair
    from cdclake.pipeline.reconcile_scope import ReconcileScope
    from cdclake_dev.chain import local_source

    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 1)
    db = local_source(stack_settings)
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE inventory.{cfg.table} (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.execute(f"INSERT INTO inventory.{cfg.table} VALUES (1, 'a'), (2, 'b')")

    def first_file(event: bytes) -> bytes:  # the lake's rows below every position of the real binlog
        envelope = json.loads(event)
        envelope["source"]["file"] = "mysql-bin.000001"
        return json.dumps(envelope).encode()

    send(kafka, cfg, [(key(k), first_file(timed("c", k, v, pos))) for k, v, pos in [
        (1, "a", 100), (2, "b", 110), (3, "c", 120)]])  # fmt: skip
    run(spark, stack_settings, cfg, "run-1")
    catalog = load_catalog(stack_settings)
    history = catalog.load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    before = len(history.scan().to_arrow())
    scope = ReconcileScope(cfg, "inventory", cfg.table, COMPARED[:1], COMPARED, {}, ("1=1", []))
    found = [ChunkOutcome(Chunk(0, None, None), 2, 3, only_in_lake=[(3,)])]

    def repair_now() -> None:
        repair(stack_settings, kafka, catalog, db, scope, found, None, run_id="reconcile-1", snapshot_timeout_s=5)

    # the fault between the history's commit and the table's delete cannot be made real in-process:
    # the table's delete is replaced by one that raises (a mock, to inject the fault only)
    monkeypatch.setattr(Table, "delete", fail_between_the_two_commits)
    with pytest.raises(RuntimeError, match="injected"):
        repair_now()
    tried = history.refresh().scan().to_arrow().to_pylist()
    assert len(tried) == before + 1  # key 3's deleted version
    monkeypatch.undo()  # reconcile's retry
    repair_now()
    retried = history.refresh().scan().to_arrow().to_pylist()
    assert sorted(map(str, retried)) == sorted(map(str, tried))  # nothing doubled, nothing changed

    table = catalog.load_table(cfg.identifier)
    assert table_rows(stack_settings, cfg) == {1: ("a",), 2: ("b",)}
    assert table.current_snapshot().summary[SummaryKeys.HISTORY_SNAPSHOT] == str(history.current_snapshot().snapshot_id)
    assert check_history(catalog, cfg, COMPARED).differences == 0
    three = sorted((r for r in retried if r["id"] == 3), key=lambda r: r["_cdc_valid_from_ts"])
    assert [(r["_cdc_change"], r["_cdc_is_current"], r["_cdc_is_deleted"], r["_cdc_run_id"]) for r in three] == [
        ("event", False, False, "run-1"),
        ("repair", True, True, "reconcile-1"),
    ]
    tombstone = catalog.load_table(side_table(cfg.identifier, TOMBSTONES_SUFFIX)).scan().to_arrow().to_pylist()
    assert [(t["id"], t["_cdc_source_ts"]) for t in tombstone] == [(3, three[1]["_cdc_valid_from_ts"])]
    assert three[0]["_cdc_valid_to_position"] == three[1]["_cdc_valid_from_position"]
    assert three[0]["_cdc_valid_to_ts"] == three[1]["_cdc_valid_from_ts"] > at(120)  # the repair's read time
    now = {r["id"]: r["v"] for r in history_as_of(catalog, cfg.identifier, datetime.now(UTC)).to_pylist()}
    assert now == {1: "a", 2: "b"}
    # the next run's commit names the history after its own versions: still equal to the table
    send(kafka, cfg, [(key(1), first_file(timed("u", 1, "a2", 130)))])
    run(spark, stack_settings, cfg, "run-2")
    assert check_history(catalog, cfg, COMPARED).differences == 0


def test_a_retried_run_that_accepts_a_new_binlog_history_adds_its_versions_once(
    spark, kafka, stack_settings, monkeypatch
):
    """A failover to a server whose positions are lower (``accept_source_change``: the guard
    compares the new history's positions with no version of the old one): the accepting run's try
    fails between the history's commit and the table's, and its Airflow retry (the same run id)
    adds none of the versions the try committed. The old history's versions are demoted, so that
    the next run's events of the new history, at lower positions, are added."""
    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 1)
    # the old history truncated at 7:95: its floor compares with no position of the new history
    send(kafka, cfg, [(key(1), timed("c", 1, "a0", 90)), (None, timed("t", None, None, 95))])
    send(kafka, cfg, [(key(1), timed("c", 1, "a", 100)), (key(2), timed("c", 2, "b", 110))])
    run(spark, stack_settings, cfg, "run-1")
    send(
        kafka,
        cfg,
        [(key(1), on_server(timed("u", 1, "new-a", 150), 7)), (key(3), on_server(timed("c", 3, "c", 160), 7))],
    )

    tried, retried = tried_and_retried(
        spark, stack_settings, cfg, "run-2", monkeypatch, replay_from_offsets={0: 4}, accept_source_change=True
    )
    assert sorted(map(str, retried)) == sorted(map(str, tried))  # nothing doubled, nothing changed
    assert sorted((r["id"], r["v"], r["_cdc_run_id"]) for r in retried) == [
        (1, "a", "run-1"), (1, "a0", "run-1"), (1, "new-a", "run-2"), (2, "b", "run-1"), (3, "c", "run-2")]  # fmt: skip
    assert table_rows(stack_settings, cfg) == {1: ("new-a",), 2: ("b",), 3: ("c",)}
    # the old history's versions are demoted as the table's rows are, their validity kept
    old = [
        (r["_cdc_binlog_file_seq"], r["_cdc_valid_from_position"]["file_seq"])
        for r in retried
        if r["_cdc_run_id"] == "run-1"
    ]
    assert old == [(-1, 7), (-1, 7), (-1, 7)]
    assert {r["_cdc_binlog_file_seq"] for r in retried if r["_cdc_run_id"] == "run-2"} == {1}
    assert check_history(load_catalog(stack_settings), cfg, COMPARED).differences == 0
    assert history_at(stack_settings, cfg, 155) == {1: "new-a", 2: "b"}

    # the next run (no longer accepting) of the new history: key 2's only version is the old one's
    send(kafka, cfg, [(key(2), on_server(timed("u", 2, "new-b", 170), 7))])
    run(spark, stack_settings, cfg, "run-3")
    assert table_rows(stack_settings, cfg) == {1: ("new-a",), 2: ("new-b",), 3: ("c",)}
    assert check_history(load_catalog(stack_settings), cfg, COMPARED).differences == 0
    assert history_at(stack_settings, cfg, 175) == {1: "new-a", 2: "new-b", 3: "c"}


def test_a_try_that_dies_between_closing_versions_and_adding_them_is_retried_once(
    spark, kafka, stack_settings, monkeypatch
):
    """The run's versions reach the history's branch in two commits (the keys' open versions
    closed, then the new versions appended): a try that dies between them leaves the history's
    ``main`` as it was (the branch is dropped; before the branch, key 1's version stayed closed with
    no newer one), and its retry (the same plan) adds each version once."""
    from pyspark.sql.readwriter import DataFrameWriterV2

    cfg = make_table(value_format="json", columns=COLUMNS, history={})
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(1), timed("c", 1, "a", 100)), (key(2), timed("c", 2, "b", 110))])
    run(spark, stack_settings, cfg, "run-1")
    send(kafka, cfg, [(key(1), timed("u", 1, "a2", 200)), (key(1), timed("u", 1, "a3", 210)),
                      (key(3), timed("c", 3, "c", 220))])  # fmt: skip
    planned = plan_offsets(stack_settings, cfg, "run-2")

    def dies(*args, **kwargs):
        """Stands in for the versions' append (a mock, to inject the fault only)."""
        raise RuntimeError("injected: the worker died between the history's two commits")

    monkeypatch.setattr(DataFrameWriterV2, "append", dies)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, stack_settings, cfg, planned.range, "run-2")
    monkeypatch.undo()
    history = load_catalog(stack_settings).load_table(side_table(cfg.identifier, HISTORY_SUFFIX))
    tried = {
        (r["id"], r["v"]): (r["_cdc_is_current"], r["_cdc_valid_to_position"])
        for r in history.scan().to_arrow().to_pylist()
    }
    assert tried == {(1, "a"): (True, None), (2, "b"): (True, None)}  # main as before the try
    assert set(history.refs()) == {"main"}  # the try's branch was dropped

    assert apply_offsets(spark, stack_settings, cfg, planned.range, "run-2").status == "committed"  # the retry
    rows = history.refresh().scan().to_arrow().to_pylist()
    assert sorted((r["id"], r["v"], r["_cdc_is_current"]) for r in rows) == [
        (1, "a", False), (1, "a2", False), (1, "a3", True), (2, "b", True), (3, "c", True)]  # fmt: skip
    assert history_at(stack_settings, cfg, 205) == {1: "a2", 2: "b"}
    assert check_history(load_catalog(stack_settings), cfg, COMPARED).differences == 0
