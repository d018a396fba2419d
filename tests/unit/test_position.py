"""Unit tests for :mod:`cdclake.model.position`: binlog file names, snapshot detection, event order
and its ties (the Kafka offset within a partition, ``ordering: kafka``)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdclake.model.position import (
    BINLOG_FILE_PATTERN,
    DEMOTED,
    NO_GTID,
    ORDERINGS,
    BatchPick,
    BinlogPosition,
    EventPlace,
    batch_pick,
    is_snapshot_read,
    parse_mariadb_gtid,
    split_binlog_file,
    supersedes,
    unordered_message,
)


def src(file: str = "mysql-bin.000003", pos: int = 154, row: int | None = 0, snapshot=None) -> dict:
    return {"file": file, "pos": pos, "row": row, "snapshot": snapshot}


# --- split_binlog_file -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("mysql-bin.000003", ("mysql-bin", 3)),
        ("mysql-bin.999999", ("mysql-bin", 999_999)),
        ("mysql-bin.1000000", ("mysql-bin", 1_000_000)),
        ("mariadb-bin.000001", ("mariadb-bin", 1)),
        ("host.name-bin.000042", ("host.name-bin", 42)),
    ],
)
def test_split_binlog_file_returns_basename_and_integer_sequence(name, expected):
    assert split_binlog_file(name) == expected


@pytest.mark.parametrize("name", ["mysql-bin", "mysql-bin.", "mysql-bin.00a3", ".000003", ""])
def test_split_binlog_file_without_numeric_suffix_raises(name):
    with pytest.raises(ValueError, match="no numeric suffix"):
        split_binlog_file(name)


def test_binlog_file_pattern_is_the_one_split_uses():
    m = re.match(BINLOG_FILE_PATTERN, "mysql-bin.000003")
    assert m is not None
    assert (m.group(1), m.group(2)) == ("mysql-bin", "000003")


# --- is_snapshot_read --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "snapshot"),
    [
        ("r", None),
        ("r", "false"),
        ("c", "true"),
        ("c", "last"),
        ("c", "first_in_data_collection"),
        ("c", "last_in_data_collection"),
        ("c", "incremental"),
        ("c", True),
    ],
)
def test_is_snapshot_read_true(op, snapshot):
    assert is_snapshot_read(op, snapshot) is True


@pytest.mark.parametrize(
    ("op", "snapshot"),
    [("c", "false"), ("c", None), ("c", False), ("u", "false"), ("d", None), ("c", "TRUE")],
)
def test_is_snapshot_read_false(op, snapshot):
    assert is_snapshot_read(op, snapshot) is False


# --- BinlogPosition ----------------------------------------------------------------------------


def test_from_source_builds_fields_in_sort_order():
    p = BinlogPosition.from_source(src("mysql-bin.000003", 1442, 1, "false"), "u")
    assert p == BinlogPosition(file_seq=3, pos=1442, row=1, change_rank=1)


def test_from_source_missing_row_counts_as_row_zero():
    source = {"file": "mysql-bin.000003", "pos": 362}
    assert BinlogPosition.from_source(source, "u").row == 0
    assert BinlogPosition.from_source(src(row=None), "u").row == 0


def test_file_rollover_orders_by_sequence_number_not_string():
    before = BinlogPosition.from_source(src("mysql-bin.999999", 4_000_000), "u")
    after = BinlogPosition.from_source(src("mysql-bin.1000000", 4), "u")
    assert "mysql-bin.999999" > "mysql-bin.1000000"  # what a string comparison would say
    assert before < after
    assert sorted([after, before]) == [before, after]


def test_later_file_outranks_larger_pos_in_earlier_file():
    earlier_file = BinlogPosition.from_source(src("mysql-bin.000003", 99_999), "c")
    later_file = BinlogPosition.from_source(src("mysql-bin.000004", 4), "c")
    assert earlier_file < later_file


def test_row_orders_events_at_equal_file_and_pos():
    row0 = BinlogPosition.from_source(src(pos=1442, row=0, snapshot="false"), "u")
    row1 = BinlogPosition.from_source(src(pos=1442, row=1, snapshot="false"), "u")
    assert row0 < row1
    assert row0 != row1


def test_snapshot_read_ranks_below_change_at_same_position():
    read = BinlogPosition.from_source(src(pos=154, snapshot="true"), "r")
    legacy_read = BinlogPosition.from_source(src(pos=154, snapshot="true"), "c")
    change = BinlogPosition.from_source(src(pos=154, snapshot="false"), "c")
    assert read.change_rank == legacy_read.change_rank == 0
    assert change.change_rank == 1
    assert read < change
    assert legacy_read < change
    assert read == legacy_read


@pytest.mark.parametrize("snapshot", ["false", None, False])
def test_op_c_without_snapshot_marker_is_a_change(snapshot):
    assert BinlogPosition.from_source(src(snapshot=snapshot), "c").change_rank == 1


def test_op_c_with_snapshot_true_is_a_snapshot_read():
    assert BinlogPosition.from_source(src(snapshot="true"), "c").change_rank == 0


def test_snapshot_read_at_a_later_position_outranks_an_earlier_change():
    change = BinlogPosition.from_source(src(pos=100, snapshot="false"), "u")
    read = BinlogPosition.from_source(src(pos=200, snapshot="true"), "r")
    assert change < read


@pytest.mark.parametrize(
    "source",
    [
        {"pos": 154, "row": 0},
        {"file": "mysql-bin.000003", "row": 0},
        {"file": None, "pos": 154},
        {"file": "mysql-bin.000003", "pos": "154"},
        {},
    ],
)
def test_from_source_without_file_or_pos_raises(source):
    with pytest.raises(ValueError, match="no binlog position"):
        BinlogPosition.from_source(source, "c")


def test_from_source_with_file_without_numeric_suffix_raises():
    with pytest.raises(ValueError, match="no numeric suffix"):
        BinlogPosition.from_source(src(file="mysql-bin"), "c")


def test_binlog_position_is_immutable():
    p = BinlogPosition(3, 154, 0, 1)
    with pytest.raises(AttributeError):
        p.pos = 1  # type: ignore[misc]


# GTID ordering (cdclake.model.position, "GTID ordering")


def _source(gtid, file="mysql-bin.000009", pos=9000, row=0, snapshot="false"):
    return {"file": file, "pos": pos, "row": row, "snapshot": snapshot, "gtid": gtid}


def test_gtid_ordering_ranks_by_the_gtid_sequence_across_binlogs():
    old_primary = BinlogPosition.from_source(_source("0-1-103", "mysql-bin.000009", 9000), "u", "gtid")
    new_primary = BinlogPosition.from_source(_source("0-2-104", "mysql-bin.000001", 400), "u", "gtid")
    assert old_primary == BinlogPosition(103, 9000, 0, 1)
    assert new_primary > old_primary
    # the same two in binlog ordering: the new primary's lower coordinates rank first
    assert BinlogPosition.from_source(_source("0-2-104", "mysql-bin.000001", 400), "u") < BinlogPosition.from_source(
        _source("0-1-103"), "u"
    )


def test_gtid_ordering_within_a_transaction_is_by_pos_and_row():
    first = BinlogPosition.from_source(_source("0-1-7", pos=500, row=3), "u", "gtid")
    second = BinlogPosition.from_source(_source("0-1-7", pos=800, row=0), "d", "gtid")
    assert first < second


def test_gtid_ordering_puts_events_without_a_gtid_below_every_gtid():
    snapshot_read = BinlogPosition.from_source(_source(None, pos=99_999, snapshot="true"), "r", "gtid")
    assert snapshot_read.file_seq == NO_GTID
    assert snapshot_read < BinlogPosition.from_source(_source("0-1-1", pos=4), "c", "gtid")
    assert BinlogPosition(DEMOTED, 0, 0, 1) < snapshot_read


def test_gtid_ordering_refuses_mysql_gtids():
    with pytest.raises(ValueError, match="not a MariaDB GTID"):
        BinlogPosition.from_source(_source("3E11FA47-71CA-11E1-9E33-C80AA9429562:23"), "c", "gtid")


def test_parse_mariadb_gtid():
    assert parse_mariadb_gtid("0-223344-164") == (0, 223344, 164)
    assert parse_mariadb_gtid(" 1-2-3 ") == (1, 2, 3)
    assert parse_mariadb_gtid("3E11FA47-71CA-11E1-9E33-C80AA9429562:23") is None
    assert parse_mariadb_gtid("0-1") is None


def test_schema_changes_of_the_recorded_chain_in_gtid_ordering():
    """The recorded chain's schema-change records (MariaDB 0-223344-<n>): the snapshot's carry no
    GTID and rank first, the later ALTERs by their GTID."""
    from pathlib import Path

    from cdclake.model.schema_changes import changes_from_record

    path = Path(__file__).parents[1] / "data" / "chain" / "schema-changes.jsonl"
    positions = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        for table_id in ('"inventory"."orders"', '"inventory"."debezium_signal"'):
            positions += [c.position for c in changes_from_record(record["value"], table_id, 0, 0, "gtid")]
    seqs = sorted({p.file_seq for p in positions})
    assert seqs[0] == NO_GTID and seqs[1:] and all(s > 0 for s in seqs[1:])


# --- Ties at one position: the Kafka offset (cdclake.model.position, EventPlace) ----------------


def test_an_empty_file_and_pos_0_names_ordering_kafka_as_the_remedy():
    with pytest.raises(ValueError, match="no binlog position.*ordering: kafka"):
        BinlogPosition.from_source({"file": "", "pos": 0, "row": 0, "snapshot": "false"}, "r")


@pytest.mark.parametrize("source", [{"file": "", "pos": 0}, {}, src("mysql-bin.000003", 154, 2, "true")])
def test_kafka_ordering_reads_no_position(source):
    assert BinlogPosition.from_source(source, "r", "kafka") == BinlogPosition.from_source({}, "u", "kafka")
    assert BinlogPosition.from_row({"_cdc_binlog_pos": 7, "_cdc_snapshot": True}, "kafka") == BinlogPosition(0, 0, 0, 1)


POSITIONS = st.builds(BinlogPosition, st.integers(0, 3), st.integers(0, 3), st.integers(0, 2), st.integers(0, 1))
PLACES = st.builds(EventPlace, POSITIONS, st.integers(-1, 2), st.integers(-1, 6))


@given(event=PLACES, stored=PLACES, ordering=st.sampled_from(ORDERINGS))
def test_supersedes_is_the_position_order_then_the_offset_within_a_partition(event, stored, ordering):
    got = supersedes(event, stored, ordering)
    if event.position != stored.position:
        assert got == (event.position > stored.position)
    elif event.partition == stored.partition:
        assert got == (event.offset > stored.offset)
    else:
        assert got == (ordering == "kafka")
    assert not (got and supersedes(stored, event, ordering)) or (event.partition != stored.partition)


@st.composite
def emitted(draw: st.DrawFn, ordering: str) -> list[tuple[EventPlace, int]]:
    """One key's events as Debezium emits them into one partition: positions never go down and
    often repeat (a compressed transaction), each with its own content; then, maybe, a connector
    restart re-emits a suffix at later offsets with the original positions."""
    steps = draw(st.lists(st.tuples(st.booleans(), st.integers(0, 1)), min_size=1, max_size=12))
    position, stream = BinlogPosition(1, 100, 0, 1), []
    for content, (same, row) in enumerate(steps):
        if not same:
            position = BinlogPosition(position.file_seq, position.pos + 100, row, 1)
        stream.append((position, content))
    restart = draw(st.none() | st.integers(0, len(stream) - 1))
    if restart is not None:
        stream += stream[restart:]
    key_partition = draw(st.integers(0, 2))
    if ordering == "kafka":  # the producer writes no position
        stream = [(BinlogPosition.from_source({"file": "", "pos": 0}, "u", ordering), c) for _, c in stream]
    return [(EventPlace(p, key_partition, 10 + i), c) for i, (p, c) in enumerate(stream)]


@pytest.mark.parametrize("ordering", ORDERINGS)
@given(data=st.data())
def test_runs_cut_anywhere_end_with_the_last_emitted_event(ordering, data):
    """A batch applies batch_pick's event of the key; a later run replaces the stored row only with
    an event that supersedes it. Wherever the runs are cut, the row is the last emitted event."""
    events = data.draw(emitted(ordering))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1), max_size=4)) if len(events) > 1 else set())
    stored: tuple[EventPlace, int] | None = None
    for start, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
        batch = events[start:end]
        pick = batch_pick(batch)
        assert pick.unordered is None
        candidate = batch[pick.latest]
        if stored is None or supersedes(candidate[0], stored[0], ordering):
            stored = candidate
    assert stored is not None and stored[1] == events[-1][1]


def test_ties_in_one_partition_are_broken_by_offset_and_reported():
    at = BinlogPosition(3, 500, 0, 1)
    pick = batch_pick([(EventPlace(at, 0, 7), "second"), (EventPlace(at, 0, 6), "first")])
    assert pick == BatchPick(latest=0, tied=True, unordered=None)
    same = batch_pick([(EventPlace(at, 0, 6), "x"), (EventPlace(at, 0, 9), "x")])
    assert same == BatchPick(latest=1, tied=False, unordered=None)


def test_equal_positions_in_two_partitions_with_other_content_have_no_order():
    at = BinlogPosition(3, 500, 0, 1)
    pick = batch_pick([(EventPlace(at, 0, 9), "a"), (EventPlace(at, 1, 4), "b"), (EventPlace(at, 1, 2), "a")])
    assert (pick.latest, pick.unordered) == (1, 0)
    # the same event in both partitions (re-emitted after the topic grew) is no conflict
    copies = batch_pick([(EventPlace(at, 0, 9), "a"), (EventPlace(at, 1, 4), "a")])
    assert copies.unordered is None
    # a later position decides whatever the partitions
    later = batch_pick([(EventPlace(at, 0, 9), "a"), (EventPlace(BinlogPosition(3, 600, 0, 1), 1, 4), "b")])
    assert later == BatchPick(latest=1, tied=False, unordered=None)


def test_the_unordered_message_names_topic_partitions_offsets_and_the_setting():
    at = BinlogPosition(3, 500, 0, 1)
    text = unordered_message("dbz.inv.t", "binlog", [EventPlace(at, 0, 9), EventPlace(at, 1, 4)])
    assert "'dbz.inv.t'" in text and "partition 0 offset 9 and partition 1 offset 4" in text
    assert "binlog_transaction_compression" in text and "3:500:0" in text
    assert "one partition" in unordered_message("t.d.x", "kafka", [EventPlace(at, 0, 9), EventPlace(at, 1, 4)])


def test_event_place_reads_the_kafka_columns_null_as_minus_one():
    row = {"_cdc_binlog_file_seq": 3, "_cdc_binlog_pos": 500, "_cdc_binlog_row": 0, "_cdc_kafka_partition": 2}
    assert EventPlace.from_row(row, "binlog", change=True) == EventPlace(BinlogPosition(3, 500, 0, 1), 2, -1)
