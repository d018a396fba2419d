"""The convergence rules' pure parts: snapshot progress, completion, source identity."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from cdclake.model.convergence import (
    BatchSnapshot,
    EarlierIdentity,
    IdentitySpan,
    SnapshotEnd,
    SnapshotProgress,
    SourceIdentity,
    advance_snapshot,
    continue_history,
    identity_changes,
    merge_identities,
    pending_partitions,
    progress_after_completion,
    still_in_progress,
)
from cdclake.model.layout import SummaryKeys
from cdclake.model.position import BinlogPosition, gtid_source
from cdclake.model.run_state import committed_state_of

P1 = BinlogPosition(3, 400, 0, 0)
P2 = BinlogPosition(3, 900, 0, 0)
END = SnapshotEnd(partition=1, offset=40, timestamp_ms=1_000_000)


def batch(position, records=3, started=False, end=None):
    return BatchSnapshot(position, records, started, end, {0: 0})


def test_a_snapshot_spanning_runs_accumulates_until_its_end_record():
    step = advance_snapshot(None, [batch(P1, 2, started=True)], None)
    assert step.progress == SnapshotProgress(P1, 2, True, None)
    step = advance_snapshot(step.progress, [batch(P1, 5)], None)
    assert step.progress == SnapshotProgress(P1, 7, True, None)
    step = advance_snapshot(step.progress, [batch(P1, 1, end=END)], None)
    assert step.progress == SnapshotProgress(P1, 8, True, END)


def test_a_newer_snapshot_replaces_an_unfinished_one_which_deletes_nothing():
    step = advance_snapshot(SnapshotProgress(P1, 4, True), [batch(P2, 2, started=True)], None)
    assert step.progress == SnapshotProgress(P2, 2, True, None)
    assert any("replaced" in n and "deletes nothing" in n for n in step.notes)


def test_older_snapshots_without_their_end_and_completed_snapshots_do_not_count():
    step = advance_snapshot(SnapshotProgress(P2, 4, True), [batch(P1, 2, started=True)], None)
    assert step.progress == SnapshotProgress(P2, 4, True, None)
    assert step.ended == () and any("older full snapshot" in n for n in step.notes)
    step = advance_snapshot(None, [batch(P1, 2, end=END)], floor=P1)
    assert step.progress is None and step.notes and step.ended == ()


def test_an_older_snapshots_end_applied_after_a_newer_snapshot_started_is_a_candidate():
    """The newer snapshot's partition ran ahead: its records were applied a run before the older,
    complete snapshot's end record. The older one may still complete (the newer one may never)."""
    older = SnapshotProgress(P1, 2, False, END)
    step = advance_snapshot(SnapshotProgress(P2, 4, True), [batch(P1, 2, end=END)], None)
    assert step.ended == (older,)
    assert step.progress == SnapshotProgress(P2, 4, True, None, ended=(older,))
    # kept across runs while its partitions are pending; more of its records are folded in
    step = advance_snapshot(step.progress, [batch(P1, 1, started=True), batch(P2, 1)], None)
    assert step.ended == (SnapshotProgress(P1, 3, True, END),)
    assert step.progress is not None and step.progress.records == 5
    # dropped once the snapshot floor reaches it
    step = advance_snapshot(step.progress, [], floor=P1)
    assert step.ended == () and step.progress == SnapshotProgress(P2, 5, True, None)


def test_an_ended_snapshot_replaced_by_a_newer_one_stays_a_candidate_across_runs():
    """Its end record was applied, but a partition was still pending when a newer snapshot
    started: it completes in a later run, when that partition catches up."""
    step = advance_snapshot(SnapshotProgress(P1, 3, True, END), [batch(P2, 1, started=True)], None)
    assert step.ended == (SnapshotProgress(P1, 3, True, END),)
    step = advance_snapshot(step.progress, [], None)
    assert step.ended == (SnapshotProgress(P1, 3, True, END),)


def test_a_snapshot_is_in_progress_until_an_event_above_it_is_applied_without_its_end_record():
    reads = SnapshotProgress(P1, 4, False, None)  # snapshot reads at P1 (change rank 0), no end record
    assert still_in_progress(reads, None)
    assert still_in_progress(reads, reads.position)  # only its reads applied: more may come
    # a change at the snapshot's own coordinates, or later: Debezium streams only after the snapshot
    assert not still_in_progress(reads, replace(P1, change_rank=1))
    assert not still_in_progress(reads, P2)
    # its end record applied: in progress until its partitions are done, whatever follows
    assert still_in_progress(replace(reads, end=END), P2)


