"""The apply's decisions without Spark (:mod:`cdclake.model.run_state`, :mod:`cdclake.model.decision`): the committed state's
summary round trip, the start check, floors, identity, highest position, the full-snapshot rule,
column defaults and the commit's summary.

The lookups are in-memory tables of the facts a decision asks Kafka and the catalog for (the
watermarks, offsets for a time, open quarantine records), so each case states them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdclake.errors import ConcurrentRunError, PositionOrderError, SchemaError
from cdclake.model.config import TableConfig
from cdclake.model.convergence import (
    BatchSnapshot,
    EarlierIdentity,
    IdentitySpan,
    SnapshotEnd,
    SnapshotProgress,
    SourceIdentity,
)
from cdclake.model.decision import (
    applied_nothing_before,
    check_columns,
    check_start,
    column_defaults,
    decide,
    nothing_applied_error,
)
from cdclake.model.layout import COLUMN_DEFAULTS_PROPERTY, SummaryKeys
from cdclake.model.offsets import OffsetRange, encode_offsets, plan_range
from cdclake.model.plan import RunPlan
from cdclake.model.position import BinlogPosition
from cdclake.model.run_state import (
    BatchStats,
    ColumnDefault,
    CommittedState,
    GtidMissing,
    QuarantinedRecord,
    UnknownColumn,
    applies_nothing,
    committed_state_of,
)

CFG = TableConfig(name="t", topic="dbz.shop.t", namespace="shop", table="t", primary_key=("id",))


def plan(start=None, end=None, *, cfg=CFG, **kw) -> RunPlan:
    start = start or {0: 10, 1: 20}
    end = end or {0: 15, 1: 25}
    return RunPlan(table=cfg, run_id="run-1", range=OffsetRange(topic=cfg.topic, start=start, end=end), **kw)


@dataclass
class Facts:
    """What Kafka and the catalog answer (see the module docstring); ``asked`` records the questions."""

    high: dict[int, int] = field(default_factory=lambda: {0: 15, 1: 25})
    after: dict[int, int] = field(default_factory=lambda: {0: 15, 1: 25})
    quarantine: int = 0
    outside: dict[int, int] = field(default_factory=dict)
    spans: list[IdentitySpan] = field(default_factory=list)
    now: int = 10_000_000
    asked: list[str] = field(default_factory=list)

    def first_offsets_outside(self, known):
        self.asked.append("outside")
        return self.outside

    def identity_spans(self):
        self.asked.append("spans")
        return self.spans

    def high_watermarks(self):
        self.asked.append("high")
        return self.high

    def offsets_after(self, timestamp_ms):
        self.asked.append("after")
        return self.after

    def open_quarantine(self):
        self.asked.append("quarantine")
        return self.quarantine

    def now_ms(self):
        return self.now


def pos(f, p, r=0, k=1):
    return BinlogPosition(f, p, r, k)


def run(state, stats, p=None, *, defaults=None, snapshots=(), facts=None):
    return decide(
        state, stats, p or plan(), defaults=defaults or {}, snapshots=list(snapshots), lookups=facts or Facts()
    )


# --- the committed state and its summary ---------------------------------------------------------

positions = st.builds(
    BinlogPosition,
    st.integers(-2, 2_000_000),
    st.integers(0, 2**40),
    st.integers(0, 1000),
    st.integers(0, 1),
)
offsets = st.dictionaries(st.integers(0, 8), st.integers(0, 2**40), max_size=4)
identity_fields = (
    st.none() | st.integers(1, 2**32),
    st.none() | st.sampled_from(["mysql-bin", "mariadb-bin"]),
    st.none() | st.sampled_from(["0-1", "3E11FA47-71CA-11E1-9E33-C80AA9429562"]),
    st.none() | st.integers(0, 9),
)
identities = st.builds(
    SourceIdentity,
    *identity_fields,
    st.lists(st.builds(EarlierIdentity, st.builds(SourceIdentity, *identity_fields), positions), max_size=2).map(tuple),
)
progresses = st.builds(
    SnapshotProgress,
    positions,
    st.integers(0, 10_000),
    st.booleans(),
    st.none() | st.builds(SnapshotEnd, st.integers(0, 8), st.integers(0, 2**40), st.integers(0, 2**42)),
)
states = st.builds(
    CommittedState,
    st.none() | st.integers(1, 2**62),
    st.none() | offsets,
    st.none() | positions,
    st.none() | positions,
    st.none() | progresses,
    st.none() | identities,
    st.none() | positions,
    st.none() | positions,
    st.none() | offsets,
    st.none() | st.integers(0, 2**42),
)


@given(states)
def test_the_committed_state_survives_its_summary(state):
    assert CommittedState.from_summary(state.snapshot_id, state.to_summary()) == state


def test_the_state_is_read_from_the_newest_commit_of_the_table_topic():
    ours = {SummaryKeys.TOPIC: "t", SummaryKeys.END_OFFSETS: '{"0": 5}', SummaryKeys.TRUNCATE_FLOOR: "3:4:0:1"}
    other = {SummaryKeys.TOPIC: "other", SummaryKeys.END_OFFSETS: '{"0": 9}'}
    state = committed_state_of(42, [None, other, ours], "t")
    assert (state.snapshot_id, state.offsets, state.truncate_floor) == (42, {0: 5}, pos(3, 4))
    assert committed_state_of(42, [None, other], "t") == CommittedState(42)
    assert committed_state_of(None, [ours], "t") == CommittedState(None)


# --- the start check ------------------------------------------------------------------------------


def test_the_run_starts_where_the_table_is():
    assert check_start(None, plan())
    assert check_start(CommittedState(1), plan())
    assert check_start(CommittedState(1, {0: 10, 1: 20}), plan())


def test_a_run_whose_range_is_committed_already_does_nothing():
    assert not check_start(CommittedState(1, {0: 15, 1: 25}), plan())


def test_a_run_behind_another_commit_stops_and_a_replay_does_not():
    with pytest.raises(ConcurrentRunError, match=r"committed offsets \{\"0\":12,\"1\":20\} are not this run.s start"):
        check_start(CommittedState(1, {0: 12, 1: 20}), plan())
    assert check_start(CommittedState(1, {0: 12, 1: 20}), plan(replay=True))


def test_a_replay_applies_once_per_run():
    assert check_start(CommittedState(1, {0: 15, 1: 25}), plan(replay=True), run_committed=False)
    assert not check_start(CommittedState(1, {0: 15, 1: 25}), plan(replay=True), run_committed=True)
    # a forward run's offsets decide, whatever its run id committed before
    assert check_start(CommittedState(1, {0: 10, 1: 20}), plan(), run_committed=True)


@given(st.data())
def test_a_topic_that_gained_partitions_is_applied_once_and_a_stale_plan_stops(data):
    """Kafka partitions added to a topic (docs/operations.md, "A topic gets more partitions"): the
    table committed only the old ones; the planner starts the new ones at their low watermark."""
    old = data.draw(st.integers(1, 3))
    added = data.draw(st.integers(1, 3))
    committed = {p: data.draw(st.integers(0, 50)) for p in range(old)}
    high = {p: committed.get(p, 0) + data.draw(st.integers(0, 30)) for p in range(old + added)}
    low = {p: committed[p] if p in committed else data.draw(st.integers(0, high[p])) for p in high}
    cap = data.draw(st.integers(1, 100))
    grown = plan_range(CFG.topic, committed, low, high, cap)
    run = RunPlan(table=CFG, run_id="r", range=grown)
    assert all(grown.start[p] == low[p] for p in range(old, old + added))
    assert check_start(CommittedState(1, committed), run)
    if grown.is_empty:
        return
    after = CommittedState(2, dict(grown.end))
    assert not check_start(after, run)  # the retry after the commit
    # a run planned before the partitions were added, or with another cap, from the same offsets
    before = plan_range(CFG.topic, committed, {p: low[p] for p in committed}, {p: high[p] for p in committed}, cap)
    for stale in (before, plan_range(CFG.topic, committed, low, high, cap + 1)):
        if stale.end != grown.end:
            with pytest.raises(ConcurrentRunError, match="another run committed"):
                check_start(after, RunPlan(table=CFG, run_id="s", range=stale))


def test_an_unknown_column_names_where_it_is():
    check_columns(BatchStats(events=1), CFG)
    stats = BatchStats(events=1, unknown_column=UnknownColumn(1, 7, "color"))
    with pytest.raises(SchemaError, match=r"partition 1 offset 7: the event has column 'color'") as synced:
        check_columns(stats, CFG)
    assert f"schema-change topic {CFG.schema_change_topic!r}" in str(synced.value)
    # a table that evolves from its events: its schema-change topic is not the cause, the event is
    with pytest.raises(SchemaError, match=r"partition 1 offset 7: the event has column 'color'") as evolving:
        check_columns(stats, CFG, from_events=True)
    message = str(evolving.value)
    assert "its own row schema does not list it" in message and "declare the column" in message
    assert "schema-change topic" not in message


# --- floors, high position, identity -------------------------------------------------------------


@pytest.mark.parametrize(
    "stats, nothing_applied",
    [
        (BatchStats(events=3, bad=2, held=1), True),
        (BatchStats(events=4, tombstones=2, held=2), True),  # held back behind an open entry of an earlier run
        (BatchStats(events=3, bad=1, ops={"c": 2}), False),  # some applied: the run succeeds, counted
        (BatchStats(events=2, tombstones=2), False),  # only Kafka tombstones: nothing to apply
        (BatchStats(events=2, ops={"u": 2}), False),
    ],
)
def test_a_batch_whose_every_record_is_quarantined_applies_nothing(stats, nothing_applied):
    assert stats.nothing_applied is nothing_applied


def test_a_run_that_applies_nothing_names_the_ranges_the_count_the_first_error_and_the_remedy():
    p = plan({0: 10, 1: 20, 2: 7}, {0: 15, 1: 20, 2: 9})
    error = nothing_applied_error(p, BatchStats(events=7, bad=5, held=2), QuarantinedRecord(0, 10, "value is not JSON"))
    first_line, remedy = str(error).split("\n")
    assert first_line == (
        "topic 'dbz.shop.t' (partition 0 offsets [10, 15), partition 2 offsets [7, 9)): all 7 record(s) of this "
        "run were quarantined (5 bad, 2 held back behind a quarantined record of their key), none applied to "
        "Iceberg table shop.t; the first: partition 0 offset 10: value is not JSON"
    )
    assert "cdclake quarantine list t" in remedy and "cdclake quarantine release t --partition P" in remedy
    # a retry that finds the run's commit applied nothing fails again, with the same remedy
    summary = {
        SummaryKeys.START_OFFSETS: encode_offsets(p.range.start),
        SummaryKeys.END_OFFSETS: encode_offsets(p.range.end),
        SummaryKeys.QUARANTINED: "7",
    }
    again = str(applied_nothing_before(CFG, "run-1", 42, summary)).split("\n")
    assert again == [
        "topic 'dbz.shop.t' (partition 0 offsets [10, 15), partition 2 offsets [7, 9)): all 7 record(s) of run "
        "'run-1' were quarantined, none applied to Iceberg table shop.t (snapshot 42); the log of the try that "
        "committed names the first",
        remedy,
    ]
    assert applies_nothing(7, {}) and not applies_nothing(7, {"c": 1}) and not applies_nothing(0, {})


def test_the_truncate_floor_is_the_newest_truncate_and_is_carried_forward():
    state = CommittedState(7, {0: 10, 1: 20}, truncate_floor=pos(3, 100))
    d = run(state, BatchStats(events=5, truncate=pos(3, 50), ops={"t": 1}))
    assert d.state.truncate_floor == pos(3, 100)
    assert d.truncate == pos(3, 50)
    d = run(state, BatchStats(events=5, truncate=pos(4, 1), ops={"t": 1}))
    assert d.state.truncate_floor == pos(4, 1)
    assert d.summary[SummaryKeys.TRUNCATE_FLOOR] == "4:1:0:1"


def test_the_high_position_is_the_greatest_ever_applied_with_its_record_time():
    state = CommittedState(7, {0: 10, 1: 20}, high_position=pos(5, 10), high_position_ts=111)
    assert run(state, BatchStats(events=1, high=pos(4, 99), high_timestamp_ms=222)).state.high_position_ts == 111
    d = run(state, BatchStats(events=1, high=pos(5, 11), high_timestamp_ms=222))
    assert (d.state.high_position, d.state.high_position_ts) == (pos(5, 11), 222)
    assert run(CommittedState(7, {0: 10, 1: 20}), BatchStats(events=1)).state.high_position is None


def test_without_source_positions_the_newest_record_time_is_the_high_positions_time():
    """Under ``ordering: kafka`` every position is equal: the freshness lag reads the time of the
    newest record applied, so it must move forward with every batch (and never back)."""
    kafka = plan(cfg=CFG.model_copy(update={"ordering": "kafka"}))
    state = CommittedState(7, {0: 10, 1: 20}, high_position=pos(0, 0), high_position_ts=111)
    assert run(state, BatchStats(events=1, high=pos(0, 0), high_timestamp_ms=222), kafka).state.high_position_ts == 222
    assert run(state, BatchStats(events=1, high=pos(0, 0), high_timestamp_ms=99), kafka).state.high_position_ts == 111


def test_events_of_another_binlog_history_stop_the_table_with_the_remedy():
    # a failover to another server whose binlog coordinates are below the table's
    state = CommittedState(7, {0: 10, 1: 20}, identity=SourceIdentity(1, "mysql-bin"), high_position=pos(5, 900))
    facts = Facts(outside={1: 22}, spans=[IdentitySpan(SourceIdentity(2, "mysql-bin"), pos(2, 4), pos(2, 80))])
    stats = BatchStats(events=3, identities=(SourceIdentity(2, "mysql-bin"),))
    with pytest.raises(PositionOrderError, match=r"server id: \['1', '2'\] \(the table's: 1\)") as e:
        run(state, stats, facts=facts)
    assert "start at 2:4:0, not above 5:900:0" in str(e.value) and "went backwards" in str(e.value)
    assert '"replay_from_offsets": {"0": 15, "1": 22}' in str(e.value)
    assert '"accept_source_change": true' in str(e.value)


REPLICA = SourceIdentity(1, "mysql-bin", "0-1")
"""Debezium reads a replica (``log_slave_updates``): its binlog's events carry the server id and
GTID of the primary that originated them, here server 1."""
PROMOTED = SourceIdentity(3, "mysql-bin", "0-3")
"""The replica's new upstream after a failover (server 3): the replica's binlog goes on."""


def test_a_failover_upstream_of_the_replica_goes_on_in_the_same_binlog(caplog):
    state = CommittedState(7, {0: 10, 1: 20}, identity=REPLICA, high_position=pos(4, 500))
    facts = Facts(
        spans=[
            IdentitySpan(REPLICA, pos(4, 300), pos(4, 700)),  # partition 1 lags: server 1's last events
            IdentitySpan(SourceIdentity(None, "mysql-bin"), pos(4, 10), pos(4, 10)),  # a snapshot read
            IdentitySpan(PROMOTED, pos(4, 800), pos(5, 40)),
        ]
    )
    stats = BatchStats(events=6, identities=(REPLICA, PROMOTED), high=pos(5, 40), high_timestamp_ms=9)
    d = run(state, stats, facts=facts)
    after = SourceIdentity(3, "mysql-bin", "0-3", earlier=(EarlierIdentity(REPLICA, pos(4, 800)),))
    assert d.state.identity == after
    assert json.loads(d.summary[SummaryKeys.SOURCE_IDENTITY_CONTINUED]) == {
        "from": REPLICA.to_json(),
        "to": after.to_json(),
        "since": "4:800:0:1",
    }
    assert "server id 1, GTID source 0-1 to server id 3, GTID source 0-3 at 4:800:0" in caplog.text
    # the next run: server 1's events still in flight below where server 3 began are of the same binlog
    later = plan({0: 15, 1: 25}, {0: 16, 1: 27})
    late = Facts(
        spans=[IdentitySpan(REPLICA, pos(4, 750), pos(4, 790)), IdentitySpan(PROMOTED, pos(5, 50), pos(5, 60))]
    )
    d2 = run(d.state, BatchStats(events=2, identities=(REPLICA, PROMOTED)), later, facts=late)
    assert d2.state.identity == after
    assert SummaryKeys.SOURCE_IDENTITY_CONTINUED not in d2.summary
    # ... but not above it: server 1's events there would interleave with server 3's
    mixed = Facts(spans=[IdentitySpan(REPLICA, pos(4, 750), pos(5, 45))])
    with pytest.raises(PositionOrderError, match="went backwards"):
        run(d.state, BatchStats(events=2, identities=(REPLICA,)), later, facts=mixed)


def test_a_new_identity_stops_a_replay_a_gtid_table_and_a_new_basename():
    state = CommittedState(7, {0: 10, 1: 20}, identity=REPLICA, high_position=pos(4, 500))
    forward = Facts(spans=[IdentitySpan(PROMOTED, pos(4, 800), pos(4, 900))])
    stats = BatchStats(events=1, identities=(PROMOTED,))
    with pytest.raises(PositionOrderError, match="a replay does not continue the table's offsets"):
        run(state, stats, plan(replay=True), facts=forward)
    gtid = plan(cfg=CFG.model_copy(update={"ordering": "gtid"}))
    domain = CommittedState(7, {0: 10, 1: 20}, identity=SourceIdentity(gtid_domain=0))
    with pytest.raises(PositionOrderError, match="GTID sequences of different domains have no order"):
        run(domain, BatchStats(events=1, identities=(SourceIdentity(gtid_domain=7),)), gtid, facts=forward)
    assert "spans" not in forward.asked  # a replay and a GTID table never ask for the spans
    renamed = SourceIdentity(3, "replica-bin", "0-3")
    facts = Facts(spans=[IdentitySpan(renamed, pos(4, 800), pos(4, 900))])
    with pytest.raises(PositionOrderError, match=r"the binlog basename changed \(\['mysql-bin', 'replica-bin'\]\)"):
        run(state, BatchStats(events=1, identities=(renamed,)), facts=facts)


def test_the_identity_is_learned_and_carried_with_the_basename():
    stats = BatchStats(events=3, identities=(SourceIdentity(None, "mysql-bin"), SourceIdentity(5, None, "0-5")))
    d = run(CommittedState(7, {0: 10, 1: 20}), stats)
    assert d.state.identity == SourceIdentity(5, "mysql-bin", "0-5")
    assert d.summary[SummaryKeys.BINLOG_BASENAME] == "mysql-bin"


def test_a_gtid_table_stops_at_a_change_without_a_mariadb_gtid():
    cfg = CFG.model_copy(update={"ordering": "gtid"})
    stats = BatchStats(events=1, gtid_missing=GtidMissing(0, 12, "u", "3E11:5"))
    with pytest.raises(PositionOrderError, match=r"partition 0 offset 12: .* source.gtid is '3E11:5'"):
        run(CommittedState(7), stats, plan(cfg=cfg))


def test_accepting_a_new_history_forgets_the_old_one_but_not_the_offsets_ever_committed():
    old = SourceIdentity(1, "mysql-bin")
    state = CommittedState(
        7,
        {0: 10, 1: 20},
        truncate_floor=pos(9, 1),
        identity=old,
        high_position=pos(9, 5),
        max_offsets={0: 30, 1: 40},
        defaults_position=pos(8, 1),
    )
    stats = BatchStats(events=2, identities=(SourceIdentity(2, "mysql-bin"),), high=pos(1, 4), high_timestamp_ms=5)
    d = run(state, stats, plan(accept_source_change=True, replay=True))
    assert d.state.identity == SourceIdentity(2, "mysql-bin")
    assert (d.state.truncate_floor, d.state.high_position, d.state.defaults_position) == (None, pos(1, 4), None)
    assert d.state.max_offsets == {0: 30, 1: 40}
    assert json.loads(d.summary[SummaryKeys.SOURCE_CHANGE_ACCEPTED]) == {
        "identity": old.to_json(),
        "high_position": "9:5:0:1",
    }
    assert column_defaults({COLUMN_DEFAULTS_PROPERTY: "{}"}, ["a"], plan(accept_source_change=True)) == {}


# --- the full-snapshot rule ------------------------------------------------------------------------

SNAP = pos(3, 400, 0, 0)
END = SnapshotEnd(partition=1, offset=22, timestamp_ms=5_000)


def test_a_snapshot_whose_end_record_and_partitions_are_applied_completes():
    group = BatchSnapshot(SNAP, 4, True, END, {0: 10, 1: 20})
    facts = Facts(after={0: 14, 1: 25})  # partition 0 has a record after the end, which the run applies
    d = run(
        CommittedState(7, {0: 10, 1: 20}), BatchStats(events=5, full_snapshot_reads=4), snapshots=[group], facts=facts
    )
    assert d.completed == SNAP
    assert (d.state.snapshot_floor, d.state.snapshot) == (SNAP, None)
    assert d.summary[SummaryKeys.SNAPSHOT_FLOOR] == SNAP.to_text()


def test_a_snapshot_waits_for_a_partition_that_may_still_hold_its_records():
    group = BatchSnapshot(SNAP, 4, True, END, {0: 10, 1: 20})
    facts = Facts(after={0: 15, 1: 25}, high={0: 18, 1: 25}, now=END.timestamp_ms + 1)
    d = run(
        CommittedState(7, {0: 10, 1: 20}), BatchStats(events=5, full_snapshot_reads=4), snapshots=[group], facts=facts
    )
    assert d.completed is None
    assert d.state.snapshot == SnapshotProgress(SNAP, 4, True, END)
    assert "quarantine" not in facts.asked


def test_open_quarantine_records_keep_a_complete_snapshot_from_deleting():
    group = BatchSnapshot(SNAP, 4, True, END, {0: 10, 1: 20})
    facts = Facts(after={0: 14, 1: 25}, quarantine=2)
    d = run(
        CommittedState(7, {0: 10, 1: 20}), BatchStats(events=5, full_snapshot_reads=4), snapshots=[group], facts=facts
    )
    assert d.completed is None and d.state.snapshot is not None


def test_a_snapshot_that_is_not_authoritative_deletes_nothing_and_asks_nothing():
    cfg = CFG.model_copy(update={"authoritative_snapshots": False})
    group = BatchSnapshot(SNAP, 4, True, END, {0: 10, 1: 20})
    facts = Facts()
    d = run(CommittedState(7, {0: 10, 1: 20}), BatchStats(events=5), plan(cfg=cfg), snapshots=[group], facts=facts)
    assert (d.completed, d.state.snapshot, facts.asked) == (None, None, [])


def test_a_new_full_snapshot_below_the_high_position_means_the_positions_started_over():
    state = CommittedState(7, {0: 10, 1: 20}, high_position=pos(9, 9), high_position_ts=1_000)
    group = BatchSnapshot(SNAP, 4, True, None, {0: 11}, unseen=True, first_timestamp_ms=2_000)
    with pytest.raises(PositionOrderError, match="binlog positions started over"):
        run(state, BatchStats(events=4), snapshots=[group])
    replayed = run(state, BatchStats(events=4), plan(replay=True), snapshots=[group])
    assert replayed.state.snapshot == SnapshotProgress(SNAP, 4, True)


def test_a_change_log_table_keeps_no_snapshot_progress():
    cfg = CFG.model_copy(update={"write_mode": "changelog", "primary_key": ()})
    state = CommittedState(7, {0: 10, 1: 20}, snapshot_floor=SNAP)
    d = run(state, BatchStats(events=5), plan(cfg=cfg), snapshots=[BatchSnapshot(pos(4, 1, 0, 0), 4, True, END, {})])
    assert (d.completed, d.state.snapshot, d.state.snapshot_floor) == (None, None, SNAP)


# --- column defaults and the summary --------------------------------------------------------------


def test_column_defaults_are_filled_once_past_the_last_filled_alter():
    properties = {
        COLUMN_DEFAULTS_PROPERTY: json.dumps(
            {
                "a": {"position": "5:1:0:1", "sql": "'x'", "exact": True},
                "b": {"position": "6:1:0:1", "sql": "1", "exact": True},
                "c": {"position": "6:2:0:1", "sql": "2", "exact": False},
                "gone": {"position": "6:3:0:1", "sql": "3", "exact": True},
            }
        )
    }
    defaults = column_defaults(properties, ["id", "a", "b", "c"], plan())
    assert defaults == {"a": ColumnDefault(pos(5, 1), "'x'"), "b": ColumnDefault(pos(6, 1), "1")}
    d = run(CommittedState(7, {0: 10, 1: 20}, defaults_position=pos(5, 1)), BatchStats(events=1), defaults=defaults)
    assert list(d.backfill) == ["b"]
    assert d.summary[SummaryKeys.DEFAULTS_POSITION] == "6:1:0:1"


def test_the_summary_holds_the_run_and_carries_the_state_forward():
    state = CommittedState(7, {0: 10, 1: 20}, max_offsets={0: 12, 2: 3})
    stats = BatchStats(
        events=9,
        tombstones=1,
        bad=1,
        held=2,
        ops={"c": 2, "u": 3, "d": 1, "r": 1},
        first=pos(3, 4, 1),
        last=pos(3, 90),
        last_source_ts_ms=1234,
    )
    d = run(state, stats)
    s = d.summary
    assert (s[SummaryKeys.EVENTS], s[SummaryKeys.TOMBSTONES], s[SummaryKeys.QUARANTINED]) == ("9", "1", "3")
    assert (s[SummaryKeys.UPSERTS], s[SummaryKeys.DELETES]) == ("6", "1")
    assert json.loads(s[SummaryKeys.OPS]) == {"c": 2, "u": 3, "d": 1, "r": 1}
    assert (s[SummaryKeys.FIRST_POSITION], s[SummaryKeys.LAST_POSITION]) == ("3:4:1", "3:90:0")
    assert json.loads(s[SummaryKeys.END_OFFSETS]) == {"0": 15, "1": 25}
    assert json.loads(s[SummaryKeys.MAX_OFFSETS]) == {"0": 15, "1": 25, "2": 3}
    assert s[SummaryKeys.LAST_SOURCE_TIMESTAMP] == "1234"
    assert SummaryKeys.REPLAY not in s
    assert committed_state_of(8, [dict(s)], CFG.topic) == CommittedState(8, *_fields_after(d.state))


def test_connector_contradictions_are_in_the_summary_of_their_run_only():
    state = CommittedState(7, {0: 10, 1: 20})
    line = "column 'price': the events are double (decimal.handling.mode=double) but ..."
    d = run(state, BatchStats(events=5, ops={"c": 5}, connector_contradictions=(line,)))
    assert json.loads(d.summary[SummaryKeys.CONNECTOR_CONTRADICTIONS]) == [line]
    assert SummaryKeys.CONNECTOR_CONTRADICTIONS not in run(state, BatchStats(events=5, ops={"c": 5})).summary


def _fields_after(state: CommittedState) -> tuple:
    return (
        state.offsets,
        state.truncate_floor,
        state.snapshot_floor,
        state.snapshot,
        state.identity,
        state.high_position,
        state.defaults_position,
        state.max_offsets,
        state.high_position_ts,
    )
