"""Table upkeep with Iceberg's Spark procedures (:mod:`cdclake.spark.maintenance`) on tables built
by the real apply path: events produced into the tests' Kafka broker and applied run by run, with
updates and deletes (merge-on-read position deletes), a delete tombstone table and a quarantine."""

from __future__ import annotations

import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from cdclake.errors import ConfigError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic
from cdclake.io.maintenance import remove_stale_run_branches
from cdclake.io.refs import committed_offsets
from cdclake.model.layout import (
    QUARANTINE_SUFFIX,
    TOMBSTONES_SUFFIX,
    run_branch_created_ms,
    run_branch_name,
    side_table,
)
from cdclake.model.maintenance import ACTIONS, RefInfo, SnapshotInfo, snapshots_to_expire
from cdclake.spark import commit as commit_module
from cdclake.spark import maintenance
from cdclake.spark.maintenance import maintain_table
from tests.conftest import apply_offsets, make_table, plan_offsets
from tests.integration.test_apply import produce_raw, run_once
from tests.integration.test_contract import COLUMNS, ev, key

pytestmark = pytest.mark.integration

HOUR_MS = 3600 * 1000


def send(kafka, cfg, events) -> None:
    """``events``: ``(partition, key, value bytes)``."""
    for partition in {p for p, _, _ in events}:
        produce_raw(kafka, cfg.topic, [(key(k), v) for p, k, v in events if p == partition], partition=partition)


def build_history(spark, kafka, settings, cfg) -> dict[int, str]:
    """Three apply runs over two partitions: inserts, updates, deletes (position deletes and
    tombstones) and one bad record (a quarantine table; the runs tolerate it); returns the expected
    ``{id: v}``."""
    cfg = cfg.model_copy(update={"bad_records_tolerance": "all"})
    ensure_topic(kafka, cfg.topic, 2)
    expected: dict[int, str] = {}
    runs = [
        [("c", k, f"a{k}", 1000 + k) for k in range(40)],
        [("u", k, f"b{k}", 2000 + k) for k in range(10)] + [("d", k, None, 2100 + k) for k in range(30, 35)],
        [("u", k, f"c{k}", 3000 + k) for k in range(5, 20)]
        + [("d", k, None, 3100 + k) for k in range(35, 38)]
        + [("c", k, f"e{k}", 3200 + k) for k in range(40, 45)],
    ]
    for i, run in enumerate(runs):
        events = [(k % 2, k, ev(op, k, v or f"x{k}", pos)) for op, k, v, pos in run]
        if i == 1:
            events.append((0, 98, b"not json"))  # quarantined: its key is held back from now on
        send(kafka, cfg, events)
        _, result = run_once(spark, settings, cfg, f"run-{i}")
        assert result.status == "committed"
        for op, k, v, _ in run:
            if op == "d":
                expected.pop(k, None)
            else:
                expected[k] = v
    return expected


def rows(settings, cfg) -> list[dict]:
    """Every row with every column (metadata columns too), sorted by key."""
    arrow = load_catalog(settings).load_table(cfg.identifier).scan().to_arrow()
    return sorted(arrow.to_pylist(), key=lambda r: r["id"])


def summary(settings, ident: str) -> dict[str, str]:
    snap = load_catalog(settings).load_table(ident).current_snapshot()
    return dict(snap.summary.additional_properties) if snap and snap.summary else {}


def metadata_count(spark, settings, ident: str, metadata_table: str) -> int:
    return spark.sql(f"SELECT count(*) AS n FROM {settings.catalog_name}.{ident}.{metadata_table}").collect()[0]["n"]


def table_dir(settings, ident: str) -> Path:
    return Path(urlsplit(load_catalog(settings).load_table(ident).location()).path)


def make_orphan(settings, ident: str, name: str, age_hours: float) -> Path:
    """A file in the table's data folder that no snapshot references, modified ``age_hours`` ago."""
    path = table_dir(settings, ident) / "data" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"orphan")
    mtime = time.time() - age_hours * 3600
    os.utime(path, (mtime, mtime))
    return path


def snapshot_ids(settings, ident: str) -> set[int]:
    return {s.snapshot_id for s in load_catalog(settings).load_table(ident).snapshots()}


