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
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workload as wl
from cdclake.settings import Settings
from harness import (
    BENCH_DIR,
    BROKER,
    BenchRun,
    add_run_options,
    add_size_options,
    bench_parser,
    checks_line,
    checks_ok,
    child_env,
    resolve_size,
    spark_profile,
    spark_submit,
    stack_settings,
    start_parts,
    stop_parts,
    summary_head,
)
from lake import (
    Loaded,
    check_one_event,
    check_table,
    copy_table,
    create_base_table,
    expected_rows,
    kafka_clients,
    load_workload,
    produce,
)
from measure import Measured, measure, ratio, summarize

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


# --- the peer's input ----------------------------------------------------------------------------


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
    ``cdclake_dev.cli.run_table_dag`` or of the trivial DAG the same way (bench dags folder)."""
    from cdclake_dev.airflow_env import airflow_env
    from cdclake_dev.cli import run_table_dag

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


def run(args: argparse.Namespace) -> int:
    from cdclake.io.catalog import load_catalog

    p = resolve_size(args, SIZES)
    bench = BenchRun.begin(args, f"bench-{args.size}", "cdclake-bench-")
    parts = () if args.external_broker else (BROKER,)
    settings = Settings.from_env() if args.external_broker else stack_settings(bench.work, parts)
    settings = settings.model_copy(update={"tables_config": bench.work / "tables.yaml"})
    decimal = wl.decimal_supported()
    info = bench.info(
        size=args.size,
        params=vars(p),
        decimal_column="decimal(10,2)"
        if decimal
        else "binary: cdclake does not map org.apache.kafka.connect.data.Decimal yet; same base64 bytes on the wire",
        spark_master=settings.spark_master,
    )
    print(
        f"cdclake benchmark, size {args.size}: {p.events} events over {p.keys} keys into {p.base_rows} rows; "
        f"growth {p.growth_events} events into {p.base_rows} and {p.big_rows} rows; {p.reps} repetition(s); "
        f"work dir {bench.work}",
        flush=True,
    )
    try:
        start_parts(settings, parts)
        ctx = Context(bench, settings, load_catalog(settings), f"bench_{bench.tag}", p, decimal, child_env(settings))
        ctx.catalog.create_namespace_if_not_exists(ctx.ns)
        main_load, growth, info["setup"] = load(ctx)
        stages, checks = measure_stages(ctx, main_load, growth)
        overhead_stages, overhead_checks = measure_overhead(ctx, main_load)
        stages.update(overhead_stages)
        checks.update(overhead_checks)
    finally:
        stop_parts(settings, parts)
    result = {**info, "stages": stages, "ratios": ratios(stages), "checks": checks}
    bench.finish(result, markdown)
    return 0 if checks_ok(checks, "CORRECTNESS CHECK FAILED") else 1


@dataclass(frozen=True)
class Context:
    """What every stage of one run works with."""

    bench: BenchRun
    settings: Settings
    catalog: Any
    ns: str
    """The run's namespace: its tables."""
    p: argparse.Namespace
    """The sizes (:func:`harness.resolve_size`)."""
    decimal: bool
    """Whether the ``price`` column is ``decimal(10,2)`` (:func:`workload.decimal_supported`)."""
    env: dict[str, str]
    """The measured processes' environment (:func:`harness.child_env`)."""

    def measure(self, label: str, cmd: list[str]) -> Measured:
        """``cmd`` measured (:func:`measure.measure`), its log in the run's logs."""
        return measure(label, cmd, self.env, self.bench.logs)

    def clone(self, source: str, target: str) -> None:
        """Table ``target`` of the run's namespace as a zero-copy clone of ``source``."""
        copy_table(self.catalog, f"{self.ns}.{source}", f"{self.ns}.{target}")

    def check(self, table: str, loaded: Loaded) -> dict[str, Any]:
        """Table ``table`` against the source ``loaded`` left (:func:`lake.check_table`)."""
        return check_table(self.catalog, f"{self.ns}.{table}", loaded, self.p.base_rows, self.decimal)


