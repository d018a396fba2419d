"""The soak's pure parts (``bench/soak_tables.py``, ``bench/soak_watch.py``): replaying a
``write_mode: changelog`` table to the rows its source holds, the table config it generates, and
the first error line of an Airflow 3 task log."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from cdclake.model.config import load_tables
from cdclake.settings import PROJECT_ROOT, Settings

sys.path.insert(0, str(PROJECT_ROOT / "bench"))

import soak_tables  # noqa: E402
import soak_watch  # noqa: E402

COLUMNS = ["seq", "label"]


def _event(op: str, seq: int, pos: int, *, snapshot: bool = False, offset: int | None = None, label: str = "a"):
    return {
        "seq": seq,
        "label": label,
        "_cdc_op": op,
        "_cdc_snapshot": snapshot,
        "_cdc_kafka_partition": 0,
        "_cdc_kafka_offset": pos if offset is None else offset,
        "_cdc_binlog_file_seq": 1,
        "_cdc_binlog_pos": pos,
        "_cdc_binlog_row": 0,
    }


def test_replaying_a_changelog_follows_source_order_and_a_resnapshot_replaces_the_state():
    events = [
        _event("c", 2, 20),
        _event("u", 1, 30, label="b"),  # out of Kafka order: the position orders
        _event("c", 1, 10),
        _event("d", 2, 40),
        # a re-snapshot after lost offsets: row 1 as it is now, row 3 inserted while not streaming
        _event("r", 1, 50, snapshot=True, offset=60, label="c"),
        _event("r", 3, 50, snapshot=True, offset=61),
        _event("c", 4, 70),
    ]
    rows, duplicated, reemitted = soak_tables.replay_changelog(events, "seq", COLUMNS)
    assert rows == {1: {"seq": 1, "label": "c"}, 3: {"seq": 3, "label": "a"}, 4: {"seq": 4, "label": "a"}}
    assert (duplicated, reemitted) == (0, 0)


def test_replaying_a_changelog_tells_a_record_applied_twice_from_one_debezium_re_emitted():
    events = [
        _event("c", 1, 10),
        _event("u", 1, 30, label="b"),
        _event("u", 1, 30, offset=99, label="b"),  # Debezium re-emitted it after a restart
        _event("c", 4, 70),
        _event("c", 4, 70),  # the same Kafka record twice: the pipeline applied it twice
    ]
    rows, duplicated, reemitted = soak_tables.replay_changelog(events, "seq", COLUMNS)
    assert rows == {1: {"seq": 1, "label": "b"}, 4: {"seq": 4, "label": "a"}}
    assert (duplicated, reemitted) == (1, 1)


def test_the_generated_table_config_holds_every_kind_and_loads(tmp_path: Path):
    tables = soak_tables.soak_tables(5)
    path = soak_tables.write_tables_config(
        tmp_path / "t.yaml", tables, Settings.from_env({}), task_timeout_minutes=3, freshness_minutes=5, retries=4
    )
    loaded = {t.name: t for t in load_tables(path).tables}
    assert [t.kind for t in tables] == ["composite", "keyless", "wide", "keyed", "composite"]
    assert loaded["soak_01_composite"].primary_key == ("tenant", "id")
    assert (loaded["soak_02_keyless"].primary_key, loaded["soak_02_keyless"].write_mode) == ((), "changelog")
    assert {t.schedule for t in loaded.values()} == {"* * * * *"}
    assert {t.retries for t in loaded.values()} == {4}
    assert tables[2].create_sql().count(" NULL") == 40  # 40 columns (id NOT NULL)


def test_the_first_error_line_of_a_task_log(tmp_path: Path):
    log = tmp_path / "attempt=1.log"
    lines = [
        {"level": "info", "event": "started"},
        {
            "level": "error",
            "event": "Task failed",
            "error_detail": [{"exc_type": "SparkConnectGrpcException", "exc_value": "UNAVAILABLE\nmore"}],
        },
        {"level": "error", "event": "later"},
    ]
    log.write_text("\n".join(json.dumps(line) for line in lines) + "\nnot json\n")
    assert soak_watch.error_line(log) == "SparkConnectGrpcException: UNAVAILABLE"
    grpc = (
        "<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n"
        '\tdetails = "Socket closed"\n\tdebug_error_string = "UNKNOWN"\n>'
    )
    lines[1]["error_detail"] = [{"exc_type": "SparkConnectGrpcException", "exc_value": grpc}]
    log.write_text("\n".join(json.dumps(line) for line in lines))
    assert soak_watch.error_line(log) == (
        "SparkConnectGrpcException: <_InactiveRpcError of RPC that terminated with: "
        'status = StatusCode.UNAVAILABLE details = "Socket closed"'
    )
    log.write_text(json.dumps({"level": "info", "event": "started"}))
    assert soak_watch.error_line(log).startswith("(no error in the task log")


def test_every_failed_try_error_the_soak_has_met_is_explained_by_the_runbook_and_others_are_not():
    documented = soak_watch.documented_errors(*(doc.read_text() for doc in soak_watch.ERRORS_DOCS))
    met = {
        "ServerError: SdkClientException: Unable to execute HTTP request: Connect to 127.0.0.1:22278 "
        "[/127.0.0.1] failed: Connection refused": "Other failures",
        "Process terminated by signal. Likely out of memory error (OOM).": "Other failures",
        "(no error in the task log: the process was killed)": "Other failures",
        "EngineUnavailableError: the Spark Connect server sc://localhost:1 does not accept connections": (
            "EngineUnavailableError"
        ),
        "DriftError: 3 rows differ": "ReconcileError, CatchUpTimeoutError, DriftError",
        # the 60-minute soak's: the broker down, the REST catalog's database restarting
        "FAIL [rdkafka#consumer-1] [thrd:sasl_plaintext://127.0.0.1:29317/bootstrap]: "
        "sasl_plaintext://127.0.0.1:29317/bootstrap: Connect to ipv4#127.0.0.1:29317 failed: Connection refused "
        "(after 0ms in state CONNECT)": "Other failures",
        # the same from a connection to a known broker (its id, not `bootstrap`: the clean-clone run of stop 39)
        "FAIL [rdkafka#consumer-2] [thrd:sasl_plaintext://127.0.0.1:23024/1]: sasl_plaintext://127.0.0.1:23024/1: "
        "Connect to ipv4#127.0.0.1:23024 failed: Connection refused (after 0ms in state CONNECT)": "Other failures",
        "ServerError: UncheckedSQLException: Failed to get table soak.soak_01_composite from catalog rest_backend": (
            "Other failures"
        ),
        # the short soak's, on a PostgreSQL restart during a commit (the clean-clone run of 2026-11-25)
        "AirflowRuntimeError: API_SERVER_ERROR: {'status_code': 500, 'message': 'Server returned error', "
        "'detail': {'detail': 'x (CommitStateUnknownException) Service failed: 500: Failed to get table "
        "soak.soak_02_keyless from catalog rest_backend'}}": "Other failures",
        # the third 60-minute soak's: the engine paused, then its worker killed, during an apply
        "SparkConnectGrpcException: <_InactiveRpcError of RPC that terminated with: "
        'status = StatusCode.UNAVAILABLE details = "Socket closed"': "Other failures",
        # the ninth 60-minute soak's: the engine killed under a session, executors lost under a job
        "SparkConnectException: [NO_ACTIVE_SESSION] No active Spark session found. Please create a new Spark "
        "session before running the code.": "Other failures",
        "SparkException: Exception thrown in awaitResult:  JVM stacktrace:": "Other failures",
    }
    for line, section in met.items():
        found = soak_watch.explained_by(line, documented)
        assert found is not None and found.startswith(section), (line, found)
    assert soak_watch.explained_by("ZeroDivisionError: division by zero", documented) is None
    assert soak_watch.explained_by("SdkClientException: Unable to execute HTTP request: timeout", documented) is None


def test_an_error_is_explained_by_either_doc_of_the_errors_and_docs_that_explain_none_are_refused():
    """The reference page ``docs/errors.md`` and the runbook ``docs/operations.md``: an entry in
    either explains an error; docs with no entry at all are not the docs of the errors."""
    reference = (
        "# Errors (reference)\n\n## FooError\n\n* **Says:** ...\n\n## Other failures\n\n* `Boom <n> at <t>`: x\n"
    )
    runbook = "# Runbook\n\n## Running\n\nText.\n\n### A BarError, ZapError\n\nWhat to do.\n\n## Debugging\n"
    documented = soak_watch.documented_errors(reference, runbook)
    assert soak_watch.explained_by("FooError: no", documented) == "FooError"
    assert soak_watch.explained_by("ZapError: a", documented) == "A BarError, ZapError"
    assert soak_watch.explained_by("Boom 3 at\nnoon", documented) == "Other failures: Boom <n> at <t>"
    assert soak_watch.explained_by("Running", documented) is None
    assert soak_watch.explained_by("Other failures", documented) is None
    with pytest.raises(ValueError, match="explain no error"):
        soak_watch.documented_errors(runbook.replace("BarError, ZapError", "bar"))
    assert [doc.name for doc in soak_watch.ERRORS_DOCS] == ["errors.md", "operations.md"]


def test_the_live_heap_of_a_real_jvm_is_measured_after_a_full_collection_and_dumped(tmp_path: Path):
    """A real JVM (a one-file Java program that holds 64 MiB, then sleeps), measured with the
    JDK's ``jcmd`` as the watcher measures the Spark Connect server."""
    import subprocess

    from cdclake_dev.system import java_executable

    assert soak_watch.jcmd_executable() is not None, "the JDK's jcmd (the soak measures the engine's live heap with it)"
    source = tmp_path / "Hold.java"
    source.write_text(
        "public class Hold { static byte[] kept; public static void main(String[] a) throws Exception {"
        ' kept = new byte[64 << 20]; System.out.println("ready"); Thread.sleep(120000); } }'
    )
    proc = subprocess.Popen([java_executable(), "-Xmx256m", str(source)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        live = soak_watch.jvm_live_heap(proc.pid)
        assert live is not None and live[0] == proc.pid
        assert 64 << 20 <= live[1] < 200 << 20, live  # the array is live; the rest was collected
        histogram = soak_watch.jvm_class_histogram(proc.pid)
        assert histogram is not None and histogram["[B"][1] >= 64 << 20, histogram and histogram.get("[B")
        dump = soak_watch.jvm_heap_dump(proc.pid, tmp_path / "dumps" / "hold.hprof")
        assert dump is not None
        with dump.open("rb") as f:
            assert f.read(18) == b"JAVA PROFILE 1.0.2"
        assert dump.stat().st_size > 64 << 20  # the live array is in it
    finally:
        proc.kill()
        proc.wait()
    assert soak_watch.jvm_live_heap(proc.pid) is None  # gone: no measure
    assert soak_watch.jvm_heap_dump(proc.pid, tmp_path / "gone.hprof") is None
    assert soak_watch.heap_used(" garbage-first heap   total 57344K, used 5956K [0x0, 0x1)\n") == 5956 * 1024
    assert soak_watch.heap_used("no heap here") is None
    # the parallel collector (the driver's) reports each generation
    parallel = subprocess.Popen(
        [java_executable(), "-Xmx256m", "-XX:+UseParallelGC", str(source)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parallel.stdout is not None and parallel.stdout.readline().strip() == "ready"
        live = soak_watch.jvm_live_heap(parallel.pid)
        assert live is not None and 64 << 20 <= live[1] < 200 << 20, live
    finally:
        parallel.kill()
        parallel.wait()


def test_growth_over_the_last_half_says_whether_the_process_was_young():
    # a JVM restarted 100 s before half-time of a 0..800 s run: 50 MiB, then 60 MiB at the end
    samples = [(float(t), 1, 10 << 20) for t in range(0, 300, 50)]
    samples += [(float(t), 2, (50 if t < 700 else 60) << 20) for t in range(300, 801, 50)]
    figures = soak_watch.growth_figures(samples, 0.0, 800.0)
    assert figures["growth_last_half_pct"] == 20.0
    assert (figures["pids"], figures["pids_last_half"], figures["running_before_half_s"]) == (2, 1, 100)
    assert figures["peak_mib"] == 60 and figures["samples"] == len(samples)
    assert soak_watch.growth_figures([], 0.0, 800.0)["growth_last_half_pct"] is None


def test_the_reports_memory_figures_keep_the_engines_live_heap_samples():
    """The live heap's growth figure alone cannot tell a heap that levels off after a restart from
    one that keeps growing: the report keeps every sample (minutes since the start, pid, MiB)."""
    watcher = soak_watch.Watcher.__new__(soak_watch.Watcher)  # only its samples are read
    mib = 2**20
    watcher.memory = {"spark-connect": [(0.0, 7, 500 * mib), (3600.0, 7, 600 * mib)]}
    watcher.live_heap = [(300.0, 7, 100 * mib), (1800.0, 8, 120 * mib), (3300.0, 8, 150 * mib)]
    watcher.histograms = {}
    figures = watcher.memory_figures(0.0, 3600.0)
    assert figures["spark-connect live heap"]["series"] == [[5.0, 7, 100], [30.0, 8, 120], [55.0, 8, 150]]
    assert figures["spark-connect live heap"]["pids"] == 2
    assert "series" not in figures["spark-connect"]


def test_the_report_says_which_classes_grew_in_the_last_engine_process():
    """``jcmd GC.class_histogram``'s rows parsed, and the growth between the last engine process's
    first and latest histograms, greatest first; a class that shrank is not listed."""
    text = (
        " num     #instances         #bytes  class name (module)\n"
        "-------------------------------------------------------\n"
        "   1:          4000        4194304  [B (java.base@17.0.12)\n"
        "   2:           100          12000  org.apache.spark.sql.execution.ui.SQLExecutionUIData\n"
        "Total          4100        4206304\n"
    )
    first = soak_watch.parse_class_histogram(text)
    assert first == {"[B": (4000, 4194304), "org.apache.spark.sql.execution.ui.SQLExecutionUIData": (100, 12000)}
    mib = 2**20
    latest = {"[B": (3000, 2 * mib), "org.apache.spark.sql.execution.ui.SQLExecutionUIData": (900, 3 * mib)}
    latest["org.example.New"] = (10, mib)
    watcher = soak_watch.Watcher.__new__(soak_watch.Watcher)  # only its samples are read
    watcher.memory = {}
    watcher.live_heap = [(300.0, 7, 100 * mib), (3300.0, 7, 150 * mib)]
    watcher.histograms = {7: [(300.0, first), (3300.0, latest)], 6: [(0.0, {}), (60.0, latest)]}
    classes = watcher.memory_figures(0.0, 3600.0)["spark-connect live heap"]["classes"]
    assert (classes["from_min"], classes["to_min"]) == (5.0, 55.0)
    assert [row["class"] for row in classes["grew"]] == [
        "org.apache.spark.sql.execution.ui.SQLExecutionUIData",
        "org.example.New",
    ]
    assert classes["grew"][0]["instances"] == [100, 900] and classes["grew"][1]["mib_before"] == 0


def test_the_fault_schedule_holds_the_engine_kills_to_their_part_and_keeps_every_fault():
    import random
    import threading
    from collections import Counter

    import soak_faults

    kinds = sorted(soak_faults.FAULTS)
    for seed in range(20):
        ctx = soak_faults.FaultContext(None, None, random.Random(seed), [], 60.0, stopping=threading.Event())  # type: ignore[arg-type]
        schedule = soak_faults.FaultInjector(ctx, kinds, 36, 3600.0)._schedule()
        assert len(schedule) == 36 and set(kinds) <= {kind for kind, _ in schedule}
        # no kind drawn more than ceil(36 / 13) + 1 = 4 times
        assert max(Counter(kind for kind, _ in schedule).values()) <= 4, seed
        assert [moment for _, moment in schedule] == sorted(moment for _, moment in schedule)
        for kind, moment in schedule:
            assert 0.02 * 3600 <= moment <= soak_faults.EARLY_KINDS.get(kind, 0.9) * 3600, (seed, kind, moment)


def test_a_part_rests_after_a_fault_before_its_next_one(monkeypatch):
    """Two faults on one part due at once: the second starts ``rest_s`` after the first ended (the
    ninth 60-minute run paused the engine twice, 2 s apart); a fault on another part does not wait."""
    import random
    import threading

    import soak_faults

    def quick(ctx) -> str:
        time.sleep(0.2)
        return "done"

    monkeypatch.setattr(soak_faults, "FAULTS", {"a1": ("part", quick), "a2": ("part", quick), "b": ("other", quick)})
    ctx = soak_faults.FaultContext(None, None, random.Random(1), [], 60.0, stopping=threading.Event())  # type: ignore[arg-type]
    injector = soak_faults.FaultInjector(ctx, ["a1", "a2", "b"], 3, 30.0, rest_s=1.0)
    monkeypatch.setattr(injector, "_schedule", lambda: [("a1", 0.0), ("a2", 0.05), ("b", 0.1)])
    injector.start()
    deadline = time.monotonic() + 20
    while len([r for r in injector.records if r.end is not None]) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    injector.stop()
    by_kind = {r.kind: r for r in injector.records}
    assert by_kind["a2"].start - by_kind["a1"].end >= 1.0
    assert by_kind["b"].start < by_kind["a1"].end + 1.0  # another part: no rest


def test_results_name_no_path_of_the_machine_they_ran_on(tmp_path):
    """The result files are committed: the project's files relative to its root, the work folder
    as ``<work_dir>`` (``harness.BenchRun.portable``)."""
    from datetime import UTC, datetime

    import harness

    work = tmp_path / "cdclake-soak-x1"
    run = harness.BenchRun("soak", datetime.now(UTC), "abc123", tmp_path, work, False, None, machine={})
    text = f"collect at {harness.ROOT}/include/cdclake/spark/stats.py:86; log {work}/engine/server.log"
    assert run.portable(text) == "collect at include/cdclake/spark/stats.py:86; log <work_dir>/engine/server.log"


def test_a_reconcile_fault_compares_a_few_upsert_tables_not_every_table():
    """A reconcile fault's run names three of the upsert tables (a run over all of them held
    ``cdc_reconcile`` for nearly two hours in soak 7). The Airflow client here only records the
    trigger: the fault's run itself is exercised by the soak (``make soak``)."""
    import random

    import soak_faults

    class Recorder:
        def __init__(self) -> None:
            self.runs: list[tuple[str, str, dict]] = []

        def trigger(self, dag_id: str, run_id: str, conf: dict) -> None:
            self.runs.append((dag_id, run_id, conf))

    upserts = [f"t{i:02d}" for i in range(16)]
    recorder = Recorder()
    ctx = soak_faults.FaultContext(None, recorder, random.Random(7), [], 60.0, reconciled=upserts)  # type: ignore[arg-type]
    report = soak_faults.FAULTS["reconcile"][1](ctx)
    [(dag_id, _, conf)] = recorder.runs
    assert dag_id == "cdc_reconcile" and conf["mode"] == "report"
    assert len(conf["tables"]) == soak_faults.RECONCILED_PER_FAULT and set(conf["tables"]) <= set(upserts)
    assert all(name in report for name in conf["tables"])


def _passed_soak() -> dict:
    """A soak result (bench/soak.py ``run_soak``'s keys) with nothing wrong in it."""
    return {
        "caught_up_after_s": 42,
        "caught_up_error": None,
        "totals": {"lost": 0, "stale": 0, "duplicated": 0, "wrong": 0},
        "reconcile_state": "success",
        "tables": {
            "soak_t0": {"kind": "composite", "reconcile": {"only_in_source": 0, "only_in_lake": 0, "differing": 0}},
            "soak_t1": {"kind": "keyless", "reconcile": {"only_in_source": 3, "only_in_lake": 0, "differing": 0}},
        },
        "fault_errors": [],
        "unrecovered_table_runs": [],
        "airflow": {
            "failed_try_list": [
                {"dag_id": "cdc_soak_t0", "run_id": "r1", "task_id": "apply", "try": 1, "error": "engine killed"}
            ],
            "unexplained_errors": [],
        },
        "restarted_by_watcher": {},
        "sample_errors": {},
        "workload": {"ddl": 2, "transactions": 40},
    }


def test_a_soak_passes_only_when_nothing_is_lost_unrecovered_or_unexplained():
    """``make soak``'s verdict (``soak.failures``): a keyless table's reconcile counts are not
    compared (a change log's rows are replayed directly), a failed try its retry recovered is no
    failure; each kind of failure is named, an unrecovered run with its try's error."""
    import soak

    assert soak.failures(_passed_soak()) == []
    cases = {
        "not caught up": lambda r: r.update(caught_up_after_s=None, caught_up_error="behind: soak_t0"),
        "rows lost": lambda r: r["totals"].update(lost=1),
        "cdc_reconcile ended failed": lambda r: r.update(reconcile_state="failed"),
        "soak_t0: reconcile reported": lambda r: r["tables"]["soak_t0"]["reconcile"].update(differing=2),
        "fault error": lambda r: r["fault_errors"].append({"kind": "s3_outage", "error": "no s3proxy"}),
        "unrecovered: cdc_soak_t0 r1 apply try 1: engine killed": lambda r: r["unrecovered_table_runs"].append(
            {"dag_id": "cdc_soak_t0", "run_id": "r1"}
        ),
        "unexplained failed-try error: boom": lambda r: r["airflow"]["unexplained_errors"].append("boom"),
        "no DDL": lambda r: r["workload"].update(ddl=0),
    }
    for words, spoil in cases.items():
        result = _passed_soak()
        spoil(result)
        found = soak.failures(result)
        assert len(found) == 1 and words in found[0], (words, found)
    behind = _passed_soak()
    behind.update(caught_up_after_s=None, caught_up_error="behind: soak_t0")
    assert "cdc_soak_t0 r1 apply try 1: engine killed" in soak.failures(behind)[0]
