"""The apply path's benchmark (issue 6): throughput, cost growth and overhead, against baselines
measured in the same run on the same machine.

    make bench                                   # = .venv/bin/python bench/run.py --size full
    .venv/bin/python bench/run.py --size tiny    # seconds-scale smoke size
    .venv/bin/python bench/run.py --size medium --reps 3

It starts a Kafka broker of its own (free loopback port, state in a temporary folder unless
``--state-dir``), generates the workload (``bench/workload.py``) into a 3-partition topic, writes
the starting Iceberg tables, then measures one stage after another:

1. ``read_parse``: Spark reads the offset range and parses every event (the floor);
2. ``append``: the same plus an append of every parsed event to an Iceberg table;
3. ``apply``: the apply job (``apply_range``: order, reduce, merge, commit with offsets) into a
   copy of the starting table;
4. ``peer``: pyiceberg's ``Table.upsert`` of the already reduced final rows (plus a delete of the
   deleted keys) into a copy of the same starting table;
5. ``growth``: the apply of one fixed batch into a table of ``--base-rows`` and of
   ``--big-rows`` rows;
6. ``overhead``: ``airflow dags test`` of the table DAG with no new events and with one new event,
   beside a trivial one-task DAG (Airflow's floor) run the same way.

Every measured step is a process of its own (Spark stages through ``spark-submit`` with the
table DAG's settings); its wall time and the peak RSS of its whole process tree (sampled every
0.1 s with psutil) are recorded. Results: ``<out>/bench-<size>-<time>.json`` and ``.md``; the
ratios against the targets are printed. After ``apply`` and ``peer`` the tables are compared with
the source state the events were generated from; a mismatch fails the run (exit code 1).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
for _p in (ROOT / "include", ROOT / "plugins", BENCH_DIR):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import workload as wl  # noqa: E402
from cdclake.settings import Settings, spark_jars  # noqa: E402

SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "events": 2_000,
        "keys": 500,
        "base_rows": 1_000,
        "big_rows": 5_000,
        "growth_events": 400,
        "growth_keys": 100,
        "reps": 1,
    },
    "medium": {
        "events": 200_000,
        "keys": 40_000,
        "base_rows": 1_000_000,
        "big_rows": 10_000_000,
        "growth_events": 100_000,
        "growth_keys": 20_000,
        "reps": 3,
    },
    "full": {
        "events": 1_000_000,
        "keys": 200_000,
        "base_rows": 1_000_000,
        "big_rows": 10_000_000,
        "growth_events": 100_000,
        "growth_keys": 20_000,
        "reps": 3,
    },
}
"""Presets of ``--size``; ``full`` is issue 6's workload."""

TARGETS = {
    "apply/append": 2.0,
    "apply/read_parse": 3.0,
    "apply/peer": 1.0,
    "growth big/base": 1.5,
    "dag no-new/trivial": 1.5,
}
APPLY_PEAK_RSS_TARGET = 4 * 1024**3
PARTITIONS = 3
BASE_FILE_ROWS = 250_000
"""Rows per data file of the starting tables (one pyiceberg append each)."""
RESULT_PREFIX = "BENCH_STAGE_RESULT "
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# --- measuring a process tree --------------------------------------------------------------------


@dataclass
class Measured:
    """One measured process: wall time, peak RSS of its tree, and what it reported."""

    label: str
    wall_s: float
    peak_rss: int
    returncode: int
    spark_s: float | None
    """How long a JVM (spark-submit) was alive in the tree; ``None``: no Spark started."""
    result: dict[str, Any] = field(default_factory=dict)
    load_avg: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "spark_s": None if self.spark_s is None else round(self.spark_s, 3),
            "load_avg_1m": self.load_avg,
            **({"result": self.result} if self.result else {}),
        }


