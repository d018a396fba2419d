"""Table maintenance's benchmark: "after 200 apply runs of 1,000 changes each into a 1M-row table,
the data file count, delete file count, metadata size, ``count(*)`` time and a point-lookup time,
before and after maintenance."

    make bench-maintenance                                   # = .venv/bin/python bench/maintenance_bench.py
    .venv/bin/python bench/maintenance_bench.py --base-rows 20000 --runs 10 --changes-per-run 200  # smoke

It starts a Kafka broker of its own (state in a temporary folder unless ``--state-dir``, free
loopback port; ``--external-broker``: the broker and catalog of the ``CDCLAKE_*`` environment) and
a classic local SparkSession (:func:`cdclake.spark.session.build_session`: the engine is not what
is measured here). Then:

1. the starting table: ``--base-rows`` rows of ``bench/workload.py``'s ``orders`` table (ids
   ``0..base_rows-1``), bulk-loaded with pyiceberg in files of 250,000 rows (``bench/lake.py``'s
   ``create_base_table``: as a snapshot read wrote them);
2. ``--runs`` apply runs of ``--changes-per-run`` Debezium change events each, through the real
   apply path: each run's events (``bench/workload.py``, one binlog continued from run to run:
   about 72 % updates, 18 % inserts, 10 % deletes over ``--keys-per-run`` keys, 80 % of them rows
   of the starting table spread over its whole id range, new ids for the rest) are produced into a
   3-partition topic, then :func:`cdclake.runner.run_once` runs it as the table DAG does: plans
   it from the table's committed offsets, syncs the schema (the bench's table has no schema-change
   topic: nothing to sync) and applies it in one commit (merge-on-read: new data files and position
   deletes), in the bench's one session;
3. "before": the current snapshot's ``total-data-files``, ``total-delete-files`` (and records,
   position deletes, bytes), the ``files`` and ``manifests`` metadata tables, the snapshot count,
   the bytes and files of the table's ``metadata/`` folder on disk (``*.metadata.json``, manifest
   lists ``snap-*.avro``, manifests) and of its ``data/`` folder; ``SELECT count(*)`` (median of
   ``--count-reps``), a full scan (``count(*)`` and ``sum(xxhash64(all columns))``: the content
   checksum), and a point lookup ``SELECT * ... WHERE id = k`` through Spark SQL and through a
   pyiceberg scan (``load_table`` + ``scan(EqualTo)``), median over ``--lookup-keys`` random present
   keys; the file, snapshot and folder figures of the tombstone side table;
4. ``maintain_table`` with every action, the table's ``maintenance`` policy set so that snapshot
   expiry really expires (``snapshot_retention_hours: 0``, ``retain_last: --retain-last``); it
   still keeps the newest snapshot carrying the committed offsets and everything after it.
   ``remove_orphan_files`` deletes only files older than 24 h (its floor), so here it finds none;
   ``expire_tombstones`` keeps tombstones younger than ``tombstone_retention_hours`` (192 h), so
   none go either. The seconds of each action (per table) are the result's;
5. "after": the same figures, the same keys (a ``count(*)`` of a table without delete files is
   answered from the manifests by Iceberg's aggregate push-down; with delete files Spark scans);
6. with ``--next-run``: one more apply run, maintenance again, and the file figures: the first
   maintenance cannot free what the newest offsets-carrying snapshot (the last apply's) still
   references; after the next run's commit that snapshot may go.

Checks (exit code 1 when one fails): every apply run committed its events; the row count equals
the source state the events were generated from; maintenance left the row count, the content
checksum and the committed Kafka offsets as they were; no action lost a commit race. Targets:
none, only figures. Results: ``<out>/maintenance-<time>.json`` and ``.md``; the last line printed
is the headline as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import workload as wl
from cdclake.settings import Settings
from harness import (
    BROKER,
    BenchRun,
    add_run_options,
    bench_parser,
    checks_line,
    checks_ok,
    stack_settings,
    start_parts,
    stop_parts,
    summary_head,
)
from lake import create_base_table, kafka_clients, produce
from measure import median_seconds, percentile

TABLE = "orders"
EXISTING_FRACTION = 0.8
"""Share of each run's keys that are rows of the starting table (the rest: new ids)."""


