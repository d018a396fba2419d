"""The pure parts of the status figures (include/cdclake/pipeline/status.py) and their terminal
table (``cdclake status``); the Iceberg reads on a local pyiceberg catalog, Kafka faked."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from cdclake.errors import ConfigError
from cdclake.model.layout import SummaryKeys
from cdclake.model.selection import select_tables
from cdclake.model.status import (
    Activity,
    LastCommit,
    ReconcileSummary,
    RunFailure,
    TableStatus,
    commit_activity,
    format_duration,
    freshness_verdict,
    lag_time,
    partition_lag,
    reconcile_summary,
    time_lag,
)
from cdclake.pipeline import status as st
from cdclake.settings import Settings
from cdclake_dev.views import format_status_table
from tests.conftest import make_table

HOUR = 3_600_000
NOW = 1_800_000_000_000
TOPIC = "db.inv.t"


def cdc(run: str, end: str, events: int, *, start: str = "{}", topic: str = TOPIC, **extra: str) -> dict[str, str]:
    return {
        SummaryKeys.TOPIC: topic,
        SummaryKeys.RUN_ID: run,
        SummaryKeys.START_OFFSETS: start,
        SummaryKeys.END_OFFSETS: end,
        SummaryKeys.EVENTS: str(events),
        SummaryKeys.UPSERTS: str(events - 1),
        SummaryKeys.DELETES: "1",
        SummaryKeys.TOMBSTONES: "0",
        SummaryKeys.QUARANTINED: "0",
        **extra,
    }


# --- select_tables ------------------------------------------------------------------------------


def test_select_tables_all_by_default_named_in_the_order_given():
    a, b, c = make_table(name="a"), make_table(name="b"), make_table(name="c")
    assert select_tables([a, b, c], []) == [a, b, c]
    assert select_tables([a, b, c], ["c", "a", "c"]) == [c, a]


def test_select_tables_unknown_name_is_a_config_error_naming_the_configured_ones():
    with pytest.raises(ConfigError, match=r"no table\(s\) \['x'\].*configured: \['a', 'b'\]"):
        select_tables([make_table(name="b"), make_table(name="a")], ["a", "x"])


# --- partition_lag ------------------------------------------------------------------------------


def test_lag_is_high_minus_committed_and_from_the_low_watermark_where_never_committed():
    lag, problems = partition_lag(TOPIC, {0: 7, 1: 3}, {0: 0, 1: 0, 2: 4}, {0: 10, 1: 3, 2: 9})
    assert (lag, problems) == ({0: 3, 1: 0, 2: 5}, [])
    lag, problems = partition_lag(TOPIC, None, {0: 2}, {0: 10})
    assert (lag, problems) == ({0: 8}, [])


def test_offsets_outside_the_topic_are_problems_not_errors():
    lag, problems = partition_lag(TOPIC, {0: 1, 1: 50, 5: 3}, {0: 4, 1: 0}, {0: 10, 1: 20})
    assert lag == {0: 9, 1: 0}
    assert len(problems) == 3
    assert "partition 0: committed offset 1 is below the low watermark 4" in problems[0]
    assert "partition 1: committed offset 50 is above the high watermark 20" in problems[1]
    assert "no partition(s) [5]" in problems[2]


# --- commit_activity ----------------------------------------------------------------------------


def test_activity_counts_cdc_commits_per_hour_once_per_run_and_replays_apart():
    ancestry = [
        (9, NOW - 10 * 60_000, None),  # a maintenance snapshot without summary
        (8, NOW - 20 * 60_000, {"cdc.reconcile-repair": "r"}),  # a repair commit: no offsets
        (7, NOW - 30 * 60_000, cdc("run-3", '{"0": 30}', 10, start='{"0": 20}', **{SummaryKeys.REPLAY: "true"})),
        # one run, two snapshots (the MERGE and the default fill on its branch): counted once
        (6, NOW - 31 * 60_000, cdc("run-2", '{"0": 20}', 5, start='{"0": 15}')),
        (5, NOW - 31 * 60_000 - 1, cdc("run-2", '{"0": 20}', 5, start='{"0": 15}')),
        (4, NOW - 2 * HOUR - 1, cdc("other", '{"0": 99}', 100, topic="db.inv.other")),  # another topic
        (3, NOW - 23 * HOUR - 30 * 60_000, cdc("run-1", '{"0": 15}', 15)),
        (2, NOW - 25 * HOUR, cdc("run-0", '{"0": 0}', 1000)),  # before the window
        (1, NOW - 26 * HOUR, cdc("run-x", '{"0": 0}', 1000)),
    ]
    last, per_hour, activity = commit_activity(iter(ancestry), TOPIC, NOW)
    assert last == LastCommit(
        snapshot_id=7, committed_at_ms=NOW - 30 * 60_000, age_ms=30 * 60_000, run_id="run-3", events=10, replay=True
    )
    assert len(per_hour) == 24
    # the replay (run-3) read records consumed before: not new source activity
    assert per_hour[23] == 5 and per_hour[0] == 15 and sum(per_hour) == 20
    assert activity == Activity(
        commits=2, events=20, upserted=18, deleted=2, kafka_tombstones=0, quarantined=0, replays=1, replay_events=10
    )


def test_the_last_commit_is_named_even_when_older_than_the_window():
    last, per_hour, activity = commit_activity([(1, NOW - 48 * HOUR, cdc("old", '{"0": 3}', 3))], TOPIC, NOW)
    assert last is not None and (last.run_id, last.age_ms) == ("old", 48 * HOUR)
    assert (sum(per_hour), activity) == (0, Activity())
    assert commit_activity([], TOPIC, NOW) == (None, [0] * 24, Activity())


# --- lag in time and freshness ------------------------------------------------------------------


def test_time_lag_counts_from_the_source_time_else_the_kafka_time():
    assert time_lag(NOW, NOW - 5000, NOW - 1000) == (5000, "source_ts")
    assert time_lag(NOW, None, NOW - 1000) == (1000, "kafka_ts")
    assert time_lag(NOW, None, None) == (None, None)
    assert time_lag(NOW, NOW + 10, None) == (0, "source_ts")  # a source clock ahead of ours


@pytest.mark.parametrize(
    "lag_events, lag_ms, limit, fresh",
    [
        (0, 10 * HOUR, 15, True),  # caught up: fresh however quiet the source is
        (5, 10 * 60_000, 15, True),
        (5, 16 * 60_000, 15, False),
        (5, None, 15, None),
        (None, 16 * 60_000, 15, False),  # the topic unknown: judged by the time
        (0, 0, None, None),  # no limit: not judged
    ],
)
def test_freshness_verdict(lag_events, lag_ms, limit, fresh):
    assert freshness_verdict(lag_events, lag_ms, limit) is fresh


def test_lag_time_of_a_caught_up_table_is_zero_not_the_age_of_its_newest_event():
    assert lag_time(0, 2386 * 24 * HOUR, "source_ts") == (0, "caught_up")
    assert lag_time(5, 90_000, "kafka_ts") == (90_000, "kafka_ts")
    assert lag_time(None, 90_000, "source_ts") == (90_000, "source_ts")  # the topic unknown: the age


def test_the_json_figures_carry_snapshot_ids_as_strings_and_times_in_iso_8601():
    big = 2**63 - 25  # beyond 2**53: a JavaScript number would lose its last digits
    failure = _failed_try(None, "retrying", NOW - 60_000, ValueError("boom"))
    status = orders_status(
        current_snapshot_id=big,
        last_commit=LastCommit(snapshot_id=big, committed_at_ms=NOW - 1000, age_ms=1000, run_id="r", events=1),
        run_failure=failure,
    )
    doc = json.loads(status.model_dump_json())
    assert doc["current_snapshot_id"] == str(big) and doc["last_commit"]["snapshot_id"] == str(big)
    assert doc["checked_at_ms"] == NOW and doc["checked_at_iso"] == "2027-01-15T08:00:00.000Z"
    assert doc["last_commit"]["committed_at_iso"] == "2027-01-15T07:59:59.000Z"
    assert doc["run_failure"]["since_iso"] == "2027-01-15T07:59:00.000Z" and doc["last_source_ts_iso"] is None
    assert TableStatus.model_validate(doc) == status  # the JSON reads back (the freshness check does)
    assert status.model_dump()["current_snapshot_id"] == big  # Python keeps the integer


def orders_status(**fields) -> TableStatus:
    """The status of an existing table ``orders`` whose topic exists, with ``fields``."""
    base = {
        "name": "orders",
        "identifier": "shop.orders",
        "topic": TOPIC,
        "checked_at_ms": NOW,
        "table_exists": True,
        "topic_exists": True,
    }
    return TableStatus(**{**base, **fields})


def _failed_try(previous: RunFailure | None, state: str, at_ms: int, error: BaseException | str | None) -> RunFailure:
    return RunFailure.after(
        previous, state=state, at_ms=at_ms, run_id="scheduled__1", task_id="apply", try_number=2, error=error
    )


def test_a_failure_streak_keeps_its_start_and_counts_every_failed_try():
    first = _failed_try(None, "retrying", NOW - HOUR, ConnectionError("broker down\nstack trace ..."))
    assert (first.state, first.since_ms, first.failed_tries, first.error) == (
        "retrying",
        NOW - HOUR,
        1,
        "ConnectionError: broker down",
    )
    later = _failed_try(RunFailure.from_property(first.model_dump_json()), "failing", NOW - 60_000, "x" * 900)
    assert (later.state, later.since_ms, later.last_failed_ms, later.failed_tries) == (
        "failing",
        NOW - HOUR,
        NOW - 60_000,
        2,
    )
    assert len(later.error) == 500 and later.error.endswith("...")
    assert later.describe(NOW).startswith(
        "its DAG's runs are failing: 2 failed tries since the first, 1h00m ago (the newest: run 'scheduled__1', "
        "task apply, try 2, 1m00s ago): xxx"
    )
    assert _failed_try(None, "failing", NOW, None).error.startswith("the task ended without an exception")
    assert RunFailure.from_property(None) is None and RunFailure.from_property("{not json") is None


@pytest.mark.parametrize("lag_events, lag_ms, limit", [(0, 0, 15), (5, 60_000, 15), (None, None, 15)])
def test_a_table_whose_runs_fail_is_never_fresh(lag_events, lag_ms, limit):
    failure = _failed_try(None, "retrying", NOW, "boom")
    assert freshness_verdict(lag_events, lag_ms, limit, failure) is False
    assert freshness_verdict(lag_events, lag_ms, None, failure) is None  # no limit: not judged


def test_reconcile_summary_row():
    at = datetime.fromtimestamp(NOW / 1000, timezone.utc) - timedelta(hours=2)
    row = {
        "run_id": "reconcile-1",
        "mode": "report",
        "reconciled_at": at,
        "source_rows": 10,
        "lake_rows": 9,
        "only_in_source": 1,
        "only_in_lake": 0,
        "differing": 2,
        "unsettled": 1,
        "repaired": False,
    }
    summary = reconcile_summary(row, NOW)
    assert summary.age_ms == 2 * HOUR and summary.clean is False
    assert (summary.only_in_source, summary.differing, summary.unsettled) == (1, 2, 1)
    assert reconcile_summary({**row, "only_in_source": 0, "differing": 0}, NOW).clean is True


# --- reads on a local catalog, Kafka faked ------------------------------------------------------


@pytest.fixture
def catalog(tmp_path):
    from cdclake.io.catalog import load_catalog

    return load_catalog(Settings.from_env({"CDCLAKE_STATE_DIR": str(tmp_path)}))


def test_column_upper_bound_from_the_data_files_metrics(catalog):
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    catalog.create_namespace_if_not_exists("ns")
    table = catalog.create_table(
        "ns.t",
        Schema(
            NestedField(1, "id", LongType(), required=False),
            NestedField(2, "_cdc_source_ts", TimestamptzType(), required=False),
        ),
    )
    assert st.column_upper_bound_ms(table, "_cdc_source_ts") is None  # no snapshot
    arrow_schema = table.schema().as_arrow()
    for stamps in ([NOW - 5000, NOW - 3000], [NOW - 9000, None], [None]):  # a file of nulls only has no bound
        rows = [
            {"id": i, "_cdc_source_ts": None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)}
            for i, ms in enumerate(stamps)
        ]
        table.append(pa.Table.from_pylist(rows, schema=arrow_schema))
    assert st.column_upper_bound_ms(table, "_cdc_source_ts") == NOW - 3000
    assert st.column_upper_bound_ms(table, "no_such_column") is None
    assert st.column_upper_bound_ms(table, "id") is None  # not a timestamp


def test_the_status_shows_the_failed_tries_of_a_table_until_a_run_succeeds(catalog, monkeypatch):
    """The record the table DAG's callbacks write (cdclake_airflow.table_failures.record_failure) through
    the same property update, on a real (local) catalog: a table caught up but failing is not
    fresh, and says why."""
    from cdclake.io.catalog import create_cdc_table, update_table_property
    from cdclake.io.kafka import KafkaClients, Watermarks
    from cdclake.model.layout import RUN_FAILURE_PROPERTY
    from cdclake.model.types import ColumnSpec

    cfg = make_table(freshness_minutes=15)
    catalog.create_namespace_if_not_exists(cfg.namespace)
    create_cdc_table(catalog, cfg.identifier, [ColumnSpec("id", "long", True, "int64")], ("id",))
    monkeypatch.setattr(
        st, "topics_watermarks", lambda kafka, topics, **_: {t: Watermarks({0: 0}, {0: 0}) for t in topics}
    )
    kafka = KafkaClients.from_bootstrap("127.0.0.1:1")

    def status():
        return st.table_status(catalog, kafka, cfg, now_ms=NOW)

    assert (status().run_failure, status().fresh) == (None, True)  # nothing to apply: fresh
    for state, at in (("retrying", NOW - HOUR), ("failing", NOW - 60_000)):
        update_table_property(
            catalog,
            cfg.identifier,
            RUN_FAILURE_PROPERTY,
            lambda now, state=state, at=at: _failed_try(
                RunFailure.from_property(now), state, at, ValueError("bad")
            ).model_dump_json(),
        )
    failing = status()
    assert failing.fresh is False
    assert failing.run_failure is not None
    assert (failing.run_failure.state, failing.run_failure.failed_tries, failing.run_failure.since_ms) == (
        "failing",
        2,
        NOW - HOUR,
    )
    assert "its DAG's runs are failing: 2 failed tries since the first, 1h00m ago" in failing.problems[-1]
    assert failing.problems[-1].endswith("): ValueError: bad")
    text = format_status_table([failing], with_fresh=True)
    assert "NO (failing)" in text and f"{cfg.name}: its DAG's runs are failing: 2 failed tries" in text
    update_table_property(catalog, cfg.identifier, RUN_FAILURE_PROPERTY, lambda _: None)  # a run succeeded
    assert (status().run_failure, status().fresh) == (None, True)


def test_the_status_shows_the_last_whole_transaction_and_the_records_waiting_for_one(catalog, monkeypatch):
    """The summary keys a run cut to whole transactions writes, and the table property of a run that
    waited with nothing applied, on commits of a real (local) catalog: the status, ``cdclake status``
    and the warning of events applied without transaction metadata."""
    import pyarrow as pa

    from cdclake.io.catalog import create_cdc_table, update_table_property
    from cdclake.io.kafka import KafkaClients, Watermarks
    from cdclake.model.layout import TRANSACTION_WAIT_PROPERTY
    from cdclake.model.transactions import TransactionStatus
    from cdclake.model.types import ColumnSpec

    cfg = make_table(freshness_minutes=15)
    catalog.create_namespace_if_not_exists(cfg.namespace)
    table = create_cdc_table(catalog, cfg.identifier, [ColumnSpec("id", "long", True, "int64")], ("id",))
    monkeypatch.setattr(
        st, "topics_watermarks", lambda kafka, topics, **_: {t: Watermarks({0: 0}, {0: 12}) for t in topics}
    )
    rows = pa.Table.from_pylist([{"id": 1}], schema=table.schema().as_arrow())

    def status(cfg=cfg) -> TableStatus:
        return st.table_status(catalog, KafkaClients.from_bootstrap("127.0.0.1:1"), cfg, now_ms=NOW)

    last = json.dumps({"id": "0-1-7", "position": "1:1200:0:3"})
    cut = json.dumps({"events": 2, "transaction": "0-1-8"})
    table.append(
        rows,
        cdc(
            "run-1",
            '{"0": 4}',
            4,
            start='{"0": 0}',
            topic=cfg.topic,
            **{SummaryKeys.LAST_TRANSACTION: last, SummaryKeys.TRANSACTION_WAIT: cut},
        ),
    )
    assert status().transactions == TransactionStatus(
        last_id="0-1-7", last_position="1:1200:0:3", waiting_events=2, waiting_for="0-1-8"
    )
    # snapshot reads only: no transaction, the last one stays; nothing was cut
    table.append(rows, cdc("run-2", '{"0": 6}', 2, start='{"0": 4}', topic=cfg.topic))
    assert status().transactions == TransactionStatus(last_id="0-1-7", last_position="1:1200:0:3")
    # a run that applied nothing: its whole range waits
    wait = json.dumps({"events": 3, "transaction": "0-1-9", "start": {"0": 6}})
    update_table_property(catalog, cfg.identifier, TRANSACTION_WAIT_PROPERTY, lambda _: wait)
    waiting = status()
    assert (waiting.transactions.waiting_events, waiting.transactions.waiting_for, waiting.warnings) == (3, "0-1-9", [])
    (row,) = [line for line in format_status_table([waiting]).splitlines() if line.startswith(cfg.name)]
    assert "0-1-7, 3 wait for 0-1-9" in row
    assert json.loads(waiting.model_dump_json())["transactions"]["waiting_events"] == 3
    # a commit since makes the record stale; its events came without transaction metadata: a warning
    table.append(
        rows, cdc("run-3", '{"0": 12}', 6, start='{"0": 6}', topic=cfg.topic, **{SummaryKeys.WITHOUT_TRANSACTION: "5"})
    )
    later = status()
    assert later.transactions == TransactionStatus(last_id="0-1-7", last_position="1:1200:0:3", without_metadata=5)
    (warning,) = later.warnings
    assert warning.startswith("transactions: whole, but the last CDC commit applied 5 change event(s) without")
    assert later.fresh is True  # a warning, not a failure
    assert f"{cfg.name}: warning: {warning}" in format_status_table([later]).splitlines()
    ignore = cfg.model_copy(update={"transactions": "ignore"})
    assert (status(ignore).transactions, status(ignore).warnings) == (None, [])


def test_the_status_warns_of_the_connector_modes_the_last_commit_contradicts(catalog, monkeypatch):
    """The summary key the apply writes (``cdc.connector-contradictions``), on commits of a real
    (local) catalog: the status, its JSON and ``cdclake status`` warn while the last CDC commit
    carries it; the table caught up stays fresh; a later commit that agrees clears it."""
    import pyarrow as pa

    from cdclake.io.catalog import create_cdc_table
    from cdclake.io.kafka import KafkaClients, Watermarks
    from cdclake.model.types import ColumnSpec

    cfg = make_table(freshness_minutes=15)
    catalog.create_namespace_if_not_exists(cfg.namespace)
    table = create_cdc_table(catalog, cfg.identifier, [ColumnSpec("id", "long", True, "int64")], ("id",))
    monkeypatch.setattr(
        st, "topics_watermarks", lambda kafka, topics, **_: {t: Watermarks({0: 0}, {0: 9}) for t in topics}
    )
    lines = [
        f"topic {cfg.topic!r} partition 0 offset 3: column 'price': the events are double "
        "(decimal.handling.mode=double) but the table's column is ...: values rounded to a double",
        f"topic {cfg.topic!r} partition 0 offset 8: column 'qty': ...",
    ]
    rows = pa.Table.from_pylist([{"id": 1}], schema=table.schema().as_arrow())
    contradicted = cdc("run-1", '{"0": 9}', 9, start='{"0": 0}', topic=cfg.topic)
    table.append(rows, {**contradicted, SummaryKeys.CONNECTOR_CONTRADICTIONS: json.dumps(lines)})
    status = st.table_status(catalog, KafkaClients.from_bootstrap("127.0.0.1:1"), cfg, now_ms=NOW)
    assert (status.lag_events, status.fresh, status.problems) == (0, True, [])  # a warning, not a failure
    assert status.last_commit is not None and status.last_commit.connector_contradictions == lines
    (warning,) = status.warnings
    snapshot = status.last_commit.snapshot_id
    assert warning == (
        f"connector modes contradict (2 columns in the last CDC commit, snapshot {snapshot}; docs/operations.md, "
        f'"Events that contradict the connector modes"): {lines[0]}'
    )
    assert json.loads(status.model_dump_json())["warnings"] == [warning]
    assert f"{cfg.name}: warning: {warning}" in format_status_table([status], with_fresh=True).splitlines()
    table.append(rows, cdc("run-2", '{"0": 9}', 0, start='{"0": 9}', topic=cfg.topic))  # the connector set back
    later = st.table_status(catalog, KafkaClients.from_bootstrap("127.0.0.1:1"), cfg, now_ms=NOW)
    assert (later.warnings, later.last_commit.connector_contradictions if later.last_commit else None) == ([], [])


def test_the_freshness_check_of_a_failing_table_names_the_failure():
    from cdclake.errors import FreshnessError
    from cdclake_airflow.freshness_dag import check_freshness

    failure = _failed_try(None, "failing", NOW - 60_000, ValueError("boom"))
    status = orders_status(lag_events=0, freshness_minutes=15, run_failure=failure, fresh=False)
    with pytest.raises(FreshnessError, match=r"orders \(shop.orders\) is not fresh: its DAG's runs are failing: "):
        check_freshness("orders", {"orders": status.model_dump(mode="json")})
    # a table of a shared DAG: the failed try is that DAG's
    with pytest.raises(FreshnessError, match=r"See the log of that try of DAG cdc_shared_shop and"):
        check_freshness("orders", {"orders": {**status.model_dump(mode="json"), "dag_id": "cdc_shared_shop"}})
    behind = orders_status(lag_events=5, lag_ms=40 * 60_000, freshness_minutes=15, fresh=False)
    with pytest.raises(FreshnessError, match=r"Check the DAG cdc_shared_shop \(paused\?"):
        check_freshness("orders", {"orders": {**behind.model_dump(mode="json"), "dag_id": "cdc_shared_shop"}})


def test_kafka_not_answering_leaves_the_kafka_figures_unknown_and_is_given_up_on_at_once(catalog):
    from cdclake.io.kafka import KafkaClients
    from cdclake_dev.process import free_port

    tables = [make_table(), make_table()]
    kafka = KafkaClients.from_bootstrap(f"127.0.0.1:{free_port()}")  # a real client; nothing listens there
    statuses = st.status_of_tables(catalog, kafka, tables, now_ms=NOW)
    for status in statuses:
        assert (status.table_exists, status.topic_exists, status.lag_events, status.fresh) == (False, None, None, None)
        (problem,) = [p for p in status.problems if "did not answer" in p]
        # every broker down ends the wait at once, not after the 30 s metadata timeout
        assert f"Kafka at {kafka.bootstrap} did not answer: every broker of {kafka.bootstrap} refused" in problem
        assert status.checked_at_ms == NOW


# --- the terminal table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ms, text",
    [
        (None, "-"),
        (0, "0s"),
        (59_999, "59s"),
        (61_000, "1m01s"),
        (3 * HOUR + 7 * 60_000, "3h07m"),
        (51 * HOUR, "2d03h"),
    ],
)
def test_format_duration(ms, text):
    assert format_duration(ms) == text


def test_status_table_has_one_row_per_table_and_the_problems_below():
    ok = orders_status(
        lag_events=12,
        lag_ms=90_000,
        last_commit=LastCommit(snapshot_id=42, committed_at_ms=NOW - 60_000, age_ms=60_000, run_id="r", events=3),
        activity_24h=Activity(commits=1, events=3),
        open_quarantine=2,
        schema_id=1,
        column_count=5,
        last_reconcile=ReconcileSummary(
            run_id="x",
            mode="report",
            reconciled_at_ms=NOW - HOUR,
            age_ms=HOUR,
            source_rows=3,
            lake_rows=3,
            only_in_source=0,
            only_in_lake=0,
            differing=2,
            unsettled=0,
            repaired=False,
            clean=False,
        ),
        fresh=True,
    )
    missing = TableStatus(
        name="gone",
        identifier="shop.gone",
        topic="db.inv.gone",
        checked_at_ms=NOW,
        table_exists=False,
        topic_exists=False,
        problems=["Kafka topic 'db.inv.gone' does not exist"],
    )
    lines = format_status_table([ok, missing], with_fresh=True).splitlines()
    assert lines[0].split()[0] == "table" and lines[0].split()[-1] == "fresh"
    assert set(lines[1]) <= {"-", " "}
    assert lines[2].split() == [
        "orders", "12", "1m30s", "1m00s", "ago", "42", "3", "2", "1", "(5", "cols)", "no", "-", "2", "diffs,", "1h00m", "ago", "yes",
    ]  # fmt: skip
    assert lines[3].split()[:3] == ["gone", "(no", "table)"] and lines[3].split()[-1] == "-"
    assert lines[4] == "gone: Kafka topic 'db.inv.gone' does not exist"
    assert len({len(line) for line in lines[:2]}) == 1  # the rule spans the header
    # the JSON form is the models'
    assert json.loads(ok.model_dump_json())["last_commit"]["snapshot_id"] == "42"  # 64-bit ids: strings


def test_status_page_puts_the_tables_behind_their_target_first_and_summarizes_them():
    from cdclake.model.listing import page_of
    from cdclake_dev.views import format_page_summary

    statuses = [orders_status(name=f"t{i:03d}", fresh=i != 120 if i % 3 else None) for i in range(200)]
    cut = page_of(statuses, name_of=lambda s: s.name, fresh_of=lambda s: s.fresh, page_size=50)
    assert [s.name for s in cut.rows[:2]] == ["t000", "t001"]  # t120 is unjudged (120 % 3 == 0): not behind
    statuses[121] = orders_status(name="t121", fresh=False)
    cut = page_of(statuses, name_of=lambda s: s.name, fresh_of=lambda s: s.fresh, page_size=50)
    assert [s.name for s in cut.rows[:2]] == ["t121", "t000"] and len(cut.rows) == 50
    assert format_page_summary(cut).splitlines()[:2] == [
        "200 tables: 1 behind their freshness target: t121; 132 fresh; 67 not judged",
        "page 1 of 4 (200 tables match; --page, --name, --state to choose)",
    ]
    assert [
        s.name for s in page_of(statuses, name_of=lambda s: s.name, fresh_of=lambda s: s.fresh, state="behind").rows
    ] == ["t121"]
    with pytest.raises(ValueError, match="'late'"):
        page_of(statuses, name_of=lambda s: s.name, fresh_of=lambda s: s.fresh, state="late")  # type: ignore[arg-type]
