"""The source leg of a table's chain (include/cdclake/model/source_health.py, pipeline/sources.py,
io/connect.py): a connector's state -> the verdict, the binlog lag arithmetic, which connector
feeds which table, and where the figures show (the status lines, the freshness check, the
metrics, the CDC monitor page). Kafka Connect answers as Kafka Connect 4.3 with Debezium 3.5's
MariaDB connector answered on the local chain (the bodies below are copies); no server."""

from __future__ import annotations

import json

import pytest

from cdclake.errors import FreshnessError
from cdclake.io.connect import ConnectUnreachableError, KafkaConnect, connect_from_connection
from cdclake.model.source_flavour import ServerVersion, binary_log_status_statement
from cdclake.model.source_health import (
    ConnectorHealth,
    EmittedPoint,
    ServerBinlog,
    SourceLag,
    SourceStatus,
    binlog_bytes,
    connector_of,
    count_transactions,
    emitted_of,
    foreign_point,
    newest_emitted,
    offset_prefixes,
    trace_summary,
    worst,
)
from cdclake.model.status import TableSource, TableStatus, chain_verdict
from cdclake.pipeline.sources import SourceProbe, source_statuses
from tests.conftest import make_table

URL = "http://connect.example:8083"
NOW = 1_800_000_000_000
MINUTE = 60_000

# a failed task's trace as Kafka Connect 4.3 reported it after `ALTER TABLE unconf ADD COLUMN ip INET6`
# on the local chain's MariaDB 10.11 (Debezium 3.5.0.Final's MariaDB connector), cut short
DDL_TRACE = """org.apache.kafka.connect.errors.ConnectException: An exception occurred in the change event producer. This connector will be stopped.
\tat io.debezium.pipeline.ErrorHandler.setProducerThrowable(ErrorHandler.java:67)
\tat io.debezium.connector.binlog.BinlogStreamingChangeEventSource.handleEvent(BinlogStreamingChangeEventSource.java:626)
Caused by: io.debezium.DebeziumException: Error processing binlog event
\t... 8 more
Caused by: io.debezium.text.ParsingException: DDL statement couldn't be parsed. Please open a GitHub issue at https://github.com/debezium/dbz/issues with the statement 'alter table unconf add column ip INET6'
no viable alternative at input 'alter table unconf add column ip INET6'
\tat io.debezium.antlr.ParsingErrorListener.syntaxError(ParsingErrorListener.java:44)
Caused by: org.antlr.v4.runtime.NoViableAltException
\tat org.antlr.v4.runtime.atn.ParserATNSimulator.noViableAlt(ParserATNSimulator.java:2028)
"""


def status_body(connector: str = "RUNNING", *tasks: str, trace: str | None = None) -> dict:
    return {
        "name": "inventory-connector",
        "connector": {"state": connector, "worker_id": "127.0.0.1:8083", "version": "3.5.0.Final"},
        "tasks": [
            {
                "id": i,
                "state": s,
                "worker_id": "127.0.0.1:8083",
                **({"trace": trace} if s == "FAILED" and trace else {}),
            }
            for i, s in enumerate(tasks)
        ],
        "type": "source",
    }


# --- the connector's state -> the verdict ----------------------------------------------------------


def test_a_trace_gives_its_first_line_and_its_root_cause_with_a_message():
    first, cause = trace_summary(DDL_TRACE)
    assert first.startswith("org.apache.kafka.connect.errors.ConnectException: An exception occurred")
    assert cause.startswith("io.debezium.text.ParsingException: DDL statement couldn't be parsed.")
    assert trace_summary(None) == (None, None)
    assert trace_summary("java.lang.IllegalStateException: boom\n\tat x") == (
        "java.lang.IllegalStateException: boom",
        None,
    )


