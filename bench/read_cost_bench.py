"""Read cost of format v2 (position-delete files) against format v3 (deletion vectors): "a table of
1M rows after 200 runs of 1,000 changes each, before and after maintenance: full scan time, point
lookup time, files and bytes read, for Spark and DuckDB" (issue 54).

    make bench-read-cost                                         # = .venv/bin/python bench/read_cost_bench.py
    .venv/bin/python bench/read_cost_bench.py --size tiny        # 20,000 rows, 10 runs x 200 changes

It starts a Kafka broker of its own, s3proxy and Iceberg's REST catalog server (SQLite backend,
warehouse ``s3://lake/bench/`` on s3proxy: cdclake keeps v3 tables in a REST catalog only,
:mod:`cdclake.model.format_version`), all on free loopback ports with state in a temporary folder
unless ``--state-dir``, and a classic local SparkSession (:func:`cdclake.spark.session.build_session`)
with that catalog. Then:

1. two starting tables, ``orders_v2`` and ``orders_v3``: ``--base-rows`` rows of
   ``bench/workload.py``'s ``orders`` table each (ids ``0..base_rows-1``), bulk-loaded with
   pyiceberg in files of 250,000 rows (``bench/lake.py``'s ``create_base_table``) at format v2;
   ``orders_v3`` is then upgraded in place to v3 (:func:`cdclake.pipeline.format_version.upgrade_table`,
   ``cdclake upgrade``: one metadata commit, the same data files). pyiceberg writes no v3 manifests,
   so a v3 table cannot be bulk-loaded by it; the upgrade keeps the starting files of both tables
   byte for byte the same;
2. ``--runs`` apply runs of ``--changes-per-run`` Debezium change events each (``bench/workload.py``,
   one binlog continued from run to run: about 70 % updates, 18 % inserts, 12 % deletes over
   ``--keys-per-run`` keys, 80 % of them rows of the starting table spread over its whole id range,
   new ids for the rest). Every run of both tables goes through the real apply path: the run's
   events are produced to each table's 3-partition topic (the same events to both), then
   :func:`cdclake.runner.run_once` plans the table's range from its committed offsets and applies it
   in one commit (the project's Spark ``MERGE``, merge-on-read: new data files and, on v2,
   position-delete files, on v3 deletion vectors). Nothing is written around the pipeline. The two
   tables' runs alternate (run ``r`` of v2 then of v3 for even ``r``, v3 first for odd ``r``) so that
   the load of a shared machine falls on both alike; the apply seconds of each run
   (``run_once``'s ``apply`` phase) are the write cost;
3. "before": per table, the files (``files`` metadata table: data files, delete files by format,
   their bytes; a deletion vector's bytes are its blob's ``content_size_in_bytes``, several
   deletion vectors sharing one Puffin file), the snapshot summary, pyiceberg's scan plan (what a
   full scan and each point lookup must read: data files after pruning and their delete files);
   then through Spark SQL and through DuckDB (its ``iceberg`` extension from the ``duckdb-ext-*``
   packages, loaded from their folder, the REST catalog attached; never downloaded): ``count(*)``,
   a full scan ``count(*), sum(quantity)`` (median of ``--scan-reps`` after one warm-up), and the
   point lookup ``SELECT * ... WHERE id = k`` (median over ``--lookup-keys`` random present keys
   of the starting rows, each queried once, after one warm-up lookup of another key). For Spark
   the files and bytes its scan read are its Iceberg scan's own metrics (``resultDataFiles``,
   ``resultDeleteFiles``, ``totalDataFileSize``, ``totalDeleteFileSize``, ...);
4. ``maintain_table`` with every action (the table's ``maintenance`` policy set so that snapshot
   expiry really expires: ``snapshot_retention_hours: 0``, ``retain_last: 1``): compaction folds the
   position deletes (v2) and the deletion vectors (v3) into the data (``delete_file_threshold`` 1);
5. "after": the same figures and queries.

Checks (exit code 1 when one fails): every run of both tables committed its events; every count
(Spark, DuckDB, before, after, v2, v3) equals the source's row count; ``sum(quantity)`` is the same
for every engine, phase and format; every lookup finds its one row; maintenance changed nothing
of the content and lost no commit race; the delete files are Parquet position deletes on v2 and
Puffin deletion vectors on v3. Targets (printed, met or not; the exit code does not depend on
them): the v3 full scan after the runs <= 1.3 x the compacted v3 table's (Spark and DuckDB each);
v3 apply time <= 1.1 x v2's (total over the runs but the first: the first apply of the process
warms the JVM up, 5-7 x a later run's, and falls on whichever table goes first). Results:
``<out>/read-cost-<size>-<time>.json`` and ``.md``; the last line printed is the headline as one
JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import workload as wl
from cdclake.settings import Settings
from harness import (
    BROKER,
    BenchRun,
    add_run_options,
    add_size_options,
    bench_parser,
    checks_line,
    checks_ok,
    resolve_size,
    stack_settings,
    start_parts,
    stop_parts,
    summary_head,
)
from lake import create_base_table, kafka_clients, produce
from measure import median_seconds, percentile, ratio

SIZES: dict[str, dict[str, int]] = {
    "tiny": {
        "base_rows": 20_000,
        "runs": 10,
        "changes_per_run": 200,
        "keys_per_run": 100,
        "lookup_keys": 3,
        "scan_reps": 3,
    },
    "full": {
        "base_rows": 1_000_000,
        "runs": 200,
        "changes_per_run": 1_000,
        "keys_per_run": 500,
        "lookup_keys": 5,
        "scan_reps": 3,
    },
}
FORMATS = (2, 3)
EXISTING_FRACTION = 0.8
"""Share of each run's keys that are rows of the starting table (the rest: new ids)."""
SUM_COLUMN = "quantity"
FULL_SCAN_TARGET = 1.3
"""v3 full scan after the runs / the compacted v3 table's full scan (issue 54)."""
APPLY_TARGET = 1.1
"""v3 apply seconds / v2 apply seconds over the runs (issue 54: "within 10 %")."""
BUCKET = "lake"
REGION = "us-east-1"
SPARK_SCAN_METRICS = (
    "resultDataFiles",
    "skippedDataFiles",
    "totalDataFileSize",
    "resultDeleteFiles",
    "totalDeleteFileSize",
    "positionalDeleteFiles",
    "dvs",
    "scannedDataManifests",
    "skippedDataManifests",
)
"""The metrics of Iceberg's Spark scan (``BatchScanExec``) the results keep: what the scan planned
to read."""