def measure(label: str, cmd: list[str], env: dict[str, str], log_dir: Path, timeout_s: float = 6 * 3600) -> Measured:
    """Run ``cmd``, sampling the RSS of it and all its descendants every 0.1 s.

    Raises:
        RuntimeError: the process failed (the message carries the tail of its log).
    """
    import psutil

    log = log_dir / f"{label}.log"
    peak, java_first, java_last = 0, None, None
    done = threading.Event()
    with open(log, "wb") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)

        def sample() -> None:
            nonlocal peak, java_first, java_last
            try:
                root = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                total, java = 0, False
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    break
                for p in procs:
                    try:
                        total += p.memory_info().rss
                        java = java or p.name() == "java"
                    except psutil.NoSuchProcess:
                        pass
                peak = max(peak, total)
                if java:
                    now = time.monotonic()
                    java_first = java_first or now
                    java_last = now
                done.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        wall = time.monotonic() - start
        done.set()
        sampler.join()
    text = log.read_text(errors="replace")
    if rc != 0:
        raise RuntimeError(f"{label} failed (exit code {rc}); log {log}:\n{text[-4000:]}")
    result = {}
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    spark_s = None if java_first is None else java_last - java_first
    m = Measured(label, wall, peak, rc, spark_s, result, round(os.getloadavg()[0], 2))
    print(
        f"  {label}: {wall:.1f} s wall, peak RSS {peak / 2**20:.0f} MiB"
        + (f", job {result['job_s']:.1f} s" if "job_s" in result else ""),
        flush=True,
    )
    return m


# --- the bench's stack -----------------------------------------------------------------------------


def _free_port_pair() -> int:
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            if port < 65000 and s.connect_ex(("127.0.0.1", port + 1)) != 0:
                return port
    raise RuntimeError("no free pair of loopback ports")


def child_env(settings: Settings) -> dict[str, str]:
    """This process's environment with the bench's ``CDCLAKE_*`` settings and this checkout's
    packages first on ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDCLAKE_")}
    env.update(
        {
            "CDCLAKE_STATE_DIR": str(settings.state_dir),
            "CDCLAKE_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "CDCLAKE_CATALOG_NAME": settings.catalog_name,
            "CDCLAKE_CATALOG_URI": settings.catalog_uri,
            "CDCLAKE_WAREHOUSE": settings.warehouse,
            "CDCLAKE_TABLES_CONFIG": str(settings.tables_config),
            "CDCLAKE_SPARK_MASTER": settings.spark_master,
            # the overhead stage measures spark-submit's JVM start (issue 6); the shared Connect
            # engine's overhead is bench/engine_bench.py's (make bench-engine)
            "CDCLAKE_ENGINE": "submit",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "include"), str(ROOT / "plugins"), str(BENCH_DIR)]),
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


def spark_submit(settings: Settings, script: Path, args: list[str], name: str, event_log: Path) -> list[str]:
    """The ``spark-submit`` command the table DAG's apply task runs (same master, jars, confs,
    driver memory), for ``script``, plus Spark's event log in ``event_log`` (for
    :func:`spark_profile`)."""
    from cdclake.spark.session import spark_conf

    cmd = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master",
        settings.spark_master,
        "--name",
        name,
        "--driver-memory",
        "2g",
        "--jars",
        ",".join(str(j) for j in spark_jars()),
    ]
    conf = {
        **spark_conf(settings),
        # the benchmark's local SQLite catalog has no credential: on the command line is fine here
        **settings.spark_catalog_conf(),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": event_log.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd + [str(script), *args]


def spark_profile(event_log: Path, plans: Path, top: int = 8) -> list[dict[str, Any]]:
    """Where the newest Spark application's time went: its slowest SQL executions (queries: the
    MERGE, counts, collects) from its event log, with duration and the plan's top node; their
    whole physical plans are written to ``plans``."""
    logs = sorted(
        (f for f in event_log.iterdir() if f.is_file() and not f.name.startswith(".")), key=lambda f: f.stat().st_mtime
    )
    if not logs:
        return []
    execs: dict[int, dict[str, Any]] = {}
    for line in logs[-1].read_text(errors="replace").splitlines():
        if '"Event":"org.apache.spark.sql.execution.ui.SparkListenerSQLExecution' not in line:
            continue
        ev = json.loads(line)
        if ev["Event"].endswith("SQLExecutionStart"):
            plan = ev.get("physicalPlanDescription", "")
            node = next((ln.strip() for ln in plan.splitlines() if ln.strip() and not ln.startswith("==")), "")
            execs[ev["executionId"]] = {
                "description": ev.get("description", "")[:160],
                "plan": node[:160],
                "start": ev["time"],
                "full_plan": plan,
            }
        elif ev["Event"].endswith("SQLExecutionEnd") and ev["executionId"] in execs:
            e = execs[ev["executionId"]]
            e["seconds"] = round((ev["time"] - e.pop("start")) / 1000, 2)
    slowest = sorted((e for e in execs.values() if "seconds" in e), key=lambda e: -e["seconds"])[:top]
    plans.write_text("\n\n".join(f"=== {e['seconds']} s: {e['description']}\n{e.pop('full_plan')}" for e in slowest))
    return slowest


# --- workload into Kafka ----------------------------------------------------------------------------


@dataclass
class Loaded:
    """A workload in Kafka: its topic, offset range, event coordinates and resulting source."""

    topic: str
    range_json: str
    events: int
    state: wl.SourceState
    coords: list[tuple[int, int]]
    """``(partition, offset)`` of each event, by event index."""
    meta: list[tuple[str, tuple[int, int, int], int]]
    """``(op, position, source ts_ms)`` of each event, by event index."""
    bytes: int
    load_s: float


def kafka_clients(settings: Settings):  # noqa: ANN201
    from cdclake.io.kafka import KafkaClients

    return KafkaClients.from_bootstrap(settings.kafka_bootstrap)


def produce(kafka, topic: str, events, decimal: bool, *, create: bool = True) -> tuple[list, list, int]:  # noqa: ANN001
    """Produce ``events`` to ``topic`` keyed as Debezium keys them (``cdclake.model.keys.build_key``)
    with Kafka's default partitioner, as ``cdclake.io.events.load_events`` does."""
    from cdclake.io.kafka import ensure_topic
    from cdclake.io.kafka import produce as produce_records
    from cdclake.model.envelope import KafkaCoordinates, parse_value
    from cdclake.model.keys import build_key

    if create:
        ensure_topic(kafka, topic, PARTITIONS)
    meta: list[tuple[str, tuple[int, int, int], int]] = []
    keys: dict[int, bytes] = {}
    template = None
    size = 0

    def records():  # noqa: ANN202
        nonlocal template, size
        for ev in events:
            if template is None:
                template = parse_value(ev.value, "json_with_schema", KafkaCoordinates(topic))
            key = keys.get(ev.id)
            if key is None:
                key = keys[ev.id] = build_key(
                    replace(template, op="c", before=None, after={"id": ev.id}), ("id",), "json_with_schema"
                )
            meta.append((ev.op, ev.position, ev.ts_ms))
            size += len(ev.value)
            yield key, ev.value, None

    coords = produce_records(
        kafka,
        topic,
        records(),
        **{"partitioner": "murmur2_random", "linger.ms": 20, "queue.buffering.max.kbytes": 512 * 1024},
    )
    return coords, meta, size


