"""The per-table status figures (include/cdclake/pipeline/status.py) and ``cdclake status`` on the
real stack: Kafka broker, SparkSession applying real ranges, SQLite Iceberg catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.model.offsets import OffsetRange
from cdclake.model.reconcile import Chunk, ChunkOutcome
from cdclake.model.status import TableStatus
from cdclake.pipeline.reconcile import ReconcileParams, ReconcileResult, write_result
from cdclake.pipeline.status import status_of_tables, table_status
from tests.conftest import ROOT, apply_offsets, make_table
from tests.integration.test_apply import produce_raw, run_once

pytestmark = pytest.mark.integration

COLUMNS = {"id": "int", "v": "string"}
MINUTE_MS = 60_000


def ev(op: str, k: int, pos: int, ts_ms: int) -> bytes:
    """A payload-only Debezium envelope of t(id int, v string) at mysql-bin.000003:``pos``,
    changed in the source at ``ts_ms``."""
    image = {"id": k, "v": f"v{k}"}
    return json.dumps(
        {
            "before": image if op in ("u", "d") else None,
            "after": image if op != "d" else None,
            "op": op,
            "ts_ms": ts_ms + 5,
            "source": {
                "connector": "mariadb",
                "name": "t",
                "server_id": 1,
                "file": "mysql-bin.000003",
                "pos": pos,
                "row": 0,
                "snapshot": "false",
                "ts_ms": ts_ms,
                "db": "d",
                "table": "t",
            },
        }
    ).encode()


def key(k: int) -> bytes:
    return json.dumps({"id": k}).encode()


@pytest.fixture
def loaded(kafka):
    """A table whose topic holds 10 records in 2 partitions, none applied: partition 0 offsets
    0..5, partition 1 offsets 0..3; partition 1 offset 1 is not JSON. Yields ``(cfg, t0)``, ``t0``
    the source time of the first event (30 minutes ago); event ``i`` was made at ``t0 + i`` s.
    Its runs tolerate the bad record (the status counts it; the alert is test_contract.py's)."""
    cfg = make_table(value_format="json", columns=COLUMNS, bad_records_tolerance="all")
    ensure_topic(kafka, cfg.topic, 2)
    t0 = int(time.time() * 1000) - 30 * MINUTE_MS
    s = 1000
    produce_raw(
        kafka,
        cfg.topic,
        [
            (key(1), ev("c", 1, 100, t0)),
            (key(2), ev("c", 2, 110, t0 + 1 * s)),
            (key(3), ev("c", 3, 120, t0 + 2 * s)),
            (key(1), ev("d", 1, 300, t0 + 9 * s)),  # offset 3: the newest applied event, a delete
            (key(5), ev("c", 5, 400, t0 + 20 * s)),  # offsets 4, 5: not applied by the first run
            (key(6), ev("c", 6, 410, t0 + 21 * s)),
        ],
        partition=0,
    )
    produce_raw(
        kafka,
        cfg.topic,
        [
            (key(4), ev("c", 4, 130, t0 + 3 * s)),
            (key(9), b"this is not json"),  # offset 1: quarantined
            (key(7), ev("c", 7, 420, t0 + 22 * s)),  # offsets 2, 3: not applied by the first run
            (key(8), ev("u", 8, 430, t0 + 23 * s)),
        ],
        partition=1,
    )
    return cfg, t0


def test_status_of_a_partly_applied_table(spark, kafka, stack_settings, loaded):
    cfg, t0 = loaded
    result = apply_offsets(
        spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0, 1: 0}, end={0: 4, 1: 2}), "run-1"
    )
    assert (result.status, result.events, result.quarantined) == ("committed", 6, 1)
    catalog = load_catalog(stack_settings)
    snapshot_id = catalog.load_table(cfg.identifier).current_snapshot().snapshot_id
    now = int(time.time() * 1000)

    st = table_status(catalog, kafka, cfg, now_ms=now, freshness_minutes=60)

    assert (st.table_exists, st.topic_exists, st.problems) == (True, True, [])
    assert st.committed_offsets == {0: 4, 1: 2}
    assert st.high_watermarks == {0: 6, 1: 4}
    assert st.lag_events == 4 and st.lag_events_by_partition == {0: 2, 1: 2}
    # the newest applied event is the delete at t0 + 9 s (in the tombstone table, not in a row);
    # the unapplied events' later times do not count
    assert st.last_source_ts_ms == t0 + 9_000
    assert (st.lag_ms, st.lag_basis) == (now - (t0 + 9_000), "source_ts")
    assert st.high_position_kafka_ts_ms is not None and st.high_position_kafka_ts_ms <= now
    assert st.last_commit is not None
    assert (st.last_commit.snapshot_id, st.last_commit.run_id, st.last_commit.events) == (snapshot_id, "run-1", 6)
    assert 0 <= st.last_commit.age_ms < 10 * MINUTE_MS
    assert st.current_snapshot_id == snapshot_id
    assert len(st.events_per_hour) == 24 and st.events_per_hour[-1] == 6 and sum(st.events_per_hour) == 6
    assert st.activity_24h.model_dump() == {
        "commits": 1,
        "events": 6,
        "upserted": 4,
        "deleted": 1,
        "kafka_tombstones": 0,
        "quarantined": 1,
        "ops": {"c": 4, "d": 1},  # cdc.ops
        "last_source_ts_ms": t0 + 9_000,  # cdc.last-source-ts
        "replays": 0,  # replays are counted apart from new source activity
        "replay_events": 0,
    }
    assert st.open_quarantine == 1
    assert st.schema_id is not None and st.column_count == 2
    assert st.snapshot_in_progress is None
    assert st.last_reconcile is None
    assert st.fresh is True  # 30 minutes behind, limit 60
    assert table_status(catalog, kafka, cfg, now_ms=now, freshness_minutes=10).fresh is False
    # JSON round trip
    assert TableStatus.model_validate_json(st.model_dump_json()) == st

    # the rest applied: caught up, fresh whatever the source time says
    _, rest = run_once(spark, stack_settings, cfg, "run-2")
    assert rest.events == 4
    later = int(time.time() * 1000)
    st = table_status(catalog, kafka, cfg, now_ms=later, freshness_minutes=10)
    assert st.lag_events == 0 and st.lag_events_by_partition == {0: 0, 1: 0}
    assert st.last_source_ts_ms == t0 + 23_000
    assert st.last_commit.run_id == "run-2"
    assert (st.activity_24h.commits, st.activity_24h.events, sum(st.events_per_hour)) == (2, 10, 10)
    assert st.fresh is True
    # a window that starts after both commits counts nothing, but still names the last commit
    day = 24 * 60 * MINUTE_MS
    st = table_status(catalog, kafka, cfg, now_ms=later + day + MINUTE_MS)
    assert (st.activity_24h.commits, sum(st.events_per_hour), st.last_commit.run_id) == (0, 0, "run-2")
    assert st.fresh is None  # not judged