# --- measuring a table -----------------------------------------------------------------------------


def folder_figures(location: str) -> dict[str, Any]:
    """Files and bytes on disk of a table's ``metadata/`` folder (by kind: ``*.metadata.json``,
    manifest lists ``snap-*.avro``, manifests ``*.avro``; Hadoop's ``.crc`` side files apart) and
    of its ``data/`` folder (data and delete files, referenced or not)."""
    root = Path(urlsplit(location).path)
    kinds = ("metadata_json", "manifest_lists", "manifests", "crc", "other")
    meta: dict[str, dict[str, int]] = {k: {"files": 0, "bytes": 0} for k in kinds}
    for f in (root / "metadata").rglob("*"):
        if not f.is_file():
            continue
        name = f.name
        if name.endswith(".crc"):
            kind = "crc"
        elif name.endswith(".metadata.json"):
            kind = "metadata_json"
        elif name.startswith("snap-") and name.endswith(".avro"):
            kind = "manifest_lists"
        elif name.endswith(".avro"):
            kind = "manifests"
        else:
            kind = "other"
        meta[kind]["files"] += 1
        meta[kind]["bytes"] += f.stat().st_size
    data = [f for f in (root / "data").rglob("*") if f.is_file() and not f.name.endswith(".crc")]
    return {
        "metadata_bytes": sum(v["bytes"] for v in meta.values()),
        "metadata_files": sum(v["files"] for v in meta.values()),
        "metadata": meta,
        "data_folder_files": len(data),
        "data_folder_bytes": sum(f.stat().st_size for f in data),
    }


def file_figures(spark: Any, settings: Settings, catalog: Any, ident: str) -> dict[str, Any]:
    """The current snapshot's counts (summary, ``files`` and ``manifests`` metadata tables), the
    snapshot count and the folders on disk."""
    table = catalog.load_table(ident)
    snap = table.current_snapshot()
    summary = dict(snap.summary.additional_properties) if snap is not None and snap.summary else {}
    name = f"{settings.catalog_name}.{ident}"
    content = {0: "data", 1: "position_delete", 2: "equality_delete"}
    files = {
        content[int(r["content"])]: {"files": int(r["n"]), "bytes": int(r["b"] or 0), "records": int(r["r"] or 0)}
        for r in spark.sql(
            f"SELECT content, count(*) AS n, sum(file_size_in_bytes) AS b, sum(record_count) AS r "
            f"FROM {name}.files GROUP BY content"
        ).collect()
    }
    manifests = spark.sql(f"SELECT count(*) AS n FROM {name}.manifests").collect()[0]["n"]

    def total(key: str) -> int | None:
        return int(summary[key]) if key in summary else None

    return {
        "snapshot_id": snap.snapshot_id if snap is not None else None,
        "data_files": total("total-data-files"),
        "delete_files": total("total-delete-files"),
        "records": total("total-records"),
        "position_deletes": total("total-position-deletes"),
        "files_bytes": total("total-files-size"),
        "files_table": files,
        "manifests": int(manifests),
        "snapshots": len(table.metadata.snapshots),
        "metadata_log_entries": len(table.metadata.metadata_log),
        **folder_figures(table.location()),
    }