# --- the lake: s3proxy and the REST catalog ---------------------------------------------------------


@dataclass
class Lake:
    """s3proxy and the REST catalog server of the run (:mod:`cdclake_dev.parts`)."""

    s3: Any
    rest: Any
    access_key: str
    secret_key: str

    @property
    def endpoint(self) -> str:
        return str(self.s3.endpoint)

    def catalog_properties(self) -> dict[str, str]:
        """The REST catalog with its S3 keys, as :meth:`cdclake.settings.Settings.with_catalog` takes it."""
        return {
            "type": "rest",
            "uri": self.rest.uri,
            "warehouse": self.rest.warehouse,
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.path-style-access": "true",
            "client.region": REGION,
        }


def start_lake(work: Path) -> tuple[Lake, dict[str, float]]:
    """s3proxy (bucket :data:`BUCKET`) and the REST catalog server (SQLite backend) under
    ``work/lake``; returns them and their start seconds."""
    from cdclake_dev.parts.rest_catalog import RestCatalogServer
    from cdclake_dev.parts.s3 import S3Proxy
    from cdclake_dev.process import free_port

    root = work / "lake"
    access_key, secret_key = "cdclake-bench", uuid.uuid4().hex
    s3 = S3Proxy(root / "s3", free_port(), access_key, secret_key)
    rest = RestCatalogServer(
        root / "rest",
        free_port(),
        jdbc_uri=f"jdbc:sqlite:{root / 'rest-catalog.db'}",
        jdbc_user="rest",
        jdbc_password="rest",
        warehouse=f"s3://{BUCKET}/bench/",
        s3_endpoint=s3.endpoint,
        s3_access_key=access_key,
        s3_secret_key=secret_key,
        region=REGION,
    )
    lake = Lake(s3, rest, access_key, secret_key)
    seconds = {"s3proxy_s": round(s3.start(), 1)}
    s3.ensure_bucket(BUCKET)
    seconds["rest_catalog_s"] = round(rest.start(), 1)
    print(f"  s3proxy on {s3.endpoint}, REST catalog on {rest.uri}", flush=True)
    return lake, seconds