def test_last_reconcile_is_the_newest_summary_row(spark, kafka, stack_settings, loaded):
    cfg, _ = loaded
    run_once(spark, stack_settings, cfg, "run-1")
    catalog = load_catalog(stack_settings)
    drift = ChunkOutcome(Chunk(0, None, None), 5, 5, only_in_source=[(7,)], differing={(2,): ["v"]})
    write_result(
        catalog, cfg, ReconcileParams(run_id="rec-1"), ReconcileResult(cfg.identifier, 1, 7, 6, [drift], {}), "x"
    )
    st = table_status(catalog, kafka, cfg)
    assert st.last_reconcile is not None
    assert (st.last_reconcile.run_id, st.last_reconcile.clean) == ("rec-1", False)
    assert (st.last_reconcile.only_in_source, st.last_reconcile.differing, st.last_reconcile.only_in_lake) == (1, 1, 0)
    assert (st.last_reconcile.source_rows, st.last_reconcile.lake_rows, st.last_reconcile.mode) == (7, 6, "report")
    time.sleep(0.01)
    write_result(
        catalog,
        cfg,
        ReconcileParams(mode="repair", run_id="rec-2"),
        ReconcileResult(cfg.identifier, 1, 7, 7, [], {}, repaired=True),
        "y",
    )
    [st] = status_of_tables(catalog, kafka, [cfg])
    assert (st.last_reconcile.run_id, st.last_reconcile.clean, st.last_reconcile.repaired) == ("rec-2", True, True)
    assert 0 <= st.last_reconcile.age_ms < 10 * MINUTE_MS


def test_missing_table_and_missing_topic_are_statuses(kafka, stack_settings):
    catalog = load_catalog(stack_settings)
    nothing = make_table()  # neither topic nor table
    waiting = make_table()  # a topic with records, no table yet
    ensure_topic(kafka, waiting.topic, 3)
    produce_raw(kafka, waiting.topic, [(key(1), ev("c", 1, 100, 1_700_000_000_000))] * 3, partition=2)

    a, b = status_of_tables(catalog, kafka, [nothing, waiting], freshness_minutes=5)

    assert (a.table_exists, a.topic_exists, a.lag_events, a.lag_ms, a.last_commit, a.fresh) == (
        False,
        False,
        None,
        None,
        None,
        None,
    )
    assert any("does not exist yet" in p for p in a.problems)
    assert any(f"topic {nothing.topic!r} does not exist" in p for p in a.problems)
    assert (a.events_per_hour, a.open_quarantine, a.schema_id) == ([0] * 24, 0, None)
    assert (b.table_exists, b.topic_exists) == (False, True)
    assert b.lag_events == 3 and b.lag_events_by_partition == {0: 0, 1: 0, 2: 3}
    assert b.fresh is None  # behind, and no applied event to tell how far


def test_status_without_kafka_has_the_iceberg_figures(spark, kafka, stack_settings, loaded):
    cfg, t0 = loaded
    run_once(spark, stack_settings, cfg, "run-1")
    [st] = status_of_tables(load_catalog(stack_settings), None, [cfg])
    assert (st.topic_exists, st.lag_events, st.lag_events_by_partition) == (None, None, None)
    assert any("Kafka was not asked" in p for p in st.problems)
    assert st.last_source_ts_ms == t0 + 23_000 and st.last_commit.run_id == "run-1"


