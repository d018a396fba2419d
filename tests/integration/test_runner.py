"""One table run (:func:`cdclake.runner.run_once`) on a real Kafka broker, the tests' Spark
session with the Iceberg runtime and their SQLite catalog: what it opens, applies, times, and how
it plans again when another commit moves the table under it.

The run exits every session it enters; the sessions here lend the tests' shared one (stopping it
would end it for every later test) and count the exits. The Spark Connect sessions of the
table DAG are tests/e2e/test_table_dag.py's."""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import replace

import pytest

from cdclake.errors import ConcurrentRunError
from cdclake.io.catalog import load_catalog
from cdclake.io.events import load_events
from cdclake.io.kafka import ensure_topic
from cdclake.io.refs import committed_offsets
from cdclake.model.layout import SummaryKeys
from cdclake.model.offsets import OffsetRange
from cdclake.runner import run_once
from tests.conftest import apply_offsets, make_table
from tests.integration.test_apply import PRODUCT_COLUMNS, PRODUCTS_FINAL, table_rows

pytestmark = pytest.mark.integration

PRODUCTS = "flink/debezium-data-schema-include.txt"
"""16 events of inventory.products (json_with_schema)."""


class LentSessions:
    """A :data:`~cdclake.runner.SessionFactory` lending the tests' shared session; counts the
    sessions entered and exited.

    Args:
        spark: the tests' session.
        before_open: called with the number of the session about to be entered (1, 2, ...).
    """

    def __init__(self, spark, before_open=None) -> None:
        self.spark = spark
        self.before_open = before_open
        self.opened = 0
        self.closed = 0

    @contextmanager
    def __call__(self):
        self.opened += 1
        if self.before_open is not None:
            self.before_open(self.opened)
        try:
            yield self.spark
        finally:
            self.closed += 1


def _run(settings, kafka, cfg, sessions, run_id: str = "scheduled__1", **options):
    return run_once(
        cfg,
        run_id,
        settings=settings,
        catalog=load_catalog(settings),
        kafka=kafka,
        open_session=sessions,
        **options,
    )


def _intruder(spark, settings, cfg, end: int):
    """Before the first session opens, another run commits ``[0, end)`` of partition 0."""

    def before_open(n: int) -> None:
        if n == 1:
            apply_offsets(spark, settings, cfg, OffsetRange(topic=cfg.topic, start={0: 0}, end={0: end}), "intruder")

    return before_open


def test_a_run_with_nothing_new_stops_after_the_plan(spark, kafka, stack_settings):
    cfg = make_table()
    ensure_topic(kafka, cfg.topic, 2)
    sessions = LentSessions(spark)
    outcome = _run(stack_settings, kafka, cfg, sessions)
    assert outcome.result is None
    assert outcome.plan.range.is_empty
    assert sessions.opened == 0
    assert list(outcome.seconds) == ["plan"]
    assert load_catalog(stack_settings).table_exists(cfg.identifier) is False


def test_a_run_applies_its_plan_in_one_session_and_exits_it(spark, kafka, stack_settings, fixtures_dir):
    cfg = make_table()
    load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=3)
    sessions = LentSessions(spark)
    outcome = _run(stack_settings, kafka, cfg, sessions)
    assert outcome.result is not None and outcome.result.status == "committed"
    assert outcome.result.events == 16
    assert (sessions.opened, sessions.closed) == (1, 1)
    assert list(outcome.seconds) == ["plan", "schema_sync", "session", "apply"]
    assert all(s >= 0 for s in outcome.seconds.values())
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == outcome.plan.range.end
    assert table.current_snapshot().summary[SummaryKeys.RUN_ID] == "scheduled__1"
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL


def test_a_run_plans_again_from_the_table_after_a_concurrent_commit(spark, kafka, stack_settings, fixtures_dir, caplog):
    cfg = make_table()
    load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=1)
    sessions = LentSessions(spark, _intruder(spark, stack_settings, cfg, 5))
    with caplog.at_level(logging.WARNING, logger="cdclake.runner"):
        outcome = _run(stack_settings, kafka, cfg, sessions)
    assert "(attempt 1 of 3); planning again from the table's offsets" in caplog.text
    assert outcome.result is not None and outcome.result.status == "committed"
    assert outcome.plan.range.start == {0: 5}
    assert outcome.result.events == 11
    assert (sessions.opened, sessions.closed) == (2, 2)
    assert list(outcome.seconds) == ["plan", "schema_sync", "session", "apply"]
    assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL


