"""Each rule of the apply contract (docs/architecture.md, "The apply contract") in isolation, on the real stack:
Kafka broker, SparkSession with the Iceberg runtime, SQLite JDBC catalog."""

from __future__ import annotations

import json
import threading
import time

import pytest

from cdclake.errors import ConcurrentRunError, ConfigError, PositionOrderError
from cdclake.io.catalog import committed_offsets, load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.io.maintenance import expire_tombstones, release_quarantined
from cdclake.model.layout import QUARANTINE_SUFFIX, TOMBSTONES_SUFFIX, SummaryKeys, side_table
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}


def ev(op, key, v, pos, *, file="mysql-bin.000007", row=0, snapshot="false", server_id=1):
    """A payload-only Debezium envelope of table t(id int, v string) at ``file``:``pos``:``row``."""
    image = None if key is None else {"id": key, "v": v}
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
            },
        }
    ).encode()


def key(k) -> bytes:
    return json.dumps({"id": k}).encode()


def rows(settings, cfg) -> dict:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: r["v"] for r in arrow.to_pylist()}


@pytest.fixture
def table(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def send(kafka, cfg, records, partition=0):
    produce_raw(kafka, cfg.topic, records, partition=partition)


def test_delete_tombstone_discards_a_replayed_older_upsert(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("d", 1, "a", 200))])
    run_once(spark, stack_settings, table)
    tomb = load_catalog(stack_settings).load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert [(r["id"], r["_cdc_binlog_pos"]) for r in tomb.scan().to_arrow().to_pylist()] == [(1, 200)]
    # the connector re-emits the create at a higher offset: it must not resurrect the row
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(1), ev("u", 1, "a2", 150))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {2: "b"}
    # a genuinely newer insert of the same key comes back
    send(kafka, table, [(key(1), ev("c", 1, "again", 300))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "again", 2: "b"}


def test_tombstones_older_than_retention_are_expired(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(1), ev("d", 1, "a", 200))])
    run_once(spark, stack_settings, table)
    catalog = load_catalog(stack_settings)
    assert expire_tombstones(catalog, table.identifier, table.tombstone_retention_hours) == 0
    later_ms = 10**13  # far beyond the retention
    assert expire_tombstones(catalog, table.identifier, table.tombstone_retention_hours, now_ms=later_ms) == 1
    tomb = catalog.load_table(side_table(table.identifier, TOMBSTONES_SUFFIX))
    assert tomb.scan().to_arrow().num_rows == 0


def test_truncate_removes_older_rows_and_events_but_keeps_later_ones(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    # one batch: an update below the truncate, the truncate (no key, other partition), a create after
    send(kafka, table, [(key(1), ev("u", 1, "a2", 120)), (key(3), ev("c", 3, "c", 160))], partition=0)
    send(kafka, table, [(None, ev("t", None, None, 150))], partition=1)
    _, result = run_once(spark, stack_settings, table)
    assert result.ops["t"] == 1
    assert rows(stack_settings, table) == {3: "c"}
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.TRUNCATE_FLOOR] == "7:150:0:1"
    # a later batch re-emitting events from before the truncate cannot bring rows back
    send(kafka, table, [(key(2), ev("c", 2, "b", 110)), (key(4), ev("c", 4, "d", 170))])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {3: "c", 4: "d"}
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.TRUNCATE_FLOOR] == "7:150:0:1"


def test_primary_key_change_in_different_partitions(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))], partition=0)
    run_once(spark, stack_settings, table)
    # UPDATE t SET id = 2 WHERE id = 1: Debezium emits d(1), a Kafka tombstone for key 1, and c(2),
    # all at the position of the one binlog row event; the new key hashes to another partition
    headers_old = [("__debezium.newkey", key(2))]
    producer = kafka.producer()
    producer.produce(
        table.topic, key=key(2), value=ev("c", 2, "a", 200), partition=1, headers=[("__debezium.oldkey", key(1))]
    )
    producer.produce(table.topic, key=key(1), value=ev("d", 1, "a", 200), partition=0, headers=headers_old)
    producer.produce(table.topic, key=key(1), value=None, partition=0)
    producer.flush(30)
    _, result = run_once(spark, stack_settings, table)
    assert result.tombstones == 1
    assert rows(stack_settings, table) == {2: "a"}


