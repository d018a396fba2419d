"""The replay start of a table DAG's trigger form (:mod:`cdclake.model.replay`): what the run checks
before it touches Spark, each refusal one line naming the Param and the values it allows."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from cdclake.errors import TriggerParamError
from cdclake.model.replay import ReplayStart, check_offsets, check_retained, replay_start

NOW_MS = int(datetime(2026, 11, 25, tzinfo=timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, ReplayStart()),
        ({"replay_from_offsets": None, "replay_from_timestamp": "", "accept_source_change": None}, ReplayStart()),
        ({"replay_from_offsets": '{"0": 120, "1": 98}'}, ReplayStart(offsets={0: 120, 1: 98})),
        ({"replay_from_offsets": {"2": 0}}, ReplayStart(offsets={2: 0})),
        (
            {"replay_from_timestamp": "2026-11-20T08:00:00Z"},
            ReplayStart(timestamp_ms=int(datetime(2026, 11, 20, 8, tzinfo=timezone.utc).timestamp() * 1000)),
        ),
        (
            {"replay_from_timestamp": "2026-11-20 09:00:00+01:00"},
            ReplayStart(timestamp_ms=int(datetime(2026, 11, 20, 8, tzinfo=timezone.utc).timestamp() * 1000)),
        ),
        (
            {"replay_from_offsets": {"0": 5}, "accept_source_change": True},
            ReplayStart(offsets={0: 5}, accept_source_change=True),
        ),
    ],
)
def test_a_good_replay_start_is_read_as_given(params, expected):
    assert replay_start(params, now_ms=NOW_MS) == expected
    assert expected.is_replay == (expected.offsets is not None or expected.timestamp_ms is not None)


@pytest.mark.parametrize(
    ("params", "names"),
    [
        ({"replay_from_offsets": '{"0": -1}'}, ["replay_from_offsets", '{"0": 120, "1": 98}']),
        ({"replay_from_offsets": {"0": 1.5}}, ["replay_from_offsets", "non-negative offset"]),
        ({"replay_from_offsets": '{"0": 12'}, ["replay_from_offsets", "JSON object"]),
        ({"replay_from_offsets": "{}"}, ["replay_from_offsets"]),
        ({"replay_from_offsets": {"x": 1}}, ["replay_from_offsets"]),
        ({"replay_from_timestamp": "20/11/2026"}, ["replay_from_timestamp", "ISO 8601"]),
        ({"replay_from_timestamp": "2026-13-01T00:00:00Z"}, ["replay_from_timestamp", "ISO 8601"]),
        ({"replay_from_timestamp": "2027-01-01T00:00:00Z"}, ["replay_from_timestamp", "in the future", "2026-11-25"]),
        (
            {"replay_from_offsets": {"0": 1}, "replay_from_timestamp": "2026-11-20T08:00:00Z"},
            ["replay_from_offsets and replay_from_timestamp", "not both"],
        ),
        ({"accept_source_change": True}, ["accept_source_change needs replay_from_offsets"]),
    ],
)
def test_a_replay_start_that_does_not_fit_is_one_line_naming_the_param(params, names):
    with pytest.raises(TriggerParamError) as e:
        replay_start(params, now_ms=NOW_MS)
    message = str(e.value)
    assert "\n" not in message
    for name in names:
        assert name in message


def test_start_offsets_are_checked_against_the_topic():
    low, high = {0: 10, 1: 0}, {0: 120, 1: 98}
    check_offsets("t", {0: 10, 1: 98}, low, high)  # the watermarks themselves are allowed
    with pytest.raises(TriggerParamError) as e:
        check_offsets("t", {0: 10, 7: 0}, low, high)
    assert str(e.value) == (
        "replay_from_offsets: topic 't' has no partition 7; allowed: partition: offset in {0: 10..120, 1: 0..98}"
    )
    with pytest.raises(TriggerParamError, match=r"offset\(s\) \{0: 9\} outside what Kafka keeps"):
        check_offsets("t", {0: 9}, low, high)
    with pytest.raises(TriggerParamError, match=r"\{1: 99\}"):
        check_offsets("t", {1: 99}, low, high)


def test_a_replay_time_whose_records_retention_deleted_is_refused():
    day = 86_400_000
    # partition 0 lost records to retention and keeps none older than day 10; partition 1 lost none
    low, oldest = {0: 50, 1: 0}, {0: 10 * day, 1: 1 * day}
    check_retained("t", 10 * day, low, oldest)
    check_retained("t", 10 * day, {0: 0, 1: 0}, oldest)  # nothing deleted: the topic's whole history
    with pytest.raises(TriggerParamError) as e:
        check_retained("t", 5 * day, low, oldest)
    assert str(e.value).startswith("replay_from_timestamp: retention deleted the oldest records of topic 't'")
    assert str(e.value).endswith("allowed: a time from 1970-01-11T00:00:00+00:00 to now")
