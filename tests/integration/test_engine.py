"""The apply contract over the shared engine: a real Spark Connect server (the tests' own, started
by :mod:`cdclake_dev.engine` with the Iceberg runtime and the tests' SQLite catalog), real Kafka.

Each run is a session of its own in a client process of its own, as in the table DAG's ``apply``
task (a Connect session switches its whole Python process to Connect mode, so none is made in the
test process, whose classic session the other tests use). The failure cases are
real: a ``kill -9`` of the client process (the Airflow task) or of the server while the server
executes the ``MERGE``, and a server that is not there. The kill moment is found by watching the
table's refs in the catalog: the run branch appears right before the ``MERGE`` is sent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cdclake.errors import EngineUnavailableError
from cdclake.io.catalog import load_catalog
from cdclake.io.kafka import ensure_topic, produce
from cdclake.io.maintenance import remove_stale_run_branches
from cdclake.io.refs import committed_offsets
from cdclake.model.layout import QUARANTINE_SUFFIX, RUN_BRANCH_PREFIX, SummaryKeys, side_table
from cdclake.model.plan import RunPlan
from cdclake.settings import Settings
from cdclake.spark.session import connect_session
from cdclake_dev import engine as local_engine
from cdclake_dev.process import free_port
from tests.conftest import make_table, plan_offsets
from tests.integration.test_apply import produce_raw
from tests.integration.test_contract import COLUMNS, ev, key
from tests.integration.test_crash import job_env

pytestmark = pytest.mark.integration

_CLIENT = """
import faulthandler, json, logging, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung client's threads, on demand
logging.basicConfig(level=logging.INFO)
from cdclake.model.plan import RunPlan
from cdclake.settings import Settings
from cdclake.spark.apply import apply_range
from cdclake.spark.session import connect_session
spark = connect_session(sys.argv[1])
try:  # as the apply task's hook does: a session left open hangs the exit if its server died
    result = apply_range(spark, Settings.from_env(), RunPlan.from_json(sys.argv[2]))
finally:
    spark.stop()