def test_duplicates_and_reemitted_suffix_leave_the_table_unchanged(spark, kafka, stack_settings, table):
    history = [
        (key(1), ev("c", 1, "a", 100)),
        (key(1), ev("u", 1, "b", 200)),
        (key(2), ev("c", 2, "x", 210)),
        (key(2), ev("d", 2, "x", 220)),
        (key(3), ev("c", 3, "y", 230)),
    ]
    send(kafka, table, history + [history[1]])  # a duplicate inside the batch
    run_once(spark, stack_settings, table)
    expected = {1: "b", 3: "y"}
    assert rows(stack_settings, table) == expected
    # connector restart: the suffix is emitted again at higher offsets, in a later run
    send(kafka, table, history[1:])
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == expected


def test_changelog_mode_appends_every_event_and_upsert_without_key_is_refused(spark, kafka, stack_settings):
    refused = make_table(value_format="json", columns=COLUMNS, primary_key=[])
    ensure_topic(kafka, refused.topic, 1)
    with pytest.raises(ConfigError, match="write_mode: changelog"):
        plan_offsets(stack_settings, refused)

    log = make_table(value_format="json", columns=COLUMNS, primary_key=[], write_mode="changelog")
    ensure_topic(kafka, log.topic, 1)
    send(
        kafka,
        log,
        [
            (None, ev("c", 1, "a", 100)),
            (None, ev("c", 1, "a", 100)),
            (None, ev("u", 1, "b", 200)),
            (None, ev("d", 1, "b", 300)),
        ],
    )
    run_once(spark, stack_settings, log)
    arrow = load_catalog(stack_settings).load_table(log.identifier).scan().to_arrow()
    got = sorted((r["_cdc_binlog_pos"], r["_cdc_op"], r["v"]) for r in arrow.to_pylist())
    assert got == [(100, "c", "a"), (100, "c", "a"), (200, "u", "b"), (300, "d", "b")]


def test_bad_record_is_quarantined_and_its_key_held_back_until_released(spark, kafka, stack_settings, table):
    send(
        kafka,
        table,
        [
            (key(1), ev("c", 1, "a", 100)),  # offset 0
            (key(1), b'{"op": "u", "after": {"id": 1, "v": "lost"}'),  # offset 1: truncated JSON
            (key(1), ev("u", 1, "after-bad", 300)),  # offset 2: held back
            (key(2), ev("c", 2, "b", 400)),  # offset 3: applied
        ],
    )
    _, result = run_once(spark, stack_settings, table)
    assert result.quarantined == 2
    assert rows(stack_settings, table) == {1: "a", 2: "b"}
    table_now = load_catalog(stack_settings).load_table(table.identifier)
    assert committed_offsets(table_now, table.topic)[0] == 4  # offsets moved past quarantined records
    quarantine = load_catalog(stack_settings).load_table(side_table(table.identifier, QUARANTINE_SUFFIX))
    entries = sorted(quarantine.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["partition"], r["offset"], r["status"], r["held_back_behind"]) for r in entries] == [
        (0, 1, "open", None),
        (0, 2, "open", 1),
    ]
    assert entries[0]["error"] == "value is not JSON"
    assert entries[0]["value"] == b'{"op": "u", "after": {"id": 1, "v": "lost"}'
    assert entries[0]["key"] == key(1)

    # a later run: key 1 is still held back behind its open quarantine entry
    send(kafka, table, [(key(1), ev("u", 1, "later", 500))])
    _, result = run_once(spark, stack_settings, table)
    assert result.quarantined == 1 and rows(stack_settings, table)[1] == "a"

    # the operator releases the bad record and replays from it: the held-back events apply in order
    assert release_quarantined(load_catalog(stack_settings), table.identifier, 0, 1) == 3
    planned = plan_offsets(stack_settings, table, replay_from_offsets={0: 1})
    result = apply_offsets(spark, stack_settings, table, planned.range, "replay", replay=True)
    assert result.status == "committed"
    assert rows(stack_settings, table) == {1: "later", 2: "b"}