def test_a_running_connector_needs_every_task_running():
    assert ConnectorHealth.from_status(URL, status_body("RUNNING", "RUNNING", "RUNNING")).running
    # the issue: the connector RUNNING, its one task FAILED
    failed = ConnectorHealth.from_status(URL, status_body("RUNNING", "FAILED", trace=DDL_TRACE))
    assert failed.state == "FAILED" and not failed.running and failed.connector_state == "RUNNING"
    assert failed.reason().startswith("task 0 FAILED: org.apache.kafka.connect.errors.ConnectException")
    assert "cause: io.debezium.text.ParsingException: DDL statement couldn't be parsed" in failed.reason()
    # no task yet (starting, or no worker took it): not running
    assert ConnectorHealth.from_status(URL, status_body("RUNNING")).state == "UNASSIGNED"
    assert ConnectorHealth.from_status(URL, status_body("PAUSED", "PAUSED")).state == "PAUSED"
    assert ConnectorHealth.from_status(URL, status_body("RUNNING", "RUNNING", "UNASSIGNED")).state == "UNASSIGNED"
    assert worst(["RUNNING", "PAUSED", "FAILED"]) == "FAILED" and worst(["RUNNING", "SOMETHING_NEW"]) == "UNASSIGNED"


def test_each_state_says_its_remedy_with_the_rest_call():
    failed = ConnectorHealth.from_status(URL, status_body("RUNNING", "FAILED", trace="java.lang.RuntimeException: x"))
    assert failed.remedy() == (
        f"fix the cause, then curl -X POST '{URL}/connectors/inventory-connector/restart?includeTasks=true&onlyFailed=true'"
    )
    # a DDL Debezium cannot parse: a restart reads it again, the runbook says what to do first
    ddl = ConnectorHealth.from_status(URL, status_body("RUNNING", "FAILED", trace=DDL_TRACE))
    assert ddl.unparseable_ddl() and '"A connector that failed"' in ddl.remedy()
    paused = ConnectorHealth.from_status(URL, status_body("PAUSED", "PAUSED"))
    assert paused.reason() == "the connector is PAUSED, task 0 PAUSED"
    assert paused.remedy() == f"curl -X PUT '{URL}/connectors/inventory-connector/resume'"
    gone = ConnectorHealth.unreachable(URL, "ConnectionError: [Errno 111] Connection refused")
    assert gone.state == "unreachable" and "did not answer: ConnectionError" in gone.reason()
    assert "kafka_connect" in gone.remedy() and f"curl '{URL}/connectors'" in gone.remedy()
    missing = ConnectorHealth.missing(URL, "orders connector")
    assert missing.state == "missing" and "no connector 'orders connector'" in missing.reason()
    assert ConnectorHealth.from_status(URL, status_body("RUNNING", "RUNNING")).remedy() is None


# --- the binlog lag --------------------------------------------------------------------------------

SERVER = ServerBinlog(
    server="mariadb 10.11.19",
    server_id=223344,
    file="mysql-bin.000003",
    pos=2629,
    sizes={"mysql-bin.000001": 5000, "mysql-bin.000002": 7000, "mysql-bin.000003": 2629},
)


def point(seq: int, pos: int, ts_ms: int | None = NOW - 5 * MINUTE, **kw) -> EmittedPoint:
    return EmittedPoint(basename="mysql-bin", file_seq=seq, pos=pos, ts_ms=ts_ms, **kw)


def test_a_connector_offset_is_an_emitted_point():
    # a streaming offset, and the one an initial snapshot leaves (no server id)
    streamed = EmittedPoint.from_offset(
        {
            "ts_sec": 1796169686,
            "file": "mysql-bin.000001",
            "pos": 2411,
            "gtids": "0-223344-11",
            "row": 1,
            "server_id": 223344,
            "event": 2,
        }
    )
    assert (streamed.file_seq, streamed.pos, streamed.ts_ms, streamed.server_id) == (1, 2411, 1796169686000, 223344)
    assert streamed.emitted_at_pos  # 2 events and 1 row of the transaction at 2411 emitted
    snapshot = EmittedPoint.from_offset(
        {"ts_sec": 1796169634, "file": "mysql-bin.000001", "pos": 1695, "gtids": "0-223344-7"}
    )
    assert snapshot.server_id is None and snapshot.file(6) == "mysql-bin.000001"
    assert not snapshot.emitted_at_pos  # where the connector reads next
    assert EmittedPoint.from_offset({"lsn": 123}) is None  # not a binlog connector's
    assert newest_emitted([None, snapshot, streamed]) == streamed and newest_emitted([None]) is None


def test_binlog_bytes_within_a_file_and_over_rotations():
    assert binlog_bytes(point(3, 2558), SERVER) == 71
    assert binlog_bytes(point(1, 4000), SERVER) == 1000 + 7000 + 2629
    assert binlog_bytes(point(1, 4000), SERVER.model_copy(update={"sizes": {}})) is None  # sizes unknown
    assert binlog_bytes(point(4, 10), SERVER) is None  # past the server: not its binlog