def load_workload(
    settings: Settings, topic: str, spec: wl.WorkloadSpec, decimal: bool, state: wl.SourceState | None = None
) -> Loaded:
    from cdclake.io.kafka import topic_watermarks
    from cdclake.model.offsets import OffsetRange

    t0 = time.monotonic()
    events, state = wl.generate(spec, decimal, state)
    kafka = kafka_clients(settings)
    coords, meta, size = produce(kafka, topic, events, decimal)
    marks = topic_watermarks(kafka, topic)
    rng = OffsetRange(topic=topic, start={p: 0 for p in marks.high}, end=dict(marks.high))
    if rng.event_count != spec.events:
        raise RuntimeError(f"topic {topic!r} holds {rng.event_count} records, expected {spec.events}")
    return Loaded(topic, rng.to_json(), spec.events, state, coords, meta, size, time.monotonic() - t0)


# --- Iceberg tables -----------------------------------------------------------------------------


def create_base_table(catalog, identifier: str, rows: int, decimal: bool) -> float:  # noqa: ANN001
    """The starting table: ``rows`` rows (ids ``0..rows-1``) as a snapshot read wrote them."""
    from cdclake.io.catalog import create_cdc_table
    from cdclake.model.types import columns_from_connect

    t0 = time.monotonic()
    columns = columns_from_connect({"fields": wl.row_fields(decimal)})
    table = create_cdc_table(catalog, identifier, columns, ("id",))
    schema = table.schema().as_arrow()
    for start in range(0, rows, BASE_FILE_ROWS):
        table.append(wl.base_rows_arrow(start, min(start + BASE_FILE_ROWS, rows), schema, decimal))
    return time.monotonic() - t0


def copy_table(catalog, source: str, target: str) -> None:  # noqa: ANN001
    """Register ``target`` on ``source``'s current metadata: a zero-copy clone (new files of
    either go to the shared location under unique names; neither deletes files)."""
    catalog.register_table(target, catalog.load_table(source).metadata_location)


