"""Hypothesis strategies of rows' metadata columns and of positions, shared by the codec tests
(tests/unit/test_position_codecs.py, tests/integration/test_position_codecs.py): NULLs, the
sentinels NO_GTID and DEMOTED, the NULL readings (-1), binlog file sequence numbers on both
sides of 999999, and Kafka partitions and offsets that often tie."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from cdclake.model.position import CHANGE_RANK, DEMOTED, NO_GTID, SNAPSHOT_RANK, BinlogPosition

LONGS = st.sampled_from([DEMOTED, NO_GTID, 0, 1, 3, 4, 999_999, 1_000_000, 1_000_001, 2**62]) | st.integers(-3, 2**40)
"""Values of a ``long`` position column: sentinels, the binlog file number wrap, and any."""

INTS = st.sampled_from([-2, -1, 0, 1, 2]) | st.integers(-3, 2**31 - 2)
"""Values of ``_cdc_binlog_row`` (Iceberg ``int``)."""


def rows() -> st.SearchStrategy[dict[str, Any]]:
    """A row's metadata columns, position and Kafka partition and offset (``None``: NULL)."""
    return st.fixed_dictionaries(
        {
            "_cdc_snapshot": st.none() | st.booleans(),
            "_cdc_binlog_file_seq": st.none() | LONGS,
            "_cdc_binlog_pos": st.none() | LONGS,
            "_cdc_binlog_row": st.none() | INTS,
            "_cdc_gtid_seq": st.none() | LONGS,
            "_cdc_kafka_partition": st.none() | st.integers(-1, 2),
            "_cdc_kafka_offset": st.none() | st.sampled_from([-1, 0, 1, 2]) | st.integers(0, 2**40),
        }
    )


def positions() -> st.SearchStrategy[BinlogPosition]:
    """Positions to compare rows with, the read positions of reconcile (``pos`` and ``row`` -2
    and -1) among them."""
    return st.builds(
        BinlogPosition,
        LONGS,
        LONGS | st.just(-2),
        INTS,
        st.sampled_from([SNAPSHOT_RANK, CHANGE_RANK]),
    )


@st.composite
def near(draw: st.DrawFn, reading: BinlogPosition) -> BinlogPosition:
    """A position equal to ``reading`` in its first parts and one apart in the next (a tie the
    order breaks on a later part), or ``reading`` itself."""
    values = [reading.file_seq, reading.pos, reading.row, reading.change_rank]
    same = draw(st.integers(0, 4))
    if same < 4:
        values[same] += draw(st.sampled_from([-1, 1]))
        rest = draw(positions())
        values[same + 1 :] = [rest.file_seq, rest.pos, rest.row, rest.change_rank][same + 1 :]
    return BinlogPosition(*values)