def test_maintenance_folds_deletes_compacts_and_keeps_rows_and_offsets(spark, kafka, stack_settings, monkeypatch):
    cfg = make_table(value_format="json", columns=COLUMNS)
    expected = build_history(spark, kafka, stack_settings, cfg)
    before = rows(stack_settings, cfg)
    assert {r["id"]: r["v"] for r in before} == expected
    offsets = committed_offsets(load_catalog(stack_settings).load_table(cfg.identifier), cfg.topic)
    data_files = int(summary(stack_settings, cfg.identifier)["total-data-files"])
    assert int(summary(stack_settings, cfg.identifier)["total-delete-files"]) > 0
    assert metadata_count(spark, stack_settings, cfg.identifier, "delete_files") > 0
    assert data_files > 2
    old_orphan = make_orphan(stack_settings, cfg.identifier, "old-orphan.parquet", 80)
    young_orphan = make_orphan(stack_settings, cfg.identifier, "young-orphan.parquet", 30)  # an apply in flight?

    result = maintain_table(spark, stack_settings, cfg)

    assert result.actions == ACTIONS and not result.dry_run
    assert result.snapshot_id_after != result.snapshot_id_before
    assert {r.status for r in result.reports} <= {"done", "skipped"}
    rewrite = result.report("rewrite_data_files")
    assert rewrite.figures["rewritten_data_files_count"] > 0 and rewrite.figures["failed_data_files_count"] == 0
    # deletes are folded into the data, the small files compacted
    after = summary(stack_settings, cfg.identifier)
    assert after["total-delete-files"] == "0"
    assert metadata_count(spark, stack_settings, cfg.identifier, "delete_files") == 0
    assert int(after["total-data-files"]) < data_files
    assert rows(stack_settings, cfg) == before
    # the offsets are still found by walking back past the maintenance commits
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == offsets
    # the side tables were maintained too
    tables = {r.table for r in result.reports}
    assert tables == {
        cfg.identifier,
        side_table(cfg.identifier, TOMBSTONES_SUFFIX),
        side_table(cfg.identifier, QUARANTINE_SUFFIX),
    }
    assert result.report("expire_snapshots", side_table(cfg.identifier, TOMBSTONES_SUFFIX)).status == "done"
    # orphan files: only those older than orphan_file_age_hours (72) go
    assert result.report("remove_orphan_files").figures["orphan_files"] == 1
    assert not old_orphan.exists() and young_orphan.exists()
    assert all(r.seconds >= 0 for r in result.reports)

    # the next apply plans from the same offsets and commits on top of the maintenance commits,
    # while maintenance runs again twice: right after the run created its branch (at the base
    # snapshot, before its MERGE) and while it pauses before its fast-forward
    send(kafka, cfg, [(0, 0, ev("u", 0, "after-maintenance", 5000)), (1, 1, ev("d", 1, None, 5001))])
    planned = plan_offsets(stack_settings, cfg)
    assert planned.range.start == offsets
    removed = race_stale_branch_removal(monkeypatch, stack_settings, cfg)
    assert apply_offsets(spark, stack_settings, cfg, planned.range, "run-after").status == "committed"
    assert removed == {"after_branch_created": [], "before_fast_forward": []}
    expected[0] = "after-maintenance"
    del expected[1]
    assert {r["id"]: r["v"] for r in rows(stack_settings, cfg)} == expected


def test_a_group_table_is_compacted_on_its_stage_branch_and_its_main_waits_for_the_publish(
    spark, kafka, stack_settings
):
    """A table of a group commits its runs to its branch ``cdc_stage`` (``main`` moves only when the
    group is published): maintenance compacts the branch, skips the procedures that work on
    ``main`` only, and leaves ``main`` where the group's last publish put it."""
    from cdclake.io.refs import head_snapshot
    from cdclake.model.layout import STAGE_BRANCH

    cfg = make_table(value_format="json", columns=COLUMNS, group="g")
    expected = build_history(spark, kafka, stack_settings, cfg)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert table.current_snapshot() is None and STAGE_BRANCH in table.refs()  # never published
    # the group published at the branch's first commit (the events carry no transaction metadata
    # to publish by: main is moved as the publish would)
    first = next(s for s in table.snapshots() if s.parent_snapshot_id is None)
    table.manage_snapshots().set_current_snapshot(snapshot_id=first.snapshot_id).commit()
    offsets = committed_offsets(table.refresh(), cfg.topic)

    result = maintain_table(spark, stack_settings, cfg)

    table = table.refresh()
    assert table.current_snapshot().snapshot_id == first.snapshot_id  # main untouched
    rewrite = result.report("rewrite_data_files")
    assert rewrite.status == "done" and rewrite.figures["rewritten_data_files_count"] > 0, result.reports
    assert result.snapshot_id_after == head_snapshot(table).snapshot_id != result.snapshot_id_before
    for action in ("rewrite_position_delete_files", "rewrite_manifests"):
        report = result.report(action)
        assert report.status == "skipped" and "on main only" in report.summary, report
    staged = table.scan().use_ref(STAGE_BRANCH).to_arrow().to_pylist()
    assert {r["id"]: r["v"] for r in staged} == expected
    assert committed_offsets(table, cfg.topic) == offsets