def test_transactions_after_a_point_are_its_gtid_events_after_it():
    # SHOW BINLOG EVENTS IN 'mysql-bin.000001' FROM 2411 on the local chain: one transaction (the emitted one)
    events = [(2411, "Gtid"), (2453, "Annotate_rows"), (2505, "Table_map"), (2558, "Write_rows_v1"), (2598, "Xid")]
    assert count_transactions(events, 2411) == 0  # the connector's offset: the transaction's start
    assert count_transactions(events, 2558) == 0  # a change event's source.pos: its row event
    assert count_transactions([*events, (2629, "Gtid"), (2700, "Anonymous_Gtid")], 2558) == 2
    # an offset without events to skip: where the connector reads next, so the transaction there counts
    assert count_transactions(events, 2411, including=True) == 1


def test_the_source_lag_is_zero_when_no_transaction_followed_else_the_emitted_events_age():
    caught_up = SourceLag.measure(NOW, SERVER, point(3, 2558), 0)
    assert (caught_up.lag_ms, caught_up.bytes) == (0, 71)
    assert caught_up.describe().startswith("binlog caught up (emitted mysql-bin.000003:2558")
    behind = SourceLag.measure(NOW, SERVER, point(3, 1000), 3)
    assert behind.lag_ms == 5 * MINUTE and behind.transactions == 3
    assert behind.describe().startswith("binlog: 3 transactions (1629 bytes) behind, up to 5m00s")
    capped = SourceLag.measure(NOW, SERVER, point(1, 4000), 2000, capped=True)
    assert "at least 2000 transactions" in capped.describe()
    unknown = SourceLag.measure(NOW, SERVER, point(3, 1000), None)
    assert unknown.lag_ms is None and "transactions unknown" in unknown.describe()
    assert SourceLag.measure(NOW, SERVER, point(3, 1000, ts_ms=None), 1).lag_ms is None
    assert json.loads(behind.model_dump_json())["emitted_ts_iso"].endswith("Z")


def test_a_point_of_another_server_is_not_measured():
    assert foreign_point(point(3, 100), SERVER) is None
    assert "server id 7" in foreign_point(point(3, 100, server_id=7), SERVER)
    assert "is past the source database's" in foreign_point(point(3, 9999), SERVER)
    other = EmittedPoint(basename="binlog", file_seq=1, pos=4)
    assert "binlog.*" in foreign_point(other, SERVER)


def test_mariadb_and_mysql_say_their_binary_log_status_in_their_own_words():
    assert binary_log_status_statement(ServerVersion.parse("10.11.19-MariaDB-0+deb12u1-log")) == "SHOW BINLOG STATUS"
    assert binary_log_status_statement(ServerVersion.parse("10.4.34-MariaDB")) == "SHOW MASTER STATUS"
    assert binary_log_status_statement(ServerVersion.parse("8.4.3")) == "SHOW BINARY LOG STATUS"


# --- the chain verdict -----------------------------------------------------------------------------


def source(state: str = "RUNNING", lag_ms: int | None = 0) -> TableSource:
    return TableSource(name="inventory-connector", state=state, running=state == "RUNNING", lag_ms=lag_ms)


def test_a_table_is_fresh_only_when_its_whole_chain_is():
    # not watched: the lake leg decides, as before
    assert chain_verdict(True, 0, 10, None) == (True, 0)
    # the issue: caught up in Kafka (the connector writes nothing), the connector dead: not fresh
    assert chain_verdict(True, 0, 10, source("FAILED", lag_ms=3 * MINUTE)) == (False, 3 * MINUTE)
    assert chain_verdict(True, 0, 10, source("unreachable", lag_ms=None)) == (False, 0)
    # running, the source leg within the target: fresh; past it: not
    assert chain_verdict(True, 2 * MINUTE, 10, source(lag_ms=4 * MINUTE)) == (True, 4 * MINUTE)
    assert chain_verdict(True, 0, 10, source(lag_ms=11 * MINUTE)) == (False, 11 * MINUTE)
    # the lake leg's own verdict stands; not judged without a target (the end-to-end lag still told)
    assert chain_verdict(False, 20 * MINUTE, 10, source()) == (False, 20 * MINUTE)
    assert chain_verdict(None, 0, None, source("PAUSED", lag_ms=MINUTE)) == (None, MINUTE)
    assert chain_verdict(None, None, 10, source(lag_ms=0)) == (None, None)