def run_cli(settings, tables: list, *args: str) -> subprocess.CompletedProcess:
    """``cdclake status ARGS`` in a process of its own, on the tests' stack with a table config
    of ``tables``."""
    config = Path(settings.state_dir) / f"status-{os.getpid()}-{time.monotonic_ns()}.yaml"
    config.write_text(yaml.safe_dump({"tables": [t.model_dump(mode="json", include={*_CONFIG_KEYS}) for t in tables]}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update({**settings.to_env(), "CDCLAKE_TABLES_CONFIG": str(config)})
    return subprocess.run(
        [str(Path(sys.executable).parent / "cdclake"), "status", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


_CONFIG_KEYS = ("name", "topic", "namespace", "table", "primary_key", "value_format", "columns")


def test_cli_status_json_and_table(spark, kafka, stack_settings, loaded):
    cfg, t0 = loaded
    apply_offsets(
        spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0, 1: 0}, end={0: 4, 1: 2}), "run-1"
    )
    other = make_table()  # configured, never applied, no topic

    proc = run_cli(stack_settings, [cfg, other], "--json")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    assert [d["name"] for d in doc] == [cfg.name, other.name]
    mine = TableStatus.model_validate(doc[0])
    assert (mine.lag_events, mine.open_quarantine, mine.activity_24h.events) == (4, 1, 6)
    assert mine.last_source_ts_ms == t0 + 9_000 and mine.lag_basis == "source_ts"
    assert mine.last_commit.run_id == "run-1"
    snapshot_id = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot().snapshot_id
    # 64-bit ids are strings in JSON (a JavaScript number loses digits above 2**53); times also ISO 8601
    assert doc[0]["last_commit"]["snapshot_id"] == doc[0]["current_snapshot_id"] == str(snapshot_id)
    assert doc[0]["checked_at_iso"].endswith("Z") and doc[0]["last_commit"]["committed_at_iso"].endswith("Z")
    assert (doc[1]["table_exists"], doc[1]["topic_exists"], doc[1]["lag_events"]) == (False, False, None)

    # one table by name, as a terminal table
    proc = run_cli(stack_settings, [cfg, other], cfg.name, "--freshness-minutes", "60")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    header, rule, row = proc.stdout.splitlines()[:3]
    assert header.split()[:3] == ["table", "lag", "events"] and set(rule) <= {"-", " "}
    assert row.split()[0] == cfg.name and row.split()[1] == "4" and row.split()[-1] == "yes"
    assert "never" in row  # never reconciled
    assert other.name not in proc.stdout

    # an unknown name is an error naming the configured ones
    proc = run_cli(stack_settings, [cfg, other], "no_such_table")
    assert proc.returncode == 2
    assert "no_such_table" in proc.stderr and cfg.name in proc.stderr and other.name in proc.stderr


def test_cli_status_with_no_broker_says_so_once_with_the_remedy(stack_settings):
    from cdclake_dev.process import free_port

    nowhere = stack_settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{free_port()}"})  # nothing listens
    proc = run_cli(nowhere, [make_table(), make_table()])
    assert proc.returncode == 3
    out = proc.stdout + proc.stderr
    assert "rdkafka" not in out and "Connection refused" not in out  # librdkafka's own log stays out
    assert out.count("did not answer") == 1  # once, for all tables, as the first line: the cause first
    # every broker down ends the wait at once (the 30 s metadata timeout would say "transport failure")
    assert proc.stdout.startswith(f"Kafka at {nowhere.kafka_bootstrap} did not answer: every broker")
    assert "every figure from Kafka below is unknown" in proc.stdout.splitlines()[0]
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .startswith("cdclake status: Kafka is down: start the local stack's Kafka broker")
    )
    assert "`make stack-start`" in proc.stderr


def test_the_demo_customers_snapshot_is_in_progress_only_until_a_change_follows_it(
    spark, kafka, stack_settings, fixtures_dir
):
    """The demo's customers capture (``risingwave/debezium_log.1``): 4 snapshot reads (``op: r``,
    ``source.snapshot: true``, no end marker: the capture stops before Debezium's last record),
    then 6 binlog changes. With only the reads applied, the snapshot is in progress; once a change
    above the snapshot's position is applied, Debezium's snapshot has ended: it is not."""
    from cdclake.io.events import load_events

    cfg = make_table(primary_key=["id"])
    load_events(fixtures_dir / "risingwave/debezium_log.1", cfg, kafka, partitions=1)
    apply_offsets(spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0}, end={0: 4}), "reads")
    (st,) = status_of_tables(load_catalog(stack_settings), kafka, [cfg])
    snapshot = st.snapshot_in_progress
    assert snapshot is not None and (snapshot.records, snapshot.end_applied) == (4, False)
    apply_offsets(spark, stack_settings, cfg, OffsetRange(topic=cfg.topic, start={0: 4}, end={0: 10}), "changes")
    (st,) = status_of_tables(load_catalog(stack_settings), kafka, [cfg])
    assert st.caught_up is True and st.snapshot_in_progress is None