def load(ctx: Context) -> tuple[Loaded, Loaded, dict[str, Any]]:
    """The main and the growth workload into their topics, and the starting tables ``base`` and
    ``big``. Returns the two workloads and the setup's figures."""
    p, tag = ctx.p, ctx.bench.tag
    print("generating and loading the workload ...", flush=True)
    main_spec = wl.WorkloadSpec(events=p.events, keys=p.keys, existing_rows=p.base_rows, new_id_start=p.big_rows)
    main = load_workload(ctx.settings, f"bench.{tag}.orders", main_spec, ctx.decimal)
    growth_spec = wl.WorkloadSpec(
        events=p.growth_events, keys=p.growth_keys, existing_rows=p.base_rows, new_id_start=p.big_rows, seed=7
    )
    growth = load_workload(ctx.settings, f"bench.{tag}.orders_growth", growth_spec, ctx.decimal)
    setup: dict[str, Any] = {}
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
    for table, rows in (("base", p.base_rows), ("big", p.big_rows)):
        setup[f"{table}_table_s"] = round(create_base_table(ctx.catalog, f"{ctx.ns}.{table}", rows, ctx.decimal), 1)
    return main, growth, setup


def measure_stages(ctx: Context, main: Loaded, growth: Loaded) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stages 1 to 5, ``p.reps`` times each. Returns the stages' figures and the checks of the
    tables they wrote against the source."""
    from cdclake.io.catalog import create_cdc_table
    from cdclake.model.types import columns_from_connect

    p, logs = ctx.p, ctx.bench.logs
    arrow_schema = ctx.catalog.load_table(f"{ctx.ns}.base").schema().as_arrow()
    upserts, deletes = peer_input(main, arrow_schema, ctx.decimal, ctx.bench.work)
    event_log = logs / "spark-events"
    event_log.mkdir(exist_ok=True)

    def stage(label: str, kind: str, loaded: Loaded, table: str, extra: tuple[str, ...] = ()) -> Measured:
        args = [kind, "--range", loaded.range_json, "--namespace", ctx.ns, "--table", table, *extra]
        m = ctx.measure(
            label, spark_submit(ctx.settings, BENCH_DIR / "spark_stage.py", args, f"bench-{label}", event_log)
        )
        m.result["slowest_queries"] = spark_profile(event_log, logs / f"{label}-plans.txt")
        return m

    names = ("read_parse", "append", "apply", "peer", "growth_base", "growth_big")
    runs: dict[str, list[Measured]] = {name: [] for name in names}
    checks: dict[str, Any] = {}
    for rep in range(1, p.reps + 1):
        print(f"repetition {rep}/{p.reps}", flush=True)
        runs["read_parse"].append(stage(f"read_parse_r{rep}", "read_parse", main, "base"))
        columns = columns_from_connect({"fields": wl.row_fields(ctx.decimal)})
        create_cdc_table(ctx.catalog, f"{ctx.ns}.append_r{rep}", columns, ("id",))
        runs["append"].append(stage(f"append_r{rep}", "append", main, f"append_r{rep}"))
        ctx.clone("base", f"apply_r{rep}")
        runs["apply"].append(stage(f"apply_r{rep}", "apply", main, f"apply_r{rep}"))
        ctx.clone("base", f"peer_r{rep}")
        peer = [sys.executable, str(BENCH_DIR / "peer_upsert.py"), "--table", f"{ctx.ns}.peer_r{rep}"]
        runs["peer"].append(ctx.measure(f"peer_r{rep}", [*peer, "--upserts", str(upserts), "--deletes", str(deletes)]))
        if rep == 1:
            checks["apply"], checks["peer"] = ctx.check("apply_r1", main), ctx.check("peer_r1", main)
            print(f"  check apply: {checks['apply']['ok']}, peer: {checks['peer']['ok']}", flush=True)
        for which, base in (("growth_base", "base"), ("growth_big", "big")):
            ctx.clone(base, f"{which}_r{rep}")
            count = ("--count-after",) if rep == 1 else ()
            runs[which].append(stage(f"{which}_r{rep}", "apply", growth, f"{which}_r{rep}", count))
    # the growth batch deletes and updates only ids below base_rows (rows of both tables) and
    # inserts ids from big_rows up (rows of neither)
    final = growth.state.rows
    net = sum(1 for i, r in final.items() if r is not None and i >= p.big_rows) - sum(
        1 for i, r in final.items() if r is None and i < p.base_rows
    )
    for which, rows in (("growth_base", p.base_rows), ("growth_big", p.big_rows)):
        got = runs[which][0].result.get("rows_after")
        checks[which] = {"rows": got, "expected_rows": rows + net, "ok": got == rows + net}

    stages = {name: summarize(runs[name], p.events) for name in ("read_parse", "append", "apply", "peer")}
    stages["growth_base"] = summarize(runs["growth_base"], p.growth_events) | {"table_rows": p.base_rows}
    stages["growth_big"] = summarize(runs["growth_big"], p.growth_events) | {"table_rows": p.big_rows}
    return stages, checks


def measure_overhead(ctx: Context, main: Loaded) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stage 6, the DAG runs (``run.py _dag``), ``p.reps`` times each. Returns their figures and
    the checks that they did what they should."""
    import yaml

    from cdclake.model.layout import TOMBSTONES_SUFFIX
    from cdclake_dev.cli import ensure_airflow_db

    print("overhead: DAG runs (airflow dags test) ...", flush=True)
    reps = ctx.p.reps
    entry = {"name": "bench_orders", "topic": main.topic, "namespace": ctx.ns, "table": "orders", "primary_key": ["id"]}
    ctx.settings.tables_config.write_text(
        yaml.safe_dump({"defaults": {"schedule": None, "retries": 0, "tags": ["bench"]}, "tables": [entry]})
    )
    ctx.clone("apply_r1", "orders")
    ctx.clone(f"apply_r1{TOMBSTONES_SUFFIX}", f"orders{TOMBSTONES_SUFFIX}")
    ensure_airflow_db(ctx.settings)
    trivial = [sys.executable, str(BENCH_DIR / "run.py"), "_dag", "--trivial"]
    table_dag = [sys.executable, str(BENCH_DIR / "run.py"), "_dag", "--table", "bench_orders"]
    table = ctx.catalog.load_table(f"{ctx.ns}.orders")
    before = table.current_snapshot().snapshot_id
    dag_runs: dict[str, list[Measured]] = {"trivial": [], "no_new": [], "one_event": []}
    if reps > 1:  # first runs after a migration pay for cold caches: not measured
        ctx.measure("warmup_trivial", trivial)
        ctx.measure("warmup_no_new", table_dag)
    for rep in range(1, reps + 1):
        dag_runs["trivial"].append(ctx.measure(f"dag_trivial_r{rep}", trivial))
        dag_runs["no_new"].append(ctx.measure(f"dag_no_new_r{rep}", table_dag))
    no_new_ok = table.refresh().current_snapshot().snapshot_id == before
    one_ok = True
    for rep in range(1, reps + 1):
        ev = wl.update_event(main.state, rep, ctx.decimal)
        produce(kafka_clients(ctx.settings), main.topic, [ev], create=False)
        dag_runs["one_event"].append(ctx.measure(f"dag_one_event_r{rep}", table_dag))
        one_ok = check_one_event(ctx.catalog, f"{ctx.ns}.orders", ev) and one_ok
    checks = {
        "dag_no_new": {
            "ok": no_new_ok and all(m.spark_s is None for m in dag_runs["no_new"]),
            "snapshot_unchanged": no_new_ok,
            "spark_started": any(m.spark_s is not None for m in dag_runs["no_new"]),
        },
        "dag_one_event": {"ok": one_ok},
    }
    stages = {f"dag_{name}": summarize(ms, None) for name, ms in dag_runs.items()}
    stages["dag_one_event"]["spark_s"] = round(statistics.median(m.spark_s or 0 for m in dag_runs["one_event"]), 3)
    return stages, checks


