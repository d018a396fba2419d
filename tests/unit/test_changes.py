"""Unit tests for :mod:`cdclake.model.changes` (the change feed's pure rules) and its table-config
option ``change_feed``."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.errors import ChangeFeedGapError, ConfigError
from cdclake.model.changes import RunCommit, committed_runs, retention_cutoff_ms
from cdclake.model.config import load_tables
from cdclake.model.config_blocks import ChangeFeedPolicy
from cdclake.model.layout import SummaryKeys

TOPIC = "dbserver1.inventory.products"
DAY_MS = 24 * 3600 * 1000


def cdc(run_id: str, topic: str = TOPIC, rows: int | None = None) -> dict[str, str]:
    """The summary of a CDC commit of ``run_id`` (with ``rows`` change rows: a change feed)."""
    summary = {SummaryKeys.RUN_ID: run_id, SummaryKeys.TOPIC: topic, SummaryKeys.END_OFFSETS: "{}"}
    if rows is not None:
        summary[SummaryKeys.CHANGES_ROWS] = str(rows)
    return summary


def test_committed_runs_are_the_runs_newest_snapshots_and_the_one_before_their_oldest():
    # newest first: a later run, the run's merge and its demotion, a compaction, an older run
    history = [(50, cdc("later")), (40, cdc("run")), (30, cdc("run")), (20, {"operation": "replace"}), (10, cdc("old"))]
    assert committed_runs(history, TOPIC) == [
        RunCommit("old", None, 10, None),  # the oldest snapshot kept: the one before it is not known
        RunCommit("run", 20, 40, None),
        RunCommit("later", 40, 50, None),
    ]
    assert committed_runs(history, "other.topic.t") == []


def test_committed_runs_after_a_snapshot_leave_it_and_the_runs_before_it_out():
    history = [
        (50, cdc("later", rows=2)),
        (40, cdc("run", rows=0)),
        (30, cdc("run", rows=0)),
        (20, {}),
        (10, cdc("old")),
    ]
    assert committed_runs(history, TOPIC, after=20) == [RunCommit("run", 20, 40, 0), RunCommit("later", 40, 50, 2)]
    assert committed_runs(history, TOPIC, after=40) == [RunCommit("later", 40, 50, 2)]
    assert committed_runs(history, TOPIC, after=50) == []
    assert committed_runs(history, TOPIC, after=10) == [RunCommit("run", 20, 40, 0), RunCommit("later", 40, 50, 2)]


def test_a_reader_whose_last_snapshot_left_the_history_gets_an_error_not_the_changes_again():
    # snapshot 5 was expired (or the table re-created): reading all the history kept would repeat
    # the changes of "old" and miss the runs between 5 and 10
    history = [(50, cdc("later", rows=2)), (10, cdc("old", rows=1))]
    with pytest.raises(ChangeFeedGapError, match="snapshot 5, the last one the reader processed, is not in the"):
        committed_runs(history, TOPIC, after=5)
    assert committed_runs(history, TOPIC) == [RunCommit("old", None, 10, 1), RunCommit("later", 10, 50, 2)]


def test_a_tables_first_commit_has_no_previous_snapshot():
    # Iceberg starts a branch created on a table without snapshots with an empty snapshot of its own
    assert committed_runs([(7, cdc("first")), (6, {})], TOPIC) == [RunCommit("first", None, 7, None)]
    assert committed_runs([(8, cdc("second")), (7, cdc("first")), (6, None)], TOPIC) == [
        RunCommit("first", None, 7, None),
        RunCommit("second", 7, 8, None),
    ]
    # the same run id again after another run (a replay of an old run id is refused; still two commits)
    assert [r.previous_snapshot_id for r in committed_runs([(9, cdc("a")), (8, cdc("b")), (7, cdc("a"))], TOPIC)] == [
        None,
        7,
        8,
    ]


def test_retention_keeps_whole_days():
    now = 20_000 * DAY_MS + 5 * 3600 * 1000  # 05:00 UTC on day 20000
    assert retention_cutoff_ms(now, 30) == (20_000 - 30) * DAY_MS
    assert retention_cutoff_ms(20_000 * DAY_MS, 1) == 19_999 * DAY_MS
    with pytest.raises(ValueError, match="retention_days"):
        retention_cutoff_ms(now, 0)


TABLE = """\
tables:
  - name: products
    topic: dbserver1.inventory.products
    namespace: inventory
    table: products
    primary_key: [id]
"""


def test_change_feed_is_off_unless_configured_and_unknown_keys_are_errors(tmp_path: Path):
    path = tmp_path / "tables.yaml"
    path.write_text(TABLE)
    assert load_tables(path).tables[0].change_feed is None
    path.write_text(TABLE + "    change_feed: {}\n")
    assert load_tables(path).tables[0].change_feed == ChangeFeedPolicy(retention_days=30)
    path.write_text(TABLE + "    change_feed: {retention_days: 7}\n")
    assert load_tables(path).tables[0].change_feed == ChangeFeedPolicy(retention_days=7)
    path.write_text(TABLE + "    change_feed: {retention_day: 7}\n")
    with pytest.raises(ConfigError, match="retention_day"):
        load_tables(path)
    path.write_text(TABLE + "    change_feed: {retention_days: 0}\n")
    with pytest.raises(ConfigError, match="retention_days"):
        load_tables(path)


def test_change_feed_needs_an_upsert_table(tmp_path: Path):
    path = tmp_path / "tables.yaml"
    path.write_text(TABLE.replace("[id]", "[]") + "    write_mode: changelog\n    change_feed: {}\n")
    with pytest.raises(ConfigError, match="change_feed needs write_mode: upsert"):
        load_tables(path)