def expected_rows(loaded: Loaded, ids: list[int], decimal: bool, columns: list[str]) -> dict[int, dict[str, Any]]:
    """The rows the table must hold for ``ids`` (touched, present keys): the source columns of
    the last event per key (in binlog order) and that event's metadata."""
    out = {}
    for i in ids:
        row = loaded.state.rows[i]
        index = loaded.state.written_by[i]
        op, (f, pos, r), ts_ms = loaded.meta[index]
        part, offset = loaded.coords[index]
        values = {c: wl.iceberg_value(c, row[c], decimal) for c in columns}
        values.update(
            {
                "_cdc_op": op,
                "_cdc_snapshot": False,
                "_cdc_binlog_file_seq": f,
                "_cdc_binlog_pos": pos,
                "_cdc_binlog_row": r,
                "_cdc_gtid_seq": f * 10_000_000 + pos,  # the GTID sequence the workload writes
                "_cdc_source_ts": _EPOCH + timedelta(milliseconds=ts_ms),
                "_cdc_kafka_partition": part,
                "_cdc_kafka_offset": offset,
            }
        )
        out[i] = values
    return out


def check_table(catalog, identifier: str, loaded: Loaded, existing_rows: int, decimal: bool) -> dict[str, Any]:  # noqa: ANN001
    """Compare the table with the source state the events were generated from: the same ids, and
    for every touched key the last event's values and metadata. Untouched rows are the starting
    rows (their ids are checked)."""
    import numpy as np
    import pyarrow as pa

    state = loaded.state
    touched = np.array(sorted(state.rows), dtype=np.int64)
    deleted = np.array(sorted(i for i, r in state.rows.items() if r is None), dtype=np.int64)
    present_touched = np.array(sorted(i for i, r in state.rows.items() if r is not None), dtype=np.int64)
    expected_ids = np.union1d(np.setdiff1d(np.arange(existing_rows, dtype=np.int64), deleted), present_touched)

    table = catalog.load_table(identifier)
    ids = table.scan(selected_fields=("id",)).to_arrow()["id"].to_numpy()
    problems = []
    if len(ids) != len(np.unique(ids)):
        problems.append(f"{len(ids) - len(np.unique(ids))} duplicate id(s)")
    if not np.array_equal(np.sort(ids), expected_ids):
        missing = np.setdiff1d(expected_ids, ids)
        extra = np.setdiff1d(ids, expected_ids)
        problems.append(
            f"ids differ: {len(missing)} missing (e.g. {missing[:5].tolist()}), "
            f"{len(extra)} unexpected (e.g. {extra[:5].tolist()})"
        )
    from pyiceberg.expressions import In

    columns = [f["field"] for f in wl.row_fields(decimal)]
    arrow = (
        table.scan(row_filter=In("id", present_touched.tolist())).to_arrow() if len(present_touched) else pa.table({})
    )
    got = {r["id"]: r for r in arrow.to_pylist()} if arrow.num_columns else {}
    want = expected_rows(loaded, present_touched.tolist(), decimal, columns)
    mismatched = [i for i, row in want.items() if i not in got or any(got[i][c] != v for c, v in row.items())]
    if mismatched:
        i = mismatched[0]
        diff = {c: (got.get(i, {}).get(c), v) for c, v in want[i].items() if got.get(i, {}).get(c) != v}
        problems.append(f"{len(mismatched)} touched row(s) differ; id {i}: (table, expected) {diff}")
    return {
        "table": identifier,
        "rows": int(len(ids)),
        "expected_rows": int(len(expected_ids)),
        "touched_keys": int(len(touched)),
        "checked_rows": len(want),
        "ok": not problems,
        "problems": problems,
    }


