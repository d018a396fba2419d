"""Reconcile's benchmark: "Reconcile of a 1M-row table with 10 differing rows: time and bytes
moved, against the naive peer (export both sides in full and compare)."

    make bench-reconcile                                    # = .venv/bin/python bench/reconcile_bench.py
    .venv/bin/python bench/reconcile_bench.py --rows 20000  # a smoke run of a minute or two

It starts a stack of its own (state under ``.bench/`` unless ``--state-dir``, free loopback ports):
the Kafka broker, MariaDB and Kafka Connect with the Debezium MariaDB connector (reconcile's
``wait_for_lake`` sends a marker through the connector's signal table and waits for it on Kafka).
Then:

1. the source table ``inventory.bench_recon`` gets ``--rows`` rows, loaded with
   ``sql_log_bin = 0`` (Debezium streams none of them: the table's topic stays empty);
2. the Iceberg table ``bench.bench_recon`` is written directly with pyiceberg (the same rows, as a
   snapshot read would have written them), then 10 differences are injected into it: 4 rows with
   an edited ``note``, 3 rows deleted, 3 rows the source does not have;
3. ``reconcile_table`` (report mode, ``--chunk-rows`` per chunk) and the naive peer (``SELECT *``
   of the source and a full pyiceberg scan of the lake into dicts of canonical values, then a
   comparison of the dicts) each run in a process of their own (so that the peak RSS is theirs
   alone, not the loading's); each must find exactly the 10 injected keys.

Figures per method: wall time; bytes the source sent (delta of MariaDB's global ``Bytes_sent``
around the call, the status queries' own bytes subtracted); bytes read from the lake, an
*estimate*: the size of the table's files in its current snapshot times the number of full scans
made (reconcile scans once for the chunk digests and once per row-level round, counted as it
runs; the peer once); the bytes the process read through system calls (``rchar``: lake files and
sockets, a measured figure beside the estimate); peak RSS of the process.

Results: ``<out>/reconcile-<time>.json`` and ``.md``; the last line printed is the headline as
one JSON object. Exit code 1 when a method did not find exactly the injected differences.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import statistics
import sys
import time
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdclake.io.source_db import SourceDatabase
from cdclake.model.config import TableConfig
from cdclake.model.types import ColumnSpec, decimal_encoding
from cdclake.settings import Settings
from harness import (
    BROKER,
    CONNECT,
    MARIADB,
    BenchRun,
    add_run_options,
    bench_parser,
    in_child,
    stack_settings,
    start_parts,
    stop_parts,
    summary_head,
)
from measure import median_run, ratio

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.catalog import Catalog

log = logging.getLogger("reconcile_bench")

DATABASE = "inventory"
TABLE = "bench_recon"
NAMESPACE = "bench"
DDL = f"""CREATE TABLE {TABLE} (
  id INT PRIMARY KEY,
  customer VARCHAR(40),
  qty INT,
  amount DECIMAL(12,2),
  placed DATETIME(6),
  note VARCHAR(80) NULL
)"""
COLUMNS = [
    ColumnSpec("id", "int", True, "int32"),
    ColumnSpec("customer", "string", False, "string"),
    ColumnSpec("qty", "int", False, "int32"),
    ColumnSpec("amount", "decimal(12,2)", False, decimal_encoding(12, 2)),
    ColumnSpec("placed", "timestamp", False, "io.debezium.time.MicroTimestamp"),
    ColumnSpec("note", "string", False, "string"),
]
"""The Iceberg columns the schema sync would make of the source table (the encodings are the
ones Debezium gives with the connector's settings)."""
NAMES = [c.name for c in COLUMNS]
SNAPSHOT_METADATA = {
    "_cdc_op": "r",
    "_cdc_snapshot": True,
    "_cdc_binlog_file_seq": 1,
    "_cdc_binlog_pos": 4,
    "_cdc_binlog_row": 0,
}
"""The metadata columns of every lake row (a snapshot read at the binlog's start); the other
``_cdc_*`` columns are null."""
PARTS = (BROKER, MARIADB, CONNECT)
"""The stack of the bench's own: reconcile's ``wait_for_lake`` sends a marker through the
connector's signal table and waits for it on Kafka."""
WORK_PARENT = ".bench"
"""The checkout's folder (git-ignored) of the temporary work folder, rather than the system's
temporary folder."""
LAKE_FILE_ROWS = 250_000
"""Rows per pyiceberg append (one data file each) of the lake table."""
EDITED, DELETED, ADDED = 4, 3, 3
"""The injected differences: rows with an edited ``note``, rows deleted, rows only in the lake."""
_PLACED_START = datetime(2024, 1, 1)
_RowTuple = tuple[int, str, int, Decimal, datetime, str | None]


# --- the table's rows ----------------------------------------------------------------------------


def source_row(n: int) -> _RowTuple:
    """Row ``n`` (1-based) of the source table. Its id is ``2n``: the rows only the lake holds
    get odd ids (:func:`lake_only_row`), so they fall into chunks across the table like the
    other differences."""
    cents = n * 7919 % 10_000_000
    return (
        2 * n,
        f"customer-{n % 7919:05d}",
        n % 97,
        Decimal(f"{cents // 100}.{cents % 100:02d}"),
        _PLACED_START + timedelta(seconds=n * 37, microseconds=n * 13 % 1_000_000),
        None if n % 7 == 0 else f"order {n}: deliver to gate {n % 31}",
    )


def lake_only_row(n: int) -> _RowTuple:
    """A row with the odd id ``2n - 1``, which the source does not have."""
    row = source_row(n)
    return (2 * n - 1, *row[1:5], "only in the lake")


def lake_arrow(rows: list[_RowTuple], schema: pa.Schema) -> pa.Table:
    """``rows`` as the lake table holds them: the source columns and :data:`SNAPSHOT_METADATA`."""
    import pyarrow as pa

    n = len(rows)
    data: dict[str, Any] = {name: list(col) for name, col in zip(NAMES, zip(*rows, strict=True), strict=True)}
    data.update({name: [value] * n for name, value in SNAPSHOT_METADATA.items()})
    for f in schema:
        if f.name not in data:
            data[f.name] = pa.nulls(n, f.type)
    return pa.Table.from_pydict(data, schema=schema)


# --- the stack -------------------------------------------------------------------------------------


def wait_for_connector(settings: Settings, db: SourceDatabase, timeout_s: float = 180.0) -> float:
    """Wait until the connector streams: a marker sent through its signal table shows on the
    signal table's topic (which reconcile's ``wait_for_lake`` needs to exist). A marker is sent
    every 5 s: one committed before the connector's snapshot position is never streamed (nor
    snapshotted: Debezium skips its signal table's rows). Returns seconds.

    Raises:
        RuntimeError: not within ``timeout_s``.
    """
    from cdclake.io.kafka import KafkaClients, read_topic
    from cdclake.io.source_db import send_marker

    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    topic = f"{settings.topic_prefix}.{settings.signal_table}"
    prefix = f"bench-ready-{os.getpid()}-".encode()
    t0 = time.monotonic()
    sent = 0
    while time.monotonic() - t0 < timeout_s:
        if time.monotonic() - t0 >= 5 * sent:
            send_marker(db, settings.signal_table, f"{prefix.decode()}{sent}")
            sent += 1
        messages = read_topic(kafka, topic, group_id="reconcile-bench")
        if messages is not None and any(prefix in (m.value() or b"") for m in messages):
            return time.monotonic() - t0
        time.sleep(1.0)
    raise RuntimeError(f"the connector did not stream a marker to {topic!r} within {timeout_s:.0f} s")


def load_source(settings: Settings, rows: int, batch: int) -> float:
    """Create the source table and load ``rows`` rows behind Debezium's back (``sql_log_bin =
    0``) in multi-row INSERTs of ``batch`` rows. Returns seconds."""
    from cdclake_dev.chain import mariadb_connect

    t0 = time.monotonic()
    insert = f"INSERT INTO {TABLE} (id, customer, qty, amount, placed, note) VALUES (%s, %s, %s, %s, %s, %s)"
    with mariadb_connect(settings, database=DATABASE) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(DDL)  # logged: the connector's schema history knows the table
        cur.execute("SET SESSION sql_log_bin = 0")
        for start in range(1, rows + 1, batch):
            # pymysql turns executemany of an INSERT ... VALUES into multi-row statements
            cur.executemany(insert, [source_row(n) for n in range(start, min(start + batch, rows + 1))])
        cur.execute("SET SESSION sql_log_bin = 1")
    return time.monotonic() - t0


def create_lake(catalog: Catalog, identifier: str, rows: int) -> float:
    """Create the Iceberg table and append the source's rows in appends of
    :data:`LAKE_FILE_ROWS`. Returns seconds."""
    from cdclake.io.catalog import create_cdc_table, load_table_or_none

    t0 = time.monotonic()
    if load_table_or_none(catalog, identifier) is not None:  # a reused --state-dir
        catalog.purge_table(identifier)
    table = create_cdc_table(catalog, identifier, COLUMNS, ("id",))
    schema = table.schema().as_arrow()
    for start in range(1, rows + 1, LAKE_FILE_ROWS):
        table.append(lake_arrow([source_row(n) for n in range(start, min(start + LAKE_FILE_ROWS, rows + 1))], schema))
    return time.monotonic() - t0


def inject_differences(catalog: Catalog, identifier: str, rows: int, seed: int) -> dict[str, list[int]]:
    """Edit the lake behind the apply's back (pyiceberg): :data:`EDITED` rows get another
    ``note`` (delete + append, their ``_cdc_*`` columns kept), :data:`DELETED` rows are deleted,
    :data:`ADDED` rows with new ids are appended. Returns the keys reconcile must report."""
    import pyarrow as pa
    from pyiceberg.expressions import In

    rng = random.Random(seed)
    picked = rng.sample(range(1, rows + 1), EDITED + DELETED)
    edited = sorted(2 * n for n in picked[:EDITED])
    deleted = sorted(2 * n for n in picked[EDITED:])
    added_n = rng.sample(range(1, rows + 1), ADDED)
    table = catalog.load_table(identifier)
    schema = table.schema().as_arrow()
    touched = In("id", [*edited, *deleted])
    old = table.scan(row_filter=touched).to_arrow().to_pylist()
    if len(old) != EDITED + DELETED:
        raise RuntimeError(f"expected {EDITED + DELETED} lake rows for {edited + deleted}, found {len(old)}")
    table.delete(touched)
    new = [{**r, "note": f"edited in the lake ({r['id']})"} for r in old if r["id"] in edited]
    new += lake_arrow([lake_only_row(n) for n in added_n], schema).to_pylist()
    table.append(pa.Table.from_pylist(new, schema=schema))
    return {
        "differing": edited,
        "only_in_source": deleted,
        "only_in_lake": sorted(2 * n - 1 for n in added_n),
    }


def lake_files(catalog: Catalog, identifier: str) -> tuple[int, int]:
    """``(bytes, files)`` of the table's current snapshot: data and delete files, which a full
    scan reads."""
    files = catalog.load_table(identifier).inspect.files()
    return int(sum(files["file_size_in_bytes"].to_pylist())), files.num_rows


# --- measuring (each method in a process of its own) ----------------------------------------------


def bytes_sent(db: SourceDatabase) -> int:
    """MariaDB's ``Bytes_sent``: bytes sent to every client since the server started (the
    connector's binlog stream included; it carries only reconcile's markers here)."""
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Bytes_sent'")
        return int(cur.fetchone()[1])


def read_syscall_bytes() -> int:
    """``rchar`` of ``/proc/self/io``: bytes this process read through system calls (files and
    sockets, page cache or not); 0 where there is no such file."""
    try:
        with open("/proc/self/io") as f:
            return next((int(line.split()[1]) for line in f if line.startswith("rchar:")), 0)
    except OSError:
        return 0


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Meter:
    """Wall time, source bytes and read bytes around a block (the status queries' own bytes,
    measured before it, subtracted)."""

    def __init__(self, db: SourceDatabase) -> None:
        self.db = db
        a = bytes_sent(db)
        self.status_overhead = bytes_sent(db) - a
        self.rss_before = _rss()

    def __enter__(self) -> _Meter:
        self.sent0 = bytes_sent(self.db)
        self.read0 = read_syscall_bytes()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.monotonic() - self.t0
        self.read_bytes = read_syscall_bytes() - self.read0
        self.source_bytes = bytes_sent(self.db) - self.sent0 - self.status_overhead

    def figures(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "source_bytes": self.source_bytes,
            "process_read_bytes": self.read_bytes,
            "rss_before_mib": round(self.rss_before / 2**20, 1),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }


def _child_setup() -> None:
    logging.basicConfig(level=logging.INFO, format="    %(name)s: %(message)s", stream=sys.stdout, force=True)
    # modules either method loads on first use, loaded before the measurement (their files are
    # not the lake's bytes)
    import confluent_kafka  # noqa: F401
    import pyarrow.dataset  # noqa: F401
    import pyarrow.parquet  # noqa: F401
    import pyiceberg.io.pyarrow  # noqa: F401
    import pyiceberg.table  # noqa: F401
    import pymysql.cursors  # noqa: F401

    import cdclake.pipeline.reconcile  # noqa: F401


def static_catch_up(end: dict[int, int]) -> None:
    """Reconcile's ``CatchUp`` for this bench's static table: nothing was streamed (the rows were
    loaded with ``sql_log_bin = 0``), so the table's topic is empty and there is nothing to apply.
    The lake table has no CDC commit summary (it was written directly), so the committed offsets
    cannot be compared; this checks the premise instead: the topic's end offsets are all 0.

    Raises:
        RuntimeError: the topic has events (the source changed behind the bench's back).
    """
    if any(end.values()):
        raise RuntimeError(f"the table's topic has events {end}: the bench's table is not static")
    log.info("catch-up: the table's topic is empty (end offsets %s): nothing to apply", end)


class _Timeline(logging.Handler):
    """Reconcile's log messages with their time since the start (where the time goes)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.t0 = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.events.append((round(time.monotonic() - self.t0, 2), record.getMessage()[:200]))


def measure_reconcile(settings: Settings, cfg: TableConfig, db: SourceDatabase, chunk_rows: int) -> dict[str, Any]:
    """One ``reconcile_table`` run (report mode), in this (child) process."""
    _child_setup()
    from cdclake.io.kafka import KafkaClients
    from cdclake.pipeline import reconcile as rec

    scans = 0
    scan = rec._scan

    def counting_scan(lake: Any, fields: Any, row_filter: Any = None) -> Any:
        # counts reconcile's scans of the table (a row-level round's, filtered by its chunks' key
        # ranges, counts as a full one: the lake bytes are an upper bound)
        nonlocal scans
        scans += 1
        return scan(lake, fields, row_filter)

    rec._scan = counting_scan
    timeline = _Timeline()
    for name in ("cdclake", log.name):
        logging.getLogger(name).addHandler(timeline)
    kafka = KafkaClients.from_bootstrap(settings.kafka_bootstrap)
    meter = _Meter(db)
    try:
        with meter:
            timeline.t0 = time.monotonic()
            result = rec.reconcile_table(
                settings, kafka, cfg, db, rec.ReconcileParams(chunk_rows=chunk_rows), static_catch_up
            )
    finally:
        rec._scan = scan
        for name in ("cdclake", log.name):
            logging.getLogger(name).removeHandler(timeline)
    return {
        **meter.figures(),
        "lake_scans": scans,
        "chunks": result.chunks,
        "differing_chunks": len(result.outcomes),
        "source_rows": result.source_rows,
        "lake_rows": result.lake_rows,
        "found": {w: sorted(k[0] for k in result.keys(w)) for w in ("differing", "only_in_source", "only_in_lake")},
        "unsettled": result.unsettled,
        "differing_columns": {str(k[0]): cols for o in result.outcomes for k, cols in o.differing.items()},
        "summary": result.summary(),
        "timeline": timeline.events,
    }


def measure_naive(settings: Settings, cfg: TableConfig, db: SourceDatabase) -> dict[str, Any]:
    """The naive peer, in this (child) process: both sides exported in full into dicts
    ``{key: canonical texts}`` (the source with ``SELECT *`` streamed through an unbuffered
    cursor, the lake with one pyiceberg scan), then the dicts compared."""
    _child_setup()
    import pymysql.cursors

    from cdclake.io.catalog import load_catalog
    from cdclake.io.schema_evolution import source_schema
    from cdclake.io.source_db import source_columns
    from cdclake.model.reconcile import canonical_text, compare_columns, quote

    meter = _Meter(db)
    with meter:
        _prefix, database, table = cfg.topic.rsplit(".", 2)
        lake = load_catalog(settings).load_table(cfg.identifier)
        columns, _skipped = compare_columns(source_columns(db, database, table), source_schema(lake).columns)
        names = [c.name for c in columns]
        source: dict[tuple[Any, ...], tuple[str | None, ...]] = {}
        with db.connect() as conn, conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(f"SELECT * FROM {quote(database)}.{quote(table)}")
            position = {d[0]: i for i, d in enumerate(cur.description)}
            at = [position[n] for n in names]
            key_at = [position[k] for k in cfg.primary_key]
            while batch := cur.fetchmany(10_000):
                for r in batch:
                    source[tuple(r[i] for i in key_at)] = tuple(
                        canonical_text(c.kind, r[i]) for c, i in zip(columns, at, strict=True)
                    )
        in_lake: dict[tuple[Any, ...], tuple[str | None, ...]] = {}
        for arrow_batch in lake.scan(selected_fields=tuple(names)).to_arrow_batch_reader():
            for row in arrow_batch.to_pylist():
                in_lake[tuple(row[k] for k in cfg.primary_key)] = tuple(
                    canonical_text(c.kind, row[c.name]) for c in columns
                )
        found = {
            "differing": sorted(k[0] for k in source.keys() & in_lake.keys() if source[k] != in_lake[k]),
            "only_in_source": sorted(k[0] for k in source.keys() - in_lake.keys()),
            "only_in_lake": sorted(k[0] for k in in_lake.keys() - source.keys()),
        }
    return {**meter.figures(), "lake_scans": 1, "source_rows": len(source), "lake_rows": len(in_lake), "found": found}


# --- the run --------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog
    from cdclake.io.kafka import KafkaClients, ensure_topic
    from cdclake_dev import chain

    bench = BenchRun.begin(args, "reconcile", "reconcile-", WORK_PARENT)
    settings = stack_settings(bench.work, PARTS)
    cfg = TableConfig.model_validate(
        {
            "name": TABLE,
            "topic": f"{settings.topic_prefix}.{DATABASE}.{TABLE}",
            "namespace": NAMESPACE,
            "table": TABLE,
            "primary_key": ["id"],
        }
    )
    db = chain.local_source(settings, database=DATABASE)
    info = bench.info(params={"rows": args.rows, "chunk_rows": args.chunk_rows, "reps": args.reps, "seed": args.seed})
    print(
        f"reconcile benchmark: {args.rows:,} rows, {EDITED + DELETED + ADDED} differing, chunks of "
        f"{args.chunk_rows:,} rows, {args.reps} repetition(s); work dir {bench.work}",
        flush=True,
    )
    setup: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {"reconcile": [], "naive": []}
    try:
        t0 = time.monotonic()
        start_parts(settings, PARTS)
        setup["connector_ready_s"] = round(wait_for_connector(settings, db), 1)
        setup["stack_s"] = round(time.monotonic() - t0, 1)
        print(f"  stack up, connector streaming ({setup['stack_s']} s)", flush=True)
        ensure_topic(KafkaClients.from_bootstrap(settings.kafka_bootstrap), cfg.topic, 1)

        print(f"loading {args.rows:,} rows into the source ({DATABASE}.{TABLE}, sql_log_bin = 0) ...", flush=True)
        setup["source_load_s"] = round(load_source(settings, args.rows, args.insert_batch), 1)
        print(f"  {setup['source_load_s']} s", flush=True)
        catalog = load_catalog(settings)
        print(f"writing the lake table {cfg.identifier} ...", flush=True)
        setup["lake_write_s"] = round(create_lake(catalog, cfg.identifier, args.rows), 1)
        expected = inject_differences(catalog, cfg.identifier, args.rows, args.seed)
        lake_bytes, lake_file_count = lake_files(catalog, cfg.identifier)
        setup.update({"lake_bytes": lake_bytes, "lake_files": lake_file_count, "injected": expected})
        print(
            f"  {setup['lake_write_s']} s; {lake_file_count} file(s), {lake_bytes / 2**20:.1f} MiB; injected: "
            + ", ".join(f"{k} {v}" for k, v in expected.items()),
            flush=True,
        )

        for rep in range(1, args.reps + 1):
            print(f"repetition {rep}/{args.reps}: reconcile_table ...", flush=True)
            r = in_child(measure_reconcile, settings, cfg, db, args.chunk_rows)
            r["lake_bytes_est"] = lake_bytes * r["lake_scans"]
            runs["reconcile"].append(r)
            print(f"  {r['summary']}", flush=True)
            print(f"repetition {rep}/{args.reps}: naive peer (full export of both sides) ...", flush=True)
            n = in_child(measure_naive, settings, cfg, db)
            n["lake_bytes_est"] = lake_bytes * n["lake_scans"]
            runs["naive"].append(n)
            for label, m in (("reconcile", r), ("naive", n)):
                print(
                    f"  {label}: {m['wall_s']:.2f} s, source sent {m['source_bytes'] / 2**20:.2f} MiB, lake read "
                    f"~{m['lake_bytes_est'] / 2**20:.1f} MiB ({m['lake_scans']} scan(s)), process read "
                    f"{m['process_read_bytes'] / 2**20:.1f} MiB, peak RSS {m['peak_rss_mib']:.0f} MiB; found "
                    + ", ".join(f"{k} {v}" for k, v in m["found"].items()),
                    flush=True,
                )
    finally:
        stop_parts(settings, PARTS)

    rec, naive = median_run(runs["reconcile"]), median_run(runs["naive"])
    checks = {label: {"ok": bool(ms) and all(m["found"] == expected for m in ms)} for label, ms in runs.items()}
    headline = {
        "rows": args.rows,
        "differing_rows": sum(len(v) for v in expected.values()),
        "chunk_rows": args.chunk_rows,
        "reconcile_s": rec["wall_s"],
        "reconcile_source_bytes": rec["source_bytes"],
        "reconcile_lake_bytes_est": rec["lake_bytes_est"],
        "reconcile_lake_scans": rec["lake_scans"],
        "reconcile_process_read_bytes": rec["process_read_bytes"],
        "reconcile_peak_rss_mib": rec["peak_rss_mib"],
        "naive_s": naive["wall_s"],
        "naive_source_bytes": naive["source_bytes"],
        "naive_lake_bytes": naive["lake_bytes_est"],
        "naive_process_read_bytes": naive["process_read_bytes"],
        "naive_peak_rss_mib": naive["peak_rss_mib"],
        "speedup": ratio(naive["wall_s"], rec["wall_s"], 2),
        "source_bytes_ratio": ratio(naive["source_bytes"], rec["source_bytes"], 2),
        "lake_bytes_ratio": ratio(naive["lake_bytes_est"], rec["lake_bytes_est"], 2),
        "found_all": all(c["ok"] for c in checks.values()),
        "machine": info["machine"],
        "date": bench.started.isoformat(timespec="seconds"),
    }
    result = {
        **info,
        "setup": setup,
        "headline": {k: v for k, v in headline.items() if k != "machine"},
        "runs": runs,
        "wall_s_all": {k: [m["wall_s"] for m in ms] for k, ms in runs.items()},
        "wall_s_median": {k: statistics.median(m["wall_s"] for m in ms) for k, ms in runs.items()},
        "checks": checks,
    }
    bench.finish(result, markdown)
    if not headline["found_all"]:
        print("CORRECTNESS CHECK FAILED: " + json.dumps({"expected": expected, "checks": checks}))
    print(json.dumps(headline, default=str))
    return 0 if headline["found_all"] else 1


def markdown(result: dict[str, Any]) -> str:
    p, h, s = result["params"], result["headline"], result["setup"]
    rec, naive = median_run(result["runs"]["reconcile"]), median_run(result["runs"]["naive"])

    def mib(b: int) -> str:
        return f"{b / 2**20:,.2f}"

    lines = [
        *summary_head("cdclake reconcile benchmark", result),
        f"Table: {p['rows']:,} rows (MariaDB, local; lake: {s['lake_files']} file(s), {mib(s['lake_bytes'])} MiB); "
        f"{h['differing_rows']} differing keys; reconcile chunks of {p['chunk_rows']:,} rows; run of median wall "
        f"time of {p['reps']}.",
        "",
        "| method | wall s | source sent MiB | lake read MiB (est.) | process read MiB | peak RSS MiB | found |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, label, r in (
        ("reconcile", "reconcile_table (report)", rec),
        ("naive", "naive: full export of both sides", naive),
    ):
        found = sum(len(v) for v in r["found"].values())
        ok = result["checks"][key]["ok"]
        lines.append(
            f"| {label} | {r['wall_s']:.2f} | {mib(r['source_bytes'])} | {mib(r['lake_bytes_est'])} "
            f"({r['lake_scans']} scan(s)) | {mib(r['process_read_bytes'])} | {r['peak_rss_mib']:,.0f} | "
            f"{found} key(s){'' if ok else ' **wrong**'} |"
        )
    lines += [
        "",
        f"Naive / reconcile: time {h['speedup']}x, source bytes {h['source_bytes_ratio']}x, lake bytes (est.) "
        f"{h['lake_bytes_ratio']}x.",
        "",
        "Source sent: delta of MariaDB's global `Bytes_sent` (the connector's binlog stream included: reconcile's "
        "markers only). Lake read (est.): the size of the table's files times the full scans made, an upper bound "
        "(scans read only the columns they select). Process read: `rchar` of the measuring process (lake files "
        "and sockets). Peak RSS: the measuring process (a fresh one per method).",
        "",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = bench_parser("bench/reconcile_bench.py", __doc__)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the table (default 1,000,000)")
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="reconcile's rows per chunk")
    parser.add_argument("--reps", type=int, default=1, help="runs of each method (the median run is reported)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the choice of differing keys")
    parser.add_argument("--insert-batch", type=int, default=10_000, help="rows per executemany of the source load")
    add_run_options(parser, work_parent=WORK_PARENT)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.rows < EDITED + DELETED + ADDED:
        raise SystemExit(f"--rows must be at least {EDITED + DELETED + ADDED}")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
