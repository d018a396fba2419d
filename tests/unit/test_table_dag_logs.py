"""A table DAG's task log as a user reads it in Airflow's UI (plugins/cdclake_airflow/table_dag.py),
without a stack: the run's engine is replaced (``cdclake.runner.run_once``, ``plan_next``) and
the task callables are called as Airflow calls them. A run that refuses a trigger-form Param ends
its log with the one-line reason and fails with ``AirflowFailException`` (not retried, no inner
traceback); a run with nothing new ends its log with its one line before it is skipped."""

from __future__ import annotations

import logging

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from cdclake.errors import TriggerParamError
from cdclake.model.offsets import OffsetRange
from cdclake.model.plan import RunPlan
from cdclake.settings import Settings
from cdclake_airflow.table_failures import recorded_error
from tests.conftest import make_table

NO_PARTITION_7 = "replay_from_offsets: topic 't' has no partition 7; allowed: partition: offset in {0: 0..5}"


class Hook:
    """What the tasks read of :class:`cdclake_airflow.hooks.CdcLakeHook`: no catalog, no Kafka, no
    session (the run's engine is replaced)."""

    settings = Settings.from_env()
    catalog = None
    kafka = None

    def spark_session(self):
        raise AssertionError("no Spark session is opened")


@pytest.fixture
def task_env(monkeypatch, caplog):
    """The table DAG's module with :class:`Hook` for its hook and no table to update; the task
    log at INFO."""
    from cdclake_airflow import hooks, table_dag

    monkeypatch.setattr(hooks, "CdcLakeHook", Hook)
    monkeypatch.setattr(table_dag, "runs_succeed", lambda catalog, cfg: None)
    caplog.set_level(logging.INFO)
    return table_dag


def _context(**params) -> dict:
    return {"run_id": "manual__1", "params": params, "outlet_events": {}}


def _last_line(caplog) -> logging.LogRecord:
    return caplog.records[-1]


def test_a_partition_the_topic_lacks_ends_the_log_with_its_reason_and_fails_without_retry(
    task_env, monkeypatch, caplog
):
    """``{"7": 0}`` passes the form (the form cannot know the topic's partitions); the run refuses
    it: the log's last line is the reason, and the task fails with ``AirflowFailException`` carrying
    it, whose traceback does not chain the inner one; the table's record of the failed try names
    the ``TriggerParamError``."""
    cfg = make_table()

    def run_once(*args, **kwargs):
        raise TriggerParamError(NO_PARTITION_7)

    monkeypatch.setattr("cdclake.runner.run_once", run_once)
    with pytest.raises(AirflowFailException) as failed:
        task_env.apply(cfg.model_dump_json(), None, **_context(replay_from_offsets='{"7": 0}'))
    assert str(failed.value) == NO_PARTITION_7
    assert failed.value.__cause__ is None and failed.value.__suppress_context__  # no inner traceback printed
    last = _last_line(caplog)
    assert (last.levelno, last.getMessage()) == (logging.ERROR, NO_PARTITION_7)
    recorded = recorded_error(failed.value)
    assert isinstance(recorded, TriggerParamError) and str(recorded) == NO_PARTITION_7
    other = AirflowFailException("the replay's range holds no whole source transaction")
    assert recorded_error(other) is other


def test_both_replay_starts_are_refused_the_same_way_before_the_run(task_env, monkeypatch, caplog):
    cfg = make_table()
    monkeypatch.setattr("cdclake.runner.run_once", lambda *a, **k: pytest.fail("the run must not start"))
    with pytest.raises(AirflowFailException, match="give one of them") as failed:
        task_env.apply(
            cfg.model_dump_json(),
            None,
            **_context(replay_from_offsets='{"0": 0}', replay_from_timestamp="2026-11-20T08:00:00Z"),
        )
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
    assert _last_line(caplog).getMessage() == str(failed.value)


def _empty_plan(cfg, offsets: dict[int, int], **fields) -> RunPlan:
    return RunPlan(
        table=cfg, run_id="manual__1", range=OffsetRange(topic=cfg.topic, start=offsets, end=offsets), **fields
    )


def test_a_run_with_nothing_new_logs_its_line_last_then_is_skipped(task_env, monkeypatch, caplog):
    from cdclake.runner import RunOutcome

    cfg = make_table()
    plan = _empty_plan(cfg, {1: 4, 0: 6})
    monkeypatch.setattr("cdclake.runner.run_once", lambda *a, **k: RunOutcome(plan, None, {"plan": 0.2}))
    with pytest.raises(AirflowSkipException):
        task_env.apply(cfg.model_dump_json(), None, **_context())
    last = _last_line(caplog)
    assert (last.levelno, last.getMessage()) == (
        logging.INFO,
        f"run of table {cfg.identifier}: nothing new since offsets {{0: 6, 1: 4}}; replay no; seconds {{'plan': 0.2}}",
    )


def test_a_batch_held_at_a_schema_change_says_so_in_its_line(task_env, monkeypatch, caplog):
    from cdclake.runner import RunOutcome

    cfg = make_table()
    plan = _empty_plan(cfg, {0: 6}, capped_before="rename column a to b", replay=True)
    monkeypatch.setattr("cdclake.runner.run_once", lambda *a, **k: RunOutcome(plan, None, {"plan": 0.1}))
    with pytest.raises(AirflowSkipException):
        task_env.apply(cfg.model_dump_json(), None, **_context())
    assert _last_line(caplog).getMessage() == (
        f"run of table {cfg.identifier}: nothing applied: the batch waits at schema change rename column a to b "
        "until every partition has settled past it; offsets {0: 6}; replay yes; seconds {'plan': 0.1}"
    )


def test_the_submit_engines_plan_task_ends_its_log_the_same_ways(task_env, monkeypatch, caplog):
    """``plan`` (``submit`` engine): nothing new is its last line before the short-circuit; a
    refused Param fails it as the ``apply`` task fails."""
    cfg = make_table()
    monkeypatch.setattr("cdclake.pipeline.planner.plan_next", lambda *a, **k: _empty_plan(cfg, {0: 3}))
    assert task_env.plan(cfg.model_dump_json(), **_context()) is None
    assert (
        _last_line(caplog)
        .getMessage()
        .startswith(f"run of table {cfg.identifier}: nothing new since offsets {{0: 3}}; replay no; seconds {{'plan': ")
    )

    def refused(*args, **kwargs):
        raise TriggerParamError(NO_PARTITION_7)

    monkeypatch.setattr("cdclake.pipeline.planner.plan_next", refused)
    with pytest.raises(AirflowFailException, match="has no partition 7") as failed:
        task_env.plan(cfg.model_dump_json(), **_context(replay_from_offsets='{"7": 0}'))
    assert failed.value.__cause__ is None and _last_line(caplog).getMessage() == NO_PARTITION_7