def race_stale_branch_removal(monkeypatch, settings, cfg) -> dict[str, list[str]]:
    """Make the next apply of ``cfg`` run :func:`remove_stale_run_branches` (for real, on the
    catalog) right after it created its run branch and at its ``before_fast_forward`` pause; returns
    ``{point: branches removed}``, filled as the apply goes.

    The table is made quiet for longer than the stale-branch age by choosing the age: 1 ms less
    than the age of ``main``'s current snapshot, the run's base (a run branch starts there), so a
    rule that judged the branch by its head snapshot would remove it under the run."""
    removed: dict[str, list[str]] = {}

    def maintain(point: str, branch: str) -> None:
        catalog = load_catalog(settings)
        base = catalog.load_table(cfg.identifier).current_snapshot()
        created_ms = run_branch_created_ms(branch)
        assert created_ms is not None and created_ms > base.timestamp_ms  # the branch is younger
        now_ms = int(time.time() * 1000)
        age_ms = now_ms - base.timestamp_ms - 1
        removed[point] = remove_stale_run_branches(catalog, cfg.identifier, older_than_ms=age_ms, now_ms=now_ms)

    write_branch, pause = commit_module._write_branch, commit_module.debug_pause

    def write_after_maintenance(ctx, branch, *args, **kwargs):
        maintain("after_branch_created", branch)
        return write_branch(ctx, branch, *args, **kwargs)

    def pause_for_maintenance(point: str, detail: object) -> None:
        if point == "before_fast_forward":
            maintain(point, str(detail))
        pause(point, detail)

    monkeypatch.setattr(commit_module, "_write_branch", write_after_maintenance)
    monkeypatch.setattr(commit_module, "debug_pause", pause_for_maintenance)
    return removed


@pytest.fixture(scope="module")
def zero_window(spark, kafka, stack_settings):
    """A table with history whose maintenance keeps no time-travel window and one snapshot
    (``snapshot_retention_hours: 0``, ``retain_last: 1``); the dry-run test leaves it as it was."""
    cfg = make_table(
        value_format="json", columns=COLUMNS, maintenance={"snapshot_retention_hours": 0, "retain_last": 1}
    )
    build_history(spark, kafka, stack_settings, cfg)
    return cfg


def test_dry_run_commits_nothing_and_reports_candidates(spark, stack_settings, zero_window):
    cfg = zero_window
    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    spark_name = f"{stack_settings.catalog_name}.{cfg.identifier}"
    current = table.current_snapshot()
    branches = {  # as killed applies leave them: name -> snapshot the branch is at
        run_branch_name(int(time.time() * 1000), "000000000000"): current.snapshot_id,
        # named by a release before creation times: removed only once main has moved off its lineage
        "cdc-run-00000000000a": current.snapshot_id,
        "cdc-run-00000000000b": current.parent_snapshot_id,
    }
    for branch, snapshot_id in branches.items():
        spark.sql(f"ALTER TABLE {spark_name} CREATE BRANCH `{branch}` AS OF VERSION {snapshot_id}")
    orphan = make_orphan(stack_settings, cfg.identifier, "old-orphan.parquet", 80)
    idents = [
        cfg.identifier,
        side_table(cfg.identifier, TOMBSTONES_SUFFIX),
        side_table(cfg.identifier, QUARANTINE_SUFFIX),
    ]

    def state():
        return {
            i: (catalog.load_table(i).current_snapshot().snapshot_id, snapshot_ids(stack_settings, i)) for i in idents
        }

    before = state()
    refs = set(catalog.load_table(cfg.identifier).refs())
    files = sorted(p for p in table_dir(stack_settings, cfg.identifier).rglob("*") if p.is_file())
    try:
        # 7 hours later: the run branches left on main's lineage by an older release are kept
        later = int(time.time() * 1000) + 7 * HOUR_MS
        result = maintain_table(spark, stack_settings, cfg, dry_run=True, now_ms=later)

        assert result.dry_run and result.snapshot_id_after == result.snapshot_id_before
        assert state() == before
        assert set(catalog.load_table(cfg.identifier).refs()) == refs
        assert sorted(p for p in table_dir(stack_settings, cfg.identifier).rglob("*") if p.is_file()) == files
        assert {r.status for r in result.reports} <= {"dry_run", "skipped"}
        stale = tuple(sorted(set(branches) - {"cdc-run-00000000000a"}))
        assert result.report("remove_stale_run_branches").branches == stale
        assert result.report("expire_tombstones").figures["expired_tombstones"] == 0  # retention 192 h
        rewrite = result.report("rewrite_data_files").figures
        assert rewrite["data_files_with_deletes"] > 0 and rewrite["delete_files"] > 0
        assert rewrite["candidate_data_files"] >= rewrite["data_files_with_deletes"]
        assert result.report("rewrite_position_delete_files").figures["position_delete_files"] > 0
        assert result.report("rewrite_manifests").figures["manifests"] > 1
        expire = result.report("expire_snapshots")
        assert expire.snapshot_ids and result.snapshot_id_before not in expire.snapshot_ids
        assert result.report("remove_orphan_files").figures["orphan_files"] == 1 and orphan.exists()
    finally:
        for branch in branches:
            spark.sql(f"ALTER TABLE {spark_name} DROP BRANCH IF EXISTS `{branch}`")
        orphan.unlink(missing_ok=True)


