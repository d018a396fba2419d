"""Unit tests for :mod:`cdclake.model.offsets`: the per-run offset plan and offset (de)serialisation."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import OffsetsOutOfRangeError
from cdclake.model.offsets import OffsetRange, decode_offsets, encode_offsets, plan_range

TOPIC = "dbserver1.inventory.products"


# --- plan_range: where a run starts ------------------------------------------------------------


def test_plan_range_never_committed_starts_at_low_watermark():
    r = plan_range(TOPIC, None, low={0: 5, 1: 0}, high={0: 20, 1: 3}, max_events=1000)
    assert r.topic == TOPIC
    assert r.start == {0: 5, 1: 0}
    assert r.end == {0: 20, 1: 3}
    assert r.event_count == 18


def test_plan_range_resumes_from_committed_offsets():
    r = plan_range(TOPIC, {0: 12, 1: 2}, low={0: 5, 1: 0}, high={0: 20, 1: 3}, max_events=1000)
    assert r.start == {0: 12, 1: 2}
    assert r.end == {0: 20, 1: 3}
    assert r.event_count == 9


def test_plan_range_new_partition_not_in_committed_starts_at_its_low_watermark():
    r = plan_range(TOPIC, {0: 12}, low={0: 5, 1: 4}, high={0: 12, 1: 9}, max_events=1000)
    assert r.start == {0: 12, 1: 4}
    assert r.end == {0: 12, 1: 9}


def test_plan_range_is_empty_when_committed_equals_high():
    r = plan_range(TOPIC, {0: 16, 1: 4}, low={0: 0, 1: 0}, high={0: 16, 1: 4}, max_events=10)
    assert r.is_empty
    assert r.event_count == 0
    assert r.start == r.end == {0: 16, 1: 4}


def test_plan_range_on_empty_topic_is_empty():
    r = plan_range(TOPIC, None, low={0: 0}, high={0: 0}, max_events=10)
    assert r.is_empty
    assert r.start == r.end == {0: 0}


# --- plan_range: the cap ------------------------------------------------------------------------


def test_plan_range_caps_a_single_partition():
    r = plan_range(TOPIC, {0: 100}, low={0: 0}, high={0: 1000}, max_events=50)
    assert r.end == {0: 150}
    assert r.event_count == 50


def test_plan_range_shares_cap_and_gives_unused_share_to_others():
    # pending 10 / 1 / 0 with a cap of 5: partition 1 can use only 1 of its share and partition 2
    # nothing, so partition 0 gets the rest.
    r = plan_range(TOPIC, None, low={0: 0, 1: 0, 2: 0}, high={0: 10, 1: 1, 2: 0}, max_events=5)
    taken = {p: r.end[p] - r.start[p] for p in r.end}
    assert taken == {0: 4, 1: 1, 2: 0}
    assert r.event_count == 5


@pytest.mark.parametrize(
    ("pending", "cap"),
    [
        ({0: 10, 1: 1, 2: 0}, 5),
        ({0: 100, 1: 100, 2: 100}, 10),
        ({0: 3, 1: 50, 2: 7, 3: 0}, 20),
        ({0: 1, 1: 1}, 1),
        ({0: 9, 1: 9, 2: 9, 3: 9}, 3),
        ({0: 1000}, 999),
    ],
)
def test_plan_range_takes_exactly_the_cap_without_exceeding_any_partition(pending, cap):
    low = {p: 10 for p in pending}
    high = {p: 10 + n for p, n in pending.items()}
    r = plan_range(TOPIC, None, low=low, high=high, max_events=cap)
    taken = {p: r.end[p] - r.start[p] for p in r.end}
    assert r.event_count == sum(taken.values()) == cap
    for p in pending:
        assert 0 <= taken[p] <= pending[p]


def test_plan_range_shares_cap_evenly_between_equal_backlogs():
    r = plan_range(TOPIC, None, low={0: 0, 1: 0, 2: 0}, high={0: 100, 1: 100, 2: 100}, max_events=9)
    assert {p: r.end[p] - r.start[p] for p in r.end} == {0: 3, 1: 3, 2: 3}


def test_plan_range_takes_everything_when_cap_exceeds_pending():
    r = plan_range(TOPIC, {0: 2, 1: 0}, low={0: 0, 1: 0}, high={0: 7, 1: 3}, max_events=500_000)
    assert r.end == {0: 7, 1: 3}
    assert r.event_count == 8


@pytest.mark.parametrize("cap", [0, -1])
def test_plan_range_non_positive_cap_raises(cap):
    with pytest.raises(ValueError, match="max_events must be > 0"):
        plan_range(TOPIC, None, low={0: 0}, high={0: 5}, max_events=cap)


# --- plan_range: committed offsets out of range -------------------------------------------------


def test_plan_range_below_low_watermark_raises_with_remedy():
    with pytest.raises(OffsetsOutOfRangeError) as excinfo:
        plan_range(TOPIC, {0: 3, 1: 0}, low={0: 0, 1: 10}, high={0: 20, 1: 30}, max_events=100)
    msg = str(excinfo.value)
    assert TOPIC in msg
    assert "partition 1" in msg
    assert "committed offset 0" in msg
    assert "earliest offset still in Kafka is 10" in msg
    assert "events 0..9 were deleted by retention" in msg
    assert "snapshot-bootstrap DAG" in msg


def test_plan_range_above_high_watermark_raises():
    with pytest.raises(OffsetsOutOfRangeError) as excinfo:
        plan_range(TOPIC, {0: 25}, low={0: 0}, high={0: 20}, max_events=100)
    msg = str(excinfo.value)
    assert "partition 0" in msg
    assert "committed offset 25" in msg
    assert "ends at 20" in msg
    assert "recreated" in msg


def test_plan_range_committed_partition_the_topic_lost_raises():
    with pytest.raises(OffsetsOutOfRangeError, match=r"partition\(s\) \[3\]"):
        plan_range(TOPIC, {0: 1, 3: 5}, low={0: 0}, high={0: 2}, max_events=100)


# --- OffsetRange ------------------------------------------------------------------------------------


def test_offset_range_json_round_trip_keeps_int_partition_keys():
    r = OffsetRange(topic=TOPIC, start={0: 1, 1: 2, 10: 0}, end={0: 3, 1: 2, 10: 7})
    text = r.to_json()
    assert json.loads(text) == {
        "topic": TOPIC,
        "start": {"0": 1, "1": 2, "10": 0},
        "end": {"0": 3, "1": 2, "10": 7},
    }
    back = OffsetRange.from_json(text)
    assert back == r
    assert sorted(back.start) == [0, 1, 10]
    assert all(isinstance(p, int) for p in back.end)


def test_offset_range_event_count_sums_partitions():
    r = OffsetRange(topic=TOPIC, start={0: 1, 1: 2}, end={0: 3, 1: 7})
    assert r.event_count == 7
    assert not r.is_empty


def test_offset_range_start_after_end_raises():
    with pytest.raises(ValueError, match=r"start offset after end offset in partition\(s\) \[1\]"):
        OffsetRange(topic=TOPIC, start={0: 1, 1: 9}, end={0: 3, 1: 7})


def test_offset_range_mismatched_partitions_raise():
    with pytest.raises(ValueError, match=r"start partitions \[0\] != end partitions \[0, 1\]"):
        OffsetRange(topic=TOPIC, start={0: 1}, end={0: 3, 1: 7})


def test_offset_range_negative_offset_raises():
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        OffsetRange(topic=TOPIC, start={0: -1}, end={0: 3})


def test_offset_range_unknown_field_raises():
    with pytest.raises(ValueError, match="extra"):
        OffsetRange.from_json('{"topic": "t", "start": {}, "end": {}, "partitions": 3}')


# --- encode / decode ----------------------------------------------------------------------------


def test_encode_offsets_is_compact_and_sorted_by_partition():
    assert encode_offsets({10: 5, 1: 4, 0: 16}) == '{"0":16,"1":4,"10":5}'


def test_encode_decode_offsets_round_trip():
    offsets = {0: 16, 1: 4, 12: 0}
    assert decode_offsets(encode_offsets(offsets)) == offsets


def test_decode_offsets_yields_int_keys_and_values():
    assert decode_offsets('{"0": 16, "1": 4}') == {0: 16, 1: 4}