def test_progress_after_completion_drops_what_the_completed_snapshot_covers():
    older = SnapshotProgress(P1, 2, False, END)
    progress = SnapshotProgress(P2, 4, True, None, ended=(older,))
    assert progress_after_completion(progress, P1) == SnapshotProgress(P2, 4, True, None)
    assert progress_after_completion(progress, P2) is None
    assert progress_after_completion(None, P1) is None


def test_progress_round_trips_through_the_summary():
    progress = SnapshotProgress(P1, 8, False, END)
    assert SnapshotProgress.from_json(progress.to_json()) == progress
    assert "ended" not in progress.to_json()  # the summary of a table before ``ended`` existed
    with_ended = SnapshotProgress(P2, 3, True, None, ended=(progress,))
    assert SnapshotProgress.from_json(with_ended.to_json()) == with_ended
    summary = {
        SummaryKeys.TOPIC: "t",
        SummaryKeys.END_OFFSETS: '{"0":5}',
        SummaryKeys.SNAPSHOT_IN_PROGRESS: progress.to_json(),
        SummaryKeys.SNAPSHOT_FLOOR: P1.to_text(),
        SummaryKeys.SOURCE_IDENTITY: SourceIdentity(1, "mysql-bin", "0-1").to_json(),
        SummaryKeys.HIGH_POSITION: P2.to_text(),
        SummaryKeys.MAX_OFFSETS: '{"0":9}',
    }
    state = committed_state_of(7, [summary], "t")
    assert state.snapshot == progress
    assert state.snapshot_floor == P1
    assert state.identity == SourceIdentity(1, "mysql-bin", "0-1")
    assert state.high_position == P2
    assert state.max_offsets == {0: 9}


def test_the_end_records_partition_is_done_once_the_end_record_is_applied():
    assert pending_partitions(END, {1: 41}, {1: None}, {1: 41}, now_ms=END.timestamp_ms) == []
    assert pending_partitions(END, {1: 40}, {1: None}, {1: 41}, now_ms=END.timestamp_ms + 10**6) == [1]


def test_a_partition_is_done_once_a_record_produced_after_the_end_is_applied():
    # partition 0: the first record stamped after the end record sits at offset 12
    assert pending_partitions(END, {0: 13, 1: 41}, {0: 12}, {0: 20, 1: 41}, now_ms=END.timestamp_ms) == []
    assert pending_partitions(END, {0: 12, 1: 41}, {0: 12}, {0: 20, 1: 41}, now_ms=END.timestamp_ms) == [0]


def test_an_idle_partition_is_done_when_read_to_its_end_after_the_settle_time():
    args = ({0: 7, 1: 41}, {0: None}, {0: 7, 1: 41})
    assert pending_partitions(END, *args, now_ms=END.timestamp_ms + 1_000) == [0]
    assert pending_partitions(END, *args, now_ms=END.timestamp_ms + 60_000) == []
    # not read to its end: pending whatever the time
    assert pending_partitions(END, {0: 6, 1: 41}, {0: None}, {0: 7, 1: 41}, now_ms=END.timestamp_ms + 10**7) == [0]


def test_gtid_source_of_mariadb_and_mysql_gtids():
    assert gtid_source("0-184054-1234") == "0-184054"
    assert gtid_source("3e11fa47-71ca-11e1-9e33-c80aa9429562:23") == "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    assert gtid_source(None) is None and gtid_source("") is None


def test_identity_changes_name_what_changed():
    known = SourceIdentity(1, "mysql-bin", "0-1")
    assert identity_changes(known, [SourceIdentity(1, "mysql-bin", "0-1"), SourceIdentity(None, "mysql-bin")]) == []
    changes = identity_changes(known, [SourceIdentity(2, "mysql-bin", "0-2")])
    assert changes == ["server id: ['1', '2'] (the table's: 1)", "GTID source: ['0-1', '0-2'] (the table's: 0-1)"]
    assert identity_changes(None, [SourceIdentity(1, "a"), SourceIdentity(1, "b")]) == ["binlog basename: ['a', 'b']"]
    assert merge_identities(SourceIdentity(None, "mysql-bin"), [SourceIdentity(5, None, "0-5")]) == SourceIdentity(
        5, "mysql-bin", "0-5"
    )