def stop_lake(lake: Lake | None) -> None:
    for name, part in (("REST catalog", lake.rest if lake else None), ("s3proxy", lake.s3 if lake else None)):
        if part is None:
            continue
        t0 = time.monotonic()
        try:
            part.stop()
            print(f"  {name} stopped in {time.monotonic() - t0:.1f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - stop the other all the same
            print(f"  stopping the {name} failed: {exc}", flush=True)


# --- DuckDB ----------------------------------------------------------------------------------------


def duckdb_extensions() -> Path:
    """The folder of the ``duckdb-ext-*`` packages' extensions (``<site-packages>/duckdb_ext/extensions``),
    as ``tests/integration/test_readers.py`` loads them."""
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the duckdb-ext-* packages are not installed (requirements.txt)")
    return Path(next(iter(spec.submodule_search_locations))) / "extensions"


def duckdb_connection(lake: Lake, warehouse: str) -> Any:
    """A DuckDB connection with the REST catalog attached as ``lake`` (S3 through ``httpfs``), its
    extensions loaded from :func:`duckdb_extensions`, never downloaded."""
    import duckdb

    con = duckdb.connect()
    con.execute("SET extension_directory = ?", [str(duckdb_extensions())])
    con.execute("SET autoinstall_known_extensions = false")
    for extension in ("httpfs", "avro", "iceberg"):
        con.execute(f"LOAD {extension}")
    con.execute(
        "CREATE SECRET lake_s3 (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, URL_STYLE 'path', USE_SSL false, REGION ?)",
        [lake.access_key, lake.secret_key, urlsplit(lake.endpoint).netloc, REGION],
    )
    con.execute(f"ATTACH '{warehouse}' AS lake (TYPE iceberg, ENDPOINT '{lake.rest.uri}', AUTHORIZATION_TYPE 'none')")
    return con


def duckdb_version() -> str:
    import duckdb

    return str(duckdb.__version__)


# --- measuring a table -----------------------------------------------------------------------------


def metadata_files(spark: Any, name: str) -> dict[str, Any]:
    """The live files of the current snapshot (the ``files`` metadata table) by kind: ``data``,
    ``position_deletes`` (Parquet), ``deletion_vectors`` (Puffin), ``equality_deletes``: entries,
    distinct files, the files' bytes, the bytes a reader reads (a deletion vector's blob,
    ``content_size_in_bytes``; a whole file otherwise) and the records (rows; deleted positions)."""
    rows = spark.sql(
        "SELECT content, file_format, count(*) AS entries, count(DISTINCT file_path) AS files, "
        "sum(read_bytes) AS read_bytes, sum(record_count) AS records FROM ("
        "  SELECT content, file_format, file_path, record_count,"
        "    coalesce(content_size_in_bytes, file_size_in_bytes) AS read_bytes"
        f"  FROM {name}.files) GROUP BY content, file_format"
    ).collect()
    sizes = {
        (int(r["content"]), r["file_format"]): int(r["b"] or 0)
        for r in spark.sql(
            "SELECT content, file_format, sum(size) AS b FROM ("
            "  SELECT content, file_format, file_path, max(file_size_in_bytes) AS size"
            f"  FROM {name}.files GROUP BY content, file_format, file_path) GROUP BY content, file_format"
        ).collect()
    }
    out: dict[str, Any] = {}
    for r in rows:
        content, fmt = int(r["content"]), str(r["file_format"])
        kind = {0: "data", 2: "equality_deletes"}.get(content) or (
            "deletion_vectors" if fmt.upper() == "PUFFIN" else "position_deletes"
        )
        out[kind] = {
            "format": fmt,
            "entries": int(r["entries"]),
            "files": int(r["files"]),
            "file_bytes": sizes.get((content, fmt), 0),
            "read_bytes": int(r["read_bytes"] or 0),
            "records": int(r["records"] or 0),
        }
    return out


def plan_figures(tasks: list[Any]) -> dict[str, int]:
    """What pyiceberg's scan plan (``plan_files``) reads: the data files and their bytes, the delete
    files (a deletion vector counted once per blob), their bytes (a deletion vector's: its blob's)
    and how many (data file, delete file) pairs the reader applies."""
    deletes: dict[tuple[str, int | None], int] = {}
    applied = 0
    for task in tasks:
        for d in task.delete_files:
            offset = getattr(d, "content_offset", None)
            size = getattr(d, "content_size_in_bytes", None)
            deletes[(d.file_path, offset)] = int(size if size is not None else d.file_size_in_bytes)
            applied += 1
    return {
        "data_files": len(tasks),
        "data_bytes": sum(int(t.file.file_size_in_bytes) for t in tasks),
        "delete_files": len(deletes),
        "delete_bytes": sum(deletes.values()),
        "delete_file_paths": len({p for p, _ in deletes}),
        "deletes_applied": applied,
    }


def _plan_nodes(plan: Any) -> Iterator[Any]:
    """Every node of a physical plan (a py4j ``SparkPlan``), into adaptive plans and query stages."""
    yield plan
    kind = plan.getClass().getSimpleName()
    if kind == "AdaptiveSparkPlanExec":
        yield from _plan_nodes(plan.executedPlan())
    elif kind.endswith("QueryStageExec"):
        yield from _plan_nodes(plan.plan())
    children = plan.children()
    for i in range(children.size()):
        yield from _plan_nodes(children.apply(i))


def spark_scan_metrics(df: Any) -> dict[str, int] | None:
    """The Iceberg scan metrics (:data:`SPARK_SCAN_METRICS`) of the last execution of ``df`` (a
    classic session's DataFrame), summed over its ``BatchScanExec`` nodes: ``{}`` when the query
    read no file (``count(*)`` answered from the manifests), ``None`` when they cannot be read."""
    try:
        out: dict[str, int] = {}
        for node in _plan_nodes(df._jdf.queryExecution().executedPlan()):
            if node.getClass().getSimpleName() != "BatchScanExec":
                continue
            metrics = node.metrics()
            for key in SPARK_SCAN_METRICS:
                if metrics.contains(key):
                    out[key] = out.get(key, 0) + int(metrics.apply(key).value())
        return out
    except Exception:  # noqa: BLE001 - a figure, not a check: py4j or the plan's shape differs
        return None


def timed_spark(spark: Any, sql: str, reps: int, *, warm: bool = True) -> dict[str, Any]:
    """``sql`` once to warm up (unless not ``warm``), then ``reps`` times: median and all seconds,
    the result's rows and the scan metrics of the last execution."""
    if warm:
        spark.sql(sql).collect()
    times, rows, df = [], [], None
    for _ in range(reps):
        df = spark.sql(sql)
        t0 = time.perf_counter()
        rows = df.collect()
        times.append(round(time.perf_counter() - t0, 4))
    return {
        "s": round(statistics.median(times), 4),
        "s_all": times,
        "rows": [r.asDict() for r in rows],
        "scan": spark_scan_metrics(df),
    }


def timed_duckdb(con: Any, sql: str, reps: int, *, arrow: bool = False, warm: bool = True) -> dict[str, Any]:
    """:func:`timed_spark` in DuckDB. ``arrow``: fetch an Arrow table (a lookup's ``timestamptz``
    columns fetched as Python objects need ``pytz``, which is not installed), keep its row count."""

    def fetch() -> Any:
        return con.execute(sql).fetch_arrow_table() if arrow else con.execute(sql).fetchall()

    if warm:
        fetch()
    s, times, rows = median_seconds(fetch, reps)
    if rows is None:
        got: list[list[Any]] = []
    else:
        got = [[None]] * rows.num_rows if arrow else [list(r) for r in rows]
    return {"s": s, "s_all": times, "rows": got}


def _id_equals(k: int) -> Any:
    """pyiceberg's ``id = k`` (its pydantic signature is beyond mypy)."""
    from pyiceberg.expressions import EqualTo

    return EqualTo("id", k)  # type: ignore[call-arg, arg-type]


def measure(
    spark: Any, catalog: Any, lake: Lake, settings: Settings, ident: str, keys: list[int], warm_key: int, reps: int
) -> dict[str, Any]:
    """Files, plans and query times of table ``ident`` (see the module docstring, step 3)."""
    name = f"{settings.catalog_name}.{ident}"
    table = catalog.load_table(ident)
    snap = table.current_snapshot()
    summary = dict(snap.summary.additional_properties) if snap is not None and snap.summary else {}
    out: dict[str, Any] = {
        "format_version": table.format_version,
        "snapshots": len(table.metadata.snapshots),
        "summary": {k: int(v) for k, v in summary.items() if k.startswith("total-") and v.lstrip("-").isdigit()},
        "files": metadata_files(spark, name),
        "plan_full": plan_figures(list(table.scan().plan_files())),
        "plan_lookups": [plan_figures(list(table.scan(row_filter=_id_equals(k)).plan_files())) for k in keys],
    }

    count_sql = f"SELECT count(*) AS n FROM {name}"
    scan_sql = f"SELECT count(*) AS n, sum({SUM_COLUMN}) AS s FROM {name}"
    spark_out: dict[str, Any] = {
        "count": timed_spark(spark, count_sql, reps),
        "full_scan": timed_spark(spark, scan_sql, reps),
    }
    spark.sql(f"SELECT * FROM {name} WHERE id = {warm_key}").collect()  # warm-up, a key not measured
    lookups = [timed_spark(spark, f"SELECT * FROM {name} WHERE id = {k}", 1, warm=False) for k in keys]
    spark_out["lookup"] = _lookups(lookups, keys)
    out["spark"] = spark_out

    namespace, tbl = ident.split(".")
    quoted = f'lake."{namespace}"."{tbl}"'
    t0 = time.perf_counter()
    con = duckdb_connection(lake, settings.warehouse)
    try:
        duck: dict[str, Any] = {"connect_s": round(time.perf_counter() - t0, 4)}
        duck["count"] = timed_duckdb(con, f"SELECT count(*) AS n FROM {quoted}", reps)
        duck["full_scan"] = timed_duckdb(con, f"SELECT count(*) AS n, sum({SUM_COLUMN}) AS s FROM {quoted}", reps)
        con.execute(f"SELECT * FROM {quoted} WHERE id = {warm_key}").fetch_arrow_table()  # warm-up
        duck["lookup"] = _lookups(
            [timed_duckdb(con, f"SELECT * FROM {quoted} WHERE id = {k}", 1, arrow=True, warm=False) for k in keys],
            keys,
            rows_only=True,
        )
    finally:
        con.close()
    out["duckdb"] = duck
    return out


def _lookups(results: list[dict[str, Any]], keys: list[int], rows_only: bool = False) -> dict[str, Any]:
    """The lookups' median seconds, and per key its seconds, rows found and (Spark) scan metrics."""
    per_key = [
        {"id": k, "s": r["s"], "rows": len(r["rows"]), **({} if rows_only else {"scan": r["scan"]})}
        for k, r in zip(keys, results, strict=True)
    ]
    return {"s": round(statistics.median(x["s"] for x in per_key), 4), "keys": per_key}


# --- the runs --------------------------------------------------------------------------------------


def table_config(ns: str, tag: str, format_version: int) -> Any:
    from cdclake.model.config import TableConfig

    return TableConfig.model_validate(
        {
            "name": f"bench_read_cost_v{format_version}",
            "topic": f"bench.{tag}.orders_v{format_version}",
            "namespace": ns,
            "table": f"orders_v{format_version}",
            "primary_key": ["id"],
            "format_version": format_version,
            # the workload writes no transaction metadata: cut by offsets, without the warning each run
            "transactions": "ignore",
            "maintenance": {"snapshot_retention_hours": 0, "retain_last": 1},
        }
    )


def expected_rows(state: wl.SourceState, base_rows: int) -> int:
    """Rows the source holds after the events."""
    deleted = sum(1 for i, r in state.rows.items() if r is None and i < base_rows)
    added = sum(1 for i, r in state.rows.items() if r is not None and i >= base_rows)
    return base_rows - deleted + added


def apply_runs(
    spark: Any, settings: Settings, catalog: Any, cfgs: dict[int, Any], p: argparse.Namespace, decimal: bool
) -> tuple[dict[int, list[dict[str, Any]]], wl.SourceState]:
    """``p.runs`` runs of both tables, alternating (see the module docstring, step 2).

    Raises:
        RuntimeError: a run did not commit exactly its events.
    """
    from cdclake.runner import run_once

    kafka = kafka_clients(settings)
    state: wl.SourceState | None = None
    runs: dict[int, list[dict[str, Any]]] = {fv: [] for fv in cfgs}
    every = max(1, p.runs // 20)
    for r in range(p.runs):
        spec = wl.WorkloadSpec(
            events=p.changes_per_run,
            keys=p.keys_per_run,
            existing_rows=p.base_rows,
            new_id_start=p.base_rows + r * p.keys_per_run,
            existing_fraction=EXISTING_FRACTION,
            seed=p.seed + r,
        )
        generated, state = wl.generate(spec, decimal, state)
        events = list(generated)
        order = list(cfgs) if r % 2 == 0 else list(reversed(list(cfgs)))
        for fv in order:
            cfg = cfgs[fv]
            t0 = time.perf_counter()
            produce(kafka, cfg.topic, events, create=r == 0)
            produce_s = time.perf_counter() - t0
            run = run_once(
                cfg,
                f"bench-read-cost-{r}",
                settings=settings,
                catalog=catalog,
                kafka=kafka,
                open_session=lambda: nullcontext(spark),
            )
            result, planned = run.result, run.plan.range.event_count
            status = "empty" if result is None else result.status
            if result is None or status != "committed" or planned != p.changes_per_run:
                raise RuntimeError(f"v{fv} run {r}: {status} with {planned} planned event(s)")
            runs[fv].append(
                {
                    "run": r,
                    "order": order.index(fv),
                    "status": status,
                    "snapshot_id": result.snapshot_id,
                    "keys_changed": result.keys_changed,
                    "produce_s": round(produce_s, 3),
                    "plan_s": run.seconds["plan"],
                    "apply_s": run.seconds["apply"],
                }
            )
        if (r + 1) % every == 0 or r + 1 == p.runs:
            print(
                f"  run {r + 1}/{p.runs}: apply "
                + ", ".join(f"v{fv} {runs[fv][-1]['apply_s']:.1f} s" for fv in cfgs)
                + f" (v{order[0]} first)",
                flush=True,
            )
    assert state is not None
    return runs, state


def run_stats(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [r[key] for r in runs]
    tenth = max(1, len(values) // 10)
    return {
        "total": round(sum(values), 2),
        "total_without_first": round(sum(values[1:]), 2),
        "median": round(statistics.median(values), 3),
        "p90": round(percentile(values, 0.9), 3),
        "first_tenth_median": round(statistics.median(values[:tenth]), 3),
        "last_tenth_median": round(statistics.median(values[-tenth:]), 3),
        "first_in_pair_median": round(statistics.median([r[key] for r in runs if r["order"] == 0] or [0.0]), 3),
        "second_in_pair_median": round(statistics.median([r[key] for r in runs if r["order"] == 1] or [0.0]), 3),
    }


def maintain(spark: Any, settings: Settings, cfg: Any) -> dict[str, Any]:
    """``maintain_table`` with every action; its reports (printed) and seconds."""
    from cdclake.spark.maintenance import maintain_table

    t0 = time.monotonic()
    result = maintain_table(spark, settings, cfg)
    wall = time.monotonic() - t0
    reports = [json.loads(r.model_dump_json()) for r in result.reports]
    for r in reports:
        if r["table"] == cfg.identifier:
            print(f"    {r['action']} [{r['status']}] {r['seconds']:.2f} s: {r['summary']}", flush=True)
    return {
        "wall_s": round(wall, 2),
        "seconds_per_action": {r["action"]: r["seconds"] for r in reports if r["table"] == cfg.identifier},
        "reports": reports,
    }


# --- the run ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog
    from cdclake.pipeline.format_version import upgrade_table
    from cdclake.spark.session import build_session

    p = resolve_size(args, SIZES)
    if p.keys_per_run > p.changes_per_run or min(vars(p).values()) < 1:
        raise SystemExit("every figure must be positive, and --keys-per-run at most --changes-per-run")
    p.seed = args.seed
    bench = BenchRun.begin(args, f"read-cost-{args.size}", "cdclake-readcost-")
    parts = (BROKER,)
    decimal = wl.decimal_supported()
    ns = f"bench_{bench.tag}"
    cfgs = {fv: table_config(ns, bench.tag, fv) for fv in FORMATS}
    print(
        f"read-cost benchmark ({args.size}): {p.runs} run(s) x {p.changes_per_run:,} changes into "
        f"{p.base_rows:,} rows, format v2 and v3; work dir {bench.work}",
        flush=True,
    )
    setup: dict[str, Any] = {}
    phases: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    spark = None
    lake: Lake | None = None
    settings = stack_settings(bench.work, parts)
    try:
        setup["broker_s"] = start_parts(settings, parts)
        lake, lake_s = start_lake(bench.work)
        setup.update(lake_s)
        settings = settings.with_catalog(lake.catalog_properties())
        t0 = time.monotonic()
        spark = build_session(settings, "cdclake-bench-read-cost")
        spark.sparkContext.setLogLevel("ERROR")
        setup["spark_session_s"] = round(time.monotonic() - t0, 1)
        catalog = load_catalog(settings)
        catalog.create_namespace_if_not_exists(ns)

        print(f"1. the starting tables: {p.base_rows:,} rows each, v3 upgraded in place ...", flush=True)
        for fv, cfg in cfgs.items():
            setup[f"base_table_v{fv}_s"] = round(create_base_table(catalog, cfg.identifier, p.base_rows, decimal), 1)
            if fv == 3:
                up = upgrade_table(catalog, cfg, 3)
                print(f"  {up.message().splitlines()[0]}", flush=True)
        print(f"  {setup}", flush=True)

        print(f"2. {p.runs} run(s) of {p.changes_per_run:,} changes into each table, alternating ...", flush=True)
        t0 = time.monotonic()
        runs, state = apply_runs(spark, settings, catalog, cfgs, p, decimal)
        phases["apply_runs"] = {
            "wall_s": round(time.monotonic() - t0, 1),
            "ops": dict(state.ops),
            "keys_touched": len(state.rows),
            **{
                f"v{fv}": {"apply_s": run_stats(rs, "apply_s"), "plan_s": run_stats(rs, "plan_s")}
                for fv, rs in runs.items()
            },
            "runs": {f"v{fv}": rs for fv, rs in runs.items()},
        }
        for fv in cfgs:
            a = phases["apply_runs"][f"v{fv}"]["apply_s"]
            print(
                f"  v{fv}: apply {a['total']} s in all, median {a['median']} s per run "
                f"(first tenth {a['first_tenth_median']} s, last tenth {a['last_tenth_median']} s)",
                flush=True,
            )
        rng = random.Random(p.seed)
        candidates = rng.sample(range(p.base_rows), min(p.base_rows, 50 * (p.lookup_keys + 1)))
        *keys, warm_key = [i for i in candidates if state.current(i) is not None][: p.lookup_keys + 1]
        want_rows = expected_rows(state, p.base_rows)

        for label, step in (("before", 3), ("after", 5)):
            if label == "after":
                print("4. maintain_table (all actions) ...", flush=True)
                for fv, cfg in cfgs.items():
                    print(f"  v{fv}:", flush=True)
                    phases[f"maintenance_v{fv}"] = maintain(spark, settings, cfg)
            print(f"{step}. {label} maintenance: files, plans, Spark and DuckDB queries ...", flush=True)
            for fv, cfg in cfgs.items():
                m = measure(spark, catalog, lake, settings, cfg.identifier, keys, warm_key, p.scan_reps)
                phases[f"{label}_v{fv}"] = m
                print(f"  v{fv}: {_line(m)}", flush=True)

        checks.update(make_checks(phases, runs, p, want_rows))
    finally:
        if spark is not None:
            spark.stop()
        stop_lake(lake)
        stop_parts(settings, parts)

    info = bench.info(
        date=bench.started.isoformat(timespec="seconds"),
        size=args.size,
        params=vars(p),
        namespace=ns,
        tables={f"v{fv}": cfg.identifier for fv, cfg in cfgs.items()},
        spark_master=settings.spark_master,
        duckdb=duckdb_version(),
        catalog="Iceberg REST catalog server (SQLite backend), warehouse on s3proxy",
        decimal_column="decimal(10,2)" if decimal else "binary",
        expected_rows=want_rows,
        lookup_keys=keys,
        how_written="every run of both tables through the pipeline (Kafka, run_once: plan, Spark MERGE, commit)",
    )
    headline = headline_of(phases, p)
    result_doc = {**info, "setup": setup, "headline": headline, "phases": phases, "checks": checks}
    bench.finish(result_doc, markdown)
    ok = checks_ok(checks)
    print(json.dumps({**headline, "checks_ok": ok, "machine": info["machine"], "date": info["date"]}, default=str))
    return 0 if ok else 1


def make_checks(
    phases: dict[str, Any], runs: dict[int, list[dict[str, Any]]], p: argparse.Namespace, want_rows: int
) -> dict[str, dict[str, Any]]:
    checks: dict[str, dict[str, Any]] = {}
    checks["apply_runs"] = {
        "ok": all(len(rs) == p.runs and all(r["status"] == "committed" for r in rs) for rs in runs.values()),
        "committed": {f"v{fv}": sum(r["status"] == "committed" for r in rs) for fv, rs in runs.items()},
    }
    counts: dict[str, int] = {}
    sums: dict[str, Any] = {}
    lookups_ok = True
    for label in ("before", "after"):
        for fv in FORMATS:
            m = phases[f"{label}_v{fv}"]
            sp, dk = m["spark"], m["duckdb"]
            counts[f"{label} v{fv} spark count"] = int(sp["count"]["rows"][0]["n"])
            counts[f"{label} v{fv} spark scan"] = int(sp["full_scan"]["rows"][0]["n"])
            counts[f"{label} v{fv} duckdb count"] = int(dk["count"]["rows"][0][0])
            counts[f"{label} v{fv} duckdb scan"] = int(dk["full_scan"]["rows"][0][0])
            sums[f"{label} v{fv} spark"] = sp["full_scan"]["rows"][0]["s"]
            sums[f"{label} v{fv} duckdb"] = dk["full_scan"]["rows"][0][1]
            lookups_ok = lookups_ok and all(k["rows"] == 1 for k in sp["lookup"]["keys"] + dk["lookup"]["keys"])
    checks["rows_match_source"] = {
        "ok": all(n == want_rows for n in counts.values()),
        "expected": want_rows,
        "counts": counts,
    }
    checks["same_content"] = {"ok": len({int(s) for s in sums.values() if s is not None}) == 1, "sums": sums}
    checks["lookups_find_their_row"] = {"ok": lookups_ok}
    not_done = [
        f"v{fv} {r['action']} {r['table']}"
        for fv in FORMATS
        for r in phases[f"maintenance_v{fv}"]["reports"]
        if r["status"] not in ("done", "skipped")
    ]
    checks["maintenance_actions"] = {"ok": not not_done, "not_done": not_done}
    kinds = {fv: set(phases[f"before_v{fv}"]["files"]) - {"data"} for fv in FORMATS}
    checks["delete_file_kinds"] = {
        "ok": kinds[2] == {"position_deletes"}
        and kinds[3] == {"deletion_vectors"}
        and all(phases[f"before_v{fv}"]["format_version"] == fv for fv in FORMATS),
        "kinds": {f"v{fv}": sorted(k) for fv, k in kinds.items()},
    }
    return checks


def _line(m: dict[str, Any]) -> str:
    f = m["files"]
    data = f.get("data", {})
    dels = f.get("position_deletes") or f.get("deletion_vectors") or {}
    sp, dk = m["spark"], m["duckdb"]
    return (
        f"{data.get('files', 0)} data file(s) {data.get('file_bytes', 0) / 2**20:.2f} MiB, "
        f"{dels.get('entries', 0)} delete file(s) ({dels.get('format', '-')}, {dels.get('read_bytes', 0) / 2**10:.1f} KiB); "
        f"Spark count {sp['count']['s']} s, scan {sp['full_scan']['s']} s, lookup {sp['lookup']['s']} s; "
        f"DuckDB count {dk['count']['s']} s, scan {dk['full_scan']['s']} s, lookup {dk['lookup']['s']} s"
    )


def _files(m: dict[str, Any], kind: str, key: str) -> int:
    return int(m["files"].get(kind, {}).get(key, 0))


def _deletes(m: dict[str, Any], key: str) -> int:
    return sum(_files(m, k, key) for k in ("position_deletes", "deletion_vectors", "equality_deletes"))


def headline_of(phases: dict[str, Any], p: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"base_rows": p.base_rows, "runs": p.runs, "changes_per_run": p.changes_per_run}
    for fv in FORMATS:
        a = phases["apply_runs"][f"v{fv}"]["apply_s"]
        out[f"v{fv}_apply_s_total"] = a["total"]
        out[f"v{fv}_apply_s_total_without_first"] = a["total_without_first"]
        out[f"v{fv}_apply_s_median"] = a["median"]
        for label in ("before", "after"):
            m = phases[f"{label}_v{fv}"]
            for engine in ("spark", "duckdb"):
                out[f"v{fv}_{engine}_scan_s_{label}"] = m[engine]["full_scan"]["s"]
                out[f"v{fv}_{engine}_lookup_s_{label}"] = m[engine]["lookup"]["s"]
            out[f"v{fv}_data_files_{label}"] = _files(m, "data", "files")
            out[f"v{fv}_delete_files_{label}"] = _deletes(m, "entries")
            out[f"v{fv}_delete_read_bytes_{label}"] = _deletes(m, "read_bytes")
    targets = {}
    for engine in ("spark", "duckdb"):
        r = ratio(out[f"v3_{engine}_scan_s_before"], out[f"v3_{engine}_scan_s_after"])
        targets[f"v3 {engine} full scan after the runs / compacted"] = {
            "value": r,
            "target": FULL_SCAN_TARGET,
            "met": r is not None and r <= FULL_SCAN_TARGET,
        }
    r = ratio(out["v3_apply_s_total_without_first"], out["v2_apply_s_total_without_first"])
    targets["v3 apply / v2 apply (total over the runs but the first)"] = {
        "value": r,
        "target": APPLY_TARGET,
        "met": r is not None and r <= APPLY_TARGET,
    }
    out["targets"] = targets
    return out


# --- the summary -----------------------------------------------------------------------------------

ROWS: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
    ("data files (live)", lambda m: _files(m, "data", "files")),
    ("data bytes (live)", lambda m: _files(m, "data", "file_bytes")),
    ("delete files (live entries; DVs: one per data file)", lambda m: _deletes(m, "entries")),
    ("delete files: distinct files on storage", lambda m: _deletes(m, "files")),
    ("delete bytes a reader reads (DV: its blob)", lambda m: _deletes(m, "read_bytes")),
    ("deleted positions (records of the delete files)", lambda m: _deletes(m, "records")),
    ("snapshots", lambda m: m["snapshots"]),
    ("pyiceberg full scan plan: data files / delete files", lambda m: _pair(m["plan_full"])),
    ("pyiceberg lookup plan (median key): data files / delete files", lambda m: _pair(_median_plan(m["plan_lookups"]))),
    ("Spark `count(*)`, s", lambda m: m["spark"]["count"]["s"]),
    ("Spark full scan `count(*), sum(quantity)`, s", lambda m: m["spark"]["full_scan"]["s"]),
    ("Spark full scan read: data files / delete files", lambda m: _scan_files(m["spark"]["full_scan"]["scan"])),
    ("Spark full scan read: data MiB / delete KiB", lambda m: _scan_bytes(m["spark"]["full_scan"]["scan"])),
    ("Spark point lookup, s (median)", lambda m: m["spark"]["lookup"]["s"]),
    ("Spark lookup read: data files / delete files", lambda m: _scan_files(m["spark"]["lookup"]["keys"][0]["scan"])),
    ("DuckDB `count(*)`, s", lambda m: m["duckdb"]["count"]["s"]),
    ("DuckDB full scan `count(*), sum(quantity)`, s", lambda m: m["duckdb"]["full_scan"]["s"]),
    ("DuckDB point lookup, s (median)", lambda m: m["duckdb"]["lookup"]["s"]),
)


def _pair(plan: dict[str, int]) -> str:
    return f"{plan['data_files']} / {plan['delete_files']}"


def _median_plan(plans: list[dict[str, int]]) -> dict[str, int]:
    return sorted(plans, key=lambda x: (x["data_files"], x["delete_files"]))[(len(plans) - 1) // 2]


def _scan_files(scan: dict[str, int] | None) -> str:
    if scan is None:
        return "n/a"
    return f"{scan.get('resultDataFiles', 0)} / {scan.get('resultDeleteFiles', 0)}"


def _scan_bytes(scan: dict[str, int] | None) -> str:
    if scan is None:
        return "n/a"
    return f"{scan.get('totalDataFileSize', 0) / 2**20:.2f} / {scan.get('totalDeleteFileSize', 0) / 2**10:.1f}"


def markdown(result: dict[str, Any]) -> str:
    p, ph, h = result["params"], result["phases"], result["headline"]
    ar = ph["apply_runs"]
    lines = [
        *summary_head(
            f"cdclake read cost, format v2 vs v3 ({result['size']})",
            result,
            f"Spark `{result['spark_master']}` (a classic session); DuckDB {result['duckdb']}",
        ),
        f"Two tables of {p['base_rows']:,} rows (v2; v3 upgraded in place from the same files), then "
        f"{p['runs']} run(s) of {p['changes_per_run']:,} changes each over about {p['keys_per_run']:,} keys "
        f"(ops {ar['ops']}), the same events into both, {result['how_written']}; {result['catalog']}. "
        f"Lookups: {len(result['lookup_keys'])} random present keys of the starting rows; full scans and counts: "
        f"median of {p['scan_reps']} after a warm-up.",
        "",
        "| apply per run (s) | v2 | v3 | v3 / v2 |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("total", "total over the runs"),
        ("total_without_first", "total but the first run (the JVM's warm-up)"),
        ("median", "median"),
        ("p90", "p90"),
        ("first_tenth_median", "median, first tenth of the runs"),
        ("last_tenth_median", "median, last tenth"),
    ):
        a, b = ar["v2"]["apply_s"][key], ar["v3"]["apply_s"][key]
        lines.append(f"| {label} | {a} | {b} | {ratio(b, a)} |")
    lines += [
        "",
        "| figure | v2 before | v3 before | v2 after | v3 after |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, fn in ROWS:
        values = [fn(ph[f"{when}_v{fv}"]) for when in ("before", "after") for fv in FORMATS]
        lines.append(f"| {label} | " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in values) + " |")
    lines += ["", "| target | measured | target | met |", "|---|---:|---:|---|"]
    for name, t in h["targets"].items():
        lines.append(f"| {name} | {t['value']} | <= {t['target']} | {'yes' if t['met'] else '**no**'} |")
    lines += ["", "Maintenance (`maintain_table`, the table's actions):", ""]
    for fv in FORMATS:
        m = ph[f"maintenance_v{fv}"]
        actions = "; ".join(
            f"{r['action']} {r['seconds']:.1f} s ({r['summary']})"
            for r in m["reports"]
            if r["table"] == result["tables"][f"v{fv}"] and r["status"] == "done"
        )
        lines.append(f"- v{fv}: {m['wall_s']} s in all with the side tables; {actions}")
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = bench_parser("bench/read_cost_bench.py", __doc__)
    add_size_options(
        parser,
        SIZES,
        "full",
        "preset (full: issue 54's 1M rows, 200 runs x 1,000 changes; tiny: a few minutes)",
        {
            "base_rows": "rows of each starting table",
            "runs": "apply runs into each table before maintenance",
            "changes_per_run": "change events of each run",
            "keys_per_run": "keys each run's events touch",
            "lookup_keys": "point lookups (random present keys; median)",
            "scan_reps": "repetitions of each count and full scan (median), after a warm-up",
        },
    )
    parser.add_argument("--seed", type=int, default=11, help="seed of the workload and the lookup keys")
    add_run_options(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
