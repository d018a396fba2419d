"""A run whose range changes (``cdclake.spark.apply.Replan``): ``apply_range`` tries each new
plan with the ``cut_incompatible`` it says, returns the first result, and stops with
``ReplanLimitError`` when the range keeps changing. The one try (``apply_once``) is replaced here
by a function that returns the replans: a real batch cannot be made to replan without end (the
fault this injects); the real replans run in tests/integration/test_transactions.py (a range
extended to a whole transaction), test_avro_parse.py (cut before an incompatible type change)
and the group tests."""

from __future__ import annotations

import pytest

from cdclake.errors import ReplanLimitError
from cdclake.model.config import TableConfig
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.spark import apply

CFG = TableConfig(name="t", topic="dbz.shop.t", namespace="shop", table="t", primary_key=("id",))


def _plan(end: int) -> RunPlan:
    return RunPlan(table=CFG, run_id="run-1", range=OffsetRange(topic=CFG.topic, start={0: 0}, end={0: end}))


def test_each_replan_is_tried_with_its_cut_and_the_first_result_returned(monkeypatch):
    tries: list[tuple[int, bool]] = []
    replans = {10: apply.Replan(_plan(20), "extended", True), 20: apply.Replan(_plan(15), "cut", False)}

    def one_try(spark, settings, plan, *, kafka, cut_incompatible):
        tries.append((plan.range.end[0], cut_incompatible))
        return replans.get(plan.range.end[0]) or apply.ApplyResult("committed", applied_end=dict(plan.range.end))

    monkeypatch.setattr(apply, "apply_once", one_try)
    result = apply.apply_range(None, None, _plan(10), kafka=object())  # type: ignore[arg-type]
    assert tries == [(10, True), (20, True), (15, False)]
    assert result.applied_end == {0: 15}


def test_a_range_that_keeps_changing_stops_the_run_naming_every_reason(monkeypatch):
    calls = []

    def one_try(spark, settings, plan, *, kafka, cut_incompatible):
        calls.append(plan.range.end[0])
        return apply.Replan(_plan(plan.range.end[0] + 1), f"read further to {plan.range.end[0] + 1}")

    monkeypatch.setattr(apply, "apply_once", one_try)
    with pytest.raises(ReplanLimitError, match=r"table shop\.t: run run-1 changed its range more than 16") as e:
        apply.apply_range(None, None, _plan(1), kafka=object())  # type: ignore[arg-type]
    assert len(calls) == apply.MAX_REPLANS + 1
    assert "read further to 2" in str(e.value) and "nothing of the range was committed" in str(e.value)