def test_an_ended_snapshot_replaced_in_the_same_batch_is_still_a_candidate():
    """A batch holding a whole snapshot and the start of a newer one (the connector re-snapshotted
    and died again): the ended one may still complete."""
    step = advance_snapshot(None, [batch(P1, 3, started=True, end=END), batch(P2, 1, started=True)], None)
    assert step.ended == (SnapshotProgress(P1, 3, True, END),)
    assert step.progress == SnapshotProgress(P2, 1, True, None, ended=step.ended)


# --- a failover upstream of the replica Debezium reads --------------------------------------------


def at(pos: int) -> BinlogPosition:
    """A change event's position in binlog file 4."""
    return BinlogPosition(4, pos, 0, 1)


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    partitions=st.lists(st.integers(0, 2), min_size=16, max_size=16),
    takes=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)), max_size=6),
)
def test_a_binlog_whose_upstream_changes_is_followed_through_any_partition_skew(sizes, partitions, takes):
    """One binlog whose events' server id changes ``len(sizes) - 1`` times (a replica's upstream
    failing over), spread over three partitions applied at different paces: the runs go on, ending
    with the last identity, unless a run meets an identity after a later one was applied (two
    changes within one run's skew: the order between them is unknown, so the table stops)."""
    servers = [SourceIdentity(10 + i, "mysql-bin", f"0-{10 + i}") for i in range(len(sizes))]
    events = [(i, at(100 * n)) for n, i in enumerate(i for i, k in enumerate(sizes) for _ in range(k))]
    queues: dict[int, list[tuple[int, BinlogPosition]]] = {0: [], 1: [], 2: []}
    for n, e in enumerate(events):
        queues[partitions[n % len(partitions)]].append(e)
    known, high, seen = None, None, set()
    for take in [*takes, (len(events),) * 3]:
        batch = [e for p, k in enumerate(take) for e in queues[p][:k]]
        for p, k in enumerate(take):
            del queues[p][:k]
        if not batch:
            continue
        spans = [
            IdentitySpan(servers[i], min(pos for j, pos in batch if j == i), max(pos for j, pos in batch if j == i))
            for i in {j for j, _ in batch}
        ]
        verdict = continue_history(known, high, spans)
        arrived = {i for i, _ in batch}
        if seen and any(i < max(seen) for i in arrived - seen):
            assert verdict.identity is None and "went backwards" in (verdict.note or "")
            return
        assert verdict.identity is not None, verdict.note
        known, seen = verdict.identity, seen | arrived
        high = max([pos for _, pos in batch] + ([high] if high is not None else []))
    assert known == replace(servers[max(seen)], earlier=known.earlier)
    assert [e.identity for e in known.earlier] == [servers[i] for i in sorted(seen)[:-1]]
    for e in known.earlier:  # every event of an earlier identity lies below where it ended
        assert max(pos for i, pos in events if servers[i] == e.identity) < e.until


def test_an_upstream_change_is_not_followed_across_basenames_or_backwards():
    old, new = SourceIdentity(1, "mysql-bin", "0-1"), SourceIdentity(3, "mysql-bin", "0-3")
    high = at(500)
    assert continue_history(old, high, [IdentitySpan(new, at(400), at(900))]).identity is None
    other = SourceIdentity(3, "other-bin", "0-3")
    verdict = continue_history(old, high, [IdentitySpan(other, at(600), at(900))])
    assert verdict.identity is None and "basename" in (verdict.note or "")
    # two new identities whose positions interleave are not one binlog in order
    third = SourceIdentity(5, "mysql-bin", "0-5")
    spans = [
        IdentitySpan(new, at(600), at(900)),
        IdentitySpan(third, at(700), at(800)),
    ]
    assert "interleave" in (continue_history(old, high, spans).note or "")
    assert SourceIdentity.from_json(continue_history(old, high, spans[:1]).identity.to_json()).earlier == (
        EarlierIdentity(old, at(600)),
    )