def test_a_source_not_running_is_a_problem_of_each_of_its_tables():
    paused = SourceStatus(
        name="inventory-connector",
        connector=ConnectorHealth.from_status(URL, status_body("PAUSED", "PAUSED")),
        tables=["orders"],
        checked_at_ms=NOW,
    ).table_view()
    assert paused.problem() == (
        "its source inventory-connector is PAUSED: the connector is PAUSED, task 0 PAUSED; "
        f"remedy: curl -X PUT '{URL}/connectors/inventory-connector/resume'"
    )
    assert source().problem() is None


# --- which connector feeds which table -------------------------------------------------------------


def test_a_table_is_fed_by_its_named_connector_else_by_topic_prefix_else_by_written_topics():
    prefixes = {"avro": ["shop_avro"], "json": ["shop"], "files": ["${env:CDC_TOPIC_PREFIX}"]}
    assert connector_of("shop.inv.orders", "named", prefixes, {}) == "named"
    assert connector_of("shop.inv.orders", None, prefixes, {}) == "json"
    assert connector_of("chain.inv.orders", None, prefixes, {}) is None  # a placeholder tells nothing
    # the offsets' partition names the resolved prefix
    offsets = [{"partition": {"server": "chain"}, "offset": {"file": "mysql-bin.000001", "pos": 1695, "ts_sec": 1}}]
    assert offset_prefixes(offsets) == ["chain"] and emitted_of(offsets).pos == 1695
    assert (
        connector_of("chain.inv.orders", None, {**prefixes, "files": [None, *offset_prefixes(offsets)]}, {}) == "files"
    )
    assert connector_of("chain.inv.orders", None, prefixes, {"files": ["chain", "chain.inv.orders"]}) == "files"


class FakeConnect(KafkaConnect):
    """Kafka Connect answering from ``answers`` (path -> JSON, or an exception to raise)."""

    def __init__(self, answers: dict) -> None:
        super().__init__(URL)
        object.__setattr__(self, "answers", answers)
        object.__setattr__(self, "asked", [])

    def get(self, path: str):
        self.asked.append(path)
        answer = self.answers.get(path, LookupError(path))
        if isinstance(answer, BaseException):
            raise answer
        return answer


def connectors_answer(**states: tuple[str, str | None]) -> dict:
    return {
        name: {
            "status": status_body(*state.split("/")) | {"name": name},
            "info": {
                "name": name,
                "config": {"database.password": "s3cret", **({"topic.prefix": prefix} if prefix else {})},
            },
        }
        for name, (state, prefix) in states.items()
    }


def test_sources_group_the_tables_by_connector_and_say_what_is_not_watched():
    connect = FakeConnect(
        {
            "/connectors?expand=status&expand=info": connectors_answer(
                json=("RUNNING/RUNNING", "shop"), files=("RUNNING/FAILED", "${env:PREFIX}")
            ),
            "/connectors/files/topics": {"files": {"topics": ["chain.inv.items"]}},
            "/connectors/json/topics": {"json": {"topics": ["shop.inv.orders"]}},
        }
    )
    tables = [
        make_table(name="orders", topic="shop.inv.orders"),
        make_table(name="items", topic="chain.inv.items"),
        make_table(name="lost", topic="other.inv.lost"),
        make_table(name="named", topic="x.inv.named", connector={"name": "gone"}),
    ]
    answer = source_statuses(SourceProbe(connect), tables, [None] * 4, NOW)
    assert [s.name for s in answer.sources] == ["json", "files", "gone"]
    assert [None if s is None else s.connector.state for s in answer.of_table] == ["RUNNING", "FAILED", None, "missing"]
    assert answer.unwatched[2].startswith(
        "no connector of Kafka Connect at http://connect.example:8083 has topic.prefix 'other'"
    )
    # no position it emitted is known (no offset, nothing applied): the binlog lag is not measured, and says why
    assert answer.sources[0].lag is None and answer.sources[0].problems[0].startswith("no binlog position it emitted")
    assert "/connectors/files/offsets" in connect.asked and "/connectors/gone/offsets" not in connect.asked
    # the config's other keys (the password) are kept nowhere
    assert "s3cret" not in json.dumps([s.model_dump(mode="json") for s in answer.sources])