def test_strict_mode_fails_without_quarantining(spark, kafka, stack_settings):
    from cdclake.errors import BadBatchError

    cfg = make_table(value_format="json", columns=COLUMNS, bad_records="fail")
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(key(1), ev("c", 1, "a", 100)), (key(1), b'{"op": "c"}')])
    with pytest.raises(BadBatchError, match="partition 0 offset 1: envelope has no 'source' block"):
        run_once(spark, stack_settings, cfg)
    assert load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot() is None


def test_binlog_basename_change_stops_the_table(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("u", 1, "b", 4, file="other-host-bin.000001", server_id=2))])
    with pytest.raises(PositionOrderError, match="other-host-bin"):
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a"}


def test_a_new_server_in_a_later_run_stops_the_table_until_the_operator_accepts_it(spark, kafka, stack_settings, table):
    """Source identity across runs: the server id recorded by an earlier commit is compared with a
    later batch's; accepting the new history demotes the old rows, and the next full snapshot of
    the new history deletes those it did not read."""
    send(kafka, table, [(key(1), ev("c", 1, "a", 900)), (key(2), ev("c", 2, "b", 910))])
    run_once(spark, stack_settings, table)
    # failover: the new primary's binlog positions are lower, its server id differs
    send(kafka, table, [(key(1), ev("u", 1, "new-a", 50, server_id=7))])
    with pytest.raises(PositionOrderError, match=r"server id: \['1', '7'\] \(the table's: 1\)") as err:
        run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "a", 2: "b"}
    conf = json.loads(str(err.value).split("trigger this table's DAG with ", 1)[1].split(" (the first record", 1)[0])
    assert conf == {"accept_source_change": True, "replay_from_offsets": {"0": 2, "1": 0}}

    offsets = {int(p): o for p, o in conf["replay_from_offsets"].items()}
    planned = plan_offsets(stack_settings, table, replay_from_offsets=offsets, accept_source_change=True)
    assert planned.accept_source_change
    apply_offsets(spark, stack_settings, table, planned.range, "accept", replay=True, accept_source_change=True)
    assert rows(stack_settings, table) == {1: "new-a", 2: "b"}  # the old rows stay readable
    lake = load_catalog(stack_settings).load_table(table.identifier)
    summary = lake.current_snapshot().summary
    assert json.loads(summary[SummaryKeys.SOURCE_IDENTITY])["server_id"] == 7
    assert SummaryKeys.SOURCE_CHANGE_ACCEPTED in summary.additional_properties
    demoted = {r["id"]: r["_cdc_binlog_file_seq"] for r in lake.scan().to_arrow().to_pylist()}
    assert demoted == {1: 7, 2: -1}

    # a full snapshot of the new server (key 2 is gone there) completes: key 2 is deleted. Its end
    # record was sent two minutes ago: partition 1, read to its end, cannot hold a record sent
    # before it that has not landed yet (SNAPSHOT_SETTLE_MS)
    producer = kafka.producer()
    producer.produce(
        table.topic,
        key=key(1),
        value=ev("r", 1, "new-a", 60, snapshot="last", server_id=0),
        partition=0,
        timestamp=int(time.time() * 1000) - 120_000,
    )
    producer.flush(30)
    run_once(spark, stack_settings, table)
    assert rows(stack_settings, table) == {1: "new-a"}


