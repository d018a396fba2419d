"""The position order of :mod:`cdclake.model.position` and its pyiceberg codec
(:mod:`cdclake.io.positions`) agree, for every ordering, on rows with NULLs, the NO_GTID and
DEMOTED sentinels and binlog file numbers past 999999: pyiceberg's own evaluator, the pyarrow
filter of a scan, and the complement a delete keeps. The Spark codec's agreement is in
tests/integration/test_position_codecs.py."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.expressions.visitors import bind, expression_evaluator
from pyiceberg.io.pyarrow import _expression_to_complementary_pyarrow, expression_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import BooleanType, IntegerType, LongType, NestedField

from cdclake.io.positions import position_below
from cdclake.model.position import CHANGE_RANK, NO_GTID, ORDERINGS, BinlogPosition, EventPlace, position_parts
from tests.position_strategies import near, positions, rows

LAKE = Schema(
    NestedField(1, "_cdc_snapshot", BooleanType(), required=False),
    NestedField(2, "_cdc_binlog_file_seq", LongType(), required=False),
    NestedField(3, "_cdc_binlog_pos", LongType(), required=False),
    NestedField(4, "_cdc_binlog_row", IntegerType(), required=False),
    NestedField(5, "_cdc_gtid_seq", LongType(), required=False),
)
"""The position columns of a CDC table (:data:`cdclake.model.layout.METADATA_COLUMNS`)."""

TOMBSTONES = Schema(*[f for f in LAKE.fields if f.name != "_cdc_snapshot"])
"""The position columns of a tombstone table: no ``_cdc_snapshot``."""

CASES = [(ordering, change) for ordering in ORDERINGS for change in (False, True)]


def _schema(change: bool) -> Schema:
    return TOMBSTONES if change else LAKE


def _below_in_pyiceberg(rows_: list[dict[str, Any]], position: BinlogPosition, ordering: str, change: bool) -> dict:
    """Which of ``rows_`` ``position_below`` selects: by pyiceberg's evaluator, by the pyarrow
    filter of a scan, and the rows a delete by it keeps (its complementary filter)."""
    schema = _schema(change)
    expr = position_below(position, ordering, change=change)
    names = [f.name for f in schema.fields]
    evaluate = expression_evaluator(schema, expr, case_sensitive=True)
    table = pa.Table.from_pylist([{n: r[n] for n in names} for r in rows_], schema=schema.as_arrow())
    table = table.append_column("i", pa.array(range(len(rows_)), pa.int64()))
    bound = bind(schema, expr, case_sensitive=True)
    return {
        "evaluator": [evaluate(Record(*[r[n] for n in names])) for r in rows_],
        "scan": set(table.filter(expression_to_pyarrow(bound))["i"].to_pylist()),
        # pyiceberg's delete rewrites a data file with the rows of this filter
        "kept": set(table.filter(_expression_to_complementary_pyarrow(bound))["i"].to_pylist()),
    }


@pytest.mark.parametrize(("ordering", "change"), CASES)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_pyiceberg_filter_selects_the_rows_below_in_the_model_order(ordering, change, data):
    rows_ = data.draw(st.lists(rows(), min_size=1, max_size=12))
    readings = [BinlogPosition.from_row(r, ordering, change=change) for r in rows_]
    position = data.draw(positions() | st.sampled_from(readings).flatmap(near))
    below = [reading < position for reading in readings]

    got = _below_in_pyiceberg(rows_, position, ordering, change)

    assert got["evaluator"] == below
    assert got["scan"] == {i for i, b in enumerate(below) if b}
    assert got["kept"] == {i for i, b in enumerate(below) if not b}


@pytest.mark.parametrize(("ordering", "change"), CASES)
@given(row=rows())
def test_from_row_reads_each_part_with_its_null_fallback(ordering, change, row):
    reading = BinlogPosition.from_row(row, ordering, change=change)
    place = EventPlace.from_row(row, ordering, change=change)
    assert place.position == reading
    assert (place.partition, place.offset) == tuple(
        -1 if row[c] is None else row[c] for c in ("_cdc_kafka_partition", "_cdc_kafka_offset")
    )
    if ordering == "kafka":  # reads no column: every row has one position
        assert reading == BinlogPosition(0, 0, 0, CHANGE_RANK)
        return
    first = row["_cdc_gtid_seq"] if ordering == "gtid" else row["_cdc_binlog_file_seq"]
    assert reading.file_seq == (NO_GTID if first is None else first)
    assert reading.pos == (-1 if row["_cdc_binlog_pos"] is None else row["_cdc_binlog_pos"])
    assert reading.row == (-1 if row["_cdc_binlog_row"] is None else row["_cdc_binlog_row"])
    assert reading.change_rank == (0 if row["_cdc_snapshot"] is True and not change else 1)


def test_position_parts_follow_the_dataclass_fields_in_order():
    for ordering in ORDERINGS:
        assert [p.field for p in position_parts(ordering)] == list(BinlogPosition.__dataclass_fields__)


def test_file_sequence_numbers_compare_as_integers_past_999999():
    rows_ = [{"_cdc_snapshot": False, "_cdc_binlog_file_seq": 1_000_000, "_cdc_binlog_pos": 4, "_cdc_binlog_row": 0}]
    rows_[0]["_cdc_gtid_seq"] = None
    got = _below_in_pyiceberg(rows_, BinlogPosition(999_999, 900, 0, 1), "binlog", False)
    assert got["evaluator"] == [False] and got["kept"] == {0}


def test_an_unknown_ordering_is_refused():
    with pytest.raises(ValueError, match="ordering 'lsn'"):
        position_parts("lsn")