def test_kafka_connect_that_does_not_answer_leaves_every_table_unreachable():
    connect = FakeConnect(
        {"/connectors?expand=status&expand=info": ConnectUnreachableError("ConnectionError: refused")}
    )
    tables = [
        make_table(name="a", topic="shop.inv.a"),
        make_table(name="b", topic="shop.inv.b", connector={"name": "c1"}),
    ]
    answer = source_statuses(SourceProbe(connect), tables, [None, None], NOW)
    assert [s.name for s in answer.sources] == ["topic prefix shop", "c1"]
    assert all(s.connector.state == "unreachable" for s in answer.sources)
    lines = answer.sources[0].lines()
    assert (
        lines[0] == f"source topic prefix shop (Kafka Connect at {URL}; 1 table): unreachable: ConnectionError: refused"
    )
    assert lines[-1].startswith("  remedy: start Kafka Connect")


def test_the_emitted_point_is_the_furthest_of_the_connector_offset_and_the_lake():
    connect = FakeConnect(
        {
            "/connectors?expand=status&expand=info": connectors_answer(json=("PAUSED/PAUSED", "shop")),
            "/connectors/json/offsets": {
                "offsets": [
                    {"partition": {"server": "shop"}, "offset": {"file": "mysql-bin.000003", "pos": 100, "ts_sec": 1}}
                ]
            },
        }
    )
    lake = point(3, 2558, origin="lake")
    answer = source_statuses(SourceProbe(connect), [make_table(name="o", topic="shop.inv.o")], [lake], NOW)
    assert answer.sources[0].connector.state == "PAUSED"
    assert any("no source database" in p for p in answer.sources[0].problems)


# --- the Kafka Connect connection -------------------------------------------------------------------


def test_the_connection_extra_says_tls_and_the_client_keeps_its_secrets_out_of_repr():
    client = connect_from_connection(URL + "/", "reader", "s3cret", {"verify": "/etc/ssl/ca.pem", "timeout": "5"})
    assert client.url == URL and client.verify == "/etc/ssl/ca.pem" and client.timeout_s == 5.0
    assert "s3cret" not in repr(client)
    assert connect_from_connection(URL, None, None, {"verify": "false"}).verify is False
    mtls = connect_from_connection(URL, None, None, {"cert": "/c.pem", "key": "/k.pem"})
    assert mtls.cert == ("/c.pem", "/k.pem")
    with pytest.raises(ValueError, match="unknown extra key"):
        connect_from_connection(URL, None, None, {"headers": {}})
    with pytest.raises(ValueError, match="needs cert"):
        connect_from_connection(URL, None, None, {"key": "/k.pem"})


def test_the_hook_builds_kafka_connect_from_its_connection_or_the_settings(monkeypatch):
    from cdclake.errors import ConfigError
    from cdclake_airflow.hooks import CdcLakeHook

    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_CONNECT", raising=False)
    monkeypatch.delenv("CDCLAKE_CONNECT_URL", raising=False)
    assert CdcLakeHook().kafka_connect is None and CdcLakeHook().source_probe() is None
    monkeypatch.setenv("CDCLAKE_CONNECT_URL", "http://127.0.0.1:18083")
    assert CdcLakeHook().kafka_connect.url == "http://127.0.0.1:18083"
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_CONNECT",
        json.dumps(
            {
                "conn_type": "http",
                "host": "connect.internal",
                "port": 8443,
                "schema": "https",
                "login": "u",
                "password": "pw",
                "extra": {"verify": False},
            }
        ),
    )
    client = CdcLakeHook().kafka_connect
    assert (client.url, client.username, client.password, client.verify) == (
        "https://connect.internal:8443",
        "u",
        "pw",
        False,
    )
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_CONNECT", "http://u:secret@connect.example.com:8083")
    with pytest.raises(ConfigError, match="plain http to connect.example.com") as caught:
        _ = CdcLakeHook().kafka_connect
    assert "secret" not in str(caught.value)


def test_an_unreachable_connect_is_one_short_line():
    client = KafkaConnect("http://127.0.0.1:1", timeout_s=2)
    with pytest.raises(ConnectUnreachableError, match=r"^ConnectionError: .*(refused|Errno)"):
        client.connectors()
    assert client.status("x").state == "unreachable"