def measure_table(
    spark: Any, settings: Settings, catalog: Any, ident: str, keys: list[int], count_reps: int
) -> dict[str, Any]:
    """:func:`file_figures` plus the query times: ``count(*)``, a full scan with the content
    checksum, point lookups through Spark SQL and through pyiceberg."""
    from pyiceberg.expressions import EqualTo

    name = f"{settings.catalog_name}.{ident}"
    out = file_figures(spark, settings, catalog, ident)
    count_s, count_all, n = median_seconds(
        lambda: spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"], count_reps
    )
    columns = ", ".join(f"`{f.name}`" for f in catalog.load_table(ident).schema().fields)
    t0 = time.perf_counter()
    row = spark.sql(
        f"SELECT count(*) AS n, CAST(sum(CAST(xxhash64({columns}) AS DECIMAL(38, 0))) AS STRING) AS h FROM {name}"
    ).collect()[0]
    scan_s = round(time.perf_counter() - t0, 4)
    spark_lookups, iceberg_lookups = [], []
    for k in keys:
        s, _, rows = median_seconds(lambda k=k: spark.sql(f"SELECT * FROM {name} WHERE id = {k}").collect(), 1)
        spark_lookups.append({"id": k, "s": s, "rows": len(rows)})
        s, _, arrow = median_seconds(
            lambda k=k: catalog.load_table(ident).scan(row_filter=EqualTo("id", k)).to_arrow(), 1
        )
        iceberg_lookups.append({"id": k, "s": s, "rows": arrow.num_rows})
    out.update(
        {
            "count": int(n),
            "count_s": count_s,
            "count_s_all": count_all,
            "full_scan_s": scan_s,
            "checksum": {"rows": int(row["n"]), "sum_xxhash64": row["h"]},
            "lookup_s": round(statistics.median(x["s"] for x in spark_lookups), 4) if keys else None,
            "lookup_pyiceberg_s": round(statistics.median(x["s"] for x in iceberg_lookups), 4) if keys else None,
            "lookups": spark_lookups,
            "lookups_pyiceberg": iceberg_lookups,
        }
    )
    return out


def side_figures(spark: Any, settings: Settings, catalog: Any, ident: str) -> dict[str, Any] | None:
    """:func:`file_figures` of a side table, ``None`` when it does not exist."""
    from cdclake.io.catalog import load_table_or_none

    if load_table_or_none(catalog, ident) is None:
        return None
    return file_figures(spark, settings, catalog, ident)


# --- the apply runs --------------------------------------------------------------------------------


def table_config(ns: str, topic: str, retain_last: int) -> Any:
    from cdclake.model.config import TableConfig

    return TableConfig.model_validate(
        {
            "name": "bench_maintenance",
            "topic": topic,
            "namespace": ns,
            "table": TABLE,
            "primary_key": ["id"],
            "maintenance": {"snapshot_retention_hours": 0, "retain_last": retain_last},
        }
    )


def expected_rows(state: wl.SourceState, base_rows: int) -> int:
    """Rows the source holds after the events: the starting rows, minus those deleted, plus the
    new ids present."""
    deleted = sum(1 for i, r in state.rows.items() if r is None and i < base_rows)
    added = sum(1 for i, r in state.rows.items() if r is not None and i >= base_rows)
    return base_rows - deleted + added


def apply_run(
    spark: Any,
    settings: Settings,
    catalog: Any,
    kafka: Any,
    cfg: Any,
    args: argparse.Namespace,
    decimal: bool,
    r: int,
    state: wl.SourceState | None,
) -> tuple[dict[str, Any], wl.SourceState]:
    """Run ``r``: produce its events (the binlog of ``state`` continued), plan, apply.

    Raises:
        RuntimeError: the run did not commit exactly its events.
    """
    from cdclake.runner import run_once

    spec = wl.WorkloadSpec(
        events=args.changes_per_run,
        keys=args.keys_per_run,
        existing_rows=args.base_rows,
        new_id_start=args.base_rows + r * args.keys_per_run,
        existing_fraction=EXISTING_FRACTION,
        seed=args.seed + r,
    )
    events, state = wl.generate(spec, decimal, state)
    before = dict(state.ops)
    t0 = time.perf_counter()
    produce(kafka, cfg.topic, events, create=r == 0)
    t1 = time.perf_counter()
    run = run_once(
        cfg,
        f"bench-maintenance-{r}",
        settings=settings,
        catalog=catalog,
        kafka=kafka,
        open_session=lambda: nullcontext(spark),
    )
    result, planned = run.result, run.plan.range.event_count
    # nothing new (no result) fails as an empty range's apply did: status "empty"
    status = "empty" if result is None else result.status
    if result is None or status != "committed" or planned != args.changes_per_run:
        raise RuntimeError(f"run {r}: {status} with {planned} planned event(s)")
    record = {
        "run": r,
        "planned_events": planned,
        "status": status,
        "snapshot_id": result.snapshot_id,
        "keys_changed": result.keys_changed,
        "ops": _ops_delta(before, dict(state.ops)),
        "produce_s": round(t1 - t0, 3),
        "plan_s": run.seconds["plan"],
        "apply_s": run.seconds["apply"],
    }
    return record, state