print("CLIENT_DONE", result.to_json(), flush=True)
"""


def _rows(settings, cfg, ref: str = "main") -> dict:
    table = load_catalog(settings).load_table(cfg.identifier)
    snap = table.snapshot_by_name(ref)
    arrow = table.scan(snapshot_id=snap.snapshot_id if snap else None).to_arrow()
    return {r["id"]: r["v"] for r in arrow.to_pylist()}


def _apply(url: str, settings, plan: RunPlan) -> dict:
    """Apply ``plan`` in a client process of its own, as the ``apply`` task does: a Spark Connect
    session switches the whole Python process to Connect mode (``SPARK_CONNECT_MODE_ENABLED``),
    which the tests' in-process classic session must never see.

    Raises:
        RuntimeError: the client failed (its output is in the message).
    """
    proc = subprocess.run(
        [sys.executable, "-c", _CLIENT, url, plan.to_json()],
        env=job_env(settings),
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("CLIENT_DONE "):
            return json.loads(line[len("CLIENT_DONE ") :])
    raise RuntimeError(f"the apply client failed (exit code {proc.returncode}):\n{proc.stderr[-4000:]}")


def _load(kafka, cfg, keys: range, pos0: int, v: str) -> None:
    produce(kafka, cfg.topic, ((key(k), ev("c", k, f"{v}{k}", pos0 + k), None) for k in keys))


def _run_branches(settings, cfg) -> dict[str, int]:
    table = load_catalog(settings).load_table(cfg.identifier)
    return {n: r.snapshot_id for n, r in table.refs().items() if n.startswith(RUN_BRANCH_PREFIX)}


def _wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def big_table(kafka, stack_settings, engine):
    """A table with a first commit (so that the next run commits through a run branch) and a
    second batch large enough that the server's MERGE of it takes seconds (150,000 rows took less
    than the server-kill test's half second once HotSpot compiled Spark's generated code)."""
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 1)
    _load(kafka, cfg, range(0, 10), 1000, "first")
    _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, "scheduled__first"))
    _load(kafka, cfg, range(10, 400_010), 1_000_000, "second")
    return cfg


def test_runs_over_connect_apply_the_contract_and_record_offsets(kafka, stack_settings, engine):
    cfg = make_table(value_format="json", columns=COLUMNS, bad_records_tolerance="all")  # its bad record: counted
    ensure_topic(kafka, cfg.topic, 2)
    produce_raw(kafka, cfg.topic, [(key(1), ev("c", 1, "a", 100)), (key(2), ev("c", 2, "b", 110))], partition=0)
    produce_raw(kafka, cfg.topic, [(key(1), ev("u", 1, "a2", 120)), (key(2), ev("d", 2, "b", 130))], partition=1)
    result = _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, "scheduled__1"))
    assert result["events"] == 4
    assert _rows(stack_settings, cfg) == {1: "a2"}
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert committed_offsets(table, cfg.topic) == {0: 2, 1: 2}
    summary = table.current_snapshot().summary
    assert summary[SummaryKeys.RUN_ID] == "scheduled__1"
    # an older replayed upsert of the deleted key stays out (its tombstone, over Connect too), and
    # a bad record is quarantined with the key's later event held back behind it
    produce_raw(
        kafka,
        cfg.topic,
        [
            (key(2), ev("c", 2, "stale", 105)),  # offset 2
            (key(3), b'{"op": "c", "after": {"id": 3'),  # offset 3: truncated JSON
            (key(3), ev("u", 3, "held", 140)),  # offset 4: held back
            (key(4), ev("c", 4, "d", 150)),  # offset 5
        ],
        partition=0,
    )
    result = _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, "scheduled__2"))
    assert result["quarantined"] == 2
    assert _rows(stack_settings, cfg) == {1: "a2", 4: "d"}
    quarantine = load_catalog(stack_settings).load_table(side_table(cfg.identifier, QUARANTINE_SUFFIX))
    entries = sorted(quarantine.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [(r["offset"], r["status"], r["held_back_behind"]) for r in entries] == [(3, "open", None), (4, "open", 3)]


_LOCAL_READ_CLIENT = """
import json, sys
from pyspark.sql.connect.plan import LocalRelation
from cdclake.io.kafka import KafkaClients
from cdclake.model.offsets import OffsetRange
from cdclake.spark.read import read_local
from cdclake.spark.session import LOCAL_RELATION_CACHE_THRESHOLD, connect_session
spark = connect_session(sys.argv[1])
kafka = KafkaClients.from_bootstrap(sys.argv[2])
df = read_local(spark, kafka, OffsetRange(topic=sys.argv[3], start={0: 0}, end={0: 600}))
out = [spark.conf.get(LOCAL_RELATION_CACHE_THRESHOLD), type(df._plan) is LocalRelation, df.count()]
spark.stop()
print("CLIENT_DONE", json.dumps(out), flush=True)
"""


def test_a_local_read_of_some_mib_travels_in_the_plan_not_as_a_server_side_cached_artifact(
    kafka, stack_settings, engine
):
    """A range read with the Kafka client (:func:`cdclake.spark.read.read_local`) of about 3 MiB is
    a local relation in the plan: Spark 4.1 would upload it as cached artifacts (its threshold is 1
    MiB), which its server keeps in its block manager after the session is closed (the eleventh
    soak's heap dump). A Connect client of its own (the tests' process keeps a classic session)."""
    from cdclake.spark.session import LOCAL_RELATION_CACHE_THRESHOLD, SESSION_CONF

    topic = make_table().topic
    ensure_topic(kafka, topic, 1)
    produce_raw(kafka, topic, [(key(i), b"x" * 5_000) for i in range(600)])
    threshold, in_plan, count = _client_result(
        _LOCAL_READ_CLIENT, engine, stack_settings, stack_settings.kafka_bootstrap, topic
    )
    assert threshold == SESSION_CONF[LOCAL_RELATION_CACHE_THRESHOLD]
    assert in_plan  # a LocalRelation, not a ChunkedCachedLocalRelation: nothing cached on the server
    assert count == 600


def test_tables_applying_at_once_share_no_session_state(kafka, stack_settings, engine):
    """Four tables apply at once in one server, each in its own session: each commit carries its
    own run id and offsets in its snapshot summary, never another session's."""
    tables = []
    for i in range(4):
        cfg = make_table(value_format="json", columns=COLUMNS)
        ensure_topic(kafka, cfg.topic, 1)
        _load(kafka, cfg, range(0, 200 * (i + 1)), 10, f"t{i}-")
        tables.append(cfg)
    errors: list[BaseException] = []

    def run(i: int, cfg) -> None:
        try:
            _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, f"scheduled__parallel-{i}"))
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, cfg)) for i, cfg in enumerate(tables)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert errors == []
    catalog = load_catalog(stack_settings)
    for i, cfg in enumerate(tables):
        table = catalog.load_table(cfg.identifier)
        summary = table.current_snapshot().summary
        assert summary[SummaryKeys.RUN_ID] == f"scheduled__parallel-{i}"
        assert json.loads(summary[SummaryKeys.END_OFFSETS]) == {"0": 200 * (i + 1)}
        assert len(_rows(stack_settings, cfg)) == 200 * (i + 1)


