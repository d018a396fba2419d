"""Snapshot signals and notifications (cdclake.model.snapshot), on Debezium's documented shapes and on
notifications recorded from the real connector (tests/data/chain/notifications.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdclake.errors import SnapshotError
from cdclake.model.snapshot import (
    belongs_to,
    build_signal,
    caught_up,
    check_scan,
    match_notification,
    parse_notification,
    scan_results,
    signal_id,
)
from tests.conftest import make_table

RECORDED = Path(__file__).resolve().parents[1] / "data" / "chain" / "notifications.jsonl"


class _Message:
    """The three accessors of a confluent-kafka Message that the apply function uses."""

    def __init__(self, value: bytes, partition: int = 0, offset: int = 0) -> None:
        self._value, self._partition, self._offset = value, partition, offset

    def value(self) -> bytes:
        return self._value

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset


def _notification(id_, type_, aggregate="Incremental Snapshot", ts=1_000, with_schema=True, **data):
    payload = {"id": id_, "type": type_, "aggregate_type": aggregate, "additional_data": data, "timestamp": ts}
    doc = {"schema": {"type": "struct", "name": "io.debezium.connector.common.Notification"}, "payload": payload}
    return json.dumps(doc if with_schema else payload).encode()


def test_signal_id_is_stable_per_run_and_action_and_fits_the_signal_table():
    a = signal_id("manual__2026-11-21T04:00:00+00:00", "execute")
    assert a == signal_id("manual__2026-11-21T04:00:00+00:00", "execute")
    assert a != signal_id("manual__2026-11-21T04:00:01+00:00", "execute")
    assert a != signal_id("manual__2026-11-21T04:00:00+00:00", "stop")
    assert len(a) <= 64


def test_execute_signal_carries_tables_type_and_filters():
    s = build_signal(
        "x",
        "execute",
        ["inventory.orders", "inventory.users"],
        "incremental",
        {"inventory.orders": "id > 10 AND note = 'it''s'"},
    )
    assert s.type == "execute-snapshot"
    assert s.data == {
        "type": "incremental",
        "data-collections": ["inventory.orders", "inventory.users"],
        "additional-conditions": [{"data-collection": "inventory.orders", "filter": "id > 10 AND note = 'it''s'"}],
    }
    assert json.loads(s.data_json) == s.data


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("stop", {"type": "blocking", "data-collections": ["inventory.orders"]}),
        ("pause", {"type": "blocking"}),
        ("resume", {"type": "blocking"}),
    ],
)
def test_stop_pause_resume_signals(action, expected):
    s = build_signal("x", action, ["inventory.orders"], "blocking")
    assert (s.type, s.data) == (f"{action}-snapshot", expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("x", "explode", ["a.b"]), "action"),
        (("x", "execute", ["a.b"], "lazy"), "snapshot type"),
        (("x", "execute", []), "at least one table"),
        (("x", "execute", ["a.b"], "incremental", {"a.c": "1=1"}), "not in the snapshot"),
    ],
)
def test_bad_signal_requests_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        build_signal(*args)


def test_recorded_connector_notifications_parse():
    lines = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    parsed = [parse_notification(line["value"]) for line in lines]
    assert all(n is not None for n in parsed)
    assert [n.type for n in parsed][0] == "STARTED"
    assert {n.aggregate_type for n in parsed} == {"Initial Snapshot", "Incremental Snapshot"}
    assert all(n.timestamp_ms > 1_700_000_000_000 for n in parsed)


def test_recorded_incremental_snapshot_of_the_bootstrap_dag_is_recognised():
    """The notifications of the snapshot that tests/e2e/test_bootstrap.py started: they carry the
    run-derived signal id; the wait fires on COMPLETED only; the scan result is read."""
    lines = [json.loads(line) for line in RECORDED.read_text().splitlines() if line.strip()]
    ours = {parse_notification(line["value"]).id for line in lines} - {None}
    sid = next(i for i in ours if i.startswith("cdclake-execute-"))
    kw = {
        "signal_ids": [sid],
        "snapshot_type": "incremental",
        "since_ms": 0,
        "data_collections": ["inventory.accounts"],
    }
    fired = [
        match_notification(_Message(line["value"].encode(), line["partition"], line["offset"]), **kw) for line in lines
    ]
    assert [f["type"] for f in fired if f] == ["COMPLETED"]
    notes = [parse_notification(line["value"]) for line in lines]
    assert scan_results(notes, [sid], "incremental", 0, ["inventory.accounts"]) == {"inventory.accounts": "SUCCEEDED"}
    check_scan(next(f for f in fired if f), {"inventory.accounts": "SUCCEEDED"}, ["inventory.accounts"])


def test_parse_notification_without_schema_and_rejects_other_records():
    n = parse_notification(_notification("s1", "COMPLETED", with_schema=False))
    assert (n.id, n.type, n.aggregate_type) == ("s1", "COMPLETED", "Incremental Snapshot")
    assert parse_notification(None) is None
    assert parse_notification(b"not json") is None
    assert parse_notification(b'{"payload": {"op": "c"}, "schema": {}}') is None


def test_incremental_notifications_match_by_signal_id_blocking_by_time():
    inc = parse_notification(_notification("s1", "COMPLETED"))
    assert belongs_to(inc, ["s1"], "incremental", 0)
    assert not belongs_to(inc, ["s2"], "incremental", 0)
    initial = parse_notification(_notification("uuid", "COMPLETED", aggregate="Initial Snapshot", ts=5_000))
    assert not belongs_to(initial, ["s1"], "incremental", 0)
    assert belongs_to(initial, ["s1"], "blocking", 4_000)
    assert not belongs_to(initial, ["s1"], "blocking", 6_000)


def test_the_wait_fires_on_completion_abort_or_a_failed_scan_of_our_table_only():
    kw = {"signal_ids": ["s1"], "snapshot_type": "incremental", "since_ms": 0, "data_collections": ["inventory.t"]}
    assert match_notification(_Message(_notification("s1", "STARTED")), **kw) is None
    assert match_notification(_Message(_notification("s1", "IN_PROGRESS")), **kw) is None
    ok_scan = _notification("s1", "TABLE_SCAN_COMPLETED", data_collection="inventory.t", status="SUCCEEDED")
    assert match_notification(_Message(ok_scan), **kw) is None
    other = _notification("s2", "COMPLETED")
    assert match_notification(_Message(other), **kw) is None
    done = match_notification(_Message(_notification("s1", "COMPLETED"), partition=0, offset=7), **kw)
    assert done["type"] == "COMPLETED" and done["offset"] == 7
    bad = _notification("s1", "TABLE_SCAN_COMPLETED", data_collection="inventory.t", status="NO_PRIMARY_KEY")
    assert match_notification(_Message(bad), **kw)["additional_data"]["status"] == "NO_PRIMARY_KEY"


@pytest.mark.parametrize("status", ["SQL_EXCEPTION", "NO_PRIMARY_KEY", "UNKNOWN_SCHEMA"])
def test_failed_scans_fail_with_table_and_status(status):
    notes = [
        parse_notification(_notification("s1", "TABLE_SCAN_COMPLETED", data_collection="inventory.t", status=status)),
        parse_notification(_notification("s1", "COMPLETED")),
    ]
    results = scan_results(notes, ["s1"], "incremental", 0, ["inventory.t"])
    assert results == {"inventory.t": status}
    with pytest.raises(SnapshotError, match=f"inventory.t: {status}"):
        check_scan({"id": "s1", "type": "COMPLETED"}, results, ["inventory.t"])


def test_aborted_snapshot_fails_and_completed_passes():
    with pytest.raises(SnapshotError, match="ABORTED"):
        check_scan({"id": "s1", "type": "ABORTED"}, {}, ["inventory.t"])
    check_scan({"id": "s1", "type": "COMPLETED"}, {"inventory.t": "SUCCEEDED"}, ["inventory.t"])
    check_scan({"id": "s1", "type": "COMPLETED"}, {"inventory.t": "EMPTY"}, ["inventory.t"])


def test_caught_up_needs_every_nonempty_partition_at_or_past_the_noted_end():
    assert caught_up({0: 10, 1: 5}, {0: 10, 1: 5})
    assert caught_up({0: 11, 1: 5}, {0: 10, 1: 5, 2: 0})
    assert not caught_up({0: 9, 1: 5}, {0: 10, 1: 5})
    assert not caught_up(None, {0: 1})
    assert caught_up(None, {0: 0})


def test_data_collection_is_the_topic_without_the_prefix():
    from cdclake_airflow.bootstrap_dag import data_collection

    assert data_collection(make_table(topic="chain.inventory.orders")) == "inventory.orders"
    assert data_collection(make_table(topic="my.prefix.inventory.orders")) == "inventory.orders"