def apply_runs(
    spark: Any, settings: Settings, catalog: Any, cfg: Any, args: argparse.Namespace, decimal: bool
) -> tuple[list[dict[str, Any]], wl.SourceState]:
    """``args.runs`` runs (:func:`apply_run`). Returns one record per run and the source state."""
    kafka = kafka_clients(settings)
    state: wl.SourceState | None = None
    runs: list[dict[str, Any]] = []
    every = max(1, args.runs // 20)
    for r in range(args.runs):
        record, state = apply_run(spark, settings, catalog, kafka, cfg, args, decimal, r, state)
        runs.append(record)
        if (r + 1) % every == 0 or r + 1 == args.runs:
            print(f"  run {r + 1}/{args.runs}: {record['status']}, apply {record['apply_s']:.1f} s", flush=True)
    assert state is not None
    return runs, state


def _ops_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {op: n - before.get(op, 0) for op, n in after.items() if n - before.get(op, 0)}


def run_stats(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [r[key] for r in runs]
    tenth = max(1, len(values) // 10)
    return {
        "median": round(statistics.median(values), 3),
        "p90": round(percentile(values, 0.9), 3),
        "total": round(sum(values), 1),
        "first_tenth_median": round(statistics.median(values[:tenth]), 3),
        "last_tenth_median": round(statistics.median(values[-tenth:]), 3),
    }


# --- the run ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog
    from cdclake.io.refs import committed_offsets
    from cdclake.model.layout import TOMBSTONES_SUFFIX, side_table
    from cdclake.spark.session import build_session

    bench = BenchRun.begin(args, "maintenance", "cdclake-maint-")
    parts = () if args.external_broker else (BROKER,)
    settings = Settings.from_env() if args.external_broker else stack_settings(bench.work, parts)
    decimal = wl.decimal_supported()
    ns = f"bench_{bench.tag}"
    cfg = table_config(ns, f"bench.{bench.tag}.{TABLE}", args.retain_last)
    ident = cfg.identifier
    tombstones = side_table(ident, TOMBSTONES_SUFFIX)
    info = bench.info(
        date=bench.started.isoformat(timespec="seconds"),
        table=ident,
        topic=cfg.topic,
        params={k: v for k, v in vars(args).items() if k not in ("out", "state_dir", "keep_state")},
        spark_master=settings.spark_master,
        decimal_column="decimal(10,2)" if decimal else "binary",
        maintenance_policy=cfg.maintenance.model_dump(),
        tombstone_retention_hours=cfg.tombstone_retention_hours,
    )
    print(
        f"maintenance benchmark: {args.runs} run(s) x {args.changes_per_run:,} changes into {args.base_rows:,} rows; "
        f"work dir {bench.work}",
        flush=True,
    )
    setup: dict[str, Any] = {}
    phases: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    spark = None
    try:
        if parts:
            setup["broker_s"] = start_parts(settings, parts)
        t0 = time.monotonic()
        spark = build_session(settings, "cdclake-bench-maintenance")
        spark.sparkContext.setLogLevel("ERROR")
        setup["spark_session_s"] = round(time.monotonic() - t0, 1)
        catalog = load_catalog(settings)
        catalog.create_namespace_if_not_exists(ns)
        print(f"1. the starting table {ident}: {args.base_rows:,} rows ...", flush=True)
        setup["base_table_s"] = round(create_base_table(catalog, ident, args.base_rows, decimal), 1)
        print(f"  {setup['base_table_s']} s", flush=True)

        print(f"2. {args.runs} apply run(s) of {args.changes_per_run:,} changes ...", flush=True)
        t0 = time.monotonic()
        runs, state = apply_runs(spark, settings, catalog, cfg, args, decimal)
        phases["apply_runs"] = {
            "wall_s": round(time.monotonic() - t0, 1),
            "ops": dict(state.ops),
            "multi_row_binlog_events": state.multi_row_events,
            "keys_touched": len(state.rows),
            "apply_s": run_stats(runs, "apply_s"),
            "produce_s": run_stats(runs, "produce_s"),
            "plan_s": run_stats(runs, "plan_s"),
            "runs": runs,
        }
        print(
            f"  {phases['apply_runs']['wall_s']} s; apply median {phases['apply_runs']['apply_s']['median']} s "
            f"(first tenth {phases['apply_runs']['apply_s']['first_tenth_median']} s, last tenth "
            f"{phases['apply_runs']['apply_s']['last_tenth_median']} s); ops {dict(state.ops)}",
            flush=True,
        )
        rng = random.Random(args.seed)
        candidates = rng.sample(range(args.base_rows), min(args.base_rows, 50 * args.lookup_keys))
        keys = [i for i in candidates if state.current(i) is not None][: args.lookup_keys]

        print("3. before maintenance: files, metadata, query times ...", flush=True)
        before = measure_table(spark, settings, catalog, ident, keys, args.count_reps)
        before["tombstones_table"] = side_figures(spark, settings, catalog, tombstones)
        offsets_before = committed_offsets(catalog.load_table(ident), cfg.topic)
        print(f"  {_line(before)}", flush=True)

        print("4. maintain_table (all actions) ...", flush=True)
        phases["maintenance"] = maintain(spark, settings, cfg)
        reports = phases["maintenance"]["reports"]

        print("5. after maintenance ...", flush=True)
        after = measure_table(spark, settings, catalog, ident, keys, args.count_reps)
        after["tombstones_table"] = side_figures(spark, settings, catalog, tombstones)
        offsets_after = committed_offsets(catalog.load_table(ident), cfg.topic)
        print(f"  {_line(after)}", flush=True)
        phases["before"], phases["after"] = before, after

        want = expected_rows(state, args.base_rows)
        checks["apply_runs"] = {
            "ok": len(runs) == args.runs and all(r["status"] == "committed" for r in runs),
            "runs_committed": sum(r["status"] == "committed" for r in runs),
        }
        checks["rows_match_source"] = {"ok": before["count"] == want, "rows": before["count"], "expected": want}
        checks["content_unchanged"] = {
            "ok": before["checksum"] == after["checksum"] and before["count"] == after["count"],
            "before": before["checksum"],
            "after": after["checksum"],
        }
        checks["lookups_unchanged"] = {
            "ok": all(
                x["rows"] == 1
                for x in before["lookups"] + before["lookups_pyiceberg"] + after["lookups"] + after["lookups_pyiceberg"]
            ),
            "keys": keys,
        }
        checks["offsets_unchanged"] = {
            "ok": offsets_before is not None and offsets_before == offsets_after,
            "before": offsets_before,
            "after": offsets_after,
        }
        lost = [f"{r['action']} {r['table']}" for r in reports if r["status"] not in ("done", "skipped")]
        checks["maintenance_actions"] = {"ok": not lost, "not_done": lost}

        if args.next_run:
            print("6. the next apply run, then maintain_table again ...", flush=True)
            record, state = apply_run(
                spark, settings, catalog, kafka_clients(settings), cfg, args, decimal, args.runs, state
            )
            print(f"  apply {record['apply_s']} s", flush=True)
            second = maintain(spark, settings, cfg)
            figures = file_figures(spark, settings, catalog, ident)
            name = f"{settings.catalog_name}.{ident}"
            figures["count"] = int(spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0]["n"])
            figures["tombstones_table"] = side_figures(spark, settings, catalog, tombstones)
            print(
                f"  {figures['data_files']} data file(s), {figures['delete_files']} delete file(s), "
                f"{figures['snapshots']} snapshot(s), metadata {figures['metadata_bytes'] / 2**20:.2f} MiB in "
                f"{figures['metadata_files']} file(s), data folder {figures['data_folder_files']} file(s)",
                flush=True,
            )
            phases["next_run"] = {"apply": record, "maintenance": second, "after": figures}
            want = expected_rows(state, args.base_rows)
            not_done = [
                f"{r['action']} {r['table']}" for r in second["reports"] if r["status"] not in ("done", "skipped")
            ]
            checks["next_run"] = {
                "ok": figures["count"] == want and not not_done,
                "rows": figures["count"],
                "expected": want,
                "not_done": not_done,
            }
    finally:
        if spark is not None:
            spark.stop()
        stop_parts(settings, parts)

    headline = headline_of(phases, args)
    result_doc = {**info, "setup": setup, "headline": headline, "phases": phases, "checks": checks}
    bench.finish(result_doc, markdown)
    ok = checks_ok(checks)
    print(json.dumps({**headline, "checks_ok": ok, "machine": info["machine"], "date": info["date"]}, default=str))
    return 0 if ok else 1


def maintain(spark: Any, settings: Settings, cfg: Any) -> dict[str, Any]:
    """``maintain_table`` with every action; its reports and seconds per action (printed)."""
    from cdclake.spark.maintenance import maintain_table

    t0 = time.monotonic()
    result = maintain_table(spark, settings, cfg)
    wall = time.monotonic() - t0
    reports = [json.loads(r.model_dump_json()) for r in result.reports]
    for r in reports:
        print(f"  {r['action']} {r['table']} [{r['status']}] {r['seconds']:.2f} s: {r['summary']}", flush=True)
    return {
        "wall_s": round(wall, 2),
        "seconds": round(result.seconds, 2),
        "snapshot_id_before": result.snapshot_id_before,
        "snapshot_id_after": result.snapshot_id_after,
        "seconds_per_action": {r["action"]: r["seconds"] for r in reports if r["table"] == cfg.identifier},
        "seconds_per_action_side_tables": {
            f"{r['action']} {r['table']}": r["seconds"] for r in reports if r["table"] != cfg.identifier
        },
        "reports": reports,
    }


def _line(m: dict[str, Any]) -> str:
    return (
        f"{m['data_files']} data file(s), {m['delete_files']} delete file(s), {m['manifests']} manifest(s), "
        f"{m['snapshots']} snapshot(s), metadata {m['metadata_bytes'] / 2**20:.2f} MiB in {m['metadata_files']} "
        f"file(s); count(*) {m['count_s']} s, full scan {m['full_scan_s']} s, lookup {m['lookup_s']} s (Spark), "
        f"{m['lookup_pyiceberg_s']} s (pyiceberg)"
    )


FIGURES = (
    ("data_files", "data files (current snapshot)"),
    ("delete_files", "delete files (current snapshot)"),
    ("position_deletes", "position deletes (rows)"),
    ("manifests", "manifests (current snapshot)"),
    ("snapshots", "snapshots"),
    ("metadata_bytes", "metadata folder, bytes"),
    ("metadata_files", "metadata folder, files"),
    ("data_folder_files", "data folder, files on disk"),
    ("data_folder_bytes", "data folder, bytes on disk"),
    ("count_s", "`SELECT count(*)`, s (median)"),
    ("full_scan_s", "full scan (count + checksum), s"),
    ("lookup_s", "point lookup, Spark SQL, s (median)"),
    ("lookup_pyiceberg_s", "point lookup, pyiceberg scan, s (median)"),
)


def headline_of(phases: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    b, a, m = phases["before"], phases["after"], phases["maintenance"]
    out: dict[str, Any] = {
        "base_rows": args.base_rows,
        "runs": args.runs,
        "changes_per_run": args.changes_per_run,
    }
    for key, _ in FIGURES:
        out[f"{key}_before"] = b[key]
        out[f"{key}_after"] = a[key]
    nxt = phases.get("next_run")
    if nxt:
        for key in ("data_files", "delete_files", "snapshots", "metadata_bytes", "metadata_files", "data_folder_files"):
            out[f"{key}_after_next_run"] = nxt["after"][key]
    out["maintenance_s"] = m["seconds"]
    out["maintenance_s_per_action"] = m["seconds_per_action"]
    out["apply_run_s_median"] = phases["apply_runs"]["apply_s"]["median"]
    out["apply_run_s_first_last_tenth"] = [
        phases["apply_runs"]["apply_s"]["first_tenth_median"],
        phases["apply_runs"]["apply_s"]["last_tenth_median"],
    ]
    return out


def markdown(result: dict[str, Any]) -> str:
    p, ph = result["params"], result["phases"]
    b, a = ph["before"], ph["after"]
    ar = ph["apply_runs"]
    lines = [
        *summary_head("cdclake maintenance benchmark", result, f"Spark `{result['spark_master']}` (a classic session)"),
        f"A table of {p['base_rows']:,} rows, then {p['runs']} apply run(s) of {p['changes_per_run']:,} changes "
        f"each over about {p['keys_per_run']:,} keys (ops {ar['ops']}); apply per run: median "
        f"{ar['apply_s']['median']} s, first tenth {ar['apply_s']['first_tenth_median']} s, last tenth "
        f"{ar['apply_s']['last_tenth_median']} s, in all {ar['apply_s']['total']} s. Maintenance policy: "
        f"{result['maintenance_policy']}.",
        "",
        "| figure | before maintenance | after |",
        "|---|---:|---:|",
    ]
    for key, label in FIGURES:
        bv, av = b[key], a[key]
        fmt = (lambda v: f"{v:,}") if isinstance(bv, int) else (lambda v: f"{v}")
        lines.append(f"| {label} | {fmt(bv)} | {fmt(av)} |")
    lines += [
        "",
        "Metadata folder by kind (files / bytes), before -> after: "
        + "; ".join(
            f"{kind} {b['metadata'][kind]['files']} / {b['metadata'][kind]['bytes']:,} -> "
            f"{a['metadata'][kind]['files']} / {a['metadata'][kind]['bytes']:,}"
            for kind in b["metadata"]
            if b["metadata"][kind]["files"] or a["metadata"][kind]["files"]
        )
        + ".",
    ]
    for label, t in (("before", b), ("after", a)):
        tomb = t.get("tombstones_table")
        if tomb:
            lines.append(
                f"Tombstone side table {label}: {tomb['data_files']} data file(s), {tomb['delete_files']} delete "
                f"file(s), {tomb['snapshots']} snapshot(s), metadata {tomb['metadata_bytes']:,} bytes."
            )
    nxt = ph.get("next_run")
    if nxt:
        n = nxt["after"]
        lines += [
            "",
            f"After one more apply run ({nxt['apply']['apply_s']} s) and maintenance again "
            f"({nxt['maintenance']['seconds']} s): {n['data_files']} data file(s), {n['delete_files']} delete "
            f"file(s), {n['manifests']} manifest(s), {n['snapshots']} snapshot(s); metadata folder "
            f"{n['metadata_bytes']:,} bytes in {n['metadata_files']} file(s) ("
            + ", ".join(f"{kind} {v['files']}" for kind, v in n["metadata"].items() if v["files"])
            + f"); data folder {n['data_folder_files']} file(s), {n['data_folder_bytes']:,} bytes.",
        ]
    lines += [
        "",
        f"`maintain_table`: {ph['maintenance']['seconds']} s in all.",
        "",
        "| action | table | status | s | summary |",
        "|---|---|---|---:|---|",
    ]
    for r in ph["maintenance"]["reports"]:
        lines.append(f"| {r['action']} | {r['table']} | {r['status']} | {r['seconds']:.2f} | {r['summary']} |")
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = bench_parser("bench/maintenance_bench.py", __doc__)
    parser.add_argument("--base-rows", type=int, default=1_000_000, help="rows of the starting table")
    parser.add_argument("--runs", type=int, default=200, help="apply runs before maintenance")
    parser.add_argument("--changes-per-run", type=int, default=1_000, help="change events of each run")
    parser.add_argument("--keys-per-run", type=int, help="keys each run's events touch (default: half the changes)")
    parser.add_argument("--retain-last", type=int, default=1, help="the maintenance policy's retain_last")
    parser.add_argument("--count-reps", type=int, default=3, help="count(*) repetitions (median)")
    parser.add_argument("--lookup-keys", type=int, default=5, help="point lookups, random present keys (median)")
    parser.add_argument("--seed", type=int, default=11, help="seed of the workload and the lookup keys")
    parser.add_argument(
        "--next-run",
        action="store_true",
        help="then one more apply run and maintenance again: the files the offsets guard kept go (file figures)",
    )
    add_run_options(parser, external_broker=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.keys_per_run is None:
        args.keys_per_run = max(args.changes_per_run // 2, 1)
    if min(args.base_rows, args.runs, args.changes_per_run, args.keys_per_run, args.count_reps) < 1:
        raise SystemExit("--base-rows, --runs, --changes-per-run, --keys-per-run and --count-reps must be positive")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
