"""The change feed (``change_feed`` in the table config, :mod:`cdclake.model.changes`) on the real
stack: Kafka broker, SparkSession with the Iceberg runtime, SQLite JDBC catalog."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cdclake.io.catalog import committed_offsets, load_catalog
from cdclake.io.changes import changes_of, runs_after
from cdclake.io.kafka import ensure_topic
from cdclake.model.changes import CHANGES_SUFFIX
from cdclake.model.layout import METADATA_COLUMNS, SummaryKeys, side_table
from cdclake.spark.maintenance import maintain_table
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_contract import COLUMNS, ev, key, send

pytestmark = pytest.mark.integration

TABLE_COLUMNS = ["id", "v", *[n for n, _, _ in METADATA_COLUMNS]]


@pytest.fixture
def fed(kafka):
    cfg = make_table(value_format="json", columns=COLUMNS, change_feed={"retention_days": 30})
    ensure_topic(kafka, cfg.topic, 2)
    return cfg


def position(row: dict) -> tuple[int, int, int, int]:
    """The row's position as the table orders it (binlog ordering: file, pos, row, change rank)."""
    return (
        row["_cdc_binlog_file_seq"],
        row["_cdc_binlog_pos"],
        row["_cdc_binlog_row"],
        0 if row["_cdc_snapshot"] else 1,
    )


def run_changes(settings, cfg, run_id: str) -> tuple[list[dict], dict]:
    """The change rows of ``run_id``'s commit, found as a reader finds them (docs/guide.md,
    "Reading the change feed"), and that commit's summary."""
    catalog = load_catalog(settings)
    table = catalog.load_table(cfg.identifier)
    [run] = [r for r in runs_after(table, cfg.topic) if r.run_id == run_id]
    rows = changes_of(catalog, cfg.identifier, run).to_pylist()
    assert len(rows) == run.changes_rows
    return rows, dict(table.snapshot_by_id(run.snapshot_id).summary.additional_properties)


def replay(runs: list[list[dict]]) -> dict[int, dict]:
    """The table the change rows of ``runs`` (in commit order) rebuild: a ``t`` row deletes the rows
    below its position, a ``d`` row its key, any other row upserts its key."""
    rows: dict[int, dict] = {}
    for changes in runs:
        for t in (c for c in changes if c["_cdc_op"] == "t"):
            rows = {k: r for k, r in rows.items() if position(r) >= position(t)}
        for c in changes:
            if c["_cdc_op"] == "d":
                rows.pop(c["id"])
            elif c["_cdc_op"] != "t":
                rows[c["id"]] = {n: c[n] for n in TABLE_COLUMNS}
    return rows


def table_now(settings, cfg) -> dict[int, dict]:
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return {r["id"]: {n: r[n] for n in TABLE_COLUMNS} for r in arrow.to_pylist()}


def ops(changes: list[dict]) -> set[tuple]:
    return {(c["_cdc_op"], c["id"], c["v"], c["_cdc_binlog_pos"]) for c in changes}


def run(spark, settings, cfg, run_id: str):
    planned = plan_offsets(settings, cfg, run_id)
    return apply_offsets(spark, settings, cfg, planned.range, run_id)