def ratios(stages: dict[str, Any]) -> dict[str, Any]:
    """Each target ratio (medians of wall seconds), whether it is met, and the job-only ratio."""

    pairs = {
        "apply/append": ("apply", "append"),
        "apply/read_parse": ("apply", "read_parse"),
        "apply/peer": ("apply", "peer"),
        "growth big/base": ("growth_big", "growth_base"),
        "dag no-new/trivial": ("dag_no_new", "dag_trivial"),
    }
    out = {}
    for name, (a, b) in pairs.items():
        value = ratio(stages[a]["wall_s"], stages[b]["wall_s"])
        out[name] = {
            "wall": value,
            "job": ratio(stages[a].get("job_s"), stages[b].get("job_s")),
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
    p = result["params"]
    lines = [
        *summary_head(f"cdclake benchmark: size {result['size']}", result, f"Spark `{result['spark_master']}`"),
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
    lines += ["", checks_line(result["checks"]), ""]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = bench_parser("bench/run.py", __doc__)
    add_size_options(
        parser,
        SIZES,
        "full",
        "preset (full: issue 6's workload)",
        {
            "events": "events of the main workload",
            "keys": "keys the main workload touches",
            "base_rows": "rows of the starting table",
            "big_rows": "rows of the big table of the growth stage",
            "growth_events": "events of the growth batch",
            "growth_keys": "keys of the growth batch",
            "reps": "repetitions of each measurement (median)",
        },
    )
    add_run_options(parser, external_broker=True)
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