def test_expiry_with_a_zero_window_keeps_the_offsets_snapshot(spark, stack_settings, zero_window):
    cfg = zero_window
    catalog = load_catalog(stack_settings)
    table = catalog.load_table(cfg.identifier)
    offsets_snapshot = table.current_snapshot()
    offsets = committed_offsets(table, cfg.topic)
    history = [SnapshotInfo(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms) for s in table.snapshots()]
    assert len(history) >= 3
    now_ms = int(time.time() * 1000)
    # Iceberg's rule alone (older_than = now, retain_last 1) would expire it once a rewrite is on top
    rewrite = SnapshotInfo(-1, offsets_snapshot.snapshot_id, now_ms)
    naive = snapshots_to_expire([*history, rewrite], {"main": RefInfo(-1, True)}, now_ms + 1, 1, now_ms)
    assert offsets_snapshot.snapshot_id in naive
    predicted = maintain_table(spark, stack_settings, cfg, actions=["expire_snapshots"], dry_run=True).report(
        "expire_snapshots"
    )

    actions = ["rewrite_position_delete_files", "rewrite_data_files", "rewrite_manifests", "expire_snapshots"]
    started_ms = int(time.time() * 1000)
    result = maintain_table(spark, stack_settings, cfg, actions=actions)

    assert result.actions == tuple(actions)
    table = catalog.load_table(cfg.identifier)
    assert table.current_snapshot().snapshot_id != offsets_snapshot.snapshot_id  # rewrites on top
    expired = result.report("expire_snapshots")
    assert expired.snapshot_ids == predicted.snapshot_ids
    assert len(expired.snapshot_ids) == len(history) - 1  # every snapshot before the offsets snapshot
    assert offsets_snapshot.snapshot_id in {s.snapshot_id for s in table.snapshots()}
    assert committed_offsets(table, cfg.topic) == offsets
    assert plan_offsets(stack_settings, cfg).range.start == offsets
    # the side tables keep their current snapshot and those committed by this maintenance run
    for suffix in (TOMBSTONES_SUFFIX, QUARANTINE_SUFFIX):
        side = catalog.load_table(side_table(cfg.identifier, suffix))
        older = {s.snapshot_id for s in side.snapshots() if s.timestamp_ms < started_ms}
        assert older <= {side.current_snapshot().snapshot_id}
        assert result.report("expire_snapshots", side_table(cfg.identifier, suffix)).status == "done"
    assert result.report("expire_snapshots", side_table(cfg.identifier, TOMBSTONES_SUFFIX)).snapshot_ids


def test_unknown_action_is_a_config_error_naming_the_known_ones(spark, stack_settings):
    with pytest.raises(ConfigError, match="unknown maintenance action.*'vacuum'.*known:.*rewrite_data_files"):
        maintain_table(spark, stack_settings, make_table(), actions=["rewrite_data_files", "vacuum"])


def test_a_table_that_does_not_exist_yet_is_skipped(spark, stack_settings):
    result = maintain_table(spark, stack_settings, make_table())
    assert [r.action for r in result.reports] == list(ACTIONS)
    assert {r.status for r in result.reports} == {"skipped"}