def _start_client(engine: str, settings: Settings, plan: RunPlan) -> subprocess.Popen[bytes]:
    """The apply of ``plan`` over ``engine`` in a new Python process (the Airflow task), in a
    session of its own (killed with its group); its output is kept (stdout, stderr merged)."""
    return subprocess.Popen(
        [sys.executable, "-c", _CLIENT, engine, plan.to_json()],
        env=job_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _output_within(client: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The output of ``client`` (:func:`_start_client`) once it ended. One that has not ended
    within ``timeout_s`` seconds is killed and fails the test with its threads' stacks first (the
    faulthandler dump of ``_CLIENT``: where it waits), then the end of what it wrote before."""
    try:
        out = client.communicate(timeout=timeout_s)[0].decode(errors="replace")
        return out
    except subprocess.TimeoutExpired:
        client.send_signal(signal.SIGUSR1)
        time.sleep(2)
        os.killpg(client.pid, signal.SIGKILL)
        out = client.communicate(timeout=60)[0].decode(errors="replace")
    dump = min((i for i in (out.find("Current thread 0x"), out.find("Thread 0x")) if i >= 0), default=len(out))
    pytest.fail(
        f"the apply client did not end within {timeout_s:.0f} s; its threads:\n{out[dump:]}\n"
        f"--- what it wrote before ---\n{out[:dump][-6000:]}",
        pytrace=False,
    )


def test_a_task_killed_mid_merge_leaves_main_alone_and_its_retry_converges(kafka, stack_settings, engine, big_table):
    """The Airflow task (the Connect client) is killed with SIGKILL while the server executes its
    MERGE: the server still finishes the MERGE into the run branch, but main, the only ref readers
    and offsets see, stays at the base; the retry applies the same range, and the table equals the
    uninterrupted run's."""
    cfg = big_table
    plan = plan_offsets(stack_settings, cfg, "scheduled__killed")
    base = load_catalog(stack_settings).load_table(cfg.identifier).current_snapshot().snapshot_id
    client = _start_client(engine, stack_settings, plan)
    branch = _wait_for(lambda: _run_branches(stack_settings, cfg), 300, "the run branch (the MERGE is next)")
    time.sleep(0.5)
    os.killpg(client.pid, signal.SIGKILL)
    out = client.communicate(timeout=60)[0].decode(errors="replace")
    assert "CLIENT_DONE" not in out, "the client finished before it was killed: the batch is too small"
    (name, at) = next(iter(branch.items()))
    assert at == base
    # the server goes on with the MERGE of the dead client: the branch moves, main does not
    _wait_for(lambda: _run_branches(stack_settings, cfg).get(name, base) != base, 300, "the server's MERGE")
    table = load_catalog(stack_settings).load_table(cfg.identifier)
    assert table.current_snapshot().snapshot_id == base
    assert committed_offsets(table, cfg.topic) == {0: 10}
    # the retry (a new try of the task: a new session) plans the same range and converges
    retry = plan_offsets(stack_settings, cfg, "scheduled__killed")
    assert retry.range == plan.range
    _apply(engine, stack_settings, retry)
    rows = _rows(stack_settings, cfg)
    assert len(rows) == 400_010 and rows[400_009] == "second400009"
    assert committed_offsets(load_catalog(stack_settings).load_table(cfg.identifier), cfg.topic) == {0: 400_010}
    removed = remove_stale_run_branches(load_catalog(stack_settings), cfg.identifier, older_than_ms=0)
    assert name in removed


def test_a_task_killed_after_its_commit_is_found_committed_by_the_retry(kafka, stack_settings, engine, tmp_path):
    cfg = make_table(value_format="json", columns=COLUMNS)
    ensure_topic(kafka, cfg.topic, 1)
    _load(kafka, cfg, range(0, 5), 100, "a")
    _apply(engine, stack_settings, plan_offsets(stack_settings, cfg, "scheduled__0"))
    _load(kafka, cfg, range(5, 20), 200, "b")
    plan = plan_offsets(stack_settings, cfg, "scheduled__paused")
    marker = tmp_path / "paused"
    env = job_env(stack_settings) | {"CDCLAKE_APPLY_PAUSE_AT": f"after_commit@{marker}"}
    client = subprocess.Popen([sys.executable, "-c", _CLIENT, engine, plan.to_json()], env=env, start_new_session=True)
    try:
        _wait_for(marker.exists, 300, "the client's pause after its commit")
    finally:
        os.killpg(client.pid, signal.SIGKILL)
        client.wait(60)
    retry = plan_offsets(stack_settings, cfg, "scheduled__paused")
    assert retry.range.is_empty, "the retry must find the killed try's commit"
    assert len(_rows(stack_settings, cfg)) == 20


def test_the_server_killed_mid_merge_then_restarted_converges(kafka, stack_settings, engine, big_table):
    """kill -9 of the Spark Connect server during the MERGE: the task fails, nothing reaches main;
    after a restart the retry applies the same range and converges."""
    cfg = big_table
    plan = plan_offsets(stack_settings, cfg, "scheduled__server-killed")
    client = _start_client(engine, stack_settings, plan)
    _wait_for(lambda: _run_branches(stack_settings, cfg), 300, "the run branch (the MERGE is next)")
    time.sleep(0.5)
    local_engine.stop_engine(stack_settings, hard=True)
    try:
        out = _output_within(client, 300)
        assert "CLIENT_DONE" not in out, (
            f"the apply must fail when its server dies (exit code {client.returncode}):\n{out[-4000:]}"
        )
        # the run fails with the MERGE's error; the clean-up that failed too is a warning
        assert "was not dropped (maintenance removes it)" in out, out[-4000:]
        assert "in _drop_failed_branch" not in out and "in unpersist" not in out, out[-4000:]
        table = load_catalog(stack_settings).load_table(cfg.identifier)
        assert committed_offsets(table, cfg.topic) == {0: 10}
    finally:
        local_engine.start_engine(stack_settings)
    retry = plan_offsets(stack_settings, cfg, "scheduled__server-killed")
    assert retry.range == plan.range
    _apply(engine, stack_settings, retry)
    assert len(_rows(stack_settings, cfg)) == 400_010
    assert committed_offsets(load_catalog(stack_settings).load_table(cfg.identifier), cfg.topic) == {0: 400_010}


_ZONE_CLIENT = """
import datetime, json, sys
from cdclake.model.types import ColumnSpec
from cdclake.spark.parse import parse_records
from cdclake.spark.session import connect_session
zone = "spark.sql.session.timeZone"
spark = connect_session(sys.argv[1])
built = spark.conf.get(zone)
spark.conf.set(zone, "America/Los_Angeles")  # a session of a server whose default zone is not UTC
value = b'{"after": {"id": 1, "dt": 1595008822123456}, "op": "c", "source": {"file": "b.000001", "pos": 4}}'
raw = spark.createDataFrame(
    [("t", 0, 0, datetime.datetime(2024, 1, 1), b"k", value)],
    "topic string, partition int, offset long, timestamp timestamp, key binary, value binary",
)
columns = [ColumnSpec("id", "int", True, "int32"), ColumnSpec("dt", "timestamp", False, "io.debezium.time.MicroTimestamp")]
row = parse_records(raw, "json", columns, ("id",)).selectExpr("cast(image.dt AS string) AS dt").first()
other = connect_session(sys.argv[1])  # a new session of the same server
again = other.conf.get(zone)
print("CLIENT_DONE", json.dumps([built, row["dt"], again]), flush=True)
"""


def test_a_connect_session_is_in_utc_and_decodes_datetimes_without_its_zone(stack_settings, engine):
    """Every session :func:`connect_session` builds sets its own time zone to UTC, and a DATETIME
    decodes to its wall-clock value even in a session of another zone (over Connect)."""
    assert _client_result(_ZONE_CLIENT, engine, stack_settings) == ["UTC", "2020-07-17 18:00:22.123456", "UTC"]


def _client_result(code: str, engine: str, settings, *args: str):
    """What the Connect client ``code`` (``python -c``, the engine URL and ``args`` as its
    arguments) printed after ``CLIENT_DONE``, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code, engine, *args], env=job_env(settings), capture_output=True, text=True, timeout=300
    )
    done = [line for line in proc.stdout.splitlines() if line.startswith("CLIENT_DONE ")]
    assert done, proc.stderr[-4000:]
    return json.loads(done[0][len("CLIENT_DONE ") :])


AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Value",
        "namespace": "cdclake.test",
        "fields": [
            {"name": "id", "type": "int"},
            {
                "name": "amount",
                "type": [
                    "null",
                    {
                        "type": "bytes",
                        "logicalType": "decimal",
                        "precision": 10,
                        "scale": 2,
                        "connect.name": "org.apache.kafka.connect.data.Decimal",
                    },
                ],
                "default": None,
            },
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)
"""A Debezium-like writer schema: a Connect decimal (bytes with ``connect.name``), a nullable string."""


def avro_round_trip(spark) -> list[list]:
    """Rows written with ``to_avro`` behind a 5-byte Confluent header, then read back with
    ``from_avro`` of the datum after it (``substring(value, 6)``), as ``[id, amount, note]``."""
    from decimal import Decimal

    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro, to_avro

    rows = spark.createDataFrame(
        [(1, Decimal("12.34"), "a"), (2, None, None)], "id int, amount decimal(10,2), note string"
    )
    header = F.unhex(F.lit("0000000007"))  # magic byte 0, schema id 7
    framed = rows.select(F.concat(header, to_avro(F.struct("id", "amount", "note"), AVRO_SCHEMA)).alias("value"))
    back = framed.select(from_avro(F.expr("substring(value, 6)"), AVRO_SCHEMA).alias("r")).select("r.*")
    return [[r.id, None if r.amount is None else str(r.amount), r.note] for r in back.orderBy("id").collect()]


_AVRO_CLIENT = """
import json, sys
from cdclake.spark.session import connect_session
from tests.integration.test_engine import avro_round_trip
print("CLIENT_DONE", json.dumps(avro_round_trip(connect_session(sys.argv[1]))), flush=True)
"""


def test_spark_avro_reads_what_it_writes_in_a_classic_session_and_over_connect(spark, stack_settings, engine):
    """The spark-avro jar (``.jars/spark``) is on both launch paths: ``from_avro`` of ``to_avro``
    gives the rows back, in the tests' classic session and over the Spark Connect server."""
    expected = [[1, "12.34", "a"], [2, None, None]]
    assert avro_round_trip(spark) == expected
    assert _client_result(_AVRO_CLIENT, engine, stack_settings) == expected


def test_a_server_that_is_not_there_is_a_clear_error_without_the_token():
    port = free_port()
    with pytest.raises(EngineUnavailableError) as info:
        connect_session(f"sc://localhost:{port}/;token=s3cr3t-token", conn_id="spark_connect_default", wait_s=1)
    message = str(info.value)
    assert "waited 1 s" in message
    assert f"sc://localhost:{port}" in message and "spark_connect_default" in message
    assert "s3cr3t-token" not in message and "Nothing was applied" in message


def test_a_port_held_by_another_process_is_refused_not_shared(tmp_path):
    """Another stack's server on the configured port has another catalog: this stack's applies
    must never go there."""
    import socket

    from cdclake.settings import Settings

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        settings = Settings.from_env(
            {"CDCLAKE_STATE_DIR": str(tmp_path / "other"), "CDCLAKE_SPARK_CONNECT_PORT": str(port)}
        )
        with pytest.raises(RuntimeError, match=f"port {port} is taken by a process this stack did not start"):
            local_engine.start_engine(settings)
