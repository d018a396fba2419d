"""The pure parts of one table run (include/cdclake/runner.py): its phase clock and its
arguments; the run itself is tests/integration/test_runner.py."""

from __future__ import annotations

import pytest

from cdclake import runner
from cdclake.runner import PhaseClock, run_once, summary_line
from tests.conftest import make_table


def test_phase_clock_sums_a_repeated_phase_in_first_timed_order(monkeypatch):
    ticks = iter([0.0, 1.0, 1.0, 1.25, 5.0, 5.0004])
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(ticks))
    clock = PhaseClock({"earlier": 2.0})
    with clock.phase("plan"):
        pass
    with clock.phase("apply"):
        pass
    with clock.phase("plan"):
        pass
    assert clock.seconds == {"earlier": 2.0, "plan": 1.0, "apply": 0.25}


def test_phase_clock_times_a_phase_that_raises(monkeypatch):
    ticks = iter([0.0, 0.5])
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(ticks))
    clock = PhaseClock()
    with pytest.raises(RuntimeError), clock.phase("session"):
        raise RuntimeError("no server")
    assert clock.seconds == {"session": 0.5}


def test_run_once_refuses_fewer_than_one_attempt_before_touching_anything():
    def never() -> None:
        raise AssertionError("no session may be opened")

    with pytest.raises(ValueError, match="attempts must be at least 1, got 0"):
        run_once(make_table(), "r", settings=None, catalog=None, kafka=None, open_session=never, attempts=0)


def test_the_summary_line_tells_the_range_the_replay_flag_the_ops_the_keys_the_snapshot_and_the_phases():
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan

    cfg = make_table(namespace="inventory", table="products")
    plan = RunPlan(
        table=cfg, run_id="r", range=OffsetRange(topic=cfg.topic, start={1: 0, 0: 3}, end={0: 5, 1: 6}), replay=True
    )
    result = ApplyResult(
        "committed", snapshot_id=5408683576420572515, events=8, ops={"c": 7, "d": 1}, quarantined=0, keys_changed=6
    )
    assert summary_line(plan, result, {"plan": 1.3, "apply": 6.1}) == (
        "run of table inventory.products: committed; replay yes; offsets {0: [3, 5), 1: [0, 6)}; 8 event(s) "
        "{'c': 7, 'd': 1}, 0 quarantined, 6 key(s) changed, snapshot 5408683576420572515; "
        "seconds {'plan': 1.3, 'apply': 6.1}"
    )


def test_the_summary_line_of_a_run_cut_to_whole_transactions_tells_the_range_applied_and_the_records_left():
    from cdclake.model.offsets import OffsetRange
    from cdclake.model.outcome import ApplyResult
    from cdclake.model.plan import RunPlan

    cfg = make_table(namespace="d", table="accounts")
    plan = RunPlan(table=cfg, run_id="r", range=OffsetRange(topic=cfg.topic, start={0: 0, 1: 2}, end={0: 5, 1: 6}))
    result = ApplyResult(
        "committed", snapshot_id=7, events=7, ops={"u": 7}, keys_changed=3, applied_end={0: 5, 1: 4}, waiting_events=2
    )
    assert summary_line(plan, result, {"apply": 2.0}) == (
        "run of table d.accounts: committed; replay no; offsets {0: [0, 5), 1: [2, 4) of [2, 6)}; 7 event(s) "
        "{'u': 7}, 0 quarantined, 3 key(s) changed, snapshot 7; 2 record(s) wait for a source transaction; "
        "seconds {'apply': 2.0}"
    )