def peer_input(loaded: Loaded, arrow_schema, decimal: bool, work: Path) -> tuple[Path, Path]:  # noqa: ANN001
    """The peer's easier input: the final row of every touched, present key (Parquet) and the
    ids whose final event is a delete (JSON)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [f["field"] for f in wl.row_fields(decimal)]
    present = sorted(i for i, r in loaded.state.rows.items() if r is not None)
    records = list(expected_rows(loaded, present, decimal, columns).values())
    upserts, deletes = work / "peer-upserts.parquet", work / "peer-deletes.json"
    pq.write_table(pa.Table.from_pylist(records, schema=arrow_schema), upserts)
    deletes.write_text(json.dumps(sorted(i for i, r in loaded.state.rows.items() if r is None)))
    return upserts, deletes


# --- the overhead stage: DAG runs -------------------------------------------------------------------


def dag_run_main(args: argparse.Namespace) -> int:
    """``run.py _dag``: one ``airflow dags test`` run, of the table DAG through
    ``cdclake.local.cli.run_table_dag`` or of the trivial DAG the same way (bench dags folder)."""
    from cdclake.local.airflow_env import airflow_env
    from cdclake.local.cli import run_table_dag

    settings = Settings.from_env()
    if args.table:
        return run_table_dag(args.table, settings)
    env = airflow_env(settings)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(BENCH_DIR / "dags")
    airflow = str(Path(sys.executable).parent / "airflow")
    proc = subprocess.run([airflow, "dags", "test", "bench_trivial"], env=env, capture_output=True, text=True)
    sys.stdout.write(proc.stdout[-20000:])
    sys.stderr.write(proc.stderr[-20000:])
    ok = proc.returncode == 0 and "state=success" in (proc.stdout + proc.stderr).replace(" ", "")
    return 0 if ok else (proc.returncode or 1)


# --- the run ------------------------------------------------------------------------------------------


def _median(runs: list[Measured], attr: str) -> float | None:
    values = [getattr(m, attr) if attr != "job_s" else m.result.get("job_s") for m in runs]
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: list[Measured], events: int | None) -> dict[str, Any]:
    wall = _median(runs, "wall_s")
    job = _median(runs, "job_s")
    out = {
        "runs": [m.as_dict() for m in runs],
        "wall_s": round(wall, 3),
        "job_s": None if job is None else round(job, 3),
        "peak_rss_mib": round(max(m.peak_rss for m in runs) / 2**20, 1),
    }
    if events:
        out["events"] = events
        out["events_per_s"] = round(events / wall, 1)
        if job:
            out["events_per_s_job"] = round(events / job, 1)
    return out


def machine_info() -> dict[str, Any]:
    import psutil

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": java[0] if java else None,
        "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog
    from cdclake.local.cli import ensure_airflow_db
    from cdclake.model.layout import TOMBSTONES_SUFFIX

    preset = dict(SIZES[args.size])
    for key in preset:
        if getattr(args, key) is not None:
            preset[key] = getattr(args, key)
    p = argparse.Namespace(**preset)
    run_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    tag = uuid.uuid4().hex[:6]
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(args.state_dir).resolve() if args.state_dir else Path(tempfile.mkdtemp(prefix="cdclake-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    if args.external_broker:
        settings = Settings.from_env()
    else:
        settings = Settings.from_env(
            {"CDCLAKE_STATE_DIR": str(work / "stack"), "CDCLAKE_KAFKA_BOOTSTRAP": f"127.0.0.1:{_free_port_pair()}"}
        )
    settings = settings.model_copy(update={"tables_config": work / "bench-tables.yaml"})
    env = child_env(settings)
    decimal = wl.decimal_supported()
    ns = f"bench_{tag}"
    info = {
        "started": run_id,
        "size": args.size,
        "params": vars(p),
        "machine": machine_info(),
        "decimal_column": "decimal(10,2)"
        if decimal
        else "binary: cdclake does not map org.apache.kafka.connect.data.Decimal yet; same base64 bytes on the wire",
        "spark_master": settings.spark_master,
        "work_dir": str(work),
    }
    print(
        f"cdclake benchmark, size {args.size}: {p.events} events over {p.keys} keys into {p.base_rows} rows; "
        f"growth {p.growth_events} events into {p.base_rows} and {p.big_rows} rows; {p.reps} repetition(s); "
        f"work dir {work}",
        flush=True,
    )

    from cdclake.local import stack

    started_broker = False
    if not args.external_broker:
        print(stack.start_broker(settings), flush=True)
        started_broker = True
    stages: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    try:
        catalog = load_catalog(settings)
        catalog.create_namespace_if_not_exists(ns)
        setup: dict[str, Any] = {}
        print("generating and loading the workload ...", flush=True)
        main_spec = wl.WorkloadSpec(events=p.events, keys=p.keys, existing_rows=p.base_rows, new_id_start=p.big_rows)
        main = load_workload(settings, f"bench.{tag}.orders", main_spec, decimal)
        growth_spec = wl.WorkloadSpec(
            events=p.growth_events, keys=p.growth_keys, existing_rows=p.base_rows, new_id_start=p.big_rows, seed=7
        )
        growth = load_workload(settings, f"bench.{tag}.orders_growth", growth_spec, decimal)
        for name, loaded in (("workload", main), ("growth_workload", growth)):
            setup[name] = {
                "topic": loaded.topic,
                "events": loaded.events,
                "bytes": loaded.bytes,
                "mean_event_bytes": round(loaded.bytes / loaded.events),
                "ops": dict(loaded.state.ops),
                "multi_row_binlog_events": loaded.state.multi_row_events,
                "keys_touched": len(loaded.state.rows),
                "load_s": round(loaded.load_s, 1),
            }
        print(
            f"  loaded {main.events} + {growth.events} events ({main.bytes / 2**20:.0f} MiB + "
            f"{growth.bytes / 2**20:.0f} MiB) in {main.load_s + growth.load_s:.0f} s",
            flush=True,
        )
        print("writing the starting tables ...", flush=True)
        setup["base_table_s"] = round(create_base_table(catalog, f"{ns}.base", p.base_rows, decimal), 1)
        setup["big_table_s"] = round(create_base_table(catalog, f"{ns}.big", p.big_rows, decimal), 1)
        info["setup"] = setup
        arrow_schema = catalog.load_table(f"{ns}.base").schema().as_arrow()
        upserts, deletes = peer_input(main, arrow_schema, decimal, work)

        event_log = logs / "spark-events"
        event_log.mkdir(exist_ok=True)

        def stage(label: str, script: str, extra: list[str]) -> Measured:
            m = measure(
                label, spark_submit(settings, BENCH_DIR / script, extra, f"bench-{label}", event_log), env, logs
            )
            m.result["slowest_queries"] = spark_profile(event_log, logs / f"{label}-plans.txt")
            return m

        runs: dict[str, list[Measured]] = {
            k: [] for k in ("read_parse", "append", "apply", "peer", "growth_base", "growth_big")
        }
        from cdclake.io.catalog import create_cdc_table
        from cdclake.model.types import columns_from_connect

        for rep in range(1, p.reps + 1):
            print(f"repetition {rep}/{p.reps}", flush=True)
            runs["read_parse"].append(
                stage(
                    f"read_parse_r{rep}",
                    "spark_stage.py",
                    ["read_parse", "--range", main.range_json, "--namespace", ns, "--table", "base"],
                )
            )
            create_cdc_table(
                catalog, f"{ns}.append_r{rep}", columns_from_connect({"fields": wl.row_fields(decimal)}), ("id",)
            )
            runs["append"].append(
                stage(
                    f"append_r{rep}",
                    "spark_stage.py",
                    ["append", "--range", main.range_json, "--namespace", ns, "--table", f"append_r{rep}"],
                )
            )
            copy_table(catalog, f"{ns}.base", f"{ns}.apply_r{rep}")
            runs["apply"].append(
                stage(
                    f"apply_r{rep}",
                    "spark_stage.py",
                    ["apply", "--range", main.range_json, "--namespace", ns, "--table", f"apply_r{rep}"],
                )
            )
            copy_table(catalog, f"{ns}.base", f"{ns}.peer_r{rep}")
            runs["peer"].append(
                measure(
                    f"peer_r{rep}",
                    [
                        sys.executable,
                        str(BENCH_DIR / "peer_upsert.py"),
                        "--table",
                        f"{ns}.peer_r{rep}",
                        "--upserts",
                        str(upserts),
                        "--deletes",
                        str(deletes),
                    ],
                    env,
                    logs,
                )
            )
            if rep == 1:
                checks["apply"] = check_table(catalog, f"{ns}.apply_r1", main, p.base_rows, decimal)
                checks["peer"] = check_table(catalog, f"{ns}.peer_r1", main, p.base_rows, decimal)
                print(f"  check apply: {checks['apply']['ok']}, peer: {checks['peer']['ok']}", flush=True)
            for which, base in (("growth_base", "base"), ("growth_big", "big")):
                copy_table(catalog, f"{ns}.{base}", f"{ns}.{which}_r{rep}")
                extra = ["apply", "--range", growth.range_json, "--namespace", ns, "--table", f"{which}_r{rep}"]
                runs[which].append(
                    stage(f"{which}_r{rep}", "spark_stage.py", extra + (["--count-after"] if rep == 1 else []))
                )
        # the growth batch deletes and updates only ids below base_rows (rows of both tables) and
        # inserts ids from big_rows up (rows of neither)
        final = growth.state.rows
        net = sum(1 for i, r in final.items() if r is not None and i >= p.big_rows) - sum(
            1 for i, r in final.items() if r is None and i < p.base_rows
        )
        for which, rows in (("growth_base", p.base_rows), ("growth_big", p.big_rows)):
            got = runs[which][0].result.get("rows_after")
            checks[which] = {"rows": got, "expected_rows": rows + net, "ok": got == rows + net}

        for name in ("read_parse", "append", "apply", "peer"):
            stages[name] = summarize(runs[name], p.events)
        stages["growth_base"] = summarize(runs["growth_base"], p.growth_events) | {"table_rows": p.base_rows}
        stages["growth_big"] = summarize(runs["growth_big"], p.growth_events) | {"table_rows": p.big_rows}

        print("overhead: DAG runs (airflow dags test) ...", flush=True)
        import yaml

        settings.tables_config.write_text(
            yaml.safe_dump(
                {
                    "defaults": {"schedule": None, "retries": 0, "tags": ["bench"]},
                    "tables": [
                        {
                            "name": "bench_orders",
                            "topic": main.topic,
                            "namespace": ns,
                            "table": "orders",
                            "primary_key": ["id"],
                        }
                    ],
                }
            )
        )
        copy_table(catalog, f"{ns}.apply_r1", f"{ns}.orders")
        copy_table(catalog, f"{ns}.apply_r1{TOMBSTONES_SUFFIX}", f"{ns}.orders{TOMBSTONES_SUFFIX}")
        ensure_airflow_db(settings)
        dag = [sys.executable, str(BENCH_DIR / "run.py"), "_dag"]
        table = catalog.load_table(f"{ns}.orders")
        before = table.current_snapshot().snapshot_id
        dag_runs: dict[str, list[Measured]] = {"trivial": [], "no_new": [], "one_event": []}
        if p.reps > 1:  # first runs after a migration pay for cold caches: not measured
            measure("warmup_trivial", dag + ["--trivial"], env, logs)
            measure("warmup_no_new", dag + ["--table", "bench_orders"], env, logs)
        for rep in range(1, p.reps + 1):
            dag_runs["trivial"].append(measure(f"dag_trivial_r{rep}", dag + ["--trivial"], env, logs))
            dag_runs["no_new"].append(measure(f"dag_no_new_r{rep}", dag + ["--table", "bench_orders"], env, logs))
        no_new_ok = table.refresh().current_snapshot().snapshot_id == before
        one_ok = True
        for rep in range(1, p.reps + 1):
            ev = wl.update_event(main.state, rep, decimal)
            produce(kafka_clients(settings), main.topic, [ev], decimal, create=False)
            dag_runs["one_event"].append(measure(f"dag_one_event_r{rep}", dag + ["--table", "bench_orders"], env, logs))
            from pyiceberg.expressions import EqualTo

            row = table.refresh().scan(row_filter=EqualTo("id", rep)).to_arrow().to_pylist()
            one_ok = (
                one_ok
                and len(row) == 1
                and row[0]["quantity"] == ev.after["quantity"]
                and row[0]["_cdc_binlog_pos"] == ev.position[1]
            )
        checks["dag_no_new"] = {
            "ok": no_new_ok and all(m.spark_s is None for m in dag_runs["no_new"]),
            "snapshot_unchanged": no_new_ok,
            "spark_started": any(m.spark_s is not None for m in dag_runs["no_new"]),
        }
        checks["dag_one_event"] = {"ok": one_ok}
        for name, ms in dag_runs.items():
            stages[f"dag_{name}"] = summarize(ms, None)
        stages["dag_one_event"]["spark_s"] = round(statistics.median(m.spark_s or 0 for m in dag_runs["one_event"]), 3)
    finally:
        if started_broker:
            print(stack.stop_broker(settings), flush=True)
    info["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result = {**info, "stages": stages, "ratios": ratios(stages), "checks": checks}
    stem = out_dir / f"bench-{args.size}-{run_id}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str))
    stem.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"results: {stem}.json, {stem}.md")
    if not args.keep_state and not args.state_dir:
        shutil.rmtree(work, ignore_errors=True)
    ok = all(c["ok"] for c in checks.values())
    if not ok:
        print("CORRECTNESS CHECK FAILED: " + json.dumps({k: c for k, c in checks.items() if not c["ok"]}, default=str))
    return 0 if ok else 1


def ratios(stages: dict[str, Any]) -> dict[str, Any]:
    """Each target ratio (medians of wall seconds), whether it is met, and the job-only ratio."""

    def ratio(a: str, b: str, key: str = "wall_s") -> float | None:
        x, y = stages[a].get(key), stages[b].get(key)
        return round(x / y, 3) if x and y else None

    pairs = {
        "apply/append": ("apply", "append"),
        "apply/read_parse": ("apply", "read_parse"),
        "apply/peer": ("apply", "peer"),
        "growth big/base": ("growth_big", "growth_base"),
        "dag no-new/trivial": ("dag_no_new", "dag_trivial"),
    }
    out = {}
    for name, (a, b) in pairs.items():
        value = ratio(a, b)
        out[name] = {
            "wall": value,
            "job": ratio(a, b, "job_s"),
            "target": TARGETS[name],
            "met": value is not None and value <= TARGETS[name],
        }
    peak = stages["apply"]["peak_rss_mib"]
    out["apply peak RSS GiB"] = {
        "wall": round(peak / 1024, 2),
        "target": 4.0,
        "met": peak * 2**20 <= APPLY_PEAK_RSS_TARGET,
    }
    return out


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    p = result["params"]
    lines = [
        f"### cdclake benchmark: size {result['size']}, {result['started']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; {m['os']}; Python {m['python']}; "
        f"{m['java']}; Spark `{result['spark_master']}`. Load average (1 min) at start {m['load_avg_at_start'][0]}, "
        f"at end {m.get('load_avg_at_end', ['?'])[0]} (the machine is shared).",
        "",
        f"Workload: {p['events']:,} events over {p['keys']:,} keys into a table of {p['base_rows']:,} rows; growth batch "
        f"{p['growth_events']:,} events into {p['base_rows']:,} and {p['big_rows']:,} rows; median of {p['reps']} run(s). "
        f"Decimal column: {result['decimal_column']}.",
        "",
        "| stage | wall s (median) | job s (median) | events/s (wall) | peak RSS MiB (tree) |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {
        "read_parse": "1. read+parse (floor)",
        "append": "2. append (write floor)",
        "apply": "3. apply (ours)",
        "peer": "4. peer: pyiceberg upsert of reduced rows",
        "growth_base": f"5. growth: apply into {p['base_rows']:,} rows",
        "growth_big": f"5. growth: apply into {p['big_rows']:,} rows",
        "dag_trivial": "6. trivial one-task DAG run",
        "dag_no_new": "6. table DAG run, no new events",
        "dag_one_event": "6. table DAG run, one event",
    }
    for key, label in names.items():
        s = result["stages"].get(key)
        if not s:
            continue
        eps = f"{s['events_per_s']:,.0f}" if "events_per_s" in s else ""
        job = s["job_s"] if s.get("job_s") is not None else (f"spark {s['spark_s']}" if s.get("spark_s") else "")
        lines.append(f"| {label} | {s['wall_s']} | {job} | {eps} | {s['peak_rss_mib']:,.0f} |")
    lines += ["", "| ratio | measured (wall) | job only | target | met |", "|---|---:|---:|---:|---|"]
    for name, r in result["ratios"].items():
        lines.append(
            f"| {name} | {r['wall']} | {r.get('job') if r.get('job') is not None else ''} | <= {r['target']} | "
            f"{'yes' if r['met'] else '**no**'} |"
        )
    lines += [
        "",
        "Checks: " + ", ".join(f"{k} {'ok' if c['ok'] else 'FAILED'}" for k, c in result["checks"].items()),
        "",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench/run.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="full", help="preset (full: issue 6's workload)")
    parser.add_argument("--events", type=int, help="events of the main workload")
    parser.add_argument("--keys", type=int, help="keys the main workload touches")
    parser.add_argument("--base-rows", type=int, help="rows of the starting table")
    parser.add_argument("--big-rows", type=int, help="rows of the big table of the growth stage")
    parser.add_argument("--growth-events", type=int, help="events of the growth batch")
    parser.add_argument("--growth-keys", type=int, help="keys of the growth batch")
    parser.add_argument("--reps", type=int, help="repetitions of each measurement (median)")
    parser.add_argument("--out", default=str(BENCH_DIR / "results"), help="folder of the result files")
    parser.add_argument("--state-dir", help="work folder (default: a temporary one, deleted afterwards)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temporary work folder")
    parser.add_argument(
        "--external-broker",
        action="store_true",
        help="use the broker and catalog of the CDCLAKE_* environment instead of starting a broker",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_dag"]:
        dag_parser = argparse.ArgumentParser(prog="bench/run.py _dag")
        dag_parser.add_argument("--table")
        dag_parser.add_argument("--trivial", action="store_true")
        return dag_run_main(dag_parser.parse_args(argv[1:]))
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