def test_a_lost_commit_race_is_retried_and_never_fails_the_run(spark, kafka, stack_settings, monkeypatch):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 1)
    send(kafka, cfg, [(0, 1, ev("c", 1, "a", 100))])
    run_once(spark, stack_settings, cfg)
    real_call = maintenance._Maintenance._call
    calls: dict[str, int] = {}

    def racing_call(self, procedure, ident, args):
        calls[procedure] = calls.get(procedure, 0) + 1
        lost = "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale table metadata"
        if procedure == "rewrite_manifests" and calls[procedure] == 1:
            raise RuntimeError(f"An error occurred while calling o1.sql.\n: {lost}")
        if procedure == "rewrite_data_files":
            raise RuntimeError("(org.apache.iceberg.exceptions.ValidationException) Cannot commit, found new delete")
        if procedure == "remove_orphan_files":
            raise RuntimeError("disk on fire")
        return real_call(self, procedure, ident, args)

    monkeypatch.setattr(maintenance._Maintenance, "_call", racing_call)
    monkeypatch.setattr(maintenance, "RETRY_WAIT_S", (0.01, 0.05))
    result = maintain_table(
        spark, stack_settings, cfg, actions=["rewrite_data_files", "rewrite_manifests", "expire_snapshots"]
    )
    data = result.report("rewrite_data_files")
    assert (data.status, data.attempts) == ("lost_race", maintenance.COMMIT_ATTEMPTS)
    assert "ValidationException" in data.summary
    manifests = result.report("rewrite_manifests")
    assert (manifests.status, manifests.attempts) == ("done", 2)
    assert result.report("expire_snapshots").status == "done"
    # any other failure is raised
    with pytest.raises(RuntimeError, match="disk on fire"):
        maintain_table(spark, stack_settings, cfg, actions=["remove_orphan_files"])


@pytest.mark.parametrize("format_version", [2, 3], ids=["v2", "v3"])
def test_a_compaction_committed_while_a_run_deletes_brings_no_deleted_row_back(
    spark, kafka, stack_settings, monkeypatch, request, format_version
):
    """Compaction racing a run's deletes (issue 52): a real ``rewrite_data_files`` commits to
    ``main`` after the run wrote its deletes (position deletes against the files the compaction
    rewrites) to its branch and before its fast-forward. The fast-forward is refused (``main``
    moved), nothing of the run is committed, its retry applies the deletes on the compacted files,
    and no deleted row comes back. The hook only schedules the real compaction at that point.

    v2: the suite's SQL catalog, position-delete files. v3 (issue 54): the REST catalog of
    ``rest_lake``, the run's deletes deletion vectors (Puffin) on the files the compaction rewrites."""
    from cdclake.errors import ConcurrentRunError

    settings = stack_settings if format_version == 2 else request.getfixturevalue("rest_lake").settings
    cfg = make_table(value_format="json", columns=COLUMNS, format_version=format_version)
    expected = build_history(spark, kafka, settings, cfg)
    assert int(summary(settings, cfg.identifier)["total-delete-files"]) > 0
    name = f"{settings.catalog_name}.{cfg.identifier}"
    delete_formats = {r.file_format for r in spark.sql(f"SELECT file_format FROM {name}.delete_files").collect()}
    assert delete_formats == ({"PUFFIN"} if format_version == 3 else {"PARQUET"})
    deletes = [k for k in sorted(expected) if k % 3 == 0][:6]
    send(kafka, cfg, [(k % 2, k, ev("d", k, f"x{k}", 5000 + k)) for k in deletes])
    real_write = commit_module._write_branch
    compacted: list[str] = []

    def write_then_compact(ctx, branch, start, properties, write):
        head = real_write(ctx, branch, start, properties, write)
        if not compacted:
            result = maintain_table(spark, settings, cfg, actions=["rewrite_data_files"])
            compacted.append(result.report("rewrite_data_files").status)
        return head

    monkeypatch.setattr(commit_module, "_write_branch", write_then_compact)
    with pytest.raises(ConcurrentRunError):
        run_once(spark, settings, cfg, "run-deletes")
    assert compacted == ["done"]
    assert summary(settings, cfg.identifier)["total-delete-files"] == "0"  # main is the compaction's
    assert {r["id"] for r in rows(settings, cfg)} == set(expected)  # the run committed nothing
    _, result = run_once(spark, settings, cfg, "run-deletes")  # the retry
    assert result.status == "committed"
    for k in deletes:
        expected.pop(k)
    assert {r["id"]: r["v"] for r in rows(settings, cfg)} == expected