def test_two_runs_from_the_same_start_cannot_both_commit(spark, kafka, stack_settings, table):
    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    send(kafka, table, [(key(1), ev("u", 1, "b", 200)), (key(2), ev("c", 2, "c", 210))])
    planned = plan_offsets(stack_settings, table)
    outcomes: list = []

    def run(name):
        try:
            outcomes.append(apply_offsets(spark, stack_settings, table, planned.range, name).status)
        except ConcurrentRunError as e:
            outcomes.append(f"refused: {e}")

    threads = [threading.Thread(target=run, args=(f"race-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("committed") == 1, outcomes
    other = next(o for o in outcomes if o != "committed")
    assert other == "already_applied" or other.startswith("refused: table")
    tbl = load_catalog(stack_settings).load_table(table.identifier)
    from pyiceberg.table.snapshots import ancestors_of

    main_history = list(ancestors_of(tbl.current_snapshot(), tbl.metadata))
    commits = [
        s
        for s in main_history
        if s.summary.get(SummaryKeys.START_OFFSETS)
        == json.dumps({str(p): o for p, o in planned.range.start.items()}, separators=(",", ":"))
    ]
    assert len(commits) == 1
    assert rows(stack_settings, table) == {1: "b", 2: "c"}


def test_commit_on_a_stale_base_snapshot_is_refused_by_iceberg(spark, kafka, stack_settings, table):
    """The optimistic check itself: a run that read snapshot S commits nothing once main moved."""
    from cdclake.io.catalog import committed_state
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.plan import RunPlan
    from cdclake.spark.commit import commit
    from cdclake.spark.context import ApplyContext, source_columns

    send(kafka, table, [(key(1), ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, table)
    tbl = load_catalog(stack_settings).load_table(table.identifier)
    base = committed_state(tbl, table.topic).snapshot_id
    send(kafka, table, [(key(1), ev("u", 1, "b", 200))])
    run_once(spark, stack_settings, table)  # another run commits: main moves past base
    target = f"{stack_settings.catalog_name}.{table.identifier}"
    with pytest.raises(ConcurrentRunError, match=f"since this run read snapshot {base}"):
        commit(
            ApplyContext(
                spark,
                stack_settings,
                kafka,
                RunPlan(table=table, run_id="probe", range=OffsetRange(topic=table.topic, start={}, end={})),
                load_catalog(stack_settings),
                tbl,
                committed_state(tbl, table.topic),
                source_columns(tbl),
            ),
            {"cdc.probe": "x"},
            lambda t: spark.sql(f"DELETE FROM {t} WHERE id = 1"),
        )
    assert rows(stack_settings, table) == {1: "b"}
    refs = {r["name"] for r in spark.sql(f"SELECT name FROM {target}.refs").collect()}
    assert refs == {"main"}


def test_replay_from_a_timestamp_resolves_offsets_for_times_and_converges(spark, kafka, stack_settings, table):
    import time as _time

    send(kafka, table, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run_once(spark, stack_settings, table)
    _time.sleep(1.0)
    cut_ms = int(_time.time() * 1000)
    _time.sleep(0.5)
    send(kafka, table, [(key(1), ev("u", 1, "a2", 120)), (key(2), ev("d", 2, "b", 130))])
    run_once(spark, stack_settings, table)
    before = rows(stack_settings, table)
    assert before == {1: "a2"}
    planned = plan_offsets(stack_settings, table, replay_from_timestamp_ms=cut_ms)
    # the replay starts at the first records written after the cut: offset 2 of partition 0
    assert planned.range.start == {0: 2, 1: 0}
    assert planned.range.end == {0: 4, 1: 0}
    result = apply_offsets(spark, stack_settings, table, planned.range, "replay-ts", replay=True)
    assert result.status == "committed"
    assert rows(stack_settings, table) == before
    summary = load_catalog(stack_settings).load_table(table.identifier).current_snapshot().summary
    assert summary[SummaryKeys.REPLAY] == "true"
