"""Unit tests for :mod:`cdclake.model.position`: binlog file names, snapshot detection and event order."""

from __future__ import annotations

import re

import pytest

from cdclake.model.position import BINLOG_FILE_PATTERN, BinlogPosition, is_snapshot_read, split_binlog_file


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
