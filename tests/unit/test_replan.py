"""A run whose range changes (``cdclake.model.outcome.Replan``): ``replan_until_applied`` tries
each new plan with the ``cut_incompatible`` it says, returns the first result, and stops with
``ReplanLimitError`` when the range keeps changing. The one try is a function of the test here
(the Spark apply passes ``cdclake.spark.apply.apply_once``): a real batch cannot be made to replan
without end (the fault this injects); the real replans run in tests/integration/test_transactions.py
(a range extended to a whole transaction), test_avro_parse.py (cut before an incompatible type
change) and the group tests."""

from __future__ import annotations

import logging

import pytest

from cdclake.errors import ReplanLimitError
from cdclake.model.config import TableConfig
from cdclake.model.offsets import OffsetRange
from cdclake.model.outcome import MAX_REPLANS, ApplyResult, Replan, replan_until_applied
from cdclake.model.plan import RunPlan

CFG = TableConfig(name="t", topic="dbz.shop.t", namespace="shop", table="t", primary_key=("id",))


def _plan(end: int) -> RunPlan:
    return RunPlan(table=CFG, run_id="run-1", range=OffsetRange(topic=CFG.topic, start={0: 0}, end={0: end}))


def test_each_replan_is_tried_with_its_cut_and_the_first_result_returned(caplog):
    tries: list[tuple[int, bool]] = []
    replans = {10: Replan(_plan(20), "extended", True), 20: Replan(_plan(15), "cut", False)}

    def one_try(plan: RunPlan, cut_incompatible: bool) -> ApplyResult | Replan:
        tries.append((plan.range.end[0], cut_incompatible))
        return replans.get(plan.range.end[0]) or ApplyResult("committed", applied_end=dict(plan.range.end))

    with caplog.at_level(logging.INFO, logger="cdclake.model.outcome"):
        result = replan_until_applied(one_try, _plan(10))
    assert tries == [(10, True), (20, True), (15, False)]
    assert result.applied_end == {0: 15}
    assert [r.getMessage() for r in caplog.records] == [
        'table shop.t: extended; the run tries again with the range ending at {"0": 20}',
        'table shop.t: cut; the run tries again with the range ending at {"0": 15}',
    ]


def test_a_first_try_that_applies_is_the_only_try():
    tries = []

    def one_try(plan: RunPlan, cut_incompatible: bool) -> ApplyResult:
        tries.append(cut_incompatible)
        return ApplyResult("empty")

    assert replan_until_applied(one_try, _plan(3), cut_incompatible=False) == ApplyResult("empty")
    assert tries == [False]


def test_a_range_that_keeps_changing_stops_the_run_naming_every_reason():
    calls = []

    def one_try(plan: RunPlan, cut_incompatible: bool) -> Replan:
        calls.append(plan.range.end[0])
        return Replan(_plan(plan.range.end[0] + 1), f"read further to {plan.range.end[0] + 1}")

    with pytest.raises(ReplanLimitError, match=r"table shop\.t: run run-1 changed its range more than 16") as e:
        replan_until_applied(one_try, _plan(1))
    assert len(calls) == MAX_REPLANS + 1
    assert "read further to 2" in str(e.value) and "nothing of the range was committed" in str(e.value)