def test_a_run_still_losing_after_its_attempts_raises_and_exits_its_session(spark, kafka, stack_settings, fixtures_dir):
    cfg = make_table()
    load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=1)
    sessions = LentSessions(spark, _intruder(spark, stack_settings, cfg, 5))
    with pytest.raises(ConcurrentRunError, match="another run committed"):
        _run(stack_settings, kafka, cfg, sessions, attempts=1)
    assert (sessions.opened, sessions.closed) == (1, 1)
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == {0: 5}


def test_a_retry_after_its_commit_applies_nothing_and_publishes_that_commit(spark, kafka, stack_settings, fixtures_dir):
    """An Airflow retry of a run whose earlier try committed, then failed (publish, the worker
    killed): the run plans nothing, applies nothing, and its asset event, metrics and lineage are
    those of its commit, read back from the commit's snapshot summary."""
    from cdclake_airflow.table_dag import _publish

    cfg = make_table()
    load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=1)
    first = _run(stack_settings, kafka, cfg, LentSessions(spark), run_id="scheduled__retried").result
    assert first is not None and first.status == "committed"
    load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=1)  # new events since the commit
    sessions = LentSessions(spark)
    retry = _run(stack_settings, kafka, cfg, sessions, run_id="scheduled__retried")
    assert retry.result == replace(first, status="already_applied")
    assert (retry.plan.range.start, retry.plan.range.end) == ({0: 0}, {0: 16})
    assert sessions.opened == 0 and list(retry.seconds) == ["plan"]
    catalog = load_catalog(stack_settings)
    assert committed_offsets(catalog.load_table(cfg.identifier), cfg.topic) == {0: 16}

    # publish finds the run's commit also after a later run's commit moved the table on
    later = _run(stack_settings, kafka, cfg, LentSessions(spark), run_id="scheduled__later").result
    assert later is not None and later.status == "committed"
    _, extra, own = _publish(catalog, cfg, {"run_id": "scheduled__retried"})
    assert own == replace(first, status="committed")
    assert (extra["snapshot_id"], extra[SummaryKeys.RUN_ID], extra[SummaryKeys.END_OFFSETS]) == (
        first.snapshot_id,
        "scheduled__retried",
        '{"0":16}',
    )


def test_runs_of_several_tables_share_one_session_and_a_failed_one_opens_the_next_anew(
    spark, kafka, stack_settings, fixtures_dir
):
    """A shared DAG's task (:class:`cdclake.runner.SharedSession`): the runs of three tables borrow
    one session, opened by the first that applies (not by a run with nothing new); after a run
    that failed the session is closed, and the next run opens a new one; the commits are each
    table's own."""
    from cdclake.errors import TopicNotFoundError
    from cdclake.runner import SharedSession

    empty, first, missing, second = (make_table() for _ in range(4))
    ensure_topic(kafka, empty.topic, 1)
    for cfg in (first, second):
        load_events(fixtures_dir / PRODUCTS, cfg, kafka, partitions=2)
    sessions = LentSessions(spark)
    with SharedSession(sessions) as shared:
        assert _run(stack_settings, kafka, empty, shared).result is None
        assert sessions.opened == 0  # nothing new: no session
        assert _run(stack_settings, kafka, first, shared, run_id="shared__1").result.events == 16
        with pytest.raises(TopicNotFoundError):
            _run(stack_settings, kafka, missing, shared)
        assert (sessions.opened, sessions.closed) == (1, 0)  # lent: the runs never stop it
        shared.close()  # as the shared DAG's task does after a table that failed
        assert sessions.closed == 1
        assert _run(stack_settings, kafka, second, shared, run_id="shared__1").result.events == 16
    assert (shared.opened, sessions.opened, sessions.closed) == (2, 2, 2)
    catalog = load_catalog(stack_settings)
    for cfg in (first, second):
        table = catalog.load_table(cfg.identifier)
        assert sum(committed_offsets(table, cfg.topic).values()) == 16
        assert table.current_snapshot().summary[SummaryKeys.TOPIC] == cfg.topic
        assert table_rows(stack_settings, cfg, PRODUCT_COLUMNS) == PRODUCTS_FINAL