# --- where the figures show ------------------------------------------------------------------------


def failed_source(lag: SourceLag | None = None) -> SourceStatus:
    return SourceStatus(
        name="inventory-connector",
        connector=ConnectorHealth.from_status(URL, status_body("RUNNING", "FAILED", trace=DDL_TRACE)),
        tables=["orders", "customers"],
        lag=lag,
        checked_at_ms=NOW,
    )


def test_the_status_lines_of_a_failed_source():
    from cdclake_dev.views import format_sources

    text = format_sources([failed_source(SourceLag.measure(NOW, SERVER, point(3, 1000), 3))])
    lines = text.splitlines()
    assert lines[0].startswith(
        "source inventory-connector (Kafka Connect at http://connect.example:8083; 2 tables): FAILED: task 0 FAILED:"
    )
    assert lines[1] == (
        "  binlog: 3 transactions (1629 bytes) behind, up to 5m00s (the newest event emitted is that old; "
        "emitted mysql-bin.000003:1000, source at mysql-bin.000003:2629)"
    )
    assert lines[2] == "  the newest event it emitted: source time 5m00s ago"
    assert lines[3].startswith("  remedy: Debezium cannot parse a DDL statement")
    assert format_sources([]) == ""


def table_status(source: TableSource | None, fresh: bool | None, **kw) -> dict:
    status = TableStatus(
        name="orders",
        identifier="shop.orders",
        topic="shop.inv.orders",
        checked_at_ms=NOW,
        table_exists=True,
        topic_exists=True,
        caught_up=True,
        lag_events=0,
        lag_ms=0,
        freshness_minutes=10,
        fresh=fresh,
        source=source,
        **kw,
    )
    return status.model_dump(mode="json")


def test_the_freshness_check_fails_on_a_connector_that_does_not_run_and_on_a_source_behind():
    from cdclake_airflow.freshness_dag import check_freshness

    down = failed_source().table_view()
    with pytest.raises(
        FreshnessError, match="is not fresh: its source inventory-connector is FAILED: task 0 FAILED"
    ) as e:
        check_freshness("orders", {"orders": table_status(down, False)})
    assert "restart?includeTasks=true&onlyFailed=true" in str(e.value)
    behind = source(lag_ms=12 * MINUTE).model_copy(update={"lag_transactions": 40, "lag_bytes": 9000})
    with pytest.raises(FreshnessError, match="at its source: connector inventory-connector has not emitted 40"):
        check_freshness("orders", {"orders": table_status(behind, False, end_to_end_lag_ms=12 * MINUTE)})
    out = check_freshness("orders", {"orders": table_status(source(), True, end_to_end_lag_ms=0)})
    assert out["connector_state"] == "RUNNING" and out["end_to_end_lag_seconds"] == 0


def test_the_metrics_of_a_source():
    from cdclake_airflow.metrics import metric_name, source_figures

    figures = source_figures(failed_source(SourceLag.measure(NOW, SERVER, point(3, 1000), 3)))
    assert figures == {
        "connector_running": 0.0,
        "connector_failed_tasks": 1.0,
        "source_lag_seconds": 300.0,
        "source_lag_bytes": 1629.0,
        "source_lag_transactions": 3.0,
    }
    assert metric_name("topic prefix shop.x") == "topic_prefix_shop_x"


def test_the_monitor_page_shows_each_source_and_marks_its_tables():
    from cdclake_airflow.monitor import render_page

    row = {
        **table_status(failed_source().table_view(), False, end_to_end_lag_ms=0),
        "dag_id": "cdc_orders",
        "last_run": None,
    }
    payload = {
        "checked_at_ms": NOW,
        "kafka": "Airflow connection kafka_default",
        "connect": URL,
        "sources": [failed_source().model_dump(mode="json")],
        "tables": [row],
        "groups": [],
    }
    html = render_page(payload)
    assert (
        '<li class="source" data-source="inventory-connector" data-state="FAILED"><span class="badge bad">FAILED</span>'
        in html
    )
    assert "remedy: Debezium cannot parse a DDL statement" in html
    assert '<span class="badge bad source-down"' in html and ">source FAILED</span>" in html
    assert "end to end 0s" in html and f"Kafka Connect: {URL}" in html