def test_change_feed_holds_each_runs_applied_changes_and_rebuilds_the_table(spark, kafka, stack_settings, fed):
    from cdclake_airflow.table_dag import _publish

    # key 1 created then updated, key 6 created and deleted within the run (never in the table)
    send(kafka, fed, [(key(k), ev(op, k, v, pos)) for op, k, v, pos in [
        ("c", 1, "a", 100), ("c", 2, "b", 110), ("c", 3, "c", 120), ("u", 1, "a2", 130), ("c", 6, "f", 140),
        ("d", 6, "f", 150)]])  # fmt: skip
    first = run(spark, stack_settings, fed, "run-1")
    changes1, _ = run_changes(stack_settings, fed, "run-1")
    assert ops(changes1) == {("u", 1, "a2", 130), ("c", 2, "b", 110), ("c", 3, "c", 120)}
    assert {c["_cdc_base_snapshot_id"] for c in changes1} == {None}  # the table's first commit

    # a re-emitted older create (the guard discards it), an update then delete, a primary-key change
    send(kafka, fed, [(key(k), ev(op, k, v, pos, row=row)) for op, k, v, pos, row in [
        ("c", 1, "a", 100, 0), ("u", 2, "b2", 200, 0), ("d", 3, "c", 210, 0), ("c", 4, "c", 210, 1),
        ("d", 2, "b2", 220, 0)]])  # fmt: skip
    run(spark, stack_settings, fed, "run-2")
    changes2, _ = run_changes(stack_settings, fed, "run-2")
    assert ops(changes2) == {("d", 2, None, 220), ("d", 3, None, 210), ("c", 4, "c", 210)}
    assert {c["_cdc_base_snapshot_id"] for c in changes2} == {first.snapshot_id}

    # a truncate (other partition) between an event it discards and two it keeps
    send(kafka, fed, [(key(7), ev("c", 7, "g", 290)), (key(5), ev("c", 5, "e", 310)), (key(4), ev("u", 4, "c2", 320))])
    send(kafka, fed, [(None, ev("t", None, None, 300))], partition=1)
    third = run(spark, stack_settings, fed, "run-3")
    changes3, summary3 = run_changes(stack_settings, fed, "run-3")
    assert ops(changes3) == {("t", None, None, 300), ("c", 5, "e", 310), ("u", 4, "c2", 320)}

    now = table_now(stack_settings, fed)
    assert set(now) == {4, 5}
    assert replay([changes1, changes2, changes3]) == now
    catalog = load_catalog(stack_settings)
    feed_name = side_table(fed.identifier, CHANGES_SUFFIX)
    feed = catalog.load_table(feed_name)
    assert len(feed.scan().to_arrow()) == 9  # nothing but the rows of the three runs
    assert [(f.name, str(f.transform)) for f in feed.spec().fields] == [("_cdc_source_ts_day", "day")]
    assert summary3[SummaryKeys.CHANGES_SNAPSHOT] == str(feed.current_snapshot().snapshot_id)

    # the asset event of run 3 carries the range it committed
    asset = object()
    context = {"run_id": "run-3", "outlet_events": {asset: SimpleNamespace()}}
    _, extra, _ = _publish(catalog, fed, asset, context)
    assert extra["snapshot_id"] == third.snapshot_id
    assert extra["previous_snapshot_id"] == {c["_cdc_base_snapshot_id"] for c in changes3}.pop()
    assert (
        extra["previous_snapshot_id"]
        == catalog.load_table(fed.identifier).snapshot_by_id(third.snapshot_id).parent_snapshot_id
    )
    assert (extra[SummaryKeys.FIRST_POSITION], extra[SummaryKeys.LAST_POSITION]) == ("7:290:0", "7:320:0")
    assert (extra[SummaryKeys.CHANGES_SNAPSHOT], extra[SummaryKeys.CHANGES_ROWS]) == (
        summary3[SummaryKeys.CHANGES_SNAPSHOT],
        "3",
    )

    # retention: cdc_maintenance deletes the days older than retention_days; its snapshots expire too
    day_ms = 24 * 3600 * 1000
    source_ms = 1_700_000_000_000  # every event's source.ts_ms
    kept = maintain_table(spark, stack_settings, fed, actions=["expire_changes"], now_ms=source_ms + 30 * day_ms)
    assert kept.report("expire_changes").figures == {"expired_changes": 0}
    result = maintain_table(
        spark, stack_settings, fed, actions=["expire_changes", "expire_snapshots"], now_ms=source_ms + 31 * day_ms
    )
    assert result.report("expire_changes").figures == {"expired_changes": 9}
    assert len(feed.refresh().scan().to_arrow()) == 0
    assert result.report("expire_snapshots", feed_name).status == "done"


def test_a_try_that_fails_after_writing_its_changes_is_replaced_by_its_retry(
    spark, kafka, stack_settings, fed, monkeypatch
):
    """The fault between the feed's commit and the table's cannot be made real in-process: the
    table's commit is replaced by one that raises (a mock, to inject the fault only)."""
    from cdclake.spark import apply as apply_module

    send(kafka, fed, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))])
    run(spark, stack_settings, fed, "run-1")
    send(kafka, fed, [(key(1), ev("u", 1, "a2", 200)), (key(3), ev("c", 3, "c", 210)), (key(2), ev("d", 2, "b", 220))])
    planned = plan_offsets(stack_settings, fed, "run-2")

    def fail(*args, **kwargs):
        raise RuntimeError("injected: the worker died between the two commits")

    monkeypatch.setattr(apply_module, "commit", fail)
    with pytest.raises(RuntimeError, match="injected"):
        apply_offsets(spark, stack_settings, fed, planned.range, "run-2")
    catalog = load_catalog(stack_settings)
    assert committed_offsets(catalog.load_table(fed.identifier), fed.topic) == planned.range.start
    feed = catalog.load_table(side_table(fed.identifier, CHANGES_SUFFIX))
    assert sorted(r["_cdc_run_id"] for r in feed.scan().to_arrow().to_pylist()) == ["run-1"] * 2 + ["run-2"] * 3

    monkeypatch.undo()  # the Airflow retry: the same plan
    assert apply_offsets(spark, stack_settings, fed, planned.range, "run-2").status == "committed"
    rows = feed.refresh().scan().to_arrow().to_pylist()
    assert sorted(r["_cdc_run_id"] for r in rows) == ["run-1"] * 2 + ["run-2"] * 3  # no duplicate
    # the failed try's rows went in the retry's own commit: one overwrite, whole files
    replaced = feed.current_snapshot().summary
    assert (replaced.operation.value, replaced["deleted-records"], replaced["added-records"]) == ("overwrite", "3", "3")
    changes1, _ = run_changes(stack_settings, fed, "run-1")
    changes2, _ = run_changes(stack_settings, fed, "run-2")
    assert replay([changes1, changes2]) == table_now(stack_settings, fed)
